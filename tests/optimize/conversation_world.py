"""Scripted world for optimize on conversations: BFCL multi_turn_base entries, one handler for every model.

The base agent makes each turn's gold calls at step 0 and then answers "Done.", except at turn 0,
where it puts ``WRONG`` in the first string argument of the first call that has one, until reviewer
feedback tells it otherwise; BFCL's checker then fails the entry at turn 0 (an entry whose turn-0
calls have no string argument stays valid). The reviewer's verdict depends on its instruction, as in
``optimize_world``: the seed approves everything; an instruction carrying ``KEYWORD`` rejects a
tentative call holding ``WRONG``. The reflection LM proposes ``proposal`` (by default the keyword
instruction), so GEPA has a real improvement to find, only through the reviewer's instruction.

The splits of ``bfcl:multi_turn_base`` with limits 2/2/2: train multi_turn_base_3 (fixable) and _4
(its turn 0 is ``ls(a=True)``: right either way), val _0 and _2 (both fixable), test _1 (right
either way) and _12 (fixable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from saag_opt.artifacts.store import PromptStore, PromptVersion
from saag_opt.data.bfcl_environment import gold_calls
from saag_opt.data.catalog import load_episodes
from saag_opt.model import ToolCall
from saag_opt.testing import UnknownRequest, read_request
from saag_opt.testing.scripted_server import Reply
from saag_opt.testing.scripted_world import ReviewRequest, encode
from tests.optimize.optimize_world import KEYWORD, PROPOSED_INSTRUCTION, SEED_INSTRUCTION

DATASET = "bfcl:multi_turn_base"
WRONG = "Atlantis"
LIMITS = {"train_limit": 2, "val_limit": 2, "test_limit": 2}


def corrupted(calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """``calls`` with ``WRONG`` in the first string argument of the first call that has one."""
    out = list(calls)
    for i, call in enumerate(out):
        keys = [k for k, v in call.arguments.items() if isinstance(v, str)]
        if keys:
            out[i] = ToolCall(call.name, dict(call.arguments) | {keys[0]: WRONG})
            break
    return tuple(out)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


@dataclass
class ConversationWorld:
    """The scripted server's handler (module docstring); counts what it was asked."""

    proposal: str = PROPOSED_INSTRUCTION
    gold: dict[str, tuple[tuple[ToolCall, ...], ...]] = field(default_factory=dict)
    reviews: int = 0
    reflections: int = 0

    def __post_init__(self) -> None:
        if not self.gold:  # every entry of the category, keyed by its first user message
            for episode in load_episodes(DATASET):
                self.gold[str(episode.turns[0].messages[0]["content"])] = gold_calls(episode)

    def __call__(self, request: dict[str, Any]) -> Any:
        messages = request.get("messages") or []
        if request.get("tools"):  # the base agent (it sends the environment's tools)
            return self._agent(messages)
        seen = read_request(request)
        if seen.role == "edit":
            self.reflections += 1
            return encode(seen, {"op": "add", "rule": 0, "text": self.proposal})
        if seen.role == "reflect":
            self.reflections += 1
            return encode(seen, self.proposal)
        if not isinstance(seen, ReviewRequest):
            raise UnknownRequest(f"the conversation world plays no {seen.role}")
        self.reviews += 1
        error = KEYWORD in seen.instructions and WRONG in seen.tentative_calls
        return encode(seen, (error, f"The value {WRONG} appears nowhere in the conversation; use the name the user "
                                    "gave." if error else ""))

    def _agent(self, messages: list[dict[str, Any]]) -> Reply:
        first = next(m for m in messages if m.get("role") == "user")
        gold = self.gold[_text(first.get("content"))]
        turn = sum(m.get("role") == "user" for m in messages) - 1
        last = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        after = messages[last + 1:]
        step = sum(m.get("role") == "assistant" and _text(m.get("content")).startswith("Called:") for m in after)
        revising = any(m.get("role") == "system" and "Reviewer feedback" in _text(m.get("content")) for m in after)
        if step > 0 or turn >= len(gold) or not gold[turn]:
            return Reply(text="Done.")
        calls = gold[turn] if turn > 0 or revising else corrupted(gold[turn])
        return Reply(tool_calls=[{"name": c.name, "arguments": dict(c.arguments)} for c in calls])


def write_prompts(root: Any) -> str:
    """A prompt store holding ``reviewer@v2`` = the seed (as ``optimize_world.write_world``)."""
    store = PromptStore(root)
    store.save(PromptVersion(version="v2", program="reviewer", source="manual",
                             instructions={"review": SEED_INSTRUCTION, "select": "Pick the best candidate.",
                                           "grade": "Grade the candidate."}))
    return str(store.root)


__all__ = ["DATASET", "LIMITS", "WRONG", "ConversationWorld", "corrupted", "write_prompts"]
