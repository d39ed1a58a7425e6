"""The Hugging Face Hub: find GGUF models, list a repo's files, plan each file from its header. No Qt.

Search and listings go through `huggingface_hub` (the field's own client): `HfApi.list_models`
with the `gguf` filter sorted by downloads, and `model_info(files_metadata=True)` for each file's
size and LFS SHA-256, so every download from the Hub is verified. The endpoint is `HF_ENDPOINT`
(a mirror, or the tests' fake Hub on 127.0.0.1), read at each call; the token is the one the user
pasted (kept like the endpoints' keys) or `HF_TOKEN`.

A repo's GGUF files are grouped into models: a split model (`NAME-00001-of-00003.gguf`) is one
entry with its parts and their total size; `mmproj` files (vision projectors) and other files are
listed apart. `plan_files` reads each model's header over HTTP Range (the first part's, plus the
other parts' tensor tables, a few hundred KiB each) in parallel, bounded, cached by SHA-256, and
plans it for this machine with the same planner as a local file; a slow or failing read is
reported for that file only. `recommend` picks the file for this GPU and says why.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.base.paths import app_dirs
from app.fetch.no_connection import NO_HUB
from app.gguf.gguf_file import GGUFError, GGUFHeader
from app.gguf.model_facts import BlockFacts, ModelFacts, facts_from_header

if TYPE_CHECKING:
    from app.machine.snapshot import Machine
    from app.model.plan import Plan, PlannedFile, PlanRequest

DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_NAME = "huggingface-hub"  # the key store's name for the pasted Hub token (app.base.keystore)
HEADER_WORKERS = 6  # header reads at once
MAX_RATE_WAIT = 60.0  # seconds: a Retry-After longer than this is reported instead of waited out

QUANT_RE = re.compile(
    r"(?i)(?<![A-Za-z0-9])((?:UD-)?(?:I?Q[1-8](?:_[A-Z0-9]{1,3})*|BF16|F16|F32|MXFP4(?:_MOE)?|TQ[12]_0))"
    r"(?![A-Za-z0-9])")
SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")


class HubError(Exception):
    """A Hub call failed; `kind` is one of not-found, gated, offline, rate-limited, bad-input, error."""

    def __init__(self, kind: str, message: str, retry_after: float | None = None, details: str = "") -> None:
        super().__init__(message)
        self.kind, self.retry_after = kind, retry_after
        self.details = details  # what a bug report needs, apart from the sentence (the offline case's error)


# ----------------------------------------------------------------------------- endpoint and token


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def saved_token() -> str | None:
    from app.base.keystore import get_secret

    return get_secret(TOKEN_NAME)


def save_token(token: str | None) -> None:
    from app.base.keystore import set_secret

    set_secret(TOKEN_NAME, token.strip() if token else None)


def token() -> str | None:
    return saved_token() or os.environ.get("HF_TOKEN") or None


def file_url(repo_id: str, path: str, revision: str = "main") -> str:
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo_id, path, revision=revision, endpoint=endpoint())


def model_page(repo_id: str) -> str:
    return f"{endpoint()}/{repo_id}"


# ----------------------------------------------------------------------------- what the Hub lists


@dataclass(frozen=True)
class HubModel:
    repo_id: str
    downloads: int
    likes: int
    license: str
    last_modified: datetime | None
    gated: bool
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int | None
    sha256: str | None  # the LFS object's SHA-256: what a download is checked against


@dataclass(frozen=True)
class ModelFile:
    """One model in a repo: a single GGUF, or all parts of a split one."""

    name: str  # the file (or, for a split model, its name without the part suffix)
    parts: tuple[RepoFile, ...]
    quant: str | None
    split_count: int = 1  # parts the names announce (a missing one makes the model unusable)

    @property
    def size(self) -> int:
        return sum(p.size or 0 for p in self.parts)

    @property
    def first(self) -> RepoFile:
        return self.parts[0]

    @property
    def missing_parts(self) -> int:
        return self.split_count - len(self.parts)


@dataclass(frozen=True)
class RepoListing:
    repo_id: str
    models: tuple[ModelFile, ...]
    mmproj: tuple[RepoFile, ...]
    other: tuple[RepoFile, ...]
    gated: bool
    license: str


def quant_of(name: str) -> str | None:
    found = QUANT_RE.findall(Path(name).stem)
    return found[-1].upper() if found else None


def group_files(files: Iterable[RepoFile]) -> tuple[list[ModelFile], list[RepoFile], list[RepoFile]]:
    """(models, mmproj files, other files); split parts grouped by their common name."""
    models: list[ModelFile] = []
    mmproj: list[RepoFile] = []
    other: list[RepoFile] = []
    splits: dict[str, list[tuple[int, int, RepoFile]]] = {}
    for f in files:
        base = f.path.rsplit("/", 1)[-1]
        if not base.lower().endswith(".gguf"):
            other.append(f)
        elif "mmproj" in base.lower():
            mmproj.append(f)
        elif m := SPLIT_RE.match(f.path):
            splits.setdefault(m.group("stem"), []).append((int(m.group("index")), int(m.group("count")), f))
        else:
            models.append(ModelFile(f.path, (f,), quant_of(f.path)))
    for stem, parts in splits.items():
        parts.sort(key=lambda p: p[0])
        count = max(p[1] for p in parts)
        models.append(ModelFile(f"{stem}.gguf", tuple(p[2] for p in parts), quant_of(stem), count))
    models.sort(key=lambda m: (m.size, m.name))
    return models, mmproj, other


def _license(tags: Iterable[str] | None, card: Any = None) -> str:
    for t in tags or ():
        if t.startswith("license:"):
            return t.split(":", 1)[1]
    lic = getattr(card, "license", None) if card is not None else None
    return str(lic) if lic else ""


REACH_TIMEOUT = 5.0  # seconds to open a connection to the Hub before it counts as out of reach


class Hub:
    """The Hub calls the app makes, with errors turned into HubError messages a user can act on."""

    def __init__(self, token_: str | None = None, *, timeout: float = 20.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        from huggingface_hub import HfApi

        self._token = token_ if token_ is not None else token()
        self.endpoint = endpoint()
        self.api = HfApi(endpoint=self.endpoint, token=self._token or False)
        self.timeout = timeout
        self._sleep = sleep

    def search(self, query: str, limit: int = 30) -> list[HubModel]:
        """GGUF model repos matching `query`, most downloaded first."""
        query = query.strip()

        def call() -> list[HubModel]:
            found = self.api.list_models(search=query or None, filter="gguf", sort="downloads", limit=limit,
                                         expand=["downloads", "likes", "lastModified", "gated", "tags"])
            out = []
            for m in found:
                out.append(HubModel(m.id, int(m.downloads or 0), int(m.likes or 0), _license(m.tags),
                                    m.last_modified, bool(m.gated), tuple(m.tags or ())))
            return out

        return self._call(call, what=f"search for {query!r}")

    def listing(self, repo_id: str) -> RepoListing:
        """A repo's files with sizes and SHA-256, grouped into models, mmproj and other files."""
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id or ""):
            raise HubError("bad-input", f"{repo_id!r} is not a repo id (owner/name)")

        def call() -> RepoListing:
            info = self.api.model_info(repo_id, files_metadata=True, timeout=self.timeout)
            files = [RepoFile(s.rfilename, s.size if s.size is not None else (s.lfs.size if s.lfs else None),
                              s.lfs.sha256 if s.lfs else None) for s in (info.siblings or [])]
            models, mmproj, other = group_files(files)
            return RepoListing(repo_id, tuple(models), tuple(mmproj), tuple(other), bool(info.gated),
                               _license(info.tags, info.card_data))

        return self._call(call, what=repo_id, repo_id=repo_id)

    # -------------------------------------------------------------- errors

    def _reach(self) -> None:
        """Fail at once where the Hub cannot be reached: huggingface_hub retries a refused or failed
        connection five times (23 s of "Searching…" before the offline sentence). Skipped behind a
        proxy, where the Hub is reached through it."""
        if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                                          "all_proxy")):
            return
        url = urllib.parse.urlsplit(self.endpoint)
        port = url.port or (443 if url.scheme == "https" else 80)
        with socket.create_connection((url.hostname or "", port), timeout=min(self.timeout, REACH_TIMEOUT)):
            pass

    def _call(self, fn: Callable[[], Any], *, what: str, repo_id: str | None = None, attempts: int = 3) -> Any:
        for attempt in range(attempts):
            try:
                self._reach()
                return fn()
            except HubError:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure becomes a message a user can act on
                err = hub_error(exc, what=what, repo_id=repo_id, host=self.endpoint)
                if err.kind == "rate-limited" and attempt + 1 < attempts and (err.retry_after or 0) <= MAX_RATE_WAIT:
                    self._sleep(err.retry_after or 1.0)
                    continue
                raise err from None
        raise AssertionError("unreachable")


