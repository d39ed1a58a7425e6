"""The local OpenAI-compatible server (app/serve/server.py) on the engine the chat uses: start, stop,
and a line that says what it serves, kept current. Its settings are held to the rules of `python -m
app serve` (app/serve/headless.py `listen_problem`), a refusal shown as a sentence in the banner.
The requests it answered stay in one log (app/serve/request_log.py) while the app runs, across a stop
and a start; `requests_changed` tells the window, on its own thread, that the log changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal

from app.serve.request_log import Entry, RequestLog
from app.ui.base.messages import messages

if TYPE_CHECKING:
    from app.base.settings import Settings
    from app.serve.server import LocalServer
    from app.ui.controllers.model_controller import ModelController


HOST = "127.0.0.1"  # the window serves this machine only (`python -m app serve --host` can serve others)


class ServerController(QObject):
    running_changed = Signal(bool)
    status_changed = Signal(str)  # what the server serves now, in words ("" when stopped)
    requests_changed = Signal()  # a request was answered (emitted on the server's thread: Qt queues it)

    def __init__(self, model: ModelController, settings: Settings, api_key: Callable[[], str]) -> None:
        super().__init__(model)
        self.model, self.settings, self._api_key = model, settings, api_key
        self.server: LocalServer | None = None
        self.url = ""
        self.line = ""  # what the server serves now, in words ("" when stopped)
        self._timer = QTimer(self)
        self._timer.setInterval(1000)
        self._timer.timeout.connect(self.update_status)
        model.loaded.connect(lambda _info: self.update_status())
        self.requests = RequestLog()
        self.requests.listeners.append(self._heard)

    def _heard(self, _entry: Entry) -> None:
        self.requests_changed.emit()

    def address(self) -> str:
        """http://HOST:PORT: the port the server got, or the one it will ask for."""
        port = self.server.port if self.server is not None else self.settings.get("server.port")
        return f"http://{HOST}:{port}"

    def key(self) -> str:
        """The API key clients send ("" when none is asked)."""
        return self._api_key().strip()

    def toggle(self) -> None:
        """Start or stop the server on the engine the chat uses."""
        from app.serve.headless import listen_problem
        from app.serve.server import LocalServer

        if self.server is not None:
            self.stop()
            return
        port, key = self.settings.get("server.port"), self._api_key().strip() or None
        problem = listen_problem(HOST, port, key, window=True)  # the rules `python -m app serve` keeps
        if problem is not None:
            messages().error(problem)
            return
        try:
            self.server = LocalServer(self.model.engine, host=HOST, api_key=key, port=port,
                                      engine_source=lambda: self.model.engine, requests=self.requests)
            self.url = self.server.start()
        except (OSError, OverflowError) as exc:  # OverflowError: a taken port near 65535, the next ones tried
            self.server = None
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            messages().error(f"Could not start the local server on port {port}: {why}.")
            return
        self._timer.start()
        self.running_changed.emit(True)
        self.update_status()

    def stop(self) -> None:
        self._timer.stop()
        if self.server is not None:
            self.server.stop()
            self.server = None
            self.line = ""
            self.running_changed.emit(False)
            self.status_changed.emit("")

    def update_status(self) -> None:
        """The server line follows the engine: serving a model, no model, or a remote engine."""
        if self.server is None:
            return
        engine = self.model.engine
        key = " · API key required" if self.server.api_key else ""
        port = self.settings.get("server.port")
        moved = f" (port {port} was taken)" if self.server.port != port else ""
        # the URL first: the status bar elides the line at its end, never inside the URL
        if not engine.loaded:
            text = f"{self.url} answers 503: no model loaded{moved}"
        elif engine.kind == "remote":  # as the server's own test (LocalServer.serving)
            text = f"{self.url} answers 503: the chat uses a remote engine{moved}"
        else:
            text = f"{self.url} serves {self.server.model_id() or '?'}{moved}{key}"
        self.line = text
        self.status_changed.emit(text)
