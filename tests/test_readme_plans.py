"""Every evaluate, compare, optimize, tune and security command README and the docs show, and the OpenAI
experiment script, is a plan its models take; every prompts, datasets and score command they show runs (report
commands: tests/report/test_docs_report_commands.py).

Each runs with ``--dry-run`` (no key, no call): the set-up is validated, the request rules included
(``lm.request_rules``). A command on OpenAI models runs again with its reviewer swapped for a model of
each family, since the paper's setting names gpt-4o-mini and gpt-5-mini and users swap in others.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from saag_opt.artifacts.store import PromptStore
from saag_opt.cli import main
from saag_opt.data import load_dataset
from saag_opt.data.tau2_package import missing as tau2_missing
from tests.conftest import requires

REPO = Path(__file__).resolve().parents[1]
VERBS = ("evaluate", "compare", "optimize", "tune")
FAMILY_REVIEWERS = ("gpt-4o-mini", "gpt-4.1", "gpt-5-mini", "o4-mini")


DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
"""README and every docs page: the commands a user copies from them."""


def readme_commands(verbs: tuple[str, ...] = VERBS, *, placeholders: bool = False) -> list[str]:
    """The ``saag-opt <verb>`` commands in the code blocks of README and the docs (continuations joined, comments cut);
    those with a ``<placeholder>``, a ``runs/`` directory or ``--resume`` only when ``placeholders``."""
    blocks: list[list[str]] = []
    inside = False
    lines = [line for doc in DOCUMENTS for line in doc.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        if line.lstrip().startswith("```"):
            inside = not inside
            if inside:
                blocks.append([])
            continue
        if inside:
            blocks[-1].append(line)
    commands = []
    for block in blocks:
        for line in re.sub(r"\\\n\s*", " ", "\n".join(block)).splitlines():
            if line.strip().startswith("#"):
                continue
            pattern = rf"saag-opt (?:{'|'.join(verbs)})\b[^&;#]*"
            commands += [m.group(0).strip() for m in re.finditer(pattern, line)]
    commands = [" ".join(c.split()) for c in commands
                if placeholders or ("<" not in c and "--resume" not in c and " runs/" not in c)]
    return list(dict.fromkeys(commands))


def _needs(command: str) -> str | None:
    """What a command's dry run needs beyond README's set-up (an optional extra), or None."""
    if "tau2:" in command:
        return tau2_missing()
    for flag, module, extra in (("--mlflow", "mlflow", "mlflow"), ("postgresql://", "psycopg", "postgres")):
        if flag in command and importlib.util.find_spec(module) is None:
            return f"{module} is not installed: pip install 'saag-opt[{extra}]'"
    return None


COMMANDS = readme_commands()


def test_readme_shows_a_command_of_every_verb() -> None:
    assert {c.split()[1] for c in COMMANDS} == set(VERBS)


def _dry_run(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, dry: bool = True) -> int:
    monkeypatch.chdir(REPO if dry else tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    store = PromptStore(tmp_path / "prompts")  # the versions README's steps make before it compares them
    for source in sorted((REPO / "prompts" / "reviewer").glob("v*.json")):
        (store.root / "reviewer").mkdir(parents=True, exist_ok=True)
        (store.root / "reviewer" / source.name).write_bytes(source.read_bytes())
    gepa = store.save_new("reviewer", store.get("reviewer", "v2").instructions | {"review": "Check each call."})
    store.alias("reviewer", "best", gepa.version)
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(store.root))
    argv = [a.replace("reviewer@v3-gepa", f"reviewer@{gepa.version}") for a in argv]
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--dry-run"] if dry else argv)
        raise SystemExit(0)
    return int(stop.value.code or 0)


@pytest.mark.parametrize("command", [pytest.param(c, marks=requires(_needs(c))) for c in COMMANDS])
def test_each_readme_command_is_a_plan_its_models_take(command: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _dry_run(shlex.split(command)[1:], tmp_path, monkeypatch) == 0, capsys.readouterr().err
    assert "is deprecated" not in capsys.readouterr().err, "the docs show an old spelling of a flag"


PROMPT_COMMANDS = readme_commands(("prompts",))


def test_the_docs_show_the_prompt_commands() -> None:
    assert {c.split()[2] for c in PROMPT_COMMANDS} >= {"list", "show", "diff", "alias", "export"}


@pytest.mark.parametrize("command", [pytest.param(c, marks=requires(_needs(c))) for c in PROMPT_COMMANDS])
def test_each_prompts_command_runs_on_a_store(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The prompt-store commands the docs show run as shown (against a store with README's versions in it)."""
    assert _dry_run(shlex.split(command)[1:], tmp_path, monkeypatch, dry=False) == 0, capsys.readouterr().err
    assert "is deprecated" not in capsys.readouterr().err, "the docs show an old spelling of a flag"


