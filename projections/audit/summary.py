"""What an audit record says an event states: its actor and one change per set payload leaf.

Rules (the reference functions below are the spec; `compile_summarizer` is the same thing
generated per writer schema, straight from bytes, and tests prove them equal):
- the payload is read under the event's *writer* schema (the audit records the event as
  written; no upcasting), leaves in schema order, nested records flattened
  (`payload.amounts.tokens`);
- a null leaf or an empty array is not a change; everything else is, as text: strings as
  they are, numbers in decimal, booleans true/false, enums by symbol, timestamps as epoch
  ms, arrays (and records under a personal field) as compact JSON;
- a personal field (`"pii": true`), an array of records holding one (an argument display's
  `fields`), or a text over 256 UTF-8 bytes becomes a digest
  (`sha256:<hex>`, or `hmac-sha256:<hex>` under a configured key), never the value;
- `payload.actor` is kept apart as the record's actor, its subject id as a digest.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any, NamedTuple

from runfacts.schemas.binary.readers import AvroDecodeError, _Gen, write_long, write_string
from runfacts.schemas.binary.varint import VARINTS as _VARINTS
from runfacts.schemas.catalog import SchemaEntry

LONG_VALUE = 256
_json_string = json.encoder.encode_basestring  # what json.dumps uses with ensure_ascii=False
ACTOR_PATH = "payload.actor"
_NULL = b"\x00"
_SET = b"\x02"


class AuditConfig(NamedTuple):
    """How personal values become digests: HMAC-SHA-256 under `pii_key`, or plain SHA-256."""

    pii_key: bytes = b""


class Summary(NamedTuple):
    """What the summarizer found in one event body, already Avro-encoded for the record."""

    run_id: str
    envelope_end: int
    actor: bytes
    changes: bytes


def digest(text: str, config: AuditConfig) -> str:
    """A reference to a personal or long value: never the value itself."""
    if config.pii_key:
        return "hmac-sha256:" + hmac.new(config.pii_key, text.encode(), hashlib.sha256).hexdigest()
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def text_of(value: Any) -> str:
    """The canonical text of a leaf value."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def change_of(path: str, value: Any, personal: bool,
              config: AuditConfig) -> tuple[str, str | None, str | None] | None:
    """(path, value, digest) of one leaf, or None when the leaf is not set."""
    if value is None or (isinstance(value, list) and not value):
        return None
    text = text_of(value)
    if personal or len(text.encode()) > LONG_VALUE:
        return path, None, digest(text, config)
    return path, text, None


def actor_of(actor: dict[str, Any] | None,
             config: AuditConfig) -> tuple[str, tuple[str, ...], str | None, str] | None:
    """(subjectRef, roles, tenant, authSource) of a payload's actor."""
    if actor is None:
        return None
    return (digest(actor["subjectId"], config), tuple(actor["roles"]), actor["tenant"],
            actor["authSource"])


def changes_of(entry: SchemaEntry, payload: dict[str, Any],
               config: AuditConfig) -> list[tuple[str, str | None, str | None]]:
    """The reference summary of a payload read under `entry` (its writer schema)."""
    gen = _Gen(entry.raw)
    gen.resolve(entry.raw, gen.namespace(entry.raw))
    out: list[tuple[str, str | None, str | None]] = []
    record, ns = gen.resolve(entry.raw["fields"][-1]["type"], gen.namespace(entry.raw))
    _walk(gen, record, ns, payload, "payload", config, out)
    return out


def _walk(gen: _Gen, record: dict[str, Any], ns: str, values: dict[str, Any], prefix: str,
          config: AuditConfig, out: list[tuple[str, str | None, str | None]]) -> None:
    for field in record["fields"]:
        path = f"{prefix}.{field['name']}"
        node, field_ns = gen.resolve(field["type"], ns)
        nested = _record_branch(gen, node, field_ns)
        value = values[field["name"]]
        if path == ACTOR_PATH:
            continue
        if nested is not None and not field.get("pii"):
            if value is not None:
                _walk(gen, nested[0], nested[1], value, path, config, out)
            continue
        change = change_of(path, value, bool(field.get("pii")) or personal_items(gen, node, field_ns), config)
        if change is not None:
            out.append(change)


