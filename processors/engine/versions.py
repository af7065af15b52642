"""Versions of the records the processors store (pure): a marker in the stored encoding and a
table of migrations, applied on read.

A stored record (a run's state in the decider's store and on the run-state topic, the
dispatcher's copy of it and its per-call progress) is a JSON object whose first key is
`stateFormat`: the version of its shape. A record without it was written before the marker
existed and is version 1 (every released unmarked shape, which the 1 -> 2 step reads). On read,
`Migrations.upgrade` takes the record from its version to the current one, one pure step at a
time (`steps[v]` turns a version-v dict into a version-(v+1) dict); a version newer than the
table knows is refused (`NewerStoredVersion`), never misread: the record was written by a newer
runfacts, so the fix is to upgrade this process, not to drop the record. Golden fixtures of every
released shape are in tests/contract/golden-state/ (tests/contract/test_golden_state.py reads them).

Adding a shape: bump `current`, add `steps[current - 1]`, add a fixture of the old shape.
`shape_of(model)` is a stored model's field set (names and types, nested models too): the
contract test keeps one per released version (golden-state/shapes.json) and fails when the code's
shape drifts from its version's, so a field is never added without a bump (the `evidence` field,
added at version 2 without one, is what that test is for).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic_core import from_json

from runfacts.schemas.errors import RunfactsError

FIELD = "stateFormat"
"""The marker: the first key of every stored JSON record (its shape's version)."""
UNMARKED = 1
"""The version of a record written before the marker existed."""

Step = Callable[[dict[str, Any]], dict[str, Any]]


class StoredVersionError(RunfactsError):
    """A stored record whose version this runfacts cannot read."""

    def __init__(self, kind: str, found: object, why: str) -> None:
        self.kind = kind
        self.found = found
        super().__init__(f"stored {kind} record has {FIELD}={found!r}: {why}")


class NewerStoredVersion(StoredVersionError):
    """Written by a newer runfacts (its shape is unknown here): upgrade this process."""


@dataclass(frozen=True)
class Migrations:
    """The migrations of one stored record kind: version -> the step to the next version."""

    kind: str
    current: int
    steps: Mapping[int, Step] = field(default_factory=dict)
    prefix: bytes = field(init=False, repr=False)
    """How a current-version record's bytes begin (the fast path skips the dict)."""

    def __post_init__(self) -> None:
        missing = [v for v in range(UNMARKED, self.current) if v not in self.steps]
        if missing:
            raise ValueError(f"{self.kind}: no migration from version(s) {missing} (current {self.current})")
        object.__setattr__(self, "prefix", b'{"' + FIELD.encode() + b'":' + str(self.current).encode() + b",")

    def is_current(self, raw: bytes) -> bool:
        """The bytes are a current-version record (they may be validated as they are)."""
        return raw.startswith(self.prefix)

    def upgrade(self, value: dict[str, Any]) -> dict[str, Any]:
        """The record as the current version (a new dict; `value` is not changed)."""
        if not isinstance(value, dict):
            raise StoredVersionError(self.kind, None, f"not a JSON object ({type(value).__name__})")
        version = value.get(FIELD, UNMARKED)
        if type(version) is not int or version < UNMARKED:
            raise StoredVersionError(self.kind, version, f"not a version (expected an integer "
                                                         f"{UNMARKED}..{self.current})")
        if version > self.current:
            raise NewerStoredVersion(self.kind, version, f"written by a newer runfacts (this one reads "
                                                         f"versions up to {self.current}); upgrade this "
                                                         "process before it reads the record")
        out = {k: v for k, v in value.items() if k != FIELD}
        for at in range(version, self.current):
            out = self.steps[at](out)
        return {FIELD: self.current, **out}

    def read_json(self, raw: bytes) -> dict[str, Any]:
        """`upgrade` of the JSON record in `raw`."""
        try:
            value = from_json(raw)
        except ValueError as exc:
            raise StoredVersionError(self.kind, None, f"not JSON ({exc})") from exc
        return self.upgrade(value)


def check_layout(kind: str, raw: bytes | None, current: int) -> int:
    """The version a binary store's version key holds (None: unmarked, version 1); refused when
    it is newer than `current` or not a version."""
    if raw is None:
        return UNMARKED
    try:
        version = int(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise StoredVersionError(kind, raw, "not a version (expected decimal digits)") from None
    if version > current:
        raise NewerStoredVersion(kind, version, f"written by a newer runfacts (this one reads versions up to "
                                                f"{current}); upgrade this process before it reads the store")
    if version < UNMARKED:
        raise StoredVersionError(kind, version, f"not a version (expected {UNMARKED}..{current})")
    return version


Shape = dict[str, dict[str, str]]
"""A stored model's shape: model name -> field name -> its type, for it and every nested model."""
_CLASS = re.compile(r"<class '(?:[\w.]+\.)?(\w+)'>")
_DOTTED = re.compile(r"\b(?:typing|datetime|[a-z_]+(?:\.[a-z_]+)+)\.(\w+)")


def shape_of(model: type[BaseModel]) -> Shape:
    """The field set of `model` as stored: every field's name and type (literal values included;
    docstrings and defaults left out), and the same for every model a field holds."""
    out: Shape = {}
    _shape(model, out)
    return dict(sorted(out.items()))


def _shape(model: type[BaseModel], out: Shape) -> None:
    if model.__name__ in out:
        return
    out[model.__name__] = fields = {}
    for name, info in model.model_fields.items():
        fields[name] = _DOTTED.sub(r"\1", _CLASS.sub(r"\1", repr(info.annotation)))
        for nested in _models(info.annotation):
            _shape(nested, out)


def _models(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models(arg)


def shape_drift(recorded: Shape, current: Shape) -> list[str]:
    """How `current` differs from `recorded`, one line per field added, removed or changed."""
    lines = []
    for model in sorted(set(recorded) | set(current)):
        before, now = recorded.get(model, {}), current.get(model, {})
        lines += [f"{model}.{f} added ({now[f]})" for f in now if f not in before]
        lines += [f"{model}.{f} removed" for f in before if f not in now]
        lines += [f"{model}.{f}: {before[f]} -> {now[f]}" for f in now if f in before and before[f] != now[f]]
    return lines
