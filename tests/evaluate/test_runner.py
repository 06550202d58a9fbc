"""End-to-end evaluate runs against a scripted OpenAI-compatible server (no network, deterministic)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from saag_opt.cli import main
from saag_opt.data import load_dataset, round_robin
from saag_opt.errors import ConfigError, RunError
from saag_opt.evaluate.config import EvaluateConfig
from saag_opt.evaluate.run import run_evaluation
from saag_opt.evaluation.results import read_run
from saag_opt.model import Example
from saag_opt.testing import Fault, Reply, ScriptedOpenAIServer, ScriptedWorld, read_request
from saag_opt.testing.scripted_world import BaseRequest, Request, ReviewRequest
from tests.evaluate.scripted_replies import right, wrong

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DATASET = "shipped:bfcl"
SPLIT, LIMIT = "test", 16


@pytest.fixture(autouse=True)
def _prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-value")


@pytest.fixture
def examples() -> list[Example]:
    return load_dataset(DATASET, split=SPLIT, limit=LIMIT)


class World(ScriptedWorld):
    """Scripted base agent + reviewer. Base wrong on every 4th example (the reviewer fixes it);
    a false alarm on every 6th+1 (the revision breaks it). Faults for chosen examples."""

    def __init__(self, examples: list[Example]) -> None:
        super().__init__()
        self.examples = examples
        self.failing: set[str] = set()

    def _which(self, text: str) -> int:
        hits = [i for i, ex in enumerate(self.examples) if ex.query and ex.query in text]
        return max(hits, key=lambda i: len(self.examples[i].query))

    def wrong_base(self, i: int) -> bool:
        return i % 4 == 0

    def false_alarm(self, i: int) -> bool:
        return i % 6 == 1 and not self.wrong_base(i)

    def respond(self, request: Request) -> Any:
        if self.examples[self._which(request.text)].id in self.failing:
            return Fault(500)
        return super().respond(request)

    def base(self, request: BaseRequest) -> Reply:
        i = self._which(request.text)
        example = self.examples[i]
        if not request.revising:
            return wrong(example) if self.wrong_base(i) else right(example)
        return wrong(example) if self.false_alarm(i) else right(example)

    def review(self, request: ReviewRequest) -> tuple[bool, str]:
        i = self._which(request.text)
        example = self.examples[i]
        tentative = request.tentative_calls
        looks_wrong = ("cannot help" in tentative) if example.expect != "no_call" else ("no function call" not in tentative)
        first_review = not looks_wrong and self.false_alarm(i) and "revision" not in request.text
        return looks_wrong or first_review, "Please fix the call."


@pytest.fixture
def world(examples: list[Example]) -> Iterator[tuple[World, ScriptedOpenAIServer]]:
    w = World(examples)
    with ScriptedOpenAIServer(w) as server:
        yield w, server


def _config(server: ScriptedOpenAIServer, tmp_path: Path, **overrides: Any) -> EvaluateConfig:
    values: dict[str, Any] = dict(base=f"fake@{server.url}", reviewer=f"fake@{server.url}", prompt="reviewer@v1",
                                  mechanism="r1", dataset=DATASET, split=SPLIT, limit=LIMIT, workers=4,
                                  runs_dir=tmp_path / "runs", cache_dir=tmp_path / "cache", retry_base_delay=0.01)
    values.update(overrides)
    return EvaluateConfig(**values)


def test_run_writes_the_run_dir_and_exact_help_harm(world, tmp_path: Path, examples: list[Example]) -> None:  # noqa: ANN001
    w, server = world
    events: list[Any] = []
    result = run_evaluation(_config(server, tmp_path), on_event=events.append)
    fixed = sum(w.wrong_base(i) for i in range(len(examples)))
    broken = sum(w.false_alarm(i) for i in range(len(examples)))
    hh = result.summary.help_harm
    assert (hh.fixed, hh.broken, hh.both_wrong, hh.n) == (fixed, broken, 0, len(examples))
    assert fixed > 0 and broken > 0
    assert result.summary.base.accuracy == pytest.approx(1 - fixed / len(examples))
    assert result.summary.reviewed.accuracy == pytest.approx(1 - broken / len(examples))
    assert result.summary.reviewer_calls_per_item == 1.0

    run_dir = result.run_dir
    assert run_dir.parent == tmp_path / "runs" and re.fullmatch(r"\d{8}-\d{6}-evaluate", run_dir.name)
    assert sorted(p.name for p in run_dir.iterdir()) == ["costs.json", "records.jsonl", "run.json", "summary.json"]
    raw_header = (run_dir / "run.json").read_text()
    assert "sk-test-secret-value" not in raw_header
    run = read_run(run_dir)
    assert run.header.status == "success" and run.header.models["base"].startswith("fake@")
    assert run.header.plugins["mechanism"]["spec"] == "r1" and run.header.dataset["n"] == len(examples)
    assert run.header.plugins["mechanism"]["args"]["grounding"] == run.header.config["grounding"] == "calibrated"
    assert run.header.packages["dspy"] == "3.4.1"
    assert len(run.records) == 2 * len(examples)
    assert {r.condition for r in run.records} == {"base", "r1"}
    rejected = [r for r in run.records if r.condition == "r1" and r.rounds and r.rounds[0].verdict == "reject"]
    assert len(rejected) == fixed + broken
    assert all(r.rounds[0].feedback == "Please fix the call." and r.rounds[0].revised is not None for r in rejected)
    assert all(r.saag is not None for r in run.records)
    costs = json.loads((run_dir / "costs.json").read_text())
    assert costs["roles"]["base"]["calls"] >= len(examples) and costs["roles"]["reviewer"]["calls"] == len(examples)
    assert run.summary is not None and run.summary.latency.overhead_x is not None
    assert run.summary.base.relevance_suite is not None

    assert events[0].kind == "run_started" and events[-1].kind == "run_finished"
    done = [e.data for e in events if e.kind == "example_finished"]
    assert [e["done"] for e in done] == list(range(1, len(examples) + 1)) and "base" in done[-1]["costs"]


def test_base_predictions_are_reused_across_mechanisms(world, tmp_path: Path, examples: list[Example]) -> None:  # noqa: ANN001
    _, server = world
    first = run_evaluation(_config(server, tmp_path, mechanism="none"))
    base_requests = sum(r.role == "base" for r in _requests(server))
    assert base_requests == len(examples)
    server.reset()
    second = run_evaluation(_config(server, tmp_path, mechanism="gate+r1"))
    assert not any(isinstance(r, BaseRequest) and not r.revising for r in _requests(server))
    base1 = {r.example_id: r for r in read_run(first.run_dir).records if r.condition == "base"}
    base2 = {r.example_id: r for r in read_run(second.run_dir).records if r.condition == "base"}
    assert {k: (v.final, v.seconds) for k, v in base1.items()} == {k: (v.final, v.seconds) for k, v in base2.items()}
    assert all(v.cached for v in base2.values())
    assert second.summary.gated_share is not None and second.summary.experimental


def _requests(server: ScriptedOpenAIServer) -> list[Request]:
    """The server's chat requests, each with the role it came from."""
    return [read_request(r.body or {}) for r in server.chat_requests]