def personal_items(gen: _Gen, node: Any, ns: str) -> bool:
    """An array (or optional array) whose items are records with a personal field."""
    if isinstance(node, list):
        branches = [b for b in node if b != "null"]
        if len(branches) != 1:
            return False
        node, ns = gen.resolve(branches[0], ns)
    if not (isinstance(node, dict) and node.get("type") == "array"):
        return False
    items, _ = gen.resolve(node["items"], ns)
    return isinstance(items, dict) and items.get("type") == "record" and any(
        f.get("pii") for f in items["fields"])


def _record_branch(gen: _Gen, node: Any, ns: str) -> tuple[dict[str, Any], str] | None:
    """The record a field holds (directly or as the non-null branch of a union), else None."""
    if isinstance(node, list):
        branches = [b for b in node if b != "null"]
        if len(branches) != 1:
            return None
        node, ns = gen.resolve(branches[0], ns)
    if isinstance(node, dict) and node.get("type") == "record":
        return node, ns
    return None


# -- the same, generated per writer schema -----------------------------------------------------

Summarizer = Callable[[bytes, AuditConfig], Summary]


def encode_change(path: str, value: str | None, digest_: str | None) -> bytes:
    """Avro body of one AuditChange."""
    return (write_string(path) + (_NULL if value is None else _SET + write_string(value))
            + (_NULL if digest_ is None else _SET + write_string(digest_)))


def encode_actor(actor: dict[str, Any] | None, config: AuditConfig) -> bytes:
    """Avro body of the record's `actor` union."""
    found = actor_of(actor, config)
    if found is None:
        return _NULL
    ref, roles, tenant, auth = found
    roles_bytes = (write_long(len(roles)) + b"".join(map(write_string, roles)) + _NULL
                   if roles else _NULL)
    tenant_bytes = _NULL if tenant is None else _SET + write_string(tenant)
    return _SET + write_string(ref) + roles_bytes + tenant_bytes + write_string(auth)


def _emit(parts: list[bytes], path: str, value: Any, personal: bool, config: AuditConfig) -> int:
    change = change_of(path, value, personal, config)
    if change is None:
        return 0
    parts.append(encode_change(*change))
    return 1


def _emit_strings(parts: list[bytes], path: str, values: list[str], personal: bool,
                  config: AuditConfig) -> int:
    """`_emit` of an array of strings: the JSON text `text_of` gives, built without
    json.dumps' per-call set-up."""
    if not values:
        return 0
    text = "[" + ",".join(map(_json_string, values)) + "]"
    if personal or len(text.encode()) > LONG_VALUE:
        parts.append(encode_change(path, None, digest(text, config)))
    else:
        parts.append(encode_change(path, text, None))
    return 1


def compile_summarizer(entry: SchemaEntry) -> Summarizer:
    """`summarize(body, config) -> Summary` for bodies written with `entry`'s schema."""
    return _guarded(compile_unguarded(entry), entry)


def compile_unguarded(entry: SchemaEntry) -> Summarizer:
    """`compile_summarizer` without the error wrapper: bad bytes may raise IndexError,
    UnicodeDecodeError, … as well as AvroDecodeError (hosts that catch them themselves)."""
    gen = _summary_body(entry)
    gen.line(1, "return new(Summary, (run_id, envelope_end, actor, changes))")
    summarize: Summarizer = gen.build("def summarize(buf, config):", "summarize")
    return summarize


Chain = Callable[[Any, bytes, int, bytes, int, bytes, bytes, str], tuple[Any, bytes]]
"""(head, where, offset, body, envelope end, actor, changes, run id) -> (head', record)."""
Recorder = Callable[[bytes, AuditConfig, Any, bytes, int], tuple[Any, bytes]]


