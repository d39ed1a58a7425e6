"""An engine double for the BFCL bench in the window: a ScriptedEngine whose script answers each case
of the dataset by writing a call from the case's acceptable answers, in the model's own form (JSON in
<tool_call> tags after a reasoning block where thinking is on), through the engine's text pipeline, so
the calls reach the bench as a real model's do. Every `wrong_every`-th AST case is answered wrongly
instead, in words or with an argument off by turns (a wrong verdict, with the checker's reason), so a
run's table has both kinds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.bench.bfcl_cases import CATEGORIES, Case, load_cases
from app.engine.contract import ReplyStats
from tests.helpers.fakes import ScriptedEngine, Turn


def first_acceptable(options: list[Any]) -> tuple[bool, Any]:
    """The first acceptable value that is not "optional" (False: the parameter may be left out), as a
    model would write it."""
    for option in options:
        if option != "":
            return True, concrete(option)
    return False, None


def concrete(value: Any) -> Any:
    """An acceptable value as written: a dict's keys hold lists of options, so each is picked too."""
    if isinstance(value, dict):
        out = {}
        for key, options in value.items():
            if isinstance(options, list):
                there, picked = first_acceptable(options)
                if there:
                    out[key] = picked
            else:
                out[key] = options
        return out
    if isinstance(value, list):
        return [concrete(v) for v in value]
    return value


def _off(value: Any) -> Any:
    """A value the acceptable answers do not list (a wrong argument)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + " (or so)"
    return None


def answer_for(case: Case, wrong: str = "") -> str:
    """What the double writes for a case (without its reasoning): a call made from the acceptable answers;
    `wrong`: "words" (no call at all) or "value" (the first argument off)."""
    if case.kind == "irrelevance" or wrong == "words":
        return "None of the functions offered can answer this; I would need more to go on."
    if case.kind == "relevance":
        return _tool_call(case.functions[0]["name"].replace(".", "_"), {})
    calls = []
    for name, args in truth_calls(case):
        if wrong == "value" and not calls and args:
            first = next(iter(args))
            args = {**args, first: _off(args[first])}
        calls.append(_tool_call(name.replace(".", "_"), args))
    return "\n".join(calls)


def truth_calls(case: Case) -> list[tuple[str, dict[str, Any]]]:
    """The case's acceptable answer as calls a model would write: (function name, arguments), each
    parameter at its first acceptable value, the optional ones left out."""
    calls = []
    for item in case.ground_truth or []:
        name, params = next(iter(item.items()))
        args = {}
        for param, options in params.items():
            there, value = first_acceptable(options)
            if there:
                args[param] = value
        calls.append((name, args))
    return calls


def _tool_call(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def bfcl_engine(folder: Path, *, wrong_every: int = 0, gated: bool = False, name: str = "tool-writer",
                categories: tuple[str, ...] = CATEGORIES) -> ScriptedEngine:
    """The double, answering every case of `categories` in the dataset at `folder`."""
    from app.engine.text_pipeline import TextPipeline

    by_question: dict[str, Case] = {}
    for case in load_cases(folder, categories):
        by_question.setdefault(case.question(), case)
    seen: list[int] = [0]

    def script(request: Any) -> Turn:
        question = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        case = by_question[question]
        wrong = ""
        if case.kind == "ast":
            seen[0] += 1
            if wrong_every and seen[0] % wrong_every == 0:  # wrong in words, then with a value off, in turn
                wrong = "words" if seen[0] // wrong_every % 2 else "value"
        thought = f"The user asks: {question[:80]}. I pick the function that fits." if request.enable_thinking else ""
        text = (f"<think>\n{thought}\n</think>\n\n" if thought else "") + answer_for(case, wrong)
        pipeline = TextPipeline(request.tools)
        pipeline.feed_text(text)
        out = pipeline.finish()
        stats = ReplyStats(prompt_tokens=400, prompt_evaluated=400, generated_tokens=len(text) // 4, stop_reason="end")
        return Turn(out.raw, out.reasoning, out.tool_calls, stats, stream=[])

    return ScriptedEngine(script, gated=gated, name=name)