def test_transient_faults_lose_no_example(world, tmp_path: Path, examples: list[Example]) -> None:  # noqa: ANN001
    _, server = world
    server.inject([Fault(429), Fault(500), Fault("garbage"), Fault("empty"), Fault("reset"), Fault(503)])
    result = run_evaluation(_config(server, tmp_path, workers=3))
    assert result.summary.errors == 0 and result.summary.n_examples == len(examples)
    assert server.pending_faults == 0
    assert {r.example_id for r in result.records} == {ex.id for ex in examples}


def test_persistent_failure_becomes_an_error_record(world, tmp_path: Path, examples: list[Example]) -> None:  # noqa: ANN001
    w, server = world
    w.failing.add(examples[3].id)
    result = run_evaluation(_config(server, tmp_path, retries=1))
    assert result.summary.errors == 1 and len(result.records) == 2 * len(examples)
    bad = [r for r in result.records if r.example_id == examples[3].id]
    assert all(r.error and "LMCallError" in r.error and "scripted fault" in r.error and not r.correct for r in bad)
    assert result.summary.help_harm.n == len(examples) - 1  # errors are excluded from the paired table

    with pytest.raises(RunError, match=r"1/16 examples failed .* above --fail-on-error 0.0%"):
        run_evaluation(_config(server, tmp_path, retries=0, fail_on_error=0.0))
    latest = sorted((tmp_path / "runs").iterdir())[-1]
    header = read_run(latest, header_only=True).header
    assert header.status == "error" and header.error is not None and "fail-on-error" in header.error.message


