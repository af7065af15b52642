"""The commands for local development, fenced from the product's commands: `runfacts dev
kafka|postgres …` (the local broker and database), `runfacts dev crash` (the crash matrix) and
`runfacts provider` (the simulated payment provider the demo and the crash rows call).

Shells: services (the `dev` group: kafka, postgres, crash, up), up (`runfacts dev up`), crash
(the crash-matrix table), provider (the simulator's server command). Only this part of the CLI imports runfacts.dev.
"""

from __future__ import annotations

from runfacts.cli.dev.provider import app as provider_app
from runfacts.cli.dev.services import dev_app

__all__ = ["dev_app", "provider_app"]
