"""A real stack for the client's tests: topics under a fresh prefix, the payment simulator,
the run decider and the dispatcher as `runfacts worker` subprocesses (the demo's stack, without
its in-process relay and without arming a crash unless asked)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from runfacts.client import Approval, ClientSettings, Runfacts, UiSettings
from runfacts.demo.stack import DemoOptions, DemoStack, demo_manifest
from runfacts.settings import KafkaSettings


class AgentStack(DemoStack):
    """Decider + dispatcher + provider; the agent under test talks through runfacts.client."""

    def start(self, crash_at: str = "", memory: bool = False) -> None:  # type: ignore[override]
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "capabilities.toml").write_text(demo_manifest(self.options.approval_ttl_ms))
        self._topics()
        self.provider_url = self._start_provider()
        self._spawn_worker("decider", ["--capabilities", str(self.dir / "capabilities.toml")],
                           **self.options.signing_env)
        self.start_dispatcher(crash_at=crash_at)
        if memory:  # after the decider is up: on two loaded cores a third worker's start delays it
            self.wait_log("decider.log", "assigned partitions")
            self.start_memory_projector()

    def wait_log(self, log: str, text: str, timeout: float = 120) -> None:
        """Wait until a worker's log shows `text` (e.g. its partitions assigned)."""
        deadline = time.monotonic() + timeout
        while text not in (self.dir / log).read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise AssertionError(f"{log} shows no {text!r} within {timeout}s")
            time.sleep(0.2)

    args_db: str = ""
    """The dispatcher's argument store when not the harness's SQLite file (a postgresql:// URL)."""

    @property
    def args_store(self) -> Path:
        return self.dir / "harness.db"

    def dispatcher_args_store(self) -> str:
        return self.args_db or str(self.args_store)

    def client(self, **overrides: object) -> Runfacts:
        """The agent's client on this stack (approvals signed with the decider's keyring)."""
        settings = ClientSettings(ui=UiSettings(signing_env=self.options.signing_env))
        options: dict[str, object] = {"args_store": self.args_store, "settings": settings, **overrides}
        return Runfacts.connect(kafka=self.options.kafka, prefix=self.names.prefix, **options)  # type: ignore[arg-type]

    def env(self) -> dict[str, str]:
        """The environment an agent subprocess needs to reach this stack."""
        return {"RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": self.options.kafka.bootstrap_servers,
                "RUNFACTS_KAFKA_TOPIC_PREFIX": self.names.prefix, "RUNFACTS_ARGS_STORE": str(self.args_store),
                **self.options.signing_env}


@contextmanager
def agent_stack(bootstrap: str, workdir: Path, approval_ttl_ms: int = 5_000,
                crash_at: str = "", args_db: str = "", memory: bool = False) -> Iterator[AgentStack]:
    """A running AgentStack; `memory`: with the memory projector (what `rf.memory` reads)."""
    options = DemoOptions(prefix=f"cl-{uuid.uuid4().hex[:10]}", workdir=workdir, partitions=2,
                          approval_ttl_ms=approval_ttl_ms, kafka=KafkaSettings(bootstrap_servers=bootstrap))
    stack = AgentStack(options)
    stack.args_db = args_db
    try:
        stack.start(crash_at, memory)
        yield stack
    finally:
        stack.stop()


def approval_of(rf: Runfacts, run_id: str, timeout: float = 90) -> Approval:
    """The run's pending approval as a UI lists it, once the decider asked for it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [a for a in rf.approvals(role="support_agent") if a.run_id == run_id]
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no pending approval for {run_id} within {timeout}s")


def refunds_of(stack: AgentStack, order: str) -> list[dict[str, Any]]:
    """The provider's ledger entries of one order."""
    return [r for r in stack.ledger() if r["orderId"] == order]


def load_example(path: Path) -> ModuleType:
    """An examples/ script imported as a module (its `if __name__ == "__main__"` part not run)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bridge_fixtures(name: str, approval_ttl_ms: int = 4_000) -> tuple[Any, Any]:
    """A module's `stack` (a real stack with a short approval window for the expiry tests) and
    `rf` (the agent's client on it) fixtures, as the framework bridges' tests use them:
    `stack, rf = bridge_fixtures("langgraph")` at module level."""

    @pytest.fixture(scope="module", name="stack")
    def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentStack]:
        with agent_stack(kafka_bootstrap, tmp_path_factory.mktemp(name), approval_ttl_ms=approval_ttl_ms) as running:
            yield running

    @pytest.fixture(scope="module", name="rf")
    def rf(stack: AgentStack) -> Iterator[Runfacts]:
        client = stack.client()
        yield client
        client.close()

    return stack, rf


def killed_while_waiting_then_resumed(stack: AgentStack, rf: Runfacts, example: Path, run_id: str, order: str,
                                      start: list[str], resume: list[str], env: dict[str, str],
                                      waiting: Callable[[subprocess.Popen[str]], bool]) -> str:
    """The story every bridge's example holds: the agent asks for an approval and waits; it is
    SIGKILLed; the approval is given while it is dead; the restarted agent (`resume` arguments)
    resumes and refunds exactly once. `waiting(first)` is true once the agent saved what it needs
    to resume. Returns the restarted agent's stdout."""
    env = {**os.environ, **stack.env(), **env}

    def agent(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, str(example), *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    first = agent(*start)
    approval = approval_of(rf, run_id)
    deadline = time.monotonic() + 30
    while not waiting(first) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    assert first.returncode == -signal.SIGKILL
    assert refunds_of(stack, order) == []
    rf.decide(approval, "approve", approver="alice")  # approved while the agent is dead
    second = agent(*resume)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err[-3000:]
    [refund] = refunds_of(stack, order)  # exactly one side effect
    assert refund["refundId"] in out
    assert rf.state(run_id).status == "completed"
    return out


REPO = Path(__file__).resolve().parents[1]


def docs_code_not_in_example(section: str, example: str) -> tuple[int, list[str]]:
    """(how many ```python blocks docs/integrations.md's `## <section>` shows, those that are not
    verbatim in examples/<example>): the docs show only code the tested example runs."""
    text = (REPO / "docs" / "integrations.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0], flags=re.S)
    code = (REPO / "examples" / example).read_text()
    return len(blocks), [b for b in blocks if b not in code]
