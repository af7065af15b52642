"""Operator commands: inspect runs, list them, and send Control commands as an authenticated person.

Reads come from the compacted run-state topic (and `view` from the user-view topic); nothing
here writes State. `approve`,
`reject`, `stop`, `cancel` and `retry` build a command from the run's current State (its
version as expectedVersion), send it with the CLI user's identity (authSource "cli"), wait
for the run decider's answer and print it; a rejection exits with code 3.
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

import typer
from rich.console import Console

from runfacts import telemetry
from runfacts.cli.dashboard import app as dashboard_app
from runfacts.cli.render import (
    inspect_panel,
    migration_panel,
    print_outcome,
    progress_bar,
    runs_table,
    versions_table,
    view_panel,
)
from runfacts.client.approvals import asks, display_lines, masked
from runfacts.connectors.versions import published_versions
from runfacts.ops import control
from runfacts.ops.client import CommandClient, ReaderSettings, StateReader
from runfacts.ops.control import ControlError, Issue, Outcome
from runfacts.ops.versions import migration_plan, pinned, version_rows
from runfacts.ops.views import RunFilter, list_rows, operator_summary, parse_duration, view_of
from runfacts.privacy.store import protector_if_configured
from runfacts.processors.decider.state import RunState
from runfacts.processors.decider.state_json import load_state
from runfacts.processors.policy.keyring import load_source_keys_if_configured
from runfacts.schemas.common import ApprovalDecision, CommandBase, RunVersions
from runfacts.schemas.errors import RunfactsError
from runfacts.security.approvals import ApprovalRequest, sign_approval
from runfacts.security.identity import Identity, cli_identity, hash_secret, load_users
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

REJECTED_EXIT = 3
AUTH_SOURCE = "cli"

app = typer.Typer(no_args_is_help=True)
runs_app = typer.Typer(help="Runs from the run-state topic.", no_args_is_help=True)
users_app = typer.Typer(help="Users of the dashboard and CLI (users file).", no_args_is_help=True)
app.add_typer(runs_app, name="runs")
app.add_typer(users_app, name="users")
app.add_typer(dashboard_app, name="dashboard")

TIMEOUT = typer.Option(30.0, "--timeout", help="Seconds to wait for the run decider's answer.")
JSON_OUT = typer.Option(False, "--json", help="Print JSON instead of tables.")
YES = typer.Option(False, "--yes", "-y", help="Do not ask before deciding (the arguments are printed anyway).")


class RunNotFound(RunfactsError):
    """No state for the run in the run-state topic."""


def _now() -> datetime:
    return datetime.now(UTC)


def _setup(timeout: float = 30.0) -> tuple[KafkaSettings, TopicNames, ReaderSettings]:
    kafka = KafkaSettings()
    return kafka, TopicNames(kafka.topic_prefix), ReaderSettings(outcome_timeout_s=timeout)


def _err() -> Console:
    return Console(stderr=True)


def _state(run_id: str) -> RunState:
    kafka, names, settings = _setup()
    with progress_bar(_err(), f"reading {names.state}") as update:
        state = StateReader(kafka, names, settings).latest(run_id, update)
    if state is None:
        raise RunNotFound(f"run {run_id} not found in {names.state} (check the id and RUNFACTS_KAFKA_TOPIC_PREFIX)")
    return state


def _all_states() -> dict[str, RunState]:
    kafka, names, settings = _setup()
    with progress_bar(_err(), f"scanning {names.state}") as update:
        return StateReader(kafka, names, settings).scan(update)


def _identity() -> Identity:
    return cli_identity(load_users())


def _issue(identity: Identity) -> Issue:
    command_id = f"cli-{uuid.uuid4()}"
    return Issue(identity.actor(AUTH_SOURCE), command_id, _now())


def _send(command: CommandBase, timeout: float) -> Outcome:
    """Send with a trace span (when telemetry is on), wait, print; exit 3 on rejection."""
    kafka, names, settings = _setup(timeout)
    client = CommandClient(kafka, names, settings=settings, sources=load_source_keys_if_configured(),
                           protect=protector_if_configured(kafka, names.keys))  # seals personal fields
    tel = telemetry.current() if telemetry.current().enabled else telemetry.configure_from_env("runfacts-cli")
    attrs = {"runfacts.run_id": command.runId, "runfacts.command_id": command.commandId,
             "runfacts.command_type": command.commandType, "runfacts.correlation_id": command.correlationId}
    try:
        with tel.span(f"cli send {command.commandType}", attributes=attrs) as span, \
                _err().status(f"waiting for the run decider to answer {command.commandType}"):
            outcome = client.send(command, span.headers())
    finally:
        client.close()
        tel.shutdown()
    print_outcome(Console(), outcome)
    if outcome.rejection is not None:
        raise typer.Exit(REJECTED_EXIT)
    return outcome


@app.command("view")
def view(run_id: str = typer.Argument(..., help="The run's id."),
         role: str = typer.Option("user", "--role", help="user: the record the run decider published to the "
                                  "user-view topic; operator: the operator variant of the same view, from the "
                                  "run-state topic."),
         as_json: bool = JSON_OUT) -> None:
    """Show a run's user view, as a dashboard shows it (no personal data in either role)."""
    if role not in ("user", "operator"):
        raise typer.BadParameter("user or operator (auditors see personal data: use the dashboard's login)",
                                 param_hint="--role")
    kafka, names, settings = _setup()
    reader = StateReader(kafka, names, settings)
    with progress_bar(_err(), f"reading {names.user_view if role == 'user' else names.state}") as update:
        shown = reader.latest_view(run_id, update) if role == "user" else view_of(reader.latest(run_id, update),
                                                                                   "operator")
    if shown is None:
        raise RunNotFound(f"run {run_id} has no view (unknown, or archived; check RUNFACTS_KAFKA_TOPIC_PREFIX)")
    if as_json:
        typer.echo(json.dumps(shown, indent=2))
    else:
        Console().print(view_panel(shown, names.user_view if role == "user" else f"user_view(state) of {names.state}"))


