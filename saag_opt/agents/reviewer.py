"""The reviewer: a ``dspy.Module`` with three predictors - review, select, grade (docs/design.md §5).

The predictor names ``review``, ``select`` and ``grade`` are the keys of a prompt artifact's
``instructions`` and the components GEPA evolves. Inputs are rendered strings built only from what
the base agent saw (messages, registry) and what it produced (calls): ``render_*`` never touch
``Example.gold`` or ``Example.expect`` - tests/agents/test_reviewer.py proves it.

``SaagInformedReviewer`` (experimental) additionally shows the review predictor the SAAG cascade
report of the tentative calls, computed without gold (``blind_cascade``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import dspy
from dspy.utils.exceptions import AdapterParseError

from saag_opt.agents.conversation import StepExample, value_trace
from saag_opt.agents.report_note import EMPTY_NOTE, REPORT_NOTE, note_of, with_note
from saag_opt.errors import ArtifactError, SaagOptError
from saag_opt.lm.client import SaagLM
from saag_opt.lm.retry import ContextOverflowError
from saag_opt.model import Example, Prediction
from saag_opt.saag import check_calls, unanchored
from saag_opt.saag.modes import INTERVENTION_GROUNDING, GroundingMode

if TYPE_CHECKING:
    from saag_opt.artifacts import PromptVersion
    from saag_opt.saag import PredictionReport

_R = TypeVar("_R", bound="Reviewer")

PREDICTOR_NAMES = ("review", "select", "grade")
"""Predictor names, as ``named_predictors()`` and prompt artifacts spell them."""




# -- signatures ------------------------------------------------------------------------------------


class ReviewSignature(dspy.Signature):
    """Review the tentative tool call(s) a tool-calling agent proposes before they are executed.
    Decide whether they contain an error (wrong function, wrong or missing arguments, a call when no
    function fits, or no call when one is needed) and, if so, give concise feedback to fix it.
    """  # noqa: D205 - the docstring is the LM instruction; its wording is the prompt

    conversation: str = dspy.InputField(desc="the conversation so far")
    tool_docs: str = dspy.InputField(desc="JSON documentation of the available functions")
    tentative_calls: str = dspy.InputField(desc="the calls the agent proposes (JSON), or that it made none")
    error: bool = dspy.OutputField(desc="true if the tentative calls must be revised")
    feedback: str = dspy.OutputField(desc="what is wrong and how to fix it; empty when there is no error")


class SaagReviewSignature(ReviewSignature):
    """Review the tentative tool call(s) a tool-calling agent proposes before they are executed,
    using the automatic SAAG checks (registry, structure, grounding in the request) as evidence.
    Decide whether they contain an error and, if so, give concise feedback to fix it.
    """  # noqa: D205 - the docstring is the LM instruction; its wording is the prompt

    saag_report: str = dspy.InputField(desc="automatic SAAG cascade diagnostics of the tentative calls")


class ReportNoteSignature(dspy.Signature):
    """Never sent to an LM: its instructions are the note shown above the SAAG report (``REPORT_NOTE``)."""

    checks: str = dspy.InputField(desc="the SAAG report of the tentative calls")
    shown: str = dspy.OutputField(desc="the report as the reviewer sees it, after the note")


class SelectSignature(dspy.Signature):
    """Several candidate responses of a tool-calling agent are listed with indices. Pick the index of
    the candidate whose tool calls best serve the request.
    """  # noqa: D205 - the docstring is the LM instruction; its wording is the prompt

    conversation: str = dspy.InputField(desc="the conversation so far")
    tool_docs: str = dspy.InputField(desc="JSON documentation of the available functions")
    candidates: str = dspy.InputField(desc="numbered candidate responses, from [0]")
    index: int = dspy.OutputField(desc="the index of the best candidate")


class GradeSignature(dspy.Signature):
    """Grade one candidate response of a tool-calling agent: how likely are its tool calls exactly
    right for the request? 1.0 = certainly correct, 0.0 = certainly wrong.
    """  # noqa: D205 - the docstring is the LM instruction; its wording is the prompt

    conversation: str = dspy.InputField(desc="the conversation so far")
    tool_docs: str = dspy.InputField(desc="JSON documentation of the available functions")
    candidate: str = dspy.InputField(desc="the candidate response")
    score: float = dspy.OutputField(desc="a number from 0.0 to 1.0")
    rationale: str = dspy.OutputField(desc="a short justification")


# -- rendering (no gold) ---------------------------------------------------------------------------


def render_conversation(example: Example) -> str:
    """``role: content`` lines of the messages the agent saw."""
    lines = []
    for message in example.messages:
        content = message.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False, default=str)
        lines.append(f"{message.get('role', 'user')}: {content}")
    return "\n".join(lines)


def render_tool_docs(example: Example) -> str:
    """The registry as JSON function docs (original names, without private schema keys)."""
    docs = [tool.to_openai_tool()["function"] | {"name": tool.name} for tool in example.registry]
    return json.dumps(docs, ensure_ascii=False, indent=1)


def render_calls(prediction: Prediction) -> str:
    """The calls as JSON, or a plain statement that the agent made no call (with its text)."""
    if prediction.calls:
        return json.dumps([c.to_dict() for c in prediction.calls], ensure_ascii=False)
    if prediction.status == "unparsable":
        return f"(the agent's reply could not be read as function calls) {prediction.raw or ''}".strip()
    text = (prediction.raw or "").strip()
    return "(no function call)" + (f" The agent answered: {text}" if text else "")


SOURCE_WORDS: Mapping[str, str] = {
    "user": "the user's words",
    "system": "the system prompt",
    "field": "a data field of the result of {tool}",
    "named": "the result of {tool}, which the user's request names as the source",
    "text": "the text of the result of {tool}, which the user's request does not name as a source",
    "replaced": "the text of the result of {tool}, where the user's request states its own value of this kind",
    "derived": "no message (the agent composed it)",
}
"""How the reviewer is told where a value comes from (``saag.policy`` source classes)."""
VALUE_SOURCES_HEADER = "Where each value of the calls comes from (traced from the messages; not a verdict):"


def render_value_sources(example: Example, prediction: Prediction) -> str:
    """Lines on where each decisive value of the calls was found, when tool results are in view; else "".

    Why: a reviewer asked whether a call serves the user's request should not have to trace an IBAN back
    through the conversation itself; the data-flow trace (``saag.flow``, by the guard's policy, the one
    its injection rule made: ``conversation.value_trace``) does it without a verdict: the guard's policy
    has already blocked what it blocks before any review. No policy (the marker rules alone): no lines.
    """
    report = value_trace(example, prediction.calls)
    if report is None:
        return ""
    lines = [f"- {prediction.calls[i].name}.{v.path} = {json.dumps(v.value, ensure_ascii=False, default=str)} "
             f"({v.role}): {SOURCE_WORDS[v.source].format(tool=v.tool)}" for i, v in report.values]
    return "\n".join([VALUE_SOURCES_HEADER, *lines]) if lines else ""


def render_candidates(candidates: Sequence[Prediction]) -> str:
    """``[i] <calls>`` lines for the selector."""
    return "\n".join(f"[{i}] {render_calls(p)}" for i, p in enumerate(candidates))


def blind_cascade(prediction: Prediction, example: Example,
                  grounding: GroundingMode = INTERVENTION_GROUNDING) -> PredictionReport:
    """Gold-free SAAG cascade over a tentative prediction (``check_calls``: registry + query only).

    An abstention or an unreadable reply gets one FNEM = -1 report ("no parsable call"): without
    gold nobody inside a mechanism may know whether a call was expected. ``grounding``: ``paper``
    or ``calibrated`` stage 3 (``INTERVENTION_GROUNDING``).
    """
    return check_calls(prediction.calls, example.registry, example.query, grounding=grounding)


UNANCHORED_NOTE = ("none of its argument values is found in the request; if no available function fits the "
                   "request, the right response is no call")
"""Report line for an ``unanchored`` call: the cascade's clearest sign of a call to a function that fits
nothing (its metrics alone, AVEM = 0 and perhaps "passed", do not say it in words)."""

NO_CALL_REPORT = ("(no function call: the automatic checks cannot judge an abstention; decide from the request "
                  "and the documentation whether an available function fits)")
"""The report shown for a tentative answer that makes no call on purpose. The cascade's FNEM = -1 report
(psi1: "answer with a call") would tell the reviewer a call is wanted, which without gold nobody knows."""


def render_saag_report(report: PredictionReport) -> str:
    """A short text rendering of a cascade report (metrics + corrections; built without gold)."""
    lines = []
    for i, call in enumerate(report.calls):
        verdict = "passed" if call.passed else f"failed at stage {call.stage_reached}"
        metrics = {k: v for k, v in call.to_dict().items()
                   if k in ("fnem", "ncs", "rpr", "spr", "avem", "qslo", "vhr") and v is not None}
        lines.append(f"call {i}: {verdict}; " + ", ".join(f"{k}={_fmt(v)}" for k, v in metrics.items()))
    lines += [f"- {c}" for c in report.corrections]
    lines += [f"- call {i}: {UNANCHORED_NOTE}." for i, call in enumerate(report.calls) if unanchored(call)]
    return "\n".join(lines) or "(no calls)"


def _fmt(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


# -- verdicts --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """One review: ``error`` True = reject; ``failed`` = the reviewer's output was unusable."""

    error: bool
    feedback: str
    failed: str | None = None


