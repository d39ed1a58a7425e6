"""The BFCL bench against BFCL's own code (the registry package bfcl-eval, tests/bench/bfcl_reference.py):
the checker's verdicts on every ground truth and on mutations of each, the tools a request offers, the
prompt mode's system prompt and decoder; then the whole path through an engine double that writes
each ground truth in a model's own tool-call form."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from app.bench import bfcl_cases, bfcl_checker, bfcl_prompting
from app.bench.bfcl_cases import CATEGORIES, IRRELEVANCE, RELEVANCE, Case, load_category
from app.bench.bfcl_checker import call_name, check_ast, check_relevance
from tests.bench.bfcl_reference import bfcl
from tests.helpers.bfcl_writer import truth_calls as written_truth

AST_CATEGORIES = tuple(c for c in CATEGORIES if c not in IRRELEVANCE + RELEVANCE)


@pytest.fixture(scope="module")
def ref():
    return bfcl()


@pytest.fixture(scope="module")
def cases(ref) -> dict[str, list[Case]]:
    return {c: load_category(ref.data, c) for c in CATEGORIES}


# ----------------------------------------------------------------------------- outputs made from the answers


def truth_calls(case: Case, dots_renamed: bool) -> list[dict[str, Any]]:
    return [{call_name(name, dots_renamed): args} for name, args in written_truth(case)]


def _other_type(value: Any) -> Any:
    if isinstance(value, bool):
        return "true"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value}"
    if isinstance(value, str):
        return 12345
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    if isinstance(value, dict):
        return [value]
    return "x"


def _unaccepted(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1000
    if isinstance(value, str):
        return value + " zzz"
    if isinstance(value, list):
        return [*value, "zzz"]
    if isinstance(value, dict):
        return {**value, "zzz": 1}
    return "zzz"


def _restyled(value: Any) -> Any:
    """The same value as BFCL reads strings (case, spaces, `,./-_*^` and quotes aside), written otherwise."""
    if isinstance(value, str):
        return value.upper().replace(" ", "_").replace('"', "'") + ".,-*^/"
    if isinstance(value, list):
        return [_restyled(v) for v in value]
    if isinstance(value, dict):
        return {k: _restyled(v) for k, v in value.items()}
    return value


def mutations(case: Case, calls: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The ground truth, then the ways a model gets it wrong (or right otherwise)."""
    out = [("truth", calls)]
    if not calls:
        return out
    first_name, first_args = next(iter(calls[0].items()))

    def with_first(args: dict[str, Any], name: str = first_name) -> list[dict[str, Any]]:
        return [{name: args}, *copy.deepcopy(calls[1:])]

    out.append(("wrong function", with_first(dict(first_args), first_name + "_wrong")))
    function = next((f for f in case.functions if call_name(f["name"], "_" in first_name and "." in f["name"])
                     == first_name or f["name"] == first_name), None)
    required = (function or {}).get("parameters", {}).get("required", [])
    for param in [p for p in required if p in first_args][:1]:
        out.append((f"missing required {param}", with_first({k: v for k, v in first_args.items() if k != param})))
    for param, value in list(first_args.items())[:3]:
        out.append((f"wrong type {param}", with_first({**first_args, param: _other_type(value)})))
        out.append((f"value not accepted {param}", with_first({**first_args, param: _unaccepted(value)})))
        out.append((f"restyled {param}", with_first({**first_args, param: _restyled(value)})))
        if isinstance(value, float) and value == int(value):
            out.append((f"int for float {param}", with_first({**first_args, param: int(value)})))
        if isinstance(value, bool):
            out.append((f"int for bool {param}", with_first({**first_args, param: int(value)})))
        if isinstance(value, list) and value:
            out.append((f"list item of another type {param}",
                        with_first({**first_args, param: [_other_type(value[0]), *value[1:]]})))
    out.append(("unexpected parameter", with_first({**first_args, "zz_not_a_parameter": 1})))
    out.append(("extra call", [*copy.deepcopy(calls), copy.deepcopy(calls[0])]))
    out.append(("no call", []))
    if len(calls) > 1:
        out.append(("reversed order", list(reversed(copy.deepcopy(calls)))))
    return out


