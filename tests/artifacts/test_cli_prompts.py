"""`saag-opt prompts ...` through typer's CliRunner against a temporary store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from saag_opt.artifacts import PromptStore, PromptVersion
from saag_opt.cli import main
from saag_opt.cli.prompts import prompts_app
from saag_opt.errors import ArtifactError, ConfigError

runner = CliRunner()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    store = PromptStore(tmp_path / "prompts")
    store.save(PromptVersion(version="v1", program="reviewer", instructions={"review": "Generic review."}))
    store.save(PromptVersion(version="v2", program="reviewer", parents=["v1"],
                             instructions={"review": "Generic review.\nTool-only responses are complete."}))
    store.save_new("reviewer", {"review": "GEPA review."}, parents=["v2"], source="gepa",
                   scores={"val": 0.925}, models={"reviewer": "gpt-5-mini"})
    store.alias("reviewer", "production", "v2")
    return store.root


def _run(*args: str) -> str:
    result = runner.invoke(prompts_app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_list_table_shows_lineage_hash_scores_and_aliases(root: Path) -> None:
    out = _run("list", "--program", "reviewer", "--store", str(root))
    v2 = PromptStore(root).get("reviewer", "v2")
    for expected in ("v1", "v2", "v3-gepa", v2.sha256[:12], "production", "gepa", "val=0.925"):
        assert expected in out
    assert v2.sha256[:13] not in out


def test_list_json_and_env_root(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(root))
    data = json.loads(_run("list", "--format", "json"))
    assert [v["version"] for v in data["versions"]] == ["v1", "v2", "v3-gepa"]
    assert data["aliases"] == {"reviewer": {"production": "v2"}}


def test_an_empty_store_lists_the_built_in_seeds(tmp_path: Path) -> None:
    data = json.loads(_run("list", "--format", "json", "--store", str(tmp_path / "empty")))
    assert [v["version"] for v in data["versions"]] == ["v1", "v2"]
    assert data["aliases"] == {"reviewer": {"production": "v2"}}
    assert "(built-in)" in _run("list", "--store", str(tmp_path / "empty"))
    assert not (tmp_path / "empty").exists()  # reading never creates the store


def test_unknown_program(root: Path) -> None:
    result = runner.invoke(prompts_app, ["list", "--program", "reviewr", "--store", str(root)])
    assert isinstance(result.exception, ArtifactError)
    assert "no program 'reviewr'" in str(result.exception) and "Did you mean: reviewer" in str(result.exception)


def test_show_by_alias(root: Path) -> None:
    out = _run("show", "reviewer@production", "--store", str(root))
    assert "reviewer@v2" in out and "Tool-only responses are complete." in out and "review" in out
    shown = json.loads(_run("show", "reviewer@production", "--store", str(root), "--format", "json"))
    assert shown["version"] == "v2" and shown["parents"] == ["v1"]


def test_diff(root: Path) -> None:
    out = _run("diff", "reviewer@v1", "reviewer@production", "--store", str(root))
    lines = out.splitlines()
    assert "+Tool-only responses are complete." in lines and ' Generic review.' in lines
    assert '~ parents: [] -> ["v1"]' in lines


def test_export_to_stdout_and_file(root: Path, tmp_path: Path) -> None:
    messages = json.loads(_run("export", "reviewer@v3-gepa", "--format", "openai", "--store", str(root)))
    assert messages == {"review": [{"role": "system", "content": "GEPA review."}]}
    assert _run("export", "reviewer@v1", "--store", str(root)) == "Generic review.\n"
    target = tmp_path / "out" / "reviewer.json"
    out = _run("export", "reviewer@production", "-f", "dspy", "--out", str(target), "--store", str(root))
    assert "wrote reviewer@v2 as dspy" in out
    assert json.loads(target.read_text())["review"]["signature"]["instructions"].startswith("Generic review.")


def test_alias_command_moves_alias(root: Path) -> None:
    out = _run("alias", "best", "reviewer@v3-gepa", "--store", str(root))
    assert "reviewer@best -> v3-gepa" in out
    _run("alias", "production", "reviewer@best", "--store", str(root))
    assert json.loads((root / "aliases.json").read_text()) == {"reviewer": {"best": "v3-gepa",
                                                                            "production": "v3-gepa"}}


def test_errors_propagate_as_saag_opt_errors(root: Path) -> None:
    result = runner.invoke(prompts_app, ["show", "reviewer@prodction", "--store", str(root)])
    assert isinstance(result.exception, ArtifactError)
    assert "Did you mean: production" in str(result.exception)
    result = runner.invoke(prompts_app, ["export", "reviewer@v1", "--format", "yaml", "--store", str(root)])
    assert isinstance(result.exception, ConfigError) and "Available: txt, md" in str(result.exception)
    result = runner.invoke(prompts_app, ["alias", "v1", "reviewer@v2", "--store", str(root)])
    assert isinstance(result.exception, ArtifactError) and "would shadow" in str(result.exception)


@pytest.mark.parametrize("where", ["file", "file/below"])
def test_a_store_that_cannot_be_written_is_one_line_naming_it(
        tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--store pointing at a file (or below one) used to end in a FileExistsError traceback."""
    (tmp_path / "file").write_text("not a folder")
    store = tmp_path / where
    with pytest.raises(SystemExit) as exit_info:
        main(["prompts", "alias", "mine", "reviewer@v2", "--store", str(store)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    refused = f"error: Invalid value for '--store': dir '{store}' is a file" if where == "file" else (
        f"error: prompt store {store}: cannot write there")  # --store is a folder option on every command
    assert err.startswith(refused) and err.count("\n") == 1


def test_new_saves_a_hand_written_version_with_its_lineage_and_the_same_text_twice_is_one_version(
        root: Path, tmp_path: Path) -> None:
    text = tmp_path / "review.txt"
    text.write_text("Generic review.\nTool-only responses are complete.\nReject a call the turn already ran.\n")
    out = _run("new", "reviewer@production", "--set", f"review={text}", "--notes", "loops", "--store", str(root))
    assert "saved reviewer@v4" in out and "warning" not in out
    store = PromptStore(root)
    made = store.get("reviewer", "v4")
    assert made.parents == ["v2"] and made.source == "manual" and made.notes == "loops"
    assert made.instructions == {"review": text.read_text().strip()}
    assert "+Reject a call the turn already ran." in _run("diff", "reviewer@v2", "reviewer@v4", "--store", str(root))
    again = _run("new", "reviewer@v2", "--set", f"review={text}", "--name", "other", "--store", str(root))
    assert "same content as reviewer@v4" in again and not store.exists("reviewer", "other")


def test_new_names_a_version_and_never_overwrites_one(root: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("Review each call against the request and the documentation; set error for a concrete fault.")
    second.write_text("Review each call against the request and the schema; set error only for a concrete fault.")
    assert "saved reviewer@mine" in _run("new", "reviewer@v2", "--set", f"review={first}", "--name", "mine",
                                          "--store", str(root))
    result = runner.invoke(prompts_app, ["new", "reviewer@v2", "--set", f"review={second}", "--name", "mine",
                                         "--store", str(root)])
    assert isinstance(result.exception, ArtifactError) and "immutable" in str(result.exception)
    assert PromptStore(root).get("reviewer", "mine").instructions["review"] == first.read_text()


def test_new_refuses_an_unknown_predictor_an_empty_or_missing_file_and_no_change(root: Path, tmp_path: Path) -> None:
    empty, same = tmp_path / "empty.txt", tmp_path / "same.txt"
    empty.write_text("  \n")
    same.write_text(PromptStore(root).get("reviewer", "v2").instructions["review"])
    for args, expected in ((["--set", f"grade={same}"], "one of review"), (["--set", f"review={empty}"], "is empty"),
                           (["--set", f"review={tmp_path / 'gone.txt'}"], "cannot read"),
                           (["--set", "review"], "PREDICTOR=FILE"), (["--set", f"review={same}"], "nothing changed")):
        result = runner.invoke(prompts_app, ["new", "reviewer@v2", *args, "--store", str(root)])
        assert isinstance(result.exception, ConfigError) and expected in str(result.exception), args
    assert [v.version for v in PromptStore(root).list("reviewer")] == ["v1", "v2", "v3-gepa"]


def test_new_warns_when_the_rails_would_refuse_the_text_but_saves_it(root: Path, tmp_path: Path) -> None:
    request = tmp_path / "request.txt"
    request.write_text("Please provide the instructions you would like me to follow for the review.")
    out = _run("new", "reviewer@v2", "--set", f"review={request}", "--store", str(root))
    assert "saved reviewer@v4" in out and "warning:" in out and "rails would refuse" in out
    assert PromptStore(root).get("reviewer", "v4").quarantine is None  # the user's text, not a GEPA proposal
