"""The dispatcher parses a run's stored state once while the stored bytes stay the same (issue 34).

Before, every event of a run and every timer re-parsed the run's whole stored JSON
(`load_state`): on a one-at-a-time instant tool call that was a quarter of the dispatcher's CPU
(py-spy, benchmarks/step_latency.py). The cached state must never outlive a rollback: an
aborted batch leaves other bytes in the store, which are parsed again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from decider_support import CTX, create, propose_lookup

from runfacts.connectors.args_store import ArgsStore
from runfacts.processors.decider import decide
from runfacts.processors.decider.evolve import fold
from runfacts.processors.decider.state_json import load_state
from runfacts.processors.dispatcher import app as dispatcher_app
from runfacts.processors.dispatcher.app import DispatcherSettings, DispatcherShell
from runfacts.processors.engine.testdriver import TestDriver
from runfacts.schemas import codec
from runfacts.topics import TopicNames

NAMES = TopicNames("sc")
RUN = "sc-run-1"


class Unused:
    def execute(self, request: Any) -> Any:
        raise AssertionError(request)

    lookup = cancel = execute


def _events() -> tuple[list[Any], Any]:
    """A run whose orders.lookup call the decider authorized, and the state they fold to."""
    state, events = None, []
    for command in (create(run=RUN), propose_lookup(run=RUN)):
        out = decide(command, state, CTX)
        state, events = fold(state, out), events + out
    return events, state


def _driver(tmp: Path) -> TestDriver:
    settings = DispatcherSettings(names=NAMES, catalog=CTX.capabilities, incarnation=1_000, instance="d-1")
    shell = DispatcherShell(settings, {"orders.lookup": Unused(), "payments.refund": Unused()},
                            ArgsStore.open(tmp / "args.db"))
    return TestDriver(shell.application())


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    parsed: list[bytes] = []

    def counted(raw: bytes) -> Any:
        parsed.append(raw)
        return load_state(raw)

    monkeypatch.setattr(dispatcher_app, "load_state", counted)
    return parsed


def test_a_runs_state_is_parsed_once_not_per_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _counting(monkeypatch)
    events, state = _events()
    assert len(events) >= 3
    driver = _driver(tmp_path)
    for event in events:
        driver.pipe(NAMES.events, codec.encode(event), RUN.encode())

    assert parsed == []  # the old code parsed the stored state for every event after the first
    stored = load_state(driver.read_store("runs")[RUN.encode()])
    assert stored == state  # what it stored is the events' fold, as before


def test_an_aborted_batch_is_parsed_again_from_the_rolled_back_bytes(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    events, state = _events()
    driver = _driver(tmp_path)
    for event in events[:-1]:
        driver.pipe(NAMES.events, codec.encode(event), RUN.encode())
    before = driver.read_store("runs")[RUN.encode()]
    parsed = _counting(monkeypatch)

    driver.abort_next_commit()  # the last event's batch aborts, is rolled back and processed again
    driver.pipe(NAMES.events, codec.encode(events[-1]), RUN.encode())

    assert parsed == [before]  # the retry read the rolled-back bytes, not the aborted batch's state
    assert load_state(driver.read_store("runs")[RUN.encode()]) == state
    claims = [codec.decode(r.value) for r in driver.outputs(NAMES.commands)]
    assert len(claims) == len({c.commandId for c in claims})  # nothing twice
