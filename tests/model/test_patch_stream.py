"""The patch without a second copy: applied at load time (llama.cpp metadata overrides), or written
while the file downloads; the patched copy for other tools, by reflink where the file system can."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading

import numpy as np
import pytest

from app.fetch.catalog import CatalogEntry
from app.fetch.setup_pipeline import SetupError, SetupPipeline, load_state
from app.gguf.gguf_file import read_header
from app.machine import gpu
from app.machine.llama_backend import llama
from app.machine.snapshot import Machine
from app.model.patch import llama_requires_key, load_overrides, load_profile, patch_file
from app.model.plan import load_time_patch
from app.net.download import Downloader
from tests.conftest import ROOT
from tests.helpers.app_process import run_app
from tests.helpers.decode import CHAT_PROMPT
from tests.helpers.fakes import FakeNVML, rtx_4090
from tests.helpers.gguf_models import ModelShape, write_glm4_moe
from tests.helpers.http_server import ServerState, serve

MACHINE = Machine.read(gpu.probe_with(FakeNVML([rtx_4090()])))


@pytest.fixture(scope="module")
def vendor(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stream")
    # large enough that the header is a small part of the file (as for the real 19.6 GB one)
    return write_glm4_moe(folder / "clover-vendor.gguf", ModelShape(n_embd=256, n_head=4, n_head_kv=2, n_layer=3,
                                                                    n_ff=512, n_ff_exp=128), dialect="vendor")


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def logits(path, overrides=None) -> np.ndarray:
    llm = llama().Llama(model_path=str(path), n_ctx=256, n_threads=2, logits_all=True, verbose=False,
                        kv_overrides=overrides)
    try:
        tokens = llm.tokenize(CHAT_PROMPT.encode(), add_bos=False, special=True)
        llm.eval(tokens)
        return np.array(llm.scores[:llm.n_tokens])
    finally:
        llm.close()


def test_overrides_at_load_give_exactly_the_patched_copys_logits(vendor, tmp_path):
    overrides, results, why = load_overrides(read_header(vendor), load_profile("clover"), llama_requires_key(vendor))
    assert why == "" and set(overrides) == {"glm4moe.expert_shared_count", "glm4moe.rope.dimension_count",
                                            "tokenizer.ggml.eos_token_id"}
    assert all(isinstance(v, int) for v in overrides.values())
    copy = tmp_path / "patched.gguf"
    patch_file(vendor, copy)
    with_overrides, from_copy = logits(vendor, overrides), logits(copy)
    assert np.array_equal(with_overrides, from_copy)  # exactly: the same model, read two ways
    only_key = logits(vendor, {"glm4moe.expert_shared_count": 1})  # the article's key-only "fix"
    assert not np.allclose(only_key, from_copy)
    assert load_time_patch(vendor, read_header(vendor))[1] == "Clover patch applied at load (3 fixes)"


def test_a_value_an_override_cannot_hold_falls_back_to_the_copy(vendor, tmp_path):
    import json

    profile = json.loads((ROOT / "resources" / "patch_profiles" / "clover.json").read_text())
    profile["rules"].append({"id": "long-name", "kind": "move_key", "from": "general.name", "to": "general.basename"})
    long_name = tmp_path / "long.json"
    long_name.write_text(json.dumps(profile))
    header = read_header(vendor)
    from dataclasses import replace

    from app.gguf.gguf_file import KV, ValueType

    kvs = dict(header.kvs)
    kvs["general.name"] = KV.make("general.name", ValueType.STRING, "x" * 200)
    overrides, _, why = load_overrides(replace(header, kvs=kvs), load_profile(long_name))
    assert overrides is None and "127-byte override limit" in why


class PausingDownloader(Downloader):
    """Pauses (as a killed app would leave it) once the given fraction of the file is in."""

    def __init__(self, at: float | None, **kw):
        super().__init__(**{"token": "", "backoff": 0.01, "timeout": 10, **kw})
        self.at = at

    def download(self, url, target, **kw):
        progress = kw.get("progress")
        seen = {"fraction": 0.0}

        def on_progress(p):
            seen["fraction"] = p.fraction or 0.0
            if progress:
                progress(p)

        kw["progress"] = on_progress
        if self.at is not None:
            kw["pause"] = lambda: seen["fraction"] >= self.at
        return super().download(url, target, **kw)


def allocated(folder) -> int:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def test_in_stream_patch_with_two_interruptions(vendor, tmp_path):
    """Set up a vendor-dialect file from a local server: the file written is the patched one, paused
    at 30 % and at 70 % and resumed; the result is byte-identical to `python -m app patch` of the
    vendor file, the vendor's SHA-256 was verified, and the disk never held more than the file."""
    reference = tmp_path / "reference.gguf"
    out = run_app("patch", vendor, reference, "--quiet")
    assert out.returncode == 0, out.stderr
    size = vendor.stat().st_size
    entry = CatalogEntry(id="stream-double", name="Clover double", file_name="clover.gguf", size=size,
                         sha256=sha256(vendor))
    models = tmp_path / "models"
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            if models.exists():
                peak[0] = max(peak[0], allocated(models))
            stop.wait(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with serve(ServerState(files={"/c.gguf": vendor}, bytes_per_second=8_000_000)) as base:
            for at in (0.3, 0.7):
                with pytest.raises(SetupError, match="paused"):
                    SetupPipeline(entry, MACHINE, url=base + "/c.gguf", downloader=PausingDownloader(at),
                                  models_dir=models).run()
                part = models / "clover.patched.gguf.part"
                assert part.exists() and part.read_bytes()[:4] == b"GGUF"
            state = SetupPipeline(entry, MACHINE, url=base + "/c.gguf", downloader=PausingDownloader(None),
                                  models_dir=models).run()
    finally:
        stop.set()
        sampler.join()
    final = models / "clover.patched.gguf"
    assert state.ready and state.final_path == str(final) and state.in_stream
    assert final.read_bytes() == reference.read_bytes()
    assert state.sha256 == sha256(vendor) and state.hash_source == "catalog"  # the vendor's bytes, verified
    assert "resumed" in state.done["download"] and "patched on the way in" in state.done["download"]
    assert "fixed while it downloaded" in state.done["patch"] and "no copy" in state.done["patch"]
    assert not (models / "clover.gguf").exists()
    assert peak[0] <= 1.02 * size + (1 << 20), (peak[0], size)  # one file (plus the checkpoint files)
    assert load_state("stream-double").ready


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")
def test_reflink_export_on_xfs(vendor, tmp_path):
    """The patched copy for other tools shares the data section's extents where the file system can
    (XFS, btrfs): on a loop-mounted XFS image where this sandbox allows mounting."""
    from app.model.patch import patch_file as export

    mkfs = shutil.which("mkfs.xfs")
    if mkfs is None:
        pytest.skip("mkfs.xfs is not installed (Debian's xfsprogs)")
    image, mnt = tmp_path / "xfs.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(400 << 20)
    made = subprocess.run([mkfs, "-q", "-m", "reflink=1", str(image)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"mkfs.xfs failed: {made.stderr.strip()[:200]}")
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"this sandbox does not allow a loop mount: {mounted.stderr.strip()[:200]}")
    try:
        src = mnt / "vendor.gguf"
        shutil.copyfile(vendor, src)
        report = export(src, mnt / "vendor.patched.gguf", verify_data=True)
        assert report.written and report.data_verified and "reflink" in report.method
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
