"""The main window assembles the parts: the icon rail (places), the conversations (Chat's), the model
bar, the pages (welcome, chat, Models with its tabs, server, scenarios, tune, settings), the composer,
a side panel for settings and tools, and the status bar.

It owns no job of its own. The model, its plan and the engine thread are the ModelController's;
the turn loop and its readout the ChatController's; conversations, the local server and GPU polling
have a controller each (app/ui/controllers/). Long jobs are Ops (app/ui/base/ops.py); messages for
the user go through app/ui/base/messages.py and show in the banner. Every label that carries a model
name or path elides and the side panel scrolls, so the window's minimum size stays small.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from PySide6.QtCore import QByteArray, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QGuiApplication, QKeySequence, QPaintEvent, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QMainWindow,
    QPushButton,
    QScrollArea,
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
from app.machine.gpu import GpuProbe
from app.machine.snapshot import Machine
from app.ui.base import theme, window_fit
from app.ui.base.messages import messages
from app.ui.base.props import props
from app.ui.controllers.chat_controller import LOAD_FIRST, ChatController
from app.ui.controllers.conversations import Conversations
from app.ui.controllers.gpu_monitor import GpuMonitor
from app.ui.controllers.model_controller import ModelController
from app.ui.controllers.server_controller import ServerController
from app.ui.views.bfcl_view import BfclView
from app.ui.views.downloads_view import DownloadsBridge, DownloadsView, ResumeBanner, ask_before_closing
from app.ui.views.engines_view import EnginesView
from app.ui.views.hub_view import HubView
from app.ui.views.models_view import ModelsView
from app.ui.views.my_models_view import MyModelsView
from app.ui.views.scenarios_view import ScenariosView
from app.ui.views.server_view import ServerView
from app.ui.views.settings_view import SettingsView
from app.ui.views.setup_view import SetupView
from app.ui.views.tune_view import TuneView
from app.ui.widgets.banner import Banner
from app.ui.widgets.chat_view import Transcript
from app.ui.widgets.composer import Composer
from app.ui.widgets.mcp_round import McpRound
from app.ui.widgets.model_bar import ElidedLabel, ModelBar
from app.ui.widgets.nav_rail import NavRail, place_of
from app.ui.widgets.place_tabs import PlaceTabs
from app.ui.widgets.settings_panel import SettingsPanel
from app.ui.widgets.shortcuts_sheet import SHORTCUTS, ShortcutsSheet
from app.ui.widgets.sidebar import Sidebar
from app.ui.widgets.status_bar import StatusBar
from app.ui.widgets.tools_panel import ToolsPanel
from app.ui.widgets.welcome import WelcomePage

if TYPE_CHECKING:
    from app.engine.contract import ChatEngine, ModelInfo
    from app.engine.remote import Endpoint
    from app.fetch.setup_pipeline import SetupSource


class MainWindow(QMainWindow):
    error_shown = Signal(str)

    def __init__(self, gpus: GpuProbe | None = None, store: Store | None = None, engine: ChatEngine | None = None,
                 allow_http: bool = False, settings: Settings | None = None) -> None:
        super().__init__()
        # what can wait for the window to show: each runs once its first frame is painted
        self._after_first_paint: list[Callable[[], None]] = []
        # the Markdown parser and the common lexers, compiled while the user is still reading
        self.warm_up = threading.Thread(target=markdown_html.warm_up, name="warm-up-highlighting", daemon=True)
        self._after_first_paint += [self.warm_up.start, self._warm_up_rendering]
        self.setWindowTitle(APP_NAME)
        self.settings = settings or Settings.load()
        if self.settings.get("ui.font_scale") != theme.font_scale():  # the text size chosen last time
            theme.set_font_scale(self.settings.get("ui.font_scale"))
        # this machine, read once: GPUs, RAM and the llama.cpp build (a failing llama.cpp is shown in
        # the window, the rest of the app still works)
        self.machine = Machine.read(gpus)
        self.gpus = self.machine.gpus
        self.store = store or Store(app_dirs().data / "conversations.db")
        self.model = ModelController(self.machine, self.settings, engine, parent=self)
        self._build(allow_http)
        messages().shown.connect(self._on_message)
        if self.store.notice:
            messages().error(self.store.notice)
        for note in self.settings.notes:
            messages().warning(f"Settings: {note}")
        self._restore_window_state()
        self._offer_last_model()

    # ------------------------------------------------------------------ layout

    def _build(self, allow_http: bool) -> None:
        self.sidebar = Sidebar()  # the Chat place's conversations, beside the rail
        self.rail = NavRail()
        self.rail.navigate.connect(self.navigate)
        main = props(QWidget(), objectName="page")
        ml = QVBoxLayout(main)
        ml.setContentsMargins(12, 10, 12, 10)
        ml.setSpacing(6)
        self.error_banner = Banner()  # a message's sentence; its details behind "Details"; a click dismisses
        ml.addWidget(self.error_banner)
        self.downloads = DownloadsBridge.for_app(self)  # every download and set-up, for the Downloads place
        self.resume_banner = ResumeBanner(self.downloads)  # what the last run left unfinished
        ml.addWidget(self.resume_banner)
        self.model_bar = ModelBar()
        self.model_bar.open_button.clicked.connect(self._open_dialog)
        self.model_bar.find_button.clicked.connect(lambda: self.navigate("hub"))
        self.model_bar.picker.opening.connect(self._fill_picker)
        self.model_bar.popup.chosen.connect(self._choose_model)
        self.model_bar.eject_button.clicked.connect(lambda: self.model.eject())
        self.model_bar.tune_button.clicked.connect(self._tune_loaded)
        self.model_bar.popup.tune_requested.connect(self.tune_model)
        ml.addWidget(self.model_bar)
        self.plan_label = ElidedLabel("", "subtitle", Qt.TextElideMode.ElideRight)
        ml.addWidget(self.plan_label)

        self.welcome = WelcomePage(self.gpus)  # its machine facts need llama.cpp loaded: after the first frame
        self._after_first_paint.append(lambda: self.welcome.set_build(self.machine.build, self.machine.build_error))
        self.welcome.find_requested.connect(lambda: self.navigate("hub"))
        self.welcome.load_requested.connect(self.model.load)
        self.welcome.setup_requested.connect(self.set_up)
        self.welcome.open_requested.connect(self._open_dialog)
        self.transcript = Transcript()
        self.transcript.highlight = self.settings.get("chat.highlight_code")
        self.transcript.set_colors(theme.code_colors())
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._follow_system_theme)
        self.hub_view = HubView(self.machine)
        self.hub_view.setup_requested.connect(self.start_setup)
        self.hub_view.catalog_requested.connect(self.set_up)
        self.hub_view.load_requested.connect(self._on_setup_ready)
        self.setup_view = SetupView(self.machine, allow_http=allow_http, downloads=self.downloads)
        self.setup_view.ready.connect(self._on_setup_ready)
        self.setup_view.browse_requested.connect(self.browse_hub)
        self.scenarios_view = ScenariosView(self.model)
        self.bfcl_view = BfclView(self.model)  # the Scenarios place's second part: BFCL's function-calling tests
        self.engines_view = EnginesView()
        self.engines_view.use_endpoint.connect(self._use_endpoint)
        self.tune_view = TuneView(self.model)
        self.my_models_view = MyModelsView(self.model)
        self.my_models_view.load_requested.connect(self._on_setup_ready)
        self.my_models_view.open_requested.connect(self._open_dialog)
        self.my_models_view.tune_requested.connect(self.tune_model)
        self.settings_view = SettingsView(self.settings)  # the Settings place: all but the chat's own
        self.settings_form = self.settings_view.form
        self.settings_form.changed.connect(self._on_setting_changed)
        # A page wider or taller than the window scrolls: no page raises the window's minimum size.
        self.pages = QStackedWidget()
        self._page_of: dict[str, QWidget] = {"welcome": self.welcome, "chat": self.transcript}
        tabs: dict[str, QWidget] = {"setup": self.setup_view}  # set-up scrolls itself
        for name, view in (("hub", self.hub_view), ("my_models", self.my_models_view), ("engines", self.engines_view)):
            tabs[name] = self._scrolling(view)
        self.models_view = ModelsView(tabs)  # the Models place: its tabs keep their page names
        self._page_of |= dict.fromkeys(tabs, self.models_view)
        self.downloads_view = DownloadsView(self.downloads)
        self.downloads_view.summary_changed.connect(self.rail.show_downloads)
        self.scenarios_place = PlaceTabs([("Article's scenarios", self._scrolling(self.scenarios_view)),
                                          ("Function calling (BFCL v4)", self._scrolling(self.bfcl_view))])
        self._page_of |= {"scenarios": self.scenarios_place, "tune": self._scrolling(self.tune_view),
                          "settings": self.settings_view, "downloads": self._scrolling(self.downloads_view)}
        for page in dict.fromkeys(self._page_of.values()):
            self.pages.addWidget(page)
        self.pages.currentChanged.connect(self._on_page_changed)
        ml.addWidget(self.pages, 1)

        self.composer = Composer()
        self.composer.settings_button.toggled.connect(lambda on: self._toggle_panel(0, on))
        self.composer.tools_button.toggled.connect(lambda on: self._toggle_panel(1, on))
        self.composer.set_enter_sends(self.settings.get("chat.enter_sends"))
        ml.addWidget(self.composer)
        self.splitter = QSplitter()
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(main)
        self.splitter.addWidget(self._side_panel())
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([220, 760, 300])
        central = QWidget()
        row = QHBoxLayout(central)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        row.addWidget(self.rail)
        row.addWidget(self.splitter, 1)
        self.setCentralWidget(central)
        self.status = StatusBar(self.gpus.summary())
        self.setStatusBar(self.status)
        self._controllers()
        self.shortcuts: dict[str, QShortcut] = {}  # one per line of the shortcuts sheet, bound from it
        for keys, _what, method in SHORTCUTS:
            shortcut = self.shortcuts[keys] = QShortcut(QKeySequence(keys), self)
            shortcut.activated.connect(getattr(self, method))
        self.navigate("welcome")

    def _side_panel(self) -> QFrame:
        """Settings and tools, each in a scroll area so neither raises the window's minimum size."""
        self.settings_panel = SettingsPanel(self.settings)
        self.settings_panel.changed.connect(self._on_setting_changed)
        self.tools_panel = ToolsPanel()
        self.side_panel = props(QFrame(), objectName="sidePanel", minimumWidth=220, visible=False)
        sp = QVBoxLayout(self.side_panel)
        sp.setContentsMargins(6, 6, 6, 6)
        self.side_tabs = QTabWidget()
        for widget, title in ((self.settings_panel, "Chat settings"), (self.tools_panel, "Tools")):
            scroll = props(QScrollArea(), widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
            scroll.setWidget(widget)
            scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
            self.side_tabs.addTab(scroll, title)
        sp.addWidget(self.side_tabs)
        close = QPushButton("Close panel")
        close.clicked.connect(self._close_panel)
        sp.addWidget(close)
        return self.side_panel

    def _controllers(self) -> None:
        """The controllers, and the widgets that show what they say."""
        m = self.model
        m.loading.connect(self._on_loading)
        m.progress.connect(lambda f: self.model_bar.load_bar.setValue(int(f * 1000)))
        m.loaded.connect(self._on_loaded)
        m.failed.connect(lambda _message: self.model_bar.load_bar.setVisible(False))
        m.ejected.connect(self._on_ejected)
        m.status.connect(self.model_bar.set_model)
        self.mcp_round = McpRound(self, self.tools_panel)
        self.chat = ChatController(m, ChatSession(self.store), self.settings, self.transcript, self.composer,
                                   self.settings_panel, self.tools_panel, self.mcp_round)
        self.chat.chat_wanted.connect(lambda: self.navigate("chat"))
        self.chat.readout_changed.connect(self.status.readout.setText)
        self.chat.warnings_changed.connect(self.model_bar.set_chips)
        self.chat.update_chips()
        self.conversations = Conversations(self.chat, self.store, self.sidebar)
        self.conversations.opened.connect(lambda: self.navigate("chat"))
        self.conversations.reopen_last()
        self.server = ServerController(m, self.settings, lambda: self.settings_form.api_key.text())
        self.server.status_changed.connect(self.status.set_server_line)
        self.server.running_changed.connect(self.status.server_running)
        self.status.server_button.clicked.connect(self.server.toggle)
        # the Settings page's Server section: Start/Stop too, and the address for each client
        self.settings_form.server.toggle.connect(self.server.toggle)
        self.server_view = ServerView(self.server)  # the Server page: on/off, clients, the request inspector
        self._page_of["server"] = self._scrolling(self.server_view)
        self.pages.addWidget(self._page_of["server"])
        self.settings_form.server.inspect.connect(lambda: self.navigate("server"))
        self.server.status_changed.connect(lambda _line: self._show_server())
        self.server.running_changed.connect(lambda _on: self._show_server())
        self.settings_form.api_key.textChanged.connect(lambda _text: self._show_server())
        self._show_server()
        self.gpu_monitor = GpuMonitor(self)
        self.gpu_monitor.changed.connect(self.status.status_label.setText)
        if self.gpus.has_gpu:
            self.gpu_monitor.start()

    def _show_server(self) -> None:
        """The Local server section: running or not, and the address clients use (the port it got, or
        the one it will ask for)."""
        from app.ui.controllers.server_controller import HOST

        served = self.server.server
        port = served.port if served is not None else self.settings.get("server.port")
        self.settings_form.server.set_address(f"http://{HOST}:{port}", self.settings_form.api_key.text().strip())
        self.settings_form.server.set_running(served is not None, self.server.line)
        self.server_view.refresh()

    # ------------------------------------------------------------------ pages

    @staticmethod
    def _scrolling(view: QWidget) -> QScrollArea:
        scroll = props(QScrollArea(), widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        scroll.setWidget(view)
        return scroll

    def current_page(self) -> str:
        page = self.pages.currentWidget()
        if page is self.models_view:
            return self.models_view.current()
        return next(n for n, p in self._page_of.items() if p is page)

    def navigate(self, name: str) -> None:
        """Go to a page or a place ("models": its tab shown last); the conversations show in Chat only."""
        name = self.models_view.current() if name == "models" else name
        if name in self.models_view.names:
            self.models_view.show_page(name)
        self.pages.setCurrentWidget(self._page_of[name])
        self.rail.set_page(name)
        self.sidebar.setVisible(place_of(name) == "chat")
        if name == "hub" and self.hub_view.results.count() == 0 and not self.hub_view.query.text():
            self.hub_view.query.setFocus()

    def set_up(self, entry_id: str) -> None:
        """Set up a catalog entry (the welcome's first steps): on the Set up tab, as its button would."""
        self.navigate("setup")
        self.setup_view.set_up(entry_id)

    def _on_page_changed(self, _index: int) -> None:
        self.composer.setVisible(self.current_page() in ("chat", "welcome"))

    def show_setup(self) -> None:
        self.navigate("setup")

    def browse_hub(self, query: str) -> None:
        self.navigate("hub")
        self.hub_view.search(query)

    def start_setup(self, source: SetupSource) -> None:
        """Set up a file picked in the model browser, with the plan the browser made for it."""
        self.navigate("setup")
        self.setup_view.start_from(source)

    def _toggle_panel(self, tab: int, on: bool) -> None:
        other = self.composer.tools_button if tab == 0 else self.composer.settings_button
        if on:
            other.blockSignals(True)
            other.setChecked(False)
            other.blockSignals(False)
            self.side_tabs.setCurrentIndex(tab)
        self.side_panel.setVisible(on)

    def _close_panel(self) -> None:
        for b in (self.composer.settings_button, self.composer.tools_button):
            b.setChecked(False)
        self.side_panel.setVisible(False)

    # ------------------------------------------------------------------ keyboard (app/ui/widgets/shortcuts_sheet.py)

    def new_chat(self) -> None:
        self.conversations.new_chat()

    def focus_search(self) -> None:
        if self.sidebar.isHidden():  # the conversations are Chat's
            self.navigate("chat")
        focus = getattr(self.sidebar, "focus_search", None)  # the conversation list's search box
        if callable(focus):
            focus()

    def stop_reply(self) -> None:
        self.chat.stop()

    def copy_last_answer(self) -> None:
        self.chat.copy_last_answer()

    def regenerate_last(self) -> None:
        self.chat.regenerate_last()

    def larger_text(self) -> None:
        self.set_font_scale(theme.font_scale() + theme.SCALE_STEP)

    def smaller_text(self) -> None:
        self.set_font_scale(theme.font_scale() - theme.SCALE_STEP)

    def reset_text(self) -> None:
        self.set_font_scale(1.0)

    def set_font_scale(self, scale: float) -> None:
        """Scale every font of the window, and remember it."""
        used = theme.set_font_scale(scale)
        self.settings.set("ui.font_scale", used)
        self.settings.save()
        self.status.showMessage(f"Text size {round(used * 100)} %", 3000)

    def show_shortcuts(self) -> None:
        self.shortcuts_sheet = ShortcutsSheet(self)
        self.shortcuts_sheet.open()

    def focus_composer(self) -> None:
        self.navigate("chat")
        self.composer.input.setFocus()

    # ------------------------------------------------------------------ messages

    def _on_message(self, level: str, text: str, details: str = "") -> None:
        if level == "info":
            self.status.showMessage(text, 8000)
            return
        self.error_banner.show_message(text, details)
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
        """Keep the window on a screen that shows it, its frame inside that screen's available area."""
        window_fit.fit_to_screen(self)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        super().paintEvent(event)
        if self._after_first_paint:
            jobs, self._after_first_paint = self._after_first_paint, []
            for job in jobs:
                QTimer.singleShot(0, job)

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

    def _save_window_state(self) -> None:
        self.settings.set("ui.geometry", bytes(self.saveGeometry().toBase64().data()).decode())
        self.settings.set("ui.state", bytes(self.splitter.saveState().toBase64().data()).decode())
        self.settings.save()

    def _offer_last_model(self) -> None:
        last = self.settings.get("model.last_path")
        if not last or not Path(last).is_file():
            return
        if self.settings.get("model.reload_last"):
            QTimer.singleShot(0, lambda: self.model.load(last) if self.model.info is None else None)
        else:
            self.welcome.offer_last_model(last)

    # ------------------------------------------------------------------ settings

    def _on_setting_changed(self, key: str, value: object) -> None:
        if key == "chat.enter_sends":
            self.composer.set_enter_sends(bool(value))
        elif key == "ui.theme":
            theme.apply(cast(QApplication, QApplication.instance()), str(value))
            self.transcript.set_colors(theme.code_colors())
        elif key == "ui.font_scale":
            theme.set_font_scale(float(cast(float, value)))
        elif key == "chat.highlight_code":
            self.transcript.highlight = bool(value)
        elif key == "server.port":
            self._show_server()

    def _follow_system_theme(self, *_args: object) -> None:
        if self.settings.get("ui.theme") == "system":
            theme.apply(cast(QApplication, QApplication.instance()), "system")
            self.transcript.set_colors(theme.code_colors())

    # ------------------------------------------------------------------ the model, shown

    def _fill_picker(self) -> None:
        models, plans = self.model.local_models()
        info = self.model.info
        current = Path(info.path).resolve() if info is not None and info.arch != "remote" else None
        self.model_bar.popup.set_models(models, plans, current)

    def tune_model(self, path: str) -> None:
        """My models' and the picker's Tune: the sweep for that file, its chart filling in as it measures."""
        self.navigate("tune")
        self.tune_view.tune(path)

    def _tune_loaded(self) -> None:
        """The model bar's Tune: the page, for the loaded model (the Tune button there starts it)."""
        info = self.model.info
        if info is not None and info.arch != "remote":
            self.tune_view.show_model(info.path)
        self.navigate("tune")

    def _choose_model(self, path: str) -> None:
        info = self.model.info
        if info is None or info.arch == "remote" or Path(info.path).resolve() != Path(path).resolve():
            self.model.load(path)

    def _on_ejected(self) -> None:
        self.model_bar.tune_button.setEnabled(False)
        self.plan_label.setText("")

    def _open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a GGUF model", str(app_dirs().models), "GGUF models (*.gguf)")
        if path:
            self.model.load(path)

    def _use_endpoint(self, endpoint: Endpoint) -> None:
        if self.model.use_endpoint(endpoint):
            self.navigate("chat")

    def _on_setup_ready(self, path: str) -> None:
        self.navigate("chat")
        self.model.load(path)

    def _on_loading(self, title: str, plan: str) -> None:
        self.model_bar.set_model(title)
        self.plan_label.setText(plan)
        self.model_bar.load_bar.setValue(0)
        self.model_bar.load_bar.setVisible(True)

    def _on_loaded(self, info: ModelInfo) -> None:
        if self.error_banner.text().startswith(LOAD_FIRST):  # done: the banner would only mislead now
            self.error_banner.setVisible(False)
        self.model_bar.load_bar.setVisible(False)
        if info.arch != "remote":
            self.settings_panel.set_model(self.model.key)
            self.settings_form.set_model(self.model.key)
        title, details = self.model.describe(info)
        self.model_bar.set_model(title, details, self.model.plan if info.arch != "remote" else None)
        self.model_bar.tune_button.setEnabled(info.arch != "remote")
        if self.model.show_chat:
            self.navigate("chat")
            self.composer.input.setFocus()  # the next thing to do is to type: a loaded model is for chatting

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        from app.ui.base.ops import running_ops

        if not ask_before_closing(self, self.downloads.downloads):  # Keep downloading: the window stays
            event.ignore()
            return
        self.model.closing = True
        self.gpu_monitor.stop()
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
        self.server.stop()
        self.tools_panel.mcp.close_servers()
        self.model.shutdown()
        self.conversations.finish_delete()  # closing is not an Undo: a deleted conversation goes now
        self.store.close()
        super().closeEvent(event)
