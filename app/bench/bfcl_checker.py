"""BFCL's verdicts, written for the app: the AST checker of the Berkeley Function Calling Leaderboard
(`bfcl_eval/eval_checker/ast_eval/ast_checker.py`, Apache-2.0) for Python's categories, and its
relevance rule. No Qt.

Not the library: `bfcl-eval` pins numpy 1.26 and pulls pandas, faiss, sentence-transformers and five
vendor SDKs. Its rules are kept to the letter, quirks included (exact types, an int for a float,
strings without case, spaces or `,./-_*^`, `""` making a parameter optional, "variables", parallel
calls in any order, dotted names looked for with underscores), so a score here stands beside the
leaderboard's; each rule: docs/function-calling-bench.md. tests/bench/test_bfcl.py runs BFCL's own
checker on the same outputs (every ground truth and mutations of each): no verdict differs.

A model's output is BFCL's decoded form: a list of `{function_name: {parameter: value}}`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PYTHON_TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list,
                                 "tuple": list, "dict": dict, "any": str}
NESTED = ("array", "tuple")  # their items are type-checked one level down


@dataclass(frozen=True)
class Verdict:
    valid: bool
    reason: str = ""  # in words, for the case's page ("" when valid)
    error_type: str = ""  # BFCL's error type (`simple_function_checker:missing_required`, ...)


OK = Verdict(True)


def _bad(reason: str, error_type: str) -> Verdict:
    return Verdict(False, reason, error_type)


# ----------------------------------------------------------------------------- decoded outputs


def is_call_list(decoded: Any) -> bool:
    """BFCL's `is_function_calling_format_output`: a list of one-key dicts whose value is a dict."""
    return isinstance(decoded, list) and all(
        isinstance(item, dict) and len(item) == 1 and isinstance(next(iter(item.values())), dict)
        for item in decoded)


def is_empty(decoded: Any) -> bool:
    """BFCL's `is_empty_output`: no call at all ([], [{}], or not a list of calls)."""
    return not is_call_list(decoded) or len(decoded) == 0 or (len(decoded) == 1 and len(decoded[0]) == 0)


def check_relevance(decoded: Any, kind: str, decode_error: str = "") -> Verdict:
    """Irrelevance: right when no call was made; relevance: right when one was (`decoded` is None when
    the output could not be read as calls, which counts as no call)."""
    made_call = decoded is not None and not is_empty(decoded)
    if kind == "irrelevance":
        if made_call:
            return _bad("A function was called, and none of the offered functions fits the question.",
                        "irrelevance_error:decoder_success")
        return OK
    if not made_call:
        return _bad(f"No function was called, and the question needs one. {decode_error}".strip(),
                    "relevance_error:decoder_failed")
    return OK


# ----------------------------------------------------------------------------- the AST checker


def standardize(text: str) -> str:
    return re.sub(r"[ \,\.\/\-\_\*\^]", "", text).lower().replace("'", '"')


def _answer_type(acceptable: list[Any]) -> type | None:
    for answer in acceptable:
        if answer != "":
            return type(answer)
    return None


def _type_check(param: str, value: Any, acceptable: list[Any], type_name: str, expected: type,
                nested: type | None) -> tuple[Verdict, bool]:
    """(verdict, is_variable): BFCL's `type_checker`, one level of nesting."""
    answer_type = _answer_type(acceptable)
    is_variable = answer_type is not None and answer_type != expected
    nested_failed = None
    if type(value) is expected:
        if nested is None:
            return OK, is_variable
        for item in acceptable:
            fits = True
            if type(item) is list:
                for element in value:  # type: ignore[attr-defined]
                    inner, _ = _type_check(param, element, item, str(nested), nested, None)
                    if not inner.valid:
                        fits = False
                        break
            if fits:
                return OK, is_variable
        nested_failed = _bad(f"Nested type checking failed for parameter {param!r}. Expected outer type "
                             f"{type_name} with inner type {nested.__name__}. Parameter value: {value!r}.",
                             "type_error:nested")
    if answer_type is not None and type(value) is answer_type:
        # a variable: BFCL lets it through, unless its items already failed (then the verdict stands)
        return nested_failed or OK, True
    return _bad(f"Incorrect type for parameter {param!r}. Expected type {type_name}, got {type(value).__name__}. "
                f"Parameter value: {value!r}.", "type_error:simple"), False


