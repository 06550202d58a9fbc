"""Agents: the frozen base agent, the reviewer dspy.Module and the review mechanisms."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saag_opt.lazy import lazy_exports

if TYPE_CHECKING:
    from saag_opt.agents.base import (
        BASE_PROMPT_HASH,
        BASE_SYSTEM_PROMPT,
        BaseAgent,
        BasePredictionCache,
        FeedbackTurn,
        Proposal,
        example_fingerprint,
        registry_json_schema,
    )
    from saag_opt.agents.mechanisms.base import (
        DEFAULT_MAX_REPAIRS,
        Candidate,
        Mechanism,
        MechanismContext,
        MechanismFacts,
        MechanismOutcome,
        ReviewRound,
    )
    from saag_opt.agents.mechanisms.gate import Gate
    from saag_opt.agents.mechanisms.guarded import GuardedReview, LiveTurn
    from saag_opt.agents.mechanisms.no_review import NoReview
    from saag_opt.agents.mechanisms.progressive import Progressive
    from saag_opt.agents.mechanisms.registry import (
        describe_mechanisms,
        mechanism_names,
        parse_mechanism,
        register_mechanism,
        resolve_mechanism,
    )
    from saag_opt.agents.mechanisms.repair import BINARY_FEEDBACK, SelfRepair
    from saag_opt.agents.mechanisms.rules import Ruling
    from saag_opt.agents.mechanisms.selection import Grading, Selection, spread_temperatures
    from saag_opt.agents.reviewer import (
        PREDICTOR_NAMES,
        Grade,
        Reviewer,
        SaagInformedReviewer,
        Verdict,
        blind_cascade,
        make_reviewer,
        render_calls,
        render_candidates,
        render_conversation,
        render_saag_report,
        render_tool_docs,
    )
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "base": (
            "BASE_PROMPT_HASH", "BASE_SYSTEM_PROMPT", "BaseAgent", "BasePredictionCache", "FeedbackTurn", "Proposal",
            "example_fingerprint", "registry_json_schema",
        ),
        "mechanisms.base": (
            "DEFAULT_MAX_REPAIRS", "Candidate", "Mechanism", "MechanismContext", "MechanismFacts", "MechanismOutcome",
            "ReviewRound",
        ),
        "mechanisms.gate": ("Gate",),
        "mechanisms.guarded": ("GuardedReview", "LiveTurn"),
        "mechanisms.no_review": ("NoReview",),
        "mechanisms.progressive": ("Progressive",),
        "mechanisms.registry": (
            "describe_mechanisms", "mechanism_names", "parse_mechanism", "register_mechanism", "resolve_mechanism",
        ),
        "mechanisms.repair": ("BINARY_FEEDBACK", "SelfRepair"),
        "mechanisms.rules": ("Ruling",),
        "mechanisms.selection": ("Grading", "Selection", "spread_temperatures"),
        "reviewer": (
            "PREDICTOR_NAMES", "Grade", "Reviewer", "SaagInformedReviewer", "Verdict", "blind_cascade",
            "make_reviewer", "render_calls", "render_candidates", "render_conversation", "render_saag_report",
            "render_tool_docs",
        ),
    })

__all__ = [
    "BASE_PROMPT_HASH",
    "BASE_SYSTEM_PROMPT",
    "BINARY_FEEDBACK",
    "DEFAULT_MAX_REPAIRS",
    "PREDICTOR_NAMES",
    "BaseAgent",
    "BasePredictionCache",
    "Candidate",
    "FeedbackTurn",
    "Gate",
    "Grade",
    "Grading",
    "GuardedReview",
    "LiveTurn",
    "Mechanism",
    "MechanismContext",
    "MechanismFacts",
    "MechanismOutcome",
    "NoReview",
    "Progressive",
    "Proposal",
    "ReviewRound",
    "Reviewer",
    "Ruling",
    "SaagInformedReviewer",
    "Selection",
    "SelfRepair",
    "Verdict",
    "blind_cascade",
    "describe_mechanisms",
    "example_fingerprint",
    "make_reviewer",
    "mechanism_names",
    "parse_mechanism",
    "register_mechanism",
    "registry_json_schema",
    "render_calls",
    "render_candidates",
    "render_conversation",
    "render_saag_report",
    "render_tool_docs",
    "resolve_mechanism",
    "spread_temperatures",
]
