"""The downloads registry (app/fetch/downloads.py) against local HTTP servers on 127.0.0.1: progress,
pause and resume through the .part, cancel, failures said as sentences, and the record of unfinished
downloads that the next start offers to resume."""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
from pathlib import Path

import pytest

from app.fetch.downloads import Downloads, describe, explain, file_job, register_files
from app.fetch.no_connection import NO_HUB
from app.net.download import Downloader
from tests.helpers.http_server import ServerState, serve

SIZE = 3_000_000


@pytest.fixture()
def blob(tmp_path) -> Path:
    path = tmp_path / "served" / "model.gguf"
    path.parent.mkdir()
    path.write_bytes(os.urandom(SIZE))
    return path


def registry(tmp_path: Path) -> Downloads:
    downloads = Downloads(tmp_path / "data" / "downloads.json")
    register_files(downloads, Downloader(allow_http=True, retries=1, backoff=0.05))
    return downloads


def wait(condition, seconds: float = 30.0) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)

def started(downloads: Downloads, url: str, target: Path, until, **kwargs):
    """A file job started, once `until(job)` holds (some bytes in, or ended)."""
    job = file_job(downloads, url, target, **kwargs)
    downloads.start(job)
    wait(lambda: until(job))
    return job


def ended(job) -> bool:
    return job.state != "running"


def past(done: int):
    """Until the job has more than `done` bytes."""
    return lambda job: job.done > done



def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_download_reports_bytes_speed_and_time_left_then_is_done(tmp_path, blob):
    downloads = registry(tmp_path)
    seen: list[tuple[str, int, float, float | None]] = []
    downloads.listeners.append(lambda j: seen.append((j.state, j.done, j.speed, j.eta)))
    with serve(ServerState(files={"/m.gguf": blob}, bytes_per_second=6_000_000)) as base:
        job = started(downloads, base + "/m.gguf", tmp_path / "out" / "model.gguf", sha256=sha(blob), until=ended)
    assert job.state == "done", job.error
    assert (tmp_path / "out" / "model.gguf").read_bytes() == blob.read_bytes()
    running = [s for s in seen if s[0] == "running" and 0 < s[1] < SIZE]
    assert running and all(speed > 0 for _, _, speed, _ in running[1:])
    assert any(eta is not None and eta > 0 for *_, eta in running)
    assert job.done == job.total == SIZE
    record = json.loads((tmp_path / "data" / "downloads.json").read_text())
    assert record["jobs"] == []  # finished: nothing to offer at the next start


def test_pause_keeps_the_part_and_resume_asks_only_for_the_rest(tmp_path, blob):
    downloads = registry(tmp_path)
    target = tmp_path / "out" / "model.gguf"
    state = ServerState(files={"/m.gguf": blob}, bytes_per_second=1_500_000)
    with serve(state) as base:
        job = started(downloads, base + "/m.gguf", target, sha256=sha(blob), until=past(600_000))
        downloads.pause(job.id)
        wait(lambda: job.state != "running")
        assert job.state == "paused" and "Resume" in job.note
        part = target.with_name(target.name + ".part")
        kept = part.stat().st_size
        assert kept > 0 and not target.exists()
        state.bytes_per_second = None
        downloads.resume(job.id)
        wait(lambda: job.state != "running")
    assert job.state == "done" and sha(target) == sha(blob)
    ranges = [r["headers"].get("Range") for r in state.requests]
    assert ranges[0] is None and ranges[-1] is not None and ranges[-1].startswith("bytes=")
    assert int(ranges[-1].split("=")[1].rstrip("-")) >= kept // 2  # from where the part ended, not from 0


def test_cancel_stops_and_deletes_the_part(tmp_path, blob):
    downloads = registry(tmp_path)
    target = tmp_path / "out" / "model.gguf"
    with serve(ServerState(files={"/m.gguf": blob}, bytes_per_second=1_000_000)) as base:
        job = started(downloads, base + "/m.gguf", target, until=past(200_000))
        downloads.cancel(job.id)
        wait(lambda: job.state != "running")
    assert job.state == "cancelled" and "deleted" in job.note
    assert not list(target.parent.glob("model.gguf*"))


def test_cancel_of_a_paused_download_deletes_its_part(tmp_path, blob):
    downloads = registry(tmp_path)
    target = tmp_path / "out" / "model.gguf"
    with serve(ServerState(files={"/m.gguf": blob}, bytes_per_second=1_000_000)) as base:
        job = started(downloads, base + "/m.gguf", target, until=past(200_000))
        downloads.pause(job.id)
        wait(lambda: job.state == "paused")
    assert target.with_name("model.gguf.part").exists()
    downloads.cancel(job.id)
    assert job.state == "cancelled" and not list(target.parent.glob("model.gguf*"))


def test_a_missing_file_fails_with_a_sentence_saying_what_to_do(tmp_path):
    downloads = registry(tmp_path)
    with serve(ServerState(files={})) as base:
        job = started(downloads, base + "/gone.gguf", tmp_path / "out" / "gone.gguf", until=ended)
    assert job.state == "failed"
    assert job.error.startswith("The file is no longer at its address (HTTP 404)") and "Discover" in job.error
    assert "404" in job.details


