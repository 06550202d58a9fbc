"""One review set-up, built once: what every verb measures, and the one builder that opens it.

``ReviewSetup`` is *what* a reviewer condition is: the base agent's model, the reviewer's model,
prompt and inputs, the mechanism, and how their LM calls behave. ``evaluate``, ``compare``,
``optimize`` (GEPA's rollouts and its test phase) and ``tune`` (every trial) hold one, inside their
own configuration (``SetupConfig``: the set-up plus how that verb runs), and open it with
``open_setup``; the runtime guard opens its reviewer with the same pieces (``bind_reviewer``,
``ReviewSetup.call_options``). So one option means one thing everywhere, and the cache keys of
the base agent's calls agree between verbs because one function makes them.

The mechanism spec is resolved once, where the set-up is validated, into a ``Mechanism`` kept in
the field (serialised as its spec); below this module code asks that object, never the string.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.fields import FieldInfo

from saag_opt.agents.base import BaseAgent, BasePredictionCache
from saag_opt.agents.mechanisms.base import DEFAULT_MAX_REPAIRS, Mechanism, MechanismContext, MechanismOutcome
from saag_opt.agents.mechanisms.registry import resolve_mechanism
from saag_opt.agents.reviewer import Reviewer, make_reviewer
from saag_opt.artifacts import PromptVersion, resolve_ref
from saag_opt.choices import GroundingName, OnUnusable, ReasoningEffort
from saag_opt.errors import ConfigError
from saag_opt.lm import CostLedger, SaagLM, check_model, open_lm, parse_model_spec
from saag_opt.lm.batch.rounds import BatchRounds
from saag_opt.lm.retry import RequestTimeout, call_options
from saag_opt.model import Example
from saag_opt.saag.modes import INTERVENTION_GROUNDING

_C = TypeVar("_C", bound="SetupConfig")


def _mechanism(value: Any, info: ValidationInfo) -> Mechanism:
    """A spec (``r2``, ``gate+s5``) or a ``Mechanism``; a self-repair spec takes the set-up's ``max_repairs``."""
    if isinstance(value, str):
        return resolve_mechanism(value, max_repairs=info.data.get("max_repairs"))
    if not callable(getattr(value, "run", None)) or not isinstance(getattr(value, "spec", None), str):
        raise ValueError(f"expected a mechanism spec or a Mechanism, got {type(value).__name__}")
    return value


MechanismField = Annotated[Mechanism, PlainValidator(_mechanism),
                           PlainSerializer(lambda mechanism: mechanism.spec, return_type=str)]
"""A ``Mechanism`` that is read from and written as its spec."""


