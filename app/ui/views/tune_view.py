"""The Tune page: measure the settings around the plan on this machine for one model (the loaded one,
or one picked in My models or the model picker), watch each result arrive as a bar against the
default (app/ui/widgets/tune_chart.py), keep the fastest (the next load uses it). The chat's model
is lent for the sweep and loaded again after it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.machine.tune import GOALS, Trial, chart_rows
from app.ui.base import theme
from app.ui.base.messages import messages
from app.ui.base.ops import Op, OpContext
from app.ui.base.props import props
from app.ui.controllers.model_controller import file_title
from app.ui.widgets.controls import run_stop_row
from app.ui.widgets.tune_chart import TuneChart

if TYPE_CHECKING:
    from app.machine.tune import TuneResult
    from app.ui.controllers.model_controller import ModelController


GOAL_HINT = "Goal: the fastest replies, the longest context that fits, or a balance of the two."
BUDGET_HINT = "Time budget: how long it may measure (the last runs may take a little longer)."
CHART_TITLE = "Tokens per second of each setting tried (the mean of its runs); ★ the one kept; dashed: the default."


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
        theme.pad(layout, "space_2", "space_2", "space_2")
        self.title = props(QLabel("Tune for this machine"), objectName="title", wordWrap=True)
        layout.addWidget(self.title)
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
        self.chart = TuneChart()
        layout.addWidget(self.chart)
        layout.addStretch(1)
        self.trials: list[Trial] = []  # measured so far, in order
        self._baseline: dict[str, Any] | None = None
        self._reload = ""  # the chat's model before the sweep, loaded again after it

    def target(self) -> str:
        """The file the Tune button measures: the one chosen last, else the chat's local model."""
        info = self.model.info
        loaded = info.path if info is not None and info.arch != "remote" else ""
        return self._path or loaded

    def show_model(self, path: str) -> None:
        """Make `path` the model this page tunes (My models' or the picker's Tune), before it runs."""
        if self.op is None or not self.op.running:
            self._path = path
            self.title.setText(f"Tune {file_title(path)} for this machine")

    def tune(self, path: str) -> None:
        """Tune `path` now (My models' and the picker's Tune action)."""
        self.show_model(path)
        self.run()

    def run(self) -> None:
        from app.engine.tune_replies import EngineReplies
        from app.machine.tune import tune
        from app.model.plan import PlanRequest, plan_for_file

        if self.op is not None and self.op.running:
            return
        m = self.model
        path = self.target()
        if not path:
            messages().error("Choose a model to tune: Tune on a model in My models or in the model picker.")
            return
        try:
            planned = plan_for_file(path, m.machine, PlanRequest(), use_tune=False)
        except (OSError, ValueError, KeyError) as exc:
            messages().error(f"Cannot tune {Path(path).name}: {exc}")
            return
        gpu, build = m.machine.identity()
        goal, budget = self.goal.currentData(), self.budget.value()
        info = m.info
        self._reload = info.path if info is not None and info.arch != "remote" else ""
        old = m.lend(f"Tuning {file_title(path)}…")  # one copy of the model at a time
        if old is None:  # a reply or the scenario bench is using the model; the window said so
            return
        self.show_model(path)
        self.trials, self._baseline = [], None
        self.chart.set_rows([])
        self.chart_title.setVisible(False)
        self.progress.setValue(0)
        self.status.setText(f"Measuring {file_title(path)} on {gpu if m.gpus.has_gpu else 'the CPU'}…")

        def work(ctx: OpContext) -> TuneResult:
            import time

            for _ in range(300):  # wait until the engine thread has freed the chat's copy
                if not old.loaded:
                    break
                time.sleep(0.1)
            n_ctx = min(planned.plan.n_ctx, 2048)  # tune's measuring context
            return tune(path, planned.settings, expert_blocks=planned.facts.expert_blocks,
                        on_gpu=planned.plan.device == "gpu", gpu=gpu, build=build, goal=goal, budget_s=budget,
                        report=ctx.report, cancel=ctx.is_cancelled, n_ctx=n_ctx, replies=EngineReplies(path, n_ctx),
                        on_trial=lambda trial, baseline: ctx.emit((trial, baseline)))

        self.op = (Op(self, work, name="Tune").progress(self._on_progress).items(self._on_trial).success(self._done)
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

    def _on_trial(self, item: tuple[Trial, dict[str, Any] | None]) -> None:
        """One more setting measured: its bar (or its run on a bar already drawn)."""
        trial, baseline = item
        self.trials.append(trial)
        self._baseline = baseline or self._baseline
        self.chart.set_rows(chart_rows(self.trials, self._baseline, None))
        if not self.chart_title.isVisible():  # the first bar: bring the chart into view (in a short window)
            self.chart_title.setVisible(True)
            QTimer.singleShot(0, self._show_chart)

    def _show_chart(self) -> None:
        """Scroll the page (its scroll area is the window's) down to the Tune and Stop row: the chart
        shows under it as far as a short window allows, and Stop stays in view."""
        area = self.parentWidget()
        while area is not None and not isinstance(area, QScrollArea):
            area = area.parentWidget()
        if area is not None:
            area.verticalScrollBar().setValue(self.goal.y() - theme.metric("space_2"))

    def _done(self, result: TuneResult) -> None:
        from app.machine.tune import table

        self.stop_button.setEnabled(False)
        self.result = result
        self.trials = list(result.trials)
        self.chart.set_rows(chart_rows(result.trials, result.baseline, result.best))
        self.chart_title.setVisible(bool(result.trials))
        # the chosen setting, and speculative decoding measured on and off with it
        summary = [line for line in table(result).splitlines() if line.startswith(("chosen:", "speculative"))]
        self.status.setText("\n".join(summary) if result.best_trial() else "No setting could be measured.")
        self.progress.setValue(1000)
        self._give_back()
        self.tuned.emit(result)

    def _failed(self, exc: BaseException) -> None:
        self.stop_button.setEnabled(False)
        from app.machine.tune import TuneCancelled

        why = ("you pressed Stop" if isinstance(exc, TuneCancelled)
               else str(exc).strip().rstrip(".") or type(exc).__name__)
        self.status.setText(f"Tune stopped: {why}. Nothing was kept; " + (
            "the model is loaded again with the settings it had." if self._reload else
            "no model was loaded before it, and none is now."))
        self._give_back()

    def _give_back(self) -> None:
        """The chat's model again (tuned, if it was the one measured), under the chart."""
        if self._reload:
            self.model.load(self._reload, show_chat=False)
        else:
            self.model.status.emit("No model loaded")
