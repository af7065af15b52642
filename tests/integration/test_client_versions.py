"""The decider publishes its current RunVersions on `<prefix>.decider.versions` and a client
connecting afterwards creates its runs on them: no RUNFACTS_RUN_VERSIONS on the client side."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from client_support import AgentStack

from runfacts.client import CommandRejected
from runfacts.connectors.versions import published_versions
from runfacts.demo.stack import DemoOptions
from runfacts.processors.decider.context import DEFAULT_VERSIONS
from runfacts.schemas.common import RunVersions
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration
CANARY = RunVersions(stateSchema="1", modelRoute="gpt-canary", toolManifest="tm-7", policy="p-3")


@pytest.fixture
def topics_only(kafka_bootstrap: str, tmp_path: Path) -> Iterator[AgentStack]:
    options = DemoOptions(prefix=f"dv-{uuid.uuid4().hex[:10]}", workdir=tmp_path, partitions=1,
                          kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
    stack = AgentStack(options)
    stack.dir.mkdir(parents=True, exist_ok=True)
    try:
        stack._topics()  # noqa: SLF001
        yield stack
    finally:
        stack.stop()


def wait_published(stack: AgentStack, timeout: float = 90) -> RunVersions:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = published_versions(stack.options.kafka.client_config(), stack.names)
        if found is not None:
            return found
        assert stack.wait_exit("decider", 0.5) is None, (stack.dir / "decider.log").read_text()[-3000:]
    raise AssertionError(f"the decider published no versions within {timeout}s")


def test_a_client_creates_runs_on_the_versions_the_decider_published(
        topics_only: AgentStack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    stack = topics_only
    monkeypatch.delenv("RUNFACTS_RUN_VERSIONS", raising=False)
    with caplog.at_level(logging.INFO, logger="runfacts.client"):
        early = stack.client()  # before the decider started: the topic is empty
    try:
        assert early.versions == DEFAULT_VERSIONS
        assert any(stack.names.decider_versions in r.getMessage() and "packaged default" in r.getMessage()
                   for r in caplog.records)
    finally:
        early.close()
    stack._spawn_worker("decider", ["--versions", CANARY.model_dump_json()])  # noqa: SLF001
    assert wait_published(stack) == CANARY
    rf = stack.client()
    try:
        assert rf.versions == CANARY
        run = rf.start_run(goal="ticket:T-8001", summary="Canary", user_id="customer-42", run_id="dv-T-8001")
        assert run.version is not None and rf.state(run.id).versions == CANARY
        stale = rf.versions
        rf.versions = DEFAULT_VERSIONS  # what a client without the published versions would send
        with pytest.raises(CommandRejected) as rejected:
            rf.start_run(goal="ticket:T-8002", summary="Stale", user_id="customer-42", run_id="dv-T-8002")
        assert rejected.value.reason == "incompatible_versions"
        rf.versions = stale
    finally:
        rf.close()
