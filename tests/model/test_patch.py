"""The Clover patch, end to end through the bundled llama.cpp, and its safety guarantees."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
import textwrap

import pytest

from app.base import fileio
from app.gguf.gguf_file import GGUFError, read_header
from app.model import patch as patch_mod
from app.model.patch import APPLIED, CANNOT_APPLY, NOT_NEEDED, PatchCancelled, PatchError, load_profile, patch_file
from tests.conftest import ROOT
from tests.helpers.app_process import run_app
from tests.helpers.decode import greedy_tokens
from tests.helpers.gguf_models import ModelShape, write_glm4_moe


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def double(tmp_path_factory):
    """The dialect test double: the same glm4moe model written upstream-correct, vendor and key-only."""
    folder = tmp_path_factory.mktemp("double")
    return {d: write_glm4_moe(folder / f"{d}.gguf", dialect=d) for d in ("upstream", "vendor", "key-only")}


def _load_error(path) -> str:
    """What llama.cpp says when asked to load the file (in a subprocess, with its log on)."""
    code = textwrap.dedent(f"""
        from app.machine.llama_backend import llama
        Llama = llama().Llama
        try:
            Llama(model_path={str(path)!r}, n_ctx=64, verbose=True)
            print("LOADED")
        except ValueError as exc:
            print("FAILED", exc)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return result.stdout + result.stderr


def _kv_table(path) -> dict:
    header = read_header(path)
    return {k: (kv.type, kv.raw) for k, kv in header.kvs.items()}


def _data(path) -> bytes:
    header = read_header(path)
    with open(path, "rb") as f:
        f.seek(header.data_offset)
        return f.read()


def test_vendor_file_is_refused_by_upstream_llama_cpp(double):
    out = _load_error(double["vendor"])
    assert "key not found in model: glm4moe.expert_shared_count" in out
    assert "LOADED" not in out


@pytest.mark.slow  # loads and decodes two files
def test_key_only_fix_loads_but_decodes_differently(double):
    out = _load_error(double["key-only"])
    assert "LOADED" in out, out[-2000:]
    assert greedy_tokens(double["key-only"]) != greedy_tokens(double["upstream"])


def test_full_patch_matches_the_reference(double, tmp_path):
    target = tmp_path / "fixed.gguf"
    source_hash = sha256(double["vendor"])
    seen = []
    report = patch_file(double["vendor"], target, "clover", verify_data=True,
                        progress=lambda done, total: seen.append((done, total)))
    assert report.written and report.data_verified
    assert [r.status for r in report.results] == [APPLIED, APPLIED, APPLIED]
    assert "absent -> 1" in report.results[0].detail
    assert "16 -> 8" in report.results[1].detail
    assert "'<|endoftext|>') -> 458 ('<|im_end|>')" in report.results[2].detail
    assert sha256(double["vendor"]) == source_hash  # the source is never modified

    assert _kv_table(target) == _kv_table(double["upstream"])  # metadata equal to the reference
    assert _data(target) == _data(double["upstream"])  # tensor data byte-identical
    assert read_header(target).tensors == read_header(double["upstream"]).tensors
    assert greedy_tokens(target) == greedy_tokens(double["upstream"])  # same greedy tokens

    assert seen[0][0] == 0 and seen[-1][0] == seen[-1][1] == target.stat().st_size
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(seen))
    assert not list(tmp_path.glob(".*clover-partial"))


def test_patch_is_idempotent(double, tmp_path):
    first = tmp_path / "once.gguf"
    patch_file(double["vendor"], first)
    for path in (first, double["upstream"]):
        before = sha256(path)
        report = patch_file(path, tmp_path / "twice.gguf")
        assert not report.changed and not report.written
        assert all(r.status == NOT_NEEDED for r in report.results)
        assert "nothing to do" in " ".join(report.notes)
        assert not (tmp_path / "twice.gguf").exists()
        assert sha256(path) == before


def test_key_only_file_needs_the_other_two_rules(double):
    report = patch_file(double["key-only"], dry_run=True)
    assert [r.status for r in report.results] == [NOT_NEEDED, APPLIED, APPLIED]
    assert not report.written and not patch_mod.default_target(double["key-only"]).exists()


@pytest.mark.parametrize("methods", [("copy_file_range",), ("sendfile",), ("buffered",),
                                     ("copy_file_range", "buffered")])
def test_every_copy_method_gives_the_same_file(double, tmp_path, methods, monkeypatch):
    monkeypatch.setattr(fileio, "COPY_CHUNK", 4096)
    monkeypatch.setattr(fileio, "BUFFER_CHUNK", 4096)
    target = tmp_path / "m.gguf"
    report = patch_file(double["vendor"], target, copy_methods=methods)
    assert report.method == methods[0]
    assert _data(target) == _data(double["upstream"])


