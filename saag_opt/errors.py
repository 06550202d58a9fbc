"""One exception root for everything a user can fix.

Each subclass also inherits the builtin a caller would expect, so ``except ValueError`` keeps
working. The CLI maps ``SaagOptError`` to a single stderr line; anything else keeps its traceback.
"""

from __future__ import annotations


class SaagOptError(Exception):
    """Root of every error saag-opt raises on purpose."""


class DatasetError(SaagOptError, ValueError):
    """A dataset or predictions file is unreadable or has a bad row (message carries path:line)."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path, self.line = path, line
        where = f"{path}:{line}: " if path is not None and line is not None else (f"{path}: " if path else "")
        super().__init__(f"{where}{message}")


def option_path(loc: object) -> list[str]:
    """A pydantic error location as option names.

    Its ``setup`` parts are left out: a verb's review set-up (``agents.setup``) is nested in Python
    only, and its fields are options like the verb's own (``mechanism``, not ``setup.mechanism``).
    """
    parts = loc if isinstance(loc, (tuple, list)) else ()
    return [str(p) for p in parts if p != "setup"]


def validation_message(exc: Exception, *, whole: str = "config") -> str:
    """A pydantic ``ValidationError`` as one line naming each bad field (``field: message; ...``).

    ``whole`` names a problem with the object as a whole (no field). Any other exception: its text.
    """
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    return "; ".join(f"{'.'.join(option_path(e.get('loc'))) or whole}: "
                     f"{str(e.get('msg', '')).removeprefix('Value error, ')}" for e in errors())


class ConfigError(SaagOptError, ValueError):
    """A flag or config field has a bad value; the message names the field."""

    @classmethod
    def from_validation(cls, exc: Exception) -> ConfigError:
        """A pydantic ``ValidationError`` as one line naming each bad field (``field: message``)."""
        return cls(validation_message(exc))


class ModelUnavailableError(SaagOptError, RuntimeError):
    """A model cannot be reached: missing key, dead server, missing extra."""


class ArtifactError(SaagOptError, ValueError):
    """A prompt artifact is missing, corrupt, or would be overwritten with other content."""


class RunError(SaagOptError, RuntimeError):
    """A run directory cannot be created, read or resumed."""


class RunFailed(RunError):
    """A run ended without a result: every example failed (e.g. a server answering each call with a 5xx).

    The CLI exits 1 for it, not 2: the command and its input may be right, the run still is not a
    measurement.
    """


class CostCapReached(SaagOptError, RuntimeError):
    """The next LM call could cost more than what is left under ``--max-cost``; the run stops cleanly."""
