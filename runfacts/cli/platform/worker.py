"""`runfacts worker decider|dispatcher|projector|memory|agent`: one way to run each worker.

Each command runs one engine application until SIGTERM/SIGINT (graceful: finish the batch,
commit, leave the group), through `runfacts.processors.engine.worker.run` with the right factory.
Engine settings come from RUNFACTS_* variables (RUNFACTS_STATE_DIR, RUNFACTS_INSTANCE_ID,
RUNFACTS_COMMIT_INTERVAL_MS, ...). Where the broker is and how to talk to it comes from the
same variables every other runfacts client reads (RUNFACTS_KAFKA_BOOTSTRAP_SERVERS,
RUNFACTS_KAFKA_CONFIG, RUNFACTS_KAFKA_PROPERTIES), and only from them. Exit codes: 0 stopped, 1 handler or
input error, 2 configuration error, 3 infrastructure error.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Annotated

import typer

from runfacts.processors.engine.settings import EngineSettings, load_settings, refuse_old_broker_variables
from runfacts.processors.engine.worker import run

app = typer.Typer(help="Run a processor worker (decider, dispatcher, projector, memory) until SIGTERM.",
                  no_args_is_help=True)

FACTORIES = {
    "decider": "runfacts.workers:decider",
    "dispatcher": "runfacts.workers:dispatcher",
    "projector": "runfacts.workers:projector",
    "memory": "runfacts.workers:memory_projector",
}
Prefix = Annotated[str, typer.Option("--prefix", envvar="RUNFACTS_KAFKA_TOPIC_PREFIX",
                                     help="Topic prefix (default $RUNFACTS_KAFKA_TOPIC_PREFIX or runfacts).")]
Capabilities = Annotated[str, typer.Option(help="Capability manifest TOML (default: the packaged one).")]


def engine_settings(environ: Mapping[str, str] | None = None) -> EngineSettings:
    """Engine settings from the environment (the broker as every runfacts client finds it)."""
    refuse_old_broker_variables(os.environ if environ is None else environ)
    return load_settings()


def _run(kind: str, params: dict[str, str]) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    pairs = [f"{k}={v}" for k, v in params.items()]
    raise typer.Exit(run(FACTORIES[kind], pairs, engine_settings()))


@app.command("decider")
def decider(
    prefix: Prefix = "runfacts",
    capabilities: Capabilities = "",
    policy: Annotated[str, typer.Option(help="Access policy TOML (default: the packaged one).")] = "",
    versions: Annotated[str, typer.Option(envvar="RUNFACTS_RUN_VERSIONS", help=(
        "Current RunVersions as JSON (default $RUNFACTS_RUN_VERSIONS, which runfacts.client also "
        "reads, else the packaged default)."))] = "",
    user_view: Annotated[bool, typer.Option(
        "--user-view/--no-user-view", help="Publish the user view in the decider's transaction.")] = True,
    tools: Annotated[str, typer.Option(
        help="Read the manifest from this tool registry, module:attribute (instead of --capabilities).")] = "",
) -> None:
    """The run decider: commands -> events, run state and user view, exactly once.

    Signed approvals are required when a keyring is configured (RUNFACTS_APPROVAL_KEYS[_FILE]).
    """
    if tools:
        from runfacts.schemas.errors import ConfigError
        from runfacts.tools.manifest import written_manifest

        if capabilities:
            raise ConfigError("--tools", tools, "give --tools or --capabilities, not both")
        capabilities = str(written_manifest(tools, engine_settings().state_dir / "manifests"))
    _run("decider", {"prefix": prefix, "capabilities": capabilities, "policy": policy,
                     "versions": versions, "user_view": "true" if user_view else "false"})


@app.command("dispatcher")
def dispatcher(
    args_store: Annotated[str, typer.Option(
        help="Argument store: a SQLite file or a postgresql:// URL (the harness's database).")],
    prefix: Prefix = "runfacts",
    provider_url: Annotated[str, typer.Option(help="Payment provider (default $RUNFACTS_PAYMENT_URL).")] = "",
    capabilities: Capabilities = "",
    instance: Annotated[str, typer.Option(help="Actor subjectId (default $RUNFACTS_INSTANCE_ID).")] = "",
    tools: Annotated[str, typer.Option(
        envvar="RUNFACTS_TOOLS",
        help="Tool registry to serve, module:attribute (default runfacts.tools.refund:registry).")] = "",
    threads: Annotated[int, typer.Option(min=1, help="Threads that run sync tools.")] = 8,
) -> None:
    """The tool dispatcher: executes authorized tool calls, reconciles unknown outcomes.

    Serves the tools of a registry (docs/tools.md). The payment API key comes from
    $RUNFACTS_PAYMENT_API_KEY (never from a command line) and is needed only when the
    registry serves payments.refund (the default registry does).
    """
    _run("dispatcher", {"prefix": prefix, "args_store": args_store, "provider_url": provider_url,
                        "capabilities": capabilities, "instance": instance, "tools": tools,
                        "threads": str(threads)})


@app.command("projector")
def projector(prefix: Prefix = "runfacts") -> None:
    """The projector: events -> audit records (hash chain) and eval trajectories, exactly once.

    Personal values in audit records are HMAC digests under $RUNFACTS_AUDIT_PII_KEY when set.
    """
    _run("projector", {"prefix": prefix})


@app.command("memory")
def memory(prefix: Prefix = "runfacts") -> None:
    """The memory projector: events -> the compacted <prefix>.memory topic (confirmed, unexpired,
    unrevoked memories per scope, with provenance; tombstones at revocation and expiry), exactly once.
    """
    _run("memory", {"prefix": prefix})


@app.command("agent")
def agent(
    spec: Annotated[str, typer.Argument(
        metavar="MODULE:AGENT", help="Your agent: an @rf.agent service or a plain handler function "
                                     "`def handler(run)`, module:attribute (imported from this directory).")],
    prefix: Prefix = "runfacts",
    name: Annotated[str, typer.Option(help="The agent's name for a plain handler function (default: the "
                                           "function's name).")] = "",
) -> None:
    """Your agent (docs/guide.md, "Agents that recover by themselves"): serve its runs until SIGTERM/SIGINT.

    MODULE:AGENT names an `@rf.agent(name)` service (its module connects its own client) or a
    plain handler function, which this worker serves as `Runfacts.connect().agent(name)` (the
    module then needs no client of its own, and a unit test hands the same function to
    `runfacts.testing`). The process joins the agent's consumer group and owns a share of its
    runs; open runs are re-entered by replay. `runfacts dev up --agent` runs it as one more
    supervised worker.
    """
    import inspect
    import signal

    from runfacts.client import Runfacts
    from runfacts.client.agents import Agent
    from runfacts.schemas.errors import ConfigError
    from runfacts.tools.loader import load_attribute

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ["RUNFACTS_KAFKA_TOPIC_PREFIX"] = prefix  # before the module connects its client
    found = load_attribute(spec, "MODULE:AGENT", "examples.room_agent:book_room")
    if inspect.isfunction(found):
        found = Runfacts.connect().agent(name or found.__name__)(found)
    if not isinstance(found, Agent):
        raise ConfigError("MODULE:AGENT", spec, f"is a {type(found).__name__}, not an agent: name a handler "
                                                "function `def handler(run)` or an @rf.agent(\"name\") service")
    served = found
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _signum, _frame: served.stop())
    logging.getLogger("runfacts.worker").info("agent %s: serving (%s, prefix %s)", served.name, spec, prefix)
    served.serve()
    raise typer.Exit(0)
