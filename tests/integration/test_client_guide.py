"""docs/guide.md runs: every python block, in order, in one namespace, against a real broker
with the real decider, dispatcher and payment simulator; and the example stays small and
imports only runfacts.client from runfacts."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest
from client_support import agent_stack

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guide.md"
EXAMPLE = REPO / "examples" / "refund_agent.py"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_example_agent_is_at_most_30_lines_and_imports_only_runfacts_client() -> None:
    source = EXAMPLE.read_text()
    assert len([line for line in source.splitlines() if line.strip()]) <= 30
    modules = {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in modules if m and m.startswith("runfacts")} == {"runfacts.client"}


def test_every_python_block_of_the_guide_runs_against_the_real_stack(
        kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = python_blocks(GUIDE.read_text())
    assert len(blocks) >= 6
    with agent_stack(kafka_bootstrap, tmp_path / "stack", memory=True) as stack:
        for key, value in stack.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(tmp_path)
        namespace: dict[str, object] = {}
        out = io.StringIO()
        try:
            for number, block in enumerate(blocks, start=1):
                with contextlib.redirect_stdout(out):
                    exec(compile(block, f"docs/guide.md python block {number}", "exec"), namespace)  # noqa: S102
        finally:
            client = namespace.get("rf")
            if client is not None:
                client.close()  # type: ignore[attr-defined]
        printed = out.getvalue()
        [refund] = [r for r in stack.ledger() if r["orderId"] == "order-001"]
        assert "approval-call-" in printed and "refund on order-001 (high risk)" in printed
        assert 'orderId = "order-001"\namountMinor = 4200 minor units\ncurrency = "EUR"' in printed  # the display
        assert "'amount_cents = 9000 cents'" in printed
        assert f"{refund['refundId']} 4200" in printed and "completed" in printed
        assert "approval rejected by alice" in printed
        assert "\nfailed\n" in printed  # §4: the async story, rejected
        assert "\ncompleted\n" in printed.split("re-authorization asked")[1]  # §6: the agent served the run
        assert re.search(r"re-authorization asked: approval-call-\w+-r1", printed)  # §5: a new approval
        assert "call the customer" in printed
        assert "[('lessons/damaged-no-return', 'rita')]" in printed  # §9: read back from the memory topic
        assert [r["orderId"] for r in stack.ledger()] == ["order-001"]  # the rejected refund never ran