@app.command("inspect")
def inspect(run_id: str = typer.Argument(..., help="The run's id."), as_json: bool = JSON_OUT) -> None:
    """Show a run for on-call: status, node, approvals, tool calls (both tracks), budget, errors, stuck time.

    Personal fields (goal summary, user id, subject ids, summaries, free-text reasons) are never shown.
    """
    summary = operator_summary(_state(run_id), _now())
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        Console().print(inspect_panel(summary))


def _decide(approval_id: str, run_id: str | None, decision: ApprovalDecision, timeout: float,
            yes: bool = True) -> None:
    identity = _identity()
    state = _state(run_id) if run_id else control.find_approval(_all_states(), approval_id)
    approval = state.approvals.get(approval_id)
    if approval is None:
        raise ControlError(f"run {state.runId} has no approval {approval_id}")
    call = state.toolCalls.get(approval.toolCallId)
    typer.echo(f"{decision} {approval_id} of run {state.runId}: {asks(state, approval_id)}")
    for line in display_lines(masked(call.display) if call is not None else None):
        typer.echo(f"  {line}")
    if not yes and sys.stdin.isatty():
        typer.confirm(f"{decision} exactly these arguments?", abort=True)
    issue = _issue(identity)
    token = sign_approval(ApprovalRequest(state.runId, approval_id, approval.argsHash, decision, identity.subject,
                                          approval.displayDigest),
                          int(issue.issued_at.timestamp() * 1000))
    _send(control.resume_command(state, approval_id, decision, issue, token), timeout)


@app.command("approve")
def approve(approval_id: str = typer.Argument(..., help="The approval's id (approval-<toolCallId>)."),
            run: str = typer.Option(None, "--run", help="The run (found by scanning when omitted)."),
            timeout: float = TIMEOUT, yes: bool = YES) -> None:
    """Approve a pending approval (ResumeRun decision=approve) and print the outcome.

    Prints the arguments first (as the tool's schema names them; personal values masked) and,
    on a terminal, asks before deciding; the signed decision binds exactly what was printed."""
    _decide(approval_id, run, "approve", timeout, yes)


@app.command("reject")
def reject(approval_id: str = typer.Argument(..., help="The approval's id."),
           run: str = typer.Option(None, "--run", help="The run (found by scanning when omitted)."),
           timeout: float = TIMEOUT) -> None:
    """Reject a pending approval (ResumeRun decision=reject) and print the outcome."""
    _decide(approval_id, run, "reject", timeout)


