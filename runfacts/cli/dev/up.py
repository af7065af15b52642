"""`runfacts dev up`: the broker, the topics and every worker as one supervised process tree."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runfacts.demo.stack import demo_manifest
from runfacts.dev.up import DevOptions, DevStack


def up(
    tools: Annotated[str, typer.Option(
        help="Your tool registry, module:attribute (imported from this directory); reloaded when its "
             "file changes. Default: the packaged refund tool against the payment simulator.")] = "",
    agent: Annotated[str, typer.Option(
        help="Your @rf.agent service, module:attribute (imported from this directory), run as one more "
             "supervised worker (`runfacts worker agent`); reloaded when its file changes.")] = "",
    prefix: Annotated[str, typer.Option(
        envvar="RUNFACTS_KAFKA_TOPIC_PREFIX",
        help="Topic prefix (default $RUNFACTS_KAFKA_TOPIC_PREFIX or runfacts).")] = "runfacts",
    partitions: Annotated[int, typer.Option(help="Partitions of topics it creates.")] = 3,
    workdir: Annotated[Path | None, typer.Option(
        help="Logs, worker state, the argument store, secrets (default ./.runfacts/dev/<prefix>).")] = None,
    console_port: Annotated[int, typer.Option(help="The console's port (taken or 0: a free one).")] = 8080,
    reload: Annotated[bool, typer.Option("--reload/--no-reload",
                                         help="Restart the decider and dispatcher when the registry changes.")] = True,
) -> None:
    """Start (or reuse) the local broker, apply the topics, run the decider, the dispatcher serving
    your tools, the projector, the memory worker and the console; restart what crashes; Ctrl-C
    stops everything."""
    packaged = "" if tools else demo_manifest(expiring_ttl_ms=5_000)  # the refund, and its 5 s-window twin
    options = DevOptions(tools=tools, agent=agent, capabilities=packaged, prefix=prefix, partitions=partitions,
                         workdir=workdir, console_port=console_port, reload=reload)
    raise typer.Exit(DevStack(options, say=lambda line: typer.echo(line)).run())
