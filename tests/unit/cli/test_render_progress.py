"""The one progress bar (runfacts/cli/render.py) of the operator commands and `runfacts replay`."""

from __future__ import annotations

import io

from rich.console import Console

from runfacts.cli.render import progress_bar


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=120, force_terminal=False), out


def test_progress_bar_shows_count_and_rate_when_kept_after_the_work() -> None:
    console, out = _console()
    with progress_bar(console, "replay audit", 10, transient=False) as update:
        for done in range(1, 11):
            update(done, 10)
    text = out.getvalue()
    assert "replay audit" in text and "10/10" in text and "ev/s" in text


def test_progress_bar_draws_nothing_when_quiet() -> None:
    console, out = _console()
    with progress_bar(console, "replay audit", 10, transient=False, quiet=True) as update:
        update(10, 10)
    assert out.getvalue() == ""


def test_progress_bar_grows_its_total_when_more_arrives_than_announced() -> None:
    console, out = _console()
    with progress_bar(console, "reading runfacts.run.state", None, transient=False) as update:
        update(3, 2)
    assert "3/3" in out.getvalue()
