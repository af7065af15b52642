"""`runfacts demo`: play the refund story end to end (runfacts.demo holds the story).

The demo seals personal fields (runfacts.privacy) under privacy keys. With `--keep-topics` the
runs stay for the console, so the keys are kept too, in a file only its owner reads
(`--privacy-keys-file`, default `.runfacts/demo-privacy-keys.json`, reused by the next demo):
`RUNFACTS_PII_KEYS_FILE=<it> runfacts dashboard serve` lets an auditor read the demo's runs,
where discarded keys would make every personal field read `[erased]`."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from runfacts.demo.run import run_demo
from runfacts.demo.stack import DemoOptions
from runfacts.privacy.keys import ENV_PII_KEYS_FILE, new_privacy_keys_json

KEYS_FILE = Path(".runfacts/demo-privacy-keys.json")


def kept_keys(path: Path) -> str:
    """The privacy keys JSON in `path`, created (mode 600) with fresh keys when missing."""
    if path.exists():
        return path.read_text()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = new_privacy_keys_json("demo-kek-1")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return text


def demo(
    prefix: str = typer.Option("", help="Topic prefix (default: a fresh demo-<time>-<pid>)."),
    partitions: int = typer.Option(3, min=1, help="Partitions of every demo topic."),
    approval_ttl_ms: int = typer.Option(5_000, min=1_000,
                                        help="Approval TTL of the expiry story (the refund story allows 10 min)."),
    keep_topics: bool = typer.Option(False, help="Keep the demo's topics afterwards."),
    privacy_keys_file: str = typer.Option(str(KEYS_FILE), help="With --keep-topics: where the privacy keys the "
                                           "runs are sealed under are kept (mode 600; reused when present)."),
) -> None:
    """Play the refund story end to end; exit 1 unless exactly one refund was executed and all checks hold."""
    keys = kept_keys(Path(privacy_keys_file)) if keep_topics else new_privacy_keys_json("demo-kek-1")
    result = run_demo(DemoOptions(prefix=prefix, partitions=partitions, approval_ttl_ms=approval_ttl_ms,
                                  keep_topics=keep_topics,  # personal fields sealed (runfacts.privacy)
                                  privacy_keys=keys))
    if keep_topics:
        typer.echo(f"The runs' personal fields are sealed under the keys in {privacy_keys_file}: "
                   f"{ENV_PII_KEYS_FILE}={privacy_keys_file} runfacts dashboard serve reveals them to auditors.")
    raise typer.Exit(0 if result.ok else 1)
