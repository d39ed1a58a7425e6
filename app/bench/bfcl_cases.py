"""The Berkeley Function Calling Leaderboard's single-turn tests (BFCL v4) as cases the app can run:
read from the dataset's own files, sampled for a quick run, and turned into the request a client
would send. No Qt.

The dataset is BFCL's folder (`BFCL_v4_<category>.json`, one case a line, and the acceptable answers
in `possible_answer/`), from the Hub or the `bfcl-eval` package (app/fetch/bfcl_dataset.py). The
tools a case offers are BFCL's own conversion of its function docs to the OpenAI format
(`convert_to_tool` with `GORILLA_TO_OPENAPI`, after `_func_doc_language_specific_pre_processing`):
the language note on each description, "float" as a number with its note, dots in names as
underscores (OpenAI's names allow none), so a model here meets the request BFCL's OpenAI-style runs
send. tests/bench/test_bfcl.py compares the conversion with BFCL's on every case.
"""

from __future__ import annotations

import copy
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION_PREFIX = "BFCL_v4"

# The single-turn categories, in the leaderboard's order: AST-checked (with acceptable answers), then
# those judged by whether a call was made at all.
NON_LIVE = ("simple_python", "multiple", "parallel", "parallel_multiple")
LIVE = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
IRRELEVANCE = ("irrelevance", "live_irrelevance")  # a call is wrong
RELEVANCE = ("live_relevance",)  # any call is right
CATEGORIES = NON_LIVE + LIVE + IRRELEVANCE + RELEVANCE

QUICK_PER_CATEGORY = 5  # a quick run: this many cases of each category, the same ones every time (55 in all:
# SmolLM2 finishes them within 10 minutes on a 2-core machine, whose prefill of 220 tok/s spends most of it on
# the 45,000 prompt tokens BFCL's prompt mode makes of them)
QUICK_SEED = "clover-bfcl-quick-1"

# BFCL's type names to the OpenAI (JSON Schema) ones: constants/type_mappings.py GORILLA_TO_OPENAPI
GORILLA_TO_OPENAPI = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object",
    "tuple": "array", "any": "string", "byte": "integer", "short": "integer", "long": "integer",
    "double": "number", "char": "string", "ArrayList": "array", "Array": "array", "HashMap": "object",
    "Hashtable": "object", "Queue": "array", "Stack": "array", "Any": "string", "String": "string",
    "Bigint": "integer",
}
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."


class DatasetError(ValueError):
    """The dataset folder is missing a file, or a file is not what BFCL writes."""


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    messages: list[dict[str, Any]]  # the one turn: system and user messages, as BFCL gives them
    functions: list[dict[str, Any]]  # BFCL's function docs, as in the file (what the checker reads)
    ground_truth: list[dict[str, Any]] | None  # acceptable answers (None: relevance and irrelevance)

    @property
    def kind(self) -> str:
        """How it is judged: "ast" (against acceptable answers), "irrelevance" or "relevance"."""
        if self.category in IRRELEVANCE:
            return "irrelevance"
        if self.category in RELEVANCE:
            return "relevance"
        return "ast"

    def tools(self) -> list[dict[str, Any]]:
        """The OpenAI `tools` a client would send for this case (BFCL's conversion)."""
        return to_openai_tools(self.functions)

    def question(self) -> str:
        """The last user message, for lists and titles."""
        for m in reversed(self.messages):
            if m.get("role") == "user":
                return str(m.get("content", ""))
        return ""


