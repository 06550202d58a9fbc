"""Atomic run files: a reader (or a resumed run after a crash) sees the old file or the new one, never half.

Why here: the writes became leaner (no mkdir per write, no file object for small entries), and the
guarantees must hold as before: 0644 files, missing directories made, no temp file left by an error,
whole files only when the writer is killed mid-write.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from saag_opt import atomic
from saag_opt.atomic import JsonShelf, atomic_file, atomic_write_bytes, atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parents[1]


def test_files_are_0644_whatever_the_umask_and_missing_directories_are_made(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        atomic_write_text(tmp_path / "a" / "b" / "x.txt", "héllo\r\n")
        with atomic_file(tmp_path / "c" / "y.bin", "wb") as handle:
            handle.write(b"\x00\x01")
        atomic_write_json(tmp_path / "z.json", {"k": "ü"})
    finally:
        os.umask(old)
    assert (tmp_path / "a" / "b" / "x.txt").read_bytes() == "héllo\r\n".encode()  # newlines as given
    assert (tmp_path / "c" / "y.bin").read_bytes() == b"\x00\x01"
    assert json.loads((tmp_path / "z.json").read_text(encoding="utf-8")) == {"k": "ü"}
    for path in (tmp_path / "a" / "b" / "x.txt", tmp_path / "c" / "y.bin", tmp_path / "z.json"):
        assert path.stat().st_mode & 0o777 == 0o644
    assert not list(tmp_path.rglob("*.tmp"))


def test_an_error_keeps_the_old_file_and_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "costs.json"
    atomic_write_json(target, {"v": 1})

    def broken_replace(src: str, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space"):
        atomic_write_json(target, {"v": 2})
    with pytest.raises(OSError, match="No space"), atomic_file(target) as handle:
        handle.write("{}")
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["costs.json"]


def test_a_temp_name_a_dead_writer_left_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    serial = iter(range(10))
    monkeypatch.setattr(atomic, "_TEMP_SERIAL", serial)
    (tmp_path / f".x.json.{os.getpid()}-0.tmp").write_text("left by a process with our pid")
    atomic_write_bytes(tmp_path / "x.json", b"{}")
    assert (tmp_path / "x.json").read_bytes() == b"{}"
    assert next(serial) == 2  # name 0 was taken, name 1 was used


def test_fsync_is_done_before_the_rename_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: synced.append(fd) or real(fd))
    atomic_write_text(tmp_path / "v.txt", "durable", fsync=True)
    atomic_write_text(tmp_path / "w.txt", "not asked")
    assert len(synced) == 1 and (tmp_path / "v.txt").read_text() == "durable"


def test_the_shelf_format_is_unchanged(tmp_path: Path) -> None:
    """The call-time and base-proposal stores read entries written before (same path, same bytes)."""
    shelf = JsonShelf(tmp_path)
    key = "ab" + "c" * 62
    shelf.save(key, {"seconds": 0.25, "text": "ü"})
    assert (tmp_path / "ab" / f"{key}.json").read_bytes() == json.dumps({"seconds": 0.25, "text": "ü"},
                                                                        ensure_ascii=False).encode()
    assert shelf.load(key) == {"seconds": 0.25, "text": "ü"}


_WRITER = """
import sys
from pathlib import Path
from saag_opt.atomic import atomic_write_json
target = Path(sys.argv[1])
print("writing", flush=True)
n = 0
while True:
    n += 1
    atomic_write_json(target, {"n": n, "pad": "x" * (n % 5000) * 50})
"""


def test_a_writer_killed_mid_write_leaves_a_whole_file(tmp_path: Path) -> None:
    """kill -9 at random points of a write loop: the file always parses (the old or the new content)."""
    target = tmp_path / "spend.json"
    atomic_write_json(target, {"n": 0, "pad": ""})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for delay in (0.05, 0.13, 0.21, 0.34, 0.55):
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(target)], stdout=subprocess.PIPE, text=True,
                                  env=env)
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        data = json.loads(target.read_text(encoding="utf-8"))
        assert set(data) == {"n", "pad"} and len(data["pad"]) == (data["n"] % 5000) * 50
    for left in tmp_path.glob(".spend.json.*.tmp"):  # a killed writer may leave its temp file: never read
        left.unlink()
    assert [p.name for p in tmp_path.iterdir()] == ["spend.json"]
