"""An OpenAI Agents SDK refund agent on runfacts: the refund tool needs approval; runfacts holds it.

    python examples/openai_agents_refund.py T-9001 order-001 4200   # waits until a person approves
    python examples/openai_agents_refund.py --resume                # after a crash: finish the open runs

The model is the SDK's own ScriptedModel (agents.testing: no network, no weights) and tracing is
off (RunConfig(tracing_disabled=True)): nothing leaves the machine. Put your own model in its place.
The agent keeps its RunState in its own storage ($REFUND_AGENT_STATE, a folder of JSON files), as
the SDK's human-in-the-loop expects; runfacts keeps the approval and the side effect.
"""

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner, RunState, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from runfacts.client import Run, Runfacts
from runfacts.integrations.openai_agents import Gate, facts_only, gated_tools, resume_state

NO_NETWORK = RunConfig(tracing_disabled=True,
                       call_model_input_filter=facts_only)  # the model sees gated results only from runfacts' facts
STATE = Path(os.environ.get("REFUND_AGENT_STATE", "refund-agent-state"))


@function_tool(needs_approval=True)
def refund(orderId: str, amountMinor: int, currency: str = "EUR") -> dict:  # noqa: N803 - the tool's arguments
    """Refund an order. Runs in the runfacts dispatcher (payments.refund) once a person approved it."""
    raise RuntimeError("never runs here: runfacts proposes it and its dispatcher executes it")


def scripted_model(order: str, amount_minor: int) -> ScriptedModel:
    """Stands in for an LLM: asks for the refund the prompt names, then reports what came back."""

    def think(call: ModelCall) -> list[Any]:
        outputs = [str(i["output"]) for i in call.input
                   if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            return [function_call("refund", {"orderId": order, "amountMinor": amount_minor, "currency": "EUR"},
                                  call_id=f"fc-{order}")]
        done = json.loads(outputs[-1]) if outputs[-1].startswith("{") else {}
        return [assistant_message(f"refunded {done['refundId']}" if "refundId" in done
                                  else f"not refunded: {outputs[-1]}")]

    return ScriptedModel([ModelStep.respond(think), ModelStep.respond(think)])


def gates(capability: str = "payments.refund") -> dict[str, Gate]:
    """The refund tool is the runfacts capability, its target the order."""
    return {"refund": Gate(capability, target="orderId", action="refund")}


def build_agent(order: str = "", amount_minor: int = 0, capability: str = "payments.refund") -> Agent:
    return Agent(name="refunds", instructions="Refund what the ticket asks.", model=scripted_model(order, amount_minor),
                 tools=gated_tools([refund], gates(capability)))


async def handle(rf: Runfacts, ticket: str, order: str, amount_minor: int) -> str:
    run = await asyncio.to_thread(rf.start_run, goal=f"ticket:{ticket}", summary=f"Refund {order}",
                                  user_id="customer-42", run_id=f"oa-refund-{ticket}")
    agent = build_agent(order, amount_minor)
    result = await Runner.run(agent, f"refund {order} {amount_minor}", context=run, run_config=NO_NETWORK)
    return await finish(run, agent, result.to_state() if result.interruptions else None, result.final_output)


async def finish(run: Run, agent: Agent, state: RunState | None, answer: Any = None) -> str:
    while state is not None:  # the run waits on the refund's approval
        STATE.mkdir(parents=True, exist_ok=True)  # the agent's own storage: survives a crash
        (STATE / f"{run.id}.json").write_text(state.to_string(context_serializer=lambda _: {"runId": run.id}))
        state = await resume_state(run, state, gates(), timeout=600)  # runfacts' decisions, never the client's
        result = await Runner.run(agent, state, run_config=NO_NETWORK)
        state, answer = (result.to_state() if result.interruptions else None), result.final_output
    if str(answer).startswith("refunded"):  # commands block for the decider's answer: off the event loop
        await asyncio.to_thread(run.complete, outcome=f"refund:{run.id}")
    else:
        await asyncio.to_thread(run.fail, "refund_not_done")
    return str(answer)


async def resume(rf: Runfacts) -> list[str]:
    done = []
    for run in await asyncio.to_thread(rf.open_runs):
        saved = STATE / f"{run.id}.json"
        if saved.exists():
            agent = build_agent()
            state = await RunState.from_string(agent, saved.read_text(), context_override=run)
            done.append(await finish(run, agent, state))
    return done


if __name__ == "__main__":
    with Runfacts.connect() as rf:  # RUNFACTS_KAFKA_*, RUNFACTS_KAFKA_TOPIC_PREFIX, RUNFACTS_ARGS_STORE
        if sys.argv[1:] == ["--resume"]:
            print(asyncio.run(resume(rf)), flush=True)
        else:
            print(asyncio.run(handle(rf, sys.argv[1], sys.argv[2], int(sys.argv[3]))), flush=True)
