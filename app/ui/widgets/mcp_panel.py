"""The MCP part of the Tools panel: each server of mcp.json with its state, its tools (each with an
on/off switch and a timeout), a line for each tool left out because its schema is not valid, the
end of the stderr of a server that failed, "Confirm each call", its stderr and stdout noise in its
log; mcp.json edited in a dialog. Servers start in Ops (app/ui/base/ops.py), one each, so a server that hangs holds only
its own row ("starting…", then "timed out") and never the window."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QFont, QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.mcp_client import McpManager, ServerState
from app.chat.mcp_config import (
    EXAMPLE,
    McpConfigError,
    McpSettings,
    ServerConfig,
    config_path,
    load_config,
    save_config_text,
)
from app.chat.mcp_tools import McpToolbox
from app.ui.base.ops import Op
from app.ui.base.props import props

ZWSP = "\u200b"


def breakable(text: str) -> str:
    """`text` with a place to break a line after each / _ - . : , so a word-wrapped label can wrap a
    server's name, a path or a URL (one word to Qt) within the side panel instead of widening it."""
    for ch in "/_-.:":
        text = text.replace(ch, ch + ZWSP)
    return text


def sentence(text: str) -> str:
    """`text` as a sentence: a capital first letter and a full stop (or its own ! ? … : at the end)."""
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?…" else text + "."


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def state_line(state: ServerState) -> str:
    """A server's state as a sentence a newcomer can read: ready with its tools, or why it is not."""
    if state.ready:
        timing = f", listed in {state.started_s:.2f} s" if state.started_s is not None else ""
        line = f"✓ Ready: {plural(len(state.tools), 'tool')}{timing}."
        if state.skipped:
            line += f" {plural(len(state.skipped), 'tool')} left out: schema not valid (below)."
        if state.noise:
            line += f" {plural(len(state.noise), 'line')} on its stdout were not JSON-RPC (see Log)."
        return line
    error = state.error
    if state.status == "timed out":
        return "✗ " + sentence(f"Timed out: {error}" if error else "Timed out")
    if state.status == "failed":
        if error.startswith("program not found: "):
            return "✗ " + sentence(f"The program was not found: {error.removeprefix('program not found: ')}")
        if error.startswith(("exited at once", "ended before it answered")):
            return "✗ " + sentence(f"It {error}, before listing its tools")
        return "✗ " + sentence(f"It could not start: {error}" if error else "It could not start")
    return sentence(state.status)


class WrappingLabel(QLabel):
    """A word-wrapped label that may also break a long name, path or URL (see `breakable`), and is
    as narrow as its parent makes it; text() is the text as set."""

    def __init__(self, text: str = "", object_name: str = "") -> None:
        super().__init__()
        self.setObjectName(object_name)
        self.setWordWrap(True)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self._full = ""
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        self._full = text
        super().setText(breakable(text))

    def text(self) -> str:  # noqa: D401 - the text as set
        return self._full


