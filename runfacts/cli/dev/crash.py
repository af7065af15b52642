"""`runfacts dev crash`: run the crash matrix (and optionally the decider fuzz) and print a table.

Every row starts real worker processes against the broker, kills one at its point, restarts
it and lets the oracle judge the topics (runfacts.dev.crash.rows); the cluster rows start one
three-broker cluster (scripts/kafka-cluster.sh) and stop it at the end. `--quick` runs the CI subset;
`--rows a,b` picks rows; `--fuzz-scale 10` also runs the hypothesis fuzz of the decider's
shell with 10^5 cases (a development checkout: it runs the repository's test module).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from runfacts.dev import require_clone
from runfacts.dev.services import REPO
from runfacts.settings import KafkaSettings

if TYPE_CHECKING:
    from runfacts.dev.crash.rows import RowResult

console = Console()


def crash(
    rows_: str = typer.Option("", "--rows", help="Comma-separated row keys (default: all; see --list)."),
    quick: bool = typer.Option(False, "--quick", help="Only the CI subset."),
    runs: int = typer.Option(6, min=1, help="Runs per scenario (each ~17 commands + bad records)."),
    listing: bool = typer.Option(False, "--list", help="List the rows and exit."),
    keep: bool = typer.Option(False, help="Keep the work directory (logs, stores) even when all rows pass."),
    fuzz_scale: int = typer.Option(0, help="Also run the decider fuzz with 10^4 x this many cases (0: no)."),
) -> None:
    """Kill workers at every crash point, restart them, and check the oracle; exit 1 on any failure."""
    require_clone("runfacts.dev.crash", "runfacts dev crash")  # the harness is not in the wheel
    from runfacts.dev.crash.kafka import Cluster
    from runfacts.dev.crash.rows import rows, run_row
    from runfacts.dev.crash.stage import Lab

    if listing:
        console.print(_listing())
        return
    workdir = Path(tempfile.mkdtemp(prefix="runfacts-crash-"))
    # the cluster rows share one three-broker cluster (scripts/kafka-cluster.sh), stopped at the end
    lab = Lab(KafkaSettings().bootstrap_servers, workdir, runs=runs, cluster_home=workdir / "cluster")
    results, selected = [], rows([k for k in rows_.split(",") if k], quick)
    try:
        for row in selected:
            console.print(f"[dim]{row.key}: {row.point} x {row.guarantee} …[/]")
            results.append(run_row(row, lab))
    finally:
        if any(r.scenario == "cluster" for r in selected) and (workdir / "cluster").exists():
            Cluster(workdir / "cluster").stop()
    console.print(render(results))
    ok = all(r.ok for r in results)
    if fuzz_scale:
        ok = _fuzz(fuzz_scale) and ok
    if ok and not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        console.print(f"logs, stores and ledgers: {workdir}")
    raise typer.Exit(0 if ok else 1)


def render(results: list[RowResult]) -> Table:
    """The matrix: point x guarantee x outcome, with timings."""
    table = Table("row", "crash point", "guarantee", "outcome", "s", "", title="crash matrix", show_lines=True)
    for r in results:
        mark = "[green]pass[/]" if r.ok else "[red]FAIL[/]"
        text = r.outcome + ("".join(f"\n[red]- {p}[/]" for p in r.problems[:6]) if r.problems else "")
        table.add_row(r.row.key, r.row.point, r.row.guarantee.replace("_", "-"), text,
                      f"{r.seconds:.1f}", mark)
    table.caption = ("oracle per row: events = fold of the committed commands log (same eventIds, no duplicate, "
                     "no gap), last state and user view = oracle, dead letters and counts balance, audit chain "
                     "verifies; dispatcher rows: one refund per authorized call in the provider's ledger")
    return table


def _listing() -> Table:
    from runfacts.dev.crash.rows import ROWS

    table = Table("row", "crash point", "guarantee", "scenario", "CI")
    for r in ROWS:
        table.add_row(r.key, r.point, r.guarantee, r.scenario, "yes" if r.ci else "")
    return table


def _fuzz(scale: int) -> bool:
    """The decider fuzz at 10^4 x scale cases through pytest; prints the outcome counts."""
    module = REPO / "tests/unit/decider/test_fuzz.py"
    if not module.exists():
        console.print(f"[red]fuzz: {module} not found (needs a development checkout)[/]")
        return False
    tally = Path(tempfile.mkstemp(suffix=".json")[1])
    env = {**os.environ, "RUNFACTS_FUZZ_SCALE": str(scale), "RUNFACTS_FUZZ_TALLY": str(tally)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(module)],
                          cwd=REPO, env=env, check=False)
    counts = json.loads(tally.read_text() or "{}") if tally.exists() else {}
    tally.unlink(missing_ok=True)
    cases = counts.pop("cases", 0)
    console.print(f"fuzz x{scale}: {cases} cases, {sum(counts.values())} records fed, outcomes {counts}; "
                  + ("[green]pass[/]" if done.returncode == 0 else "[red]FAIL[/]"))
    return done.returncode == 0