@dataclass(frozen=True, slots=True)
class Grade:
    """One grading: ``score`` in [0, 1] or None when the grader's output was unusable."""

    score: float | None
    rationale: str
    failed: str | None = None


def _is_format_failure(exc: Exception) -> bool:
    """Dspy adapter parse failures are per-call data; transport failures propagate."""
    return isinstance(exc, (AdapterParseError, ValueError, TypeError)) and not _is_transport(exc)


def _is_transport(exc: Exception) -> bool:
    return isinstance(exc, SaagOptError)


def docs_first(predictor: Any, example: Example, inputs: dict[str, Any]) -> dict[str, Any]:
    """``inputs``, asking a conversation step with the tool docs before the conversation.

    Why: a prompt is reused from its first differing token on. In a conversation the tool docs never
    change and the conversation only grows, so docs first lets each step's review reuse the last
    one's whole prompt (measured on BFCL multi-turn with the 1.5B: 512 of ~3,600 tokens reused per
    review in the signature's order, docs/design.md §30). The instructions stay the predictor's own
    (GEPA's), only the field order changes; a single call keeps the signature's order, its requests
    and cache keys byte for byte.
    """
    if not isinstance(example, StepExample):
        return inputs
    signature = predictor.signature
    moved = signature.delete("tool_docs").prepend("tool_docs", signature.input_fields["tool_docs"], str)
    return {**inputs, "signature": moved}


