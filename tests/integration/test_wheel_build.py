"""The built wheel ships neither the crash harness nor the payment simulator, and its CLI works
without them: the product commands run, and the clone-only ones name the fix (exit 2).

Builds the wheel once from a copy of the sources (pip, with build isolation, as a user's `pip
wheel` would: it fetches the build backend) and runs the CLI from the unpacked wheel with this
venv's dependencies. 20-75 s, so it is `slow` (`pytest -m slow tests/integration/test_wheel_build.py`);
tests/unit/house/test_wheel_config.py holds the build config on every run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("runfacts", "schemas", "processors", "projections", "connectors", "pyproject.toml", "README.md")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                         if (ROOT / name).is_dir() else {}))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q",
                            "-w", str(work / "dist")], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = (work / "dist").glob("runfacts-*.whl")
    return found


def cli(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    code = (f"import sys, runfacts; assert runfacts.__file__.startswith({str(site)!r}), runfacts.__file__; "
            "from runfacts.cli import main; sys.argv[0] = 'runfacts'; main()")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}, cwd=site)


def test_the_wheel_ships_neither_the_crash_harness_nor_the_simulator(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.startswith(("runfacts/dev/crash/", "runfacts/dev/provider/"))] == []
    assert "runfacts/dev/up.py" in names and "runfacts/cli/dev/crash.py" in names
    assert any(n.startswith("runfacts/schemas/avro/events/") for n in names)


def test_the_installed_wheels_cli_runs_product_commands_and_names_the_clone_for_the_rest(
        wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert cli(site, "--help").returncode == 0
    checked = cli(site, "schemas", "check")
    assert checked.returncode == 0 and "every version readable" in checked.stdout, checked.stdout + checked.stderr
    assert cli(site, "worker", "--help").returncode == 0
    for args in (("dev", "crash", "--list"), ("provider", "serve", "--port", "0")):
        done = cli(site, *args)
        assert done.returncode == 2 and "clone of the runfacts repository" in " ".join(done.stderr.split()), \
            (args, done.stdout, done.stderr)
