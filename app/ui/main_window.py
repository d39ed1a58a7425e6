"""The main window: conversations on the left, the model bar, the transcript and the composer.

Long work happens elsewhere: the model loads and generates on the engine thread
(app/ui/engine_worker.py); this window only sends requests and paints what comes back. Errors
from anywhere are shown in one place, the banner at the top (`show_error`).
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (QCheckBox, QDoubleSpinBox, QFileDialog, QFormLayout, QFrame, QHBoxLayout, QLabel,
                               QLineEdit, QListWidget, QListWidgetItem, QMainWindow, QPlainTextEdit, QProgressBar,
                               QPushButton, QSpinBox, QSplitter, QStackedWidget, QVBoxLayout, QWidget)

from app import APP_NAME
from app.demo_tools import run_demo_tool
from app.engine import ChatRequest, Reply, SamplingParams
from app.tool_calls import ToolsError
from app.gguf_file import GGUFError, read_header
from app.gpu import GpuProbe, probe
from app.llama_backend import LlamaBuild, build_info
from app.model_facts import facts_from_header
from app.paths import app_dirs
from app.plan import Plan, make_plan
from app.store import Store
from app.system_memory import system_memory
from app.ui.chat_view import Transcript
from app.ui.engine_worker import EngineThread
from app.ui.setup_view import SetupView
from app.ui.engines_view import EnginesView
from app.ui.scenarios_view import ScenariosView
from app.ui.tools_panel import ToolsPanel

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
MAX_TOOL_ROUNDS = 4  # demo tools answer at most this many rounds in a row (a model can loop on calls)
READOUT_MS = 250


def _card(title: str, lines: list[tuple[str, str]]) -> QFrame:
    card = QFrame(objectName="card")
    layout = QVBoxLayout(card)
    layout.setContentsMargins(16, 12, 16, 12)
    layout.addWidget(QLabel(title, objectName="cardTitle"))
    for style, text in lines:
        label = QLabel(text, objectName=style)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(label)
    return card


def machine_lines(gpus: GpuProbe, llama: LlamaBuild | None, llama_error: str | None) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    if gpus.has_gpu:
        for g in gpus.gpus:
            lines.append(("fact", f"{g.name}: {g.total_gib:.1f} GiB, {g.free_gib:.1f} GiB free"))
    else:
        lines.append(("warning", f"No NVIDIA GPU found ({gpus.message}). Models run on the CPU, slowly."))
    if llama is not None:
        build = "CUDA" if llama.cuda else "CPU only"
        lines.append(("fact", f"llama.cpp (llama-cpp-python {llama.version}): {build} build"))
        if gpus.has_gpu and not llama.cuda:
            lines.append(("warning", "A GPU is present but this llama.cpp has no CUDA: re-run the set-up "
                                     "with the CUDA toolkit installed."))
    else:
        lines.append(("warning", f"llama.cpp could not be loaded: {llama_error}"))
    return lines


class MainWindow(QMainWindow):
    readout_changed = Signal(str)  # the live tokens/s readout, each time it changes
    reply_finished = Signal(object)  # Reply, after it is shown and saved
    model_loaded = Signal(object)  # ModelInfo
    error_shown = Signal(str)

    def __init__(self, gpus: GpuProbe | None = None, store: Store | None = None, engine=None,
                 allow_http: bool = False) -> None:
        super().__init__()
        self._allow_http = allow_http
        self.setWindowTitle(APP_NAME)
        self.resize(1100, 720)
        self.gpus = gpus if gpus is not None else probe()
        try:
            self.llama, llama_error = build_info(), None
        except Exception as exc:  # shown in the window: the rest of the app still works
            self.llama, llama_error = None, f"{type(exc).__name__}: {exc}"
        self.store = store or Store(app_dirs().data / "conversations.db")
        self.engine = EngineThread(engine, parent=self)
        w = self.engine.worker
        w.load_progress.connect(self._on_load_progress)
        w.loaded.connect(self._on_loaded)
        w.event.connect(self._on_event)
        w.finished.connect(self._on_finished)
        w.failed.connect(self._on_failed)

        self.conversation_id: int | None = None
        self._tool_rounds = 0
        self._closing = False
        self.model_info = None
        self.plan: Plan | None = None
        self.generating = False
        self.last_reply: Reply | None = None
        self._tokens_seen = 0
        self._first_token_at: float | None = None
        self._request_at = 0.0

        self._build(machine_lines(self.gpus, self.llama, llama_error))
        self._refresh_conversations()
        if self.store.notice:
            self.show_error(self.store.notice)

    # ------------------------------------------------------------------ layout

    def _build(self, machine: list[tuple[str, str]]) -> None:
        splitter = QSplitter()
        # sidebar
        side = QWidget(objectName="sidebar")
        sl = QVBoxLayout(side)
        sl.setContentsMargins(12, 12, 12, 12)
        self.new_chat_button = QPushButton("New chat", objectName="primary")
        self.new_chat_button.clicked.connect(self.new_chat)
        sl.addWidget(self.new_chat_button)
        self.conversation_list = QListWidget(objectName="conversations")
        self.conversation_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.conversation_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.conversation_list.itemSelectionChanged.connect(self._on_conversation_selected)
        sl.addWidget(self.conversation_list, 1)
        row = QHBoxLayout()
        self.export_md_button = QPushButton("Export .md")
        self.export_md_button.clicked.connect(lambda: self._export_dialog("md"))
        self.export_json_button = QPushButton("Export .json")
        self.export_json_button.clicked.connect(lambda: self._export_dialog("json"))
        row.addWidget(self.export_md_button)
        row.addWidget(self.export_json_button)
        sl.addLayout(row)
        splitter.addWidget(side)

        # main column
        main = QWidget(objectName="page")
        ml = QVBoxLayout(main)
        ml.setContentsMargins(16, 12, 16, 12)
        ml.setSpacing(8)
        self.error_banner = QLabel(objectName="errorBanner")
        self.error_banner.setWordWrap(True)
        self.error_banner.setVisible(False)
        self.error_banner.mousePressEvent = lambda _e: self.error_banner.setVisible(False)
        ml.addWidget(self.error_banner)

        bar = QHBoxLayout()
        self.model_label = QLabel("No model loaded", objectName="modelName")
        bar.addWidget(self.model_label, 1)
        self.load_bar = QProgressBar()
        self.load_bar.setRange(0, 1000)
        self.load_bar.setVisible(False)
        self.load_bar.setMaximumWidth(200)
        bar.addWidget(self.load_bar)
        self.scenarios_button = QPushButton("Scenarios")
        self.scenarios_button.clicked.connect(lambda: self.pages.setCurrentWidget(self.scenarios_view))
        bar.addWidget(self.scenarios_button)
        self.engines_button = QPushButton("Engines")
        self.engines_button.clicked.connect(lambda: self.pages.setCurrentWidget(self.engines_view))
        bar.addWidget(self.engines_button)
        self.chat_button = QPushButton("Chat")
        self.chat_button.clicked.connect(lambda: self.pages.setCurrentWidget(self.transcript))
        bar.addWidget(self.chat_button)
        self.setup_button = QPushButton("Set up a model…")
        self.setup_button.clicked.connect(self.show_setup)
        bar.addWidget(self.setup_button)
        self.open_button = QPushButton("Open model…")
        self.open_button.clicked.connect(self._open_dialog)
        bar.addWidget(self.open_button)
        ml.addLayout(bar)
        self.plan_label = QLabel("", objectName="subtitle")
        self.plan_label.setWordWrap(True)
        ml.addWidget(self.plan_label)

        self.pages = QStackedWidget()
        welcome = QWidget()
        wl = QVBoxLayout(welcome)
        wl.addWidget(QLabel(APP_NAME, objectName="title"))
        wl.addWidget(QLabel("Clover-35B-A3B on your own NVIDIA card. 'Set up a model…' downloads, patches and checks one; "
                            "'Open model…' takes a GGUF you have.",
                            objectName="subtitle"))
        self.machine_card = _card("This machine", machine)
        wl.addWidget(self.machine_card)
        wl.addStretch(1)
        self.pages.addWidget(welcome)
        self.transcript = Transcript()
        self.transcript.edit_requested.connect(self.edit_message)
        self.transcript.regenerate_requested.connect(self.regenerate)
        self.transcript.tool_results_ready.connect(self.send_tool_results)
        self.pages.addWidget(self.transcript)
        self.setup_view = SetupView(self.gpus, allow_http=self._allow_http)
        self.setup_view.ready.connect(self._on_setup_ready)
        self.pages.addWidget(self.setup_view)
        self.scenarios_view = ScenariosView(self)
        self.pages.addWidget(self.scenarios_view)
        self.engines_view = EnginesView()
        self.engines_view.use_endpoint.connect(self.use_endpoint)
        self.pages.addWidget(self.engines_view)
        ml.addWidget(self.pages, 1)

        # settings (system prompt and sampling), folded by default
        self.settings_panel = QFrame(objectName="card")
        form = QFormLayout(self.settings_panel)
        self.system_prompt = QPlainTextEdit(DEFAULT_SYSTEM_PROMPT)
        self.system_prompt.setMaximumHeight(70)
        form.addRow("System prompt", self.system_prompt)
        self.temperature = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.05, value=0.7)
        self.top_p = QDoubleSpinBox(minimum=0.05, maximum=1.0, singleStep=0.05, value=0.9)
        self.max_tokens = QSpinBox(minimum=16, maximum=131_072, singleStep=256, value=4096)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Max tokens", self.max_tokens)
        self.api_key = QLineEdit()
        self.api_key.setPlaceholderText("optional: clients must send it as a Bearer token")
        form.addRow("Local server API key", self.api_key)
        self.settings_panel.setVisible(False)
        ml.addWidget(self.settings_panel)
        self.tools_panel = ToolsPanel()
        self.tools_panel.setVisible(False)
        ml.addWidget(self.tools_panel)

        composer = QHBoxLayout()
        self.input = QPlainTextEdit(objectName="composer")
        self.input.setPlaceholderText("Message (Ctrl+Enter to send)")
        self.input.setMaximumHeight(84)
        composer.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        self.send_button = QPushButton("Send", objectName="primary")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setEnabled(False)
        self.thinking = QCheckBox("Thinking")
        self.thinking.setChecked(True)
        self.thinking.setToolTip("Let the model reason before it answers (Qwen-style enable_thinking)")
        self.settings_button = QPushButton("Settings")
        self.settings_button.setCheckable(True)
        self.settings_button.toggled.connect(self.settings_panel.setVisible)
        self.tools_button = QPushButton("Tools")
        self.tools_button.setCheckable(True)
        self.tools_button.toggled.connect(self.tools_panel.setVisible)
        for widget in (self.send_button, self.stop_button, self.thinking, self.settings_button, self.tools_button):
            buttons.addWidget(widget)
        composer.addLayout(buttons)
        ml.addLayout(composer)
        QShortcut(QKeySequence("Ctrl+Return"), self.input, activated=self.send)
        splitter.addWidget(main)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([240, 860])
        self.setCentralWidget(splitter)

        self.readout = QLabel("", objectName="fact")
        self.readout.setMinimumWidth(320)
        self.readout.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.status_label = QLabel(self.gpus.summary(), objectName="fact")
        self.statusBar().addWidget(self.status_label, 1)
        self.server = None
        self.server_label = QLabel("", objectName="fact")
        self.server_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.server_button = QPushButton("Start local server")
        self.server_button.setToolTip("An OpenAI-compatible endpoint on 127.0.0.1 for other programs, "
                                      "serving the model loaded here")
        self.server_button.clicked.connect(self.toggle_server)
        self.statusBar().addPermanentWidget(self.server_label)
        self.statusBar().addPermanentWidget(self.server_button)
        self.statusBar().addPermanentWidget(self.readout)
        self._readout_timer = QTimer(self)
        self._readout_timer.setInterval(READOUT_MS)
        self._readout_timer.timeout.connect(self._update_readout)
        self._gpu_timer = QTimer(self)
        self._gpu_timer.setInterval(2000)
        self._gpu_timer.timeout.connect(self._update_gpu_memory)
        if self.gpus.has_gpu:
            self._gpu_timer.start()

    # ------------------------------------------------------------------ errors

    def show_error(self, message: str) -> None:
        self.error_banner.setText(message + "   (click to dismiss)")
        self.error_banner.setVisible(True)
        self.error_shown.emit(message)

    # ------------------------------------------------------------------ model

    def _open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a GGUF model", str(app_dirs().models), "GGUF models (*.gguf)")
        if path:
            self.load_model(path)

    def load_model(self, path: str | Path, n_ctx: int | None = None) -> Plan | None:
        """Plan the model for this machine and load it on the engine thread (a local engine)."""
        from app.engine import Engine

        if self.engine.worker.engine.kind == "remote":  # back from a remote server to a local model
            self.engine.request_swap.emit(Engine())
        try:
            facts = facts_from_header(read_header(path))
        except (GGUFError, OSError, KeyError, ValueError) as exc:
            self.show_error(f"Cannot open {Path(path).name}: {exc}")
            return None
        from app.plan import PlanRequest

        plan = make_plan(facts, self.gpus, system_memory(), PlanRequest(n_ctx=n_ctx))
        if not plan.fits:
            self.show_error(f"{Path(path).name} does not fit this machine. {plan.reason} "
                            + " ".join(plan.suggestions))
            return plan
        self.plan = plan
        self.model_label.setText(f"Loading {Path(path).name}…")
        self.plan_label.setText(plan.reason)
        self.load_bar.setValue(0)
        self.load_bar.setVisible(True)
        self.send_button.setEnabled(False)
        self.engine.request_load.emit(str(path), plan.settings())
        return plan

    def use_endpoint(self, endpoint) -> None:
        """Chat with a remote OpenAI-compatible server instead of a local model (the local one is freed)."""
        from app.llama_load import LoadSettings
        from app.remote_engine import RemoteEngine

        if self.generating:
            return
        self.model_info = None
        self.plan = None
        self.model_label.setText(f"Connecting to {endpoint.name}…")
        self.plan_label.setText("Remote engine: tokens/s is measured from the stream, as the server sends it.")
        self.engine.request_swap.emit(RemoteEngine(endpoint))
        self.engine.request_load.emit("", LoadSettings())
        self.pages.setCurrentWidget(self.transcript)

    def show_setup(self) -> None:
        self.pages.setCurrentWidget(self.setup_view)

    def _on_setup_ready(self, path: str) -> None:
        self.pages.setCurrentWidget(self.transcript)
        self.load_model(path)

    def _on_load_progress(self, fraction: float) -> None:
        if self._closing:  # late results of a reply stopped by closing the window
            return
        self.load_bar.setValue(int(fraction * 1000))

    def _on_loaded(self, info) -> None:
        if self._closing:  # late results of a reply stopped by closing the window
            return
        self.model_info = info
        self.load_bar.setVisible(False)
        self.send_button.setEnabled(True)
        thinking = "thinking switch" if info.thinking_switch else "no thinking switch in its template"
        if info.arch == "remote":
            self.model_label.setText(f"{info.name}  ·  remote at {info.path}  ·  tok/s from the stream")
        else:
            self.model_label.setText(f"{info.name}  ·  {info.arch}  ·  {info.n_ctx:,}-token context  ·  {thinking}")
        self.thinking.setEnabled(info.thinking_switch)
        self.pages.setCurrentIndex(1)
        self.model_loaded.emit(info)

    # ------------------------------------------------------------------ conversations

    def _refresh_conversations(self) -> None:
        self.conversation_list.blockSignals(True)
        self.conversation_list.clear()
        for c in self.store.conversations():
            item = QListWidgetItem(c.title)
            item.setData(Qt.ItemDataRole.UserRole, c.id)
            self.conversation_list.addItem(item)
            if c.id == self.conversation_id:
                item.setSelected(True)
        self.conversation_list.blockSignals(False)

    def _on_conversation_selected(self) -> None:
        items = self.conversation_list.selectedItems()
        if items and not self.generating:
            self.open_conversation(items[0].data(Qt.ItemDataRole.UserRole))

    def open_conversation(self, cid: int) -> None:
        self.conversation_id = cid
        conv = self.store.conversation(cid)
        self.system_prompt.setPlainText(conv.system_prompt)
        self.transcript.clear()
        for m in self.store.messages(cid):
            self.transcript.add_message(m.role, m.content, m.reasoning, m.stats,
                                        tool_calls=(m.extra or {}).get("tool_calls"))
        self.pages.setCurrentIndex(1)

    def new_chat(self) -> None:
        if self.generating:
            return
        self.conversation_id = None
        self.transcript.clear()
        self.conversation_list.clearSelection()
        self.input.setFocus()

    def export_conversation(self, path: str | Path, fmt: str) -> None:
        if self.conversation_id is None:
            raise ValueError("no conversation is open")
        text = self.store.export_markdown(self.conversation_id) if fmt == "md" else self.store.export_json(self.conversation_id)
        Path(path).write_text(text, encoding="utf-8")

    def _export_dialog(self, fmt: str) -> None:
        if self.conversation_id is None:
            self.show_error("Open a conversation to export it.")
            return
        title = self.store.conversation(self.conversation_id).title
        path, _ = QFileDialog.getSaveFileName(self, "Export conversation", f"{title[:40]}.{fmt}")
        if path:
            try:
                self.export_conversation(path, fmt)
            except OSError as exc:
                self.show_error(f"Could not export: {exc}")

    # ------------------------------------------------------------------ chatting

    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or self.generating:
            return
        if self.model_info is None:
            self.show_error("Open a model first (Open model…).")
            return
        if self.conversation_id is None:
            title = " ".join(text.split())[:60]
            self.conversation_id = self.store.create(title, self.system_prompt.toPlainText().strip())
            self.transcript.clear()
            self._refresh_conversations()
        else:
            self.store.update(self.conversation_id, system_prompt=self.system_prompt.toPlainText().strip())
        self.input.clear()
        self.store.add(self.conversation_id, "user", text)
        self.transcript.add_message("user", text)
        self._generate()

    def _messages(self) -> list[dict]:
        assert self.conversation_id is not None
        out = []
        system = self.store.conversation(self.conversation_id).system_prompt
        if system:
            out.append({"role": "system", "content": system})
        out += [m.template_message() for m in self.store.messages(self.conversation_id)]
        return out

    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature.value(), top_p=self.top_p.value(),
                              max_tokens=self.max_tokens.value())

    def _generate(self) -> None:
        try:
            tools, schema = self.tools_panel.tools(), self.tools_panel.schema()
        except ToolsError as exc:
            self.show_error(f"The tools panel has a problem: {exc}")
            return
        request = ChatRequest(self._messages(), enable_thinking=self.thinking.isChecked() and self.thinking.isEnabled(),
                              sampling=self.sampling(), tools=tools, json_schema=schema)
        self.generating = True
        self.send_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.transcript.begin_reply()
        self._tokens_seen = 0
        self._first_token_at = None
        self._request_at = time.perf_counter()
        self.readout.setText("waiting for the first token…")
        self._readout_timer.start()
        self.engine.request_generate.emit(request)

    def _on_event(self, kind: str, text: str) -> None:
        if self._closing:  # late results of a reply stopped by closing the window
            return
        if self._first_token_at is None:
            self._first_token_at = time.perf_counter()
        self._tokens_seen += 1
        if kind in ("reasoning", "answer"):
            self.transcript.append(kind, text)  # tool calls are shown as cards when the reply ends

    def _update_readout(self) -> None:
        if self._first_token_at is None:
            return
        elapsed = time.perf_counter() - self._first_token_at
        tps = (self._tokens_seen - 1) / elapsed if elapsed > 0 and self._tokens_seen > 1 else 0.0
        ttft = self._first_token_at - self._request_at
        text = f"{tps:.1f} tok/s · first token {ttft:.2f} s · {self._tokens_seen} tokens"
        if text != self.readout.text():
            self.readout.setText(text)
            self.readout_changed.emit(text)

    def _finish_ui(self) -> None:
        self._readout_timer.stop()
        self.generating = False
        self.send_button.setEnabled(True)
        self.stop_button.setEnabled(False)

    def _on_finished(self, reply: Reply) -> None:
        if self._closing:  # late results of a reply stopped by closing the window
            return
        stats = reply.stats.as_dict()
        if reply.json_value is not None or reply.json_errors:
            stats["json_valid"] = not reply.json_errors
            stats["json_errors"] = reply.json_errors
        widget = self.transcript.end_reply(stats)
        self._finish_ui()
        s = reply.stats
        self.readout.setText(f"{s.generation_tps:.1f} tok/s · first token {s.ttft_seconds:.2f} s · "
                             f"{s.generated_tokens} tokens")
        self.readout_changed.emit(self.readout.text())
        calls = [c.as_template() for c in reply.tool_calls]
        if self.conversation_id is not None:
            self.store.add(self.conversation_id, "assistant", reply.text, reply.reasoning, stats,
                           {"tool_calls": calls} if calls else None)
            self._refresh_conversations()
        self.last_reply = reply
        if calls and widget is not None:
            demo = self.tools_panel.demo.isChecked() and self._tool_rounds < MAX_TOOL_ROUNDS
            results = [run_demo_tool(c.name, c.arguments) for c in reply.tool_calls] if demo else None
            widget.set_tool_calls(calls, [c.errors for c in reply.tool_calls], results, editable=not demo)
            self.reply_finished.emit(reply)
            if demo:
                self._tool_rounds += 1
                self.send_tool_results(widget.position, results)
            return
        self._tool_rounds = 0
        self.reply_finished.emit(reply)

    def send_tool_results(self, position: int, results: list[str]) -> None:
        """Store one tool message per call of the assistant message at `position`, then continue."""
        if self.generating or self.conversation_id is None:
            return
        message = self.store.messages(self.conversation_id)[position]
        calls = (message.extra or {}).get("tool_calls", [])
        widget = self.transcript.messages[position]
        widget.send_results.setVisible(False)
        for card in widget.tool_cards:
            card.result.setReadOnly(True)
        for i, (call, result) in enumerate(zip(calls, results)):
            name = call["function"]["name"]
            self.store.add(self.conversation_id, "tool", result, extra={"name": name, "tool_call_id": f"call_{i}"})
            self.transcript.add_message("tool", result)
        self._generate()

    def _on_failed(self, message: str) -> None:
        if self._closing:  # late results of a reply stopped by closing the window
            return
        if self.generating:
            w = self.transcript.end_reply()
            if w is not None and not w.content:
                self.transcript.remove_from(len(self.transcript.messages) - 1)
            self._finish_ui()
        else:
            self.load_bar.setVisible(False)
            self.send_button.setEnabled(self.model_info is not None)
            self.model_label.setText("No model loaded" if self.model_info is None else self.model_label.text())
        self.show_error(message)

    def stop(self) -> None:
        self.engine.worker.request_stop()

    def regenerate(self, position: int) -> None:
        if self.generating or self.conversation_id is None:
            return
        self.store.truncate(self.conversation_id, position)
        self.transcript.remove_from(position)
        self._generate()

    def edit_message(self, position: int) -> None:
        """Put a user message back into the composer; it and everything after it are removed."""
        if self.generating or self.conversation_id is None:
            return
        text = self.transcript.messages[position].content
        self.store.truncate(self.conversation_id, position)
        self.transcript.remove_from(position)
        self.input.setPlainText(text)
        self.input.setFocus()

    # ------------------------------------------------------------------ status

    def _update_gpu_memory(self) -> None:
        """Memory in use on each GPU, re-read through the same NVML probe the planner uses."""
        try:
            import pynvml

            from app.gpu import probe_with

            p = probe_with(pynvml)
        except ImportError:
            p = None
        if p is None or not p.has_gpu:
            self._gpu_timer.stop()  # NVML went away: keep the last text
            return
        self.status_label.setText(" · ".join(
            f"GPU {g.index}: {g.used_bytes / 2**30:.1f} / {g.total_gib:.1f} GiB used" for g in p.gpus))

    def toggle_server(self) -> None:
        """Start or stop the local OpenAI-compatible server on the engine the chat uses."""
        from app.server import LocalServer

        if self.server is not None:
            self.server.stop()
            self.server = None
            self.server_label.setText("")
            self.server_button.setText("Start local server")
            return
        try:
            self.server = LocalServer(self.engine.worker.engine, api_key=self.api_key.text().strip() or None)
            url = self.server.start()
        except OSError as exc:
            self.server = None
            self.show_error(f"Could not start the local server: {exc}")
            return
        key = " (API key required)" if self.server.api_key else ""
        self.server_label.setText(f"serving {url}{key}")
        self.server_button.setText("Stop server")

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self._closing = True
        self._readout_timer.stop()
        self._gpu_timer.stop()
        for view in (self.setup_view, self.scenarios_view, self.engines_view):
            if view.job is not None:
                view.job.cancel()
                view.job.wait()
        if self.server is not None:
            self.server.stop()
        self.engine.shutdown()
        self.store.close()
        super().closeEvent(event)
