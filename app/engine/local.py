"""The local inference engine: one llama.cpp model, shared by several threads under one lock. No Qt.

It loads a model with a plan's settings (`app.machine.llama_load`), renders the model's chat template
(`app.engine.chat_template`), streams each reply through the text pipeline (`app.engine.text_pipeline`)
and measures it (prompt and generation speed, time to first token). Every public method that touches
the model takes the engine's one lock; a prompt is rendered and tokenized before it, and a reply is
read outside it while the slots' scheduler (`app.engine.slots`) decodes for every reply at once.
The interface (`load`, `generate`, `unload`, app/engine/contract.py) is the remote engine's too.
More: docs/architecture/decode-loop.md.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.engine.builtin_template import BuiltinTemplate
from app.engine.builtin_template import choose as choose_template
from app.engine.chat_template import ChatTemplate, TemplateError
from app.engine.contract import (
    AppReplies,
    ChatRequest,
    ContextOverflow,
    EngineError,
    Event,
    ModelInfo,
    Reply,
    ReplyStats,
)
from app.engine.drafting import auto_drafting, measure_costs, measured_for
from app.engine.grammars import Grammar, GrammarError, closes_think_first, reply_grammar
from app.engine.mtp import MtpHead, drafter, with_steps
from app.engine.prompt_cache import PromptCache, open_prompt_cache
from app.engine.prompt_cache_files import prompt_cache_folder
from app.engine.reasoning import ANSWER, initial_state_for_prompt
from app.engine.sampler import reply_chain
from app.engine.slots import Job, Scheduler, shared_prefix
from app.engine.text_pipeline import TextPipeline, check_reply
from app.machine.drafting_note import write_note
from app.machine.llama_backend import llama
from app.machine.llama_load import LoadSettings, load_llama

_MARK = "\u2063clover-checkpoint\u2063"  # stands in front of a message's text to find where it starts
THINK_END = "\n</think>\n\n"  # written for the model when its thinking budget is spent


def _logprob_entry(llama_cpp: Any, llm: Any, token: int, top: int, row: int = -1) -> dict[str, Any]:
    """OpenAI's logprobs entry for a sampled token, from the logits it was sampled from (batch row `row`)."""
    import numpy as np

    n_vocab = llm.n_vocab()
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, row), shape=(n_vocab,))
    shifted = logits.astype(np.float64) - float(logits.max())
    logprobs = shifted - np.log(np.exp(shifted).sum())

    def entry(t: int) -> dict[str, Any]:
        piece = llm.detokenize([int(t)], special=True)
        return {"token": piece.decode("utf-8", "replace"), "logprob": float(logprobs[t]), "bytes": list(piece)}

    out = entry(token)
    alternatives: Any = np.argpartition(-logprobs, top)[:top] if top else []
    out["top_logprobs"] = [entry(int(t)) for t in sorted(alternatives, key=lambda t: -logprobs[t])]
    return out


