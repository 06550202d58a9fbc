"""Scripted world for optimize tests: tiny examples and one OpenAI-compatible handler that plays
the base agent, the reviewer and the reflection LM.

The reviewer's verdict depends on its *instruction* (the system prompt): with the seed instruction
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
from saag_opt.testing.scripted_server import Reply

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


def _field(text: str, name: str) -> str:
    match = re.search(rf"\[\[ ## {name} ## \]\]\n(.*?)(?=\n\n\[\[ ## |\Z)", text, re.S)
    return match.group(1) if match else ""


def _asked_city(text: str) -> str | None:
    match = re.search(r"weather in (\w+)", text)
    return match.group(1) if match else None


def is_edit_request(request: dict) -> bool:
    """The edit proposer's request: a json_schema response format named ``rule_edit``."""
    fmt = request.get("response_format") or {}
    return isinstance(fmt, dict) and (fmt.get("json_schema") or {}).get("name") == "rule_edit" \
        or (isinstance(fmt, dict) and "schema" in fmt and "op" in json.dumps(fmt.get("schema")))


def is_reflection(request: dict) -> bool:
    """A reflection request of either proposer (dspy's rewrite or the edit proposer)."""
    messages = request.get("messages") or []
    return is_edit_request(request) or bool(messages) and "new_instruction" in _text(messages[0].get("content"))


def edit_reply(text: str) -> Reply:
    """The edit proposer's answer that adds ``text`` as a rule."""
    return Reply(text=json.dumps({"op": "add", "rule": 0, "text": text}))


def handler(request: dict) -> Reply:
    """Route by request shape: tools -> base agent; reflection (edit or rewrite); else reviewer."""
    messages = request.get("messages") or []
    system = _text(messages[0].get("content")) if messages else ""
    user = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
    if request.get("tools"):
        return _base(messages)
    if is_edit_request(request):
        return edit_reply(PROPOSED_INSTRUCTION)
    if "new_instruction" in system:
        return Reply(text=json.dumps({"new_instruction": PROPOSED_INSTRUCTION}))
    return _review(system, user)


def _base(messages: list[dict]) -> Reply:
    """Wrong city on even-numbered cities unless reviewer feedback says which city was asked."""
    user = " ".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
    city = _asked_city(user) or "Paris"
    revised = any("Reviewer feedback" in _text(m.get("content")) for m in messages if m.get("role") == "system")
    wrong = CITIES.index(city) % 2 == 0 if city in CITIES else False
    return Reply(tool_calls=[{"name": "get_weather", "arguments": {"city": city if revised or not wrong else WRONG}}])


def _review(system: str, user: str) -> Reply:
    calls = _field(user, "tentative_calls")
    conversation = _field(user, "conversation")
    error = KEYWORD in system and WRONG in calls and WRONG not in conversation
    feedback = f"The city {WRONG} is not in the request; use the city the user asked for." if error else ""
    return Reply(text=f"[[ ## error ## ]]\n{error}\n\n[[ ## feedback ## ]]\n{feedback}\n\n[[ ## completed ## ]]")


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
