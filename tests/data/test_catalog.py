"""Dataset catalog: name resolution, errors, splits, and the promised shipped datasets."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from saag_opt import memo
from saag_opt.data import catalog, list_datasets, load_dataset
from saag_opt.data.bfcl import BFCL_VERSION, bfcl_available
from saag_opt.data.catalog import BFCL_GROUPS, detect_file_format, loaders, round_robin, stratified_head
from saag_opt.data.registry_bench import gold_name
from saag_opt.data.splits import split_of
from saag_opt.errors import ConfigError, DatasetError
from saag_opt.testing.contracts.loader import check_loader
from tests.conftest import requires

READERS = {info.name: info.read for info in loaders()}

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
NON_LIVE = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")


def _bfcl_pinned() -> bool:
    try:
        return importlib.metadata.version("bfcl_eval") == BFCL_VERSION
    except importlib.metadata.PackageNotFoundError:
        return False


needs_bfcl = requires(None if bfcl_available() else "bfcl-eval data not installed (pip install --no-deps bfcl-eval)")


def test_shipped_bfcl_has_30_per_category() -> None:
    examples = load_dataset("shipped:bfcl")
    assert Counter(e.category for e in examples) == {c: 30 for c in NON_LIVE}
    assert Counter(e.expect for e in examples) == {"calls": 120, "no_call": 30}
    assert all(e.split in ("train", "val", "test") for e in examples)
    assert all((e.gold is None) == (e.category == "irrelevance") for e in examples)
    assert all(len(e.gold) >= 2 for e in examples if e.category in ("parallel", "parallel_multiple"))


@pytest.mark.parametrize("size", [5, 10, 15])
def test_shipped_registry_benchmarks(size: int) -> None:
    examples = load_dataset(f"shipped:registry-{size}")
    assert len(examples) == 60
    assert Counter(e.category for e in examples) == {"simple_python": 30, "multiple": 30}
    assert all(len(e.registry) == size and gold_name(e) in e.registry for e in examples)
    assert all(e.id.endswith(f"@r{size}") and e.split == split_of(e.id.split("@")[0]) for e in examples)


def test_shipped_files_stay_small() -> None:
    total = sum(p.stat().st_size for p in (ROOT / "datasets").glob("*.jsonl"))
    assert total < 2 * 1024 * 1024


def test_shipped_bfcl_rows_keep_bfcl_types() -> None:
    rows = [json.loads(line) for line in (ROOT / "datasets" / "bfcl.jsonl").read_text().splitlines()]
    types = {p.get("type") for r in rows for f in r["function"] for p in f["parameters"]["properties"].values()}
    assert {r["function"][0]["parameters"]["type"] for r in rows} == {"dict"}
    assert "float" in types and "number" not in types


@requires(None if _bfcl_pinned() else f"needs bfcl-eval=={BFCL_VERSION} (pip install --no-deps)")
def test_build_script_reproduces_the_shipped_files(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("build_shipped", ROOT / "experiments" / "build_shipped.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    written = module.build(tmp_path)
    assert sorted(written) == ["bfcl", "registry-10", "registry-15", "registry-5"]
    for path in written.values():
        assert path.read_bytes() == (ROOT / "datasets" / path.name).read_bytes(), path.name


def test_split_filter_and_limit() -> None:
    everything = load_dataset("shipped:bfcl")
    train = load_dataset("shipped:bfcl", split="train")
    assert train == [e for e in everything if e.split == "train"] and 0 < len(train) < len(everything)
    test5 = load_dataset("shipped:bfcl", split="test", limit=5)
    assert len(test5) == 5 and all(e.split == "test" for e in test5)
    assert len({e.category for e in test5}) == 5  # one per category, not the first five of one
    assert load_dataset("shipped:bfcl", limit=0) == []


def test_bad_split_or_limit_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"split must be one of train, val, test, got 'dev'"):
        load_dataset("shipped:bfcl", split="dev")
    with pytest.raises(ConfigError, match=r"limit must be >= 0"):
        load_dataset("shipped:bfcl", limit=-1)
    with pytest.raises(ConfigError, match=r"skip must be >= 0"):
        load_dataset("shipped:bfcl", skip=-1)


@pytest.mark.parametrize(("spec", "suggestion"), [
    ("shiped:bfcl", "shipped:bfcl"),
    ("shipped:registry-20", "shipped:registry-10"),
    ("bfcl:simple_pyton", "bfcl:simple_python"),
    ("bfcl:nonlive", "bfcl:non_live"),
])
def test_unknown_names_suggest_the_nearest(spec: str, suggestion: str) -> None:
    with pytest.raises(ConfigError, match=rf"unknown dataset '{spec}'\. Did you mean .*'{suggestion}'") as info:
        load_dataset(spec)
    assert "Available: bfcl:simple_python" in str(info.value) and "shipped:registry-15" in str(info.value)


def test_paths_are_detected_by_their_keys(tmp_path: Path) -> None:
    assert detect_file_format(ROOT / "datasets" / "bfcl.jsonl") == "bfcl"
    assert detect_file_format(ROOT / "datasets" / "registry-5.jsonl") == "examples"
    assert detect_file_format(FIXTURES / "glaive_raw.json") == "glaive"
    assert detect_file_format(FIXTURES / "glaive_sharegpt.json") == "glaive-sharegpt"
    copy = tmp_path / "mine.jsonl"
    shutil.copy(ROOT / "datasets" / "registry-5.jsonl", copy)
    assert [e.id for e in load_dataset(str(copy))] == [e.id for e in load_dataset("shipped:registry-5")]
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"prompt": "hi"}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"odd\.jsonl:1: cannot tell the dataset format"):
        load_dataset(str(odd))


def test_glaive_prefixes_and_lenient_error_collection() -> None:
    with pytest.raises(DatasetError, match=r"glaive_sharegpt\.json:5:"):
        load_dataset(f"glaive-sharegpt:{FIXTURES / 'glaive_sharegpt.json'}")
    errors: list[DatasetError] = []
    examples = load_dataset(f"glaive-sharegpt:{FIXTURES / 'glaive_sharegpt.json'}", errors=errors)
    assert [e.id for e in examples] == ["glaive_0_0", "glaive_0_1", "glaive_0_2", "glaive_6_0"]
    assert [err.line for err in errors] == [5, 6, 7]
    assert all(e.split is not None for e in examples)
    raw = load_dataset(f"glaive:{FIXTURES / 'glaive_raw.json'}", errors=[])
    assert [e.id for e in raw] == ["glaive_0_0", "glaive_0_1", "glaive_6_0"]


def test_missing_files_are_dataset_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"nothere\.jsonl: no such dataset file"):
        load_dataset(str(tmp_path / "nothere.jsonl"))
    with pytest.raises(DatasetError, match=r"x\.json: no such dataset file"):
        load_dataset(f"glaive:{tmp_path / 'x.json'}")


@pytest.mark.parametrize("name", ["data", "data.jsonl"])
def test_a_folder_given_as_dataset_says_so(tmp_path: Path, name: str) -> None:
    """It used to say "no such dataset file" (data.jsonl) or "unknown dataset" with the whole catalog (data)."""
    (tmp_path / name).mkdir()
    with pytest.raises(DatasetError, match=rf"{name}: is a folder; give a dataset file"):
        load_dataset(str(tmp_path / name))
    with pytest.raises(DatasetError, match=rf"{name}: is a folder"):
        load_dataset(f"glaive:{tmp_path / name}")


def test_missing_shipped_dir_says_how_to_rebuild(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_DATASETS", str(tmp_path))
    with pytest.raises(DatasetError, match=r"build_shipped\.py"):
        load_dataset("shipped:bfcl")
    info = {i.name: i for i in list_datasets()}
    assert info["shipped:bfcl"].available is False and info["shipped:bfcl"].n_examples is None


def test_list_datasets_reports_counts_and_availability() -> None:
    info = {i.name: i for i in list_datasets()}
    assert info["shipped:bfcl"].n_examples == 150 and info["shipped:bfcl"].available
    assert info["shipped:registry-10"].n_examples == 60
    assert {"glaive:<path>", "glaive-sharegpt:<path>", "<path>.jsonl", "bfcl:non_live"} <= set(info)


@needs_bfcl
def test_bfcl_names_resolve_to_the_package_data() -> None:
    simple = load_dataset("bfcl:simple_python")
    assert len(simple) == 400 and {e.category for e in simple} == {"simple_python"}
    non_live = load_dataset("bfcl:non_live")
    assert Counter(e.category for e in non_live) == {"simple_python": 400, "multiple": 200, "parallel": 200,
                                                     "parallel_multiple": 200, "irrelevance": 240}
    assert all(e.split is not None for e in non_live)
    info = {i.name: i for i in list_datasets()}
    assert info["bfcl:non_live"].n_examples == 1240 and info["bfcl:live_multiple"].n_examples == 1053


@needs_bfcl
def test_single_turn_group_gives_a_powered_stratified_test_split() -> None:
    """The powered test split: n >= 300 with >= 30 of every category that has them, never from train/val."""
    everything = load_dataset("bfcl:single_turn")
    assert len(everything) == 1240 + sum(1 for c in BFCL_GROUPS["live"] for _ in load_dataset(f"bfcl:{c}"))
    test = load_dataset("bfcl:single_turn", split="test", limit=320)
    counts = Counter(e.category for e in test)
    assert len(test) == 320 and set(counts) == set(BFCL_GROUPS["single_turn"])
    available = Counter(e.category for e in everything if e.split == "test")
    assert all(counts[c] >= 30 for c in counts if available[c] >= 30)
    assert all(counts[c] == available[c] for c in counts if available[c] < 30)  # small ones come whole
    assert {"irrelevance", "live_irrelevance"} <= {c for c in counts if counts[c] >= 30}
    assert all(e.split == "test" for e in test)
    tuned_on = {e.id for e in everything if e.split in ("train", "val")}
    assert not tuned_on & {e.id for e in test}
    first = {e.id for e in load_dataset("bfcl:single_turn", split="test", limit=80)}
    assert len(first) == 80 and first <= {e.id for e in test}  # a larger limit extends a smaller one


@needs_bfcl
def test_shipped_bfcl_matches_the_package_examples() -> None:
    package = {e.id: e for c in NON_LIVE for e in load_dataset(f"bfcl:{c}")}
    for shipped in load_dataset("shipped:bfcl"):
        original = package[shipped.id]
        assert (shipped.messages, shipped.registry, shipped.gold, shipped.expect, shipped.split) == \
            (original.messages, original.registry, original.gold, original.expect, original.split)


def _contract_file(fmt: str, tmp_path: Path) -> Path:
    """A file of format ``fmt`` with a valid record, then a broken one, then a valid one."""
    if fmt in ("glaive", "glaive-sharegpt"):
        return FIXTURES / ("glaive_raw.json" if fmt == "glaive" else "glaive_sharegpt.json")
    source = ROOT / "datasets" / ("bfcl.jsonl" if fmt == "bfcl" else "registry-5.jsonl")
    lines = source.read_text(encoding="utf-8").splitlines()
    path = tmp_path / f"{fmt}.jsonl"
    path.write_text("\n".join([lines[0], '{"id": 1}', lines[1]]) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", sorted(READERS))
def test_every_loader_honours_the_contract(fmt: str, tmp_path: Path) -> None:
    path = _contract_file(fmt, tmp_path)
    assert detect_file_format(path) == fmt
    assert check_loader(READERS[fmt], path)


def test_limit_spreads_over_categories_round_robin_and_keeps_file_order() -> None:
    examples = load_dataset("shipped:bfcl")
    head = load_dataset("shipped:bfcl", limit=10)
    assert [e.category for e in head].count("simple_python") == 2
    assert {e.category for e in head} == {"simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"}
    positions = [examples.index(e) for e in head]
    assert positions == sorted(positions)
    # growing the limit only adds examples
    assert set(e.id for e in head) <= set(e.id for e in load_dataset("shipped:bfcl", limit=11))
    assert stratified_head(examples, 1000) == examples


def test_skip_takes_the_next_examples_of_the_same_stratified_order_none_seen_before() -> None:
    """A confirmatory sample: after ``limit=N`` was looked at, ``skip=N`` gives fresh examples, in file order."""
    examples = load_dataset("shipped:bfcl")
    seen = load_dataset("shipped:bfcl", limit=12)
    fresh = load_dataset("shipped:bfcl", limit=9, skip=12)
    assert len(fresh) == 9 and not {e.id for e in seen} & {e.id for e in fresh}
    assert {e.id for e in seen} | {e.id for e in fresh} == {e.id for e in load_dataset("shipped:bfcl", limit=21)}
    assert [e.id for e in fresh] == [e.id for e in examples if e in fresh]  # file order
    assert {e.id for e in load_dataset("shipped:bfcl", skip=12)} == {e.id for e in examples} - {e.id for e in seen}
    assert load_dataset("shipped:bfcl", skip=len(examples)) == []
    assert load_dataset("shipped:bfcl", limit=5, skip=0) == load_dataset("shipped:bfcl", limit=5)


def test_round_robin_takes_categories_in_turn_and_a_prefix_is_the_stratified_head() -> None:
    """The order evaluate works in: a run stopped after k examples holds ``stratified_head(k)``."""
    examples = load_dataset("shipped:bfcl", split="test")
    order = round_robin(examples)
    assert sorted(e.id for e in order) == sorted(e.id for e in examples)
    assert [e.category for e in order[:5]] == ["simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"]
    for k in (1, 7, 20):
        assert {e.id for e in order[:k]} == {e.id for e in stratified_head(examples, k)}
    for category in {e.category for e in examples}:  # each category keeps its file order
        assert [e for e in order if e.category == category] == [e for e in examples if e.category == category]
    assert round_robin([]) == []


def test_a_registered_loader_is_a_prefix_and_auto_detected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "_LOADERS", dict(catalog._LOADERS))
    source = ROOT / "datasets" / "registry-5.jsonl"
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()[:2]]
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps({"payload": row}) for row in rows) + "\n", encoding="utf-8")

    def read_mine(p: Path):  # noqa: ANN202 - a user's loader: unwrap and reuse the examples reader
        inner = tmp_path / "inner.jsonl"
        inner.write_text("\n".join(json.dumps(json.loads(line)["payload"]) for line in p.read_text().splitlines()),
                         encoding="utf-8")
        return catalog.jsonl.iter_examples_jsonl(inner)

    catalog.register_loader("mine", read_mine, "wrapped example rows", keys={"payload"})
    assert [e.id for e in load_dataset(f"mine:{path}")] == [r["id"] for r in rows]
    assert [e.id for e in load_dataset(str(path))] == [r["id"] for r in rows]  # detected by its keys
    assert "mine:<path>" in catalog.dataset_names()
    with pytest.raises(ConfigError, match="reserved"):
        catalog.register_loader("shipped", read_mine, "no")


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record every file the catalog parses (memo disabled for files younger than 0 s, i.e. never)."""
    monkeypatch.setattr(memo, "RACY_SECONDS", 0.0)
    monkeypatch.setattr(catalog, "_LOADED", memo.Memo(size=8))
    reads: list[Path] = []
    real = catalog._read

    def read(path: Path, fmt: str | None = None):  # noqa: ANN202 - the catalog's own reader, counted
        reads.append(path)
        return real(path, fmt)

    monkeypatch.setattr(catalog, "_read", read)
    return reads


