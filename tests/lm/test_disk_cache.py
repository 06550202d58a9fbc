"""The LM disk cache whose missing shards are made on first use: dspy's layout, settings and keys, shared both ways."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import dspy
import pytest
from dspy.clients import DISK_CACHE_LIMIT
from dspy.clients.cache import Cache as DspyCache

from saag_opt.lm.disk_cache import OnDemandFanoutCache, configure_lm_cache, install_disk_cache


def _request(n: int) -> dict:
    return {"model": "openai/scripted", "messages": [{"role": "user", "content": f"question {n}"}]}


def _dspy_own(where: Path) -> DspyCache:
    """The cache dspy itself builds for ``where`` (every shard made up front)."""
    return DspyCache(enable_disk_cache=True, enable_memory_cache=False, disk_cache_dir=str(where),
                     disk_size_limit_bytes=DISK_CACHE_LIMIT)


def _shard_folders(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.is_dir())


@pytest.fixture
def restore_dspy_cache():
    before = dspy.cache
    yield
    dspy.cache = before


def test_a_lookup_in_an_empty_cache_makes_no_shard_and_a_store_makes_only_its_own(tmp_path: Path) -> None:
    cache = OnDemandFanoutCache(str(tmp_path), size_limit=DISK_CACHE_LIMIT)
    key = dspy.cache.cache_key(_request(1))
    assert cache.get(key) is None
    assert cache.get(key, default="d", expire_time=True) == ("d", None)
    assert cache.get(key, expire_time=True, tag=True) == (None, None, None)
    assert key not in cache
    with pytest.raises(KeyError):
        cache[key]
    assert _shard_folders(tmp_path) == []  # hashing a key opens no shard either
    cache.set(key, {"answer": 1})
    assert len(_shard_folders(tmp_path)) == 1
    assert cache.get(key) == {"answer": 1} and cache[key] == {"answer": 1} and key in cache


def test_installing_on_an_empty_cache_makes_its_shards_in_the_background(tmp_path: Path, restore_dspy_cache) -> None:
    install_disk_cache(str(tmp_path), DISK_CACHE_LIMIT)
    disk = dspy.cache.disk_cache
    assert disk.get(dspy.cache.cache_key(_request(1))) is None  # answered while the shards are being made
    disk._maker.join(timeout=30)
    assert _shard_folders(tmp_path) == [f"{n:03d}" for n in range(16)]
    assert not disk._maker.is_alive()
    dspy.cache.put(_request(1), {"answer": 1})
    dspy.cache.reset_memory_cache()
    assert dspy.cache.get(_request(1)) == {"answer": 1}


def test_a_shard_another_process_made_after_opening_is_read(tmp_path: Path) -> None:
    """A miss is only claimed for a shard whose database does not exist: one made since is opened and read."""
    ours = OnDemandFanoutCache(str(tmp_path), size_limit=DISK_CACHE_LIMIT)
    key = dspy.cache.cache_key(_request(5))
    assert ours.get(key) is None
    theirs = _dspy_own(tmp_path)  # another process: every shard made up front
    theirs.put(_request(5), {"from": "theirs"})
    assert ours.get(key) == {"from": "theirs"}


def test_its_shards_settings_and_key_placement_are_dspys(tmp_path: Path) -> None:
    ours_dir, theirs_dir = tmp_path / "ours", tmp_path / "theirs"
    theirs = _dspy_own(theirs_dir).disk_cache
    ours = OnDemandFanoutCache(str(ours_dir), size_limit=DISK_CACHE_LIMIT)
    key = dspy.cache.cache_key(_request(7))
    theirs.set(key, "v")
    ours.set(key, "v")
    assert ours._count == theirs._count
    (index,) = [n for n in range(theirs._count) if key in theirs._shards[n]]  # where dspy put it
    assert key in ours._shards[index]
    for name in ("timeout", "size_limit", "cull_limit", "eviction_policy", "sqlite_synchronous",
                 "sqlite_journal_mode", "disk_min_file_size"):
        assert getattr(ours._shards[index], name) == getattr(theirs._shards[index], name), name


def test_dspys_own_cache_reads_what_ours_wrote_and_back(tmp_path: Path, restore_dspy_cache) -> None:
    install_disk_cache(str(tmp_path), DISK_CACHE_LIMIT)
    dspy.cache.put(_request(1), {"from": "ours"})
    theirs = _dspy_own(tmp_path)
    assert theirs.get(_request(1)) == {"from": "ours"}
    theirs.put(_request(2), {"from": "dspy"})
    install_disk_cache(str(tmp_path), DISK_CACHE_LIMIT)  # a new process would open it like this
    assert dspy.cache.get(_request(2)) == {"from": "dspy"}


def test_workers_storing_at_once_on_an_empty_cache_lose_nothing(tmp_path: Path, restore_dspy_cache) -> None:
    """16 threads' first replies land on shards nobody has made yet; each shard is made once."""
    install_disk_cache(str(tmp_path), DISK_CACHE_LIMIT)
    barrier = threading.Barrier(16)
    errors: list[BaseException] = []

    def store(n: int) -> None:
        try:
            barrier.wait()
            for k in range(8):
                dspy.cache.put(_request(100 * n + k), {"n": n, "k": k})
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=store, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    dspy.cache.disk_cache._maker.join(timeout=30)  # it made the shards the stores had not
    theirs = _dspy_own(tmp_path)
    assert all(theirs.get(_request(100 * n + k)) == {"n": n, "k": k} for n in range(16) for k in range(8))
    assert len(theirs.disk_cache) == 128


def test_closing_makes_no_shard(tmp_path: Path) -> None:
    cache = OnDemandFanoutCache(str(tmp_path), size_limit=DISK_CACHE_LIMIT)
    cache.close()
    assert _shard_folders(tmp_path) == []


def test_closing_stops_the_background_maker(tmp_path: Path) -> None:
    cache = OnDemandFanoutCache(str(tmp_path), size_limit=DISK_CACHE_LIMIT)
    cache.make_missing_shards()
    cache.close()
    assert not cache._maker.is_alive()
    made = _shard_folders(tmp_path)
    assert len(made) <= 16
    cache.make_missing_shards()  # once per cache: a closed one does not start again
    assert _shard_folders(tmp_path) == made


def test_configure_lm_cache_installs_it_and_a_re_run_finds_the_replies(tmp_path: Path, restore_dspy_cache,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "dspy"))
    assert configure_lm_cache() == tmp_path / "dspy"
    assert isinstance(dspy.cache.disk_cache, OnDemandFanoutCache)
    assert dspy.cache.enable_disk_cache and dspy.cache.disk_cache_dir == str(tmp_path / "dspy")
    dspy.cache.put(_request(3), {"answer": 3})
    dspy.cache = DspyCache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir=None)  # another run
    configure_lm_cache()
    assert dspy.cache.get(_request(3)) == {"answer": 3}


def test_a_shard_left_half_made_is_completed_when_opened(tmp_path: Path) -> None:
    """The background maker is a daemon thread: a process may end while it makes a shard."""
    folder = tmp_path / "003"
    folder.mkdir()
    with sqlite3.connect(folder / "cache.db") as con:  # only the first of diskcache's set-up statements ran
        con.execute("CREATE TABLE IF NOT EXISTS Settings (key TEXT NOT NULL UNIQUE, value)")
    con.close()
    cache = OnDemandFanoutCache(str(tmp_path), size_limit=DISK_CACHE_LIMIT)
    for n in range(64):  # some land in shard 3
        cache.set(f"key-{n}", n)
    assert all(cache.get(f"key-{n}") == n for n in range(64))
    assert cache._shards.existing(3) is not None and len(cache._shards.existing(3)) > 0
