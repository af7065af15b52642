"""Writes one golden run-state fixture with the code of a given tree (run by hand, never by pytest).

    git archive <commit> | tar -x -C /tmp/tree
    cd tests/contract/golden-state && ../../../.venv/bin/python make_run_state.py /tmp/tree > run-state/<name>.json
    (--progress TREE, --timers TREE, --view TREE STATE.json: the other records)
    ../../../.venv/bin/python make_run_state.py --record-shapes   (this tree's stored shapes into
    shapes.json, under their current versions; older versions' entries are kept)

The tree's own `tests/decider_support.py` folds a scripted run through that tree's decide/evolve:
KEEP_SETTLED + 3 lookups, each claimed, completed and verified (so the oldest are compacted into
`settledCalls` where the tree compacts), then a refund proposed and left waiting for approval
(an open approval and a whole tool call). The state is printed as that tree stored it
(`RunState.model_dump_json()`, which its `state_json.dump_state` reproduces byte for byte).
The tree is imported as the installed package is laid out (pyproject's package-dir).
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
import tempfile
from pathlib import Path


def _install(tree: Path) -> None:
    TREE.append(tree)
    pkg = Path(tempfile.mkdtemp()) / "runfacts"
    shutil.copytree(tree / "runfacts", pkg, symlinks=True)
    for sub in ("schemas", "processors", "projections", "connectors"):
        if (tree / sub).is_dir() and not (pkg / sub).exists():
            (pkg / sub).symlink_to(tree / sub)
    sys.path[:0] = [str(pkg.parent), str(tree / "tests")]


def _first(*names: str):  # a module that moved between layouts, imported from the tree only
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if Path(module.__file__).resolve().is_relative_to(TREE[0]):  # not the installed package's
            return module
    raise ImportError(f"none of {names} in {TREE[0]}")


TREE: list[Path] = []


def main(tree: Path) -> None:
    _install(tree)
    support = importlib.import_module("decider_support")
    retry = _first("runfacts.processors.policy.retry", "runfacts.processors.retry")
    state_mod = _first("runfacts.processors.decider.state", "runfacts.processors.run_state")
    from runfacts.schemas import commands as cmd
    from runfacts.schemas.common import BudgetAmounts

    calls = getattr(state_mod, "KEEP_SETTLED", 32) + 3
    s = support.Scenario().given(support.create(BudgetAmounts(toolCalls=1000, steps=1000)))
    for i in range(calls):
        call, target = f"call-{i:05d}", f"order-{i:05d}"
        args = retry.args_hash({"orderId": target})
        s.given(support.command(cmd.ProposeToolCall, toolCallId=call, capabilityId="orders.lookup",
                                argsHash=args, argsRef=f"args/{i}", target=target, action="lookup",
                                risk="low", summary=f"look up {target}"),
                support.claim(call, key=retry.idempotency_key(support.RUN, "lookup", target, args)),
                support.completed(call),
                support.command(cmd.ReportVerification, support.DISPATCHER, toolCallId=call,
                                status="confirmed_success"))
    s.given(support.propose_refund())
    sys.stdout.write(s.s.model_dump_json() + "\n")




def progress(tree: Path) -> None:
    """`make_run_state.py --progress TREE`: a dispatcher progress record of that tree (a call in
    reconciliation after a try), as its dispatcher stored it (`Progress.model_dump_json()`)."""
    _install(tree)
    core = _first("runfacts.processors.dispatcher.core", "runfacts.processors.dispatch_core")
    sys.stdout.write(core.Progress(toolCallId="call-00007", correlationId="run-20260727001", phase="reconciling",
                                   attempt=2, tries=3, firstTryMs=1_785_141_601_000, lookups=1,
                                   deadlineMs=1_785_141_901_000, reportedStill=True).model_dump_json() + "\n")


def timers(tree: Path) -> None:
    """`make_run_state.py --timers TREE`: a partition's `__timers` store of that tree, as
    [hex key, hex value] pairs (two runs' timers scheduled through its `Timers`, one moved)."""
    _install(tree)
    store = _first("runfacts.processors.engine.store", "runfacts.processors.store")
    timer_mod = _first("runfacts.processors.engine.timers", "runfacts.processors.timers")
    api = _first("runfacts.processors.engine.api", "runfacts.processors.api")
    state = store.PartitionState(store.MemoryBackend([api.TIMER_STORE]), [api.TIMER_STORE])
    index = timer_mod.Timers(state)
    index.schedule(b"run-a", 1_785_141_601_000, "approval-expiry:approval-1", b"approval_expiry|approval-1")
    index.schedule(b"run-b", 1_785_141_602_000, "reconcile:call-00007", b"")
    index.schedule(b"run-a", 1_785_141_603_000, "claim-deadline:call-00001", b"claim_deadline|call-00001")
    index.schedule(b"run-b", 1_785_141_600_500, "reconcile:call-00007", b"")  # moved earlier
    entries = sorted((k.hex(), v.hex()) for k, v in state.buffers[api.TIMER_STORE].items() if v is not None)
    sys.stdout.write(json.dumps(entries, indent=0) + "\n")


def view(tree: Path, state_json: Path) -> None:
    """`make_run_state.py --view TREE STATE.json`: the user view record (framed Avro, hex) that
    tree's decider publishes for that stored run state."""
    _install(tree)
    state_mod = _first("runfacts.processors.decider.state", "runfacts.processors.run_state")
    views = _first("runfacts.projections.user_view")
    state = state_mod.RunState.model_validate_json(state_json.read_bytes())
    ((_, _, value),) = views.publisher("runfacts.run.user-view")(state)
    sys.stdout.write(value.hex() + "\n")


SHAPES = Path(__file__).parent / "shapes.json"
"""Every stored record kind's field set (`versions.shape_of`) per released version."""


def stored_kinds():  # (kind, migrations, model): the records test_golden_state checks against SHAPES
    from runfacts.processors.decider.state import RunState
    from runfacts.processors.decider.state_json import RUN_STATE
    from runfacts.processors.dispatcher.core import PROGRESS, Progress

    return [(RUN_STATE.kind, RUN_STATE, RunState), (PROGRESS.kind, PROGRESS, Progress)]


def record_shapes() -> None:
    """`make_run_state.py --record-shapes`: the installed tree's shapes, each under its version."""
    from runfacts.processors.engine.versions import shape_of

    recorded = json.loads(SHAPES.read_text()) if SHAPES.exists() else {}
    for kind, migrations, model in stored_kinds():
        recorded.setdefault(kind, {})[str(migrations.current)] = shape_of(model)
    SHAPES.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--record-shapes":
        record_shapes()
    elif sys.argv[1] == "--progress":
        progress(Path(sys.argv[2]).resolve())
    elif sys.argv[1] == "--view":
        view(Path(sys.argv[2]).resolve(), Path(sys.argv[3]).resolve())
    elif sys.argv[1] == "--timers":
        timers(Path(sys.argv[2]).resolve())
    else:
        main(Path(sys.argv[1]).resolve())
