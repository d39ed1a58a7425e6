"""The tools panel: tool definitions (OpenAI function schemas), the MCP servers' tools
(app/ui/widgets/mcp_panel.py) and the structured-output schema."""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QCheckBox, QComboBox, QFrame, QLabel, QPlainTextEdit, QSizePolicy, QVBoxLayout

from app.chat.demo_tools import example_tools
from app.engine.tool_calls import ToolsError, check_tools
from app.ui.base.props import props
from app.ui.widgets.mcp_panel import McpPanel, sentence

PICK = "Load an example…"


def _editor(placeholder: str) -> QPlainTextEdit:
    edit = QPlainTextEdit()
    edit.setPlaceholderText(placeholder)
    edit.setFont(QFont("monospace", 9))
    edit.setMaximumHeight(150)
    return edit


def _note(text: str) -> QLabel:
    """A one-line explanation, wrapped to the panel's width (never widening it)."""
    label = props(QLabel(text), objectName="subtitle", wordWrap=True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


class ToolsPanel(QFrame):
    changed = Signal()  # tools or schema switched on or off, or edited

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("card")
        layout = QVBoxLayout(self)
        layout.addWidget(_note("Functions the model may call, in OpenAI's format, checked as you type; load an "
                               "example to try one."))
        self.use_tools = QCheckBox("Offer these tools to the model")
        self.use_tools.toggled.connect(lambda _on: self.changed.emit())
        layout.addWidget(self.use_tools)
        self.examples = QComboBox()
        # as narrow as the panel: a long example name must not widen it past the window's edge
        self.examples.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.examples.setMinimumContentsLength(12)
        self._examples = example_tools()
        self.examples.addItems([PICK, *self._examples, "all examples"])
        self.examples.currentTextChanged.connect(self._load_example)
        layout.addWidget(self.examples)
        self.demo = QCheckBox("Answer calls with the demo tools")
        self.demo.setToolTip("Deterministic stand-ins for get_weather, calculate and dispatch_drone")
        layout.addWidget(self.demo)
        self.tools_edit = _editor('[{"type": "function", "function": {"name": ..., "parameters": {...}}}]')
        self.tools_edit.textChanged.connect(self._check_tools)
        layout.addWidget(self.tools_edit)
        self.tools_status = props(QLabel(), objectName="fact")
        self.tools_status.setWordWrap(True)
        layout.addWidget(self.tools_status)
        self.mcp = McpPanel()
        self.mcp.changed.connect(self.changed.emit)
        layout.addWidget(self.mcp)

        layout.addWidget(_note("Structured output holds the answer to a JSON Schema, so a program can read it."))
        self.use_schema = QCheckBox("Structured output (JSON Schema)")
        self.use_schema.setToolTip("Constrain the answer to this JSON schema (a llama.cpp grammar)")
        self.use_schema.toggled.connect(lambda _on: self.changed.emit())
        layout.addWidget(self.use_schema)
        self.schema_edit = _editor('{"type": "object", "properties": {...}, "required": [...]}')
        self.schema_edit.textChanged.connect(self._check_schema)
        layout.addWidget(self.schema_edit)
        self.schema_status = props(QLabel(), objectName="fact")
        self.schema_status.setWordWrap(True)
        layout.addWidget(self.schema_status)

    def _load_example(self, name: str) -> None:
        if name == PICK:
            return
        tools = [t for ts in self._examples.values() for t in ts] if name == "all examples" else self._examples[name]
        self.tools_edit.setPlainText(json.dumps(tools, indent=2))
        self.use_tools.setChecked(True)
        self.demo.setChecked(True)
        self.examples.setCurrentText(PICK)

    def _check_tools(self) -> None:
        text = self.tools_edit.toPlainText().strip()
        if not text:
            self.tools_status.setText("")
            return
        try:
            tools = check_tools(text)
            self.tools_status.setText("✓ " + ", ".join(t["function"]["name"] for t in tools))
        except ToolsError as exc:
            self.tools_status.setText("✗ " + sentence(str(exc)))
        self.changed.emit()

    def _check_schema(self) -> None:
        text = self.schema_edit.toPlainText().strip()
        if not text:
            self.schema_status.setText("")
            return
        try:
            self._parse_schema(text)
            self.schema_status.setText("✓ a valid JSON schema")
        except ToolsError as exc:
            self.schema_status.setText("✗ " + sentence(str(exc)))

    @staticmethod
    def _parse_schema(text: str) -> dict[str, Any]:
        import jsonschema

        try:
            schema = json.loads(text)
        except ValueError as exc:
            raise ToolsError(f"not valid JSON: {exc}") from None
        if not isinstance(schema, dict):
            raise ToolsError("a JSON schema is an object")
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ToolsError(f"not a valid JSON schema: {exc.message}") from None
        return schema

    def tools(self) -> list[dict[str, Any]] | None:
        """The tools to offer, or None; raises ToolsError for invalid definitions."""
        if not self.use_tools.isChecked():
            return None
        return check_tools(self.tools_edit.toPlainText())

    def reserved_names(self) -> frozenset[str]:
        """The names of the editor's tools on offer: an MCP tool of the same name is offered as SERVER__NAME."""
        try:
            tools = self.tools() or []
        except ToolsError:
            tools = []
        return frozenset(t["function"]["name"] for t in tools)

    def all_tools(self) -> list[dict[str, Any]] | None:
        """The editor's tools (when on) and every switched-on MCP tool; raises ToolsError for the editor's."""
        tools = (self.tools() or []) + self.mcp.definitions(set(self.reserved_names()))
        return tools or None

    def schema_enabled(self) -> bool:
        return self.use_schema.isChecked()

    def schema(self) -> dict[str, Any] | None:
        if not self.use_schema.isChecked():
            return None
        return self._parse_schema(self.schema_edit.toPlainText())
