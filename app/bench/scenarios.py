"""The article's test prompts as a bench: each scenario has a prompt, an automatic check and timing. No Qt.

Scenarios are data (resources/scenarios/scenarios.json); each names its check. Results are saved
with the GPU, the plan and the model (`<data>/bench/scenarios-*.json`) so runs can be compared.

The calculator check runs the generated page's own script in QuickJS (a sandboxed JavaScript
engine: no network, no files, a time and memory limit) over a small DOM built from the page's
HTML, clicks 7, ×, 6, = the way a user would, and reads the display.

A scenario with `mcp` takes its tools from that MCP server ("clover-demo": the built-in demo server,
started for the run; or a toolbox the caller passes) and runs the tool loop: every call goes to the
server and its result back to the model, until a reply makes no call. Its check reads the calls
the server answered without an error, as orders (the drone dispatch done through an MCP tool).
"""

from __future__ import annotations

import html.parser
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.base.paths import app_dirs, resource
from app.chat.mcp_tools import McpToolbox, answer_calls
from app.engine.contract import ChatEngine, ChatRequest, Reply, SamplingParams
from app.engine.tool_calls import ToolCall

FILLER = ("The archive holds shipping records, weather logs and maintenance notes from the northern depots. "
          "Each entry lists a date, a depot, a crew lead and a short remark about the day's work. ")


@dataclass
class Scenario:
    id: str
    title: str
    prompt: str
    check: str
    expected: Any = None
    tools: str | None = None  # an example tool set (resources/tools/NAME.json)
    json_schema: dict[str, Any] | None = None
    system: str = ""
    max_tokens: int = 2048
    thinking: bool = True
    mcp: str | None = None  # the MCP server whose tools are offered (the tool loop runs the calls)


@dataclass
class Result:
    id: str
    title: str
    passed: bool
    detail: str
    seconds: float
    generated_tokens: int = 0
    generation_tps: float = 0.0
    ttft_seconds: float = 0.0
    answer: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_results: list[str] = field(default_factory=list)  # an MCP scenario's answers, in call order


def load_scenarios() -> list[Scenario]:
    data = json.loads(resource("scenarios", "scenarios.json").read_text(encoding="utf-8"))
    return [Scenario(**s) for s in data["scenarios"]]


# ----------------------------------------------------------------------------- checks


def _json_from(text: str) -> Any:
    text = text.strip()
    m = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    if m:
        text = m.group(1)
    start = min([i for i in (text.find("{"), text.find("[")) if i >= 0], default=-1)
    if start < 0:
        raise ValueError("no JSON in the answer")
    value, _ = json.JSONDecoder().raw_decode(text[start:])
    return value


def check_orders(reply: Reply, expected: list[dict[str, str]]) -> tuple[bool, str]:
    try:
        data = reply.json_value if reply.json_value is not None else _json_from(reply.text)
    except ValueError as exc:
        return False, f"not JSON: {exc}"
    orders = data.get("orders") if isinstance(data, dict) else data
    if not isinstance(orders, list):
        return False, "no list of orders"
    right = 0
    for want in expected:
        if any(isinstance(o, dict) and all(str(want[k]).lower() in str(o.get(k, "")).lower() for k in want)
               for o in orders):
            right += 1
    extra = len(orders) - len(expected)
    ok = right == len(expected) and extra == 0
    return ok, f"{right} of {len(expected)} orders right" + (f", {extra} extra" if extra > 0 else "")


def check_tool_calls(reply: Reply, expected: dict[str, Any]) -> tuple[bool, str]:
    calls: list[ToolCall] = [c for c in reply.tool_calls if c.name == expected["name"]]
    valid = [c for c in calls if c.valid]
    cities = sorted({str(c.arguments.get(expected["argument"], "")).strip().lower() for c in valid})
    want = sorted(v.lower() for v in expected["values"])
    ok = cities == want and len(valid) == len(want)
    invalid = len(reply.tool_calls) - len(valid)
    return ok, (f"{len(valid)} valid {expected['name']} call(s) for {', '.join(cities) or 'nothing'}"
                + (f"; {invalid} invalid" if invalid else ""))


