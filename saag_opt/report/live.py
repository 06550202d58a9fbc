"""How a running command shows progress: a rich bar on a terminal, one short line per event elsewhere.

Why one place: on a log file or pipe rich draws nothing, yet stopping a started bar prints a blank
line there, ahead of whatever comes next (a one-line error, say). So a bar starts on a terminal
only (``start_bar``/``stop_bar``, used by every verb's bar). A redirected log would then stay
silent until the report, so ``with_lines`` adds one plain line per progress event on stdout when
stdout is not a terminal (evaluate, compare; optimize and tune print their own), and when no bar
draws: stderr, the bar's console, then keeps only what went wrong (one line).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import Progress

from saag_opt.events import EventSink, RunEvent


def start_bar(progress: Progress) -> None:
    """Start ``progress`` when its console is a terminal."""
    if progress.console.is_terminal:
        progress.start()


def stop_bar(progress: Progress) -> None:
    """Stop ``progress`` if ``start_bar`` started it."""
    if progress.live.is_started:
        progress.stop()


def print_line(console: Console, text: str) -> None:
    """One plain line (no markup, highlighting or wrapping), as a log wants it."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


class EvaluationLines:
    """Forwards every event to ``sink`` and prints one line per evaluate/compare progress event.

    ``evaluate 12/150 done, 1 error, $0.0123 (simple_3)``; compare names its pass
    (``compare A 3/20 ...``) and prints where each pass begins.
    """

    def __init__(self, sink: EventSink, console: Console, verb: str = "evaluate") -> None:
        self.sink, self.console = sink, console
        self.label = verb
        self.errors = 0

    def __call__(self, event: RunEvent) -> None:
        """Forward ``event``, then print its line (if it has one)."""
        self.sink(event)
        line = self.line(event)
        if line is not None:
            print_line(self.console, line)

    def line(self, event: RunEvent) -> str | None:
        """The line of one event; None for events the bar would not show either."""
        data = event.data
        if event.kind == "stage":
            stage = str(data.get("stage") or "")
            self.label = f"compare {stage.upper() if len(stage) == 1 else stage}"  # a version's key
            return f"compare: {event.message}"
        if event.kind in ("run_started", "resumed") and "total" in data:
            self.errors = 0
            resumed = " (resumed)" if event.kind == "resumed" else ""
            return f"{self.label} {data.get('done', 0)}/{data['total']} examples{resumed}: {data.get('run_dir', '')}"
        if event.kind == "example_finished":
            self.errors += data.get("error") is not None
            errors = f"{self.errors} error{'' if self.errors == 1 else 's'}"
            return (f"{self.label} {data.get('done')}/{data.get('total')} done, {errors}, "
                    f"${_dollars(data.get('costs') or {}):.4f} ({data.get('example_id')})")
        if event.kind in ("stopped", "warning", "batch"):
            return f"{self.label}: {event.message}"
        if event.kind == "step" and int(data.get("steps") or 0) % STEP_LINE_EVERY == 0:
            return f"{self.label}: {event.message}"
        return None


STEP_LINE_EVERY = 10
"""A log line every this many steps of one conversation (a tau2 task can take minutes between entries)."""


def _dollars(snapshot: dict[str, Any]) -> float:
    """Dollars of a ledger snapshot (``CostLedger.snapshot``/``to_dict``), roles added up."""
    roles = snapshot.get("roles", snapshot)
    return sum(float(acct.get("dollars") or 0.0) for name, acct in roles.items()
               if name != "total" and isinstance(acct, dict))


def with_lines(sink: EventSink, bar: Console, verb: str = "evaluate", out: Console | None = None) -> EventSink:
    """``sink`` as is when its bar draws on a terminal that stdout (``out``) is too; else ``EvaluationLines`` on ``out``."""
    out = out if out is not None else Console()
    return sink if bar.is_terminal and out.is_terminal else EvaluationLines(sink, out, verb)


__all__ = ["EvaluationLines", "print_line", "start_bar", "stop_bar", "with_lines"]
