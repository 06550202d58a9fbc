"""Conversations as records and numbers: every step kept, help/harm per entry, multi-turn counts.

A record is one entry (an episode) under one condition: ``base`` (the episode run with ``none``)
or the mechanism. It *is* an ``ExampleRecord`` (``correct`` = the environment's verdict, seconds,
reviewer calls, ...), so the paired base-vs-reviewed summary is the one every verb uses
(``evaluation/paired.py``: accuracy, help/harm with McNemar and the bootstrap CI), plus what only
a conversation has: every turn and step (the proposal, the review rounds, the final calls, what
was executed and what it returned), the checker's verdict (which turn failed, and why), and
counts per turn and per step.

Abstention turns (BFCL's ``miss_func`` / ``miss_param`` turns, where the truth is to call nothing)
are counted on their own: how many the agent left without a call, and a help/harm table over
them alone (was the turn left alone, base vs reviewed), since the entry verdict mixes them with
everything else.

Pure: no LM, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from saag_opt.episodes import Episode, Judgement
from saag_opt.evaluation.helpharm import HelpHarm
from saag_opt.evaluation.paired import summarise_pairs
from saag_opt.evaluation.results import (
    CallRecord,
    CandidateRecord,
    ExampleRecord,
    PairedSummary,
    RoundRecord,
)
from saag_opt.model import Prediction, canonical_json
from saag_opt.runfiles import register_summary

if TYPE_CHECKING:
    from saag_opt.agents.episode import EpisodeOutcome, StepOutcome

TEXT_LIMIT = 2000
"""Characters kept of a model's raw text and of a tool result (a file listing can be long)."""
DETAILS_LIMIT = 4000
"""Characters of the checker's evidence (state differences) kept in a record."""


class ToolResultRecord(BaseModel):
    """One call's result as the agent read it."""

    name: str | None
    """The function called."""
    content: str
    """What it returned (trimmed to ``TEXT_LIMIT``)."""
    executed: bool = True
    """False: the environment refused it and nothing ran."""


class StepRecord(BaseModel):
    """One step: proposal, reviews, what ran and what came back."""

    turn: int
    """0-based turn."""
    index: int
    """0-based step within the turn."""
    proposed: CallRecord
    """The agent's round-0 proposal."""
    rounds: list[RoundRecord] = Field(default_factory=list)
    """Review / repair rounds of the step, in order."""
    candidates: list[CandidateRecord] = Field(default_factory=list)
    """s<N>/g<N> candidates."""
    selected: int | None = None
    """The candidate that ran."""
    final: CallRecord
    """What the mechanism let through (no calls: the turn ended)."""
    executed: list[dict[str, Any]] = Field(default_factory=list)
    """The calls that ran (``[{"name", "arguments"}]``): what the checker replays."""
    results: list[ToolResultRecord] = Field(default_factory=list)
    """One per final call when they ran."""
    withheld: bool = False
    """The agent proposed calls and the review let none run (never executed)."""
    revised: bool = False
    """Calls ran that are not the ones proposed."""
    gated: bool = False
    """The SAAG gate let the proposal through without an LLM review."""
    ruling: str | None = None
    """``guard+r<N>``: allow | revise | block, and why."""
    reviewer_calls: int = 0
    """LLM reviewer calls of the step."""
    agent_calls: int = 0
    """Base-agent calls beyond the proposal."""
    seconds: float = 0.0
    """LM seconds of the step (proposal included)."""
    cached: bool = False
    """The proposal came from the base-prediction cache."""
    notes: list[str] = Field(default_factory=list)
    """Fallbacks taken."""


class TurnRecord(BaseModel):
    """One turn and its steps."""

    index: int
    """0-based turn."""
    added_tools: list[str] = Field(default_factory=list)
    """Functions that became available at this turn (``miss_func``)."""
    steps: list[StepRecord] = Field(default_factory=list)
    """The steps, in order."""
    cut_off: bool = False
    """The step limit ended the run in this turn."""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """The turn's own user messages when they are not the dataset's (tau2's user simulator's), text trimmed."""
    abstain: bool = False
    """The truth at this turn is to call nothing (from the checker's gold; never shown to the agent)."""

    @property
    def executed_calls(self) -> int:
        """Calls that ran in this turn."""
        return sum(len(step.executed) for step in self.steps)


class JudgementRecord(BaseModel):
    """The environment's verdict (for BFCL, its own checkers')."""

    valid: bool
    """Every check passed."""
    error_type: str | None = None
    """The failing check's type (``multi_turn:instance_state_mismatch``, ...)."""
    message: str | None = None
    """Its message."""
    failed_turn: int | None = None
    """The first turn that fails."""
    abstain_turns: list[int] = Field(default_factory=list)
    """Turns whose truth is to call nothing."""
    checks: dict[str, bool] = Field(default_factory=dict)
    """Each checker's own answer (BFCL's leaderboard counts ``multi_turn_checker`` alone)."""
    details: dict[str, Any] = Field(default_factory=dict)
    """Evidence (state differences, missing results; tau2's reward breakdown), trimmed to ``DETAILS_LIMIT`` characters."""
    reward: float | None = None
    """The benchmark's own score when it has one (tau2's reward)."""


