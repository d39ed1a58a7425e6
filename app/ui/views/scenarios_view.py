"""The scenario bench page: run the article's prompts on the loaded model, all of them or one row at
a time, each row showing its result as soon as it is known; the row picked shows the model's answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QModelIndex, Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.bench.scenarios import Result, load_scenarios, run_scenario, save_results
from app.ui.base.messages import messages
from app.ui.base.ops import Op, OpContext
from app.ui.base.props import props
from app.ui.widgets.controls import run_stop_row

if TYPE_CHECKING:
    from app.ui.controllers.model_controller import ModelController

COLUMNS = ("Scenario", "Result", "Time", "tok/s", "Detail", "")
RUN_COLUMN = len(COLUMNS) - 1


def _cell(text: str) -> QTableWidgetItem:
    """A read-only cell: results are read, not typed."""
    item = QTableWidgetItem(text)
    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
    item.setToolTip(text)
    return item


class ScenariosView(QWidget):
    finished = Signal(list)  # [Result]
    failed = Signal(str)
    row_finished = Signal(object)  # Result, as each scenario ends

    def __init__(self, model: ModelController) -> None:
        super().__init__()
        self.setObjectName("page")
        self.model = model  # the bench runs on the chat's model, claimed while it runs
        self.op: Op | None = None
        self.scenarios = load_scenarios()
        self.rows = {s.id: i for i, s in enumerate(self.scenarios)}
        layout = QVBoxLayout(self)
        layout.addWidget(props(QLabel("Scenario bench"), objectName="title"))
        intro = props(QLabel("The article's test prompts, each checked automatically. Run them all or one row at a "
                             "time; results are saved with the GPU, the plan and the model, so runs can be compared."),
                      objectName="subtitle")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        row, self.run_button, self.stop_button = run_stop_row("Run all scenarios", self.run, self.stop)
        row.addStretch(1)
        layout.addLayout(row)
        self.table = QTableWidget(len(self.scenarios), len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        header = self.table.horizontalHeader()
        for col in (1, 2, 3, RUN_COLUMN):  # short values: as wide as they are
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(4, QHeaderView.ResizeMode.Stretch)
        self.table.setColumnWidth(0, 190)
        self.table.verticalHeader().setVisible(False)
        # a row is picked (to see the model's answer below), never edited
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.row_buttons: list[QPushButton] = []
        for i, s in enumerate(self.scenarios):
            self.table.setItem(i, 0, _cell(s.title))
            button = props(QPushButton("Run"), objectName="rowRun", toolTip=f"Run “{s.title}” alone")
            button.clicked.connect(lambda _=False, sid=s.id: self.run([sid]))
            self.table.setCellWidget(i, RUN_COLUMN, button)
            self.row_buttons.append(button)
        layout.addWidget(self.table, 1)
        self.results: dict[int, Result] = {}  # by row: the latest result of each scenario run
        self.answer = props(QPlainTextEdit(), readOnly=True, maximumHeight=120,
                            placeholderText="Pick a row with a result to read the model's answer.")
        layout.addWidget(self.answer)
        self.table.itemSelectionChanged.connect(self._show_answer)
        self._no_current_row()
        self.saved = props(QLabel(), objectName="fact")
        self.saved.setWordWrap(True)
        layout.addWidget(self.saved)

    @property
    def running(self) -> bool:
        return self.op is not None

    def run(self, only: list[str] | None = None) -> None:
        engine = self.model.engine
        if self.op is not None:
            return
        if not engine.loaded:
            messages().error("Load a model first: the bench runs on the model in the chat.")
            return
        if self.model.busy_with("chat"):
            messages().error("Wait for the reply to finish: the bench uses the same model.")
            return
        if self.model.busy_with("bench"):  # the BFCL bench, beside it in the Scenarios place
            messages().error("The BFCL bench is running on the model: let it end, or stop it, first.")
            return
        chosen = [s for s in self.scenarios if only is None or s.id in only]
        for s in chosen:
            self._set_row(self.rows[s.id], ("queued", "", "", ""))
        info, plan, gpus = engine.info, self.model.plan, self.model.gpus

        def work(ctx: OpContext) -> tuple[list[Result], Path]:
            results = []
            for i, scenario in enumerate(chosen):
                if ctx.cancelled:
                    break
                ctx.report(scenario.id, i / len(chosen), f"running {i + 1} of {len(chosen)}")
                results.append(run_scenario(engine, scenario, should_stop=ctx.is_cancelled))
                ctx.emit(results[-1])
            path = save_results(results, model=info.name if info else "?", plan=plan.reason if plan else "",
                                gpu=gpus.summary())
            return results, path

        self.saved.setText(f"running {len(chosen)} scenario{'s' if len(chosen) != 1 else ''}…")
        self.op = (Op(self, work, name="Scenario bench").progress(self._on_progress).items(self._on_result)
                   .success(self._done).failure(self._failed)
                   .busy(self.run_button, *self.row_buttons))
        self.stop_button.setEnabled(True)
        self.model.claim("bench")
        self.op.run()

    def stop(self) -> None:
        if self.op is not None:
            self.op.cancel()

    def _on_progress(self, scenario_id: str, _fraction: float, text: str) -> None:
        self._set_row(self.rows[scenario_id], ("running…", "", "", ""))
        self.saved.setText(text)

    def _on_result(self, result: Result) -> None:
        self._show(self.rows[result.id], result)
        self.row_finished.emit(result)

    def _end(self) -> None:
        self.op = None
        self.model.release("bench")
        self.stop_button.setEnabled(False)
        for i in range(len(self.scenarios)):  # rows queued behind a stop
            item = self.table.item(i, 1)
            if item is not None and item.text() in ("queued", "running…"):
                self._set_row(i, ("stopped", "", "", ""))

    def _done(self, outcome: tuple[list[Result], Path]) -> None:
        results, path = outcome
        self._end()
        self.saved.setText(f"{sum(r.passed for r in results)} of {len(results)} passed · saved to {path}")
        self.finished.emit(results)

    def _no_current_row(self) -> None:
        """Before any run no row is current: none looks picked."""
        self.table.clearSelection()
        self.table.setCurrentIndex(QModelIndex())

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if not self.results:
            self._no_current_row()

    def _show_answer(self) -> None:
        rows = {i.row() for i in self.table.selectedItems()}
        r = self.results.get(next(iter(rows))) if len(rows) == 1 else None
        if r is None:
            self.answer.setPlainText("")
            return
        calls = "".join(f"\n\ntool call: {json.dumps(c, ensure_ascii=False)}" for c in r.tool_calls)
        self.answer.setPlainText(f"{r.title}: {'PASS' if r.passed else 'fail'} ({r.detail})\n\n"
                                 f"{r.answer or '(no text)'}{calls}")

    def _show(self, row: int, r: Result) -> None:
        self.results[row] = r
        self._set_row(row, ("PASS" if r.passed else "fail", f"{r.seconds:.1f} s", f"{r.generation_tps:.1f}", r.detail))

    def _set_row(self, row: int, values: tuple[str, str, str, str]) -> None:
        for col, value in enumerate(values, start=1):
            self.table.setItem(row, col, _cell(value))
        if self.table.currentRow() == row:
            self._show_answer()

    def _failed(self, exc: BaseException) -> None:
        self._end()
        messages().error(f"The scenario bench stopped: {exc}")
        self.failed.emit(str(exc))
