"""examples/room_agent.py under `runfacts dev up --tools room_tools:registry --agent room_agent:book_room`
on the real broker (issue 36: the new-user trial's agent, and dev up running the agent as a
supervised worker): a small booking completes by itself; a big one waits for a supervisor, the
agent worker is killed with SIGKILL meanwhile and restarted by dev up, `runfacts approve` (as the
dev user of the printed environment) approves, and the restarted agent finishes the run by replay:
one booking, no rejected command. (tests/unit/testing/test_room_agent_example.py: the same agent in process.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_dev_up import Lines, alive

from runfacts.client import Runfacts
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_dev_up_runs_the_room_agent_and_restarts_it_after_a_kill(kafka_bootstrap: str, tmp_path: Path,
                                                                   unique: str) -> None:
    work, prefix = tmp_path / "work", f"rm-{unique}"
    env = {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "COLUMNS": "300"}
    proc = subprocess.Popen([sys.executable, "-m", "runfacts.cli", "dev", "up", "--tools", "room_tools:registry",
                             "--agent", "room_agent:book_room", "--prefix", prefix, "--workdir", str(work),
                             "--console-port", "0", "--partitions", "2"],
                            cwd=EXAMPLES, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = Lines(proc)
    pids: dict[str, int] = {}
    try:
        ready = out.wait_for("ready: console", 300)
        assert "agent room_agent:book_room" in "\n".join(out.lines)
        for line in (work / "env.sh").read_text().splitlines():  # `source env.sh`
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value.strip("'")
        pids = json.loads((work / "pids.json").read_text())

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, *args], cwd=EXAMPLES, env=env, capture_output=True, text=True,
                                  timeout=120, check=False)

        rf = Runfacts.connect(kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap), prefix=prefix,
                              args_store=work / "args.db")
        try:
            def status(run_id: str, want: str, timeout: float = 90) -> str:
                deadline = time.monotonic() + timeout
                while (found := rf.state(run_id).status) != want and time.monotonic() < deadline:
                    time.sleep(0.2)
                return found

            small = cli("room_agent.py", "room-12", "2026-12-07T10", "4").stdout.strip()
            assert status(small, "completed") == "completed"  # the agent worker ran it, no approval asked

            big = cli("room_agent.py", "room-40", "2026-12-07T14", "25").stdout.strip()
            assert status(big, "waiting_for_approval") == "waiting_for_approval"  # over 10: a supervisor must approve
            os.kill(pids["agent"], signal.SIGKILL)  # the agent dies while its run waits
            out.wait_for("agent exited (code -9)", 30, after=ready)
            out.wait_for("agent restarted", 30, after=ready)
            [pending] = [a for a in json.loads(cli("-m", "runfacts.cli", "approvals", "list", "--json").stdout)
                         if a["runId"] == big]
            assert pending["requiredRole"] == "supervisor"
            approved = cli("-m", "runfacts.cli", "approve", pending["approvalId"], "--yes")
            assert approved.returncode == 0, approved.stdout + approved.stderr  # as the dev user of env.sh
            assert status(big, "completed") == "completed"  # finished by the restarted agent
            facts = cli("-m", "runfacts.cli", "events", big).stdout
            assert facts.count("tool.call.completed") == 1 and "command.rejected" not in facts
        finally:
            rf.close()
        pids = json.loads((work / "pids.json").read_text())
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 0, "\n".join(out.lines[-30:])
        assert [name for name, pid in pids.items() if name != "supervisor" and alive(pid)] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for pid in pids.values():
            if pid != proc.pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
