"""The crash matrix: one row per (crash point x guarantee), each a scenario on real processes.

Every row kills a real worker (SIGKILL at an armed crash point, or kill -9 from outside),
restarts it, drives the scenario to completion and asks the oracle (`runfacts.dev.crash.oracle`):
events = the pure decider's fold of the committed commands log, last state = the fold's
state, dead letters and counts balance, and — with the dispatcher — one refund per
authorized call in the provider's own ledger. Rows that cannot exist say why (`reason`).
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from runfacts.dev.crash.procs import Worker, wait_until
from runfacts.dev.crash.stage import DISPATCHER_APP, FAST_COMMITS, PROJECTOR_APP, Lab, Stage
from runfacts.dev.crash.workload import DISPATCHER, REFUND, Commands, Input, refund_args, valid, workload
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import CommandBase
from runfacts.schemas.errors import RunfactsError

if TYPE_CHECKING:
    from runfacts.dev.crash.kafka import Cluster

EOS, ALO = "exactly_once", "at_least_once"


@dataclass(frozen=True)
class Row:
    """One cell of the matrix: where it dies, under which guarantee, which scenario plays it."""

    key: str
    point: str
    guarantee: str
    scenario: str
    after: int = 2
    ci: bool = False
    recovery: str = ""  # a line the restarted worker's log must contain
    reason: str = ""  # why the row cannot exist (scenario "n/a")
    fault: str = ""  # what else goes wrong: cluster rows, the brokers (CLUSTER_FAULTS); key-ttl, the provider


@dataclass
class RowResult:
    row: Row
    ok: bool
    outcome: str
    seconds: float
    problems: list[str] = field(default_factory=list)
    numbers: dict[str, int] = field(default_factory=dict)


class Finished(NamedTuple):
    """What a scenario reports: the outcome line, the oracle's problems, its numbers."""

    text: str
    problems: list[str]
    numbers: dict[str, int]


NO_STORE_FIRST = ("the engine never writes the store before producing: exactly-once writes it after "
                  "commit_transaction (step 5), at-least-once after the outputs were flushed")
ROWS = (
    Row("eos-consume", "engine.after_consume_before_process", EOS, "decider", after=3),
    Row("alo-consume", "engine.after_consume_before_process", ALO, "decider", after=3),
    Row("eos-uncommitted", "kill -9 from outside, batch produced, not committed", EOS, "between"),
    Row("alo-uncommitted", "kill -9 from outside, batch produced, not committed", ALO, "between", ci=True),
    Row("eos-store-before-produce", "(after store write, before produce)", EOS, "n/a", reason=NO_STORE_FIRST),
    Row("alo-store-before-produce", "(after store write, before produce)", ALO, "n/a", reason=NO_STORE_FIRST),
    Row("eos-produce", "engine.after_produce_before_commit", EOS, "decider", ci=True,
        recovery="assigned partitions"),
    Row("alo-produce", "engine.after_produce_before_commit", ALO, "decider"),
    Row("eos-during-commit", "engine.during_commit", EOS, "decider"),
    Row("eos-commit-store", "engine.after_commit_before_store_write", EOS, "decider", ci=True,
        recovery="restored"),
    Row("alo-store-commit", "engine.after_store_write_before_commit", ALO, "decider",
        recovery="beyond the group offset"),
    Row("eos-mid-restore", "engine.mid_restore", EOS, "restore", after=2, recovery="restored"),
    Row("eos-relay", "relay.after_publish_before_mark", EOS, "relay", after=3),
    Row("eos-relay-pg-restart", "relay.after_publish_before_mark: PostgreSQL restarted there", EOS, "relay-pg",
        after=2, ci=True),
    Row("eos-dispatch-call", "dispatcher.after_call_before_record", EOS, "dispatcher", after=1, ci=True),
    Row("eos-dispatch-record", "dispatcher.after_record_before_commit", EOS, "dispatcher", after=1),
    Row("alo-dispatch-record", "dispatcher.after_record_before_commit", ALO, "dispatcher", after=1),
    Row("eos-key-ttl", "dispatcher.after_call_before_record", EOS, "dispatcher", after=1, fault="key-ttl"),
    Row("eos-dispatch-at-once", "dispatcher.after_call_before_record", EOS, "dispatcher", after=2,
        fault="at-once", ci=True),  # the call dispatched with its authorization (ADR 0011)
    Row("eos-expired-grant", "dispatcher.after_call_before_record", EOS, "expiry", after=1, ci=True),
    Row("eos-timer-fire", "engine.after_produce_before_commit", EOS, "timers", after=1, ci=True),
    Row("eos-between-compensations", "engine.after_produce_before_commit", EOS, "compensation", after=1),
    Row("eos-broker-bounce", "broker stopped + restarted", EOS, "bounce"),
    Row("eos-lost-commit-answer", "engine.during_commit", EOS, "lost-answer", after=3),
    Row("eos-rebalance-kill", "engine.during_rebalance", EOS, "rebalance", after=1),
    Row("eos-child-runs", "engine.after_produce_before_commit", EOS, "children", after=1),  # twice: 0012-child-runs
    Row("eos-pause-during-dispatch", "dispatcher.after_call_before_record", EOS, "pause-dispatch", after=1),
    Row("eos-zombie-pause", "SIGSTOP past session.timeout.ms, then SIGCONT", EOS, "pause"),
    Row("soak", "no crash: decider, dispatcher, projector under a steady stream of refund runs for "
        "RUNFACTS_CRASH_SOAK_S (600) s", EOS, "soak"),
    Row("storm", "3 deciders: a random one killed -9 / stopped / started every 3 s under a steady producer",
        EOS, "storm"),
    Row("cluster-leader-kill", "3-broker cluster: the events leader SIGKILLed, restarted", EOS, "cluster",
        after=1, ci=True, fault="leader-kill"),
    Row("cluster-leader-kill-x3", "3-broker cluster: the events leader SIGKILLed, restarted, 3 times", EOS,
        "cluster", after=3, fault="leader-kill"),
    Row("cluster-controller-bounce", "3-broker cluster: the active controller stopped, restarted", EOS,
        "cluster", after=1, fault="controller-bounce"),
    Row("cluster-two-down", "3-broker cluster: two of three brokers SIGKILLed, restarted", EOS, "cluster",
        after=1, fault="two-down"),
    Row("cluster-pause", "3-broker cluster: the events leader SIGSTOPped past the transaction timeout", EOS,
        "cluster", after=1, fault="pause"),
)


def rows(keys: list[str] | None = None, quick: bool = False) -> list[Row]:
    """The rows to run: named ones, the CI subset (quick), or all."""
    if keys:
        known = {r.key: r for r in ROWS}
        unknown = [k for k in keys if k not in known]
        if unknown:
            raise RunfactsError(f"unknown crash rows {unknown}; known: {sorted(known)}")
        return [known[k] for k in keys]
    return [r for r in ROWS if r.ci or not quick]


def run_row(row: Row, lab: Lab) -> RowResult:
    """Play one row; never raises for a failed row (the result says what went wrong)."""
    if row.scenario == "n/a":
        return RowResult(row, True, f"n/a: {row.reason}", 0.0)
    started = time.monotonic()
    stage = Stage(lab, row.key)
    try:
        done = SCENARIOS[row.scenario](row, stage)
    except RunfactsError as exc:
        done = Finished(f"error: {exc}", [str(exc)], {})
    finally:
        stage.close()
    return RowResult(row, not done.problems, done.text, time.monotonic() - started, done.problems, done.numbers)


def _finish(row: Row, stage: Stage, what: str, extra: list[str] | None = None, live_audit: bool = False) -> Finished:
    """Final oracle check after every worker stopped; the outcome line and the problems."""
    for worker in stage.workers:
        code = worker.stop()
        if code not in (0, None, -9):
            extra = [*(extra or []), f"{worker.name} exited {code} on SIGTERM; see {worker.log()}"]
    final = stage.check(allow_duplicates=row.guarantee == ALO)
    problems = final.problems + (extra or []) + stage.audit(live=live_audit)
    dups = final.numbers.get("duplicate_events", 0)
    tail = (f"{dups} duplicated event(s), same eventId + bytes, none lost" if row.guarantee == ALO
            else "no duplicate, no gap, state + view = oracle")
    return Finished(f"{what}; {tail}; audit chain verifies; {final.summary()}", problems, final.numbers)