def _string_check(param: str, value: str, acceptable: list[Any]) -> Verdict:
    if standardize(value) not in [standardize(a) for a in acceptable if type(a) is str]:
        return _bad(f"Invalid value for parameter {param!r}: {value!r}. Expected one of {acceptable}. "
                    "Case insensitive.", "value_error:string")
    return OK


def _list_check(param: str, value: list[Any], acceptable: list[Any]) -> Verdict:
    mine = [standardize(v) if type(v) is str else v for v in value]
    theirs = [[standardize(v) if type(v) is str else v for v in answer] for answer in acceptable]
    if mine not in theirs:
        return _bad(f"Invalid value for parameter {param!r}: {value!r}. Expected one of {acceptable}.",
                    "value_error:list/tuple")
    return OK


def _dict_check(value: dict[str, Any], acceptable: list[Any]) -> Verdict:
    """BFCL's `dict_checker`: the value must match one acceptable dict, key by key (flat dicts)."""
    verdict = _bad("", "dict_checker:unclear")
    for answer in acceptable:
        if answer == "":
            continue
        verdict = _bad("", "dict_checker:unclear")
        fits = True
        for key, item in value.items():
            if key not in answer:
                verdict = _bad(f"Unexpected dict key parameter: '{key}'.", "value_error:dict_key")
                fits = False
                break
            mine = standardize(item) if type(item) is str else item
            theirs = [standardize(a) if type(a) is str else a for a in answer[key]]
            if mine not in theirs:
                verdict = _bad(f"Invalid value for parameter {key!r}: {item!r}. Expected one of {theirs}.",
                               "value_error:dict_value")
                fits = False
                break
        for key, options in answer.items():
            if key not in value and "" not in options:
                verdict = _bad(f"Missing dict key parameter: '{key}'.", "value_error:dict_key")
                fits = False
                break
        if fits:
            return OK
    return verdict


def _list_of_dicts_check(value: list[Any], acceptable: list[Any]) -> Verdict:
    verdict = _bad("", "list_dict_checker:unclear")
    for answer in acceptable:
        if len(value) != len(answer):
            verdict = _bad("Wrong number of dictionaries in the list.", "value_error:list_dict_count")
            continue
        fits = True
        for mine, theirs in zip(value, answer, strict=True):
            verdict = _dict_check(mine, [theirs])
            if not verdict.valid:
                fits = False
                break
        if fits:
            return OK
    return verdict


def call_name(name: str, dots_renamed: bool) -> str:
    """The name a function is called by: dots as underscores where the request renamed them."""
    return re.sub(r"\.", "_", name) if dots_renamed and "." in name else name


def check_call(function: dict[str, Any], call: dict[str, Any], answer: dict[str, Any],
               dots_renamed: bool) -> Verdict:
    """BFCL's `simple_function_checker`: one call against one function and its acceptable answer."""
    acceptable: dict[str, list[Any]] = next(iter(answer.values()))
    params = function["parameters"]["properties"]
    name = call_name(function["name"], dots_renamed)
    if name not in call:
        return _bad(f"Function name {name!r} not found in model output.", "simple_function_checker:wrong_func_name")
    args = call[name]
    for param in function["parameters"]["required"]:
        if param not in args:
            return _bad(f"Missing required parameter: {param!r}.", "simple_function_checker:missing_required")
    for param, value in args.items():
        if param not in params or param not in acceptable:
            return _bad(f"Unexpected parameter: {param!r}.", "simple_function_checker:unexpected_param")
        type_name = params[param]["type"]
        expected = PYTHON_TYPES[type_name]
        nested = PYTHON_TYPES[params[param]["items"]["type"]] if type_name in NESTED else None
        if type_name == "tuple" and type(value) is tuple:
            value = list(value)
        if type_name == "float" and type(value) is int:
            value = float(value)
        verdict, is_variable = _type_check(param, value, acceptable[param], type_name, expected, nested)
        if not verdict.valid:
            return verdict
        if not is_variable:
            if expected is dict:
                verdict = _dict_check(value, acceptable[param])
            elif expected is list and nested is dict:
                verdict = _list_of_dicts_check(value, acceptable[param])
            elif expected is str:
                verdict = _string_check(param, value, acceptable[param])
            elif expected is list:
                verdict = _list_check(param, value, acceptable[param])
            else:
                verdict = None  # type: ignore[assignment]
            if verdict is not None:
                if not verdict.valid:
                    return verdict
                continue
        if value not in acceptable[param]:
            return _bad(f"Invalid value for parameter {param!r}: {value!r}. Expected one of {acceptable[param]}.",
                        "value_error:others")
    for param, options in acceptable.items():
        if param not in args and "" not in options:
            return _bad(f"Optional parameter {param!r} not provided and not marked as optional.",
                        "simple_function_checker:missing_optional")
    return OK