def _retry_after(response: Any) -> float | None:
    value = (getattr(response, "headers", None) or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def hub_error(exc: BaseException, *, what: str, repo_id: str | None = None, host: str = "") -> HubError:
    """Turn what huggingface_hub (or the network under it) raised into a HubError."""
    from huggingface_hub import errors

    host = host or endpoint()
    name = type(exc).__name__
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(exc, errors.GatedRepoError) or (status == 403 and repo_id):
        return HubError("gated", f"{repo_id or what} is gated: accept the licence on its model page "
                                 f"({host}/{repo_id}), then paste a Hugging Face token (Settings › Hub token).")
    if isinstance(exc, errors.RepositoryNotFoundError) or status == 404:
        return HubError("not-found", f"no model repository {repo_id or what!r} on {host} (or it is private: "
                                     "paste a token that can read it)")
    if status == 401:
        return HubError("gated", f"{host} refused the token for {what}: paste a valid Hugging Face token")
    if status == 429:
        wait = _retry_after(response)
        later = f"; try again in {wait:.0f} s" if wait else ""
        return HubError("rate-limited", f"the Hub is rate-limiting requests ({what}){later}", wait)
    network = any(word in name for word in ("Connect", "Timeout", "Network", "Protocol"))
    if isinstance(exc, errors.OfflineModeIsEnabled) or network or (
            status is None and isinstance(exc, (ConnectionError, TimeoutError, OSError))):
        return HubError("offline", NO_HUB, details=f"cannot reach the Hub at {host}: {name}: {exc}")
    if status is not None:
        return HubError("error", f"the Hub answered HTTP {status} for {what}")
    return HubError("error", f"{what}: {name}: {exc}")


# ----------------------------------------------------------------------------- plans before downloading


@dataclass
class HubFile:
    """One model file of a repo as the Hub page lists it: the file, its plan for this machine from its
    header alone (a `PlannedFile`, the object the set-up and the load then take; None when the header
    could not be read), and what reading it cost."""

    file: ModelFile
    planned: PlannedFile | None = None
    header_bytes: int = 0
    seconds: float = 0.0
    error: str | None = None
    cached: bool = False
    disk_free: int | None = None
    recommended: bool = False
    why: str = ""

    @property
    def plan(self) -> Plan | None:
        return self.planned.plan if self.planned is not None else None

    @property
    def facts(self) -> ModelFacts | None:
        return self.planned.facts if self.planned is not None else None

    @property
    def profile(self) -> str | None:
        return self.planned.profile if self.planned is not None else None

    @property
    def dialect(self) -> str | None:
        """e.g. "needs the Clover patch (3 fixes)"; None for upstream (or an unread header)."""
        return self.planned.dialect if self.planned is not None else None

    @property
    def fits(self) -> bool:
        return self.error is None and self.plan is not None and self.plan.fits and self.disk_ok

    @property
    def disk_needed(self) -> int:
        return self.file.size

    @property
    def disk_ok(self) -> bool:
        return self.disk_free is None or self.disk_free >= self.disk_needed

    def summary(self) -> str:
        """One line for the table: fits or not, experts in RAM, context, KV, RAM, disk, dialect."""
        if self.error:
            return f"header not read: {self.error}"
        from app.model.plan import size_text

        p = self.plan
        if p is None:
            return "not planned"
        if not p.fits:
            head = "does not fit"
        elif p.device == "cpu":
            head = "CPU only"
        elif p.n_cpu_moe:
            head = f"fits, experts of {p.n_cpu_moe} of {p.n_expert_blocks} blocks in RAM"
        else:
            head = "fits on the GPU"
        parts = [head, f"{p.n_ctx:,} ctx", f"KV {p.type_k}", f"RAM {size_text(p.breakdown.ram_total, 0)}"]
        if not self.disk_ok:
            parts.append(f"disk: needs {self.disk_needed / 1e9:.1f} GB, {(self.disk_free or 0) / 1e9:.1f} GB free")
        if self.facts is not None and self.facts.extra_blocks:
            parts.append("MTP head drafts" if p.breakdown.mtp else "MTP head not loaded")
        if self.dialect:
            parts.append(self.dialect)
        return " · ".join(parts)


class _FactsCache:
    """Facts and dialect per file SHA-256 (in memory and in the cache folder): a repo seen before
    plans without reading its headers again."""

    def __init__(self) -> None:
        self._mem: dict[str, dict] = {}
        self._lock = threading.Lock()

    def _path(self, key: str) -> Path:
        return app_dirs().cache / "hub-headers" / f"{key}.json"

    def get(self, key: str | None) -> dict | None:
        if not key:
            return None
        with self._lock:
            if key in self._mem:
                return self._mem[key]
        try:
            data = json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None
        with self._lock:
            self._mem[key] = data
        return data

    def put(self, key: str | None, data: dict) -> None:
        if not key:
            return
        with self._lock:
            self._mem[key] = data
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(data))
            tmp.replace(path)
        except OSError:
            pass  # a cache that cannot be written is only slower


