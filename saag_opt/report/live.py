"""Starting and stopping the commands' rich progress bars (evaluate, compare, optimize).

Why one place: on a log file or pipe rich draws nothing, yet stopping a started bar prints a blank
line there, ahead of whatever comes next (a one-line error, say). So a bar starts on a terminal only.
"""

from __future__ import annotations

from rich.progress import Progress


def start_bar(progress: Progress) -> None:
    """Start ``progress`` when its console is a terminal."""
    if progress.console.is_terminal:
        progress.start()


def stop_bar(progress: Progress) -> None:
    """Stop ``progress`` if ``start_bar`` started it."""
    if progress.live.is_started:
        progress.stop()


__all__ = ["start_bar", "stop_bar"]
