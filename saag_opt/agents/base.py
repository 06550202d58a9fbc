"""The base tool-calling agent: messages + registry -> a ``Prediction`` (docs/design.md §5).

It is *frozen* during optimization: its system prompt is a module constant whose hash is part of
every base-prediction cache key, and it is never a GEPA component. It sees only
``example.messages`` and ``example.registry`` - never ``gold`` or ``expect``.

Two output modes:
- ``native``: OpenAI tool calling (OpenAI and OpenAI-compatible servers). Tool names are sent in
  their OpenAI-safe spelling and mapped back with ``Registry.resolve``.
- ``json``: the embedded llama.cpp model, whose tool-choice parsing is unreliable; the reply is
  constrained by a JSON schema ``{"calls": [anyOf over the registry]}`` whose array may be empty,
  so abstaining (irrelevance) stays possible.

Reviewer feedback is replayed the way the Reinforced Agent paper does it: the previous tentative
call is shown as assistant content and the feedback follows as a system message.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from saag_opt.agents.conversation import StepExample
from saag_opt.atomic import JsonShelf
from saag_opt.lm import ModelSpec, chat_completion, open_lm, parse_model_spec
from saag_opt.lm.latency import lm_clock
from saag_opt.model import Example, Prediction, ToolCall, canonical_json
from saag_opt.parse import parse_output

if TYPE_CHECKING:
    from saag_opt.lm import CostLedger, ModelSpec

AgentMode = Literal["auto", "native", "json"]

BASE_SYSTEM_PROMPT = (
    "You are a function-calling assistant. Answer the user's request by calling the provided "
    "functions with arguments taken from the request. Make every call the request needs, in one "
    "turn. Use only the functions provided and only their documented parameters. If none of the "
    "functions can serve the request, or required information is missing, do not call any function."
)
"""Fixed system prompt of the base agent (never optimized)."""

CONVERSATION_SYSTEM_PROMPT = (
    "You are a function-calling assistant in a conversation with a user. Serve the user's latest request "
    "by calling the provided functions with arguments taken from the conversation and from the results of "
    "earlier calls. You may call functions over several steps: after your calls run you see their results "
    "and may call again; when the request is done, reply in text without calling a function. Use only the "
    "functions provided and only their documented parameters. If none of the functions can serve the "
    "request, or required information is missing, do not call any function."
)
"""The base agent's fixed system prompt inside a conversation (a ``StepExample``, docs/design.md §18):
``BASE_SYSTEM_PROMPT`` asks for every call "in one turn", which a multi-step turn contradicts. A
separate constant, so single-call prompts (and every cache key built on them) keep their bytes."""

JSON_MODE_SUFFIX = (
    "\n\nReply with a single JSON object {\"calls\": [{\"name\": <function name>, \"arguments\": "
    "{...}}, ...]}. Use an empty list {\"calls\": []} when no function should be called.\n\n"
    "Available functions:\n"
)
"""Appended in ``json`` mode, followed by the function documentation."""

RETRY_NUDGE = ("Your previous reply could not be read as function calls. Reply again with the "
               "function calls only, in the required format.")
"""System message added on a retry after an unreadable reply (also changes the LM cache key)."""

REVISION_INSTRUCTION = ("Revise your function calls accordingly and answer with the calls only; if no function "
                        "should be called, answer without a call.")
"""Follows the feedback in every revision turn (system message). Why the second clause: a reviewer may
find that no function fits (BFCL irrelevance), and "the calls only" alone reads as "make a call".
Not part of ``BASE_PROMPT_HASH`` (round-0 proposals never see it, so base-prediction cache keys keep their
bytes); editing it changes the LM request, hence the LM-cache key, of every revision (tests/agents/test_base.py
pins the text, so a change is deliberate)."""

BASE_PROMPT_HASH = hashlib.sha256(
    (BASE_SYSTEM_PROMPT + JSON_MODE_SUFFIX + RETRY_NUDGE).encode()).hexdigest()[:16]
"""Part of every base-prediction cache key: editing the prompt invalidates old entries."""

CONVERSATION_PROMPT_HASH = hashlib.sha256(CONVERSATION_SYSTEM_PROMPT.encode()).hexdigest()[:16]
"""Added to the base-prediction cache key of a conversation step (single-call keys are unchanged)."""


def system_prompt(example: Example) -> str:
    """The fixed system prompt for ``example``: the conversation one for a step of an episode."""
    return CONVERSATION_SYSTEM_PROMPT if isinstance(example, StepExample) else BASE_SYSTEM_PROMPT


@dataclass(frozen=True, slots=True)
class FeedbackTurn:
    """One review round as the base agent sees it: its previous tentative call and the feedback."""

    previous: Prediction
    feedback: str


@dataclass(frozen=True, slots=True)
class Proposal:
    """A prediction plus what it cost; ``cached`` proposals report the cost of the original call."""

    prediction: Prediction
    seconds: float = 0.0
    tokens: int = 0
    attempts: int = 1
    cached: bool = False
    temperature: float | None = None
    untimed: int = 0
    """LM replies replayed from the cache with an unknown original time (``seconds`` is then a lower bound)."""


def render_calls_json(prediction: Prediction) -> str:
    """The calls as a JSON list (what the agent is shown as its own previous answer)."""
    return json.dumps([c.to_dict() for c in prediction.calls], ensure_ascii=False)


def registry_json_schema(example: Example) -> dict[str, Any]:
    """``{"calls": [anyOf per tool]}`` for constrained decoding; the list may be empty."""
    options = []
    for tool in example.registry:
        params = tool.to_openai_tool()["function"]["parameters"]
        options.append({"type": "object",
                        "properties": {"name": {"type": "string", "enum": [tool.name]}, "arguments": params},
                        "required": ["name", "arguments"]})
    item: dict[str, Any] = {"anyOf": options} if options else {"type": "object"}
    return {"type": "object", "properties": {"calls": {"type": "array", "items": item}}, "required": ["calls"]}


def _tool_docs(example: Example) -> str:
    return json.dumps([t.to_openai_tool()["function"] | {"name": t.name} for t in example.registry],
                      ensure_ascii=False, indent=1)


def _plain_message(message: Mapping[str, Any]) -> dict[str, Any]:
    return {"role": str(message.get("role", "user")), "content": message.get("content") or ""}


class BaseAgent:
    """The frozen tool-calling agent.

    Args:
        lm_or_spec: a ``ModelSpec`` or spec string (``gpt-4o``, ``local``, ``openai/m@URL``; the LM
            is opened once here) or a ``dspy.LM`` (``saag_opt.lm.open_lm``'s ``SaagLM`` carries its spec).
        ledger: cost ledger the calls are booked on (role ``base``).
        mode: ``native`` tool calls, ``json`` constrained output, or ``auto`` (json for ``local``).
        max_attempts: tries per proposal when the reply is unreadable (>= 1).
        temperature: default sampling temperature (the paper uses 0).
    """

    role = "base"

    def __init__(self, lm_or_spec: Any, *, ledger: CostLedger | None = None, mode: AgentMode = "auto",
                 max_attempts: int = 3, temperature: float = 0.0) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if isinstance(lm_or_spec, (str, ModelSpec)):
            self.spec: ModelSpec | None = parse_model_spec(lm_or_spec)
            self.lm: Any = open_lm(self.spec, role=self.role, ledger=ledger, temperature=temperature)
        else:
            self.spec, self.lm = getattr(lm_or_spec, "spec", None), lm_or_spec
        native = getattr(self.spec, "native_tools", True)
        self.mode: Literal["native", "json"] = ("native" if native else "json") if mode == "auto" else mode
        self.ledger = ledger
        self.max_attempts = max_attempts
        self.temperature = temperature

    @property
    def label(self) -> str:
        """Stable model label for cache keys and reports."""
        if self.spec is not None:
            return self.spec.label
        return str(getattr(self.lm, "model", None) or type(self.lm).__name__)

    @property
    def prompt_hash(self) -> str:
        """Hash of the fixed prompt and output mode (part of the base-prediction cache key)."""
        return f"{BASE_PROMPT_HASH}-{self.mode}"

    def build_messages(self, example: Example, feedback: Sequence[FeedbackTurn] = ()) -> list[dict[str, Any]]:
        """System prompt + the example's messages + one (assistant, system) pair per feedback turn."""
        system = system_prompt(example) + (JSON_MODE_SUFFIX + _tool_docs(example) if self.mode == "json" else "")
        messages = [{"role": "system", "content": system}]
        messages += [_plain_message(m) for m in example.messages]
        for turn in feedback:
            shown = (f"Tentative function calls: {render_calls_json(turn.previous)}" if turn.previous.calls
                     else f"(no function call) {turn.previous.raw or ''}".strip())
            messages.append({"role": "assistant", "content": shown})
            messages.append({"role": "system",
                             "content": f"Reviewer feedback: {turn.feedback}\n{REVISION_INSTRUCTION}"})
        return messages

    def propose(self, example: Example, *, feedback: Sequence[FeedbackTurn | tuple[Prediction, str]] = (),
                temperature: float | None = None) -> Proposal:
        """One (possibly revised) prediction; unreadable replies are retried, then kept as ``unparsable``.

        Raises:
            ModelUnavailableError: the model cannot be reached (missing key, dead server).
        """
        turns = [t if isinstance(t, FeedbackTurn) else FeedbackTurn(*t) for t in feedback]
        temp = self.temperature if temperature is None else temperature
        messages = self.build_messages(example, turns)
        tokens, last, attempts = 0, Prediction(raw=None, status="unparsable"), 0
        with lm_clock() as clock:  # a reply replayed from the LM cache counts at its original time
            while attempts < self.max_attempts:
                attempts += 1
                result = self._call(example, messages, temp)
                tokens += _total_tokens(getattr(result, "usage", None))
                last = self._read(example, result)
                if last.status != "unparsable":
                    break
                messages = messages + [{"role": "assistant", "content": last.raw or ""},
                                       {"role": "system", "content": RETRY_NUDGE}]
        return Proposal(last, clock.seconds, tokens, attempts, False, temp, clock.untimed)

    def _call(self, example: Example, messages: list[dict[str, Any]], temperature: float) -> Any:
        if self.mode == "json":
            schema = registry_json_schema(example)
            return chat_completion(self.lm, messages, temperature=temperature, role=self.role,
                                   ledger=self.ledger, response_format={
                                       "type": "json_schema",
                                       "json_schema": {"name": "calls", "schema": schema}})
        tools = [t.to_openai_tool() for t in example.registry]
        return chat_completion(self.lm, messages, tools=tools or None, tool_choice="auto" if tools else None,
                               temperature=temperature, role=self.role, ledger=self.ledger)

    def _read(self, example: Example, result: Any) -> Prediction:
        text = getattr(result, "text", None)
        if self.mode == "native" and getattr(result, "tool_calls", None):
            return _read_tool_calls(example, result.tool_calls, text)
        if self.mode == "json" and text:
            parsed = _read_json_calls(example, text)
            if parsed is not None:
                return parsed
        return _read_text(example, text)


def _total_tokens(usage: Any) -> int:
    if isinstance(usage, Mapping):
        total = usage.get("total_tokens")
        if total is None:
            total = (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0)
        return int(total or 0)
    return int(getattr(usage, "total_tokens", 0) or 0)


def _resolved(example: Example, name: Any) -> str | None:
    if not isinstance(name, str):
        return None
    return example.registry.resolve(name) or name  # keep unknown names: SAAG stage 1 must see them


def _read_tool_calls(example: Example, raw_calls: Sequence[Mapping[str, Any]], text: str | None) -> Prediction:
    calls = []
    for raw in raw_calls:
        fn = raw["function"] if isinstance(raw.get("function"), Mapping) else raw
        try:
            call = ToolCall.from_dict({"name": fn.get("name"), "arguments": fn.get("arguments") or {}})
        except (ValueError, TypeError):
            return Prediction(raw=json.dumps(list(raw_calls), default=str), status="unparsable")
        calls.append(ToolCall(_resolved(example, call.name), call.arguments))
    return Prediction(tuple(calls), raw=text or json.dumps([c.to_dict() for c in calls]), status="ok")


def _read_json_calls(example: Example, text: str) -> Prediction | None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, Mapping) or not isinstance(data.get("calls"), list):
        return None
    calls = []
    for item in data["calls"]:
        if not isinstance(item, Mapping) or not isinstance(item.get("arguments", {}), Mapping):
            return None
        calls.append(ToolCall(_resolved(example, item.get("name")), dict(item.get("arguments") or {})))
    return Prediction(tuple(calls), raw=text, status="ok" if calls else "empty")


