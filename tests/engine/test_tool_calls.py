"""Tool calls and structured output: streamed parsing cut everywhere, schema checks, demo tools, the engine."""

from __future__ import annotations

import json

import pytest

from app.chat.demo_tools import example_tools, run_demo_tool
from app.engine.contract import ChatRequest, SamplingParams
from app.engine.tool_calls import (
    ToolCallSplitter,
    ToolsError,
    check_tools,
    parse_call,
    plain_json_calls,
    validate_call,
    validate_json,
)

TOOLS = example_tools()["weather"]
TWO_CALLS = ('Let me check both.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')


def split(chunks):
    s = ToolCallSplitter()
    events = []
    for c in chunks:
        events += s.feed(c)
    events += s.finish()
    return s, events


def test_two_calls_at_every_cut():
    for i in range(len(TWO_CALLS) + 1):
        s, events = split([TWO_CALLS[:i], TWO_CALLS[i:]])
        assert [c.arguments["city"] for c in s.calls] == ["Lisbon", "Oslo"], i
        assert s.text.strip() == "Let me check both."
        assert [k for k, _ in events].count("tool_call") == 2


def test_char_by_char_and_pairs_of_cuts():
    s, _ = split(list(TWO_CALLS))
    assert [c.name for c in s.calls] == ["get_weather", "get_weather"]
    text = TWO_CALLS[:90]
    for i in range(0, len(TWO_CALLS), 7):
        for j in range(i, len(TWO_CALLS), 11):
            s, _ = split([TWO_CALLS[:i], TWO_CALLS[i:j], TWO_CALLS[j:]])
            assert len(s.calls) == 2 and all(c.valid for c in s.calls)
    assert text


def test_broken_and_unclosed_calls_are_reported_not_lost():
    s, _ = split(['<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>ok'])
    assert not s.calls[0].valid and "not valid JSON" in s.calls[0].errors[0] and s.text == "ok"
    s, _ = split(['text <tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'])
    assert s.calls[0].valid and s.calls[0].arguments == {"city": "Oslo"}


def test_plain_json_tool_calls():
    calls = plain_json_calls('{"name": "get_weather", "arguments": {"city": "Oslo"}}')
    assert [c.name for c in calls] == ["get_weather"]
    calls = plain_json_calls(
        '```json\n[{"name": "a", "arguments": {}}, {"function": {"name": "b", "arguments": "{}"}}]\n```')
    assert [c.name for c in calls] == ["a", "b"]
    assert plain_json_calls('{"tool_calls": [{"name": "x", "arguments": {"k": 1}}]}')[0].arguments == {"k": 1}
    assert plain_json_calls("Canberra is the capital.") == [] and plain_json_calls('{"capital": "Canberra"}') == []


def test_schema_validation():
    tools = check_tools(TOOLS)
    assert validate_call(parse_call('{"name": "get_weather", "arguments": {"city": "Oslo"}}'), tools).valid
    bad = validate_call(parse_call('{"name": "get_weather", "arguments": {"town": "Oslo"}}'), tools)
    assert not bad.valid and any("'city' is a required property" in e for e in bad.errors)
    unknown = validate_call(parse_call('{"name": "get_time", "arguments": {}}'), tools)
    assert unknown.errors == ["no tool is named 'get_time'"]
    assert not validate_call(parse_call('{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "kelvin"}}'),
                             tools).valid


def test_tool_definitions_are_checked():
    assert [t["function"]["name"] for t in check_tools(json.dumps(TOOLS))] == ["get_weather"]
    with pytest.raises(ToolsError, match="not valid JSON"):
        check_tools("[{")
    with pytest.raises(ToolsError, match="needs"):
        check_tools([{"type": "function"}])
    with pytest.raises(ToolsError, match="not a valid JSON schema"):
        check_tools([{"type": "function", "function": {"name": "x", "parameters": {"type": "no-such-type"}}}])
    with pytest.raises(ToolsError, match="used twice"):
        check_tools(TOOLS + TOOLS)
    for name, tools in example_tools().items():
        assert check_tools(tools), name


