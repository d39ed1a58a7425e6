"""GPU memory in use, re-read every two seconds through the same NVML probe the planner uses."""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal


class GpuMonitor(QObject):
    changed = Signal(str)  # "GPU 0: 3.2 / 24.0 GiB used · …"

    def __init__(self, parent: QObject | None = None, interval_ms: int = 2000) -> None:
        super().__init__(parent)
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.poll)

    def start(self) -> None:
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def poll(self) -> None:
        try:
            import pynvml

            from app.machine.gpu import probe_with

            p = probe_with(pynvml)
        except ImportError:
            p = None
        if p is None or not p.has_gpu:
            self.timer.stop()  # NVML went away: the last text stays
            return
        self.changed.emit(" · ".join(f"GPU {g.index}: {g.used_bytes / 2**30:.1f} / {g.total_gib:.1f} GiB used"
                                     for g in p.gpus))
