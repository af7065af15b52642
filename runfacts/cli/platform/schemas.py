"""`runfacts schemas ...`: generate the contract from the spec and check it stays compatible."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runfacts.schemas.catalog import default_root, load_catalog
from runfacts.schemas.errors import ContractViolation
from runfacts.schemas.spec.compat import Problem, check_catalog
from runfacts.schemas.spec.generate import update_lock, write_schemas
from runfacts.schemas.spec.golden import missing_golden, write_golden
from runfacts.schemas.spec.modelgen import render_models

app = typer.Typer(name="schemas", help="The typed event contract.", no_args_is_help=True)
AvroDir = Annotated[Path | None, typer.Option(help="avro/ folder (default: the package's).")]
GoldenDir = Annotated[Path | None, typer.Option(help="Also require golden files in this folder.")]


def _source_root() -> Path:
    return Path(str(default_root()))


@app.command()
def generate(avro_dir: AvroDir = None) -> None:
    """Write .avsc files for new spec versions, extend the lock, regenerate the models."""
    root = avro_dir or _source_root()
    try:
        written = write_schemas(root)
    except ContractViolation as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    update_lock(root)
    for path in written:
        typer.echo(f"wrote {path}")
    for module, text in render_models(load_catalog(root)).items():
        target = root.parent / f"{module}.py"
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            typer.echo(f"wrote {target}")


@app.command()
def check(avro_dir: AvroDir = None, golden: GoldenDir = None) -> None:
    """Check every shipped version against the current reader (backward, transitive), the lock
    of shipped files and (with --golden) that each version has golden files; exit 1 if not."""
    try:
        catalog = load_catalog(avro_dir)
    except ContractViolation as exc:
        typer.echo(f"FAIL {exc}", err=True)
        raise typer.Exit(1) from exc
    problems = check_catalog(catalog)
    if golden is not None:
        problems += [Problem(e.fullname, e.version, f"has no golden files under {golden}")
                     for e in missing_golden(golden, catalog)]
    for problem in problems:
        typer.echo(f"FAIL {problem}", err=True)
    if problems:
        raise typer.Exit(1)
    typer.echo(f"ok: {len(catalog.entries)} shipped versions of {len(catalog.current)} types; "
               "every version readable by its current reader")


@app.command()
def golden(folder: Path, avro_dir: AvroDir = None) -> None:
    """Write golden files for shipped versions that have none (never rewrites one)."""
    for path in write_golden(folder, load_catalog(avro_dir)):
        typer.echo(f"wrote {path}")
