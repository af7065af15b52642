"""Protecting and revealing the personal fields of whole records, pure (paths from the schema).

- `protect(command, source)`: a copy of a command whose `"pii": true` fields are protected:
  identities (userId, subjectId) become pseudonyms, free text is sealed under the data key of
  the record's data subject: the run's user for `run.create` (its userId), else `subject`
  when given (a pseudonym or a plain id, e.g. the run's userId), else the actor.
  Protected values pass unchanged (a re-sent command is byte-identical); empty strings and
  nulls stay as they are. Ids, hashes and every other field stay clear.
- `reveal_dict(values, schema, view)`: a copy of a record's dict with every personal field
  revealed through `envelope.reveal` (the plain value or a marker).
The key source (`KeySource`: pseudonyms and data keys, creating a subject's key when it has
none) and the nonces come in as arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from runfacts.privacy.envelope import PSEUDONYM_PREFIX, KeyView, is_protected, ref_of, reveal, seal
from runfacts.schemas.pii import pii_paths

IDENTITY_FIELDS = frozenset({"userId", "subjectId"})
M = TypeVar("M", bound=BaseModel)


class KeySource(Protocol):
    """Where a writer gets pseudonyms and data keys (the key store, or a table in tests)."""

    def pseudonym(self, subject: str) -> str: ...

    def data_key(self, ref: str) -> tuple[str, bytes]: ...


def protect(model: M, source: KeySource, nonce: Callable[[], bytes], subject: str | None = None) -> M:
    """A copy of `model` (a command) with its personal fields protected (see module doc)."""
    paths = pii_paths(model)
    if not paths:
        return model
    values = model.model_dump()
    origin = str(values.get("commandId") or values.get("eventId") or "")
    ref = _subject_ref(values, source, subject)
    for path in paths:
        _apply(values, path.split("."), path, lambda v, p: _protect_one(v, p, ref, origin, source, nonce))
    return type(model).model_validate(values)


def _subject_ref(values: dict[str, Any], source: KeySource, subject: str | None) -> str:
    if values.get("commandType") == "run.create":
        subject = values["payload"]["userId"]
    elif subject is None:
        subject = (values.get("actor") or {}).get("subjectId") or ""
    token = subject if subject.startswith(PSEUDONYM_PREFIX) else source.pseudonym(subject)
    ref = ref_of(token)
    assert ref is not None  # a pseudonym from the source always names a ref
    return ref


def _protect_one(value: Any, path: str, ref: str, origin: str, source: KeySource,
                 nonce: Callable[[], bytes]) -> Any:
    if not isinstance(value, str) or not value or is_protected(value):
        return value
    if path.rsplit(".", 1)[-1] in IDENTITY_FIELDS:
        return source.pseudonym(value)
    dek, secret = source.data_key(ref)
    return seal(value, ref, dek, secret, origin, field_name(path), nonce())


def reveal_dict(values: dict[str, Any], schema: str, view: KeyView) -> dict[str, Any]:
    """A copy of a record's values (`model_dump()` or JSON) with its personal fields revealed."""
    out = _copy(values)
    for path in pii_paths(schema):
        _apply(out, path.split("."), path, lambda v, p: reveal(v, field_name(p), view))
    return out


COPIED_AS = {"message": "detail"}
"""Fields the decider copies under another name: `tool.call.report_failed`'s `message` becomes
`tool.call.failed`'s `detail`, so both bind to `detail`."""


def field_name(path: str) -> str:
    """What a sealed value is bound to: its field's name (`payload.goalSummary` -> `goalSummary`),
    so the decider's copies (command -> event -> state) stay readable and a move to another field
    does not (`COPIED_AS` names the one copy under another name)."""
    name = path.rsplit(".", 1)[-1].removesuffix("[]")
    return COPIED_AS.get(name, name)


def _copy(values: Any) -> Any:
    if isinstance(values, dict):
        return {k: _copy(v) for k, v in values.items()}
    if isinstance(values, list | tuple):
        return type(values)(_copy(v) for v in values)
    return values


def _apply(values: Any, steps: list[str], path: str, change: Callable[[Any, str], Any]) -> None:
    """Replace the value(s) at `steps` with `change(value, path)`; absent or null parts are skipped."""
    if not isinstance(values, dict):
        return
    head, rest = steps[0], steps[1:]
    name = head[:-2] if head.endswith("[]") else head
    if name not in values or values[name] is None:
        return
    if head.endswith("[]"):
        for item in values[name]:
            _apply(item, rest, path, change)
    elif rest:
        _apply(values[name], rest, path, change)
    elif isinstance(values[name], list | tuple):
        values[name] = type(values[name])(change(v, path) for v in values[name])
    else:
        values[name] = change(values[name], path)
