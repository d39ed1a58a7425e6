"""The Berkeley Function Calling Leaderboard's test files, brought to this machine as models are:
downloaded once, resumable, checked by SHA-256, kept. No Qt.

The files come from the `bfcl-eval` package on PyPI (a 1.9 MB wheel, pinned with its SHA-256 in
resources/bfcl/source.json, Apache-2.0): it carries the dataset BFCL's own runner reads, the same
files as the Hub's `gorilla-llm/Berkeley-Function-Calling-Leaderboard`, at a version that matches
the checker. Only the data is taken out of it; none of its code is installed or run. Where the same
version of the package is installed in this Python (the tests install it), its data folder is used
as it is.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.base.paths import app_dirs, resource
from app.fetch.no_connection import sentence
from app.net.download import DownloadCancelled, Downloader, DownloadError, DownloadPaused, Progress

URL_OVERRIDE = "CLOVER_BFCL_URL"  # another address for the same wheel (a mirror; the tests' local server)
STAMP = ".complete"


@dataclass(frozen=True)
class Source:
    name: str
    version: str
    package: str
    url: str
    sha256: str
    size: int
    data_prefix: str
    licence: str
    authors: str
    homepage: str
    source: str

    @property
    def label(self) -> str:
        return f"BFCL v4 ({self.package} {self.version})"

    def credit(self) -> str:
        """The dataset's origin and licence, in one sentence (the app and the docs show it)."""
        return (f"Test cases: {self.name}, by {self.authors}, {self.licence}; taken from the {self.package} "
                f"{self.version} package ({self.source}).")


class DatasetUnavailable(Exception):
    """The dataset is not here and could not be fetched: the message is one sentence for the user."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


def source() -> Source:
    return Source(**json.loads(resource("bfcl", "source.json").read_text(encoding="utf-8")))


def kept_folder(src: Source | None = None) -> Path:
    src = src or source()
    return app_dirs().data / "bfcl" / src.version


def installed_folder(src: Source | None = None) -> Path | None:
    """The data folder of the same version of the package installed in this Python (found, not imported:
    importing bfcl_eval would pull in its vendor SDKs)."""
    src = src or source()
    try:
        if importlib.metadata.version(src.package) != src.version:
            return None
        spec = importlib.util.find_spec(src.package.replace("-", "_"))
    except (importlib.metadata.PackageNotFoundError, ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    return folder if folder.is_dir() else None


def local_folder(src: Source | None = None) -> Path | None:
    """The dataset already on this machine, or None."""
    kept = kept_folder(src)
    if (kept / STAMP).exists():
        return kept
    return installed_folder(src)


def _extract(wheel: Path, src: Source, target: Path) -> None:
    """The wheel's data files into `target`, whole or not at all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".bfcl-", dir=target.parent))
    try:
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if n.startswith(src.data_prefix) and not n.endswith("/")]
            if not any(n.endswith("BFCL_v4_simple_python.json") for n in names):
                raise DatasetUnavailable(f"{wheel.name} holds no BFCL data under {src.data_prefix}")
            for name in names:
                rel = Path(name[len(src.data_prefix):])
                if rel.is_absolute() or ".." in rel.parts:
                    continue
                out = tmp / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                with z.open(name) as f_in, open(out, "wb") as f_out:
                    shutil.copyfileobj(f_in, f_out)
        (tmp / STAMP).write_text(json.dumps({"sha256": src.sha256, "version": src.version}) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    except zipfile.BadZipFile as exc:
        raise DatasetUnavailable(f"{wheel.name} is not a readable package: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_dataset(progress: Callable[[Progress], None] | None = None,
                   cancel: Callable[[], bool] | None = None, src: Source | None = None) -> Path:
    """The dataset's folder: the one on this machine, else downloaded (resuming a part left by an
    earlier try) and unpacked. DatasetUnavailable says in one sentence why it could not be had."""
    src = src or source()
    here = local_folder(src)
    if here is not None:
        return here
    url = os.environ.get(URL_OVERRIDE) or src.url
    wheel = app_dirs().cache / "bfcl" / url.rsplit("/", 1)[-1].split("?", 1)[0]
    try:
        Downloader().download(url, wheel, sha256=src.sha256, size=src.size, progress=progress, cancel=cancel)
    except (DownloadCancelled, DownloadPaused):
        raise
    except DownloadError as exc:
        text, detail = sentence(exc, url)
        if detail:  # no connection: say what works without one
            text = (f"The BFCL test files are not on this machine yet and there is no connection to fetch them "
                    f"({src.size / 1e6:.1f} MB from PyPI); the app's own scenarios run offline.")
        raise DatasetUnavailable(text, detail) from exc
    target = kept_folder(src)
    _extract(wheel, src, target)
    wheel.unlink(missing_ok=True)
    return target
