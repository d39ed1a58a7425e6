"""The GGUF metadata patch: profile rules as data, a new header, the data section copied by the kernel. No Qt.

Read `docs/clover-dialect.md` for why. In short: the vendor's Clover GGUF differs from
what upstream llama.cpp expects in a few metadata keys; the tensors are fine. A patch profile
(`resources/patch_profiles/NAME.json`) lists rules, each a detector plus a transform, written with
`{arch}` for the file's `general.architecture`. Applying a profile:

1. reads the source header (`app.gguf.gguf_file`), runs every rule: not needed / applied / cannot apply;
2. writes the new header to a temporary file beside the target, then copies the data section
   unchanged with `os.copy_file_range` (falling back to `os.sendfile`, then 16 MiB reads);
3. fsyncs, re-reads and verifies the temporary file (every rule now passes, every tensor's name,
   shape, type and offset equal the source's, sizes add up; optionally every data byte), and only
   then renames it over the target atomically and fsyncs the folder.

The source is only ever opened for reading. A cancel or error at any point removes the temporary
file; a crash leaves at most a `.NAME.clover-partial` file, which the next run removes.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.base.fileio import fsync_dir, start_writeback
from app.base.paths import RESOURCES
from app.gguf.gguf_file import (
    KV,
    FileSpan,
    GGUFError,
    GGUFHeader,
    TensorInfo,
    ValueType,
    encode_header,
    find_string,
    header_pieces,
    pieces_length,
    read_header,
    string_at,
)

try:
    import fcntl
except ImportError:  # Windows: no advisory lock; the O_EXCL-free partial file is still per-target
    fcntl = None  # type: ignore[assignment]

NOT_NEEDED = "not-needed"
APPLIED = "applied"
CANNOT_APPLY = "cannot-apply"

COPY_CHUNK = 64 << 20  # bytes per kernel copy call: the progress granularity
BUFFER_CHUNK = 16 << 20  # the buffered fallback's read size
PROFILES_DIR = RESOURCES / "patch_profiles"

Progress = Callable[[int, int], None]  # (bytes done, bytes total)
Requires = Callable[[str], "bool | None"]  # does the bundled llama.cpp need this key for the file?


class PatchError(Exception):
    """The patch could not be made; nothing was written to the target."""


class PatchCancelled(PatchError):
    pass


class VerificationError(PatchError):
    pass


@dataclass(frozen=True)
class RuleResult:
    rule_id: str
    title: str
    status: str  # NOT_NEEDED, APPLIED or CANNOT_APPLY
    detail: str

    def line(self, dry_run: bool = False) -> str:
        mark = {NOT_NEEDED: "ok       ", APPLIED: "would fix" if dry_run else "fixed    ",
                CANNOT_APPLY: "FAILED   "}[self.status]
        return f"{mark} {self.title}: {self.detail}"


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    rules: tuple[dict[str, Any], ...]


@dataclass
class PatchReport:
    source: Path
    target: Path | None
    profile: str
    results: list[RuleResult]
    dry_run: bool = False
    written: bool = False  # a new file was written
    data_verified: bool = False
    bytes_copied: int = 0
    method: str = ""  # how the data section was copied
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(r.status == APPLIED for r in self.results)

    @property
    def failed(self) -> bool:
        return any(r.status == CANNOT_APPLY for r in self.results)


# ----------------------------------------------------------------------------- profiles

_RULE_FIELDS = {
    "count_from_tensors": {"key", "value_type", "tensor_pattern", "present_value"},
    "move_key": {"from", "to"},
    "token_id": {"key", "token", "value_type"},
}


def load_profile(name_or_path: str | Path) -> Profile:
    """A profile by name (resources/patch_profiles/NAME.json) or by path; checked before use."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILES_DIR / f"{name_or_path}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.json")))
        raise PatchError(f"no patch profile {name_or_path!r} (known: {known})") from None
    except ValueError as exc:
        raise PatchError(f"patch profile {path} is not valid JSON: {exc}") from None
    rules = data.get("rules")
    if not isinstance(rules, list) or not rules:
        raise PatchError(f"patch profile {path} has no rules")
    for i, rule in enumerate(rules):
        kind = rule.get("kind")
        if kind not in _RULE_FIELDS:
            raise PatchError(f"patch profile {path}: rule {i} has unknown kind {kind!r} "
                             f"(known: {', '.join(sorted(_RULE_FIELDS))})")
        missing = (_RULE_FIELDS[kind] | {"id"}) - set(rule)
        if missing:
            raise PatchError(f"patch profile {path}: rule {rule.get('id', i)!r} lacks {', '.join(sorted(missing))}")
        for vt in ("value_type",):
            if vt in rule and rule[vt] not in ValueType.__members__:
                raise PatchError(f"patch profile {path}: rule {rule['id']!r} has unknown value_type {rule[vt]!r}")
    return Profile(data.get("name", path.stem), data.get("description", ""), tuple(rules))