def test_a_dataset_is_parsed_once_per_process_until_its_file_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _counting_reads(monkeypatch)
    path = tmp_path / "mine.jsonl"
    shutil.copy(ROOT / "datasets" / "registry-5.jsonl", path)
    first = load_dataset(str(path), limit=3)
    first.clear()  # the caller's list is its own
    again = load_dataset(str(path), limit=3)
    assert len(again) == 3 and reads == [path]
    assert len(load_dataset(str(path), split="val")) > 3 and len(reads) == 2  # another split is another load

    text = path.read_text(encoding="utf-8")
    with open(path, "w", encoding="utf-8") as handle:  # rewritten in place: same inode, same size
        handle.write(text.replace('"id":"simple_python_', '"id":"SIMPLE_PYTHON_'))
    assert path.stat().st_size == len(text.encode())
    edited = load_dataset(str(path), limit=3)
    assert [e.id for e in edited] == [e.id.replace("simple_python", "SIMPLE_PYTHON") for e in again] != [
        e.id for e in again]
    assert len(reads) == 3


def test_a_freshly_written_or_bad_dataset_is_never_memoised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _counting_reads(monkeypatch)
    monkeypatch.setattr(memo, "RACY_SECONDS", 3600.0)  # every file here changed within the last hour
    path = tmp_path / "mine.jsonl"
    shutil.copy(ROOT / "datasets" / "registry-5.jsonl", path)
    load_dataset(str(path))
    load_dataset(str(path))
    assert len(reads) == 2

    monkeypatch.setattr(memo, "RACY_SECONDS", 0.0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text(encoding="utf-8") + "{not json\n", encoding="utf-8")
    for _ in range(2):
        errors: list[DatasetError] = []
        assert load_dataset(str(bad), errors=errors) and len(errors) == 1  # the bad row is reported every time
    assert reads.count(bad) == 2
