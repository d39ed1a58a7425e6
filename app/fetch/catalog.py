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
from typing import TYPE_CHECKING, Any

from app.base.paths import app_dirs, resource

if TYPE_CHECKING:
    from app.fetch.hub import ModelFile

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
    # On the Hugging Face Hub: the repo, and the file (or a quant to pick from the repo's files);
    # without a file, `hub_search` is what the model browser searches for.
    hub_repo: str | None = None
    hub_file: str | None = None
    hub_revision: str = "main"
    quant: str | None = None
    hub_search: str | None = None
    # A split model's parts after the first ({"file": path in repo, "size": bytes, "sha256": hex}).
    parts: tuple[dict[str, Any], ...] = ()
    user: bool = False

    @property
    def is_split(self) -> bool:
        return bool(self.parts)

    @property
    def source(self) -> str:
        """Where the file comes from, in words."""
        if self.local_path:
            return f"local file {self.local_path}"
        if self.hub_repo and self.hub_file:
            return f"{self.hub_repo} › {self.hub_file}"
        if self.hub_repo:
            return f"{self.hub_repo} ({self.quant or 'pick a file'})"
        if self.url:
            return self.url
        if self.hub_search:
            return f"search the Hub for “{self.hub_search}”"
        return "no source yet"

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, user: bool = False) -> CatalogEntry:
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
        repo = data.get("hub_repo")
        if repo is not None and not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
            raise CatalogError(f"catalog entry {data['id']!r}: hub_repo must be OWNER/NAME")
        if not (url or repo or data.get("local_path") or data.get("hub_search")):
            raise CatalogError(f"catalog entry {data['id']!r} has no source: give hub_repo (and hub_file or quant), "
                               "hub_search, url or local_path")
        parts = tuple(dict(p) for p in data.get("parts") or ())
        return cls(**{**data, "parts": parts, "user": user})


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
    from app.gguf.gguf_file import read_header

    p = Path(path)
    slug = re.sub(r"[^a-z0-9._-]+", "-", p.stem.lower()).strip("-")[:60] or "model"
    arch = read_header(p).architecture
    profile = next((e.patch_profile for e in load_catalog() if e.architecture == arch and e.patch_profile), None)
    return CatalogEntry(id=f"local-{slug}", name=f"{p.stem} (local file)", file_name=p.name,
                        local_path=str(p.resolve()), architecture=arch, patch_profile=profile, user=True)


def entry_for_hub(repo_id: str, model: ModelFile, *, name: str | None = None, revision: str = "main",
                  architecture: str | None = None, patch_profile: str | None = None) -> CatalogEntry:
    """An entry for a model file picked in the Hub browser (`model` is an app.fetch.hub.ModelFile):
    size and SHA-256 from the Hub's metadata, so the download is verified."""
    first = model.first
    base = Path(first.path).name
    slug = re.sub(r"[^a-z0-9._-]+", "-", f"{repo_id.split('/')[-1]}-{Path(model.name).stem}".lower()).strip("-")
    parts = tuple({"file": p.path, "size": p.size, "sha256": p.sha256} for p in model.parts[1:])
    for existing in load_catalog():  # the same file already in the catalog (Clover, SmolLM2): reuse its id
        if existing.hub_repo == repo_id and existing.hub_file == first.path:
            return CatalogEntry(**{**asdict(existing), "size": first.size, "sha256": first.sha256, "parts": parts,
                                   "patch_profile": patch_profile or existing.patch_profile})
    return CatalogEntry.from_dict({
        "id": f"hub-{slug}"[:64].rstrip("-."), "name": name or f"{Path(model.name).stem} ({repo_id})",
        "file_name": base, "hub_repo": repo_id, "hub_file": first.path, "hub_revision": revision,
        "quant": model.quant, "size": first.size, "sha256": first.sha256, "parts": parts,
        "architecture": architecture, "patch_profile": patch_profile,
        "description": f"From the Hugging Face Hub: {repo_id}, {model.name}"}, user=True)


def entry_for_url(name: str, url: str) -> CatalogEntry:
    """An entry for a model the user names by URL (the file name is the URL's last part)."""
    from urllib.parse import urlparse

    file_name = Path(urlparse(url).path).name
    if not file_name.endswith(".gguf"):
        raise CatalogError(f"the URL should end in a .gguf file name: {url}")
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-") or "model"
    return CatalogEntry.from_dict({"id": f"user-{slug}"[:64].rstrip("-."), "name": name, "file_name": file_name,
                                   "url": url}, user=True)


def model_key(path: str | Path) -> str:
    """The settings key of a model file: its catalog id when the catalog knows the file, else its name."""
    name = Path(path).name
    for e in load_catalog():
        if name in (e.file_name, f"{Path(e.file_name).stem}.patched.gguf") or (
                e.local_path and Path(e.local_path).name == name):
            return e.id
    return name


def recommended_for(path: str | Path) -> dict[str, Any]:
    key = model_key(path)
    return next((dict(e.recommended) for e in load_catalog() if e.id == key), {})