# ----------------------------------------------------------------------------- rules


def _fmt(template: str, arch: str) -> str:
    return template.replace("{arch}", arch)


def _show(kv: KV | None) -> str:
    return "absent" if kv is None else repr(kv.value)


def _insert_after(kvs: dict[str, KV], new: KV, prefixes: list[str]) -> dict[str, KV]:
    """A copy of kvs with `new` placed after the last key starting with the first prefix that matches."""
    keys = list(kvs)
    anchor = None
    for prefix in prefixes:
        hits = [i for i, k in enumerate(keys) if k.startswith(prefix)]
        if hits:
            anchor = hits[-1]
            break
    items = list(kvs.items())
    pos = len(items) if anchor is None else anchor + 1
    items.insert(pos, (new.key, new))
    return dict(items)


def _is_int(kv: KV) -> bool:
    return kv.type in (ValueType.UINT8, ValueType.INT8, ValueType.UINT16, ValueType.INT16, ValueType.UINT32,
                       ValueType.INT32, ValueType.UINT64, ValueType.INT64)


def _rule_count_from_tensors(rule: dict[str, Any], arch: str, kvs: dict[str, KV], tensors: list[TensorInfo],
                             requires: Requires | None) -> tuple[dict[str, KV], str, str]:
    key = _fmt(rule["key"], arch)
    if key in kvs:
        return kvs, NOT_NEEDED, f"{key} = {kvs[key].value}"
    pattern = re.compile(rule["tensor_pattern"])
    matching = [t.name for t in tensors if pattern.search(t.name)]
    if not matching:
        return kvs, NOT_NEEDED, f"{key} absent, and no tensor matches {rule['tensor_pattern']} (none needed)"
    if rule.get("only_if_llama_cpp_requires") and requires is not None and requires(key) is False:
        return kvs, NOT_NEEDED, f"{key} absent; the bundled llama.cpp reads {arch} files without it"
    new = KV.make(key, ValueType[rule["value_type"]], rule["present_value"])
    arch_prefix = f"{arch}."
    kvs = _insert_after(kvs, new, [f"{arch}.expert_", arch_prefix])
    return kvs, APPLIED, f"{key}: absent -> {new.value} ({len(matching)} shared-expert tensors found)"


def _rule_move_key(rule: dict[str, Any], arch: str, kvs: dict[str, KV], tensors: list[TensorInfo],
                   requires: Requires | None = None) -> tuple[dict[str, KV], str, str]:
    src, dst = _fmt(rule["from"], arch), _fmt(rule["to"], arch)
    if src not in kvs:
        return kvs, NOT_NEEDED, f"{src} absent; {dst} = {_show(kvs.get(dst))}"
    moved = kvs[src]
    old = kvs.get(dst)
    if old is not None and not (_is_int(old) and _is_int(moved)) and old.type != moved.type:
        return kvs, CANNOT_APPLY, f"{dst} is {old.type.name} but {src} is {moved.type.name}"
    vtype = old.type if old is not None else moved.type
    try:
        new = KV.make(dst, vtype, moved.value, moved.array_type)
    except Exception as exc:  # struct.error: the value does not fit the target's type
        return kvs, CANNOT_APPLY, f"{src} = {moved.value!r} does not fit {dst}'s type {vtype.name}: {exc}"
    items = []
    for k, kv in kvs.items():
        if k == src:
            if old is None:
                items.append((dst, new))
        elif k == dst:
            items.append((dst, new))
        else:
            items.append((k, kv))
    return dict(items), APPLIED, f"{dst}: {_show(old)} -> {new.value!r}; {src} removed"


