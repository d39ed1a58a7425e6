"""The local server's part of the Settings panel, for a newcomer: what the server is and what it
answers, Start/Stop, and the address each kind of client uses (Claude Code: Anthropic Messages at the
server's root; Codex and the OpenAI Agents SDK: Responses under /v1; other OpenAI clients: chat
completions under /v1; /health and /metrics for probes), each with a Copy button that copies a command
or config that works as it is."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QToolButton, QVBoxLayout

from app.ui.base.props import props
from app.ui.widgets.mcp_panel import WrappingLabel

START, STOP = "Start local server", "Stop server"
MODEL = "local"  # the model name clients send: the server answers with the model it has loaded
INTRO = ("Lets other programs on this computer (Claude Code, Codex, scripts) use the model loaded here, "
         "through Anthropic's Messages API and OpenAI's Responses and Chat Completions APIs.")


def client_setups(base: str, key: str) -> list[tuple[str, str, str, str]]:
    """(who, where the address goes, the address, what Copy copies) per kind of client, for a server
    at `base` (http://HOST:PORT, no path) whose API key is `key` ("" when it has none)."""
    token = key or "none"
    claude = (f"ANTHROPIC_BASE_URL={base} ANTHROPIC_AUTH_TOKEN={token} ANTHROPIC_MODEL={MODEL} "
              f"ANTHROPIC_DEFAULT_HAIKU_MODEL={MODEL} CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 claude")
    codex = (f'model = "{MODEL}"\nmodel_provider = "clover"\n\n[model_providers.clover]\nname = "Clover Launcher"\n'
             f'base_url = "{base}/v1"\nenv_key = "CLOVER_API_KEY"\nwire_api = "responses"\n')
    return [
        ("Claude Code", "ANTHROPIC_BASE_URL; it calls /v1/messages", base, claude),
        ("Codex, OpenAI Agents SDK", 'base_url, wire_api = "responses"; they call /v1/responses', f"{base}/v1",
         codex),
        ("opencode, aider, OpenAI clients", "the base URL; they call /v1/chat/completions", f"{base}/v1",
         f"{base}/v1"),
        ("Health and metrics", "for probes and Prometheus, without the key", f"{base}/health\n{base}/metrics",
         f"{base}/health"),
    ]


COPIED_WHAT = ("Copied: a command line that starts Claude Code on this server.",
               "Copied: the lines for ~/.codex/config.toml (set CLOVER_API_KEY to the key, any text when there "
               "is none).",
               "Copied: the base URL for OpenAI-compatible clients.",
               "Copied: the health check's address.")


def _wrapped(text: str, object_name: str) -> QLabel:
    """A label that wraps at spaces to the panel's width and never widens it."""
    label = props(QLabel(text), objectName=object_name, wordWrap=True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


class ServerPanel(QFrame):
    """What the local server is, its state, Start/Stop and the addresses to give each client."""

    toggle = Signal()  # Start or Stop pressed

    def __init__(self) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        self.intro = _wrapped(INTRO, "subtitle")
        layout.addWidget(self.intro)
        self.state = _wrapped("Stopped.", "fact")
        layout.addWidget(self.state)
        row = QHBoxLayout()
        self.button = QPushButton(START)
        self.button.clicked.connect(self.toggle.emit)
        row.addWidget(self.button)
        row.addStretch(1)
        layout.addLayout(row)
        self.rows: list[tuple[QLabel, QLabel, WrappingLabel, QToolButton]] = []
        self.copies: list[str] = []
        for i in range(len(COPIED_WHAT)):
            head = QHBoxLayout()
            who = _wrapped("", "role")
            head.addWidget(who, 1)
            copy = props(QToolButton(), text="Copy")
            copy.clicked.connect(lambda _on=False, i=i: self._copy(i))
            head.addWidget(copy)
            layout.addLayout(head)
            how = _wrapped("", "subtitle")
            layout.addWidget(how)
            address = WrappingLabel("", "fact")
            address.setFont(QFont("monospace", 9))
            address.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            layout.addWidget(address)
            self.rows.append((who, how, address, copy))
        self.copied = _wrapped("", "fact")
        self.copied.setVisible(False)
        layout.addWidget(self.copied)
        self.base, self.key = "", ""
        self.set_address("http://127.0.0.1:8080", "")

    def set_address(self, base: str, key: str) -> None:
        """The server's address (http://HOST:PORT) and API key, as clients are to use them."""
        if (base, key) == (self.base, self.key):
            return
        self.base, self.key = base, key
        setups = client_setups(base, key)
        self.copies = [copy for *_shown, copy in setups]
        for (who, how, address, copy), (name, where, shown, text) in zip(self.rows, setups, strict=True):
            who.setText(name)
            how.setText(where)
            address.setText(shown)
            copy.setToolTip(text)

    def set_running(self, running: bool, line: str = "") -> None:
        """Stopped, or what the server serves now (the controller's line)."""
        self.button.setText(STOP if running else START)
        if not running:
            self.state.setText(f"Stopped. Once started, it listens at {self.base}.")
        else:
            self.state.setText(f"Running: {line}." if line else "Running.")

    def _copy(self, i: int) -> None:
        QGuiApplication.clipboard().setText(self.copies[i])
        self.copied.setText(COPIED_WHAT[i])
        self.copied.setVisible(True)
