"""Operator controls on the real broker (issue 35 item 3): `runfacts tools pause` -> a proposed call
of the paused capability is held (no dispatch, the run says why) -> `runfacts tools resume` -> it
executes exactly once. The real decider and dispatcher (`runfacts worker ...` subprocesses), the
CLI as a subprocess with an operator's and a support agent's tokens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ops_support import TOKENS, write_users
from tools_support import REPO, ToolStack

from runfacts.demo.stack import DemoOptions
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration
CAP = "billing.balance"


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolStack]:
    options = DemoOptions(prefix=f"tp-{uuid.uuid4().hex[:10]}", workdir=tmp_path_factory.mktemp("pause"),
                          partitions=2, kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
    stack = ToolStack(options)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def _cli(stack: ToolStack, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    users = write_users(stack.dir / "users.toml")
    env = {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": stack.options.kafka.bootstrap_servers,
           "RUNFACTS_KAFKA_TOPIC_PREFIX": stack.names.prefix, "RUNFACTS_USERS_FILE": str(users),
           "RUNFACTS_USER": user, "RUNFACTS_TOKEN": TOKENS[user], "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "runfacts.cli", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def _types(stack: ToolStack, run: str) -> list[str]:
    assert stack.log is not None
    return [e.eventType for e in stack.log.of(run)]


def test_paused_tool_is_held_visibly_then_runs_once_when_resumed(stack: ToolStack, tmp_path: Path) -> None:
    refused = _cli(stack, "alice", "tools", "pause", CAP, "--reason", "not mine")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "forbidden_role" in refused.stdout and "tool.pause needs the role operator" in refused.stdout

    paused = _cli(stack, "olga", "tools", "pause", CAP, "--reason", "ledger migration")
    assert paused.returncode == 0, paused.stdout + paused.stderr
    assert "tool.paused" in paused.stdout
    listed = _cli(stack, "olga", "tools", "list", "--json")
    assert json.loads(listed.stdout)[CAP]["pausedBy"] == "olga"
    time.sleep(0.5)  # the dispatcher's board follows the control topic (~0.1 s)

    run = f"run-held-{uuid.uuid4().hex[:6]}"
    stack.open_run(run)
    stack.propose(run, f"{run}-balance", CAP, {"account": "acct-9"}, risk="low")
    stack.wait(run, "the hold", "tool.call.held")
    time.sleep(2.0)  # the held call is looked at again every second: still not dispatched
    assert "tool.call.dispatching" not in _types(stack, run) and _types(stack, run).count("tool.call.held") == 1
    shown = _cli(stack, "olga", "view", run, "--role", "operator", "--json")
    assert json.loads(shown.stdout)["statusLine"] == f"Waiting: {CAP} paused by olga: ledger migration"

    resumed = _cli(stack, "olga", "tools", "resume", CAP, "--reason", "migration done")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    stack.wait(run, "the balance after the resume", "tool.call.completed")
    types = _types(stack, run)
    assert types.count("tool.call.dispatching") == 1 and types.count("tool.call.completed") == 1
    assert json.loads(_cli(stack, "olga", "tools", "list", "--json").stdout) == {}
