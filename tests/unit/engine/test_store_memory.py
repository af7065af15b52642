"""StoreMemory (issue 24, memory): every partition's RocksDB of an engine instance shares one
block cache with the memtables charged to it, so what RocksDB holds stays within the bound
however many values the partitions store; nothing written is lost to the bound."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runfacts.dev.apps import counter_app
from runfacts.processors.engine.settings import EngineSettings
from runfacts.processors.engine.store import MemoryBackend, PartitionState, RocksBackend, StoreMemory
from runfacts.processors.engine.task import Task
from runfacts.processors.engine.testdriver import MemoryLog
from runfacts.schemas.errors import ConfigError

STORES = ["runs", "orphans"]


def _fill(backends: list[RocksBackend], values: int, size: int = 1000) -> None:
    blob = os.urandom(size)
    for start in range(0, values, 500):
        backend = backends[(start // 500) % len(backends)]
        backend.write({"runs": {f"run-{i:07d}".encode(): blob + i.to_bytes(4, "big")
                                for i in range(start, start + 500)}}, {b"in": str(start).encode()})


def test_memtables_of_every_partition_stay_within_the_shared_bound_when_state_outgrows_it(tmp_path: Path) -> None:
    memory = StoreMemory(16)
    backends = [RocksBackend(tmp_path / str(p), STORES, memory) for p in range(4)]
    _fill(backends, 60_000)  # ~60 MB of values: almost four times the bound
    assert 0 < memory.usage_mb() <= 16 * 1.1
    for backend in backends:
        backend.close()
    reopened = [RocksBackend(tmp_path / str(p), STORES, StoreMemory(16)) for p in range(4)]
    read = reopened[(59_500 // 500) % 4].reader("runs")(b"run-0059999")
    assert read is not None and read[-4:] == (59_999).to_bytes(4, "big")
    assert sum(1 for b in reopened for _ in b.scan("runs", b"", b"\xff")) == 60_000


def test_a_cleared_store_keeps_the_bound_and_takes_new_writes_when_cleared(tmp_path: Path) -> None:
    backend = RocksBackend(tmp_path / "0", STORES, StoreMemory(8))
    _fill([backend], 1_000)
    backend.clear("runs")
    assert list(backend.scan("runs", b"", b"\xff")) == []
    _fill([backend], 500)
    assert sum(1 for _ in backend.scan("runs", b"", b"\xff")) == 500


def test_a_bound_below_eight_megabytes_is_refused_with_the_setting_named_when_configured() -> None:
    with pytest.raises(ConfigError, match="RUNFACTS_STORE_MEMORY_MB=4"):
        StoreMemory(4)


def test_the_read_cache_holds_at_most_cache_keys_values_and_reads_stay_right_when_it_evicts(tmp_path: Path) -> None:
    state = PartitionState(RocksBackend(tmp_path / "0", STORES, StoreMemory(8)), STORES, cache_keys=100)
    runs = state.stores["runs"]
    for start in range(0, 1_000, 30):
        for i in range(start, start + 30):
            runs.put(f"run-{i}".encode(), str(i).encode())
        state.write({"commands": start}, {})
        assert len(state.caches["runs"]) <= 100
    assert [runs.get(f"run-{i}".encode()) for i in (0, 500, 1_019)] == [b"0", b"500", b"1019"]
    state.backend.close()


def test_a_task_takes_the_cache_bound_from_the_setting_when_env_overrides_it(monkeypatch) -> None:
    monkeypatch.setenv("RUNFACTS_STORE_CACHE_KEYS", "250")
    monkeypatch.setenv("RUNFACTS_STORE_CACHE_KB", "512")
    app = counter_app(name="cache")
    settings = EngineSettings()
    task = Task(app, 0, MemoryBackend(app.all_stores), MemoryLog(), settings.store_cache_keys, settings.store_cache_kb)
    assert (EngineSettings.model_fields["store_cache_keys"].default, task.state.cache_keys) == (10_000, 250)
    assert (EngineSettings.model_fields["store_cache_kb"].default, task.state.cache_bytes) == (4_096, 512 << 10)


def _commit(state: PartitionState, values: dict[bytes, bytes], offset: int) -> None:
    runs = state.stores["runs"]
    for key, value in values.items():
        runs.put(key, value)
    state.write({"commands": offset}, {})


def test_the_read_cache_evicts_the_oldest_written_and_keeps_the_newest_keys_when_full(tmp_path: Path) -> None:
    state = PartitionState(RocksBackend(tmp_path / "0", STORES, StoreMemory(8)), STORES, cache_keys=100)
    for start in range(0, 1_000, 30):
        _commit(state, {f"run-{i}".encode(): str(i).encode() for i in range(start, start + 30)}, start)
        assert len(state.caches["runs"]) <= 100
    assert list(state.caches["runs"]) == [f"run-{i}".encode() for i in range(920, 1_020)]
    runs = state.stores["runs"]
    assert [runs.get(f"run-{i}".encode()) for i in (0, 919, 920, 1_019)] == [b"0", b"919", b"920", b"1019"]
    state.backend.close()


def test_a_rewritten_key_becomes_the_newest_and_outlives_older_writes_in_the_read_cache_when_evicting() -> None:
    state = PartitionState(MemoryBackend(STORES), STORES, cache_keys=3)
    _commit(state, {b"a": b"1", b"b": b"2", b"c": b"3"}, 0)
    _commit(state, {b"a": b"4"}, 1)
    _commit(state, {b"d": b"5"}, 2)
    assert state.caches["runs"] == {b"c": b"3", b"a": b"4", b"d": b"5"}
    assert list(state.caches["runs"]) == [b"c", b"a", b"d"]


def test_the_read_cache_stays_within_its_byte_bound_and_counts_what_it_holds_when_values_are_large() -> None:
    state = PartitionState(MemoryBackend(STORES), STORES, cache_keys=10_000, cache_kb=16)
    for n in range(40):
        _commit(state, {f"run-{n:02d}".encode(): bytes(1_000)}, n)
    held = sum(len(k) + len(v or b"") + 100 for k, v in state.caches["runs"].items())
    assert state.cached_bytes["runs"] == held <= 16 << 10
    assert list(state.caches["runs"])[-1] == b"run-39" and len(state.caches["runs"]) == 14
    assert state.stores["runs"].get(b"run-00") == bytes(1_000)  # evicted: read from the backend


def test_a_commit_larger_than_the_bounds_stays_cached_whole_and_replaces_the_rest_when_bounded() -> None:
    state = PartitionState(MemoryBackend(STORES), STORES, cache_keys=0, cache_kb=0)
    _commit(state, {b"a": b"1"}, 0)
    _commit(state, {b"b": b"2", b"c": b"3"}, 1)
    assert state.caches["runs"] == {b"b": b"2", b"c": b"3"}
    assert state.cached_bytes["runs"] == 2 * (1 + 1 + 100)


def test_deletes_are_cached_as_misses_and_counted_when_committed() -> None:
    state = PartitionState(MemoryBackend(STORES), STORES)
    _commit(state, {b"a": b"1"}, 0)
    state.stores["runs"].delete(b"a")
    state.write({"commands": 1}, {})
    assert state.caches["runs"] == {b"a": None} and state.cached_bytes["runs"] == 1 + 100
    assert state.stores["runs"].get(b"a") is None
