"""The commands that run and provision the platform: `runfacts engine|worker` (the processors),
`dispatcher` (its argument store), `outbox` (relay and operations), `topics`, `security`
(ACLs, users, keys, the policy), `capabilities` (the tool manifest) and `schemas` (the contract).

Shells: one module per command group, each a `typer.Typer` named `app` (`topics_app` for topics).
"""

from __future__ import annotations

from runfacts.cli.platform.capabilities import app as capabilities_app
from runfacts.cli.platform.dispatcher import app as dispatcher_app
from runfacts.cli.platform.engine import app as engine_app
from runfacts.cli.platform.outbox import app as outbox_app
from runfacts.cli.platform.schemas import app as schemas_app
from runfacts.cli.platform.security import app as security_app
from runfacts.cli.platform.topics import topics_app
from runfacts.cli.platform.worker import app as worker_app

__all__ = ["capabilities_app", "dispatcher_app", "engine_app", "outbox_app", "schemas_app", "security_app",
           "topics_app", "worker_app"]
