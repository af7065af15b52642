"""docs/mcp.md says what the code does: its manifest parses to the defaults it claims, its
error table is the server's codes, its `_meta` keys are the adapter's, its client compiles."""

from __future__ import annotations

import re
from pathlib import Path

from runfacts.mcp import parse_manifest, results, server

DOC = (Path(__file__).resolve().parents[3] / "docs" / "mcp.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, re.S)


def test_the_manifest_block_parses_to_the_defaults_the_doc_claims() -> None:
    [text] = blocks("toml")
    manifest = parse_manifest(text, "docs/mcp.md")
    credit, balance = manifest.rule("credit"), manifest.rule("balance")
    assert (credit.effective_risk, credit.effective_needs_approval, credit.lookup) == ("high", True, "find_credit")
    assert (balance.effective_risk, balance.effective_needs_approval, balance.read_only) == ("low", False, True)
    assert manifest.capability_id("credit") == "ledger.credit"


def test_the_answer_table_lists_the_server_codes() -> None:
    codes = {"approval rejected": server.REJECTED, "approval expired or invalidated": server.EXPIRED,
             "the run went to `needs_review`": server.NEEDS_REVIEW, "the run was cancelled or ended": server.ENDED,
             "still waiting after `--wait`": server.STILL_WAITING, "arguments do not fit": server.INVALID_PARAMS}
    for row, code in codes.items():
        line = next(line for line in DOC.splitlines() if line.startswith(f"| {row}"))
        assert str(code) in line, (row, code, line)
    assert f"({server.REFUSED})" in DOC and str(server.REFUSED) in next(
        line for line in DOC.splitlines() if line.startswith("| refused by the decider"))


def test_the_meta_keys_are_the_adapters() -> None:
    for key in (results.META_IDEMPOTENCY_KEY, results.META_REQUEST_ID, results.META_TOOL_CALL_ID,
                results.META_ATTEMPT, results.META_LEASE_EPOCH, server.META_RUN_ID):
        assert f"`{key}`" in DOC, key
    keys = set(results.meta_of("k", "r", "c", 1, 0))
    assert keys == {results.META_IDEMPOTENCY_KEY, results.META_REQUEST_ID, results.META_TOOL_CALL_ID,
                    results.META_ATTEMPT, results.META_LEASE_EPOCH}


def test_the_client_example_compiles() -> None:
    [python] = blocks("python")
    compile(python, "docs/mcp.md", "exec")
