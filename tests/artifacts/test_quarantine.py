"""Quarantined prompt versions: kept in the lineage, listed with their reason, never aliased; no shipped alias
points at one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from saag_opt.artifacts import PromptStore
from saag_opt.artifacts.store import render_markdown
from saag_opt.cli.prompts import prompts_app
from saag_opt.errors import ArtifactError
from saag_opt.optimize.rails import check_instruction
from saag_opt.paths import shipped

REASON = "review: not_instructions: asks for instructions ('provide a comprehensive and well-structured instruction')"
TEXT = "Please provide a comprehensive and well-structured instruction for the assistant to consider."


@pytest.fixture
def store(tmp_path: Path) -> PromptStore:
    store = PromptStore(tmp_path / "prompts")
    store.save_new("reviewer", {"review": TEXT}, parents=["v2"], source="gepa", quarantine=REASON)
    return store


def test_an_alias_never_points_at_a_quarantined_version(store: PromptStore) -> None:
    kept = store.get("reviewer", "v3-gepa")
    assert kept.quarantine == REASON and kept.parents == ["v2"]
    with pytest.raises(ArtifactError, match=r"reviewer@v3-gepa is quarantined \(review: not_instructions"):
        store.alias("reviewer", "best", "v3-gepa")
    assert "best" not in store.aliases("reviewer")["reviewer"]
    result = CliRunner().invoke(prompts_app, ["alias", "best", "reviewer@v3-gepa", "--store", str(store.root)])
    assert result.exit_code != 0 and isinstance(result.exception, ArtifactError)


def test_the_same_text_accepted_later_is_a_version_of_its_own(store: PromptStore) -> None:
    accepted = store.save_new("reviewer", {"review": TEXT}, parents=["v2"], source="gepa")
    assert accepted.version == "v4-gepa" and accepted.quarantine is None
    assert store.save_new("reviewer", {"review": TEXT}, parents=["v2"], quarantine=REASON).version == "v3-gepa"
    store.alias("reviewer", "best", "v4-gepa")


def test_prompts_list_shows_the_quarantine_and_why(store: PromptStore) -> None:
    out = CliRunner().invoke(prompts_app, ["list", "--store", str(store.root)], env={"COLUMNS": "400"}).output
    assert "quarantined (never aliased)" in out and "not_instructions" in out
    data = json.loads(CliRunner().invoke(prompts_app, ["list", "--format", "json", "--store", str(store.root)]).output)
    assert {v["version"]: v["quarantine"] for v in data["versions"]} == {"v1": None, "v2": None, "v3-gepa": REASON}
    assert "| quarantined | review: not_instructions" in render_markdown(store.get("reviewer", "v3-gepa"))


def test_a_store_without_quarantines_lists_as_before(tmp_path: Path) -> None:
    out = CliRunner().invoke(prompts_app, ["list", "--store", str(tmp_path / "empty")]).output
    assert "quarantined" not in out


def test_no_shipped_alias_points_at_a_quarantined_or_degenerate_text() -> None:
    seeds = PromptStore(shipped("prompts"), seeds=None)
    aliases = json.loads((shipped("prompts") / "aliases.json").read_text())
    assert aliases == seeds.aliases()
    for program, table in aliases.items():
        for alias, name in table.items():
            version = seeds.get(program, name)
            assert version.quarantine is None, f"{program}@{alias}"
            for predictor, text in version.instructions.items():
                assert check_instruction(text, text) == [], f"{program}@{alias} ({name}) {predictor}"
    assert all(v.quarantine is None for v in seeds.list())


def test_no_alias_in_a_committed_experiment_store_points_at_a_quarantined_text() -> None:
    """Experiment stores (GEPA's lineage, quarantined proposals included) are committed as evidence."""
    stores = sorted(p.parent for p in (Path(__file__).resolve().parents[2] / "experiments" / "results").rglob("aliases.json"))
    assert stores, "experiment 5's GEPA store is committed"
    for root in stores:
        store = PromptStore(root)
        for program, table in store.aliases().items():
            for alias, name in table.items():
                assert store.get(program, name).quarantine is None, f"{root.name}: {program}@{alias}"
