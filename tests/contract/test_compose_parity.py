"""compose.yaml and scripts/kafka.sh must run the broker with the same settings, and every
`runfacts ...` command compose.yaml runs must exist in the CLI (options included)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from typer.main import get_command

from runfacts.cli import app

REPO = Path(__file__).resolve().parents[2]
# Settings that legitimately differ per environment (addresses, paths, JVM heap).
PER_ENVIRONMENT = {
    "KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS", "KAFKA_CONTROLLER_QUORUM_VOTERS",
    "KAFKA_LOG_DIRS", "KAFKA_HEAP_OPTS",
}


def _script_settings() -> dict[str, str]:
    settings = {}
    for line in (REPO / "scripts/kafka/broker.properties").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings["KAFKA_" + key.upper().replace(".", "_")] = value
    return settings


def _compose_settings() -> dict[str, str]:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    env = compose["services"]["kafka"]["environment"]
    return {k: str(v) for k, v in env.items() if k not in PER_ENVIRONMENT}


def test_compose_broker_settings_equal_script_settings_when_compared() -> None:
    assert _compose_settings() == _script_settings()


def test_compose_broker_heap_equals_script_default_when_compared() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    script = (REPO / "scripts/kafka.sh").read_text()
    assert 'heap="${KAFKA_HEAP:-512m}"' in script
    assert compose["services"]["kafka"]["environment"]["KAFKA_HEAP_OPTS"] == "-Xms512m -Xmx512m"


def _runfacts_commands() -> dict[str, list[str]]:
    """Per service, the `runfacts ...` command line its container runs (after `&&` in sh -c)."""
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    found = {}
    for name, service in compose["services"].items():
        command = service.get("command") or []
        script = command[2] if command[:2] == ["sh", "-c"] else " ".join(command)
        for part in script.split("&&"):
            args = shlex.split(part)
            if args and args[0] == "runfacts":
                found[name] = args[1:]
    return found


class CommandMissing(AssertionError):
    """compose.yaml runs a command line the CLI would refuse."""


def _parse(args: list[str]) -> object:
    """The CLI command `args` names, its options parsed like the shell would (CommandMissing if
    the CLI would refuse it). Typer bundles its own click, so commands are duck-typed."""
    command = get_command(app)
    path = ["runfacts"]
    while hasattr(command, "list_commands"):  # a group
        if not args or args[0].startswith("-"):
            raise CommandMissing(f"{' '.join(path)} needs a subcommand")
        sub = command.get_command(command.context_class(command, info_name=path[-1]), args[0])
        if sub is None:
            raise CommandMissing(f"no command {args[0]!r} under {' '.join(path)}")
        command, path, args = sub, [*path, args[0]], args[1:]
    try:
        command.make_context(" ".join(path), list(args))
    except Exception as exc:
        if not hasattr(exc, "format_message"):  # click's usage / bad-parameter errors
            raise
        raise CommandMissing(f"{' '.join(path)}: {exc.format_message()}") from exc
    return command


def test_every_runfacts_command_compose_runs_exists_in_the_cli_when_parsed() -> None:
    commands = _runfacts_commands()

    assert {"topics", "decider", "dispatcher", "projector", "payment-sim"} <= set(commands)
    for service, args in commands.items():
        try:
            _parse(args)
        except CommandMissing as exc:
            raise AssertionError(f"compose service {service} runs `runfacts {' '.join(args)}`: {exc}") from exc
    assert [commands[s][:2] for s in ("decider", "dispatcher", "projector")] == [
        ["worker", "decider"], ["worker", "dispatcher"], ["worker", "projector"]]


@pytest.mark.parametrize("args", [["worker", "nonesuch"], ["worker", "dispatcher"],
                                  ["worker", "projector", "--no-such-option", "x"], ["worker"]])
def test_command_check_rejects_a_command_when_the_cli_would(args: list[str]) -> None:
    with pytest.raises(CommandMissing):
        _parse(args)
