"""Every runfacts topic as one declarative spec, applied idempotently with the AdminClient.

`apply_topics` creates what is missing, brings drifted configs (retention, ...) in line,
and refuses — with an error naming topic, setting, expected and actual value — when an
existing topic's partition count or cleanup policy disagrees with the spec, because
neither can be fixed in place without breaking co-partitioning or compaction.

Replication comes from `KafkaSettings.replication_factor` (RUNFACTS_KAFKA_REPLICATION_FACTOR):
a replicated topic (RF > 1) is pinned to `min.insync.replicas=2`, so an acks=all write (every
runfacts producer is idempotent, which forces acks=all) is on two brokers before it is
acknowledged, and writes block rather than land on one broker alone. An existing topic with
fewer replicas than the setting is refused (reassign its partitions or recreate it).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from runfacts.schemas.errors import ConfigError, InfrastructureError
from runfacts.settings import KafkaSettings

_log = logging.getLogger("runfacts.topics")
DAY_MS = 24 * 3600 * 1000
UNLIMITED = -1
MIN_INSYNC_REPLICATED = 2  # min.insync.replicas of every topic with more than one replica


@dataclass(frozen=True)
class TopicSpec:
    """One topic: name, partitions, cleanup policy, retention and extra configs."""

    name: str
    partitions: int
    cleanup_policy: str = "delete"
    retention_ms: int = 7 * DAY_MS
    configs: dict[str, str] = field(default_factory=dict)
    purpose: str = ""

    def all_configs(self) -> dict[str, str]:
        """The topic-level configs this spec pins."""
        conf = {"cleanup.policy": self.cleanup_policy, "retention.ms": str(self.retention_ms)}
        conf.update(self.configs)
        return conf


@dataclass(frozen=True)
class TopicNames:
    """The runfacts topic names under one prefix (default `runfacts`)."""

    prefix: str = "runfacts"

    @property
    def commands(self) -> str:
        return f"{self.prefix}.run.commands"

    @property
    def events(self) -> str:
        return f"{self.prefix}.run.events"

    @property
    def state(self) -> str:
        return f"{self.prefix}.run.state"

    @property
    def user_view(self) -> str:
        return f"{self.prefix}.view.user"

    @property
    def output(self) -> str:
        """A run's partial output (tokens, progress): not its facts; kept OUTPUT_RETENTION_MS."""
        return f"{self.prefix}.run.output"

    @property
    def audit(self) -> str:
        return f"{self.prefix}.audit"

    @property
    def trajectory(self) -> str:
        return f"{self.prefix}.eval.trajectory"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}.dlq"

    @property
    def memory(self) -> str:
        return f"{self.prefix}.memory"

    @property
    def decider_versions(self) -> str:
        return f"{self.prefix}.decider.versions"

    @property
    def metrics(self) -> str:
        return f"{self.prefix}.engine.metrics"

    @property
    def keys(self) -> str:
        return f"{self.prefix}.keys"

    @property
    def tool_control(self) -> str:
        return f"{self.prefix}.tools.control"


OUTPUT_RETENTION_MS = 6 * 3600 * 1000
"""How long a run's partial output stays readable (runfacts.client.output)."""
COMPACT = {"min.cleanable.dirty.ratio": "0.1", "segment.ms": str(3600 * 1000)}