class Reviewer(dspy.Module):
    """Reviewer program; ``prompt_version`` names the artifact its instructions came from.

    The ``review_call`` / ``select_candidate`` / ``grade_candidate`` helpers render the inputs
    and turn unparsable LM output into data (``Verdict.failed``), so a flaky
    reviewer never loses an example.
    """

    experimental = False
    review_signature: type[dspy.Signature] = ReviewSignature

    def __init__(self) -> None:
        super().__init__()
        self.review = dspy.Predict(self.review_signature)
        self.select = dspy.Predict(SelectSignature)
        self.grade = dspy.Predict(GradeSignature)
        self.prompt_version: str | None = None
        self.prompt_sha256: str | None = None

    def forward(self, conversation: str, tool_docs: str, tentative_calls: str,
                saag_report: str | None = None) -> dspy.Prediction:
        """The review predictor (what GEPA runs and evolves together with select/grade)."""
        return self.review(conversation=conversation, tool_docs=tool_docs, tentative_calls=tentative_calls)

    @classmethod
    def from_prompt(cls: type[_R], version: PromptVersion | Mapping[str, str]) -> _R:
        """A reviewer whose predictors carry the artifact's instructions.

        Raises:
            ArtifactError: the artifact names a predictor this reviewer does not have.
        """
        instructions = version if isinstance(version, Mapping) else version.instructions
        unknown = sorted(set(instructions) - set(PREDICTOR_NAMES) - {REPORT_NOTE})
        if unknown:
            raise ArtifactError(f"prompt has instructions for unknown predictor(s) {unknown}; "
                                f"a reviewer has {[*PREDICTOR_NAMES, REPORT_NOTE]}")
        reviewer = cls()
        for name, text in instructions.items():
            predictor = getattr(reviewer, name, None)
            if predictor is None:  # the report note, on a reviewer that shows no report
                continue
            predictor.signature = predictor.signature.with_instructions(text)
        if not isinstance(version, Mapping):
            reviewer.prompt_version, reviewer.prompt_sha256 = version.ref, version.sha256
        return reviewer

    def instructions(self) -> dict[str, str]:
        """Predictor name -> current instruction text."""
        return {name: p.signature.instructions for name, p in self.named_predictors()}

    def review_inputs(self, example: Example, prediction: Prediction) -> dict[str, str]:
        """The review predictor's inputs for this tentative prediction."""
        traced = render_value_sources(example, prediction)
        return {"conversation": render_conversation(example), "tool_docs": render_tool_docs(example),
                "tentative_calls": render_calls(prediction) + (f"\n\n{traced}" if traced else "")}

    def review_call(self, example: Example, prediction: Prediction) -> Verdict:
        """Approve or reject a tentative prediction.

        An unreadable reply is retried once, then returned as ``failed`` (the mechanism's
        ``on_unusable`` policy decides what it means).
        """
        out, failure = ask_twice(self.review, docs_first(self.review, example, self.review_inputs(example, prediction)),
                                 lambda o: (bool(o.error), str(o.feedback or "").strip()))
        if out is None:
            return Verdict(False, "", failed=failure)
        return Verdict(*out)

    def select_candidate(self, example: Example, candidates: Sequence[Prediction]) -> tuple[int | None, str | None]:
        """The selector's index (None if unusable after one retry, out of range included) and a failure note."""
        def read(out: Any) -> int:
            index = int(out.index)
            if not 0 <= index < len(candidates):
                raise ValueError(f"index {index} is not one of the {len(candidates)} candidates")
            return index

        return ask_twice(self.select, docs_first(self.select, example, {
            "conversation": render_conversation(example), "tool_docs": render_tool_docs(example),
            "candidates": render_candidates(candidates)}), read)

    def grade_candidate(self, example: Example, candidate: Prediction) -> Grade:
        """Score one candidate in [0, 1] (clamped); unusable output (after one retry) gives ``score=None``."""
        def read(out: Any) -> tuple[float, str]:
            score = float(out.score)
            if math.isnan(score):
                raise ValueError("score is NaN")
            return min(1.0, max(0.0, score)), str(out.rationale or "").strip()

        out, failure = ask_twice(self.grade, docs_first(self.grade, example, {
            "conversation": render_conversation(example), "tool_docs": render_tool_docs(example),
            "candidate": render_calls(candidate)}), read)
        return Grade(None, "", failed=failure) if out is None else Grade(*out)


