"""`runfacts.testing`: test an agent without a broker, with the real decider and dispatcher.

    from runfacts.testing import TestStack

    with TestStack(registry) as stack:          # your ToolRegistry (or "module:registry")
        rf = stack.client()                     # what Runfacts.connect() returns in production
        my_agent(rf)                            # the same agent code
        stack.advance(timedelta(minutes=16))    # the clock moves only when told (timers fire)
        assert len(stack.executions("payments.refund")) == 1

The decider, the dispatcher (serving your registry's tools) and the memory projector are the
packaged applications, run by the engine's broker-free driver (`TestDriver`) with in-memory
logs and one controllable clock. Faults: `stack.lose_response(capability)` (the tool runs, its
answer is lost: reconciled through the tool's lookup), `stack.crash_at(point)` (the dispatcher
dies at a named crash point and a new incarnation takes over), an approval that expires
(`stack.advance(...)` past its TTL) and a rejected one (`rf.decide(approval, "reject", ...)`).
docs/testing.md shows each.

`contracts`: `ToolAdapterContract` and `FencingContract`, the suites a tool adapter you write is
held to (subclass them in your tests; docs/tools.md, "Holding an adapter to the rules").
`outbox`: `OutboxStoreContract`, the suite an outbox store dialect is held to (ADR 0007,
"Holding a store dialect to the rules").

Shells: stack (`TestStack`), client (`TestClient`, the `Runfacts` API over the stack; `Stuck`),
parts (the in-memory argument store, the inline tool runtime, the fault-injecting tool wrapper,
`SimulatedCrash`); all three run the processors in this process. outbox (`OutboxStoreContract`) runs against
the database a subclass connects to. This room sits
with runfacts.client (it hands out its handles) and may import the tools room; nothing in the
product imports it.
"""

from runfacts.testing.client import Stuck, TestClient
from runfacts.testing.contracts import FencingContract, ToolAdapterContract
from runfacts.testing.outbox import OutboxStoreContract
from runfacts.testing.parts import SimulatedCrash
from runfacts.testing.stack import CRASH_POINTS, TestStack

__all__ = ["CRASH_POINTS", "FencingContract", "OutboxStoreContract", "SimulatedCrash", "Stuck", "TestClient",
           "TestStack", "ToolAdapterContract"]
