"""A file without a chat template (issue 54, item 2): the load says so in one sentence and uses the
built-in template llama.cpp has for its architecture (or its vocabulary's turn markers), a base
model is named as such, a template chosen per model wins, and serve says the same sentence."""

from __future__ import annotations

import pytest

from app.engine.builtin_template import BY_TOKENS, builtin_names, choose
from app.engine.contract import ChatRequest, SamplingParams
from app.engine.local import Engine
from app.machine.llama_load import LoadSettings
from tests.helpers.gguf_models import CHATML_TEMPLATE, write_gemma3, write_llama
from tests.helpers.server_post import serve_until_listening


def _has(*tokens: str):
    return lambda text: text in tokens


def test_the_architecture_names_the_template_and_the_vocabulary_where_it_does_not():
    gemma = choose({"general.architecture": "gemma3", "general.name": "gemma-3-1b-it"}, _has())
    assert gemma.name == "gemma"
    assert gemma.note == ("The file has no chat template: using llama.cpp's built-in gemma template (the gemma3 "
                          "architecture's); another can be picked for this model in the settings.")
    llama3 = choose({"general.architecture": "llama", "general.finetune": "Instruct"}, _has("<|start_header_id|>"))
    assert llama3.name == "llama3" and "(its vocabulary holds <|start_header_id|>)" in llama3.note
    plain = choose({"general.architecture": "rwkv7", "general.name": "x-chat"}, _has())
    assert plain.name == "chatml" and "using ChatML (nothing in the file points to another)" in plain.note


def test_every_template_the_app_may_choose_is_one_llama_cpp_has():
    from app.base.settings import BY_KEY
    from app.engine.builtin_template import BY_ARCH

    known = set(builtin_names())
    chosen = set(BY_ARCH.values()) | {name for name, _ in BY_TOKENS} | set(BY_KEY["chat.template"].choices) - {""}
    assert chosen <= known, chosen - known


def test_a_base_model_is_named_as_such_and_the_files_own_template_is_kept():
    base = choose({"general.architecture": "llama", "general.name": "SmolLM2 135M"}, _has("<|im_start|>"))
    assert base.name == "chatml"
    assert base.note.startswith("A base model, made to continue text, not to chat: the file has no chat template")
    own = choose({"general.architecture": "llama", "tokenizer.chat_template": CHATML_TEMPLATE}, _has())
    assert own.name == "" and own.note == ""
    wanted = choose({"general.architecture": "llama", "tokenizer.chat_template": CHATML_TEMPLATE}, _has(), "llama3")
    assert wanted.name == "llama3" and "as chosen in the settings instead of the file's own" in wanted.note


def _hi() -> ChatRequest:
    return ChatRequest([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
                       sampling=SamplingParams(temperature=0.0, max_tokens=4))


@pytest.fixture(scope="module")
def gemma3_without_template(tmp_path_factory):
    return write_gemma3(tmp_path_factory.mktemp("models") / "gemma3.gguf")


def test_a_gemma3_file_without_a_template_loads_with_gemmas_and_says_so(gemma3_without_template):
    engine = Engine()
    info = engine.load(gemma3_without_template, LoadSettings(n_ctx=512, n_threads=2, speculative="off"))
    try:
        assert not info.chat_template_from_model and not info.thinking_switch and not info.tools_in_template
        assert info.template_note.startswith("The file has no chat template: using llama.cpp's built-in gemma")
        assert engine.render_prompt(_hi()) == ("<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n"
                                               "<start_of_turn>model\n")
        assert engine.generate(_hi()).stats.generated_tokens > 0
    finally:
        engine.unload()


def test_a_template_chosen_for_the_model_replaces_the_files_own(tmp_path):
    path = write_llama(tmp_path / "llama.gguf", name="test-llama-instruct")  # with a ChatML template
    engine = Engine()
    info = engine.load(path, LoadSettings(n_ctx=512, n_threads=2, speculative="off", chat_template="llama3"))
    try:
        assert info.template_note.startswith("Chat template: llama.cpp's built-in llama3 template")
        prompt = engine.render_prompt(_hi())
        assert prompt.startswith("<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>")
    finally:
        engine.unload()


def test_a_llama_file_without_a_template_takes_its_vocabularys_turn_markers(tmp_path):
    path = write_llama(tmp_path / "base.gguf", chat_template=None)  # vocabulary with <|im_start|>, a base name
    engine = Engine()
    info = engine.load(path, LoadSettings(n_ctx=512, n_threads=2, speculative="off"))
    try:
        assert info.template_note.startswith("A base model, made to continue text, not to chat")
        assert "llama.cpp's built-in chatml template (its vocabulary holds <|im_start|>)" in info.template_note
        assert engine.render_prompt(_hi()).endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    finally:
        engine.unload()


def test_serve_says_the_sentence_after_its_load_line(gemma3_without_template):
    code, lines = serve_until_listening(gemma3_without_template, port=0, speculative="off")
    assert code == 0
    notes = [line for line in lines if "chat template" in line]
    assert notes == ["The file has no chat template: using llama.cpp's built-in gemma template (the gemma3 "
                     "architecture's); another can be picked for this model in the settings."], lines
