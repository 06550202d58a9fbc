"""Where caches live, and what happens when the LM cache folder is unusable."""

from __future__ import annotations

from pathlib import Path

import pytest

from saag_opt.errors import RunError
from saag_opt.lm.disk_cache import configure_lm_cache


@pytest.mark.parametrize("damage", ["shard", "file"])
def test_an_unusable_lm_cache_is_one_line_naming_it(damage: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A damaged cache shard (a sqlite error) or a file in the folder's place used to be a traceback."""
    where = tmp_path / "dspy"
    if damage == "shard":
        (where / "000").mkdir(parents=True)
        (where / "000" / "cache.db").write_bytes(b"garbage, not sqlite")
    else:
        where.write_text("a file")
    monkeypatch.setenv("DSPY_CACHEDIR", str(where))
    expected = r"damaged \(file is not a database\)" if damage == "shard" else "cannot be used"
    with pytest.raises(RunError, match=rf"^LM cache {where}: {expected}.*move it aside or set \$SAAG_OPT_CACHE"):
        configure_lm_cache()
