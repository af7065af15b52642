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
        assert all(v == MASK for v in _get(after, path.split("."))), path
    for path in paths:
        _set(before, path.split("."), MASK)
    assert before == after


def _get(values: object, steps: list[str]) -> list[object]:
    """The values at a pii path (a `name[]` step walks every item of an array)."""
    if not steps:
        return [values]
    step, rest = steps[0], steps[1:]
    if step.endswith("[]"):
        return [v for item in values[step[:-2]] for v in _get(item, rest)]  # type: ignore[index]
    return _get(values[step], rest)  # type: ignore[index]


def _set(values: object, steps: list[str], value: object) -> None:
    step, rest = steps[0], steps[1:]
    if step.endswith("[]"):
        for item in values[step[:-2]]:  # type: ignore[index]
            _set(item, rest, value)
    elif rest:
        _set(values[step], rest, value)  # type: ignore[index]
    else:
        values[step] = value  # type: ignore[index]
