"""SPACE.toml: what ``saag-opt tune`` searches, what it optimises, and which trials are feasible.

The format (every key is checked; a bad key or value is one ``ConfigError`` line naming it)::

    [fixed]            # any evaluate option (EvaluateConfig field) held constant in every trial
    base = "gpt-4o"
    dataset = "bfcl:non_live"
    split = "val"      # default val; trials never see test (the Pareto set is re-evaluated there)
    limit = 40

    [search]           # a list = categorical choices; a table = a numeric range
    mechanism = ["r1", "r2", "s3", "g3", "gate+r2"]
    prompt = ["reviewer@v2", "reviewer@best"]
    reviewer = ["gpt-5-mini", "gpt-4o-mini"]
    temperature = { low = 0.0, high = 1.0 }          # step = 0.25 makes it a grid axis
    saag_informed = [true, false]

    [objectives]       # metric = "maximize" | "minimize"; default help maximize, harm minimize
    help = "maximize"
    harm = "minimize"

    [constraints]      # metric = upper bound: a trial is feasible when the measured value <= bound
    cost_per_item_usd = 0.002

Search keys are EvaluateConfig field names (``temperature`` is accepted for
``reviewer_temperature``). The ``[fixed]`` table's reader (``read_toml``, ``option_table``) also
reads the ``--config FILE.toml`` of evaluate, compare, optimize and security (``load_options``).
Only *what* a reviewer setup is can be searched (mechanism, prompt, models, temperature, reasoning
effort, SAAG-informed, repairs); *how* a run is done (dataset, split, limit, retries, workers) is
fixed, so every trial is measured on the same examples.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal, Union

import tomllib
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from saag_opt.errors import ConfigError, option_path
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.lm.request_rules import efforts_of, warn_once

Direction = Literal["maximize", "minimize"]
Choice = Union[bool, int, float, str]

METRICS: dict[str, str] = {
    "help": "helpfulness: share of the base agent's errors the reviewer fixed",
    "harm": "harmfulness: share of the base agent's correct answers the reviewer broke",
    "accuracy": "accuracy with the reviewer",
    "net_change": "accuracy with the reviewer minus the base agent's accuracy",
    "cost_per_item_usd": "dollars spent per example in this trial (replayed cached replies cost 0)",
    "reviewer_calls_per_item": "LLM reviewer calls per example",
    "seconds_per_item": "mean latency of the whole mechanism per example",
    "latency_overhead_x": "mean latency with the reviewer / without",
}
"""Metric name -> meaning; objectives and constraints name these."""

DEFAULT_OBJECTIVES: dict[str, Direction] = {"help": "maximize", "harm": "minimize"}
"""What a reviewer is for: fix the base agent's errors, break none of its right answers."""

ALIASES = {"temperature": "reviewer_temperature"}
"""Short names accepted in [search] and [fixed] for EvaluateConfig fields."""

NOT_SEARCHABLE = frozenset({"dataset", "split", "limit", "runs_dir", "cache_dir", "prompts_dir", "workers", "seed",
                            "fail_on_error", "retries", "retry_base_delay", "request_timeout"})
"""How a trial is run, not what it tests: fixed so every trial sees the same examples the same way."""

NOT_FIXABLE = frozenset({"runs_dir"})
"""Decided by tune itself (trial run dirs live under the tune run dir)."""

GRID_LIMIT = 10_000
"""Largest grid ``--sampler grid`` accepts."""


