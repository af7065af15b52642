"""A run's partial output, the pure parts (runfacts.client.output): the chunk record round-trips
and names its format; a reader admits each (stream, seq) once and in increasing order, so a
writer retried from the start shows nothing twice; only the run's agent service may write it."""

from __future__ import annotations

from runfacts.client.output import Chunk, Seen, decode, may_write
from runfacts.schemas.common import Actor


def test_a_chunk_round_trips_and_a_record_of_another_format_is_skipped() -> None:
    chunk = Chunk("run-1", "answer", 3, "tok", False, None, "agent-harness", "2026-12-06T08:00:00+00:00")

    assert decode(chunk.encode()) == chunk and chunk.id == "run-1/answer/3"
    assert decode(b'{"v": 2, "runId": "run-1"}') is None and decode(b"not json") is None and decode(None) is None


def test_seen_admits_each_stream_and_seq_once_when_a_retry_writes_them_again() -> None:
    seen = Seen()
    first = [("answer", s) for s in range(4)]  # the writer died after seq 3
    retry = [("answer", s) for s in range(7)]  # started over from 0
    other = [("step-2", 0)]

    admitted = [c for c in first + other + retry if seen.admit(*c)]

    assert admitted == [*first, *other, ("answer", 4), ("answer", 5), ("answer", 6)]


def test_only_an_agent_service_of_the_runs_tenant_may_write_its_output() -> None:
    agent = Actor(subjectId="refund-agent", roles=("agent",), authSource="agent-harness")
    tenant_agent = Actor(subjectId="a", roles=("agent",), tenant="acme", authSource="agent-harness")

    assert may_write(agent, "acme") is None and may_write(tenant_agent, "acme") is None
    assert "role agent" in (may_write(Actor(subjectId="alice", roles=("support_agent",), tenant="acme",
                                            authSource="dashboard"), "acme") or "")
    assert "browser" in (may_write(Actor(subjectId="m", roles=("agent",), authSource="dashboard"),
                                   None) or "")
    assert "tenant acme" in (may_write(tenant_agent, "globex") or "")
