"""RUNFACTS_GATEWAY_HTTP is checked before uvicorn sees it: uvicorn took any text as an import path
and the gateway died with a traceback (exit 1); now a bad value or a parser that is not installed
exits 2 with one line naming the setting and the fix."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from runfacts.cli.gateway import http_parser
from runfacts.schemas.errors import ConfigError


def serve(http: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RUNFACTS_GATEWAY_HTTP": http}
    return subprocess.run([sys.executable, "-m", "runfacts.cli", "gateway", "serve", "--port", "1"],
                          env=env, capture_output=True, text=True, timeout=60)


def test_an_unknown_parser_exits_2_naming_the_choices() -> None:
    done = serve("bogus")
    said = " ".join(done.stderr.split())  # the terminal renderer wraps long lines
    assert done.returncode == 2, done.stderr
    assert "RUNFACTS_GATEWAY_HTTP='bogus'" in said and "auto, h11, httptools" in said
    assert "Traceback" not in done.stderr


def test_a_parser_that_is_not_installed_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # as on a machine without it
    with pytest.raises(ConfigError, match="pip install httptools, or use auto"):
        http_parser("httptools")


def test_the_documented_values_pass() -> None:
    assert [http_parser(v) for v in ("auto", "h11")] == ["auto", "h11"]
