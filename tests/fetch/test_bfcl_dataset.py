"""The BFCL test files reach the machine as models do: from a server (a local one on 127.0.0.1 here),
checked by SHA-256, resumed after a drop, unpacked whole or not at all, one sentence offline."""

from __future__ import annotations

import dataclasses
import hashlib
import socket
import zipfile
from pathlib import Path

import pytest

from app.bench.bfcl_cases import load_cases
from app.fetch import bfcl_dataset
from app.fetch.bfcl_dataset import DatasetUnavailable, ensure_dataset
from tests.helpers.http_server import ServerState, serve

PREFIX = "bfcl_eval/data/"


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    """A wheel-shaped zip holding a small BFCL data folder (two categories) and some code beside it."""
    path = tmp_path / "bfcl_eval-2026.3.23-py3-none-any.whl"
    case = ('{"id": "simple_python_0", "question": [[{"role": "user", "content": "Area of a 10 by 5 triangle?"}]], '
            '"function": [{"name": "area", "description": "Area.", "parameters": {"type": "dict", "properties": '
            '{"base": {"type": "integer", "description": "b"}}, "required": ["base"]}}]}\n')
    answer = '{"id": "simple_python_0", "ground_truth": [{"area": {"base": [10]}}]}\n'
    irrelevant = ('{"id": "irrelevance_0", "question": [[{"role": "user", "content": "Hi"}]], "function": '
                  '[{"name": "area", "description": "Area.", "parameters": {"type": "dict", "properties": {}, '
                  '"required": []}}]}\n')
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("bfcl_eval/__init__.py", "")
        z.writestr(PREFIX + "BFCL_v4_simple_python.json", case * 200)  # big enough to be cut mid-way
        z.writestr(PREFIX + "possible_answer/BFCL_v4_simple_python.json", answer)
        z.writestr(PREFIX + "BFCL_v4_irrelevance.json", irrelevant)
        z.writestr(PREFIX + "../evil.json", "{}")  # a path out of the folder is never written
    return path


def _source(wheel: Path, url: str) -> bfcl_dataset.Source:
    data = wheel.read_bytes()
    return dataclasses.replace(bfcl_dataset.source(), url=url, sha256=hashlib.sha256(data).hexdigest(),
                               size=len(data), version="test")


def test_the_files_are_downloaded_checked_unpacked_and_kept(wheel: Path, monkeypatch):
    monkeypatch.setattr(bfcl_dataset, "installed_folder", lambda src=None: None)
    state = ServerState(files={"/bfcl.whl": wheel})
    with serve(state) as base:
        src = _source(wheel, base + "/bfcl.whl")
        seen = []
        folder = ensure_dataset(progress=seen.append, src=src)
        assert (folder / "BFCL_v4_simple_python.json").exists()
        assert not (folder.parent / "evil.json").exists() and not (folder / "__init__.py").exists()
        assert load_cases(folder, ("simple_python", "irrelevance"))[0].ground_truth == [{"area": {"base": [10]}}]
        assert seen and seen[-1].done == src.size
        asked = len(state.requests)
        assert ensure_dataset(src=src) == folder  # kept: nothing asked again
        assert len(state.requests) == asked


def test_a_dropped_download_resumes_where_it_stopped(wheel: Path, monkeypatch):
    monkeypatch.setattr(bfcl_dataset, "installed_folder", lambda src=None: None)
    state = ServerState(files={"/bfcl.whl": wheel}, drop_after=wheel.stat().st_size // 2, drops=1)
    with serve(state) as base:
        folder = ensure_dataset(src=_source(wheel, base + "/bfcl.whl"))
    assert (folder / "BFCL_v4_irrelevance.json").exists()
    ranges = [r["headers"].get("Range") for r in state.requests]
    assert any(r and not r.startswith("bytes=0-") for r in ranges), ranges


def test_a_file_that_is_not_the_pinned_one_is_refused_and_not_kept(wheel: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(bfcl_dataset, "installed_folder", lambda src=None: None)
    other = tmp_path / "other.whl"
    other.write_bytes(b"PK" + b"x" * (wheel.stat().st_size - 2))
    with serve(ServerState(files={"/bfcl.whl": other})) as base:
        src = _source(wheel, base + "/bfcl.whl")
        with pytest.raises(DatasetUnavailable, match="SHA-256 mismatch"):
            ensure_dataset(src=src)
    assert bfcl_dataset.local_folder(src) is None


def test_offline_is_one_sentence(wheel: Path, monkeypatch):
    monkeypatch.setattr(bfcl_dataset, "installed_folder", lambda src=None: None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    src = _source(wheel, f"http://127.0.0.1:{port}/bfcl.whl")
    import app.net.download as download

    monkeypatch.setattr(download.Downloader, "_back_off", staticmethod(lambda *a, **k: None))
    with pytest.raises(DatasetUnavailable) as info:
        ensure_dataset(src=src)
    text = str(info.value)
    assert text.startswith("The BFCL test files are not on this machine yet and there is no connection")
    assert "errno" not in text.lower() and info.value.detail


def test_the_installed_package_is_used_as_it_is_where_its_version_matches(monkeypatch):
    folder = bfcl_dataset.installed_folder()
    if folder is None:
        pytest.skip("bfcl-eval is not installed here (the test set-up installs it)")
    assert (folder / "BFCL_v4_simple_python.json").exists()
    assert bfcl_dataset.local_folder() == folder
    other = dataclasses.replace(bfcl_dataset.source(), version="1999.1.1")
    assert bfcl_dataset.installed_folder(other) is None
