"""Personal-data paths come from the schema; redaction masks exactly those fields."""

from __future__ import annotations

import pytest

from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.codec import _classes
from runfacts.schemas.commands import CreateRun
from runfacts.schemas.events import RunCreated
from runfacts.schemas.pii import MASK, pii_paths, redact
from runfacts.schemas.spec.samples import sample

CATALOG = default_catalog()
CURRENT = sorted(CATALOG.current.values(), key=lambda e: e.fullname)


def test_pii_paths_lists_personal_fields_when_asked_for_run_created() -> None:
    assert pii_paths("run.created") == (
        "payload.goalSummary", "payload.userId", "payload.actor.subjectId")
    assert pii_paths(RunCreated) == pii_paths("runfacts.events.RunCreated")


def test_pii_paths_include_envelope_actor_when_asked_for_a_command() -> None:
    assert pii_paths(CreateRun) == (
        "actor.subjectId", "payload.goalSummary", "payload.userId")


def test_pii_paths_is_empty_when_type_carries_no_personal_data() -> None:
    assert pii_paths("tool.call.dispatching") == ()


def test_pii_paths_raises_key_error_when_type_is_unknown() -> None:
    with pytest.raises(KeyError, match="no schema named 'nope'"):
        pii_paths("nope")


@pytest.mark.parametrize("entry", CURRENT, ids=lambda e: e.type_name)
def test_redact_masks_exactly_the_pii_paths_when_applied_to_any_type(entry) -> None:
    model = _classes()[entry.type_name].model_validate(sample(entry))
    redacted = redact(model)
    before, after = model.model_dump(), redacted.model_dump()
    paths = pii_paths(model)
    for path in paths:
        assert _get(after, path) == MASK, path
    for path in paths:
        _set(before, path, MASK)
    assert before == after


def _get(values: dict, path: str) -> object:
    for step in path.split("."):
        values = values[step]
    return values


def _set(values: dict, path: str, value: object) -> None:
    *head, last = path.split(".")
    for step in head:
        values = values[step]
    values[last] = value
