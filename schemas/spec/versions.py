"""The contract of draining a version (docs/ops.md "Draining and migrating a version"): its own spec file, joined into
`spec.commands.COMMANDS` and `spec.events.EVENTS`.

A drain is not a run (as an erasure is not): `runfacts runs drain` sends one `version.drain` to
every partition of the commands topic (runId `drain-<digest>-<n>`, one landing on each), and each
partition's decider records `version.drained` and refuses `run.create` on that version from then on.
"""

from __future__ import annotations

from runfacts.schemas.spec.fields import ACTOR, BOOLEAN, STRING, TypeSpec, f

DIMENSION_DOC = "Which version of the run: stateSchema, modelRoute, toolManifest or policy."


def _command() -> TypeSpec:
    return TypeSpec("command", "DrainVersion", "version.drain",
                    1, "Stop new runs starting on a version (operator; one per partition).", (
                        f("dimension", STRING, DIMENSION_DOC),
                        f("version", STRING, "The version drained (as RunVersions names it)."),
                        f("undo", BOOLEAN, "True: end the drain (new runs may start on the version again).",
                          default=False),
                        f("reason", STRING, default="", pii=True),
                    ))


def _event() -> TypeSpec:
    return TypeSpec("event", "VersionDrained", "version.drained", 1,
                    "A partition's decider stopped (or, undone, resumed) new runs on a version.", (
                        f("dimension", STRING, DIMENSION_DOC),
                        f("version", STRING, "The version drained (as RunVersions names it)."),
                        f("undo", BOOLEAN, "True: the drain ended.", default=False),
                        f("reason", STRING, default="", pii=True),
                        f("actor", ACTOR),
                    ))


COMMANDS: list[TypeSpec] = [_command()]
EVENTS: list[TypeSpec] = [_event()]
