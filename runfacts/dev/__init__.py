"""Non-product code, fenced (no product module imports it): local services, engine fixtures,
the run-script generator, the crash harness (crash/) and the simulated payment provider
(provider/).

Shells: services (local Kafka and PostgreSQL), apps (counter_app, an engine fixture),
runscript (scripted run logs for tests, golden logs and benchmarks), up (`runfacts dev up`:
the broker, the topics and every worker as one supervised process tree).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

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
__all__ = ["DevOptions", "DevStack", "LocalKafka", "LocalPostgres", "RunScript", "counter_app"]


__getattr__ = lazy_names(__name__, _HOME)
