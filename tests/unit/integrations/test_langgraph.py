"""The LangGraph bridge without a broker: the version check at import (with a faked version
string), what a resume value claims, the graph step reference, and a doorway that imports no
framework."""

from __future__ import annotations

import subprocess
import sys

import pytest
from client_support import docs_code_not_in_example

from runfacts.integrations import IncompatibleFramework
from runfacts.integrations.langgraph import asked_decision, check_version, step_ref

FAKE_VERSION = """
import importlib.metadata as md
real = md.version
md.version = lambda name: {found!r} if name == "langgraph" else real(name)
import runfacts.integrations.langgraph
"""


def test_import_fails_clearly_when_the_installed_langgraph_is_incompatible() -> None:
    done = subprocess.run([sys.executable, "-c", FAKE_VERSION.format(found="0.6.11")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert ("IncompatibleFramework: langgraph 0.6.11 is installed; runfacts.integrations supports "
            "langgraph>=1.2,<1.3: pip install 'runfacts[langgraph]' (or 'langgraph>=1.2,<1.3')") in done.stderr


def test_import_succeeds_with_a_supported_langgraph_version() -> None:
    done = subprocess.run([sys.executable, "-c", FAKE_VERSION.format(found="1.2.0")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("found", ["0.6.11", "1.1.9", "1.3.0", "2.0.0", "", "dev"])
def test_check_version_raises_an_import_error_naming_the_version_when_outside_the_range(found: str) -> None:
    with pytest.raises(ImportError) as raised:
        check_version(found)
    assert isinstance(raised.value, IncompatibleFramework) and raised.value.found == (found or None)
    assert (f"langgraph {found} is installed" if found else "langgraph is not installed") in str(raised.value)


@pytest.mark.parametrize("found", ["1.2.0", "1.2.24", "1.2.99rc1"])
def test_check_version_accepts_the_tested_range(found: str) -> None:
    check_version(found)


@pytest.mark.parametrize(("resume", "expected"), [
    ("approve", (None, "approve")),
    ({"decisions": [{"type": "reject", "message": "no"}]}, (None, "reject")),
    ({"decisions": [{"type": "approve", "approvalId": "approval-1"}]}, ("approval-1", "approve")),
    ({"approvalId": "approval-1", "decision": "approve"}, ("approval-1", "approve")),
    ({"decisions": []}, (None, None)),
    (None, (None, None)),
    (42, (None, None)),
])
def test_asked_decision_reads_what_a_resume_value_asks_without_trusting_it(resume: object, expected: tuple) -> None:
    assert asked_decision(resume) == expected


def test_step_ref_names_the_thread_and_the_root_checkpoint_of_the_step() -> None:
    config = {"configurable": {"thread_id": "lg-1", "checkpoint_map": {"": "1f1e-abc"}, "checkpoint_id": None,
                               "checkpoint_ns": "tools:task-9"}}
    assert step_ref(config) == "langgraph:lg-1:1f1e-abc"  # type: ignore[arg-type]
    assert step_ref({"configurable": {"thread_id": "lg-2"}}) == "langgraph:lg-2:none"


def test_the_integrations_doorway_imports_no_framework() -> None:
    code = ("import sys, runfacts.integrations; "
            "print([m for m in ('langgraph', 'langchain_core', 'pydantic_ai') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_both_bridges_gate_with_the_one_shared_gate() -> None:
    import runfacts.integrations.pydantic_ai as pydantic_ai
    from runfacts.integrations import facts
    from runfacts.integrations.langgraph import Gate

    assert Gate is facts.Gate is pydantic_ai.Gate
    gate = facts.Gate("payments.refund", target=lambda a: f"order-{a['n']}", summary=lambda a: f"refund {a['n']}")
    assert (gate.target_of({"n": 7}), gate.action_name(), gate.risk, gate.summary_of({"n": 7})) == (
        "order-7", "refund", "medium", "refund 7")


def test_the_docs_langgraph_code_is_the_tested_example_verbatim_when_read() -> None:
    shown, missing = docs_code_not_in_example("LangGraph", "langgraph_refund.py")
    assert shown >= 3 and missing == [], f"docs/integrations.md shows code the example does not run: {missing}"


def test_the_extras_pin_the_ranges_the_bridges_check_when_pyproject_is_read() -> None:
    import tomllib
    from pathlib import Path

    import runfacts.integrations.pydantic_ai as pydantic_ai
    from runfacts.integrations.langgraph import SUPPORTED

    extras = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]
    low, high = (".".join(map(str, v)) for v in SUPPORTED)
    assert f"langgraph>={low},<{high}" in extras["langgraph"] and f"langgraph>={low},<{high}" in extras["dev"]
    assert f"{pydantic_ai.PACKAGE}{pydantic_ai.SUPPORTED}" in extras["pydantic-ai"]
    assert f"{pydantic_ai.PACKAGE}{pydantic_ai.SUPPORTED}" in extras["dev"]


def _saver_with_threads(*threads: str):  # a real checkpointer holding these threads' checkpoints
    from typing import TypedDict

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    class Count(TypedDict):
        n: int

    graph = StateGraph(Count)
    graph.add_node("step", lambda s: {"n": s["n"] + 1})
    graph.add_edge(START, "step")
    graph.add_edge("step", END)
    saver = InMemorySaver()
    for thread in threads:
        graph.compile(checkpointer=saver).invoke({"n": 0}, {"configurable": {"thread_id": thread}})
    return saver


def test_retire_checkpoints_deletes_the_runs_threads_only_once_checkpoint_archived_is_a_fact() -> None:
    from decider_support import VERSIONS, Scenario, command, create

    from runfacts.integrations.langgraph import archived_threads, retire_checkpoints
    from runfacts.schemas import commands as cmd

    saver = _saver_with_threads("thread-a", "thread-other")
    other = {"configurable": {"thread_id": "thread-other"}}
    s = Scenario().given(create(), *[command(cmd.SaveCheckpoint, node=f"langgraph:thread-a:1f0-ck-{i}",
                                             stateHash=f"h{i}", versions=VERSIONS) for i in (1, 2)])
    assert retire_checkpoints(saver, s.log) == []  # the run goes on: its checkpoints serve recovery
    assert saver.get_tuple({"configurable": {"thread_id": "thread-a"}}) is not None
    s.given(command(cmd.CompleteRun, outcomeRef="o"))
    assert [e.eventType for e in s.log][-1] == "checkpoint.archived"
    assert archived_threads(s.log) == ["thread-a"]
    assert retire_checkpoints(saver, s.log) == ["thread-a"]
    assert saver.get_tuple({"configurable": {"thread_id": "thread-a"}}) is None  # no longer served
    assert list(saver.list({"configurable": {"thread_id": "thread-a"}})) == []  # nor retained
    assert saver.get_tuple(other) is not None  # another run's thread is left alone
    assert retire_checkpoints(saver, s.log) == ["thread-a"]  # idempotent


def test_an_invalid_gated_call_gets_langgraphs_own_invalid_arguments_tool_message() -> None:
    from runfacts.integrations.langgraph import invalid_arguments

    message = invalid_arguments({"name": "refund", "id": "tc-1", "args": {"orderId": "o-1"}},
                                "amountMinor: Field required")
    assert message.status == "error" and message.tool_call_id == "tc-1" and message.name == "refund"
    assert message.content == ("Error invoking tool 'refund' with kwargs {'orderId': 'o-1'} with error:\n"
                               " amountMinor: Field required\n Please fix the error and try again.")
    assert message.artifact == {"runfacts": "invalid_arguments"}


REFUSED = "amountMinor: Input should be <= 100000"


class RefusingRun:
    """A run whose decider refuses every proposal's arguments (reason invalid_arguments), as the
    decider does for arguments that fail the capability's schema: the bridges' wiring, no broker."""

    id = "run-refusing"
    journal = type("Journal", (), {"entries": []})()

    def propose(self, capability: str, args: object, **fields: object) -> object:
        from runfacts.client import CommandRejected

        raise CommandRejected(self.id, "tool.call.propose", "invalid_arguments", REFUSED)


def test_a_decider_invalid_arguments_rejection_is_langgraphs_invalid_arguments_message() -> None:
    from langchain_core.messages import AIMessage

    from runfacts.integrations.langgraph import Gate, RunfactsToolNode

    rf = type("Rf", (), {"run": lambda self, run_id: RefusingRun()})()
    node = RunfactsToolNode(rf, interrupt_on={"refund": Gate("payments.refund", target="orderId")})  # type: ignore[arg-type]
    call = {"name": "refund", "id": "tc-1", "args": {"orderId": "o-1", "amountMinor": 250000}}
    out = node({"messages": [AIMessage("", tool_calls=[call])]}, {"configurable": {"thread_id": "run-refusing"}})
    [message] = out["messages"]
    assert message.status == "error" and message.artifact == {"runfacts": "invalid_arguments"}
    assert "Error invoking tool 'refund'" in message.content and REFUSED in message.content
