"""Claude Code (`claude -p`) and Codex (`codex exec`), the real command lines from npm, pinned, against
the local server (issue 38, item 5): each runs a tool round, its own file-reading tool on a file
the test wrote, and prints the answer written from the tool's result. A scripted engine decides the
call and the answer; the agents and their tools are real."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from app.engine.contract import ReplyStats
from app.engine.tool_calls import parse_call, validate_call
from app.serve.server import LocalServer
from app.serve.unread import WORDS
from tests.helpers.agent_clis import agent_cli
from tests.helpers.fakes import ScriptedEngine, Turn

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # the first run installs both (about 760 MB)

KEY = "sk-local-test"
SECRET = "secret-word-42"
STATS = ReplyStats(prompt_tokens=30, prompt_evaluated=30, generated_tokens=5, stop_reason="end")


def reader(tool: str, arguments: dict) -> ScriptedEngine:
    """Calls `tool` with `arguments` (held to the agent's own schema for it), then answers with what
    the tool gave back."""

    def decide(request) -> Turn:
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        if results:
            return Turn(f"The file says: {results[-1]}", stats=STATS)
        call = validate_call(parse_call(json.dumps({"name": tool, "arguments": arguments})), request.tools or [])
        assert call.valid, call.errors
        return Turn("", calls=[call], stats=STATS, stream=[])

    return ScriptedEngine(decide, loaded=True, name="script-model")


@pytest.fixture()
def warned(monkeypatch) -> list[list[str]]:
    """The warnings the server gave each of the CLI's requests (their top-level fields read or not)."""
    said: list[list[str]] = []
    build = LocalServer._surface

    def recording(self, path, body):
        surface = build(self, path, body)
        said.append(list(surface.warnings))
        return surface

    monkeypatch.setattr(LocalServer, "_surface", recording)
    return said


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ["PATH"], "TERM": "dumb", "LANG": "C.UTF-8"}
    return subprocess.run(cmd, env={**base, **env}, cwd=cwd, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_claude_code_runs_a_tool_round_over_messages(serve, tmp_path, warned):
    claude = agent_cli("claude")
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    (work / "note.txt").write_text(SECRET + "\n")
    engine = reader("Read", {"file_path": str(work / "note.txt")})
    s = serve(engine, api_key=KEY)
    done = run([str(claude), "-p", "What does note.txt say?"], {
        "HOME": str(home), "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{s.port}", "ANTHROPIC_AUTH_TOKEN": KEY,
        "ANTHROPIC_MODEL": "local", "ANTHROPIC_DEFAULT_HAIKU_MODEL": "local", "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "32768",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}, work)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "The file says:" in done.stdout and SECRET in done.stdout, (done.stdout, done.stderr[-2000:])
    first, second = engine.requests[0], engine.requests[-1]
    assert len(first.tools) >= 10 and first.messages[0]["role"] == "system"
    assert first.sampling.max_tokens == 32000 and first.enable_thinking is True
    assert [m["role"] for m in second.messages][-2:] == ["assistant", "tool"]
    assert SECRET in second.messages[-1]["content"]
    assert warned and not [w for ws in warned for w in ws if w.startswith(WORDS)]  # every field it sends is known


def test_codex_runs_a_tool_round_over_responses(serve, tmp_path, warned):
    codex = agent_cli("codex")
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (home / ".codex").mkdir(parents=True)
    (work / "note.txt").write_text(SECRET + "\n")
    engine = reader("exec_command", {"cmd": "cat note.txt"})
    s = serve(engine, api_key=KEY)
    (home / ".codex" / "config.toml").write_text(
        'model = "local"\nmodel_provider = "clover"\n\n[model_providers.clover]\nname = "Clover Launcher"\n'
        f'base_url = "{s.url}"\nenv_key = "CLOVER_API_KEY"\nwire_api = "responses"\n')
    done = run([str(codex), "exec", "--skip-git-repo-check", "What does note.txt say?"],
               {"HOME": str(home), "CLOVER_API_KEY": KEY}, work)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "The file says:" in done.stdout and SECRET in done.stdout, (done.stdout, done.stderr[-2000:])
    first, second = engine.requests[0], engine.requests[-1]
    assert first.tools and first.messages[0]["role"] == "system"
    assert [m["role"] for m in second.messages][-2:] == ["assistant", "tool"]
    assert SECRET in second.messages[-1]["content"]
    assert warned and not [w for ws in warned for w in ws if w.startswith(WORDS)]  # every field it sends is known
