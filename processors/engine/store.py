"""Per-partition key-value state: a write buffer over a RocksDB (or in-memory) backend.

Store contract (the crash invariant): the data of every store of a partition, the last
applied input offset of each source topic and the last reflected changelog offset of each
store are written in ONE atomic batch. The store therefore never claims an offset its data
does not reflect. Handler writes go to an in-memory write buffer first; the buffer reaches
the backend only after the Kafka side of the commit succeeded (exactly-once) or after the
outputs were flushed (at-least-once), and is discarded when a transaction aborts.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any, Protocol, cast

from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options, Rdict, WriteBatch, WriteBufferManager

from runfacts.processors.engine.api import Serde
from runfacts.schemas.errors import ConfigError

META = "__meta"
_MISSING = object()
Reader = Callable[[bytes], bytes | None]
Changes = dict[str, dict[bytes, bytes | None]]


def input_key(topic: str) -> bytes:
    return b"in\x00" + topic.encode()


def changelog_key(store: str) -> bytes:
    return b"cl\x00" + store.encode()


def changelog_topic_key(store: str) -> bytes:
    """Meta key of the topic the store's changelog offset (`changelog_key`) refers to; absent
    in stores written before the topic was recorded: then it is `default`, the engine's own."""
    return b"ct\x00" + store.encode()


def adopt_changelog(backend: Backend, store: str, topic: str, default: str) -> bool:
    """Make `topic` the store's changelog before a restore. A store whose recorded offset refers
    to another topic (an upgrade that moved the changelog, e.g. to a shared topic) is emptied,
    to be rebuilt from offset 0 of `topic`: an offset of one topic never means anything in
    another. Returns True when it emptied the store."""
    meta = backend.meta()
    recorded = meta.get(changelog_topic_key(store), default.encode()).decode()
    if recorded == topic:
        return False
    emptied = changelog_key(store) in meta  # no offset: nothing of the old topic in the store
    if emptied:
        backend.clear(store)
    backend.write({}, {changelog_topic_key(store): topic.encode()})
    return emptied


class ChangelogMessage(Protocol):
    """What restore needs of a changelog record (a confluent_kafka.Message fits)."""

    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def offset(self) -> int: ...


class Backend(Protocol):
    """Durable storage of one partition's stores plus the offsets metadata."""

    def reader(self, store: str) -> Reader: ...
    def scan(self, store: str, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]: ...
    def write(self, changes: Changes, meta: dict[bytes, bytes]) -> None: ...
    def meta(self) -> dict[bytes, bytes]: ...
    def restore(self, store: str, messages: list[Any]) -> None: ...
    def prepare(self, store: str, messages: list[Any]) -> Any: ...
    def apply(self, prepared: Any) -> None: ...
    def clear(self, store: str) -> None: ...
    def close(self) -> None: ...