def test_a_refused_connection_is_no_connection_never_an_errno(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    downloads = registry(tmp_path)
    job = started(downloads, f"http://127.0.0.1:{port}/m.gguf", tmp_path / "out" / "m.gguf", until=ended)
    assert job.state == "failed"
    assert job.error.startswith("No connection to 127.0.0.1: downloads need the internet")
    assert "Resume once this machine is online" in job.error and "Errno" not in job.error
    assert "refused" in job.details.lower() or "errno" in job.details.lower()


def test_errors_are_sentences_with_what_to_do():
    from app.net.download import DiskFull, HashMismatch

    assert explain(urllib.error.URLError(OSError(-2, "Name or service not known")))[0].startswith(NO_HUB)
    said, _ = explain(DiskFull("not enough free disk in /m: 4.00 GB more needed"))
    assert said.startswith("There is not enough free disk space") and "free some space" in said
    assert "Retry downloads it again" in explain(HashMismatch("SHA-256 mismatch for m.gguf"))[0]
    said, detail = explain(RuntimeError("HTTP 403 Forbidden for https://huggingface.co/x (a gated or private model)"))
    assert "Hub token" in said and "403" in detail
    assert "Retry later" in explain(RuntimeError("HTTP 503 Service Unavailable for http://h/m"))[0]


def test_the_record_lists_unfinished_downloads_for_the_next_start(tmp_path, blob):
    downloads = registry(tmp_path)
    target = tmp_path / "out" / "model.gguf"
    with serve(ServerState(files={"/m.gguf": blob}, bytes_per_second=1_000_000)) as base:
        job = started(downloads, base + "/m.gguf", target, sha256=sha(blob), until=past(300_000))
        stopped = downloads.pause_all(wait=5.0)  # the window closing: "Stop and quit"
        assert stopped == [job] and job.state == "paused"

        later = registry(tmp_path)  # the next start
        found = later.unfinished()
        assert [(j.id, j.name, j.state) for j in found] == [(job.id, "model.gguf", "paused")]
        again = found[0]
        assert 0 < again.done < SIZE and again.total == SIZE and "Resume" in again.note
        assert "Downloading" not in describe(again) and describe(again).startswith("Paused · ")
        later.resume(again.id)  # its work rebuilt from the record by the "file" maker
        wait(lambda: again.state != "running")
    assert again.state == "done" and sha(target) == sha(blob)
    assert later.unfinished() == []  # nothing new: it was listed already
    assert json.loads((tmp_path / "data" / "downloads.json").read_text())["jobs"] == []


def test_a_job_whose_maker_is_gone_fails_with_a_sentence(tmp_path):
    record = tmp_path / "data" / "downloads.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"version": 1, "jobs": [
        {"id": "setup:gone", "name": "Gone", "kind": "setup", "key": {"id": "gone"}, "stage": "download",
         "done": 10, "total": 100, "state": "running", "error": ""}, {"broken": True}]}))
    downloads = Downloads(record)
    downloads.register("setup", lambda job: (_ for _ in ()).throw(KeyError(job.key["id"])))
    [job] = downloads.unfinished()
    downloads.resume(job.id)
    assert job.state == "failed" and job.error.startswith("This download cannot be resumed") \
        and "Models → Discover" in job.error


def test_describe_says_stage_bytes_speed_and_time_left():
    from app.fetch.downloads import Job

    job = Job("file:x", "x", "file", {}, state="running", stage="download", done=1_200_000_000,
              total=4_500_000_000, speed=12_300_000, eta=268)
    assert describe(job) == "Downloading · 1.20 GB of 4.50 GB · 12.3 MB/s · 4 min 28 s left"
    job.state = "failed"
    assert describe(job) == "Failed · 1.20 GB of 4.50 GB"


def setup_job(downloads: Downloads, entry, models: Path):
    """A set-up of a catalog entry as a registry job (the set-up page's work, without the page)."""
    from app.fetch.setup_pipeline import SetupPipeline
    from app.machine import gpu
    from app.machine.snapshot import Machine
    from tests.helpers.fakes import FakeNVML, rtx_4090

    machine = Machine.read(gpu.probe_with(FakeNVML([rtx_4090()])))

    def work(control):
        return SetupPipeline(entry, machine, downloader=Downloader(allow_http=True, retries=1, backoff=0.05),
                             models_dir=models, cancel=control.cancelled, pause=control.paused,
                             transfer=control.progress).run(control.report)

    return downloads.submit(entry.name, "setup", {"id": entry.id, "url": entry.url or ""}, work)


def test_a_set_up_pauses_and_resumes_and_two_of_one_file_never_write_it_at_once(tmp_path):
    from app.fetch.catalog import entry_for_url
    from tests.helpers.gguf_models import write_llama

    served = tmp_path / "served"
    served.mkdir()
    model = write_llama(served / "tiny.gguf")
    downloads = Downloads(tmp_path / "data" / "downloads.json")
    state = ServerState(files={"/a/tiny.gguf": model}, bytes_per_second=60_000)
    with serve(state) as base, serve(ServerState(files={"/b/tiny.gguf": model})) as other:
        first = setup_job(downloads, entry_for_url("First", base + "/a/tiny.gguf"), tmp_path / "models")
        downloads.start(first)
        wait(lambda: first.stage == "download" and first.done > 0, 60)
        assert first.total == model.stat().st_size and first.speed >= 0
        second = setup_job(downloads, entry_for_url("Second", other + "/b/tiny.gguf"), tmp_path / "models")
        downloads.start(second)  # another repo's file of the same name, into the same folder
        wait(lambda: second.state != "running")
        assert second.state == "failed" and "another set-up is downloading tiny.gguf now" in second.error
        assert first.state == "running"

        downloads.pause(first.id)
        wait(lambda: first.state != "running")
        assert first.state == "paused" and (tmp_path / "models" / "tiny.gguf.part").exists()
        state.bytes_per_second = None
        downloads.resume(first.id)
        wait(lambda: first.state != "running", 60)
    assert first.state == "done", first.error
    assert first.result.ready and (tmp_path / "models" / "tiny.gguf").read_bytes() == model.read_bytes()
    assert any(r["headers"].get("Range", "").startswith("bytes=") and r["path"] == "/a/tiny.gguf"
               and r["headers"]["Range"] != "bytes=0-" for r in state.requests[1:])
