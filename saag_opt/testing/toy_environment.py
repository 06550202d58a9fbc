"""A toy ``Environment``: a notebook of named notes, judged the way BFCL judges its backends.

Small enough to read in one go, and a template for a user's own tools: the state is a dict, the
tools are four functions, and ``check`` replays the executed calls and the gold calls on fresh
notebooks and compares the state after every turn (BFCL's state check); a turn whose gold is
empty must make no call (BFCL's irrelevance check). ``check`` never looks at the live notebook.

``toy_episode`` builds an episode from user turns and the gold calls of each turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from saag_opt.episodes import Episode, Judgement, ToolResult, Transcript, Turn, register_environment
from saag_opt.model import Registry, ToolCall, ToolSpec

ENVIRONMENT = "toy-notes"

TOOLS = Registry.from_dicts([
    {"name": "write_note", "description": "Create or overwrite the note called title.",
     "parameters": {"type": "object", "properties": {"title": {"type": "string"}, "text": {"type": "string"}},
                    "required": ["title", "text"]}},
    {"name": "read_note", "description": "The text of the note called title.",
     "parameters": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}},
    {"name": "delete_note", "description": "Delete the note called title.",
     "parameters": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}},
    {"name": "list_notes", "description": "The titles of all notes.", "parameters": {"type": "object",
                                                                                   "properties": {}}},
])


def _run(notes: dict[str, str], call: ToolCall) -> ToolResult:
    """One call on ``notes``; a wrong call is an error result, never an exception."""
    args = dict(call.arguments)
    if call.name == "list_notes" and not args:
        return ToolResult(call.name, ", ".join(sorted(notes)) or "(no notes)")
    if call.name not in ("write_note", "read_note", "delete_note"):
        return ToolResult(call.name, f"Error: no function {call.name!r}", executed=False)
    wanted = {"title", "text"} if call.name == "write_note" else {"title"}
    if set(args) != wanted or not all(isinstance(v, str) for v in args.values()):
        return ToolResult(call.name, f"Error: {call.name} takes string arguments {sorted(wanted)}")
    title = args["title"]
    if call.name == "write_note":
        notes[title] = args["text"]
        return ToolResult(call.name, f"saved {title!r}")
    if title not in notes:
        return ToolResult(call.name, f"Error: no note {title!r}")
    if call.name == "read_note":
        return ToolResult(call.name, notes[title])
    del notes[title]
    return ToolResult(call.name, f"deleted {title!r}")


class NotesEnvironment:
    """The toy environment (module docstring)."""

    def __init__(self) -> None:
        self._episode: Episode | None = None
        self._notes: dict[str, str] = {}

    def reset(self, episode: Episode) -> None:
        """The notebook of ``episode.setup["notes"]`` (a copy)."""
        self._episode = episode
        self._notes = dict(episode.setup.get("notes", {}))

    def tools(self, turn: int) -> Registry:
        """The episode's tools at ``turn``."""
        if self._episode is None:
            raise RuntimeError("NotesEnvironment: reset(episode) first")
        return self._episode.tools_at(turn)

    def execute(self, calls: Sequence[ToolCall]) -> tuple[ToolResult, ...]:
        """Each call on the live notebook, in order."""
        return tuple(_run(self._notes, call) for call in calls)

    def check(self, transcript: Transcript) -> Judgement:
        """Replay both sides on fresh notebooks; compare after each turn; empty gold turns must call nothing."""
        if self._episode is None:
            raise RuntimeError("NotesEnvironment: reset(episode) first")
        gold: Sequence[Sequence[ToolCall]] = self._episode.gold
        abstain = tuple(i for i, turn in enumerate(gold) if not turn)
        if len(transcript) != len(gold):
            return Judgement(False, "force_terminated", f"{len(transcript)} turns run of {len(gold)}",
                             failed_turn=max(len(transcript) - 1, 0), abstain_turns=abstain)
        start = dict(self._episode.setup.get("notes", {}))
        mine, theirs = dict(start), dict(start)
        for index, (steps, expected) in enumerate(zip(transcript, gold)):
            calls = [call for step in steps for call in step]
            if not expected and calls:
                return Judgement(False, "irrelevance", f"turn {index} should make no call", index, abstain)
            for call in calls:
                _run(mine, call)
            for call in expected:
                _run(theirs, call)
            if mine != theirs:
                return Judgement(False, "state_mismatch", f"turn {index}: the notes differ", index, abstain,
                                 details={"differences": sorted(set(mine.items()) ^ set(theirs.items()))})
        return Judgement(True, abstain_turns=abstain)

    def close(self) -> None:
        """Nothing to release but the notebook."""
        self._notes = {}


def toy_episode(id: str, turns: Sequence[Sequence[str]], gold: Sequence[Sequence[ToolCall]], *,
                notes: Mapping[str, str] | None = None, added: Mapping[int, Sequence[ToolSpec]] | None = None,
                tools: Registry = TOOLS) -> Episode:
    """An episode of user turns (each a list of user texts) with the gold calls of each turn."""
    built = tuple(Turn(tuple({"role": "user", "content": text} for text in texts), tuple((added or {}).get(i, ())))
                  for i, texts in enumerate(turns))
    setup: dict[str, Any] = {"notes": dict(notes or {})}
    return Episode(id, "toy", built, tools, ENVIRONMENT, setup, tuple(tuple(turn) for turn in gold))


register_environment(ENVIRONMENT, NotesEnvironment, "a toy notebook (saag_opt.testing.toy_environment)")

if TYPE_CHECKING:
    from saag_opt.episodes import Environment

    _: Environment = NotesEnvironment()

__all__ = ["ENVIRONMENT", "TOOLS", "NotesEnvironment", "toy_episode"]
