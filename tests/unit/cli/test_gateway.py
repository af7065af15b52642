"""`runfacts gateway serve` refuses to start, in one line naming the setting, without API keys,
without source keys, or with a key whose source it cannot sign for (before reaching Kafka)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

KEY = {"a": {"secret": "a-secret-0123456789", "subjectId": "agent-1", "roles": ["agent"], "source": "agent-harness"}}
SOURCES = {"dashboard": {"current": "d-1", "keys": {"d-1": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTAxMjM0NTY3"}}}


@pytest.mark.parametrize(("env", "named"), [
    ({}, "RUNFACTS_GATEWAY_KEYS"),
    ({"RUNFACTS_GATEWAY_KEYS": json.dumps(KEY)}, "RUNFACTS_SOURCE_KEYS"),
    ({"RUNFACTS_GATEWAY_KEYS": json.dumps(KEY), "RUNFACTS_SOURCE_KEYS": json.dumps(SOURCES)}, "agent-harness"),
    ({"RUNFACTS_GATEWAY_KEYS": "{not json"}, "not valid JSON"),
])
def test_serve_refuses_to_start_naming_what_is_missing(env: dict[str, str], named: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RUNFACTS_GATEWAY_", "RUNFACTS_SOURCE_KEYS"))}
    done = subprocess.run([sys.executable, "-m", "runfacts.cli", "gateway", "serve", "--port", "1"],
                          env={**clean, **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr
