"""Presets for a chat: a system prompt and sampling under a name. The app's own come from
resources/presets.json; the user's are kept in `<config>/presets.json` and may replace one of the
app's by its name. No Qt."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from app.base.fileio import write_text_atomic
from app.base.paths import app_dirs, resource


@dataclass(frozen=True)
class Preset:
    name: str
    system_prompt: str
    temperature: float
    top_p: float
    description: str = ""
    user: bool = False  # saved by the user (may be deleted)


def _check(raw: dict, user: bool) -> Preset:
    name = str(raw.get("name", "")).strip()
    if not name:
        raise ValueError("a preset needs a name")
    temperature, top_p = float(raw["temperature"]), float(raw["top_p"])
    if not (0.0 <= temperature <= 2.0 and 0.05 <= top_p <= 1.0) or not math.isfinite(temperature + top_p):
        raise ValueError(f"preset {name!r}: temperature 0 to 2 and top-p 0.05 to 1")
    return Preset(name, str(raw.get("system_prompt", "")), temperature, top_p, str(raw.get("description", "")), user)


def _user_file() -> Path:
    return app_dirs().config / "presets.json"


def _user_presets() -> list[Preset]:
    try:
        data = json.loads(_user_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    out = []
    for raw in data if isinstance(data, list) else []:
        try:
            out.append(_check(raw, user=True))
        except (KeyError, TypeError, ValueError):
            continue  # one damaged entry costs only itself
    return out


def presets() -> list[Preset]:
    """The app's presets, each replaced by the user's of the same name, then the user's others."""
    mine = {p.name: p for p in _user_presets()}
    builtin = [_check(raw, user=False) for raw in json.loads(resource("presets.json").read_text(encoding="utf-8"))]
    return [mine.pop(p.name, p) for p in builtin] + list(mine.values())


def save(preset: Preset) -> None:
    """Keep `preset` as the user's (replacing one of that name)."""
    checked = _check(asdict(preset), user=True)
    _write([p for p in _user_presets() if p.name != checked.name] + [checked])


def delete(name: str) -> bool:
    """Forget the user's preset `name` (an app preset it replaced comes back); False where there is none."""
    kept = _user_presets()
    left = [p for p in kept if p.name != name]
    if len(left) == len(kept):
        return False
    _write(left)
    return True


def _write(mine: list[Preset]) -> None:
    """The user's presets, replacing the file whole."""
    write_text_atomic(_user_file(), json.dumps([{k: v for k, v in asdict(p).items() if k != "user"} for p in mine],
                                               indent=1, ensure_ascii=False) + "\n")
