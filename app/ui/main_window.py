"""The main window: the sidebar (pages and conversations), the model bar, the pages (chat, model
browser, set-up, scenarios, engines), the composer, and a side panel for settings and tools.

Long work happens elsewhere: the model loads and generates on the engine thread
(app/ui/base/engine_worker.py); the conversation logic is app/chat/session.py; other jobs are Ops
(app/ui/base/ops.py). Messages for the user go through app/ui/base/messages.py and show in the banner.
Every label that carries a model name or path elides; the side panel scrolls; so the window's
minimum size stays small whatever is loaded or open.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

from PySide6.QtCore import QByteArray, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QGuiApplication, QKeySequence, QMouseEvent, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QDoubleSpinBox,
    QFileDialog,
    QFrame,
    QLabel,
    QMainWindow,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app import APP_NAME
from app.base.paths import app_dirs
from app.base.settings import Settings
from app.chat import markdown_html
from app.chat.session import ChatSession
from app.chat.store import Store
from app.engine.local import Reply, SamplingParams
from app.engine.tool_calls import ToolsError
from app.fetch.catalog import model_key, recommended_for
from app.gguf.gguf_file import GGUFError
from app.machine.gpu import GpuProbe, probe
from app.machine.llama_backend import LlamaBuild, build_info
from app.machine.system_memory import system_memory
from app.model.plan import Plan, PlannedFile, PlanRequest, goal_costs, goal_lines, plan_for_file
from app.ui.base import theme
from app.ui.base.engine_worker import EngineThread
from app.ui.base.messages import messages
from app.ui.base.ops import Op
from app.ui.base.props import props
from app.ui.views.engines_view import EnginesView
from app.ui.views.hub_view import HubView
from app.ui.views.scenarios_view import ScenariosView
from app.ui.views.setup_view import SetupView
from app.ui.views.tune_view import TuneView
from app.ui.widgets.chat_view import Transcript
from app.ui.widgets.composer import Composer
from app.ui.widgets.mcp_round import McpRound
from app.ui.widgets.model_bar import ElidedLabel, ModelBar
from app.ui.widgets.settings_panel import SettingsPanel
from app.ui.widgets.sidebar import Sidebar
from app.ui.widgets.tools_panel import ToolsPanel

if TYPE_CHECKING:
    from app.engine.local import ModelInfo
    from app.engine.protocol import ChatEngine
    from app.engine.remote import Endpoint
    from app.fetch.catalog import CatalogEntry

if TYPE_CHECKING:
    from app.serve.server import LocalServer

READOUT_MS = 250
LOAD_FIRST = "Load a model first (Find a model, or Open model…)"


def _card(title: str, lines: list[tuple[str, str]]) -> QFrame:
    card = props(QFrame(), objectName="card")
    layout = QVBoxLayout(card)
    layout.setContentsMargins(16, 12, 16, 12)
    layout.addWidget(props(QLabel(title), objectName="cardTitle"))
    for style, text in lines:
        label = props(QLabel(text), objectName=style)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(label)
    return card


def machine_lines(gpus: GpuProbe, llama: LlamaBuild | None, llama_error: str | None) -> list[tuple[str, str]]:
    from app.machine.gpu_runtime import readiness

    lines: list[tuple[str, str]] = []
    if gpus.has_gpu:
        for g in gpus.gpus:
            lines.append(("fact", f"{g.name}: {g.total_gib:.1f} GiB, {g.free_gib:.1f} GiB free"))
    else:
        lines.append(("warning", "No NVIDIA GPU found: models run on the CPU."))  # why: Details and doctor
    if llama is not None:
        build = "CUDA" if llama.cuda else "CPU only"
        lines.append(("fact", f"llama.cpp (llama-cpp-python {llama.version}): {build} build; "
                              f"runs on {llama.backend_choice()}"))
        ready = readiness(gpus, llama)
        if gpus.has_gpu and ready.level != "ok":
            lines.append(("warning", ready.text))
    else:
        lines.append(("warning", f"llama.cpp could not be loaded: {llama_error}"))
    return lines


def gpu_advice(gpus: GpuProbe) -> str:
    """The 16 GB / 24 GB guidance in words, for this machine's card (or the lack of one)."""
    if not gpus.has_gpu:
        return ("Without an NVIDIA GPU, Clover runs on the CPU at a few tokens per second. A 24 GB card runs it "
                "entirely on the GPU (about 200 tokens/s on an RTX 4090); a 16 GB card keeps the experts of about "
                "ten blocks in system RAM (about half that speed).")
    gib = max(g.total_gib for g in gpus.gpus)
    if gib >= 23:
        return f"A {gib:.0f} GiB card: Clover fits entirely on the GPU with its full context."
    if gib >= 15:
        return (f"A {gib:.0f} GiB card: the experts of some blocks stay in system RAM; expect about half the speed "
                "of a 24 GB card. Find a model shows the plan for each file.")
    return (f"A {gib:.0f} GiB card: most experts stay in system RAM and speed depends on the CPU; a smaller "
            "quantization helps. Find a model shows the plan for each file.")


