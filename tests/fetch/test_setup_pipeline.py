"""The one-click pipeline, headless: catalog, local server, resume after a stop, patching, preflight."""

from __future__ import annotations

import json

import pytest

from app.fetch.catalog import CatalogEntry, CatalogError, add_user_entry, entry_for_local_file, find, load_catalog
from app.fetch.setup_pipeline import STEPS, SetupError, SetupPipeline, load_state
from app.gguf.gguf_file import read_header
from app.machine import gpu
from app.machine.snapshot import Machine
from app.net.download import Downloader, DownloadPaused
from tests.helpers.app_process import run_app
from tests.helpers.fakes import FakeNVML, rtx_4090
from tests.helpers.gguf_models import write_glm4_moe
from tests.helpers.http_server import ServerState, serve

MACHINE = Machine.read(gpu.probe_with(FakeNVML([rtx_4090()])))


def fast() -> Downloader:
    return Downloader(token="", backoff=0.01, timeout=10)


def test_catalog_entries_and_user_entries(tmp_path):
    ids = [e.id for e in load_catalog()]
    assert ids[:3] == ["clover-35b-a3b", "qwen3.6-35b-a3b", "smollm2-135m"]
    assert find("clover-35b-a3b").patch_profile == "clover"
    assert find("smollm2-135m").sha256.startswith("b179c952")
    add_user_entry(CatalogEntry(id="my-model", name="Mine", file_name="mine.gguf", url="https://example.com/m.gguf"))
    assert find("my-model").user and find("my-model").url == "https://example.com/m.gguf"
    with pytest.raises(CatalogError, match="plain file name"):
        CatalogEntry.from_dict({"id": "x", "name": "x", "file_name": "../evil.gguf"})
    with pytest.raises(CatalogError, match="unknown fields"):
        CatalogEntry.from_dict({"id": "x", "name": "x", "file_name": "x.gguf", "shaa256": "1"})
    with pytest.raises(CatalogError, match="no model 'nope'"):
        find("nope")


def test_smollm2_from_a_local_server(smollm2, tmp_path):
    entry = find("smollm2-135m")
    seen = []
    with serve(ServerState(files={"/s.gguf": smollm2})) as base:
        state = SetupPipeline(entry, MACHINE, url=base + "/s.gguf", downloader=fast(),
                              models_dir=tmp_path).run(lambda *a: seen.append(a))
    assert state.ready and state.hash_source == "catalog"
    assert set(state.done) == set(STEPS)
    assert "matches (catalog)" in state.done["verify"] and "no patch needed" in state.done["patch"]
    assert "49152 tokens and every tensor" in state.done["preflight"]
    assert "Everything on the GPU" in state.done["plan"]
    assert list(dict.fromkeys(s for s, f, t in seen if f == 1.0)) == list(STEPS)
    assert any(s == "download" and f is not None and 0 < f < 1 for s, f, t in seen)
    assert load_state("smollm2-135m").ready  # persisted


def test_a_stopped_setup_continues_where_it_stopped(smollm2, tmp_path):
    entry = find("smollm2-135m")
    state = ServerState(files={"/s.gguf": smollm2}, bytes_per_second=20_000_000)
    with serve(state) as base:
        p = SetupPipeline(entry, MACHINE, url=base + "/s.gguf", downloader=fast(), models_dir=tmp_path)

        def stop_midway(step, fraction, text):
            if step == "download" and fraction and fraction > 0.3:
                p.cancel()

        with pytest.raises(SetupError) as err:
            p.run(stop_midway)
        assert err.value.step == "download"
        assert load_state("smollm2-135m").done.keys() == {"plan"}
        # the cancel deleted the partial file; a new run plans nothing again and downloads
        state.bytes_per_second = None
        requests_before = len(state.requests)
        done = SetupPipeline(entry, MACHINE, url=base + "/s.gguf", downloader=fast(), models_dir=tmp_path).run()
        assert done.ready
        header_fetches = [r for r in state.requests[requests_before:]
                          if r["headers"].get("Range", "").startswith("bytes=0-")]
        assert not header_fetches  # the plan step was not repeated
        # and once ready, another run does nothing but report
        again = SetupPipeline(entry, MACHINE, url=base + "/s.gguf", downloader=fast(), models_dir=tmp_path)
        n = len(state.requests)
        assert again.run().ready and len(state.requests) == n


