"""`runfacts demo`: play the refund story end to end (runfacts.demo holds the story)."""

from __future__ import annotations

import typer

from runfacts.demo.run import run_demo
from runfacts.demo.stack import DemoOptions
from runfacts.privacy.keys import new_privacy_keys_json


def demo(
    prefix: str = typer.Option("", help="Topic prefix (default: a fresh demo-<time>-<pid>)."),
    partitions: int = typer.Option(3, min=1, help="Partitions of every demo topic."),
    approval_ttl_ms: int = typer.Option(5_000, min=1_000,
                                        help="Approval TTL of the expiry story (the refund story allows 10 min)."),
    keep_topics: bool = typer.Option(False, help="Keep the demo's topics afterwards."),
) -> None:
    """Play the refund story end to end; exit 1 unless exactly one refund was executed and all checks hold."""
    result = run_demo(DemoOptions(prefix=prefix, partitions=partitions, approval_ttl_ms=approval_ttl_ms,
                                  keep_topics=keep_topics,  # personal fields sealed (runfacts.privacy)
                                  privacy_keys=new_privacy_keys_json("demo-kek-1")))
    raise typer.Exit(0 if result.ok else 1)