def test_cancel_mid_copy_leaves_source_and_no_target(double, tmp_path, monkeypatch):
    monkeypatch.setattr(fileio, "COPY_CHUNK", 4096)
    calls = []
    before = sha256(double["vendor"])

    def cancel() -> bool:
        calls.append(1)
        return len(calls) > 5

    with pytest.raises(PatchCancelled):
        patch_file(double["vendor"], tmp_path / "c.gguf", cancel=cancel)
    assert len(calls) > 5
    assert sha256(double["vendor"]) == before
    assert list(tmp_path.iterdir()) == []


def test_error_mid_copy_cleans_up(double, tmp_path, monkeypatch):
    monkeypatch.setattr(fileio, "COPY_CHUNK", 4096)

    def progress(done, total):
        if done > 20000:
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        patch_file(double["vendor"], tmp_path / "e.gguf", progress=progress)
    assert list(tmp_path.iterdir()) == []


def test_killed_mid_copy_leaves_no_target_and_the_next_run_recovers(double, tmp_path):
    """A real crash: the patching process is SIGKILLed in the middle of the data copy."""
    target = tmp_path / "k.gguf"
    before = sha256(double["vendor"])
    code = textwrap.dedent(f"""
        import os, signal
        from app.model import patch
        patch.COPY_CHUNK = 4096
        def progress(done, total):
            if done > total // 2:
                os.kill(os.getpid(), signal.SIGKILL)
        patch.patch_file({str(double["vendor"])!r}, {str(target)!r}, progress=progress)
    """)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == -9, result.stderr
    assert not target.exists()
    assert sha256(double["vendor"]) == before
    leftovers = list(tmp_path.glob(".k.gguf.clover-partial"))
    assert leftovers and 0 < leftovers[0].stat().st_size < double["vendor"].stat().st_size
    report = patch_file(double["vendor"], target)
    assert report.written and _data(target) == _data(double["upstream"])
    assert not list(tmp_path.glob(".*clover-partial"))


def test_existing_target_and_same_file_are_refused(double, tmp_path):
    target = tmp_path / "t.gguf"
    target.write_bytes(b"keep me")
    with pytest.raises(PatchError, match="exists"):
        patch_file(double["vendor"], target)
    assert target.read_bytes() == b"keep me"
    report = patch_file(double["vendor"], target, overwrite=True)
    assert report.written and _data(target) == _data(double["upstream"])
    with pytest.raises(PatchError, match="never modifies the source"):
        patch_file(double["vendor"], double["vendor"])


def test_rule_that_cannot_apply_writes_nothing(tmp_path):
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps({"name": "p", "rules": [
        {"id": "eos", "kind": "token_id", "key": "tokenizer.ggml.eos_token_id", "token": "<|no_such|>",
         "value_type": "UINT32"}]}))
    model = write_glm4_moe(tmp_path / "v.gguf", ModelShape(n_layer=2), dialect="vendor")
    report = patch_file(model, tmp_path / "out.gguf", profile)
    assert report.failed and report.results[0].status == CANNOT_APPLY
    assert "not in the vocabulary" in report.results[0].detail
    assert not (tmp_path / "out.gguf").exists()


def test_profiles_are_checked(tmp_path):
    assert [r.id for r in load_profile("clover").rules] == ["expert-shared-count", "rope-dimension", "eos-token"]
    with pytest.raises(PatchError, match="no patch profile 'nope'"):
        load_profile("nope")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rules": [{"id": "x", "kind": "rewrite_everything"}]}))
    with pytest.raises(PatchError, match="unknown kind 'rewrite_everything'"):
        load_profile(bad)
    bad.write_text(json.dumps({"rules": [{"id": "x", "kind": "move_key", "from": "a"}]}))
    with pytest.raises(PatchError, match="lacks to"):
        load_profile(bad)


