"""SPACE.toml: the documented format, and one line naming the key for every bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from saag_opt.errors import ConfigError
from saag_opt.tune import Range, load_space, parse_space
from saag_opt.tune.space import apply_overrides

REPO = Path(__file__).resolve().parents[2]


def _space(**sections: object) -> dict:
    data: dict = {"fixed": {"base": "gpt-4o", "reviewer": "gpt-5-mini"}, "search": {"mechanism": ["r1", "r2"]}}
    data.update(sections)
    return data


def test_a_valid_space_fills_defaults_and_enumerates_its_grid(tmp_path: Path) -> None:
    path = tmp_path / "space.toml"
    path.write_text('[fixed]\nbase = "gpt-4o"\nreviewer = "gpt-5-mini"\nlimit = 10\n'
                    '[search]\nmechanism = ["r1", "gate+r2"]\ntemperature = { low = 0.0, high = 1.0, step = 0.5 }\n'
                    'max_repairs = { low = 1, high = 3 }\n'
                    '[constraints]\ncost_per_item_usd = 0.002\n', encoding="utf-8")
    space = load_space(path)
    assert space.fixed["split"] == "val" and space.fixed["limit"] == 10
    assert space.objectives == {"help": "maximize", "harm": "minimize"}
    assert space.constraints == {"cost_per_item_usd": 0.002}
    assert isinstance(space.search["reviewer_temperature"], Range)  # the alias maps to the evaluate field
    assert space.search["max_repairs"].integer and not space.search["reviewer_temperature"].integer
    points = space.grid_points()  # integers step by 1
    assert points is not None and len(points) == 2 * 3 * 3
    assert {p["max_repairs"] for p in points} == {1, 2, 3}
    no_step = parse_space({"fixed": {"base": "gpt-4o", "reviewer": "gpt-5-mini"},
                           "search": {"temperature": {"low": 0.0, "high": 1.0}}})
    assert no_step.grid_points() is None
    space = load_space(path, {"reviewer": "local"})
    assert space.fixed["reviewer"] == "local"


def test_grid_points_cover_every_combination() -> None:
    space = parse_space(_space(search={"mechanism": ["r1", "r2", "s3"], "saag_informed": [True, False],
                                       "temperature": {"low": 0.0, "high": 1.0, "step": 0.5}}))
    points = space.grid_points()
    assert points is not None and len(points) == 3 * 2 * 3
    assert {p["reviewer_temperature"] for p in points} == {0.0, 0.5, 1.0}
    assert len({tuple(sorted(p.items())) for p in points}) == len(points)


def test_overrides_pin_a_searched_option() -> None:
    data = apply_overrides(_space(search={"mechanism": ["r1"], "reviewer": ["gpt-5-mini", "gpt-4o-mini"]}),
                           {"reviewer": "local", "limit": None})
    space = parse_space(data)
    assert "reviewer" not in space.search and space.fixed["reviewer"] == "local" and "limit" not in space.fixed


def test_the_digest_changes_with_what_decides_results() -> None:
    a = parse_space(_space())
    assert a.digest() == parse_space(_space()).digest()
    assert a.digest() != parse_space(_space(fixed={"base": "gpt-4o", "reviewer": "gpt-4o-mini"})).digest()


@pytest.mark.parametrize(("data", "message"), [
    (_space(fixed={"base": "gpt-4o", "colour": "red"}), r"^SPACE.toml: fixed.colour: not an evaluate option"),
    (_space(search={"mechanism": ["r1", "r-two"]}), r"^SPACE.toml: search.mechanism\[1\]: unknown mechanism 'r-two'"),
    (_space(search={"limit": [1, 2]}), r"^SPACE.toml: search.limit: cannot be searched"),
    (_space(fixed={"base": "gpt-4o", "split": "test"}, search={"mechanism": ["none"]}),
     r"^SPACE.toml: fixed.split: must be train or val, got 'test'"),
    (_space(fixed={"base": "gpt-4o"}, search={"mechanism": ["none", "r2"]}),
     r"^SPACE.toml: search.mechanism\[1\]: mechanism 'r2' needs a reviewer model"),
    (_space(objectives={"helpx": "maximize"}), r"^SPACE.toml: objectives.helpx: unknown metric; choose from"),
    (_space(objectives={"help": "max"}), r"^SPACE.toml: objectives.help: Input should be 'maximize' or 'minimize'"),
    (_space(constraints={"dollars": 1.0}), r"^SPACE.toml: constraints.dollars: unknown metric"),
    (_space(fixed={"base": "gpt-4o", "reviewer": "gpt-5-mini", "limit": 0}),
     r"^SPACE.toml: fixed.limit: Input should be greater than or equal to 1"),
    (_space(fixed={"reviewer": "gpt-5-mini"}), r"^SPACE.toml: fixed.base: missing"),
    (_space(fixed={"base": "gpt-4o"}, search={"mechanism": ["r1"], "reviewer": ["gpt-4o", "bogus"]}),
     r"^SPACE.toml: search.reviewer\[1\]: unknown model 'bogus'"),
    (_space(search={"temperature": {"low": 1.0, "high": 0.0}}), r"^SPACE.toml: search: temperature: .*below low"),
    (_space(search={"mechanism": "r1"}), r"^SPACE.toml: search: mechanism: a list of choices or a range table"),
    (_space(search={"mechanism": ["r1", "r1"]}), r"^SPACE.toml: search: mechanism: repeated choice"),
    (_space(search={}), r"^SPACE.toml: search: is empty"),
    (_space(fixed={"base": "gpt-4o"}, search={"prompt": ["reviewer@v1"]}),
     r"^SPACE.toml: fixed: mechanism 'r2' needs a reviewer model"),
    (_space(search={"mechanism": ["r1"], "saag_informed": ["maybe"]}), r"^SPACE.toml: search.saag_informed\[0\]: "),
    (_space(search={"runs_dir": ["a"]}), r"^SPACE.toml: search.runs_dir: cannot be searched"),
    (_space(fixed={"base": "gpt-4o", "reviewer": "gpt-5-mini", "mechanism": "r1"}),
     r"^SPACE.toml: search.mechanism: also in \[fixed\]"),
    ({**_space(), "extra": 1}, r"^SPACE.toml: extra: Extra inputs are not permitted"),
])
def test_a_bad_space_is_one_line_naming_the_key(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_space(data)
    assert "\n" not in str(info.value)


def test_bad_toml_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[fixed]\nbase = "gpt-4o"\nlimit = = 3\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{path}: not valid TOML: .*line 3"):
        load_space(path)
    with pytest.raises(ConfigError, match="cannot read the space file"):
        load_space(tmp_path / "missing.toml")


def test_a_space_file_in_another_encoding_names_the_line_and_a_bom_is_fine(tmp_path: Path) -> None:
    """A Latin-1 file used to raise UnicodeDecodeError with a traceback; a BOM was "not valid TOML"."""
    latin = tmp_path / "latin.toml"
    latin.write_bytes('[fixed]\nbase = "gpt-4o"\n# réglages\n[search]\nmechanism = ["r1"]\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match=rf"^{latin}: line 3: not UTF-8 text \(byte 0xe9\)$"):
        load_space(latin)
    bom = tmp_path / "bom.toml"
    bom.write_text('[fixed]\nbase = "gpt-4o"\nreviewer = "gpt-5-mini"\n[search]\nmechanism = ["r1"]\n',
                   encoding="utf-8-sig")
    assert load_space(bom).search == {"mechanism": ["r1"]}


@pytest.mark.parametrize("name", ["offline-bfcl.toml", "paper-bfcl.toml"])
def test_shipped_example_spaces_validate(name: str) -> None:
    space = load_space(REPO / "experiments" / "spaces" / name)
    assert space.search and space.fixed["split"] in ("train", "val")
