"""What an evaluate run writes about its examples: each condition's record, and the summary over them.

The record *models* live in ``results`` (which also reads them back); this module builds them from
what a mechanism did, judged against gold here and only here (``judge_with_gold``,
``diagnose_with_gold``: after the example ran, never in front of the agent or the reviewer).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from saag_opt.agents.base import Proposal
from saag_opt.agents.mechanisms.base import Mechanism, MechanismOutcome
from saag_opt.agents.setup import Condition
from saag_opt.evaluation.paired import summarise_pairs
from saag_opt.evaluation.results import CallRecord, CandidateRecord, EvaluationSummary, ExampleRecord, RoundRecord
from saag_opt.lm import CostLedger
from saag_opt.model import Example, Prediction
from saag_opt.saag import diagnose_with_gold, judge_with_gold

_RAW_LIMIT = 2000


def call_record(prediction: Prediction) -> CallRecord:
    """A prediction as stored."""
    raw = prediction.raw if prediction.raw is None else prediction.raw[:_RAW_LIMIT]
    return CallRecord(calls=[c.to_dict() for c in prediction.calls], raw=raw, status=prediction.status)


def _common(run_id: str, example: Example, condition: str) -> dict[str, Any]:
    return {"run_id": run_id, "example_id": example.id, "category": example.category,
            "split": example.split, "condition": condition}


def base_record(run_id: str, example: Example, base: Proposal, untimed: int) -> ExampleRecord:
    """The ``base`` condition: the base agent's first answer, judged."""
    verdict = judge_with_gold(base.prediction.calls, example)
    return ExampleRecord(**_common(run_id, example, "base"), final=call_record(base.prediction),
                         correct=verdict.correct, truth_reason=verdict.reason, saag=verdict.cascade.to_dict(),
                         seconds=base.seconds, untimed_replays=untimed,
                         tokens=0 if base.cached else base.tokens, cached=base.cached)


def mechanism_record(run_id: str, example: Example, outcome: MechanismOutcome, tokens: int,
                     untimed: int) -> ExampleRecord:
    """The mechanism's condition: its final answer judged, with every round and candidate it went through."""
    verdict = judge_with_gold(outcome.final.calls, example)
    base_saag = diagnose_with_gold(outcome.base.prediction.calls, example).to_dict()
    rounds = [RoundRecord(index=r.index, reviewer=r.reviewer, verdict=r.verdict, tentative=call_record(r.tentative),
                          feedback=r.feedback, revised=call_record(r.revised) if r.revised else None, note=r.note)
              for r in outcome.rounds]
    cands = [CandidateRecord(index=c.index, temperature=c.temperature, prediction=call_record(c.prediction),
                             score=c.score, rationale=c.rationale, passed=c.passed) for c in outcome.candidates]
    return ExampleRecord(
        **_common(run_id, example, outcome.mechanism), final=call_record(outcome.final), correct=verdict.correct,
        truth_reason=verdict.reason, saag=verdict.cascade.to_dict(), base=call_record(outcome.base.prediction),
        base_saag=base_saag,
        rounds=rounds, candidates=cands, selected=outcome.selected, reviewer_calls=outcome.reviewer_calls,
        agent_calls=outcome.agent_calls, gated=outcome.gated, seconds=outcome.seconds, untimed_replays=untimed,
        tokens=tokens,
        cached=outcome.base.cached, notes=list(outcome.notes), reviewer_unusable=outcome.reviewer_unusable)


def failed_record(run_id: str, example: Example, condition: str, message: str) -> ExampleRecord:
    """A condition that raised: scored incorrect, the error kept."""
    return ExampleRecord(**_common(run_id, example, condition), correct=False, truth_reason="error", error=message)


def setup_facts(condition: Condition, splits: Iterable[str], ledger: CostLedger) -> dict[str, Any]:
    """The summary fields a run's set-up decides, for either kind of work.

    The prompt, what the reviewer was tuned on, how unreadable reviews were ruled, the costs.
    """
    setup, version = condition.setup, condition.prompt_version
    return {"experimental": condition.mechanism.experimental or setup.saag_informed,
            "prompt": setup.prompt if condition.reviewer is not None else None, "costs": ledger.to_dict(),
            "on_unusable": setup.on_unusable,
            "contaminated": list(version.contaminated(set(splits))) if version is not None else [],
            "reviewer_mismatch": version.reviewer_mismatch(setup.saag_informed, setup.grounding)
            if version is not None else None}


def summarise(pairs: Sequence[tuple[ExampleRecord, ExampleRecord]], mechanism: Mechanism, *, run_id: str,
              seed: int = 0, stopped: str | None = None) -> EvaluationSummary:
    """``summary.json`` content from each example's ``(base, mechanism)`` records (``setup_facts`` adds the set-up's)."""
    paired = summarise_pairs(mechanism.spec, list(pairs), gated=mechanism.gated, seed=seed)
    return EvaluationSummary(
        run_id=run_id, mechanism=mechanism.spec, experimental=mechanism.experimental, n_examples=len(pairs),
        errors=paired.errors, base=paired.base, reviewed=paired.reviewed, help_harm=paired.help_harm,
        latency=paired.latency, reviewer_calls_per_item=paired.reviewer_calls_per_item,
        agent_calls_per_item=paired.agent_calls_per_item, gated_share=paired.gated_share, stopped=stopped)


__all__ = ["base_record", "call_record", "failed_record", "mechanism_record", "setup_facts", "summarise"]
