"""The crash matrix's cluster rows (runfacts.dev.crash.rows, scenario "cluster") on the real
three-broker cluster of scripts/kafka-cluster.sh (fixture `kafka_cluster`).

Decider, dispatcher and projector run on topics with replication factor 3 and
min.insync.replicas 2 while brokers are killed, stopped, paused; the oracle judges the
topics, the provider's ledger has one refund per authorized call, the projector's audit chain
verifies, and nothing the producer had acknowledged is lost. One row (the events leader
SIGKILLed once) runs in the default suite; the others are slow (`make crash`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runfacts.dev.crash.kafka import Cluster
from runfacts.dev.crash.rows import ROWS, Row, run_row
from runfacts.dev.crash.stage import Lab

pytestmark = [pytest.mark.integration, pytest.mark.crash]
CLUSTER_ROWS = [r for r in ROWS if r.scenario == "cluster"]


def _param(row: Row) -> object:
    return pytest.param(row, id=row.key, marks=() if row.ci else (pytest.mark.slow,))


@pytest.mark.parametrize("row", [_param(r) for r in CLUSTER_ROWS])
def test_topics_equal_the_oracle_when_cluster_brokers_fail_under_the_workers(
        row: Row, kafka_cluster: Cluster, tmp_path: Path) -> None:
    result = run_row(row, Lab(kafka_cluster.bootstrap, tmp_path, runs=4, cluster_home=kafka_cluster.home))
    assert result.ok, f"{result.outcome}\n" + "\n".join(result.problems)
    n = result.numbers
    assert n["in"] == n["processed"] + n["rejected"] + n["dead_lettered"] + n["deduplicated"] > 0
    assert n["duplicate_events"] == 0 and n["duplicate_dead_letters"] == 0
    assert sorted(kafka_cluster.rss_mb()) == [1, 2, 3], "the row leaves every node running"


def test_one_ci_row_keeps_the_cluster_path_in_the_default_suite() -> None:
    assert [r.key for r in CLUSTER_ROWS if r.ci] == ["cluster-leader-kill"]
    assert {r.fault for r in CLUSTER_ROWS} == {"leader-kill", "controller-bounce", "two-down", "pause"}
