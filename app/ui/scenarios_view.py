"""The scenario bench page: run the article's prompts on the loaded model, a table of results."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QHBoxLayout, QHeaderView, QLabel, QPushButton, QTableWidget, QTableWidgetItem,
                               QVBoxLayout, QWidget)

from app.scenarios import Result, load_scenarios, run_all, save_results
from app.ui.jobs import Job

COLUMNS = ("Scenario", "Result", "Time", "tok/s", "Detail")


class ScenariosView(QWidget):
    finished = Signal(list)  # [Result]
    failed = Signal(str)

    def __init__(self, window) -> None:
        super().__init__(objectName="page")
        self.window = window  # for the engine, the model and the plan
        self.job: Job | None = None
        self.scenarios = load_scenarios()
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Scenario bench", objectName="title"))
        layout.addWidget(QLabel("The article's test prompts, each checked automatically. Results are saved with the "
                                "GPU, the plan and the model, so runs can be compared.", objectName="subtitle"))
        row = QHBoxLayout()
        self.run_button = QPushButton("Run all scenarios", objectName="primary")
        self.run_button.clicked.connect(lambda: self.run())
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(self.stop)
        row.addWidget(self.run_button)
        row.addWidget(self.stop_button)
        row.addStretch(1)
        layout.addLayout(row)
        self.table = QTableWidget(len(self.scenarios), len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.horizontalHeader().setSectionResizeMode(4, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)
        for i, s in enumerate(self.scenarios):
            self.table.setItem(i, 0, QTableWidgetItem(s.title))
        layout.addWidget(self.table, 1)
        self.saved = QLabel(objectName="fact")
        self.saved.setWordWrap(True)
        layout.addWidget(self.saved)

    def run(self, only: list[str] | None = None) -> None:
        engine = self.window.engine.worker.engine
        if self.job is not None:
            return
        if not engine.loaded:
            self.window.show_error("Load a model first: the bench runs on the model in the chat.")
            return
        chosen = [s for s in self.scenarios if only is None or s.id in only]
        rows = {s.id: i for i, s in enumerate(self.scenarios)}
        for s in chosen:
            for col in range(1, len(COLUMNS)):
                self.table.setItem(rows[s.id], col, QTableWidgetItem("…" if col == 1 else ""))
        info, plan, gpus = engine.info, self.window.plan, self.window.gpus

        def work(report, cancelled):
            results = run_all(engine, chosen, should_stop=cancelled)
            path = save_results(results, model=info.name, plan=plan.reason if plan else "", gpu=gpus.summary())
            return results, path

        self.job = Job(work)
        self.job.finished.connect(self._done)
        self.job.failed.connect(self._failed)
        self.run_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.job.start()

    def stop(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def _end(self) -> None:
        if self.job is not None:
            self.job.wait()
        self.job = None
        self.run_button.setEnabled(True)
        self.stop_button.setEnabled(False)

    def _done(self, outcome) -> None:
        results, path = outcome
        self._end()
        rows = {s.id: i for i, s in enumerate(self.scenarios)}
        for r in results:
            self._show(rows[r.id], r)
        self.saved.setText(f"{sum(r.passed for r in results)} of {len(results)} passed · saved to {path}")
        self.finished.emit(results)

    def _show(self, row: int, r: Result) -> None:
        values = ("PASS" if r.passed else "fail", f"{r.seconds:.1f} s", f"{r.generation_tps:.1f}", r.detail)
        for col, value in enumerate(values, start=1):
            self.table.setItem(row, col, QTableWidgetItem(value))

    def _failed(self, message: str) -> None:
        self._end()
        self.window.show_error(f"The scenario bench stopped: {message}")
        self.failed.emit(message)
