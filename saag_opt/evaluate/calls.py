"""Single calls as evaluate work: per example, the base agent alone and the mechanism, as two records.

The base prediction is computed once and cached on disk (``BasePredictionCache``), so other
mechanisms and prompt versions reuse it for free. An LM call that fails after its retries, or any
other error inside one example, becomes a record with ``error`` (scored incorrect); no example is
ever lost (docs/design.md §10). The loop that runs examples is ``evaluate.loop``; the run directory
around it is ``evaluate.run``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from saag_opt import telemetry
from saag_opt.agents.base import BasePredictionCache
from saag_opt.agents.mechanisms.base import Mechanism
from saag_opt.agents.setup import Condition, open_setup
from saag_opt.errors import CostCapReached, ModelUnavailableError
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluation.estimate import Estimate, estimate_evaluation
from saag_opt.evaluation.records import base_record, failed_record, mechanism_record, summarise
from saag_opt.evaluation.results import EvaluationSummary, ExampleRecord
from saag_opt.events import EventSink
from saag_opt.lm import CostLedger
from saag_opt.lm.batch.rounds import BATCH_WORKERS, BatchRounds
from saag_opt.lm.latency import lm_clock
from saag_opt.model import Example
from saag_opt.paths import base_predictions_dir


@dataclass(frozen=True)
class CallWork:
    """Single calls, opened for a run: the set-up's condition, how many run at once, the Batch API rounds."""

    condition: Condition
    run_id: str
    workers: int
    batch: BatchRounds | None = None
    """The Batch API rounds every LM call of the run joins (``--batch``), else None."""

    def in_flight(self, todo: int) -> int:
        """``workers`` examples at once; under ``--batch`` as many as a round holds, each a worker of the rounds."""
        if self.batch is None:
            return self.workers
        in_flight = min(max(1, todo), BATCH_WORKERS)
        self.batch.expect(todo, in_flight)
        return in_flight

    def run_item(self, item: Example) -> tuple[ExampleRecord, ExampleRecord]:
        """Both records for one example (as a worker of the batch rounds under ``--batch``), in one span."""
        attributes = {"saag_opt.example.id": item.id, "saag_opt.example.category": item.category,
                      "saag_opt.mechanism": self.condition.mechanism.spec, "saag_opt.run_id": self.run_id}
        with telemetry.span("saag_opt.example", attributes) as current, \
                self.batch.worker() if self.batch is not None else nullcontext():
            base, final = self._records(item)
            telemetry.set_attributes(current, {"saag_opt.base.correct": base.correct,
                                               "saag_opt.final.correct": final.correct, "saag_opt.error": final.error})
            return base, final

    def progress(self, pair: tuple[ExampleRecord, ExampleRecord]) -> str:
        """The example's id."""
        return pair[0].example_id

    def summarise(self, pairs: Sequence[tuple[ExampleRecord, ExampleRecord]], *, seed: int,
                  stopped: str | None) -> EvaluationSummary:
        """The paired numbers of the examples that finished."""
        return summarise(pairs, self.condition.mechanism, run_id=self.run_id, seed=seed, stopped=stopped)

    def close(self) -> None:
        """Workers still waiting on a batch give up; it stays in batches.json (a resume collects it)."""
        if self.batch is not None:
            self.batch.close()

    def _records(self, example: Example) -> tuple[ExampleRecord, ExampleRecord]:
        """Both records for one example; any failure becomes an ``error`` record.

        Raises:
            CostCapReached: the spend cap refused a call; the example is unfinished and not recorded.
            ModelUnavailableError: a model cannot be reached or refuses the key; recording every later
                example as an error would only hide that, so the run stops (unfinished, not recorded).
        """
        condition, run_id = self.condition, self.run_id
        spec = condition.mechanism.spec
        try:
            with lm_clock() as base_clock:  # counts the base call's replays of unknown time
                base = condition.ctx.propose_initial(condition.agent, example)
            base_row = base_record(run_id, example, base, base_clock.untimed)
        except (CostCapReached, ModelUnavailableError):
            raise
        except Exception as exc:
            message = error_text(exc)
            return failed_record(run_id, example, "base", message), failed_record(run_id, example, spec, message)
        try:
            with measured(condition.reviewer_lm) as usage:
                outcome = condition.run(example)
            return base_row, mechanism_record(run_id, example, outcome, usage.tokens,
                                              base_clock.untimed + usage.untimed)
        except (CostCapReached, ModelUnavailableError):
            raise
        except Exception as exc:
            failed = failed_record(run_id, example, spec, error_text(exc))
            return base_row, failed.model_copy(update={"base": base_row.final, "base_saag": base_row.saag})


class Calls:
    """How ``run_evaluation`` runs a single-call workload: its record type, its work, its header, its estimate."""

    record = ExampleRecord

    def open(self, config: EvaluateConfig, run_dir: Path, ledger: CostLedger,
             on_event: EventSink | None) -> tuple[Condition, CallWork]:
        """The set-up opened on ``ledger`` (under ``--batch``, on the run's Batch API rounds), and its work."""
        batch = BatchRounds(run_dir, on_event=on_event) if config.batch else None
        condition = open_setup(config.setup, ledger, BasePredictionCache(config.cache_dir or base_predictions_dir()),
                               batch=batch)
        return condition, CallWork(condition, run_dir.name, config.workers or 1, batch)

    def header(self, config: EvaluateConfig, items: Sequence[Example]) -> dict[str, Any]:
        """What ``run.json`` records beyond the shared header: nothing for single calls."""
        return {}

    def estimate(self, config: EvaluateConfig, items: Sequence[Example], *, reviewer: str | None,
                 mechanism: Mechanism, instructions: Mapping[str, str], base_cached: bool = False,
                 command: str = "evaluate") -> Estimate:
        """One pass's calls, tokens and dollars (``evaluation.estimate.estimate_evaluation``)."""
        return estimate_evaluation(items, base=config.setup.base, reviewer=reviewer, mechanism=mechanism,
                                   instructions=instructions, base_cached=base_cached, command=command)


def error_text(exc: BaseException) -> str:
    """What an ``error`` record keeps of a failure: its type and message, cut at 1,000 characters."""
    return f"{type(exc).__name__}: {exc}"[:1000]


@dataclass
class Usage:
    """What a ``measured`` block billed and replayed (filled when the block ends)."""

    tokens: int = 0
    """Tokens billed (total, else prompt + completion)."""
    untimed: int = 0
    """LM replies replayed from the cache whose original time is unknown (``lm.latency``)."""


@contextmanager
def measured(reviewer_lm: Any) -> Iterator[Usage]:
    """The mechanism's run of one item, single call or conversation: the reviewer's LM in scope, its usage counted.

    ``reviewer_lm``: the LM the reviewer's dspy calls run under (``dspy.context``), None if it needs none.
    """
    usage = Usage()
    scope = dspy.context(lm=reviewer_lm) if reviewer_lm is not None else nullcontext()
    with scope, dspy.track_usage() as tracker, lm_clock() as clock:
        yield usage
    for tokens in tracker.get_total_tokens().values():
        usage.tokens += int(tokens.get("total_tokens") or 0) or int(tokens.get("prompt_tokens") or 0) + int(
            tokens.get("completion_tokens") or 0)
    usage.untimed = clock.untimed


__all__ = ["CallWork", "Calls", "Usage", "error_text", "measured"]
