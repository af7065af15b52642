"""The live dashboard (`runfacts dashboard serve`): runs, approval banners, control commands.

Pure: html (the pages and fragments), runpage (what a run's page says, a page at a time: timeline, tool-call
tracks, approvals), runlist (the run list: filters, search, pages; the compact RunRow),
console (their HTML), charts (the health page's SVG charts); the room `retell` (pure: the run's
story, the run as of any fact).
Shells: app (the Starlette app), feed (live views, states and facts from the topics, bounded),
health (consumer lag, the engines' metrics feed), session (signed
sessions, CSRF), guard (server-side sessions, the live users file, login throttling), letters
(dead letters: read, redrive).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.dashboard.app import Dashboard, create_app
    from runfacts.dashboard.feed import ViewFeed
    from runfacts.dashboard.session import SessionSigner

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {"Dashboard": "app", "SessionSigner": "session", "ViewFeed": "feed", "create_app": "app"}
__all__ = ["Dashboard", "SessionSigner", "ViewFeed", "create_app"]


__getattr__ = lazy_names(__name__, _HOME)