def test_demo_tools_are_deterministic():
    assert json.loads(run_demo_tool("get_weather", {"city": "Lisbon"}))["temperature"] == 24
    assert json.loads(run_demo_tool("get_weather", {"city": "Oslo"}))["temperature"] == 9
    assert json.loads(run_demo_tool("calculate", {"expression": "7 * 6"}))["result"] == 42
    assert "error" in json.loads(run_demo_tool("calculate", {"expression": "__import__('os')"}))
    a = run_demo_tool("dispatch_drone",
                      {"drone": "D-1", "destination": "Pier 9", "payload": "parts", "priority": "urgent"})
    assert a == run_demo_tool("dispatch_drone", {"drone": "D-1", "destination": "Pier 9", "payload": "parts",
                                                  "priority": "urgent"})
    assert "bad arguments" in run_demo_tool("get_weather", {"town": "x"})


def test_validate_json_output():
    schema = {"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"]}
    assert validate_json('{"capital": "Canberra"}', schema) == ({"capital": "Canberra"}, [])
    assert validate_json("```json\n{\"capital\": 1}\n```", schema)[1]
    assert "not valid JSON" in validate_json("Canberra", schema)[1][0]


def test_structured_output_is_constrained_by_the_schema(smollm2_engine):
    engine = smollm2_engine
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    reply = engine.generate(ChatRequest([{"role": "user", "content": "Give the capital of France as JSON."}],
                                        json_schema=schema, sampling=SamplingParams(temperature=0.0, max_tokens=60)))
    assert reply.json_errors == [], reply.text
    assert set(reply.json_value) == {"city", "country"}


def test_a_constrained_tool_call_goes_through_the_engine(smollm2_engine):
    engine = smollm2_engine
    call_schema = {"type": "object", "properties": {
        "name": {"const": "get_weather"},
        "arguments": {"type": "object", "properties": {"city": {"enum": ["Lisbon", "Oslo"]}}, "required": ["city"],
                      "additionalProperties": False}}, "required": ["name", "arguments"], "additionalProperties": False}
    reply = engine.generate(ChatRequest([{"role": "user", "content": "What is the weather in Lisbon?"}], tools=TOOLS,
                                        json_schema=call_schema,
                                        sampling=SamplingParams(temperature=0.0, max_tokens=60)))
    assert len(reply.tool_calls) == 1 and reply.tool_calls[0].name == "get_weather"
    assert reply.tool_calls[0].valid and reply.tool_calls[0].arguments["city"] in ("Lisbon", "Oslo")
    assert reply.text == ""


# ----------------------------------------------------------------------------- Qwen3.5/3.6 XML calls (held-out)

XML_TWO = ("I'll check both.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nLisbon\n</parameter>\n"
           "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
           "<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")
XML_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "zip": {"type": "string"}}, "required": ["city"]}}}]


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_qwen_xml_tool_calls_are_parsed_while_streaming(chunk):
    from app.engine.tool_calls import ToolCallSplitter, validate_call

    splitter = ToolCallSplitter(XML_TOOLS)
    events = []
    for i in range(0, len(XML_TWO), chunk):
        events += splitter.feed(XML_TWO[i:i + chunk])
    events += splitter.finish()
    calls = [validate_call(c, XML_TOOLS) for c in splitter.calls]
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Lisbon", "days": 3}),
                                                      ("get_weather", {"city": "Oslo", "days": 3})]
    assert all(c.valid for c in calls) and splitter.text.strip() == "I'll check both."
    assert len({c.id for c in calls}) == 2


def test_xml_values_follow_the_parameter_types():
    from app.engine.tool_calls import parse_call

    text = ("<function=get_weather>\n<parameter=city>\n  New York  \n</parameter>\n<parameter=zip>\n10001\n"
            "</parameter>\n<parameter=days>\nseven\n</parameter>\n</function>")
    call = parse_call(text, 0, XML_TOOLS)
    assert call.arguments["city"] == "  New York  " and call.arguments["zip"] == "10001"  # strings stay text
    assert any("days" in e for e in call.errors)  # not an integer
    untyped = parse_call("<function=f>\n<parameter=n>\n2\n</parameter>\n<parameter=o>\n{\"a\": 1}\n</parameter>\n"
                         "<parameter=s>\nhello\n</parameter>\n</function>", 0, None)
    assert untyped.arguments == {"n": 2, "o": {"a": 1}, "s": "hello"} and untyped.valid
    cut = parse_call("<function=get_weather>\n<parameter=city>\nLis", 0, XML_TOOLS)
    assert cut.errors and cut.name == "get_weather"


def test_call_ids_are_never_reused():
    from app.engine.tool_calls import parse_call

    ids = {parse_call('{"name": "f", "arguments": {}}', 0).id for _ in range(50)}
    assert len(ids) == 50 and all(i.startswith("call_") for i in ids)