def _outcome(fn) -> tuple[bool | None, str]:
    try:
        result = fn()
    except Exception as exc:  # both checkers fail on the same odd output: that agrees too
        return None, type(exc).__name__
    if isinstance(result, dict):
        return result["valid"], result.get("error_type", "") if not result["valid"] else ""
    return result.valid, result.error_type if not result.valid else ""


def test_the_checker_gives_bfcls_verdict_on_every_ground_truth_and_its_mutations(ref, cases, artifacts_dir):
    compared = 0
    disagreements = []
    contradicting = []  # ground truths BFCL's own checker rejects
    for category in AST_CATEGORIES:
        for case in cases[category]:
            for dots_renamed, model in ((True, "clover-fc"), (False, "clover-prompt")):
                calls = truth_calls(case, dots_renamed)
                for what, output in mutations(case, calls):
                    theirs = _outcome(lambda o=output, c=case, cat=category, m=model: ref.ast_checker(
                        c.functions, o, c.ground_truth, ref.Language.PYTHON, cat, m))
                    mine = _outcome(lambda o=output, c=case, cat=category, d=dots_renamed: check_ast(
                        cat, c.functions, o, c.ground_truth, d))
                    compared += 1
                    if theirs != mine:
                        disagreements.append((case.id, model, what, theirs, mine))
                    if what == "truth" and dots_renamed and theirs[0] is not True:
                        contradicting.append((case.id, theirs[1]))
    (artifacts_dir / "bfcl-contradicting-ground-truths.json").write_text(json.dumps(contradicting, indent=1))
    print(f"{compared} outputs compared, {len(disagreements)} disagreements; "
          f"{len(contradicting)} ground truths BFCL's checker rejects: {contradicting}")
    assert compared > 10_000
    assert disagreements == []


def test_relevance_is_judged_as_bfcl_judges_it(ref, cases):
    outputs: list[Any] = [None, [], [{}], [{"f": {}}], [{"get_weather": {"city": "Paris"}}],
                          [{"a": {"x": 1}}, {"b": {}}], ["text"], [{"f": "not a dict"}], [{"f": {}, "g": {}}]]
    for category in IRRELEVANCE + RELEVANCE:
        for output in outputs:
            # BFCL's rule (eval_runner._evaluate_single_relevance_entry): a decoded output that is not empty is a call
            made_call = output is not None and not ref.utils.is_empty_output(output)
            bfcl_valid = not made_call if "irrelevance" in category else made_call
            kind = "irrelevance" if category in IRRELEVANCE else "relevance"
            assert check_relevance(output, kind).valid == bfcl_valid, (category, output)


def test_the_tools_a_request_offers_are_bfcls_conversion(ref, cases):
    hu = ref.handler_utils
    for category, items in cases.items():
        for case in items:
            hinted = ref.utils._func_doc_language_specific_pre_processing(copy.deepcopy(case.functions), category)
            theirs = hu.convert_to_tool(hinted, bfcl_cases.GORILLA_TO_OPENAPI, ref.ModelStyle.OPENAI_COMPLETIONS)
            assert case.tools() == theirs, case.id


def test_the_prompt_mode_writes_bfcls_system_prompt(ref, cases):
    hu = ref.handler_utils
    for category in ("simple_python", "live_multiple", "irrelevance"):
        for case in cases[category][:40]:
            functions = bfcl_cases.with_python_hint(case.functions)
            theirs = hu.system_prompt_pre_processing_chat_model(copy.deepcopy(case.messages), functions, case.id)
            assert bfcl_prompting.with_system_prompt(case.messages, functions) == theirs, case.id


def _python_call(name: str, args: dict[str, Any]) -> str:
    return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"


