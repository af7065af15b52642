"""Helpers for the operator CLI and dashboard tests: users, a decider on the broker, run set-up."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from decider_support import CTX, create, propose_refund

from runfacts.ops.client import CommandClient, StateReader
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.decider.state import RunState
from runfacts.projections.user_view import publisher
from runfacts.schemas.common import CommandBase
from runfacts.security.identity import hash_secret
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics

PASSWORDS = {"alice": "alice-pw-1", "olga": "olga-pw-1", "eve": "eve-pw-1"}
TOKENS = {"alice": "alice-cli-token", "olga": "olga-cli-token"}
ROLES = {"alice": ["support_agent"], "olga": ["operator"], "eve": ["user"]}


def write_users(path: Path) -> Path:
    """A users file with alice (support_agent), olga (operator), eve (user)."""
    lines = []
    for name, roles in ROLES.items():
        lines += [f"[users.{name}]", f"roles = {json.dumps(roles)}", f'password = "{hash_secret(PASSWORDS[name])}"']
        if name in TOKENS:
            lines.append(f'tokens = ["{hash_secret(TOKENS[name])}"]')
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Deployment:
    """Topics under a unique prefix, the Kafka settings and the names."""

    kafka: KafkaSettings
    names: TopicNames

    @classmethod
    def create(cls, bootstrap: str, prefix: str) -> Deployment:
        kafka = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix)
        names = TopicNames(prefix)
        apply_topics(kafka, runfacts_topics(names, partitions=3))
        _wait_visible(kafka, [s.name for s in runfacts_topics(names)])
        return cls(kafka, names)

    def env(self, users: Path, user: str | None = None) -> dict[str, str]:
        env = {"KAFKA_BOOTSTRAP_SERVERS": self.kafka.bootstrap_servers,
               "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": self.kafka.bootstrap_servers,
               "RUNFACTS_KAFKA_TOPIC_PREFIX": self.names.prefix, "RUNFACTS_USERS_FILE": str(users)}
        if user is not None:
            env.update(RUNFACTS_USER=user, RUNFACTS_TOKEN=TOKENS[user])
        return env

    def decider(self) -> Any:
        """The run decider publishing the user view with the state (as `runfacts worker decider`).
        These tests script the dispatcher's commands as a claiming dispatcher does: no at-once
        dispatch (ADR 0011), which would refuse a scripted claim depending on the partitions."""
        return DeciderShell(self.names, CTX, views=(publisher(self.names.user_view),),
                            dispatch_at_once=False).application()

    def send(self, *commands: CommandBase) -> None:
        client = CommandClient(self.kafka, self.names)
        try:
            for c in commands:
                client.send(c, wait=False)
        finally:
            client.close()

    def state(self, run_id: str) -> RunState | None:
        return StateReader(self.kafka, self.names).latest(run_id)

    def wait_state(self, run_id: str, predicate: Any, timeout: float = 30.0) -> RunState:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.state(run_id)
            if state is not None and predicate(state):
                return state
            time.sleep(0.2)
        raise TimeoutError(f"run {run_id} did not reach the expected state; last: {self.state(run_id)}")


def _wait_visible(kafka: KafkaSettings, topics: list[str], timeout: float = 20.0) -> None:
    """Until the broker's metadata lists every topic with a leader for each partition."""
    admin = AdminClient(kafka.client_config())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=5).topics
        if all(t in meta and meta[t].error is None and meta[t].partitions
               and all(p.leader >= 0 for p in meta[t].partitions.values()) for t in topics):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topics {topics} not visible in {timeout}s")


def waiting_run(run_id: str, call: str = "tool-call-031") -> list[CommandBase]:
    """create + propose a refund that needs approval (id approval-<call>), issued now (expires in 15 min)."""
    now = datetime.now(UTC)
    return [create(run=run_id, at=now), propose_refund(call, run=run_id, at=now)]
