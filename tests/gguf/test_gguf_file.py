"""The GGUF header reader/writer: exact round trips, agreement with the gguf package, clear errors."""

from __future__ import annotations

import random
import struct

import gguf
import pytest

from app.gguf.gguf_file import KV, GGUFError, GGUFTruncated, ValueType, encode_header, parse_header, read_header
from tests.helpers.app_process import run_app
from tests.helpers.gguf_models import write_deepseek_moe, write_glm4_moe


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return write_glm4_moe(tmp_path_factory.mktemp("gguf") / "glm.gguf", dialect="vendor")


def _head_bytes(path, header) -> bytes:
    with open(path, "rb") as f:
        return f.read(header.data_offset)


@pytest.mark.parametrize("which", ["smollm2", "glm"])
def test_header_round_trips_byte_for_byte(which, smollm2, small):
    path = smollm2 if which == "smollm2" else small
    header = read_header(path)
    again = encode_header(header.version, header.kvs.values(), header.tensors, header.alignment)
    assert again == _head_bytes(path, header)
    assert header.data_offset == len(again)


def test_agrees_with_the_gguf_package(smollm2):
    ours = read_header(smollm2)
    theirs = gguf.GGUFReader(str(smollm2))
    their_keys = [k for k in theirs.fields if not k.startswith("GGUF.")]
    assert list(ours.kvs) == their_keys
    assert ours.get("general.architecture") == "llama"
    assert ours.get("llama.block_count") == 30
    tokens = ours.get("tokenizer.ggml.tokens")
    assert len(tokens) == 49152 and tokens[0] == "<|endoftext|>"
    assert len(ours.tensors) == len(theirs.tensors)
    for mine, t in zip(ours.tensors, theirs.tensors, strict=True):
        assert mine.name == t.name
        assert mine.shape == tuple(int(x) for x in t.shape)
        assert mine.ggml_type == int(t.tensor_type)
        assert ours.data_offset + mine.offset == int(t.data_offset)
        assert mine.n_bytes == int(t.n_bytes)


def test_only_the_header_is_read(tmp_path, smollm2):
    """A header is parsed from the first bytes of a file given its full size (remote planning)."""
    header = read_header(smollm2)
    with open(smollm2, "rb") as f:
        prefix = f.read(header.data_offset)
    again = parse_header(prefix, file_size=smollm2.stat().st_size)
    assert again.tensors == header.tensors
    with pytest.raises(GGUFError) as err:
        parse_header(prefix[:1000], file_size=smollm2.stat().st_size)
    assert err.value.field == "incomplete"


def test_kv_make_and_values():
    kv = KV.make("a.b", ValueType.ARRAY, ["x", "yz"], ValueType.STRING)
    assert kv.value == ["x", "yz"] and kv.count == 2
    assert KV.make("n", ValueType.UINT32, 7).value == 7
    assert list(KV.make("f", ValueType.ARRAY, [1.5, 2.5], ValueType.FLOAT32).value) == [1.5, 2.5]


# ----------------------------------------------------------------------------- errors

def _header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def _string(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


@pytest.mark.parametrize("data, field, text", [
    (b"PK\x03\x04" + b"\0" * 100, "magic", "not a GGUF file"),
    (b"FUGG" + b"\0" * 100, "magic", "big-endian"),
    (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "version", "big-endian"),
    (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version", "version 1 is obsolete"),
    (b"GGUF" + struct.pack("<IQQ", 99, 0, 0), "version", "unsupported GGUF version 99"),
    (_header(0, 2**60), "KV count", "cannot fit"),
    (_header(2**62, 0), "tensor count", "cannot fit"),
    (_header(0, 1) + struct.pack("<Q", 2**40) + b"key" + b"\0" * 20, "KV[0] key", "the limit is 65535"),
    (_header(0, 1) + _string(b"k") + struct.pack("<I", 77) + b"\0" * 8, "k type", "unknown value type 77"),
    (_header(0, 1) + _string(b"k") + struct.pack("<IIQ", 9, 8, 2**50) + b"\0" * 64, "k", "cannot fit"),
    (_header(0, 1) + _string(b"k") + struct.pack("<IIQ", 9, 4, 2**50) + b"\0" * 64, "k", "cannot fit"),
    (_header(0, 2) + _string(b"k") + struct.pack("<IB", 0, 1) + _string(b"k") + struct.pack("<IB", 0, 1),
     "KV[1] key", "duplicate key"),
    (_header(0, 1) + _string(b"k") + struct.pack("<I", 8) + struct.pack("<Q", 2) + b"\xff\xfe", None, None),
])
def test_malformed_headers_give_clear_errors(data, field, text):
    if text is None:  # invalid UTF-8 in a string value is kept raw until decoded, then replaced
        header = parse_header(data)
        assert header.kvs["k"].value == "\ufffd\ufffd"
        return
    with pytest.raises(GGUFError) as err:
        parse_header(data)
    assert err.value.field == field
    assert text in str(err.value)
    assert "byte offset" in str(err.value)


def _tensor_file(name=b"t", dims=(32,), ggml_type=0, offset=0, data=b"\0" * 128, kvs=b"", n_kv=0) -> bytes:
    head = _header(1, n_kv) + kvs + _string(name) + struct.pack(f"<I{len(dims)}q", len(dims), *dims)
    head += struct.pack("<IQ", ggml_type, offset)
    head += b"\0" * (-len(head) % 32)
    return head + data


@pytest.mark.parametrize("kwargs, text", [
    (dict(offset=3), "not a multiple of the alignment"),
    (dict(dims=(1, 2, 3, 4, 5)), "5 dimensions"),
    (dict(dims=(-1,)), "negative dimension"),
    (dict(dims=(2**40, 2**40)), "more than fit in int64"),
    (dict(ggml_type=200), "unknown ggml type 200"),
    (dict(ggml_type=2, dims=(33,)), "not a multiple of the Q4_0 block size 32"),
    (dict(name=b"n" * 70), "the limit is 63"),
    (dict(offset=2**50), "runs past the end of the file: the data section holds 128 bytes"),
    (dict(kvs=_string(b"general.alignment") + struct.pack("<IB", 0, 32), n_kv=1), "must be uint32"),
    (dict(kvs=_string(b"general.alignment") + struct.pack("<II", 4, 48), n_kv=1), "not a power of two"),
])
def test_bad_tensor_infos_give_clear_errors(kwargs, text):
    with pytest.raises(GGUFError) as err:
        parse_header(_tensor_file(**kwargs))
    assert text in str(err.value)


# A file that ends early, and the least size it needs (exact: the header is whole, so it says where the
# data ends), said as such; a count beyond any file's size stays a corrupt field (the rows above).
_CUT_SHORT = [
    (b"", 4, False, "magic"),
    (b"GG", 4, False, "magic"),
    (_header(0, 1)[:20], 24, False, "KV count"),
    (_header(0, 40), 24 + 40 * 13, False, "KV count"),
    (_header(0, 1) + _string(b"k") + struct.pack("<IIQ", 9, 8, 2) + _string(b"ok") + struct.pack("<Q", 999) + b"x",
     24 + 9 + 4 + 12 + 10 + 8 + 999, False, "k"),
    (_header(0, 1) + _string(b"k") + struct.pack("<IIQ", 9, 8, 48900) + b"\0" * 64, 24 + 9 + 4 + 12 + 48900 * 8,
     False, "k"),
    (_header(0, 1) + _string(b"k") + struct.pack("<IIQ", 9, 0, 100_000) + b"\0" * 64, 24 + 9 + 4 + 12 + 100_000,
     False, "k"),
    (_tensor_file(offset=64), 64 + 64 + 128, True, None),
    (_tensor_file(data=b"\0" * 100), 64 + 128, True, None),
    (_tensor_file()[:50], 49 + 8, False, "t offset"),  # the offset (u64) starts at 49
]


@pytest.mark.parametrize("data, needs, exact, field", _CUT_SHORT)
def test_a_file_that_ends_early_is_said_to_be_cut_short(data, needs, exact, field):
    """Before: "array of 48900 strings cannot fit in the 39805 bytes left", or a field "needs N bytes";
    a user needs to hear that the file is cut short, by how much, and to download it again."""
    with pytest.raises(GGUFTruncated) as err:
        parse_header(data)
    assert (err.value.have, err.value.needs, err.value.exact, err.value.field) == (len(data), needs, exact, field)
    size = f"{len(data):,} of {needs:,} bytes" if exact else f"{len(data):,} of at least {needs:,} bytes"
    assert str(err.value).startswith(f"the file is cut short ({size}") and str(err.value).endswith(
        "): download it again"), str(err.value)


def test_good_minimal_tensor_file_parses():
    header = parse_header(_tensor_file())
    assert header.tensors[0].name == "t" and header.tensors[0].n_bytes == 128
    assert header.data_offset % 32 == 0 and header.data_size == 128


def test_truncated_real_file_is_refused(tmp_path, small):
    data = small.read_bytes()
    header = read_header(small)
    for cut in (10, 100, header.header_end - 5, header.data_offset + 10, len(data) - 1):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        with pytest.raises(GGUFTruncated) as err:
            read_header(path)
        assert err.value.have == cut and cut < err.value.needs <= len(data)
        assert err.value.exact == (cut > header.header_end)  # past the header, the size it implies is known
        if err.value.exact:
            assert err.value.needs == len(data)  # this file has no padding after its last tensor


def test_plan_of_a_file_cut_short_says_so_in_one_sentence(tmp_path, small):
    """`python -m app plan` on a download cut inside its vocabulary and one cut inside its data: exit 2,
    one line that says the file is cut short, both sizes, and to download it again."""
    data = small.read_bytes()
    header = read_header(small)
    tokens = header.kvs["tokenizer.ggml.tokens"]
    inside_tokens, inside_data = tokens.offset + tokens.size // 2, header.data_offset + 1000
    for cut, says in ((inside_tokens, "of at least"), (inside_data, f"of {len(data):,}")):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        r = run_app("plan", path, timeout=120)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert r.stderr.startswith(f"error: the file is cut short ({cut:,} {says}"), r.stderr
        assert r.stderr.endswith("download it again\n") and r.stderr.count("\n") == 1, r.stderr
        assert "Traceback" not in r.stderr and r.stdout == ""


def test_fuzzed_headers_only_ever_raise_gguf_error(small):
    """Random mutations of a real header: the reader parses or raises GGUFError, nothing else."""
    original = small.read_bytes()
    header = read_header(small)
    rng = random.Random(20261202)
    outcomes = {"parsed": 0, "refused": 0}
    for _ in range(1500):
        data = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(0, header.data_offset)
            op = rng.random()
            if op < 0.5:
                data[pos] ^= 1 << rng.randrange(8)
            elif op < 0.8:
                data[pos] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
            else:  # a large 64-bit value where a count or length may be
                struct.pack_into("<Q", data, min(pos, header.data_offset - 8), rng.choice([2**63, 2**32, 2**64 - 1]))
        if rng.random() < 0.1:
            data = data[:rng.randrange(len(data))]
        try:
            parse_header(bytes(data))
            outcomes["parsed"] += 1
        except GGUFError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 100 and outcomes["parsed"] > 10, outcomes


def test_deepseek_double_header(tmp_path):
    header = read_header(write_deepseek_moe(tmp_path / "d.gguf"))
    assert header.architecture == "deepseek"
    assert header.get("deepseek.expert_shared_count") == 1
    assert any(t.name == "blk.1.ffn_up_exps.weight" and t.shape == (64, 32, 8) for t in header.tensors)


def test_a_large_string_array_met_again_is_not_walked_again_yet_never_misread(monkeypatch):
    """The second read of a 5,000-string array reuses the first walk (a patch reads its vocabulary
    twice); a different array with the same count and the same first bytes is walked afresh."""
    from app.gguf import gguf_read

    def file(tokens: list[str]) -> bytes:
        kvs = [KV.make("tokenizer.ggml.tokens", ValueType.ARRAY, tokens, ValueType.STRING),
               KV.make("after", ValueType.UINT32, 7)]
        return encode_header(3, kvs, [], 32)

    tokens = [f"t{i}" for i in range(5000)]
    changed = list(tokens)
    changed[4000] = "a much longer token than the one it replaces"
    gguf_read._WALKED.clear()
    first = parse_header(file(tokens))
    assert len(gguf_read._WALKED) == 1
    calls = []
    real = gguf_read._U64.unpack_from
    monkeypatch.setattr(gguf_read, "_U64", type("Counting", (), {
        "unpack_from": staticmethod(lambda *a: calls.append(1) or real(*a))})())
    again = parse_header(file(tokens))
    walked_again = len(calls)
    other = parse_header(file(changed))
    assert walked_again < 100  # the 5,000 strings were not walked a second time
    assert again.kvs["tokenizer.ggml.tokens"].value == tokens and again.get("after") == 7
    assert other.kvs["tokenizer.ggml.tokens"].value == changed and other.get("after") == 7
    assert first.data_offset == again.data_offset != other.data_offset
