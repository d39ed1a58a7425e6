"""Grammars for structured output under thinking and for forced tool calls (issue 29, items 1 and 2),
on real models: SmolLM2 given the Qwen3.5 template, the tiny qwen35moe (Clover's architecture, the
same template), SmolLM2 with its own template (no tool-call tags) and with a JSON-in-tags template.
The lazy grammar is checked on llama.cpp's own sampler: nothing is constrained before `</think>`,
the schema is after it."""

from __future__ import annotations

import ctypes
import json
import urllib.request

import jsonschema
import numpy as np
import pytest

from app.engine.chat_template import ChatTemplate
from app.engine.contract import ChatRequest, EngineError, SamplingParams
from app.engine.grammars import Grammar, GrammarError, call_grammar, excluding, json_grammar
from app.engine.local import Engine
from app.engine.sampler import build_sampler
from app.machine.llama_backend import llama
from tests.helpers.gguf_models import QWEN35_TEMPLATE

GREEDY = SamplingParams(temperature=0.0, max_tokens=80)
CAPITAL = {"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"],
           "additionalProperties": False}
QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in JSON."}]
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]},
                                     "days": {"type": "integer"}},
    "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}}}]
WEATHER_Q = [{"role": "user", "content": "What is the weather in Oslo?"}]
# a Hermes/Qwen2.5-style template: tools described as JSON, calls as JSON inside <tool_call> tags
JSON_TAGS_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\nYou may call tools. Tools:\\n' }}{% for t in tools %}{{ t | tojson }}"
    "{{ '\\n' }}{% endfor %}{{ 'Answer a call as <tool_call>\\n{\"name\": NAME, \"arguments\": ARGS}\\n</tool_call>"
    "<|im_end|>\\n' }}{% endif %}{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def with_template(engine: Engine, source: str) -> ChatTemplate:
    old = engine.template
    assert old is not None
    engine.template = ChatTemplate(source, bos_token=old.bos_token, eos_token=old.eos_token)
    return old


@pytest.fixture()
def smollm2_qwen35(smollm2_engine):
    """The shared SmolLM2 engine rendering the Qwen3.5 template (its tokenizer is ChatML's too)."""
    old = with_template(smollm2_engine, QWEN35_TEMPLATE)
    yield smollm2_engine
    smollm2_engine.template = old


@pytest.fixture
def hybrid(qwen35moe_engine):
    return qwen35moe_engine


# ----------------------------------------------------------------------------- item 1: structured output


def assert_structured(reply, schema) -> None:
    assert reply.prompt.endswith("<|im_start|>assistant\n<think>\n</think>\n\n")  # the block closed first
    value = json.loads(reply.text)
    jsonschema.validate(value, schema)
    assert reply.json_errors == [] and reply.json_value == value
    assert "{" not in reply.reasoning and reply.reasoning == ""
    assert reply.raw.lstrip().startswith("{")


def test_structured_output_with_thinking_on_smollm2_under_the_qwen35_template(smollm2_qwen35):
    """A client that sends no enable_thinking gets the template's default (thinking on): the answer,
    not the reasoning, is the JSON."""
    reply = smollm2_qwen35.generate(ChatRequest(QUESTION, enable_thinking=None, json_schema=CAPITAL,
                                                sampling=GREEDY))
    print("smollm2 content:", repr(reply.text), "reasoning:", repr(reply.reasoning))
    assert_structured(reply, CAPITAL)
    assert reply.json_value == {"capital": "Paris"}


def test_structured_output_with_thinking_on_the_tiny_hybrid(hybrid):
    """Random weights never end a free string: the schema's values are closed sets."""
    schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Lyon"]}, "rank": {"enum": [1, 2, 3]},
                                               "sure": {"type": "boolean"}},
              "required": ["city", "rank", "sure"], "additionalProperties": False}
    for thinking in (None, False):
        reply = hybrid.generate(ChatRequest(QUESTION, enable_thinking=thinking, json_schema=schema, sampling=GREEDY))
        print(f"hybrid (enable_thinking={thinking}) content:", repr(reply.text), "reasoning:", repr(reply.reasoning))
        jsonschema.validate(json.loads(reply.text), schema)
        assert reply.reasoning == "" and reply.json_errors == []
        if thinking is None:
            assert_structured(reply, schema)


