"""Engine settings (pydantic-settings, environment prefix RUNFACTS_) and the Kafka client configs.

Where the broker is and how to talk to it comes from the one broker-settings dialect every
runfacts client reads, `RUNFACTS_KAFKA_*` (runfacts.settings.KafkaSettings:
RUNFACTS_KAFKA_BOOTSTRAP_SERVERS, RUNFACTS_KAFKA_CONFIG, RUNFACTS_KAFKA_PROPERTIES).
librdkafka options pass through untouched: `kafka` applies to every client (put
security.protocol, sasl.*, ssl.* in RUNFACTS_KAFKA_CONFIG), `consumer` / `producer` to one
kind only, e.g. RUNFACTS_PRODUCER='{"linger.ms": 5}'.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from runfacts.partitioning import pin_partitioner
from runfacts.processors.engine.api import Application
from runfacts.schemas.errors import ConfigError

Guarantee = Literal["exactly_once", "at_least_once"]
KafkaOptions = dict[str, str | int | float | bool]
_EAGER = {"range", "roundrobin"}


INSTANCE_ID_FILE = "instance-id"
"""Where an instance keeps its id, under the state dir (`stable_instance_id`)."""


def stable_instance_id(settings: EngineSettings) -> str:
    """The instance's id: RUNFACTS_INSTANCE_ID when set, else the one persisted in
    `<state_dir>/instance-id`, created once (hostname + random suffix) by the first process that
    runs on that state dir. Stable across restarts, so a restarted instance's producer (same
    transactional.id) fences its predecessor's at init_transactions and its open transaction
    is aborted at once, not at transaction.timeout.ms (the old default, hostname-pid, changed
    with every restart and fenced nothing). Two live instances must not share a state dir (its
    stores are locked anyway) nor an explicit id."""
    if settings.instance_id:
        return settings.instance_id
    path = settings.state_dir / INSTANCE_ID_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with path.open("x") as fresh:  # exclusive: two processes starting at once agree on one id
            fresh.write(f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}\n")
    except FileExistsError:
        pass
    found = path.read_text().strip()
    if not found:
        raise ConfigError("RUNFACTS_INSTANCE_ID", "", f"{path} is empty: delete it (a new id is made) or set "
                          "RUNFACTS_INSTANCE_ID")
    return found


def with_instance_id(settings: EngineSettings) -> EngineSettings:
    """`settings` with `instance_id` resolved (`stable_instance_id`)."""
    return settings if settings.instance_id else settings.model_copy(
        update={"instance_id": stable_instance_id(settings)})


class EngineSettings(BaseSettings):
    """How one engine instance runs an application."""

    model_config = SettingsConfigDict(env_prefix="RUNFACTS_", frozen=True, extra="forbid")

    bootstrap_servers: str = "127.0.0.1:9092"
    guarantee: Guarantee = "exactly_once"
    state_dir: Path = Path(".runfacts/state")
    instance_id: str = Field("", description="stable per instance: transactional.id suffix; empty: the "
                             "one persisted in the state dir (stable_instance_id)")
    commit_interval_ms: int = Field(100, ge=1, description="the longest a transaction stays open while the input "
                                    "has a backlog (Kafka Streams' commit.interval.ms), from the previous "
                                    "commit's start")
    commit_interval_caught_up_ms: int = Field(5, ge=0, description="while the engine keeps up with its input "
                                              "(its last consume returned less than a full batch), a transaction "
                                              "commits once it is this old (with commit_on_idle; 0, or not below "
                                              "commit_interval_ms: the interval only)")
    defer_quiet_commits: bool = Field(True, description="a transaction with nothing for a reader yet (no "
                                      "output sent, nothing in a handler's batch) commits at "
                                      "commit_interval_ms, not as soon as caught up or idle: its writes "
                                      "matter only to a restart, and the next record's outputs join it")
    commit_every: int = Field(10_000, ge=1, description="commit after this many records")
    consume_batch: int = Field(250, ge=1, description="records a consume hands over at most; a smaller batch "
                               "means the commit deadline is checked more often, a full one that the input has a "
                               "backlog")
    poll_timeout_ms: int = Field(10, ge=0, description="consume waits at most this long for the first record "
                                 "(then takes only what is already fetched, up to consume_batch)")
    commit_on_idle: bool = Field(True, description="a consume that brings nothing (the input is "
                                 "drained) commits the open transaction at once, not after the interval")
    transaction_timeout_ms: int = Field(10_000, ge=1_000)
    transaction_call_timeout_ms: int = Field(30_000, ge=100, description="how long one transactional call "
                                             "(init, send offsets, commit, abort) may take before it is tried "
                                             "again (5 tries)")
    store_memory_mb: int = Field(64, ge=0, description="RocksDB's memory (block cache and memtables of every "
                                 "partition's stores) stays within this bound; 0: RocksDB's defaults, "
                                 "unbounded (each store keeps up to 2 x 64 MB memtables per partition)")
    store_cache_keys: int = Field(10_000, ge=0, description="per partition and store, the values of the "
                                  "last committed writes kept in memory for reads, at most this many (the "
                                  "oldest written evicted first; 0: the last commit's only)")
    store_cache_kb: int = Field(4_096, ge=0, description="per partition and store, the read cache's bytes "
                                "(keys, values and 100 a key) at most, in KB (the oldest written evicted "
                                "first; 0: the last commit's only)")
    restore_batch: int = Field(10_000, ge=1)
    restore_timeout_s: float = Field(120.0, gt=0)
    timer_interval_ms: int = Field(100, ge=1, description="how often due timers are checked "
                                   "(besides when the earliest timer falls due)")
    timer_batch: int = Field(1_000, ge=1)
    max_consecutive_aborts: int = Field(3, ge=1)
    gc_threshold: int = Field(50_000, ge=0, description="Python's young-generation collection "
                              "threshold while the engine runs (0: leave the interpreter's); see "
                              "runfacts.processors.engine.gctune")
    malloc_arena_max: int = Field(0, ge=0, description="at most this many malloc arenas in the process "
                                  "(glibc's M_ARENA_MAX, set when the engine starts; 0: glibc's default, "
                                  "8 a core); see runfacts.processors.engine.gctune")
    heap_trim_interval_ms: int = Field(10_000, ge=0, description="how often a thread gives the malloc "
                                       "heaps' free pages back to the OS (glibc's malloc_trim; 0: never)")
    metrics_interval_ms: int = Field(5_000, ge=0, description="how often the engine publishes its metrics "
                                     "record to the application's metrics topic (0: never)")
    changelog_replication_factor: int = Field(-1, description="-1: the broker default")
    kafka: KafkaOptions = Field(default_factory=dict)
    consumer: KafkaOptions = Field(default_factory=dict)
    producer: KafkaOptions = Field(default_factory=dict)

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == "exactly_once"


SESSION_TIMEOUT_DEFAULT_MS = 45_000
"""librdkafka's (and the Java consumer's, KIP-735) session.timeout.ms default."""


def session_timeout_ms(settings: EngineSettings) -> int:
    """The group consumer's session.timeout.ms as configured (RUNFACTS_CONSUMER over RUNFACTS_KAFKA_CONFIG)."""
    value = settings.consumer.get("session.timeout.ms", settings.kafka.get("session.timeout.ms",
                                                                          SESSION_TIMEOUT_DEFAULT_MS))
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError("RUNFACTS_CONSUMER.session.timeout.ms", value, "not a number of milliseconds") from None


