"""The prompt cache: sequence states at prompt prefixes, in RAM and on disk, found again by any later
request, in any slot, after a restart too. No Qt.

An entry is a token prefix and the whole state of a sequence that holds exactly those tokens. The
decode loop (`app.engine.slots`) stores one while it reads a prompt, at bounds that repeat
(`app.engine.read_plan`), and starts a prompt from the longest entry that is a prefix of it, at one
of its bounds, when that is longer than what its live sequence may keep; being taken at bounds, an
entry is a cold read's state. The RAM tier and the disk tier are bounded by the plan's sizes.

Tiers, eviction, keys and what was measured: docs/architecture/cache.md.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import queue
import shutil
import struct
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.engine.prompt_cache_files import SUFFIX, folder_size, prompt_cache_folder
from app.machine.llama_backend import llama

log = logging.getLogger(__name__)

MAGIC = b"CLVRPC1\n"
PENDING_MAX = 1 << 30  # bytes waiting for the disk writer; past it, new entries stay in RAM only
KEEP_SECONDS = 3600.0  # a client's mark keeps an entry ahead of unmarked ones this long (Anthropic's longer TTL)


@dataclass(eq=False)  # entries are compared by identity (their tokens are arrays)
class Entry:
    tokens: np.ndarray  # int32, the prefix
    n_bytes: int  # the state's size
    data: Any = None  # the state (bytes-like) while the entry is in the RAM tier
    writing: Any = None  # the state while the disk writer has it
    path: Path | None = None  # its file, once written
    used: float = field(default_factory=time.monotonic)
    keep: float = 0.0  # a client's mark (prompt_cache_key, cache_control): evicted after unmarked ones

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass
class CacheStats:
    """For the settings page, `doctor` and the benches."""

    ram_entries: int = 0
    ram_bytes: int = 0
    disk_entries: int = 0
    disk_bytes: int = 0
    hits: int = 0
    tokens_restored: int = 0
    stores: int = 0
    store_seconds: float = 0.0
    stored_bytes: int = 0
    restore_seconds: float = 0.0
    restored_bytes: int = 0
    rejected: int = 0


def keep_until(marked: bool) -> float:
    """An entry's `keep` for a request a client marked (0: unmarked)."""
    return time.monotonic() + KEEP_SECONDS if marked else 0.0


def _monotonic(wall: float) -> float:
    """A file's modification time on the clock entries' `used` is kept in."""
    return time.monotonic() - (time.time() - wall)


