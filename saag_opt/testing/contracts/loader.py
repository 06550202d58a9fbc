"""The ``DatasetLoader`` contract: rows in file order with their lines, bad records as data, determinism."""

from __future__ import annotations

from pathlib import Path

from saag_opt.data.catalog import DatasetLoader
from saag_opt.errors import DatasetError
from saag_opt.model import Example


def check_loader(read: DatasetLoader, path: Path) -> list[Example]:
    """Read ``path`` (a sample with a good record, a broken one, then a good one) through the contract.

    Returns the examples read.

    Raises:
        AssertionError: the first broken rule, named.
    """
    rows = list(read(path))

    def comparable(items: list) -> list:  # type: ignore[type-arg]
        return [(line, item if isinstance(item, Example) else str(item)) for line, item in items]

    assert comparable(rows) == comparable(list(read(path))), "reading the same file twice gave different rows"
    lines = [line for line, _ in rows]
    assert lines == sorted(lines) and all(line >= 1 for line in lines), f"lines not 1-based in file order: {lines}"
    errors = [item for _, item in rows if isinstance(item, DatasetError)]
    examples = [item for _, item in rows if isinstance(item, Example)]
    assert all(isinstance(item, (Example, DatasetError)) for _, item in rows), "rows must be Example | DatasetError"
    assert errors, "the broken record was not yielded as a DatasetError"
    assert all(str(e).startswith(f"{path}:{e.line}: ") for e in errors), "a DatasetError does not start with path:line"
    assert any(line > (errors[0].line or 0) for line, item in rows if isinstance(item, Example)), \
        "reading stopped at the broken record"
    assert len({e.id for e in examples}) == len(examples), "example ids repeat within the file"
    return examples


__all__ = ["check_loader"]
