"""The Tune page: measure the settings around the plan on this machine, watch each result arrive as
a bar, keep the fastest (the next load uses it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.machine.tune import GOALS
from app.ui.base.messages import messages
from app.ui.base.ops import Op, OpContext
from app.ui.base.props import props
from app.ui.controllers.model_controller import file_title
from app.ui.widgets.controls import run_stop_row

if TYPE_CHECKING:
    from app.machine.tune import TuneResult
    from app.ui.controllers.model_controller import ModelController


GOAL_HINT = "Goal: the fastest replies, the longest context that fits, or a balance of the two."
BUDGET_HINT = "Time budget: how long it may measure (the last runs may take a little longer)."
CHART_TITLE = "Generation speed of each setting measured, in tokens per second (the one kept in green):"


class SweepChart(QWidget):
    """Horizontal bars: generation tok/s per trial, the chosen one in the accent colour."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, float, bool, bool]] = []  # label, tok/s, chosen, failed
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(400, max(60, (len(self.rows) + 1) * (self.fontMetrics().height() + 6)))

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(200, self.sizeHint().height())

    def set_rows(self, rows: list[tuple[str, float, bool, bool]]) -> None:
        self.rows = rows
        self.updateGeometry()
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        p = QPainter(self)
        text = self.palette().color(QPalette.ColorRole.WindowText)
        line = self.fontMetrics().height() + 6
        label_w = min(self.width() * 0.5, max((self.fontMetrics().horizontalAdvance(r[0]) for r in self.rows),
                                               default=0) + 12)
        top = max((r[1] for r in self.rows), default=0) or 1.0
        for i, (label, tps, chosen, failed) in enumerate(self.rows):
            y = i * line
            p.setPen(text)
            p.drawText(QRectF(0, y, label_w - 6, line), Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight,
                       self.fontMetrics().elidedText(label, Qt.TextElideMode.ElideMiddle, int(label_w - 6)))
            bar_w = (self.width() - label_w - 70) * (tps / top if not failed else 0)
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(QColor("#1f7a4d" if chosen else "#94a3b8"))
            p.drawRoundedRect(QRectF(label_w, y + 3, max(bar_w, 1), line - 6), 3, 3)
            p.setPen(text)
            p.drawText(QRectF(label_w + bar_w + 6, y, 70, line), Qt.AlignmentFlag.AlignVCenter,
                       "failed" if failed else f"{tps:.1f}")
        p.end()


