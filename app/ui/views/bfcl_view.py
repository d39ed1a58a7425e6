"""The Scenarios place's function-calling part: the Berkeley Function Calling Leaderboard's single-turn
tests (BFCL v4) run on the loaded model or on an endpoint the user added, the runs kept, compared side
by side and exported, and each case of a run opened with the question, the tools, what the model wrote
and why the checker said what it said.

Everything it does goes through the core (app/bench/bfcl_*.py, app/fetch/bfcl_dataset.py); the work
runs in Ops. Its state (the choices made, the runs shown, the ticked ones, the case open) lives here,
set from what the widgets say; none is read back out of a widget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from app.bench.bfcl_bench import BenchOptions, Step, bench_engine, bench_specs, left_words, time_left
from app.bench.bfcl_cases import CATEGORIES, QUICK_PER_CATEGORY, Case, DatasetError, load_cases
from app.bench.bfcl_run import CaseRecord
from app.bench.bfcl_store import Run, list_runs, runs_folder, write_csv
from app.bench.compare import EngineSpec
from app.engine.endpoints import load_endpoints
from app.engine.remote import Endpoint
from app.fetch import bfcl_dataset
from app.net.download import DownloadCancelled, Progress
from app.ui.base import theme
from app.ui.base.messages import messages, with_details
from app.ui.base.ops import Op, OpContext
from app.ui.base.props import props
from app.ui.controllers.model_controller import model_label
from app.ui.widgets.bfcl_case_page import CasePage
from app.ui.widgets.bfcl_tables import CasesTable, ComparisonTable, RunsTable
from app.ui.widgets.controls import run_stop_row

if TYPE_CHECKING:
    from app.ui.controllers.model_controller import ModelController

THINKING = (("Thinking off", (False,)), ("Thinking on", (True,)),
            ("Both: a run with it off, one with it on", (False, True)))
MAX_TICKED = 4
Work = Callable[[OpContext], list[Run]]  # a bench, as an Op runs it
NO_DATASET = "The BFCL test files are not on this machine yet."
NOT_HERE = ("The test files are not on this machine, so the question, the tools and the acceptable answers "
            "cannot be shown (Get the test files above).")


@dataclass(frozen=True)
class Target:
    """What a run runs on: the loaded model, or an endpoint from the Engines page."""

    key: str  # "model" or "endpoint:NAME"
    words: str
    endpoint: Endpoint | None = None


class BfclView(QWidget):
    finished = Signal(list)  # [Run] of a bench that ended (stopped or not)
    failed = Signal(str)
    dataset_failed = Signal(str)  # the sentence the Get button's failure showed
    exported = Signal(str)  # the CSV's path

    def __init__(self, model: ModelController) -> None:
        super().__init__()
        self.setObjectName("page")
        self.model = model  # a run on the loaded model claims it, as the scenario bench does
        self.op: Op | None = None  # the bench
        self.get_op: Op | None = None  # the test files' download
        self.count_op: Op | None = None
        # the state: what the user chose and what is shown (set from the widgets' signals)
        self.folder: Path | None = None
        self.quick = True
        self.categories: tuple[str, ...] = CATEGORIES  # every single-turn category (a test narrows them)
        self.thinking = 0  # index in THINKING
        self.targets: list[Target] = []
        self.target_key = "model"
        self.counts: tuple[int, int] | None = None  # cases in a quick run and in the whole set
        self.runs: list[Run] = []
        self.ticked: list[str] = []  # runs' paths, in the order ticked
        self.current_run: str | None = None
        self.current_case: str | None = None
        self.failed_only = False
        self.before: set[str] = set()  # runs kept before the bench running now
        self.started = 0.0
        self.claimed = False  # the loaded model is this bench's while it runs
        self._cases: dict[str, dict[str, Case]] = {}  # the dataset's cases by category, read when a case opens

        layout = QVBoxLayout(self)
        layout.setSpacing(theme.metric("space_2"))
        layout.addWidget(props(QLabel("Function calling: BFCL v4"), objectName="title"))
        layout.addWidget(props(QLabel(
            "The Berkeley Function Calling Leaderboard's single-turn tests: each case offers tools and asks a "
            "question; the calls the model makes are checked by BFCL's rules, and the scores are the "
            "leaderboard's columns. Runs are kept, so models and settings can be compared."),
            objectName="subtitle", wordWrap=True))
        layout.addWidget(self._dataset_card())
        layout.addLayout(self._controls())
        self.progress_bar = props(QProgressBar(), objectName="bfclBar", format="%v / %m cases", visible=False)
        layout.addWidget(self.progress_bar)
        self.progress_text = props(QLabel(), objectName="fact", wordWrap=True, visible=False)
        layout.addWidget(self.progress_text)
        self.credit = props(QLabel(bfcl_dataset.source().credit()), objectName="credit", wordWrap=True)
        layout.addWidget(self.credit)

        layout.addSpacing(theme.metric("space_2"))
        self.runs_title = props(QLabel("Kept runs"), objectName="cardTitle")
        layout.addWidget(self.runs_title)
        row = QHBoxLayout()
        self.runs_hint = props(QLabel(), objectName="subtitle", wordWrap=True)
        row.addWidget(self.runs_hint, 1)
        self.export_button = props(QPushButton("Export CSV…"), enabled=False,
                                   toolTip="Every case of the ticked runs, a row each")
        self.export_button.clicked.connect(self.export)
        row.addWidget(self.export_button)
        layout.addLayout(row)
        self.runs_table = RunsTable()
        self.runs_table.ticked.connect(self.tick)
        self.runs_table.picked.connect(self.pick_run)
        layout.addWidget(self.runs_table)
        self.comparison = props(ComparisonTable(), visible=False)
        layout.addWidget(self.comparison)
        self.export_note = props(QLabel(), objectName="fact", wordWrap=True, visible=False)
        layout.addWidget(self.export_note)

        layout.addSpacing(theme.metric("space_2"))
        self.cases_title = props(QLabel("Cases"), objectName="cardTitle", wordWrap=True)
        layout.addWidget(self.cases_title)
        row = QHBoxLayout()
        self.all_button = props(QRadioButton("All"), objectName="bfclChoice", checked=True)
        self.failed_button = props(QRadioButton("Failed"), objectName="bfclChoice")
        self.filter_group = QButtonGroup(self)
        for button in (self.all_button, self.failed_button):
            self.filter_group.addButton(button)
            row.addWidget(button)
        self.failed_button.toggled.connect(self.filter_failed)
        row.addStretch(1)
        layout.addLayout(row)
        self.cases_table = CasesTable()
        self.cases_table.picked.connect(self.open_case)
        layout.addWidget(self.cases_table)
        self.case_page = CasePage()
        layout.addWidget(self.case_page)
        layout.addStretch(1)
        self._show_runs()
        theme.notifier().changed.connect(self._show_cases)  # ✓ and ✗ in the theme's colours
        model.state_changed.connect(self._fill_targets)  # the loaded model's name in the choices

    # ------------------------------------------------------------------ building

    def _dataset_card(self) -> QFrame:
        """Where the test files are not here: one line and the button that gets them."""
        self.dataset_card = props(QFrame(), objectName="card", visible=False)
        card = QVBoxLayout(self.dataset_card)
        self.dataset_line = props(QLabel(NO_DATASET), objectName="warning", wordWrap=True)
        card.addWidget(self.dataset_line)
        row = QHBoxLayout()
        size = bfcl_dataset.source().size / 1e6
        self.get_button = props(QPushButton(f"Get the test files ({size:.1f} MB)"), objectName="primary")
        self.get_button.clicked.connect(self.get_dataset)
        self.cancel_get = props(QPushButton("Cancel"), enabled=False)
        self.cancel_get.clicked.connect(self.cancel_dataset)
        self.get_bar = props(QProgressBar(), objectName="bfclBar", visible=False, textVisible=False)
        row.addWidget(self.get_button)
        row.addWidget(self.cancel_get)
        row.addWidget(self.get_bar, 1)
        card.addLayout(row)
        return self.dataset_card

    def _controls(self) -> QVBoxLayout:
        box = QVBoxLayout()
        box.setSpacing(theme.metric("space_1"))
        row = QHBoxLayout()
        row.addWidget(QLabel("Cases"))
        self.quick_button = props(QRadioButton(), objectName="bfclChoice", checked=True)
        self.whole_button = props(QRadioButton(), objectName="bfclChoice")
        self.size_group = QButtonGroup(self)
        for button in (self.quick_button, self.whole_button):
            self.size_group.addButton(button)
            row.addWidget(button)
        self.quick_button.toggled.connect(self.choose_quick)
        row.addStretch(1)
        box.addLayout(row)
        self._name_sizes()
        row = QHBoxLayout()
        self.thinking_box = QComboBox()
        for words, _choice in THINKING:
            self.thinking_box.addItem(words)
        self.thinking_box.currentIndexChanged.connect(self.choose_thinking)
        row.addWidget(self.thinking_box)
        row.addWidget(QLabel("on"))
        self.target_box = QComboBox()
        self.target_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.target_box.setMinimumContentsLength(16)
        self.target_box.currentIndexChanged.connect(self.choose_target)
        row.addWidget(self.target_box, 1)
        box.addLayout(row)
        row, self.run_button, self.stop_button = run_stop_row("Run BFCL", self.run, self.stop)
        row.addStretch(1)
        box.addLayout(row)
        return box

    def _name_sizes(self) -> None:
        quick = self.counts[0] if self.counts else QUICK_PER_CATEGORY * len(CATEGORIES)
        self.quick_button.setText(f"Quick: {QUICK_PER_CATEGORY} a category ({quick} cases)")
        self.whole_button.setText(f"Whole set ({self.counts[1]:,} cases)" if self.counts else "Whole set")

    # ------------------------------------------------------------------ what the user chose

    def choose_quick(self, on: bool) -> None:
        self.quick = on

    def choose_thinking(self, index: int) -> None:
        self.thinking = max(0, index)

    def choose_target(self, index: int) -> None:
        if 0 <= index < len(self.targets):
            self.target_key = self.targets[index].key
            self.target_box.setToolTip(self.targets[index].words)

    def filter_failed(self, on: bool) -> None:
        self.failed_only = on
        self._show_cases()

    def tick(self, path: str, on: bool) -> None:
        if on and path not in self.ticked:
            if len(self.ticked) >= MAX_TICKED:
                self.runs_hint.setText(f"Up to {MAX_TICKED} runs side by side: untick one first.")
                self._show_runs(hint=False)
                return
            self.ticked.append(path)
        elif not on and path in self.ticked:
            self.ticked.remove(path)
        self._show_runs()

    def pick_run(self, path: str) -> None:
        if path != self.current_run:
            self.current_run, self.current_case = path, None
            self._show_cases()

    def open_case(self, case_id: str) -> None:
        self.current_case = case_id
        self._show_case()

    # ------------------------------------------------------------------ showing

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        self.refresh()

    def refresh(self) -> None:
        """What may have changed elsewhere: the test files, the endpoints, the loaded model, the runs."""
        self._find_dataset()
        self._fill_targets()
        if self.op is None:
            self.reload_runs()

    def _find_dataset(self) -> None:
        self.folder = folder = bfcl_dataset.local_folder()
        if folder is not None or self.get_op is None:
            self.dataset_card.setVisible(folder is None)
        if folder is not None and self.counts is None and self.count_op is None:

            def count(_ctx: OpContext) -> tuple[int, int]:
                return len(load_cases(folder, quick=True)), len(load_cases(folder))

            # a folder that cannot be read leaves the sizes uncounted; a run says why it cannot start
            self.count_op = Op(self, count, name="BFCL cases").success(self._counted).failure(self._not_counted).run()

    def _not_counted(self, _exc: BaseException) -> None:
        self.count_op = None

    def _counted(self, counts: tuple[int, int]) -> None:
        self.counts, self.count_op = counts, None
        self._name_sizes()

    def _fill_targets(self) -> None:
        label = model_label(self.model)
        self.targets = [Target("model", f"the loaded model ({label})" if label else "the loaded model (none loaded)")]
        self.targets += [Target(f"endpoint:{e.name}", f"the endpoint {e.name} ({e.url})", e) for e in load_endpoints()]
        keys = [t.key for t in self.targets]
        if self.target_key not in keys:
            self.target_key = "model"
        self.target_box.blockSignals(True)
        self.target_box.clear()
        for i, t in enumerate(self.targets):
            self.target_box.addItem(t.words)
            self.target_box.setItemData(i, t.words, Qt.ItemDataRole.ToolTipRole)
        self.target_box.setCurrentIndex(keys.index(self.target_key))
        self.target_box.setToolTip(self._target().words)
        self.target_box.blockSignals(False)

    def reload_runs(self) -> None:
        self.runs = list_runs()
        paths = {str(r.path) for r in self.runs}
        self.ticked = [p for p in self.ticked if p in paths]
        if self.current_run not in paths:
            self.current_run = str(self.runs[0].path) if self.runs else None
            self.current_case = None
        self._show_runs()
        self._show_cases()

    def _states(self) -> dict[str, str]:
        """A run written by the bench running now is running, not cut short."""
        if self.op is None:
            return {}
        return {str(r.path): "running…" for r in self.runs if r.ended is None and str(r.path) not in self.before}

    def _show_runs(self, hint: bool = True) -> None:
        self.runs_table.show_runs(self.runs, self._states(), self.ticked, self.current_run)
        self.runs_table.setVisible(bool(self.runs))
        chosen = self._ticked_runs()
        self.comparison.setVisible(bool(chosen))
        self.comparison.show_runs(chosen)
        self.export_button.setEnabled(bool(chosen))
        if hint:
            self.runs_hint.setText(
                "No runs yet: a run is kept here as it goes, a case at a time." if not self.runs else
                f"Tick up to {MAX_TICKED} runs to compare them side by side; pick a row to read its cases.")
            self.runs_hint.setToolTip(f"Each run is kept as it goes, a case at a time, in {runs_folder()}")

    def _ticked_runs(self) -> list[Run]:
        by_path = {str(r.path): r for r in self.runs}
        return [by_path[p] for p in self.ticked if p in by_path]

    def _run(self) -> Run | None:
        return next((r for r in self.runs if str(r.path) == self.current_run), None)

    def _records(self) -> list[CaseRecord]:
        run = self._run()
        records = run.records if run is not None else []
        return [r for r in records if not r.valid] if self.failed_only else records

    def _show_cases(self) -> None:
        run = self._run()
        if run is None:
            self.cases_title.setText("Cases")
        else:
            self.cases_title.setText(f"Cases of {run.info.title()} ({run.info.date[:16]})")
        every = run.records if run is not None else []
        self.all_button.setText(f"All ({len(every)})")
        self.failed_button.setText(f"Failed ({sum(not r.valid for r in every)})")
        records = self._records()
        if self.current_case not in {r.id for r in records}:
            self.current_case = None
        self.cases_table.show_records(records, self.current_case)
        self._show_case()

    def _show_case(self) -> None:
        record = next((r for r in self._records() if r.id == self.current_case), None)
        if record is None:
            self.case_page.setVisible(False)
            return
        case, missing = self._case(record)
        self.case_page.show_case(record, case, missing)

    def _case(self, record: CaseRecord) -> tuple[Case | None, str]:
        """The case in the dataset, by its id (None and why where it cannot be read)."""
        if self.folder is None:
            return None, NOT_HERE
        if record.category not in self._cases:
            try:
                self._cases[record.category] = {c.id: c for c in load_cases(self.folder, [record.category])}
            except (DatasetError, OSError) as exc:
                return None, f"The case could not be read from the test files: {exc}"
        case = self._cases[record.category].get(record.id)
        return (case, "") if case is not None else (None, f"{record.id} is not in the test files on this machine.")

    # ------------------------------------------------------------------ the test files

    def get_dataset(self) -> None:
        if self.get_op is not None:
            return

        size = bfcl_dataset.source().size

        def work(ctx: OpContext) -> Path:
            def progress(p: Progress) -> None:
                total = p.total or size
                ctx.report("download", p.done / total, f"{p.done / 1e6:.1f} of {total / 1e6:.1f} MB")

            return bfcl_dataset.ensure_dataset(progress=progress, cancel=ctx.is_cancelled)

        self.dataset_line.setText("Getting the test files…")
        self.get_bar.setRange(0, 1000)
        self.get_bar.setValue(0)
        self.get_bar.setVisible(True)
        self.cancel_get.setEnabled(True)
        self.get_op = (Op(self, work, name="BFCL test files").progress(self._on_get_progress)
                       .success(self._got).failure(self._get_failed).busy(self.get_button, self.run_button).run())

    def cancel_dataset(self) -> None:
        if self.get_op is not None:
            self.get_op.cancel()

    def _on_get_progress(self, _step: str, fraction: float, text: str) -> None:
        if fraction >= 0:
            self.get_bar.setValue(int(fraction * 1000))
        self.dataset_line.setText(f"Getting the test files… {text}")

    def _end_get(self) -> None:
        self.get_op = None
        self.get_bar.setVisible(False)
        self.cancel_get.setEnabled(False)

    def _got(self, _folder: Path) -> None:
        self._end_get()
        self.dataset_line.setText(NO_DATASET)
        self.refresh()
        self._show_case()

    def _get_failed(self, exc: BaseException) -> None:
        self._end_get()
        if isinstance(exc, DownloadCancelled):
            self.dataset_line.setText(NO_DATASET + " (The download was cancelled; it resumes where it stopped.)")
            return
        sentence = str(exc)
        self.dataset_line.setText(sentence)
        detail = getattr(exc, "detail", "")
        messages().error(with_details(sentence, detail))
        self.dataset_failed.emit(sentence)

    # ------------------------------------------------------------------ a bench

    @property
    def running(self) -> bool:
        return self.op is not None

    def _target(self) -> Target:
        return next((t for t in self.targets if t.key == self.target_key), Target("model", "the loaded model"))

    def run(self) -> None:
        if self.op is not None:
            return
        self._find_dataset()
        folder = self.folder
        if folder is None:
            messages().error("Get the BFCL test files first (the button above): the cases come from them.")
            return
        self._fill_targets()
        target = self._target()
        thinking = THINKING[self.thinking][1]
        options = BenchOptions(quick=self.quick, categories=self.categories, data=folder)
        if target.endpoint is None:
            work = self._local_work(thinking, options)
            if work is None:
                return
        else:
            work = self._endpoint_work(target.endpoint, thinking, options)
        self.reload_runs()
        self.before = {str(r.path) for r in self.runs}
        self.started = time.monotonic()
        self.progress_bar.setRange(0, 1)
        self.progress_bar.setValue(0)
        self.progress_bar.setVisible(True)
        self.progress_text.setText(f"Reading the cases… (on {target.words})")
        self.progress_text.setVisible(True)
        self.op = (Op(self, work, name="BFCL bench").items(self._on_item).success(self._done).failure(self._failed)
                   .busy(self.run_button, self.quick_button, self.whole_button, self.thinking_box, self.target_box))
        self.stop_button.setEnabled(True)
        if target.endpoint is None:
            self.model.claim("bench")
            self.claimed = True
        self.op.run()

    def _local_work(self, thinking: tuple[bool, ...], options: BenchOptions) -> Work | None:
        """The bench on the loaded model (None, said why, where it cannot run now)."""
        engine = self.model.engine
        if not engine.loaded:
            messages().error("Load a model first, or pick an endpoint: the bench runs on the model in the chat.")
            return None
        if self.model.busy_with("chat"):
            messages().error("Wait for the reply to finish: the bench uses the same model.")
            return None
        if self.model.busy_with("bench"):
            messages().error("The scenario bench is running on the model: let it end, or stop it, first.")
            return None
        label, info = model_label(self.model), engine.info
        source_text = info.path if info is not None else ""
        plan = self.model.plan.reason if self.model.plan is not None else ""
        machine = self.model.machine

        def work(ctx: OpContext) -> list[Run]:
            cases = load_cases(options.data or Path(), options.categories, quick=options.quick)
            runs: list[Run] = []
            for i, think in enumerate(thinking):
                if ctx.cancelled:
                    break
                title = f"{label}, {'thinking' if think else 'no thinking'}"
                started = time.monotonic()
                ctx.emit(Step(i, len(thinking), title, 0, len(cases), None, None))

                def report(done: int, total: int, record: CaseRecord, i: int = i, title: str = title,
                           started: float = started) -> None:
                    eta = time_left(time.monotonic() - started, done, total, i, len(thinking))
                    ctx.emit(Step(i, len(thinking), title, done, total, record, eta))

                run = bench_engine(engine, cases, label=label, source_text=source_text, plan=plan, thinking=think,
                                   options=options, machine=machine, progress=report, should_stop=ctx.is_cancelled)
                runs.append(run)
                ctx.emit(run)
            return runs

        return work

    def _endpoint_work(self, endpoint: Endpoint, thinking: tuple[bool, ...], options: BenchOptions) -> Work:
        machine = self.model.machine

        def work(ctx: OpContext) -> list[Run]:
            errors: list[str] = []
            runs = bench_specs([EngineSpec(endpoint.name, endpoint=endpoint)], thinking, options, machine=machine,
                               progress=ctx.emit, should_stop=ctx.is_cancelled,
                               on_error=lambda label, words: errors.append(f"{label}: {words}"))
            if errors and not runs:
                raise RuntimeError(f"The endpoint could not be run: {'; '.join(errors)}")
            return runs

        return work

    def stop(self) -> None:
        if self.op is not None:
            self.op.cancel()
            self.progress_text.setText("Stopping after the case running now; the run keeps what it did…")

    def _on_item(self, item: Step | Run) -> None:
        if isinstance(item, Run):
            self.current_run, self.current_case = str(item.path), None
            self.reload_runs()
            return
        self.progress_bar.setRange(0, max(item.total, 1))
        self.progress_bar.setValue(item.done)
        where = f"Run {item.run + 1} of {item.runs}: " if item.runs > 1 else ""
        self.progress_text.setText(f"{where}{item.title} · {item.done} of {item.total} cases · "
                                   f"{left_words(item.eta_seconds)}")
        if item.record is None or item.done == 1:  # a run began (and the one before ended): the list shows it
            self.reload_runs()

    def _end(self) -> None:
        if self.claimed:
            self.model.release("bench")
        self.op, self.claimed = None, False
        self.stop_button.setEnabled(False)

    def _done(self, runs: list[Run]) -> None:
        stopped = any(r.ended and r.ended.get("stopped") for r in runs)
        self._end()
        if runs:
            self.current_run, self.current_case = str(runs[-1].path), None
        self.reload_runs()
        spent = time.monotonic() - self.started
        scores = "; ".join(f"{r.info.title()}: {r.summary.correct} of {r.summary.total} correct" for r in runs)
        what = "Stopped: each run keeps the cases it judged" if stopped else "Done"
        self.progress_text.setText(f"{what} ({spent:.0f} s). {scores}" if runs else "Stopped before the first case.")
        self.finished.emit(runs)

    def _failed(self, exc: BaseException) -> None:
        self._end()
        self.reload_runs()
        self.progress_text.setText("The bench stopped with an error (above).")
        messages().error(f"The BFCL bench stopped: {exc}")
        self.failed.emit(str(exc))

    # ------------------------------------------------------------------ export

    def export(self) -> None:
        runs = self._ticked_runs()
        if not runs:
            return
        start = str(Path.home() / f"bfcl-{runs[0].path.stem}.csv")
        path, _filter = QFileDialog.getSaveFileName(self, "Export the ticked runs as CSV", start, "CSV files (*.csv)")
        if not path:
            return
        cases = sum(len(r.records) for r in runs)

        def written(out: Path) -> None:
            self.export_note.setText(f"{cases:,} cases of {len(runs)} run{'s' if len(runs) != 1 else ''} "
                                     f"written to {out}")
            self.export_note.setVisible(True)
            self.exported.emit(str(out))

        Op(self, lambda _ctx: write_csv(runs, path), name="CSV export").success(written).failure(
            lambda exc: messages().error(f"The CSV could not be written to {path}: {exc}")).busy(
            self.export_button).run()