@app.command("stop")
def stop(run_id: str = typer.Argument(..., help="The run to stop."),
         reason: str = typer.Option("", "--reason", help="Why (kept in the audit trail)."),
         timeout: float = TIMEOUT) -> None:
    """Stop a run: no new work; in-flight calls settle, then the run is cancelled."""
    identity = _identity()
    _send(control.stop_command(_state(run_id), _issue(identity), reason), timeout)


@app.command("cancel")
def cancel(run_id: str = typer.Argument(..., help="The run to cancel."),
           reason: str = typer.Option("", "--reason", help="Why (kept in the audit trail)."),
           timeout: float = TIMEOUT) -> None:
    """Cancel a run (the cancellation state machine: stop, settle in-flight calls, cancelled)."""
    identity = _identity()
    _send(control.cancel_command(_state(run_id), _issue(identity), reason), timeout)


@app.command("retry")
def retry(tool_call_id: str = typer.Argument(None, help="The failed tool call (with --run)."),
          run: str = typer.Option(None, "--run", help="The run the call belongs to."),
          capability: str = typer.Option(None, "--capability", help="Retry the retryable failed calls of this "
                                         "capability on every run (with --since)."),
          since: str = typer.Option(None, "--since", help="ISO time (e.g. 2026-12-06T05:00:00Z; no zone: UTC): "
                                    "only calls that failed at or after it."),
          timeout: float = TIMEOUT) -> None:
    """Retry a failed tool call whose error is classified retryable (operator role); with --capability
    and --since, every such call of many runs, each its own audited command (exit 3 if any is refused)."""
    if capability is None and since is None:
        if tool_call_id is None or run is None:
            raise typer.BadParameter("give TOOL_CALL_ID --run RUN, or --capability CAP --since ISO",
                                     param_hint="TOOL_CALL_ID")
        identity = _identity()
        _send(control.retry_command(_state(run), tool_call_id, _issue(identity)), timeout)
        return
    if capability is None or since is None or tool_call_id is not None or run is not None:
        raise typer.BadParameter("a bulk retry takes --capability CAP --since ISO and no TOOL_CALL_ID / --run",
                                 param_hint="--capability")
    _bulk_retry(capability, _since(since), timeout)


