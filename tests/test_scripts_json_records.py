"""The study scripts that read the JSON records of runs (metrics.json, rollout.json) read them with one reader,
:func:`opformer.train.records.read_json_object`; run as ``python scripts/NAME.py`` from another folder, each ends on
a record that is no JSON object with one line naming the file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opformer.train.records import RecordError, read_json_object

from .conftest import load_script

SCRIPTS_DIR = Path(__file__).resolve().parents[1] / "scripts"
READERS = ["collect_results", "collect_rollouts", "make_pretrained", "compare_curves", "plot_seed_spread"]


@pytest.mark.parametrize("name", READERS)
def test_the_script_reads_records_with_the_shared_reader(name):
    assert load_script(name).read_json_object is read_json_object


@pytest.mark.parametrize("content, why", [
    (b"{", "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    (b"[0.1, 0.2]", "(a JSON object is expected)"),
    (b"", "(Expecting value: line 1 column 1 (char 0))"),
    (b'{"a": "\xff"}', "('utf-8' codec can't decode byte 0xff in position 7: invalid start byte)"),
], ids=["cut", "a list", "empty", "not UTF-8"])
def test_a_record_that_is_no_json_object_is_one_line_naming_the_file(tmp_path, content, why):
    path = tmp_path / "metrics.json"
    path.write_bytes(content)
    with pytest.raises(RecordError) as caught:
        read_json_object(path)
    assert str(caught.value) == f"{path}: not a readable metrics.json {why}"
    with pytest.raises(RecordError, match="No such file or directory"):
        read_json_object(tmp_path / "missing" / "rollout.json")
    (tmp_path / "good.json").write_text('{"test_rel_l2": 0.5}')
    assert read_json_object(tmp_path / "good.json") == {"test_rel_l2": 0.5}


def _inputs(name: str, root: Path) -> tuple[list[str], Path]:
    """The arguments that make the script ``name`` read a record holding a JSON list, and that record."""
    run = root / "runs" / "gt"
    run.mkdir(parents=True)
    bad = run / "metrics.json"
    if name == "collect_results":
        args = [str(root / "runs")]
    elif name == "collect_rollouts":
        bad = run / "rollout-direct" / "rollout.json"
        bad.parent.mkdir()
        args = [str(root / "runs")]
    elif name == "make_pretrained":
        (run / "checkpoints").mkdir()
        (run / "checkpoints" / "best.ckpt").write_bytes(b"not read before the inputs are checked")
        args = [str(run), "no-such-bundle-for-a-test", "--description", "d", "--train-cmd", "t", "--check-file",
                str(root / "check.h5"), "--start", "0", "--stop", "2"]
    elif name == "compare_curves":
        (run / "logs").mkdir()
        (run / "logs" / "metrics.csv").write_text("epoch,step,val_rel_l2\n0,5,0.5\n")
        args = [str(run), "--out", str(root / "curves.png")]
    else:
        args = ["--out", str(root / "spread.png"), f"GT={run}"]
    bad.write_text("[0.1, 0.2]")
    return args, bad


@pytest.mark.parametrize("name", READERS)
def test_run_from_another_folder_a_bad_record_ends_the_script_with_one_line(tmp_path, name):
    args, bad = _inputs(name, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPTS_DIR / f"{name}.py"), *args], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.rstrip("\n").endswith(f"{bad}: not a readable {bad.name} (a JSON object is expected)")
    assert not list(tmp_path.glob("*.png"))
