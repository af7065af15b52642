"""The engine as a real subprocess worker: SIGTERM stops it cleanly, kill -9 loses nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from engine_support import check_exactly_once, create_topics, expected, keyed, outputs, produce

from runfacts.crashpoints import arm

pytestmark = pytest.mark.integration


def spawn(bootstrap: str, unique: str, state: Path, guarantee: str, log: Path,
          **env: str) -> subprocess.Popen:
    params = [f"name=wk-{unique}", f"source=wk-in-{unique}", f"output=wk-out-{unique}",
              f"dead_letter_topic=wk-dlq-{unique}"]
    args = [sys.executable, "-m", "runfacts.processors.engine.worker",
            "--app", "runfacts.dev.apps:counter_app"]
    for p in params:
        args += ["--param", p]
    environment = {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                   "RUNFACTS_STATE_DIR": str(state), "RUNFACTS_INSTANCE_ID": "w1",
                   "RUNFACTS_GUARANTEE": guarantee, "RUNFACTS_COMMIT_EVERY": "100",
                   "RUNFACTS_CONSUME_BATCH": "50",
                   # static membership: the restarted worker replaces the killed one at once
                   # instead of waiting out the dead member's session timeout
                   "RUNFACTS_CONSUMER": f'{{"group.instance.id": "wk-{unique}"}}', **env}
    with log.open("w") as sink:
        return subprocess.Popen(args, env=environment, stdout=subprocess.DEVNULL, stderr=sink)


@pytest.mark.parametrize("guarantee, point, recovery", [
    ("exactly_once", "engine.after_commit_before_store_write", "restored"),
    ("exactly_once", "engine.after_produce_before_commit", "assigned partitions"),
    ("at_least_once", "engine.after_store_write_before_commit", "beyond the group offset"),
])
def test_restarted_worker_outputs_each_count_once_when_killed_at_crash_point(
        kafka_bootstrap: str, unique: str, tmp_path: Path, guarantee: str, point: str,
        recovery: str) -> None:
    out = f"wk-out-{unique}"
    create_topics(kafka_bootstrap, [f"wk-in-{unique}", out, f"wk-dlq-{unique}"])
    produce(kafka_bootstrap, f"wk-in-{unique}", keyed(1000))
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    crashed = spawn(kafka_bootstrap, unique, tmp_path, guarantee, first_log, **arm(point, after=3))
    assert crashed.wait(60) == -signal.SIGKILL, first_log.read_text()

    worker = spawn(kafka_bootstrap, unique, tmp_path, guarantee, second_log)
    try:
        check = outputs if guarantee == "exactly_once" else (
            lambda b, t: outputs(b, t, committed=False))
        deadline_ok = _wait_outputs(lambda: check(kafka_bootstrap, out), 1000)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, second_log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
    assert deadline_ok
    assert recovery in second_log.read_text()
    check_exactly_once(check(kafka_bootstrap, out), expected(1000))


def _wait_outputs(read, count: int, timeout: float = 60.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(read()) >= count:
            return True
        time.sleep(0.3)
    return False
