"""The tune chart: one bar per setting tried, its generation tok/s (the mean of its runs, each run a
dot on the bar), the chosen one in the accent colour, the default setting as a dashed line through
every bar, so a glance says how much the tune won. Painted here with the theme's colours and type
scale, redrawn as each measurement arrives and when the theme changes. The rows come from
app/machine/tune.py's `chart_rows`.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.machine.tune import ChartRow, default_tps
from app.ui.base import theme


class TuneChart(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[ChartRow] = []
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        theme.notifier().changed.connect(self._restyle)
        self._restyle()

    def _restyle(self) -> None:
        self.setFont(self._font("sm"))
        self.updateGeometry()
        self.update()

    def _font(self, size: str, bold: bool = False) -> QFont:
        font = QFont(self.font())
        font.setPixelSize(theme.px(size))
        font.setBold(bold)
        return font

    def _line(self) -> int:
        return QFontMetrics(self._font("sm")).height() + theme.metric("space_2")

    def _head(self) -> int:
        """Room above the bars for the default line's label."""
        return QFontMetrics(self._font("xs")).height() + theme.metric("space_1")

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(40 * theme.px("sm"), self._head() + max(len(self.rows), 1) * self._line())

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(20 * theme.px("sm"), self.sizeHint().height())

    def set_rows(self, rows: list[ChartRow]) -> None:
        self.rows = rows
        self.updateGeometry()
        self.update()

    def chosen(self) -> ChartRow | None:
        return next((r for r in self.rows if r.chosen), None)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        label_font, small = self._font("sm"), self._font("xs")
        metrics = QFontMetrics(label_font)
        line, head, gap = self._line(), self._head(), theme.metric("space_2")
        widest = max((metrics.horizontalAdvance(r.label) for r in self.rows), default=0)
        label_w = min(self.width() * 0.45, widest + gap)
        value_w = metrics.horizontalAdvance("000.0 tok/s") + gap
        bar_w = max(self.width() - label_w - value_w - gap, 1.0)
        base = default_tps(self.rows)
        top = max([base, *(max(r.runs, default=0.0) for r in self.rows)]) or 1.0

        def x_of(tps: float) -> float:
            return label_w + gap + bar_w * tps / top

        radius = theme.metric("radius_sm") / 2
        if base > 0:  # behind the bars and their numbers
            x = x_of(base)
            p.setPen(QPen(QColor(theme.color("heading")), 1.5, Qt.PenStyle.DashLine))
            p.drawLine(QPointF(x, head - theme.metric("space_half")), QPointF(x, head + len(self.rows) * line))
            p.setFont(small)
            text = f"default {base:.1f} tok/s"
            width = QFontMetrics(small).horizontalAdvance(text)
            left = min(max(x - width / 2, 0.0), self.width() - width)
            p.setPen(QColor(theme.color("muted")))
            p.drawText(QRectF(left, 0, width + 1, head), Qt.AlignmentFlag.AlignVCenter, text)
        for i, row in enumerate(self.rows):
            y = head + i * line
            p.setFont(self._font("sm", bold=row.chosen))
            p.setPen(QColor(theme.color("text" if row.runs or not row.failed else "muted")))
            p.drawText(QRectF(0, y, label_w, line), Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight,
                       metrics.elidedText(row.label, Qt.TextElideMode.ElideMiddle, int(label_w)))
            if not row.runs:
                p.setPen(QColor(theme.color("failed")))
                p.drawText(QRectF(label_w + gap, y, bar_w + value_w, line), Qt.AlignmentFlag.AlignVCenter,
                           metrics.elidedText(f"failed: {row.failed or '?'}", Qt.TextElideMode.ElideRight,
                                              int(bar_w + value_w)))
                continue
            inset = line * 0.2
            bar = QRectF(label_w + gap, y + inset, max(x_of(row.tps) - label_w - gap, 2.0), line - 2 * inset)
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(QColor(theme.color("accent" if row.chosen else "selected")))
            p.drawRoundedRect(bar, radius, radius)
            if len(row.runs) > 1:  # each run a dot: the spread the mean hides
                p.setBrush(QColor(theme.color("on_accent" if row.chosen else "muted")))
                for run in row.runs:
                    p.drawEllipse(QPointF(x_of(run), bar.center().y()), 2.0, 2.0)
            value = f"{row.tps:.1f}" + (" ★" if row.chosen else "")
            box = QRectF(bar.right() + gap / 2, y + inset, metrics.horizontalAdvance(value) + gap, line - 2 * inset)
            p.fillRect(box, QColor(theme.color("window")))  # the number over the default line, readable
            p.setPen(QColor(theme.color("accent_text" if row.chosen else "text")))
            p.drawText(QRectF(bar.right() + gap, y, value_w, line), Qt.AlignmentFlag.AlignVCenter, value)
        p.end()