def compile_recorder(entry: SchemaEntry, chain: Chain) -> Recorder:
    """`record(body, config, heads, where, offset) -> chain(heads.get(run), …)`: summarize
    and link in one call, the summary handed to `chain` as is (unguarded, like
    `compile_unguarded`)."""
    gen = _summary_body(entry)
    gen.consts["chain"] = chain
    gen.line(1, "return chain(heads.get(run_id), where, offset, buf, envelope_end, actor, "
                "changes, run_id)")
    record: Recorder = gen.build("def record(buf, config, heads, where, offset):", "record")
    return record


def _summary_body(entry: SchemaEntry) -> _SummaryGen:
    """The summarizer's code up to its result: run_id, envelope_end, actor, changes."""
    gen = _SummaryGen(entry.raw)
    gen.consts.update(emit=_emit, encode_actor=encode_actor, digest=digest, ws=write_string,
                      Summary=Summary, LONG_VALUE=LONG_VALUE, VARINTS=_VARINTS,
                      emit_strings=_emit_strings, new=tuple.__new__)
    ns = gen.namespace(entry.raw)
    gen.resolve(entry.raw, ns)
    gen.line(1, "pos = 0")
    gen.line(1, "parts = []")
    gen.line(1, "count = 0")
    gen.line(1, "actor = b'\\x00'")
    for field in entry.raw["fields"][:-1]:
        if field["name"] == "runId":
            gen.read(field["type"], ns, "run_id", 1)
        else:
            gen.skip(field["type"], ns, 1)
    gen.line(1, "envelope_end = pos")
    payload, payload_ns = gen.resolve(entry.raw["fields"][-1]["type"], ns)
    gen.fields(payload, payload_ns, "payload", 1)
    gen.line(1, "if pos != len(buf):")
    gen.line(2, "raise AvroDecodeError(f'{len(buf) - pos} bytes left after the record' "
                "if pos < len(buf) else 'truncated record')")
    gen.line(1, "changes = (VARINTS[count] + b''.join(parts) + b'\\x00') if count else b'\\x00'")
    return gen


def _guarded(summarize: Summarizer, entry: SchemaEntry) -> Summarizer:
    def run(body: bytes, config: AuditConfig) -> Summary:
        try:
            return summarize(body, config)
        except AvroDecodeError:
            raise
        except (IndexError, KeyError, UnicodeDecodeError, TypeError, ValueError) as exc:
            raise AvroDecodeError(f"{entry.fullname} v{entry.version}: {type(exc).__name__}: "
                                  f"{exc}") from exc

    return run


