"""Backward-compatibility rules (Avro schema resolution) and the catalog's own rules.

`backward_problems(reader, writer)` lists what stops data written with `writer` from being
read with `reader`, each naming the field path. `check_catalog` runs it for every shipped
version against the current reader (backward, transitive) and also checks the lock (no
shipped file edited or removed) and that versions run 1..N without gaps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runfacts.schemas.catalog import Catalog

_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"},
               "float": {"double"}, "string": {"bytes"}, "bytes": {"string"}}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


@dataclass(frozen=True)
class Problem:
    """One broken rule, naming the schema, the version and the field."""

    schema: str
    version: int | None
    what: str

    def __str__(self) -> str:
        version = "" if self.version is None else f" v{self.version}"
        return f"{self.schema}{version}: {self.what}"


@dataclass
class _Side:
    """One schema being walked: named types seen so far and the enclosing namespace."""

    named: dict[str, Any]

    def resolve(self, node: Any, namespace: str) -> tuple[Any, str]:
        """(definition, namespace) of a type node, registering named definitions."""
        if isinstance(node, str) and node not in _PRIMITIVES:
            fullname = node if "." in node else f"{namespace}.{node}"
            return self.named[fullname], fullname.rsplit(".", 1)[0]
        if isinstance(node, dict) and node.get("type") in ("record", "enum", "fixed"):
            namespace = node.get("namespace", namespace)
            self.named[f"{namespace}.{node['name']}"] = node
        return node, namespace


def backward_problems(reader: dict[str, Any], writer: dict[str, Any]) -> list[str]:
    """Why `reader` cannot read data written with `writer` (empty when it can)."""
    return _compat(reader, writer, "", _Side({}), _Side({}), "", "")


def _kind(node: Any) -> str:
    if isinstance(node, list):
        return "union"
    if isinstance(node, str):
        return node
    return str(node["type"]) if node["type"] in _PRIMITIVES | {"record", "enum", "array",
                                                               "map", "fixed"} else "?"


def _compat(r: Any, w: Any, path: str, rs: _Side, ws: _Side, rns: str, wns: str) -> list[str]:
    r, rns = rs.resolve(r, rns)
    w, wns = ws.resolve(w, wns)
    rk, wk = _kind(r), _kind(w)
    where = path or "<record>"
    if wk == "union":
        return [p for branch in w for p in _compat(r, branch, path, rs, ws, rns, wns)]
    if rk == "union":
        if any(not _compat(branch, w, path, rs, ws, rns, wns) for branch in r):
            return []
        return [f"{where}: writer type {wk} matches no branch of the reader's union"]
    if rk != wk:
        if wk in _PROMOTIONS and rk in _PROMOTIONS[wk]:
            return []
        return [f"{where}: type changed from {wk} to {rk}"]
    if rk == "record":
        return _records(r, w, path, rs, ws, rns, wns)
    if rk == "enum":
        return _enums(r, w, where)
    if rk == "array":
        return _compat(r["items"], w["items"], f"{path}[]", rs, ws, rns, wns)
    if rk == "map":
        return _compat(r["values"], w["values"], f"{path}{{}}", rs, ws, rns, wns)
    if rk == "fixed" and (r["size"] != w["size"] or r["name"] != w["name"]):
        return [f"{where}: fixed {w['name']}[{w['size']}] became {r['name']}[{r['size']}]"]
    return _logical(r, w, where)


def _records(r: dict[str, Any], w: dict[str, Any], path: str, rs: _Side, ws: _Side,
             rns: str, wns: str) -> list[str]:
    if not _same_name(r, w):
        return [f"{path or '<record>'}: record {w['name']} became {r['name']} without an alias"]
    writer_fields = {f["name"]: f for f in w["fields"]}
    problems: list[str] = []
    for field in r["fields"]:
        sub = f"{path}.{field['name']}" if path else field["name"]
        names = [field["name"], *field.get("aliases", [])]
        match = next((writer_fields[n] for n in names if n in writer_fields), None)
        if match is None:
            if "default" not in field:
                problems.append(f"{sub}: new field has no default (old data lacks it)")
            continue
        problems += _compat(field["type"], match["type"], sub, rs, ws, rns, wns)
    return problems


def _same_name(r: dict[str, Any], w: dict[str, Any]) -> bool:
    short = w["name"].rsplit(".", 1)[-1]
    return short in {r["name"].rsplit(".", 1)[-1], *(a.rsplit(".", 1)[-1]
                                                     for a in r.get("aliases", []))}


def _enums(r: dict[str, Any], w: dict[str, Any], where: str) -> list[str]:
    missing = [s for s in w["symbols"] if s not in r["symbols"]]
    if missing and "default" not in r:
        return [f"{where}: enum {r['name']} lost symbols {missing} and has no default"]
    return []


def _logical(r: Any, w: Any, where: str) -> list[str]:
    rl = r.get("logicalType") if isinstance(r, dict) else None
    wl = w.get("logicalType") if isinstance(w, dict) else None
    return [] if rl == wl else [f"{where}: logicalType changed from {wl} to {rl}"]


def check_catalog(catalog: Catalog) -> list[Problem]:
    """Every rule the shipped catalog must keep; empty when all hold."""
    problems = _lock_problems(catalog)
    for fullname, current in sorted(catalog.current.items()):
        versions = catalog.versions(fullname)
        if [e.version for e in versions] != list(range(1, current.version + 1)):
            problems.append(Problem(fullname, None, "versions must run 1..N without gaps, got "
                                    f"{[e.version for e in versions]}"))
        for old in versions[:-1]:
            problems += [Problem(fullname, old.version, f"not readable by v{current.version}: {p}")
                         for p in backward_problems(current.raw, old.raw)]
    return problems


def _lock_problems(catalog: Catalog) -> list[Problem]:
    shipped = {(e.fullname, e.version): e.digest for e in catalog.entries}
    locked = {(name, int(v)): d for name, vs in catalog.lock.items() for v, d in vs.items()}
    problems = [Problem(n, v, "changed after shipping (digest differs from the lock)")
                for (n, v), d in shipped.items() if (n, v) in locked and locked[(n, v)] != d]
    problems += [Problem(n, v, "is in the lock but its file is gone")
                 for (n, v) in locked if (n, v) not in shipped]
    problems += [Problem(n, v, "is not in the lock: run `runfacts schemas generate`")
                 for (n, v) in shipped if (n, v) not in locked]
    return problems
