"""`runfacts worker dispatcher --tools` as a real subprocess: no payment key unless the payment
tool is served (issue 15 item 10); the default registry still needs it and says so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from tools_support import BILLING, REPO

from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, delete_topics, runfacts_topics

pytestmark = pytest.mark.integration


def _dispatcher(tmp_path: Path, bootstrap: str, prefix: str, *tools: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNFACTS_PAYMENT")}
    env.update(RUNFACTS_KAFKA_BOOTSTRAP_SERVERS=bootstrap, RUNFACTS_STATE_DIR=str(tmp_path / "state"),
               PYTHONPATH=str(REPO), BILLING_LEDGER=str(tmp_path / "ledger.db"))
    args = [sys.executable, "-m", "runfacts.cli", "worker", "dispatcher", "--prefix", prefix,
            "--args-store", str(tmp_path / "args.db"), *tools]
    return subprocess.Popen(args, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)


def test_dispatcher_runs_without_payment_key_when_it_serves_no_payment_tool(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    names = TopicNames(f"ts-{uuid.uuid4().hex[:8]}")
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    apply_topics(kafka, runfacts_topics(names, 1))
    proc = _dispatcher(tmp_path, kafka_bootstrap, names.prefix, "--tools", BILLING)
    try:
        assert proc.stderr is not None
        line = ""
        deadline = time.monotonic() + 60
        while "serving" not in line and time.monotonic() < deadline and proc.poll() is None:
            line = proc.stderr.readline()
        assert "serving billing.balance, billing.credit" in line, line
        time.sleep(3)
        assert proc.poll() is None, "the dispatcher stopped without a payment key"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        delete_topics(kafka, [s.name for s in runfacts_topics(names, 1)])


def _worker(tmp_path: Path, bootstrap: str, *params: str) -> subprocess.CompletedProcess[str]:
    """The worker entry point itself (`runfacts worker` passes its exit code on once issue 15
    item 1 lands; this entry point already does)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNFACTS_PAYMENT")}
    env.update(RUNFACTS_KAFKA_BOOTSTRAP_SERVERS=bootstrap, RUNFACTS_STATE_DIR=str(tmp_path / "state"),
               PYTHONPATH=str(REPO))
    args = [sys.executable, "-m", "runfacts.processors.engine.worker", "--app", "runfacts.workers:dispatcher",
            "--param", "prefix=ts-none", "--param", f"args_store={tmp_path / 'args.db'}"]
    for param in params:
        args += ["--param", param]
    return subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)


def test_dispatcher_refuses_to_start_naming_the_payment_key_when_it_serves_the_refund(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    proc = _dispatcher(tmp_path, kafka_bootstrap, f"ts-{uuid.uuid4().hex[:8]}")  # the default registry
    _, err = proc.communicate(timeout=60)
    assert "setting RUNFACTS_PAYMENT_API_KEY=None: set it, or RUNFACTS_PAYMENT_API_KEY_FILE" in err
    assert "starts as incarnation" not in err
    done = _worker(tmp_path, kafka_bootstrap)
    assert done.returncode == 2 and "RUNFACTS_PAYMENT_API_KEY" in done.stderr


def test_dispatcher_exits_2_naming_the_option_when_the_registry_cannot_be_found(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    done = _worker(tmp_path, kafka_bootstrap, "tools=examples.nope:registry")
    assert done.returncode == 2, done.stderr
    assert "--tools='examples.nope:registry'" in done.stderr and "cannot import examples.nope" in done.stderr