def test_without_a_schema_thinking_is_untouched(smollm2_qwen35):
    reply = smollm2_qwen35.generate(ChatRequest(QUESTION, enable_thinking=None,
                                                sampling=SamplingParams(temperature=0.0, max_tokens=8)))
    assert reply.prompt.endswith("<|im_start|>assistant\n<think>\n") and reply.reasoning and not reply.text


def _apply(chain, logits: np.ndarray) -> np.ndarray:
    """The chain's grammar and penalties applied to `logits` (greedy keeps the array's order)."""
    lc = llama()
    data = np.zeros(len(logits), np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)]))
    data["id"] = np.arange(len(logits))
    data["logit"] = logits
    cur = lc.llama_token_data_array(data.ctypes.data_as(ctypes.POINTER(lc.llama_token_data)), len(data), -1, False)
    lc.llama_sampler_apply(chain, ctypes.byref(cur))
    return data["logit"].copy()


def test_an_explicit_thinking_request_thinks_freely_then_the_lazy_grammar_holds_the_answer(smollm2_qwen35):
    """enable_thinking true: the prompt stays open and the grammar is lazy on `</think>`; on llama.cpp's
    own sampler nothing is constrained in the reasoning (a '{' in it changes nothing), and after
    `</think>` only what starts the schema's JSON is left (the EOG too is banned until the JSON ends)."""
    engine = smollm2_qwen35
    request = ChatRequest(QUESTION, enable_thinking=True, json_schema=CAPITAL, sampling=GREEDY)
    assert engine.render_prompt(request).endswith("<|im_start|>assistant\n<think>\n")
    grammar = engine.grammar(request)
    assert isinstance(grammar, Grammar) and grammar.lazy
    llm = engine.llm
    n_vocab = llm.n_vocab()
    rng = np.random.default_rng(0)
    logits = rng.normal(size=n_vocab).astype(np.float32)
    sampler = build_sampler(llm, temperature=0.0, top_k=40, top_p=1.0, min_p=0.0, grammar=grammar)
    plain = build_sampler(llm, temperature=0.0, top_k=40, top_p=1.0, min_p=0.0)
    try:
        chain = sampler.sampler

        def accept(text: str) -> None:
            for t in llm.tokenize(text.encode(), add_bos=False, special=True):
                llama().llama_sampler_accept(chain, t)

        accept("Paris is the answer; maybe {\"capital\": 1} or just words.")
        assert np.array_equal(_apply(chain, logits), _apply(plain.sampler, logits))  # not constrained yet
        accept("</think>\n\n")
        after = _apply(chain, logits)
        allowed = {llm.detokenize([int(t)]).decode("utf-8", "replace") for t in np.flatnonzero(np.isfinite(after))}
        assert allowed and all(a.strip() == "" or a.lstrip().startswith("{") for a in allowed), sorted(allowed)[:20]
        assert "{" in allowed and not np.isfinite(after[llm.token_eos()])
        accept('{"capital": "Paris"}')
        done = _apply(chain, logits)
        assert np.isfinite(done[llm.token_eos()])  # the JSON is complete: the reply may end
        assert not np.isfinite(done[llm.tokenize(b"Paris", add_bos=False)[0]])
    finally:
        sampler.close()
        plain.close()