class Range(BaseModel):
    """A numeric range: ints (all of low/high/step ints) suggest integers, otherwise floats."""

    model_config = ConfigDict(extra="forbid")

    low: float
    """Lower bound (inclusive)."""
    high: float
    """Upper bound (inclusive)."""
    step: float | None = None
    """Grid step; required for ``--sampler grid`` on floats."""
    log: bool = False
    """Sample on a log scale (no step allowed)."""
    integer: bool = False
    """Set from the TOML types (low, high and step all integers); not a user key."""

    @model_validator(mode="before")
    @classmethod
    def _detect_integer(cls, data: Any) -> Any:
        if isinstance(data, dict) and "integer" not in data:
            numbers = [data.get(k) for k in ("low", "high", "step") if data.get(k) is not None]
            data = dict(data, integer=all(isinstance(v, int) and not isinstance(v, bool) for v in numbers))
        return data

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.high < self.low:
            raise ValueError(f"high ({self.high:g}) is below low ({self.low:g})")
        if self.step is not None and self.step <= 0:
            raise ValueError("step must be > 0")
        if self.log and (self.step is not None or self.low <= 0):
            raise ValueError("log needs low > 0 and no step")
        return self

    def grid(self) -> list[float | int] | None:
        """Every grid point, or None when a float range has no step (integers step by 1)."""
        step = self.step if self.step is not None else (1 if self.integer else None)
        if step is None:
            return None
        n = int(math.floor((self.high - self.low) / step + 1e-9)) + 1
        points = [self.low + i * step for i in range(n)]
        return [int(p) for p in points] if self.integer else [round(p, 12) for p in points]


Dimension = Union[list[Choice], Range]


