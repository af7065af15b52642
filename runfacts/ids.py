"""The contract's limits on ids, references and amounts, shared by the decider and every client.

The Avro types say `string` and `long`; what a command may carry is narrower (docs/schemas.md,
"Ids, references and amounts"):
- **ids** (`runId`, `toolCallId`, `turnId`, `capabilityId`, `memoryId`, `feedbackId`,
  `reasoningObjectId`, `target*Id`): 1-200 characters of `[A-Za-z0-9._:-]`. An id is a Kafka
  key, a RocksDB key, part of a URL, a log line and of every id derived from it; plain ASCII
  cannot hide a NUL, a bidi override, a zero-width joiner or a Cyrillic look-alike of another
  run's id. 200 leaves room for a prefix and a UUID many times over, and for the ids derived
  from it under 256 (`approval-<toolCallId>`, `<toolCallId>-r<n>`, the client's command ids
  `<runId>:<20 hex>`).
- **derived ids** (`commandId`, `approvalId`, `correlationId`, `causationId`): the same
  alphabet, 1-256 characters.
- **references and names** (`*Ref`, `externalRequestId`, `argsHash`, `actionHash`,
  `statementHash`, `userId`, `subjectId`, `tenant`, `authSource`, roles, `scope*`, `evidence`):
  1-512 characters, NFC, no control, format (bidi, zero-width), surrogate, private-use or
  unassigned characters, no whitespace but the space, none at either end.
- **amounts**: every budget amount (`budget.debit`'s debits, `run.create`'s limits) >= 0.
An optional field is absent (null) or valid, never empty. One exception: an empty actor
`subjectId` or `authSource` is left to the policy, whose typed rejection `missing_actor` tells
the sender who is missing (and is counted as a policy denial). `violation(command)` names the first
field outside these limits; the decider dead-letters such a command (`dlq.reason`
`invalid_id` | `invalid_ref` | `negative_amount`), a client raises `ContractViolation` before
sending it. Pure (foundation: imports only `schemas`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any, NamedTuple, get_args

from pydantic import BaseModel

from runfacts.schemas.common import BudgetAmounts
from runfacts.schemas.errors import InvalidInput

__all__ = ["ContractViolation", "ID_ALPHABET", "MAX_DERIVED_ID_CHARS", "MAX_ID_CHARS", "MAX_REF_CHARS",
           "Violation", "check_command", "id_problem", "ref_problem", "violation"]

ID_ALPHABET = "A-Za-z0-9._:-"
"""The characters of a run id (and every id): ASCII letters and digits, `.`, `_`, `:`, `-`."""
MAX_ID_CHARS = 200
MAX_DERIVED_ID_CHARS = 256
MAX_REF_CHARS = 512
_ID = re.compile(f"[{ID_ALPHABET}]+")
_PRINTABLE_ASCII = re.compile(r"[!-~](?:[ -~]*[!-~])?")
_BANNED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

IDS = frozenset({"runId", "toolCallId", "turnId", "capabilityId", "memoryId", "feedbackId",
                 "reasoningObjectId", "targetTurnId", "targetToolCallId", "targetReasoningObjectId"})
DERIVED_IDS = frozenset({"commandId", "approvalId", "correlationId", "causationId"})
REFS = frozenset({"externalRequestId", "argsHash", "actionHash", "statementHash", "userId", "subjectId",
                  "tenant", "authSource", "roles", "scopeTenant", "scopeId", "evidence"})


class Violation(NamedTuple):
    """A field outside the contract's limits: its path, why, and the dead-letter reason code."""

    field: str
    why: str
    reason: str

    def __str__(self) -> str:
        return f"field {self.field}: {self.why}"


class ContractViolation(InvalidInput):
    """A command a client refuses to send (and the decider would dead-letter): names the field."""

    def __init__(self, command_type: str, found: Violation) -> None:
        self.violation = found
        super().__init__(f"{command_type}: {found}", schema=command_type, reason=found.reason)

    def _message(self) -> str:
        return f"{self.what} (refused before sending: the run decider would dead-letter it)"


def id_problem(value: str, max_chars: int = MAX_ID_CHARS) -> str | None:
    """Why `value` is not an id (None: it is one)."""
    if not value:
        return "is empty; an id needs 1 or more characters"
    if len(value) > max_chars:
        return f"has {len(value)} characters (limit {max_chars})"
    if _ID.fullmatch(value) is None:
        bad = next(c for c in value if _ID.fullmatch(c) is None)
        return f"holds {_show(bad)}; an id is {ID_ALPHABET} only (docs/schemas.md)"
    return None


def ref_problem(value: str) -> str | None:
    """Why `value` is not a reference or name (None: it is one)."""
    if not value:
        return "is empty"
    if len(value) > MAX_REF_CHARS:
        return f"has {len(value)} characters (limit {MAX_REF_CHARS})"
    if value.isascii():
        if _PRINTABLE_ASCII.fullmatch(value) is not None:
            return None  # the common case
        bad = next((c for c in value if not " " <= c <= "~"), None)
    elif not unicodedata.is_normalized("NFC", value):
        return "is not NFC-normalized (it would be a look-alike of its normalized form)"
    else:
        bad = next((c for c in value if _banned(c)), None)
    if bad is not None:
        return (f"holds {_show(bad)} (control, bidi, zero-width, unassigned characters and whitespace but "
                "the space are refused)")
    if value[0] == " " or value[-1] == " ":
        return "starts or ends with a space"
    return None


def _banned(c: str) -> bool:
    return unicodedata.category(c) in _BANNED_CATEGORIES or (c.isspace() and c != " ")


