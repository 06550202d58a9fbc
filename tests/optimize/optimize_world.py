"""Scripted world for optimize tests: tiny examples and one OpenAI-compatible handler that plays
the base agent, the reviewer and the reflection LM.

The reviewer's verdict depends on its *instruction*: with the seed instruction
it approves everything; once the instruction contains ``CHECK-VALUES`` it rejects calls whose string
values do not occur in the conversation. The reflection LM proposes an instruction with that
keyword, so GEPA has a real improvement to find, and only through the reviewer's instruction.
"""

from __future__ import annotations

import json
import re
from typing import Any

from saag_opt.artifacts.store import PromptStore, PromptVersion
from saag_opt.data import write_examples
from saag_opt.model import Example, Registry
from saag_opt.testing import ScriptedWorld, UnknownRequest, read_request
from saag_opt.testing.scripted_server import Reply
from saag_opt.testing.scripted_world import (
    BaseRequest,
    EditRequest,
    GradeRequest,
    ReflectRequest,
    ReviewRequest,
    SelectRequest,
    encode,
)

KEYWORD = "CHECK-VALUES"
SEED_INSTRUCTION = "Approve the tentative calls unless something is obviously broken."
PROPOSED_INSTRUCTION = f"{KEYWORD}: reject a call when an argument value does not appear in the user's request."

TOOLS = [{"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]
CITIES = ["Paris", "Berlin", "Rome", "Madrid", "Vienna", "Oslo", "Lisbon", "Prague", "Dublin", "Warsaw",
          "Athens", "Sofia", "Riga", "Tallinn", "Vilnius", "Zagreb"]
WRONG = "Atlantis"


def make_examples(n: int, split: str, offset: int = 0) -> list[Example]:
    """``n`` weather questions; the scripted base agent gets every other one wrong."""
    registry = Registry.from_dicts(TOOLS)
    out = []
    for i in range(n):
        city = CITIES[(offset + i) % len(CITIES)]
        out.append(Example(id=f"{split}-{i}", category="simple", split=split, registry=registry,
                           messages=({"role": "user", "content": f"What is the weather in {city}?"},),
                           gold=({"get_weather": {"city": [city]}},)))
    return out


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _asked_city(text: str) -> str | None:
    match = re.search(r"weather in (\w+)", text)
    return match.group(1) if match else None


def _role(request: dict) -> str | None:
    try:
        return read_request(request).role
    except UnknownRequest:
        return None


def is_edit_request(request: dict) -> bool:
    """The edit proposer's request (``ScriptedWorld``'s ``edit`` role)."""
    return _role(request) == "edit"


def is_reflection(request: dict) -> bool:
    """A reflection request of either proposer (dspy's rewrite or the edit proposer)."""
    return _role(request) in ("edit", "reflect")


def is_rewrite(request: dict) -> bool:
    """dspy's rewrite proposer's request (``ScriptedWorld``'s ``reflect`` role)."""
    return _role(request) == "reflect"


def rewrite_reply(request: dict, instruction: str) -> Any:
    """dspy's rewrite proposer's answer proposing ``instruction``, in the format that request asked for."""
    return encode(read_request(request), instruction)


def edit_reply(text: str) -> Reply:
    """The edit proposer's answer that adds ``text`` as a rule."""
    return Reply(text=json.dumps({"op": "add", "rule": 0, "text": text}))


def review_verdict(instructions: str, conversation: str, tentative_calls: str) -> tuple[bool, str]:
    """The scripted reviewer: with ``KEYWORD`` in its instructions it rejects a city the request does not name."""
    error = KEYWORD in instructions and WRONG in tentative_calls and WRONG not in conversation
    return error, f"The city {WRONG} is not in the request; use the city the user asked for." if error else ""


class OptimizeWorld(ScriptedWorld):
    """The base agent, the reviewer and both proposers of this world (module docstring)."""

    def base(self, request: BaseRequest) -> Reply:
        """Wrong city on even-numbered cities unless reviewer feedback says which city was asked."""
        city = _asked_city(request.user_text) or "Paris"
        wrong = CITIES.index(city) % 2 == 0 if city in CITIES else False
        return Reply(tool_calls=[{"name": "get_weather",
                                  "arguments": {"city": city if request.revising or not wrong else WRONG}}])

    def review(self, request: ReviewRequest) -> tuple[bool, str]:
        return review_verdict(request.instructions, request.conversation, request.tentative_calls)

    def select(self, request: SelectRequest) -> int:
        """Selection mechanisms (s<N>): the first candidate."""
        return 0

    def grade(self, request: GradeRequest) -> tuple[float, str]:
        """Grading mechanisms (g<N>): every candidate looks right."""
        return 1.0, "scripted"

    def reflect(self, request: ReflectRequest) -> str:
        return PROPOSED_INSTRUCTION

    def edit(self, request: EditRequest) -> Reply:
        return edit_reply(PROPOSED_INSTRUCTION)


WORLD = OptimizeWorld()


def handler(request: dict) -> Any:
    """The world's answer to one request (``OptimizeWorld``, without keeping a log across tests)."""
    return WORLD.respond(read_request(request))


def write_world(tmp_path: Any, n_train: int = 6, n_val: int = 4, n_test: int = 4) -> tuple[str, str]:
    """A dataset file (explicit splits) and a prompt store holding ``reviewer@v2`` = the seed."""
    examples = (make_examples(n_train, "train") + make_examples(n_val, "val", offset=n_train)
                + make_examples(n_test, "test", offset=n_train + n_val))
    dataset = tmp_path / "weather.jsonl"
    write_examples(dataset, examples)
    store = PromptStore(tmp_path / "prompts")
    store.save(PromptVersion(version="v2", program="reviewer", source="manual",
                             instructions={"review": SEED_INSTRUCTION, "select": "Pick the best candidate.",
                                           "grade": "Grade the candidate."}))
    return str(dataset), str(store.root)


def config(tmp_path: Any, server: Any, **extra: Any) -> Any:
    """An optimize run of this world against ``server``: the dataset and store in ``tmp_path``, r1, two workers."""
    from saag_opt.optimize import OptimizeConfig  # noqa: PLC0415 - the world's other users need no optimize

    dataset, prompts = write_world(tmp_path)
    spec = f"fake@{server.url}"
    values: dict[str, Any] = dict(base=spec, reviewer=spec, dataset=dataset, prompts_dir=prompts,
                                  runs_dir=str(tmp_path / "runs"), max_metric_calls=40, workers=2, mechanism="r1")
    return OptimizeConfig(**(values | extra))
