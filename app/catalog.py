"""The model catalog: shipped entries (resources/catalog.json) plus the user's own. No Qt.

An entry names a file, where to get it, its size and SHA-256 when known, its architecture and
the patch profile it needs. The user's entries (a URL, or a local file) live in the config folder
(`catalog.json`) and are validated the same way.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.paths import app_dirs, resource

_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class CatalogError(ValueError):
    pass


@dataclass(frozen=True)
class CatalogEntry:
    id: str
    name: str
    file_name: str
    description: str = ""
    url: str | None = None
    url_note: str = ""
    size: int | None = None
    sha256: str | None = None
    architecture: str | None = None
    patch_profile: str | None = None
    license: str = ""
    recommended: dict[str, Any] = field(default_factory=dict)
    local_path: str | None = None  # a file the user already has
    user: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, user: bool = False) -> "CatalogEntry":
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise CatalogError(f"catalog entry {data.get('id')!r} has unknown fields: {', '.join(sorted(unknown))}")
        for required in ("id", "name", "file_name"):
            if not data.get(required):
                raise CatalogError(f"catalog entry {data.get('id')!r} lacks {required}")
        if not _ID.match(data["id"]):
            raise CatalogError(f"catalog id {data['id']!r}: use lower-case letters, digits, '.', '_' and '-'")
        if "/" in data["file_name"] or "\\" in data["file_name"] or data["file_name"].startswith("."):
            raise CatalogError(f"catalog entry {data['id']!r}: file_name must be a plain file name")
        sha = data.get("sha256")
        if sha is not None and not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise CatalogError(f"catalog entry {data['id']!r}: sha256 must be 64 lower-case hex digits")
        url = data.get("url")
        if url is not None and not re.match(r"^https?://", url):
            raise CatalogError(f"catalog entry {data['id']!r}: url must be http(s)")
        return cls(**{**data, "user": user})


def _load(path: Path, *, user: bool) -> list[CatalogEntry]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except ValueError as exc:
        raise CatalogError(f"{path} is not valid JSON: {exc}") from None
    return [CatalogEntry.from_dict(d, user=user) for d in data.get("models", [])]


def user_catalog_path() -> Path:
    return app_dirs().config / "catalog.json"


def load_catalog() -> list[CatalogEntry]:
    entries = _load(resource("catalog.json"), user=False)
    ids = {e.id for e in entries}
    for e in _load(user_catalog_path(), user=True):
        if e.id in ids:
            entries = [x for x in entries if x.id != e.id]  # a user entry overrides a shipped one
        entries.append(e)
    return entries


def find(entry_id: str) -> CatalogEntry:
    for e in load_catalog():
        if e.id == entry_id:
            return e
    raise CatalogError(f"no model {entry_id!r} in the catalog (known: {', '.join(e.id for e in load_catalog())})")


def add_user_entry(entry: CatalogEntry) -> None:
    path = user_catalog_path()
    existing = [e for e in _load(path, user=True) if e.id != entry.id]
    data = [{k: v for k, v in asdict(e).items() if k != "user"} for e in existing + [entry]]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"version": 1, "models": data}, indent=2), encoding="utf-8")
    tmp.replace(path)


def entry_for_local_file(path: str | Path) -> CatalogEntry:
    """An entry for a GGUF the user has; its architecture picks the patch profile a catalog model uses."""
    from app.gguf_file import read_header

    p = Path(path)
    slug = re.sub(r"[^a-z0-9._-]+", "-", p.stem.lower()).strip("-")[:60] or "model"
    arch = read_header(p).architecture
    profile = next((e.patch_profile for e in load_catalog() if e.architecture == arch and e.patch_profile), None)
    return CatalogEntry(id=f"local-{slug}", name=f"{p.stem} (local file)", file_name=p.name,
                        local_path=str(p.resolve()), architecture=arch, patch_profile=profile, user=True)


def entry_for_url(name: str, url: str) -> CatalogEntry:
    """An entry for a model the user names by URL (the file name is the URL's last part)."""
    from urllib.parse import urlparse

    file_name = Path(urlparse(url).path).name
    if not file_name.endswith(".gguf"):
        raise CatalogError(f"the URL should end in a .gguf file name: {url}")
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-")[:60] or "model"
    return CatalogEntry.from_dict({"id": f"user-{slug}", "name": name, "file_name": file_name, "url": url}, user=True)