RETRY_CONFIG = {"saag_retry": 1}
"""Predict ``config`` of the retry: ``SaagLM`` files the retry under its own cache key, so the
retry is a fresh request the first time and a cache hit on every re-run."""


def ask_twice(predictor: Any, inputs: Mapping[str, Any], read: Any) -> tuple[Any, str | None]:
    """``(read(predictor(**inputs)), None)``, asking once more when the reply cannot be read.

    Like a malformed reply, an unreadable one is retried; ``(None, why)`` when the second reply is
    unreadable too. A request that does not fit the reviewer's context is ``(None, why)`` at once: no
    review can come back, and asking again overflows again. Transport failures propagate: they are not
    the reviewer's answer.
    """
    failure: str | None = None
    for attempt in range(2):
        try:
            out = predictor(**inputs) if attempt == 0 else predictor(**inputs, config=_retry_config(predictor))
            return read(out), None
        except ContextOverflowError as exc:
            return None, f"the review does not fit the reviewer's context: {str(exc)[:200]}"
        except Exception as exc:
            if not _is_format_failure(exc):
                raise
            failure = f"{type(exc).__name__}: {str(exc)[:200]}"
    return None, failure


def _retry_config(predictor: Any) -> dict[str, Any]:
    lm = getattr(predictor, "lm", None) or dspy.settings.lm
    return dict(RETRY_CONFIG) if isinstance(lm, SaagLM) else {}


