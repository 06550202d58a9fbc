"""Exporters: one contract suite over the registry, then each format's specifics."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import dspy
import pytest

from saag_opt.agents import reviewer as reviewers
from saag_opt.artifacts import (
    PromptVersion,
    export_version,
    exporter_names,
    get_exporter,
    register_exporter,
    render_markdown,
    resolve_ref,
)
from saag_opt.artifacts import export as export_module
from saag_opt.errors import ConfigError

INSTRUCTIONS = {
    "review": "Judge only whether the tool calls are correct.\nSecond line with \"quotes\" and {braces}.",
    "select": "Pick the best candidate index.",
    "grade": "Score 0-1 with a rationale. Ünïcödé stays.",
}


@pytest.fixture
def version() -> PromptVersion:
    return PromptVersion(version="v3-gepa", program="reviewer", instructions=INSTRUCTIONS, parents=["v2"],
                         source="gepa", models={"reviewer": "gpt-5-mini"}, scores={"val": 0.925},
                         created="2026-03-30T12:00:00+00:00")


def _instruction_texts(fmt: str, text: str) -> list[str]:
    """Pull instruction strings back out of an export, whatever the format."""
    if fmt in ("txt", "md"):
        return [t for t in INSTRUCTIONS.values() if t in text]
    data = json.loads(text)
    if fmt == "json":
        return list(data["instructions"].values())
    if fmt == "dspy":
        return [v["signature"]["instructions"] for k, v in data.items() if k != "metadata"]
    if fmt == "openai":
        return [messages[0]["content"] for messages in data.values()]
    if fmt == "mlflow":
        return [call["template"] for call in data]
    raise AssertionError(f"no decoder for {fmt}")


@pytest.mark.parametrize("fmt", exporter_names())
class TestExporterContract:
    def test_covers_every_predictor_verbatim(self, version: PromptVersion, fmt: str) -> None:
        assert sorted(_instruction_texts(fmt, export_version(version, fmt))) == sorted(INSTRUCTIONS.values())

    def test_deterministic_newline_terminated_and_no_mutation(self, version: PromptVersion, fmt: str) -> None:
        before = version.model_dump()
        first, second = export_version(version, fmt), get_exporter(fmt).export(version)
        assert first == second and first.endswith("\n")
        assert version.model_dump() == before


def test_registry_names_and_unknown_format() -> None:
    assert exporter_names()[:6] == ["txt", "md", "json", "dspy", "openai", "mlflow"]
    with pytest.raises(ConfigError, match=r"unknown export format 'yaml'. Available: txt, md, json, dspy, openai"):
        get_exporter("yaml")


def test_register_custom_exporter(version: PromptVersion, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export_module, "_EXPORTERS", dict(export_module._EXPORTERS))

    class Upper:
        def export(self, version: PromptVersion) -> str:
            return version.instructions["select"].upper() + "\n"

    register_exporter("upper", Upper())
    assert export_version(version, "upper") == "PICK THE BEST CANDIDATE INDEX.\n"


def test_txt_single_predictor_is_bare_text() -> None:
    one = PromptVersion(version="v1", program="p", instructions={"review": "Only this.\n"})
    assert export_version(one, "txt") == "Only this.\n"


def test_txt_several_predictors_are_headed(version: PromptVersion) -> None:
    assert export_version(version, "txt").startswith("[review]\nJudge only")
    assert "\n\n[select]\nPick the best candidate index.\n\n[grade]\n" in export_version(version, "txt")


def test_md_and_json_match_the_stored_files(version: PromptVersion) -> None:
    assert export_version(version, "md") == render_markdown(version)
    assert PromptVersion.model_validate_json(export_version(version, "json")) == version


def test_openai_messages(version: PromptVersion) -> None:
    data = json.loads(export_version(version, "openai"))
    assert data["select"] == [{"role": "system", "content": "Pick the best candidate index."}]
    assert list(data) == ["review", "select", "grade"]


def test_mlflow_register_prompt_kwargs(version: PromptVersion) -> None:
    calls = json.loads(export_version(version, "mlflow"))
    assert [c["name"] for c in calls] == ["reviewer-review", "reviewer-select", "reviewer-grade"]
    # The keyword names of mlflow.genai.register_prompt(name, template, commit_message, tags, ...).
    assert all(set(c) == {"name", "template", "commit_message", "tags"} for c in calls)
    tags = calls[0]["tags"]
    assert all(isinstance(v, str) for v in tags.values())
    assert tags["saag_opt.sha256"] == version.sha256 and tags["saag_opt.parents"] == "v2"
    assert "reviewer@v3-gepa" in calls[0]["commit_message"]


def test_mlflow_names_are_sanitised() -> None:
    v = PromptVersion(version="v1", program="reviewer", instructions={"review.predict": "x", "a b": "y"})
    assert [c["name"] for c in json.loads(export_version(v, "mlflow"))] == ["reviewer-review.predict",
                                                                             "reviewer-a_b"]


def test_dspy_state_shape(version: PromptVersion) -> None:
    state = json.loads(export_version(version, "dspy"))
    assert list(state) == ["review", "select", "grade", "metadata"]
    assert state["grade"] == {"traces": [], "train": [], "demos": [], "lm": None,
                              "signature": {"instructions": INSTRUCTIONS["grade"], "fields": []}}
    assert set(state["metadata"]["dependency_versions"]) <= {"python", "dspy", "cloudpickle"}


def test_dspy_rejects_predictor_named_metadata() -> None:
    v = PromptVersion(version="v1", program="p", instructions={"metadata": "x"})
    with pytest.raises(ConfigError, match="predictor named 'metadata' clashes"):
        export_version(v, "dspy")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_dspy_round_trip_into_a_real_module(version: PromptVersion, tmp_path: Path) -> None:
    """What `Reviewer().load(path)` will do: instructions replaced, the code's fields kept."""
    class Review(dspy.Signature):
        """Original review instructions."""

        conversation: str = dspy.InputField(desc="the chat so far")
        tool_docs: str = dspy.InputField()
        tentative_calls: str = dspy.InputField()
        error: bool = dspy.OutputField()
        feedback: str = dspy.OutputField(desc="what to fix")

    class Reviewer(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.review = dspy.Predict(Review)
            self.select = dspy.Predict("conversation, tool_docs, candidates -> index: int")
            self.grade = dspy.Predict("conversation, tool_docs, candidate -> score: float, rationale: str")

    path = tmp_path / "reviewer.json"
    path.write_text(export_version(version, "dspy"))
    program = Reviewer()
    records = _Records()
    logging.getLogger("dspy").addHandler(records)  # the dspy logger does not propagate to caplog
    try:
        program.load(str(path))
        assert not [m for m in records.messages if "mismatch" in m]
        stale = json.loads(path.read_text())
        stale["metadata"]["dependency_versions"]["dspy"] = "0.0.1"
        (tmp_path / "stale.json").write_text(json.dumps(stale))
        Reviewer().load(str(tmp_path / "stale.json"))
        assert [m for m in records.messages if "mismatch of dspy version" in m]  # the check above can fire
    finally:
        logging.getLogger("dspy").removeHandler(records)
    loaded = {name: p.signature.instructions for name, p in program.named_predictors()}
    assert loaded == INSTRUCTIONS
    fields = program.review.signature.fields
    assert list(fields) == ["conversation", "tool_docs", "tentative_calls", "error", "feedback"]
    assert fields["feedback"].json_schema_extra["desc"] == "what to fix"
    # A module saved by DSPy after loading our export exports back to the same instructions.
    program.save(str(tmp_path / "resaved.json"))
    resaved = json.loads((tmp_path / "resaved.json").read_text())
    assert {k: v["signature"]["instructions"] for k, v in resaved.items() if k != "metadata"} == INSTRUCTIONS


def test_exporting_does_not_import_dspy_or_mlflow(version: PromptVersion) -> None:
    """`saag-opt prompts export` stays fast and works without the heavy packages loaded."""
    code = (
        "import sys\n"
        "from saag_opt.artifacts import PromptVersion, export_version, exporter_names\n"
        "v = PromptVersion(version='v1', program='reviewer', instructions={'review': 'x'})\n"
        "[export_version(v, f) for f in exporter_names()]\n"
        "print(sorted(m for m in ('dspy', 'mlflow', 'litellm') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("ref", ["reviewer@v1", "reviewer@production"])
def test_shipped_prompts_load_into_the_project_reviewers(ref: str, tmp_path: Path) -> None:
    """The contract with saag_opt.agents: `Reviewer().load(exported)` carries every instruction."""
    version = resolve_ref(ref)  # the shipped seeds, visible from the (private, empty) default store
    path = tmp_path / "reviewer.json"
    path.write_text(export_version(version, "dspy"))
    for cls in (reviewers.Reviewer, reviewers.SaagInformedReviewer):
        program = cls()
        program.load(str(path))
        loaded = {n: p.signature.instructions for n, p in program.named_predictors()}
        assert {n: loaded[n] for n in version.instructions} == version.instructions
        assert set(loaded) - set(version.instructions) <= {"report"}  # the informed reviewer's note ...
        assert not reviewers.note_of(loaded.get("report", ""))  # ... which a version without one leaves empty
