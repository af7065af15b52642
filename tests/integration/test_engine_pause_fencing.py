"""On the real broker: an engine process paused (SIGSTOP) with a transaction open past its
transaction timeout is told that when it resumes and finds itself fenced, not "another process
started with this instance id" (issue 35): the engine diagnoses before it aborts."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_support import counter_topics, keyed, produce

from runfacts.dev.crash.procs import Worker

pytestmark = pytest.mark.integration

TXN_TIMEOUT_MS = 1000
BROKER_CHECK_S = 10  # transaction.abort.timed.out.transaction.cleanup.interval.ms (the broker's default)


def test_paused_decider_is_told_its_transaction_timed_out_when_fenced_after_the_pause(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    topics = counter_topics(kafka_bootstrap, "pause", unique, partitions=1)
    worker = Worker("paused", "runfacts.dev.apps:counter_app", {"name": f"pause-{unique}", "source": topics[0],
                    "output": topics[1], "dead_letter_topic": topics[2]}, kafka_bootstrap, tmp_path,
                    env={"RUNFACTS_TRANSACTION_TIMEOUT_MS": str(TXN_TIMEOUT_MS)})
    release = tmp_path / "release"
    worker.start("engine.in_transaction", hold_until=str(release))
    try:
        produce(kafka_bootstrap, topics[0], keyed(5))
        stopped = worker.pause_in_transaction(release, TXN_TIMEOUT_MS / 1000 + BROKER_CHECK_S + 1, timeout_s=90)
        code = worker.wait(60)
    finally:
        worker.kill()
    text = worker.log().read_text(errors="replace")

    assert stopped > TXN_TIMEOUT_MS / 1000 and code not in (None, 0), text[-2000:]
    assert "past its transaction timeout (RUNFACTS_TRANSACTION_TIMEOUT_MS=1000)" in text, text[-2000:]
    assert "another process started with this instance id" not in text
    assert not (tmp_path / "state-paused" / "fencings").exists()  # not counted towards two live instances
