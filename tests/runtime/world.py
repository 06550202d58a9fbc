"""A scripted reviewer + reviser for runtime-guard tests: one OpenAI-compatible server on 127.0.0.1.

Requests with ``tools`` (or a JSON schema) come from the reviser (the base agent's code path) and
get ``revision``; other requests come from the dspy reviewer and get a ChatAdapter verdict.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from saag_opt.testing import Fault, Reply
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
    """A dspy ChatAdapter reply of the review predictor."""
    return Reply(text=f"[[ ## error ## ]]\n{error}\n\n[[ ## feedback ## ]]\n{feedback}\n\n[[ ## completed ## ]]")


@dataclass
class ReviewWorld:
    """Scripted behaviour: the reviewer's verdict and the reviser's calls (``None`` = no call)."""

    error: bool = False
    feedback: str = ""
    revision: list[dict[str, Any]] | None = field(default_factory=lambda: [
        {"name": "get_weather", "arguments": {"city": "Paris"}}])
    reviewer_reply: Reply | Fault | None = None
    reviews: int = 0
    revisions: int = 0

    def __call__(self, request: dict) -> Reply | Fault:
        if "tools" in request or "response_format" in request:
            self.revisions += 1
            if self.revision is None:
                return Reply(text="No function applies.")
            return Reply(tool_calls=self.revision)
        self.reviews += 1
        return self.reviewer_reply or verdict(self.error, self.feedback)



def needs(module: str, extra: str) -> pytest.MarkDecorator:
    """``requires`` for an adapter's framework: skipped locally without it, a failure under CI=true."""
    missing = None if importlib.util.find_spec(module) else f"{module} is not installed (pip install 'saag-opt[{extra}]')"
    return requires(missing)