class EpisodeRecord(ExampleRecord):
    """One entry under one condition: an ``ExampleRecord`` (``correct`` = valid) with every turn and step."""

    turns: list[TurnRecord] = Field(default_factory=list)
    """The turns that ran, in order."""
    judgement: JudgementRecord | None = None
    """The verdict (None when the entry failed before one existed)."""


def _text(value: str | None, limit: int = TEXT_LIMIT) -> str | None:
    return value if value is None or len(value) <= limit else value[:limit]


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    return dict(message) | {"content": _text(str(message.get("content") or ""))}


def _call(prediction: Prediction) -> CallRecord:
    return CallRecord(calls=[c.to_dict() for c in prediction.calls], raw=_text(prediction.raw),
                      status=prediction.status)


def _details(judgement: Judgement) -> dict[str, Any]:
    text = json.dumps(dict(judgement.details), default=str, ensure_ascii=False)
    return json.loads(text) if len(text) <= DETAILS_LIMIT else {"truncated": text[:DETAILS_LIMIT]}


def judgement_record(judgement: Judgement) -> JudgementRecord:
    """A verdict as stored."""
    return JudgementRecord(valid=judgement.valid, error_type=judgement.error_type, message=judgement.message,
                           failed_turn=judgement.failed_turn, abstain_turns=list(judgement.abstain_turns),
                           checks=dict(judgement.checks), details=_details(judgement), reward=judgement.reward)


def step_record(step: StepOutcome) -> StepRecord:
    """One step as stored."""
    out = step.outcome
    ruling = f"{out.ruling.action}: {out.ruling.reason}" if out.ruling is not None else None
    return StepRecord(
        turn=step.turn, index=step.index, proposed=_call(step.proposed),
        rounds=[RoundRecord(index=r.index, reviewer=r.reviewer, verdict=r.verdict, tentative=_call(r.tentative),
                            feedback=r.feedback, revised=_call(r.revised) if r.revised else None, note=r.note)
                for r in out.rounds],
        candidates=[CandidateRecord(index=c.index, temperature=c.temperature, prediction=_call(c.prediction),
                                    score=c.score, rationale=c.rationale, passed=c.passed) for c in out.candidates],
        selected=out.selected, final=_call(step.final), executed=[c.to_dict() for c in step.executed],
        results=[ToolResultRecord(name=r.name, content=_text(r.content) or "", executed=r.executed)
                 for r in step.results],
        withheld=step.withheld, revised=step.revised, gated=out.gated, ruling=ruling,
        reviewer_calls=out.reviewer_calls, agent_calls=out.agent_calls, seconds=out.seconds, cached=out.base.cached,
        notes=list(out.notes))


def episode_record(run_id: str, episode: Episode, condition: str, outcome: EpisodeOutcome, judgement: Judgement, *,
                   tokens: int = 0, untimed: int = 0) -> EpisodeRecord:
    """One entry's record from its run and its verdict."""
    abstain = set(judgement.abstain_turns)
    steps = outcome.steps
    turns = [TurnRecord(index=t.index, added_tools=list(t.added_tools), steps=[step_record(s) for s in t.steps],
                        cut_off=t.cut_off, messages=[_message(m) for m in t.messages], abstain=t.index in abstain)
             for t in outcome.turns]
    reviewed = [s for s in steps if s.outcome.mechanism != "none"]
    return EpisodeRecord(
        run_id=run_id, example_id=episode.id, category=episode.category, split=episode.split, condition=condition,
        correct=judgement.valid, truth_reason=judgement.error_type or "valid", reviewer_calls=outcome.reviewer_calls,
        agent_calls=outcome.agent_calls, gated=bool(reviewed) and all(s.outcome.gated for s in reviewed),
        seconds=outcome.seconds, untimed_replays=untimed, tokens=tokens,
        cached=bool(steps) and all(s.outcome.base.cached for s in steps),
        notes=[note for s in steps for note in s.outcome.notes], reviewer_unusable=outcome.reviewer_unusable,
        turns=turns, judgement=judgement_record(judgement))


def failed_episode_record(run_id: str, episode: Episode, condition: str, message: str) -> EpisodeRecord:
    """An entry that failed (an LM call after its retries, ...): scored invalid, the error kept."""
    return EpisodeRecord(run_id=run_id, example_id=episode.id, category=episode.category, split=episode.split,
                         condition=condition, correct=False, truth_reason="error", error=message)


