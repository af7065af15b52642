"""The Kafka ACLs each runfacts component needs, derived from the topic spec, and applied.

Least privilege per component (principal `User:<prefix>-<component>` by default):

| component    | reads                      | writes                         | group / txn id / own topics |
|--------------|----------------------------|--------------------------------|-----------------------------|
| decider      | commands                   | events, state, view.user, dlq, | `<prefix>-run-decider*`      |
|              |                            | decider.versions, metrics,     |                             |
|              |                            | tools.control                  |                             |
| projector    | events                     | audit, eval.trajectory,        | `<prefix>-projector*` (and   |
|              |                            | memory, dlq, metrics           | `-projector-memory`)        |
| dispatcher   | events, keys, tools.control | commands, dlq, metrics, keys  | `<prefix>-dispatcher*`       |
| outbox-relay | —                          | commands                       | txn id `<prefix>-outbox-*`   |
| dashboard    | view.user, state, events,  | commands, dlq (redrive         | group `<prefix>-dashboard*`, |
|              | audit, dlq, metrics        | markers)                       | txn `runfacts-dlq-redrive-<dlq>` |
| cli          | state, events, view.user, dlq, | commands                    | group `<prefix>-cli*`        |
|              | tools.control              |                                |                             |
| auditor      | audit, eval.trajectory, events | —                          | group `<prefix>-auditor*`    |
| client       | events, state, view.user,  | commands, output               | group `<prefix>-client*`,    |
|              | decider.versions, memory,  |                                | txn `<prefix>-client-relay-*` |
|              | output                     |                                |                             |

An engine application named `<prefix>-<app>` uses that name as its group id (and
`-restore` for restores), `<name>-<instance>` as transactional id and
`<name>-<store>-changelog` as store changelogs, so one PREFIXED pattern per resource
type covers them. Only the decider writes the events log; nobody but the writers listed
can put a command on the commands topic.

The client components read with assign()-only consumers that never commit, but librdkafka
still asks for the coordinator of their `group.id` (FindCoordinator needs DESCRIBE on the
group) and reports GROUP_AUTHORIZATION_FAILED to the reader when refused. So every reader
takes `reader_group(group_prefix(<prefix>, <component>))`, `<prefix>-<component>-<12 hex>`:
the dashboard's feeds and command client `<prefix>-dashboard-…`, the CLI's state reader,
command client and `dlq` `<prefix>-cli-…`, audit verify, trajectory export and replay
(`logread`) `<prefix>-auditor-…`, runfacts.client's follower, state reader and versions read
`<prefix>-client-…` (its `ClientSettings.component`); the client's in-process outbox relay
is transactional as `<prefix>-client-relay-<table>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from runfacts.schemas.errors import ConfigError, InfrastructureError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, group_prefix, redrive_transactional_id, redrive_writes


def client_relay_prefix(prefix: str) -> str:
    """The transactional-id prefix of runfacts.client's in-process outbox relay."""
    return f"{prefix}-client-relay-"


def outbox_transactional_prefix(prefix: str) -> str:
    """connectors.relay names its transactional id `<prefix>-outbox-<table>-<relay id>`."""
    return f"{prefix}-outbox-"


@dataclass(frozen=True)
class ComponentAccess:
    """What one component may touch: topics it reads and writes, its group/txn/own-topic prefixes."""

    component: str
    principal: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    group_prefix: str | None = None
    transactional_prefix: str | None = None
    own_topic_prefix: str | None = None  # store changelogs the component creates itself
    configs_read: tuple[str, ...] = ()  # topics whose configs it checks (a shared changelog, ADR 0010)


@dataclass(frozen=True, order=True)
class AclEntry:
    """One ALLOW rule: principal may do operation on resource (LITERAL name or PREFIXED)."""

    principal: str
    resource_type: str  # TOPIC | GROUP | TRANSACTIONAL_ID
    pattern_type: str  # LITERAL | PREFIXED
    resource_name: str
    operation: str  # READ | WRITE | CREATE | DESCRIBE | DESCRIBE_CONFIGS
    host: str = "*"


# Engine application names (`<prefix>-<name>`); processors.decider.app names the decider run-decider.
ENGINE_APPS = {"decider": "run-decider", "projector": "projector", "dispatcher": "dispatcher"}
COMPONENTS = ("decider", "projector", "dispatcher", "outbox-relay", "dashboard", "cli", "auditor", "client")


