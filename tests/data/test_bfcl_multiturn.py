"""BFCL multi-turn as datasets: loading as BFCL's inference does, splits by scenario, BFCL's checkers as truth."""

from __future__ import annotations

import importlib.util
import json
import shutil
import time
from pathlib import Path

import pytest

from saag_opt.data.bfcl import bfcl_data_dir
from saag_opt.data.bfcl_environment import BfclEnvironment
from saag_opt.data.bfcl_multiturn import ADDED_FUNCTIONS_PROMPT, load_bfcl_multi_turn, scenario_id
from saag_opt.data.catalog import dataset_names, is_multi_turn_dataset, list_datasets, load_dataset, load_episodes
from saag_opt.data.splits import split_of
from saag_opt.errors import ConfigError, DatasetError
from saag_opt.model import ToolCall
from tests.episodes.world import CATEGORIES, episodes, gold_transcript, needs_bfcl, one_step, sample

pytestmark = needs_bfcl

ROOT = Path(__file__).resolve().parents[2]


def test_the_four_categories_are_multi_turn_dataset_names() -> None:
    names = dataset_names()
    for category in CATEGORIES:
        assert f"bfcl:{category}" in names and is_multi_turn_dataset(f"bfcl:{category}")
    assert is_multi_turn_dataset("bfcl:multi_turn") and not is_multi_turn_dataset("bfcl:simple_python")
    listed = {info.name: info.n_examples for info in list_datasets()}
    assert listed["bfcl:multi_turn_base"] == 200 and listed["bfcl:multi_turn"] == 800


def test_load_dataset_names_the_episode_loader_for_a_multi_turn_spec() -> None:
    with pytest.raises(ConfigError, match="multi-turn dataset.*load_episodes"):
        load_dataset("bfcl:multi_turn_base")
    with pytest.raises(ConfigError, match="not a multi-turn dataset; multi-turn datasets: bfcl:multi_turn_base"):
        load_episodes("bfcl:simple_python")


@pytest.mark.parametrize("category", CATEGORIES)
def test_every_category_loads_200_entries_with_turns_gold_and_setup(category: str) -> None:
    loaded = episodes(category)
    assert len(loaded) == 200 and len({e.id for e in loaded}) == 200
    for episode in loaded:
        assert episode.environment == "bfcl" and episode.category == category
        assert len(episode.gold) == len(episode.turns)
        assert set(episode.setup) == {"initial_config", "involved_classes", "long_context"}
        assert episode.setup["long_context"] == (category == "multi_turn_long_context")
        assert all(m["role"] == "user" for turn in episode.turns for m in turn.messages)


def test_miss_func_holds_the_missed_functions_back_until_their_turn_as_bfcl_does() -> None:
    entry = episodes("multi_turn_miss_func")[0]
    raw = json.loads((_data() / "BFCL_v4_multi_turn_miss_func.json").read_text().splitlines()[0])
    (turn, names), = raw["missed_function"].items()
    index = int(turn)
    assert raw["question"][index] == []  # BFCL's empty turn ...
    assert entry.turns[index].messages == ({"role": "user", "content": ADDED_FUNCTIONS_PROMPT},)  # ... gets its prompt
    assert [t.name for t in entry.turns[index].added_tools] == names
    for name in names:
        assert name not in entry.tools_at(index - 1) and name in entry.tools_at(index)
        assert name in entry.tools_at(len(entry.turns) - 1)
    base = episodes("multi_turn_base")[0]
    assert set(entry.tools_at(index).names) == set(base.tools.names)  # nothing else is held back


def test_the_split_is_the_scenarios_so_no_scenario_straddles_two_splits_across_categories() -> None:
    assert scenario_id("multi_turn_miss_param_17") == scenario_id("multi_turn_base_17") == "multi_turn_17"
    by_index = {}
    for category in CATEGORIES:
        for episode in episodes(category):
            index = episode.id.rsplit("_", 1)[1]
            assert episode.split == split_of(f"multi_turn_{index}")
            assert by_index.setdefault(index, episode.split) == episode.split
    assert set(by_index.values()) == {"train", "val", "test"}


def test_load_episodes_filters_by_split_and_limits_round_robin_over_categories() -> None:
    test = load_episodes("bfcl:multi_turn", split="test")
    assert test and {e.split for e in test} == {"test"} and {e.category for e in test} == set(CATEGORIES)
    head = load_episodes("bfcl:multi_turn", split="test", limit=8)
    assert [e.category for e in head].count("multi_turn_base") == 2 and len(head) == 8


def test_a_bad_row_is_one_line_with_its_file_and_line(tmp_path: Path) -> None:
    root = tmp_path / "data"
    shutil.copytree(_data() / "multi_turn_func_doc", root / "multi_turn_func_doc")
    (root / "possible_answer").mkdir()
    lines = (_data() / "BFCL_v4_multi_turn_base.json").read_text().splitlines()[:3]
    answers = (_data() / "possible_answer" / "BFCL_v4_multi_turn_base.json").read_text().splitlines()[:3]
    broken = json.loads(lines[1]) | {"involved_classes": ["NoSuchAPI"]}
    (root / "BFCL_v4_multi_turn_base.json").write_text("\n".join([lines[0], json.dumps(broken), lines[2]]) + "\n")
    (root / "possible_answer" / "BFCL_v4_multi_turn_base.json").write_text("\n".join(answers) + "\n")
    with pytest.raises(DatasetError, match=r"BFCL_v4_multi_turn_base.json:2: unknown backend class 'NoSuchAPI'"):
        load_bfcl_multi_turn("multi_turn_base", root=root)


