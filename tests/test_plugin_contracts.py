"""Our own plug-ins run the contract suites a user's plug-in would (saag_opt.testing.contracts)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from saag_opt.agents import Grade, Verdict, mechanism_names, parse_mechanism
from saag_opt.artifacts.export import exporter_names
from saag_opt.model import Example, Prediction
from saag_opt.testing.contracts.mechanism import check_mechanism
from tests.agents.agent_fakes import GOOD, UNGROUNDED, FakeAgent, call, weather_example


class CityReviewer:
    """Deterministic and stateless: rejects calls not about Boston, prefers Boston candidates."""

    def review_call(self, example: Example, prediction: Prediction) -> Verdict:
        ok = prediction.calls and prediction.calls[0].arguments.get("city") == "Boston"
        return Verdict(error=not ok, feedback="" if ok else "The user asked about Boston.")

    def select_candidate(self, example: Example, candidates: Sequence[Prediction]) -> tuple[int | None, str | None]:
        return next((i for i, c in enumerate(candidates) if c.calls[0].arguments.get("city") == "Boston"), 0), None

    def grade_candidate(self, example: Example, prediction: Prediction) -> Grade:
        return Grade(score=1.0 if prediction.calls[0].arguments.get("city") == "Boston" else 0.2, rationale="city")


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


def test_the_mechanism_contract_catches_a_gold_reader() -> None:
    from dataclasses import dataclass

    from saag_opt.agents import MechanismContext, MechanismFacts, MechanismOutcome

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
    from saag_opt.lm.backends import get_backend
    from saag_opt.testing.contracts.backend import check_spec_round_trip

    check_spec_round_trip(kind, get_backend(kind), texts)


def test_openai_backend_names_the_missing_key() -> None:
    from saag_opt.lm.backends import get_backend
    from saag_opt.testing.contracts.backend import check_missing_key

    assert "--base local" in check_missing_key(get_backend("openai"), "gpt-4o", "OPENAI_API_KEY")


@pytest.mark.integration
@pytest.mark.parametrize("spec_at", [lambda url: f"openai/m@{url}", lambda url: f"fake@{url}"],
                         ids=["compatible", "fake"])
def test_server_backends_retry_transient_faults(spec_at) -> None:  # noqa: ANN001
    from saag_opt.testing.contracts.backend import check_retries

    check_retries(spec_at)


@pytest.mark.parametrize("fmt", exporter_names())
def test_every_exporter_honours_the_contract(fmt: str) -> None:
    from saag_opt.artifacts.export import get_exporter
    from saag_opt.artifacts.store import PromptVersion
    from saag_opt.testing.contracts.exporter import check_exporter

    version = PromptVersion(version="v1", program="reviewer", instructions={
        "review": "Check the call against the request.", "select": "Pick the best candidate.",
        "grade": "Score the candidate from 0 to 1."})
    check_exporter(get_exporter(fmt), version)