class SpaceFile(BaseModel):
    """The parsed SPACE.toml (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    fixed: dict[str, Any] = Field(default_factory=dict)
    """EvaluateConfig fields held constant."""
    search: dict[str, Dimension]
    """Field -> choices or range."""
    objectives: dict[str, Direction] = Field(default_factory=lambda: dict(DEFAULT_OBJECTIVES))
    """Metric -> direction, in order."""
    constraints: dict[str, float] = Field(default_factory=dict)
    """Metric -> upper bound."""

    @field_validator("fixed", "search", mode="before")
    @classmethod
    def _aliases(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {ALIASES.get(k, k): v for k, v in value.items()}
        return value

    @field_validator("search", mode="before")
    @classmethod
    def _search(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        if not value:
            raise ValueError("is empty: name at least one option to search, e.g. mechanism = [\"r1\", \"r2\"]")
        out: dict[str, Any] = {}
        for key, dim in value.items():
            if isinstance(dim, list):
                if not dim:
                    raise ValueError(f"{key}: needs at least one choice")
                if any(not isinstance(c, (bool, int, float, str)) for c in dim):
                    raise ValueError(f"{key}: choices must be strings, numbers or booleans")
                if len({json.dumps(c) for c in dim}) != len(dim):
                    raise ValueError(f"{key}: repeated choice")
                out[key] = dim
            elif isinstance(dim, dict):
                try:
                    out[key] = Range.model_validate(dim)
                except ValidationError as exc:
                    raise ValueError(f"{key}: {ConfigError.from_validation(exc)}") from None
            else:
                raise ValueError(f"{key}: a list of choices or a range table {{ low = .., high = .. }}, got {dim!r}")
        return out

    @field_validator("objectives")
    @classmethod
    def _objectives(cls, value: dict[str, Direction]) -> dict[str, Direction]:
        if not value:
            raise ValueError("is empty: name at least one metric")
        return value


class Space(BaseModel):
    """A validated search space, ready to suggest trials."""

    model_config = ConfigDict(frozen=True)

    fixed: dict[str, Any]
    """EvaluateConfig fields held constant (split defaults to val)."""
    search: dict[str, Dimension]
    """Field -> choices or range, in file order."""
    objectives: dict[str, Direction]
    """Metric -> direction, in order."""
    constraints: dict[str, float]
    """Metric -> upper bound."""
    source: str | None = None
    """Where it was read from."""

    @property
    def metric_names(self) -> list[str]:
        """Objective names in order (``study.set_metric_names``)."""
        return list(self.objectives)

    @property
    def directions(self) -> list[Direction]:
        """Objective directions in order."""
        return list(self.objectives.values())

    def digest(self) -> str:
        """A hash of what decides results: joining workers must search the same space."""
        payload = self.model_dump(mode="json", exclude={"source"})
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def grid_points(self) -> list[dict[str, Any]] | None:
        """Every configuration of a finite space, or None when a range has no step."""
        axes = []
        for key, dim in self.search.items():
            values = dim if isinstance(dim, list) else dim.grid()
            if values is None:
                return None
            axes.append([(key, v) for v in values])
        return [dict(combo) for combo in itertools.product(*axes)]

    def config(self, params: dict[str, Any], **overrides: Any) -> EvaluateConfig:
        """The EvaluateConfig of one trial.

        Raises:
            ConfigError: the combination is invalid (e.g. a mechanism that needs a reviewer without one).
        """
        values = applicable({**self.fixed, **params, **overrides}, warn=True)
        try:
            return EvaluateConfig(**values)
        except ValidationError as exc:
            raise ConfigError.from_validation(exc) from exc


def applicable(values: dict[str, Any], *, warn: bool = False) -> dict[str, Any]:
    """A trial's values without a ``reasoning_effort`` its reviewer does not take.

    Why dropped, not refused: a space that searches reviewers and efforts means the effort for the
    reviewers that reason (gpt-5-mini beside gpt-4o-mini); ``evaluate`` given both refuses the pair.
    """
    reviewer, effort = values.get("reviewer"), values.get("reasoning_effort")
    if reviewer is None or effort is None or not isinstance(reviewer, str) or efforts_of(reviewer):
        return values
    if warn:
        warn_once(f"reasoning_effort is not sent to {reviewer}, which does not take it (trials differing only "
                  "in it replay from the LM cache)", stacklevel=2)
    return {k: v for k, v in values.items() if k != "reasoning_effort"}


def canonical_params(params: dict[str, Any]) -> str:
    """One text per configuration (the memo key): sorted keys, floats without noise."""
    norm = {k: (round(v, 9) if isinstance(v, float) else v) for k, v in params.items()}
    return json.dumps(norm, sort_keys=True, separators=(",", ":"))


def load_space(path: str | Path, overrides: dict[str, Any] | None = None) -> Space:
    """Read and validate a SPACE.toml.

    Raises:
        ConfigError: unreadable TOML (with line and column), an unknown or misplaced key, or a bad
            value; the message names the key, e.g. ``SPACE.toml: search.mechanism[2]: unknown mechanism 'r-two'``.
    """
    return parse_space(apply_overrides(read_toml(path, "space file"), overrides or {}), source=str(path))


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """A TOML file (``what``: "space file", "config file") as a mapping; a byte-order mark is allowed.

    Raises:
        ConfigError: unreadable, not UTF-8 (with the line) or not valid TOML (with line and column).
    """
    file = Path(path)
    try:
        raw = file.read_bytes()
        data = tomllib.loads(raw.decode("utf-8-sig"))  # a byte-order mark is how some editors save UTF-8
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the {what}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{file}: line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from exc
    return data


def option_table(table: Mapping[str, Any], fields: Collection[str], *, source: str, verb: str = "evaluate",
                 section: str = "", listed: Collection[str] | None = None) -> dict[str, Any]:
    """A table of options (SPACE.toml's ``[fixed]``, a ``--config`` file) by field name: ``ALIASES`` resolved, each checked.

    Keys are the config's fields as ``run.json`` names them (``max_cost``, ``reviewer_temperature`` or
    its alias ``temperature``); ``listed`` are the ones a bad key's message offers (default ``fields``).

    Raises:
        ConfigError: a key that is not one of ``fields``, e.g. ``run.toml: colour: not an evaluate option; choose from [...]``.
    """
    options = {ALIASES.get(key, key): value for key, value in table.items()}
    article = "an" if verb[:1] in "aeiou" else "a"
    for key in options:
        if key not in fields:
            raise ConfigError(f"{source}: {section}{key}: not {article} {verb} option; "
                              f"choose from {sorted(fields if listed is None else listed)}")
    return options


def load_options(path: str | Path, fields: Collection[str], *, verb: str) -> dict[str, Any]:
    """A ``--config FILE.toml``: options of ``verb`` as top-level keys, read as SPACE.toml's ``[fixed]`` table is.

    Raises:
        ConfigError: unreadable TOML, or a key that is not an option of ``verb`` (one line naming the file and key).
    """
    return option_table(read_toml(path, "config file"), fields, source=str(path), verb=verb)


def parse_space(data: dict[str, Any], *, source: str = "SPACE.toml") -> Space:
    """Validate a SPACE mapping (see ``load_space``)."""
    try:
        raw = SpaceFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {ConfigError.from_validation(exc)}") from exc
    fixed = {"split": "val", **raw.fixed}
    _check_keys(raw, fixed, source)
    _check_metrics(raw, source)
    space = Space(fixed=fixed, search=raw.search, objectives=raw.objectives, constraints=raw.constraints,
                  source=source)
    _check_values(space, source)
    return space


def _field_names() -> set[str]:
    """The evaluate options, by their flat names (the review set-up's fields and evaluate's own)."""
    return set(EvaluateConfig.option_fields())


def _check_keys(raw: SpaceFile, fixed: dict[str, Any], source: str) -> None:
    fields = _field_names()
    for section, keys in (("fixed", fixed), ("search", raw.search)):
        option_table(keys, fields, source=source, section=f"{section}.", listed=fields - NOT_FIXABLE)
    for key in fixed:
        if key in NOT_FIXABLE:
            raise ConfigError(f"{source}: fixed.{key}: set by tune (trial runs go under the tune run directory)")
    for key in raw.search:
        if key in NOT_SEARCHABLE:
            raise ConfigError(f"{source}: search.{key}: cannot be searched (every trial must run the same "
                              f"examples the same way); put it in [fixed]")
        if key in fixed and key != "split":
            raise ConfigError(f"{source}: search.{key}: also in [fixed]; keep it in one place")
    if fixed.get("split") not in ("train", "val"):
        raise ConfigError(f"{source}: fixed.split: must be train or val, got {fixed.get('split')!r} "
                          "(the test split is kept for the final re-evaluation of the Pareto set)")


def _check_metrics(raw: SpaceFile, source: str) -> None:
    for section, names in (("objectives", raw.objectives), ("constraints", raw.constraints)):
        for name in names:
            if name not in METRICS:
                raise ConfigError(f"{source}: {section}.{name}: unknown metric; choose from {sorted(METRICS)}")


def _check_values(space: Space, source: str) -> None:
    """The fixed values, then each choice in a config with the other keys' first choices, must be valid."""
    first = {k: (d[0] if isinstance(d, list) else d.low) for k, d in space.search.items()}
    if "base" not in space.fixed and "base" not in space.search:
        raise ConfigError(f"{source}: fixed.base: missing (the base agent's model, e.g. base = \"gpt-4o\", or --base)")
    _validate({**space.fixed, **first}, source, "fixed", lambda key: key is None or key in space.fixed)
    for key, dim in space.search.items():
        values = dim if isinstance(dim, list) else [dim.low, dim.high]
        for index, value in enumerate(values):
            where = f"search.{key}[{index}]" if isinstance(dim, list) else f"search.{key}"
            _validate({**space.fixed, **first, key: value}, source, where, lambda loc, k=key: loc in (k, None),
                      shown=value)