class DismissableLabel(QLabel):
    """The error banner: a click hides it."""

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt's name)
        self.setVisible(False)
        super().mousePressEvent(event)


class MainWindow(QMainWindow):
    readout_changed = Signal(str)  # the live tokens/s readout, each time it changes
    reply_finished = Signal(object)  # Reply, after it is shown and saved
    model_loaded = Signal(object)  # ModelInfo
    error_shown = Signal(str)

    def __init__(self, gpus: GpuProbe | None = None, store: Store | None = None, engine: ChatEngine | None = None,
                 allow_http: bool = False, settings: Settings | None = None) -> None:
        super().__init__()
        # the Markdown parser and the common lexers, compiled while the user is still reading
        self.warm_up = threading.Thread(target=markdown_html.warm_up, name="warm-up-highlighting", daemon=True)
        self.warm_up.start()
        QTimer.singleShot(0, self._warm_up_rendering)
        self._allow_http = allow_http
        self.setWindowTitle(APP_NAME)
        self.settings = settings or Settings.load()
        self.gpus = gpus if gpus is not None else probe()
        self.llama: LlamaBuild | None = None
        llama_error = None
        try:
            self.llama = build_info()
        except Exception as exc:  # shown in the window: the rest of the app still works
            llama_error = f"{type(exc).__name__}: {exc}"
        self.store = store or Store(app_dirs().data / "conversations.db")
        self.session = ChatSession(self.store)
        self.engine = EngineThread(engine, parent=self)
        w = self.engine.worker
        w.load_progress.connect(self._on_load_progress)
        w.loaded.connect(self._on_loaded)
        w.streamed.connect(self._on_event)
        w.finished.connect(self._on_finished)
        w.failed.connect(self._on_failed)

        self._closing = False
        self.runtime_op: Op | None = None
        self.model_info: ModelInfo | None = None
        self.model_key: str | None = None
        self.plan: Plan | None = None
        self.planned: PlannedFile | None = None  # the local file's plan, facts and overlay
        self._show_chat_when_loaded = True  # False while tune reloads its model: its chart stays in view
        self.generating = False
        self.last_reply: Reply | None = None
        self._tokens_seen = 0
        self._first_token_at: float | None = None
        self._request_at = 0.0
        self.server: LocalServer | None = None

        self._build(machine_lines(self.gpus, self.llama, llama_error))
        messages().shown.connect(self._on_message)
        self._refresh_conversations()
        if self.store.notice:
            self.show_error(self.store.notice)
        for note in self.settings.notes:
            messages().warning(f"Settings: {note}")
        self._restore_window_state()
        self._offer_last_model()

    # ------------------------------------------------------------------ layout

    def _build(self, machine: list[tuple[str, str]]) -> None:
        self.sidebar = Sidebar()
        self.sidebar.navigate.connect(self.navigate)
        self.sidebar.new_chat.connect(self.new_chat)
        self.sidebar.conversation_selected.connect(self._on_conversation_selected)
        self.sidebar.rename_requested.connect(self.rename_conversation)
        self.sidebar.delete_requested.connect(self.delete_conversation)
        self.sidebar.export_requested.connect(self._export_dialog)
        self.conversation_list = self.sidebar.conversations
        self.chat_button = self.sidebar.nav["chat"]
        self.hub_button = self.sidebar.nav["hub"]
        self.setup_button = self.sidebar.nav["setup"]
        self.scenarios_button = self.sidebar.nav["scenarios"]
        self.engines_button = self.sidebar.nav["engines"]

        main = props(QWidget(), objectName="page")
        ml = QVBoxLayout(main)
        ml.setContentsMargins(12, 10, 12, 10)
        ml.setSpacing(6)
        self.error_banner = props(DismissableLabel(), objectName="errorBanner")
        self.error_banner.setWordWrap(True)
        self.error_banner.setVisible(False)
        self.error_banner.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        ml.addWidget(self.error_banner)
        self.model_bar = ModelBar()
        self.model_bar.open_button.clicked.connect(self._open_dialog)
        self.model_label = self.model_bar.label
        self.load_bar = self.model_bar.load_bar
        self.open_button = self.model_bar.open_button
        ml.addWidget(self.model_bar)
        self.plan_label = ElidedLabel("", "subtitle", Qt.TextElideMode.ElideRight)
        ml.addWidget(self.plan_label)

        self.pages = QStackedWidget()
        self.welcome = self._welcome(machine)
        self.pages.addWidget(self.welcome)
        self.transcript = Transcript()
        self.transcript.edit_requested.connect(self.edit_message)
        self.transcript.regenerate_requested.connect(self.regenerate)
        self.transcript.tool_results_ready.connect(self.send_tool_results)
        self.transcript.highlight = self.settings.get("chat.highlight_code")
        self.transcript.set_colors(theme.code_colors())
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._follow_system_theme)
        self.pages.addWidget(self.transcript)
        self.hub_view = HubView(self.gpus)
        self.hub_view.setup_requested.connect(self.start_setup)
        self.setup_view = SetupView(self.gpus, allow_http=self._allow_http)
        self.setup_view.ready.connect(self._on_setup_ready)
        self.setup_view.browse_requested.connect(self.browse_hub)
        self.scenarios_view = ScenariosView(self)
        self.engines_view = EnginesView()
        self.engines_view.use_endpoint.connect(self.use_endpoint)
        self.tune_view = TuneView(self)
        self.model_bar.tune_button.clicked.connect(lambda: self.navigate("tune"))
        # A page wider or taller than the window scrolls: no page raises the window's minimum size.
        self._page_of = {"welcome": self.welcome, "chat": self.transcript}
        for name, view in (("hub", self.hub_view), ("setup", self.setup_view), ("scenarios", self.scenarios_view),
                           ("engines", self.engines_view), ("tune", self.tune_view)):
            self._page_of[name] = self._scrolling(view) if name != "setup" else view  # set-up scrolls itself
        for page in self._page_of.values():
            self.pages.addWidget(page)
        self.pages.currentChanged.connect(self._on_page_changed)
        ml.addWidget(self.pages, 1)

        self.composer = Composer()
        c = self.composer
        self.input, self.send_button, self.stop_button = c.input, c.send_button, c.stop_button
        self.thinking, self.settings_button, self.tools_button = c.thinking, c.settings_button, c.tools_button
        c.input.submit.connect(self.send)
        c.send_button.clicked.connect(self.send)
        c.stop_button.clicked.connect(self.stop)
        c.thinking.toggled.connect(self._on_thinking_toggled)
        c.settings_button.toggled.connect(lambda on: self._toggle_panel(0, on))
        c.tools_button.toggled.connect(lambda on: self._toggle_panel(1, on))
        c.set_enter_sends(self.settings.get("chat.enter_sends"))
        ml.addWidget(c)

        # the side panel: settings and tools, each in a scroll area so neither raises the window's minimum size
        self.settings_panel = SettingsPanel(self.settings)
        self.settings_panel.changed.connect(self._on_setting_changed)
        editors = self.settings_panel.widgets
        self.system_prompt = cast(QPlainTextEdit, editors["chat.system_prompt"])
        self.temperature = cast(QDoubleSpinBox, editors["sampling.temperature"])
        self.top_p = cast(QDoubleSpinBox, editors["sampling.top_p"])
        self.max_tokens = cast(QSpinBox, editors["sampling.max_tokens"])
        self.api_key = self.settings_panel.api_key
        self.tools_panel = ToolsPanel()
        self.tools_panel.changed.connect(self._update_chips)
        self.mcp_round = McpRound(self, self.tools_panel)
        self.mcp_round.answered.connect(self.send_tool_results)
        self.side_panel = props(QFrame(), objectName="sidePanel")
        sp = QVBoxLayout(self.side_panel)
        sp.setContentsMargins(6, 6, 6, 6)
        self.side_tabs = QTabWidget()
        for widget, title in ((self.settings_panel, "Settings"), (self.tools_panel, "Tools")):
            scroll = props(QScrollArea(), widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
            scroll.setWidget(widget)
            scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
            self.side_tabs.addTab(scroll, title)
        sp.addWidget(self.side_tabs)
        close = QPushButton("Close panel")
        close.clicked.connect(self._close_panel)
        sp.addWidget(close)
        self.side_panel.setMinimumWidth(220)
        self.side_panel.setVisible(False)

        self.splitter = QSplitter()
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(main)
        self.splitter.addWidget(self.side_panel)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([220, 760, 300])
        self.setCentralWidget(self.splitter)

        self.readout = props(QLabel(""), objectName="fact")
        self.readout.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.status_label = ElidedLabel(self.gpus.summary(), "fact", Qt.TextElideMode.ElideRight)
        self.statusBar().addWidget(self.status_label, 1)
        self.server_label = ElidedLabel("", "fact", Qt.TextElideMode.ElideMiddle)
        self.server_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.server_label.setMinimumWidth(60)
        self.server_button = QPushButton("Start local server")
        self.server_button.setToolTip("An OpenAI-compatible endpoint on 127.0.0.1 for other programs, "
                                      "serving the model loaded here")
        self.server_button.clicked.connect(self.toggle_server)
        self.statusBar().addPermanentWidget(self.server_label, 1)
        self.statusBar().addPermanentWidget(self.server_button)
        self.statusBar().addPermanentWidget(self.readout)
        self._readout_timer = QTimer(self)
        self._readout_timer.setInterval(READOUT_MS)
        self._readout_timer.timeout.connect(self._update_readout)
        self._gpu_timer = QTimer(self)
        self._gpu_timer.setInterval(2000)
        self._gpu_timer.timeout.connect(self._update_gpu_memory)
        self._server_timer = QTimer(self)
        self._server_timer.setInterval(1000)
        self._server_timer.timeout.connect(self._update_server_status)
        if self.gpus.has_gpu:
            self._gpu_timer.start()

        QShortcut(QKeySequence("Ctrl+N"), self).activated.connect(self.new_chat)
        QShortcut(QKeySequence("Ctrl+L"), self).activated.connect(self.focus_composer)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self).activated.connect(self.stop)
        self.navigate("welcome")
        self._update_chips()

    def _welcome(self, machine: list[tuple[str, str]]) -> QWidget:
        page = props(QWidget(), objectName="page")
        wl = QVBoxLayout(page)
        title = props(QLabel(APP_NAME), objectName="title")
        wl.addWidget(title)
        intro = props(QLabel("Clover-35B-A3B on your own NVIDIA card. “Find a model” searches the Hugging Face Hub and "
                       "plans every file for this machine before anything is downloaded; “Open model…” takes a "
                       "GGUF you have."), objectName="subtitle")
        intro.setWordWrap(True)
        wl.addWidget(intro)
        self.machine_card = _card("This machine", machine + [("fact", gpu_advice(self.gpus))])
        wl.addWidget(self.machine_card)
        self.runtime_button = props(QPushButton(), objectName="primary")
        self.runtime_button.clicked.connect(self.install_gpu_runtime)
        self.runtime_bar = props(QProgressBar(), maximum=1000, textVisible=False)
        self.runtime_status = props(QLabel(), objectName="fact", wordWrap=True)
        wl.addWidget(self.runtime_button, 0, Qt.AlignmentFlag.AlignLeft)
        wl.addWidget(self.runtime_bar)
        wl.addWidget(self.runtime_status)
        for w in (self.runtime_button, self.runtime_bar, self.runtime_status):
            w.setVisible(False)
        self._show_runtime_offer()
        self.find_button = props(QPushButton("Find a model"), objectName="primary")
        self.find_button.clicked.connect(lambda: self.navigate("hub"))
        wl.addWidget(self.find_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.last_model_button = QPushButton("")
        self.last_model_button.setVisible(False)
        self.last_model_button.clicked.connect(lambda: self.load_model(self.settings.get("model.last_path")))
        wl.addWidget(self.last_model_button, 0, Qt.AlignmentFlag.AlignLeft)
        wl.addStretch(1)
        scroll = props(QScrollArea(), widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        scroll.setWidget(page)
        return scroll

    # ------------------------------------------------------------------ the GPU runtime

    def _show_runtime_offer(self) -> None:
        """The cuBLAS runtime download, offered when it is what stands between this GPU and CUDA."""
        from app.machine.gpu_runtime import files_for_platform, readiness

        ready = readiness(self.gpus, self.llama) if self.gpus.has_gpu else None
        offer = ready is not None and ready.can_install
        if offer:
            size = sum(f.size for f in files_for_platform()) / 1e6
            self.runtime_button.setText(f"Install the GPU runtime ({size:.0f} MB)")
        self.runtime_button.setVisible(offer)

    def install_gpu_runtime(self) -> None:
        """Download, verify and unpack the runtime in the background, with progress and Cancel."""
        from app.machine import gpu_runtime

        if self.runtime_op is not None:
            self.runtime_op.cancel()
            return

        def done(folder: Path) -> None:
            self.runtime_op = None
            self.runtime_button.setVisible(False)
            self.runtime_bar.setVisible(False)
            self.runtime_status.setText(f"The GPU runtime is installed in {folder}. Restart Clover Launcher to use "
                                        "the GPU.")
            messages().info("GPU runtime installed: restart to use the GPU")

        def failed(exc: BaseException) -> None:
            self.runtime_op = None
            self.runtime_button.setText("Retry the GPU runtime download")
            self.runtime_bar.setVisible(False)
            self.runtime_status.setText(f"The GPU runtime was not installed: {exc}")

        def progress(_step: str, fraction: float, text: str) -> None:
            self.runtime_bar.setRange(0, 0 if fraction < 0 else 1000)
            self.runtime_bar.setValue(int(max(fraction, 0) * 1000))
            self.runtime_status.setText(text)

        self.runtime_bar.setVisible(True)
        self.runtime_status.setVisible(True)
        self.runtime_button.setText("Cancel")
        self.runtime_op = (Op(self, lambda ctx: gpu_runtime.install(ctx.report, ctx.is_cancelled), name="GPU runtime")
                           .progress(progress).success(done).failure(failed).run())

    # ------------------------------------------------------------------ pages

    @staticmethod
    def _scrolling(view: QWidget) -> QScrollArea:
        scroll = props(QScrollArea(), widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        scroll.setWidget(view)
        return scroll

    def current_page(self) -> str:
        return next(n for n, p in self._page_of.items() if p is self.pages.currentWidget())

    def navigate(self, name: str) -> None:
        self.pages.setCurrentWidget(self._page_of[name])
        self.sidebar.set_page(name)
        if name == "hub" and self.hub_view.results.count() == 0 and not self.hub_view.query.text():
            self.hub_view.query.setFocus()

    def _on_page_changed(self, _index: int) -> None:
        self.composer.setVisible(self.current_page() in ("chat", "welcome"))

    def show_setup(self) -> None:
        self.navigate("setup")

    def browse_hub(self, query: str) -> None:
        self.navigate("hub")
        self.hub_view.search(query)

    def start_setup(self, entry: CatalogEntry) -> None:
        """Set up a file picked in the model browser: it joins the catalog and the set-up starts."""
        from app.fetch.catalog import add_user_entry, load_catalog

        if not any(e.id == entry.id and not e.user for e in load_catalog()):
            add_user_entry(entry)
        self.setup_view.refresh(select=entry.id)
        self.navigate("setup")
        self.setup_view.start()

    def _toggle_panel(self, tab: int, on: bool) -> None:
        other = self.tools_button if tab == 0 else self.settings_button
        if on:
            other.blockSignals(True)
            other.setChecked(False)
            other.blockSignals(False)
            self.side_tabs.setCurrentIndex(tab)
        self.side_panel.setVisible(on)

    def _close_panel(self) -> None:
        for b in (self.settings_button, self.tools_button):
            b.setChecked(False)
        self.side_panel.setVisible(False)

    # ------------------------------------------------------------------ messages

    def show_error(self, message: str) -> None:
        messages().error(message)

    def _on_message(self, level: str, text: str) -> None:
        if level == "info":
            self.statusBar().showMessage(text, 8000)
            return
        self.error_banner.setText(text + "   (click to dismiss)")
        self.error_banner.setVisible(True)
        if level == "error":
            self.error_shown.emit(text)

    # ------------------------------------------------------------------ window state

    def _restore_window_state(self) -> None:
        geometry = self.settings.get("ui.geometry")
        if geometry:
            self.restoreGeometry(QByteArray.fromBase64(geometry.encode()))
        else:
            self.resize(1100, 720)
        state = self.settings.get("ui.state")
        if state:
            self.splitter.restoreState(QByteArray.fromBase64(state.encode()))
            self.side_panel.setVisible(False)
        self.fit_to_screen()

    def fit_to_screen(self) -> None:
        """Keep the window on a screen that shows it, no larger than that screen's available area."""
        screen = QGuiApplication.screenAt(self.frameGeometry().center()) or QGuiApplication.primaryScreen()
        if screen is None:
            return
        area = screen.availableGeometry()
        width, height = min(self.width(), area.width()), min(self.height(), area.height())
        if (width, height) != (self.width(), self.height()):
            self.resize(width, height)
        frame = self.frameGeometry()
        x = min(max(frame.x(), area.x()), area.right() - frame.width() + 1)
        y = min(max(frame.y(), area.y()), area.bottom() - frame.height() + 1)
        if (x, y) != (frame.x(), frame.y()):
            self.move(max(x, area.x()), max(y, area.y()))

    def _warm_up_rendering(self) -> None:
        """Lay out one answer with a code block and a table, unseen, once the window is up: Qt loads the
        monospace font and the rich-text machinery then, not in the middle of the first reply."""
        from app.ui.widgets.markdown_view import MarkdownView

        view = MarkdownView()
        view.set_style(self.transcript.colors, self.transcript.highlight)
        view.set_markdown("Warm `up`:\n\n```python\nx = 1\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
        view.ensurePolished()
        view.resize(600, 400)
        view.heightForWidth(600)
        view.grab()  # paints it offscreen, never on screen
        view.deleteLater()

    def focus_composer(self) -> None:
        self.navigate("chat")
        self.input.setFocus()

    def _save_window_state(self) -> None:
        self.settings.set("ui.geometry", bytes(self.saveGeometry().toBase64().data()).decode())
        self.settings.set("ui.state", bytes(self.splitter.saveState().toBase64().data()).decode())
        self.settings.save()

    def _offer_last_model(self) -> None:
        last = self.settings.get("model.last_path")
        if not last or not Path(last).is_file():
            return
        if self.settings.get("model.reload_last"):
            QTimer.singleShot(0, lambda: self.load_model(last) if self.model_info is None else None)
        else:
            self.last_model_button.setText(f"Load {Path(last).name} again")
            self.last_model_button.setVisible(True)

    # ------------------------------------------------------------------ settings

    def _on_setting_changed(self, key: str, value: object) -> None:
        if key == "chat.enter_sends":
            self.composer.set_enter_sends(bool(value))
        elif key == "ui.theme":
            theme.apply(cast(QApplication, QApplication.instance()), str(value))
            self.transcript.set_colors(theme.code_colors())
        elif key == "chat.highlight_code":
            self.transcript.highlight = bool(value)

    def _follow_system_theme(self, *_args: object) -> None:
        if self.settings.get("ui.theme") == "system":
            theme.apply(cast(QApplication, QApplication.instance()), "system")
            self.transcript.set_colors(theme.code_colors())

    def _on_thinking_toggled(self, on: bool) -> None:
        if self.thinking.isEnabled() and self.model_key:
            self.settings.set("chat.thinking", bool(on), self.model_key)
            self.settings.save()

    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature.value(), top_p=self.top_p.value(),
                              max_tokens=self.max_tokens.value())

    # ------------------------------------------------------------------ model

    def _open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a GGUF model", str(app_dirs().models), "GGUF models (*.gguf)")
        if path:
            self.load_model(path)

    def engine_in_use(self) -> str | None:
        """Why the loaded model cannot be swapped or lent now (a reply or the scenario bench runs on
        it), or None."""
        if self.generating:
            return "Stop the reply first: a model cannot be swapped while it writes."
        if self.scenarios_view.running:
            return "Stop the scenario bench first: it runs on the loaded model."
        return None

    def lend_engine(self, status: str) -> ChatEngine | None:
        """Free the chat's model for a job that needs its memory (tune): the engine thread swaps in an
        empty engine and unloads the old one, which is returned so the job can wait for that. None,
        with the reason shown, while a reply or the scenario bench uses the model."""
        from app.engine.local import Engine

        busy = self.engine_in_use()
        if busy is not None:
            self.show_error(busy)
            return None
        old = self.engine.worker.engine
        self.engine.request_swap.emit(Engine())
        self.model_info = None
        self.send_button.setEnabled(False)
        self.model_bar.set_model(status)
        return old

    def load_model(self, path: str | Path, n_ctx: int | None = None, *, show_chat: bool = True) -> Plan | None:
        """Plan the model for this machine and load it on the engine thread (a local engine); once
        loaded, the chat is shown unless `show_chat` is False (tune reloads the model under its chart)."""
        from app.engine.local import Engine

        busy = self.engine_in_use()
        if busy is not None:
            self.show_error(busy)
            return None
        if self.engine.worker.engine.kind == "remote":  # back from a remote server to a local model
            self.engine.request_swap.emit(Engine())
        try:
            planned = plan_for_file(path, self.gpus, system_memory(), PlanRequest(n_ctx=n_ctx),
                                    threads=self.settings.get("engine.threads"),
                                    speculative=self.settings.get("engine.speculative"))
        except (GGUFError, OSError, KeyError, ValueError) as exc:
            self.show_error(f"Cannot open {Path(path).name}: {exc}")
            return None
        plan = planned.plan
        if not plan.fits:
            self.show_error(f"{Path(path).name} does not fit this machine. {plan.reason} "
                            + " ".join(plan.suggestions))
            return plan
        self.plan = plan
        self.planned = planned
        self.model_bar.set_model(f"Loading {Path(path).name}…")
        self.plan_label.setText(" · ".join(x for x in (plan.reason, planned.overlay, planned.tuned) if x))
        self.load_bar.setValue(0)
        self.load_bar.setVisible(True)
        self.send_button.setEnabled(False)
        self._show_chat_when_loaded = show_chat
        self.engine.request_load.emit(str(path), planned.settings)
        return plan

    def use_endpoint(self, endpoint: Endpoint) -> None:
        """Chat with a remote OpenAI-compatible server instead of a local model (the local one is freed)."""
        from app.engine.remote import RemoteEngine
        from app.machine.llama_load import LoadSettings

        if self.generating:
            return
        self.model_info = None
        self.plan = None
        self.model_bar.set_model(f"Connecting to {endpoint.name}…")
        self.plan_label.setText("Remote engine: tokens/s is measured from the stream, as the server sends it.")
        self.engine.request_swap.emit(RemoteEngine(endpoint))
        self.engine.request_load.emit("", LoadSettings())
        self.navigate("chat")

    def _on_setup_ready(self, path: str) -> None:
        self.navigate("chat")
        self.load_model(path)

    def _on_load_progress(self, fraction: float) -> None:
        if self._closing:  # late results of a reply stopped by closing the window
            return
        self.load_bar.setValue(int(fraction * 1000))

    def _on_loaded(self, info: ModelInfo) -> None:
        if self._closing:
            return
        self.model_info = info
        if self.error_banner.text().startswith(LOAD_FIRST):  # done: the banner would only mislead now
            self.error_banner.setVisible(False)
        self.load_bar.setVisible(False)
        self.send_button.setEnabled(True)
        if info.arch == "remote":
            self.model_key = None
            self.model_bar.set_model(f"{info.name} · remote at {info.path} · tok/s from the stream",
                                     "Speed is measured from the stream, as the server sends it.")
        else:
            self.model_key = model_key(info.path)
            if self.settings.first_load(self.model_key, recommended_for(info.path)):
                self.settings.save()
            self.settings.set("model.last_path", str(info.path))
            self.settings.save()
            self.settings_panel.set_model(self.model_key)
            details = "\n".join(self.plan.lines()) if self.plan is not None else ""
            planned = self.planned
            if planned is not None and self.plan is not None and self.plan.cpu_moe_blocks:
                costs = goal_lines(goal_costs(planned.facts, self.gpus, system_memory()), narrow=True)
                details += "\n\n" + "\n".join(costs) if costs else ""
            notes = [] if info.thinking_switch else ["Its chat template has no thinking switch."]
            if not self.gpus.has_gpu:
                notes.append(f"No NVIDIA GPU found: {self.gpus.message}.")
            if info.chat_template_from_model and not info.tools_in_template:
                notes.append("Its chat template ignores tools: offered tools do not reach the model.")
            overlay = f" · {planned.overlay}" if planned is not None and planned.overlay else ""
            self.model_bar.set_model(f"{info.name} · {info.arch} · {info.n_ctx:,}-token context{overlay}",
                                     "\n".join(notes + ([""] if notes else []) + [f"File: {info.path}", details]),
                                     self.plan)
        self.thinking.setEnabled(info.thinking_switch)
        self.thinking.setChecked(info.thinking_switch and bool(self.settings.get("chat.thinking", self.model_key)))
        self.model_bar.tune_button.setEnabled(info.arch != "remote")
        self._update_chips()
        self._update_server_status()
        if self._show_chat_when_loaded:
            self.navigate("chat")
        self._show_chat_when_loaded = True
        self.model_loaded.emit(info)

    def _update_chips(self) -> None:
        """Say what is on that the user might not see: tools offered (and whether the template reads
        them), no thinking switch."""
        chips = []
        try:
            tools = self.tools_panel.all_tools()
        except ToolsError:
            tools = None
        info = self.model_info
        if tools:
            if info is not None and getattr(info, "chat_template_from_model", False) and not info.tools_in_template:
                chips.append(f"⚠ {len(tools)} tool(s) offered, but this model's template ignores tools")
            else:
                chips.append(f"🔧 {len(tools)} tool(s) offered")
        if self.tools_panel.schema_enabled():
            chips.append("{ } answers constrained to a JSON schema")
        if info is not None and not info.thinking_switch:
            chips.append("no thinking switch in this template")
        self.composer.set_chips(chips)
        self.model_bar.set_chips([c for c in chips if c.startswith("⚠")])

    # ------------------------------------------------------------------ conversations

    @property
    def conversation_id(self) -> int | None:
        return self.session.conversation_id

    def _refresh_conversations(self) -> None:
        self.sidebar.fill(self.store.conversations(), self.session.conversation_id)

    def _on_conversation_selected(self, cid: int) -> None:
        if not self.generating:
            self.open_conversation(cid)

    def open_conversation(self, cid: int) -> None:
        self.session.open(cid)
        conv = self.store.conversation(cid)
        self.system_prompt.blockSignals(True)
        self.system_prompt.setPlainText(conv.system_prompt)
        self.system_prompt.blockSignals(False)
        self.transcript.clear()
        for m in self.store.messages(cid):
            self.transcript.add_message(m.role, m.content, m.reasoning, m.stats,
                                        tool_calls=(m.extra or {}).get("tool_calls"))
        self.navigate("chat")

    def new_chat(self) -> None:
        if self.generating:
            return
        self.session.new()
        self.transcript.clear()
        self.conversation_list.clearSelection()
        self.navigate("chat")
        self.input.setFocus()

    def rename_conversation(self, cid: int, title: str) -> None:
        self.store.update(cid, title=title)
        self._refresh_conversations()

    def delete_conversation(self, cid: int) -> None:
        if self.generating and cid == self.session.conversation_id:
            self.show_error("Stop the reply before deleting its conversation.")
            return
        self.store.delete(cid)
        if cid == self.session.conversation_id:
            self.session.new()
            self.transcript.clear()
        self._refresh_conversations()

    def export_conversation(self, path: str | Path, fmt: str) -> None:
        cid = self.session.conversation_id
        if cid is None:
            raise ValueError("no conversation is open")
        text = self.store.export_markdown(cid) if fmt == "md" else self.store.export_json(cid)
        Path(path).write_text(text, encoding="utf-8")

    def _export_dialog(self, fmt: str) -> None:
        if self.session.conversation_id is None:
            self.show_error("Open a conversation to export it.")
            return
        title = self.store.conversation(self.session.conversation_id).title
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
            self.show_error(LOAD_FIRST)
            return
        self.navigate("chat")
        created = self.session.add_user(text, self.system_prompt.toPlainText())
        if created:
            self.transcript.clear()
            self._refresh_conversations()
        self.input.clear()
        self.transcript.add_message("user", text)
        self._generate()

    def _generate(self) -> None:
        try:
            tools, schema = self.tools_panel.all_tools(), self.tools_panel.schema()
        except ToolsError as exc:
            self.show_error(f"The tools panel has a problem: {exc}")
            return
        request = self.session.request(thinking=self.thinking.isChecked() and self.thinking.isEnabled(),
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
        if self._closing:
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
        if self._closing:
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
        self.last_reply = reply
        if self.session.conversation_id is None:
            self.reply_finished.emit(reply)
            return
        recorded = self.session.record_reply(reply, stats, demo_tools=self.tools_panel.demo.isChecked(),
                                             mcp=self.tools_panel.mcp.toolbox,
                                             reserved=self.tools_panel.reserved_names())
        self._refresh_conversations()
        if recorded.calls and widget is not None:
            widget.set_tool_calls(recorded.calls, [c.errors for c in reply.tool_calls], recorded.demo_results,
                                  editable=recorded.demo_results is None and not recorded.mcp_pending)
            self.reply_finished.emit(reply)
            if recorded.demo_results is not None:
                self.send_tool_results(recorded.position, recorded.demo_results)
            elif recorded.mcp_pending:
                self.mcp_round.ask(recorded, widget)
            return
        self.reply_finished.emit(reply)

    def send_tool_results(self, position: int, results: list[str]) -> None:
        """Store one tool message per call of the assistant message at `position`, then continue."""
        if self.generating or self.session.conversation_id is None:
            return
        widget = self.transcript.messages[position]
        widget.send_results.setVisible(False)
        for card in widget.tool_cards:
            card.result.setReadOnly(True)
        self.session.add_tool_results(position, results)
        for result in results:
            self.transcript.add_message("tool", result)
        self._generate()

    def _on_failed(self, message: str) -> None:
        if self._closing:
            return
        if self.generating:
            w = self.transcript.end_reply()
            if w is not None and not w.content:
                self.transcript.remove_from(len(self.transcript.messages) - 1)
            self._finish_ui()
        else:
            self.load_bar.setVisible(False)
            self.send_button.setEnabled(self.model_info is not None)
            self._show_chat_when_loaded = True  # a load that failed: the next one shows the chat again
            if self.model_info is None:
                self.model_bar.set_model("No model loaded")
        self.show_error(message)

    def stop(self) -> None:
        self.engine.worker.request_stop()

    def regenerate(self, position: int) -> None:
        if self.generating or self.session.conversation_id is None:
            return
        self.session.truncate(position)
        self.transcript.remove_from(position)
        self._generate()

    def edit_message(self, position: int) -> None:
        """Put a user message back into the composer; it and everything after it are removed."""
        if self.generating or self.session.conversation_id is None:
            return
        text = self.transcript.messages[position].content
        self.session.truncate(position)
        self.transcript.remove_from(position)
        self.input.setPlainText(text)
        self.input.setFocus()

    # ------------------------------------------------------------------ status

    def _update_gpu_memory(self) -> None:
        """Memory in use on each GPU, re-read through the same NVML probe the planner uses."""
        try:
            import pynvml

            from app.machine.gpu import probe_with

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
        from app.serve.server import LocalServer

        if self.server is not None:
            self.server.stop()
            self.server = None
            self._server_timer.stop()
            self.server_label.setText("")
            self.server_button.setText("Start local server")
            return
        try:
            self.server = LocalServer(self.engine.worker.engine, api_key=self.api_key.text().strip() or None,
                                      port=self.settings.get("server.port"),
                                      engine_source=lambda: self.engine.worker.engine)
            self.server_url = self.server.start()
        except OSError as exc:
            self.server = None
            self.show_error(f"Could not start the local server: {exc}")
            return
        self.server_button.setText("Stop server")
        self._server_timer.start()
        self._update_server_status()

    def _update_server_status(self) -> None:
        """The server line follows the engine: serving a model, no model, or a remote engine."""
        if self.server is None:
            return
        engine = self.engine.worker.engine
        key = " · API key required" if self.server.api_key else ""
        moved = f" (port {self.settings.get('server.port')} was taken)" if self.server.port != self.settings.get(
            "server.port") else ""
        if not engine.loaded:
            text = f"no model loaded: {self.server_url} answers 503{moved}"
        elif engine.kind != "local":
            text = f"the chat uses a remote engine: {self.server_url} answers 503{moved}"
        else:
            text = f"serving {self.server_url}{moved} · {engine.info.name if engine.info else '?'}{key}"
        self.server_label.setText(text)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        from app.ui.base.ops import running_ops

        self._closing = True
        self._readout_timer.stop()
        self._gpu_timer.stop()
        self._server_timer.stop()
        try:
            messages().shown.disconnect(self._on_message)
        except (RuntimeError, TypeError):
            pass
        self._save_window_state()
        ops = running_ops()
        for op in ops:
            op.cancel()
        deadline = time.monotonic() + 3.0  # a job that polls its cancel flag ends now; one blocked on
        for op in ops:                     # the network is left behind (its thread dies with the app)
            op.wait(int(max(0.0, deadline - time.monotonic()) * 1000))
        if self.server is not None:
            self.server.stop()
        self.tools_panel.mcp.close_servers()
        self.engine.shutdown()
        self.store.close()
        super().closeEvent(event)
