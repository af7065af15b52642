"""SASL/SCRAM and ACLs on a real secured broker (scripts/kafka-secure.sh), never the shared one.

One secured broker for the session (ports 29092/29093/29094, state in a tmp dir): SCRAM-SHA-512
on a SASL_PLAINTEXT and a SASL_SSL listener (the script's self-signed CA), StandardAuthorizer,
no access without an ACL. Clients get
their SASL options only through KafkaSettings (RUNFACTS_KAFKA_CONFIG), as deployments do;
the run decider runs on the engine as its own SCRAM principal with only its printed ACLs.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AclBindingFilter, AdminClient
from decider_support import RUN, USER, Scenario, command, create, policy_ctx, propose_refund, resume
from engine_support import EngineThread
from ops_support import write_users
from outbox_support import AvroEncoder, DemoEvent, decode
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.cli.dashboard import DashboardSettings, build_dashboard
from runfacts.connectors.outbox import Outbox
from runfacts.dev.services import SCRIPTS, port_open
from runfacts.ops.client import CommandClient, ReaderSettings, StateReader
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.engine.settings import EngineSettings
from runfacts.processors.policy.approvals import ApprovalClaims, Keyring, SigningKey, issue_token
from runfacts.projections import user_view
from runfacts.projections.audit.verify import VerifySettings, verify
from runfacts.projections.projector.replay import ReplaySettings, replay
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.codec import Codec
from runfacts.schemas.errors import ConfigError
from runfacts.security.acls import acl_entries, apply_acls, component_access, create_scram_user
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, group_prefix, runfacts_topics

pytestmark = pytest.mark.integration

PORT, CONTROLLER_PORT, TLS_PORT = 29092, 29093, 29094
README = Path(__file__).resolve().parents[2] / "README.md"
SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512"}


@dataclass(frozen=True)
class SecureBroker:
    bootstrap: str
    admin_password: str
    tls_bootstrap: str = ""
    ca: str = ""  # the script's self-signed CA, which signed the SASL_SSL listener's certificate

    def admin(self, prefix: str = "runfacts") -> KafkaSettings:
        config = {**SASL, "sasl.username": "admin", "sasl.password": self.admin_password}
        return KafkaSettings(bootstrap_servers=self.bootstrap, config=config, topic_prefix=prefix)


@pytest.fixture(scope="session")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """A secured broker started (and stopped) by this session only."""
    if any(port_open("127.0.0.1", p) for p in (PORT, CONTROLLER_PORT, TLS_PORT)):
        pytest.fail(f"ports {PORT}/{CONTROLLER_PORT}/{TLS_PORT} are taken: stop the other secured broker first")
    password = secrets.token_urlsafe(18)
    home = tmp_path_factory.mktemp("secure-kafka")
    env = {**os.environ, "RUNFACTS_SECURE_HOME": str(home),
           "KAFKA_SECURE_PORT": str(PORT), "KAFKA_SECURE_CONTROLLER_PORT": str(CONTROLLER_PORT),
           "KAFKA_SECURE_TLS_PORT": str(TLS_PORT), "KAFKA_SCRAM_ADMIN_PASSWORD": password}
    script = ["bash", str(SCRIPTS / "kafka-secure.sh")]
    started = subprocess.run([*script, "start"], env=env, capture_output=True, text=True, timeout=240, check=False)
    try:
        assert started.returncode == 0, started.stderr
        yield SecureBroker(f"127.0.0.1:{PORT}", password, f"127.0.0.1:{TLS_PORT}", str(home / "tls" / "ca.pem"))
    finally:
        subprocess.run([*script, "stop"], env=env, capture_output=True, timeout=60, check=False)


@dataclass(frozen=True)
class Deployment:
    """Topics under a unique prefix, one SCRAM user per component with its printed ACLs applied."""

    broker: SecureBroker
    names: TopicNames

    def principal_settings(self, monkeypatch: pytest.MonkeyPatch, component: str) -> KafkaSettings:
        """A component's client settings, built the way a deployment builds them: from the environment."""
        user = f"{self.names.prefix}-{component}"
        monkeypatch.setenv("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", self.broker.bootstrap)
        monkeypatch.setenv("RUNFACTS_KAFKA_TOPIC_PREFIX", self.names.prefix)
        monkeypatch.setenv("RUNFACTS_KAFKA_CONFIG", json.dumps(
            {**SASL, "sasl.username": user, "sasl.password": f"pw-{user}"}))
        return KafkaSettings()