class StoreMemory:
    """One memory bound for every RocksDB of an engine instance, as Kafka Streams'
    BoundedMemoryRocksDBConfig: a block cache of `total_mb` shared by all partitions and stores,
    with their memtables charged to it through one WriteBufferManager (two thirds of it), so the
    memory RocksDB holds does not grow with the partitions, the stores or the runs in state.

    Why: with RocksDB's defaults every column family of every partition keeps up to two 64 MB
    memtables, and a partition whose state is under 64 MB never flushes: all of it stays in
    memory. Measured (600k 1 KB values over 6 partitions, 3 stores): RSS 330-510 MB with the
    defaults, 75-115 MB bounded; writes ~1.5x slower (more, smaller flushes), ~10 µs a value.
    """

    def __init__(self, total_mb: int) -> None:
        if total_mb < 8:
            raise ConfigError("RUNFACTS_STORE_MEMORY_MB", total_mb, "give at least 8 (MB), or 0 for RocksDB's "
                              "unbounded defaults")
        self.total_mb = total_mb
        self._cache = Cache(total_mb << 20)
        self._buffers = WriteBufferManager.new_write_buffer_manager_with_cache(
            (total_mb * 2 // 3) << 20, False, self._cache)

    def options(self) -> Options:
        """Options for one column family (or the DB) under this bound."""
        opts = _options()
        opts.set_write_buffer_size(max(1, min(16, self.total_mb // 6)) << 20)
        opts.set_max_write_buffer_number(2)
        opts.set_write_buffer_manager(self._buffers)
        table = BlockBasedOptions()
        table.set_block_cache(self._cache)
        table.set_cache_index_and_filter_blocks(True)
        opts.set_block_based_table_factory(table)
        return opts

    def usage_mb(self) -> float:
        """What the shared cache holds now (blocks and charged memtables), in MB."""
        return self._cache.get_usage() / (1 << 20)


class RocksBackend:
    """One RocksDB per partition: a column family per store and one for offsets; within the
    engine's `StoreMemory` when given (RocksDB's defaults otherwise: unbounded)."""

    def __init__(self, path: Path, stores: Iterable[str], memory: StoreMemory | None = None) -> None:
        self.path = path
        self._options = memory.options if memory is not None else _options
        path.mkdir(parents=True, exist_ok=True)
        opts = self._options()
        names = set(stores) | {META}
        if (path / "CURRENT").exists():
            names |= set(Rdict.list_cf(str(path), _options())) - {"default"}
        self._db = Rdict(str(path), opts, column_families={n: self._options() for n in names})
        self._refresh()

    def _refresh(self) -> None:
        names = [n for n in Rdict.list_cf(str(self.path), _options()) if n != "default"]
        self._cf = {n: self._db.get_column_family(n) for n in names}
        self._handle = {n: self._db.get_column_family_handle(n) for n in names}

    def reader(self, store: str) -> Reader:
        return self._cf[store].get

    def scan(self, store: str, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key, value in _raw_items(self._cf[store], start):
            if key >= end:
                return
            yield key, value

    def write(self, changes: Changes, meta: dict[bytes, bytes]) -> None:
        batch = WriteBatch(raw_mode=True)
        for store, buffer in changes.items():
            handle = self._handle[store]
            for key, value in buffer.items():
                if value is None:
                    batch.delete(key, handle)
                else:
                    batch.put(key, value, handle)
        meta_handle = self._handle[META]
        for key, value in meta.items():
            batch.put(key, value, meta_handle)
        self._db.write(batch)

    def meta(self) -> dict[bytes, bytes]:
        return dict(_raw_items(self._cf[META]))

    def restore(self, store: str, messages: list[Any]) -> None:
        """Apply changelog messages and the last one's offset in one WriteBatch."""
        self.apply(self.prepare(store, messages))

    def prepare(self, store: str, messages: list[Any]) -> Any:
        """The WriteBatch of a restore batch: its records and its last changelog offset."""
        batch = WriteBatch(raw_mode=True)
        batch.set_default_column_family(self._handle[store])
        put, delete = batch.put, batch.delete
        for msg in messages:
            value = msg.value()
            if value is None:
                delete(msg.key())
            else:
                put(msg.key(), value)
        batch.put(changelog_key(store), str(messages[-1].offset()).encode(), self._handle[META])
        return batch

    def apply(self, batch: Any) -> None:
        """Write a prepared restore batch (releases the GIL, so it can overlap the next read).

        Logged like every store write (the WAL is not synced: it survives a killed process,
        like any write): a restore ends without waiting for a flush of its memtables to disk,
        which took about a sixth of a 1M-record restore, and no write ever follows an unlogged
        one that a crash could lose.
        """
        self._db.write(batch)

    def clear(self, store: str) -> None:
        self._db.drop_column_family(store)
        self._db.create_column_family(store, self._options())
        self._db.get_column_family(META).delete(changelog_key(store))
        self._refresh()

    def close(self) -> None:
        """Close every column family too: any live handle would keep the RocksDB lock."""
        for cf in self._cf.values():
            cf.close()
        self._cf, self._handle = {}, {}
        self._db.close()

    def destroy(self) -> None:
        """Close and delete the files (e.g. a store that must be rebuilt from its changelog)."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)


def _raw_items(cf: Rdict, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
    """Items of a raw-mode Rdict: bytes keys and values (its stub allows any key type)."""
    return cast(Iterator[tuple[bytes, bytes]], cf.items(from_key=start))


def _options() -> Options:
    """No compression (like Kafka Streams' RocksDB stores): state is small and rebuildable from
    its changelog, and memtable flushes (e.g. after a large restore) cost about 40% less."""
    opts = Options(raw_mode=True)
    opts.set_compression_type(DBCompressionType.none())
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_atomic_flush(True)
    return opts


class MemoryBackend:
    """A dict-backed backend with the same atomic-write contract (the test driver's)."""

    def __init__(self, stores: Iterable[str]) -> None:
        self.data: dict[str, dict[bytes, bytes]] = {s: {} for s in (*stores, META)}

    def reader(self, store: str) -> Reader:
        return self.data[store].get

    def scan(self, store: str, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        yield from sorted((k, v) for k, v in self.data[store].items() if start <= k < end)

    def write(self, changes: Changes, meta: dict[bytes, bytes]) -> None:
        for store, buffer in changes.items():
            target = self.data[store]
            for key, value in buffer.items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value
        self.data[META].update(meta)

    def meta(self) -> dict[bytes, bytes]:
        return dict(self.data[META])

    def restore(self, store: str, messages: list[Any]) -> None:
        self.apply(self.prepare(store, messages))

    def prepare(self, store: str, messages: list[Any]) -> Any:
        changes = {store: {m.key(): m.value() for m in messages}}
        return changes, {changelog_key(store): str(messages[-1].offset()).encode()}

    def apply(self, prepared: Any) -> None:
        self.write(*prepared)

    def clear(self, store: str) -> None:
        self.data[store] = {}
        self.data[META].pop(changelog_key(store), None)

    def close(self) -> None:
        """Nothing to release."""


class KeyValueStore:
    """A named store of one partition: reads see this transaction's writes; values are bytes.

    Reads look in the write buffer, then in a cache of recently committed writes (exactly
    what the backend holds for those keys, deletes included), then in the backend.
    """

    __slots__ = ("name", "_buffer", "_cache", "_read")

    def __init__(self, name: str, buffer: dict[bytes, bytes | None],
                 cache: dict[bytes, bytes | None], read: Reader) -> None:
        self.name = name
        self._buffer = buffer
        self._cache = cache
        self._read = read

    def get(self, key: bytes) -> bytes | None:
        value = self._buffer.get(key, _MISSING)
        if value is _MISSING:
            value = self._cache.get(key, _MISSING)
            if value is _MISSING:
                return self._read(key)
        return value  # type: ignore[return-value]

    def put(self, key: bytes, value: bytes) -> None:
        if type(key) is not bytes or type(value) is not bytes:
            raise TypeError(f"store {self.name}: key and value must be bytes, got "
                            f"{type(key).__name__} key {key!r} and {type(value).__name__} value")
        self._buffer[key] = value

    def delete(self, key: bytes) -> None:
        if type(key) is not bytes:
            raise TypeError(f"store {self.name}: key must be bytes, got {key!r}")
        self._buffer[key] = None


class TypedStore:
    """A `KeyValueStore` seen through a key serde and a value serde."""

    __slots__ = ("_store", "_key", "_value")

    def __init__(self, store: KeyValueStore, key: Serde, value: Serde) -> None:
        self._store, self._key, self._value = store, key, value

    def get(self, key: Any, default: Any = None) -> Any:
        raw = self._store.get(self._key.serialize(key))
        return default if raw is None else self._value.deserialize(raw)

    def put(self, key: Any, value: Any) -> None:
        self._store.put(self._key.serialize(key), self._value.serialize(value))

    def delete(self, key: Any) -> None:
        self._store.delete(self._key.serialize(key))


class PartitionState:
    """The stores of one partition: write buffers, committed offsets and the atomic write."""

    def __init__(self, backend: Backend, stores: Iterable[str], cache_keys: int = 10_000,
                 cache_kb: int = 4_096) -> None:
        self.backend = backend
        self.cache_keys = cache_keys
        self.cache_bytes = cache_kb << 10
        self.buffers: dict[str, dict[bytes, bytes | None]] = {s: {} for s in stores}
        self.caches: dict[str, dict[bytes, bytes | None]] = {s: {} for s in stores}
        self.cached_bytes = dict.fromkeys(self.buffers, 0)
        """What each read cache holds: its keys' and values' bytes plus `CACHE_ENTRY_BYTES` each."""
        self.stores = {s: KeyValueStore(s, b, self.caches[s], backend.reader(s))
                       for s, b in self.buffers.items()}
        meta = backend.meta()
        self.input_offsets = _offsets(meta, b"in\x00")
        self.changelog_offsets = _offsets(meta, b"cl\x00")

    def dirty(self) -> bool:
        return any(self.buffers.values())

    def changes(self) -> Iterator[tuple[str, bytes, bytes | None]]:
        """Every buffered write as (store, key, value-or-None-for-delete)."""
        for store, buffer in self.buffers.items():
            for key, value in buffer.items():
                yield store, key, value

    def write(self, input_offsets: dict[str, int], changelog_offsets: dict[str, int]) -> None:
        """Step 'store write': buffers + input offsets + changelog offsets in one batch."""
        meta = {input_key(t): str(o).encode() for t, o in input_offsets.items()}
        meta.update({changelog_key(s): str(o).encode() for s, o in changelog_offsets.items()})
        changes = {s: b for s, b in self.buffers.items() if b}
        if changes or meta:
            self.backend.write(changes, meta)
        self.input_offsets.update(input_offsets)
        self.changelog_offsets.update(changelog_offsets)
        held = self.cached_bytes
        for store, buffer in changes.items():
            held[store] = _remember(self.caches[store], buffer, held[store], self.cache_keys, self.cache_bytes)
        self.discard()

    def discard(self) -> None:
        """Drop the uncommitted writes (abort / rollback)."""
        for buffer in self.buffers.values():
            buffer.clear()


CACHE_ENTRY_BYTES = 100
"""What a read cache's entry costs beyond its key's and value's bytes (two bytes objects' headers
and the dict's slot), counted against its byte bound."""


def _remember(cache: dict[bytes, bytes | None], written: dict[bytes, bytes | None], held: int,
              max_keys: int, max_bytes: int) -> int:
    """Put a commit's writes into a read cache as its newest entries (a rewritten key moves to the
    end), then evict the oldest while it holds more than `max_keys` keys or `max_bytes` bytes
    (never this commit's writes): the cache keeps the most recently written keys instead of being
    dropped all at once and refilled. Returns the bytes it holds (`held`: before the writes).
    """
    pop = cache.pop
    for key, value in written.items():
        old = pop(key, _MISSING)
        if old is not _MISSING:
            held -= len(key) + len(old or b"") + CACHE_ENTRY_BYTES  # type: ignore[arg-type]
        held += len(key) + len(value or b"") + CACHE_ENTRY_BYTES
    cache.update(written)
    keep = len(written)
    excess = len(cache) - max(max_keys, keep)
    if excess <= 0 and held <= max_bytes:
        return held
    gone = []
    for key in islice(cache, len(cache) - keep):  # a dict iterates oldest insertion first
        if excess <= 0 and held <= max_bytes:
            break
        held -= len(key) + len(cache[key] or b"") + CACHE_ENTRY_BYTES
        excess -= 1
        gone.append(key)
    for key in gone:
        del cache[key]
    return held


def _offsets(meta: dict[bytes, bytes], prefix: bytes) -> dict[str, int]:
    n = len(prefix)
    return {k[n:].decode(): int(v) for k, v in meta.items() if k.startswith(prefix)}