def _read_text(example: Example, text: str | None) -> Prediction:
    """Free text: calls written out (JSON, <tool_call>, python style) or an abstention."""
    if not text or not text.strip():
        return Prediction(raw=text or "", status="empty")
    parsed = parse_output(text)
    calls = tuple(ToolCall(_resolved(example, c.name), c.arguments) for c in parsed.calls)
    return Prediction(calls, raw=text, status=parsed.status)


# -- base-prediction cache -------------------------------------------------------------------------


def example_fingerprint(example: Example) -> str:
    """Hash of what the agent sees (messages + registry), never of gold."""
    payload = canonical_json([list(example.messages), example.registry.to_dicts()])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass
class BasePredictionCache:
    """On-disk cache of round-0 proposals, shared by every mechanism and prompt version.

    Keyed by base model label, base-agent prompt hash, example id + fingerprint and temperature; one
    small JSON file per entry written atomically, so concurrent workers and runs can share it.
    ``directory=None`` keeps entries in memory only.
    """

    directory: Path | None = None
    _memory: dict[str, Proposal] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _shelf: JsonShelf | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self._shelf = JsonShelf(self.directory) if self.directory is not None else None

    def key(self, agent: BaseAgent, example: Example, temperature: float | None) -> str:
        """Cache key (a hex digest)."""
        temp = agent.temperature if temperature is None else temperature
        prompt = agent.prompt_hash
        if isinstance(example, StepExample):  # the conversation prompt (single-call keys keep their bytes)
            prompt = f"{prompt}-{CONVERSATION_PROMPT_HASH}"
        raw = canonical_json([agent.label, prompt, example.id, example_fingerprint(example), float(temp)])
        return hashlib.sha256(raw.encode()).hexdigest()

    def get_or_propose(self, agent: BaseAgent, example: Example, temperature: float | None = None) -> Proposal:
        """The cached proposal, or a fresh one that is then stored.

        Failures are not stored, and a proposal timed from LM replies of unknown original time is kept
        in memory only: on disk its ``seconds`` would be a lower bound that no later run could see.
        """
        key = self.key(agent, example, temperature)
        hit = self._load(key)
        if hit is not None:
            return hit
        proposal = agent.propose(example, temperature=temperature)
        self._store(key, proposal)
        return proposal

    def _load(self, key: str) -> Proposal | None:
        with self._lock:
            if key in self._memory:
                return _as_cached(self._memory[key])
        data = self._shelf.load(key) if self._shelf is not None else None
        if data is None:
            return None
        try:
            proposal = _proposal_from_dict(data)
        except (ValueError, KeyError, TypeError):
            return None  # a corrupt entry is recomputed and overwritten
        with self._lock:
            self._memory[key] = proposal
        return _as_cached(proposal)

    def _store(self, key: str, proposal: Proposal) -> None:
        with self._lock:
            self._memory[key] = proposal
        if self._shelf is not None and not proposal.untimed:  # else its seconds would stay a lower bound on disk
            self._shelf.save(key, _proposal_to_dict(proposal))


def _as_cached(proposal: Proposal) -> Proposal:
    return Proposal(proposal.prediction, proposal.seconds, proposal.tokens, proposal.attempts, True,
                    proposal.temperature)


def _proposal_to_dict(p: Proposal) -> dict[str, Any]:
    return {"calls": [c.to_dict() for c in p.prediction.calls], "raw": p.prediction.raw,
            "status": p.prediction.status, "seconds": p.seconds, "tokens": p.tokens, "attempts": p.attempts,
            "temperature": p.temperature}


def _proposal_from_dict(data: Mapping[str, Any]) -> Proposal:
    calls = tuple(ToolCall(c.get("name"), dict(c.get("arguments") or {})) for c in data["calls"])
    pred = Prediction(calls, raw=data.get("raw"), status=data["status"])
    return Proposal(pred, float(data["seconds"]), int(data["tokens"]), int(data["attempts"]), False,
                    data.get("temperature"))
