"""A call of a capability the dispatcher has no adapter for stops it on that record (issue 15
item 3); the broker-side proof that nothing is committed past it is
tests/integration/test_dispatcher_kafka.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from decider_support import AGENT

from runfacts.processors.dispatcher.app import UnservedCapability
from runfacts.processors.engine.api import ProcessingError
from runfacts.processors.policy.retry import args_hash
from runfacts.schemas import commands as cmd

from .dispatcher_support import RUN, Loop


def test_dispatcher_stops_naming_the_capability_when_it_has_no_adapter_for_an_authorized_call(
        tmp_path: Path) -> None:
    loop = Loop(tmp_path)
    try:
        loop.start_refund(approve=False)
        loop.pipe(loop.at(cmd.ProposeToolCall, AGENT, toolCallId="tool-call-010", capabilityId="orders.lookup",
                          argsHash=args_hash({"orderId": "order-001"}), argsRef="args/lookup",
                          target="order-001", action="lookup", risk="low", summary="look up order-001"))
        with pytest.raises(ProcessingError) as raised:
            loop.settle()
        cause = raised.value.__cause__
        assert isinstance(cause, UnservedCapability) and cause.value == "orders.lookup"
        assert f"call {RUN}/tool-call-010" in str(cause) and "serves payments.refund" in str(cause)
        assert [c.commandType for c in loop.commands()] == []  # nothing sent for it
    finally:
        loop.close()
