"""Reproducible at temperature 0, cache or no cache (issue 40, item 5): the same request gives the same
reply whether its prompt is read from token 0 (cold), after the same request (its cache holds the
prompt and the reply) or after another request that shares its first tokens; on SmolLM2 and on
Clover's hybrid architecture (which reuses through context checkpoints), in the token loop and in
parallel slots.

Before, a warm read evaluated only what the cache lacked (a rerun: the last prompt token alone), and
llama.cpp's kernels round a batch of one token otherwise than a token in a batch of many: near-ties
flipped. Now reuse stops at a multiple of the prefill chunk the cache computed as a cold read does, and
the rest is read in the same chunks; the prompts here have lengths around and across that chunk
(a small one, n_batch 64, so that many boundaries are crossed cheaply; the slots' chunk is one token
less: room for the other slot's pending token), and the replies' every token and logprob must be
equal, bit for bit. What is read between two runs shares the prompt's start in four ways (another
question, the question cut short, a follow-up, the turn before), so reuse comes from other prompts'
reads too.
"""

from __future__ import annotations

import random

import pytest

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.local import Engine
from app.machine.llama_load import LoadSettings

CHUNK = 64  # n_batch = n_ubatch: the prefill chunk (SmolLM2 rounds pieces of under 32 tokens alike)
N_PROMPTS = 24
# what is read between a warm rerun and the next
KINDS = ("another question", "its start", "its follow-up", "its previous turn")
REPLY = 48  # tokens a reply may have (a SmolLM2 reply on random words rarely ends sooner)
WORDS = ("the keeper climbed stairs while storm broke over rocks and lamp turned def add total value return "
         "list seven green quiet market window bread north river stone paper robot write count step").split()


def _settings(parallel: int) -> LoadSettings:
    return LoadSettings(n_ctx=1024, n_batch=CHUNK, n_ubatch=CHUNK, n_threads=1, n_threads_batch=1, n_outputs_max=1,
                        speculative="off", parallel=parallel, ctx_checkpoints=8 * parallel)


def _request(messages: list[dict], max_tokens: int = REPLY) -> ChatRequest:
    return ChatRequest(messages, enable_thinking=False, logprobs=1,
                       sampling=SamplingParams(temperature=0.0, seed=1, max_tokens=max_tokens))


def _length(engine: Engine, messages: list[dict]) -> int:
    return len(engine.tokenize_prompt(engine.render_prompt(ChatRequest(messages, enable_thinking=False))))


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def _prompts(engine: Engine, rng: random.Random) -> list[list[dict]]:
    """Conversations of random words (a system message, a question; every fourth one a turn before
    it); the prompts' lengths are one or two tokens either side of a chunk boundary, or anywhere in
    the three chunks after the shortest they can be."""
    systems = [_words(rng, 25, 45) for _ in range(3)]
    out = []
    for i in range(N_PROMPTS):
        head = [{"role": "system", "content": systems[i % 3]}]
        if KINDS[i % len(KINDS)] == "its previous turn":
            head += [{"role": "user", "content": _words(rng, 3, 20)},
                     {"role": "assistant", "content": _words(rng, 5, 30)}]
        base = _length(engine, [*head, {"role": "user", "content": "x"}])
        k = base // CHUNK + rng.randint(1, 3)
        target = rng.randint(base + 1, base + 3 * CHUNK) if i % 3 == 0 else k * CHUNK + rng.choice([-1, 0, 1, 2])
        text = rng.choice(WORDS)
        while _length(engine, [*head, {"role": "user", "content": text}]) < target:
            text += " " + rng.choice(WORDS)
        out.append([*head, {"role": "user", "content": text}])
    return out


