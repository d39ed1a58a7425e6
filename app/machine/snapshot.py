"""This machine, read once: its GPUs, its system RAM and the llama.cpp build. No Qt.

The planner, tune's cache and the reports need the same three facts. A `Machine` is made where a
run starts (the window, a command) and passed down, so that one plan is made against one picture of
the machine and no module reads the RAM or asks llama.cpp for its build on its own. `refreshed()`
reads the RAM again (it changes as programs start and stop) for a plan that is about to commit
memory (a load). The build is read on first use: planning a file from the Hub needs no llama.cpp,
and a llama.cpp that cannot be loaded is an answer (`build` None, `build_error` says why), not a
failure of the snapshot.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from app.machine.system_memory import SystemMemory, system_memory

if TYPE_CHECKING:
    from app.machine.gpu import GpuProbe
    from app.machine.llama_backend import LlamaBuild


@dataclass(frozen=True)
class _Build:
    """The llama.cpp build, read once per snapshot (shared by its refreshed copies)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    value: list = field(default_factory=list)  # [] until read, then [(build or None, the exception or None)]

    def get(self) -> tuple[LlamaBuild | None, Exception | None]:
        with self.lock:
            if not self.value:
                from app.machine.llama_backend import build_info

                try:
                    self.value.append((build_info(), None))
                except Exception as exc:  # no usable llama.cpp: said where it matters, the rest still works
                    self.value.append((None, exc))
            return self.value[0]


@dataclass(frozen=True)
class Machine:
    gpus: GpuProbe
    ram: SystemMemory
    _build: _Build = field(default_factory=_Build, repr=False, compare=False)

    @classmethod
    def read(cls, gpus: GpuProbe | None = None) -> Machine:
        """The machine now; `gpus` replaces the NVML probe (tests, a what-if)."""
        if gpus is None:
            from app.machine.gpu import probe

            gpus = probe()
        return cls(gpus, system_memory())

    def refreshed(self) -> Machine:
        """The same machine with its available RAM read again (the GPUs and the build stay)."""
        return replace(self, ram=system_memory())

    @property
    def build(self) -> LlamaBuild | None:
        """The llama.cpp build, or None when llama.cpp cannot be loaded (`build_error` says why)."""
        return self._build.get()[0]

    @property
    def build_error(self) -> str | None:
        """Why llama.cpp could not be loaded, in words (None when it was)."""
        exc = self._build.get()[1]
        return f"{type(exc).__name__}: {exc}" if exc is not None else None

    def require_build(self) -> LlamaBuild:
        """The llama.cpp build; raises what loading it raised (for reports that show the failure as it is)."""
        build, exc = self._build.get()
        if build is None:
            raise exc if exc is not None else RuntimeError("llama.cpp could not be loaded")
        return build

    def identity(self) -> tuple[str, str]:
        """(GPU, build) strings a tune result is kept for; ("", "") without llama.cpp: nothing was
        tuned with it either."""
        from app.machine.tune import machine_identity

        build = self.build
        return machine_identity(self.gpus, build) if build is not None else ("", "")