def component_access(names: TopicNames, principals: Mapping[str, str] | None = None) -> list[ComponentAccess]:
    """Every component's access under `names`; `principals` overrides `User:<prefix>-<component>`."""
    unknown = sorted(set(principals or {}) - set(COMPONENTS))
    if unknown:
        raise ConfigError("principal", unknown[0], f"not a component (known: {', '.join(COMPONENTS)})")
    who = {c: f"User:{names.prefix}-{c}" for c in COMPONENTS} | dict(principals or {})
    n = names

    def engine(component: str, reads: tuple[str, ...], writes: tuple[str, ...]) -> ComponentAccess:
        app = f"{n.prefix}-{ENGINE_APPS[component]}"  # group id, transactional id prefix, changelog prefix
        return ComponentAccess(component, who[component], reads, writes, app, app, f"{app}-")

    def client(component: str, reads: tuple[str, ...], writes: tuple[str, ...]) -> ComponentAccess:
        group = group_prefix(n.prefix, component) if reads else None
        return ComponentAccess(component, who[component], reads, writes, group_prefix=group)

    relay = ComponentAccess("outbox-relay", who["outbox-relay"], writes=(n.commands,),
                            transactional_prefix=outbox_transactional_prefix(n.prefix))
    return [
        # every engine publishes its metrics record (runfacts.processors.engine.reporter)
        # n.state is also its `runs` store's changelog (ADR 0010): read to restore, configs checked at start
        # n.tool_control: the last pause / resume of each capability (docs/dispatcher.md "Paused capabilities")
        replace(engine("decider", (n.commands, n.state),
                       (n.events, n.state, n.user_view, n.dlq, n.decider_versions, n.metrics, n.tool_control)),
                configs_read=(n.state,)),
        # memory: the projector's memory app
        engine("projector", (n.events,), (n.audit, n.trajectory, n.memory, n.dlq, n.metrics)),
        # (n.keys: it seals the personal fields of its reports, runfacts.privacy)
        # (n.tool_control: read whole, it holds no call of a paused capability)
        engine("dispatcher", (n.events, n.keys, n.tool_control), (n.commands, n.dlq, n.metrics, n.keys)),
        relay,
        # the user role's views; operators'/auditors' views, run owners and the State commands are
        # built from; the decider's answers (events whose causationId is the command)
        # its commands, and the console's redrive (runfacts.ops.dlq, names in runfacts.topics): to the topics a
        # service may redrive to, a marker on the dlq, in a transaction of the redrive's id
        # (n.keys: the data keys of personal fields: readers reveal, writers seal; the cli erases)
        replace(client("dashboard", (n.user_view, n.state, n.events, n.audit, n.dlq, n.metrics, n.keys),
                       tuple(dict.fromkeys((n.commands, *redrive_writes(n), n.keys)))),
                transactional_prefix=redrive_transactional_id(n.dlq)),
        client("cli", (n.state, n.events, n.user_view, n.dlq, n.keys, n.tool_control), (n.commands, n.keys)),
        client("auditor", (n.audit, n.trajectory, n.events, n.keys), ()),
        # runfacts.client: the follower (events), run states and views, the decider's versions;
        # its commands direct or through its in-process outbox relay (transactional)
        # (n.output: a run's partial output, written by its agent and read back, runfacts.client.output)
        replace(client("client", (n.events, n.state, n.user_view, n.decider_versions, n.memory, n.keys, n.output),
                       (n.commands, n.keys, n.output)),
                transactional_prefix=client_relay_prefix(n.prefix)),
    ]


def acl_entries(access: ComponentAccess) -> list[AclEntry]:
    """The ALLOW entries granting `access`, sorted and without duplicates."""
    p = access.principal
    entries: set[AclEntry] = set()
    for topic in access.reads:
        entries |= {AclEntry(p, "TOPIC", "LITERAL", topic, op) for op in ("READ", "DESCRIBE")}
    for topic in access.writes:
        entries |= {AclEntry(p, "TOPIC", "LITERAL", topic, op) for op in ("WRITE", "DESCRIBE")}
    entries |= {AclEntry(p, "TOPIC", "LITERAL", topic, "DESCRIBE_CONFIGS") for topic in access.configs_read}
    if access.group_prefix:
        entries |= {AclEntry(p, "GROUP", "PREFIXED", access.group_prefix, op) for op in ("READ", "DESCRIBE")}
    if access.transactional_prefix:
        entries |= {AclEntry(p, "TRANSACTIONAL_ID", "PREFIXED", access.transactional_prefix, op)
                    for op in ("WRITE", "DESCRIBE")}
    if access.own_topic_prefix:
        ops = ("CREATE", "READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")
        entries |= {AclEntry(p, "TOPIC", "PREFIXED", access.own_topic_prefix, op) for op in ops}
    return sorted(entries)


def all_entries(accesses: Iterable[ComponentAccess]) -> list[AclEntry]:
    """The entries of several components, sorted and without duplicates."""
    return sorted({e for a in accesses for e in acl_entries(a)})


def kafka_acls_command(entry: AclEntry) -> str:
    """The equivalent `kafka-acls.sh` invocation (for clusters run without Python at hand)."""
    flag = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}[entry.resource_type]
    op = "".join(word.capitalize() for word in entry.operation.split("_"))  # DescribeConfigs
    return (f"kafka-acls.sh --bootstrap-server $BOOTSTRAP --command-config admin.properties --add "
            f"--allow-principal '{entry.principal}' --operation {op} {flag} '{entry.resource_name}' "
            f"--resource-pattern-type {entry.pattern_type.lower()}")


def apply_acls(settings: KafkaSettings, entries: list[AclEntry], timeout: float = 30) -> int:
    """Create the entries with the AdminClient (idempotent); return how many were requested."""
    from confluent_kafka.admin import AclBinding, AdminClient

    if not entries:
        return 0
    admin = AdminClient(settings.client_config())
    bindings = [AclBinding(e.resource_type, e.resource_name, e.pattern_type, e.principal, e.host,
                           e.operation, "ALLOW") for e in entries]
    for binding, future in admin.create_acls(bindings, request_timeout=timeout).items():
        try:
            future.result()
        except Exception as exc:  # noqa: BLE001 - KafkaException carries the broker's reason
            raise InfrastructureError(f"creating ACL {binding}: {exc}", retryable=False) from exc
    return len(bindings)


def create_scram_user(settings: KafkaSettings, name: str, password: str, timeout: float = 30) -> None:
    """Create or update a SCRAM-SHA-512 user (the caller needs ALTER on the cluster, e.g. a super user)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    if len(password) < 12:
        raise ConfigError("SCRAM password", "<hidden>", f"for user {name}: at least 12 characters")
    admin = AdminClient(settings.client_config())
    upsert = UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          password.encode())
    for future in admin.alter_user_scram_credentials([upsert], request_timeout=timeout).values():
        try:
            future.result()
        except Exception as exc:  # noqa: BLE001
            raise InfrastructureError(f"creating SCRAM user {name}: {exc}", retryable=False) from exc
