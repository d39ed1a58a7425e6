"""A body parsed by its API's Pydantic model: a failure is one 400 that names the field's path as the
client wrote it, in the check's own words or Pydantic's; fields a model does not declare are kept."""

from __future__ import annotations

import pytest

from app.serve.anthropic_messages import MessagesSurface
from app.serve.body_check import BadRequest, field_path, parse
from app.serve.chat_body import ChatBody
from app.serve.messages_body import MessagesBody
from app.serve.openai_responses import ResponsesSurface
from app.serve.response_store import ResponseStore
from app.serve.schema import parse_body

HI = {"role": "user", "content": "Hi"}
BROKEN_CALL = {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}


def test_a_location_is_written_as_a_client_writes_the_path():
    assert field_path(("messages", 2, "content", 0)) == "messages[2].content[0]"
    assert field_path(("max_tokens",)) == "max_tokens"
    assert field_path(()) == ""


@pytest.mark.parametrize("make, body, says", [
    (parse_body, {"messages": [HI, BROKEN_CALL]}, "messages[1]: tool_calls[0] arguments are not JSON"),
    (parse_body, {"messages": [HI, {"role": "robot"}]}, "messages[1]: needs a role"),
    (MessagesSurface, {"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "tool_result", "content": "x"}]}]},
     "messages[0].content[1]: a tool_result needs the tool_use_id of its call"),
    (MessagesSurface, {"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "video"}]}]}]},
     "messages[0].content[0].content[0]: a 'video' block cannot stand here"),
    (MessagesSurface, {"max_tokens": 5, "messages": [HI], "tools": [{"name": "f"}]},
     "tools[0].input_schema: a JSON schema object is required"),
    (MessagesSurface, {"messages": [HI]}, "max_tokens: Field required"),
    (lambda body: ResponsesSurface(body, ResponseStore()), {"input": [HI, {"role": "user", "content": [
        {"type": "input_text"}]}]}, "input[1].content[0]: a input_text part needs its text"),
    (lambda body: ResponsesSurface(body, ResponseStore()), {"input": [
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}]}, "input[0].arguments: not JSON"),
])
def test_a_failure_names_the_fields_path(make, body, says):
    with pytest.raises(BadRequest) as err:
        make(body)
    assert str(err.value).startswith(says)


def test_fields_a_model_does_not_declare_are_kept():
    chat = parse(ChatBody, {"messages": [HI], "frobnicate": 1})
    messages = parse(MessagesBody, {"max_tokens": 5, "messages": [HI], "frobnicate": 2})
    assert chat.model_extra == {"frobnicate": 1} and messages.model_extra == {"frobnicate": 2}


def test_a_body_that_is_not_an_object_is_refused():
    with pytest.raises(BadRequest, match="the body must be a JSON object"):
        parse(ChatBody, [HI])