# -- counts ------------------------------------------------------------------------------------------


class TurnCounts(BaseModel):
    """One turn index over the entries of a condition."""

    turn: int
    """0-based turn."""
    reached: int
    """Entries that ran this turn."""
    passed: int
    """Entries valid through this turn (no failure at it or before)."""
    abstain: int
    """Entries whose truth at this turn is to call nothing."""
    executed_calls: int
    """Calls that ran at this turn."""
    withheld_steps: int
    """Steps whose proposed calls the review let none of run."""
    revised_steps: int
    """Steps whose calls ran revised."""


class ConversationCounts(BaseModel):
    """What a condition did over its entries (errored entries left out)."""

    episodes: int
    """Entries counted."""
    turns: int
    """Turns run."""
    steps: int
    """Steps (one mechanism run each)."""
    proposed_calls: int
    """Calls the agent proposed (round 0 of each step)."""
    executed_calls: int
    """Calls that ran."""
    withheld_steps: int
    """Steps whose proposed calls the review let none of run (a block, or a revision into no call)."""
    withheld_calls: int
    """Proposed calls of those steps (never executed)."""
    revised_steps: int
    """Steps whose calls ran revised."""
    reviewed_steps: int
    """Steps the LLM reviewer saw."""
    cut_off: int
    """Entries the step limit cut off."""
    repeated_steps: int | None = None
    """Steps that ran a call (same name and arguments) already run earlier in the same turn: the agent
    going round in circles, which a review could stop; None in summaries written before it was counted."""
    withheld_per_step: float | None
    """withheld_steps / steps."""
    revised_per_step: float | None
    """revised_steps / steps."""
    abstain_turns: int
    """Turns whose truth is to call nothing (``miss_func`` / ``miss_param``)."""
    abstained: int
    """Of those, turns that ran no call (what the truth asks)."""
    abstention_rate: float | None
    """abstained / abstain_turns."""
    per_turn: list[TurnCounts] = Field(default_factory=list)
    """The same, by turn index."""


def _reached(record: EpisodeRecord, turn: int) -> bool:
    return turn < len(record.turns)


def _passed(record: EpisodeRecord, turn: int) -> bool:
    failed = record.judgement.failed_turn if record.judgement is not None else 0
    return record.correct or (failed is not None and failed > turn)


def repeated_steps(turn: TurnRecord) -> int:
    """Steps of ``turn`` that executed a call (name and arguments) the turn had already executed."""
    seen: set[str] = set()
    repeats = 0
    for step in turn.steps:
        calls = {canonical_json([call.get("name"), call.get("arguments")]) for call in step.executed}
        repeats += bool(calls & seen)
        seen |= calls
    return repeats


def conversation_counts(records: Sequence[EpisodeRecord]) -> ConversationCounts:
    """The counts of one condition's records (those without an error)."""
    ok = [r for r in records if r.error is None]
    turns = [t for r in ok for t in r.turns]
    steps = [s for t in turns for s in t.steps]
    abstain = [t for t in turns if t.abstain]
    width = max((len(r.turns) for r in ok), default=0)
    per_turn = []
    for index in range(width):
        here = [r.turns[index] for r in ok if _reached(r, index)]
        per_turn.append(TurnCounts(
            turn=index, reached=len(here), passed=sum(_passed(r, index) for r in ok if _reached(r, index)),
            abstain=sum(t.abstain for t in here), executed_calls=sum(t.executed_calls for t in here),
            withheld_steps=sum(s.withheld for t in here for s in t.steps),
            revised_steps=sum(s.revised for t in here for s in t.steps)))
    withheld = [s for s in steps if s.withheld]
    revised = sum(s.revised for s in steps)
    abstained = sum(t.executed_calls == 0 for t in abstain)
    return ConversationCounts(
        episodes=len(ok), turns=len(turns), steps=len(steps), proposed_calls=sum(len(s.proposed.calls) for s in steps),
        executed_calls=sum(len(s.executed) for s in steps), withheld_steps=len(withheld),
        withheld_calls=sum(len(s.proposed.calls) for s in withheld), revised_steps=revised,
        reviewed_steps=sum(s.reviewer_calls > 0 for s in steps), cut_off=sum(any(t.cut_off for t in r.turns) for r in ok),
        repeated_steps=sum(map(repeated_steps, turns)),
        withheld_per_step=len(withheld) / len(steps) if steps else None,
        revised_per_step=revised / len(steps) if steps else None, abstain_turns=len(abstain), abstained=abstained,
        abstention_rate=abstained / len(abstain) if abstain else None, per_turn=per_turn)