def _rule_token_id(rule: dict[str, Any], arch: str, kvs: dict[str, KV], tensors: list[TensorInfo],
                   requires: Requires | None = None) -> tuple[dict[str, KV], str, str]:
    key, token = _fmt(rule["key"], arch), rule["token"]
    tokens_kv = kvs.get("tokenizer.ggml.tokens")
    if tokens_kv is None or tokens_kv.type != ValueType.ARRAY or tokens_kv.array_type != ValueType.STRING:
        return kvs, CANNOT_APPLY, "the file has no tokenizer.ggml.tokens string array"
    wanted = find_string(tokens_kv, token)
    if wanted is None:
        return kvs, CANNOT_APPLY, f"token {token!r} is not in the vocabulary"
    old = kvs.get(key)

    def name(kv: KV | None) -> str:
        if kv is None:
            return "absent"
        i = kv.value
        text = string_at(tokens_kv, i) if isinstance(i, int) else None
        return f"{i} ({text!r})" if text is not None else repr(i)

    if old is not None and old.value == wanted:
        return kvs, NOT_NEEDED, f"{key} = {name(old)}"
    vtype = old.type if old is not None and _is_int(old) else ValueType[rule["value_type"]]
    new = KV.make(key, vtype, wanted)
    if old is None:
        kvs = _insert_after(kvs, new, ["tokenizer.ggml."])
    else:
        kvs = {k: (new if k == key else v) for k, v in kvs.items()}
    return kvs, APPLIED, f"{key}: {name(old)} -> {name(new)}"


_RULES = {"count_from_tensors": _rule_count_from_tensors, "move_key": _rule_move_key, "token_id": _rule_token_id}


def apply_rules(header: GGUFHeader, profile: Profile,
                requires: Requires | None = None) -> tuple[dict[str, KV], list[RuleResult]]:
    """The patched KVs and one result per rule. Pure unless `requires` is given: a rule marked
    `only_if_llama_cpp_requires` then asks it whether the bundled llama.cpp needs the key for this
    file's architecture (`llama_requires_key`), so a file that already loads is left alone."""
    arch = header.architecture
    if not arch:
        raise PatchError("the file has no general.architecture string; it is not a model file")
    kvs = dict(header.kvs)
    results = []
    for rule in profile.rules:
        kvs, status, detail = _RULES[rule["kind"]](rule, arch, kvs, header.tensors, requires)
        results.append(RuleResult(rule["id"], rule.get("title", rule["id"]), status, detail))
    return kvs, results


def llama_requires_key(path: str | Path) -> Requires:
    """Whether the bundled llama.cpp needs a metadata key to read the file at `path`: its no-alloc
    load (the header only) either succeeds (not needed), names the missing key (needed), or fails
    otherwise, e.g. on an architecture it does not know (None: unknown, the profile decides)."""
    @functools.cache
    def load_error() -> str | None:
        from app.machine.llama_load import LoadSettings, simulate

        try:
            simulate(path, LoadSettings(n_ctx=256, n_gpu_layers=0, n_batch=256, n_ubatch=256))
        except RuntimeError as exc:
            return str(exc)
        return None

    def requires(key: str) -> bool | None:
        error = load_error()
        if error is None:
            return False  # it loads as it is
        return True if f"key not found in model: {key}" in error else None

    return requires


OVERRIDE_STR_MAX = 127  # llama_model_kv_override holds a string in char[128]


def load_overrides(header: GGUFHeader, profile: Profile,
                   requires: Requires | None = None) -> tuple[dict[str, Any] | None, list[RuleResult], str]:
    """The profile's fixes as llama.cpp load-time metadata overrides (llama_model_kv_override), so a
    vendor-dialect file loads as it is, with no copy: (overrides, each rule's result, why not).

    llama.cpp consults an override before it looks a key up (llama-model-loader.cpp, GKV::set), so a
    key the file lacks and a key with a wrong value are both covered. A key a rule removes (the
    vendor's rope.partial_dimension_count) is left in the file: llama.cpp never reads it. A value an
    override cannot hold (an array, a string of 128 bytes or more) returns None and the reason: then
    the patched copy is the way."""
    kvs, results = apply_rules(header, profile, requires)
    overrides: dict[str, Any] = {}
    for key, kv in kvs.items():
        old = header.kvs.get(key)
        if old is not None and old.same_value(kv):
            continue
        if kv.type == ValueType.ARRAY:
            return None, results, f"{key} is an array, which a load-time override cannot hold"
        value = kv.value
        if isinstance(value, str) and len(value.encode()) > OVERRIDE_STR_MAX:
            return None, results, f"{key} is longer than llama.cpp's {OVERRIDE_STR_MAX}-byte override limit"
        if isinstance(value, (bool, int, float, str)):
            overrides[key] = value
        else:
            return None, results, f"{key} has a value ({type(value).__name__}) an override cannot hold"
    return overrides, results, ""


