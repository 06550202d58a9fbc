"""Control flow of every mechanism: none, binary, saag, r<N>, s<N>, g<N>, gate+<mech>."""

from __future__ import annotations

from pathlib import Path

import pytest

from saag_opt.agents import (
    BINARY_FEEDBACK,
    BasePredictionCache,
    Grade,
    MechanismContext,
    Progressive,
    Verdict,
    mechanism_names,
    parse_mechanism,
    resolve_mechanism,
    spread_temperatures,
)
from saag_opt.agents.mechanisms import registry as mechanisms
from saag_opt.errors import ConfigError
from saag_opt.model import Prediction, Registry
from tests.agents.agent_fakes import (
    APPROVE,
    BAD_NAME,
    GOOD,
    REJECT,
    UNGROUNDED,
    FakeAgent,
    FakeReviewer,
    NeverCalledReviewer,
    call,
    weather_example,
)


def by_round(*predictions):  # noqa: ANN001, ANN202 - tiny script helper
    return lambda n, temperature: predictions[min(n, len(predictions) - 1)]


def test_none_returns_the_base_prediction() -> None:
    agent = FakeAgent(by_round(GOOD))
    out = parse_mechanism("none").run(weather_example(), agent, None, ctx=MechanismContext())
    assert out.final == GOOD and out.rounds == () and out.reviewer_calls == 0 and out.seconds == 1.0


def test_r2_stops_at_first_approval() -> None:
    agent, reviewer = FakeAgent(by_round(GOOD)), FakeReviewer([APPROVE])
    out = parse_mechanism("r2").run(weather_example(), agent, reviewer, ctx=MechanismContext())
    assert out.final == GOOD
    assert [r.verdict for r in out.rounds] == ["approve"]
    assert out.reviewer_calls == 1 and out.agent_calls == 0 and len(agent.log) == 1


def test_r2_revises_after_rejection_then_approves() -> None:
    agent, reviewer = FakeAgent(by_round(UNGROUNDED, GOOD)), FakeReviewer([REJECT, APPROVE])
    out = parse_mechanism("r2").run(weather_example(), agent, reviewer, ctx=MechanismContext())
    assert out.final == GOOD
    assert [r.verdict for r in out.rounds] == ["reject", "approve"]
    assert out.rounds[0].feedback == REJECT.feedback and out.rounds[0].revised == GOOD
    assert reviewer.reviewed == [UNGROUNDED, GOOD]
    assert out.seconds >= 2.0  # base + one revision, plus reviewer time


def test_r2_executes_the_revision_after_the_second_rejection_unreviewed() -> None:
    third = call(city="Boston, MA")
    agent = FakeAgent(by_round(UNGROUNDED, BAD_NAME, third))
    reviewer = FakeReviewer([REJECT, REJECT])  # a third review would raise
    out = parse_mechanism("r2").run(weather_example(), agent, reviewer, ctx=MechanismContext())
    assert out.final == third
    assert out.reviewer_calls == 2 and out.agent_calls == 2
    assert reviewer.reviewed == [UNGROUNDED, BAD_NAME]
    # the second revision sees the whole history: both tentative calls with their feedback
    history = agent.log[-1][2]
    assert [t.previous for t in history] == [UNGROUNDED, BAD_NAME]
    assert all(t.feedback == REJECT.feedback for t in history)


def test_rejection_with_empty_feedback_still_tells_the_agent_something() -> None:
    agent, reviewer = FakeAgent(by_round(UNGROUNDED, GOOD)), FakeReviewer([Verdict(True, ""), APPROVE])
    out = parse_mechanism("r1").run(weather_example(), agent, reviewer, ctx=MechanismContext())
    assert out.rounds[0].feedback and "error" in out.rounds[0].feedback


def test_unusable_reviewer_output_approves_and_is_recorded() -> None:
    agent, reviewer = FakeAgent(by_round(UNGROUNDED)), FakeReviewer([Verdict(False, "", failed="AdapterParseError: x")])
    out = parse_mechanism("r3").run(weather_example(), agent, reviewer, ctx=MechanismContext())
    assert out.final == UNGROUNDED
    assert out.rounds[0].verdict == "reviewer_failed" and "AdapterParseError" in (out.rounds[0].note or "")


