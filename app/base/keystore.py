"""Secrets kept for the user: remote endpoints' API keys and the Hugging Face token. No Qt.

They go to the OS keyring (Secret Service, macOS Keychain, Windows Credential Locker) through the
`keyring` library when a usable backend exists. Without one (a headless Linux box) they go to
`<config>/endpoint-keys.json`, readable by the user only, and `key_storage()` says so plainly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from app.base.paths import app_dirs

SERVICE = "clover-launcher"


def _keys_path() -> Path:
    return app_dirs().config / "endpoint-keys.json"


def _keyring() -> Any:
    """The keyring module if it has a real backend, else None."""
    try:
        import keyring
        from keyring.backends import fail

        if isinstance(keyring.get_keyring(), fail.Keyring):
            return None
        return keyring
    except Exception:
        return None


def key_storage() -> str:
    kr = _keyring()
    if kr is not None:
        return f"the OS keyring ({type(kr.get_keyring()).__name__})"
    return f"a local file readable only by you ({_keys_path()}): no OS keyring is available"


def _read_keys() -> dict[str, str]:
    try:
        return json.loads(_keys_path().read_text())
    except (OSError, ValueError):
        return {}


def write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def set_key(name: str, key: str | None) -> None:
    kr = _keyring()
    if kr is not None:
        if key:
            kr.set_password(SERVICE, name, key)
        else:
            try:
                kr.delete_password(SERVICE, name)
            except Exception:
                pass
        return
    keys = _read_keys()
    if key:
        keys[name] = key
    else:
        keys.pop(name, None)
    write_private(_keys_path(), json.dumps({"_note": "API keys of Clover Launcher's remote endpoints. "
                                                      "Kept here because no OS keyring is available.", **keys}))


def get_key(name: str) -> str | None:
    kr = _keyring()
    if kr is not None:
        return kr.get_password(SERVICE, name)
    return _read_keys().get(name)


def set_secret(name: str, value: str | None) -> None:
    """Keep another secret (the Hugging Face token) the same way as the endpoints' keys."""
    set_key(f"@{name}", value)


def get_secret(name: str) -> str | None:
    return get_key(f"@{name}")
