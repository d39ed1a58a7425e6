"""Opening URLs that may carry a token. No Qt.

urllib's redirect handler copies every header to the next request, Authorization included, whatever
host the redirect names: a Hugging Face token would go to the CDN a file redirects to, or to any
host a compromised or mistaken redirect points at. Here the token goes only to the origin (scheme,
host, port) it was given for, as `requests` does, and a redirect from HTTPS down to plain HTTP is
refused.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(parts.scheme)


class _TokenStaysHome(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        old_scheme, new_scheme = urllib.parse.urlsplit(req.full_url).scheme, urllib.parse.urlsplit(new.full_url).scheme
        if old_scheme == "https" and new_scheme != "https":
            raise urllib.error.HTTPError(req.full_url, code, "refused a redirect from HTTPS to plain HTTP",
                                         headers, fp)
        if origin(new.full_url) != origin(req.full_url):
            new.remove_header("Authorization")
        return new


_opener = urllib.request.build_opener(_TokenStaysHome)


def open_url(request: urllib.request.Request, timeout: float):
    """`urllib.request.urlopen`, with redirects that keep the token at home."""
    return _opener.open(request, timeout=timeout)
