"""The prompt store: content hash, immutability, aliases, references, lineage, locking, diff."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from saag_opt.artifacts import (
    PromptStore,
    PromptVersion,
    content_hash,
    default_root,
    diff_versions,
    load_version_file,
    render_markdown,
    resolve_ref,
    validate_name,
)
from saag_opt.errors import ArtifactError, SaagOptError
from saag_opt.paths import shipped

REPO_PROMPTS = Path(__file__).resolve().parents[2] / "prompts"
PREDICTORS = {"review", "select", "grade"}


def _v(version: str, text: str = "Check the call.", **kw: Any) -> PromptVersion:
    return PromptVersion(version=version, program="reviewer", instructions={"review": text}, **kw)


@pytest.fixture
def store(tmp_path: Path) -> PromptStore:
    s = PromptStore(tmp_path / "prompts")
    s.save(_v("v1", "Review the call."))
    s.save(_v("v2", "Review the call.\nTool-only responses are complete.", parents=["v1"]))
    return s


class TestContentHash:
    def test_hash_covers_program_and_instructions_only(self) -> None:
        a = _v("v1", "x", notes="one", scores={"acc": 0.5})
        b = _v("v9", "x", notes="two", source="gepa")
        assert a.sha256 == b.sha256 == content_hash("reviewer", {"review": "x"})
        assert _v("v1", "y").sha256 != a.sha256
        other_program = PromptVersion(version="v1", program="grader", instructions={"review": "x"})
        assert other_program.sha256 != a.sha256

    def test_given_hash_must_match(self) -> None:
        with pytest.raises(ValidationError, match="does not match the content"):
            _v("v1", "x", sha256="0" * 64)

    def test_tampered_file_is_rejected_on_load(self, store: PromptStore) -> None:
        path = store.root / "reviewer" / "v1.json"
        data = json.loads(path.read_text())
        data["instructions"]["review"] = "edited by hand"
        path.write_text(json.dumps(data))
        with pytest.raises(ArtifactError, match=r"v1\.json: invalid prompt version: .*does not match the content"):
            store.get("reviewer", "v1")

    def test_corrupt_json_names_the_file(self, store: PromptStore) -> None:
        (store.root / "reviewer" / "v1.json").write_text("{not json")
        with pytest.raises(ArtifactError, match=r"v1\.json: invalid prompt version"):
            store.resolve("reviewer@v1")


class TestImmutability:
    def test_save_writes_json_and_rendered_md(self, store: PromptStore) -> None:
        v2 = store.get("reviewer", "v2")
        assert load_version_file(store.root / "reviewer" / "v2.json") == v2
        assert (store.root / "reviewer" / "v2.md").read_text() == render_markdown(v2)

    def test_same_name_other_content_is_an_error(self, store: PromptStore) -> None:
        with pytest.raises(ArtifactError, match=r"reviewer@v1 already exists with other content.*e\.g\. v3"):
            store.save(_v("v1", "Something else."))
        assert store.get("reviewer", "v1").instructions["review"] == "Review the call."

    def test_same_name_same_content_is_a_noop(self, store: PromptStore) -> None:
        path = store.root / "reviewer" / "v1.json"
        before = path.read_text()
        again = store.save(_v("v1", "Review the call.", notes="different metadata"))
        assert again.notes == "" and path.read_text() == before

    def test_resaving_restores_a_missing_md(self, store: PromptStore) -> None:
        md = store.root / "reviewer" / "v1.md"
        md.unlink()
        store.save(_v("v1", "Review the call."))
        assert md.read_text() == render_markdown(store.get("reviewer", "v1"))

    def test_created_must_be_iso_with_offset(self) -> None:
        with pytest.raises(ValidationError, match="has no UTC offset"):
            _v("v1", created="2026-03-30T12:00:00")
        with pytest.raises(ValidationError, match="is not an ISO-8601 timestamp"):
            _v("v1", created="yesterday")

    def test_same_content_under_new_name_is_allowed_and_findable(self, store: PromptStore) -> None:
        store.save(_v("copy-of-v1", "Review the call."))
        sha = store.get("reviewer", "v1").sha256
        assert {v.version for v in store.find_by_sha(sha)} == {"v1", "copy-of-v1"}
        assert {v.version for v in store.find_by_sha(sha[:10], "reviewer")} == {"v1", "copy-of-v1"}

    def test_find_by_sha_needs_a_real_prefix(self, store: PromptStore) -> None:
        with pytest.raises(ArtifactError, match="bad sha256 'ab': give at least 6 hex digits"):
            store.find_by_sha("ab")

    def test_parents_must_exist_and_not_be_self(self, store: PromptStore) -> None:
        with pytest.raises(ArtifactError, match=r"parent version\(s\) v7 not found"):
            store.save(_v("v3", "new", parents=["v7"]))
        with pytest.raises(ValidationError, match="lists itself as a parent"):
            _v("v3", "new", parents=["v3"])

    def test_writes_leave_no_tmp_files(self, store: PromptStore) -> None:
        store.alias("reviewer", "production", "v2")
        leftovers = [p.name for p in store.root.rglob("*") if p.name.endswith(".tmp")]
        assert leftovers == []


class TestSaveNew:
    def test_allocates_next_numbered_name(self, store: PromptStore) -> None:
        assert store.next_version("reviewer") == "v3-gepa"
        a = store.save_new("reviewer", {"review": "A"}, parents=["v2"], source="gepa", scores={"val": 0.9})
        b = store.save_new("reviewer", {"review": "B"}, parents=[a.version], source="gepa")
        c = store.save_new("reviewer", {"review": "C"}, suffix="", source="optuna")
        assert (a.version, b.version, c.version) == ("v3-gepa", "v4-gepa", "v5")
        assert store.get("reviewer", "v3-gepa").scores == {"val": 0.9}

    def test_dedupe_returns_existing_identical_content(self, store: PromptStore) -> None:
        same = store.save_new("reviewer", {"review": "Review the call."}, source="gepa")
        assert same.version == "v1"
        forced = store.save_new("reviewer", {"review": "Review the call."}, source="gepa", dedupe=False)
        assert forced.version == "v3-gepa" and forced.sha256 == same.sha256

    def test_bad_metadata_is_an_artifact_error(self, store: PromptStore) -> None:
        with pytest.raises(ArtifactError, match=r"reviewer@v3-gepa: invalid prompt version.*source"):
            store.save_new("reviewer", {"review": "A"}, source="by-hand")

    def test_version_sort_is_natural(self, tmp_path: Path) -> None:
        s = PromptStore(tmp_path)
        for name in ("v10", "v2", "v9-gepa", "draft", "v1"):
            s.save(_v(name, name))
        assert s.version_names("reviewer") == ["v1", "v2", "v9-gepa", "v10", "draft"]
        assert s.next_version("reviewer") == "v11-gepa"


class TestAliasesAndRefs:
    def test_alias_round_trip_and_move(self, store: PromptStore) -> None:
        store.alias("reviewer", "production", "v1")
        assert store.resolve("reviewer@production").version == "v1"
        store.alias("reviewer", "production", "v2")
        store.alias("reviewer", "best", "v2")
        assert json.loads((store.root / "aliases.json").read_text()) == {
            "reviewer": {"best": "v2", "production": "v2"}}
        assert PromptStore(store.root).resolve("reviewer@best") == store.get("reviewer", "v2")

    def test_alias_must_not_shadow_a_version_or_point_nowhere(self, store: PromptStore) -> None:
        with pytest.raises(ArtifactError, match="alias 'v1' would shadow version reviewer@v1"):
            store.alias("reviewer", "v1", "v2")
        with pytest.raises(ArtifactError, match=r"'reviewer@v22' not found.*Did you mean: v2"):
            store.alias("reviewer", "best", "v22")

    def test_corrupt_aliases_file_names_the_file(self, store: PromptStore) -> None:
        (store.root / "aliases.json").write_text("[1, 2]")
        with pytest.raises(ArtifactError, match=r"aliases\.json: expected \{program: \{alias: version\}\}"):
            store.resolve("reviewer@production")
        (store.root / "aliases.json").write_text("{oops")
        with pytest.raises(ArtifactError, match=r"aliases\.json: unreadable aliases file"):
            store.aliases()

    def test_resolve_by_version_alias_and_path(self, store: PromptStore) -> None:
        store.alias("reviewer", "production", "v2")
        path = store.root / "reviewer" / "v2.json"
        assert store.resolve("reviewer@v2") == store.resolve("reviewer@production") == store.resolve(str(path))
        assert resolve_ref("reviewer@v1", store.root).version == "v1"

    def test_unknown_name_suggests_nearest(self, store: PromptStore) -> None:
        store.alias("reviewer", "production", "v2")
        with pytest.raises(ArtifactError, match=r"'reviewer@prodution' not found.*Did you mean: production"):
            store.resolve("reviewer@prodution")
        with pytest.raises(ArtifactError, match=r"no program 'reveiwer'.*Did you mean: reviewer"):
            store.resolve("reveiwer@v2")

    @pytest.mark.parametrize("ref", ["v2", "reviewer@", "@v2", "reviewer"])
    def test_malformed_reference(self, store: PromptStore, ref: str) -> None:
        with pytest.raises(ArtifactError, match=r"bad prompt reference .*expected PROGRAM@VERSION"):
            store.resolve(ref)

    def test_missing_path_reference(self, store: PromptStore, tmp_path: Path) -> None:
        with pytest.raises(ArtifactError, match=r"nope\.json' not found: no such file"):
            store.resolve(str(tmp_path / "nope.json"))

    def test_root_from_argument_env_or_default(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.delenv("SAAG_OPT_PROMPTS", raising=False)
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
        assert default_root() == tmp_path / "data" / "saag-opt" / "prompts"
        monkeypatch.setenv("SAAG_OPT_PROMPTS", str(tmp_path / "elsewhere"))
        assert PromptStore().root == tmp_path / "elsewhere"
        assert default_root(tmp_path) == tmp_path


class TestNames:
    @pytest.mark.parametrize("bad", ["../evil", "..", ".hidden", "a/b", "a\\b", "", "v1\n", "x" * 101])
    def test_unsafe_names_rejected_everywhere(self, store: PromptStore, bad: str) -> None:
        with pytest.raises(ArtifactError, match="invalid version name"):
            validate_name(bad)
        with pytest.raises(ValidationError, match="not a safe name"):
            _v(bad)
        with pytest.raises(ArtifactError, match="invalid"):
            store.get("reviewer", bad)
        with pytest.raises(ArtifactError, match="invalid alias name"):
            store.alias("reviewer", bad, "v1")
        assert not (store.root.parent / "evil.json").exists()

    def test_traversal_in_reference_is_rejected(self, store: PromptStore) -> None:
        with pytest.raises(ArtifactError, match=r"invalid version or alias name '\.\./\.\./etc'"):
            store.resolve("reviewer@../../etc")
        with pytest.raises(SaagOptError, match="invalid program name"):
            store.resolve("..@v1")


class TestLineageAndDiff:
    def test_lineage_is_nearest_first_and_deduplicated(self, store: PromptStore) -> None:
        store.save(_v("side", "side"))
        store.save(_v("v3", "three", parents=["v2", "side"]))
        store.save(_v("v4", "four", parents=["v3", "v1"]))
        assert [v.version for v in store.lineage("reviewer", "v4")] == ["v3", "v1", "v2", "side"]
        assert store.lineage("reviewer", "v1") == []

    def test_diff_shows_metadata_and_unified_instruction_diff(self) -> None:
        a = PromptVersion(version="v1", program="reviewer", instructions={"review": "a\nb", "grade": "g"})
        b = PromptVersion(version="v2", program="reviewer", parents=["v1"], source="gepa",
                          instructions={"review": "a\nc", "grade": "g", "select": "s"})
        text = diff_versions(a, b)
        lines = text.splitlines()
        assert lines[:2] == ["--- reviewer@v1", "+++ reviewer@v2"]
        assert '~ parents: [] -> ["v1"]' in lines and '~ source: "manual" -> "gepa"' in lines
        assert f'~ sha256: "{a.sha256[:12]}" -> "{b.sha256[:12]}"' in lines
        assert lines.index("--- reviewer@v1:review") < lines.index("-b") < lines.index("+c")
        assert " a" in lines and "= predictor grade: instructions identical" in lines
        assert "--- reviewer@v1:select (absent)" in lines and "+s" in lines

    def test_diff_of_identical_versions_has_no_changes(self) -> None:
        a = _v("v1", "same")
        assert diff_versions(a, a) == "--- reviewer@v1\n+++ reviewer@v1\n= predictor review: instructions identical\n"

    def test_markdown_fence_outgrows_backticks_in_instructions(self) -> None:
        md = render_markdown(_v("v1", "Use ```json blocks``` | pipes", notes="n"))
        assert "````text\nUse ```json blocks``` | pipes\n````" in md
        assert "| version | v1 |" in md and "| parents | - |" in md


def _save_many(root: str, worker: int, count: int, barrier: Any) -> None:
    store = PromptStore(root, seeds=None)
    barrier.wait()
    for i in range(count):
        store.save_new("reviewer", {"review": f"worker {worker} prompt {i}"}, parents=["v1"], source="gepa")
        store.alias("reviewer", f"w{worker}-{i}", "v1")


def test_two_processes_saving_at_once_keep_every_version(tmp_path: Path) -> None:
    """Real processes racing on save_new and alias: unique names, valid files, no lost alias."""
    root = tmp_path / "prompts"
    PromptStore(root, seeds=None).save(_v("v1", "root"))
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_save_many, args=(str(root), w, 20, barrier)) for w in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    store = PromptStore(root, seeds=None)
    names = store.version_names("reviewer")
    assert len(names) == 41 and names[-1] == "v41-gepa"
    texts = {json.loads((root / "reviewer" / f"{n}.json").read_text())["instructions"]["review"] for n in names}
    assert texts == {"root"} | {f"worker {w} prompt {i}" for w in (0, 1) for i in range(20)}
    assert all(v.sha256 == content_hash(v.program, v.instructions) for v in store.list("reviewer"))
    assert len(store.aliases("reviewer")["reviewer"]) == 40
    assert not [p for p in os.listdir(root / "reviewer") if p.startswith(".")]


class TestShippedPrompts:
    """Every artifact under the repo's prompts/ is valid, hash-checked and rendered by the renderer."""

    def test_every_version_file_validates(self) -> None:
        files = sorted(REPO_PROMPTS.glob("*/*.json"))
        assert {f.stem for f in files} >= {"v1", "v2"}
        for path in files:
            version = load_version_file(path)
            assert version.sha256 == content_hash(version.program, version.instructions), path
            assert (path.parent.name, path.stem) == (version.program, version.version), path
            assert path.with_suffix(".md").read_text() == render_markdown(version), f"{path}: .md is stale"

    def test_aliases_point_at_existing_versions(self) -> None:
        store = PromptStore(REPO_PROMPTS)
        for program, table in store.aliases().items():
            for alias, target in table.items():
                assert store.resolve(f"{program}@{alias}").version == target
        assert store.resolve("reviewer@production").version == "v2"

    def test_reviewer_v1_and_v2(self) -> None:
        store = PromptStore(REPO_PROMPTS)
        v1, v2 = store.get("reviewer", "v1"), store.get("reviewer", "v2")
        assert set(v1.instructions) == set(v2.instructions) == PREDICTORS
        assert (v1.source, v1.parents, v2.source, v2.parents) == ("manual", [], "manual", ["v1"])
        assert "[CRITICAL] Tool-only responses are complete." in v2.instructions["review"]
        assert "no call" in v2.instructions["review"] and "CRITICAL" not in v1.instructions["review"]
        assert len(v1.instructions["review"].split()) < 100 < len(v2.instructions["review"].split()) < 300