class TuneView(QWidget):
    tuned = Signal(object)  # TuneResult

    def __init__(self, model: ModelController) -> None:
        super().__init__()
        self.setObjectName("page")
        self.model = model  # lent for the sweep, loaded again (tuned) after it
        self.op: Op | None = None
        self._path = ""  # the model being tuned
        self.result: TuneResult | None = None
        layout = QVBoxLayout(self)
        layout.addWidget(props(QLabel("Tune for this machine"), objectName="title"))
        intro = props(QLabel("Short measured runs over the settings that matter (threads, experts in RAM, flash "
                             "attention, KV cache type, batch size), within the memory the plan allows. The fastest "
                             "is kept for this model, this machine and this llama.cpp, and used by the next load; then "
                             "speculative decoding is measured on and off, and kept only where it is faster. The "
                             "chat's model is unloaded while it runs."), objectName="subtitle")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        row = QHBoxLayout()
        row.addWidget(QLabel("Goal"))
        self.goal = QComboBox()
        for g in GOALS:
            self.goal.addItem(g.replace("-", " ").capitalize(), g)
        self.goal.setToolTip(GOAL_HINT)
        row.addWidget(self.goal)
        row.addWidget(QLabel("Time budget"))
        self.budget = props(QDoubleSpinBox(), minimum=15, maximum=1800, value=120, suffix=" s", decimals=0,
                            singleStep=15, toolTip=BUDGET_HINT)
        row.addWidget(self.budget)
        buttons, self.run_button, self.stop_button = run_stop_row("Tune", self.run, self.stop)
        row.addLayout(buttons)
        row.addStretch(1)
        layout.addLayout(row)
        self.hint = props(QLabel(f"{GOAL_HINT} {BUDGET_HINT}"), objectName="subtitle", wordWrap=True)
        layout.addWidget(self.hint)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        layout.addWidget(self.progress)
        self.status = props(QLabel(), objectName="fact")
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        self.chart_title = props(QLabel(CHART_TITLE), objectName="fact", wordWrap=True, visible=False)
        layout.addWidget(self.chart_title)
        self.chart = SweepChart()
        layout.addWidget(self.chart)
        layout.addStretch(1)
        self._rows: list[tuple[str, float, bool, bool]] = []

    def run(self) -> None:
        from app.engine.tune_replies import EngineReplies
        from app.machine.tune import tune
        from app.model.plan import PlanRequest, plan_for_file

        m = self.model
        info = m.info
        path = info.path if info is not None and info.arch != "remote" else None
        if info is None or path is None:
            messages().error("Load a local model first: tune measures that model.")
            return
        planned = plan_for_file(path, m.machine, PlanRequest(), use_tune=False)
        gpu, build = m.machine.identity()
        goal, budget = self.goal.currentData(), self.budget.value()
        old = m.lend(f"Tuning {file_title(path)}…")  # one copy of the model at a time
        if old is None:  # a reply or the scenario bench is using the model; the window said so
            return
        self._rows = []
        self.chart.set_rows([])
        self.chart_title.setVisible(False)
        self.status.setText(f"Measuring {file_title(path)} on {gpu if m.gpus.has_gpu else 'the CPU'}…")
        self._path = path

        def work(ctx: OpContext) -> TuneResult:
            import time

            for _ in range(300):  # wait until the engine thread has freed the chat's copy
                if not old.loaded:
                    break
                time.sleep(0.1)
            n_ctx = min(planned.plan.n_ctx, 2048)  # tune's measuring context
            return tune(path, planned.settings, expert_blocks=planned.facts.expert_blocks,
                        on_gpu=planned.plan.device == "gpu", gpu=gpu, build=build, goal=goal, budget_s=budget,
                        report=ctx.report, cancel=ctx.is_cancelled, n_ctx=n_ctx, replies=EngineReplies(path, n_ctx))

        self.op = (Op(self, work, name="Tune").progress(self._on_progress).success(self._done)
                   .failure(self._failed).busy(self.run_button).run())
        self.stop_button.setEnabled(True)

    def stop(self) -> None:
        """Ask the sweep to stop; the run under way ends first (seconds), so the page says so at once."""
        if self.op is not None and self.op.running:
            self.op.cancel()
            self.stop_button.setEnabled(False)
            self.status.setText("Stopping… (the run under way finishes first)")
            self.model.status.emit("Stopping the tune…")

    def _on_progress(self, step: str, fraction: float, text: str) -> None:
        self.progress.setValue(int(max(fraction, 0) * 1000))
        if self.op is None or not self.op.cancelled:  # after Stop, the page keeps saying "Stopping…"
            self.status.setText(text)
        label, _, rest = text.partition(": ")
        failed = "failed" in rest
        tps = float(rest.split(" tok/s")[0]) if not failed and " tok/s" in rest else 0.0
        self._rows.append((label, tps, False, failed))
        self.chart.set_rows(self._rows)
        self.chart_title.setVisible(True)

    def _done(self, result: TuneResult) -> None:
        from app.machine.tune import table

        self.stop_button.setEnabled(False)
        self.result = result
        best = result.best_trial()
        self.chart.set_rows([(t.label() + (" (again)" if t.repeat else ""), t.gen_tps, t.settings == result.best,
                              t.error is not None) for t in result.trials])
        # the chosen setting, and speculative decoding measured on and off with it
        summary = [line for line in table(result).splitlines() if line.startswith(("chosen:", "speculative"))]
        self.status.setText("\n".join(summary) if best else "No setting could be measured.")
        self.progress.setValue(1000)
        self.model.load(self._path, show_chat=False)  # with the tuned settings, under the chart
        self.tuned.emit(result)

    def _failed(self, exc: BaseException) -> None:
        self.stop_button.setEnabled(False)
        from app.machine.tune import TuneCancelled

        why = ("you pressed Stop" if isinstance(exc, TuneCancelled)
               else str(exc).strip().rstrip(".") or type(exc).__name__)
        self.status.setText(f"Tune stopped: {why}. Nothing was kept; the model is loaded again with the "
                            "settings it had.")
        self.model.load(self._path, show_chat=False)