def _cast_types(properties: dict[str, Any]) -> dict[str, Any]:
    """BFCL's `_cast_to_openai_type`: each property's type in OpenAI's words (unknown: string), a float
    marked as one in its description, nested objects and lists of them cast too."""
    for value in properties.values():
        if "type" not in value:
            value["type"] = "string"
        else:
            var_type = value["type"]
            if var_type == "float":
                value["format"] = "float"
                value["description"] += " This is a float type value."
            value["type"] = GORILLA_TO_OPENAPI.get(var_type, "string")
        if value["type"] in ("array", "object"):
            if "properties" in value:
                value["properties"] = _cast_types(value["properties"])
            elif "items" in value:
                items = value["items"]
                items["type"] = GORILLA_TO_OPENAPI[items["type"]]
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = GORILLA_TO_OPENAPI[items["items"]["type"]]
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _cast_types(items["properties"])
    return properties


def with_python_hint(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The function docs as BFCL shows them to a model: each description ends with the language note."""
    out = copy.deepcopy(functions)
    for fn in out:
        fn["description"] = fn.get("description", "") + PYTHON_HINT
    return out


def to_openai_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tools = []
    for fn in with_python_hint(functions):
        fn["name"] = re.sub(r"\.", "_", fn["name"])
        fn["parameters"]["type"] = "object"
        fn["parameters"]["properties"] = _cast_types(fn["parameters"]["properties"])
        tools.append({"type": "function", "function": fn})
    return tools


# ----------------------------------------------------------------------------- reading the dataset


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DatasetError(f"{path.name} is missing from the BFCL dataset folder {path.parent}")
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except ValueError as exc:
                raise DatasetError(f"{path.name}, line {n}: not JSON ({exc})") from None
    return out


def load_category(folder: str | Path, category: str) -> list[Case]:
    """Every case of one category, in the file's order."""
    if category not in CATEGORIES:
        raise DatasetError(f"unknown BFCL category {category!r}; known: {', '.join(CATEGORIES)}")
    folder = Path(folder)
    entries = _read_lines(folder / f"{VERSION_PREFIX}_{category}.json")
    answers: dict[str, Any] = {}
    if category not in IRRELEVANCE + RELEVANCE:
        answers = {a["id"]: a["ground_truth"]
                   for a in _read_lines(folder / "possible_answer" / f"{VERSION_PREFIX}_{category}.json")}
    cases = []
    for entry in entries:
        try:
            turns, functions, case_id = entry["question"], entry["function"], entry["id"]
        except KeyError as exc:
            raise DatasetError(f"{VERSION_PREFIX}_{category}.json: a case without {exc}") from None
        if len(turns) != 1:
            raise DatasetError(f"{case_id}: {len(turns)} turns in a single-turn category")
        truth = None
        if answers:
            if case_id not in answers:
                raise DatasetError(f"{case_id}: no acceptable answer in possible_answer/")
            truth = answers[case_id]
        cases.append(Case(case_id, category, turns[0], functions, truth))
    return cases


def quick_sample(cases: list[Case], n: int = QUICK_PER_CATEGORY) -> list[Case]:
    """A fixed sample of one category: the same `n` cases on every machine and every run (a seeded draw,
    kept in the file's order)."""
    if len(cases) <= n:
        return list(cases)
    category = cases[0].category
    picked = set(random.Random(f"{QUICK_SEED}:{category}").sample(range(len(cases)), n))
    return [c for i, c in enumerate(cases) if i in picked]


def load_cases(folder: str | Path, categories: tuple[str, ...] | list[str] = CATEGORIES,
               quick: bool = False) -> list[Case]:
    out: list[Case] = []
    for category in categories:
        cases = load_category(folder, category)
        out.extend(quick_sample(cases) if quick else cases)
    return out


def parse_categories(text: str | None) -> tuple[str, ...]:
    """`--categories a,b` (every single-turn category without it); unknown names are a DatasetError."""
    if text is None:
        return CATEGORIES
    wanted = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [w for w in wanted if w not in CATEGORIES]
    if unknown or not wanted:
        raise DatasetError(f"unknown BFCL categor{'ies' if len(unknown) > 1 else 'y'} "
                           f"{', '.join(unknown) or '(none named)'}; known: {', '.join(CATEGORIES)}")
    return tuple(c for c in CATEGORIES if c in wanted)
