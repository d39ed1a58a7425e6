"""The plan as a picture: a bar of GPU memory (weights, KV cache, compute, free) and one of system RAM
(experts kept there, the rest of the model, free), painted with QPainter, with the words beside.

What a 16 GB card does differently from a 24 GB one is visible at a glance: the RAM bar grows by
the experts that no longer fit, and the GPU bar's KV share shrinks or turns q8_0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.model.plan import size_text

if TYPE_CHECKING:
    from app.model.plan import Plan

GiB = 1024**3

COLORS = {"weights": "#3b82f6", "experts": "#f59e0b", "kv": "#10b981", "compute": "#8b5cf6",
          "other": "#64748b", "over": "#ef4444"}


def segments(plan: Plan) -> tuple[list[tuple[str, int, str]], int, list[tuple[str, int, str]], int]:
    """(GPU segments, GPU capacity, RAM segments, RAM capacity): (label, bytes, color key)."""
    b = plan.breakdown
    gpu: list[tuple[str, int, str]] = []
    if plan.device == "gpu":
        gpu = [("weights", b.weights_gpu, "weights"), ("KV cache", b.kv, "kv"),
               ("compute + state", b.compute + b.recurrent + b.rollback, "compute")]
    experts_ram = b.weights_ram if plan.device == "gpu" else 0
    ram = [("experts in RAM" if plan.n_cpu_moe else "embeddings", experts_ram, "experts")]
    if plan.device != "gpu":
        ram = [("model", b.weights_ram, "other"), ("KV cache", b.kv, "kv"),
               ("compute + state", b.compute + b.recurrent + b.rollback, "compute")]
    return gpu, plan.budget_bytes, ram, plan.ram_available


class PlanPicture(QWidget):
    """Two labelled bars; `set_plan(None)` clears it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plan: Plan | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(self.sizeHint().height())

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        line = self.fontMetrics().height()
        return QSize(320, 4 * line + 28)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(160, self.sizeHint().height())

    def set_plan(self, plan: Plan | None) -> None:
        self.plan = plan
        self.setToolTip("\n".join(plan.lines()) if plan is not None else "")
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        if self.plan is None:
            return
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        text_color = self.palette().color(QPalette.ColorRole.WindowText)
        line = self.fontMetrics().height()
        width = self.width() - 2
        gpu, gpu_cap, ram, ram_cap = segments(self.plan)
        y = 0
        for title, parts, cap in (("GPU", gpu, gpu_cap), ("RAM", ram, ram_cap)):
            if title == "GPU" and self.plan.device != "gpu":
                p.setPen(text_color)
                p.drawText(QRectF(0, y, width, line), Qt.AlignmentFlag.AlignLeft, "GPU: not used (CPU only)")
                y += 2 * line + 6
                continue
            used = sum(n for _, n, _ in parts)
            total = max(cap, used, 1)
            over = used > cap
            caption = (f"{title}: {size_text(used, 0)} of {size_text(cap, 0)}"  # MiB for a small model
                       + ("  — does not fit" if over else "") + "   "
                       + "  ".join(f"{label} {size_text(n, 0)}" for label, n, _ in parts if n))
            p.setPen(text_color)
            p.drawText(QRectF(0, y, width, line), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                       self.fontMetrics().elidedText(caption, Qt.TextElideMode.ElideRight, int(width)))
            y += line + 2
            bar = QRectF(1, y, width, line * 0.9)
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(self.palette().color(QPalette.ColorRole.AlternateBase))
            p.drawRoundedRect(bar, 3, 3)
            x = bar.left()
            for _label, n, color in parts:
                w = bar.width() * n / total
                if w <= 0:
                    continue
                p.setBrush(QColor(COLORS["over"] if over else COLORS[color]))
                p.drawRect(QRectF(x, bar.top(), w, bar.height()))
                x += w
            if cap < total:  # the capacity line
                p.setPen(QColor(COLORS["over"]))
                cx = bar.left() + bar.width() * cap / total
                p.drawLine(int(cx), int(bar.top()) - 2, int(cx), int(bar.bottom()) + 2)
            y += line + 4
        p.end()
