"""The Engines page: remote OpenAI-compatible endpoints, and compare mode (two engines side by side)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.base.keystore import key_storage
from app.bench.compare import EngineSpec, Side, compare, save_markdown, to_markdown
from app.bench.scenarios import load_scenarios
from app.engine.contract import SamplingParams
from app.engine.endpoints import load_endpoints, remove_endpoint, save_endpoint
from app.engine.remote import Endpoint, RemoteEngine
from app.ui.base.ops import Op, OpContext
from app.ui.base.props import props

if TYPE_CHECKING:
    from app.engine.remote import ConnectCheck

LOCAL = "Local GGUF file…"


class EnginesView(QWidget):
    use_endpoint = Signal(object)  # Endpoint: chat with it
    compared = Signal(list)  # [Side]
    failed = Signal(str)

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("page")
        self.op: Op | None = None
        self.check_op: Op | None = None
        self.sides: list[Side] = []
        self.local_paths: dict[int, str] = {}
        layout = QVBoxLayout(self)
        layout.addWidget(props(QLabel("Engines"), objectName="title"))
        layout.addWidget(props(QLabel("Remote OpenAI-compatible servers (llama-server, vLLM, SGLang…) work like the "
                                "local model; their speed is measured from the stream."), objectName="subtitle",
                               wordWrap=True))
        # one column: the saved servers above the form, so the page is never wider than the window
        box = props(QFrame(), objectName="card")
        card = QVBoxLayout(box)
        self.list = props(QListWidget(), objectName="conversations")
        self.list.setMaximumHeight(90)
        self.list.currentTextChanged.connect(self._show)
        card.addWidget(self.list)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.name, self.url, self.model, self.key = QLineEdit(), QLineEdit(), QLineEdit(), QLineEdit()
        self.url.setPlaceholderText("http://gpu-box:8080/v1")
        self.model.setPlaceholderText("empty: the first model the server lists")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("optional")
        for label, widget in (("Name", self.name), ("URL", self.url), ("Model", self.model), ("API key", self.key)):
            widget.setMinimumWidth(120)
            form.addRow(label, widget)
        card.addLayout(form)
        buttons = QHBoxLayout()
        self.save_button = QPushButton("Save")
        self.save_button.clicked.connect(self.save)
        self.test_button = QPushButton("Test connection")
        self.test_button.clicked.connect(self.test_connection)
        self.use_button = props(QPushButton("Chat with it"), objectName="primary")
        self.use_button.clicked.connect(lambda: self.use_endpoint.emit(self.endpoint()))
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self.remove)
        for b in (self.use_button, self.save_button, self.test_button, self.remove_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        card.addLayout(buttons)
        self.check_label = props(QLabel(), objectName="fact")
        self.check_label.setWordWrap(True)
        self.check_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        card.addWidget(self.check_label)
        layout.addWidget(box)

        layout.addWidget(props(QLabel("Compare"), objectName="cardTitle"))
        pick = QHBoxLayout()
        self.side_a, self.side_b = QComboBox(), QComboBox()
        for i, combo in enumerate((self.side_a, self.side_b)):
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(10)
            combo.activated.connect(lambda _=None, i=i: self._maybe_pick_file(i))
            pick.addWidget(QLabel("A" if i == 0 else "B"))
            pick.addWidget(combo, 1)
        layout.addLayout(pick)
        self.prompt = QPlainTextEdit("Is it warmer in Lisbon or in Oslo? Answer in one sentence.")
        self.prompt.setMaximumHeight(60)
        layout.addWidget(self.prompt)
        run_row = QHBoxLayout()
        self.run_button = props(QPushButton("Compare"), objectName="primary")
        self.run_button.clicked.connect(self.run_compare)
        self.export_button = QPushButton("Export Markdown…")
        self.export_button.setEnabled(False)
        self.export_button.clicked.connect(self._export_dialog)
        run_row.addWidget(self.run_button)
        run_row.addWidget(self.export_button)
        run_row.addStretch(1)
        layout.addLayout(run_row)
        self.suite = QCheckBox("Run the scenario suite instead of the prompt")
        layout.addWidget(self.suite)
        self.status = props(QLabel(), objectName="fact")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["", "A", "B"])
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)
        layout.addWidget(self.table, 1)
        self.refresh()

    # ------------------------------------------------------------------ endpoints

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        if not self.key.toolTip():  # asked when first seen: the OS keyring takes a fifth of a second to open
            self.key.setToolTip(f"Kept in {key_storage()}")
        super().showEvent(event)

    def refresh(self, select: str | None = None) -> None:
        """List the saved servers and show one in the form (`select`, else the one shown, else the
        first): after a restart the form shows a saved server instead of staying empty."""
        shown = select or self.name.text().strip()
        self.endpoints = {e.name: e for e in load_endpoints()}
        self.list.clear()
        self.list.addItems(list(self.endpoints))
        names = list(self.endpoints)
        if names:
            self.list.setCurrentRow(names.index(shown) if shown in names else 0)
        for combo in (self.side_a, self.side_b):
            current = combo.currentText()
            combo.clear()
            combo.addItems([LOCAL, *[f"endpoint: {n}" for n in self.endpoints]])
            if current:
                combo.setCurrentText(current)

    def _show(self, name: str) -> None:
        e = self.endpoints.get(name)
        if e:
            self.name.setText(e.name)
            self.url.setText(e.url)
            self.model.setText(e.model)
            self.key.setText(e.api_key or "")

    def endpoint(self) -> Endpoint:
        return Endpoint(self.name.text().strip(), self.url.text().strip(), self.model.text().strip(),
                        self.key.text().strip() or None)

    def save(self) -> None:
        try:
            save_endpoint(self.endpoint())
        except ValueError as exc:
            self.check_label.setText(f"✗ {exc}")
            return
        endpoint = self.endpoint()
        self.refresh(select=endpoint.name)
        self.check_label.setText(f"Saved; the API key is kept in {key_storage()}." if endpoint.api_key
                                 else "Saved (no API key).")

    def remove(self) -> None:
        name = self.name.text().strip()
        remove_endpoint(name)
        for field in (self.name, self.url, self.model, self.key):
            field.clear()
        self.refresh()
        self.check_label.setText(f"Removed {name}." if name else "")

    def test_connection(self) -> None:
        """Ask the server for its models, off the GUI thread (an unreachable host takes up to 10 s)."""
        endpoint = self.endpoint()
        self.check_label.setText(f"connecting to {endpoint.url}…")
        self.check_op = (Op(self, lambda ctx: RemoteEngine(endpoint, timeout=10).check(), name="Test connection")
                         .success(self._show_check)
                         .failure(lambda exc: self.check_label.setText(f"✗ {exc}"))
                         .busy(self.test_button))
        self.check_op.run()

    def _show_check(self, result: ConnectCheck) -> None:
        models = f": {', '.join(result.models[:5])}" if result.models else ""
        self.check_label.setText(("✓ " if result.ok else "✗ ") + result.message + models)

    # ------------------------------------------------------------------ compare

    def _maybe_pick_file(self, index: int) -> None:
        combo = (self.side_a, self.side_b)[index]
        if combo.currentText() == LOCAL:
            path, _ = QFileDialog.getOpenFileName(self, "A model to compare", "", "GGUF models (*.gguf)")
            if path:
                self.set_local(index, path)

    def set_local(self, index: int, path: str) -> None:
        self.local_paths[index] = path
        combo = (self.side_a, self.side_b)[index]
        combo.setCurrentText(LOCAL)
        combo.setToolTip(path)

    def spec(self, index: int) -> EngineSpec:
        text = (self.side_a, self.side_b)[index].currentText()
        if text.startswith("endpoint: "):
            name = text.removeprefix("endpoint: ")
            return EngineSpec(name, endpoint=self.endpoints[name])
        path = self.local_paths.get(index)
        if not path:
            raise ValueError(f"choose a GGUF file for {'AB'[index]}")
        return EngineSpec(Path(path).stem, path=path)

    def run_compare(self) -> None:
        if self.op is not None:
            return
        try:
            specs = [self.spec(0), self.spec(1)]
        except ValueError as exc:
            self.status.setText(f"✗ {exc}")
            return
        suite = self.suite.isChecked()
        prompt = self.prompt.toPlainText().strip()

        def work(ctx: OpContext) -> list[Side]:
            def progress(message: str) -> None:
                ctx.report("compare", None, message)

            if suite:
                return compare(specs, scenarios=load_scenarios(), progress=progress, should_stop=ctx.is_cancelled)
            return compare(specs, messages=[{"role": "user", "content": prompt}], progress=progress,
                           sampling=SamplingParams(temperature=0.0, max_tokens=1024), should_stop=ctx.is_cancelled)

        self.op = (Op(self, work, name="Compare").progress(lambda step, fraction, text: self.status.setText(text))
                   .success(self._done).failure(self._failed).busy(self.run_button))
        self.op.run()

    def _end(self) -> None:
        self.op = None

    def _done(self, sides: list[Side]) -> None:
        self._end()
        self.sides = sides
        rows = [("engine", [f"{s.kind}: {s.model or '?'}" for s in sides]),
                ("tokens/s", [f"{s.tps:.1f}" + (" (from the stream)" if s.kind == "remote" else "") for s in sides]),
                ("first token", [f"{s.ttft:.2f} s" for s in sides])]
        if any(s.results for s in sides):
            rows.append(("passed", [f"{sum(r.passed for r in s.results)} of {len(s.results)}" for s in sides]))
        else:
            rows.append(("answer", [s.answer or s.error for s in sides]))
        if any(s.error for s in sides):
            rows.append(("error", [s.error or "-" for s in sides]))
        self.table.setRowCount(len(rows))
        self.table.setHorizontalHeaderLabels(["", *[s.label for s in sides]])
        for r, (name, values) in enumerate(rows):
            self.table.setItem(r, 0, QTableWidgetItem(name))
            for c, value in enumerate(values, start=1):
                self.table.setItem(r, c, QTableWidgetItem(value))
        self.table.resizeRowsToContents()
        path = save_markdown(self.markdown())
        self.status.setText(f"done · saved {path}")
        self.export_button.setEnabled(True)
        self.compared.emit(sides)

    def _failed(self, exc: BaseException) -> None:
        self._end()
        self.status.setText(f"✗ {exc}")
        self.failed.emit(str(exc))

    def markdown(self) -> str:
        suite = any(s.results for s in self.sides)
        return to_markdown(self.sides, "Scenario suite, side by side" if suite else "Same prompt, side by side",
                           "" if suite else self.prompt.toPlainText())

    def export(self, path: str) -> None:
        Path(path).write_text(self.markdown(), encoding="utf-8")

    def _export_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export the comparison", "comparison.md")
        if path:
            self.export(path)
