"""The composition roots: the worker factories and the values they build from parameters.

A factory is what `python -m runfacts.processors.engine.worker --app runfacts.workers:decider`
(and `runfacts worker decider|dispatcher|projector|memory`) calls: it reads the environment, loads
policy and manifests from files, opens stores, picks concrete adapters and hands them to a
shell. That wiring is the only place where processors, projections and connectors meet, so
it lives here, above all three, and the shells stay libraries that take what they need.

Shells: processors/decider/app.py, processors/dispatcher/app.py, projections/projector/app.py,
projections/projector/memory.py.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from runfacts import telemetry
from runfacts.connectors.versions import publish_versions
from runfacts.processors.decider.app import APP_NAME as DECIDER_APP_NAME
from runfacts.processors.decider.app import DeciderShell, InputLimits
from runfacts.processors.decider.context import DEFAULT_VERSIONS, DecideContext
from runfacts.processors.decider.history import EventHistory
from runfacts.processors.decider.security import policy_checks
from runfacts.processors.engine.api import Application
from runfacts.processors.engine.settings import common_config, load_settings, stable_instance_id
from runfacts.processors.policy.access import load_policy
from runfacts.processors.policy.capabilities import load_capabilities
from runfacts.processors.policy.keyring import load_keyring_if_configured, load_source_keys_if_configured
from runfacts.projections.user_view import publisher
from runfacts.schemas.common import RunVersions
from runfacts.schemas.errors import ConfigError
from runfacts.topics import TopicNames

__all__ = ["decide_context", "decider", "dispatcher", "input_limits", "memory_projector", "projector"]

dispatcher_log = logging.getLogger("runfacts.dispatcher")
projector_log = logging.getLogger("runfacts.projector")


def decide_context(capabilities: str = "", policy: str = "", versions: str = "") -> DecideContext:
    """The worker's `DecideContext` from its factory parameters (an oracle builds the same one).

    Policy and capabilities load from the given paths (packaged defaults otherwise); signed
    approvals are required when a keyring is configured (RUNFACTS_APPROVAL_KEYS[_FILE]).
    """
    catalog = load_capabilities(Path(capabilities) if capabilities else None)
    loaded = load_policy(Path(policy) if policy else None, catalog=catalog)
    try:
        current = RunVersions.model_validate_json(versions) if versions else DEFAULT_VERSIONS
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        example = DEFAULT_VERSIONS.model_dump_json(by_alias=True)
        raise ConfigError("--versions", versions, f"expected the run versions as JSON, e.g. '{example}' "
                          f"({str(exc).splitlines()[0]})") from exc
    return DecideContext(current_versions=current, **policy_checks(loaded, load_keyring_if_configured()))


def input_limits(max_record_bytes: str = "", max_text_chars: str = "", max_state_bytes: str = "") -> InputLimits:
    """The shell's `InputLimits` from factory parameters (empty: the default)."""
    default = InputLimits()
    return InputLimits(max_record_bytes=int(max_record_bytes or default.max_record_bytes),
                       max_text_chars=int(max_text_chars or default.max_text_chars),
                       max_state_bytes=int(max_state_bytes or default.max_state_bytes))


def decider(prefix: str = "runfacts", capabilities: str = "", policy: str = "", versions: str = "",
            user_view: str = "true", max_record_bytes: str = "", max_text_chars: str = "",
            max_state_bytes: str = "") -> Application:
    """Worker factory: `runfacts worker decider`, or `--app runfacts.workers:decider`.

    The user view is published to `<prefix>.view.user` in the same transaction as events and
    state; commands over the input limits are dead-lettered (parameters override the limits),
    and so are commands not signed by their source when source keys are configured
    (RUNFACTS_SOURCE_KEYS[_FILE], docs/security.md).
    The decider's current versions are written to `<prefix>.decider.versions` at start, where
    clients read them (connectors/versions.py).
    """
    telemetry.configure_from_env(DECIDER_APP_NAME)
    ctx = decide_context(capabilities, policy, versions)
    names = TopicNames(prefix)
    publish_versions(common_config(load_settings()), names, ctx.current_versions)
    views = (publisher(names.user_view),) if user_view == "true" else ()
    limits = input_limits(max_record_bytes, max_text_chars, max_state_bytes)
    history = EventHistory(common_config(load_settings()), names.events)  # runs stored before their evidence
    at_once = os.environ.get("RUNFACTS_DISPATCH_AT_ONCE", "true").strip().lower()
    if at_once not in ("true", "false"):
        raise ConfigError("RUNFACTS_DISPATCH_AT_ONCE", at_once, "true (ADR 0011: an authorization carries the "
                          "dispatcher's lease) or false (every call is claimed: while older dispatchers run)")
    return DeciderShell(names, ctx, views=views, limits=limits, sources=load_source_keys_if_configured(),
                        history=history, dispatch_at_once=at_once == "true").application()