def _killed(row: Row, marker: str) -> str:
    return f"killed -9 at {row.point} (hit {row.after})" if row.point in marker else f"killed ({marker})"


def children_row(row: Row, stage: Stage) -> Finished:
    """Child runs across partitions (runfacts.dev.crash.children): killed mid-protocol twice."""
    from runfacts.dev.crash.children import children_scenario

    marker, problems = children_scenario(row, stage)
    return _finish(row, stage, f"killed -9 at {row.point} starting children and again as they report ({marker}); "
                   "restarted each time; each cross-run command once, reservations returned", problems)


def decider_scenario(row: Row, stage: Stage) -> Finished:
    """The decider dies at its point mid-stream, restarts and finishes the same inputs."""
    stage.provision().send(workload(stage.prefix, stage.lab.runs))
    decider = stage.worker("decider", guarantee=row.guarantee)
    marker = decider.start(row.point, row.after).wait_killed()
    decider.start()
    stage.settle(allow_duplicates=row.guarantee == ALO)
    extra = [] if not row.recovery or decider.recovered(row.recovery) else [
        f"restarted worker's log lacks {row.recovery!r}"]
    return _finish(row, stage, _killed(row, marker) + "; restarted", extra)


def between_scenario(row: Row, stage: Stage) -> Finished:
    """kill -9 from outside while a batch's outputs are produced but not committed (no commit
    for 5 s): exactly-once aborts them, at-least-once has already published them."""
    from runfacts.logread import read_to_end

    inputs = workload(stage.prefix, stage.lab.runs)
    stage.provision().send(inputs[:20])
    decider = stage.worker("decider", guarantee=row.guarantee,
                           env={"RUNFACTS_COMMIT_INTERVAL_MS": "5000", "RUNFACTS_COMMIT_EVERY": "1000",
                                "RUNFACTS_COMMIT_ON_IDLE": "false"})  # keep the batch open to kill it
    decider.start()
    produced = lambda: read_to_end(stage.bootstrap, [stage.names.events], committed=False)[stage.names.events]  # noqa: E731
    wait_until(lambda: len(produced()) > 0, 60, "the first uncommitted outputs", 0.1)
    decider.kill()
    stage.send(inputs[20:])
    decider.start()
    stage.settle(allow_duplicates=row.guarantee == ALO)
    return _finish(row, stage, "outputs of an uncommitted batch on the broker; killed -9 from outside; restarted")


def restore_scenario(row: Row, stage: Stage) -> Finished:
    """Half the inputs, kill -9, local store lost; the restarted worker is killed again mid-restore,
    and the next start resumes the restore."""
    inputs = workload(stage.prefix, stage.lab.runs)
    half = len(inputs) // 2
    stage.provision().send(inputs[:half])
    decider = stage.worker("decider", env={"RUNFACTS_RESTORE_BATCH": "5"})
    decider.start()
    stage.settle()
    decider.kill()
    shutil.rmtree(decider.state_dir)  # a new host: everything comes back from the changelogs
    stage.send(inputs[half:])
    marker = decider.start(row.point, row.after).wait_killed()
    decider.start()
    stage.settle()
    extra = [] if decider.recovered(row.recovery) else [f"second restore did not log {row.recovery!r}"]
    return _finish(row, stage, f"killed -9, store deleted; restart {_killed(row, marker)} during restore; "
                               "restore resumed", extra)


def relay_scenario(row: Row, stage: Stage) -> Finished:
    """Commands via the outbox; the relay dies after publishing, before marking: it republishes."""
    from runfacts.connectors.outbox.commands import CommandOutbox

    stage.provision()
    table = f"ob_{stage.prefix}"
    harness = CommandOutbox.open(stage.dir / "harness.db", stage.names, table)
    try:
        harness.send(*_relay_commands(stage))
    finally:
        harness.close()
    stage.worker("decider", env=FAST_COMMITS).start()
    first = stage.relay(stage.dir / "harness.db", table, row.point, row.after)
    code = first.wait(60)
    second = stage.relay(stage.dir / "harness.db", table)
    code2 = second.wait(90)
    result = stage.settle()
    dedup = result.numbers.get("deduplicated", 0)
    extra = [] if code == -9 and code2 == 0 and dedup > 0 else [
        f"relay exits {code}/{code2}, {dedup} redeliveries deduplicated"]
    return _finish(row, stage, f"relay killed -9 at {row.point} (batch {row.after}), restarted after its "
                               f"lease; {dedup} republished commands deduplicated by commandId", extra)


RELAY_HOLD = "relay.after_publish_before_mark"


def relay_pg_scenario(row: Row, stage: Stage) -> Finished:
    """Commands via a PostgreSQL outbox (a server of the row's own); the relay holds between
    publishing a batch and marking it while the server is restarted (every connection cut),
    then goes on: the mark fails, the relay reconnects and republishes the unmarked batch;
    the decider dedupes by commandId."""
    from runfacts.connectors.outbox.commands import CommandOutbox
    from runfacts.dev.crash.postgres import OwnPostgres

    stage.provision()
    pg = OwnPostgres(stage.dir / "pg")
    try:
        dsn = pg.start()
        table = f"ob_{stage.prefix}".replace("-", "_")
        harness = CommandOutbox.open(dsn, stage.names, table)
        try:
            harness.send(*_relay_commands(stage))
        finally:
            harness.close()
        stage.worker("decider", env=FAST_COMMITS).start()
        release = stage.dir / "release"
        relay = stage.relay(dsn, table, RELAY_HOLD, row.after, hold_until=str(release))
        marker = stage.dir / "relay.marker"
        wait_until(lambda: marker.exists() or relay.poll() is not None, 90, "the relay at its hold point", 0.1)
        pg.restart()
        release.touch()
        code = relay.wait(120)
        result = stage.settle()
    finally:
        pg.stop()
    dedup = result.numbers.get("deduplicated", 0)
    log = (stage.dir / "relay-1.log").read_text(errors="replace")
    reconnected = "retrying in" in log and "database:" in log  # it saw the cut connection and went on
    extra = [] if code == 0 and dedup > 0 and reconnected else [
        f"relay exited {code}, {dedup} redeliveries deduplicated, database retry logged: {reconnected}"]
    return _finish(row, stage, f"relay held after publishing batch {row.after}, PostgreSQL restarted, relay "
                               f"reconnected and exited {code}; {dedup} republished commands deduplicated", extra)


def _relay_commands(stage: Stage) -> list:
    inputs = workload(stage.prefix, stage.lab.runs)
    out = []
    for item in inputs:
        if item.label in ("valid", "unknown_approval", "stale_version", "retry_not_failed", "orphan"):
            out.append(stage.shell.deserialize(item.value, list(item.headers)))
    return out


KEY_TTL_MS = 2000


def dispatcher_scenario(row: Row, stage: Stage) -> Finished:
    """Approved refunds; the dispatcher dies after the provider executed (or after reporting).
    With fault "key-ttl" the provider forgets idempotency keys after KEY_TTL_MS and the
    dispatcher stays down longer than that: resending with the same key would refund twice, so
    only the reconciliation's lookup by request id keeps it at one refund."""
    from runfacts.connectors.args_store import ArgsStore
    from runfacts.dev.crash.oracle import ledger_problems
    from runfacts.dev.provider.book import read_ledger
    from runfacts.schemas.events import ToolCallAuthorized

    stage.provision()
    url = stage.start_provider()
    if row.fault == "key-ttl":
        _set_faults(url, keyTtlMs=KEY_TTL_MS)
    args = ArgsStore.open(stage.dir / "args.db")
    at_once = row.fault == "at-once"  # ADR 0011: run 0's call is claimed, the later ones dispatched at once
    inputs = _refund_inputs(stage, args, one_partition=at_once)
    args.close()
    stage.send(inputs[:3] if at_once else inputs)
    stage.worker("decider", env=FAST_COMMITS).start()
    dispatcher = stage.worker("dispatcher", DISPATCHER_APP, row.guarantee, {
        "provider_url": url, "args_store": str(stage.dir / "args.db")}, env={
        "RUNFACTS_CONSUME_BATCH": "1", "RUNFACTS_TRANSACTION_TIMEOUT_MS": "30000",
        "RUNFACTS_PAYMENT_READ_TIMEOUT_MS": "3000", **FAST_COMMITS})
    dispatcher.start(row.point, row.after)
    if at_once:  # the decider learns the dispatcher from run 0's claim; the crash is on an at-once call
        deadline = time.monotonic() + 60
        while not read_ledger(stage.provider.ledger) and time.monotonic() < deadline:  # type: ignore[union-attr]
            time.sleep(0.05)
        stage.send(inputs[3:])
    marker = dispatcher.wait_killed()
    executed_at_crash = len(read_ledger(stage.provider.ledger))  # type: ignore[union-attr]
    if row.fault == "key-ttl":
        time.sleep(KEY_TTL_MS / 1000 + 1)  # the executed call's key has expired at the provider
    dispatcher.start()
    stage.settle(allow_duplicates=row.guarantee == ALO, ready=_all_verified(stage.lab.runs))
    dispatcher.stop()
    stage.settle(allow_duplicates=row.guarantee == ALO)
    refunds = read_ledger(stage.provider.ledger)  # type: ignore[union-attr]
    extra = ledger_problems(stage.expected, refunds) + ([] if _all_verified(stage.lab.runs)(stage.expected) else [
        "not every refund reached confirmed_success"])
    if at_once and not any(isinstance(e, ToolCallAuthorized) and e.payload.leaseEpoch is not None
                           for events in stage.expected.events.values() for e in events):
        extra.append("no authorization carried the lease: the row did not test a dispatch at once")
    down = f"down past the {KEY_TTL_MS} ms key TTL; " if row.fault == "key-ttl" else ""
    what = (f"{_killed(row, marker)} with {executed_at_crash} refund(s) executed; {down}restarted; "
            f"{len(refunds)} refunds in the ledger for {stage.lab.runs} authorized calls")
    return _finish(row, stage, what, extra)