def requires_for_header(head: bytes, file_size: int) -> Requires:
    """`llama_requires_key` for a file known only by its header (a download not made yet): on first
    use, the header goes into a sparse file of the file's size, which llama.cpp's no-alloc load reads."""
    import shutil
    import tempfile

    @functools.cache
    def answer(key: str) -> bool | None:
        folder = Path(tempfile.mkdtemp(prefix="clover-probe-"))
        try:
            probe = folder / "probe.gguf"
            with open(probe, "wb") as f:
                f.write(head)
                f.truncate(file_size)
            return llama_requires_key(probe)(key)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return answer


def patched_header(header: GGUFHeader, profile: Profile, requires: Requires | None = None) -> tuple[bytes | None,
                                                                                                    list[RuleResult]]:
    """The new header bytes (None when no rule applies or one cannot), and each rule's result;
    `requires` is asked only for a file not recognisably in the profile's dialect (decide_rules)."""
    kvs, results = apply_rules(header, profile)
    if not in_dialect(results, profile) and requires is not None:
        kvs, results = apply_rules(header, profile, requires)
    if any(r.status == CANNOT_APPLY for r in results) or not any(r.status == APPLIED for r in results):
        return None, results
    return encode_header(header.version, kvs.values(), header.tensors, header.alignment), results


def all_profiles() -> list[Profile]:
    return [load_profile(p) for p in sorted(PROFILES_DIR.glob("*.json"))]


def in_dialect(results: list[RuleResult], profile: Profile) -> bool:
    """A rule that does not depend on what llama.cpp requires applies: the file is in the dialect."""
    return any(r.status == APPLIED and not rule.get("only_if_llama_cpp_requires")
               for r, rule in zip(results, profile.rules, strict=True))


def decide_rules(header: GGUFHeader, profile: Profile, path: str | Path) -> tuple[dict[str, KV], list[RuleResult],
                                                                                   Requires | None]:
    """The rules' outcome for a file: a file in the profile's dialect (a rule that does not depend on
    llama.cpp applies) gets every rule; otherwise rules marked `only_if_llama_cpp_requires` ask the
    bundled llama.cpp (a no-alloc load), so an upstream file that loads as it is stays as it is."""
    kvs, results = apply_rules(header, profile)
    if in_dialect(results, profile) or not any(r.status == APPLIED for r in results):
        return kvs, results, None
    requires = llama_requires_key(path)
    kvs, results = apply_rules(header, profile, requires)
    return kvs, results, requires


def matching_profile(header: GGUFHeader) -> tuple[str, int] | None:
    """(profile name, number of fixes) for the first profile whose dialect the header is in, by its
    header alone: a rule that does not depend on what llama.cpp requires must apply (an upstream file
    that merely lacks an optional key is not in a vendor dialect)."""
    if not header.architecture:
        return None
    for prof in all_profiles():
        _, results = apply_rules(header, prof)
        if in_dialect(results, prof):
            return prof.name, sum(r.status == APPLIED for r in results)
    return None


# ----------------------------------------------------------------------------- copying


def _check_cancel(cancel: Callable[[], bool] | None) -> None:
    if cancel is not None and cancel():
        raise PatchCancelled("cancelled")


