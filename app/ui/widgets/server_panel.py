"""The local server's part of the Settings panel, for a newcomer: what the server is and what it
answers, Start/Stop, and the address each kind of client uses (Claude Code: Anthropic Messages at the
server's root; Codex and the OpenAI Agents SDK: Responses under /v1; other OpenAI clients: chat
completions under /v1; the OpenAI and Anthropic Python SDKs; /health and /metrics for probes), each
with a Copy button that copies a command, config or code that works as it is. The client blocks are a
widget of their own (`ClientSetups`), shown here and on the Server page (app/ui/views/server_view.py)."""

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
    openai_sdk = (f'from openai import OpenAI\n\nclient = OpenAI(base_url="{base}/v1", api_key="{token}")\n'
                  f'reply = client.chat.completions.create(model="{MODEL}", messages=[{{"role": "user", '
                  '"content": "Hello"}])\nprint(reply.choices[0].message.content)\n')
    anthropic_sdk = (f'from anthropic import Anthropic\n\nclient = Anthropic(base_url="{base}", api_key="{token}")\n'
                     f'reply = client.messages.create(model="{MODEL}", max_tokens=1024, messages=[{{"role": "user", '
                     '"content": "Hello"}])\nprint(reply.content[0].text)\n')
    return [
        ("Claude Code", "ANTHROPIC_BASE_URL; it calls /v1/messages", base, claude),
        ("Codex, OpenAI Agents SDK", 'base_url, wire_api = "responses"; they call /v1/responses', f"{base}/v1",
         codex),
        ("opencode, aider, OpenAI clients", "the base URL; they call /v1/chat/completions", f"{base}/v1",
         f"{base}/v1"),
        ("OpenAI Python SDK", "base_url; chat completions (or client.responses) under /v1", f"{base}/v1", openai_sdk),
        ("Anthropic Python SDK", "base_url at the server's root; it calls /v1/messages", base, anthropic_sdk),
        ("Health and metrics", "for probes and Prometheus, without the key", f"{base}/health\n{base}/metrics",
         f"{base}/health"),
    ]


COPIED_WHAT = ("Copied: a command line that starts Claude Code on this server.",
               "Copied: the lines for ~/.codex/config.toml (set CLOVER_API_KEY to the key, any text when there "
               "is none).",
               "Copied: the base URL for OpenAI-compatible clients.",
               "Copied: a Python script that asks the model through the OpenAI SDK.",
               "Copied: a Python script that asks the model through the Anthropic SDK.",
               "Copied: the health check's address.")


def _wrapped(text: str, object_name: str) -> QLabel:
    """A label that wraps at spaces to the panel's width and never widens it."""
    label = props(QLabel(text), objectName=object_name, wordWrap=True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


class ClientSetups(QFrame):
    """Per kind of client: who, where the address goes, the address, and Copy."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("clientSetups")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
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

    def set_address(self, base: str, key: str) -> None:
        setups = client_setups(base, key)
        self.copies = [copy for *_shown, copy in setups]
        for (who, how, address, copy), (name, where, shown, text) in zip(self.rows, setups, strict=True):
            who.setText(name)
            how.setText(where)
            address.setText(shown)
            copy.setToolTip(text)

    def _copy(self, i: int) -> None:
        QGuiApplication.clipboard().setText(self.copies[i])
        self.copied.setText(COPIED_WHAT[i])
        self.copied.setVisible(True)


class ServerPanel(QFrame):
    """What the local server is, its state, Start/Stop, the addresses to give each client, and the way
    to the Server page (the requests it answered)."""

    toggle = Signal()  # Start or Stop pressed
    inspect = Signal()  # "Requests…" pressed: the Server page

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
        self.requests_button = props(QPushButton("Requests…"), toolTip="The Server page: every request the server "
                                     "answered, and what each client sent")
        self.requests_button.clicked.connect(self.inspect.emit)
        row = QHBoxLayout()
        row.addWidget(self.requests_button)
        row.addStretch(1)
        layout.addLayout(row)
        self.setups = ClientSetups()
        layout.addWidget(self.setups)
        self.rows, self.copied = self.setups.rows, self.setups.copied
        self.base, self.key = "", ""
        self.set_address("http://127.0.0.1:8080", "")

    @property
    def copies(self) -> list[str]:
        return self.setups.copies

    def set_address(self, base: str, key: str) -> None:
        """The server's address (http://HOST:PORT) and API key, as clients are to use them."""
        if (base, key) == (self.base, self.key):
            return
        self.base, self.key = base, key
        self.setups.set_address(base, key)

    def set_running(self, running: bool, line: str = "") -> None:
        """Stopped, or what the server serves now (the controller's line)."""
        self.button.setText(STOP if running else START)
        if not running:
            self.state.setText(f"Stopped. Once started, it listens at {self.base}.")
        else:
            self.state.setText(f"Running: {line}." if line else "Running.")
