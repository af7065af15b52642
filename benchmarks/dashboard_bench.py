"""The operator console's speed: a run page with 2,000 facts (goal < 1 s) and the run list over
10,000 runs, served by the real app (Starlette TestClient, no broker: the feeds are fed the
records the run decider would write).

Run: .venv/bin/python benchmarks/dashboard_bench.py [--facts 2000] [--runs 10000] [--repeat 5]

1. folds a run through the real decider (`decide`/`fold`): create, then tool calls of a
   low-risk capability (propose -> authorized -> claim/dispatching -> budget -> completed)
   until the run has --facts facts; the facts go into a `FactsFeed` as framed Avro records
   (as the events topic holds them), the State into the state feed;
2. times GET /runs/<run> as an operator: the first request (every fact decoded) and the next
   --repeat ones (decoded facts cached; each still redacts, groups and renders every fact);
3. with --runs States in all (copies of the run's under other run ids and tenants: the
   fixture `fed_dashboard`, which console_paint_bench.py serves too) times GET / (first page),
   the last page, a status filter and a run-id search.
Reports milliseconds per request (min / median / max) and the page sizes.

Memory: `--memory --runs 2000,10000 [--facts-per-run 20] [--rounds 3]` feeds each count of
runs (every fact as its framed Avro record, every State as its JSON record, decoded by the
feeds as from the topics) into the feeds in a fresh process per round and reports the
process's resident set (VmRSS, after a collection) before and after: median and range.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from starlette.testclient import TestClient

from runfacts.dashboard.app import Dashboard, create_app
from runfacts.dashboard.feed import FactsFeed, FeedSettings, StateFeed, ViewFeed, decode_view
from runfacts.dashboard.session import LOGIN_CSRF_COOKIE, SessionSigner
from runfacts.ops.client import CommandClient
from runfacts.processors.decider.core import DecideContext, decide
from runfacts.processors.decider.evolve import fold
from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.processors.policy.retry import args_hash, idempotency_key
from runfacts.schemas import commands as cmd
from runfacts.schemas.codec import Codec
from runfacts.schemas.common import Actor, BudgetAmounts, RunVersions
from runfacts.security.identity import hash_secret, load_users
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

MANIFEST = """
[[capability]]
capabilityId = "orders.lookup"
risk = "low"
requiredRole = "agent"
needsApproval = false
reconciliationDeadlineMs = 60000
[capability.retry]
maxAttempts = 3
baseBackoffMs = 100
maxBackoffMs = 1000
deadlineMs = 10000
"""
VERSIONS = RunVersions(stateSchema="1", modelRoute="route-a", toolManifest="tm-1", policy="p-1")
AGENT = Actor(subjectId="agent", roles=("agent",), authSource="agent-harness")
DISPATCHER = Actor(subjectId="dispatcher-1", roles=("dispatcher",), authSource="dispatcher")
USER = Actor(subjectId="user-7", roles=("user",), authSource="dashboard")
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
RUN = "run-bench-000001"


def long_run(facts: int) -> tuple[object, list[object]]:
    """A run with at least `facts` facts (the State and its events in log order)."""
    ctx = DecideContext(capabilities=parse_capabilities(MANIFEST), current_versions=VERSIONS)
    clock = iter(T0 + timedelta(milliseconds=i) for i in range(10**7))
    ids = iter(range(10**7))

    def c(cls, actor, **payload):
        payload_cls = cls.model_fields["payload"].annotation
        return cls(commandId=f"cmd-{next(ids)}", runId=RUN, actor=actor, issuedAt=next(clock),
                   correlationId="bench", payload=payload_cls(**payload))

    state, log = None, []

    def apply(command):
        nonlocal state
        events = decide(command, state, ctx)
        assert not any(e.eventType == "command.rejected" for e in events), events
        log.extend(events)
        state = fold(state, events)

    apply(c(cmd.CreateRun, USER, goalRef="g", goalSummary="look up many orders", userId="customer-1",
            budget=BudgetAmounts(toolCalls=100_000, steps=100_000), versions=VERSIONS))
    i = 0
    while len(log) < facts:
        call, target = f"call-{i:05d}", f"order-{i:05d}"
        digest = args_hash({"orderId": target})
        apply(c(cmd.ProposeToolCall, AGENT, toolCallId=call, capabilityId="orders.lookup", argsHash=digest,
                argsRef=f"args/{call}", target=target, action="lookup", risk="low", summary=f"look up {target}"))
        apply(c(cmd.ClaimToolCall, DISPATCHER, toolCallId=call, attempt=1,
                idempotencyKey=idempotency_key(RUN, "lookup", target, digest),
                externalRequestId=f"req-{call}", leaseEpoch=1))
        apply(c(cmd.ReportToolCompleted, DISPATCHER, toolCallId=call, attempt=1, externalRequestId=f"req-{call}",
                resultRef=f"result-{call}", resultHash="h"))
        i += 1
    return state, log


def fed_dashboard(facts_wanted: int, runs: int, users: Path, prefix: str) -> tuple[Dashboard, object, list[object]]:
    """The dashboard over feeds fed as the topics would feed them (no broker): the long run's facts
    as framed Avro records, `runs - 1` copies of its State under other run ids and tenants, then
    its own State (last: among the cached States, as there is no broker to read one back from).
    Returns the dashboard, the run's State and its facts."""
    state, log = long_run(facts_wanted)
    kafka, names = KafkaSettings(bootstrap_servers="127.0.0.1:1"), TopicNames(prefix)
    views = ViewFeed(kafka, FeedSettings(names.user_view, decode_view))
    states = StateFeed(kafka, FeedSettings(names.state))
    facts = FactsFeed(kafka, FeedSettings(names.events))
    codec = Codec()
    for offset, event in enumerate(log):
        facts.add(RUN, offset, int(event.occurredAt.timestamp() * 1000), codec.encode(event))  # type: ignore[attr-defined]
    for i in range(runs - 1):
        states.put(f"run-{i:06d}", state.model_copy(update={  # type: ignore[attr-defined]
            "runId": f"run-{i:06d}", "tenant": ("acme", "globex")[i % 2],
            "status": "waiting_for_review" if i % 10 == 0 else "running", "updatedAt": T0 + timedelta(seconds=i)}))
    states.apply(RUN.encode(), state.model_dump_json().encode())  # type: ignore[attr-defined]
    return Dashboard(views, states, load_users(users), SessionSigner(b"b" * 32), CommandClient(kafka, names),
                     facts=facts), state, log


