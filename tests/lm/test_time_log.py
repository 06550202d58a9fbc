"""The call-time store on disk: appended records every process sees at once, older per-request files still read.

Why: the store used to write one file per LM call (five system calls on the GIL-bound path of every
worker); it now appends one fixed-size record, so these tests pin what must not change: a time
written by one process is found by another at once, the entries earlier versions wrote are read, a
record cut short by a killed writer is never taken for a time and never spoils the next one.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from saag_opt.atomic import JsonShelf
from saag_opt.lm.latency import TIME_LOG_DIR, CallTimes

ROOT = Path(__file__).resolve().parents[2]


def _key(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def test_a_time_one_process_writes_is_found_by_another_at_once(tmp_path: Path) -> None:
    mine = CallTimes(tmp_path)
    assert mine.get(_key(1)) is None  # looked before it existed: no stale "unknown" is kept
    code = ("import sys\nfrom pathlib import Path\nfrom saag_opt.lm.latency import CallTimes\n"
            "times = CallTimes(Path(sys.argv[1]))\nfor n in range(1, 4):\n"
            "    times.put(__import__('hashlib').sha256(str(n).encode()).hexdigest(), n / 10)\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=_env())
    assert [mine.get(_key(n)) for n in (1, 2, 3)] == [0.1, 0.2, 0.3]
    old = os.umask(0o077)
    try:
        mine.put(_key(2), 0.25)  # the latest real call of a request wins, in a fresh reader too
        CallTimes(tmp_path).put(_key(9), 0.9)  # a log file this process creates under a strict umask
    finally:
        os.umask(old)
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in (tmp_path / TIME_LOG_DIR).iterdir())  # shared files
    assert CallTimes(tmp_path).get(_key(2)) == 0.25
    assert not list(tmp_path.rglob("*.json"))  # no file per request any more
    assert sorted(p.name for p in (tmp_path / TIME_LOG_DIR).iterdir()) == sorted(
        {f"{_key(n)[0]}.times" for n in (1, 2, 3, 9)})


def test_entries_of_the_one_file_per_request_layout_are_still_read(tmp_path: Path) -> None:
    JsonShelf(tmp_path).save(_key(7), {"seconds": 0.7})  # as main wrote them before the time log
    JsonShelf(tmp_path).save(_key(8), {"seconds": "corrupt"})
    times = CallTimes(tmp_path)
    assert times.get(_key(7)) == 0.7 and times.get(_key(8)) is None
    times.put(_key(7), 0.9)  # a newer real call: the log wins over the old file
    assert CallTimes(tmp_path).get(_key(7)) == 0.9


def test_a_record_cut_short_is_skipped_and_a_record_being_written_is_read_when_whole(tmp_path: Path) -> None:
    writer = CallTimes(tmp_path)
    writer.put(_key(1), 0.5)
    log = tmp_path / TIME_LOG_DIR / f"{_key(1)[0]}.times"
    record = f"\n{_key(2)} {1.25:017.6f}".encode()
    same = tmp_path / TIME_LOG_DIR / f"{_key(2)[0]}.times"
    with open(same, "ab") as handle:  # a killed writer's last bytes, then another writer's record
        handle.write(f"\n{_key(3)} 0000".encode())
    reader = CallTimes(tmp_path)
    with open(same, "ab") as handle:
        handle.write(record[:40])  # a record being copied in as we look
    assert reader.get(_key(2)) is None
    with open(same, "ab") as handle:
        handle.write(record[40:])
    assert reader.get(_key(2)) == 1.25  # read again from where the unfinished record began
    assert reader.get(_key(3)) is None  # the cut record is never a time
    assert reader.get(_key(1)) == 0.5 and log.exists()


_WRITER = """
import hashlib, sys
from pathlib import Path
from saag_opt.lm.latency import CallTimes
times = CallTimes(Path(sys.argv[1]))
print("writing", flush=True)
n = 0
while True:
    n += 1
    times.put(hashlib.sha256(str(n).encode()).hexdigest(), n / 1000)
"""


def test_writers_killed_mid_write_leave_only_whole_records(tmp_path: Path) -> None:
    for delay in (0.05, 0.11, 0.23):
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                                  env=_env())
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    logs = list((tmp_path / TIME_LOG_DIR).iterdir())
    lines = [line for log in logs for line in log.read_bytes().split(b"\n") if line]
    assert len(lines) > 100 and sum(len(line) != 82 for line in lines) <= 3  # at most one cut record per kill
    reader = CallTimes(tmp_path)
    assert reader.get(_key(1)) == 0.001 and reader.get(_key(50)) == 0.05


def test_a_store_deleted_under_a_running_process_is_written_anew(tmp_path: Path) -> None:
    """Clearing the cache while a process runs (``rm -r``): its next times land in new files others read."""
    mine = CallTimes(tmp_path)
    first = _key(1)
    second = next(_key(n) for n in range(2, 1000) if _key(n)[0] == first[0])  # the same one of the 16 files
    mine.put(first, 0.5)
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        path.unlink()
    mine.put(second, 0.25)
    code = ("import sys\nfrom pathlib import Path\nfrom saag_opt.lm.latency import CallTimes\n"
            "times = CallTimes(Path(sys.argv[1]))\nprint(times.get(sys.argv[2]), times.get(sys.argv[3]))\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path), second, first], check=True, env=_env(),
                         capture_output=True, text=True).stdout.split()
    assert out == ["0.25", "None"]  # another process finds the new time; the deleted one stays gone
