"""A kept BFCL run scored again by BFCL's own code (bfcl-eval, installed for the tests): its decoder
(prompt mode) or the OpenAI handler's reading of tool calls (FC mode), then its AST checker or its
relevance rule, case by case; the verdicts set beside the app's.

    .venv/bin/python -m tests.bench.bfcl_rescore RUN.jsonl [RUN.jsonl ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from app.bench.bfcl_cases import CATEGORIES, Case, load_category
from app.bench.bfcl_store import Run, load_run
from tests.bench.bfcl_reference import bfcl


def bfcl_verdict(ref: Any, case: Case, mode: str, raw: str, calls: list[dict[str, Any]]) -> bool:
    from bfcl_eval.constants.enums import ReturnFormat

    try:
        if mode == "prompt":
            decoded = ref.handler_utils.default_decode_ast_prompting(raw, ReturnFormat.PYTHON)
        else:  # BFCL's OpenAI handler: each call's arguments as the JSON string the API sends
            if not calls:
                raise ValueError("no tool call")
            decoded = [{c["name"]: json.loads(json.dumps(c["arguments"]))} for c in calls]
    except Exception:
        decoded = None
    if case.kind != "ast":
        made_call = decoded is not None and not ref.utils.is_empty_output(decoded)
        return not made_call if case.kind == "irrelevance" else made_call
    if decoded is None or not ref.utils.is_function_calling_format_output(decoded):
        return False
    model = "clover-fc" if mode == "fc" else "clover-prompt"
    try:
        return bool(ref.ast_checker(case.functions, decoded, case.ground_truth, ref.Language.PYTHON, case.category,
                                    model)["valid"])
    except Exception:
        return False


def rescore(run: Run, folder: Path | None = None) -> tuple[int, list[tuple[str, bool, bool]], int]:
    """(cases compared, [(id, app's verdict, BFCL's)] where they differ, engine errors passed over)."""
    ref = bfcl()
    folder = folder or ref.data
    by_id = {c.id: c for cat in CATEGORIES if cat in run.info.categories for c in load_category(folder, cat)}
    compared, differ, errors = 0, [], 0
    for r in run.records:
        if r.error:
            errors += 1
            continue
        theirs = bfcl_verdict(ref, by_id[r.id], run.info.mode, r.raw, r.calls)
        compared += 1
        if theirs != r.valid:
            differ.append((r.id, r.valid, theirs))
    return compared, differ, errors


def main(argv: list[str]) -> int:
    for path in argv:
        run = load_run(path)
        compared, differ, errors = rescore(run)
        print(f"{run.info.title()}: {compared} cases scored by BFCL's checker, {len(differ)} verdicts differ"
              f"{f', {errors} engine errors passed over' if errors else ''}")
        for d in differ:
            print(f"  {d[0]}: app {'valid' if d[1] else 'invalid'}, BFCL {'valid' if d[2] else 'invalid'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
