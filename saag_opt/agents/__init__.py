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
    from saag_opt.agents.mechanisms.guarded import GuardedReview, LiveTurn
    from saag_opt.agents.mechanisms.registry import (
        BINARY_FEEDBACK,
        DEFAULT_MAX_REPAIRS,
        Candidate,
        Gate,
        Grading,
        Mechanism,
        MechanismContext,
        MechanismFacts,
        MechanismOutcome,
        NoReview,
        Progressive,
        ReviewRound,
        Selection,
        SelfRepair,
        describe_mechanisms,
        mechanism_names,
        parse_mechanism,
        register_mechanism,
        resolve_mechanism,
        spread_temperatures,
    )
    from saag_opt.agents.mechanisms.rules import Ruling
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
        "mechanisms.guarded": ("GuardedReview", "LiveTurn"),
        "mechanisms.registry": (
            "BINARY_FEEDBACK", "DEFAULT_MAX_REPAIRS", "Candidate", "Gate", "Grading", "Mechanism", "MechanismContext",
            "MechanismFacts", "MechanismOutcome", "NoReview", "Progressive", "ReviewRound", "Selection",
            "SelfRepair",
            "describe_mechanisms", "mechanism_names", "parse_mechanism", "register_mechanism", "resolve_mechanism",
            "spread_temperatures",
        ),
        "reviewer": (
            "PREDICTOR_NAMES", "Grade", "Reviewer", "SaagInformedReviewer", "Verdict", "blind_cascade",
            "make_reviewer", "render_calls", "render_candidates", "render_conversation", "render_saag_report",
            "render_tool_docs",
        ),
        "mechanisms.rules": ("Ruling",),
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