def _set_faults(url: str, **switches: object) -> None:
    """Merge fault switches into the payment simulator's (POST /_faults)."""
    import json
    import urllib.request

    body = json.dumps(switches).encode()
    urllib.request.urlopen(urllib.request.Request(f"{url}/_faults", body, method="POST"), timeout=10).close()


def _refund_inputs(stage: Stage, args: object, runs: int | None = None, one_partition: bool = False) -> list[Input]:
    """Create, propose and approve one refund per run. `one_partition`: every run on run 0's
    partition (the decider learns its dispatcher per partition, ADR 0011: a run elsewhere would
    still be claimed, and whether any was dispatched at once would hang on the prefix's hash)."""
    from runfacts.partitioning import partition_for

    c = Commands(stage.prefix)
    out = []
    wanted = stage.lab.runs if runs is None else runs
    names = (f"{stage.prefix}-run-{j:03d}" for j in range(wanted * stage.lab.partitions * 20))
    first = partition_for(f"{stage.prefix}-run-000".encode(), stage.lab.partitions)
    chosen = [n for n in names if not one_partition or partition_for(n.encode(), stage.lab.partitions) == first]
    for run in chosen[:wanted]:
        i = int(run.rsplit("-", 1)[1])
        call = f"call-{stage.prefix}-{i:03d}"
        args.put(refund_args("order-001"), ref=f"args/{call}")  # type: ignore[attr-defined]
        out += [valid(c.create(run)), valid(c.propose(run, call)), valid(c.resume(run, call))]
    return out


def _all_verified(runs: int) -> Callable[[object], bool]:
    def ready(expected: object) -> bool:
        states = expected.states  # type: ignore[attr-defined]
        calls = [call for s in states.values() for call in s.toolCalls.values()]
        return len(calls) == runs and all(call.verification == "confirmed_success" for call in calls)
    return ready


EXPIRY_TTL_S = 8.0


def expiry_scenario(row: Row, stage: Stage) -> Finished:
    """Re-authorization (docs/decider.md "Who asks for re-authorization") on real processes:
    attempt 1 of an approved refund gets a 503, the dispatcher
    dies, the grant expires while it is down; the restart reconciles not_found and the decider
    pauses the run for re-authorization: attempt 2 never runs on the old grant (one run, so no
    unclaimed call meets the decider's expiry timer, which the oracle cannot replay)."""
    from runfacts.connectors.args_store import ArgsStore
    from runfacts.dev.provider.book import read_ledger
    from runfacts.processors.decider.app import DeciderShell
    from runfacts.workers import decide_context

    manifest = _short_ttl_manifest(stage)
    stage.shell = DeciderShell(stage.names, decide_context(str(manifest)))
    stage.provision()
    url = stage.start_provider()
    _set_faults(url, errorNext=1, errorStatus=503)
    decider = stage.worker("decider", params={"capabilities": str(manifest)}, env=FAST_COMMITS).start()
    dispatcher = stage.worker("dispatcher", DISPATCHER_APP, row.guarantee, {
        "provider_url": url, "args_store": str(stage.dir / "args.db"), "capabilities": str(manifest)},
        env={"RUNFACTS_CONSUME_BATCH": "1", **FAST_COMMITS}).start(row.point, row.after)
    wait_until(lambda: all(w.log().exists() and w.recovered("assigned partitions") for w in (decider, dispatcher)),
               90, "both workers assigned their partitions", 0.2)
    run, call, c = f"{stage.prefix}-run-000", f"call-{stage.prefix}-000", Commands(stage.prefix)
    args = ArgsStore.open(stage.dir / "args.db")
    args.put(refund_args("order-001"), ref=f"args/{call}")
    args.close()
    sent = time.monotonic()
    stage.send([valid(c.create(run)), valid(c.propose(run, call)), valid(c.resume(run, call))])
    marker = dispatcher.wait_killed()
    time.sleep(max(0.0, sent + EXPIRY_TTL_S + 1 - time.monotonic()))  # the grant expires meanwhile
    dispatcher.start()
    stage.settle(ready=lambda e: getattr(e.states.get(run), "status", "") == "waiting_for_review")
    state = stage.expected.states.get(run)
    got = None if state is None else (state.status, state.toolCalls[call].closedReason,
                                      state.toolCalls[call].attempts)
    refunds = read_ledger(stage.provider.ledger)  # type: ignore[union-attr]
    extra = ([] if got == ("waiting_for_review", "approval_expired", 1) else [f"run ended as {got}"]) + (
        [f"{len(refunds)} refund(s) executed on an expired grant"] if refunds else [])
    return _finish(row, stage, f"{_killed(row, marker)} after a 503; the grant expired while it was down; "
                               f"restarted: (status, call closed, attempts) = {got}, {len(refunds)} refunds",
                   extra)


