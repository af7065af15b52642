"""`runfacts dev up`'s plan and supervision, without a broker: every worker has static
membership, the dispatcher serves the given registry, a crashed worker is restarted after a
doubling backoff and the supervisor says so; a registry that cannot be found is refused with
the fix. (tests/integration/test_dev_up.py runs the whole command on the real broker.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runfacts.dev.up import BACKOFF_FIRST_S, DevOptions, DevStack, module_file
from runfacts.schemas.errors import ConfigError


def stack(tmp_path: Path, tools: str = "") -> tuple[DevStack, list[str]]:
    said: list[str] = []
    dev = DevStack(DevOptions(tools=tools, prefix="p1", workdir=tmp_path), say=said.append)
    dev.bootstrap = "127.0.0.1:1"
    dev.dir.mkdir(parents=True, exist_ok=True)
    dev.logs.mkdir(exist_ok=True)
    return dev, said


def test_every_worker_has_a_static_group_member_id_and_the_dispatcher_serves_the_registry(tmp_path: Path) -> None:
    dev, _ = stack(tmp_path, tools="shop:registry")
    plan = dev.plan()
    assert list(plan) == ["decider", "dispatcher", "projector", "memory", "console"]
    members = {name: json.loads(w.env["RUNFACTS_CONSUMER"])["group.instance.id"]
               for name, w in plan.items() if "RUNFACTS_CONSUMER" in w.env}
    assert members == {n: f"p1-dev-{n}" for n in ("decider", "dispatcher", "projector", "memory")}
    assert plan["dispatcher"].args[-2:] == ["--tools", "shop:registry"] and "--tools" in plan["decider"].args
    assert str(Path.cwd()) in plan["dispatcher"].env["PYTHONPATH"].split(":")  # the user's module imports
    assert dev.env()["RUNFACTS_APPROVAL_KEYS"] == plan["decider"].env["RUNFACTS_APPROVAL_KEYS"]
    assert dev.secrets() == dev.secrets()  # made once per work directory, then reused


def test_a_worker_that_exits_is_restarted_after_a_doubling_backoff_and_it_is_said(tmp_path: Path) -> None:
    dev, said = stack(tmp_path)
    worker = dev.plan()["memory"]
    worker.args = [sys.executable, "-c", "import sys; sys.exit('boom: no such tool')"]
    dev.workers = {"memory": worker}
    dev.spawn(worker)
    assert worker.proc is not None
    worker.proc.wait(30)
    dev.supervise_once()
    assert said[-1].startswith("memory exited (code 1)") and f"restarting in {BACKOFF_FIRST_S:g} s" in said[-1]
    assert said[-1].endswith(": boom: no such tool)")  # what it died of
    first = worker.proc
    time.sleep(BACKOFF_FIRST_S + 0.1)
    dev.supervise_once()
    assert worker.proc is not first and worker.starts == 2 and said[-1].startswith("memory restarted")
    worker.proc.wait(30)
    dev.supervise_once()
    assert f"restarting in {2 * BACKOFF_FIRST_S:g} s" in said[-1]
    dev.stop()


def test_stop_ends_a_running_worker_with_sigterm(tmp_path: Path) -> None:
    dev, _ = stack(tmp_path)
    worker = dev.plan()["memory"]
    worker.args = [sys.executable, "-c", "import time; time.sleep(60)"]
    dev.workers = {"memory": worker}
    dev.spawn(worker)
    dev.stop()
    assert worker.proc is not None and worker.proc.returncode is not None


def test_a_registry_module_that_cannot_be_found_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="run `runfacts dev up` from the directory"):
        module_file("no_such_module_here:registry", tmp_path)
    (tmp_path / "shop_mod.py").write_text("registry = None\n")
    assert module_file("shop_mod:registry", tmp_path) == tmp_path / "shop_mod.py"


def test_the_command_is_listed_under_dev() -> None:
    done = subprocess.run([sys.executable, "-m", "runfacts.cli", "dev", "--help"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0 and " up " in done.stdout


def test_the_agent_runs_as_one_more_worker_with_the_environment_it_prints(tmp_path: Path) -> None:
    said: list[str] = []
    dev = DevStack(DevOptions(tools="shop:registry", agent="shop_agent:handle", prefix="p1", workdir=tmp_path),
                   say=said.append)
    dev.bootstrap = "127.0.0.1:1"
    dev.dir.mkdir(parents=True, exist_ok=True)
    plan = dev.plan()
    assert list(plan)[-1] == "agent"
    agent = plan["agent"]
    assert agent.args[-4:] == ["agent", "shop_agent:handle", "--prefix", "p1"] and agent.args[-5] == "worker"
    assert {k: agent.env[k] for k in dev.env()} == dev.env()  # the agent sees what `source env.sh` gives
    assert "RUNFACTS_CONSUMER" not in agent.env  # the agent's own group; a static id would pin its runs


def test_the_printed_environment_lets_runfacts_approve_act_as_the_dev_user(tmp_path: Path) -> None:
    """The trial approved a `supervisor` booking: `runfacts approve` found no users file, and the
    dev user could not hold the role."""
    from runfacts.security.identity import cli_identity, load_users

    dev, _ = stack(tmp_path)
    (tmp_path / "secrets.json").write_text(json.dumps({"password": "old-pw"}))  # an older dev up's work directory
    env = dev.env()
    dev.write_users()
    who = cli_identity(load_users(Path(env["RUNFACTS_USERS_FILE"])), env)  # what `runfacts approve` checks
    assert who.subject == "dev" and "supervisor" in who.roles
    assert dev.secrets()["password"] == "old-pw"  # kept; only what it lacked was added


def test_an_agent_module_edit_restarts_only_the_agent(tmp_path: Path) -> None:
    (tmp_path / "agent_mod.py").write_text("def handle(run):\n    pass\n")
    said: list[str] = []
    dev = DevStack(DevOptions(agent="agent_mod:handle", prefix="p1", workdir=tmp_path / "w"), say=said.append)
    dev.dir.mkdir(parents=True)
    dev.logs.mkdir()
    dev.agent_watched = module_file("agent_mod:handle", tmp_path, "--agent")
    dev._agent_mtime = dev._stat(dev.agent_watched)  # noqa: SLF001
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    dev.workers = {name: w for name, w in dev.plan().items() if name in ("decider", "agent")}
    for worker in dev.workers.values():
        worker.args = sleeper
        dev.spawn(worker)
    try:
        first = {name: w.proc for name, w in dev.workers.items()}
        os.utime(tmp_path / "agent_mod.py", (time.time() + 5, time.time() + 5))
        dev.supervise_once()
        assert said[-1].startswith("reloading:") and said[-1].endswith("restarting the agent")
        assert dev.workers["agent"].proc is not first["agent"] and dev.workers["decider"].proc is first["decider"]
    finally:
        dev.stop()


def test_worker_agent_refuses_what_is_no_agent_naming_the_fix() -> None:
    examples = Path(__file__).resolve().parents[3] / "examples"
    done = subprocess.run([sys.executable, "-m", "runfacts.cli", "worker", "agent", "room_tools:registry"],
                          cwd=examples, capture_output=True, text=True, check=False, timeout=60)
    said = " ".join(done.stderr.split())  # the error line, unwrapped
    assert done.returncode == 2, said
    assert "is a ToolRegistry, not an agent" in said and "def handler(run)" in said
