"""How soon the window shows: from the process's start to the main window's first painted frame, with
no model loaded (target at most 1.5 s).

    python -m tests.bench.first_frame [--runs 5]

Each run is a fresh process started as the app starts (`app.cli.main(["gui"])`: logging, the crash
trail, the theme, the window), offscreen where there is no display, in one data folder: the first
start (the CPU probe, the folders made) is said apart, the later ones, a user's every start, are
the figure. The process's start is the kernel's (/proc/self/stat): Python's start and every import count.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from tests.bench.verdict import Verdicts

TARGET_S = 1.5


def since_process_start() -> float:
    """Seconds since this process started, by the kernel's clock (Linux)."""
    with open("/proc/self/stat") as f:
        started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - started_ticks / os.sysconf("SC_CLK_TCK")


def child() -> int:
    """One start: print the seconds to the first painted frame of the main window, then quit."""
    from PySide6.QtCore import QEvent, QObject, QTimer
    from PySide6.QtWidgets import QApplication, QWidget

    app = QApplication([sys.argv[0]])

    class FirstPaint(QObject):
        seen = False

        def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
            if (not self.seen and event.type() == QEvent.Type.Paint and isinstance(obj, QWidget)
                    and obj.isWindow() and type(obj).__name__ == "MainWindow"):
                self.seen = True
                print(f"first frame {since_process_start():.3f} cpu {time.process_time():.3f}", flush=True)
                QTimer.singleShot(0, app.quit)
            return False

    watcher = FirstPaint()
    app.installEventFilter(watcher)
    from app.cli import main

    return main(["gui"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child()
    env = dict(os.environ)
    if not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        env["QT_QPA_PLATFORM"] = "offscreen"
    env["CLOVER_HOME"] = tempfile.mkdtemp(prefix="clover-first-frame-")
    env["CLOVER_CPU_PROBE_FILE"] = os.path.join(env["CLOVER_HOME"], "cpu-variants.json")
    times: list[float] = []
    cpu: list[float] = []  # the process's CPU time by then: what the start costs, apart from waiting for a busy machine
    for i in range(args.runs + 1):  # the first: a first start
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "tests.bench.first_frame", "--child"], env=env,
                              capture_output=True, text=True, timeout=120)
        line = next((x for x in done.stdout.splitlines() if x.startswith("first frame ")), None)
        if line is None:
            print(done.stdout + done.stderr, file=sys.stderr)
            return 1
        times.append(float(line.split()[2]))
        cpu.append(float(line.split()[4]))
        print(f"  {'first start' if i == 0 else f'start {i}'}: first frame {times[-1]:.2f} s after the process "
              f"started, {cpu[-1]:.2f} s of CPU (the run took {time.monotonic() - started:.1f} s)")
    times, cpu = times[1:], cpu[1:]
    print(f"  CPU time to the first frame: median {statistics.median(cpu):.2f} s")
    verdicts = Verdicts()
    median, worst = statistics.median(times), max(times)
    print(f"  median {median:.2f} s, worst {worst:.2f} s  "
          f"{verdicts.check('first frame, median (s)', median, median <= TARGET_S, f'<= {TARGET_S} s', '{:.2f}')}")
    verdicts.check("first frame, worst (s)", worst, worst <= TARGET_S, f"<= {TARGET_S} s", "{:.2f}")
    return verdicts.finish()

if __name__ == "__main__":
    sys.exit(main())
