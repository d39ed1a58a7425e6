"""A connection that could not be made (no network, a host name that does not resolve, a refused or
timed-out connection), told apart from other failures however deeply it was wrapped, and said as one
sentence with the technical detail apart, for the Hub search and the set-up to show: never an errno
in the main text. No Qt."""

from __future__ import annotations

import socket
import urllib.error
import urllib.parse

NO_HUB = ("No connection to the Hugging Face Hub: search and downloads need the internet; the models on this "
          "machine work offline.")
UNREACHABLE = (socket.gaierror, ConnectionRefusedError, ConnectionAbortedError, TimeoutError)


def error_chain(exc: BaseException) -> list[BaseException]:
    """The error and those it was raised from or during (`raise ... from None` keeps the latter)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` (or what it wraps) is a connection that could not be made, not an answer."""
    for link in error_chain(exc):
        if getattr(link, "kind", None) == "offline":  # the Hub client's own verdict (app/fetch/hub.py)
            return True
        if isinstance(link, urllib.error.HTTPError):
            return False  # the server answered
        if isinstance(link, UNREACHABLE) or type(link).__name__ == "OfflineModeIsEnabled":
            return True
        if isinstance(link, urllib.error.URLError) and isinstance(link.reason, (OSError, str)) \
                and "redirect" not in str(link.reason).lower():
            return True
        if isinstance(link, OSError) and link.errno in (101, 113):  # ENETUNREACH, EHOSTUNREACH
            return True
    return False


def sentence(exc: BaseException, url: str | None = None, hub: str | None = None) -> tuple[str, str]:
    """(what to show, the technical detail) of an error: for a connection that could not be made, NO_HUB
    (or the same words for `url`'s host when it is not the Hub's) and the error's own words apart;
    any other error's text as it is, with no detail."""
    text = str(exc) or type(exc).__name__
    if not unreachable(exc):
        return text, ""
    detail = getattr(exc, "details", "") or text  # a HubError keeps the error it was made from apart
    host = urllib.parse.urlsplit(url).hostname if url else None
    hub_host = urllib.parse.urlsplit(hub).hostname if hub else None
    if host and hub_host and host != hub_host:
        return (f"No connection to {host}: downloads need the internet; the models on this machine work "
                "offline.", detail)
    return NO_HUB, detail
