"""Non-product code, fenced (no product module imports it): local services, engine fixtures,
the run-script generator, the crash harness (crash/) and the simulated payment provider
(provider/).

crash/ and provider/ live in the repository only, not in the wheel (pyproject's
`[tool.runfacts] clone-only`): a clone's editable install imports them; `require_clone` names
the fix where an installed wheel lacks them.

Shells: services (local Kafka and PostgreSQL), apps (counter_app, an engine fixture),
runscript (scripted run logs for tests, golden logs and benchmarks), up (`runfacts dev up`:
the broker, the topics and every worker as one supervised process tree).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names
from runfacts.schemas.errors import ConfigError

if TYPE_CHECKING:
    from runfacts.dev.apps import counter_app
    from runfacts.dev.runscript import RunScript
    from runfacts.dev.services import LocalKafka, LocalPostgres
    from runfacts.dev.up import DevOptions, DevStack

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {
    "DevOptions": "up",
    "DevStack": "up",
    "LocalKafka": "services",
    "LocalPostgres": "services",
    "RunScript": "runscript",
    "counter_app": "apps",
}
__all__ = ["CLONE_ONLY", "DevOptions", "DevStack", "LocalKafka", "LocalPostgres", "RunScript", "counter_app",
           "require_clone"]
CLONE_ONLY = ("runfacts.dev.crash", "runfacts.dev.provider")
"""The packages a clone has and the wheel does not (pyproject's `[tool.runfacts] clone-only`)."""


def require_clone(package: str, command: str) -> None:
    """Raise ConfigError naming the fix when `package` (one of CLONE_ONLY) is not installed."""
    if importlib.util.find_spec(package) is None:
        raise ConfigError(command, package, "this runs from a clone of the runfacts repository, not from the "
                          "installed wheel: clone it, run `make setup` (an editable install), then run it from "
                          "the clone's .venv")


__getattr__ = lazy_names(__name__, _HOME)