def test_not_a_gguf_file(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(GGUFError, match="not a GGUF file"):
        patch_file(junk)


# ----------------------------------------------------------------------------- command line

def _cli(*args):
    return run_app("patch", *args)


def test_cli_patch_reports_rules_and_exit_codes(double, tmp_path):
    target = tmp_path / "cli.gguf"
    r = _cli(double["vendor"], target, "--verify-data")
    assert r.returncode == 0, r.stderr
    assert "fixed     shared-expert count key: glm4moe.expert_shared_count: absent -> 1" in r.stdout
    assert "data bytes verified" in r.stdout
    assert _data(target) == _data(double["upstream"])

    r = _cli(target)
    assert r.returncode == 0 and "nothing to do" in r.stdout

    r = _cli(double["key-only"], "--dry-run")
    assert r.returncode == 0 and "would fix" in r.stdout and "dry run: nothing written" in r.stdout

    r = _cli(double["vendor"], target)
    assert r.returncode == 2 and "exists" in r.stderr

    r = _cli(tmp_path / "missing.gguf")
    assert r.returncode == 2 and "No such file" in r.stderr

    profile = tmp_path / "p.json"
    profile.write_text(json.dumps({"name": "p", "rules": [
        {"id": "eos", "kind": "token_id", "key": "tokenizer.ggml.eos_token_id", "token": "<nope>",
         "value_type": "UINT32"}]}))
    r = _cli(double["vendor"], tmp_path / "x.gguf", "--profile", profile)
    assert r.returncode == 1 and "FAILED" in r.stdout and not (tmp_path / "x.gguf").exists()


# ----------------------------------------------------------------------------- in place

def _patched_fits(path) -> bool:
    """The patched header, padded, ends where the data starts: the data need not move."""
    from app.gguf.gguf_file import encode_header

    header = read_header(path)
    kvs, _ = patch_mod.apply_rules(header, load_profile("clover"))
    return len(encode_header(header.version, kvs.values(), header.tensors, header.alignment)) == header.data_offset


def _vendor_file(tmp_path, *, fits: bool):
    """A vendor file whose patched header ends inside its old alignment padding (`fits`) or past it,
    made so on purpose: a filler string grows both headers by the same bytes, and its length puts
    their ends in the same alignment block or in two."""
    from app.gguf.gguf_file import encode_header

    def filled(text: str):
        return write_glm4_moe(tmp_path / f"vendor-{len(text)}.gguf", ModelShape(extra_kv={"test.filler": text}),
                              dialect="vendor")

    probe = filled("x")
    header = read_header(probe)
    kvs, _ = patch_mod.apply_rules(header, load_profile("clover"))
    old, new = (len(encode_header(header.version, k, header.tensors, 1)) for k in (header.kvs.values(), kvs.values()))
    align = header.alignment
    assert 0 < abs(new - old) < align, "the patch must change the header by less than one alignment block"
    pad = next(p for p in range(align) if (-(-(old + p) // align) == -(-(new + p) // align)) == fits)
    path = filled("x" * (1 + pad)) if pad else probe
    assert _patched_fits(path) == fits
    return path


def test_in_place_when_safe(tmp_path):
    from app.model.patch import patch_in_place

    path = _vendor_file(tmp_path, fits=True)
    data_before = _data(path)
    report = patch_in_place(path)
    assert report.written and [r.status for r in report.results] == [APPLIED] * 3
    assert _data(path) == data_before
    assert not list(tmp_path.glob(".*clover-undo"))
    assert all(r.status == NOT_NEEDED for r in patch_in_place(path).results)


def test_in_place_refused_when_the_data_would_move(tmp_path):
    from app.model.patch import patch_in_place

    copy = _vendor_file(tmp_path, fits=False)
    before = sha256(copy)
    with pytest.raises(PatchError, match="in-place patching is not safe"):
        patch_in_place(copy)
    assert sha256(copy) == before


def test_crash_during_in_place_write_is_undone(tmp_path):
    from app.model.patch import patch_in_place, recover_in_place

    path = _vendor_file(tmp_path, fits=True)
    before = sha256(path)
    def torn(target, head):  # stop as a crash would: the journal written, the header half-written
        fd = os.open(target, os.O_RDWR)
        os.pwrite(fd, head[: len(head) // 2], 0)
        os.close(fd)
        raise PatchCancelled("simulated crash")

    with pytest.raises(PatchCancelled):
        patch_in_place(path, write_header=torn)
    assert sha256(path) != before  # the header is torn now
    with pytest.raises(GGUFError):
        read_header(path)
    assert recover_in_place(path)
    assert sha256(path) == before
    assert patch_in_place(path).written  # and the next try succeeds


@pytest.mark.slow  # writes a Clover-shaped file and starts the app
def test_an_upstream_qwen35moe_file_is_left_alone(tmp_path):
    """Held-out check: a correct Qwen3.6-shaped file (qwen35moe, shared-expert tensors, no
    expert_shared_count key) loads in the bundled llama.cpp as it is, so the patch offers nothing:
    the shared-expert rule asks llama.cpp whether this architecture needs the key."""
    from tests.helpers.clover_shape import write_clover_shaped

    model = write_clover_shaped(tmp_path / "qwen3.6-shape.gguf", n_ctx=4096)
    report = patch_file(model, dry_run=True)
    assert not report.changed and not report.failed, [r.line() for r in report.results]
    shared = next(r for r in report.results if r.rule_id == "expert-shared-count")
    assert "reads qwen35moe files without it" in shared.detail
    result = run_app("patch", model, "--dry-run")
    assert result.returncode == 0 and "would fix" not in result.stdout, result.stdout


def test_the_shared_expert_key_is_still_added_where_llama_cpp_requires_it(double):
    """glm4moe reads expert_shared_count: the vendor file without it still gets the key."""
    from app.model.patch import llama_requires_key

    requires = llama_requires_key(double["vendor"])
    assert requires("glm4moe.expert_shared_count") is True
    assert llama_requires_key(double["upstream"])("glm4moe.expert_shared_count") is False
    report = patch_file(double["vendor"], dry_run=True)
    assert [r.status for r in report.results] == ["applied"] * 3
