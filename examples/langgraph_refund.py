"""A LangGraph refund agent: the graph's refund tool call is a runfacts proposal; the graph waits
in `interrupt()` while a person decides through runfacts; the refund comes from the dispatcher.

    python examples/langgraph_refund.py T-9001 order-001 4200 graph.db

Run the same command again after a crash (even `kill -9` in the interrupt): the graph resumes
from its SQLite checkpointer and runfacts gives the same call, so the refund happens once.
The model is langchain-core's fake chat model scripted by the conversation (no network).
"""

import contextlib
import sys
from typing import Annotated, Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command
from typing_extensions import TypedDict

from runfacts.client import ClientError, Runfacts, ToolCall
from runfacts.integrations.langgraph import Gate, RunfactsToolNode


class State(TypedDict):
    messages: Annotated[list, add_messages]


@tool
def lookup_order(orderId: str) -> str:  # noqa: N803 - the tool's argument
    """Look an order up. Ungated: the tool node runs it in the graph, as LangGraph's ToolNode does."""
    return f"order {orderId}: paid, refundable"


@tool
def refund(orderId: str, amountMinor: int, currency: str = "EUR") -> str:  # noqa: N803 - the tool's arguments
    """Refund an order. Gated: its schema checks the model's arguments; runfacts' dispatcher runs it."""
    raise RuntimeError("never runs here: runfacts proposes it and its dispatcher executes it")


def model(state: State) -> dict[str, Any]:
    """The fake model: looks the order up and asks for the refund, then reports what the refund returned."""
    last = state["messages"][-1]
    if isinstance(last, ToolMessage):  # the refund's (the last of the step's tool messages)
        reply = AIMessage(f"refund tool said ({last.status}): {last.content}")
    else:
        order, amount = last.content.split()[1:3]
        reply = AIMessage("", tool_calls=[
            {"name": "lookup_order", "id": f"tc-lookup-{order}", "args": {"orderId": order}},
            {"name": "refund", "id": f"tc-{order}", "args": {"orderId": order, "amountMinor": int(amount),
                                                             "currency": "EUR"}}])
    return {"messages": [GenericFakeChatModel(messages=iter([reply])).invoke(state["messages"])]}


def build(rf: Runfacts, capability: str = "payments.refund", **node_options: Any) -> StateGraph:
    """model -> tools (the refund gated by runfacts) -> model, until the model stops calling tools."""
    graph = StateGraph(State)
    tools = RunfactsToolNode(
        rf,
        interrupt_on={"refund": Gate(capability, target="orderId")},  # tool name -> runfacts capability
        tools=[lookup_order, refund],  # ungated tools run here; a gated one's schema checks its arguments
        **node_options)
    graph.add_node("model", tools.guard(model))  # the model sees a gated call's result only from runfacts' facts
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", lambda s: "tools" if s["messages"][-1].tool_calls else END)
    graph.add_edge("tools", "model")
    return graph


def handle(rf: Runfacts, ticket: str, order: str, amount_minor: int, db: str) -> str:
    run = rf.start_run(goal=f"ticket:{ticket}", summary=f"Refund {order}", user_id="customer-42",
                       run_id=f"lg-refund-{ticket}")  # idempotent: the same run after a restart
    config = {"configurable": {"thread_id": run.id}}
    with SqliteSaver.from_conn_string(db) as saver:
        graph = build(rf).compile(checkpointer=saver)
        snapshot = graph.get_state(config)
        if snapshot.interrupts:
            result = graph.invoke(Command(resume="woken"), config)  # restarted inside the interrupt
        else:
            result = graph.invoke({"messages": [HumanMessage(f"refund {order} {amount_minor}")]}, config)
        while "__interrupt__" in result:
            asked = result["__interrupt__"][0].value
            print("waiting for", asked["approvalId"], asked["asks"], flush=True)
            # the decision is runfacts': wait for it, then wake the graph (rejected or expired too:
            # the tool node turns that into the tool's message)
            with contextlib.suppress(ClientError):
                ToolCall(run, asked["toolCallId"], asked["capability"], asked["argsHash"], None).decision()
            result = graph.invoke(Command(resume="woken"), config)
    answer = result["messages"][-1].content
    if "(success)" in answer:
        run.complete(outcome=f"refund:{order}")
    else:
        run.fail("refund_not_done")
    return answer


if __name__ == "__main__":
    with Runfacts.connect() as rf:  # RUNFACTS_KAFKA_*, RUNFACTS_ARGS_STORE
        print(handle(rf, sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]), flush=True)