def check_timeouts(settings: EngineSettings) -> None:
    """Exactly-once needs transaction.timeout.ms < session.timeout.ms, else ConfigError naming both.

    Why: an instance paused (GC, SIGSTOP, a frozen VM) longer than session.timeout.ms loses its
    partitions to another instance, but it may still hold an open transaction. If that
    transaction outlives the session, the paused instance can wake up and end it after its
    partitions moved (a zombie write), and its open transaction pins the last stable offset the
    new owner restores and reads up to. With the transaction timeout below the session timeout,
    the coordinator has aborted the transaction (bumping the producer epoch, so the zombie's
    EndTxn is fenced) by the time the group can hand the partitions over. KIP-447 ("Producer
    scalability for exactly once semantics", section on the transaction timeout) sets Kafka
    Streams' transaction.timeout.ms default to 10000 for this reason, the session timeout's
    default at the time: "we suggest to shrink the transaction timeout to be the same default
    value as session timeout"; Kafka Streams keeps 10000 under exactly_once while the consumer's
    session.timeout.ms default is now 45000 (KIP-735). We require it strictly below (equal
    leaves a race at the boundary). Note the broker aborts timed-out transactions on a schedule
    (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by default): keep the gap
    at least that wide where zombies matter.
    """
    if not settings.exactly_once:
        return
    session = session_timeout_ms(settings)
    if settings.transaction_timeout_ms >= session:
        raise ConfigError("RUNFACTS_TRANSACTION_TIMEOUT_MS", settings.transaction_timeout_ms,
                          f"must be below the consumer's session.timeout.ms ({session} ms, "
                          "RUNFACTS_CONSUMER / RUNFACTS_KAFKA_CONFIG) under exactly_once, or an instance "
                          "paused past its session can still commit after its partitions moved (KIP-447); "
                          "lower RUNFACTS_TRANSACTION_TIMEOUT_MS or raise session.timeout.ms")


