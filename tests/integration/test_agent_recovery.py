"""Agents that recover by themselves (issue 36 item 2), on the real broker with the packaged
decider, dispatcher and payment simulator: two processes serve the agent "refunds" (one consumer
group over the runs' partitions); the one running a run is killed with SIGKILL after the refund,
before the run completed; the other is assigned its partition, re-enters the run by replaying its
facts and completes it: one refund, no rejected command, one reasoning, within seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from client_support import agent_stack, approval_of, refunds_of

from runfacts.client import Run

pytestmark = pytest.mark.integration
SERVICE = Path(__file__).with_name("refund_agent_service.py")


def wait_for(path: Path, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = path.read_text(errors="replace") if path.exists() else ""
        if text in found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{path.name} shows no {text!r} within {timeout}s: {found[-2000:]}")


def test_a_killed_agent_process_s_run_is_finished_by_another_without_repeating_a_step(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    with agent_stack(kafka_bootstrap, tmp_path / "stack", approval_ttl_ms=120_000) as stack:
        stack.wait_log("decider.log", "assigned partitions")
        env = {**os.environ, **stack.env(), "AGENT_MARKER": str(tmp_path / "paused")}
        procs, outs = [], []
        for n in range(2):
            out = tmp_path / f"agent-{n}.out"
            outs.append(out)
            with out.open("w") as sink, (tmp_path / f"agent-{n}.err").open("w") as errs:
                procs.append(subprocess.Popen([sys.executable, str(SERVICE)], env=env, stdout=sink, stderr=errs))
            wait_for(tmp_path / f"agent-{n}.err", "owns partitions", 60)
        try:
            rf = stack.client()
            submitter = rf.agent("refunds")(lambda run: None)
            run: Run = submitter.submit(goal="refund:order-7001:4200", summary="Refund order-7001",
                                        user_id="customer-42", run_id="agent-T-7001")
            rf.decide(approval_of(rf, run.id), "approve", approver="alice")
            deadline = time.monotonic() + 120
            while not (tmp_path / "paused").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            pid = int((tmp_path / "paused").read_text())
            [victim] = [p for p in procs if p.pid == pid]
            [survivor_out] = [o for p, o in zip(procs, outs, strict=True) if p.pid != pid]
            victim.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            victim.wait(30)
            assert victim.returncode == -signal.SIGKILL
            wait_for(survivor_out, f"completed {run.id}", 60)
            resumed_s = time.monotonic() - killed
            state = rf.state(run.id)
            types = [e.event_type for e in rf.run(run.id).journal.entries]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(30)
        assert state.status == "completed"
        assert len(refunds_of(stack, "order-7001")) == 1  # exactly one side effect
        assert "command.rejected" not in types  # replayed steps answered from the facts, none resent
        assert types.count("reasoning.recorded") == 1 and types.count("tool.call.proposed") == 1
        assert types.count("progress.updated") == 1
        assert resumed_s < 20, resumed_s  # the session (3 s; 6 s where the broker refuses 3) times out
        print(f"resumed in {resumed_s:.1f}s after kill -9")
