"""A request is rendered, tokenized and given its grammar once (issue 38, item 5): the server checks
the prompt the engine prepares (app/serve/prompts.py, `Engine.prepare`) and the engine generates from
it. Counted on SmolLM2 by wrapping the engine's render and tokenize functions and the server's
tokenizer: before, each request was rendered twice (three times with the checkpoint mark's copy),
tokenized twice in whole (once on each tokenizer) and given its grammar twice; each case failed so."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from app.serve.prompts import Vocab

QUESTION = [{"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What is the capital of France?"}]
SCHEMA = {"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"]}


def post(server, path: str, body: dict[str, Any]) -> bytes:
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read()


@pytest.fixture()
def counted(smollm2_engine, monkeypatch):
    """Counts, for the requests made while it is in use: prompt renders (and the template's renders
    that gave exactly that prompt), whole-prompt tokenizations on either tokenizer, grammars built."""
    engine = smollm2_engine
    prompts: list[str] = []
    renders: list[str] = []
    tokenized: list[str] = []
    grammars: list[Any] = []  # the grammars built (a request without a schema or forced call has none)

    def wrap(obj: Any, name: str, record) -> None:
        inner = getattr(obj, name)

        def counting(*args: Any, **kwargs: Any) -> Any:
            out = inner(*args, **kwargs)
            record(args, out)
            return out

        monkeypatch.setattr(obj, name, counting)

    wrap(engine, "_prompt_parts", lambda args, out: prompts.append("".join(out)))
    wrap(engine.template, "render", lambda args, out: renders.append(out))
    wrap(engine, "tokenize_prompt", lambda args, out: tokenized.append(args[0]))
    wrap(engine, "grammar", lambda args, out: out is not None and grammars.append(out))
    server_tokenize = Vocab.tokenize

    def vocab_tokenize(self: Vocab, prompt: str, bos_text: str) -> list[int]:
        tokenized.append(prompt)
        return server_tokenize(self, prompt, bos_text)

    monkeypatch.setattr(Vocab, "tokenize", vocab_tokenize)

    def per_request() -> dict[str, int]:
        assert prompts, "no prompt was rendered"
        prompt = prompts[-1]
        out = {"prompt renders": len(prompts), "template renders of the prompt": renders.count(prompt),
               "template renders in all": len(renders), "whole-prompt tokenizations": tokenized.count(prompt),
               "grammars": len(grammars)}
        for seen in (prompts, renders, tokenized, grammars):
            seen.clear()
        return out

    return per_request


@pytest.mark.slow  # SmolLM2 answers
@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": QUESTION, "max_tokens": 4, "temperature": 0}),
    ("/v1/chat/completions", {"messages": QUESTION, "max_tokens": 4, "temperature": 0, "stream": True}),
    ("/v1/chat/completions", {"messages": QUESTION, "max_tokens": 12, "temperature": 0,
                              "response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}}),
    ("/v1/messages", {"system": "Answer briefly.", "max_tokens": 4, "stream": True,
                      "messages": [{"role": "user", "content": "What is the capital of France?"}]}),
    ("/v1/responses", {"instructions": "Answer briefly.", "input": "What is the capital of France?",
                       "max_output_tokens": 4, "store": False}),
])
def test_a_request_is_rendered_tokenized_and_given_its_grammar_once(serve, smollm2_engine, counted, path, body):
    server = serve(smollm2_engine)
    post(server, path, body)
    seen = counted()
    grammar = 1 if "response_format" in body else 0
    # SmolLM2 keeps no context checkpoints: the prompt is the template's only render (a model that keeps them
    # renders one more, a copy with the last user message marked, and tokenizes that copy's start)
    assert seen == {"prompt renders": 1, "template renders of the prompt": 1, "template renders in all": 1,
                    "whole-prompt tokenizations": 1, "grammars": grammar}, seen
