"""Replies the scripted OpenAI-compatible server gives in evaluation tests: a right or wrong base
call for an example, and a reviewer answer (``saag_opt.testing.dspy_reply``)."""

from __future__ import annotations

from typing import Any

from saag_opt.data.perturb import gold_calls
from saag_opt.model import Example
from saag_opt.testing import Reply, dspy_reply


def right_call_args(example: Example) -> list[dict[str, Any]]:
    """The gold calls as the wire shows them (OpenAI-safe names)."""
    return [{"name": example.registry.get(call.name).safe_name, "arguments": dict(call.arguments)}  # type: ignore[union-attr]
            for call in gold_calls(example)]


def wrong(example: Example) -> Reply:
    """A wrong answer: a call on irrelevance, a text answer where a call was expected."""
    if example.expect == "no_call":
        return Reply(tool_calls=[{"name": example.registry[0].safe_name, "arguments": {}}])
    return Reply(text="I cannot help with that.")


def right(example: Example) -> Reply:
    """The correct answer: no call on irrelevance, else the gold calls."""
    return Reply(text="No function applies.") if example.expect == "no_call" else Reply(tool_calls=right_call_args(example))


def chat(fields: dict[str, str]) -> Reply:
    """A reviewer predictor's reply with these output fields, as dspy's ChatAdapter writes it."""
    return dspy_reply(fields)
