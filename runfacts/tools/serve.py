"""The manifest a dispatcher serving a tool registry works with.

The factory itself is a composition root: `runfacts.workers.dispatcher` (`runfacts worker
dispatcher --tools module:registry`). The manifest is the registry's own, or the
`capabilities` file the decider reads when one is given: that file must then hold every
served tool (a ConfigError naming the tool otherwise) and wins where it differs from the
registry (each difference is logged), so decider and dispatcher read one manifest.
"""

from __future__ import annotations

import logging
from pathlib import Path

from runfacts.processors.policy.capabilities import CapabilityCatalog, load_capabilities
from runfacts.schemas.errors import ConfigError
from runfacts.tools.registry import ToolRegistry

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
