"""In-process doubles for mechanism control-flow tests (the HTTP path is tested with the scripted server)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from saag_opt.agents import FeedbackTurn, Grade, Proposal, Verdict
from saag_opt.model import Example, Prediction, Registry, ToolCall, ToolSpec

REJECT = Verdict(True, "Use the city the user named.")
APPROVE = Verdict(False, "")

WEATHER = ToolSpec.from_dict({
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]},
})


def weather_example(gold_city: str = "Boston") -> Example:
    """A one-tool example whose query grounds ``city=Boston``."""
    return Example(id="w1", category="simple_python",
                   messages=({"role": "user", "content": "What's the weather in Boston right now?"},),
                   registry=Registry([WEATHER]), gold=({"get_weather": {"city": [gold_city], "unit": ["", "celsius"]}},))


def call(name: str | None = "get_weather", **arguments: Any) -> Prediction:
    """A one-call prediction."""
    return Prediction((ToolCall(name, arguments),), raw=None, status="ok")


GOOD = call(city="Boston")
BAD_NAME = call("get_wether", city="Boston")
UNGROUNDED = call(city="Paris")


@dataclass
class FakeAgent:
    """``script(n_feedback_turns, temperature) -> Prediction``; records every propose call."""

    script: Callable[[int, float | None], Prediction]
    label: str = "fake-agent"
    prompt_hash: str = "test"
    temperature: float = 0.0
    seconds: float = 1.0
    log: list[tuple[int, float | None, tuple[FeedbackTurn, ...]]] = field(default_factory=list)

    def propose(self, example: Example, *, feedback: Sequence[FeedbackTurn] = (),
                temperature: float | None = None) -> Proposal:
        self.log.append((len(feedback), temperature, tuple(feedback)))
        return Proposal(self.script(len(feedback), temperature), seconds=self.seconds, tokens=10,
                        temperature=temperature)


@dataclass
class FakeReviewer:
    """Scripted verdicts / selection / grades; records what it was shown."""

    verdicts: list[Verdict] = field(default_factory=list)
    index: int | None = 0
    grades: dict[str | None, Grade] = field(default_factory=dict)
    reviewed: list[Prediction] = field(default_factory=list)
    graded: list[Prediction] = field(default_factory=list)
    selections: int = 0

    def review_call(self, example: Example, prediction: Prediction) -> Verdict:
        self.reviewed.append(prediction)
        if not self.verdicts:
            raise AssertionError("reviewer called more often than scripted")
        return self.verdicts.pop(0)

    def select_candidate(self, example: Example, candidates: Sequence[Prediction]) -> tuple[int | None, str | None]:
        self.selections += 1
        return self.index, None

    def grade_candidate(self, example: Example, candidate: Prediction) -> Grade:
        """Grades by city; the no-call option scores ``grades[None]``, by default 0.0 (a tool fits)."""
        self.graded.append(candidate)
        if not candidate.calls:
            return self.grades.get(None, Grade(0.0, "no call, but a tool fits"))
        city = candidate.calls[0].arguments["city"]
        return self.grades[city]


class NeverCalledReviewer(FakeReviewer):
    """Fails the test if any method runs."""

    def review_call(self, example: Example, prediction: Prediction) -> Verdict:
        raise AssertionError("the LLM reviewer must not be called")
