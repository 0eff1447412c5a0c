"""scripts/reference_burgers.py and scripts/reference_darcy.py without the paper's reference package
(galerkin-transformer, not a dependency of opformer): --help works and says how to install it, and a run says so in
one line before anything is done."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS_DIR = Path(__file__).resolve().parents[1] / "scripts"
INSTALL = "pip install --no-deps galerkin-transformer==0.2.1"

#: runs a script as `python scripts/NAME.py ARGS` would, with the reference package impossible to import
WITHOUT_PACKAGE = ("import runpy, sys\n"
                   "sys.modules['galerkin_transformer'] = None\n"
                   "sys.argv = sys.argv[1:]\n"
                   "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def _run(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", WITHOUT_PACKAGE, str(SCRIPTS_DIR / f"{name}.py"), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", ["reference_burgers", "reference_darcy"])
def test_help_works_without_the_reference_package_and_says_how_to_install_it(tmp_path, name):
    proc = _run(name, "--help", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith(f"usage: {name}.py") and "--attn-dropout-bug" in proc.stdout
    assert INSTALL in proc.stdout.splitlines()[-1]


@pytest.mark.parametrize("name, preset", [("reference_burgers", "burgers-gt"), ("reference_darcy", "darcy-gt-cpu")])
def test_a_run_without_the_reference_package_is_one_line_with_the_install_command(tmp_path, name, preset):
    proc = _run(name, preset, "--epochs", "1", "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"{name}.py: error: the paper's reference package galerkin-transformer is not installed; "
                           f"install it with: {INSTALL}\n")
    assert not (tmp_path / "run").exists()