def test_a_resume_answered_with_the_wrong_range_completes_and_the_step_says_so(smollm2, tmp_path):
    """Issue 41: a part left by an earlier run, and a server that answers its Range from 1 MiB too
    early. The download starts over by itself, and the step's summary says why."""
    entry = find("smollm2-135m")
    part = tmp_path / (entry.file_name + ".part")
    state = ServerState(files={"/s.gguf": smollm2}, drops=1, drop_after=1 << 20)
    with serve(state) as base:
        with pytest.raises(DownloadPaused):  # dropped at 1 MiB, then paused: the part an earlier run left
            fast().download(base + "/s.gguf", tmp_path / entry.file_name,
                            pause=lambda: part.exists() and part.stat().st_size > 0)

        def lie_once_planned(step, fraction, text):  # the plan reads the header honestly, the resume is lied to
            if step == "plan" and fraction == 1.0:
                state.range_shift = 1 << 20

        done = SetupPipeline(entry, MACHINE, url=base + "/s.gguf", downloader=fast(),
                             models_dir=tmp_path).run(lie_once_planned)
    assert done.ready and not part.exists()
    assert "wrong range" in done.done["download"] and "started over" in done.done["download"], done.done


def test_clover_dialect_is_patched_and_passes_preflight(tmp_path):
    (tmp_path / "srv").mkdir()
    vendor = write_glm4_moe(tmp_path / "srv" / "clover.gguf", dialect="vendor")
    entry = CatalogEntry(id="clover-double", name="Clover double", file_name="clover.gguf", patch_profile="clover")
    with serve(ServerState(files={"/c.gguf": vendor})) as base:
        state = SetupPipeline(entry, MACHINE, url=base + "/c.gguf", downloader=fast(),
                              models_dir=tmp_path / "models").run()
    assert state.final_path.endswith("clover.patched.gguf")
    assert "shared-expert count key" in state.done["patch"]
    assert "NOT verified" in state.done["verify"]  # no hash anywhere: said plainly
    assert read_header(state.final_path).get("glm4moe.expert_shared_count") == 1
    assert not (tmp_path / "models" / "clover.gguf").exists()  # the unpatched download was replaced


def test_preflight_explains_an_unknown_architecture(tmp_path):
    from app.gguf.gguf_file import KV, ValueType, encode_header

    model = write_glm4_moe(tmp_path / "m.gguf", dialect="upstream")
    header = read_header(model)
    kvs = {k.replace("glm4moe.", "clover_moe."): v for k, v in header.kvs.items()}
    kvs["general.architecture"] = KV.make("general.architecture", ValueType.STRING, "clover_moe")
    for k, v in kvs.items():
        v.key = k
    renamed = tmp_path / "clover_moe.gguf"
    data = model.read_bytes()[header.data_offset:]
    renamed.write_bytes(encode_header(3, kvs.values(), header.tensors, header.alignment) + data)
    entry = entry_for_local_file(renamed)
    with pytest.raises(SetupError) as err:
        SetupPipeline(entry, MACHINE, models_dir=tmp_path / "models").run()
    assert err.value.step == "preflight"
    assert "does not know the model architecture 'clover_moe'" in str(err.value)
    assert "llama-cpp-python 0.3.36" in str(err.value)


def test_missing_url_is_a_clear_error():
    with pytest.raises(SetupError, match="no download address for Clover-35B-A3B"):
        SetupPipeline(find("clover-35b-a3b"), MACHINE).run()


def test_cli_setup(smollm2, tmp_path, clover_home):
    with serve(ServerState(files={"/s.gguf": smollm2})) as base:
        r = run_app("setup", "smollm2-135m", "--url", base + "/s.gguf")
    assert r.returncode == 0, r.stderr
    assert "[download ] done" in r.stdout and "ready:" in r.stdout
    state = json.loads((clover_home / "data" / "setup" / "smollm2-135m.json").read_text())
    assert state["final_path"].startswith(str(clover_home / "models"))
    r = run_app("setup", "clover-35b-a3b")
    assert r.returncode == 1 and "error in step plan" in r.stderr