CACHE = _FactsCache()


def _facts_to_dict(facts: ModelFacts) -> dict:
    return asdict(facts)


def _facts_from_dict(d: dict) -> ModelFacts:
    d = dict(d)
    d["blocks"] = tuple(BlockFacts(**b) for b in d["blocks"])
    d["n_head_kv"] = tuple(d["n_head_kv"])
    d["extra_blocks"] = tuple(d.get("extra_blocks", ()))
    return ModelFacts(**d)


def merged_header_facts(headers: list[GGUFHeader]) -> ModelFacts:
    """Facts of a model from its parts: the first part's metadata with every part's tensors."""
    first = headers[0]
    if len(headers) == 1:
        return facts_from_header(first)
    from dataclasses import replace

    merged = replace(first, tensors=[t for h in headers for t in h.tensors],
                     file_size=sum(h.file_size for h in headers))
    return facts_from_header(merged)


def read_model_header(repo_id: str, model: ModelFile, tok: str | None,
                      timeout: float) -> tuple[ModelFacts, GGUFHeader, int]:
    """(facts, the first part's header, bytes read) for a model on the Hub, over HTTP Range."""
    from app.net.remote_gguf import fetch_header_counted

    if model.missing_parts > 0:
        raise HubError("bad-input", f"split model with {model.missing_parts} of {model.split_count} parts missing "
                                    "from the repo")
    headers, read = [], 0
    for part in model.parts:
        header, n = fetch_header_counted(file_url(repo_id, part.path), tok, timeout=timeout)
        headers.append(header)
        read += n
    return merged_header_facts(headers), headers[0], read


