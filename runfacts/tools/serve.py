"""The dispatcher worker factory that serves a tool registry (`runfacts worker dispatcher`).

    python -m runfacts.processors.worker --app runfacts.tools.serve:dispatcher_app \
        --param args_store=harness.db --param tools=examples.billing_tools:registry

`tools` (default `runfacts.tools.refund:registry`) names the registry; its tools are the
capabilities this dispatcher serves, and only their adapters are built (so the payment API
key is needed only when `payments.refund` is served). The manifest is the registry's own,
or the `capabilities` file the decider reads when one is given: that file must then hold
every served tool (a ConfigError naming the tool otherwise) and wins where it differs from
the registry (each difference is logged), so decider and dispatcher read one manifest.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from runfacts import telemetry as telemetry_hooks
from runfacts.processors.api import Application
from runfacts.processors.capabilities import CapabilityCatalog, load_capabilities
from runfacts.processors.dispatch_pool import ToolPool
from runfacts.processors.dispatcher_app import DispatcherSettings, DispatcherShell, app_name, result_cap
from runfacts.schemas.errors import ConfigError
from runfacts.tools.adapter import ToolRuntime
from runfacts.tools.loader import DEFAULT_TOOLS, load_registry
from runfacts.tools.registry import ToolRegistry
from runfacts.topics import TopicNames

log = logging.getLogger("runfacts.dispatcher")


def served_catalog(registry: ToolRegistry, capabilities: str = "") -> CapabilityCatalog:
    """The manifest the dispatcher works with (see the module docstring)."""
    own = registry.catalog()
    if not capabilities:
        return own
    given = load_capabilities(Path(capabilities))
    for cid, manifest in own.capabilities.items():
        if cid not in given.capabilities:
            raise ConfigError("--capabilities", capabilities,
                              f"has no capability {cid}, which registry {registry.name!r} serves: "
                              f"regenerate it with `runfacts capabilities export`")
        theirs = given.capabilities[cid].model_dump(by_alias=True)
        for key, value in manifest.model_dump(by_alias=True).items():
            if theirs[key] != value:
                log.warning("capability %s: %s is %r in %s, %r in the registry; using the file's",
                            cid, key, theirs[key], capabilities, value)
    return given


def dispatcher_app(prefix: str = "runfacts", provider_url: str = "", args_store: str = "",
                   capabilities: str = "", instance: str = "", tools: str = "",
                   threads: str = "8") -> Application:
    """Worker factory: the dispatcher serving the registry `tools` (module:attribute)."""
    from runfacts.connectors.args_store import ArgsStore
    from runfacts.processors.incarnation import next_incarnation
    from runfacts.processors.settings import load_settings

    if not args_store:
        raise ConfigError("--param args_store", args_store, "the dispatcher needs the argument store")
    registry = load_registry(tools or DEFAULT_TOOLS)
    catalog = served_catalog(registry, capabilities)
    if not threads.isdigit() or int(threads) < 1:
        raise ConfigError("--param threads", threads, "expected a number of tool threads >= 1")
    adapters = registry.adapters(options={"provider_url": provider_url}, runtime=ToolRuntime(int(threads)))
    engine = load_settings()
    name = app_name(prefix)
    telemetry_hooks.configure_from_env(name)
    incarnation = next_incarnation(engine.state_dir / name / "incarnation", int(time.time() * 1000))
    settings = DispatcherSettings(names=TopicNames(prefix), incarnation=incarnation,
                                  instance=instance or engine.instance_id, catalog=catalog,
                                  result_max_bytes=result_cap())
    log.info("dispatcher %s starts as incarnation %d serving %s", settings.instance, incarnation,
             ", ".join(sorted(adapters)))
    pool = ToolPool(int(threads))  # calls leave the engine transaction (docs/dispatcher.md)
    return DispatcherShell(settings, adapters, ArgsStore.open(args_store), pool=pool).application()