def test_gate_skips_the_reviewer_when_the_cascade_passes_cleanly() -> None:
    agent = FakeAgent(by_round(GOOD))
    out = parse_mechanism("gate+r2").run(weather_example(), agent, NeverCalledReviewer(), ctx=MechanismContext())
    assert out.gated and out.final == GOOD and out.reviewer_calls == 0
    assert out.rounds[0].verdict == "saag_pass" and out.rounds[0].reviewer == "saag"
    assert out.mechanism == "gate+r2" and parse_mechanism("gate+r2").experimental


@pytest.mark.parametrize("base", [BAD_NAME, UNGROUNDED, call(city="Bostn"), call("get_weather", town="Boston")])
def test_gate_calls_the_reviewer_when_the_cascade_does_not_pass(base) -> None:  # noqa: ANN001
    agent, reviewer = FakeAgent(by_round(base, GOOD)), FakeReviewer([REJECT, APPROVE])
    out = parse_mechanism("gate+r2").run(weather_example(), agent, reviewer, ctx=MechanismContext())
    assert not out.gated and out.reviewer_calls == 2 and out.final == GOOD


def test_gate_sends_abstentions_to_the_reviewer() -> None:
    agent, reviewer = FakeAgent(by_round(Prediction(raw="No tool fits.", status="empty"))), FakeReviewer([APPROVE])
    out = parse_mechanism("gate+r1").run(weather_example(), agent, reviewer, ctx=MechanismContext())
    assert reviewer.reviewed and out.final.abstained


def test_spread_temperatures() -> None:
    assert spread_temperatures(5) == pytest.approx([0.3, 0.475, 0.65, 0.825, 1.0])
    assert spread_temperatures(2) == [0.3, 1.0]
    assert spread_temperatures(1) == [0.3]


def test_s5_samples_five_temperatures_and_executes_the_selected_candidate() -> None:
    cities = {0.3: "Boston", 0.475: "Paris", 0.65: "Bostn", 0.825: "Rome", 1.0: "Oslo"}
    agent = FakeAgent(lambda n, t: call(city=cities.get(round(t, 3), "Boston") if t is not None else "Boston"))
    out = parse_mechanism("s5").run(weather_example(), agent, FakeReviewer(index=3), ctx=MechanismContext())
    assert [c.temperature for c in out.candidates] == pytest.approx([0.3, 0.475, 0.65, 0.825, 1.0])
    assert sorted(t for _, t, _ in agent.log if t is not None) == pytest.approx([0.3, 0.475, 0.65, 0.825, 1.0])
    assert out.selected == 3 and out.final == call(city="Rome") and out.reviewer_calls == 1 and not out.notes


@pytest.mark.parametrize("bad_index", [7, -1, None])
def test_s3_invalid_index_falls_back_to_the_first_candidate(bad_index) -> None:  # noqa: ANN001
    agent = FakeAgent(lambda n, t: call(city=f"c{t}"))
    out = parse_mechanism("s3").run(weather_example(), agent, FakeReviewer(index=bad_index), ctx=MechanismContext())
    assert out.selected == 0 and out.final == call(city="c0.3")
    assert out.notes and "using candidate 0" in out.notes[0]


def test_g3_grades_each_candidate_once_and_executes_the_best() -> None:
    cities = {0.3: "A", 0.65: "B", 1.0: "C"}
    agent = FakeAgent(lambda n, t: call(city=cities.get(t, "base")))
    reviewer = FakeReviewer(grades={"A": Grade(0.2, "meh"), "B": Grade(0.9, "good"), "C": Grade(0.5, "ok")})
    out = parse_mechanism("g3").run(weather_example(), agent, reviewer, ctx=MechanismContext())
    assert out.final == call(city="B") and out.selected == 1
    # each candidate once, then the no-call option (the best is below 1.0 and none abstains); it scores 0.0
    assert reviewer.graded[:3] == [c.prediction for c in out.candidates] and not reviewer.graded[3].calls
    assert len(reviewer.graded) == 4 and out.reviewer_calls == 4
    assert [c.score for c in out.candidates] == [0.2, 0.9, 0.5]
    assert any("no-call option graded 0.00" in n for n in out.notes)