def _since(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not an ISO time, e.g. 2026-12-06T05:00:00Z", param_hint="--since") \
            from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _bulk_retry(capability: str, since: datetime, timeout: float) -> None:
    """Each retryable failed call of `capability` since `since`: one RetryToolCall, answered in turn."""
    identity = _identity()
    targets = control.retry_targets(_all_states().values(), capability, since)
    console, err = Console(), _err()
    if not targets.calls:
        left = f" on a running run ({targets.skipped} on runs that take no retry)" if targets.skipped else ""
        console.print(f"no retryable failed call of {capability} since {since.isoformat()}{left}", highlight=False)
        return
    kafka, names, settings = _setup(timeout)
    client = CommandClient(kafka, names, settings=settings, sources=load_source_keys_if_configured(),
                           protect=protector_if_configured(kafka, names.keys))
    batch = f"ops:bulk-retry:{uuid.uuid4()}"  # one correlation id ties the batch's commands together
    refused: dict[str, int] = {}
    try:
        with progress_bar(err, f"retrying {capability}", len(targets.calls)) as update:
            for done, (state, call) in enumerate(targets.calls, 1):
                issue = _issue(identity)
                issue = control.Issue(issue.actor, issue.command_id, issue.issued_at, batch)
                outcome = client.send(control.bulk_retry_command(state, call, issue))
                rejection = outcome.rejection
                if rejection is not None:
                    refused[rejection.reasonCode] = refused.get(rejection.reasonCode, 0) + 1
                console.print(f"{state.runId} {call.toolCallId}: {outcome.describe()}", highlight=False)
                update(done, len(targets.calls))
    finally:
        client.close()
    accepted = len(targets.calls) - sum(refused.values())
    reasons = ", ".join(f"{n} {code}" for code, n in sorted(refused.items()))
    console.print(f"retried {accepted} of {len(targets.calls)} calls of {capability} (correlation {batch})"
                  + (f"; refused {sum(refused.values())}: {reasons}" if refused else "")
                  + (f"; {targets.skipped} left out (their run takes no retry)" if targets.skipped else ""),
                  highlight=False)
    if refused:
        raise typer.Exit(REJECTED_EXIT)


@runs_app.command("list")
def runs_list(status: str = typer.Option(None, "--status", help="Only runs in this status."),
              stuck: str = typer.Option(None, "--stuck-longer-than",
                                        help="Only runs in their status longer than this (e.g. 10m, 2h)."),
              needs_review: bool = typer.Option(False, "--needs-review", help="Only runs waiting for a person."),
              versions: bool = typer.Option(False, "--versions", help="Count runs per pinned version instead: "
                                            "state schema, model route, tool manifest, policy."),
              as_json: bool = JSON_OUT) -> None:
    """List runs (longest stuck first), filtered by status, stuck time or needing review."""
    if versions:
        _print_versions(version_rows(list(_all_states().values())), as_json)
        return
    try:
        stuck_for = parse_duration(stuck) if stuck else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--stuck-longer-than") from None
    rows = list_rows(list(_all_states().values()), RunFilter(status, stuck_for, needs_review), _now())
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        Console().print(runs_table(rows))


def _print_versions(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        Console().print(versions_table(rows))


@runs_app.command("drain")
def runs_drain(version: str = typer.Option(..., "--version", help="The version no new run may start on."),
               dimension: str = typer.Option(None, "--dimension", help="stateSchema, modelRoute, toolManifest or "
                                             "policy (found from the runs and the decider's versions if omitted)."),
               undo: bool = typer.Option(False, "--undo", help="End the drain: new runs may start on it again."),
               reason: str = typer.Option("", "--reason", help="Why (kept in the audit trail)."),
               progress: bool = typer.Option(False, "--progress", help="Only report the runs still on the "
                                             "version (sends nothing)."),
               timeout: float = TIMEOUT, as_json: bool = JSON_OUT) -> None:
    """Stop new runs starting on a version (audited: one version.drained per partition), then report
    the runs still pinned to it; --progress reports only (the drain's progress, read from run state)."""
    kafka, names, _ = _setup(timeout)
    states = list(_all_states().values())
    dimension = dimension or _dimension_of(version, states, kafka, names)
    if not progress:
        issue = _issue(_identity())
        for command in control.drain_commands(dimension, version, _partitions(kafka, names), issue, undo, reason):
            outcome = _send_quietly(command, timeout)
            if outcome.rejection is not None:
                _err().print(f"partition of {command.runId}: {outcome.describe()}")
                raise typer.Exit(REJECTED_EXIT)
    left = [r for r in version_rows(states) if (r["dimension"], r["version"]) == (dimension, version)]
    empty: dict[str, Any] = {"dimension": dimension, "version": version, "runs": 0, "active": 0, "inFlight": 0,
                             "waitingForApproval": 0}
    row = left[0] if left else empty
    if as_json:
        typer.echo(json.dumps({"sent": not progress, "undo": undo, **row}, indent=2))
        return
    done = "" if progress else \
        f"{'drain of' if not undo else 'drain ended for'} {dimension} {version} recorded on every partition; "
    typer.echo(f"{done}{dimension} {version}: "
               f"{row['active']} run(s) still active on it ({row['inFlight']} with calls in flight, "
               f"{row['waitingForApproval']} waiting for approval), {row['runs'] - row['active']} ended")


def _dimension_of(version: str, states: list[RunState], kafka: KafkaSettings, names: TopicNames) -> str:
    current = published_versions(kafka.client_config(), names, "cli")
    found = {d for s in states for d, v in pinned(s).model_dump().items() if v == version}
    found |= {d for d, v in (current.model_dump().items() if current else ()) if v == version}
    if len(found) != 1:
        why = "no run is pinned to it and the decider does not run it" if not found else \
            f"it names a version of {', '.join(sorted(found))}"
        raise typer.BadParameter(f"{version}: {why}; name --dimension (stateSchema, modelRoute, toolManifest or "
                                 "policy)", param_hint="--dimension")
    return found.pop()


def _partitions(kafka: KafkaSettings, names: TopicNames) -> int:
    """How many partitions the commands topic has (a drain goes to each)."""
    from confluent_kafka import Consumer

    from runfacts.logread import partition_count
    from runfacts.topics import group_prefix, reader_group
    consumer = Consumer(kafka.client_config(**{"group.id": reader_group(group_prefix(names.prefix, "cli"))}))
    try:
        return partition_count(consumer, names.commands, 10.0)
    finally:
        consumer.close()


def _send_quietly(command: CommandBase, timeout: float) -> Outcome:
    kafka, names, settings = _setup(timeout)
    client = CommandClient(kafka, names, settings=settings, sources=load_source_keys_if_configured(),
                           protect=protector_if_configured(kafka, names.keys))
    try:
        return client.send(command)
    finally:
        client.close()


@runs_app.command("resolve-compensation")
def runs_resolve_compensation(
        run_id: str = typer.Argument(..., help="The run whose undo stopped (needs_review while compensating)."),
        decision: str = typer.Option(..., "--decision", help="retry: start the undo again (same arguments and "
                                     "idempotency key); done_by_hand: you undid it, the older undos go on; give_up: "
                                     "the run ends failed (compensation_abandoned), the rest left undone."),
        note: str = typer.Option("", "--note", help="What you did or why (needed for done_by_hand and give_up; "
                                 "kept in the audit trail)."),
        call: str = typer.Option(None, "--call", help="The completed call whose undo stopped (default: the one "
                                 "the run is stopped at)."),
        timeout: float = TIMEOUT) -> None:
    """Resolve an undo that stopped a compensating run for a person (operator role; audited:
    compensation.resolved). Exit 3 when the run decider refuses it, naming why."""
    identity = _identity()
    _send(control.resolve_compensation_command(_state(run_id), decision, note, _issue(identity), call), timeout)


@runs_app.command("migrate")
def runs_migrate(run_id: str = typer.Argument(..., help="The run to move to the decider's current versions."),
                 to_node: str = typer.Option(..., "--to-node", help="The node the run resumes from."),
                 dry_run: bool = typer.Option(False, "--dry-run", help="Only report what the migration would do."),
                 versions: str = typer.Option(None, "--versions", help="The versions to move to, as JSON "
                                              "(default: those the decider published)."),
                 timeout: float = TIMEOUT, yes: bool = YES, as_json: bool = JSON_OUT) -> None:
    """Report what moving a run to the current versions would do (approvals that lapse, calls that
    re-verify, fields this code does not know), then, unless --dry-run, send the audited MigrateRun."""
    kafka, names, settings = _setup(timeout)
    raw = StateReader(kafka, names, settings).latest_raw(run_id)
    if raw is None:
        raise RunNotFound(f"run {run_id} not found in {names.state} (check the id and RUNFACTS_KAFKA_TOPIC_PREFIX)")
    target = _target_versions(versions, kafka, names)
    try:
        state: RunState | None = load_state(raw)
    except (ValueError, RunfactsError):  # unknown fields (pydantic) or a newer format: refused, never dropped
        state = None
    plan = migration_plan(raw, state, target, to_node, _now())
    if as_json:
        typer.echo(json.dumps(plan.as_json(), indent=2))
    else:
        Console().print(migration_panel(plan.as_json()))
    if plan.refused is not None:
        raise typer.Exit(REJECTED_EXIT)
    if dry_run:
        return
    if not yes and sys.stdin.isatty():
        typer.confirm(f"migrate {run_id} as reported?", abort=True)
    assert state is not None
    _send(control.migrate_command(state, target, to_node, _issue(_identity())), timeout)


def _target_versions(text: str | None, kafka: KafkaSettings, names: TopicNames) -> RunVersions:
    if text:
        try:
            return RunVersions.model_validate_json(text)
        except ValueError as exc:
            raise typer.BadParameter(f"not run versions as JSON ({str(exc).splitlines()[0]})",
                                     param_hint="--versions") from None
    found = published_versions(kafka.client_config(), names, "cli")
    if found is None:
        raise typer.BadParameter(f"the decider has published no versions on {names.decider_versions}: start it, "
                                 "or pass --versions JSON", param_hint="--versions")
    return found


@users_app.command("hash")
def users_hash(secret: str = typer.Option(..., prompt=True, hide_input=True, confirmation_prompt=True,
                                          help="The password or token to hash.")) -> None:
    """Print the scrypt hash of a password or CLI token, for the users file."""
    typer.echo(hash_secret(secret))


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    """An outcome as JSON (for scripts and the dashboard)."""
    rejected = outcome.rejection
    return {"commandId": outcome.command.commandId, "accepted": outcome.accepted,
            "events": [e.eventType for e in outcome.events],
            "rejection": None if rejected is None else {"reasonCode": rejected.reasonCode,
                                                        "detail": rejected.detail}}
