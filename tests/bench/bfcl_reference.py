"""BFCL's own code, for the tests to compare the app's with: the registry package `bfcl-eval`
(installed for the tests only, without its dependencies, by packaging/bootstrap.py).

Its checker and helpers are plain Python, but the modules around them import the leaderboard's
model registry (every vendor SDK), tree-sitter's Java and JavaScript parsers and tenacity at import
time. The
pieces compared here use none of those, so the loader puts empty stand-ins in their place before
importing, and says which: a stand-in that a compared function did reach would fail the test with an
AttributeError, never pass it.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

STAND_INS = ("bfcl_eval.constants.model_config", "bfcl_eval.model_handler.parser.java_parser",
             "bfcl_eval.model_handler.parser.js_parser", "tenacity")


class _Config:
    def __init__(self, underscore_to_dot: bool) -> None:
        self.underscore_to_dot = underscore_to_dot


# model names the checker is called with: an FC run renames dots (as BFCL's OpenAI-style handlers do),
# a prompt-mode run keeps them
MODEL_CONFIG_MAPPING = {"clover-fc": _Config(True), "clover-prompt": _Config(False)}


def _stand_in(name: str) -> None:
    if name in sys.modules:
        return
    if not name.startswith("bfcl_eval."):
        try:
            importlib.import_module(name)
            return  # the real one is installed: use it
        except ImportError:
            pass
    module = types.ModuleType(name)
    if name == "bfcl_eval.constants.model_config":
        module.MODEL_CONFIG_MAPPING = MODEL_CONFIG_MAPPING  # type: ignore[attr-defined]
    elif name == "tenacity":
        def _decorator(*_a, **_k):
            return lambda fn: fn
        for attr in ("retry", "retry_if_exception_message", "retry_if_exception_type", "stop_after_attempt",
                     "wait_random_exponential"):
            setattr(module, attr, _decorator)
    else:  # Java's and JavaScript's call parsers (tree-sitter): the Python categories never reach them
        def _not_here(*_a, **_k):
            raise NotImplementedError(f"{name} is a stand-in in the tests")
        module.parse_java_function_call = module.parse_javascript_function_call = _not_here  # type: ignore[attr-defined]
    sys.modules[name] = module


def bfcl() -> types.SimpleNamespace:
    """BFCL's checker, its helpers and its data folder; the test is skipped where the package is not
    installed (a set-up older than this test: `python3 packaging/bootstrap.py test` installs it)."""
    try:
        import bfcl_eval  # noqa: F401
    except ImportError:
        pytest.skip("bfcl-eval is not installed (the test set-up installs it: packaging/bootstrap.py TEST_NO_DEPS)")
    for name in STAND_INS:
        _stand_in(name)
    ast_checker = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
    enums = importlib.import_module("bfcl_eval.constants.enums")
    utils = importlib.import_module("bfcl_eval.utils")
    handler_utils = importlib.import_module("bfcl_eval.model_handler.utils")
    data = Path(importlib.import_module("bfcl_eval").__file__).parent / "data"
    return types.SimpleNamespace(ast_checker=ast_checker.ast_checker, Language=enums.Language,
                                 ModelStyle=enums.ModelStyle, utils=utils, handler_utils=handler_utils, data=data)
