"""`runfacts dlq`: reading dead letters with their reasons, filters, and what a redrive would take."""

from __future__ import annotations

import pytest

from runfacts.logread import LogRecord
from runfacts.ops.dlq import parse_filters, read_letters, redrive_plan
from runfacts.schemas.errors import ConfigError, InvalidInput, RecordPosition

DLQ = "t.dlq"


def _letter(offset: int, error: str, source_offset: int = 7) -> LogRecord:
    bad = InvalidInput(error, position=RecordPosition("t.run.commands", 2, source_offset), schema="CreateRun",
                       version=1)
    headers = (("commandType", b"run.create"), *bad.headers(), ("dlq.app", b"t-run-decider"))
    return LogRecord(DLQ, 0, offset, b"run-1", b"\xc3\x01...", headers, 0)


def _marker(offset: int, of: int) -> LogRecord:
    return LogRecord(DLQ, 0, offset, b"run-1", None, (("dlq.redriven", f"{DLQ}[0]@{of}".encode()),
                                                      ("dlq.redrivenTo", b"t.run.commands")), 0)


def test_letters_carry_their_reasons_when_read_from_the_dead_letter_topic() -> None:
    [letter] = read_letters([_letter(0, "oversized: record of 70000 bytes")])
    assert letter.position == "t.dlq[0]@0" and letter.redriven_to == ""
    assert letter.reasons == {"topic": "t.run.commands", "partition": "2", "offset": "7", "schema": "CreateRun",
                              "schemaVersion": "1", "error": "oversized: record of 70000 bytes",
                              "app": "t-run-decider", "reason": ""}
    assert letter.original_headers == [("commandType", b"run.create")]


def test_markers_mark_their_letter_redriven_when_a_redrive_recorded_them() -> None:
    letters = read_letters([_letter(0, "oversized"), _letter(1, "unknown fingerprint"), _marker(2, of=0)])
    assert [(x.position, x.redriven_to) for x in letters] == [("t.dlq[0]@0", "t.run.commands"), ("t.dlq[0]@1", "")]


def test_redrive_plan_skips_redriven_letters_when_not_asked_again() -> None:
    letters = read_letters([_letter(0, "oversized: a"), _letter(1, "oversized: b"), _marker(2, of=0),
                            _letter(3, "unknown fingerprint")])
    oversized = parse_filters(["error=oversized"])
    assert [x.position for x in redrive_plan(letters, oversized)] == ["t.dlq[0]@1"]
    assert [x.position for x in redrive_plan(letters, oversized, again=True)] == ["t.dlq[0]@0", "t.dlq[0]@1"]
    assert [x.position for x in redrive_plan(letters, parse_filters(["dlq.offset=7", "schema=CreateRun"]))] == [
        "t.dlq[0]@1", "t.dlq[0]@3"]


def test_filter_is_refused_when_it_names_no_reason() -> None:
    with pytest.raises(ConfigError, match="--filter='colour=red'"):
        parse_filters(["colour=red"])
    with pytest.raises(ConfigError):
        parse_filters(["error"])


def test_filter_matches_the_typed_reason_when_the_refusal_has_one() -> None:
    signed = InvalidInput("source_key_retired: key cli-1 of 'cli' is retired", schema="CancelRun", version=1,
                          reason="source_key_retired", position=RecordPosition("t.run.commands", 0, 9))
    letters = read_letters([_letter(0, "oversized"), LogRecord(DLQ, 0, 1, b"run-1", b"\xc3\x01...",
                                                                (*signed.headers(), ("dlq.app", b"t-run-decider")), 0)])
    assert [x.position for x in redrive_plan(letters, parse_filters(["reason=source_key_retired"]))] == ["t.dlq[0]@1"]
    assert letters[1].reasons["reason"] == "source_key_retired" and letters[0].reasons["reason"] == ""
