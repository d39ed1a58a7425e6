"""The downloader against a local server with faults: nothing lost, nothing corrupted, nothing half-trusted."""

from __future__ import annotations

import hashlib
import os

import pytest

from app import download as dl
from app.download import DiskFull, DownloadCancelled, DownloadError, Downloader, DownloadPaused, HashMismatch
from tests.helpers.http_server import ServerState, serve


@pytest.fixture(scope="module")
def blob(tmp_path_factory):
    path = tmp_path_factory.mktemp("srv") / "model.gguf"
    path.write_bytes(os.urandom(3 * 1024 * 1024 + 12345))
    return path


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fast(**kw) -> Downloader:
    return Downloader(token="", backoff=0.01, timeout=10, **kw)


def test_plain_download_with_catalog_hash(blob, tmp_path):
    state = ServerState(files={"/m.gguf": blob})
    seen = []
    with serve(state) as base:
        r = fast().download(base + "/m.gguf", tmp_path / "m.gguf", sha256=sha(blob), size=blob.stat().st_size,
                            progress=seen.append)
    assert (tmp_path / "m.gguf").read_bytes() == blob.read_bytes()
    assert r.hash_source == "catalog" and r.sha256 == sha(blob) and r.attempts == 1
    assert seen[-1].done == seen[-1].total == blob.stat().st_size and seen[-1].fraction == 1.0
    assert not list(tmp_path.glob("*.part*"))


def test_hash_from_the_servers_linked_etag(blob, tmp_path):
    state = ServerState(files={"/m.gguf": blob}, send_hash=("X-Linked-Etag", f'"{sha(blob)}"'))
    with serve(state) as base:
        r = fast().download(base + "/m.gguf", tmp_path / "m.gguf")
    assert r.hash_source == "server (X-Linked-Etag)"


def test_redirect_is_followed(blob, tmp_path):
    state = ServerState(files={"/cdn/m.gguf": blob}, redirect={"/m.gguf": "/cdn/m.gguf"})
    with serve(state) as base:
        fast().download(base + "/m.gguf", tmp_path / "m.gguf", sha256=sha(blob))
    assert sha(tmp_path / "m.gguf") == sha(blob)


def test_dropped_connections_resume_with_range(blob, tmp_path):
    state = ServerState(files={"/m.gguf": blob}, drop_after=1_000_000, drops=2)
    with serve(state) as base:
        r = fast().download(base + "/m.gguf", tmp_path / "m.gguf", sha256=sha(blob))
    assert r.attempts == 3 and sha(tmp_path / "m.gguf") == sha(blob)
    ranges = [q["headers"].get("Range") for q in state.requests]
    assert ranges[0] is None and ranges[1] == "bytes=1000000-" and ranges[2] == "bytes=2000000-"


def test_server_errors_are_retried_then_reported(blob, tmp_path):
    state = ServerState(files={"/m.gguf": blob}, errors_first=2)
    with serve(state) as base:
        r = fast().download(base + "/m.gguf", tmp_path / "a.gguf", sha256=sha(blob))
        assert r.attempts == 3
        state.errors_first = 100
        with pytest.raises(DownloadError, match="HTTP 500"):
            fast(retries=2).download(base + "/m.gguf", tmp_path / "b.gguf")
    assert not (tmp_path / "b.gguf").exists()


def test_server_ignoring_range_restarts_cleanly(blob, tmp_path):
    state = ServerState(files={"/m.gguf": blob}, honor_range=False, drop_after=1_500_000, drops=1)
    with serve(state) as base:
        r = fast().download(base + "/m.gguf", tmp_path / "m.gguf", sha256=sha(blob))
    assert sha(tmp_path / "m.gguf") == sha(blob) and r.attempts == 2


def test_wrong_hash_keeps_nothing(blob, tmp_path):
    with serve(ServerState(files={"/m.gguf": blob})) as base:
        with pytest.raises(HashMismatch, match="was deleted"):
            fast().download(base + "/m.gguf", tmp_path / "m.gguf", sha256="0" * 64)
    assert list(tmp_path.iterdir()) == []