SECURITY_COMMANDS = readme_commands(("security",))


def test_the_docs_show_security_commands() -> None:
    assert SECURITY_COMMANDS, "README and docs/guides/security.md show how to run the security verb"


@pytest.mark.parametrize("command", [pytest.param(c, marks=requires(None if importlib.util.find_spec("agentdojo")
                                                                   else "agentdojo is not installed: pip install "
                                                                        "'saag-opt[agentdojo]'"))
                                     for c in SECURITY_COMMANDS])
def test_each_security_command_is_a_plan(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Dry, like the others: the plan prints its runs, turns and price and starts no agent."""
    argv = [a for a in shlex.split(command)[1:] if a != "--dry-run"]
    before = set((REPO / "runs").glob("*-security"))  # a dry run works from the checkout, where runs/ would go
    assert _dry_run(argv, tmp_path, monkeypatch) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert "is deprecated" not in err, "the docs show an old spelling of a flag"
    assert "runs" in out and set((REPO / "runs").glob("*-security")) == before, "a dry run writes no run"


LOOKUP_COMMANDS = readme_commands(("datasets", "score"))


def test_the_docs_show_the_datasets_and_score_commands() -> None:
    assert {" ".join(c.split()[1:3]) for c in LOOKUP_COMMANDS} >= {"datasets list"}
    assert any(c.split()[1] == "score" for c in LOOKUP_COMMANDS)


@pytest.mark.parametrize("command", [c for c in LOOKUP_COMMANDS if "datasets fetch" not in c])
def test_each_datasets_and_score_command_runs(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """As shown, from a folder holding the predictions file the command names (every shipped example, no call);
    ``datasets fetch`` downloads, so tests/test_cli.py runs it against a local copy instead."""
    argv = shlex.split(command)[1:]
    if argv[0] == "score":
        dataset = argv[argv.index("--dataset") + 1]
        rows = [{"id": f"p{i}", "example_id": ex.id, "calls": []} for i, ex in enumerate(load_dataset(dataset)[:12])]
        (tmp_path / argv[1]).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert _dry_run(argv, tmp_path, monkeypatch, dry=False) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    if argv[0] == "score" and "--json" in argv:
        assert len((tmp_path / argv[argv.index("--json") + 1]).read_text(encoding="utf-8").splitlines()) == 12
    if argv[:2] == ["datasets", "list"]:
        assert "shipped:bfcl" in out


OPENAI_COMMANDS = [c for c in COMMANDS if "--reviewer gpt-" in c]


@pytest.mark.parametrize("reviewer", FAMILY_REVIEWERS)
@pytest.mark.parametrize("command", [pytest.param(c, marks=requires(_needs(c))) for c in OPENAI_COMMANDS])
def test_with_a_reviewer_of_each_family_too(command: str, reviewer: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    argv = re.sub(r"--reviewer \S+", f"--reviewer {reviewer}", command)
    assert _dry_run(shlex.split(argv)[1:], tmp_path, monkeypatch) == 0, capsys.readouterr().err


def test_a_plan_a_model_refuses_is_one_line_before_any_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", "--base", "gpt-4o", "--reviewer", "gpt-4o-mini", "--reasoning-effort", "low",
            "--dataset", "shipped:bfcl"]
    assert _dry_run(argv, tmp_path, monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "gpt-4o-mini does not take reasoning_effort='low'" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("reviewer", ["gpt-5-mini", "gpt-4o-mini"])
def test_the_openai_experiment_script_dry_runs_clean(reviewer: str, tmp_path: Path) -> None:
    """experiments/exp4_openai.sh (experiments 1-3 on the paper's models): every run it starts, dry."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env |= {"EXTRA": "--dry-run", "REVIEWER": reviewer, "SAAG_OPT": f"{sys.executable} -m saag_opt.cli",
            "HOME": str(tmp_path / "home"), "SAAG_OPT_PROMPTS": str(REPO / "prompts")}
    done = subprocess.run(["bash", str(REPO / "experiments" / "exp4_openai.sh"), str(tmp_path / "out")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("--max-cost USD caps the real spend") >= 10  # one estimate per run of the three scripts