def check_contains(reply: Reply, expected: str) -> tuple[bool, str]:
    ok = expected.lower() in reply.text.lower()
    return ok, f"{'found' if ok else 'no'} {expected!r} in the answer"


class _Dom(html.parser.HTMLParser):
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[dict[str, Any]] = []
        self.stack: list[int] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self._in_script = True
            self.scripts.append("")
            return
        parent = self.stack[-1] if self.stack else -1
        self.elements.append({"tag": tag, "attrs": {k: v or "" for k, v in attrs}, "text": "", "parent": parent})
        if tag not in self.VOID:
            self.stack.append(len(self.elements) - 1)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False
            return
        for i in range(len(self.stack) - 1, -1, -1):
            if self.elements[self.stack[i]]["tag"] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data
        elif self.stack:
            self.elements[self.stack[-1]]["text"] += data


_CLICKS = [("7",), ("*", "×", "x", "X", "✕", "multiply", "mul"), ("6",), ("=", "equals", "enter")]
_FIND_BUTTON = """
(labels) => {
  const cands = __all.filter((e) => ["BUTTON", "INPUT", "TD", "DIV", "SPAN", "A", "LI"].includes(e.tagName));
  const label = (e) => [e.textContent, e.value, e.dataset.value, e.dataset.key, e.dataset.op, e.dataset.action,
                        e.getAttribute("aria-label"), e.getAttribute("title")].map((x) => (x || "").trim());
  for (const want of labels) {
    const hit = cands.find((e) => e.children.length === 0 && label(e).some((l) => l === want))
             || cands.find((e) => label(e).some((l) => l.toLowerCase() === want.toLowerCase()));
    if (hit) return __all.indexOf(hit);
  }
  return -1;
}
"""
_READ_DISPLAYS = """
() => JSON.stringify(__all.filter((e) => e.tagName === "INPUT" || e.tagName === "OUTPUT"
                                 || /display|screen|result|output/i.test(e.id + " " + e.className))
                          .map((e) => (String(e.value || "") || e.textContent).trim()))
"""


def html_from(answer: str) -> str:
    m = re.search(r"```html\s*(.*?)```", answer, re.S | re.I)
    if m:
        return m.group(1)
    m = re.search(r"(<!DOCTYPE html.*?</html>|<html.*?</html>)", answer, re.S | re.I)
    return m.group(1) if m else answer


def check_calculator(reply: Reply, expected: str) -> tuple[bool, str]:
    import quickjs

    page = html_from(reply.text)
    dom = _Dom()
    try:
        dom.feed(page)
    except Exception as exc:
        return False, f"the page does not parse: {exc}"
    if not dom.scripts:
        return False, "the page has no script"
    ctx = quickjs.Context()
    ctx.set_time_limit(5)
    ctx.set_memory_limit(128 << 20)
    try:
        ctx.eval(resource("scenarios", "dom_shim.js").read_text().replace("__ELEMENTS__", json.dumps(dom.elements)))
        for script in dom.scripts:
            ctx.eval(script)
        ctx.eval("__runLoaded()")
        for labels in _CLICKS:
            index = ctx.eval(f"({_FIND_BUTTON})({json.dumps(list(labels))})")
            if index < 0:
                return False, f"no button labelled {labels[0]!r}"
            ctx.eval(f"__all[{index}].click()")
        shown = json.loads(ctx.eval(f"({_READ_DISPLAYS})()"))
    except quickjs.JSException as exc:
        return False, f"the page's script failed: {str(exc)[:200]}"
    hits = [t for t in shown if re.fullmatch(rf"{re.escape(expected)}(\.0+)?", t)]
    display = hits[0] if hits else (shown[0] if shown else "")
    return bool(hits), f"clicked 7 × 6 =, the display shows {display[:60]!r}"