def copy_range(src_fd: int, src_off: int, dst_fd: int, dst_off: int, length: int, *,
               progress: Callable[[int], None] | None = None, cancel: Callable[[], bool] | None = None,
               methods: tuple[str, ...] = ("copy_file_range", "sendfile", "buffered")) -> str:
    """Copy `length` bytes between two files at given offsets; return the method that did it.

    The kernel methods are tried in order and the next one takes over where one is unsupported
    (cross-filesystem, old kernel, Windows), continuing from the bytes already copied.
    """
    done = [0]  # shared with _copy_loop, so that a method that fails part-way hands over its progress
    used = []

    def kernel(step: Callable[[int, int], int], unsupported: tuple[int, ...], name: str) -> None:
        try:
            _copy_loop(step, done, length, dst_fd, dst_off, progress, cancel)
            used.append(name)
        except OSError as exc:
            if exc.errno not in unsupported:
                raise

    for method in methods:
        if done[0] >= length:
            break
        if method == "copy_file_range" and hasattr(os, "copy_file_range"):
            kernel(lambda at, n: os.copy_file_range(src_fd, dst_fd, n, src_off + at, dst_off + at),
                   (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM, errno.EBADF,
                    errno.ENOTSUP), method)
        elif method == "sendfile" and hasattr(os, "sendfile") and os.name == "posix":
            os.lseek(dst_fd, dst_off + done[0], os.SEEK_SET)
            kernel(lambda at, n: os.sendfile(dst_fd, src_fd, src_off + at, n),
                   (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF), method)
        elif method == "buffered":
            view = memoryview(bytearray(BUFFER_CHUNK))

            def buffered(at: int, n: int, view: memoryview = view) -> int:
                got = os.preadv(src_fd, [view[:n]], src_off + at) if hasattr(os, "preadv") else _pread_into(
                    src_fd, view[:n], src_off + at)
                written = 0
                while written < got:
                    written += os.pwrite(dst_fd, view[written:got], dst_off + at + written) if hasattr(
                        os, "pwrite") else _pwrite(dst_fd, view[written:got], dst_off + at + written)
                return got

            _copy_loop(buffered, done, length, dst_fd, dst_off, progress, cancel, chunk=BUFFER_CHUNK)
            used.append(method)
    if done[0] != length:
        raise PatchError(f"copied {done[0]} of {length} data bytes: the source file is shorter than its header says")
    return "+".join(used) or "nothing"


def _copy_loop(step: Callable[[int, int], int], done: list[int], length: int, dst_fd: int, dst_off: int,
               progress: Callable[[int], None] | None, cancel: Callable[[], bool] | None, chunk: int = 0) -> None:
    """Call `step(offset, count)` chunk by chunk until `length` bytes are copied (or it copies none)."""
    while done[0] < length:
        _check_cancel(cancel)
        n = step(done[0], min(chunk or COPY_CHUNK, length - done[0]))
        if n == 0:
            return  # the source ended early, or this filesystem copies nothing: the next method takes over
        start_writeback(dst_fd, dst_off + done[0], n)
        done[0] += n
        if progress:
            progress(done[0])


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    os.lseek(fd, offset, os.SEEK_SET)
    data = os.read(fd, len(view))
    view[:len(data)] = data
    return len(data)


def _pwrite(fd: int, view: memoryview, offset: int) -> int:
    os.lseek(fd, offset, os.SEEK_SET)
    return os.write(fd, view)


def compare_data(a: Path, a_off: int, b: Path, b_off: int, length: int, *,
                 progress: Callable[[int], None] | None = None, cancel: Callable[[], bool] | None = None) -> int | None:
    """Stream-compare two byte ranges; return the first differing position (relative), or None."""
    chunk = BUFFER_CHUNK
    with open(a, "rb", buffering=0) as fa, open(b, "rb", buffering=0) as fb:
        fa.seek(a_off)
        fb.seek(b_off)
        done = 0
        while done < length:
            _check_cancel(cancel)
            want = min(chunk, length - done)
            x, y = fa.read(want), fb.read(want)
            if x != y:
                for i, (p, q) in enumerate(zip(x, y, strict=False)):
                    if p != q:
                        return done + i
                return done + min(len(x), len(y))
            done += want
            if progress:
                progress(done)
    return None


# ----------------------------------------------------------------------------- the whole patch


def verify(target: Path, source_header: GGUFHeader, profile: Profile,
           requires: Requires | None = None) -> GGUFHeader:
    """Re-read a written file and check it against the source header and the profile (`requires`:
    as when the patch was decided, so a key left out because llama.cpp does not need it passes)."""
    header = read_header(target)
    _, results = apply_rules(header, profile, requires)
    bad = [r for r in results if r.status != NOT_NEEDED]
    if bad:
        raise VerificationError("after patching, rules still do not pass: " + "; ".join(r.line() for r in bad))
    if header.tensors != source_header.tensors:
        for old, new in zip(source_header.tensors, header.tensors, strict=False):
            if old != new:
                raise VerificationError(f"tensor info changed: {old} -> {new}")
        raise VerificationError(f"tensor count changed: {len(source_header.tensors)} -> {len(header.tensors)}")
    if header.data_size != source_header.data_size:
        raise VerificationError(f"data section is {header.data_size} bytes, the source's {source_header.data_size}")
    if header.alignment != source_header.alignment:
        raise VerificationError("alignment changed")
    return header