def identity_hash(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


class PromptCache:
    """The entries of one loaded model (its identity). Thread-safe: readers store and look up from
    the engine's threads, one writer thread fills the disk tier."""

    def __init__(self, identity: dict[str, Any], ram_bytes: int, folder: Path | None, disk_bytes: int) -> None:
        self.identity = dict(identity)
        self.key = identity_hash(self.identity)
        self.ram_bytes = max(int(ram_bytes), 0)
        self.disk_bytes = max(int(disk_bytes), 0) if folder is not None else 0
        self.root = folder  # the disk tier's folder (one subfolder per identity), used once open_disk is called
        self.folder: Path | None = None
        self.entries: list[Entry] = []
        self.stats = CacheStats()
        self._lock = threading.RLock()
        self._pending: queue.Queue[Entry | None] = queue.Queue()
        self._pending_bytes = 0
        self._disk_off = False
        self._closed = False
        self._writer: threading.Thread | None = None
        self.stop_digest: threading.Event | None = None  # set at close: the model file's digest is not needed

    def open_disk(self, model_sha256: str) -> None:
        """Start the disk tier, now that the model file's SHA-256 is known (it is read in the
        background at load): the entries of this identity already on disk are listed."""
        with self._lock:
            if self._closed or self.root is None or not self.disk_bytes or self.folder is not None:
                return
            self.identity["model_sha256"] = model_sha256
            self.key = identity_hash(self.identity)
            self.folder = self.root / self.key
            self._index()
            self._writer = threading.Thread(target=self._write_loop, name="prompt-cache-writer", daemon=True)
            self._writer.start()

    @property
    def enabled(self) -> bool:
        return bool(self.ram_bytes or self.disk_bytes)

    # ------------------------------------------------------------------ finding

    def find(self, prompt: np.ndarray, lo: int, hi: int, ok: Callable[[int], bool]) -> Entry | None:
        """The longest entry whose tokens are the prompt's first n, lo < n <= hi, with ok(n) (a bound
        of the prompt); it becomes the most recently used."""
        with self._lock:
            best: Entry | None = None
            for e in self.entries:
                n = len(e)
                if lo < n <= hi and (best is None or n > len(best)) and np.array_equal(e.tokens, prompt[:n]) \
                        and ok(n):
                    best = e
            if best is not None:
                best.used = time.monotonic()
            return best

    def restore_longest(self, ctx: Any, seq: int, prompt: Sequence[int], bounds: np.ndarray,
                        keep: int) -> tuple[Entry | None, bool]:
        """Put into sequence `seq` the longest entry that is the prompt's first n tokens, n one of its
        `bounds`, `keep` < n < len(prompt) (its last token is read for its logits); one that cannot be
        read or that llama.cpp refuses is removed and the next longest tried. (the entry or None,
        whether any was tried: then the sequence no longer holds what it held)."""
        tokens = np.asarray(prompt, dtype=np.int32)
        ok = set(bounds.tolist()).__contains__
        tried = False
        while (entry := self.find(tokens, keep, len(tokens) - 1, ok)) is not None:
            tried = True
            if self.restore(ctx, seq, entry):
                return entry, True
        return None, tried

    # ------------------------------------------------------------------ sequences in and out

    def store(self, ctx: Any, seq: int, tokens: np.ndarray, keep: float = 0.0) -> bool:
        """Copy sequence `seq` (it holds exactly `tokens`) into a new entry. False: it is there
        already, it fits no tier, or llama.cpp wrote nothing."""
        if not self.enabled or not len(tokens):
            return False
        tokens = np.asarray(tokens, dtype=np.int32).copy()
        with self._lock:
            same = next((e for e in self.entries if len(e) == len(tokens) and np.array_equal(e.tokens, tokens)), None)
            if same is not None:  # read again: used now, and marked if this request marks it
                same.used, same.keep = time.monotonic(), max(same.keep, keep)
                return False
        lc = llama()
        started = time.perf_counter()
        size = int(lc.llama_state_seq_get_size(ctx, seq))
        if size <= 0 or (size > self.ram_bytes and not self._disk_takes(size)):
            return False
        data = (ctypes.c_uint8 * size)()
        if int(lc.llama_state_seq_get_data(ctx, data, size, seq)) != size:
            log.warning("prompt cache: llama.cpp wrote a short state for %d tokens; not kept", len(tokens))
            return False
        entry = Entry(tokens, size, keep=keep)
        with self._lock:
            self.entries.append(entry)
            if size <= self.ram_bytes:
                entry.data = data
            self.stats.stores += 1
            self.stats.store_seconds += time.perf_counter() - started
            self.stats.stored_bytes += size
            self._evict_ram()
            if self._disk_takes(size) and self._pending_bytes + size <= PENDING_MAX:
                self._pending_bytes += size
                entry.writing = data
                self._pending.put(entry)
            elif entry.data is None:
                self.entries.remove(entry)
                return False
        return True

    def restore(self, ctx: Any, seq: int, entry: Entry) -> bool:
        """Put the entry's state into sequence `seq` (cleared first). False: the state could not be
        read or llama.cpp refused it (the entry is removed, the sequence is empty)."""
        lc = llama()
        started = time.perf_counter()
        data = next((d for d in (entry.data, entry.writing) if d is not None), None)
        if data is None:
            data = self._read(entry)
            if data is not None and entry.path is not None:
                os.utime(entry.path)  # when it was last used, for the next runs' order
        mem = lc.llama_get_memory(ctx)
        lc.llama_memory_seq_rm(mem, seq, -1, -1)
        if data is None:
            return False
        read = int(lc.llama_state_seq_set_data(ctx, data, entry.n_bytes, seq))
        if read != entry.n_bytes or lc.llama_memory_seq_pos_max(mem, seq) != len(entry) - 1:
            log.warning("prompt cache: llama.cpp refused the state of %d tokens (read %d of %d bytes); removed",
                        len(entry), read, entry.n_bytes)
            lc.llama_memory_seq_rm(mem, seq, -1, -1)
            self._drop(entry)
            return False
        with self._lock:
            self.stats.hits += 1
            self.stats.tokens_restored += len(entry)
            self.stats.restore_seconds += time.perf_counter() - started
            self.stats.restored_bytes += entry.n_bytes
            if entry.data is None and entry.n_bytes <= self.ram_bytes:
                entry.data = data  # back in the RAM tier
                self._evict_ram(spare=entry)
        return True

    # ------------------------------------------------------------------ tiers

    def _disk_takes(self, size: int) -> bool:
        return self.folder is not None and not self._disk_off and size <= self.disk_bytes

    def ram_used(self) -> int:
        with self._lock:
            return sum(e.n_bytes for e in self.entries if e.data is not None)

    def _evict_ram(self, spare: Entry | None = None) -> None:
        """Least recently used (unmarked first) out of RAM until the tier fits its budget; an entry
        that is on disk (or on its way there) stays listed."""
        used = self.ram_used()
        for e in sorted((e for e in self.entries if e.data is not None and e is not spare),
                        key=lambda e: (e.keep > time.monotonic(), e.used)):
            if used <= self.ram_bytes:
                break
            e.data = None
            used -= e.n_bytes
            if e.path is None and e.writing is None:
                self.entries.remove(e)

    def _drop(self, entry: Entry) -> None:
        with self._lock:
            if entry in self.entries:
                self.entries.remove(entry)
            self.stats.rejected += 1
        if entry.path is not None:
            try:
                entry.path.unlink()
            except OSError:
                pass

    # ------------------------------------------------------------------ the disk tier

    def _index(self) -> None:
        """The entries of this identity already on disk (their headers and tokens; states stay there)."""
        assert self.folder is not None
        for path in sorted(self.folder.glob(f"*{SUFFIX}")) if self.folder.is_dir() else ():
            head = self._header(path)
            if head is None:
                continue
            meta, tokens, _ = head
            self.entries.append(Entry(tokens, int(meta["n_bytes"]), path=path, used=_monotonic(path.stat().st_mtime)))
        for tmp in self.folder.glob(f"*{SUFFIX}.tmp") if self.folder.is_dir() else ():
            tmp.unlink(missing_ok=True)  # a write a crash cut short

    def _header(self, path: Path) -> tuple[dict[str, Any], np.ndarray, int] | None:
        """(its header, its tokens, where its state starts); None, and the file removed, when it is not
        a whole entry of this identity."""
        try:
            with path.open("rb") as f:
                if f.read(len(MAGIC)) != MAGIC:
                    raise ValueError("not a prompt cache file")
                (n_meta,) = struct.unpack("<I", f.read(4))
                meta = json.loads(f.read(n_meta))
                if meta.get("identity") != self.key:
                    raise ValueError("another model or build")
                tokens = np.frombuffer(f.read(4 * int(meta["n_tokens"])), dtype=np.int32).copy()
                if len(tokens) != int(meta["n_tokens"]):
                    raise ValueError("truncated")
                start = f.tell()
            if path.stat().st_size != start + int(meta["n_bytes"]):
                raise ValueError("truncated or grown")
            return meta, tokens, start
        except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
            log.warning("prompt cache: %s ignored and removed (%s)", path.name, exc)
            self.stats.rejected += 1
            path.unlink(missing_ok=True)
            return None

    def _read(self, entry: Entry) -> Any:
        """The entry's state from its file, checked against its CRC-32; None (and the entry removed)
        when the file is gone, cut or altered."""
        if entry.path is None:
            return None
        head = self._header(entry.path)
        if head is None:
            self._drop(entry)
            return None
        meta, _, start = head
        data = (ctypes.c_uint8 * entry.n_bytes)()
        try:
            with entry.path.open("rb") as f:
                f.seek(start)
                got = f.readinto(memoryview(data).cast("B"))
        except OSError as exc:
            log.warning("prompt cache: %s could not be read (%s); removed", entry.path.name, exc)
            self._drop(entry)
            return None
        if got != entry.n_bytes or zlib.crc32(memoryview(data).cast("B")) != int(meta["crc32"]):
            log.warning("prompt cache: %s is damaged (its state does not match its checksum); removed",
                        entry.path.name)
            self._drop(entry)
            return None
        return data

    def _write_loop(self) -> None:
        while True:
            entry = self._pending.get()
            if entry is None:
                return
            try:
                self._write(entry, entry.writing)
            finally:
                with self._lock:
                    entry.writing = None
                    self._pending_bytes -= entry.n_bytes
                    if entry.path is None and entry.data is None and entry in self.entries:
                        self.entries.remove(entry)

    def _write(self, entry: Entry, data: Any) -> None:
        assert self.folder is not None
        view = memoryview(data).cast("B")
        digest = hashlib.sha256(entry.tokens.tobytes()).hexdigest()[:24]
        path = self.folder / f"{len(entry)}-{digest}{SUFFIX}"
        tmp = path.with_name(path.name + ".tmp")
        meta = json.dumps({"identity": self.key, "n_tokens": len(entry), "n_bytes": entry.n_bytes,
                           "crc32": zlib.crc32(view), "made": time.time()}).encode()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._make_room(entry.n_bytes)
            with tmp.open("wb") as f:
                f.write(MAGIC + struct.pack("<I", len(meta)) + meta + entry.tokens.tobytes())
                f.write(view)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if not self._disk_off:
                log.warning("prompt cache: writing to %s failed (%s); the disk tier stops growing for this run",
                            self.folder, exc)
            self._disk_off = True
            return
        with self._lock:
            entry.path = path

    def _make_room(self, n_bytes: int) -> None:
        """Remove the least recently used files (of any model) until `n_bytes` more fit the disk budget."""
        assert self.root is not None
        mine = {e.path: e for e in self.entries if e.path is not None}
        files = []
        for p in self.root.rglob(f"*{SUFFIX}"):
            try:
                st = p.stat()
            except OSError:
                continue
            files.append((mine[p].used if p in mine else _monotonic(st.st_mtime), st.st_size, p))
        used = sum(size for _, size, _ in files)
        now = time.monotonic()
        kept = {e.path for e in self.entries if e.keep > now}
        for _, size, p in sorted(files, key=lambda f: (f[2] in kept, f[0])):
            if used + n_bytes <= self.disk_bytes:
                break
            p.unlink(missing_ok=True)
            used -= size
            with self._lock:
                e = mine.get(p)
                if e is not None:
                    e.path = None
                    if e.data is None and e in self.entries:
                        self.entries.remove(e)

    def close(self, wait: float = 60.0) -> None:
        """Stop the writer after what it was given is on disk (at most `wait` seconds)."""
        with self._lock:
            self._closed = True
        if self.stop_digest is not None:
            self.stop_digest.set()
        if self._writer is not None:
            self._pending.put(None)
            self._writer.join(wait)
            self._writer = None

    def snapshot(self) -> CacheStats:
        with self._lock:
            s = CacheStats(**vars(self.stats))
            s.ram_entries = sum(e.data is not None for e in self.entries)
            s.ram_bytes = self.ram_used()
            s.disk_entries = sum(e.path is not None for e in self.entries)
            s.disk_bytes = sum(e.n_bytes for e in self.entries if e.path is not None)
            return s


def identity_of(settings: Any, reader: str) -> dict[str, Any]:
    """What an entry's state depends on besides the model file: the llama.cpp build (and the CPU
    variant and devices it runs on), the load settings that change the numbers or the state's layout,
    and the reader's plan (`ReadPlan.key`, with the slots' count)."""
    from importlib.metadata import version

    lc = llama()
    return {"format": MAGIC.decode().strip(), "llama_cpp": version("llama-cpp-python"),
            "system": lc.llama_print_system_info().decode(errors="replace"),
            "n_gpu_layers": settings.n_gpu_layers, "cpu_moe_blocks": list(settings.cpu_moe_blocks),
            "flash_attn": settings.flash_attn, "type_k": settings.type_k, "type_v": settings.type_v,
            "n_batch": settings.n_batch, "n_ubatch": settings.n_ubatch, "main_gpu": settings.main_gpu,
            "parallel": settings.parallel, "kv_overrides": [list(o) for o in settings.kv_overrides],
            "reader": reader}


def disk_budget(disk_mb: int, folder: Path) -> int:
    """The disk tier's budget in bytes: as set, but never more than what the cache holds already and a
    quarter of the disk's free space (a full disk is the user's, not the cache's)."""
    if disk_mb <= 0:
        return 0
    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return 0
    return min(disk_mb << 20, folder_size(folder)[1] + free // 4)


def cache_line(settings: Any) -> str:
    """The load line's words for the prompt cache."""
    if not settings.cache_ram_mb and not settings.cache_disk_mb:
        return "prompt cache: off"
    parts = [f"{settings.cache_ram_mb:,} MB in RAM" if settings.cache_ram_mb else "none in RAM",
             f"up to {settings.cache_disk_mb / 1024:,.0f} GB on disk ({prompt_cache_folder()})"
             if settings.cache_disk_mb else "none on disk"]
    return "prompt cache: " + ", ".join(parts)


def open_prompt_cache(model: Path, settings: Any, reader: str, folder: Path) -> PromptCache | None:
    """The loaded model's prompt cache (None: both tiers off). Its disk tier opens once the model
    file's SHA-256 is known: remembered, or read in a background thread (a first load of a 20 GB file
    is not held up by it)."""
    from app.engine.file_digest import file_sha256

    ram, disk = settings.cache_ram_mb << 20, disk_budget(settings.cache_disk_mb, folder)
    if not ram and not disk:
        return None
    cache = PromptCache(identity_of(settings, reader), ram, folder if disk else None, disk)
    if disk:
        stop = threading.Event()
        cache.stop_digest = stop

        def digest() -> None:
            sha = file_sha256(model, stop)
            if sha:
                cache.open_disk(sha)

        threading.Thread(target=digest, name="model-sha256", daemon=True).start()
    return cache