def load_settings(**overrides: Any) -> EngineSettings:
    """Settings from the environment (+ overrides); a bad value raises ConfigError naming it.

    Where the broker is and how to talk to it comes from the variables every runfacts
    client reads (RUNFACTS_KAFKA_BOOTSTRAP_SERVERS, RUNFACTS_KAFKA_CONFIG,
    RUNFACTS_KAFKA_PROPERTIES: runfacts.settings.KafkaSettings), and only from them.
    """
    refuse_old_broker_variables(os.environ)
    try:
        settings = EngineSettings(**{**shared_kafka(), **overrides})
    except ValidationError as exc:
        err = exc.errors()[0]
        setting = "RUNFACTS_" + ".".join(str(p) for p in err["loc"]).upper()
        raise ConfigError(setting, err.get("input"), err["msg"]) from None
    check_timeouts(settings)
    return settings


# The engine's second broker dialect, gone: one set of variables names the broker for every client.
OLD_BROKER_VARIABLES = {"RUNFACTS_BOOTSTRAP_SERVERS": "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS",
                        "RUNFACTS_KAFKA": "RUNFACTS_KAFKA_CONFIG"}


def refuse_old_broker_variables(env: Mapping[str, str]) -> None:
    """A variable of the old engine dialect is set: say which one replaces it (it would be ignored)."""
    for old, new in OLD_BROKER_VARIABLES.items():
        if old in env:
            raise ConfigError(old, env[old], f"is no longer read: set {new} (the broker settings of every "
                              "runfacts client) instead")


def shared_kafka() -> dict[str, Any]:
    """The engine's broker settings from the shared Kafka settings (RUNFACTS_KAFKA_*)."""
    from runfacts.settings import KafkaSettings

    client = KafkaSettings().client_config()
    return {"bootstrap_servers": client.pop("bootstrap.servers"), "kafka": client}


def common_config(settings: EngineSettings) -> dict[str, Any]:
    return {"bootstrap.servers": settings.bootstrap_servers, **settings.kafka}


CONSUMER_PREFETCH: dict[str, int] = {
    "queued.max.messages.kbytes": 16_384,
    "fetch.max.bytes": 8 * 1024 * 1024,
    "max.partition.fetch.bytes": 1024 * 1024,
}
"""The group consumer's prefetch bounds (docs/engine.md, "Memory"). librdkafka's defaults queue up
to 64 MB of fetched records ahead of the application (50 MB a fetch): a backlog held that much
of the decider's RSS. 16 MB is still ~50,000 commands of ~300 bytes, 50 of the engine's
consume batches. RUNFACTS_CONSUMER (or RUNFACTS_KAFKA_CONFIG) overrides each."""


CONSUMER_FETCH: dict[str, int] = {
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 5,
}
"""The group consumer's fetches (docs/engine.md, "Fetches"): the broker answers as soon as a
record is there (1 byte), and an empty fetch after 5 ms (librdkafka's default: 500). On 2026-12-02,
batched fetches (32 KB, about 100 commands, or 5 ms): librdkafka's threads spent 13-31% less CPU a
command at 30-70% of 1,000 commands/s (decider_curves.py load, 6 alternated pairs, load 4-12), but
every hop of a sparse stream waited the 5 ms, and a tool call crosses five engine hops: step_latency.py --hops
measured 2-3 ms a hop back with 1 byte (benchmarks/step_latency.py, docs/benchmarks.md).
A backlog fills its fetches either way. RUNFACTS_CONSUMER='{"fetch.min.bytes": 32768}' batches
again where CPU at moderate load matters more than a step's latency."""


def consumer_config(app: Application, settings: EngineSettings) -> dict[str, Any]:
    """The group consumer: manual offsets, read_committed under exactly-once, eager assignor,
    a bounded prefetch queue (`CONSUMER_PREFETCH`), batched fetches (`CONSUMER_FETCH`)."""
    config = {
        **CONSUMER_PREFETCH,
        **CONSUMER_FETCH,
        **common_config(settings),
        "group.id": app.name,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed" if settings.exactly_once else "read_uncommitted",
        "partition.assignment.strategy": "range",
        **settings.consumer,
    }
    strategy = str(config["partition.assignment.strategy"])
    if not set(strategy.split(",")) <= _EAGER:
        raise ConfigError("RUNFACTS_CONSUMER.partition.assignment.strategy", strategy,
                          "the engine needs an eager assignor (range) so co-partitioned "
                          "topics land on one instance")
    return config


