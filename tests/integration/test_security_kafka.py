"""SASL/SCRAM and ACLs on a real secured broker (scripts/kafka-secure.sh), never the shared one.

One secured broker for the session (ports 29092/29093, state in a tmp dir): SCRAM-SHA-512
on a SASL_PLAINTEXT listener, StandardAuthorizer, no access without an ACL. Clients get
their SASL options only through KafkaSettings (RUNFACTS_KAFKA_CONFIG), as deployments do.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AclBindingFilter, AdminClient
from typer.testing import CliRunner

from runfacts.acls import acl_entries, apply_acls, component_access, create_scram_user
from runfacts.cli import app
from runfacts.devenv import SCRIPTS, port_open
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics

pytestmark = pytest.mark.integration

PORT, CONTROLLER_PORT = 29092, 29093
SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512"}


@dataclass(frozen=True)
class SecureBroker:
    bootstrap: str
    admin_password: str

    def admin(self, prefix: str = "runfacts") -> KafkaSettings:
        config = {**SASL, "sasl.username": "admin", "sasl.password": self.admin_password}
        return KafkaSettings(bootstrap_servers=self.bootstrap, config=config, topic_prefix=prefix)


@pytest.fixture(scope="session")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """A secured broker started (and stopped) by this session only."""
    if port_open("127.0.0.1", PORT) or port_open("127.0.0.1", CONTROLLER_PORT):
        pytest.fail(f"ports {PORT}/{CONTROLLER_PORT} are taken: stop the other secured broker first")
    password = secrets.token_urlsafe(18)
    env = {**os.environ, "RUNFACTS_SECURE_HOME": str(tmp_path_factory.mktemp("secure-kafka")),
           "KAFKA_SECURE_PORT": str(PORT), "KAFKA_SECURE_CONTROLLER_PORT": str(CONTROLLER_PORT),
           "KAFKA_SCRAM_ADMIN_PASSWORD": password}
    script = ["bash", str(SCRIPTS / "kafka-secure.sh")]
    started = subprocess.run([*script, "start"], env=env, capture_output=True, text=True, timeout=240, check=False)
    try:
        assert started.returncode == 0, started.stderr
        yield SecureBroker(f"127.0.0.1:{PORT}", password)
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


def consume_one(settings: KafkaSettings, topic: str, group: str, timeout: float = 20) -> bytes:
    consumer = Consumer(settings.client_config(**{
        "group.id": group, "auto.offset.reset": "earliest", "isolation.level": "read_committed"}))
    consumer.subscribe([topic])
    try:
        msg = consumer.poll(timeout)
        assert msg is not None and msg.error() is None, msg and msg.error()
        return msg.value()
    finally:
        consumer.close()


def test_command_write_succeeds_when_principal_has_printed_acls(deployment, monkeypatch):
    for component in ("dashboard", "cli", "dispatcher"):
        settings = deployment.principal_settings(monkeypatch, component)
        assert settings.client_config()["sasl.username"] == f"{deployment.names.prefix}-{component}"
        assert produce(settings, deployment.names.commands) is None


@pytest.mark.parametrize("component", ["projector", "decider", "auditor", "nobody"])
def test_command_write_denied_when_principal_lacks_write_acl(deployment, monkeypatch, component):
    error = produce(deployment.principal_settings(monkeypatch, component), deployment.names.commands)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_decider_runs_transactional_loop_when_scram_and_printed_acls_are_used(deployment, monkeypatch):
    names = deployment.names
    assert produce(deployment.principal_settings(monkeypatch, "dashboard"), names.commands) is None
    decider = deployment.principal_settings(monkeypatch, "decider")
    app_name = f"{names.prefix}-decider"
    consumer = Consumer(decider.client_config(**{
        "group.id": app_name, "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": "read_committed"}))
    producer = Producer(decider.client_config(**{"transactional.id": f"{app_name}-0"}))
    producer.init_transactions(30)
    consumer.subscribe([names.commands])
    try:
        command = consumer.poll(20)
        assert command is not None and command.error() is None
        producer.begin_transaction()
        producer.produce(names.events, key=command.key(), value=b'{"eventType": "run.created"}')
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
    finally:
        consumer.close()
    auditor = deployment.principal_settings(monkeypatch, "auditor")
    assert consume_one(auditor, names.events, f"{names.prefix}-auditor-check") == b'{"eventType": "run.created"}'


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
