"""`runfacts topics list`: the prefix from RUNFACTS_KAFKA_TOPIC_PREFIX, names never cut (issue 15 item 9)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from runfacts.cli.platform.topics import print_specs
from runfacts.topics import TopicNames, runfacts_topics

RUNFACTS = str(Path(sys.executable).with_name("runfacts"))
PREFIX = "acme-prod-eu-west-1-tenant-0042"  # long enough that an 80-column table had to cut names


def test_topics_list_uses_the_prefix_setting_and_prints_whole_names_when_piped() -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"RUNFACTS_KAFKA_TOPIC_PREFIX": PREFIX}

    done = subprocess.run([RUNFACTS, "topics", "list"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    names = [line.split("\t")[0] for line in lines[1:]]
    assert names == [s.name for s in runfacts_topics(TopicNames(PREFIX))]
    assert f"{PREFIX}.eval.trajectory" in names and "…" not in done.stdout


def test_topics_list_option_wins_over_the_prefix_setting() -> None:
    env = {**os.environ, "RUNFACTS_KAFKA_TOPIC_PREFIX": PREFIX}

    done = subprocess.run([RUNFACTS, "topics", "list", "--prefix", "other"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)

    assert done.returncode == 0 and "other.run.events\t" in done.stdout and PREFIX not in done.stdout


def test_topics_table_keeps_every_name_whole_when_the_terminal_is_80_columns() -> None:
    out = io.StringIO()
    specs = runfacts_topics(TopicNames(PREFIX))

    print_specs(Console(file=out, width=80, force_terminal=True, color_system=None), specs)

    text = out.getvalue()
    assert all(f" {s.name} " in text for s in specs), text
    assert "…" not in text and "purpose" in text