def default_target(source: Path) -> Path:
    return source.with_name(source.stem + ".patched" + (source.suffix or ".gguf"))


# ----------------------------------------------------------------------------- reflink (XFS, btrfs)

FICLONERANGE = 0x4020940D  # _IOW(0x94, 13, struct file_clone_range)
PADDING_KEY = "clover_launcher.padding"  # llama.cpp ignores keys it does not know


def _clone_range(src_fd: int, src_offset: int, dst_fd: int, dst_offset: int, length: int) -> None:
    import struct

    fcntl.ioctl(dst_fd, FICLONERANGE, struct.pack("qQQQ", src_fd, src_offset, length, dst_offset))


@functools.lru_cache(maxsize=16)
def _reflink_support(folder: str, device: int) -> int | None:
    """The file system block size if files in `folder` can share extents (FICLONERANGE), else None."""
    if fcntl is None or not hasattr(os, "statvfs"):
        return None
    import tempfile

    block = os.statvfs(folder).f_bsize
    try:
        with tempfile.TemporaryDirectory(dir=folder, prefix=".clover-reflink-") as tmp:
            a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
            with open(a, "wb") as f:
                f.write(b"\1" * block)
            fa, fb = os.open(a, os.O_RDONLY), os.open(b, os.O_RDWR | os.O_CREAT)
            try:
                _clone_range(fa, 0, fb, 0, block)
            finally:
                os.close(fa)
                os.close(fb)
    except OSError:
        return None
    return block


def reflink_block(source: Path, folder: Path) -> int | None:
    """The block size to align to when the copy can be a reflink (same file system, one that shares
    extents), else None."""
    try:
        if os.stat(source).st_dev != os.stat(folder).st_dev:
            return None
        return _reflink_support(str(folder), os.stat(folder).st_dev)
    except OSError:
        return None


def header_for_reflink(header: GGUFHeader, kvs: dict[str, KV], block: int) -> list[bytes | FileSpan]:
    """The new header, padded (by a string KV llama.cpp ignores) so that the data section starts at
    the same offset modulo the block size as in the source: then the data's blocks can be shared."""
    base = dict(kvs)
    base[PADDING_KEY] = KV.make(PADDING_KEY, ValueType.STRING, "")
    unpadded = pieces_length(header_pieces(header.version, base.values(), header.tensors, 1))
    target = unpadded + (header.data_offset - unpadded) % block
    base[PADDING_KEY] = KV.make(PADDING_KEY, ValueType.STRING, " " * (target - unpadded))
    head = header_pieces(header.version, base.values(), header.tensors, header.alignment)
    assert pieces_length(head) == target and (target - header.data_offset) % block == 0
    return head


def write_pieces(fd: int, pieces: list[bytes | FileSpan], *, cancel: Callable[[], bool] | None = None) -> int:
    """Write a header's pieces at the start of `fd`: bytes as they are, a large value left in its file
    copied from there by the kernel (never held in memory). The bytes written."""
    at = 0
    for piece in pieces:
        if isinstance(piece, FileSpan):
            with piece.file.open() as src:
                copy_range(src.fileno(), piece.offset, fd, at, piece.length, cancel=cancel)
            at += piece.length
            continue
        view = memoryview(piece)
        done = 0
        while done < len(view):
            done += os.pwrite(fd, view[done:], at + done) if hasattr(os, "pwrite") else _pwrite(fd, view[done:],
                                                                                                 at + done)
        at += len(view)
    return at