def timers_scenario(row: Row, stage: Stage) -> Finished:
    """Timers due while the decider is down, and a crash while it fires them. Half the runs wait
    for an approval (TTL 8 s); the other half have an approved refund claimed and reported
    result_unknown with nobody reconciling it (reconciliation deadline 8 s). The decider is killed
    -9 and stays down past both deadlines; its restart dies at the row's point inside the batch
    that fires the restored timers (outputs produced, not committed); the next start fires them
    again. Every approval expires exactly once and every unknown outcome moves its run to
    needs_review exactly once (the oracle folds each fire where the events log shows it; a
    repeat or a stray is a problem)."""
    from runfacts.processors.decider.app import DeciderShell
    from runfacts.workers import decide_context

    manifest = _short_ttl_manifest(stage, reconcile=True)
    stage.shell = DeciderShell(stage.names, decide_context(str(manifest)))
    stage.provision()
    c, runs = Commands(stage.prefix), max(2, stage.lab.runs)
    waiting = [f"{stage.prefix}-run-{i:03d}" for i in range(runs // 2)]
    unknown = [f"{stage.prefix}-run-{i:03d}" for i in range(runs // 2, runs)]
    inputs = [valid(command) for run in waiting for command in (c.create(run), c.propose(run, f"call-{run}"))]
    inputs += [valid(command) for run in unknown for command in (
        c.create(run), c.propose(run, f"call-{run}"), c.resume(run, f"call-{run}"), c.claim(run, f"call-{run}"),
        c.unknown(run, f"call-{run}"))]
    decider = stage.worker("decider", params={"capabilities": str(manifest)}, env=FAST_COMMITS).start()
    sent = time.monotonic()
    stage.send(inputs)
    stage.settle(ready=lambda e: len(e.states) == runs)
    decider.kill()
    time.sleep(max(0.0, sent + EXPIRY_TTL_S + 1 - time.monotonic()))  # every deadline has passed now
    marker = decider.start(row.point, row.after).wait_killed()
    decider.start()

    def fired_all(e: object) -> bool:
        states = e.states  # type: ignore[attr-defined]
        return (len(states) == runs
                and all([a.status for a in states[r].approvals.values()] == ["expired"] for r in waiting)
                and all(states[r].status == "needs_review" for r in unknown))

    result = stage.settle(ready=fired_all)
    fired = result.numbers.get("timers_fired", 0)
    extra = [] if fired_all(stage.expected) and fired == runs else [
        f"{fired} timer fires for {runs} runs; (status, approvals): "
        f"{[(s.status, [a.status for a in s.approvals.values()]) for s in stage.expected.states.values()]}"]
    return _finish(row, stage, f"{len(waiting)} approvals and {len(unknown)} reconciliation deadlines overdue "
                               f"while the decider was down; restart {_killed(row, marker)} while firing them; "
                               f"restarted: {fired} fires, each approval expired once, each unknown outcome "
                               "needs review once", extra)


def _short_ttl_manifest(stage: Stage, reconcile: bool = False) -> object:
    """The packaged capabilities with an EXPIRY_TTL_S approval TTL (and reconciliation deadline)."""
    from importlib import resources

    text = resources.files("runfacts.processors.policy").joinpath("capabilities.toml").read_text()
    text = text.replace("approvalTtlMs = 900000", f"approvalTtlMs = {int(EXPIRY_TTL_S * 1000)}")
    if reconcile:
        deadline = int(EXPIRY_TTL_S * 1000)
        text = text.replace("reconciliationDeadlineMs = 600000", f"reconciliationDeadlineMs = {deadline}")
    path = stage.dir / "capabilities.toml"
    path.write_text(text)
    return path


COMPENSATED_ORDERS = ("order-001", "order-002")


def compensation_scenario(row: Row, stage: Stage) -> Finished:
    """Compensation (docs/semantics.md §16): kill -9 between compensations.
    Each run completes two refunds (order-001, then
    order-002) whose capability declares a compensation (a reversal by the refund's result id),
    then is cancelled: the decider proposes the newest refund's reversal. With the decider down,
    that reversal is claimed and reported completed; the restart dies at the row's point in the
    batch that starts the second reversal (outputs produced, not committed); the next start
    decides it again. Every run starts each reversal exactly once, newest first, and ends
    `run.compensated` (the oracle folds the committed commands; a repeat is a duplicate event)."""
    from runfacts.processors.decider.app import DeciderShell
    from runfacts.workers import decide_context

    manifest = _compensation_manifest(stage)
    stage.shell = DeciderShell(stage.names, decide_context(str(manifest)))
    stage.provision()
    c, runs = Commands(stage.prefix), [f"{stage.prefix}-run-{i:03d}" for i in range(stage.lab.runs)]
    inputs = [valid(x) for run in runs for x in (c.create(run), *_refunded(c, run), c.cancel(run))]
    decider = stage.worker("decider", params={"capabilities": str(manifest)}, env=FAST_COMMITS).start()
    stage.send(inputs)
    stage.settle(ready=_undoing(runs, 1))
    decider.stop()
    stage.send([valid(x) for run in runs for x in _undone(c, run, COMPENSATED_ORDERS[1])])
    marker = decider.start(row.point, row.after).wait_killed()
    decider.start()
    stage.settle(ready=_undoing(runs, 2))
    stage.send([valid(x) for run in runs for x in _undone(c, run, COMPENSATED_ORDERS[0])])
    result = stage.settle(ready=lambda e: all(getattr(e.states.get(r), "status", "") == "compensated" for r in runs))
    undone = {r: [p.toolCallId for p in reversed(s.compensations.values()) if p.compensationToolCallId]
              for r, s in stage.expected.states.items()}
    extra = [f"{r}: {st.status}, undone {undone[r]}" for r, st in stage.expected.states.items()
             if st.status != "compensated" or undone[r] != [f"call-{r}-{o}" for o in reversed(COMPENSATED_ORDERS)]]
    return _finish(row, stage, f"{len(runs)} runs cancelled after two refunds; {_killed(row, marker)} between their "
                               f"compensations; restarted: every run compensated newest first, each reversal "
                               f"started once ({result.summary()})", extra)


def _compensation_manifest(stage: Stage) -> object:
    """The packaged capabilities, the refund compensated by `payments.refund_reversal`."""
    from importlib import resources

    text = resources.files("runfacts.processors.policy").joinpath("capabilities.toml").read_text()
    text = text.replace("[capability.retry]", '[capability.compensation]\ncapabilityId = "payments.refund_reversal"\n'
                        'arguments = { refundId = "result.refundId" }\n[capability.retry]', 1)
    text += ('\n[[capability]]\ncapabilityId = "payments.refund_reversal"\nrisk = "high"\n'
             'requiredRole = "support_agent"\nneedsApproval = false\nreconciliationDeadlineMs = 600000\n'
             'argumentSchema = \'{"type":"object","properties":{"refundId":{"type":"string"}},'
             '"required":["refundId"]}\'\n'
             '[capability.retry]\nmaxAttempts = 4\nbaseBackoffMs = 200\nmaxBackoffMs = 5000\ndeadlineMs = 30000\n')
    path = stage.dir / "capabilities.toml"
    path.write_text(text)
    return path


def _refunded(c: Commands, run: str) -> list[CommandBase]:
    """Two refunds approved, claimed and reported completed with a refund id as their result."""
    out: list[CommandBase] = []
    for order in COMPENSATED_ORDERS:
        call = f"call-{run}-{order}"
        out += [c.propose(run, call, order), c.resume(run, call, order=order), c.claim(run, call, order=order),
                _completed(c, run, call, {"refundId": f"rf-{call}"})]
    return out


def _completed(c: Commands, run: str, call: str, result: dict[str, str] | None = None) -> CommandBase:
    import json

    return c.make(cmd.ReportToolCompleted, run, DISPATCHER, toolCallId=call, attempt=1,
                  externalRequestId=f"{call}-a1", resultRef=f"refund/{call}", resultHash="h1",
                  result=None if result is None else json.dumps(result))


def _undone(c: Commands, run: str, order: str) -> list[CommandBase]:
    """The reversal of the refund of `order` claimed (with the key the decider derived) and completed."""
    from runfacts.processors.decider.commands.compensation import ACTION, compensation_call_id
    from runfacts.processors.policy.retry import args_hash, idempotency_key

    call = f"call-{run}-{order}"
    undo = compensation_call_id(call)
    key = idempotency_key(run, ACTION, order, args_hash({"refundId": f"rf-{call}"}))
    return [c.make(cmd.ClaimToolCall, run, DISPATCHER, toolCallId=undo, attempt=1, idempotencyKey=key,
                   externalRequestId=f"{undo}-a1", leaseEpoch=1001), _completed(c, run, undo)]


def _undoing(runs: list[str], n: int) -> Callable[[object], bool]:
    """Every run compensating with its `n`th reversal authorized."""
    def ready(expected: object) -> bool:
        states = expected.states  # type: ignore[attr-defined]
        return all(r in states and states[r].status == "compensating"
                   and sum(1 for p in states[r].compensations.values() if p.compensationToolCallId) == n
                   for r in runs)
    return ready


def pause_dispatch_scenario(row: Row, stage: Stage) -> Finished:
    """Paused capabilities (docs/dispatcher.md): an operator pauses a capability
    while the dispatcher is mid-dispatch, and the
    dispatcher dies there (runfacts.dev.crash.pausing). Wave 1's refunds execute at a slow
    provider; the pause lands; wave 2 is approved and held; the dispatcher dies -9 when wave 1's
    first answer comes (executed, not reported); its next incarnation reconciles wave 1 and keeps
    holding wave 2 until the resume; then wave 2 runs once."""
    from runfacts.connectors.args_store import ArgsStore
    from runfacts.dev.crash.oracle import ledger_problems
    from runfacts.dev.crash.pausing import LATENCY_MS, approved, calls_in, control, pause_problems, wave
    from runfacts.dev.provider.book import read_ledger
    from runfacts.processors.decider.commands.run import tool_control_run_id

    stage.provision()
    url = stage.start_provider()
    _set_faults(url, latencyMs=LATENCY_MS)
    n = max(2, stage.lab.runs // 2)
    first, second = wave(stage.prefix, 0, n), wave(stage.prefix, n, n)
    args = ArgsStore.open(stage.dir / "args.db")
    for _, call in first + second:
        args.put(refund_args("order-001"), ref=f"args/{call}")
    args.close()
    c = Commands(stage.prefix)
    stage.worker("decider", env=FAST_COMMITS).start()
    dispatcher = stage.worker("dispatcher", DISPATCHER_APP, row.guarantee, {
        "provider_url": url, "args_store": str(stage.dir / "args.db")}, env={
        "RUNFACTS_CONSUME_BATCH": "1", "RUNFACTS_TRANSACTION_TIMEOUT_MS": "30000",
        "RUNFACTS_PAYMENT_READ_TIMEOUT_MS": str(LATENCY_MS * 3), **FAST_COMMITS})
    dispatcher.start(row.point, row.after)
    stage.send(approved(c, first))
    stage.settle(ready=lambda e: calls_in(e, first, "dispatching"), timeout_s=60)
    stage.send([control(c, True, "provider incident: refunds on hold")])
    stage.settle(ready=lambda e: calls_in(e, first, "dispatching") and bool(e.events.get(
        tool_control_run_id(REFUND))), timeout_s=60)
    stage.send(approved(c, second))
    stage.settle(ready=lambda e: all(r in e.states and e.states[r].toolCalls for r, _ in second), timeout_s=60)
    marker = dispatcher.wait_killed(LATENCY_MS / 1000 + 60)
    executed_at_crash = len(read_ledger(stage.provider.ledger))  # type: ignore[union-attr]
    _set_faults(url, latencyMs=0)
    dispatcher.start()
    stage.settle(ready=lambda e: calls_in(e, first, "verified") and calls_in(e, second, "held"))
    time.sleep(3)  # the new incarnation's held: timers fire a few times while it stays paused
    before_resume = len(read_ledger(stage.provider.ledger))  # type: ignore[union-attr]
    stage.send([control(c, False, "provider recovered")])
    stage.settle(ready=lambda e: calls_in(e, first + second, "verified"))
    dispatcher.stop()
    stage.settle()
    refunds = read_ledger(stage.provider.ledger)  # type: ignore[union-attr]
    extra = ledger_problems(stage.expected, refunds) + pause_problems(stage.expected, refunds, first, second)
    if not calls_in(stage.expected, first + second, "verified"):
        extra.append("not every refund reached confirmed_success")
    return _finish(row, stage, f"{n} refunds executing when paused, {n} approved while paused; "
                               f"{_killed(row, marker)} with {executed_at_crash} executed; restarted while paused: "
                               f"{before_resume} refunds before the resume, {len(refunds)} after it for "
                               f"{2 * n} calls", extra)


def bounce_scenario(row: Row, stage: Stage) -> Finished:
    """A broker of the row's own is stopped and restarted while the decider works."""
    from runfacts.dev.crash.kafka import OwnBroker

    broker = OwnBroker(stage.dir / "broker")
    bounced = Stage(stage.lab, row.key, broker.start())
    try:
        inputs = workload(bounced.prefix, stage.lab.runs)
        half = len(inputs) // 2
        bounced.provision().send(inputs[:half])
        decider = bounced.worker("decider")
        decider.start()
        wait_until(lambda: bounced.check().numbers["events"] > 0, 60, "the first committed events", 0.2)
        broker.stop()
        down = time.monotonic()
        broker.start()
        down_s = time.monotonic() - down
        bounced.send(inputs[half:])
        bounced.settle(timeout_s=150, supervise=(decider,))
        how = ("survived" if not bounced.restarts else
               "exited " + ", ".join(str(code) for _, code in bounced.restarts) + " and was restarted")
        outcome = _finish(row, bounced, f"broker stopped mid-run, back after {down_s:.0f}s; decider {how}")
    finally:
        bounced.close()
        broker.stop()
    return outcome


LOST_CALL_TIMEOUT_MS = 2000  # the decider's transactional call timeout in the row (5 tries)
LOST_HOLD_S = 5 * LOST_CALL_TIMEOUT_MS / 1000 + 6  # past every try of the commit, then some


def lost_answer_scenario(row: Row, stage: Stage) -> Finished:
    """A broker of the row's own behind a TCP proxy (it advertises the proxy's port). The
    decider holds at `engine.during_commit` of its `after`-th commit; the proxy starts holding
    the broker's answers; the decider goes on: its EndTxn reaches the broker and commits, the
    answer does not come back, commit_transaction times out on every try; LOST_HOLD_S later the
    proxy delivers again. The engine must learn that the batch committed
    (docs/engine.md, "A transaction end that timed out": replace
    the producer, read the group's offsets) and not produce it a second time."""
    from runfacts.dev.crash.kafka import OwnBroker
    from runfacts.dev.crash.proxy import HoldingProxy

    proxy = HoldingProxy(39491, 39492).start()
    broker = OwnBroker(stage.dir / "broker", port=39492, controller_port=39493, advertised_port=39491)
    held = Stage(stage.lab, row.key, broker.start())
    try:
        inputs = workload(held.prefix, stage.lab.runs)
        half = len(inputs) // 2
        held.provision().send(inputs[:half])
        decider = held.worker("decider", env={**FAST_COMMITS,
                                              "RUNFACTS_TRANSACTION_CALL_TIMEOUT_MS": str(LOST_CALL_TIMEOUT_MS)})
        release = held.dir / "release"
        decider.start(row.point, row.after, hold_until=str(release))
        wait_until(lambda: decider.marker.exists() or not decider.alive(), 90, "the decider at its commit", 0.1)
        time.sleep(2.0)  # the batch's produce acks arrive (librdkafka's threads): EndTxn goes out at once
        proxy.hold()
        release.touch()
        time.sleep(LOST_HOLD_S)
        proxy.release()
        held.send(inputs[half:], timeout_s=90)
        held.settle(timeout_s=150, supervise=(decider,))
        log = "\n".join(decider.log(i).read_text(errors="replace") for i in range(1, decider.starts + 1))
        path = ("the engine found it committed and finished it" if "say it committed" in log else
                "the engine found it aborted and rolled back" if "say it did not commit" in log else
                "the commit did not time out as planned")
        extra = [] if "say it" in log else [f"{path}: see {decider.log(1)}"]
        how = ("never exited" if not held.restarts else
               "exited " + ", ".join(str(code) for _, code in held.restarts) + " and was restarted")
        outcome = _finish(row, held, f"the broker's answers held {LOST_HOLD_S:.0f} s from commit {row.after} on "
                                     f"(call timeout {LOST_CALL_TIMEOUT_MS} ms x 5 tries): {path}; decider {how}",
                          extra)
    finally:
        held.close()
        broker.stop()
        proxy.close()
    return outcome


def rebalance_scenario(row: Row, stage: Stage) -> Finished:
    """Two deciders; A dies -9 inside the rebalance B's arrival starts; B takes over, A comes back."""
    inputs = workload(stage.prefix, stage.lab.runs)
    half = len(inputs) // 2
    stage.provision().send(inputs[:half])
    group = '{"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 20000}'
    # the transaction timeout stays below the short session (EngineSettings' check_timeouts)
    env = {"RUNFACTS_CONSUMER": group, "RUNFACTS_TRANSACTION_TIMEOUT_MS": "5000"}
    a = stage.worker("a", static=False, env=env)
    b = stage.worker("b", static=False, env=env)
    a.start(row.point, row.after)
    stage.settle(timeout_s=60)
    b.start()
    marker = a.wait_killed(60)
    stage.send(inputs[half:])
    a.start()
    # "A restarted and rejoined": wait for it (on a loaded machine B alone may settle the oracle
    # before A's new incarnation even runs its loop, and a SIGTERM then kills it at start-up)
    wait_until(lambda: a.log().exists() and a.recovered("assigned partitions"), 90, "A rejoined")
    stage.settle()
    extra = [] if b.recovered("restored") else ["B did not restore A's partitions from the changelogs"]
    return _finish(row, stage, f"A {_killed(row, marker)} when B joined; B took over (restored A's "
                               "stores); A restarted and rejoined", extra)


def pause_scenario(row: Row, stage: Stage) -> Finished:
    """Two deciders; A is paused (SIGSTOP) with a transaction open past the session timeout, B takes
    its partitions over, A resumes (SIGCONT): whatever A still holds (an open transaction, a
    batch) must not land after the handover (docs/engine.md, "Zombies"). The transaction timeout is below the
    session timeout (the engine refuses otherwise), so the coordinator has aborted A's
    transaction and bumped its epoch by the time B owns the partitions.

    The moment is chosen, not guessed: A runs armed at `engine.in_transaction` from
    the moment B owns its share, so the first batch A processes after that holds there with its
    transaction open (never mid-restore, never between transactions); A is stopped there. A
    fenced A must say its transaction timed out, not that another process took its id."""
    inputs = workload(stage.prefix, stage.lab.runs)
    half = len(inputs) // 2
    stage.provision().send(inputs[:half])
    session_ms = 6000
    group = f'{{"session.timeout.ms": {session_ms}, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 20000}}'
    env = {"RUNFACTS_CONSUMER": group, "RUNFACTS_TRANSACTION_TIMEOUT_MS": "5000"}
    a = stage.worker("a", static=False, env=env)
    b = stage.worker("b", static=False, env=env)
    armed, release = stage.dir / "a.armed", stage.dir / "a.release"
    a.start("engine.in_transaction", hold_until=str(release), armed_from=str(armed))
    stage.settle(timeout_s=60)
    b.start()
    wait_until(lambda: b.log().exists() and b.recovered("assigned partitions"), 60, "B assigned partitions")
    armed.touch()
    stage.send(inputs[half:])
    paused = a.pause_in_transaction(release, session_ms / 1000 + 4)  # past the session (and transaction) timeout
    code = a.wait(15)  # A finds its transaction aborted (epoch bumped): fenced, it stops
    extra = []
    if code is not None:
        if "another process started with this instance id" in a.log().read_text(errors="replace"):
            extra.append(f"A was told another process took its id, not that its transaction timed out: {a.log()}")
        a.start()
        # wait for the new incarnation to rejoin (B alone may settle first; a SIGTERM at start-up kills it)
        wait_until(lambda: a.log().exists() and a.recovered("assigned partitions"), 90, "A rejoined")
    stage.settle(supervise=(a,))
    woke = "rejoined" if code is None else f"exited {code} ({_last_error(a, 1)}), restarted and rejoined"
    return _finish(row, stage, f"A paused {paused:.0f} s with a transaction open (session {session_ms // 1000} s, "
                               f"transaction 5 s); B took over; A resumed, {woke}", extra)


def _last_error(worker: Worker, start: int) -> str:
    """The last ERROR line of an incarnation's log, shortened."""
    lines = [line for line in worker.log(start).read_text(errors="replace").splitlines() if " ERROR " in line]
    return lines[-1].split(" ERROR ", 1)[1][:160] if lines else "no error logged"


# the cluster rows' engine settings: transactions time out after 10 s (decider, projector) and
# 15 s (dispatcher: a refund call runs inside one); a paused broker stays paused past both
CLUSTER_TXN_MS = {"decider": 10_000, "dispatcher": 15_000, "projector": 10_000}
PAUSE_S = max(CLUSTER_TXN_MS.values()) / 1000 + 5


def cluster_scenario(row: Row, stage: Stage) -> Finished:
    """Decider, dispatcher and projector on the three-broker cluster (topics RF 3, min.insync.replicas
    2, producers acks=all); half the refund runs go in, the row's fault hits the brokers while the
    other half goes in, the brokers come back; the oracle judges the topics, the provider's ledger
    has one refund per authorized call, the projector's live audit chain verifies, and every
    input the producer had acknowledged is in the commands log."""
    from runfacts.connectors.args_store import ArgsStore
    from runfacts.dev.crash.kafka import Cluster

    owned = stage.lab.cluster_home is None
    cluster = Cluster(stage.lab.cluster_home or stage.dir / "cluster")
    on = Stage(stage.lab, row.key, cluster.start(), replication=3)
    try:
        on.provision()
        url = on.start_provider()
        args = ArgsStore.open(on.dir / "args.db")
        inputs = _refund_inputs(on, args)
        args.close()
        workers = _cluster_workers(on, url)
        for worker in workers:
            worker.start()
        half = 3 * (on.lab.runs // 2)  # three commands per run
        on.send(inputs[:half], timeout_s=60)
        wait_until(lambda: on.check().numbers["events"] > 0, 120, "the first committed events", 0.5)
        relay = ClusterRelay(on, url)
        what, extra = CLUSTER_FAULTS[row.fault](row, cluster, on, inputs[half:], workers)
        extra += relay.finish(workers)
        total = on.lab.runs + relay.runs
        on.settle(ready=_all_verified(total), timeout_s=240, supervise=workers)
        extra += _audit_caught_up(on, workers) + _acknowledged_kept(on, inputs)
        extra += _ledger(on, total)
        what += f"; relay published {relay.runs} more runs through the fault ({relay.summary()})"
        how = ", ".join(f"{name} exited {code}" for name, code in on.restarts) or "no worker exited"
        outcome = _finish(row, on, f"{what}; {how} (restarted)", extra, live_audit=True)
    finally:
        on.close()
        if owned:
            cluster.stop()
        else:
            cluster.start()  # every node up again for the next row
    return outcome


def _cluster_workers(on: Stage, url: str) -> tuple:
    txn = {k: {"RUNFACTS_TRANSACTION_TIMEOUT_MS": str(v)} for k, v in CLUSTER_TXN_MS.items()}
    return (on.worker("decider", env={**FAST_COMMITS, **txn["decider"]}),
            on.worker("dispatcher", DISPATCHER_APP, EOS, {"provider_url": url, "args_store": str(on.dir / "args.db")},
                      env={"RUNFACTS_CONSUME_BATCH": "1", "RUNFACTS_PAYMENT_READ_TIMEOUT_MS": "3000",
                           **FAST_COMMITS, **txn["dispatcher"]}),
            on.worker("projector", PROJECTOR_APP, env={**FAST_COMMITS, **txn["projector"]}))


def _audit_caught_up(on: Stage, workers: tuple, timeout_s: float = 90.0) -> list[str]:
    """Wait until the live projector's audit chain verifies against the events log."""
    deadline = time.monotonic() + timeout_s
    while True:
        for worker in workers:
            if not worker.alive():
                on.restarts.append((worker.name, worker.wait(0)))
                worker.start()
        found = on.audit(live=True)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(1.0)


def _acknowledged_kept(on: Stage, inputs: list[Input]) -> list[str]:
    """Every input the producer had acknowledged (acks=all) is in the committed commands log."""
    from runfacts.logread import read_to_end

    held = {r.value for r in read_to_end(on.bootstrap, [on.names.commands])[on.names.commands]}
    lost = [i for i in inputs if i.value not in held]
    return [f"{len(lost)} acknowledged input(s) missing from the commands log"] if lost else []


def _ledger(on: Stage, runs: int) -> list[str]:
    from runfacts.dev.crash.oracle import ledger_problems
    from runfacts.dev.provider.book import read_ledger

    refunds = read_ledger(on.provider.ledger)  # type: ignore[union-attr]
    verified = [] if _all_verified(runs)(on.expected) else ["not every refund reached confirmed_success"]
    return ledger_problems(on.expected, refunds) + verified


class ClusterRelay:
    """Refund runs written to a SQLite outbox by a feeder thread, one run a second, while a
    cluster fault plays; the relay (not exiting when idle) publishes them through the fault and
    is restarted whenever it exits. `finish` stops the feeder, waits until every row is
    published, stops the relay and names what went wrong."""

    RUNS = 6

    def __init__(self, on: Stage, url: str) -> None:
        import threading

        from runfacts.connectors.args_store import ArgsStore
        from runfacts.connectors.outbox.commands import CommandOutbox

        self.on, self.db, self.table = on, on.dir / "relay-outbox.db", f"ob_{on.prefix}".replace("-", "_")
        args = ArgsStore.open(on.dir / "args.db")
        c, self.commands = Commands(on.prefix), []
        for i in range(self.RUNS):
            run, call = f"{on.prefix}-relayed-{i:03d}", f"call-{on.prefix}-relayed-{i:03d}"
            args.put(refund_args("order-001"), ref=f"args/{call}")
            self.commands.append((c.create(run), c.propose(run, call), c.resume(run, call)))
        args.close()
        CommandOutbox.open(self.db, on.names, self.table).close()  # the table exists before the relay starts
        self.exits: list[int | None] = []
        self.proc = on.relay(self.db, self.table, exit_when_idle=False)
        self.written = 0
        self._stop = threading.Event()
        self._feeder = threading.Thread(target=self._feed, name="cluster-relay-feed", daemon=True)
        self._feeder.start()

    @property
    def runs(self) -> int:
        return self.RUNS

    def _feed(self) -> None:
        from runfacts.connectors.outbox.commands import CommandOutbox

        outbox = CommandOutbox.open(self.db, self.on.names, self.table)
        try:
            for run in self.commands:
                outbox.send(*run)
                self.written += 1
                if self._stop.wait(1.0):
                    break
        finally:
            outbox.close()

    def _supervise(self) -> None:
        if self.proc.poll() is not None:
            self.exits.append(self.proc.returncode)
            self.proc = self.on.relay(self.db, self.table, exit_when_idle=False)

    def finish(self, workers: tuple, timeout_s: float = 240.0) -> list[str]:
        from runfacts.connectors.outbox.store import OutboxStore

        self._feeder.join(timeout_s)
        deadline = time.monotonic() + timeout_s
        pending = -1
        while time.monotonic() < deadline:
            self._supervise()
            store = OutboxStore.open(str(self.db), self.table)
            try:
                metrics = store.metrics()
            finally:
                store.close()
            pending = metrics.pending
            if self.written == self.RUNS and pending == 0 and metrics.parked_runs == 0:
                break
            time.sleep(1.0)
        self.proc.terminate()
        code = self.proc.wait(30)
        problems = [] if self.written == self.RUNS else [f"the feeder wrote {self.written} of {self.RUNS} runs"]
        problems += [] if pending == 0 else [f"{pending} outbox rows never published"]
        problems += [] if code == 0 else [f"the relay exited {code} on SIGTERM"]
        return problems

    def summary(self) -> str:
        codes = ", ".join(str(c) for c in self.exits)
        return f"relay exited {codes} and was restarted" if self.exits else "relay never exited"


def _chunks(items: list[Input], n: int) -> list[list[Input]]:
    size = -(-len(items) // n) if items else 0
    return [items[i * size:(i + 1) * size] for i in range(n)]


Fault = Callable[[Row, "Cluster", Stage, list[Input], tuple], tuple[str, list[str]]]


def _leader_kill(row: Row, cluster: Cluster, on: Stage, rest: list[Input], workers: tuple) -> tuple[str, list[str]]:
    """`row.after` times: kill -9 the events leader, send inputs, progress with two brokers, restart it."""
    killed, extra = [], []
    for chunk in _chunks(rest, row.after):
        node = cluster.leader(on.names.events)
        cluster.kill(node)
        killed.append(node)
        on.send(chunk, timeout_s=90)
        if not on.settle(timeout_s=150, supervise=workers).ok:
            extra.append(f"no progress to the oracle with node {node} down")
        cluster.start(node)
    return f"events leader killed -9 {len(killed)}x (nodes {killed}), progress with 2 of 3, restarted", extra


def _controller_bounce(row: Row, cluster: Cluster, on: Stage, rest: list[Input],
                       workers: tuple) -> tuple[str, list[str]]:
    """Stop the active controller, send inputs; a new controller takes over; restart it."""
    node = cluster.controller()
    cluster.stop(node)
    on.send(rest, timeout_s=90)
    extra = [] if on.settle(timeout_s=150, supervise=workers).ok else [f"no progress with controller {node} down"]
    new = cluster.controller()
    extra += [] if new != node else [f"node {node} still leads the quorum after it stopped"]
    cluster.start(node)
    return f"active controller (node {node}) stopped, node {new} took over, restarted", extra


def _two_down(row: Row, cluster: Cluster, on: Stage, rest: list[Input], workers: tuple) -> tuple[str, list[str]]:
    """Kill -9 two of three brokers: a write cannot be acknowledged (min.insync.replicas 2), so
    the producer's inputs stay pending; the brokers come back, the pending inputs are
    acknowledged, the workers resume."""
    from confluent_kafka import Producer

    from runfacts.partitioning import PRODUCER_PARTITIONING

    leader = cluster.leader(on.names.events)
    down = [leader, next(n for n in cluster.NODES if n != leader)]
    for node in down:
        cluster.kill(node)
    producer = Producer({"bootstrap.servers": on.bootstrap, "enable.idempotence": True, **PRODUCER_PARTITIONING})
    acked: list[bool] = []
    for item in rest:
        producer.produce(on.names.commands, item.value, item.key, headers=list(item.headers) or None,
                         on_delivery=lambda err, _msg: acked.append(err is None))
    pending = producer.flush(10)
    extra = [] if pending == len(rest) and not any(acked) else [
        f"{len(rest) - pending} write(s) acknowledged with two of three brokers down"]
    cluster.start()  # both at once: the script starts every stopped node in parallel
    left = producer.flush(120)
    extra += [f"{left} input(s) not delivered after the brokers came back"] if left else []
    return (f"nodes {down} killed -9: {pending} of {len(rest)} writes blocked (none acknowledged), "
            f"brokers restarted, all delivered", extra)


def _pause(row: Row, cluster: Cluster, on: Stage, rest: list[Input], workers: tuple) -> tuple[str, list[str]]:
    """SIGSTOP the events leader past every worker's transaction timeout while inputs go in; SIGCONT."""
    node = cluster.leader(on.names.events)
    cluster.pause(node)
    paused = time.monotonic()
    on.send(rest, timeout_s=120)
    time.sleep(max(0.0, paused + PAUSE_S - time.monotonic()))
    cluster.resume(node)
    txn_s = max(CLUSTER_TXN_MS.values()) / 1000
    return (f"events leader (node {node}) paused {time.monotonic() - paused:.0f}s (transaction timeouts "
            f"<= {txn_s:.0f}s), resumed", [])


STORM_S = float(os.environ.get("RUNFACTS_CRASH_STORM_S", "180"))  # how long the storm blows
STORM_EVERY_S = 3.0


def storm_scenario(row: Row, stage: Stage) -> Finished:
    """Three deciders (dynamic members, short sessions) while a producer feeds the workload at a
    steady rate; every few seconds a random decider is killed -9, stopped or started. Then all
    come back and the oracle judges; and no run's committed state ever goes back a version
    (a restore that stopped short would re-decide from an older state)."""
    import random
    import threading

    inputs = workload(stage.prefix, stage.lab.runs * 3)
    stage.provision()
    group = '{"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 20000}'
    env = {"RUNFACTS_CONSUMER": group, "RUNFACTS_TRANSACTION_TIMEOUT_MS": "5000"}  # below the session (18.2)
    deciders = [stage.worker(n, static=False, env=env) for n in ("a", "b", "c")]
    for worker in deciders:
        worker.start()
    gap = STORM_S * 0.8 / len(inputs)
    sent = threading.Event()

    def feed() -> None:
        for item in inputs:
            stage.send([item])
            time.sleep(gap)
        sent.set()

    feeder = threading.Thread(target=feed, name="storm-feed", daemon=True)
    feeder.start()
    seed = int(time.time())
    rng, actions = random.Random(seed), Counter[str]()
    end = time.monotonic() + STORM_S
    while time.monotonic() < end:
        time.sleep(STORM_EVERY_S)
        worker = rng.choice(deciders)
        action = rng.choice(("kill", "stop")) if worker.alive() else "start"
        if action == "kill":
            worker.kill()
        elif action == "stop":
            worker.stop(15)
        else:
            worker.start()
        actions[action] += 1
    feeder.join(120)
    for worker in deciders:
        if not worker.alive():
            worker.start()
    # all three running again before the final check: on a loaded machine the oracle can be met
    # by the others while a just-started one still imports, and a SIGTERM then kills it there
    wait_until(lambda: all(w.log().exists() and w.recovered("assigned partitions") for w in deciders), 120,
               "every decider rejoined", 0.5)
    stage.settle(timeout_s=180)
    extra = [] if sent.is_set() else ["the producer did not send every input"]
    extra += _state_went_back(stage)
    what = (f"{STORM_S:.0f}s storm (seed {seed}): {dict(actions)} across 3 deciders, "
            f"{len(inputs)} inputs fed steadily; no committed state went back a version")
    return _finish(row, stage, what, extra)


SOAK_S = float(os.environ.get("RUNFACTS_CRASH_SOAK_S", "600"))  # how long the soak runs
SOAK_RUNS_PER_S = float(os.environ.get("RUNFACTS_CRASH_SOAK_RATE", "1"))  # refund runs started per second
SOAK_SAMPLE_S = 15.0


def soak_scenario(row: Row, stage: Stage) -> Finished:
    """A steady stream of refund runs (create, propose, approve: the dispatcher refunds, the
    provider settles, the projector chains the audit) for SOAK_S seconds; every SOAK_SAMPLE_S
    the consumer lag of each group, each worker's RSS and its state directory's size are
    sampled (soak.csv in the row's directory). Flat means: after the first fifth (warm-up), the
    last third's RSS is within 25 % (+16 MB) of the middle third's, the lag's maximum in the last
    third within 3x (+20) of the middle third's, and state bytes per run started within 30 %.
    Then the oracle and one refund per authorized call."""
    import threading

    from runfacts.connectors.args_store import ArgsStore

    stage.provision()
    url = stage.start_provider()
    runs = max(1, int(SOAK_S * SOAK_RUNS_PER_S))
    args = ArgsStore.open(stage.dir / "args.db")
    inputs = _refund_inputs(stage, args, runs)
    args.close()
    workers = (stage.worker("decider", env=FAST_COMMITS),
               stage.worker("dispatcher", DISPATCHER_APP, EOS, {"provider_url": url,
                                                                "args_store": str(stage.dir / "args.db")},
                            env={"RUNFACTS_PAYMENT_READ_TIMEOUT_MS": "3000", **FAST_COMMITS}),
               stage.worker("projector", PROJECTOR_APP, env=FAST_COMMITS))
    for worker in workers:
        worker.start()
    started = [0]
    done = threading.Event()

    def feed() -> None:
        begin = time.monotonic()
        for i in range(runs):
            time.sleep(max(0.0, begin + i / SOAK_RUNS_PER_S - time.monotonic()))
            stage.send(inputs[3 * i:3 * i + 3])
            started[0] = i + 1
        done.set()

    feeder = threading.Thread(target=feed, name="soak-feed", daemon=True)
    feeder.start()
    samples: list[dict[str, float]] = []
    begin = time.monotonic()
    while not done.wait(SOAK_SAMPLE_S):
        samples.append(_soak_sample(stage, workers, time.monotonic() - begin, started[0]))
    samples.append(_soak_sample(stage, workers, time.monotonic() - begin, started[0]))
    _write_samples(stage.dir / "soak.csv", samples)
    stage.settle(ready=_all_verified(runs), timeout_s=300, supervise=workers)
    extra = _soak_problems(samples) + _ledger(stage, runs)
    return _finish(row, stage, f"{runs} refund runs over {SOAK_S:.0f} s; {_soak_summary(samples)}", extra,
                   live_audit=True)


def _soak_sample(stage: Stage, workers: tuple, at_s: float, started: int) -> dict[str, float]:
    from runfacts.dev.crash.kafka import group_lag

    sample: dict[str, float] = {"t_s": round(at_s, 1), "runs": started}
    for worker in workers:
        sample[f"{worker.name}_rss_mb"] = _rss_mb(worker)
        sample[f"{worker.name}_state_mb"] = _dir_mb(worker.state_dir)
    for group, lag in group_lag(stage.bootstrap, stage.prefix).items():
        sample[f"lag:{group}"] = lag
    return sample


def _rss_mb(worker: Worker) -> float:
    if not worker.alive():
        return float("nan")
    assert worker.proc is not None
    try:
        for line in open(f"/proc/{worker.proc.pid}/status", encoding="ascii"):  # noqa: PTH123, SIM115
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _dir_mb(path: object) -> float:
    from pathlib import Path

    root = Path(str(path))
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 2**20 if root.exists() else 0.0


def _write_samples(path: object, samples: list[dict[str, float]]) -> None:
    import csv
    from pathlib import Path

    fields = sorted({k for sample in samples for k in sample}, key=lambda k: (k not in ("t_s", "runs"), k))
    with Path(str(path)).open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fields)
        writer.writeheader()
        writer.writerows(samples)


def _thirds(samples: list[dict[str, float]]) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """The middle and the last third of the samples after the first fifth (warm-up)."""
    steady = samples[len(samples) // 5:]
    third = max(1, len(steady) // 3)
    return steady[third:2 * third] or steady, steady[-third:]


def _growth(rows: list[dict[str, float]], ys: list[float]) -> float:
    """How much `ys` (one value per row) grows across `rows` by its least-squares line (slope x
    time span)."""
    xs = [r["t_s"] for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return slope * (xs[-1] - xs[0])


def _soak_problems(samples: list[dict[str, float]]) -> list[str]:
    """Flat after the first fifth (warm-up), by the least-squares growth across the rest: RSS
    grows at most 16 MB + 10 %; the lag at most 20 + its maximum in the first steady third;
    state bytes per run started at most 30 % + 0.5 KB."""
    import math

    if len(samples) < 6:
        return [f"only {len(samples)} samples: the soak was too short to judge flatness"]
    steady = samples[len(samples) // 5:]
    first = steady[:max(1, len(steady) // 3)]
    problems = []
    for key in sorted(k for k in samples[-1] if k.endswith("_rss_mb")):
        values = [r.get(key, float("nan")) for r in steady]
        if any(math.isnan(v) for v in values):
            problems.append(f"{key}: the worker was not running at every sample")
            continue
        grew, mean = _growth(steady, values), sum(values) / len(values)
        if grew > 16 + 0.1 * mean:
            problems.append(f"{key} grew {grew:.0f} MB across the steady part (mean {mean:.0f} MB)")
    for key in sorted(k for k in samples[-1] if k.startswith("lag:")):
        grew, base = _growth(steady, [r.get(key, 0.0) for r in steady]), max(r.get(key, 0.0) for r in first)
        if grew > 20 + base:
            problems.append(f"{key} grew {grew:.0f} across the steady part (first third's maximum {base:.0f})")
    for key in sorted(k for k in samples[-1] if k.endswith("_state_mb")):
        per_run = [r.get(key, 0.0) * 1024 / max(1.0, r["runs"]) for r in steady]
        grew, mean = _growth(steady, per_run), sum(per_run) / len(per_run)
        if grew > 0.3 * mean + 0.5:
            problems.append(f"{key} per run grew {grew:.1f} KB across the steady part (mean {mean:.1f} KB)")
    return problems


def _soak_summary(samples: list[dict[str, float]]) -> str:
    if len(samples) < 6:
        return f"{len(samples)} samples"
    middle, last = _thirds(samples)
    parts = []
    for key in sorted(k for k in samples[-1] if k.endswith("_rss_mb")):
        name = key.removesuffix("_rss_mb")
        a = sum(r[key] for r in middle) / len(middle)
        b = sum(r[key] for r in last) / len(last)
        per_run = last[-1].get(f"{name}_state_mb", 0.0) * 1024 / max(1.0, last[-1]["runs"])
        parts.append(f"{name} RSS {a:.0f} -> {b:.0f} MB, state {per_run:.1f} KB/run")
    lags = [v for r in last for k, v in r.items() if k.startswith("lag:")]
    parts.append(f"max lag in the last third {max(lags, default=0):.0f}")
    return "; ".join(parts) + f" ({len(samples)} samples)"


def _state_went_back(stage: Stage) -> list[str]:
    """Per run, the committed run.state versions only rise."""
    import json

    from runfacts.logread import read_to_end

    last: dict[bytes, int] = {}
    problems = []
    for record in read_to_end(stage.bootstrap, [stage.names.state])[stage.names.state]:
        if record.key is None or record.value is None:
            continue
        version = int(json.loads(record.value)["version"])
        if version < last.get(record.key, -1):
            problems.append(f"{record.key.decode()}: run.state version {version} after {last[record.key]}")
        last[record.key] = version
    return problems


CLUSTER_FAULTS: dict[str, Fault] = {
    "leader-kill": _leader_kill, "controller-bounce": _controller_bounce, "two-down": _two_down, "pause": _pause,
}

SCENARIOS: dict[str, Callable[[Row, Stage], Finished]] = {
    "decider": decider_scenario, "restore": restore_scenario, "relay": relay_scenario,
    "dispatcher": dispatcher_scenario, "relay-pg": relay_pg_scenario, "bounce": bounce_scenario,
    "lost-answer": lost_answer_scenario,
    "rebalance": rebalance_scenario,
    "between": between_scenario, "expiry": expiry_scenario, "timers": timers_scenario, "pause": pause_scenario,
    "compensation": compensation_scenario, "pause-dispatch": pause_dispatch_scenario,
    "cluster": cluster_scenario,
    "storm": storm_scenario, "soak": soak_scenario,
    "children": lambda row, stage: children_row(row, stage),
}