PRODUCER_RETRY: dict[str, int] = {"retry.backoff.ms": 5}
"""The first retry's backoff (librdkafka's default: 100 ms; doubling up to `retry.backoff.max.ms`,
1 s). A transaction that begins while the coordinator still writes the previous one's markers
is answered CONCURRENT_TRANSACTIONS, and librdkafka retries AddOffsetsToTxn after this backoff
(AddPartitionsToTxn after its own 20 ms). An engine commits back to back, so this was most of a
call's tail: 100-120 ms `send_offsets_to_transaction` stalls (a trace of the commit's steps,
2026-12-06). `benchmarks/step_latency.py`, 100 vs 5 ms in one run (alternated rounds;
docs/benchmarks.md): step p99 142.5 -> 35.7 ms at the same p50, command -> user view p99 at 70%
of capacity 124.2 -> 52.4 ms, capacity 155 -> 167 steps/s. The markers take a few ms, so 5 ms,
then 10, 20, ... still backs off from a broker in trouble. RUNFACTS_PRODUCER overrides it."""


def producer_config(app: Application, settings: EngineSettings) -> dict[str, Any]:
    """One producer per instance: transactional (KIP-447) under exactly-once, idempotent always."""
    config: dict[str, Any] = {
        **common_config(settings),
        "enable.idempotence": True,
        # outputs are read after the commit that flushes them anyway (read_committed), so a
        # longer linger costs little latency and builds fewer, larger batches (Kafka Streams: 100)
        "linger.ms": 20,
        # no compression (the Java producer's and Kafka Streams' default): on aged runs' states (random
        # ids and digests) lz4 cost librdkafka ~80 CPU-µs a command and the commit's p99 (docs/engine.md)
        "compression.type": "none",
        **PRODUCER_RETRY,
        **settings.producer,
    }
    config = pin_partitioner(config, "RUNFACTS_PRODUCER")  # murmur2 like the Java client: one task per run
    if settings.exactly_once:
        config["transactional.id"] = f"{app.name}-{stable_instance_id(settings)}"
        config["transaction.timeout.ms"] = settings.transaction_timeout_ms
    return config


def restore_config(app: Application, settings: EngineSettings) -> dict[str, Any]:
    """The changelog reader: assign-only, committed data only, large fetches."""
    return {
        **common_config(settings),
        "group.id": f"{app.name}-restore",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
        "queued.min.messages": 200_000,
        "queued.max.messages.kbytes": 131_072,
        "fetch.queue.backoff.ms": 10,
        "fetch.wait.max.ms": 20,
        **settings.consumer,
    }


def commit_due(settings: EngineSettings, uncommitted: int, consumed: int, since_last_s: float, quiet: bool) -> bool:
    """Whether the open transaction (`uncommitted` records and timers) commits now, after a consume
    that brought `consumed` records, `since_last_s` after the previous commit began. Caught up (less
    than a full batch) it commits once `caught_up_interval` old, drained (nothing came) at once with
    `commit_on_idle`; under a backlog at `commit_interval_ms`. A quiet transaction (`quiet`: no
    output sent, nothing in a handler's batch) waits for the interval either way when
    `defer_quiet_commits`: nobody reads anything of it, and the next record's outputs join it, so
    their reader waits for one commit, not two. `commit_every` records commit at once."""
    quiet = quiet and settings.defer_quiet_commits
    if uncommitted >= settings.commit_every:
        return True
    if consumed == 0 and settings.commit_on_idle and not quiet:
        return True
    backlog = consumed >= settings.consume_batch
    due = settings.commit_interval_ms / 1000 if quiet or backlog else caught_up_interval(settings)
    return since_last_s >= due


def caught_up_interval(settings: EngineSettings) -> float:
    """Seconds a transaction stays open while the engine keeps up with its input (its last
    consume returned less than a full batch): `commit_interval_caught_up_ms` when idle commits
    are on and it is set below `commit_interval_ms`, else the interval itself."""
    soon = settings.commit_interval_caught_up_ms
    if settings.commit_on_idle and 0 < soon < settings.commit_interval_ms:
        return soon / 1000
    return settings.commit_interval_ms / 1000