def test_unknown_version_without_any_alias_file_is_a_clear_not_found(tmp_path: Path) -> None:
    store = PromptStore(tmp_path)
    store.save(PromptVersion(version="v1", program="reviewer", instructions={"review": "Check the call."}))
    assert not (tmp_path / "aliases.json").exists()
    with pytest.raises(ArtifactError, match=r"v9"):
        store.resolve("reviewer@v9")


def test_adopt_brings_a_version_file_and_its_ancestors_from_beside_it(tmp_path: Path) -> None:
    elsewhere = PromptStore(tmp_path / "elsewhere")
    elsewhere.save(PromptVersion(version="v1", program="reviewer", instructions={"review": "One."}))
    elsewhere.save(PromptVersion(version="v2", program="reviewer", instructions={"review": "Two."}, parents=["v1"]))
    here = PromptStore(tmp_path / "here")
    adopted = here.adopt(tmp_path / "elsewhere" / "reviewer" / "v2.json")
    assert adopted.version == "v2" and here.lineage("reviewer", "v2")[0].version == "v1"
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    (lonely / "v2.json").write_bytes((tmp_path / "elsewhere" / "reviewer" / "v2.json").read_bytes())
    with pytest.raises(ArtifactError, match=r"parent version 'v1' is neither in .* nor beside the file"):
        PromptStore(tmp_path / "third", seeds=None).adopt(lonely / "v2.json")


