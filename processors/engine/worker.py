"""Run an application as its own process (what the crash matrix kills with -9).

    python -m runfacts.processors.engine.worker --app runfacts.dev.apps:counter_app \
        --param source=input --param output=output

The factory is called with the --param values as keyword arguments (strings); the engine
settings come from the environment (RUNFACTS_*). Exit codes: 0 after a graceful stop
(SIGTERM/SIGINT), 1 handler or input error, 2 configuration error, 3 infrastructure error.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from confluent_kafka import KafkaException

from runfacts.processors.engine import Engine
from runfacts.processors.engine.api import Application
from runfacts.processors.engine.settings import EngineSettings, load_settings
from runfacts.schemas.errors import ConfigError, InfrastructureError, RunfactsError

log = logging.getLogger("runfacts.engine")


def load_app(spec: str, params: dict[str, str]) -> Application:
    """Import `module:factory` and call it with params."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError("--app", spec, "expected module:factory")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("--app", spec, f"cannot load: {exc}") from None
    app = factory(**params)
    if not isinstance(app, Application):
        raise ConfigError("--app", spec, f"factory returned {type(app).__name__}, not Application")
    return app


def parse_params(pairs: Sequence[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError("--param", pair, "expected key=value")
        params[key] = value
    return params


def run(spec: str, pairs: Sequence[str], settings: EngineSettings | None = None) -> int:
    """Run until stopped; returns the process exit code (see module docstring)."""
    try:
        app = load_app(spec, parse_params(pairs))
        engine = Engine(app, settings or load_settings())
        engine.run()
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    except InfrastructureError as exc:
        log.error("%s", exc)
        return 3
    except KafkaException as exc:  # a client call the engine does not wrap (e.g. the broker is down)
        servers = (settings or load_settings()).bootstrap_servers
        log.error("kafka at %s: %s (is the broker running? RUNFACTS_KAFKA_BOOTSTRAP_SERVERS "
                  "names it)", servers, exc.args[0] if exc.args else exc)
        return 3
    except RunfactsError as exc:
        log.error("%s", exc)
        return 1
    log.info("stopped: %s", engine.stats)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runfacts.processors.engine.worker")
    parser.add_argument("--app", required=True, help="module:factory returning an Application")
    parser.add_argument("--param", action="append", default=[], help="key=value for the factory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(args.app, args.param)


if __name__ == "__main__":
    sys.exit(main())