class _SummaryGen(_Gen):
    """Emits code that walks a payload and appends encoded AuditChanges to `parts`."""

    def fields(self, record: dict[str, Any], ns: str, prefix: str, ind: int) -> None:
        for field in record["fields"]:
            path = f"{prefix}.{field['name']}"
            node, field_ns = self.resolve(field["type"], ns)
            if path == ACTOR_PATH:
                value = self.var("actor")
                self.read(node, field_ns, value, ind)
                self.line(ind, f"actor = encode_actor({value}, config)")
            else:
                self.leaf(node, field_ns, path, bool(field.get("pii")) or personal_items(self, node, field_ns), ind)

    def leaf(self, node: Any, ns: str, path: str, personal: bool, ind: int) -> None:
        if isinstance(node, list) and len(node) == 2 and "null" in node:
            set_branch = 1 - node.index("null")
            self._union_index(ind)
            self.line(ind, f"if i == {2 * set_branch}:")
            branch, branch_ns = self.resolve(node[set_branch], ns)
            self.leaf(branch, branch_ns, path, personal, ind + 1)
            self.line(ind, f"elif i != {2 - 2 * set_branch}:")
            self.line(ind + 1, "raise AvroDecodeError(f'union index {i >> 1} out of range')")
        elif isinstance(node, dict) and node.get("type") == "record" and not personal:
            self.fields(node, ns, path, ind)
        elif node == "string" and not personal:
            self._string(path, ind)
        elif node in ("int", "long") or (isinstance(node, dict) and node.get("type") == "long"):
            self._number(path, personal, ind)
        elif isinstance(node, dict) and node.get("type") == "enum" and not personal:
            self._enum(node, path, ind)
        elif isinstance(node, dict) and node.get("type") == "array" and node["items"] == "string":
            value = self.var("v")
            self.read(node, ns, value, ind)
            self.line(ind, f"count += emit_strings(parts, {path!r}, {value}, {personal}, config)")
        else:
            value = self.var("v")
            self.read(node, ns, value, ind)
            self.line(ind, f"count += emit(parts, {path!r}, {value}, {personal}, config)")

    def _enum(self, node: dict[str, Any], path: str, ind: int) -> None:
        """An enum leaf: the change for each symbol is built once, picked by the index byte."""
        symbols = node["symbols"]
        changes = self.const({2 * i: encode_change(path, s, None) for i, s in enumerate(symbols)})
        self.line(ind, f"change = {changes}.get(buf[pos])")
        self.line(ind, "if change is None:")  # a bad index (or a needlessly long varint)
        self.line(ind + 1, "i, _ = read_long(buf, pos)")
        self.line(ind + 1, f"change = {changes}.get(2 * i) if i >= 0 else None")
        self.line(ind + 1, "if change is None:")
        self.line(ind + 2, "raise AvroDecodeError(f'enum index {i} out of range')")
        self.line(ind + 1, "pos = skip_long(buf, pos) - 1")
        self.line(ind, "pos += 1")
        self.line(ind, "parts.append(change)")
        self.line(ind, "count += 1")

    def _number(self, path: str, personal: bool, ind: int) -> None:
        """An int/long leaf: its decimal text (never long enough for the digest rule); the
        changes of one-byte values are built once."""
        if personal:
            value = self.var("v")
            self._read_long(None, "", value, ind)
            self.line(ind, f"count += emit(parts, {path!r}, {value}, True, config)")
            return
        head = write_string(path) + _SET
        small = self.const(tuple(head + write_string(str((b >> 1) ^ -(b & 1))) + _NULL
                                 for b in range(128)))
        self.line(ind, "b = buf[pos]")
        self.line(ind, "if b < 0x80:")
        self.line(ind + 1, f"parts.append({small}[b])")
        self.line(ind + 1, "pos += 1")
        self.line(ind, "else:")
        self.line(ind + 1, "v, pos = read_long(buf, pos)")
        self.line(ind + 1, "t = str(v).encode()")
        self.line(ind + 1, f"parts.append({self.const(head)} + VARINTS[len(t)] + t + b'\\x00')")
        self.line(ind, "count += 1")

    def _string(self, path: str, ind: int) -> None:
        """A plain string leaf: its bytes as written become the change's value (not re-encoded,
        not re-validated as UTF-8: eventHash covers the bytes either way)."""
        name = self.const(write_string(path))
        head = self.const(write_string(path) + _SET)
        self.line(ind, "k = SHORT[buf[pos]]")
        self.line(ind, "if k:")  # under 64 bytes: the length byte and the bytes as written
        self.line(ind + 1, "end = pos + k")
        self.line(ind + 1, f"parts.append({head} + buf[pos:end] + b'\\x00')")
        self.line(ind, "else:")
        self._long_length(ind + 1)
        self.line(ind + 1, "if n > LONG_VALUE:")
        self.line(ind + 2, f"parts.append({name} + b'\\x00\\x02' + "
                           "ws(digest(buf[pos:end].decode(), config)))")
        self.line(ind + 1, "else:")
        self.line(ind + 2, f"parts.append({head} + VARINTS[n] + buf[pos:end] + b'\\x00')")
        self.line(ind, "pos = end")
        self.line(ind, "count += 1")