class ReviewSetup(BaseModel):
    """One reviewer condition: the models, prompt and mechanism, and how their LM calls behave.

    What every verb measures: the same set-up sends the same requests in evaluate, compare, optimize
    and tune, and the runtime guard opens its reviewer with the same pieces.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    base: str
    """Base agent model spec (``gpt-4o``, ``local``, ``openai/<m>@URL``, ``fake@URL``)."""
    reviewer: str | None = None
    """Reviewer model spec; required by a mechanism that calls the reviewer (``Mechanism.needs_reviewer``)."""
    prompt: str = "reviewer@v2"
    """Reviewer prompt reference (``reviewer@v2``, an alias, or a path)."""
    prompts_dir: Path | None = None
    """Prompt store ``prompt`` resolves in (None = ``$SAAG_OPT_PROMPTS``, else the user's; see ``saag_opt.paths``)."""
    max_repairs: int = Field(default=DEFAULT_MAX_REPAIRS, ge=0, le=50)
    """Repair budget of the binary/saag self-repair loops (declared before ``mechanism``, which reads it)."""
    mechanism: MechanismField = Field(default="r2", validate_default=True)
    """A registered mechanism (``agents.mechanism_names()``: none, saag, r2, s5, gate+r2, ...), given as its spec."""
    saag_informed: bool = False
    """Experimental: the review predictor also sees the gold-free SAAG report."""
    grounding: GroundingName = INTERVENTION_GROUNDING
    """Stage 3 of the gold-free cascade that triggers binary/saag self-repair and gate+, and that the
    SAAG-informed reviewer sees: ``calibrated`` (default) or the ``paper``'s verbatim test."""
    reviewer_temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """Sampling temperature of the reviewer (reasoning models ignore it; the base agent stays at 0)."""
    reasoning_effort: ReasoningEffort | None = None
    """Reasoning effort sent to a reasoning reviewer model (gpt-5*, o-series); None = the model's default."""
    on_unusable: OnUnusable = "approve"
    """What an unreadable review (after one retry) means: approve = the base call runs as proposed."""
    retries: int = Field(default=4, ge=0, le=20)
    """Extra attempts per LM call after 429/5xx/timeouts/malformed replies (every role)."""
    retry_base_delay: float = Field(default=1.0, ge=0.0, le=60.0)
    """First backoff delay in seconds (doubles per attempt, jittered)."""
    request_timeout: RequestTimeout = None
    """Seconds one LM request may take before it is retried (None = the HTTP client's bound; ``lm.retry``)."""

    @field_validator("base", "reviewer")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        if value is not None:
            parse_model_spec(value)
        return value

    @model_validator(mode="after")
    def _reviewer_needed(self) -> ReviewSetup:
        if self.reviewer is None and self.mechanism.needs_reviewer:
            raise ValueError(f"mechanism {self.mechanism.spec!r} needs a reviewer model: pass --reviewer "
                             "(e.g. gpt-5-mini or local), or use --mechanism none|binary|saag")
        return self

    @model_validator(mode="after")
    def _models_take_the_requests(self) -> ReviewSetup:
        """A model asked for what it does not take is refused here, before a paid call (``lm.request_rules``)."""
        if self.base is not None:
            check_model(self.base, "base")
        if self.reviewer is not None:
            check_model(self.reviewer, "reviewer", reasoning_effort=self.reasoning_effort)
        return self

    def replace(self, **changes: Any) -> ReviewSetup:
        """This set-up with ``changes`` (field -> value), validated again; only a new mechanism spec is parsed."""
        if "max_repairs" in changes:  # a self-repair mechanism carries its budget: resolve its spec again
            changes.setdefault("mechanism", self.mechanism.spec)
        return type(self).model_validate(dict(self) | changes)

    def call_options(self) -> dict[str, Any]:
        """``open_lm`` keyword arguments every role's LM gets: retries, backoff, request timeout."""
        return call_options(retries=self.retries, retry_base_delay=self.retry_base_delay,
                            request_timeout=self.request_timeout)

    def reviewer_options(self) -> dict[str, Any]:
        """``open_lm`` keyword arguments of the reviewer's LM: the call options plus its sampling."""
        extra = {} if self.reasoning_effort is None else {"reasoning_effort": self.reasoning_effort}
        return self.call_options() | {"temperature": self.reviewer_temperature} | extra

    def prompt_version(self) -> PromptVersion | None:
        """The reviewer's prompt version, resolved in its store; None when the mechanism has no reviewer.

        Raises:
            ArtifactError: an unknown reference.
        """
        return resolve_ref(self.prompt, self.prompts_dir) if self.mechanism.needs_reviewer else None


class SetupConfig(BaseModel):
    """A verb's configuration: one ``ReviewSetup`` plus the verb's own fields (how it runs).

    Read and written flat: ``run.json``, keyword arguments, SPACE.toml keys and the CLI all name the
    set-up's fields beside the verb's (``base``, ``mechanism``, ``dataset``, ``workers``), as every
    run.json did before the set-up was one model; ``setup`` exists only in Python.
    """

    SETUP_DEFAULTS: ClassVar[Mapping[str, Any]] = {}
    """Set-up values a verb fills in when its input leaves them out (optimize's default models)."""
    OMITTED_AT_DEFAULT: ClassVar[frozenset[str]] = frozenset()
    """The verb's fields written only when set: options of one dataset kind, so the run.json of
    every other run keeps the shape it always had (and old runs resume to the same file)."""

    setup: ReviewSetup
    """What is measured (see ``ReviewSetup``)."""

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """Flat options (a run.json of any version, keyword arguments) -> ``setup`` + the verb's fields."""
        if not isinstance(data, Mapping) or "setup" in data:
            return data
        mine = ReviewSetup.model_fields
        setup = dict(cls.SETUP_DEFAULTS) | {k: v for k, v in data.items() if k in mine}
        return {k: v for k, v in data.items() if k not in mine} | {"setup": setup}

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = dict(handler(self))
        for name in self.OMITTED_AT_DEFAULT:
            if name in data and getattr(self, name) == type(self).model_fields[name].default:
                del data[name]
        return dict(data.pop("setup", {})) | data

    @classmethod
    def option_fields(cls) -> dict[str, FieldInfo]:
        """Every option by its flat name: the set-up's fields, then the verb's."""
        return dict(ReviewSetup.model_fields) | {k: f for k, f in cls.model_fields.items() if k != "setup"}

    def with_setup(self: _C, **changes: Any) -> _C:
        """This configuration with its set-up changed (``prompt=``, ``mechanism=`` ...), validated again."""
        return type(self).model_validate(dict(self) | {"setup": self.setup.replace(**changes)})


def bind_reviewer(prompt: PromptVersion | Mapping[str, str], lm: Any, *, saag_informed: bool = False,
                  grounding: GroundingName = INTERVENTION_GROUNDING) -> Reviewer:
    """The reviewer for ``prompt`` (``make_reviewer``), talking to ``lm``: evaluate's, GEPA's and the guard's.

    Raises:
        ArtifactError: the prompt names a predictor a reviewer does not have.
    """
    reviewer = make_reviewer(prompt, saag_informed=saag_informed, grounding=grounding)
    reviewer.set_lm(lm)
    return reviewer


@dataclass(frozen=True)
class Condition:
    """A ``ReviewSetup``, opened: the agent, reviewer and mechanism that run one example under it."""

    setup: ReviewSetup
    agent: BaseAgent
    reviewer: Reviewer | None
    """The reviewer with the set-up's prompt (None when the mechanism has no reviewer)."""
    reviewer_lm: SaagLM | None
    mechanism: Mechanism
    ctx: MechanismContext
    prompt_version: PromptVersion | None
    """The reviewer's prompt version: what it was trained and selected on (None without a reviewer)."""

    def reviewer_for(self, instructions: Mapping[str, str]) -> Reviewer:
        """A reviewer with other instructions (a GEPA candidate), asking what this set-up's reviewer asks.

        Raises:
            ConfigError: the set-up has no reviewer model.
        """
        if self.reviewer_lm is None:
            raise ConfigError(f"mechanism {self.mechanism.spec!r} has no reviewer to give instructions to")
        return bind_reviewer(instructions, self.reviewer_lm, saag_informed=self.setup.saag_informed,
                             grounding=self.setup.grounding)

    def run(self, example: Example, reviewer: Reviewer | None = None) -> MechanismOutcome:
        """The mechanism on ``example``, with this condition's reviewer unless another is given."""
        return self.mechanism.run(example, self.agent, reviewer if reviewer is not None else self.reviewer,
                                  ctx=self.ctx)


def open_setup(setup: ReviewSetup, ledger: CostLedger, cache: BasePredictionCache, *,
               batch: BatchRounds | None = None) -> Condition:
    """Open the set-up's models on ``ledger`` and build its agent, reviewer and mechanism context.

    ``cache``: the base-prediction cache round-0 proposals come from (shared by every mechanism and
    prompt version run on the same examples). The base LM opens first, so a missing key fails
    before a prompt is looked up. ``batch``: every role's calls go through these Batch API rounds
    (``lm.batch.rounds``); what is asked, and so every reply, stays the same.

    Raises:
        ModelUnavailableError: a model cannot be used (missing key, extra or server).
        ConfigError, ArtifactError: a model without a price under ``--max-cost``; an unknown prompt.
    """
    base_lm = open_lm(parse_model_spec(setup.base), role="base", ledger=ledger, batch=batch, **setup.call_options())
    agent = BaseAgent(base_lm, ledger=ledger)
    reviewer: Reviewer | None = None
    reviewer_lm: SaagLM | None = None
    version: PromptVersion | None = None
    if setup.mechanism.needs_reviewer and setup.reviewer is not None:  # the set-up's validator pairs the two
        version = resolve_ref(setup.prompt, setup.prompts_dir)
        reviewer_lm = open_lm(parse_model_spec(setup.reviewer), role="reviewer", ledger=ledger, batch=batch,
                              **setup.reviewer_options())
        reviewer = bind_reviewer(version, reviewer_lm, saag_informed=setup.saag_informed, grounding=setup.grounding)
    ctx = MechanismContext(cache=cache, max_repairs=setup.max_repairs, on_unusable=setup.on_unusable,
                           grounding=setup.grounding)
    return Condition(setup, agent, reviewer, reviewer_lm, setup.mechanism, ctx, version)


__all__ = ["Condition", "MechanismField", "ReviewSetup", "SetupConfig", "bind_reviewer", "open_setup"]