def dispatcher(prefix: str = "runfacts", provider_url: str = "", args_store: str = "",
               capabilities: str = "", instance: str = "", tools: str = "",
               threads: str = "8") -> Application:
    """Worker factory: `runfacts worker dispatcher [--tools module:registry]`, or
    `--app runfacts.workers:dispatcher --param tools=examples.billing_tools:registry`.

    `tools` (default `runfacts.tools.refund:registry`) names the registry; its tools are the
    capabilities this dispatcher serves and only their adapters are built (so the payment API
    key is needed only when `payments.refund` is served). The manifest is the registry's own,
    or the `capabilities` file the decider reads (runfacts.tools.serve.served_catalog).
    Calls run on a pool of `threads` threads, off the engine transaction (docs/dispatcher.md).
    With privacy keys (RUNFACTS_PII_KEYS[_FILE]) the personal fields of its reports (the tool's
    result, error texts) are sealed for the run's user, keys in `<prefix>.keys` (docs/security.md).
    """
    # imported here: the decider's worker never loads the dispatcher's and projectors' modules (~10 MB)
    from runfacts.connectors.args_store import ArgsStore
    from runfacts.privacy.store import protector_if_configured
    from runfacts.processors.dispatcher.app import DispatcherSettings, DispatcherShell, app_name, result_cap
    from runfacts.processors.dispatcher.incarnation import next_incarnation
    from runfacts.processors.dispatcher.pool import ToolPool
    from runfacts.settings import KafkaSettings
    from runfacts.tools.adapter import ToolRuntime
    from runfacts.tools.control import ToolControlBoard
    from runfacts.tools.loader import DEFAULT_TOOLS, load_registry
    from runfacts.tools.serve import served_catalog
    if not args_store:
        raise ConfigError("--param args_store", args_store, "the dispatcher needs the argument store")
    registry = load_registry(tools or DEFAULT_TOOLS)
    catalog = served_catalog(registry, capabilities)
    if not threads.isdigit() or int(threads) < 1:
        raise ConfigError("--param threads", threads, "expected a number of tool threads >= 1")
    adapters = registry.adapters(options={"provider_url": provider_url}, runtime=ToolRuntime(int(threads)))
    engine = load_settings()
    name = app_name(prefix)
    telemetry.configure_from_env(name)
    incarnation = next_incarnation(engine.state_dir / name / "incarnation", int(time.time() * 1000))
    names = TopicNames(prefix)
    settings = DispatcherSettings(names=names, incarnation=incarnation,
                                  instance=instance or stable_instance_id(engine), catalog=catalog,
                                  result_max_bytes=result_cap(), sources=load_source_keys_if_configured())
    dispatcher_log.info("dispatcher %s starts as incarnation %d serving %s", settings.instance, incarnation,
                        ", ".join(sorted(adapters)))
    pool = ToolPool(int(threads))
    seal = protector_if_configured(KafkaSettings(), names.keys)
    pauses = ToolControlBoard(KafkaSettings(), names.tool_control)  # read whole at the first claim
    return DispatcherShell(settings, adapters, ArgsStore.open(args_store), pool=pool, seal=seal,
                           pauses=pauses).application()


def projector(prefix: str = "runfacts") -> Application:
    """Worker factory: `runfacts worker projector [--prefix P]`.

    Personal values in audit records are digested with HMAC under $RUNFACTS_AUDIT_PII_KEY when
    set (plain SHA-256 otherwise); `runfacts audit verify` needs the same key.
    """
    from runfacts.projections.projector.app import PII_KEY_ENV, ProjectorShell, audit_config
    config = audit_config()  # what `runfacts replay --projection audit` reads too
    if not config.pii_key:
        projector_log.warning("%s is not set: personal values in audit records are plain SHA-256 digests, which "
                    "anyone can match against guessed values (user ids, e-mail addresses); set a key", PII_KEY_ENV)
    return ProjectorShell(TopicNames(prefix), config).application()


def memory_projector(prefix: str = "runfacts") -> Application:
    """Worker factory: `runfacts worker memory [--prefix P]`: events -> the compacted
    `<prefix>.memory` topic (confirmed, unexpired, unrevoked memories), exactly once."""
    from runfacts.projections.projector.memory import MemoryProjectorShell
    return MemoryProjectorShell(TopicNames(prefix)).application()