def test_g3_ties_go_to_the_lowest_temperature_and_unusable_grades_rank_last() -> None:
    cities = {0.3: "A", 0.65: "B", 1.0: "C"}
    agent = FakeAgent(lambda n, t: call(city=cities.get(t, "base")))
    reviewer = FakeReviewer(grades={"A": Grade(None, "", failed="bad"), "B": Grade(0.7, ""), "C": Grade(0.7, "")})
    out = parse_mechanism("g3").run(weather_example(), agent, reviewer, ctx=MechanismContext())
    assert out.selected == 1 and out.final == call(city="B")
    assert any("candidate 0" in n for n in out.notes)


def test_saag_repair_feeds_back_psi_and_stops_at_pass() -> None:
    agent = FakeAgent(by_round(BAD_NAME, GOOD))
    out = parse_mechanism("saag").run(weather_example(), agent, None, ctx=MechanismContext())
    assert out.final == GOOD
    assert [r.verdict for r in out.rounds] == ["saag_fail", "saag_pass"]
    feedback = out.rounds[0].feedback or ""
    assert "get_wether" in feedback and "get_weather" in feedback  # psi1 names the nearest registered tool
    assert out.reviewer_calls == 0 and out.agent_calls == 1


def test_binary_repair_sends_the_content_free_signal_until_max_repairs() -> None:
    agent = FakeAgent(by_round(UNGROUNDED))
    out = parse_mechanism("binary", max_repairs=3).run(weather_example(), agent, None, ctx=MechanismContext())
    assert [r.feedback for r in out.rounds] == [BINARY_FEEDBACK] * 3
    assert out.agent_calls == 3 and out.final == UNGROUNDED


def test_repair_budget_comes_from_the_context_by_default() -> None:
    agent = FakeAgent(by_round(UNGROUNDED))
    out = parse_mechanism("saag").run(weather_example(), agent, None, ctx=MechanismContext(max_repairs=2))
    assert out.agent_calls == 2
    assert "Paris" in (out.rounds[0].feedback or "")  # psi3: the ungrounded value is named


def test_round0_comes_from_the_shared_cache(tmp_path: Path) -> None:
    agent = FakeAgent(by_round(GOOD))
    ctx = MechanismContext(cache=BasePredictionCache(tmp_path))
    parse_mechanism("none").run(weather_example(), agent, None, ctx=ctx)
    parse_mechanism("r1").run(weather_example(), agent, FakeReviewer([APPROVE]), ctx=ctx)
    assert len(agent.log) == 1
    # a fresh process (new cache object on the same dir) reuses it too, with the original latency
    fresh = FakeAgent(by_round(UNGROUNDED))
    out = parse_mechanism("none").run(weather_example(), fresh, None,
                                      ctx=MechanismContext(cache=BasePredictionCache(tmp_path)))
    assert fresh.log == [] and out.base.cached and out.final == GOOD and out.base.seconds == 1.0


def test_cache_key_separates_models_prompts_temperatures_and_registries(tmp_path: Path) -> None:
    cache, ex = BasePredictionCache(tmp_path), weather_example()
    a = FakeAgent(by_round(GOOD))
    keys = {cache.key(a, ex, None), cache.key(a, ex, 0.3),
            cache.key(FakeAgent(by_round(GOOD), label="other"), ex, None),
            cache.key(FakeAgent(by_round(GOOD), prompt_hash="p2"), ex, None),
            cache.key(a, ex.with_registry(Registry([])), None)}
    assert len(keys) == 5
    assert cache.key(a, ex, None) == cache.key(a, ex, 0.0)
    assert cache.key(a, ex, None) == cache.key(a, weather_example(gold_city="Elsewhere"), None)  # gold is not in it


def test_corrupt_cache_entry_is_recomputed(tmp_path: Path) -> None:
    agent, ex = FakeAgent(by_round(GOOD)), weather_example()
    cache = BasePredictionCache(tmp_path)
    cache.get_or_propose(agent, ex)
    for path in tmp_path.rglob("*.json"):
        path.write_text("{not json")
    out = BasePredictionCache(tmp_path).get_or_propose(agent, ex)
    assert out.prediction == GOOD and len(agent.log) == 2


