"""Helpers for the projection tests: Avro-value strategies, facts from runs, stored audits."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from runfacts.dev.runscript import RunScript, encode_event
from runfacts.projections.audit import reducer as audit
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import Fact, ReadSettings
from runfacts.schemas.catalog import SchemaEntry

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
LONG_TEXT = st.one_of(TEXT, st.text(alphabet="ab€", min_size=250, max_size=300))


def values_of(entry: SchemaEntry) -> st.SearchStrategy[dict[str, Any]]:
    """Random values of an event schema (type/version fields fixed so the codec accepts them)."""
    named: dict[str, Any] = {}
    record = _strategy(entry.raw, entry.raw.get("namespace", ""), named)
    return record.map(lambda v: {**v, "eventType": entry.type_name,
                                 "schemaVersion": entry.version})


def _strategy(node: Any, ns: str, named: dict[str, Any]) -> st.SearchStrategy[Any]:
    if isinstance(node, list):
        return st.one_of(*[_strategy(b, ns, named) for b in node])
    if isinstance(node, str):
        simple = {"string": LONG_TEXT, "int": st.integers(-2**31, 2**31 - 1),
                  "long": st.integers(-2**63, 2**63 - 1), "boolean": st.booleans(),
                  "null": st.none()}
        if node in simple:
            return simple[node]
        return named[node if "." in node else f"{ns}.{node}"]
    kind = node["type"]
    if isinstance(kind, dict | list):
        return _strategy(kind, ns, named)
    if node.get("logicalType") == "timestamp-millis":
        return st.integers(0, 4_102_444_800_000)
    if kind in ("record", "enum"):
        ns = node.get("namespace", ns)
    if kind == "enum":
        strategy: st.SearchStrategy[Any] = st.sampled_from(node["symbols"])
    elif kind == "array":
        strategy = st.lists(_strategy(node["items"], ns, named), max_size=3)
    elif kind == "record":
        strategy = st.fixed_dictionaries({f["name"]: _strategy(f["type"], ns, named)
                                          for f in node["fields"]})
    else:
        return _strategy(kind, ns, named)
    if kind in ("record", "enum"):
        named[f"{ns}.{node['name']}"] = strategy
    return strategy


def run_values(seed: int = 1, runs: int = 3) -> list[dict[str, Any]]:
    """Event dicts of a scripted log."""
    return list(RunScript(seed=seed).log(runs))


def facts_of(events: list[dict[str, Any]], read: ReadSettings | None = None,
             topic: str = "runfacts.run.events") -> list[Fact]:
    """Facts of event dicts laid out as a single-partition log."""
    reader = EventReader(read or ReadSettings())
    return [reader.fact(encode_event(e), topic, 0, offset) for offset, e in enumerate(events)]


def audit_records(facts: list[Fact]) -> list[bytes]:
    """The audit record bodies a replay writes for these facts, in log order."""
    heads: dict[str, audit.ChainHead] = {}
    out = []
    for fact in facts:
        summary = audit.summarize(fact)
        head, body = audit.link(heads.get(summary.run_id), fact, summary)
        heads[summary.run_id] = head
        out.append(body)
    return out