@pytest.fixture
def deployment(secure_broker: SecureBroker, unique: str) -> Deployment:
    names = TopicNames(f"sec{unique}")
    admin = secure_broker.admin(names.prefix)
    apply_topics(admin, runfacts_topics(names, partitions=1))
    entries = []
    for access in component_access(names):
        user = access.principal.removeprefix("User:")
        create_scram_user(admin, user, f"pw-{user}")
        entries += acl_entries(access)
    create_scram_user(admin, f"{names.prefix}-nobody", f"pw-{names.prefix}-nobody")  # a user without ACLs
    apply_acls(admin, entries)
    return Deployment(secure_broker, names)


def produce(settings: KafkaSettings, topic: str, **extra: object) -> KafkaError | None:
    """Produce one record; the delivery error (None when written)."""
    errors: list[KafkaError | None] = []
    producer = Producer(settings.client_config(**{"message.timeout.ms": 10000, **extra}))
    producer.produce(topic, key=b"run-1", value=b"{}", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    return errors[0] if errors else None


def test_command_write_succeeds_when_principal_has_printed_acls(deployment, monkeypatch):
    for component in ("dashboard", "cli", "dispatcher"):
        settings = deployment.principal_settings(monkeypatch, component)
        assert settings.client_config()["sasl.username"] == f"{deployment.names.prefix}-{component}"
        assert produce(settings, deployment.names.commands) is None


@pytest.mark.parametrize("component", ["projector", "decider", "auditor", "nobody"])
def test_command_write_denied_when_principal_lacks_write_acl(deployment, monkeypatch, component):
    error = produce(deployment.principal_settings(monkeypatch, component), deployment.names.commands)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_consumer_denied_group_when_group_is_outside_component_prefix(deployment, monkeypatch):
    settings = deployment.principal_settings(monkeypatch, "auditor")
    consumer = Consumer(settings.client_config(**{"group.id": "someone-elses-group", "auto.offset.reset": "earliest"}))
    consumer.subscribe([deployment.names.events])
    try:
        msg = consumer.poll(15)
        assert msg is not None and msg.error() is not None
        assert msg.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_scram_client_fails_authentication_when_password_is_wrong(secure_broker):
    errors: list[KafkaError] = []
    config = {**SASL, "sasl.username": "admin", "sasl.password": "not-the-password",
              "error_cb": errors.append}
    producer = Producer(KafkaSettings(bootstrap_servers=secure_broker.bootstrap, config=config).client_config())
    for _ in range(50):
        producer.poll(0.2)
        if errors:
            break
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION


def readme_sasl_ssl_config() -> dict[str, str]:
    """The RUNFACTS_KAFKA_CONFIG example of the README ("Using an existing Kafka cluster")."""
    match = re.search(r"export RUNFACTS_KAFKA_CONFIG='(\{.*?\})'", README.read_text(), re.DOTALL)
    assert match, "README lost its RUNFACTS_KAFKA_CONFIG example"
    return json.loads(match.group(1))


def test_readme_sasl_ssl_config_reads_over_tls_and_refuses_an_unknown_ca(secure_broker, monkeypatch):
    example = readme_sasl_ssl_config()
    assert example["security.protocol"] == "SASL_SSL" and example["sasl.mechanism"] == "SCRAM-SHA-512"
    names = TopicNames("runfacts")  # the example's user runfacts-decider is the decider of prefix runfacts
    admin = secure_broker.admin(names.prefix)
    apply_topics(admin, runfacts_topics(names, partitions=1))
    user = example["sasl.username"]
    create_scram_user(admin, user, f"pw-{user}")
    apply_acls(admin, [e for a in component_access(names) if a.principal == f"User:{user}" for e in acl_entries(a)])
    assert produce(admin, names.commands) is None  # over SASL_PLAINTEXT, as the admin

    config = {**example, "sasl.password": f"pw-{user}", "ssl.ca.location": secure_broker.ca}
    monkeypatch.setenv("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", secure_broker.tls_bootstrap)
    monkeypatch.setenv("RUNFACTS_KAFKA_CONFIG", json.dumps(config))
    settings = KafkaSettings()
    consumer = Consumer(settings.client_config(**{"group.id": f"{group_prefix(names.prefix, 'run-decider')}-tls",
                                                  "auto.offset.reset": "earliest"}))
    consumer.subscribe([names.commands])
    try:
        msg = None
        for _ in range(30):
            msg = consumer.poll(1)
            if msg is not None:
                break
        assert msg is not None and msg.error() is None, msg and msg.error()
        assert msg.key() == b"run-1"
    finally:
        consumer.close()

    # without the CA the broker's certificate cannot be verified: no connection at all
    untrusted = {k: v for k, v in config.items() if k != "ssl.ca.location"}  # the system's CAs only
    client = AdminClient({"bootstrap.servers": secure_broker.tls_bootstrap, **untrusted})
    with pytest.raises(KafkaException) as refused:
        client.list_topics(timeout=5)
    assert refused.value.args[0].code() == KafkaError._TRANSPORT


def test_security_cli_creates_user_and_applies_acls_when_run_with_admin_settings(secure_broker, unique, monkeypatch):
    admin = secure_broker.admin(f"cli{unique}")
    monkeypatch.setenv("RUNFACTS_KAFKA_BOOTSTRAP_SERVERS", admin.bootstrap_servers)
    monkeypatch.setenv("RUNFACTS_KAFKA_CONFIG", json.dumps(admin.config))
    monkeypatch.setenv("RUNFACTS_KAFKA_TOPIC_PREFIX", f"cli{unique}")
    monkeypatch.setenv("WEB_PASSWORD", "a-long-password-123")
    runner = CliRunner()
    made = runner.invoke(app, ["security", "user", f"web{unique}", "--password-env", "WEB_PASSWORD"])
    assert made.exit_code == 0, made.output
    applied = runner.invoke(app, ["security", "acls", "-c", "dashboard", "--principal",
                                  f"dashboard=User:web{unique}", "--apply"])
    assert applied.exit_code == 0, applied.output
    acl_filter = AclBindingFilter("ANY", None, "ANY", f"User:web{unique}", None, "ANY", "ANY")
    client = AdminClient(admin.client_config())  # kept referenced until the future resolves
    found = client.describe_acls(acl_filter, request_timeout=30).result()
    assert {(b.name, b.operation.name) for b in found} >= {
        (f"cli{unique}.run.commands", "WRITE"), (f"cli{unique}.view.user", "READ"), (f"cli{unique}-dashboard", "READ")}


def read_events(settings: KafkaSettings, topic: str, group: str, until: Callable[[list], bool],
                timeout: float = 60) -> list:
    """Committed records of `topic` (decoded) until `until(found)`, read as `settings`' principal."""
    consumer = Consumer(settings.client_config(**{
        "group.id": group, "auto.offset.reset": "earliest", "isolation.level": "read_committed"}))
    consumer.subscribe([topic])
    found, deadline = [], time.monotonic() + timeout
    try:
        while not until(found) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                found.append(codec.decode(msg.value()))
    finally:
        consumer.close()
    return found


def test_decider_engine_enforces_policy_and_signed_approvals_when_run_as_scram_principal(
        deployment, monkeypatch, tmp_path):
    names, keyring = deployment.names, Keyring(keys={"k1": SigningKey(secrets.token_bytes(32))}, current="k1")
    ctx = policy_ctx(keyring)
    approve = resume()
    claims = ApprovalClaims(RUN, "approval-tool-call-031", approve.payload.argsHash, "approve",
                            approve.actor.subjectId, int(time.time() * 1000) + 600_000)
    # the commands topic is LogAppendTime: the decider judges expiry at the broker's clock
    outsider = USER.model_copy(update={"authSource": "intranet-script"})
    commands = [create(), propose_refund(),
                approve.model_copy(update={"payload": approve.payload.model_copy(
                    update={"approvalToken": issue_token(keyring, "k1", claims)})})]
    cli = deployment.principal_settings(monkeypatch, "cli")
    producer = Producer(cli.client_config())
    for c in commands:
        producer.produce(names.commands, codec.encode(c), c.runId.encode())
    assert producer.flush(15) == 0
    decider = deployment.principal_settings(monkeypatch, "decider")
    engine_settings = EngineSettings(bootstrap_servers=decider.bootstrap_servers, kafka=decider.config,
                                     state_dir=tmp_path / "state", instance_id="sec-1")
    engine = EngineThread(DeciderShell(names, ctx).application(), engine_settings).start()
    try:
        # the CLI's command client sends and reads the decider's answer from the events topic
        client = CommandClient(cli, names, settings=ReaderSettings(outcome_timeout_s=60))
        outcome = client.send(command(cmd.StopRun, outsider, reason="not trusted"))
        client.close()
        assert [e.eventType for e in outcome.events] == ["command.rejected"]
        events = read_events(deployment.principal_settings(monkeypatch, "auditor"), names.events,
                             f"{names.prefix}-auditor-read",
                             until=lambda found: bool(found) and found[-1].eventType == "command.rejected")
    finally:
        engine.stop()
    types = [e.eventType for e in events]
    assert "approval.granted" in types and "tool.call.authorized" in types
    assert events[-1].eventType == "command.rejected" and events[-1].payload.reasonCode == "untrusted_source"


def seed_run(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Scenario:
    """A run created with a refund proposed: its events, State, user view and a dead letter,
    written as the decider principal (the only writer of those topics)."""
    run, names, key = Scenario().given(create(), propose_refund()), deployment.names, RUN.encode()
    producer = Producer(deployment.principal_settings(monkeypatch, "decider").client_config())
    for event in run.log:
        producer.produce(names.events, codec.encode(event), key)
    producer.produce(names.state, run.s.model_dump_json().encode(), key)
    for topic, view_key, view in user_view.publisher(names.user_view)(run.s):
        producer.produce(topic, view, view_key)
    producer.produce(names.dlq, b"not a command", key, headers=[
        ("dlq.topic", names.commands.encode()), ("dlq.partition", b"0"), ("dlq.offset", b"7"),
        ("dlq.error", b"undecodable"), ("dlq.app", f"{names.prefix}-run-decider".encode())])
    assert producer.flush(15) == 0
    return run


def test_dashboard_feeds_read_runs_unrefused_when_run_as_dashboard_principal(
        deployment, monkeypatch, tmp_path, caplog):
    run = seed_run(deployment, monkeypatch)
    monkeypatch.setenv("RUNFACTS_USERS_FILE", str(write_users(tmp_path / "users.toml")))
    dashboard = build_dashboard(DashboardSettings(), deployment.principal_settings(monkeypatch, "dashboard"))
    assert dashboard.facts is not None and dashboard.audit is not None and dashboard.dead_letters is not None
    feeds = [dashboard.views.start(), dashboard.states.start(), dashboard.facts.start(), dashboard.audit.start()]
    views, states = feeds[0], feeds[1]
    try:
        for feed in feeds:  # the console's facts and audit feeds too
            assert feed.wait_ready(20), feed.error
        assert views.get(RUN)["runId"] == RUN and views.get(RUN)["approvalBanner"] is not None
        assert states.get(RUN) == run.s
        assert [e.event_type for e in dashboard.facts.entries(RUN)][:1] == ["run.created"]
        assert isinstance(dashboard.dead_letters.read(), list)  # the dead-letter topic, read as the dashboard
        time.sleep(1)  # the group coordinator's answer, refused or not, has long arrived
    finally:
        for feed in feeds:
            feed.stop()
    assert "GROUP_AUTHORIZATION_FAILED" not in caplog.text  # the feeds log (and skip) refusals


def test_dashboard_redrives_a_command_letter_with_its_derived_acls_and_refuses_an_events_letter(
        deployment, monkeypatch, tmp_path):
    seed_run(deployment, monkeypatch)
    names = deployment.names
    monkeypatch.setenv("RUNFACTS_USERS_FILE", str(write_users(tmp_path / "users.toml")))
    letters = build_dashboard(DashboardSettings(), deployment.principal_settings(monkeypatch, "dashboard")).dead_letters
    assert letters is not None
    # two letters of records that decode (an undecodable one is refused before its topic is looked at):
    # a command the decider refused, and a fact a projector refused
    record = Codec().encode(create(run="run-2"))
    producer = Producer(deployment.principal_settings(monkeypatch, "decider").client_config())
    for topic, refuser in ((names.commands, "run-decider"), (names.events, "projector")):
        producer.produce(names.dlq, record, b"run-2", headers=[
            ("dlq.topic", topic.encode()), ("dlq.partition", b"0"), ("dlq.offset", b"3"),
            ("dlq.error", b"refused"), ("dlq.app", f"{names.prefix}-{refuser}".encode())])
    assert producer.flush(15) == 0
    by_topic = {x.reasons["topic"]: x for x in letters.read()}

    with pytest.raises(ConfigError, match="admin"):  # never a copy of a fact on the log from the console
        letters.redrive(by_topic[names.events].position)
    assert letters.redrive(by_topic[names.commands].position) == 1  # transactional id, commands, dlq marker
    redriven = {x.position: x.redriven_to for x in letters.read()}
    assert redriven[by_topic[names.commands].position] == names.commands
    assert redriven[by_topic[names.events].position] == ""


def test_cli_reader_reads_state_view_and_dead_letters_when_run_as_cli_principal(deployment, monkeypatch):
    run = seed_run(deployment, monkeypatch)
    reader = StateReader(deployment.principal_settings(monkeypatch, "cli"), deployment.names,
                         ReaderSettings(read_timeout_s=20))
    assert reader.latest(RUN) == run.s
    assert reader.latest_view(RUN)["runId"] == RUN
    assert set(reader.scan()) == {RUN}
    listed = CliRunner().invoke(app, ["dlq", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output)["error"] == "undecodable"


def test_audit_verify_and_replay_read_events_when_run_as_auditor_principal(deployment, monkeypatch, tmp_path):
    run = seed_run(deployment, monkeypatch)
    kafka = deployment.principal_settings(monkeypatch, "auditor")
    report = verify(kafka, VerifySettings())
    assert report.events == len(run.log) and report.records == 0  # nothing projected: no projector ran
    replayed = replay(kafka, ReplaySettings("audit", into=str(tmp_path / "audit")))
    assert replayed.events == len(run.log) and replayed.records > 0


def test_outbox_relay_cli_publishes_when_run_as_scram_principal_from_the_environment(
        deployment, monkeypatch, tmp_path):
    """`runfacts outbox relay` reaches a SASL cluster through RUNFACTS_KAFKA_* (no --bootstrap)."""
    db = str(tmp_path / "harness.db")
    box, conn = Outbox(AvroEncoder(deployment.names.commands)), sqlite3.connect(db)
    box.install(conn)
    with box.transaction(conn) as tx:
        for n in range(5):
            tx.emit(DemoEvent(f"e{n}", "run-relay", n))
    conn.close()
    deployment.principal_settings(monkeypatch, "outbox-relay")
    relay = subprocess.run([sys.executable, "-m", "runfacts.cli", "outbox", "relay", "--db", db,
                            "--exit-when-idle"], capture_output=True, text=True, timeout=120, check=False)
    assert relay.returncode == 0, relay.stderr
    assert "parked run=" not in relay.stderr and '"published_total": 5' in relay.stderr, relay.stderr
    consumer = Consumer(deployment.broker.admin(deployment.names.prefix).client_config(**{
        "group.id": f"{deployment.names.prefix}-check", "auto.offset.reset": "earliest"}))
    consumer.subscribe([deployment.names.commands])
    got: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(decode(msg.value())["n"])
    finally:
        consumer.close()
    assert got == [0, 1, 2, 3, 4]
