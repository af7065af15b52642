"""A Pydantic AI refund agent on runfacts: the refund tool needs approval; runfacts holds it.

    python examples/pydantic_ai_refund.py T-9001 order-001 4200   # waits until a person approves
    python examples/pydantic_ai_refund.py --resume                # after a crash: finish the open runs

The model is scripted (FunctionModel: no network, no weights); put your own in its place. The
agent keeps its message history in its own storage ($REFUND_AGENT_STATE, a folder of JSON files),
as Pydantic AI's deferred tools expect; runfacts keeps the approval and the side effect.
"""

import asyncio
import os
import sys
from pathlib import Path

from pydantic import TypeAdapter
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.toolsets import FunctionToolset

from runfacts.client import Run, Runfacts
from runfacts.integrations.pydantic_ai import Gate, RunfactsApprovals, resume_results

STATE = Path(os.environ.get("REFUND_AGENT_STATE", "refund-agent-state"))
REQUESTS = TypeAdapter(DeferredToolRequests)
tools = FunctionToolset()


@tools.tool_plain(requires_approval=True)
def refund(orderId: str, amountMinor: int, currency: str = "EUR") -> dict:  # noqa: N803 - the tool's arguments
    """Refund an order. Runs in the runfacts dispatcher (payments.refund) once a person approved it."""
    raise RuntimeError("never runs here: runfacts proposes it and its dispatcher executes it")


def scripted_model(messages: list, info: object) -> ModelResponse:
    """Stands in for an LLM: asks for the refund the prompt names, then reports what came back."""
    answer = next((p for p in messages[-1].parts if isinstance(p, ToolReturnPart)), None)
    if answer is not None:
        done = isinstance(answer.content, dict) and "refundId" in answer.content
        return ModelResponse(parts=[TextPart(f"refunded {answer.content['refundId']}" if done
                                             else f"not refunded: {answer.content}")])
    _, order, amount = str(messages[0].parts[-1].content).split()
    return ModelResponse(parts=[ToolCallPart("refund", {"orderId": order, "amountMinor": int(amount)})])


def build_agent(capability: str = "payments.refund") -> Agent:
    gates = {"refund": Gate(capability, target="orderId", action="refund")}
    return Agent(FunctionModel(scripted_model), toolsets=[tools], output_type=[str, DeferredToolRequests],
                 capabilities=[RunfactsApprovals(gates)])


async def handle(rf: Runfacts, agent: Agent, ticket: str, order: str, amount_minor: int) -> str:
    run = await asyncio.to_thread(rf.start_run, goal=f"ticket:{ticket}", summary=f"Refund {order}",
                                  user_id="customer-42", budget={"toolCalls": 3}, run_id=f"refund-{ticket}")
    result = await agent.run(f"refund {order} {amount_minor}", deps=run)
    return await finish(run, agent, result.all_messages(), result.output)


async def finish(run: Run, agent: Agent, messages: list, output: object) -> str:
    while isinstance(output, DeferredToolRequests):
        STATE.mkdir(parents=True, exist_ok=True)  # the agent's own storage: survives a crash
        (STATE / f"{run.id}.json").write_bytes(ModelMessagesTypeAdapter.dump_json(messages))
        (STATE / f"{run.id}.requests.json").write_bytes(REQUESTS.dump_json(output))
        results = await resume_results(run, output, timeout=600)  # runfacts' decisions, never the client's
        result = await agent.run(message_history=messages, deferred_tool_results=results, deps=run)
        messages, output = result.all_messages(), result.output
    if str(output).startswith("refunded"):  # commands block for the decider's answer: off the event loop
        await asyncio.to_thread(run.complete, outcome=f"refund:{run.id}")
    else:
        await asyncio.to_thread(run.fail, "refund_not_approved")
    return str(output)


async def resume(rf: Runfacts, agent: Agent) -> list[str]:
    done = []
    for run in await asyncio.to_thread(rf.open_runs):
        saved = STATE / f"{run.id}.json"
        if saved.exists():
            messages = ModelMessagesTypeAdapter.validate_json(saved.read_bytes())
            requests = REQUESTS.validate_json((STATE / f"{run.id}.requests.json").read_bytes())
            done.append(await finish(run, agent, messages, requests))
    return done


if __name__ == "__main__":
    with Runfacts.connect() as rf:  # RUNFACTS_KAFKA_*, RUNFACTS_KAFKA_TOPIC_PREFIX, RUNFACTS_ARGS_STORE
        if sys.argv[1:] == ["--resume"]:
            print(asyncio.run(resume(rf, build_agent())), flush=True)
        else:
            print(asyncio.run(handle(rf, build_agent(), sys.argv[1], sys.argv[2], int(sys.argv[3]))), flush=True)
