"""The crash matrix (runfacts.dev.crash.rows) on real worker processes and the real broker.

Each row kills a worker at its point (or from outside), restarts it, drives the scenario to
the end and asks the oracle: events = the pure fold of the committed commands log (no
duplicate, no gap under exactly-once), last state = the fold's state, dead letters and
counts balance, one refund per authorized call in the provider's ledger. The CI subset runs
by default; the rest is marked slow (`pytest -m slow tests/crash`, or `runfacts dev crash`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runfacts.dev.crash.rows import ALO, ROWS, Row, run_row
from runfacts.dev.crash.stage import Lab

pytestmark = [pytest.mark.integration, pytest.mark.crash]
RUNNABLE = [r for r in ROWS if r.scenario not in ("n/a", "cluster")]  # cluster rows: test_cluster_crash.py


def _param(row: Row) -> object:
    return pytest.param(row, id=row.key, marks=() if row.ci else (pytest.mark.slow,))


@pytest.mark.parametrize("row", [_param(r) for r in RUNNABLE])
def test_topics_equal_the_oracle_when_a_worker_is_killed_at_the_row_point(
        row: Row, kafka_bootstrap: str, tmp_path: Path) -> None:
    clients = _kafka_client_threads()
    result = run_row(row, Lab(kafka_bootstrap, tmp_path, runs=4))
    assert result.ok, f"{result.outcome}\n" + "\n".join(result.problems)
    assert _kafka_client_threads() == clients, "the row left a Kafka client open"
    n = result.numbers
    assert n["in"] == n["processed"] + n["rejected"] + n["dead_lettered"] + n["deduplicated"] > 0
    if row.guarantee == ALO and row.scenario == "between":
        assert n["duplicate_events"] > 0, "at-least-once re-publishes the uncommitted batch's events"
    if row.guarantee != ALO:
        assert n["duplicate_events"] == 0 and n["duplicate_dead_letters"] == 0


def test_rows_that_cannot_exist_say_why_when_listed() -> None:
    impossible = [r for r in ROWS if r.scenario == "n/a"]
    assert impossible and all("never writes the store before producing" in r.reason for r in impossible)
    assert {r.guarantee for r in impossible} == {"exactly_once", "at_least_once"}


def _kafka_client_threads() -> list[str]:
    """Threads of librdkafka instances alive in this process (`rdk:main`, `rdk:broker…`)."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if name.startswith("rdk:"):
            names.append(name)
    return sorted(names)


@pytest.mark.slow
def test_bounce_row_leaves_no_kafka_client_open_when_it_ends(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Every client the row opens (topics, inputs, oracle snapshots, the audit replay's producer)
    is closed when the row ends: none keeps reconnecting to the row's stopped broker."""
    row = next(r for r in ROWS if r.scenario == "bounce")
    before = _kafka_client_threads()
    result = run_row(row, Lab(kafka_bootstrap, tmp_path, runs=2))
    assert result.ok, f"{result.outcome}\n" + "\n".join(result.problems)
    assert _kafka_client_threads() == before