def test_the_prompt_modes_decoder_reads_what_bfcls_reads(ref, cases):
    texts = ["[f(a=1)]", "f(a=1, b='x')", "```\n[f(a=[1, 2], b={'k': 'v'})]\n```", "[m.sub.f(x=-3)]",
             "[f(a=(1, 2)), g()]", "[f(a=None, b=True)]", "[f(a=x)]", "[f(a=g(b=1))]", "[f(a=g(1))]", "I can't",
             "[1, 2]", "[f(a=2*3+1)]", "[f(a='a'+'b')]", "[f(a=d[0])]", "[f(a=...)]", "[f(a=-1.5)]", ""]
    for category in AST_CATEGORIES:
        for case in cases[category]:
            texts.append("[" + ", ".join(_python_call(*next(iter(c.items()))) for c in truth_calls(case, False)) + "]")
    from bfcl_eval.constants.enums import ReturnFormat

    assert len(texts) > 2300
    for text in texts:
        try:
            theirs: Any = ref.handler_utils.default_decode_ast_prompting(text, ReturnFormat.PYTHON)
        except Exception:
            theirs = "decode failed"
        try:
            mine: Any = bfcl_prompting.decode(text)
        except bfcl_prompting.DecodeError:
            mine = "decode failed"
        assert mine == theirs, text


# ----------------------------------------------------------------------------- the whole path


class WritingEngine:
    """An engine double that writes, for each case, the text `write(case)` gives, through the engine's
    own text pipeline (the reasoning split off, tool calls parsed and checked as the local engine does)."""

    kind = "local"

    def __init__(self, by_question: dict[str, str]) -> None:
        from app.engine.contract import ModelInfo
        from app.machine.llama_load import LoadSettings

        self.by_question = by_question
        self.info = ModelInfo("scripted.gguf", "scripted", "qwen35moe", 4096, True, True, LoadSettings())
        self.loaded = True

    def generate(self, request, on_event=None, should_stop=None, on_logprob=None, prepared=None):
        from app.engine.contract import Reply, ReplyStats
        from app.engine.text_pipeline import TextPipeline, check_reply

        question = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        pipeline = TextPipeline(request.tools)
        text = self.by_question[question]
        for i in range(0, len(text), 7):  # cut as tokens would be
            pipeline.feed_text(text[i:i + 7])
        out = pipeline.finish()
        reply = Reply(out.text, out.reasoning, out.raw, "", ReplyStats(stop_reason="end", generated_tokens=len(text)),
                      out.tool_calls)
        return check_reply(reply, request)

    def unload(self) -> None:
        pass