@pytest.mark.parametrize(("fault", "message"), [
    (Fault(401, message="bad key sk-test-secret-value"), "rejected the API key"),
    (Fault(404, message="The model `fake` does not exist"), "no such model or URL path"),
])
def test_a_model_that_is_gone_stops_the_run_keeping_finished_examples(
        world, tmp_path: Path, examples: list[Example], fault: Fault, message: str,  # noqa: ANN001
        capsys: pytest.CaptureFixture[str]) -> None:
    """A rejected key or a wrong URL fails every later call too: the run stops with one line, exit 2,
    instead of recording every remaining example as an error; the finished examples are kept."""
    w, server = world
    finished = {e.id for e in round_robin(examples)[:2]}  # the first two run (categories take turns)
    handler = server.handler
    server.reset(lambda request: handler(request) if w.examples[w._which(json.dumps(request["messages"]))].id
                 in finished else fault)
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}", "--prompt", "reviewer@v1",
              "--mechanism", "r1", "--split", SPLIT, "--limit", str(LIMIT), "--runs-dir", str(tmp_path / "runs"),
              "--workers", "1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    run_dir = sorted((tmp_path / "runs").iterdir())[-1]
    assert re.fullmatch(f"error: fake@{re.escape(server.url)}: .*{message}.* \\(finished examples are kept; once "
                        f"fixed, continue with: saag-opt evaluate --resume {re.escape(str(run_dir))}\\)\n", err)
    run = read_run(run_dir)
    assert run.header.status == "error" and message in run.header.error.message
    assert {r.example_id for r in run.records} == finished and not any(r.error for r in run.records)
    assert "sk-test-secret-value" not in run_dir.joinpath("run.json").read_text()

    server.reset(handler)  # the key or URL fixed: the printed command finishes the same run
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--resume", str(run_dir)])
    assert exit_info.value.code == 0
    run = read_run(run_dir)
    assert run.header.status == "success" and {r.example_id for r in run.records} == {ex.id for ex in examples}


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="unknown mechanism 'r-two'"):
        EvaluateConfig(base="fake", mechanism="r-two")
    with pytest.raises(ValidationError, match="workers"):
        EvaluateConfig(base="fake", workers=0)
    with pytest.raises(ValidationError, match="mechanism 'gate\\+r2' needs a reviewer model: pass --reviewer"):
        EvaluateConfig(base="fake", mechanism="gate+r2")
    with pytest.raises(ConfigError, match="has no examples"):
        run_evaluation(EvaluateConfig(base="fake", mechanism="none", dataset="shipped:bfcl", split="test", limit=None,
                                      runs_dir=tmp_path, cache_dir=tmp_path / "c").model_copy(update={"limit": 0}))
    assert not any(tmp_path.iterdir())  # nothing written for a config error


def _gold_only_strings(example: Example) -> set[str]:
    """Gold string values an agent could not have read: absent from the query and the tool docs."""
    seen = (example.query + json.dumps(example.registry.to_dicts(), ensure_ascii=False)).lower()
    out = set()
    for gold in example.gold or ():
        for params in gold.values():
            for values in params.values():
                for value in values:
                    if isinstance(value, str) and len(value) >= 4 and value.lower() not in seen:
                        out.add(value.lower())
    return out


def _gold_blind_world() -> ScriptedWorld:
    """Answers without ever emitting gold: the base calls the first tool with no arguments."""
    return ScriptedWorld(base=lambda r: [{"name": r.tools[0], "arguments": {}}],
                         review=lambda r: (True, "Add the missing arguments."), select=lambda r: 0,
                         grade=lambda r: (0.5, "unsure"))


def test_no_gold_reaches_any_agent_or_reviewer_request(tmp_path: Path) -> None:
    examples = load_dataset(DATASET)
    secrets = {ex.query.lower(): _gold_only_strings(ex) for ex in examples}
    assert sum(map(len, secrets.values())) >= 10  # the scan can fail: there are gold values no input contains
    with ScriptedOpenAIServer(_gold_blind_world()) as server:
        for mechanism, informed in [("r2", True), ("saag", False), ("gate+s2", False), ("g2", False)]:
            run_evaluation(_config(server, tmp_path, mechanism=mechanism, saag_informed=informed, split=None,
                                   limit=None, workers=8))
        bodies = [json.dumps(r.body, ensure_ascii=False).lower() for r in server.chat_requests]
    assert len(bodies) > 4 * len(examples)
    leaked, scanned = set(), 0
    for body in bodies:
        text = json.loads(body)  # the JSON-escaped query appears unescaped after a round trip
        flat = "\n".join(str(m.get("content")) for m in text["messages"])
        owners = [q for q in secrets if q and q in flat]
        assert owners, "every request belongs to an example"
        query = max(owners, key=len)
        scanned += bool(secrets[query])
        leaked |= {s for s in secrets[query] if s in flat}
    assert scanned > 0
    assert not leaked, f"gold values reached a model: {sorted(leaked)[:5]}"


def test_cli_prints_the_tables_and_writes_json(world, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001

    _, server = world
    out = tmp_path / "summary.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--base", f"fake@{server.url}", "--reviewer", f"fake@{server.url}", "--prompt", "reviewer@v1",
              "--mechanism", "r1", "--split", SPLIT, "--limit", str(LIMIT), "--runs-dir", str(tmp_path / "runs"),
              "--grounding", "paper", "--json", str(out)])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    for needle in ("Accuracy: base vs r1", "relevance suite", "helpfulness", "McNemar", "latency overhead",
                   "reviewer: calls"):
        assert needle in printed
    summary = json.loads(out.read_text())
    header = read_run(sorted((tmp_path / "runs").iterdir())[-1], header_only=True).header
    assert summary["mechanism"] == "r1" and header.args_passed["limit"] == LIMIT and "seed" not in header.args_passed
    assert header.config["grounding"] == "paper" and header.args_passed["grounding"] == "paper"


@pytest.mark.parametrize(("argv", "message"), [
    (["--mechanism", "q7"], "error: mechanism: .*unknown mechanism 'q7'"),
    (["--base", "nonsense-model"], "error: base: .*unknown model 'nonsense-model'"),
])
def test_cli_bad_flags_are_one_line_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--base", "fake", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and err.count("\n") == 1
