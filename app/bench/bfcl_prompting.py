"""BFCL's prompt mode, for models whose chat template cannot be given tools: the functions go in
BFCL's default system prompt and the model answers with Python calls, `[f(a=1), g(b="x")]`, read
back by BFCL's decoder. No Qt.

This is how the leaderboard runs every model it marks "(Prompt)": the system prompt is BFCL's
default (`ret_fmt=python&tool_call_tag=False&func_doc_fmt=json&prompt_fmt=plaintext&style=classic`,
`formulate_system_prompt`), the decoder its `default_decode_ast_prompting` (Python's own parser,
never `eval` of the model's text: BFCL evaluates an arithmetic argument such as `10**6` with `eval`,
which runs anything written there; here the same arithmetic is computed on numbers and strings
only, and a lambda is a decode failure). tests/bench/test_bfcl.py compares both with BFCL's.
"""

from __future__ import annotations

import ast
import json
import operator
from typing import Any

_PERSONA = "You are an expert in composing functions."
_TASK = ("You are given a question and a set of possible functions. Based on the question, you will need to make one "
         "or more function/tool calls to achieve the purpose. If none of the functions can be used, point it out. If "
         "the given question lacks the parameters required by the function, also point it out.")
_FORMAT = "[func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]"
_CALLS = ("You should only return the function calls in your response.\n\nIf you decide to invoke any of the "
          f"function(s), you MUST put it in the format of {_FORMAT}.  You SHOULD NOT include any other text in the "
          "response.")
_TURNS = ("At each turn, you should try your best to complete the tasks requested by the user within the current turn. "
          "Continue to output functions to call until you have fulfilled the user's request to the best of your "
          "ability. Once you have no more functions to call, the system will consider the current turn complete and "
          "proceed to the next turn or task.")


def system_prompt(functions: list[dict[str, Any]]) -> str:
    """BFCL's default system prompt for these function docs (with the language note already on them)."""
    tools = f"Here is a list of functions in json format that you can invoke.\n{json.dumps(functions, indent=4)}\n"
    return f"{_PERSONA}{_TASK}\n\n{_CALLS}\n\n{_TURNS}\n\n{tools}"


def with_system_prompt(messages: list[dict[str, Any]], functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL's `system_prompt_pre_processing_chat_model`: the prompt first, before a system message the
    case has."""
    out = [dict(m) for m in messages]
    prompt = system_prompt(functions)
    if out and out[0].get("role") == "system":
        out[0]["content"] = prompt + "\n\n" + str(out[0].get("content", ""))
    else:
        out.insert(0, {"role": "system", "content": prompt})
    return out


class DecodeError(ValueError):
    pass


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def _arithmetic(node: ast.BinOp) -> Any:
    left, right = _value(node.left), _value(node.right)
    op = _OPERATORS.get(type(node.op))
    if op is None or not all(isinstance(v, (int, float, str)) for v in (left, right)):
        raise DecodeError(f"not a constant expression: {ast.unparse(node)[:60]}")
    if op is operator.pow and (not isinstance(right, (int, float)) or abs(right) > 64):
        raise DecodeError(f"an exponent out of range: {ast.unparse(node)[:60]}")
    if op is operator.mul and any(isinstance(v, int) and v > 10_000 for v in (left, right)) \
            and any(isinstance(v, str) for v in (left, right)):
        raise DecodeError(f"a string repeated too often: {ast.unparse(node)[:60]}")
    try:
        return op(left, right)
    except (TypeError, ValueError, ArithmeticError, OverflowError) as exc:
        raise DecodeError(f"{ast.unparse(node)[:60]}: {exc}") from None


def _value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
        return -node.operand.value  # type: ignore[operator]  # BFCL negates whatever the operator (`not x`, `+x` included)
    if isinstance(node, ast.List):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Dict):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, ast.BinOp):
        return _arithmetic(node)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return ast.unparse(node) if not node.keywords else _call(node)
    if isinstance(node, ast.Tuple):
        return tuple(_value(v) for v in node.elts)
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    raise DecodeError(f"Unsupported AST type: {type(node)}")


def _call(node: ast.Call) -> dict[str, Any]:
    parts = []
    func: ast.AST = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return {".".join(reversed(parts)): {kw.arg: _value(kw.value) for kw in node.keywords}}


def decode(text: str) -> list[dict[str, Any]]:
    """BFCL's `default_decode_ast_prompting` for Python: the calls in `[f(a=1), ...]` (brackets added
    where the model left them out); a DecodeError where the text is not such a list."""
    body = text.strip("`\n ")
    if not body.startswith("["):
        body = "[" + body
    if not body.endswith("]"):
        body = body + "]"
    try:
        tree = ast.parse(body.strip().strip("'"), mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise DecodeError(f"not Python calls: {exc}") from None
    if isinstance(tree.body, ast.Call):
        return [_call(tree.body)]
    elements = getattr(tree.body, "elts", None)
    if elements is None:
        raise DecodeError(f"not a list of calls: {type(tree.body).__name__}")
    out = []
    for element in elements:
        if not isinstance(element, ast.Call):
            raise DecodeError(f"not a call: {ast.unparse(element)[:60]}")
        out.append(_call(element))
    return out
