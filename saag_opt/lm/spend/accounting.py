"""Cost accounting per role (base, reviewer, reflection, ...).

Why our own ledger: dspy's usage tracker is keyed by model and context, but a run needs spend per
*role* (GEPA cannot cap the reflection LM, so we count it), and cache hits must show up as free
calls rather than disappear. Prices come from dspy's bundled price map
(``dspy.clients.model_metadata``, honouring ``LITELLM_LOCAL_MODEL_COST_MAP``); local and compatible
servers cost 0 $ but their tokens and seconds are still counted. The ledger holds numbers and model
labels only, never keys or prompts.
"""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from saag_opt.lm.specs import ModelSpec

if TYPE_CHECKING:
    from saag_opt.lm.spend.cap import SpendCap


@dataclass
class RoleAccount:
    """Running totals for one role; ``dollars`` excludes calls whose price is unknown (``unpriced_calls``)."""

    calls: int = 0
    cache_hits: int = 0
    errors: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    dollars: float = 0.0
    seconds: float = 0.0
    unpriced_calls: int = 0
    batch_calls: int = 0
    """Calls answered through the Batch API (``--batch``), booked at ``BATCH_PRICE_FACTOR``."""
    models: list[str] = field(default_factory=list)

    def add(self, other: RoleAccount) -> None:
        """Add another account's counts into this one."""
        for name in ("calls", "cache_hits", "errors", "retries", "prompt_tokens", "completion_tokens",
                     "cached_prompt_tokens", "dollars", "seconds", "unpriced_calls", "batch_calls"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.models.extend(m for m in other.models if m not in self.models)


class CostLedger:
    """Thread-safe per-role accounts of calls, cache hits, tokens, dollars and seconds.

    ``cap`` (a ``SpendCap``) makes ``--max-cost`` hard: every LM booking into this ledger first
    reserves its worst case there. A ``child()`` ledger books into itself *and* its parent and
    shares the parent's cap, so one run's passes (compare's three evaluations, optimize's test
    phase) each keep their own accounts while one cap and one total cover them all.
    """

    def __init__(self, *, cap: SpendCap | None = None, parent: CostLedger | None = None) -> None:
        self._accounts: dict[str, RoleAccount] = {}
        self._lock = threading.Lock()
        self._cap = cap
        self._parent = parent

    @property
    def cap(self) -> SpendCap | None:
        """The spend cap every call booked here must reserve under (inherited from the parent)."""
        if self._cap is not None:
            return self._cap
        return self._parent.cap if self._parent is not None else None

    def child(self) -> CostLedger:
        """A ledger for one part of the run: its own accounts, booked into this one too, same cap."""
        return CostLedger(parent=self)

    def record(
        self,
        role: str,
        *,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cached_prompt_tokens: int = 0,
        seconds: float = 0.0,
        dollars: float | None = 0.0,
        cached: bool = False,
        error: bool = False,
        retries: int = 0,
        model: str | None = None,
        batch: bool = False,
    ) -> None:
        """Add one logical call (retries included). A cache hit is a call and a hit, with no tokens or dollars.

        ``batch``: the reply came through the Batch API (``dollars`` are then already at the batch price).
        """
        if self._parent is not None:
            self._parent.record(role, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                cached_prompt_tokens=cached_prompt_tokens, seconds=seconds, dollars=dollars,
                                cached=cached, error=error, retries=retries, model=model, batch=batch)
        with self._lock:
            acct = self._accounts.setdefault(role, RoleAccount())
            acct.calls += 1
            acct.retries += int(retries)
            acct.seconds += float(seconds)
            if model and model not in acct.models:
                acct.models.append(model)
            if cached:
                acct.cache_hits += 1
                return
            acct.errors += int(error)
            acct.batch_calls += int(batch)
            acct.prompt_tokens += int(prompt_tokens)
            acct.completion_tokens += int(completion_tokens)
            acct.cached_prompt_tokens += int(cached_prompt_tokens)
            if dollars is None:
                acct.unpriced_calls += 1
            else:
                acct.dollars += float(dollars)

    def __deepcopy__(self, memo: dict) -> CostLedger:
        """A ledger is a shared sink: copies of programs and LMs keep booking into the same one."""
        return self

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            return {"accounts": {r: asdict(a) for r, a in self._accounts.items()}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self._accounts = {r: RoleAccount(**a) for r, a in state["accounts"].items()}
        self._cap, self._parent = None, None

    def restore(self, roles: dict[str, dict[str, Any]]) -> None:
        """Add the per-role accounts of an earlier attempt of the same run (``costs.json`` "roles").

        So a resumed run's totals, and its cap, count what was already spent.
        """
        with self._lock:
            for role, values in roles.items():
                if role == "total" or not isinstance(values, dict):
                    continue
                known = {k: v for k, v in values.items() if k in RoleAccount.__dataclass_fields__}
                self._accounts.setdefault(role, RoleAccount()).add(RoleAccount(**known))

    def account(self, role: str) -> RoleAccount:
        """A copy of one role's account (zeros if the role never called)."""
        with self._lock:
            acct = self._accounts.get(role, RoleAccount())
            return RoleAccount(**{**asdict(acct), "models": list(acct.models)})

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """``{role: account-as-dict}``, plus ``"total"``; safe to JSON-dump."""
        with self._lock:
            roles = {r: RoleAccount(**{**asdict(a), "models": list(a.models)}) for r, a in self._accounts.items()}
        out = {role: _rounded(asdict(acct)) for role, acct in sorted(roles.items())}
        total = RoleAccount()
        for values in out.values():  # the rounded roles: a resumed run, restored from them, has the same total
            total.add(RoleAccount(**{**values, "models": list(values["models"])}))
        out["total"] = _rounded(asdict(total))
        return out

    def total_dollars(self) -> float:
        """Dollars spent so far over every role."""
        with self._lock:
            return sum(a.dollars for a in self._accounts.values())

    def to_dict(self) -> dict[str, Any]:
        """The ``costs.json`` payload: per-role accounts and totals, prices' provenance."""
        return {"schema_version": 1, "currency": "USD", "price_source": "dspy bundled model metadata",
                "roles": self.snapshot()}


def _rounded(values: dict[str, Any]) -> dict[str, Any]:
    values["dollars"] = round(values["dollars"], 8)
    values["seconds"] = round(values["seconds"], 3)
    return values


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """Dollars per token and the most tokens one reply can have (None = unknown)."""

    input: float
    output: float
    cached_input: float
    max_output_tokens: int | None = None


FREE = ModelPrice(0.0, 0.0, 0.0)
"""Local, compatible and fake servers: tokens and seconds are counted, dollars are 0."""

BATCH_PRICE_FACTOR = 0.5
"""The Batch API's price as a share of the model's price: OpenAI bills batch requests at half its
rates (input, cached input and output alike). The one place the discount lives (``--batch``)."""


@functools.lru_cache(maxsize=64)
def _openai_price(model: str) -> ModelPrice | None:
    from dspy.clients.model_metadata import model_info  # noqa: PLC0415 - heavy: dspy; an import-light module (test_faces)

    info = model_info("openai", model) or {}
    inp, out = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    if not isinstance(inp, (int, float)) or not isinstance(out, (int, float)):
        return None
    cached = info.get("cache_read_input_token_cost")
    limit = info.get("max_output_tokens") or info.get("max_tokens")
    return ModelPrice(float(inp), float(out), float(cached) if isinstance(cached, (int, float)) else float(inp),
                      int(limit) if isinstance(limit, (int, float)) else None)


def model_price(spec: ModelSpec) -> ModelPrice | None:
    """The price of ``spec`` from dspy's bundled price map; ``FREE`` off OpenAI, None when unknown."""
    if spec.kind != "openai":
        return FREE
    return _openai_price(spec.model)


def price_call(spec: ModelSpec, prompt_tokens: int, completion_tokens: int, cached_prompt_tokens: int = 0, *,
               batch: bool = False) -> float | None:
    """Dollars for one call; 0 for local/compatible/fake servers, None when OpenAI's price is unknown.

    ``batch``: answered through the Batch API, at ``BATCH_PRICE_FACTOR`` of the price.
    """
    price = model_price(spec)
    if price is None:
        return None
    cached = min(cached_prompt_tokens, prompt_tokens)
    dollars = (prompt_tokens - cached) * price.input + cached * price.cached_input + completion_tokens * price.output
    return dollars * BATCH_PRICE_FACTOR if batch else dollars


def prompt_token_bound(*parts: Any) -> int:
    """An upper bound on the prompt tokens of a request: the UTF-8 bytes of its JSON.

    Why bytes: a BPE token covers at least one byte, and the JSON keys, quotes and escapes more
    than pay for the chat template's few tokens per message, so no tokenizer is needed.
    """
    return len(json.dumps(parts, ensure_ascii=True, default=_schema_or_str).encode())


def _schema_or_str(value: Any) -> Any:
    schema = getattr(value, "model_json_schema", None)  # a pydantic response_format is sent as its schema
    return schema() if callable(schema) else str(value)


def worst_case_dollars(spec: ModelSpec, prompt_tokens: int, max_tokens: int | None, n: int = 1, *,
                       batch: bool = False) -> float | None:
    """The most one call can cost; None = unbounded (unknown price or output limit).

    Every prompt token at the full input rate plus ``n`` replies of ``max_tokens`` (the model's own
    output limit when the request sets none); ``batch``: at the Batch API's price.
    """
    price = model_price(spec)
    if price is None:
        return None
    if price.input == 0 and price.output == 0:
        return 0.0
    limit = max_tokens or price.max_output_tokens
    if limit is None:
        return None
    worst = prompt_tokens * price.input + max(1, n) * limit * price.output
    return worst * BATCH_PRICE_FACTOR if batch else worst


def usage_numbers(usage: dict[str, Any] | None) -> tuple[int, int, int]:
    """(prompt, completion, cached prompt) tokens from an OpenAI/dspy usage dict of any shape."""
    usage = usage or {}
    prompt = usage.get("prompt_tokens", usage.get("input_tokens")) or 0
    completion = usage.get("completion_tokens", usage.get("output_tokens")) or 0
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    cached = (details.get("cached_tokens") if isinstance(details, dict) else 0) or 0
    return int(prompt), int(completion), int(cached)


__all__ = ["BATCH_PRICE_FACTOR", "FREE", "CostLedger", "ModelPrice", "RoleAccount", "model_price", "price_call",
           "prompt_token_bound", "usage_numbers", "worst_case_dollars"]
