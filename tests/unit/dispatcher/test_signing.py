"""The dispatcher signs its commands with its own source key (issue 20): with a decider that
verifies every source, a refund with a lost response and its reconciliation runs to its end,
and nothing is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from decider_support import CTX

from runfacts.processors.dispatcher.app import DispatcherSettings, DispatcherShell
from runfacts.processors.policy.approvals import Keyring, SigningKey
from runfacts.processors.policy.sources import KEY_ID_HEADER, SourceKeys
from runfacts.schemas.errors import ConfigError

from .dispatcher_support import NAMES, Loop


def _ring(kid: str, fill: bytes) -> Keyring:
    return Keyring(keys={kid: SigningKey(fill * 32)}, current=kid)


KEYS = SourceKeys({"dashboard": _ring("dsh-1", b"a"), "agent-harness": _ring("agt-1", b"c"),
                   "dispatcher": _ring("dsp-1", b"d")})


def test_dispatcher_commands_are_signed_and_decided_when_the_decider_checks_signatures(tmp_path: Path) -> None:
    loop = Loop(tmp_path, sources=KEYS)
    try:
        loop.sim.set_faults(acceptThenDropNext=1)
        loop.start_refund()
        sent = loop.dispatcher.outputs(NAMES.commands)
        types = [c.commandType for c in loop.commands()]
        assert {"tool.call.claim", "tool.call.report_result_unknown", "tool.call.report_reconciled"} <= set(types)
        assert all(dict(r.headers)[KEY_ID_HEADER] == b"dsp-1" for r in sent)
        assert loop.decider.dead_letters() == []
        assert loop.call().execution == "completed"
    finally:
        loop.close()


def test_dispatcher_without_its_own_key_fails_at_start_naming_the_source(tmp_path: Path) -> None:
    settings = DispatcherSettings(names=NAMES, catalog=CTX.capabilities, incarnation=1,
                                  sources=SourceKeys({"cli": KEYS.keyrings["dashboard"]}))
    with pytest.raises(ConfigError, match="'dispatcher'.*RUNFACTS_SOURCE_KEYS"):
        DispatcherShell(settings, {}, None)  # type: ignore[arg-type]
