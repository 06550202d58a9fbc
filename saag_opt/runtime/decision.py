"""What the guard answers for one set of proposed tool calls: a JSON-serialisable ``Decision``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Action = Literal["allow", "revise", "block"]
ACTIONS: tuple[Action, ...] = ("allow", "revise", "block")


@dataclass(frozen=True)
class Decision:
    """The guard's verdict on the calls an agent proposed.

    Attributes:
        action: ``allow`` (run the calls as proposed), ``revise`` (run ``calls`` instead) or
            ``block`` (run nothing; give ``feedback`` to the model).
        calls: what to execute, ``[{"id", "name", "arguments": dict}]``; None on block. A revised
            call keeps the id of the proposed call at its position.
        feedback: text for the model: why its calls were revised or blocked (None on a clean allow).
        reason: one line saying how the decision was reached (gate, reviewer, stage 1-2 rule,
            ``on_error``), for logs.
        report: the gold-free SAAG cascade report of the proposed calls (None when there were none).
        reviewed: True when an LLM reviewer gave a usable verdict; False when the gate (or a
            reviewer failure handled by ``on_error``) decided without one.
        cost_usd: dollars spent on LM calls for this decision (0 for a cache hit or a local model).
        latency_s: wall seconds the decision took.
        error: the reviewer failure (timeout, unreachable server, unusable reply) when one occurred.
        cached: the decision was replayed from the review cache.
        revision_report: the cascade report of the revised calls (``revise``, or a failed revision).
        rounds: each review round: ``{"calls", "verdict", "feedback"}``.
    """

    action: Action
    calls: list[dict[str, Any]] | None
    feedback: str | None
    reason: str
    report: dict[str, Any] | None = None
    reviewed: bool = False
    cost_usd: float = 0.0
    latency_s: float = 0.0
    error: str | None = None
    cached: bool = False
    revision_report: dict[str, Any] | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS}, got {self.action!r}")
        if (self.calls is None) != (self.action == "block"):
            raise ValueError("calls is None exactly when the action is block")

    @property
    def allowed(self) -> bool:
        """True when something runs (allow or revise)."""
        return self.action != "block"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return asdict(self)

    def to_json(self) -> str:
        """The decision as one JSON line."""
        return json.dumps(self.to_dict(), ensure_ascii=False, default=str)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        """Inverse of ``to_dict`` (unknown keys are ignored, so older cache entries still load)."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def openai_tool_calls(self) -> list[dict[str, Any]]:
        """``calls`` in OpenAI wire format (``arguments`` as a JSON string); [] on block."""
        return [{"id": call.get("id") or f"call_{index}", "type": "function",
                 "function": {"name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}
                for index, call in enumerate(self.calls or [])]


__all__ = ["ACTIONS", "Action", "Decision"]
