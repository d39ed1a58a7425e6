"""The scenario bench: every check on fixed good and bad answers, and a real SmolLM2 run of the suite."""

from __future__ import annotations

import json

import pytest

from app.bench.scenarios import (
    CHECKS,
    check_calculator,
    check_orders,
    check_tool_calls,
    load_scenarios,
    run_all,
    save_results,
    table,
)
from app.chat.demo_tools import example_tools
from app.engine.contract import Reply, ReplyStats
from app.engine.tool_calls import parse_call, validate_call
from tests.helpers.app_process import run_app

SCEN = {s.id: s for s in load_scenarios()}


def reply(text: str = "", calls=None) -> Reply:
    return Reply(text, "", text, "", ReplyStats(), calls or [])


def test_scenarios_are_complete_data():
    assert list(SCEN) == ["drone-dispatch", "weather-two-calls", "html-desktop", "needle", "capital-australia",
                          "drone-dispatch-mcp"]
    assert all(s.check in CHECKS for s in SCEN.values())


def test_orders_check():
    good = {"orders": [dict(o, payload=o["payload"] + " box") for o in SCEN["drone-dispatch"].expected]}
    assert check_orders(reply(json.dumps(good)), SCEN["drone-dispatch"].expected) == (True, "5 of 5 orders right")
    wrong = json.loads(json.dumps(good))
    wrong["orders"][2]["priority"] = "urgent"
    assert check_orders(reply("```json\n" + json.dumps(wrong) + "\n```"), SCEN["drone-dispatch"].expected)[1] == \
        "4 of 5 orders right"
    extra = {"orders": good["orders"] + [good["orders"][0]]}
    assert check_orders(reply(json.dumps(extra)), SCEN["drone-dispatch"].expected) == (
        False, "5 of 5 orders right, 1 extra")
    assert not check_orders(reply("I dispatched them all."), SCEN["drone-dispatch"].expected)[0]


def test_tool_calls_check():
    tools = example_tools()["weather"]
    calls = [validate_call(parse_call(f'{{"name": "get_weather", "arguments": {{"city": "{c}"}}}}', i), tools)
             for i, c in enumerate(["Lisbon", "Oslo"])]
    assert check_tool_calls(reply(calls=calls), SCEN["weather-two-calls"].expected)[0]
    assert not check_tool_calls(reply(calls=calls[:1]), SCEN["weather-two-calls"].expected)[0]
    bad = validate_call(parse_call('{"name": "get_weather", "arguments": {"town": "Oslo"}}', 1), tools)
    ok, detail = check_tool_calls(reply(calls=[calls[0], bad]), SCEN["weather-two-calls"].expected)
    assert not ok and "1 invalid" in detail


GOOD_PAGE = """Here is your desktop:
```html
<!DOCTYPE html><html><head><style>.win{position:absolute}</style></head><body>
<div id="taskbar"><span id="clock"></span><button id="start">Start</button></div>
<div class="win" id="calc"><input id="display" readonly>
<div class="keys">
  <button class="key" data-value="7">7</button><button class="key" data-value="6">6</button>
  <button class="key op" data-value="*">×</button><button class="key" id="eq">=</button>
  <button class="key" data-value="C">C</button>
</div></div>
<script>
  const display = document.getElementById('display');
  setInterval(() => { document.getElementById('clock').textContent = new Date().toLocaleTimeString(); }, 1000);
  document.querySelector('.keys').addEventListener('click', (e) => {
    const b = e.target.closest('button'); if (!b) return;
    if (b.id === 'eq') { display.value = String(Function('return ' + display.value)()); return; }
    if (b.dataset.value === 'C') { display.value = ''; return; }
    display.value += b.dataset.value;
  });
</script></body></html>
```"""

INLINE_PAGE = """<html><body><div class="screen" id="out">0</div>
<table><tr><td onclick="press('7')">7</td><td onclick="press('6')">6</td><td onclick="press('x')">x</td>
<td onclick="calc()">=</td></tr></table>
<script>
var expr = '';
function press(k) { expr += (k === 'x' ? '*' : k); document.getElementById('out').innerText = expr; }
function calc() { document.getElementById('out').innerText = eval(expr); }
</script></body></html>"""


@pytest.mark.slow  # runs a page's script in the sandbox
def test_calculator_check_runs_the_pages_script():
    assert check_calculator(reply(GOOD_PAGE), "42") == (True, "clicked 7 × 6 =, the display shows '42'")
    ok, detail = check_calculator(reply(INLINE_PAGE), "42")
    assert ok, detail
    wrong = GOOD_PAGE.replace("Function('return ' + display.value)()", "display.value.length")
    assert not check_calculator(reply(wrong), "42")[0]
    assert check_calculator(reply("<html><body>no script</body></html>"), "42") == (False, "the page has no script")
    broken = GOOD_PAGE.replace("const display", "const const display")
    assert "script failed" in check_calculator(reply(broken), "42")[1]
    endless = "<html><body><button>7</button><script>while (true) {}</script></body></html>"
    assert not check_calculator(reply(endless), "42")[0]  # the time limit ends it


@pytest.mark.slow
def test_real_smollm2_run_of_the_suite(smollm2, clover_home):
    from app.engine.local import Engine
    from app.machine.llama_load import LoadSettings

    engine = Engine()
    engine.load(smollm2, LoadSettings(n_ctx=2048, n_outputs_max=1, n_threads=2))
    quick = [SCEN["drone-dispatch"], SCEN["weather-two-calls"], SCEN["needle"], SCEN["capital-australia"]]
    for s in quick[1:]:
        s.max_tokens = min(s.max_tokens, 200)
    seen = []
    results = run_all(engine, quick, progress=lambda i, n, r: seen.append((i, n)))
    engine.unload()
    assert [r.id for r in results] == [s.id for s in quick] and seen[-1] == (4, 4)
    for r in results:  # whatever SmolLM2 manages, each result is complete and timed
        assert r.seconds > 0 and r.detail and isinstance(r.passed, bool)
    drone = results[0]
    assert "orders right" in drone.detail  # the schema constrained the output to JSON
    path = save_results(results, model="SmolLM2", plan="cpu", gpu="none")
    saved = json.loads(path.read_text())
    assert saved["total"] == 4 and saved["model"] == "SmolLM2" and len(saved["results"]) == 4
    assert "of 4 passed" in table(results)


def test_cli_bench_scenarios(smollm2, clover_home):
    r = run_app("bench", "scenarios", smollm2, "--only", "capital-australia", "--ctx", "1024")
    assert r.returncode == 0, r.stderr
    assert "Capital of Australia" in r.stdout and "of 1 passed" in r.stdout and "saved" in r.stdout
