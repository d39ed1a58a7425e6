"""A request's prompt, checked before it joins the line for the engine, and without the engine's lock
(issue 29, item 4): a request too long for the context, a template that fails on its messages or a
schema with no grammar is refused with a 400 while other requests generate.

The engine prepares the reply's prompt (`Engine.prepare`: rendered by its chat template, pure
Python, no lock needed; its grammar and checkpoint marks), tokenized on a vocabulary-only copy of the
model that the server loads from the same file (llama.cpp's `vocab_only`: the tokenizer, no weights;
tens of MB, a fraction of a second). Tokenizing on the engine's own model outside its lock would race
a model load, which frees that model. A prompt whose UTF-8 length alone shows it cannot fit (more
bytes than the context times the longest token) is refused before it is tokenized: a 10 MB body
costs nothing. What was prepared goes to the engine with the request (`generate(prepared=)`), so a
request is rendered, tokenized and given its grammar once. No Qt."""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.engine.contract import ChatRequest, ContextOverflow, EngineError
from app.engine.grammars import GrammarError
from app.engine.sampler import grammar_sampler
from app.machine.llama_backend import llama

if TYPE_CHECKING:
    from app.engine.contract import ChatEngine


def too_long(n: int, n_ctx: int, at_least: bool = False) -> ContextOverflow:
    """The engine's own error for a prompt past the context (its words, and both numbers)."""
    return ContextOverflow(n, n_ctx, at_least)


@dataclass(frozen=True)
class Vocab:
    """A model file's tokenizer, loaded without its weights."""

    key: tuple[str, int, int]  # path, mtime, size: another file at the same path is another vocabulary
    model: Any  # llama_cpp._internals.LlamaModel with vocab_only
    add_bos: bool  # the file's tokenizer.ggml.add_bos_token
    longest: int  # the longest token's text in UTF-8 bytes: no token stands for more of a prompt

    def tokenize(self, prompt: str, bos_text: str) -> list[int]:
        """As the engine tokenizes a prompt (Engine.tokenize_prompt): no BOS where the template wrote it."""
        add_bos = self.add_bos and not (bos_text and prompt.startswith(bos_text))
        return list(self.model.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True))


def check_grammar(vocab: Any, grammar: Any) -> None:
    """Raises EngineError when llama.cpp cannot parse the grammar (it would fail the reply later)."""
    if grammar is None:
        return
    lc = llama()
    try:
        smpl = grammar_sampler(lc, vocab, grammar)
    except GrammarError as exc:
        raise EngineError(str(exc)) from None
    lc.llama_sampler_free(smpl)


def load_vocab(path: str) -> Vocab:
    llama_cpp = llama()
    st = os.stat(path)
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp._internals.LlamaModel(path_model=path, params=params, verbose=False)  # noqa: SLF001
    vocab = model.vocab
    longest = max((len(llama_cpp.llama_vocab_get_text(vocab, t) or b"") for t in range(model.n_vocab())), default=1)
    add_bos = model.metadata().get("tokenizer.ggml.add_bos_token", "true") != "false"
    return Vocab((path, st.st_mtime_ns, st.st_size), model, add_bos, max(1, longest))


@dataclass(frozen=True)
class Checked:
    """A checked request: its prompt's length in tokens, and the engine's prepared prompt for its
    reply (None when the engine has none: it prepares the prompt itself when it generates)."""

    n: int
    prepared: Any = None


class PromptCheck:
    """Checks requests for one server; keeps the vocabulary of the model it last saw."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one load at a time; tokenizing needs no lock (llama.cpp's is read-only)
        self._vocab: Vocab | None = None

    def vocab(self, path: str) -> Vocab | None:
        """The tokenizer of the model file at `path`, or None when it cannot be read."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (path, st.st_mtime_ns, st.st_size)
        with self._lock:
            if self._vocab is None or self._vocab.key != key:
                try:
                    # the old one is not closed: a request may still be tokenizing on it (it is freed
                    # when the last reference goes)
                    self._vocab = load_vocab(path)
                except Exception:  # noqa: BLE001 -- llama.cpp raises ValueError or OSError; the engine decides
                    return None
            return self._vocab

    def check(self, engine: ChatEngine, request: ChatRequest, fit: bool = True) -> Checked:
        """The prompt's length in tokens, and what the engine prepared for its reply; raises what
        generating would (EngineError, TemplateError). `fit` False: a prompt past the context is
        counted, not refused (a client asking how long its prompt is). An engine that cannot be
        checked this way (no template, no model file, a test double) checks itself: count_tokens."""
        info = engine.info
        prepare = getattr(engine, "prepare", None)
        template = getattr(engine, "template", None)
        path, n_ctx = getattr(info, "path", None), getattr(info, "n_ctx", None)
        vocab = self.vocab(path) if callable(prepare) and template is not None and isinstance(path, str) else None
        if vocab is None or prepare is None or not isinstance(n_ctx, int):
            try:
                return Checked(engine.count_tokens(request))
            except ContextOverflow as exc:
                if fit:
                    raise
                return Checked(exc.n)
        bos = getattr(template, "bos_token", "") or ""

        def tokenize(prompt: str) -> list[int]:
            fewest = math.ceil(len(prompt.encode("utf-8")) / vocab.longest)
            if fit and fewest >= n_ctx:
                raise too_long(fewest, n_ctx, at_least=True)
            return vocab.tokenize(prompt, bos)

        try:
            turn = prepare(request, tokenize=tokenize)  # the forced call's start too, as generating has it
        except ContextOverflow as exc:
            if fit:
                raise
            return Checked(exc.n)
        if turn.grammar is not None:  # parsed by llama.cpp on this vocabulary: one it cannot parse is a 400 here
            check_grammar(vocab.model.vocab, turn.grammar)
        same = engine.info is info  # no other model was loaded meanwhile (its tokens would be another's)
        return Checked(len(turn.tokens), turn if fit and same else None)
