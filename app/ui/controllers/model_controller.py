"""The model the window chats with: the engine thread, the loaded model, its plan, and who is using
it. Views that need the model (tune, the scenario bench, the local server, the chat) take this
controller; none reaches into the window for it.

Loading plans the file for this machine (app/model/plan.py, the one path from a file to load
settings) and hands the settings to the engine thread; the result comes back as `loaded` or
`failed`. Lending frees the model's memory for a job that loads its own copy (tune). A job that
runs on the model claims it (`claim`) so that nothing swaps the model under it. Eject frees the
model and keeps the engine. Each load is remembered for the model picker's list (`local_models`:
app/model/local_models.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.engine.planned_load import fit_problem
from app.fetch.catalog import model_key, recommended_for
from app.gguf.gguf_file import GGUFError
from app.model.local_models import LocalModel, LocalModels, plan_summary
from app.model.plan import Plan, PlannedFile, PlanRequest, goal_costs, goal_lines, plan_for_file
from app.ui.base.engine_worker import EngineThread, EngineWorker, window_engine
from app.ui.base.messages import messages

if TYPE_CHECKING:
    from app.base.settings import Settings
    from app.engine.contract import ChatEngine, ModelInfo
    from app.engine.remote import Endpoint
    from app.machine.gpu import GpuProbe
    from app.machine.snapshot import Machine

# why the model cannot be swapped or lent while a job runs on it, by the job's name
BUSY = {"chat": "Stop the reply first: a model cannot be swapped while it writes.",
        "bench": "Stop the bench first (Scenarios): it runs on the loaded model."}


def file_title(path: str | Path) -> str:
    """How the window names a model file: its file name without .gguf."""
    name = Path(path).name
    return name[:-5] if name.lower().endswith(".gguf") else name


class ModelController(QObject):
    loading = Signal(str, str)  # the model bar's text ("Loading x…"), the plan in words
    progress = Signal(float)  # load progress, 0..1
    loaded = Signal(object)  # ModelInfo, once the controller's state says so
    failed = Signal(str)  # a load that failed (already shown to the user)
    generation_failed = Signal(str)  # a reply that failed on the engine thread
    status = Signal(str)  # the model bar's text when there is no model to describe
    state_changed = Signal()  # ready or not: what the window's buttons follow
    busy_changed = Signal(bool)  # a job runs on the model (a reply, the bench)
    ejected = Signal()  # the model was unloaded by hand: none is loaded now

    def __init__(self, machine: Machine, settings: Settings, engine: ChatEngine | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.machine, self.settings = machine, settings  # the window's snapshot, its RAM read again per load
        self.engine_thread = EngineThread(engine, parent=self)
        self.info: ModelInfo | None = None
        self.key: str | None = None  # the settings key of the loaded local model
        self.planned: PlannedFile | None = None  # the local file's plan, facts and overlay
        self.is_loading = False
        self.show_chat = True  # False while tune reloads its model: its chart stays in view
        self.closing = False
        self._users: dict[str, str] = {}
        self.library = LocalModels()
        self._plans: dict[tuple[Path, int, float], str] = {}  # plan words by file, size and time written
        w = self.engine_thread.worker
        w.load_progress.connect(self._on_progress)
        w.loaded.connect(self._on_loaded)
        w.load_failed.connect(self._on_load_failed)
        w.reply_failed.connect(self._on_reply_failed)
        w.restarting.connect(self._on_restarting)

    # ------------------------------------------------------------------ state

    @property
    def worker(self) -> EngineWorker:
        return self.engine_thread.worker

    @property
    def engine(self) -> ChatEngine:
        """The engine in use now (a local one, or a remote server's)."""
        return self.engine_thread.worker.engine

    @property
    def gpus(self) -> GpuProbe:
        return self.machine.gpus

    @property
    def plan(self) -> Plan | None:
        return self.planned.plan if self.planned is not None else None

    @property
    def ready(self) -> bool:
        """A model is loaded and no other load is under way: the chat can send."""
        return self.info is not None and not self.is_loading

    def claim(self, job: str) -> None:
        """`job` ("chat", "bench") runs on the model until `release`: it is not swapped meanwhile."""
        self._users[job] = BUSY[job]
        self.busy_changed.emit(True)

    def release(self, job: str) -> None:
        if self._users.pop(job, None) is not None:
            self.busy_changed.emit(bool(self._users))

    def busy_with(self, job: str) -> bool:
        return job in self._users

    def in_use(self) -> str | None:
        """Why the model cannot be swapped or lent now, or None."""
        return next(iter(self._users.values()), None)

    # ------------------------------------------------------------------ changing the model

    def _refused(self) -> bool:
        busy = self.in_use()
        if busy is not None:
            messages().error(busy)
        return busy is not None

    def lend(self, status: str) -> ChatEngine | None:
        """Free the chat's model for a job that needs its memory (tune): the engine thread swaps in an
        empty engine and unloads the old one, which is returned so the job can wait for that. None,
        with the reason shown, while a reply or the scenario bench uses the model."""
        if self._refused():
            return None
        old = self.engine
        self.engine_thread.request_swap.emit(window_engine())
        self.info = None
        self.state_changed.emit()
        self.status.emit(status)
        return old

    def load(self, path: str | Path, n_ctx: int | None = None, *, show_chat: bool = True) -> Plan | None:
        """Plan the model for this machine and load it on the engine thread (a local engine); once
        loaded, the chat is shown unless `show_chat` is False (tune reloads the model under its chart)."""
        if self._refused():
            return None
        if self.engine.kind == "remote":  # back from a remote server to a local model
            self.engine_thread.request_swap.emit(window_engine())
        try:
            clients = self.settings.get("server.parallel")  # above 1, the chat keeps a slot of its own
            self.machine = self.machine.refreshed()  # the RAM free now, as the load is about to use it
            slots = 0 if clients == 0 else clients + 1 if clients > 1 else 1  # 0: the plan's (automatic)
            request = PlanRequest(n_ctx=n_ctx, parallel=slots, reproducible=self.settings.get("engine.reproducible"))
            planned = plan_for_file(path, self.machine, request,
                                    threads=self.settings.get("engine.threads"),
                                    speculative=self.settings.get("engine.speculative"),
                                    cache_ram_mb=self.settings.get("cache.ram_mb"),
                                    cache_disk_gb=self.settings.get("cache.disk_gb"))
        except (GGUFError, OSError, KeyError, ValueError) as exc:
            messages().error(f"Cannot open {Path(path).name}: {exc}")
            return None
        template = self.settings.get("chat.template", model_key(path))  # "": the file's own
        if template:
            planned = replace(planned, settings=replace(planned.settings, chat_template=template))
        plan = planned.plan
        problem = fit_problem(path, planned)
        if problem is not None:
            messages().error(problem)
            return plan
        self.planned = planned
        self.is_loading, self.show_chat = True, show_chat
        self.state_changed.emit()
        self.loading.emit(f"Loading {Path(path).name}…",
                          " · ".join(x for x in (plan.reason, planned.overlay, planned.tuned) if x))
        self.engine_thread.request_load.emit(str(path), planned)  # loaded as planned (app.engine.planned_load)
        return plan

    def eject(self) -> bool:
        """Unload the model and free its memory (a remote server's: back to a local engine, empty).
        False, with the reason shown, while a job runs on it; False when none is loaded."""
        if self.info is None or self.is_loading or self._refused():
            return False
        # a swap unloads the engine's model on the engine thread, after what is queued there
        self.engine_thread.request_swap.emit(window_engine() if self.engine.kind == "remote" else self.engine)
        self.info, self.key, self.planned = None, None, None
        self.state_changed.emit()
        self.status.emit("No model loaded")
        self.ejected.emit()
        return True

    def local_models(self) -> tuple[list[LocalModel], dict[Path, str]]:
        """The models on this machine for the picker, and each one's plan in a few words (read and
        planned once per file version)."""
        models = self.library.models()
        plans: dict[Path, str] = {}
        for m in models:
            try:
                stat = m.path.stat()
            except OSError:  # gone since it was listed: the next opening drops it
                continue
            key = (m.path, stat.st_size, stat.st_mtime)
            if key not in self._plans:
                self._plans[key] = plan_summary(m.path, self.machine)
            plans[m.path] = self._plans[key]
        return models, plans

    def use_endpoint(self, endpoint: Endpoint) -> bool:
        """Chat with a remote OpenAI-compatible server instead of a local model (the local one is
        freed). False while a reply is being written."""
        from app.engine.remote import RemoteEngine

        if self.busy_with("chat"):
            return False
        self.info, self.planned, self.is_loading = None, None, True
        self.state_changed.emit()
        self.loading.emit(f"Connecting to {endpoint.name}…",
                          "Remote engine: tokens/s is measured from the stream, as the server sends it.")
        self.engine_thread.request_swap.emit(RemoteEngine(endpoint))
        self.engine_thread.request_connect.emit()
        return True

    def stop(self) -> None:
        """Stop the reply (or load) under way, as soon as the engine can."""
        self.worker.request_stop()

    def shutdown(self) -> None:
        self.closing = True
        self.engine_thread.shutdown()

    # ------------------------------------------------------------------ results from the engine thread

    def _on_progress(self, fraction: float) -> None:
        if not self.closing:
            self.progress.emit(fraction)

    def _on_loaded(self, info: ModelInfo) -> None:
        if self.closing:
            return
        self.info, self.is_loading = info, False
        if info.arch == "remote":
            self.key = None
        else:
            self.key = model_key(info.path)
            self.settings.first_load(self.key, recommended_for(info.path))
            if info.template_note:  # no chat template in the file, or one chosen in the settings
                messages().info(info.template_note)
            self.settings.set("model.last_path", str(info.path))
            self.settings.save()
            try:
                self.library.used(info.path)
            except OSError as exc:  # the list only forgets when it was used: say so, load on
                messages().warning(f"Could not note the model as used: {exc}")
        self.state_changed.emit()
        self.loaded.emit(info)
        self.show_chat = True

    def _on_reply_failed(self, message: str) -> None:
        if not self.closing:
            self.generation_failed.emit(message)

    def _on_restarting(self, why: str) -> None:
        """The engine process died under a reply: the same model loads again into a fresh one."""
        if self.closing:
            return
        self.is_loading = True
        self.state_changed.emit()
        name = Path(self.info.path).name if self.info is not None else "the model"
        planned = self.planned  # the same plan: the error line says what stopped
        detail = " · ".join(x for x in (planned.plan.reason, planned.overlay, planned.tuned) if x) if planned else ""
        self.loading.emit(f"Loading {name} again after the engine stopped…", detail)

    def _on_load_failed(self, message: str) -> None:
        if self.closing:
            return
        self.is_loading, self.show_chat = False, True  # a load that failed: the next one shows the chat again
        if not self.engine.loaded:  # a load frees the model before it reads the next: none is left
            self.info = None
        self.state_changed.emit()
        if self.info is None:
            self.status.emit("No model loaded")
        messages().error(message)
        self.failed.emit(message)

    # ------------------------------------------------------------------ in words

    def describe(self, info: ModelInfo) -> tuple[str, str]:
        """(the model bar's line, its details) for a loaded model."""
        if info.arch == "remote":
            return (f"{info.name} · remote at {info.path} · tok/s from the stream",
                    "Speed is measured from the stream, as the server sends it.")
        plan, planned = self.plan, self.planned
        details = "\n".join(plan.lines()) if plan is not None else ""
        if planned is not None and plan is not None and plan.cpu_moe_blocks:
            costs = goal_lines(goal_costs(planned.facts, self.machine.gpus, self.machine.ram), narrow=True)
            details += "\n\n" + "\n".join(costs) if costs else ""
        notes = [] if info.thinking_switch else ["Its chat template has no thinking switch."]
        if not self.gpus.has_gpu:
            notes.append(f"No NVIDIA GPU found: {self.gpus.message}.")
        if info.chat_template_from_model and not info.tools_in_template:
            notes.append("Its chat template ignores tools: offered tools do not reach the model.")
        if info.drafting:
            notes.append(f"Speculative decoding: {info.drafting}.")
        overlay = f" · {planned.overlay}" if planned is not None and planned.overlay else ""
        # the file the user picked, not the name written inside it (general.name is often a
        # training-run label such as "Smollm2 135M 8k Lc100K Mix1 Ep2")
        shown = file_title(info.path)
        inside = [f"Named inside the file: {info.name}"] if info.name and info.name != shown else []
        return (f"{shown} · {info.arch} · {info.n_ctx:,}-token context{overlay}",
                "\n".join(notes + ([""] if notes else []) + [f"File: {info.path}", *inside, details]))


def model_label(model: ModelController) -> str:
    """The loaded model as the window names it: its file's name (a server's model: its own name)."""
    info = model.engine.info
    if info is None:
        return ""
    return info.name if model.engine.kind == "remote" else file_title(info.path)
