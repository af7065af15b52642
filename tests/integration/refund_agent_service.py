"""An agent service for tests/integration/test_agent_recovery.py: serves the agent "refunds" until
killed. The first process to reach the point after the refund (a marker file decides) stops there
("paused", as if killed mid-run); any later attempt goes on to complete the run."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from runfacts.client import Run, Runfacts

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
rf = Runfacts.connect()
MARKER = Path(os.environ["AGENT_MARKER"])


@rf.agent("refunds")
def refunds(run: Run) -> None:
    _, order, amount = run.goal.split(":")  # the goal names the task: refund:<order>:<amount>
    run.reason(f"refund {order}: damaged on arrival", evidence=[f"order:{order}"])
    call = run.propose("payments.refund", {"orderId": order, "amountMinor": int(amount), "currency": "EUR"},
                       target=order)
    refund = call.result(timeout=120)
    run.progress("tell the customer", verified=[f"refund:{refund['refundId']}"])
    if not MARKER.exists():
        MARKER.write_text(str(os.getpid()))
        print("paused", run.id, flush=True)
        time.sleep(600)
    run.complete(outcome=f"refund:{refund['refundId']}")
    print("completed", run.id, flush=True)


refunds.serve()
