"""The scripts in benchmarks/ run end to end on tiny cases (they are the commands behind tables of
docs/benchmarks.md, outside the package, so nothing else imports them)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "compare_reference.py"
MALLOC = SCRIPT.with_name("malloc_reuse.py")


def test_help_runs():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--baseline-src" in out.stdout


@pytest.mark.skipif(importlib.util.find_spec("galerkin_transformer") is None,
                    reason="the paper's reference package is not installed (pip install --no-deps "
                           "galerkin-transformer==0.2.1)")
def test_a_tiny_case_prints_and_records_its_ratio(tmp_path):
    rec_file = tmp_path / "cr.json"
    out = subprocess.run([sys.executable, str(SCRIPT), "--cases", "galerkin:64", "--d-model", "16", "--heads", "2",
                          "--d-ff", "32", "--repeats", "1", "--warmup", "1", "--threads", "1", "--matmul-size", "64",
                          "--products", "--json", str(rec_file)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "galerkin" in out.stdout and "ours/ref" in out.stdout
    data = json.loads(rec_file.read_text())
    (rec,) = data["records"]
    assert rec["ratio_ours_over_ref"] > 0 and rec["seconds"]["ours"] > 0 and data["malloc"] in ("reuse", "system")
    assert rec["products_flops"] == rec["flops_executed_fwd_bwd"] and rec["products_share_of_ours"] > 0


def test_malloc_reuse_compares_both_settings(tmp_path):
    rec_file = tmp_path / "m.json"
    out = subprocess.run([sys.executable, str(MALLOC), "--cases", "attention:galerkin:64", "--rounds", "1",
                          "--warmup", "1", "--repeats", "1", "--json", str(rec_file)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (rec,) = json.loads(rec_file.read_text())["records"]
    assert set(rec["seconds"]) == {"system", "reuse"} and rec["ratio"] > 0
    assert not any(r["applied"] for r in rec["runs"]["system"])  # OPFORMER_MALLOC=system was honoured