def _validate(values: dict[str, Any], source: str, where: str, mine: Any, shown: Any = None) -> None:
    """Raise a one-line ConfigError for the first error ``mine(loc)`` claims (loc None = cross-field)."""
    try:
        EvaluateConfig(**applicable(values))
    except ValidationError as exc:
        for error in exc.errors():
            loc = option_path(error.get("loc"))
            key = loc[0] if loc else None
            if mine(key):
                label = where if where != "fixed" or key is None else f"fixed.{key}"
                got = f" (got {shown!r})" if shown is not None else ""
                raise ConfigError(f"{source}: {label}: {error['msg'].removeprefix('Value error, ')}{got}") from exc
    except ConfigError as exc:  # a validator that raises our own error (model specs)
        raise ConfigError(f"{source}: {where}: {exc}") from exc


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Command-line pins (``--base local``) replace a fixed value or a search dimension of that name."""
    fixed = dict(data.get("fixed") or {})
    search = dict(data.get("search") or {})
    for key, value in overrides.items():
        if value is None:
            continue
        search.pop(key, None)
        fixed[key] = value
    return {**data, "fixed": fixed, "search": search}


__all__ = [
    "ALIASES",
    "METRICS",
    "Dimension",
    "Range",
    "Space",
    "SpaceFile",
    "apply_overrides",
    "canonical_params",
    "load_options",
    "load_space",
    "option_table",
    "parse_space",
    "read_toml",
]