CHECKS: dict[str, Callable[[Reply, Any], tuple[bool, str]]] = {
    "orders": check_orders, "tool_calls": check_tool_calls, "contains": check_contains,
    "calculator": check_calculator,
}


# ----------------------------------------------------------------------------- running


def needle_prompt(engine: ChatEngine, template: str, code: str, budget_tokens: int) -> str:
    """A long document of filler with the code hidden at 60 %, as long as the context allows (the
    engine's own token count measures the filler; a remote engine estimates it)."""
    def count(text: str) -> int:
        return engine.count_tokens(ChatRequest([{"role": "user", "content": text}]))

    per = max((count(FILLER * 8) - count("")) / 8, 1.0)
    n = max(int(budget_tokens // per), 4)
    parts = [FILLER] * n
    parts.insert(int(n * 0.6), f"Note for the auditors: the access code for the vault is {code}. ")
    return template.replace("{document}", "".join(parts))


MCP_ROUNDS = 6


def _mcp_loop(engine: ChatEngine, request: ChatRequest, toolbox: McpToolbox,
              should_stop: Callable[[], bool] | None) -> tuple[Reply, list[dict[str, Any]], list[str], list[Any]]:
    """Generate, answer every call through the toolbox, feed the results back, until a reply makes
    no call. The last reply, every call, every answer, and the arguments of the calls answered
    without an error."""
    calls_made: list[dict[str, Any]] = []
    answers: list[str] = []
    done: list[Any] = []
    messages = list(request.messages)
    for _round in range(MCP_ROUNDS):
        reply = engine.generate(ChatRequest(messages, enable_thinking=request.enable_thinking, tools=request.tools,
                                            sampling=request.sampling), should_stop=should_stop)
        if not reply.tool_calls or (should_stop is not None and should_stop()):
            return reply, calls_made, answers, done
        calls = [c.as_template() for c in reply.tool_calls]
        for i, call in enumerate(calls):
            call["id"] = f"call_{len(calls_made) + i}"
        outcomes = answer_calls(calls, ["mcp"] * len(calls), toolbox)
        messages.append({"role": "assistant", "content": reply.text, "tool_calls": calls})
        for call, outcome in zip(calls, outcomes, strict=True):
            messages.append({"role": "tool", "content": outcome.text, "name": call["function"]["name"],
                             "tool_call_id": call["id"]})
            if not outcome.is_error:
                done.append(call["function"]["arguments"])
        calls_made += [{"id": c["id"], "type": "function", "function": {
            "name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False)}}
            for c in calls]
        answers += [o.text for o in outcomes]
    return reply, calls_made, answers, done


def _run_with_mcp(engine: ChatEngine, scenario: Scenario, request: ChatRequest, toolbox: McpToolbox | None,
                  should_stop: Callable[[], bool] | None) -> tuple[Reply, list[dict[str, Any]], list[str], list[Any]]:
    from app.chat.mcp_client import McpManager
    from app.chat.mcp_config import McpSettings
    from app.chat.mcp_demo_server import NAME, demo_server_config

    manager = None
    if toolbox is None:
        if scenario.mcp != NAME:
            raise RuntimeError(f"no MCP server {scenario.mcp!r} was given to the bench")
        manager = McpManager()
        toolbox = McpToolbox(manager, McpSettings(path=app_dirs().config / "bench-mcp-settings.json"))
    try:
        if manager is not None:
            state = manager.start(demo_server_config())
            if not state.ready:
                raise RuntimeError(f"the MCP server {scenario.mcp} did not start: {state.summary()}")
        tools = [t for t in toolbox.definitions() if t["function"]["name"] in _scenario_tool_names(scenario)]
        if not tools:
            raise RuntimeError(f"the MCP server {scenario.mcp!r} offers no {', '.join(_scenario_tool_names(scenario))}")
        request = ChatRequest(request.messages, enable_thinking=request.enable_thinking, tools=tools,
                              sampling=request.sampling)
        return _mcp_loop(engine, request, toolbox, should_stop)
    finally:
        if manager is not None:
            manager.close()


def _scenario_tool_names(scenario: Scenario) -> set[str]:
    return {"dispatch_drone"} if scenario.check == "orders" else set()


def run_scenario(engine: ChatEngine, scenario: Scenario, *, should_stop: Callable[[], bool] | None = None,
                 mcp: McpToolbox | None = None) -> Result:
    import dataclasses

    from app.chat.demo_tools import example_tools

    prompt = scenario.prompt
    if scenario.check == "contains" and "{document}" in prompt:
        n_ctx = (engine.info.n_ctx if engine.info else 0) or 32_768  # a remote server does not say: assume 32K
        budget = min(n_ctx - scenario.max_tokens - 256, 89_367)
        prompt = needle_prompt(engine, prompt, scenario.expected, budget)
    messages = ([{"role": "system", "content": scenario.system}] if scenario.system else []) + [
        {"role": "user", "content": prompt}]
    tools = example_tools()[scenario.tools] if scenario.tools else None
    request = ChatRequest(messages, enable_thinking=scenario.thinking, tools=tools, json_schema=scenario.json_schema,
                          sampling=SamplingParams(temperature=0.0, max_tokens=scenario.max_tokens))
    start = time.perf_counter()
    try:
        if scenario.mcp:
            reply, calls, answers, done = _run_with_mcp(engine, scenario, request, mcp, should_stop)
        else:
            reply = engine.generate(request, should_stop=should_stop)
            calls, answers = [c.as_openai() for c in reply.tool_calls], []
    except Exception as exc:
        return Result(scenario.id, scenario.title, False, f"generation failed: {exc}", time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if scenario.mcp:  # the check reads what the server carried out, not what the model wrote
        passed, detail = CHECKS[scenario.check](dataclasses.replace(reply, json_value={"orders": done}),
                                                scenario.expected)
        detail = f"through MCP ({len(calls)} call(s), {len(done)} answered): {detail}"
    else:
        passed, detail = CHECKS[scenario.check](reply, scenario.expected)
    s = reply.stats
    return Result(scenario.id, scenario.title, passed, detail, seconds, s.generated_tokens, s.generation_tps,
                  s.ttft_seconds, reply.text[:4000], calls, answers)


def run_all(engine: ChatEngine, scenarios: list[Scenario] | None = None,
            progress: Callable[[int, int, Result | None], None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> list[Result]:
    scenarios = scenarios if scenarios is not None else load_scenarios()
    results = []
    for i, scenario in enumerate(scenarios):
        if should_stop is not None and should_stop():
            break
        if progress:
            progress(i, len(scenarios), None)
        results.append(run_scenario(engine, scenario, should_stop=should_stop))
        if progress:
            progress(i + 1, len(scenarios), results[-1])
    return results


def save_results(results: list[Result], *, model: str, plan: str, gpu: str, folder: Path | None = None) -> Path:
    folder = folder or app_dirs().data / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"scenarios-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"model": model, "plan": plan, "gpu": gpu, "when": time.time(),
                                "passed": sum(r.passed for r in results), "total": len(results),
                                "results": [asdict(r) for r in results]}, indent=2, ensure_ascii=False))
    return path


def table(results: list[Result]) -> str:
    lines = [f"{'scenario':<28} {'result':<6} {'time':>7} {'tok/s':>7}  detail"]
    for r in results:
        lines.append(f"{r.title[:28]:<28} {'PASS' if r.passed else 'fail':<6} {r.seconds:6.2f}s "
                     f"{r.generation_tps:7.1f}  {r.detail}")
    lines.append(f"{sum(r.passed for r in results)} of {len(results)} passed")
    return "\n".join(lines)
