"""Finished runs read back as the sides of a comparison: records by example id, and what each side ran.

A side is one version's reviewed rows and its own base rows, keyed by example id. ``load_run_side``
builds one from a finished run directory of any verb that writes ``records.jsonl`` (evaluate,
compare, optimize) and finds what that run recorded about it: the reviewer prompt behind the
condition (``recorded_prompt``) and the ledger that paid for it (``run_costs``), read through the
typed run models (``runfiles.read_run``). ``run_contamination`` checks that prompt against its
store, as evaluate and compare do when they run. No LM is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from saag_opt.artifacts import PromptStore
from saag_opt.compare.comparison import CompareSummary, RecordedPrompt, Side, SideKey, SideSummary, side_from_records
from saag_opt.errors import ConfigError, RunError, SaagOptError
from saag_opt.evaluation.conversation_records import VERB as EPISODE_VERB
from saag_opt.evaluation.results import read_records
from saag_opt.runfiles import RECORDS_FILE, RunHeader, read_costs, read_header, read_run

if TYPE_CHECKING:
    from saag_opt.evaluation.results import EvaluationSummary

EVALUATE_VERBS = ("evaluate", EPISODE_VERB)
"""Evaluate runs: one base and one reviewed condition, the reviewer prompt and costs in their own files."""


@dataclass(frozen=True)
class RunRef:
    """A finished run directory, optionally with the reviewed condition to use (``DIR#CONDITION``)."""

    path: Path
    condition: str | None = None


def _pick_condition(ref: RunRef, conditions: list[str]) -> str:
    if ref.condition is not None:
        if ref.condition not in conditions:
            raise ConfigError(f"{ref.path}: no reviewed condition {ref.condition!r} in records.jsonl; "
                              f"available: {conditions}")
        return ref.condition
    if not conditions:
        raise ConfigError(f"{ref.path}: records.jsonl has no reviewed rows (only base); nothing to compare")
    return conditions[-1]


def _summary(run_dir: Path) -> Any:
    """An evaluate or compare run's summary model (None before the run wrote one)."""
    return read_run(run_dir, header_only=True).summary


def _side_of(summary: CompareSummary | None, condition: str) -> SideSummary | None:
    """The compare summary's side (``SideSummary``) whose reviewed condition is ``condition``, if any."""
    return next((s for s in summary.sides if s.condition == condition), None) if summary else None


def _recorded_marks(model: EvaluationSummary | SideSummary | None) -> list[str] | None:
    """A summary's ``contaminated`` when the run wrote one (older runs did not; the default is not a record)."""
    if model is None or "contaminated" not in model.model_fields_set:
        return None
    return list(model.contaminated)


def run_costs(run_dir: Path, header: RunHeader, condition: str) -> dict[str, Any] | None:
    """The ledger belonging to ``condition``: an evaluate run's costs.json, a compare run's side (else None)."""
    if header.verb in EVALUATE_VERBS:
        return read_costs(run_dir)
    if header.verb == "compare":
        side = _side_of(_summary(run_dir), condition)
        return side.costs if side is not None else None
    return None


def _needs_reviewer(mechanism: Any) -> bool:
    from saag_opt.agents import parse_mechanism  # noqa: PLC0415 - heavy: dspy (agents face); a run reader stays light

    try:
        return parse_mechanism(str(mechanism)).needs_reviewer
    except ConfigError:
        return False


def recorded_prompt(run_dir: Path, header: RunHeader, condition: str) -> RecordedPrompt | None:
    """The reviewer prompt behind a run's ``condition``, as the run recorded it.

    None when the condition has no reviewer prompt, or the run does not say which. A run of another
    verb (optimize) holds rows it copied from a compare run nested in it (its TEST phase,
    ``<run>/test/<ts>-compare``): the newest such run with ``condition`` answers.

    Raises:
        RunError: an unreadable summary of an evaluate or compare run.
    """
    if header.verb in EVALUATE_VERBS:
        config = header.config
        if not config.get("reviewer") or not _needs_reviewer(config.get("mechanism")):
            return None
        evaluated: EvaluationSummary | None = _summary(run_dir)
        reviewer = header.plugins.get("reviewer") or {}
        return RecordedPrompt({"prompt": reviewer.get("prompt") or config.get("prompt"),
                               "sha256": reviewer.get("sha256")}, config.get("prompts_dir"), _recorded_marks(evaluated))
    if header.verb == "compare":
        side = _side_of(_summary(run_dir), condition)
        given = (header.plugins.get("prompts") or {}).get(side.key) if side is not None else None
        if not given:
            return None
        return RecordedPrompt(dict(given), (header.config.get("evaluation") or {}).get("prompts_dir"),
                              _recorded_marks(side))
    for inner in sorted((p.parent for p in run_dir.glob("*/*/run.json")), reverse=True):
        try:
            inner_header = read_header(inner)
            found = recorded_prompt(inner, inner_header, condition) if inner_header.verb == "compare" else None
        except RunError:
            continue
        if found is not None:
            return found
    return None


def run_contamination(side: Side, ids: Sequence[str]) -> tuple[list[str], str | None]:
    """Splits of ``side``'s examples ``ids`` its reviewer prompt was trained or selected on, and a note.

    The prompt version the source run used is looked up in its prompt store (by the hash it
    recorded when the reference, e.g. an alias, now means another version) and asked through
    ``PromptVersion.contaminated``, the same check evaluate and compare make when they run. When
    the version cannot be found any more, the run's own recorded mark is used and the note says so.
    """
    found = side.reviewer_prompt
    if found is None:
        return [], None
    splits = {str(side.final[i].split) for i in ids if side.final[i].split}
    version = None
    try:
        store = PromptStore(found.prompts_dir)
        sha = found.prompt.get("sha256")
        try:
            version = store.resolve(str(found.shown))
        except SaagOptError:
            version = None
        if sha and (version is None or version.sha256 != sha):
            version = next(iter(store.find_by_sha(sha)), None)
    except SaagOptError:
        version = None
    if version is not None:
        return list(version.contaminated(splits)), None
    if found.contaminated is not None:
        return [s for s in found.contaminated if s in splits], (
            f"{side.key.upper()}: prompt {found.shown} is not in the store any more; its split contamination is the "
            "source run's record")
    return [], (f"{side.key.upper()}: prompt {found.shown} is not in the store; could not check it for split "
                "contamination")


def load_run_side(key: SideKey, ref: RunRef) -> tuple[Side, list[str]]:
    """A side from a finished run, plus notes (unfinished run, several reviewed conditions).

    Raises:
        RunError: unreadable ``run.json`` or ``summary.json``, or a bad record (file:line).
        ConfigError: no records, or an unknown ``#CONDITION``.
    """
    header = read_header(ref.path)
    if not (ref.path / RECORDS_FILE).is_file():
        raise ConfigError(f"{ref.path}: run has no records.jsonl (did it finish?); nothing to compare")
    # a multi-turn run's records are read whole (every turn), so the compare run keeps the conversations
    records = read_run(ref.path).records if header.verb == EPISODE_VERB else read_records(ref.path / RECORDS_FILE)
    conditions = list(dict.fromkeys(r.condition for r in records if r.condition != "base"))
    condition = _pick_condition(ref, conditions)
    notes = []
    if header.status != "success":
        notes.append(f"{key.upper()}: run {header.run_id} has status {header.status!r}; its records may be partial")
    if len(conditions) > 1 and ref.condition is None:
        notes.append(f"{key.upper()}: {header.run_id} has conditions {conditions}; using {condition!r} "
                     f"(pick another with {ref.path}#CONDITION)")
    label = header.run_id if len(conditions) == 1 else f"{header.run_id}#{condition}"
    source = {"run_dir": str(ref.path), "verb": header.verb, "status": header.status,
              "dataset": header.dataset.get("spec"), "split": header.dataset.get("split")}
    recorded = recorded_prompt(ref.path, header, condition)
    if recorded is not None:
        source["prompt"] = recorded.shown
    side = side_from_records(key, label, condition, records, source=source,
                             costs=run_costs(ref.path, header, condition), run_dir=ref.path)
    side.reviewer_prompt = recorded
    return side, notes


__all__ = ["RecordedPrompt", "RunRef", "Side", "SideKey", "load_run_side", "recorded_prompt", "run_contamination",
           "run_costs", "side_from_records"]