class ElidedCheckBox(QCheckBox):
    """A check box whose text elides to the width it is given (the full text in the tooltip), so a
    long tool name cannot widen the side panel."""

    def __init__(self, text: str, tooltip: str = "") -> None:
        super().__init__()
        self._full = text
        self.setToolTip(text + (f"\n\n{tooltip}" if tooltip else ""))
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self._elide()

    def text(self) -> str:  # noqa: D401 - the full text
        return self._full

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(60, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(self._indicator() + self.fontMetrics().horizontalAdvance(self._full) + 4,
                     super().sizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._elide()

    def _indicator(self) -> int:
        style = self.style()
        return (style.pixelMetric(QStyle.PixelMetric.PM_IndicatorWidth, None, self)
                + style.pixelMetric(QStyle.PixelMetric.PM_CheckBoxLabelSpacing, None, self))

    def _elide(self) -> None:
        room = max(self.width() - self._indicator() - 4, 20)
        super().setText(self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideMiddle, room))


class McpEditDialog(QDialog):
    """mcp.json as text; Save checks it first and says what is wrong instead of writing it."""

    def __init__(self, parent: QWidget | None) -> None:
        super().__init__(parent)
        self.setWindowTitle("MCP servers (mcp.json)")
        layout = QVBoxLayout(self)
        layout.addWidget(props(QLabel(str(config_path())), objectName="fact"))
        self.edit = QPlainTextEdit()
        self.edit.setFont(QFont("monospace", 9))
        try:
            text = config_path().read_text(encoding="utf-8")
        except OSError:
            import json

            text = json.dumps(EXAMPLE, indent=2)
        self.edit.setPlainText(text)
        layout.addWidget(self.edit)
        self.status = props(QLabel(""), objectName="warning")
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.resize(560, 420)

    def save(self) -> None:
        try:
            save_config_text(self.edit.toPlainText())
        except (McpConfigError, OSError) as exc:
            self.status.setText(sentence(f"Not saved: {exc}"))
            return
        self.accept()


class ServerBox(QFrame):
    """One server: its state, switches and log."""

    def __init__(self, panel: McpPanel, config: ServerConfig) -> None:
        super().__init__()
        self.setObjectName("card")
        self.panel, self.config = panel, config
        prefs = panel.settings.get(config.name)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        head = QHBoxLayout()
        self.title = WrappingLabel(f"{config.name} ({config.transport})", "role")
        head.addWidget(self.title, 1)
        self.log_button = props(QToolButton(), text="Log", checkable=True)
        self.log_button.toggled.connect(self._show_log)
        head.addWidget(self.log_button)
        layout.addLayout(head)
        self.status = WrappingLabel("starting…", "fact")
        self.status.setToolTip(config.describe())
        layout.addWidget(self.status)
        self.confirm = props(QCheckBox("Confirm each call"),
                             toolTip="Ask before each call the model makes to this server's tools")
        self.confirm.setChecked(prefs.confirm_calls)
        self.confirm.toggled.connect(self._on_confirm)
        layout.addWidget(self.confirm)
        self.tools_box = QVBoxLayout()
        layout.addLayout(self.tools_box)
        # tools skipped for a schema that is not valid; the end of a failed server's stderr
        self.notes = WrappingLabel("", "warning")
        self.notes.setVisible(False)
        layout.addWidget(self.notes)
        self.switches: dict[str, QCheckBox] = {}
        self.timeouts: dict[str, QDoubleSpinBox] = {}
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setFont(QFont("monospace", 8))
        self.log.setMaximumHeight(140)
        self.log.setVisible(False)
        layout.addWidget(self.log)

    def _on_confirm(self, on: bool) -> None:
        self.panel.settings.get(self.config.name).confirm_calls = on
        self.panel.save_settings()

    def _show_log(self, on: bool) -> None:
        self.log.setVisible(on)

    def show_state(self, state: ServerState) -> None:
        self.status.setText(state_line(state))
        parts = []
        if state.noise:
            parts.append("stdout lines that were not JSON-RPC:\n" + "\n".join(state.noise))
        parts.append("stderr:\n" + (state.stderr() or "(nothing)"))
        self.log.setPlainText("\n\n".join(parts))
        notes = [sentence(f"Left out {name}: {why}") for name, why in state.skipped.items()]
        if not state.ready and state.stderr_tail():
            notes.append("Its stderr ends:\n" + "\n".join(state.stderr_tail(3)))
        self.notes.setText("\n".join(notes))
        self.notes.setVisible(bool(notes))
        for w in list(self.switches.values()) + list(self.timeouts.values()):
            w.setParent(None)
        self.switches, self.timeouts = {}, {}
        prefs = self.panel.settings.get(self.config.name)
        for tool in state.tools:
            row = QHBoxLayout()
            switch = ElidedCheckBox(tool.name, tool.description)
            switch.setChecked(tool.name not in prefs.disabled_tools)
            switch.toggled.connect(lambda on, name=tool.name: self._on_switch(name, on))
            timeout = props(QDoubleSpinBox(), minimum=1, maximum=3600, suffix=" s", decimals=0,
                            value=prefs.timeout_for(tool.name),
                            toolTip="The longest one call of this tool may take before the model is told it timed "
                                    "out")
            timeout.valueChanged.connect(lambda v, name=tool.name: self._on_timeout(name, v))
            row.addWidget(switch, 1)
            row.addWidget(timeout)
            self.tools_box.addLayout(row)
            self.switches[tool.name], self.timeouts[tool.name] = switch, timeout

    def _on_switch(self, tool: str, on: bool) -> None:
        off = self.panel.settings.get(self.config.name).disabled_tools
        if on:
            off.discard(tool)
        else:
            off.add(tool)
        self.panel.save_settings()
        self.panel.changed.emit()

    def _on_timeout(self, tool: str, seconds: float) -> None:
        self.panel.settings.get(self.config.name).tool_timeouts[tool] = float(seconds)
        self.panel.save_settings()


class McpPanel(QFrame):
    changed = Signal()  # a server's tools arrived or went, or a tool was switched on or off
    server_ready = Signal(str)  # a server's start ended (ready, failed or timed out): its name

    def __init__(self) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        # the title on a line of its own and the buttons under it: side by side they are wider than
        # the side panel at its usual width
        layout.addWidget(props(QLabel("MCP servers"), objectName="cardTitle"))
        layout.addWidget(WrappingLabel("Programs that give the model more tools, from mcp.json (Claude Desktop's "
                                       "format). Each tool can be switched off and has a timeout; Confirm each "
                                       "call asks you before the model uses one.",
                                       "subtitle"))
        head = QHBoxLayout()
        self.edit_button = QPushButton("Edit mcp.json…")
        self.edit_button.clicked.connect(self.edit)
        head.addWidget(self.edit_button)
        self.restart_button = QPushButton("Restart")
        self.restart_button.setToolTip("Read mcp.json again and restart every server")
        self.restart_button.clicked.connect(self.reload)
        head.addWidget(self.restart_button)
        head.addStretch(1)
        layout.addLayout(head)
        self.status = WrappingLabel("", "fact")
        layout.addWidget(self.status)
        self.servers_box = QVBoxLayout()
        layout.addLayout(self.servers_box)
        self.boxes: dict[str, ServerBox] = {}
        self.manager: McpManager | None = None
        self.settings = McpSettings()
        self.toolbox: McpToolbox | None = None
        self.reload()

    def save_settings(self) -> None:
        try:
            self.settings.save()
        except OSError as exc:
            self._say(sentence(f"Could not save the MCP settings: {exc}"))

    def _say(self, text: str) -> None:
        self.status.setText(text)
        self.status.setVisible(bool(text))  # no empty line between the buttons and the servers

    def edit(self) -> None:
        self.dialog = McpEditDialog(self)
        self.dialog.accepted.connect(self.reload)
        self.dialog.open()

    def reload(self) -> None:
        """Read mcp.json and the settings again; (re)start every server, each in its own Op."""
        for box in self.boxes.values():
            box.setParent(None)
        self.boxes = {}
        try:
            servers = load_config()
            self.settings = McpSettings.load()
        except McpConfigError as exc:
            self._say("✗ " + sentence(str(exc)))
            servers = {}
        else:
            self._say("" if servers else "No servers yet: Edit mcp.json… to add one (Claude Desktop's "
                                                   "format).")
        if self.manager is None and servers:
            self.manager = McpManager()
        if self.manager is not None:
            self.toolbox = McpToolbox(self.manager, self.settings)
            for name in list(self.manager.states):
                if name not in servers:
                    self._stop(name)
        for config in servers.values():
            box = self.boxes[config.name] = ServerBox(self, config)
            self.servers_box.addWidget(box)
            self._start(config)
        self.changed.emit()

    def _stop(self, name: str) -> None:
        manager = self.manager
        assert manager is not None
        manager.states.pop(name, None)
        Op(self, lambda _ctx: manager.stop(name), name=f"stop MCP server {name}").run()

    def _start(self, config: ServerConfig) -> None:
        manager = self.manager
        assert manager is not None
        timeout = self.settings.get(config.name).start_timeout

        def done(state: ServerState) -> None:
            box = self.boxes.get(config.name)
            if box is not None and box.config == config:
                box.show_state(state)
            self.changed.emit()
            self.server_ready.emit(config.name)

        def failed(exc: BaseException) -> None:
            box = self.boxes.get(config.name)
            if box is not None:
                box.status.setText("✗ " + sentence(f"It could not start: {exc}"))
            self.server_ready.emit(config.name)

        Op(self, lambda _ctx: manager.start(config, timeout), name=f"start MCP server {config.name}") \
            .success(done).failure(failed).run()

    def definitions(self, reserved: set[str]) -> list[dict[str, Any]]:
        return self.toolbox.definitions(reserved) if self.toolbox is not None else []

    def close_servers(self) -> None:
        if self.manager is not None:
            self.manager.close()
            self.manager = None
