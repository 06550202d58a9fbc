"""What the guard answers for one set of proposed tool calls: a JSON-serialisable ``Decision``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, get_args

from saag_opt.choices import GuardAction as Action

ACTIONS: tuple[Action, ...] = get_args(Action)


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
        latency_s: wall seconds the decision took; an LM reply replayed from the LM cache counts at the time
            of its original call (``saag_opt.lm.latency``).
        error: the reviewer failure (timeout, unreachable server, unusable reply) when one occurred.
        cached: the decision was replayed from the review cache.
        revision_report: the cascade report of the revised calls (``revise``, or a failed revision).
        rounds: each review round: ``{"calls", "verdict", "feedback"}``.
        provenance: on a block by the injection check (``saag.injection``: the marker rules and the
            data-flow policy), where each argument value came from and the findings (which value, from
            which tool text, which rule); None otherwise, and then absent from ``to_dict``, so a decision
            without tool results serialises as before.
        exception: on a call set that runs only because the user's request hands the task over to
            tool text ("do the tasks on my TODO list"): the counted exception of the data-flow policy
            (``{"rule": "delegated", "why", "waived": [the findings it waived], "calls": [indexes]}``);
            None otherwise, and then absent from ``to_dict``.
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
    provenance: dict[str, Any] | None = None
    exception: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS}, got {self.action!r}")
        if (self.calls is None) != (self.action == "block"):
            raise ValueError("calls is None exactly when the action is block")

    @classmethod
    def deferred(cls, action: Action, calls: list[dict[str, Any]] | None, reason: str,
                 build: Callable[[], tuple[str | None, dict[str, Any] | None]], **fields: Any) -> Decision:
        """A decision whose ``feedback`` and ``report`` are built by ``build()`` on first read.

        Why: the gate path decides from the cascade's metrics alone, and rendering the report and
        the psi texts costs more than the cascade itself (experiments/bench/guard_overhead.py); an
        agent loop that only reads ``action`` and ``calls`` never pays for them. The decision reads,
        compares, prints and serialises exactly as if they had been built eagerly.
        """
        state = {**_DEFAULTS, "rounds": [], "action": action, "calls": calls, "reason": reason, **fields}
        del state["feedback"], state["report"]
        state["_deferred"] = build
        decision = object.__new__(cls)  # the frozen __init__ sets each field separately: the hot path skips it
        object.__setattr__(decision, "__dict__", state)
        return decision

    def __getattr__(self, name: str) -> Any:
        """Build deferred ``feedback``/``report`` on first access (only reached when they are missing)."""
        if name in ("feedback", "report"):
            state = self.__dict__
            build = state.get("_deferred")
            if build is not None:
                feedback, report = build()
                state["feedback"], state["report"] = feedback, report  # stored before the deferral is dropped
                state.pop("_deferred", None)
                return state[name]
            if name in state:  # another thread finished meanwhile
                return state[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def allowed(self) -> bool:
        """True when something runs (allow or revise)."""
        return self.action != "block"

    def noted(self, exception: dict[str, Any] | None) -> Decision:
        """This decision with ``exception`` set (itself when None); a deferred one stays deferred."""
        if exception is None:
            return self
        copy = object.__new__(type(self))
        object.__setattr__(copy, "__dict__", {**self.__dict__, "exception": exception})
        return copy

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (``provenance`` and ``exception`` only when there is one)."""
        data = asdict(self)
        for optional in ("provenance", "exception"):
            if data[optional] is None:
                del data[optional]
        return data

    def __getstate__(self) -> dict[str, Any]:
        """Pickle and copy the built fields, never the deferral."""
        self.report  # noqa: B018 - reading builds them
        return self.__dict__

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


_DEFAULTS: dict[str, Any] = {f.name: (f.default_factory() if f.default_factory is not MISSING else f.default)  # type: ignore[misc]
                             for f in fields(Decision) if f.name not in ("action", "calls", "reason")}
del Decision.report  # the default lives in __init__; a missing key must reach __getattr__

__all__ = ["ACTIONS", "Action", "Decision"]
