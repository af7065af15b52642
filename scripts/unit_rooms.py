#!/usr/bin/env python3
"""Where a unit test lives: `tests/unit/<room>/test_<what>.py`, the room mirroring the package.

    .venv/bin/python scripts/unit_rooms.py            # list flat or misnamed modules and their place
    .venv/bin/python scripts/unit_rooms.py --apply    # git mv them there and fix their imports

`place(name)` is the rule (tests/unit/house/test_rooms.py fails on a flat module and names the
place this gives). A flat name is read as `test_<prefix>_<rest>.py` (or the old style
`<prefix>_<rest>_test.py`): the prefix picks the room and, where it IS the room's name, is
dropped from the new name (`test_decider_fold.py` -> `decider/test_fold.py`); `*_cli.py` goes to
`cli/`; a few names the prefixes cannot tell are listed in `EXACT`. `--apply` also rewrites what
a move breaks: `Path(__file__).parents[N]` (one level deeper), imports of the support modules
that live in rooms (`SUPPORT`), and imports of other test modules (`from test_x import ...`),
into relative imports.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UNIT = REPO / "tests" / "unit"

# the rooms of tests/unit and what each holds (the package room it mirrors)
ROOMS = {
    "house": "the whole house: layering, doorways, purity, public API, the architecture map, docs lists",
    "schemas": "runfacts.schemas (the wire contract, spec, codec, registry)",
    "foundation": "the runfacts foundation: settings, topics, ids, partitioning, telemetry, otel, logread",
    "engine": "runfacts.processors.engine",
    "decider": "runfacts.processors.decider",
    "dispatcher": "runfacts.processors.dispatcher",
    "policy": "runfacts.processors.policy",
    "projections": "runfacts.projections (user view, audit, trajectory, the projectors)",
    "connectors": "runfacts.connectors (outbox, relay, debezium, the refund adapter)",
    "client": "runfacts.client (and its agents)",
    "tools": "runfacts.tools",
    "integrations": "runfacts.integrations",
    "mcp": "runfacts.mcp",
    "gateway": "runfacts.gateway",
    "dashboard": "runfacts.dashboard",
    "ops": "runfacts.ops",
    "security": "runfacts.security",
    "privacy": "runfacts.privacy",
    "testing": "runfacts.testing",
    "demo": "runfacts.demo",
    "dev": "runfacts.dev (crash harness, payment simulator, dev up)",
    "cli": "runfacts.cli (one module per `runfacts <group>`, render)",
    "benchmarks": "benchmarks/ (their bars and command lines)",
}

# flat name prefix -> (room, drop the prefix from the new name)
PREFIXES = {
    "decider": ("decider", True),
    "dispatcher": ("dispatcher", True),
    "dispatch": ("dispatcher", True),
    "engine": ("engine", True),
    "gctune": ("engine", False),
    "store": ("engine", False),
    "producer": ("foundation", False),
    "settings": ("foundation", False),
    "topics": ("foundation", False),
    "ids": ("foundation", False),
    "telemetry": ("foundation", False),
    "otel": ("foundation", False),
    "logread": ("foundation", False),
    "reader": ("foundation", False),
    "partitioning": ("foundation", False),
    "policy": ("policy", False),
    "capabilities": ("policy", False),
    "retry": ("policy", False),
    "approval": ("policy", False),
    "source": ("policy", False),
    "projection": ("projections", True),
    "projections": ("projections", True),
    "projector": ("projections", False),
    "memory": ("projections", False),
    "audit": ("projections", False),
    "trajectory": ("projections", False),
    "outbox": ("connectors", False),
    "relay": ("connectors", False),
    "debezium": ("connectors", False),
    "refund": ("connectors", False),
    "client": ("client", True),
    "agent": ("client", False),
    "tool": ("tools", True),
    "tools": ("tools", True),
    "compensation": ("tools", False),
    "integrations": ("integrations", True),
    "mcp": ("mcp", True),
    "gateway": ("gateway", True),
    "dashboard": ("dashboard", True),
    "console": ("dashboard", False),
    "ops": ("ops", True),
    "dlq": ("ops", False),
    "security": ("security", True),
    "acls": ("security", False),
    "privacy": ("privacy", False),
    "testing": ("testing", True),
    "adapter": ("testing", False),
    "demo": ("demo", True),
    "crash": ("dev", False),
    "payment": ("dev", False),
    "dev": ("dev", True),
    "schemas": ("schemas", True),
    "render": ("cli", False),
    "worker": ("cli", False),
    "layering": ("house", False),
    "doorways": ("house", False),
    "purity": ("house", False),
    "public": ("house", False),
    "architecture": ("house", False),
    "docs": ("house", False),
    "error": ("house", False),
    "typed": ("house", False),
}

# flat names the prefixes cannot tell
EXACT = {
    "test_privacy_dispatcher.py": "privacy/test_dispatcher.py",
    "test_dlq_cli.py": "ops/test_dlq.py",
    "test_engine_metrics_window.py": "engine/test_metrics_window.py",
    "test_engine_bench_bars.py": "benchmarks/test_engine_bench_bars.py",
    "test_outbox_bench_relay_command.py": "benchmarks/test_outbox_bench_relay_command.py",
    "test_demo_privacy_keys.py": "demo/test_privacy_keys.py",
    "test_topics_list.py": "cli/test_topics_list.py",
    "test_room_agent_example.py": "testing/test_room_agent_example.py",
    "test_args_store_journal.py": "connectors/test_args_store_journal.py",
    "test_extending_doc.py": "house/test_extending_doc.py",
    "test_no_issue_citations.py": "house/test_no_issue_citations.py",
    "test_wheel_config.py": "house/test_wheel_config.py",
}

# support modules that live in a unit room (the others are in tests/, shared with
# tests/integration, tests/contract or benchmarks/, and are imported by their bare name)
SUPPORT = {
    "dispatcher_support": "dispatcher",
    "fuzz_support": "decider",
}


def place(name: str) -> str:
    """`room/test_<what>.py` for a flat module name (`test_*.py` or `*_test.py`) of tests/unit."""
    if name in EXACT:
        return EXACT[name]
    if name.endswith("_support.py"):
        room = SUPPORT.get(name.removesuffix(".py"), "<the room of the tests that use it>")
        return f"{room}/{name}"
    stem = name.removesuffix(".py")
    if stem.endswith("_test"):  # the old style: schemas_codec_test.py -> test_schemas_codec.py
        stem = "test_" + stem.removesuffix("_test")
    words = stem.removeprefix("test_")
    if words.endswith("_cli"):
        return f"cli/test_{words.removesuffix('_cli')}.py"
    prefix, _, rest = words.partition("_")
    if prefix not in PREFIXES:
        raise ValueError(f"{name}: no room for the prefix {prefix!r}; add it to PREFIXES or EXACT in "
                         f"{Path(__file__).relative_to(REPO)} (rooms: {', '.join(ROOMS)})")
    room, drop = PREFIXES[prefix]
    return f"{room}/test_{rest if drop and rest else words}.py"


def misplaced(unit: Path = UNIT) -> dict[Path, str]:
    """Modules of tests/unit that are flat or in the other naming style -> their place."""
    found: dict[Path, str] = {}
    for path in sorted(unit.glob("*.py")):
        if path.name not in ("__init__.py", "conftest.py"):
            found[path] = _place_or_why(path.name)
    for path in sorted(unit.glob("*/*.py")):
        if path.name.endswith("_test.py"):
            found[path] = f"{path.parent.name}/test_{path.name.removesuffix('_test.py')}.py"
    return found


def _place_or_why(name: str) -> str:
    try:
        return place(name)
    except ValueError as e:
        return f"<{e}>"


def _bump_parents(text: str) -> str:
    return re.sub(r"(Path\(__file__\)(?:\.resolve\(\))?\.parents\[)(\d+)\]",
                  lambda m: f"{m.group(1)}{int(m.group(2)) + 1}]", text)


def _relative(from_room: str, to_room: str, module: str) -> str:
    return f".{module}" if from_room == to_room else f"..{to_room}.{module}"


def rewrite_imports(text: str, room: str, moved: dict[str, str]) -> str:
    """Imports of room support modules and of other test modules, as relative imports.

    `moved` maps an old module name (`test_decider_children`) to its new `room/test_x`.
    """
    targets = {**{k: f"{v}/{k}" for k, v in SUPPORT.items()}, **moved}

    def sub(m: re.Match[str]) -> str:
        name = m.group(2)
        target = targets.get(name)
        if target is None and (name.startswith("test_") or name.endswith("_test")):
            target = _place_or_why(name + ".py").removesuffix(".py")  # a test module moved before
        if target is None or target.startswith("<") or not (UNIT / f"{target}.py").exists():
            return m.group(0)
        to_room, module = target.split("/")
        return f"{m.group(1)}from {_relative(room, to_room, module)} import"

    return re.sub(r"^(\s*)from ([A-Za-z_][A-Za-z0-9_]*) import", sub, text, flags=re.M)


def apply(found: dict[Path, str]) -> list[Path]:
    moved = {path.stem: target.removesuffix(".py") for path, target in found.items() if not target.startswith("<")}
    news: list[Path] = []
    deeper: set[Path] = set()  # moved from tests/unit/ into a room: one level deeper
    for path, target in found.items():
        if target.startswith("<"):
            print(f"{path.relative_to(REPO)}: not moved, {target}")
            continue
        new = UNIT / target
        new.parent.mkdir(exist_ok=True)
        init = new.parent / "__init__.py"
        if not init.exists():
            room = new.parent.name
            init.write_text(f'"""Unit tests of {ROOMS.get(room, room)}."""\n')
            subprocess.run(["git", "add", str(init)], cwd=REPO, check=True)
        subprocess.run(["git", "mv", str(path), str(new)], cwd=REPO, check=True)
        news.append(new)
        if path.parent == UNIT:
            deeper.add(new)
    for room_dir in sorted(p for p in UNIT.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        for path in sorted(room_dir.glob("*.py")):
            text = path.read_text()
            new_text = rewrite_imports(text, room_dir.name, moved)
            if path in deeper:
                new_text = _bump_parents(new_text)
            if new_text != text:
                path.write_text(new_text)
    return news


CITED = re.compile(r"tests/unit/((?:test_\w+|\w+_test)\.py)")


def fix_citations() -> list[str]:
    """`tests/unit/<flat>.py` cited in any tracked text file -> its room, where that file exists."""
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    fixed = []
    for name in files.split():
        path = REPO / name
        if path.suffix not in (".py", ".md", ".toml", ".sh", ".txt", ".yaml", ".yml", "") or not path.is_file():
            continue
        text = path.read_text(errors="replace")

        def sub(m: re.Match[str]) -> str:
            target = _place_or_why(m.group(1))
            return f"tests/unit/{target}" if (UNIT / target).exists() else m.group(0)

        new_text = CITED.sub(sub, text)
        if new_text != text:
            path.write_text(new_text)
            fixed.append(name)
    return fixed


def main(argv: list[str]) -> int:
    found = misplaced()
    for path, target in found.items():
        print(f"git mv {path.relative_to(REPO)} tests/unit/{target}")
    if "--apply" not in argv:
        return 1 if found else 0
    news = apply(found)
    if news:
        subprocess.run([sys.executable, "-m", "ruff", "check", "-q", "--fix", "--select", "I",
                        *map(str, news)], cwd=REPO, check=False)
    fixed = fix_citations()
    print(f"moved {len(news)}; citations fixed in {', '.join(fixed) or 'no file'}; check bare names "
          "(`test_x.py` without its path) by hand: tests/unit/house/test_rooms.py checks paths only")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
