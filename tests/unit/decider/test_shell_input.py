"""What the decider's shell refuses before a command can reach a run's state (issue 9 / 11).

Limits: a record over `max_record_bytes`, a text field over `max_text_chars`, a list over
`max_items` is dead-lettered with the reason; at the limits a command is decided. The
regression tests are named after what the fuzz found: a forged `timer.fire` from the commands
topic expired a live approval; key-mismatch dead letters lacked `dlq.app`; a newer schema
version read as a bare "unknown fingerprint".
"""

from __future__ import annotations

from datetime import timedelta

from runfacts.dev.crash.workload import Input, refund_story, valid
from runfacts.processors.decider.app import InputLimits
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor
from runfacts.schemas.models import new_command, payload_class
from runfacts.workers import input_limits

from .fuzz_support import NAMES, T0, Probe

LIMITS = InputLimits()
TIMER_ACTOR = Actor(subjectId="run-decider", roles=("decider",), authSource="decider-timer")


def _created() -> Probe:
    probe = Probe()
    return probe.given(probe.commands.create("r1"))


def _headers(probe: Probe) -> dict[str, str]:
    return {k: v.decode() for k, v in probe.driver.outputs(NAMES.dlq)[-1].headers}


def _with_refs(probe: Probe, refs: tuple[str, ...]) -> cmd.RecordReasoning:
    base = probe.commands.reasoning("r1")
    return base.model_copy(update={"payload": base.payload.model_copy(update={"evidenceRefs": refs})})


def test_report_is_decided_when_its_result_is_longer_than_max_text_chars() -> None:
    payload = payload_class(cmd.ReportToolCompleted)(toolCallId="c1", attempt=1, externalRequestId="e1",
                                                     resultRef="r1", resultHash="h",
                                                     result="x" * (LIMITS.max_text_chars * 5))
    completed = new_command(cmd.ReportToolCompleted, commandId="c", runId="r1", actor=TIMER_ACTOR, issuedAt=T0,
                            correlationId="r1", payload=payload)
    assert LIMITS.check(completed) is None  # a sealed 16 KiB result is ~22 KiB: the record limit bounds it
    long_ref = completed.model_copy(update={"payload": payload.model_copy(
        update={"resultRef": "r" * (LIMITS.max_text_chars + 1)})})
    assert LIMITS.check(long_ref) == (f"field payload.resultRef has {LIMITS.max_text_chars + 1} characters "
                                      f"(limit {LIMITS.max_text_chars})")


def test_command_is_dead_lettered_when_record_exceeds_max_record_bytes() -> None:
    probe = _created()
    before = probe.driver.read_store("runs")
    outcome = probe.feed(_with_refs(probe, ("r" * 4000,) * 20))
    assert outcome.kind == "dead_lettered" and outcome.reason.startswith("oversized: record of")
    assert probe.driver.read_store("runs") == before


def test_command_is_dead_lettered_when_a_text_field_exceeds_max_text_chars() -> None:
    probe = Probe()
    create = probe.commands.create("r1")
    big = create.model_copy(update={"payload": create.payload.model_copy(
        update={"goalSummary": "x" * (LIMITS.max_text_chars + 1)})})
    outcome = probe.feed(big)
    assert outcome.reason == f"oversized: field payload.goalSummary has {LIMITS.max_text_chars + 1} characters " \
                             f"(limit {LIMITS.max_text_chars})"
    assert probe.driver.read_store("runs") == {}
    assert _headers(probe)["dlq.schema"] == "runfacts.commands.CreateRun"


def test_command_is_dead_lettered_when_a_list_exceeds_max_items() -> None:
    probe = _created()
    outcome = probe.feed(_with_refs(probe, ("ref",) * (LIMITS.max_items + 1)))
    assert outcome.reason == f"oversized: field payload.evidenceRefs has {LIMITS.max_items + 1} items " \
                             f"(limit {LIMITS.max_items})"


def test_command_is_decided_when_fields_are_exactly_at_the_limits() -> None:
    probe = _created()
    outcome = probe.feed(_with_refs(probe, ("r" * LIMITS.max_text_chars,) * 8))
    assert (outcome.kind, outcome.event_types) == ("processed", ("reasoning.recorded",))


def test_limits_come_from_factory_parameters_when_given() -> None:
    assert input_limits("1000", "10") == InputLimits(max_record_bytes=1000, max_text_chars=10)
    assert input_limits() == LIMITS


def test_forged_timer_fire_is_dead_lettered_when_it_arrives_on_the_commands_topic() -> None:
    probe = Probe()
    c = probe.commands
    probe.given(*refund_story(c, "r1")[:3])  # an approval is open for 15 minutes
    later = T0 + timedelta(days=1)  # forward-dated, so the expiry check alone would let it through
    outcome = probe.feed(c.make(cmd.FireTimer, "r1", TIMER_ACTOR, timerId="approval_expiry:approval-call-r1",
                                kind="approval_expiry", targetId="approval-call-r1", dueAt=later))
    assert outcome.kind == "dead_lettered" and outcome.reason.startswith("timer.fire is internal")
    assert probe.feed(c.resume("r1", "call-r1")).event_types[0] == "approval.granted"


def test_key_mismatch_dead_letter_names_the_app_when_key_is_not_the_run_id() -> None:
    probe = Probe()
    record = valid(probe.commands.create("r1"))
    probe.feed(Input(b"r2", record.value, record.headers))
    headers = _headers(probe)
    assert headers["dlq.app"] == "fz-run-decider" and "is not the command's runId" in headers["dlq.error"]


def test_dead_letter_names_the_newer_schema_version_when_headers_carry_one() -> None:
    probe = Probe()
    record = valid(probe.commands.create("r1"))
    future = Input(record.key, record.value[:2] + b"\xff" * 8 + record.value[10:],
                   (("commandType", b"run.create"), ("schemaVersion", b"7")))
    outcome = probe.feed(future)
    assert "schemaVersion 7 is newer than this code knows (newest v1)" in outcome.reason
    assert _headers(probe)["dlq.schemaVersion"] == "7"


def test_dead_letters_name_the_schema_by_its_avro_full_name_whatever_the_reason() -> None:
    """Issue 15 item 12: a key mismatch said `CreateRun`, the codec `runfacts.commands.CreateRun`."""
    probe = Probe()
    record = valid(probe.commands.create("r1"))
    create = probe.commands.create("r2")
    oversized = create.model_copy(update={"payload": create.payload.model_copy(
        update={"goalSummary": "x" * (LIMITS.max_text_chars + 1)})})
    future = Input(record.key, record.value[:2] + b"\xff" * 8 + record.value[10:],
                   (("commandType", b"run.create"), ("schemaVersion", b"7")))
    schemas = {}
    for reason, item in (("key mismatch", Input(b"r9", record.value, record.headers)),
                         ("oversized", oversized), ("newer version", future)):
        assert probe.feed(item).kind == "dead_lettered", reason
        schemas[reason] = _headers(probe)["dlq.schema"]
    assert schemas == dict.fromkeys(schemas, "runfacts.commands.CreateRun")