def _show(c: str) -> str:
    return f"U+{ord(c):04X} {unicodedata.name(c, '(unnamed)')}"


Rule = Callable[[str], str | None]
_RULES: dict[str, tuple[Rule, str]] = {
    **{name: (id_problem, "invalid_id") for name in IDS},
    **{name: (lambda v: id_problem(v, MAX_DERIVED_ID_CHARS), "invalid_id") for name in DERIVED_IDS},
    **{name: (ref_problem, "invalid_ref") for name in REFS},
}


def _ref_rule(name: str) -> tuple[Rule, str] | None:
    found = _RULES.get(name)
    if found is None and name.endswith("Ref"):
        return ref_problem, "invalid_ref"
    return found


def violation(command: BaseModel) -> Violation | None:
    """The first field of `command` outside the contract's limits (None: within them)."""
    if _fits(command):
        return None
    return next(_violations(command, ""), None)


def check_command(command: BaseModel) -> None:
    """Raise `ContractViolation` naming the first field outside the limits."""
    found = violation(command)
    if found is not None:
        raise ContractViolation(str(getattr(command, "commandType", type(command).__name__)), found)


_ID_FITS = re.compile(f"[{ID_ALPHABET}]{{1,{MAX_ID_CHARS}}}").fullmatch
_DERIVED_FITS = re.compile(f"[{ID_ALPHABET}]{{1,{MAX_DERIVED_ID_CHARS}}}").fullmatch
_REF_FITS = re.compile(f"[!-~](?:[ -~]{{0,{MAX_REF_CHARS - 2}}}[!-~])?").fullmatch
_AMOUNTS = "amounts"
POLICY_CHECKED = frozenset({"subjectId", "authSource"})
_PLANS: dict[type, tuple[Callable[[Any], tuple[Any, ...]], tuple[Any, ...]]] = {}


def _fits(value: BaseModel) -> bool:
    """True when nothing in `value` can be outside the limits (the fast pass of `violation`: per
    command class, every checked field's dotted path, read in one `attrgetter` call, and its check)."""
    plan = _PLANS.get(type(value))
    if plan is None:
        plan = _PLANS[type(value)] = _plan(type(value))
    get, checks = plan
    try:
        values = get(value)
    except AttributeError:  # an optional nested record is absent: let the full walk judge
        return False
    for item, check in zip(values, checks, strict=True):
        if item is None:
            continue
        if check is _AMOUNTS:
            if min(item.__dict__.values(), default=0) < 0:
                return False
        elif type(item) is str:
            if check(item) is None:
                return False
        else:
            for x in item:
                if type(x) is not str or check(x) is None:
                    return False
    return True


def _plan(cls: type) -> tuple[Callable[[Any], tuple[Any, ...]], tuple[Any, ...]]:
    fields = _paths(cls, "")
    paths = tuple(path for path, _ in fields)
    if len(paths) > 1:
        get: Callable[[Any], tuple[Any, ...]] = attrgetter(*paths)
    else:
        one = [attrgetter(p) for p in paths]
        get = lambda v: tuple(g(v) for g in one)  # noqa: E731
    return get, tuple(check for _, check in fields)


def _paths(cls: type, prefix: str) -> list[tuple[str, Any]]:
    """(dotted path, check) of every field of `cls` (nested records included) the limits cover."""
    found: list[tuple[str, Any]] = []
    for name, info in cls.model_fields.items():  # type: ignore[attr-defined]
        path, rule = prefix + name, _ref_rule(name)
        if rule is not None:
            found.append((path, _ID_FITS if name in IDS else _DERIVED_FITS if name in DERIVED_IDS else _ref_fits))
        elif _holds(info.annotation, BudgetAmounts):
            found.append((path, _AMOUNTS))
        else:
            nested = _model_of(info.annotation)
            if nested is not None:
                found += _paths(nested, path + ".")
    return found


def _model_of(annotation: Any) -> type | None:
    """The record class `annotation` names (or holds in a union), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_of, get_args(annotation)) if m is not None), None)


def _ref_fits(value: str) -> object | None:
    """Not None when `value` is a valid reference (printable ASCII fast, else the full rule)."""
    return _REF_FITS(value) or (None if ref_problem(value) is not None else True)


def _holds(annotation: Any, base: type) -> bool:
    """True when `annotation` is (a union or container of) a subclass of `base`."""
    if isinstance(annotation, type) and issubclass(annotation, base):
        return True
    return any(_holds(arg, base) for arg in get_args(annotation))


def _violations(value: BaseModel, path: str) -> Iterator[Violation]:
    if isinstance(value, BudgetAmounts):
        for name, amount in value.__dict__.items():
            if amount < 0:
                yield Violation(f"{path}.{name}", f"is {amount}; an amount is 0 or more", "negative_amount")
        return
    for name, item in value.__dict__.items():
        where = f"{path}.{name}" if path else name
        if isinstance(item, BaseModel):
            yield from _violations(item, where)
            continue
        rule = _ref_rule(name)
        if rule is None or item is None:
            continue
        check, reason = rule
        if item == "" and name in POLICY_CHECKED:
            continue  # the policy's missing_actor
        for i, text in _texts(item):
            why = check(text) if isinstance(text, str) else None
            if why is not None:
                yield Violation(where if i is None else f"{where}[{i}]", why, reason)


def _texts(item: Any) -> Iterator[tuple[int | None, Any]]:
    if isinstance(item, tuple | list):
        yield from enumerate(item)
    else:
        yield None, item