def reflink_copy(src_fd: int, src_off: int, dst_fd: int, dst_off: int, length: int, block: int, *,
                 cancel: Callable[[], bool] | None = None) -> str:
    """The data section: the bytes up to the source's next block boundary copied, the rest (to the
    end of the file) shared with the source; the offsets differ by a multiple of the block size."""
    head = min(-src_off % block, length)
    if head:
        copy_range(src_fd, src_off, dst_fd, dst_off, head, cancel=cancel)
    _check_cancel(cancel)
    if length > head:
        _clone_range(src_fd, src_off + head, dst_fd, dst_off + head, 0)  # 0: to the end of the source
    return "reflink"


def patch_file(source: str | Path, target: str | Path | None = None, profile: str | Path | Profile = "clover", *,
               dry_run: bool = False, verify_data: bool = False, overwrite: bool = False,
               progress: Progress | None = None, cancel: Callable[[], bool] | None = None,
               copy_methods: tuple[str, ...] = ("reflink", "copy_file_range", "sendfile", "buffered")) -> PatchReport:
    """Patch `source` into `target` (default: NAME.patched.gguf beside it). See the module docstring.

    Returns a report; raises GGUFError for an unreadable source, PatchError when the patch cannot
    be made (a rule cannot apply, the target exists, ...), PatchCancelled, VerificationError.
    """
    import time

    started = time.monotonic()
    source = Path(source)
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    header = read_header(source)
    kvs, results, requires = decide_rules(header, prof, source)
    dest = Path(target) if target is not None else default_target(source)
    report = PatchReport(source, dest, prof.name, results, dry_run=dry_run)
    if report.failed:
        report.notes.append("nothing written: a rule cannot apply")
        return report
    if dry_run:
        report.notes.append("dry run: nothing written")
        return report
    if not report.changed:
        report.notes.append("the file already matches upstream llama.cpp; nothing to do")
        report.target = None
        return report
    if dest.resolve() == source.resolve():
        raise PatchError("the target is the source: the patch writes a new file and never modifies the source")
    if dest.exists() and not overwrite:
        raise PatchError(f"{dest} exists; choose another target or allow overwriting")
    if dest.exists() and not dest.is_file():
        raise PatchError(f"{dest} exists and is not a regular file; choose another target")
    if not dest.parent.is_dir():
        raise PatchError(f"the target folder {dest.parent} does not exist")

    new_head = header_pieces(header.version, kvs.values(), header.tensors, header.alignment)
    block = reflink_block(source, dest.parent) if "reflink" in copy_methods else None
    if block is not None and header.data_size >= 16 * block:
        new_head = header_for_reflink(header, kvs, block)
    else:
        block = None
    head_length = pieces_length(new_head)
    total = head_length + header.data_size
    free = _free_bytes(dest.parent)
    if free is not None and free < total:
        raise PatchError(f"not enough free disk in {dest.parent}: {total} bytes needed, {free} free")

    partial = dest.with_name(f".{dest.name}.clover-partial")
    fd = os.open(partial, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PatchError(f"another patch is writing {dest} right now") from None
    try:
        os.ftruncate(fd, 0)  # a leftover from a crashed run is discarded here
        if progress:
            progress(0, total)
        write_pieces(fd, new_head, cancel=cancel)
        src_fd = os.open(source, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            if block is not None:
                report.method = reflink_copy(src_fd, header.data_offset, fd, head_length, header.data_size, block,
                                             cancel=cancel)
            else:
                report.method = copy_range(
                    src_fd, header.data_offset, fd, head_length, header.data_size, cancel=cancel,
                    methods=tuple(m for m in copy_methods if m != "reflink"),
                    progress=(lambda done: progress(head_length + done, total)) if progress else None)
            if progress:
                progress(total, total)
        finally:
            os.close(src_fd)
        os.fsync(fd)
        report.bytes_copied = header.data_size
        verify(partial, header, prof, requires)
        if verify_data:
            diff = compare_data(source, header.data_offset, partial, head_length, header.data_size, cancel=cancel)
            if diff is not None:
                raise VerificationError(f"data byte {diff} of the data section differs from the source")
            report.data_verified = True
        _check_cancel(cancel)
        os.replace(partial, dest)
        fsync_dir(dest.parent)
        report.written = True
    except BaseException:
        try:
            partial.unlink()
        except FileNotFoundError:
            pass
        raise
    finally:
        os.close(fd)
    report.seconds = time.monotonic() - started
    return report


# ----------------------------------------------------------------------------- in place

_UNDO_MAGIC = b"CLOVER-UNDO-1\n"


def _undo_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.clover-undo")


def _overwrite_start(path: Path, data: bytes) -> None:
    """Write `data` over the first bytes of the file, durably."""
    fd = os.open(path, os.O_RDWR | getattr(os, "O_BINARY", 0))
    try:
        os.pwrite(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def recover_in_place(path: str | Path) -> bool:
    """Finish an interrupted in-place patch by putting the original header back. True if it did.

    The undo journal is written and fsynced before the file's header is touched, and removed only
    after the new header is on disk, so a journal that exists and is complete means the header may
    be torn: restoring it gives the original file back byte for byte.
    """
    path = Path(path)
    undo = _undo_path(path)
    if not undo.exists():
        return False
    blob = undo.read_bytes()
    import hashlib

    ok = blob.startswith(_UNDO_MAGIC) and len(blob) >= len(_UNDO_MAGIC) + 32
    if ok:
        digest, saved = blob[len(_UNDO_MAGIC):len(_UNDO_MAGIC) + 32], blob[len(_UNDO_MAGIC) + 32:]
        ok = hashlib.sha256(saved).digest() == digest
    if not ok:
        # The crash came while the journal itself was being written: the file was not touched yet.
        undo.unlink()
        fsync_dir(path.parent)
        return False
    _overwrite_start(path, saved)
    undo.unlink()
    fsync_dir(path.parent)
    return True


def patch_in_place(path: str | Path, profile: str | Path | Profile = "clover", *,
                   _crash_after_journal: bool = False) -> PatchReport:
    """Rewrite only the header of `path`, when that is provably safe; otherwise refuse.

    Safe means: the new header ends inside the old header's alignment padding, so the data section
    does not move and no tensor byte is rewritten; and the old header is first saved to an fsynced
    undo journal (`.NAME.clover-undo`), so a crash during the header write is undone by
    `recover_in_place` (which every patch of the file runs first).
    """
    import hashlib
    import time

    started = time.monotonic()
    path = Path(path)
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    recovered = recover_in_place(path)
    header = read_header(path)
    kvs, results, requires = decide_rules(header, prof, path)
    report = PatchReport(path, path, prof.name, results)
    if recovered:
        report.notes.append("an interrupted in-place patch was undone first")
    if report.failed:
        report.notes.append("nothing written: a rule cannot apply")
        return report
    if not report.changed:
        report.notes.append("the file already matches upstream llama.cpp; nothing to do")
        return report
    pieces = header_pieces(header.version, kvs.values(), header.tensors, header.alignment)
    if pieces_length(pieces) != header.data_offset:
        raise PatchError(
            f"in-place patching is not safe for this file: the new header needs {pieces_length(pieces)} bytes with "
            f"padding but the data section starts at {header.data_offset}, so every tensor byte would move; "
            "write a patched copy instead (it takes about as long as copying the file)")
    # in place, a large value left in the file is read first: the header is rewritten over where it lies
    new_head = encode_header(header.version, kvs.values(), header.tensors, header.alignment)
    with open(path, "rb") as f:
        old_head = f.read(header.data_offset)
    undo = _undo_path(path)
    with open(undo, "wb") as f:
        f.write(_UNDO_MAGIC + hashlib.sha256(old_head).digest() + old_head)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(path.parent)
    if _crash_after_journal:  # tests: stop as a crash would, journal written, header half-written
        fd = os.open(path, os.O_RDWR)
        os.pwrite(fd, new_head[: len(new_head) // 2], 0)
        os.close(fd)
        raise PatchCancelled("simulated crash")
    _overwrite_start(path, new_head)
    try:
        verify(path, header, prof, requires)
    except VerificationError:
        recover_in_place(path)
        raise
    undo.unlink()
    fsync_dir(path.parent)
    report.written = True
    report.seconds = time.monotonic() - started
    report.method = "header rewritten in place"
    return report


def _free_bytes(folder: Path) -> int | None:
    try:
        import shutil

        return shutil.disk_usage(folder).free
    except OSError:
        return None


__all__ = [
    "APPLIED", "CANNOT_APPLY", "NOT_NEEDED", "GGUFError", "PatchCancelled", "PatchError", "PatchReport", "Profile",
    "RuleResult", "TensorInfo", "VerificationError", "apply_rules", "compare_data", "copy_range", "default_target",
    "load_profile", "patch_file", "verify",
]