def test_wrong_size_is_refused(blob, tmp_path):
    with serve(ServerState(files={"/m.gguf": blob})) as base:
        with pytest.raises(DownloadError, match="the catalog says"):
            fast().download(base + "/m.gguf", tmp_path / "m.gguf", size=123)
    assert not (tmp_path / "m.gguf").exists()


def test_cancel_deletes_and_pause_keeps_and_resume_verifies(blob, tmp_path):
    state = ServerState(files={"/m.gguf": blob}, bytes_per_second=4_000_000)
    target = tmp_path / "m.gguf"
    with serve(state) as base:
        with pytest.raises(DownloadCancelled):
            fast().download(base + "/m.gguf", target, progress=lambda p: None,
                            cancel=lambda: (target.with_name("m.gguf.part").exists()
                                            and target.with_name("m.gguf.part").stat().st_size > 1_000_000))
        assert list(tmp_path.iterdir()) == []

        part = target.with_name("m.gguf.part")
        with pytest.raises(DownloadPaused):
            fast().download(base + "/m.gguf", target, pause=lambda: part.exists() and part.stat().st_size > 1_000_000)
        kept = part.stat().st_size
        assert kept > 1_000_000 and not target.exists()
        state.bytes_per_second = None
        r = fast().download(base + "/m.gguf", target, sha256=sha(blob))
        assert r.resumed_from == kept and sha(target) == sha(blob)

        # a part that changed since its checkpoint is not trusted: the download starts over
        target.unlink()
        with pytest.raises(DownloadPaused):
            state.bytes_per_second = 4_000_000
            fast().download(base + "/m.gguf", target, pause=lambda: part.exists() and part.stat().st_size > 1_000_000)
        with open(part, "r+b") as f:
            f.write(b"tampered")
        state.bytes_per_second = None
        r = fast().download(base + "/m.gguf", target, sha256=sha(blob))
        assert r.resumed_from == 0 and sha(target) == sha(blob)


def test_disk_full_before_and_during(blob, tmp_path, monkeypatch):
    with serve(ServerState(files={"/m.gguf": blob})) as base:
        with pytest.raises(DiskFull, match="not enough free disk"):
            fast(free_space=lambda folder: 100).download(base + "/m.gguf", tmp_path / "m.gguf",
                                                          size=blob.stat().st_size)
        assert list(tmp_path.iterdir()) == []
        # the disk fills while writing: stop, keep the part, resume once there is room
        monkeypatch.setattr(dl, "DISK_CHECK_EVERY", 1 << 20)
        checks = []

        def free(folder):  # room at the start and at the first check, then the disk is full
            checks.append(folder)
            return 10 << 30 if len(checks) <= 2 else 0

        with pytest.raises(DiskFull):
            fast(free_space=free).download(base + "/m.gguf", tmp_path / "m.gguf")
        assert (tmp_path / "m.gguf.part").exists()
        r = fast().download(base + "/m.gguf", tmp_path / "m.gguf", sha256=sha(blob))
        assert r.resumed_from > 0 and sha(tmp_path / "m.gguf") == sha(blob)


def test_https_by_default_and_the_token(blob, tmp_path):
    with pytest.raises(DownloadError, match="use https"):
        fast().download("http://example.com/m.gguf", tmp_path / "m.gguf")
    state = ServerState(files={"/m.gguf": blob}, require_token="hf_secret")
    with serve(state) as base:
        Downloader(token="hf_secret", backoff=0.01).download(base + "/m.gguf", tmp_path / "m.gguf")
        with pytest.raises(DownloadError) as err:
            Downloader(token="hf_wrong", backoff=0.01).download(base + "/m.gguf", tmp_path / "x.gguf")
    assert "401" in str(err.value) and "HF_TOKEN" in str(err.value) and "hf_wrong" not in str(err.value)
