"""An OpenAI Agents SDK refund agent on runfacts: the refund tool needs approval; runfacts holds it.

    python examples/openai_agents_refund.py T-9001 order-001 4200   # waits until a person approves

The model is the SDK's own ScriptedModel (agents.testing: no network, no weights) and tracing is
off (RunConfig(tracing_disabled=True)): nothing leaves the machine. Put your own model in its place.
"""

import asyncio
import json
import sys
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from runfacts.client import Runfacts
from runfacts.integrations.openai_agents import Gate, gated_tools, resume_state

NO_NETWORK = RunConfig(tracing_disabled=True)


@function_tool(needs_approval=True)
def refund(orderId: str, amountMinor: int, currency: str = "EUR") -> dict:  # noqa: N803 - the tool's arguments
    """Refund an order. Runs in the runfacts dispatcher (payments.refund) once a person approved it."""
    raise RuntimeError("never runs here: runfacts proposes it and its dispatcher executes it")


def report(call: ModelCall) -> list[Any]:
    """The model's second turn: says what the refund tool returned."""
    output = next(str(i["output"]) for i in reversed(call.input)
                  if isinstance(i, dict) and i.get("type") == "function_call_output")
    done = json.loads(output) if output.startswith("{") else {}
    return [assistant_message(f"refunded {done['refundId']}" if "refundId" in done else f"not refunded: {output}")]


def gates(capability: str = "payments.refund") -> dict[str, Gate]:
    """The refund tool is the runfacts capability, its target the order."""
    return {"refund": Gate(capability, target="orderId", action="refund")}


def build_agent(order: str, amount_minor: int, capability: str = "payments.refund") -> Agent:
    """A scripted model that asks for the refund, then reports; the refund gated by runfacts."""
    model = ScriptedModel([
        [function_call("refund", {"orderId": order, "amountMinor": amount_minor, "currency": "EUR"},
                       call_id=f"fc-{order}")],
        ModelStep.respond(report)])
    return Agent(name="refunds", instructions="Refund what the ticket asks.", model=model,
                 tools=gated_tools([refund], gates(capability)))


async def handle(rf: Runfacts, ticket: str, order: str, amount_minor: int) -> str:
    run = await asyncio.to_thread(rf.start_run, goal=f"ticket:{ticket}", summary=f"Refund {order}",
                                  user_id="customer-42", run_id=f"oa-refund-{ticket}")
    agent = build_agent(order, amount_minor)
    result = await Runner.run(agent, f"refund {order} {amount_minor}", context=run, run_config=NO_NETWORK)
    while result.interruptions:  # runfacts' decisions, never the client's
        state = await resume_state(run, result.to_state(), gates(), timeout=600)
        result = await Runner.run(agent, state, run_config=NO_NETWORK)
    answer = str(result.final_output)
    if answer.startswith("refunded"):
        await asyncio.to_thread(run.complete, outcome=f"refund:{order}")
    else:
        await asyncio.to_thread(run.fail, "refund_not_done")
    return answer


if __name__ == "__main__":
    with Runfacts.connect() as rf:  # RUNFACTS_KAFKA_*, RUNFACTS_KAFKA_TOPIC_PREFIX, RUNFACTS_ARGS_STORE
        print(asyncio.run(handle(rf, sys.argv[1], sys.argv[2], int(sys.argv[3]))), flush=True)