def abstention_pairs(pairs: Iterable[tuple[EpisodeRecord, EpisodeRecord]]) -> list[tuple[bool, bool]]:
    """Per abstention turn that both conditions reached: (base left it without a call, reviewed did)."""
    out = []
    for base, reviewed in pairs:
        if base.error is not None or reviewed.error is not None:
            continue
        for b, r in zip(base.turns, reviewed.turns):
            if b.abstain and r.abstain:
                out.append((b.executed_calls == 0, r.executed_calls == 0))
    return out


class EpisodeSummary(PairedSummary):
    """``summary.json`` of a multi-turn evaluation: the paired summary, plus the conversation counts.

    ``correct`` means the entry is valid by the environment's checkers (or tau2's reward of 1).
    """

    n_episodes: int
    """Entries evaluated."""
    leaderboard: dict[str, float | None] = Field(default_factory=dict)
    """Per condition, the share valid by ``multi_turn_checker`` alone (BFCL's own leaderboard number)."""
    conversation: dict[str, ConversationCounts] = Field(default_factory=dict)
    """``base`` and the mechanism: turns, steps, withheld / revised calls, abstention, per turn."""
    abstention_help_harm: HelpHarm | None = None
    """Over abstention turns alone: left without a call, base vs reviewed (None without such turns)."""
    pass_hat_k: dict[str, dict[int, float]] = Field(default_factory=dict)
    """tau2 datasets: per condition, pass^k for k = 1 .. the trials, as tau2 computes it (``agents.tau2.pass_hat_ks``)."""
    @property
    def n_items(self) -> int:
        """Entries evaluated."""
        return self.n_episodes

    @property
    def is_tau2(self) -> bool:
        """A tau2 run (only tau2 runs carry pass^k): "valid" is tau2's reward of 1, not BFCL's checkers."""
        return bool(self.pass_hat_k)

    @property
    def judged_by(self) -> str:
        """Whose verdict "valid" is, for table titles."""
        return "tau2's evaluator" if self.is_tau2 else "BFCL's checkers"


def leaderboard_share(records: Sequence[EpisodeRecord]) -> float | None:
    """Valid by ``multi_turn_checker`` alone, over every entry (an error counts as invalid): BFCL's leaderboard number."""
    if not records:
        return None
    return sum(bool(r.judgement.checks.get("multi_turn_checker", r.judgement.valid))
               for r in records if r.judgement is not None) / len(records)


def gated_step_share(pairs: Sequence[tuple[EpisodeRecord, EpisodeRecord]]) -> float | None:
    """The share of the reviewed condition's steps that the gate passed, over the entries with no error.

    Per step, not per entry: a gate that passes 4 of an entry's 10 steps saves 4 reviews, while the
    entry-level share (every step passed) would count that entry as reviewed. None without steps.
    """
    steps = [step for base, reviewed in pairs if base.error is None and reviewed.error is None
             for turn in reviewed.turns for step in turn.steps]
    return sum(step.gated for step in steps) / len(steps) if steps else None


def summarise_episodes(run_id: str, mechanism: str, pairs: Sequence[tuple[EpisodeRecord, EpisodeRecord]], *,
                       experimental: bool, gated: bool, seed: int = 0, stopped: str | None = None) -> EpisodeSummary:
    """The summary of ``(base record, reviewed record)`` per entry."""
    paired = summarise_pairs(mechanism, list(pairs), gated=gated, seed=seed)
    bases, finals = [b for b, _ in pairs], [f for _, f in pairs]
    abstention = abstention_pairs(pairs)
    return EpisodeSummary(
        run_id=run_id, mechanism=mechanism, experimental=experimental, n_episodes=len(pairs), errors=paired.errors,
        base=paired.base, reviewed=paired.reviewed, help_harm=paired.help_harm, latency=paired.latency,
        reviewer_calls_per_item=paired.reviewer_calls_per_item, agent_calls_per_item=paired.agent_calls_per_item,
        gated_share=gated_step_share(pairs) if gated else None,
        leaderboard={"base": leaderboard_share(bases), mechanism: leaderboard_share(finals)},
        conversation={"base": conversation_counts(bases), mechanism: conversation_counts(finals)},
        abstention_help_harm=HelpHarm.from_pairs(abstention, seed=seed) if abstention else None, stopped=stopped)


VERB = "evaluate-multiturn"
"""The run kind of ``saag-opt evaluate`` on a multi-turn dataset (``<timestamp>-evaluate-multiturn/``)."""

register_summary(VERB, EpisodeSummary, records=EpisodeRecord)

__all__ = ["VERB", "ConversationCounts", "EpisodeRecord", "EpisodeSummary", "JudgementRecord", "StepRecord", "ToolResultRecord",
           "TurnCounts", "TurnRecord", "abstention_pairs", "conversation_counts", "episode_record",
           "failed_episode_record", "gated_step_share", "judgement_record", "leaderboard_share", "step_record",
           "summarise_episodes"]
