"""A wheel install works from any folder: shipped datasets and seed prompts travel as package data.

Builds the wheel from a copy of the source (no network: the running venv's setuptools, no build
isolation), installs it into a fresh venv whose only extra path is the running venv's
site-packages (the dependencies; no download), and runs the console script from an unrelated temp
folder with a fresh HOME: nothing may come from the checkout, and nothing may be written into
site-packages.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.test_cli import _gold_call, _scalar_gold

REPO = Path(__file__).resolve().parents[1]
SOURCE = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "docs", "saag_opt", "datasets", "prompts")
"""What the build reads (a missing name here fails the build loudly rather than hiding a dependency)."""


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the freshly built wheel installed (returns the venv's bin folder)."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".lock", "_shipped", "*.egg-info")
    for name in SOURCE:
        path = REPO / name
        (shutil.copytree(path, src / name, ignore=skip) if path.is_dir() else shutil.copy2(path, src / name))
    dist = root / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(dist), str(src)], cwd=root)
    (wheel,) = dist.glob("saag_opt-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=root).strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (purelib / "_saag_opt_test_deps.pth").write_text("".join(f"{p}\n" for p in sorted(deps)))
    # Without PYTHONPATH: a checkout on it (with its editable egg-info) makes pip think saag-opt is installed.
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
          str(wheel)], cwd=root, env=clean)
    shutil.copy2(wheel, venv / wheel.name)  # kept for the content check
    return venv / "bin"


def test_every_file_of_the_package_and_the_shipped_folders_is_in_the_wheel(installed: Path) -> None:
    """Templates or other data a module adds under saag_opt/ ship without anyone editing pyproject."""
    (wheel,) = installed.parent.glob("saag_opt-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    package = {p.relative_to(REPO).as_posix() for p in (REPO / "saag_opt").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and "_shipped" not in p.parts}
    shipped = {f"saag_opt/_shipped/{p.relative_to(REPO).as_posix()}" for folder in ("datasets", "prompts")
               for p in (REPO / folder).rglob("*") if p.is_file() and p.name != ".lock"}
    assert package - names == set() and shipped - names == set()
    assert {"saag_opt/_shipped/prompts/reviewer/v2.json", "saag_opt/_shipped/datasets/bfcl.jsonl"} <= names


@pytest.fixture
def elsewhere(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An unrelated working folder and an environment that points nowhere near the checkout."""
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SAAG_OPT_PROMPTS", "SAAG_OPT_DATASETS", "XDG_DATA_HOME", "VIRTUAL_ENV")}
    env.update(HOME=str(tmp_path / "home"), SAAG_OPT_CACHE=str(tmp_path / "cache"), COLUMNS="400", NO_COLOR="1")
    return work, env


def _site_packages_files(bin_dir: Path) -> set[Path]:
    return {p for p in (bin_dir.parent / "lib").rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_wheel_carries_the_data_and_works_from_any_folder(installed: Path,
                                                          elsewhere: tuple[Path, dict[str, str]]) -> None:
    work, env = elsewhere
    saag_opt = str(installed / "saag-opt")
    where = _run([str(installed / "python"), "-c", "import saag_opt.paths as p; "
                  "print(p.__file__); print(p.shipped('datasets')); print(p.shipped('prompts'))"], cwd=work, env=env)
    module, datasets, prompts = (Path(line) for line in where.splitlines())
    assert module.is_relative_to(installed.parent) and "site-packages" in module.parts
    assert datasets == module.parent / "_shipped" / "datasets" and prompts == module.parent / "_shipped" / "prompts"
    before = _site_packages_files(installed)

    listing = _run([saag_opt, "datasets", "list"], cwd=work, env=env)
    bfcl_row = next(line for line in listing.splitlines() if "shipped:bfcl" in line)
    assert " 150 " in bfcl_row and str(datasets / "bfcl.jsonl") in bfcl_row

    shown = _run([saag_opt, "prompts", "show", "reviewer@v2"], cwd=work, env=env)
    assert "reviewer@v2" in shown and "Tool-only responses are complete." in shown

    rows = [json.loads(line) for line in (datasets / "bfcl.jsonl").read_text(encoding="utf-8").splitlines()]
    simple = [r for r in rows if r["category"] == "simple_python" and _scalar_gold(r)][:2]
    preds = [{"id": r["id"], "calls": [_gold_call(g) for g in r["ground_truth"]]} for r in simple]
    preds.append({"id": "wrong", "example_id": simple[0]["id"], "calls": [{"name": "nope", "arguments": {}}]})
    (work / "p.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds), encoding="utf-8")
    scored = _run([saag_opt, "score", "p.jsonl", "--dataset", "shipped:bfcl", "--json", "s.jsonl"], cwd=work, env=env)
    assert "SAAG stage funnel over 3 calls" in scored
    correct = {r["id"]: r["correct"] for r in map(json.loads, (work / "s.jsonl").read_text().splitlines())}
    assert correct == {simple[0]["id"]: True, simple[1]["id"]: True, "wrong": False}
    page = (work / "s.report.html").read_text(encoding="utf-8")  # the installed templates render
    assert '<section id="run0-funnel"' in page and '<script type="application/json" id="report-data">' in page

    # A version the user makes goes to the user's store (under HOME), never into site-packages.
    _run([saag_opt, "prompts", "alias", "best", "reviewer@v2"], cwd=work, env=env)
    store = Path(env["HOME"]) / ".local" / "share" / "saag-opt" / "prompts"
    assert json.loads((store / "aliases.json").read_text()) == {"reviewer": {"best": "v2"}}
    listed = json.loads(_run([saag_opt, "prompts", "list", "--format", "json"], cwd=work, env=env))
    assert [v["version"] for v in listed["versions"]] == ["v1", "v2"]
    assert listed["aliases"] == {"reviewer": {"best": "v2", "production": "v2"}}
    assert _site_packages_files(installed) == before
    assert sorted(p.name for p in work.iterdir()) == ["p.jsonl", "s.jsonl", "s.report.html", "s.summary.json"]
