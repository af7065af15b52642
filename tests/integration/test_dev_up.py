"""`runfacts dev up` on the real broker: a subprocess with a tiny registry of the test's own
(written to a temporary directory and imported from there, as a user's module would be), a run
driven through runfacts.client end to end (the tool executes once), a worker killed with
SIGKILL and restarted by the supervisor, a registry edit reloaded, then SIGINT: exit 0 and no
child left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from runfacts.client import Runfacts
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration

TOOLS = '''
"""A tiny registry for the dev up test: one tool that appends a line to a ledger file."""
import os
from pydantic import BaseModel
from runfacts.tools import LookupContext, ToolContext, ToolRegistry

registry = ToolRegistry("devtest")


class Noted(BaseModel):
    line: int


def _ledger() -> list[str]:
    path = os.environ["DEV_UP_LEDGER"]
    return open(path).read().splitlines() if os.path.exists(path) else []


@registry.tool("notes.append", risk="low")
def append(text: str, ctx: ToolContext) -> Noted:
    with open(os.environ["DEV_UP_LEDGER"], "a") as ledger:
        ledger.write(f"{ctx.external_request_id} {text}\\n")
    return Noted(line=len(_ledger()))


@registry.lookup("notes.append")
def find(ctx: LookupContext) -> Noted | None:
    lines = _ledger()
    found = [i for i, l in enumerate(lines, 1) if l.startswith(ctx.external_request_id + " ")]
    return Noted(line=found[0]) if found else None
'''


class Lines:
    """The supervisor's stdout, read by a thread, searchable while it runs."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float, after: int = 0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, line in enumerate(self.lines[after:], start=after):
                if text in line:
                    return i
            time.sleep(0.1)
        raise AssertionError(f"no line with {text!r} within {timeout}s; output:\n" + "\n".join(self.lines[-40:]))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_dev_up_serves_a_registry_restarts_a_killed_worker_and_stops_on_sigint(
        kafka_bootstrap: str, tmp_path: Path, unique: str) -> None:
    (tmp_path / "devtools_mod.py").write_text(TOOLS)
    ledger = tmp_path / "ledger.txt"
    work = tmp_path / "work"
    prefix = f"dv-{unique}"  # its topics are deleted after the test
    env = {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "DEV_UP_LEDGER": str(ledger)}
    proc = subprocess.Popen([sys.executable, "-m", "runfacts.cli", "dev", "up", "--tools", "devtools_mod:registry",
                             "--prefix", prefix, "--workdir", str(work), "--console-port", "0", "--partitions", "2"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = Lines(proc)
    pids: dict[str, int] = {}
    try:
        ready = out.wait_for("ready: console http://127.0.0.1:", 300)
        text = "\n".join(out.lines)
        assert f"export RUNFACTS_KAFKA_TOPIC_PREFIX='{prefix}'" in text and f"logs: {work / 'logs'}" in text
        env_sh = (work / "env.sh").read_text()
        assert env_sh.count("export ") == 8  # with RUNFACTS_TOOLS (typed results) and the dev user for the CLI
        assert "export RUNFACTS_TOOLS='devtools_mod:registry'" in env_sh
        pids = json.loads((work / "pids.json").read_text())
        assert set(pids) >= {"decider", "dispatcher", "projector", "memory", "console", "supervisor"}

        rf = Runfacts.connect(kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap), prefix=prefix,
                              args_store=work / "args.db")
        try:
            run = rf.start_run(goal="ticket:D-1", summary="note it", user_id="u-1", run_id=f"{prefix}-r1")
            call = run.propose("notes.append", {"text": "hello"}, target="note-1")
            assert call.result(timeout=120) == {"line": 1}
            assert len(ledger.read_text().splitlines()) == 1  # the tool executed once

            os.kill(pids["dispatcher"], signal.SIGKILL)  # a crashed worker ...
            out.wait_for("dispatcher exited (code -9)", 30, after=ready)
            restarted = out.wait_for("dispatcher restarted", 30, after=ready)
            new_pid = json.loads((work / "pids.json").read_text())["dispatcher"]
            assert new_pid != pids["dispatcher"] and alive(new_pid)  # ... is restarted

            (tmp_path / "devtools_mod.py").write_text(TOOLS + "\n# edited\n")  # a registry edit is reloaded
            os.utime(tmp_path / "devtools_mod.py", (time.time() + 5, time.time() + 5))
            out.wait_for("reloading:", 30, after=restarted)

            second = run.propose("notes.append", {"text": "again"}, target="note-2")
            assert second.result(timeout=180) == {"line": 2}  # served by the restarted dispatcher
            run.complete()
        finally:
            rf.close()
        pids = json.loads((work / "pids.json").read_text())
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 0, "\n".join(out.lines[-30:])
        out.wait_for("stopping", 5)
        assert [name for name, pid in pids.items() if name != "supervisor" and alive(pid)] == []
        assert len(ledger.read_text().splitlines()) == 2
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for pid in pids.values():
            if pid != proc.pid and alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_guides_python_blocks_run_against_dev_up_with_its_printed_environment(
        kafka_bootstrap: str, tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/guide.md starts with `runfacts dev up` + `source .../env.sh`: its python blocks run
    against exactly that (the packaged refund tool against the payment simulator)."""
    import contextlib
    import io
    import re

    prefix = f"dg-{unique}"
    work = tmp_path / ".runfacts" / "dev" / prefix
    env = {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    proc = subprocess.Popen([sys.executable, "-m", "runfacts.cli", "dev", "up", "--prefix", prefix,
                             "--console-port", "0", "--partitions", "2"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = Lines(proc)
    try:
        out.wait_for("ready: console", 300)
        for line in (work / "env.sh").read_text().splitlines():  # `source env.sh`
            key, _, value = line.removeprefix("export ").partition("=")
            monkeypatch.setenv(key, value.strip("'"))
        monkeypatch.chdir(tmp_path)
        guide = (Path(__file__).resolve().parents[2] / "docs" / "guide.md").read_text()
        namespace: dict[str, object] = {}
        printed = io.StringIO()
        try:
            for number, block in enumerate(re.findall(r"```python\n(.*?)```", guide, flags=re.S), start=1):
                with contextlib.redirect_stdout(printed):
                    exec(compile(block, f"docs/guide.md python block {number}", "exec"), namespace)  # noqa: S102
        finally:
            client = namespace.get("rf")
            if client is not None:
                client.close()  # type: ignore[attr-defined]
        text = printed.getvalue()
        sim = next(line for line in out.lines if line.startswith("payment simulator: ")).split()[2]
        with urllib.request.urlopen(f"{sim}/_ledger", timeout=10) as answer:  # the provider's ground truth
            ledger = json.loads(answer.read())["refunds"]
        assert [r["orderId"] for r in ledger] == ["order-001"]  # the rejected refund never ran
        [refund] = ledger
        assert f"{refund['refundId']} 4200" in text and "approval rejected by alice" in text
        assert "[('lessons/damaged-no-return', 'rita')]" in text  # the memory worker of dev up serves §9
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