class SaagInformedReviewer(Reviewer):
    """Reviewer whose review predictor also sees the (gold-free) SAAG cascade report. Experimental."""

    experimental = True
    review_signature = SaagReviewSignature
    grounding: GroundingMode = INTERVENTION_GROUNDING
    """Stage-3 mode of the report it shows (the evaluate config sets it per run)."""

    def __init__(self) -> None:
        super().__init__()
        self.report = dspy.Predict(ReportNoteSignature.with_instructions(EMPTY_NOTE))

    def load_state(self, state: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """Dspy's load, for a saved program without a report note too (exported versions, older saves)."""
        if REPORT_NOTE not in state:
            state = {**state, REPORT_NOTE: self.report.dump_state()}
        return super().load_state(state, *args, **kwargs)

    def forward(self, conversation: str, tool_docs: str, tentative_calls: str,
                saag_report: str | None = None) -> dspy.Prediction:
        """The review predictor with the SAAG report as an extra input."""
        return self.review(conversation=conversation, tool_docs=tool_docs, tentative_calls=tentative_calls,
                           saag_report=saag_report or "(no report)")

    def review_inputs(self, example: Example, prediction: Prediction) -> dict[str, str]:
        """Base inputs + ``saag_report`` of a blind cascade over the tentative calls (``NO_CALL_REPORT`` for none)."""
        inputs = super().review_inputs(example, prediction)
        report = (NO_CALL_REPORT if prediction.declined
                  else render_saag_report(blind_cascade(prediction, example, self.grounding)))
        shown = with_note(note_of(self.report.signature.instructions), report)
        # GEPA reflects on a component through its trace: the note's "call" is this rendering, recorded with
        # what the review saw besides (so the reflection reads the request, the call and the report)
        _trace(self.report, {**inputs, "checks": report}, dspy.Prediction(shown=shown))
        inputs["saag_report"] = shown
        return inputs


def _trace(predictor: Any, inputs: dict[str, Any], outputs: dspy.Prediction) -> None:
    """Append to dspy's trace as its own predictors do (bounded by ``max_trace_size``)."""
    trace = dspy.settings.trace
    if trace is None or dspy.settings.max_trace_size <= 0:
        return
    if len(trace) >= dspy.settings.max_trace_size:
        trace.pop(0)
    trace.append((predictor, inputs, outputs))


def make_reviewer(prompt: PromptVersion | Mapping[str, str], *, saag_informed: bool = False,
                  grounding: GroundingMode = INTERVENTION_GROUNDING) -> Reviewer:
    """The reviewer for ``prompt``: plain, or SAAG-informed showing a report with stage-3 ``grounding``.

    Why one builder: evaluate, compare, tune, optimize's rollouts and the runtime Guard must put the
    same request in front of the reviewer for the same options (``grounding`` is ignored by a plain one).

    Raises:
        ArtifactError: the prompt names a predictor a reviewer does not have.
    """
    if not saag_informed:
        return Reviewer.from_prompt(prompt)
    reviewer = SaagInformedReviewer.from_prompt(prompt)
    reviewer.grounding = grounding
    return reviewer
