"""docs/testing.md runs: every python block, in order, in one namespace, broker-free, and
prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "testing.md"


def test_every_python_block_of_the_testing_page_runs_and_prints_what_it_says() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 8
    namespace: dict[str, object] = {"__name__": "testing_doc"}
    out = io.StringIO()
    for number, block in enumerate(blocks, start=1):
        with contextlib.redirect_stdout(out):
            exec(compile(block, f"docs/testing.md python block {number}", "exec"), namespace)  # noqa: S102
    printed = out.getvalue().splitlines()
    assert printed == [
        "Refund(refund_id='re-1', order_id='order-001', amount_minor=4200)",
        "['run.completed', 'checkpoint.saved', 'checkpoint.archived']",
        "1",
        "rejected",
        "failed 0",
        "re-2",
        "['tool.call.result_unknown', 'tool.call.reconciliation_requested', 'tool.call.reconciled']",
        "1 1",
        "('dispatcher.after_call_before_record', 'dispatcher.after_record_before_commit')",
        "700 1 1",
        "[]",
        "ApprovalExpired",
        "crashed, refund done: True",
        "['agent-6'] completed",
        "1 False",
    ]