class TokenFacts:
    """A model's answers for single tokens, each asked of llama.cpp once: whether it ends generation,
    and the bytes it writes (as `Llama.detokenize([token], special=False)`)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        lc = llama()
        self._lc, self._vocab = lc, lc.llama_model_get_vocab(llm.model)
        self._eog: dict[int, bool] = {}
        self._pieces: dict[int, bytes] = {}
        self._asking = threading.Lock()  # the replies' readers ask at once: a token is asked of llama.cpp once

    def is_eog(self, token: int) -> bool:
        answer = self._eog.get(token)
        if answer is None:
            answer = self._eog[token] = bool(self._lc.llama_vocab_is_eog(self._vocab, token))
        return answer

    def piece(self, token: int) -> bytes:
        text = self._pieces.get(token)
        if text is None:
            with self._asking:  # a ctypes call lets another reader in: it would ask for the same token
                text = self._pieces.get(token)
                if text is None:
                    text = self._pieces[token] = self.llm.detokenize([token], special=False)
        return text


@dataclass
class _Turn:
    """A reply's prompt, made under the engine's lock."""

    base: str  # the rendered conversation
    forced: str  # the start of a forced tool call after it ("" when none)
    tokens: list[int]
    max_new: int
    grammar: Any
    started: float
    source: Any = None  # what makes the tokens (a slot's job): reused, restored, prompt_seconds, drafts
    llm: Any = None  # the model it was made for
    marks: tuple[int, ...] = ()  # checkpoint positions (the last user message's start)


class Engine:
    """One llama.cpp model. Every public method takes the same lock: the chat window's thread, the
    local server's threads and a scenario run can share the engine, and a load or an unload never
    happens under a reply that is being written (it waits for the reply to end)."""

    kind = "local"

    def __init__(self, reserve_app: bool = False) -> None:
        import threading

        self._lock = threading.RLock()
        self.llm: Any = None  # llama_cpp.Llama while a model is loaded
        self.slots: Scheduler | None = None  # its slots (LoadSettings.parallel, one or more) and their decode loop
        self.reserve_app = reserve_app  # with slots: keep one for the app's own requests (the window's chat)
        self.template: ChatTemplate | None = None
        self.info: ModelInfo | None = None
        self.prompt_cache: PromptCache | None = None  # the loaded model's (app.engine.prompt_cache)
        self.loading = False  # a load is under way (read without the lock: the server's health check)
        self.app_replies = AppReplies()  # the window's replies under way (the local server's line counts them)
        self._vocab: TokenFacts | None = None  # the loaded model's per-token answers, kept (`_vocab_of`)

    # ------------------------------------------------------------------ loading

    def load(self, path: str | Path, settings: LoadSettings,
             progress: Callable[[float], bool] | None = None) -> ModelInfo:
        """Load a model (unloading any other first). `progress(fraction)` returning False cancels."""
        with self._lock:
            self.loading = True
            try:
                return self._load(path, settings, progress)
            finally:
                self.loading = False

    def _load(self, path: str | Path, settings: LoadSettings, progress: Callable[[float], bool] | None) -> ModelInfo:
        with self._lock:
            self._unload()
            path = Path(path)
            if not path.is_file():
                raise EngineError(f"model file not found: {path}")
            try:
                self.llm = load_llama(path, settings, progress=progress)
            except ValueError as exc:
                raise EngineError(f"llama.cpp could not load {path.name}: {exc}") from None
            drafting = ""  # why auto chose no drafts, in words ("": as loaded, `_drafting_words`)
            n = max(settings.parallel, 1)
            drafts = drafter(self.llm, settings.speculative) if settings.drafts else ""
            if drafts == "mtp" and not settings.mtp:  # the head's weights were not loaded (LoadSettings.mtp)
                drafts = "ngram" if settings.speculative == "auto" else ""
            slots = self.slots = Scheduler(self.llm, n, reserve_app=self.reserve_app,
                                           checkpoints=settings.ctx_checkpoints // n,
                                           draft_max=settings.draft_max if drafts else 0,
                                           reproducible=settings.reproducible)
            if slots.draft_max:
                drafting = slots.call(lambda: self._time_drafting(slots, drafts, settings))  # its decoding thread
            self.prompt_cache = open_prompt_cache(path, settings, f"{slots.plan.key()};slots={settings.parallel}",
                                                  prompt_cache_folder())
            slots.cache = self.prompt_cache
            meta = self.llm.metadata
            vocab_tokens = self.llm._model.token_get_text  # noqa: SLF001 (llama-cpp-python's own accessor)
            bos = vocab_tokens(self.llm.token_bos()) if self.llm.token_bos() >= 0 else ""
            eos = vocab_tokens(self.llm.token_eos()) if self.llm.token_eos() >= 0 else ""
            source = meta.get("tokenizer.chat_template")
            chosen = choose_template(meta, self._is_one_token, settings.chat_template)
            self.template = BuiltinTemplate(chosen.name) if chosen.name else ChatTemplate(source, bos, eos)
            self.info = ModelInfo(str(path), meta.get("general.name", path.stem), meta.get("general.architecture", "?"),
                                  self.n_ctx_seq, not chosen.name, self.template.supports_thinking_switch,
                                  settings, self.template.supports_tools, settings.parallel, self.llm.n_vocab(),
                                  drafting or self._drafting_words(), chosen.note)
            self._vocab = TokenFacts(self.llm)  # before any reply: the replies' readers share it
            write_note(path.name, settings.speculative, self.info.drafting)  # for doctor
            return self.info

    def _is_one_token(self, text: str) -> bool:
        """Whether the vocabulary holds `text` as one (special) token."""
        assert self.llm is not None
        return len(self.llm.tokenize(text.encode(), add_bos=False, special=True)) == 1

    def _time_drafting(self, slots: Scheduler, drafts: str, settings: LoadSettings) -> str:
        """On the scheduler's thread (`Scheduler.call`: the only one that decodes): this machine's batch
        costs, and the MTP head's step where it drafts; under auto, n-grams only where they pay. Why
        auto chose no drafts, in words ("" where it drafts)."""
        drafting = ""
        costs = measure_costs(self.llm, slots.cost_rows, sizes=(1, 2, 4, 8, 16))
        if drafts == "mtp":  # every slot drafts with the head (a sequence each in its context)
            head = MtpHead(self.llm, len(slots.slots))
            costs = with_steps(costs, head.step_cost(self.llm))
            slots.costs = costs
            slots.draft_with_head(head)
        else:
            slots.costs = costs
            if settings.speculative == "auto":
                measured = measured_for(self.llm.model_path, settings.main_gpu) if settings.n_gpu_layers else None
                pays, drafting = auto_drafting(costs, slots.draft_max, measured)
                slots.draft_max = slots.draft_max if pays else 0
        llama().llama_memory_clear(llama().llama_get_memory(self.llm.ctx), True)  # the timing's decodes
        return drafting

    def unload(self) -> None:
        with self._lock:
            self._unload()

    def _unload(self) -> None:
        if self.slots is not None:
            self.slots.close(wait=True)  # replies being written end first
            self.slots = None
        if self.prompt_cache is not None:  # what it was given is written to disk first
            self.prompt_cache.close()
            self.prompt_cache = None
        if self.llm is not None:
            self.llm.close()
        self.llm, self.template, self.info, self._vocab = None, None, None, None

    @property
    def loaded(self) -> bool:
        return self.llm is not None

    def _drafting_words(self) -> str:
        slots = self.slots
        if slots is not None and slots.apart:
            return "off: reproducible replies"
        if slots is None or not slots.draft_max:
            return "off"
        if slots.head is not None:
            return "the model's MTP head drafts" + ("" if len(slots.slots) == 1 else " for every slot")
        return "n-gram drafts where they pay" if len(slots.slots) == 1 else "each slot drafts n-grams where they pay"

    @property
    def n_ctx_seq(self) -> int:
        """The context one reply can use: the whole context (one sequence, or slots sharing one pool), or
        a slot's share of it (a partitioned cache, `LoadSettings.kv_unified` False)."""
        assert self.llm is not None
        return int(llama().llama_n_ctx_seq(self.llm.ctx))

    # ------------------------------------------------------------------ prompts

    def render_prompt(self, request: ChatRequest) -> str:
        return "".join(self._prompt_parts(request))

    def _prompt_parts(self, request: ChatRequest) -> tuple[str, str]:
        """(the rendered prompt, the start of a forced tool call after it): for a forced call the model
        goes on from inside the call, so a call is certain, and for a named tool it is that tool. A
        structured answer to a template that opened the reasoning, from a client that did not ask for
        thinking, has the think block closed at the end of the prompt (app.engine.grammars)."""
        if self.template is None:
            raise EngineError("no model is loaded")
        prompt = self.template.render(request.messages, enable_thinking=request.enable_thinking,
                                      tools=request.tools, extra=request.template_kwargs)
        if closes_think_first(request, initial_state_for_prompt(prompt)):
            prompt += "</think>\n\n"
        return prompt, self._forced_call_prefix(request, prompt)

    def _forced_call_prefix(self, request: ChatRequest, prompt: str) -> str:
        if not request.tool_choice or self.template is None or not self.template.tagged_tool_calls:
            return ""
        prefix = "</think>\n\n" if initial_state_for_prompt(prompt) == "thinking" else ""
        prefix += "<tool_call>\n"
        if request.tool_choice != "required":
            name = request.tool_choice
            prefix += f"<function={name}>\n" if self.template.xml_tool_calls else f'{{"name": "{name}", "arguments": '
        return prefix

    def _checkpoint_marks(self, request: ChatRequest, tokens: list[int]) -> tuple[int, ...]:
        """Where the last user message's text starts, in prompt tokens, for a model that keeps context
        checkpoints: one there lets an edit of that message re-read only what follows it. Found by
        rendering the conversation again with a marker in front of that text (templates differ in
        what they put before a message, and Qwen3.5/3.6 renders an earlier prefix differently)."""
        keeps = self.slots is not None and self.slots.slots[0].checkpoints is not None
        if not keeps or self.template is None:
            return ()
        users = [i for i, m in enumerate(request.messages) if m.get("role") == "user"]
        content = request.messages[users[-1]].get("content") if users else None
        if not isinstance(content, str) or content.lstrip().startswith("<tool_response>"):
            return ()
        messages = list(request.messages)
        messages[users[-1]] = {**messages[users[-1]], "content": _MARK + content}
        try:
            text = self.template.render(messages, enable_thinking=request.enable_thinking, tools=request.tools,
                                        extra=request.template_kwargs)
        except TemplateError:
            return ()
        at = text.find(_MARK)
        if at <= 0:
            return ()
        n = shared_prefix(self.tokenize_prompt(text[:at]), tokens)
        return (n,) if n > 0 else ()

    def tokenize_prompt(self, prompt: str) -> list[int]:
        assert self.llm is not None
        add_bos = self.llm.metadata.get("tokenizer.ggml.add_bos_token", "true") != "false"
        bos_text = self.template.bos_token if self.template else ""
        if bos_text and prompt.startswith(bos_text):
            add_bos = False  # the template wrote it already
        return self.llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True)

    def _think_end_tokens(self) -> list[int]:
        assert self.llm is not None
        return list(self.llm.tokenize(THINK_END.encode("utf-8"), add_bos=False, special=True))

    def count_tokens(self, request: ChatRequest) -> int:
        """The prompt's length in tokens; raises what generating would (template errors, a prompt
        longer than the context), so a server can answer 400 before it starts a stream."""
        with self._lock:
            if self.llm is None:
                raise EngineError("no model is loaded")
            n = len(self.tokenize_prompt(self.render_prompt(request)))
            self._check_fits(n)
            self._grammar(request)
            return n

    def _check_fits(self, n: int) -> None:
        n_ctx = self.n_ctx_seq
        if n >= n_ctx:
            raise ContextOverflow(n, n_ctx)

    def _grammar(self, request: ChatRequest, prompt: str | None = None) -> Grammar | None:
        return self.grammar(request, prompt)

    def grammar(self, request: ChatRequest, prompt: str | None = None) -> Grammar | None:
        """The grammar that holds the reply to the request (app.engine.grammars); `prompt`: the rendered
        prompt, when the caller has it (structured output depends on where it leaves the reasoning).
        Needs no lock (the template is only read)."""
        if self.template is None or (request.json_schema is None and not request.tool_choice):
            return None
        if prompt is None and request.json_schema is not None and not request.tool_choice:
            prompt = self._prompt_parts(request)[0]
        state = initial_state_for_prompt(prompt) if prompt is not None else ANSWER
        try:
            return reply_grammar(request, tagged=self.template.tagged_tool_calls, xml=self.template.xml_tool_calls,
                                 state=state)
        except GrammarError as exc:
            raise EngineError(str(exc)) from None

    # ------------------------------------------------------------------ generation

    def generate(self, request: ChatRequest, on_event: Event | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 on_logprob: Callable[[dict[str, Any]], None] | None = None,
                 prepared: _Turn | None = None) -> Reply:
        """Stream one reply. `on_event` gets reasoning, answer and tool-call text as it comes;
        `should_stop` is polled between tokens; `on_logprob` gets each token's logprobs entry when
        the request asks for them. The prompt is rendered and tokenized before the engine's lock is
        taken (a 10,000-message conversation takes seconds: others generate meanwhile), or taken as
        `prepared` (`prepare`'s, made when a server checked the request: nothing is rendered or
        tokenized again) when it was made for the model loaded now. The reply is read outside the lock,
        while the slots' scheduler decodes for every reply at once (with one slot, a reply waits for
        the one before it to end)."""
        with self.app_replies.during(request):
            if prepared is not None and prepared.llm is self.llm:
                turn = replace(prepared, started=time.perf_counter())  # the reply's time starts now, as before
            else:
                turn = self.prepare(request)
            with self._lock:
                self._still_loaded(turn)
                stream = self._slot_stream(turn, request)

            def again(t: _Turn) -> Any:
                with self._lock:
                    self._still_loaded(t)
                    return self._slot_stream(t, request, again=True)

            return self._read(turn, request, stream, on_event, should_stop, on_logprob, again)

    def prepare(self, request: ChatRequest, tokenize: Callable[[str], list[int]] | None = None) -> _Turn:
        """The reply's prompt, tokens, grammar and checkpoint marks, for the model loaded now, made
        without the engine's lock: the template and the vocabulary are only read. Raises what
        generating would (a template error, a prompt past the context, a schema with no grammar).
        `tokenize`: the prompt's tokenizer when not the model's own (a server's copy of the same
        vocabulary, which may refuse a prompt its size alone rules out). `generate(prepared=)` takes
        the result: the request is rendered and tokenized once."""
        llm = self.llm
        if llm is None:
            raise EngineError("no model is loaded")
        started = time.perf_counter()
        try:
            base, forced = self._prompt_parts(request)
            tokens = (tokenize or self.tokenize_prompt)(base + forced)
            self._check_fits(len(tokens))
            max_new = min(request.sampling.max_tokens, self.n_ctx_seq - len(tokens))
            grammar = self._grammar(request, base)
            marks = self._checkpoint_marks(request, tokens)
        except (AttributeError, AssertionError):
            if self.llm is not llm:  # unloaded meanwhile (the window's Unload): said in words
                raise EngineError("the model was unloaded while the request was prepared") from None
            raise
        return _Turn(base, forced, tokens, max_new, grammar, started, llm=llm, marks=marks)

    def _still_loaded(self, turn: _Turn) -> None:
        """Under the lock: the model the prompt was made for is still the one loaded."""
        if self.llm is None or self.llm is not turn.llm:
            raise EngineError("the model was unloaded or changed while the request waited; send it again")

    def _slot_stream(self, turn: _Turn, request: ChatRequest, again: bool = False) -> Any:
        """A job for the slots' scheduler (its chain made here, under the lock, with the reply's seed);
        `again`: the same reply goes on from a longer prompt (its slot's cache is reused whole)."""
        llm, slots, lc = self.llm, self.slots, llama()
        assert slots is not None
        chain = reply_chain(llm, request.sampling, turn.grammar)
        top = request.logprobs

        def with_logprobs(token: int, row: int) -> Any:
            return token, _logprob_entry(lc, llm, token, top or 0, row)

        job = Job(turn.tokens, chain, max(turn.max_new, 1),
                  eog=self._vocab_of(llm).is_eog,
                  marks=turn.marks, client=request.client, resume=again, keep=request.keep_cache,
                  on_token=with_logprobs if top is not None else None,
                  draft=top is None)  # drafts where the load's speculative setting let the slots draft
        try:
            slots.submit(job)
        except ValueError as exc:
            chain.close()
            raise EngineError(str(exc)) from None
        turn.source = job
        return slots.stream(job)

    def _vocab_of(self, llm: Any) -> TokenFacts:
        """What the reply loops ask of `llm`'s vocabulary for every token, each token asked of llama.cpp
        once a load: every call into llama.cpp lets another thread take the GIL, and the slots'
        scheduler and the replies' readers ask for each token of every reply."""
        if self._vocab is None or self._vocab.llm is not llm:
            self._vocab = TokenFacts(llm)
        return self._vocab

    def _read(self, turn: _Turn, request: ChatRequest, stream: Any, on_event: Event | None,
              should_stop: Callable[[], bool] | None,
              on_logprob: Callable[[dict[str, Any]], None] | None,
              again: Callable[[_Turn], Any] | None = None) -> Reply:
        """Turn a stream of tokens (or (token, logprobs entry) pairs) into the reply: text split into
        reasoning, answer and tool calls, stop strings, limits and the reply's measures. A request
        with a thinking budget that is still thinking when the budget is spent has the end of its
        thinking forced: the stream is closed, and `again` opens one on the prompt, the tokens so far
        and THINK_END (the cache keeps all but the new few), held by the answer's grammar if any."""
        llm = self.llm
        base, forced, tokens = turn.base, turn.forced, turn.tokens
        prompt = base + forced
        text = TextPipeline(request.tools, request.sampling.stop, initial_state_for_prompt(base), on_event)
        vocab = self._vocab_of(llm)
        is_eog, piece = vocab.is_eog, vocab.piece
        stats = ReplyStats(prompt_tokens=len(tokens))
        logprobs: list[dict[str, Any]] | None = [] if request.logprobs is not None else None
        if forced:  # the call the prompt opened: the splitters see it as the reply's start
            text.open_with(forced[forced.find("<tool_call>"):])
        first_at = last_at = None
        stop_reason = "length"
        budget = request.thinking_budget if again is not None else None
        generated: list[int] = []  # the reply's tokens so far (a forced end of thinking goes on from them)
        limit = turn.max_new
        first = turn  # the prompt's own turn: its source's counts are the reply's
        reused, restored, prompt_seconds, drafted, accepted = None, 0, 0.0, 0, 0
        while True:
            spent = False  # the thinking budget
            with contextlib.closing(stream):  # the sampler chain (or the slot) is freed when the reply ends
                for item in stream:
                    token, entry = item if isinstance(item, tuple) else (item, None)
                    now = time.perf_counter()
                    if first_at is None:
                        first_at = now
                    last_at = now
                    if is_eog(token):
                        stop_reason = "end"
                        break
                    stats.generated_tokens += 1
                    generated.append(token)
                    if text.thinking:
                        stats.reasoning_tokens += 1
                    if logprobs is not None and entry is not None:
                        logprobs.append(entry)
                        if on_logprob:
                            on_logprob(entry)
                    if text.feed_bytes(piece(token)):
                        stop_reason = "stop"
                        break
                    if stats.generated_tokens >= limit:
                        stop_reason = "length"
                        break
                    if should_stop is not None and should_stop():
                        stop_reason = "stopped"
                        break
                    if budget is not None and text.thinking and stats.reasoning_tokens >= budget:
                        spent = True
                        break
            if not spent or again is None:
                break
            # the budget is spent: the reasoning so far, then the end of thinking, as if the model wrote it
            text.write_for_model(THINK_END)
            source = turn.source
            if reused is None:
                reused, restored, prompt_seconds = source.reused, source.restored, source.prompt_seconds
            drafted, accepted = drafted + source.drafts.drafted, accepted + source.drafts.accepted
            tokens_now = first.tokens + generated + self._think_end_tokens()
            room = self.n_ctx_seq - len(tokens_now)
            if room <= 0:
                stop_reason = "length"
                break
            limit = min(limit, stats.generated_tokens + room)
            turn = replace(first, tokens=tokens_now, max_new=max(1, limit - stats.generated_tokens),
                           grammar=self._grammar(request, base + text.raw), marks=())
            budget = None
            stream = again(turn)
        written = text.finish()
        source = turn.source
        stats.stop_reason = "end" if stop_reason == "stop" else stop_reason
        stats.stop_sequence = text.stop_hit if stop_reason == "stop" else ""
        # exact (llama.cpp counts a 1-token batch as generation); after a forced end of thinking, the
        # first stream's figures are the prompt's
        stats.prompt_evaluated = len(tokens) - (source.reused if reused is None else reused)
        stats.prompt_restored = source.restored if reused is None else restored
        stats.drafted, stats.accepted = drafted + source.drafts.drafted, accepted + source.drafts.accepted
        stats.ttft_seconds = (first_at - turn.started) if first_at else time.perf_counter() - turn.started
        # llama.cpp's counters are the context's (every slot's) and count a verify batch as prompt: the
        # clocks tell the prompt's time and the output's speed
        stats.prompt_seconds = source.prompt_seconds if reused is None else prompt_seconds
        if first_at and last_at:
            stats.wall_seconds = last_at - first_at
        reply = Reply(written.text, written.reasoning, forced + written.raw, prompt, stats, written.tool_calls,
                      logprobs=logprobs)
        return check_reply(reply, request)