def _find(functions: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((f for f in functions if f["name"] == name), None)


def check_parallel(functions: list[dict[str, Any]], output: list[dict[str, Any]], answers: list[dict[str, Any]],
                   dots_renamed: bool) -> Verdict:
    """BFCL's `parallel_function_checker_no_order`: each acceptable call matched by a different output
    call, in any order."""
    if len(output) != len(answers):
        return _bad(f"Wrong number of functions: {len(output)} called, {len(answers)} expected.",
                    "parallel_function_checker_no_order:wrong_count")
    matched: list[int] = []
    for i, answer in enumerate(answers):
        function = _find(functions, next(iter(answer)))
        verdict = None
        misses = []
        for index, call in enumerate(output):
            if index in matched:
                continue
            verdict = check_call(function, call, answer, dots_renamed)  # type: ignore[arg-type]
            if verdict.valid:
                matched.append(index)
                break
            misses.append(f"call {index + 1}: {verdict.reason}")
        if verdict is None or not verdict.valid:
            left = [j + 1 for j in range(len(output)) if j not in matched]
            return _bad(f"No call among {left} matches expected call {i + 1} ({next(iter(answer))}): "
                        + " ".join(misses), "parallel_function_checker_no_order:cannot_find_match")
    return OK


def check_ast(category: str, functions: list[dict[str, Any]], output: list[dict[str, Any]],
              answers: list[dict[str, Any]], dots_renamed: bool = True) -> Verdict:
    """BFCL's `ast_checker` for Python: `output` is the decoded list of calls."""
    if "parallel" in category:
        return check_parallel(functions, output, answers, dots_renamed)
    if "multiple" in category:
        if len(output) != len(answers):
            return _bad(f"Wrong number of functions: {len(output)} called, {len(answers)} expected.",
                        "multiple_function_checker:wrong_count")
        function = _find(functions, next(iter(answers[0])))
        return check_call(function, output[0], answers[0], dots_renamed)  # type: ignore[arg-type]
    if len(output) != 1:
        return _bad(f"Wrong number of functions: {len(output)} called, 1 expected.",
                    "simple_function_checker:wrong_count")
    return check_call(functions[0], output[0], answers[0], dots_renamed)


def check_case(kind: str, category: str, functions: list[dict[str, Any]], decoded: Any,
               answers: list[dict[str, Any]] | None, dots_renamed: bool = True, decode_error: str = "") -> Verdict:
    """A case's verdict as BFCL gives it: `decoded` is the list of calls, or None where the model's output
    could not be read as calls (`decode_error` says why)."""
    if kind != "ast":
        return check_relevance(decoded, kind, decode_error)
    if decoded is None:
        return _bad(f"Invalid syntax. Failed to decode AST. {decode_error}".strip(), "ast_decoder:decoder_failed")
    if not is_call_list(decoded):
        return _bad("Did not output in the specified format.", "ast_decoder:decoder_wrong_output_format")
    assert answers is not None
    return check_ast(category, functions, decoded, answers, dots_renamed)
