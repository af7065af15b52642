"""`runfacts capabilities export|check`: the manifest a tool registry generates for the decider."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Capability manifests generated from a tool registry (docs/tools.md).",
                  no_args_is_help=True)

Tools = Annotated[str, typer.Argument(help="The registry, module:attribute (e.g. examples.billing_tools:registry).")]


@app.command("export")
def export(
    tools: Tools,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the TOML here (default: print it).")] = None,
) -> None:
    """Print (or write) the TOML manifest that `runfacts worker decider --capabilities` reads."""
    from runfacts.tools import load_registry, manifest_toml

    text = manifest_toml(load_registry(tools, "TOOLS").catalog(), tools)
    if out is None:
        typer.echo(text, nl=False)
        return
    out.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {out}", err=True)


@app.command("check")
def check(
    tools: Tools,
    capabilities: Annotated[Path, typer.Option(help="The manifest the decider reads.")],
) -> None:
    """Exit 1 naming each capability and field where the manifest differs from the registry."""
    from runfacts.processors.policy.capabilities import load_capabilities
    from runfacts.tools import load_registry

    own = load_registry(tools, "TOOLS").catalog().capabilities
    given = load_capabilities(capabilities).capabilities
    problems = [f"{cid}: missing from {capabilities}" for cid in own if cid not in given]
    for cid in sorted(set(own) & set(given)):
        mine, theirs = own[cid].model_dump(by_alias=True), given[cid].model_dump(by_alias=True)
        problems += [f"{cid}: {key} is {theirs[key]!r} in {capabilities}, {mine[key]!r} in {tools}"
                     for key in mine if mine[key] != theirs[key]]
    for problem in problems:
        typer.echo(problem, err=True)
    if problems:
        raise typer.Exit(1)
    typer.echo(f"ok: {capabilities} agrees with {tools} on {len(own)} capabilities")