def runfacts_topics(names: TopicNames, partitions: int = 6) -> list[TopicSpec]:
    """The spec of every runfacts topic; runId-keyed topics share one partition count."""
    p = partitions
    return [
        TopicSpec(names.commands, p, "delete", 7 * DAY_MS, {"message.timestamp.type": "LogAppendTime"},
                  "commands (Control), key runId; broker-stamped receive time"),
        TopicSpec(names.events, p, "delete", UNLIMITED, purpose="the log of facts, key runId"),
        TopicSpec(names.state, p, "compact", UNLIMITED, dict(COMPACT), "run state, key runId"),
        TopicSpec(names.user_view, p, "compact", UNLIMITED, dict(COMPACT), "user view, key runId"),
        TopicSpec(names.output, p, "delete", OUTPUT_RETENTION_MS, {"segment.ms": str(3600 * 1000)},
                  "a run's partial output (tokens, progress), key runId; not its facts, kept 6 h"),
        TopicSpec(names.audit, p, "delete", UNLIMITED, purpose="audit records, hash chain per run"),
        TopicSpec(names.trajectory, p, "compact", UNLIMITED, dict(COMPACT), "eval trajectories"),
        TopicSpec(names.dlq, p, "delete", 30 * DAY_MS, purpose="dead letters with reason headers"),
        TopicSpec(names.memory, p, "compact", UNLIMITED, dict(COMPACT),
                  "confirmed, unexpired, unrevoked memories, key scope|memoryId (their run's partition)"),
        TopicSpec(names.decider_versions, 1, "compact", UNLIMITED, dict(COMPACT),
                  "the decider's current RunVersions, key 'current' (not runId-keyed: one partition)"),
        TopicSpec(names.metrics, 1, "delete", DAY_MS, {"segment.ms": str(3600 * 1000)},
                  "the engines' metrics records, key '<app>/<instance>' (health page; best effort)"),
        TopicSpec(names.keys, 1, "compact", UNLIMITED, dict(COMPACT),
                  "wrapped data keys of data subjects, key <ref>/<dek>; erasure = tombstone (runfacts.privacy)"),
        TopicSpec(names.tool_control, 1, "compact", UNLIMITED, dict(COMPACT),
                  "the last tool.paused / tool.resumed of each capability, key capabilityId (the decider "
                  "writes it, every dispatcher reads it whole)"),
    ]


def changelog_spec(name: str, partitions: int) -> TopicSpec:
    """A state store's changelog: compacted, kept forever, co-partitioned with its input."""
    return TopicSpec(name, partitions, "compact", UNLIMITED, dict(COMPACT), "store changelog")


class TopicMismatch(ConfigError):
    """An existing topic disagrees with the spec in a way apply cannot fix."""

    def __init__(self, topic: str, setting: str, expected: object, actual: object) -> None:
        self.topic = topic
        super().__init__(
            f"topic {topic} {setting}", actual,
            f"spec wants {expected!r}; fix the spec or recreate the topic",
        )


@dataclass
class ApplyReport:
    """What apply_topics did."""

    created: list[str] = field(default_factory=list)
    altered: dict[str, dict[str, str]] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)


def apply_topics(settings: KafkaSettings, specs: list[TopicSpec], timeout: float = 30) -> ApplyReport:
    """Create missing topics, align drifted configs, refuse unfixable differences."""
    admin = AdminClient(settings.client_config())
    existing = admin.list_topics(timeout=timeout).topics
    report = ApplyReport()
    rf = settings.replication_factor
    missing = [s for s in specs if s.name not in existing]
    report.created = _create(admin, missing, rf, timeout)
    if missing:  # metadata lags creation (ours or a racing creator's): wait until listed
        existing = wait_ready(admin, [s.name for s in missing], timeout)
    for spec in specs:
        if spec.name in report.created:
            continue
        partitions = existing[spec.name].partitions
        if len(partitions) != spec.partitions:
            raise TopicMismatch(spec.name, "partitions", spec.partitions, len(partitions))
        replicas = min(len(p.replicas) for p in partitions.values())
        if replicas < rf:
            raise TopicMismatch(spec.name, "replication factor", rf, replicas)
        drift = _config_drift(admin, spec, timeout, replicas)
        if drift:
            _alter(admin, spec.name, drift, timeout)
            report.altered[spec.name] = drift
        else:
            report.unchanged.append(spec.name)
    return report


def wait_ready(admin: AdminClient, names: list[str], timeout: float) -> dict:
    """Topic metadata once every name in `names` is listed and each of its partitions has a
    leader, as Kafka Streams' InternalTopicManager waits: the controller acknowledges a creation
    before the brokers have applied it, and a client that asks a partition's offsets in that gap
    sees an unknown partition (a fresh-clone CI run saw a new changelog's for 30 s on a loaded broker)."""
    deadline = time.monotonic() + timeout
    while True:
        topics = admin.list_topics(timeout=timeout).topics
        absent = [n for n in names if n not in topics or not topics[n].partitions
                  or any(p.leader < 0 for p in topics[n].partitions.values())]
        if not absent:
            return topics
        if time.monotonic() > deadline:
            raise InfrastructureError(f"topics not visible with a leader for every partition after {timeout}s: "
                                      f"{absent}; check that the brokers are up and their controller quorum "
                                      f"has a leader", retryable=True)
        time.sleep(0.1)