def dialect_of(header: GGUFHeader) -> tuple[str | None, int]:
    """(profile name, the fixes it makes) when the header is in a known vendor dialect, else (None, 0)."""
    from app.model.patch import matching_profile

    found = matching_profile(header)
    return found if found is not None else (None, 0)


def _cached_fixes(cached: dict) -> int:
    """The fixes a cached entry's dialect makes (entries written before they were kept say them in words)."""
    if "fixes" in cached:
        return int(cached["fixes"])
    m = re.search(r"\((\d+) fix", cached.get("dialect") or "")
    return int(m.group(1)) if m else 0


def plan_files(repo_id: str, models: Iterable[ModelFile], machine: Machine,
               request: PlanRequest | None = None, *,
               on_result: Callable[[HubFile], None] | None = None, workers: int = HEADER_WORKERS,
               timeout: float = 20.0, tok: str | None = None, models_dir: Path | None = None) -> list[HubFile]:
    """Plan every model file from its header, `workers` reads at once; `on_result` gets each as it
    is ready (a slow file does not hold back the others). Results in the order given."""
    from app.model.plan import PlanRequest, plan_facts
    from app.net.download import free_bytes

    request = request or PlanRequest()
    tok = tok if tok is not None else token()
    folder = models_dir or app_dirs().models
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = free_bytes(existing)
    models = list(models)

    def one(model: ModelFile) -> HubFile:
        fp = HubFile(model, disk_free=free)
        started = time.monotonic()
        key = model.first.sha256
        try:
            cached = CACHE.get(key)
            if cached is not None:
                facts, profile, fixes = _facts_from_dict(cached["facts"]), cached["profile"], _cached_fixes(cached)
                fp.cached = True
            else:
                facts, first, fp.header_bytes = read_model_header(repo_id, model, tok, timeout)
                profile, fixes = dialect_of(first)
                CACHE.put(key, {"facts": _facts_to_dict(facts), "profile": profile, "fixes": fixes})
            fp.planned = plan_facts(facts, machine, request, profile=profile, fixes=fixes)
        except HubError as exc:
            fp.error = str(exc)
        except (GGUFError, KeyError, ValueError) as exc:
            fp.error = f"not a readable GGUF header: {exc}"
        except Exception as exc:  # noqa: BLE001 - a failing file is reported in its row, the rest go on
            fp.error = str(exc) or type(exc).__name__
        fp.seconds = time.monotonic() - started
        return fp

    results: dict[int, HubFile] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="hub-header") as pool:
        futures = {pool.submit(one, m): i for i, m in enumerate(models)}
        for fut in as_completed(futures):
            fp = fut.result()
            results[futures[fut]] = fp
            if on_result:
                on_result(fp)
    ordered = [results[i] for i in range(len(models))]
    recommend(ordered)
    return ordered


