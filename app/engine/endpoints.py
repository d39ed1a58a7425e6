"""Remote endpoints the user has added: names and URLs in the config folder, API keys kept apart. No Qt.

API keys are kept by `app.base.keystore` (the OS keyring, or a file readable by the user only).
"""

from __future__ import annotations

import json
from pathlib import Path

from app.base.keystore import get_key, set_key, write_private
from app.base.paths import app_dirs
from app.engine.remote import Endpoint


def _endpoints_path() -> Path:
    return app_dirs().config / "endpoints.json"


def load_endpoints() -> list[Endpoint]:
    try:
        data = json.loads(_endpoints_path().read_text())
    except (OSError, ValueError):
        return []
    return [Endpoint(e["name"], e["url"], e.get("model", ""), get_key(e["name"])) for e in data.get("endpoints", [])]


def save_endpoint(endpoint: Endpoint) -> None:
    if not endpoint.name.strip():
        raise ValueError("an endpoint needs a name")
    if endpoint.name.startswith("@"):
        raise ValueError("an endpoint name cannot start with '@'")
    if not endpoint.url.startswith(("http://", "https://")):
        raise ValueError("the endpoint URL must start with http:// or https://")
    others = [e for e in load_endpoints() if e.name != endpoint.name]
    data = [{"name": e.name, "url": e.url, "model": e.model} for e in others + [endpoint]]
    write_private(_endpoints_path(), json.dumps({"version": 1, "endpoints": data}, indent=2))
    set_key(endpoint.name, endpoint.api_key)


def remove_endpoint(name: str) -> None:
    data = [{"name": e.name, "url": e.url, "model": e.model} for e in load_endpoints() if e.name != name]
    write_private(_endpoints_path(), json.dumps({"version": 1, "endpoints": data}, indent=2))
    set_key(name, None)
