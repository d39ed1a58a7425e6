"""The rule engine: a profile's rules run over one file's header. No Qt.

`apply_rules` gives the patched metadata and one result per rule; `decide_rules` asks the bundled
llama.cpp (`app.model.patch_probe`) only for a file not recognisably in the profile's dialect;
`patched_header` and `load_overrides` turn the outcome into a new header or load-time overrides;
`verify` checks a written file against its source and the profile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.gguf.gguf_file import KV, GGUFHeader, ValueType, encode_header, read_header
from app.model.patch_probe import llama_requires_key
from app.model.patch_profile import (
    APPLIED,
    CANNOT_APPLY,
    NOT_NEEDED,
    PatchError,
    Profile,
    Requires,
    RuleResult,
    VerificationError,
    all_profiles,
)


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
        kvs, status, detail = rule.apply(arch, kvs, header.tensors, requires)
        results.append(RuleResult(rule.id, rule.title, status, detail))
    return kvs, results


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


def in_dialect(results: list[RuleResult], profile: Profile) -> bool:
    """A rule that does not depend on what llama.cpp requires applies: the file is in the dialect."""
    return any(r.status == APPLIED and not rule.only_if_llama_cpp_requires
               for r, rule in zip(results, profile.rules, strict=True))


def decide_rules(header: GGUFHeader, profile: Profile, path: str | Path) -> tuple[dict[str, KV], list[RuleResult],
                                                                                   Requires | None]:
    """The rules' outcome for a file: a file in the profile's dialect (a rule that does not depend on
    llama.cpp applies) gets every rule; otherwise rules marked `only_if_llama_cpp_requires` ask the
    bundled llama.cpp (a no-alloc load), so an upstream file that loads as it is stays as it is."""
    kvs, results = apply_rules(header, profile)
    if in_dialect(results, profile) or not any(r.status == APPLIED for r in results):
        return kvs, results, None
    requires = llama_requires_key(path, header)
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
