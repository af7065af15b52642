"""A compensation's arguments, derived from the original call's arguments and result (pure).

`derive(compensation, display, result)` evaluates a manifest's `compensation.arguments`
(`args.<argument>`: the original call's argument as its validated display shows it, a clear,
uncut value; `result.<field>[.<field>...]`: a field of the original call's JSON result) into
the compensating call's arguments, or says which source cannot be read and why. The decider
derives them when the original call completes (`compensation.planned`), while its result is on
hand; the arguments travel inline in the compensating call's `argsRef` (`inline_ref`), since
the decider writes no argument store: the dispatcher reads them back with `inline_arguments`
and checks them against the call's argsHash like stored ones.
"""

from __future__ import annotations

import json
from typing import Any

from runfacts.processors.policy.capabilities import Compensation
from runfacts.processors.policy.retry import args_hash, canonical_json
from runfacts.schemas.common import ArgDisplay

INLINE = "inline:"
"""The `argsRef` prefix of arguments carried in the reference itself (a compensating call's)."""
_MISSING = object()


class Underivable(ValueError):
    """A compensation argument whose source cannot be read (the message names it and why)."""


def derive(compensation: Compensation, display: ArgDisplay | None, result: str | None) -> str:
    """Canonical JSON of the compensating call's arguments; `Underivable` naming the first
    source that cannot be read."""
    out: dict[str, Any] = {}
    parsed: Any = _MISSING
    for name, root, path in compensation.sources():
        where = f"{name} = {root}.{'.'.join(path)}"
        if root == "args":
            value = _walk(_argument(display, path[0], where), path[1:], where)
        else:
            if parsed is _MISSING:
                parsed = _result(result, where)
            value = _walk(parsed, path, where)
        out[name] = value
    return canonical_json(out).decode()


def _argument(display: ArgDisplay | None, name: str, where: str) -> Any:
    if display is None:
        raise Underivable(f"{where}: the call was proposed without an argument display")
    field = next((f for f in display.fields if f.name == name), None)
    if field is None:
        raise Underivable(f"{where}: the call's display has no argument {name}")
    if field.value is None:
        raise Underivable(f"{where}: {name} is personal (sealed): the decider cannot read it")
    if field.omittedChars:
        raise Underivable(f"{where}: {name} is cut in the display ({field.omittedChars} characters omitted)")
    return json.loads(field.value)


def _result(result: str | None, where: str) -> Any:
    if result is None:
        raise Underivable(f"{where}: the call returned no result")
    try:
        return json.loads(result)
    except ValueError:
        raise Underivable(f"{where}: the result is not JSON (sealed under the privacy envelope?)") from None


def _walk(value: Any, path: tuple[str, ...], where: str) -> Any:
    for step in path:
        if not isinstance(value, dict) or step not in value:
            raise Underivable(f"{where}: no field {step!r} there")
        value = value[step]
    return value


def inline_ref(arguments: str) -> str:
    """The `argsRef` that carries canonical-JSON `arguments` itself."""
    return INLINE + arguments


def inline_arguments(ref: str, expected_hash: str) -> dict[str, Any] | None:
    """The arguments an inline `ref` carries when they hash to `expected_hash`; None when `ref`
    is not inline. A ValueError when they do not hash to it or are not a JSON object."""
    if not ref.startswith(INLINE):
        return None
    value = json.loads(ref[len(INLINE):])
    if not isinstance(value, dict) or args_hash(value) != expected_hash:
        raise ValueError(f"inline arguments of {ref[:40]}... do not hash to {expected_hash[:16]}")
    return value