def _create(admin: AdminClient, specs: list[TopicSpec], rf: int, timeout: float) -> list[str]:
    """Create topics; return the names this call created (not those that already existed)."""
    if not specs:
        return []
    created = []
    new = [NewTopic(s.name, s.partitions, rf, config=replicated_configs(s, rf)) for s in specs]
    for name, future in admin.create_topics(new, request_timeout=timeout).items():
        try:
            future.result()
            created.append(name)
        except Exception as exc:  # noqa: BLE001 - KafkaException carries the broker's reason
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise InfrastructureError(f"creating topic {name}: {exc}", retryable=False) from exc
    return created


def replicated_configs(spec: TopicSpec, replicas: int) -> dict[str, str]:
    """The spec's configs for a topic of `replicas` replicas: min.insync.replicas 2 when RF > 1
    (RF -1, the broker's default, leaves it to the broker's own min.insync.replicas)."""
    conf = spec.all_configs()
    if replicas > 1:
        conf.setdefault("min.insync.replicas", str(MIN_INSYNC_REPLICATED))
    return conf


def _config_drift(admin: AdminClient, spec: TopicSpec, timeout: float, replicas: int) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, spec.name)
    deadline = time.monotonic() + timeout
    while True:  # on a cluster a broker may not know a just-created topic yet
        try:
            described = admin.describe_configs([resource], request_timeout=timeout)[resource].result()
            break
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    actual = {k: v.value for k, v in described.items()}
    wanted = replicated_configs(spec, replicas)
    if actual.get("cleanup.policy") != spec.cleanup_policy:
        raise TopicMismatch(spec.name, "cleanup.policy", spec.cleanup_policy, actual.get("cleanup.policy"))
    return {k: v for k, v in wanted.items() if actual.get(k) != v}


def _alter(admin: AdminClient, topic: str, drift: dict[str, str], timeout: float) -> None:
    """Set the drifted configs and wait until a describe shows them (read-your-write): on a cluster
    the broker that answers may apply the change later than the controller took it. The SET is
    idempotent, so it is sent again while the change is not visible."""
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in drift.items()]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    deadline = time.monotonic() + timeout
    while True:
        for future in admin.incremental_alter_configs([resource], request_timeout=timeout).values():
            future.result()
        for _ in range(10):
            described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)],
                                               request_timeout=timeout)
            seen = {k: v.value for k, v in next(iter(described.values())).result().items()}
            behind = {k: seen.get(k) for k, v in drift.items() if seen.get(k) != v}
            if not behind:
                return
            if time.monotonic() > deadline:
                raise InfrastructureError(
                    f"topic {topic}: the brokers still report {behind} after setting {drift} for "
                    f"{timeout:.0f}s; check the controller's log, then run `runfacts topics apply` again",
                    retryable=True)
            time.sleep(0.3)


def delete_topics(settings: KafkaSettings, names: list[str], timeout: float = 30) -> None:
    """Delete topics (tests and `runfacts dev reset`); missing topics are ignored."""
    admin = AdminClient(settings.client_config())
    for future in admin.delete_topics(names, request_timeout=timeout).values():
        try:
            future.result()
        except Exception as exc:  # noqa: BLE001
            if "UNKNOWN_TOPIC" not in str(exc):
                raise


# Consumer-group naming is topic naming: the ACLs grant a component's groups by this prefix.
def group_prefix(prefix: str, component: str) -> str:
    """The consumer-group prefix `component`'s ACLs grant under topic prefix `prefix`."""
    return f"{prefix}-{component}"


def reader_group(prefix_of_group: str) -> str:
    """A fresh group id under `prefix_of_group` for one never-committing reader."""
    return f"{prefix_of_group}-{uuid.uuid4().hex[:12]}"


# the dead-letter redrive's names (runfacts.ops.dlq redrives; runfacts.security.acls grants them)
def redrive_transactional_id(dlq_topic: str) -> str:
    """The redrive producer's transactional id: one per dead-letter topic, so a concurrent
    redrive of the same topic is fenced."""
    return f"runfacts-dlq-redrive-{dlq_topic}"


def service_redrive_targets(names: TopicNames) -> tuple[str, ...]:
    """The original topics a service (the console) may redrive to: the commands topic only. A
    redriven command goes through the decider's checks again (signature, policy, version); a
    letter whose original topic is the events log (a projector's or dispatcher's refusal) would
    be a copy of a fact written by someone other than the decider, so it stays an admin's
    `runfacts dlq redrive`."""
    return (names.commands,)


def redrive_writes(names: TopicNames) -> tuple[str, ...]:
    """The topics a service's redrive writes: its targets and the dead-letter topic (markers)."""
    return (*service_redrive_targets(names), names.dlq)
