"""`runfacts schemas ...`: generate the contract from the spec and check it stays compatible."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from runfacts.schemas.catalog import default_root, load_catalog
from runfacts.schemas.errors import ContractViolation
from runfacts.schemas.generate import update_lock, write_schemas
from runfacts.schemas.modelgen import render_models

app = typer.Typer(name="schemas", help="The typed event contract.", no_args_is_help=True)
AvroDir = Annotated[Path | None, typer.Option(help="avro/ folder (default: the package's).")]


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