@pytest.mark.parametrize(("spec", "message"), [
    ("x3", r"unknown mechanism 'x3'. Available: \['none', 'binary', 'saag', 'r<N>'"),
    ("r0", "N must be >= 1"),
    ("gate+none", "gate\\+ wraps an LLM-reviewer mechanism"),
    ("r", "unknown mechanism"),
])
def test_parse_mechanism_errors_list_the_choices(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_mechanism(spec)


@pytest.mark.parametrize(("spec", "expected"), [
    ("r2", (1.5, 0.75)), ("s5", (1.0, 4.0)), ("g5", (6.0, 4.0)), ("gate+r2", (1.5, 0.75)), ("none", (0.0, 0.0)),
    ("binary", (0.0, 0.5 + 0.25 + 0.125 + 0.0625 + 0.03125))])
def test_expected_calls_per_example(spec: str, expected: tuple[float, float]) -> None:
    assert parse_mechanism(spec).calls_per_example(reject_rate=0.5) == expected


def test_mechanism_facts() -> None:
    facts = {s: (m.gated, m.candidates, m.needs_reviewer)
             for s, m in ((s, parse_mechanism(s)) for s in ("none", "saag", "r2", "s3", "gate+g4"))}
    assert facts == {"none": (False, 0, False), "saag": (False, 0, False), "r2": (False, 0, True),
                     "s3": (False, 3, True), "gate+g4": (True, 4, True)}


def test_a_registered_mechanism_parses_and_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mechanisms, "_MECHANISMS", dict(mechanisms._MECHANISMS))
    mechanisms.register_mechanism("twice", lambda n, max_repairs: Progressive(2 * n), "r<2N>", numbered=True)
    assert parse_mechanism("twice3").spec == "r6" and parse_mechanism("gate+twice1").gated
    assert "twice<N>" in mechanism_names() and "gate+twice<N>" in mechanism_names()
    with pytest.raises(ConfigError, match="unknown mechanism 'twice'"):
        parse_mechanism("twice")
    with pytest.raises(ConfigError, match="lowercase letters"):
        mechanisms.register_mechanism("x2", lambda max_repairs: Progressive(1), "bad")


def test_parse_mechanism_forms() -> None:
    assert [parse_mechanism(s).spec for s in ("none", "binary", "saag", "R2", " s5 ", "g3", "gate+g2")] == [
        "none", "binary", "saag", "r2", "s5", "g3", "gate+g2"]
    assert not parse_mechanism("r2").experimental and parse_mechanism("gate+s3").experimental
    assert [parse_mechanism(s).needs_reviewer for s in ("none", "saag", "r1", "gate+r1")] == [False, False, True, True]
    m = parse_mechanism("r2")
    assert resolve_mechanism(m) is m and resolve_mechanism("r2").spec == "r2"
    assert "gate+r<N>" in mechanism_names()


@pytest.mark.parametrize("spec", ["r1", "s2", "g2", "gate+r1"])
def test_reviewer_mechanisms_need_a_reviewer(spec: str) -> None:
    with pytest.raises(ConfigError, match="needs a reviewer model"):
        parse_mechanism(spec).run(weather_example(), FakeAgent(by_round(BAD_NAME)), None, ctx=MechanismContext())


@pytest.mark.parametrize(("grounding", "repairs"), [("paper", 2), ("calibrated", 0)])
def test_the_repair_trigger_and_the_gate_follow_the_context_grounding(grounding: str, repairs: int) -> None:
    # "Boston, MA" is correct but not verbatim: the paper's stage 3 sends it back, calibrated does not.
    qualified = call(city="Boston, MA")
    agent = FakeAgent(by_round(qualified))
    ctx = MechanismContext(max_repairs=2, grounding=grounding)
    out = parse_mechanism("binary").run(weather_example(), agent, None, ctx=ctx)
    assert out.agent_calls == repairs and out.final == qualified
    gated = parse_mechanism("gate+r1").run(weather_example(), FakeAgent(by_round(qualified)),
                                           FakeReviewer(verdicts=[APPROVE]) if repairs else NeverCalledReviewer(),
                                           ctx=ctx)
    assert gated.gated is (grounding == "calibrated")


def test_mechanisms_default_to_calibrated_grounding() -> None:
    assert MechanismContext().grounding == "calibrated"
