"""One thinking control for every API the server speaks: off, on, or on with a budget in reasoning
tokens (past it the engine forces the end of thinking). Each API's own field maps onto it here:
Anthropic's `thinking` and `output_config.effort`, Responses' `reasoning.effort`, chat completions'
`reasoning_effort` and `chat_template_kwargs.enable_thinking`. No I/O, no Qt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# effort -> reasoning tokens: 0 is off, None is on without a limit
EFFORT_BUDGET: dict[str, int | None] = {"none": 0, "minimal": 0, "low": 1024, "medium": 4096, "high": 16384,
                                        "xhigh": None, "max": None}


@dataclass(frozen=True)
class Thinking:
    enabled: bool | None = None  # None: the chat template's own default (the client said nothing)
    budget: int | None = None  # with enabled: reasoning tokens before the end of thinking is forced


def from_effort(effort: Any, where: str) -> Thinking:
    """An effort word as the control; ValueError naming `where` for one that is not known."""
    if not isinstance(effort, str) or effort not in EFFORT_BUDGET:
        raise ValueError(f"{where} must be one of {', '.join(EFFORT_BUDGET)}")
    budget = EFFORT_BUDGET[effort]
    return Thinking(False) if budget == 0 else Thinking(True, budget)


def from_budget(tokens: Any, where: str) -> Thinking:
    """A budget in tokens: 0 is off."""
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        raise ValueError(f"{where} must be a non-negative integer (tokens)")
    return Thinking(False) if tokens == 0 else Thinking(True, tokens)