def operator_users(directory: str) -> Path:
    """A users file with one operator, olga (password olga-pw)."""
    users = Path(directory) / "users.toml"
    users.write_text(f'[users.olga]\nroles = ["operator"]\npassword = "{hash_secret("olga-pw")}"\n')
    return users


def timed(get, url: str, repeat: int) -> tuple[float, list[float], int]:
    started = time.perf_counter()
    first = get(url)
    cold = (time.perf_counter() - started) * 1000
    assert first.status_code == 200, (url, first.status_code)
    warm = []
    for _ in range(repeat):
        started = time.perf_counter()
        get(url)
        warm.append((time.perf_counter() - started) * 1000)
    return cold, warm, len(first.content)


def report(name: str, cold: float, warm: list[float], size: int) -> None:
    print(f"{name:<34} first {cold:7.1f} ms | then min {min(warm):7.1f} median {statistics.median(warm):7.1f} "
          f"max {max(warm):7.1f} ms | {size / 1024:7.0f} KiB")


def rss_kib() -> int:
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def feed_runs(runs: int, facts_per_run: int) -> dict[str, int]:
    """One round in this process: RSS before and after feeding `runs` runs into the feeds."""
    state, log = long_run(facts_per_run)
    kafka, names = KafkaSettings(bootstrap_servers="127.0.0.1:1"), TopicNames("bench-dash")
    states = StateFeed(kafka, FeedSettings(names.state))
    facts = FactsFeed(kafka, FeedSettings(names.events))
    codec, state_json = Codec(), state.model_dump_json()  # type: ignore[attr-defined]
    before, offset = rss_kib(), 0
    for i in range(runs):
        run = f"run-{i:06d}"
        for event in log:
            facts.add(run, offset, int(event.occurredAt.timestamp() * 1000),  # type: ignore[attr-defined]
                      codec.encode(event.model_copy(update={"runId": run})))  # type: ignore[attr-defined]
            offset += 1
        states.apply(run.encode(), state_json.replace(RUN, run).encode())
    return {"before_kib": before, "after_kib": rss_kib(), "facts": offset}


def memory(counts: list[int], facts_per_run: int, rounds: int) -> int:
    for runs in counts:
        grown = []
        for _ in range(rounds):
            out = subprocess.run([sys.executable, __file__, "--memory-round", str(runs), str(facts_per_run)],
                                 check=True, capture_output=True, text=True).stdout
            got = json.loads(out.strip().splitlines()[-1])
            grown.append((got["after_kib"] - got["before_kib"]) / 1024)
        print(f"{runs:>6} runs x {facts_per_run} facts: feeds hold {statistics.median(grown):7.1f} MiB "
              f"(median of {rounds}; range {min(grown):.1f}-{max(grown):.1f} MiB)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=2000)
    parser.add_argument("--runs", default="10000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--memory", action="store_true", help="measure the feeds' resident memory")
    parser.add_argument("--facts-per-run", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-round", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_round:
        print(json.dumps(feed_runs(*args.memory_round)))
        return 0
    if args.memory:
        return memory([int(n) for n in args.runs.split(",")], args.facts_per_run, args.rounds)
    args.runs = int(args.runs)

    with tempfile.TemporaryDirectory() as tmp:
        dashboard, state, log = fed_dashboard(args.facts, args.runs, operator_users(tmp), "bench-dash")
        states = dashboard.states
        with TestClient(create_app(dashboard, manage_feed=False), base_url="http://dash.bench") as client:
            token = client.get("/login").cookies[LOGIN_CSRF_COOKIE]
            client.post("/login", data={"username": "olga", "password": "olga-pw", "csrf": token})
            print(f"run page: {len(log)} facts, {len(state.toolCalls)} tool calls")  # type: ignore[attr-defined]
            report(f"GET /runs/<run> ({len(log)} facts)", *timed(client.get, f"/runs/{RUN}", args.repeat))
            pages = -(-len(states) // 50)
            print(f"run list: {len(states)} runs, {pages} pages of 50")
            report("GET / (page 1)", *timed(client.get, "/", args.repeat))
            report(f"GET /?page={pages}", *timed(client.get, f"/?page={pages}", args.repeat))
            report("GET /?status=waiting_for_review", *timed(client.get, "/?status=waiting_for_review",
                                                             args.repeat))
            report("GET /?q=run-00424", *timed(client.get, "/?q=run-00424", args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
