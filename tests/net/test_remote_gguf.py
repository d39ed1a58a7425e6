"""Plans before downloads: a GGUF header read over HTTP Range from a local server."""

from __future__ import annotations

import itertools

import pytest

from app.gguf.gguf_file import read_header
from app.net.remote_gguf import RemoteError, fetch_header
from tests.helpers.http_server import ServerState, serve


def test_header_over_range_requests(smollm2):
    state = ServerState(files={"/m.gguf": smollm2})
    with serve(state) as base:
        header = fetch_header(base + "/m.gguf", token="")
    local = read_header(smollm2)
    assert header.tensors == local.tensors and list(header.kvs) == list(local.kvs)
    assert header.file_size == smollm2.stat().st_size
    # the first request starts at 0 and each later one where the previous ended: no byte read twice
    ranges = [r["headers"]["Range"] for r in state.requests]
    assert ranges[0].startswith("bytes=0-")
    for before, after in itertools.pairwise(ranges):
        assert int(after.split("=")[1].split("-")[0]) == int(before.split("-")[1]) + 1
    header_size = local.data_offset
    assert state.bytes_sent < 4 * header_size  # the header, not the 98 MB file


def test_header_larger_than_the_first_read_is_fetched_in_steps(smollm2, monkeypatch):
    import app.net.remote_gguf as remote

    monkeypatch.setattr(remote, "FIRST_READ", 64 << 10)  # SmolLM2's header is about 1.6 MB
    state = ServerState(files={"/m.gguf": smollm2})
    with serve(state) as base:
        header, read = remote.fetch_header_counted(base + "/m.gguf", token="")
    assert header.tensors == read_header(smollm2).tensors
    assert len(state.requests) >= 3
    assert read == state.bytes_sent <= 4 * read_header(smollm2).data_offset


def test_server_without_range_support_is_read_only_as_far_as_needed(smollm2):
    state = ServerState(files={"/m.gguf": smollm2}, honor_range=False)
    with serve(state) as base:
        header = fetch_header(base + "/m.gguf", token="")
    assert header.tensors == read_header(smollm2).tensors


def test_token_is_sent_and_never_shown(smollm2):
    state = ServerState(files={"/m.gguf": smollm2}, require_token="s3cret")
    with serve(state) as base:
        assert fetch_header(base + "/m.gguf", token="s3cret").tensors
        with pytest.raises(RemoteError) as err:
            fetch_header(base + "/m.gguf", token="wrong-token")
    assert "401" in str(err.value) and "HF_TOKEN" in str(err.value)
    assert "wrong-token" not in str(err.value)


def test_token_does_not_follow_a_redirect_to_another_host(smollm2):
    cdn = ServerState(files={"/blob": smollm2})
    with serve(cdn) as cdn_base:
        hub = ServerState(require_token="s3cret", redirect={"/m.gguf": cdn_base + "/blob"})
        with serve(hub) as base:
            assert fetch_header(base + "/m.gguf", token="s3cret").tensors
    assert hub.requests[0]["headers"]["Authorization"] == "Bearer s3cret"
    assert cdn.requests and not any("Authorization" in q["headers"] for q in cdn.requests)


def test_missing_file_and_unreachable_server():
    with serve(ServerState()) as base:
        with pytest.raises(RemoteError, match="404"):
            fetch_header(base + "/nope.gguf", token="")
    with pytest.raises(RemoteError, match="cannot reach"):
        fetch_header("http://127.0.0.1:9/x.gguf", token="", timeout=5)


def test_an_html_page_is_not_taken_for_a_model(tmp_path):
    """A login page answered with 200 (a wrong URL, an expired session): said plainly."""
    page = tmp_path / "login.html"
    page.write_text("<!DOCTYPE html><html><body>Please log in</body></html>" + " " * 4000)
    with serve(ServerState(files={"/m.gguf": page})) as base:
        with pytest.raises(RemoteError, match="HTML page, not a GGUF file"):
            fetch_header(base + "/m.gguf", token="")
