"""One conversation as the chat window runs it, without Qt: history, the next request, replies and
tool rounds. The window only shows what this decides; the tests drive it directly.

- A conversation is created with its first message (titled from it) and saved in the store.
- Each request is the system prompt plus the stored history in the chat template's shape, with
  each assistant turn's reasoning (`reasoning_content`, kept by Qwen3.6-style tool loops).
- A reply with tool calls is saved with calls whose ids are unique in the conversation; with the
  demo tools on, their results are answered and the conversation goes on, at most MAX_TOOL_ROUNDS
  rounds in a row (a model can loop on calls).
- Regenerate and edit keep what they replace as a version (‹ 2/3 ›, app/chat/store.py); the
  version shown is the conversation's history, so the next turn goes on from it.
- A call to an MCP tool (app/chat/mcp_tools.py) is answered by its server: the reply is recorded
  with `mcp_pending`, the window confirms and runs the calls off its thread (`answer_calls`) and
  sends the results as it does the demo tools'. A round whose calls not all have an answerer is
  left to the user, who types the results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.chat.demo_tools import run_demo_tool
from app.chat.mcp_tools import McpToolbox, route_calls
from app.chat.store import Store
from app.engine.contract import ChatRequest, Reply, SamplingParams

MAX_TOOL_ROUNDS = 4


@dataclass
class RecordedReply:
    position: int  # of the assistant message
    calls: list[dict[str, Any]]  # as saved, with ids
    demo_results: list[str] | None  # the demo tools' answers, when they answer this round
    routes: list[str] = field(default_factory=list)  # per call: "mcp", "demo" or "user"
    mcp_pending: bool = False  # an MCP server answers some of this round's calls: the window runs them


class ChatSession:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.conversation_id: int | None = None
        self.tool_rounds = 0

    # -------------------------------------------------------------- conversations

    def new(self) -> None:
        self.conversation_id = None
        self.tool_rounds = 0

    def open(self, cid: int) -> None:
        self.conversation_id = cid
        self.tool_rounds = 0

    @property
    def system_prompt(self) -> str:
        return self.store.conversation(self.conversation_id).system_prompt if self.conversation_id else ""

    def add_user(self, text: str, system_prompt: str) -> bool:
        """Save the user's message (creating the conversation on the first one); True if created."""
        cid = self.conversation_id
        created = cid is None
        if cid is None:
            title = " ".join(text.split())[:60] or "New chat"
            cid = self.conversation_id = self.store.create(title, system_prompt.strip())
        else:
            self.store.update(cid, system_prompt=system_prompt.strip())
        self.store.add(cid, "user", text)
        self.tool_rounds = 0
        return created

    def messages(self) -> list[dict[str, Any]]:
        if self.conversation_id is None:
            return []
        out: list[dict[str, Any]] = []
        system = self.system_prompt
        if system:
            out.append({"role": "system", "content": system})
        out += [m.template_message() for m in self.store.messages(self.conversation_id)]
        return out

    def request(self, *, thinking: bool, sampling: SamplingParams, tools: list[dict] | None = None,
                json_schema: dict | None = None, thinking_budget: int = 0) -> ChatRequest:
        """The next reply's request; `thinking_budget` 0: thinking (when on) without a limit."""
        return ChatRequest(self.messages(), enable_thinking=thinking, tools=tools or None, sampling=sampling,
                           json_schema=json_schema, thinking_budget=thinking_budget if thinking and thinking_budget
                           else None)

    # -------------------------------------------------------------- replies and tool rounds

    def _next_call_ids(self, n: int) -> list[str]:
        """n call ids not used yet in this conversation (a template or a client that matches results
        to calls by id must never see two calls with one id)."""
        used = {c.get("id") for m in self.store.messages(self.conversation_id or 0)
                for c in (m.extra or {}).get("tool_calls", [])}
        ids: list[str] = []
        i = 0
        while len(ids) < n:
            candidate = f"call_{i}"
            i += 1
            if candidate not in used:
                ids.append(candidate)
        return ids

    def record_reply(self, reply: Reply, stats: dict, *, demo_tools: bool, mcp: McpToolbox | None = None,
                     reserved: frozenset[str] = frozenset()) -> RecordedReply:
        """Save the reply; give its calls ids unique in the conversation; decide who answers them
        (`reserved`: the names of the tools offered besides MCP's, as McpToolbox.enabled takes them)."""
        assert self.conversation_id is not None
        calls = [c.as_template() for c in reply.tool_calls]
        for call, cid in zip(calls, self._next_call_ids(len(calls)), strict=True):
            call["id"] = cid
        self.store.add(self.conversation_id, "assistant", reply.text, reply.reasoning, stats,
                       {"tool_calls": calls} if calls else None)
        position = len(self.store.messages(self.conversation_id)) - 1
        results = None
        routes = route_calls(calls, mcp, demo_tools, reserved)
        automatic = bool(calls) and "user" not in routes and self.tool_rounds < MAX_TOOL_ROUNDS
        if automatic and "mcp" not in routes:
            results = [run_demo_tool(c.name, c.arguments) for c in reply.tool_calls]
        if automatic:
            self.tool_rounds += 1
        elif not calls:
            self.tool_rounds = 0
        return RecordedReply(position, calls, results, routes, automatic and "mcp" in routes)

    def add_tool_results(self, position: int, results: list[str]) -> list[dict[str, Any]]:
        """One tool message per call of the assistant message at `position`, answering its id."""
        assert self.conversation_id is not None
        message = self.store.messages(self.conversation_id)[position]
        calls = (message.extra or {}).get("tool_calls", [])
        for i, (call, result) in enumerate(zip(calls, results, strict=False)):
            self.store.add(self.conversation_id, "tool", result,
                           extra={"name": call["function"]["name"], "tool_call_id": call.get("id", f"call_{i}")})
        return calls

    def truncate(self, position: int) -> None:
        if self.conversation_id is not None:
            self.store.truncate(self.conversation_id, position)

    # -------------------------------------------------------------- versions (regenerate, edit)

    def keep_version(self, position: int) -> None:
        """Keep the message at `position` and what follows as a version; the new one is written next."""
        if self.conversation_id is not None:
            self.store.keep_version(self.conversation_id, position)
            self.tool_rounds = 0

    def versions(self, position: int) -> tuple[int, int]:
        """(index shown, count) of the versions at `position`."""
        return self.store.versions(self.conversation_id, position) if self.conversation_id is not None else (0, 1)

    def show_version(self, position: int, index: int) -> None:
        """Show version `index` at `position`: the next request is made of it and what followed it."""
        if self.conversation_id is not None:
            self.store.show_version(self.conversation_id, position, index)
            self.tool_rounds = 0