def test_an_explicit_thinking_request_on_the_hybrid_keeps_its_reasoning(hybrid):
    """Random weights never close the think block: with thinking asked for, the reply is reasoning
    cut by max_tokens, never JSON inside the reasoning held by a grammar from the first token."""
    reply = hybrid.generate(ChatRequest(QUESTION, enable_thinking=True, json_schema=CAPITAL,
                                        sampling=SamplingParams(temperature=0.0, max_tokens=24)))
    assert reply.prompt.endswith("<think>\n") and reply.stats.stop_reason == "length"
    assert reply.reasoning and not reply.reasoning.lstrip().startswith("{") and reply.text == ""


# ----------------------------------------------------------------------------- item 2: forced calls


def assert_valid_call(call, tools, name=None) -> None:
    assert call.errors == [], (call.raw, call.errors)
    fn = next(t["function"] for t in tools if t["function"]["name"] == call.name)
    jsonschema.validate(call.arguments, fn["parameters"])
    if name:
        assert call.name == name


@pytest.mark.parametrize("choice", ["get_weather", "get_time", "required"])
def test_forced_xml_calls_fit_the_tools_schemas_on_smollm2(smollm2_qwen35, choice):
    reply = smollm2_qwen35.generate(ChatRequest(WEATHER_Q, tools=WEATHER, tool_choice=choice, sampling=GREEDY))
    print(choice, "->", [(c.name, c.arguments) for c in reply.tool_calls], repr(reply.raw))
    assert len(reply.tool_calls) == 1 and reply.stats.stop_reason == "end"
    assert_valid_call(reply.tool_calls[0], WEATHER, None if choice == "required" else choice)
    assert reply.raw.endswith("</function>\n</tool_call>")


@pytest.mark.parametrize("choice", ["get_time", "required"])
def test_forced_xml_calls_fit_the_tools_schemas_on_the_tiny_hybrid(hybrid, choice):
    """The issue's case: 'required' on the hybrid returned name '' and arguments {}. (Its random weights
    never end a free-text value, so the named tool is the one whose parameter is an enum.)"""
    reply = hybrid.generate(ChatRequest(WEATHER_Q, tools=WEATHER, tool_choice=choice,
                                        sampling=SamplingParams(temperature=0.0, max_tokens=200)))
    print(choice, "->", [(c.name, c.arguments) for c in reply.tool_calls], repr(reply.raw))
    assert len(reply.tool_calls) == 1
    assert_valid_call(reply.tool_calls[0], WEATHER, None if choice == "required" else choice)
    assert reply.tool_calls[0].name in ("get_weather", "get_time")


@pytest.mark.parametrize("choice", ["get_weather", "required"])
def test_forced_json_calls_in_tags_fit_the_schemas(smollm2_engine, choice):
    old = with_template(smollm2_engine, JSON_TAGS_TEMPLATE)
    try:
        reply = smollm2_engine.generate(ChatRequest(WEATHER_Q, tools=WEATHER, tool_choice=choice, sampling=GREEDY))
    finally:
        smollm2_engine.template = old
    print(choice, "->", [(c.name, c.arguments) for c in reply.tool_calls], repr(reply.raw))
    assert reply.raw.startswith("<tool_call>\n") and reply.raw.endswith("</tool_call>")
    assert len(reply.tool_calls) == 1
    assert_valid_call(reply.tool_calls[0], WEATHER, None if choice == "required" else choice)


def test_a_forced_call_without_tags_fits_the_named_tool(smollm2_engine):
    """The issue's case: SmolLM2's own template (no tags), get_weather forced, returned
    {"gaben": "gaben_gaben"}; the whole answer is now a call of that tool with its arguments."""
    reply = smollm2_engine.generate(ChatRequest(WEATHER_Q, tools=WEATHER, tool_choice="get_weather", sampling=GREEDY))
    print("untagged ->", [(c.name, c.arguments) for c in reply.tool_calls], repr(reply.raw))
    assert len(reply.tool_calls) == 1 and reply.text == ""
    assert_valid_call(reply.tool_calls[0], WEATHER, "get_weather")


# ----------------------------------------------------------------------------- the grammars themselves


