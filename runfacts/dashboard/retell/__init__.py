"""The run retold, for its page: its story in one paragraph, and the run as it was at any fact.

Pure: story (the run's facts -> the header "Refund … proposed by …, approved by … at 10:42 UTC,
sent, response lost, found completed at the provider, settled."), asof (the decider's fold over
the run's first N facts -> the state, view and pending calls then, and what fact N changed).
Both take the facts as the viewer may read them and trim by role like the rest of the page;
`runfacts.dashboard.runpage`, `console` and `app` use them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.dashboard.retell.asof import AsOf, as_of
    from runfacts.dashboard.retell.story import Story, story

_HOME = {"AsOf": "asof", "as_of": "asof", "Story": "story", "story": "story"}
__all__ = ["AsOf", "Story", "as_of", "story"]

__getattr__ = lazy_names(__name__, _HOME)