class TestSeeds:
    """The shipped seeds are read-only built-ins every store sees; new versions go to the store."""

    @staticmethod
    def _snapshot(folder: Path) -> dict[str, bytes]:
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}

    def test_an_empty_store_sees_the_seeds_and_writes_only_its_own_root(self, tmp_path: Path) -> None:
        store = PromptStore(tmp_path / "mine")
        assert store.seeds == shipped("prompts") and store.seeds != store.root
        before = self._snapshot(store.seeds)
        assert store.resolve("reviewer@production") == store.get("reviewer", "v2") == load_version_file(
            shipped("prompts") / "reviewer" / "v2.json")
        assert store.is_seed("reviewer", "v2") and [v.version for v in store.list()] == ["v1", "v2"]
        new = store.save_new("reviewer", {"review": "mine"}, parents=["v2"], source="gepa")
        assert new.version == "v3-gepa" and not store.is_seed("reviewer", "v3-gepa")
        assert store.lineage("reviewer", "v3-gepa") == [store.get("reviewer", "v2"), store.get("reviewer", "v1")]
        store.alias("reviewer", "best", "v3-gepa")
        assert store.aliases() == {"reviewer": {"best": "v3-gepa", "production": "v2"}}
        assert json.loads((store.root / "aliases.json").read_text()) == {"reviewer": {"best": "v3-gepa"}}
        assert sorted(p.name for p in (store.root / "reviewer").iterdir()) == ["v3-gepa.json", "v3-gepa.md"]
        assert self._snapshot(store.seeds) == before

    def test_saving_a_seed_unchanged_copies_nothing(self, tmp_path: Path) -> None:
        store = PromptStore(tmp_path / "mine")
        seed = store.get("reviewer", "v2")
        assert store.save(seed) == seed and not (tmp_path / "mine" / "reviewer").exists()

    def test_an_alias_of_the_store_moves_a_seed_alias_without_touching_the_seeds(self, tmp_path: Path) -> None:
        store = PromptStore(tmp_path / "mine")
        store.alias("reviewer", "production", "v1")
        assert store.resolve("reviewer@production").version == "v1"
        assert PromptStore(tmp_path / "other").resolve("reviewer@production").version == "v2"

    def test_the_store_own_file_wins_over_a_seed_of_the_same_name(self, store: PromptStore) -> None:
        assert store.get("reviewer", "v2").instructions == {"review": "Review the call.\nTool-only responses are complete."}
        assert not store.is_seed("reviewer", "v2")

    def test_adopt_takes_the_parent_beside_the_file_when_it_differs_from_the_seed(self, tmp_path: Path) -> None:
        elsewhere = PromptStore(tmp_path / "elsewhere", seeds=None)
        elsewhere.save(_v("v1", "Other root."))
        elsewhere.save(_v("v2", "Other child.", parents=["v1"]))
        here = PromptStore(tmp_path / "here")
        here.adopt(tmp_path / "elsewhere" / "reviewer" / "v2.json")
        assert here.lineage("reviewer", "v2")[0].instructions == {"review": "Other root."}
        assert not here.is_seed("reviewer", "v1")

    def test_a_store_at_the_seeds_folder_is_one_layer(self) -> None:
        store = PromptStore(shipped("prompts"))
        assert store.seeds is None and store.location == str(shipped("prompts"))
