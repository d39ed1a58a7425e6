"""The conversation logic without Qt: requests, reasoning kept for the template, tool rounds, ids."""

from __future__ import annotations

from app.chat.session import MAX_TOOL_ROUNDS, ChatSession
from app.chat.store import Store
from app.engine.contract import Reply, ReplyStats, SamplingParams
from app.engine.tool_calls import ToolCall


def reply(text="", reasoning="", calls=()):
    return Reply(text, reasoning, text, "", ReplyStats(), list(calls))


def weather(city: str) -> ToolCall:
    return ToolCall("get_weather", {"city": city}, "", "x", [])


def test_first_message_creates_the_conversation_and_requests_carry_the_system_prompt(tmp_path):
    s = ChatSession(Store(tmp_path / "c.db"))
    assert s.add_user("Hello   there\nfriend", "Be brief.") is True
    assert s.store.conversation(s.conversation_id).title == "Hello there friend"
    req = s.request(thinking=False, sampling=SamplingParams(max_tokens=8))
    assert req.messages == [{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Hello   there\nfriend"}]
    assert req.enable_thinking is False and req.tools is None
    assert s.add_user("again", "Be brief.") is False


def test_reasoning_of_earlier_turns_reaches_the_template(tmp_path):
    s = ChatSession(Store(tmp_path / "c.db"))
    s.add_user("q", "")
    s.record_reply(reply("a", reasoning="because"), {}, demo_tools=False)
    s.add_user("q2", "")
    assistant = s.messages()[1]
    assert assistant == {"role": "assistant", "content": "a", "reasoning_content": "because"}


def test_tool_call_ids_are_unique_across_rounds_and_results_answer_them(tmp_path):
    s = ChatSession(Store(tmp_path / "c.db"))
    s.add_user("warmer in Lisbon or Oslo?", "")
    first = s.record_reply(reply(calls=[weather("Lisbon"), weather("Oslo")]), {}, demo_tools=True)
    assert [c["id"] for c in first.calls] == ["call_0", "call_1"] and len(first.demo_results) == 2
    s.add_tool_results(first.position, first.demo_results)
    second = s.record_reply(reply(calls=[weather("Paris")]), {}, demo_tools=True)
    assert [c["id"] for c in second.calls] == ["call_2"]  # not call_0 again
    tool_messages = [m for m in s.messages() if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_0", "call_1"]


def test_demo_tool_rounds_stop_after_the_limit(tmp_path):
    s = ChatSession(Store(tmp_path / "c.db"))
    s.add_user("loop", "")
    rounds = 0
    for _ in range(MAX_TOOL_ROUNDS + 2):
        r = s.record_reply(reply(calls=[weather("Oslo")]), {}, demo_tools=True)
        if r.demo_results is None:
            break
        rounds += 1
        s.add_tool_results(r.position, r.demo_results)
    assert rounds == MAX_TOOL_ROUNDS
    s.add_user("new question", "")  # a user message starts the count again
    assert s.record_reply(reply(calls=[weather("Oslo")]), {}, demo_tools=True).demo_results is not None
