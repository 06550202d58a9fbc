"""Run directories for the report tests, produced the way users produce them.

* evaluate, compare and optimize runs come from the real runners against the scripted
  OpenAI-compatible server (the worlds of tests/evaluation and tests/optimize);
* the 1,000-example evaluate run is synthetic but shaped by the real pipeline: real BFCL-style
  examples (the shipped set, copied under new ids), base and final calls judged by the real
  SAAG cascade and truth check, realistic review rounds; it measures the size budget;
* the tune run is a recorded fixture (tests/fixtures/runs/tune): trials.jsonl and summary.json in
  the shape ``saag-opt tune`` writes.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from pathlib import Path
from typing import Any

from saag_opt.artifacts import PromptStore, PromptVersion
from saag_opt.atomic import atomic_write_json
from saag_opt.data import load_dataset, write_examples
from saag_opt.data.perturb import gold_calls
from saag_opt.evaluation.helpharm import HelpHarm
from saag_opt.evaluation.paired import summarise_condition
from saag_opt.evaluation.results import CallRecord, ExampleRecord, RecordWriter, RoundRecord
from saag_opt.model import Example, ToolCall
from saag_opt.runfiles import RunHeader, utc_now, write_header
from saag_opt.saag import judge_with_gold

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"

FEEDBACK = ("The call passes `{name}` an argument value that does not occur in the user's request; re-read the "
            "request and use the exact value the user gave for each required parameter, and drop parameters the "
            "function does not define.")


def prompt_files(root: Path, marker: str) -> tuple[str, str]:
    """A store with v1 (approves everything) and v2 (carries the marker the scripted reviewer reacts to)."""
    store = PromptStore(root)
    store.save(PromptVersion(version="v1", program="reviewer", instructions={"review": "Review the calls."}))
    store.save(PromptVersion(version="v2", program="reviewer", parents=["v1"],
                             instructions={"review": f"Review the calls carefully ({marker})."}))
    store.alias("reviewer", "production", "v2")
    return str(root / "reviewer" / "v1.json"), str(root / "reviewer" / "v2.json")


def _call_record(calls: list[ToolCall], raw: str | None = None) -> CallRecord:
    return CallRecord(calls=[c.to_dict() for c in calls], raw=raw, status="ok" if calls else "empty")


def _wrong_calls(example: Example, rng: random.Random) -> list[ToolCall]:
    """A plausible base-agent mistake: wrong value, misspelt parameter, unknown function, or abstention."""
    gold = gold_calls(example)
    if example.expect == "no_call" or not gold:
        return [ToolCall(example.registry[0].name, {})]
    call = gold[0]
    kind = rng.choice(["value", "param", "name", "abstain"])
    if kind == "abstain":
        return []
    if kind == "name":
        return [ToolCall(call.name + "_v2", dict(call.arguments))] + list(gold[1:])
    args = dict(call.arguments)
    if args:
        key = next(iter(args))
        if kind == "param":
            args[key[:-1] + key[-1] * 2] = args.pop(key)
        else:
            args[key] = "Springfield" if isinstance(args[key], str) else 12345
    return [ToolCall(call.name, args)] + list(gold[1:])


def _judged(example: Example, calls: list[ToolCall]) -> tuple[bool, str, dict[str, Any]]:
    judgement = judge_with_gold(calls, example)
    return judgement.correct, judgement.reason, judgement.cascade.to_dict()


def synthetic_evaluate_run(root: Path, n: int = 1000, seed: int = 7) -> Path:
    """An r2 evaluate run over ``n`` examples (copies of the shipped BFCL set under new ids)."""
    rng = random.Random(seed)
    source = load_dataset("shipped:bfcl")
    examples = [dataclasses.replace(source[i % len(source)], id=f"{source[i % len(source)].id}-{i // len(source)}")
                for i in range(n)]
    root.mkdir(parents=True, exist_ok=True)
    dataset = root / "synthetic-bfcl.jsonl"
    write_examples(dataset, examples)
    run_dir = root / "20260101-000000-evaluate"
    run_dir.mkdir()
    header = RunHeader(run_id=run_dir.name, verb="evaluate", created=utc_now(), status="started",
                       config={"mechanism": "r2", "seed": 0, "dataset": str(dataset)},
                       models={"base": "gpt-4o", "reviewer": "gpt-5-mini"},
                       plugins={"mechanism": {"spec": "r2"}}, dataset={"spec": str(dataset), "n": n})
    write_header(run_dir, header)
    writer = RecordWriter(run_dir / "records.jsonl")
    base_rows, final_rows = [], []
    for example in examples:
        base_ok_planned = rng.random() < 0.7
        base_calls = list(gold_calls(example)) if base_ok_planned and example.expect != "no_call" else (
            [] if base_ok_planned else _wrong_calls(example, rng))
        correct, reason, saag = _judged(example, base_calls)
        common = {"run_id": run_dir.name, "example_id": example.id, "category": example.category, "split": "test"}
        base = ExampleRecord(**common, condition="base", final=_call_record(base_calls), correct=correct,
                             truth_reason=reason, saag=saag, seconds=round(rng.uniform(0.4, 2.0), 3), tokens=420)
        rounds, final_calls = [], base_calls
        reject = (not correct and rng.random() < 0.7) or (correct and rng.random() < 0.06)
        name = base_calls[0].name if base_calls else "the function"
        if reject:
            revised = list(gold_calls(example)) if not correct else _wrong_calls(example, rng)
            rounds.append(RoundRecord(index=0, reviewer="llm", verdict="reject", tentative=_call_record(base_calls),
                                      feedback=FEEDBACK.format(name=name), revised=_call_record(revised)))
            rounds.append(RoundRecord(index=1, reviewer="llm", verdict="approve", tentative=_call_record(revised)))
            final_calls = revised
        else:
            rounds.append(RoundRecord(index=0, reviewer="llm", verdict="approve", tentative=_call_record(base_calls)))
        f_ok, f_reason, f_saag = _judged(example, final_calls)
        final = ExampleRecord(**common, condition="r2", final=_call_record(final_calls), correct=f_ok,
                              truth_reason=f_reason, saag=f_saag, base=base.final, base_saag=saag, rounds=rounds,
                              reviewer_calls=len(rounds), agent_calls=int(reject),
                              seconds=base.seconds + round(rng.uniform(0.8, 3.0), 3), tokens=900)
        writer.write(base)
        writer.write(final)
        base_rows.append(base)
        final_rows.append(final)
    writer.close()
    hh = HelpHarm.from_pairs([(b.correct, f.correct) for b, f in zip(base_rows, final_rows)])
    roles = {"base": {"calls": n + 60, "cache_hits": 0, "errors": 0, "retries": 0, "prompt_tokens": 380000,
                      "completion_tokens": 41000, "cached_prompt_tokens": 0, "dollars": 1.36, "seconds": 1210.0,
                      "unpriced_calls": 0, "models": ["gpt-4o"]},
             "reviewer": {"calls": n + 260, "cache_hits": 12, "errors": 1, "retries": 3, "prompt_tokens": 910000,
                          "completion_tokens": 220000, "cached_prompt_tokens": 0, "dollars": 0.67, "seconds": 2300.0,
                          "unpriced_calls": 0, "models": ["gpt-5-mini"]}}
    costs = {"schema_version": 1, "currency": "USD", "roles": roles}
    base_s = sum(b.seconds for b in base_rows) / n
    final_s = sum(f.seconds for f in final_rows) / n
    summary = {"run_id": run_dir.name, "mechanism": "r2", "experimental": False, "prompt": "reviewer@v2",
               "n_examples": n, "errors": 0,
               "base": summarise_condition("base", base_rows).model_dump(mode="json"),
               "reviewed": summarise_condition("r2", final_rows).model_dump(mode="json"),
               "help_harm": hh.to_dict(),
               "latency": {"base_mean_seconds": base_s, "final_mean_seconds": final_s, "overhead_x": final_s / base_s},
               "reviewer_calls_per_item": sum(f.reviewer_calls for f in final_rows) / n,
               "agent_calls_per_item": sum(f.agent_calls for f in final_rows) / n, "costs": costs,
               "reviewer_unusable": {"r2": 3}}
    atomic_write_json(run_dir / "summary.json", summary)
    atomic_write_json(run_dir / "costs.json", costs)
    write_header(run_dir, header.model_copy(update={"status": "success", "finished": utc_now()}))
    return run_dir


def tune_run(root: Path) -> Path:
    """A copy of the recorded tune fixture (trials.jsonl and summary.json as ``saag-opt tune`` writes them)."""
    target = root / FIXTURES.joinpath("tune").name
    shutil.copytree(FIXTURES / "tune", target)
    return target


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
