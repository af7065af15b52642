"""The client's type hints are checked: `mypy --strict` accepts tests/typed/client_usage.py (every
operation in both forms, `call.result()` typed by the proposed tool's return type, `assert_type`
on each) and refuses each marked line of tests/typed/client_misuse.py with its error code, so a
check that stopped biting (a signature turned to Any) fails here too."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TYPED = REPO / "tests" / "typed"
PACKAGES = ("schemas", "processors", "projections", "connectors")  # setuptools maps them under runfacts/


def tree(root: Path) -> Path:
    """runfacts/ as installed (its mapped packages inside), as scripts/typecheck.sh builds it."""
    top = root / "runfacts"
    top.mkdir(parents=True)
    for entry in (REPO / "runfacts").iterdir():
        if entry.suffix == ".py" or entry.name == "py.typed" or (entry / "__init__.py").exists():
            (top / entry.name).symlink_to(entry)
    for package in PACKAGES:
        (top / package).symlink_to(REPO / package)
    return root


def mypy(root: Path, target: Path) -> subprocess.CompletedProcess[str]:
    cache = REPO / ".runfacts" / "mypy-typed-cache"
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--ignore-missing-imports",
         "--cache-dir", str(cache), "--no-error-summary", "--show-error-codes", "--python-version", "3.11",
         str(target)],
        cwd=root, env={"MYPYPATH": str(root), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tree(tmp_path_factory.mktemp("typed"))


def test_typed_usage_of_the_client_passes_mypy_strict(root: Path) -> None:
    done = mypy(root, TYPED / "client_usage.py")
    assert done.returncode == 0, done.stdout + done.stderr


def test_wrong_uses_of_the_client_fail_mypy_strict_each_where_marked(root: Path) -> None:
    target = TYPED / "client_misuse.py"
    lines = target.read_text().splitlines()
    wanted = {(n, m.group(1)) for n, line in enumerate(lines, start=1)
              if (m := re.search(r"# error: ([a-z-]+)$", line))}
    assert len(wanted) >= 6
    done = mypy(root, target)
    found = {(int(m.group(1)), m.group(2)) for m in re.finditer(r"client_misuse\.py:(\d+): error: .*\[([a-z-]+)\]$",
                                                                 done.stdout, flags=re.M)}
    assert done.returncode == 1
    assert wanted <= found, f"accepted by mypy: {sorted(wanted - found)}\n{done.stdout}"
    assert {n for n, _ in found} <= {n for n, _ in wanted}, f"unexpected errors:\n{done.stdout}"
