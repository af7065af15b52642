"""Catalog: fingerprints follow the Avro spec; models stay pure; every type is covered."""

from __future__ import annotations

from pathlib import Path

from fastavro.schema import to_parsing_canonical_form
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.schemas.catalog import default_catalog, fingerprint_of

SCHEMAS = Path(__file__).parents[3] / "schemas"
GOLDEN = Path(__file__).parents[2] / "contract" / "golden"
EMPTY = 0xC15D213AA4D7A795


def _spec_fingerprint(text: str) -> int:
    """CRC-64-AVRO exactly as the Avro specification writes it (independent of fastavro)."""
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (EMPTY & -(fp & 1))
        table.append(fp)
    fp = EMPTY
    for byte in text.encode():
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def test_fingerprint_matches_avro_spec_algorithm_when_computed_for_every_schema() -> None:
    for entry in default_catalog().entries:
        expected = _spec_fingerprint(to_parsing_canonical_form(entry.raw))
        assert entry.fingerprint == expected.to_bytes(8, "little"), entry.fullname


def test_fingerprint_matches_published_vector_when_schema_is_int() -> None:
    assert fingerprint_of("int") == (8247732601305521295).to_bytes(8, "little")  # type: ignore[arg-type]


def test_catalog_covers_every_semantics_event_when_loaded() -> None:
    types = set(default_catalog().by_type)
    required = {
        "run.created", "run.started", "run.paused", "run.resumed", "run.needs_review",
        "run.completed", "run.failed", "run.cancel_requested", "run.cancelled", "turn.started",
        "turn.completed", "reasoning.recorded", "approval.required", "approval.granted",
        "approval.rejected", "approval.expired", "approval.invalidated", "approval.consumed",
        "tool.call.proposed", "tool.call.authorized", "tool.call.dispatching",
        "tool.call.accepted", "tool.call.completed", "tool.call.failed",
        "tool.call.result_unknown", "tool.call.reconciliation_requested", "tool.call.reconciled",
        "verification.updated", "checkpoint.saved", "budget.debited", "budget.exceeded",
        "progress.updated", "feedback.recorded", "command.rejected", "run.create", "run.resume",
        "run.stop", "tool.call.retry", "run.cancel", "feedback.record"}
    assert required <= types


def test_schemas_check_command_passes_when_run_on_the_shipped_contract() -> None:
    result = CliRunner().invoke(app, ["schemas", "check", "--golden", str(GOLDEN)])
    assert result.exit_code == 0, result.output
    assert "every version readable by its current reader" in result.output