def _xml(name: str, args: dict[str, Any]) -> str:
    params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
                     for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def _as_xml_carries(calls: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls as the XML form carries them: a parameter the tool types as a string holds the text
    written, whatever the ground truth's type (a `true` or `null` where the schema says string reads
    back as that word, in llama.cpp's parser as in the app's)."""
    types = {t["function"]["name"]: {k: v.get("type") for k, v in t["function"]["parameters"]["properties"].items()}
             for t in tools}
    out = []
    for call in calls:
        name, args = next(iter(call.items()))
        out.append({name: {k: (v if isinstance(v, str) else json.dumps(v))
                           if types.get(name, {}).get(k) == "string" else v for k, v in args.items()}})
    return out


def _json_form(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


@pytest.mark.parametrize("form", ["xml", "json"])
def test_the_whole_path_scores_a_written_ground_truth_as_the_checker_scores_it(ref, cases, form):
    """Every AST case's ground truth written in the model's own form (Clover's XML calls, or JSON in
    <tool_call> tags) after a reasoning block, through the pipeline, the parser and the bench: the same
    verdicts as the checker gives the ground truth itself. Irrelevance cases answered in words pass;
    relevance cases answered with a call pass."""
    from app.bench.bfcl_run import run_cases
    from app.engine.contract import SamplingParams

    write = _xml if form == "xml" else _json_form
    chosen: list[Case] = []
    by_question: dict[str, str] = {}
    expected: dict[str, bool] = {}
    for category in CATEGORIES:
        for case in cases[category]:
            if case.question() in by_question:
                continue  # a question asked twice would get one answer
            chosen.append(case)
            if case.kind == "ast":
                calls = truth_calls(case, True)
                body = "\n".join(write(*next(iter(c.items()))) for c in calls)
                carried = calls if form == "json" else _as_xml_carries(calls, case.tools())
                expected[case.id] = check_ast(category, case.functions, carried, case.ground_truth).valid
            elif case.kind == "irrelevance":
                body = "None of the functions fits this question."
                expected[case.id] = True
            else:
                body = write(case.functions[0]["name"].replace(".", "_"), {})
                expected[case.id] = True
            by_question[case.question()] = "<think>\nLet me see.\n</think>\n\n" + body
    records = run_cases(WritingEngine(by_question), chosen, mode="fc", thinking=True,
                        sampling=SamplingParams(temperature=0.0))
    assert len(records) == len(chosen) > 3000
    differ = [(r.id, r.reason) for r in records if r.valid != expected[r.id]]
    assert differ == [], differ[:5]
    assert all(r.reasoning.strip() == "Let me see." for r in records)
    assert all("<think>" not in r.raw for r in records)


def test_quick_sample_is_fixed_and_covers_every_category(ref):
    a = bfcl_cases.load_cases(ref.data, quick=True)
    b = bfcl_cases.load_cases(ref.data, quick=True)
    assert [c.id for c in a] == [c.id for c in b]
    per = {c: sum(1 for x in a if x.category == c) for c in CATEGORIES}
    assert all(n == bfcl_cases.QUICK_PER_CATEGORY for n in per.values()), per


def test_a_bad_dataset_folder_is_said_in_words(tmp_path: Path):
    with pytest.raises(bfcl_cases.DatasetError, match="BFCL_v4_simple_python.json is missing"):
        load_category(tmp_path, "simple_python")
    (tmp_path / "BFCL_v4_irrelevance.json").write_text('{"id": "irrelevance_0"\n')
    with pytest.raises(bfcl_cases.DatasetError, match="line 1: not JSON"):
        load_category(tmp_path, "irrelevance")
    with pytest.raises(bfcl_cases.DatasetError, match="unknown BFCL category nope; known: simple_python"):
        bfcl_cases.parse_categories("simple_python,nope")


def test_verdicts_hold_bfcls_quirks():
    fn = {"name": "f", "parameters": {"type": "dict", "properties": {
        "n": {"type": "integer"}, "x": {"type": "float"}, "s": {"type": "string"}, "b": {"type": "boolean"}},
        "required": ["n"]}}
    answer = [{"f": {"n": [3], "x": [2.0, ""], "s": ["New York, NY", ""], "b": [False, ""]}}]
    assert bfcl_checker.check_ast("simple_python", [fn], [{"f": {"n": 3, "x": 2}}], answer).valid  # int for float
    assert bfcl_checker.check_ast("simple_python", [fn], [{"f": {"n": 3, "s": "new york ny"}}], answer).valid
    assert not bfcl_checker.check_ast("simple_python", [fn], [{"f": {"n": True}}], answer).valid  # bool is no int
    assert not bfcl_checker.check_ast("simple_python", [fn], [{"f": {"n": 3, "b": 0}}], answer).valid
    assert bfcl_checker.check_ast("simple_python", [fn], [{"f": {"x": 2.0}}], answer).error_type == \
        "simple_function_checker:missing_required"


# ----------------------------------------------------------------------------- scores and kept runs


def _record(case_id: str, category: str, valid: bool):
    from app.bench.bfcl_run import CaseRecord

    return CaseRecord(case_id, category, valid, "" if valid else "wrong", "" if valid else "x", "raw", [])


def test_the_summary_is_bfcls_formula():
    from app.bench.bfcl_run import summarize

    records = []
    for category, right, total in (("simple_python", 3, 4), ("multiple", 1, 2), ("parallel", 2, 2),
                                   ("parallel_multiple", 0, 2), ("live_simple", 1, 2), ("live_multiple", 6, 8),
                                   ("live_parallel", 0, 1), ("live_parallel_multiple", 1, 1),
                                   ("irrelevance", 1, 4), ("live_irrelevance", 3, 4), ("live_relevance", 1, 2)):
        records += [_record(f"{category}_{i}", category, i < right) for i in range(total)]
    s = summarize(records)
    assert s.non_live == pytest.approx((0.75 + 0.5 + 1.0 + 0.0) / 4)  # unweighted
    assert s.live == pytest.approx((1 + 6 + 0 + 1) / (2 + 8 + 1 + 1))  # weighted by cases
    assert s.irrelevance == pytest.approx((0.25 + 0.75) / 2)
    assert s.relevance == pytest.approx(0.5)
    partial = summarize([r for r in records if r.category != "parallel"])
    assert partial.non_live is None and partial.live is not None  # N/A where a category is missing


def test_a_kept_run_survives_a_crash_mid_line_and_compares_and_exports(tmp_path):
    import csv

    from app.bench.bfcl_store import RunInfo, RunWriter, comparison, list_runs, load_run, table_text, write_csv

    info = RunInfo(label="m", model="m", source="m.gguf", kind="local", thinking=True, mode="fc", quick=True,
                   categories=["simple_python"], planned_cases=3, dataset="BFCL v4", device="CPU: test")
    w = RunWriter(info, tmp_path)
    w.add(_record("simple_python_0", "simple_python", True))
    w.add(_record("simple_python_1", "simple_python", False))
    w._file.write('{"case": {"id": "simple_py')  # the process died while writing the third
    w._file.flush()
    run = load_run(w.path)
    assert [r.id for r in run.records] == ["simple_python_0", "simple_python_1"] and run.state == "cut short"
    info2 = RunInfo(**{**info.__dict__, "thinking": False, "planned_cases": 1})
    w2 = RunWriter(info2, tmp_path)
    w2.add(_record("simple_python_0", "simple_python", True))
    w2.close()
    runs = list_runs(tmp_path)
    assert len(runs) == 2 and runs[0].state == "complete"
    rows = dict(comparison(runs))
    assert rows["simple_python"] == ["100.0 (1/1)", "50.0 (1/2)"] or rows["simple_python"] == ["50.0 (1/2)",
                                                                                                "100.0 (1/1)"]
    assert "no thinking" in table_text(runs)
    out = write_csv(runs, tmp_path / "all.csv")
    rows_csv = list(csv.reader(out.open()))
    assert rows_csv[0][:3] == ["run", "model", "thinking"] and len(rows_csv) == 4


def test_a_case_the_engine_cannot_answer_is_wrong_with_its_words_and_a_lost_engine_ends_the_run(ref, cases):
    from app.bench.bfcl_run import run_cases
    from app.engine.contract import ContextOverflow, EngineError, SamplingParams
    from app.machine.llama_load import LoadSettings
    from tests.helpers.fakes import ScriptedEngine, Turn

    chosen = cases["irrelevance"][:4]
    too_long = chosen[1].question()

    def script(request):
        question = request.messages[-1]["content"]
        if question == too_long:
            return Turn(error=ContextOverflow(5041, 4096))
        return Turn(answer="No function fits.")

    engine = ScriptedEngine(script)
    engine.load("m.gguf", LoadSettings())
    records = run_cases(engine, chosen, mode="fc", thinking=False, sampling=SamplingParams(temperature=0.0))
    assert [r.valid for r in records] == [True, False, True, True]  # irrelevance: right in words, wrong when unanswered
    assert records[1].error and records[1].reason.startswith("The engine could not answer: the conversation is 5,041")

    def dies(request):
        engine.info = None  # the engine's process is gone
        return Turn(error=EngineError("the engine process died (SIGSEGV)"))

    engine = ScriptedEngine(dies)
    engine.load("m.gguf", LoadSettings())
    records = run_cases(engine, chosen, mode="fc", thinking=False, sampling=SamplingParams(temperature=0.0))
    assert len(records) == 1 and "SIGSEGV" in records[0].reason
