"""The run decider with the user view hosted as one of its views (an engine app factory).

    python -m runfacts.processors.worker \
        --app runfacts.projections.view_app:decider_with_user_view --param prefix=runfacts

The view is computed from the new state in the decider's own step and committed in the same
transaction as the events and the run state (DeciderShell step 6).
"""

from __future__ import annotations

from pathlib import Path

from runfacts.processors.api import Application
from runfacts.processors.capabilities import load_capabilities
from runfacts.processors.decider import DecideContext
from runfacts.processors.decider_app import DEFAULT_VERSIONS, DeciderShell
from runfacts.projections.user_view import publisher
from runfacts.schemas.common import RunVersions
from runfacts.topics import TopicNames


def decider_with_user_view(prefix: str = "runfacts", capabilities: str = "",
                           versions: str = "") -> Application:
    """The decider application publishing the user variant to `<prefix>.view.user`."""
    names = TopicNames(prefix)
    catalog = load_capabilities(Path(capabilities) if capabilities else None)
    current = RunVersions.model_validate_json(versions) if versions else DEFAULT_VERSIONS
    ctx = DecideContext(capabilities=catalog, current_versions=current)
    return DeciderShell(names, ctx, views=(publisher(names.user_view),)).application()
