"""The refund agent: one run per ticket; a person approves the refund; the refund comes back.

    python examples/refund_agent.py T-9001 order-001 4200     # handle a ticket
    python examples/refund_agent.py --resume                  # after a crash: finish open runs
"""

import sys

from runfacts.client import ApprovalRejected, Run, Runfacts, ToolCall


def handle(rf: Runfacts, ticket: str, order: str, amount_minor: int) -> object:
    run = rf.start_run(goal=f"ticket:{ticket}", summary=f"Refund {order}", user_id="customer-42",
                       budget={"toolCalls": 3, "steps": 20}, run_id=f"refund-{ticket}")
    run.reason(f"refund {order}: damaged on arrival, within 30 days",
               evidence=[f"order:{order}", "policy:refunds-30-days", f"ticket:{ticket}"])
    call = run.propose("payments.refund", {"orderId": order, "amountMinor": amount_minor, "currency": "EUR"},
                       target=order, summary=f"Refund {amount_minor / 100:.2f} EUR for {order}")
    return finish(run, call)


def finish(run: Run, call: ToolCall) -> object:
    try:
        refund = call.result(timeout=600)  # approval, dispatch, reconciliation: all behind this call
    except ApprovalRejected:
        run.fail("refund_rejected")
        return "rejected"
    run.complete(outcome=f"refund:{call.id}")
    return refund


if __name__ == "__main__":
    with Runfacts.connect() as rf:  # RUNFACTS_KAFKA_*, RUNFACTS_ARGS_STORE
        if sys.argv[1:] == ["--resume"]:
            print([finish(run, call) for run in rf.open_runs() for call in run.calls()], flush=True)
        else:
            print(handle(rf, sys.argv[1], sys.argv[2], int(sys.argv[3])), flush=True)
