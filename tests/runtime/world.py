"""A scripted reviewer + reviser for runtime-guard tests: one OpenAI-compatible server on 127.0.0.1.

``ScriptedWorld`` tells the reviser (the base agent's code path), which gets ``revision``, from the
dspy reviewer, which gets the verdict.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from saag_opt.testing import Fault, Reply, ScriptedWorld, dspy_reply
from saag_opt.testing.scripted_world import BaseRequest, ReviewRequest
from tests.conftest import requires

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "city name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "send_email", "description": "Send an email",
        "parameters": {"type": "object", "properties": {
            "to": {"type": "string"}, "body": {"type": "string"}}, "required": ["to", "body"]}}},
]
MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What's the weather in Paris?"}]


def openai_call(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    """An OpenAI ``tool_calls`` item (``arguments`` a JSON string unless already a string)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def verdict(error: bool, feedback: str = "") -> Reply:
    """The review predictor's reply (for a script that answers without ``ScriptedWorld``)."""
    return dspy_reply({"error": error, "feedback": feedback})


@dataclass
class ReviewWorld(ScriptedWorld):
    """Scripted behaviour: the reviewer's verdict and the reviser's calls (``None`` = no call)."""

    error: bool = False
    feedback: str = ""
    revision: list[dict[str, Any]] | None = field(default_factory=lambda: [
        {"name": "get_weather", "arguments": {"city": "Paris"}}])
    reviewer_reply: Reply | Fault | None = None
    reviews: int = 0
    revisions: int = 0

    def __post_init__(self) -> None:
        ScriptedWorld.__init__(self)

    def base(self, request: BaseRequest) -> Reply:
        """The reviser (the base agent's code path): its calls, or a text answer."""
        self.revisions += 1
        return Reply(text="No function applies.") if self.revision is None else Reply(tool_calls=self.revision)

    def review(self, request: ReviewRequest) -> Reply | Fault | tuple[bool, str]:
        """The reviewer's verdict."""
        self.reviews += 1
        return self.reviewer_reply or (self.error, self.feedback)


def needs(module: str, extra: str) -> pytest.MarkDecorator:
    """``requires`` for an adapter's framework: skipped locally without it, a failure under CI=true."""
    missing = None if importlib.util.find_spec(module) else f"{module} is not installed (pip install 'saag-opt[{extra}]')"
    return requires(missing)