def test_a_raw_xml_value_cannot_hold_a_closing_tag(smollm2_qwen35):
    """On llama.cpp's sampler: inside a string parameter, '</parameter' may not be followed by '>'
    (the parser would end the value there), and a closed value goes on only to a declared parameter."""
    engine = smollm2_qwen35
    llm = engine.llm
    grammar = call_grammar(WEATHER, xml=True, tagged=True, name="get_weather")
    sampler = build_sampler(llm, temperature=0.0, top_k=40, top_p=1.0, min_p=0.0, grammar=grammar)
    logits = np.zeros(llm.n_vocab(), np.float32)
    try:
        chain = sampler.sampler
        for t in llm.tokenize(b"<parameter=city>\nOslo </parameter", add_bos=False, special=True):
            llama().llama_sampler_accept(chain, t)
        allowed = _apply(chain, logits)
        gt = llm.tokenize(b">", add_bos=False)
        assert len(gt) == 1 and not np.isfinite(allowed[gt[0]])
        for t in llm.tokenize(b"s\n</parameter>\n<parameter=", add_bos=False, special=True):
            llama().llama_sampler_accept(chain, t)
        allowed = _apply(chain, logits)
        starts = {llm.detokenize([int(t)]).decode("utf-8", "replace") for t in np.flatnonzero(np.isfinite(allowed))}
        assert starts and all(any(p.startswith(s) for p in ("unit>", "days>")) for s in starts), starts
    finally:
        sampler.close()


def test_grammar_building_errors():
    with pytest.raises(GrammarError, match="no tool"):
        call_grammar(WEATHER, xml=True, tagged=True, name="nope")
    assert not json_grammar(CAPITAL).lazy and json_grammar(CAPITAL, after_think=True).triggers == ("<\\/think>",)


def test_the_excluding_rule_is_llama_cpps_automaton():
    conv = llama().llama_grammar.SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    assert excluding(conv, "x", ("ab",)) == "x"
    rules = dict(line.split(" ::= ") for line in conv.format_grammar().splitlines())
    assert rules["x"] == "| [a] x-1 | [^a] x" and rules["x-1"] == "| [a] x-1 | [^ab] x"


def test_an_unparsable_grammar_is_an_error_not_a_crash(smollm2_engine):
    with pytest.raises(GrammarError):
        build_sampler(smollm2_engine.llm, temperature=0.0, top_k=40, top_p=1.0, min_p=0.0,
                      grammar=Grammar("root ::= [unclosed"))


def test_an_engine_error_names_a_missing_tool(smollm2_qwen35):
    with pytest.raises(EngineError, match="no tool is named"):
        smollm2_qwen35.count_tokens(ChatRequest(WEATHER_Q, tools=WEATHER, tool_choice="nope"))


def test_over_the_server_a_forced_call_fits_and_a_cut_one_says_so(hybrid, serve):
    """Through the local server with a real model (the hybrid: its template reads tools): the forced
    call's arguments fit the schema (no x_clover_errors); one cut by max_tokens carries its violations."""
    s = serve(hybrid)
    body = {"model": "local", "messages": WEATHER_Q, "tools": WEATHER, "temperature": 0,
            "tool_choice": {"type": "function", "function": {"name": "get_time"}}}
    for max_tokens, valid in ((80, True), (3, False)):
        req = urllib.request.Request(s.url + "/chat/completions", data=json.dumps({**body, "max_tokens": max_tokens})
                                     .encode(), headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req) as r:
            choice = json.loads(r.read())["choices"][0]
        (call,) = choice["message"]["tool_calls"]
        print(max_tokens, "->", call)
        assert call["function"]["name"] == "get_time"
        if valid:
            args = json.loads(call["function"]["arguments"])
            jsonschema.validate(args, WEATHER[1]["function"]["parameters"])
            assert "x_clover_errors" not in call and choice["finish_reason"] == "tool_calls"
        else:
            assert call["x_clover_errors"], call
