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


def test_the_read_cache_holds_at_most_cache_keys_values_and_reads_stay_right_when_it_is_dropped(tmp_path: Path) -> None:
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
    app = counter_app(name="cache")
    task = Task(app, 0, MemoryBackend(app.all_stores), MemoryLog(), EngineSettings().store_cache_keys)
    assert (EngineSettings.model_fields["store_cache_keys"].default, task.state.cache_keys) == (10_000, 250)
