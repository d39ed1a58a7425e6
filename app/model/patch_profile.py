"""Patch profiles: the rules of a vendor dialect as typed data, parsed and checked once. No Qt.

A profile (`resources/patch_profiles/NAME.json`) lists rules, each a detector plus a transform,
written with `{arch}` for the file's `general.architecture`. `load_profile` turns each rule into one
of the dataclasses below (unknown kinds, missing fields and unknown value types refused with the
rule named); a rule's `apply` says, for one file's metadata, whether it is not needed, applied
(with the new metadata) or cannot apply. `app.model.patch_rules` runs a profile's rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from app.base.paths import RESOURCES
from app.gguf.gguf_file import KV, TensorInfo, ValueType, find_string, string_at

NOT_NEEDED = "not-needed"
APPLIED = "applied"
CANNOT_APPLY = "cannot-apply"

PROFILES_DIR = RESOURCES / "patch_profiles"

Progress = Callable[[int, int], None]  # (bytes done, bytes total)
Requires = Callable[[str], "bool | None"]  # does the bundled llama.cpp need this key for the file?
Outcome = tuple[dict[str, KV], str, str]  # the metadata after the rule, its status, the detail in words


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


# ----------------------------------------------------------------------------- metadata helpers


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


# ----------------------------------------------------------------------------- the rules


@dataclass(frozen=True, kw_only=True)
class Rule:
    """What every rule has: an id, a title for people, and whether it applies only where the
    bundled llama.cpp needs the key (asked through a `Requires`)."""

    kind: ClassVar[str] = ""
    fields: ClassVar[tuple[str, ...]] = ()  # the JSON fields the kind needs beside "id"
    id: str
    title: str
    only_if_llama_cpp_requires: bool = False

    def apply(self, arch: str, kvs: dict[str, KV], tensors: list[TensorInfo], requires: Requires | None) -> Outcome:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class CountFromTensors(Rule):
    """A key the file lacks, present (with `present_value`) when tensors matching a pattern exist."""

    kind: ClassVar[str] = "count_from_tensors"
    fields: ClassVar[tuple[str, ...]] = ("key", "value_type", "tensor_pattern", "present_value")
    key: str
    value_type: ValueType
    tensor_pattern: str
    present_value: Any

    def apply(self, arch: str, kvs: dict[str, KV], tensors: list[TensorInfo], requires: Requires | None) -> Outcome:
        key = _fmt(self.key, arch)
        if key in kvs:
            return kvs, NOT_NEEDED, f"{key} = {kvs[key].value}"
        pattern = re.compile(self.tensor_pattern)
        matching = [t.name for t in tensors if pattern.search(t.name)]
        if not matching:
            return kvs, NOT_NEEDED, f"{key} absent, and no tensor matches {self.tensor_pattern} (none needed)"
        if self.only_if_llama_cpp_requires and requires is not None and requires(key) is False:
            return kvs, NOT_NEEDED, f"{key} absent; the bundled llama.cpp reads {arch} files without it"
        new = KV.make(key, self.value_type, self.present_value)
        kvs = _insert_after(kvs, new, [f"{arch}.expert_", f"{arch}."])
        return kvs, APPLIED, f"{key}: absent -> {new.value} ({len(matching)} shared-expert tensors found)"


@dataclass(frozen=True, kw_only=True)
class MoveKey(Rule):
    """The value of a vendor key moved under the upstream key (keeping the upstream key's type)."""

    kind: ClassVar[str] = "move_key"
    fields: ClassVar[tuple[str, ...]] = ("from", "to")
    source: str
    dest: str

    def apply(self, arch: str, kvs: dict[str, KV], tensors: list[TensorInfo], requires: Requires | None) -> Outcome:
        src, dst = _fmt(self.source, arch), _fmt(self.dest, arch)
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


@dataclass(frozen=True, kw_only=True)
class TokenId(Rule):
    """A token-id key pointed at a token named by its text in the file's own vocabulary."""

    kind: ClassVar[str] = "token_id"
    fields: ClassVar[tuple[str, ...]] = ("key", "token", "value_type")
    key: str
    token: str
    value_type: ValueType

    def apply(self, arch: str, kvs: dict[str, KV], tensors: list[TensorInfo], requires: Requires | None) -> Outcome:
        key, token = _fmt(self.key, arch), self.token
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
        vtype = old.type if old is not None and _is_int(old) else self.value_type
        new = KV.make(key, vtype, wanted)
        if old is None:
            kvs = _insert_after(kvs, new, ["tokenizer.ggml."])
        else:
            kvs = {k: (new if k == key else v) for k, v in kvs.items()}
        return kvs, APPLIED, f"{key}: {name(old)} -> {name(new)}"


RULE_KINDS: dict[str, type[Rule]] = {k.kind: k for k in (CountFromTensors, MoveKey, TokenId)}
_RENAMED = {"from": "source", "to": "dest"}  # JSON field -> dataclass field, where a name is a keyword


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    rules: tuple[Rule, ...]


def _parse_rule(path: Path, i: int, raw: Any) -> Rule:
    if not isinstance(raw, dict):
        raise PatchError(f"patch profile {path}: rule {i} is not an object")
    kind = RULE_KINDS.get(str(raw.get("kind")))
    if kind is None:
        raise PatchError(f"patch profile {path}: rule {i} has unknown kind {raw.get('kind')!r} "
                         f"(known: {', '.join(sorted(RULE_KINDS))})")
    missing = (set(kind.fields) | {"id"}) - set(raw)
    if missing:
        raise PatchError(f"patch profile {path}: rule {raw.get('id', i)!r} lacks {', '.join(sorted(missing))}")
    values: dict[str, Any] = {_RENAMED.get(f, f): raw[f] for f in kind.fields}
    if "value_type" in values:
        if values["value_type"] not in ValueType.__members__:
            raise PatchError(f"patch profile {path}: rule {raw['id']!r} has unknown value_type "
                             f"{values['value_type']!r}")
        values["value_type"] = ValueType[values["value_type"]]
    return kind(id=raw["id"], title=raw["title"] if "title" in raw else raw["id"],
                only_if_llama_cpp_requires=bool(raw.get("only_if_llama_cpp_requires")), **values)


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
    return Profile(data.get("name", path.stem), data.get("description", ""),
                   tuple(_parse_rule(path, i, rule) for i, rule in enumerate(rules)))


def all_profiles() -> list[Profile]:
    return [load_profile(p) for p in sorted(PROFILES_DIR.glob("*.json"))]