def _data() -> Path:
    data = bfcl_data_dir()
    assert data is not None
    return data


# -- the environment: BFCL's backends and checkers -----------------------------------------------------


def test_the_gold_scores_valid_and_a_wrong_state_fails_at_its_turn_with_bfcls_reason() -> None:
    entry = episodes("multi_turn_base")[0]
    env = BfclEnvironment()
    env.reset(entry)
    gold = gold_transcript(entry)
    assert env.check(gold).valid
    wrong = (one_step(ToolCall("cd", {"folder": "document"}), ToolCall("mkdir", {"dir_name": "tmp"})), *gold[1:])
    verdict = env.check(wrong)
    assert not verdict.valid and verdict.failed_turn == 0
    assert verdict.error_type == "multi_turn:instance_state_mismatch" and verdict.checks["multi_turn_checker"] is False
    assert "differences" in verdict.details
    cut = env.check(gold[:-1])
    assert not cut.valid and cut.error_type == "multi_turn:force_terminated"
    env.close()


def test_a_call_at_an_abstention_turn_fails_the_irrelevance_checker_only() -> None:
    entry = next(e for e in episodes("multi_turn_miss_param") if e.gold[0] == ())
    env = BfclEnvironment()
    env.reset(entry)
    gold = gold_transcript(entry)
    called = (one_step(ToolCall("ls", {})), *gold[1:])  # ls changes no state: BFCL's leaderboard checker passes it
    verdict = env.check(called)
    assert verdict.abstain_turns[0] == 0
    assert verdict.checks == {"multi_turn_checker": True, "multi_turn_irrelevance_checker": False}
    assert not verdict.valid and verdict.error_type == "multi_turn:irrelevance_error:decoder_success"
    env.close()


def test_calls_bfcl_would_eval_unsafely_never_run_and_never_reach_the_checker(tmp_path: Path) -> None:
    target = tmp_path / "written"
    entry = episodes("multi_turn_base")[0]
    env = BfclEnvironment()
    env.reset(entry)
    bad = [ToolCall("open", {"file": str(target), "mode": "w"}),
           ToolCall("ls", {"a=__import__('pathlib').Path(" + repr(str(target)) + ").touch() or True, b": 1})]
    results = env.execute(bad)
    assert [r.executed for r in results] == [False, False] and not target.exists()
    assert "not a function of this environment" in results[0].content
    assert env.decoded(((tuple(bad),),)) == [[]]
    env.close()


def test_runs_of_one_entry_never_share_bfcls_module_global_instances() -> None:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils  # noqa: PLC0415 - optional: bfcl-eval (the test is requires-marked)

    entry = episodes("multi_turn_base")[0]
    first, second = BfclEnvironment(), BfclEnvironment()
    first.reset(entry)
    second.reset(entry)
    assert first.execute([ToolCall("mkdir", {"dir_name": "x"})])[0] == second.execute([ToolCall("mkdir", {"dir_name": "x"})])[0]
    first.check(gold_transcript(entry))
    assert first.check(gold_transcript(entry)).valid  # a second check does not see the first's instances
    first.close()
    second.close()
    assert not [k for k in vars(multi_turn_utils) if k.startswith("saag_")]


def test_gold_replay_through_our_loop_scores_a_sample_of_every_category_valid() -> None:
    spec = importlib.util.spec_from_file_location("gold_replay", ROOT / "experiments/bench/multiturn_gold_replay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    entries = sample(5)
    started = time.perf_counter()
    judgements = module.replay(entries)
    assert len(judgements) == 20 and all(j.valid for j in judgements), [
        (e.id, j.error_type) for e, j in zip(entries, judgements) if not j.valid]
    assert time.perf_counter() - started < 30


def test_the_gold_replay_script_prints_valid_last(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("gold_replay", ROOT / "experiments/bench/multiturn_gold_replay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--dataset", "bfcl:multi_turn_miss_func", "--limit", "3"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "valid=3/3"


def test_the_guard_mechanism_with_every_tool_result_in_view_withholds_no_gold_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    """guard+r1 (cascade-only: stage 1-2 rules and the injection rule) on gold: no false alarm, still all valid."""
    spec = importlib.util.spec_from_file_location("gold_replay", ROOT / "experiments/bench/multiturn_gold_replay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--limit", "12", "--mechanism", "guard+r1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "valid=12/12" and not any(line.startswith("WITHHELD") for line in lines)
    counts = dict(item.split("=") for item in lines[-3].split())
    assert counts["mechanism"] == "guard+r1" and counts["withheld"] == "0" and int(counts["gold_steps"]) > 12
