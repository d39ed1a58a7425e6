"""No connection, said as a sentence (issue 53, item 2): a host name that does not resolve or a closed
port is told apart from an answer (a 404) however deeply the error was wrapped, and said as "No
connection to the Hugging Face Hub: …" with the errno apart."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from app.fetch.no_connection import NO_HUB, sentence, unreachable
from app.net.download import Downloader, DownloadError
from app.net.remote_gguf import RemoteError, fetch_header
from tests.helpers.http_server import ServerState, serve

UNRESOLVABLE = "http://clover-no-such-host.invalid/m.gguf"
CLOSED = "http://127.0.0.1:9/m.gguf"  # the discard port: nothing listens there


def opened(url: str) -> BaseException:
    try:
        urllib.request.urlopen(url, timeout=10)
    except Exception as exc:  # noqa: BLE001 -- the error is what the test looks at
        return exc
    raise AssertionError(f"{url} answered")


@pytest.mark.parametrize("url", [UNRESOLVABLE, CLOSED])
def test_a_connection_that_cannot_be_made_is_unreachable(url):
    assert unreachable(opened(url))
    with pytest.raises(RemoteError) as err:  # the header reader wraps it (raise ... from None)
        fetch_header(url, timeout=10)
    assert unreachable(err.value)
    said, details = sentence(err.value, hub="https://huggingface.co")
    assert said == NO_HUB and "Errno" not in said and details == str(err.value)


def test_a_download_that_cannot_connect_is_unreachable(tmp_path):
    with pytest.raises(DownloadError) as err:
        Downloader(retries=0, backoff=0.01).download(CLOSED, tmp_path / "m.gguf")
    assert unreachable(err.value) and sentence(err.value)[0] == NO_HUB


def test_an_answer_is_not_unreachable(tmp_path):
    with serve(ServerState(files={})) as base:
        answered = opened(base + "/missing.gguf")
        with pytest.raises(RemoteError) as err:
            fetch_header(base + "/missing.gguf", timeout=10)
    assert isinstance(answered, urllib.error.HTTPError) and not unreachable(answered)
    assert not unreachable(err.value) and sentence(err.value) == (str(err.value), "")
    assert not unreachable(ValueError("not a GGUF file"))


def test_another_host_than_the_hub_is_named():
    said, _ = sentence(opened(UNRESOLVABLE), UNRESOLVABLE, "https://huggingface.co")
    assert said == ("No connection to clover-no-such-host.invalid: downloads need the internet; the models on "
                    "this machine work offline.")
    assert sentence(opened(CLOSED), "https://huggingface.co/x", "https://huggingface.co")[0] == NO_HUB
