"""A request body checked by a Pydantic model, and what it fails on as the server's one 400: BadRequest,
whose message each API puts in its own error shape. No I/O, no Qt.

Each API's body is a model (app/serve/chat_body.py, messages_body.py, responses_body.py) with
`extra="allow"`: a field the model does not declare is kept, for app/serve/unread.py's warning. A
ValidationError becomes one sentence that names the field's path as a client wrote it
("messages[2].content: ..."): a field's own check says its words with `refused` (the whole sentence)
or `refused_here` (said after the path where it failed); Pydantic's own errors (a required field
missing) come out as "path: Pydantic's message" ("max_tokens: Field required").
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

WHOLE, HERE = "clover_whole", "clover_here"
Body = TypeVar("Body", bound=BaseModel)


class BadRequest(Exception):
    """A request the server refuses, in words for the client (`status` 400 unless said)."""

    def __init__(self, message: str, status: int = 400, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.code = status, code


def refused(message: str) -> PydanticCustomError:
    """A check's failure said in these words, whole (they name the field themselves)."""
    return PydanticCustomError(WHOLE, "{message}", {"message": message})


def refused_here(message: str, tail: str = "") -> PydanticCustomError:
    """A check's failure said after the path of what failed it ("messages[2]: " + message); `tail`
    goes on with the path inside the value checked (".content[0]")."""
    return PydanticCustomError(HERE, "{message}", {"message": message, "tail": tail})


def integer(value: Any) -> bool:
    """A JSON integer (true and false are not, though Python's bool is an int)."""
    return isinstance(value, int) and not isinstance(value, bool)


def number_in(value: Any, lo: float, hi: float) -> bool:
    """A JSON number from `lo` to `hi` (true and false are not numbers)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and lo <= value <= hi


def field_path(loc: tuple[int | str, ...]) -> str:
    """A Pydantic location as a client writes it: messages[2].content."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def as_bad_request(exc: ValidationError) -> BadRequest:
    """The first error, in one sentence."""
    error = exc.errors(include_url=False)[0]
    path = field_path(tuple(error["loc"])) + (error.get("ctx") or {}).get("tail", "")
    if error["type"] == WHOLE:
        return BadRequest(error["msg"])
    return BadRequest(f"{path}: {error['msg']}" if path else error["msg"])


def parse(model: type[Body], body: Any, context: dict[str, Any] | None = None) -> Body:
    """`body` as `model`, or BadRequest saying why not."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    try:
        return model.model_validate(body, context=context)
    except ValidationError as exc:
        raise as_bad_request(exc) from None