# ----------------------------------------------------------------------------- which one to take

_FOUR_BIT = re.compile(r"Q4|IQ4|MXFP4")


def recommend(plans: list[HubFile]) -> HubFile | None:
    """Mark the file to take on this machine and say why:
    on a GPU, the largest that runs at full speed (everything on the GPU), else the one that fits
    with the fewest experts in system RAM (then the larger); without a GPU, the largest 4-bit file
    that fits in RAM (each byte is read once per token on a CPU), else the smallest that fits."""
    for p in plans:
        p.recommended, p.why = False, ""
    fitting = [p for p in plans if p.fits]
    if not fitting:
        return None
    gpu = [(p, plan) for p in fitting if (plan := p.plan) is not None and plan.device == "gpu"]
    if gpu:
        full = [p for p, plan in gpu if plan.n_cpu_moe == 0]
        if full:
            best = max(full, key=lambda p: p.file.size)
            best.why = "the largest file that runs entirely on the GPU, at full speed"
        else:
            best, plan = min(gpu, key=lambda pp: (pp[1].n_cpu_moe, -pp[0].file.size))
            best.why = (f"fits with the fewest experts in system RAM ({plan.n_cpu_moe} of "
                        f"{plan.n_expert_blocks} blocks); nothing fits entirely on this GPU")
    else:
        four = [p for p in fitting if p.file.quant and _FOUR_BIT.search(p.file.quant)]
        if four:
            best = max(four, key=lambda p: p.file.size)
            best.why = "CPU only: the largest 4-bit file that fits in RAM (larger files run slower on a CPU)"
        else:
            best = min(fitting, key=lambda p: p.file.size)
            best.why = "CPU only: the smallest file that fits in RAM"
    best.recommended = True
    return best


def parse_hub_spec(spec: str) -> tuple[str, str | None]:
    """`hub:OWNER/NAME[:FILE_OR_QUANT]` -> (repo id, file path or quant or None)."""
    body = spec[4:] if spec.startswith("hub:") else spec
    repo, _, choice = body.partition(":")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        raise HubError("bad-input", f"{spec!r}: expected hub:OWNER/NAME[:FILE_OR_QUANT]")
    return repo, choice or None


def pick(listing: RepoListing, choice: str | None, plans: list[HubFile] | None = None) -> ModelFile:
    """The model a `choice` (a file path, a split model's name, or a quant like Q4_K_M) names;
    without one, the recommended file (plans given) or the only model."""
    if choice:
        for m in listing.models:
            if choice in (m.name, *[p.path for p in m.parts]) or m.name.endswith("/" + choice):
                return m
        by_quant = [m for m in listing.models if m.quant and m.quant.upper() == choice.upper()]
        if len(by_quant) == 1:
            return by_quant[0]
        if by_quant:
            names = ", ".join(m.name for m in by_quant)
            raise HubError("bad-input", f"{len(by_quant)} files of {listing.repo_id} are {choice}: {names}; name one")
        known = ", ".join(m.name for m in listing.models) or "none"
        raise HubError("bad-input", f"{listing.repo_id} has no GGUF file or quant {choice!r} (files: {known})")
    if plans:
        best = next((p for p in plans if p.recommended), None)
        if best is not None:
            return best.file
    if len(listing.models) == 1:
        return listing.models[0]
    if not listing.models:
        raise HubError("bad-input", f"{listing.repo_id} has no GGUF model files")
    raise HubError("bad-input", f"{listing.repo_id} has {len(listing.models)} GGUF files and none fits this "
                                "machine; name one (hub:REPO:FILE_OR_QUANT)")
