"""Our own plug-ins run the contract suites a user's plug-in would (saag_opt.testing.contracts)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from saag_opt.agents import (
    Grade,
    MechanismContext,
    MechanismFacts,
    MechanismOutcome,
    Verdict,
    mechanism_names,
    parse_mechanism,
)
from saag_opt.artifacts.export import exporter_names, get_exporter
from saag_opt.artifacts.store import PromptVersion
from saag_opt.data.bfcl_environment import BfclEnvironment
from saag_opt.lm.backends import get_backend
from saag_opt.model import Example, Prediction, ToolCall
from saag_opt.testing.contracts.backend import check_missing_key, check_retries, check_spec_round_trip
from saag_opt.testing.contracts.environment import check_environment
from saag_opt.testing.contracts.exporter import check_exporter
from saag_opt.testing.contracts.mechanism import check_abstention, check_mechanism
from saag_opt.testing.toy_environment import NotesEnvironment, toy_episode
from tests.agents.agent_fakes import GOOD, UNGROUNDED, FakeAgent, call, weather_example
from tests.episodes.world import episodes, gold_transcript, needs_bfcl


def _boston(prediction: Prediction) -> bool:
    return bool(prediction.calls) and prediction.calls[0].arguments.get("city") == "Boston"


class CityReviewer:
    """Deterministic and stateless: rejects calls not about Boston, prefers Boston candidates (never no call)."""

    def review_call(self, example: Example, prediction: Prediction) -> Verdict:
        ok = _boston(prediction)
        return Verdict(error=not ok, feedback="" if ok else "The user asked about Boston.")

    def select_candidate(self, example: Example, candidates: Sequence[Prediction]) -> tuple[int | None, str | None]:
        return next((i for i, c in enumerate(candidates) if _boston(c)), 0), None

    def grade_candidate(self, example: Example, prediction: Prediction) -> Grade:
        return Grade(score=1.0 if _boston(prediction) else 0.0 if not prediction.calls else 0.2, rationale="city")


def _agent() -> FakeAgent:
    """Wrong city first (and at the lowest temperature), right after feedback or when sampled hotter."""
    return FakeAgent(lambda turns, temperature: GOOD if turns or (temperature or 0) > 0.5 else UNGROUNDED)


def _specs() -> list[str]:
    return [form.replace("<N>", "2") for form in mechanism_names()]


@pytest.mark.parametrize("spec", _specs())
def test_every_registered_mechanism_honours_the_contract(spec: str) -> None:
    outcome = check_mechanism(parse_mechanism(spec, max_repairs=2), weather_example(), _agent(), CityReviewer())
    if parse_mechanism(spec).needs_reviewer:
        assert outcome.final == GOOD  # the sample exercises the review: the wrong base call is fixed


@pytest.mark.parametrize("spec", _specs())
def test_every_registered_mechanism_can_abstain_and_never_invents_a_call(spec: str) -> None:
    check_abstention(parse_mechanism(spec, max_repairs=2), weather_example(), UNGROUNDED)


def test_the_abstention_contract_catches_a_mechanism_that_always_calls() -> None:
    @dataclass(frozen=True)
    class Stubborn(MechanismFacts):
        """Reviews, but executes the base call whatever the reviewer says."""

        spec: str = "stubborn"
        components = ("review",)

        def run(self, example, agent, reviewer, *, ctx: MechanismContext) -> MechanismOutcome:  # noqa: ANN001
            base = ctx.propose_initial(agent, example)
            reviewer.review_call(example, base.prediction)
            return MechanismOutcome(self.spec, base, base.prediction, reviewer_calls=1)

    with pytest.raises(AssertionError, match="no function fits and the agent agreed"):
        check_abstention(Stubborn(), weather_example(), UNGROUNDED)
    with pytest.raises(ValueError, match="does not vouch"):
        check_abstention(Stubborn(), weather_example(), GOOD)  # the cascade vouches for it: a gate would pass it


def test_the_abstention_contract_catches_a_call_dropped_without_a_ruling() -> None:
    @dataclass(frozen=True)
    class Dropper(MechanismFacts):
        """Drops every call silently (what saag+abstain does, minus the block ruling that says why)."""

        spec: str = "dropper"

        def run(self, example, agent, reviewer, *, ctx: MechanismContext) -> MechanismOutcome:  # noqa: ANN001
            base = ctx.propose_initial(agent, example)
            return MechanismOutcome(self.spec, base, Prediction((), status="empty"))

    with pytest.raises(AssertionError, match="no block ruling saying why"):
        check_abstention(Dropper(), weather_example(), UNGROUNDED)


def test_the_mechanism_contract_catches_a_gold_reader() -> None:
    @dataclass(frozen=True)
    class Cheater(MechanismFacts):
        spec: str = "cheat"

        def run(self, example, agent, reviewer, *, ctx: MechanismContext) -> MechanismOutcome:  # noqa: ANN001
            base = ctx.propose_initial(agent, example)
            city = next(iter(example.gold[0].values()))["city"][0]  # reads the gold
            return MechanismOutcome(self.spec, base, call(city=city))

    with pytest.raises(AssertionError, match="read example.gold"):
        check_mechanism(Cheater(), weather_example(), _agent(), None)


@pytest.mark.parametrize(("kind", "texts"), [
    ("openai", ["gpt-4o", "openai/gpt-4.1-mini", "o4-mini"]),
    ("compatible", ["openai/qwen@http://localhost:8000/v1", "m@https://example.com/v1"]),
    ("local", ["local", "local:qwen2.5-coder-0.5b"]),
    ("fake", ["fake", "fake@http://127.0.0.1:5000/v1"]),
])
def test_every_backend_round_trips_its_spec_form(kind: str, texts: list[str]) -> None:
    check_spec_round_trip(kind, get_backend(kind), texts)


def test_openai_backend_names_the_missing_key() -> None:
    assert "--base local" in check_missing_key(get_backend("openai"), "gpt-4o", "OPENAI_API_KEY")


@pytest.mark.integration
@pytest.mark.parametrize("spec_at", [lambda url: f"openai/m@{url}", lambda url: f"fake@{url}"],
                         ids=["compatible", "fake"])
def test_server_backends_retry_transient_faults(spec_at) -> None:  # noqa: ANN001

    check_retries(spec_at)


@pytest.mark.parametrize("fmt", exporter_names())
def test_every_exporter_honours_the_contract(fmt: str) -> None:
    version = PromptVersion(version="v1", program="reviewer", instructions={
        "review": "Check the call against the request.", "select": "Pick the best candidate.",
        "grade": "Score the candidate from 0 to 1."})
    check_exporter(get_exporter(fmt), version)


# -- environments (saag_opt.episodes): BFCL's backends and the toy notebook ---------------------------


def _toy() -> tuple[object, object, object]:
    listing, write = ToolCall("list_notes", {}), ToolCall("write_note", {"title": "plan", "text": "buy milk"})
    episode = toy_episode("toy-1", [["List my notes, then save 'plan': buy milk."], ["Read it."], ["Weather?"]],
                          [[listing, write], [ToolCall("read_note", {"title": "plan"})], []])
    gold = (((listing, write),), ((ToolCall("read_note", {"title": "plan"}),),), ())
    wrong = (((ToolCall("write_note", {"title": "plan", "text": "buy bread"}),),), (), ())
    return episode, gold, wrong


def test_the_toy_environment_honours_the_environment_contract() -> None:
    episode, gold, wrong = _toy()
    verdict = check_environment(NotesEnvironment, episode, gold, wrong=wrong)  # type: ignore[arg-type]
    assert verdict.abstain_turns == (2,)


@needs_bfcl
@pytest.mark.parametrize("category", ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                                      "multi_turn_long_context"])
def test_bfcls_environment_honours_the_environment_contract(category: str) -> None:
    for episode in episodes(category)[::67]:  # three entries spread over the file
        gold = gold_transcript(episode)
        wrong = tuple(() for _ in gold)  # nothing called: the first turn with gold calls fails
        check_environment(BfclEnvironment, episode, gold, wrong=wrong)


def test_the_environment_contract_catches_a_gold_reader_and_a_leak() -> None:
    class Peeking(NotesEnvironment):
        def tools(self, turn: int):  # noqa: ANN202
            assert self._episode is not None
            len(self._episode.gold)  # reads the gold
            return super().tools(turn)

    shared: dict[str, str] = {}

    class Leaky(NotesEnvironment):
        def reset(self, episode):  # noqa: ANN001, ANN202
            super().reset(episode)
            self._notes = shared  # every environment writes one notebook, never emptied

    episode, gold, wrong = _toy()
    with pytest.raises(AssertionError, match="may not read the gold"):
        check_environment(Peeking, episode, gold, wrong=wrong)  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="other results|first one's state"):
        check_environment(Leaky, episode, gold, wrong=wrong)  # type: ignore[arg-type]
