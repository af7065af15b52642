"""The real stack the TypeScript tests run against (started by test/stack.ts, one per test file).

    .venv/bin/python clients/typescript/test/stack.py gateway|mcp WORKDIR

`gateway`: the gateway tests' stack (tests/gateway_support.py): the run decider checking every
command's source signature, the dispatcher, the payment simulator, and `runfacts gateway serve`.
`mcp`: the governed-MCP stack (tests/integration/mcp_support.py): decider and dispatcher serving
the ledger MCP server's tools, `runfacts mcp serve`'s stdio command line, and a gateway on the
same topics (the approver's side). All on the real broker ($KAFKA_BOOTSTRAP_SERVERS, else the
local one of scripts/kafka.sh, as the Python tests).

Prints one JSON line (the URLs, API keys, the MCP command) once everything answers, then runs
until its stdin closes (the test process ended, however it ended) and stops it all, deleting the
stack's topics.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "integration")]

from gateway_support import KEYS, gateway_process, gateway_stack  # noqa: E402
from mcp_support import McpStack  # noqa: E402

from runfacts.demo.stack import DemoOptions  # noqa: E402
from runfacts.dev.services import LocalKafka  # noqa: E402
from runfacts.processors.policy.keyring import ENV_SOURCE_KEYS  # noqa: E402
from runfacts.settings import KafkaSettings  # noqa: E402

APPROVER = {"secret": "approver-key-0123456789abcdef", "subjectId": "alice", "roles": ["support_agent"],
            "source": "dashboard"}
"""The MCP stack's approver (its runs have no tenant)."""


class McpWithGateway(McpStack):
    """The governed-MCP stack, and what a gateway on its topics needs (approvals over HTTP)."""

    def gateway_env(self, port: int, **extra: str) -> dict[str, str]:
        return {**os.environ, **self.serve_env(), **self.options.signing_env,
                "RUNFACTS_GATEWAY_KEYS": json.dumps({"approver": APPROVER}), "RUNFACTS_GATEWAY_PORT": str(port),
                ENV_SOURCE_KEYS: self.options.source_env("dashboard")[ENV_SOURCE_KEYS], **extra}


def main(kind: str, workdir: Path) -> None:
    # the broker the Python tests use (tests/conftest.py): $KAFKA_BOOTSTRAP_SERVERS, else the local one
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or LocalKafka().start()
    with ExitStack() as stack:
        if kind == "gateway":
            running = stack.enter_context(gateway_stack(bootstrap, workdir))
            url = stack.enter_context(gateway_process(running, RUNFACTS_GATEWAY_RATE_PER_S="1000",
                                                      RUNFACTS_GATEWAY_BURST="1000"))
            found = {"url": url, "keys": {name: key["secret"] for name, key in KEYS.items()},
                     "prefix": running.names.prefix}
        elif kind == "mcp":
            options = DemoOptions(prefix=f"ts-mcp-{uuid.uuid4().hex[:8]}", workdir=workdir, partitions=2,
                                  kafka=KafkaSettings(bootstrap_servers=bootstrap))
            running = McpWithGateway(options)
            stack.callback(running.stop)
            running.start()
            params = running.serve_params(agent="ts-agent", wait_s=120)
            url = stack.enter_context(gateway_process(running))  # type: ignore[arg-type]
            found = {"url": url, "keys": {"approver": APPROVER["secret"]}, "prefix": running.names.prefix,
                     "mcp": {"command": params.command, "args": list(params.args), "env": params.env,
                             "cwd": str(params.cwd)}}
        else:
            sys.exit(f"stack.py: unknown stack {kind!r}: use gateway or mcp")
        print(json.dumps(found), flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped: the ExitStack cleans up
        sys.stdin.read()  # until the test process closes it (or exits)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