def _other(kind: str, messages: list[dict], reply: str, rng: random.Random) -> list[dict]:
    """A request read between two of `messages`, sharing its start: another question after the same
    system message, the question cut short, a follow-up of the conversation, its turn before."""
    *head, user = messages
    if kind == "another question":
        return [head[0], {"role": "user", "content": _words(rng, 2, 30)}]
    if kind == "its start":
        words = user["content"].split()
        return [*head, {"role": "user", "content": " ".join(words[:rng.randint(1, len(words) - 1)])}]
    if kind == "its follow-up":
        return [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
    return messages[:-2]


def _clear(engine: Engine) -> None:
    """Forget every cached token: the next read is cold."""
    engine.slots.forget()  # once the reply that just returned has left its slot


def _same(a, b) -> bool:
    return a.raw == b.raw and [(e["bytes"], e["logprob"]) for e in a.logprobs] == \
        [(e["bytes"], e["logprob"]) for e in b.logprobs]


@pytest.fixture(scope="module")
def models(smollm2, qwen35moe_model, gemma3_model, gpt_oss_model):
    return {"smollm2": smollm2, "qwen35moe": qwen35moe_model, "gemma3": gemma3_model, "gpt-oss": gpt_oss_model}


@pytest.mark.slow
@pytest.mark.parametrize("which", ["smollm2", "qwen35moe", "gemma3", "gpt-oss"])
@pytest.mark.parametrize("parallel", [1, 2], ids=["one slot", "two slots"])
def test_a_rerun_gives_the_cold_reply_bit_for_bit(models, which, parallel, capsys):
    engine = Engine()
    engine.load(models[which], _settings(parallel))
    try:
        chunk = engine.slots.chunk
        assert chunk == CHUNK - (parallel - 1)
        rng = random.Random(f"reproducible-{which}")
        differ: list[str] = []
        lengths, warm_evaluated, other_evaluated = [], [], []
        for i, messages in enumerate(_prompts(engine, rng)):
            _clear(engine)
            cold = engine.generate(_request(messages))
            assert cold.stats.prompt_evaluated == cold.stats.prompt_tokens
            warm = engine.generate(_request(messages))  # the cache holds this prompt and its reply
            kind = KINDS[i % len(KINDS)]
            engine.generate(_request(_other(kind, messages, cold.text, rng), max_tokens=2))
            other = engine.generate(_request(messages))  # its start now comes from another request
            n = cold.stats.prompt_tokens
            lengths.append(n)
            warm_evaluated.append(warm.stats.prompt_evaluated)
            other_evaluated.append(other.stats.prompt_evaluated)
            for name, reply in (("warm", warm), (f"after {kind}", other)):
                if reply.raw != cold.raw:
                    at = next((j for j, (x, y) in enumerate(zip(cold.raw, reply.raw, strict=False)) if x != y),
                              min(len(cold.raw), len(reply.raw)))
                    differ.append(f"prompt {i} ({n} tokens), {name}: parts at character {at}: "
                                  f"{cold.raw[at:at + 20]!r} against {reply.raw[at:at + 20]!r}")
                elif not _same(cold, reply):
                    gap = max(abs(x["logprob"] - y["logprob"]) for x, y in zip(cold.logprobs, reply.logprobs,
                                                                               strict=True))
                    differ.append(f"prompt {i} ({n} tokens), {name}: the same text, logprobs up to {gap:.2g} apart")
        with capsys.disabled():
            print(f"\n  {which}, {'token loop' if parallel == 1 else 'slots'}: {len(lengths)} prompts of "
                  f"{min(lengths)}-{max(lengths)} tokens ({chunk}-token chunks), each cold, warm and after another "
                  f"request that shares its start; a warm rerun evaluated {min(warm_evaluated)}-"
                  f"{max(warm_evaluated)} prompt tokens (mean {sum(warm_evaluated) / len(warm_evaluated):.1f}), "
                  f"after another request {min(other_evaluated)}-{max(other_evaluated)}; {len(differ)} of "
                  f"{2 * len(lengths)} replies differ from the cold one")
            for line in differ:
                print("   ", line)
        assert not differ
        assert all(1 <= w <= chunk for w in warm_evaluated)  # the cost of alignment: at most one chunk
        assert any(o < n for o, n in zip(other_evaluated, lengths, strict=True))  # the shared start was reused
    finally:
        engine.unload()
