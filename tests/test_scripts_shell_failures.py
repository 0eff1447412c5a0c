"""The study shell scripts (scripts/*.sh) with a stand-in `opformer` on PATH that records its calls, makes the files
a real run would make, and fails where told: a failed step stops the script (or is named at its end, with a non-zero
status), a misspelt run name is refused before anything runs, and the scripts work from any directory and with
paths that hold spaces."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

STUB = r"""#!/usr/bin/env bash
echo "$*" >> "$STUB_LOG"
if [ -n "${STUB_FAIL:-}" ]; then
  case " $* " in *"$STUB_FAIL"*) echo "opformer: error: made to fail here" >&2; exit 3;; esac
fi
out=""; prev=""
for a in "$@"; do [ "$prev" = --out ] && out=$a; prev=$a; done
case "$1" in
  data) [ "${2:-}" = prepare ] || { mkdir -p "$(dirname "$out")"; : > "$out"; } ;;
  train) mkdir -p "$out/checkpoints" "$out/logs"; : > "$out/checkpoints/best.ckpt"
         echo '{"test_rel_l2": 0.01, "val_rel_l2": 0.01, "epochs": 1, "seconds": 1, "parameters": 1, "preset": "p"}' \
           > "$out/metrics.json" ;;
  rollout) mkdir -p "$out"
           echo '{"mode": "direct", "times": [1.0], "rel_l2": [0.1], "mean_rel_l2_in_horizon": 0.1,
                  "mean_rel_l2_beyond_horizon": null}' > "$out/rollout.json" ;;
  eval) echo "test relative L2 = 1.0e-02" ;;
esac
"""


@pytest.fixture()
def shell(tmp_path):
    """run(script, *args, env=..., cwd=...) -> CompletedProcess, and the log of the stand-in's calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "opformer"
    stub.write_text(STUB)
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "calls.log"
    work = tmp_path / "a dir with spaces"
    work.mkdir()

    def run(script, *args, env=None, cwd=None):
        full = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
                f"{os.environ.get('PATH', '')}", "STUB_LOG": str(log), "OMP_NUM_THREADS": "1", **(env or {})}
        return subprocess.run(["bash", str(SCRIPTS / script), *args], cwd=cwd or work, env=full, text=True,
                              capture_output=True, timeout=60)

    def calls():
        return log.read_text().splitlines() if log.exists() else []

    run.calls, run.work = calls, work
    return run


def test_every_shell_script_parses():
    for script in sorted(SCRIPTS.glob("*.sh")):
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0, script


def test_table2a_stops_when_an_attention_run_fails(shell):
    """The GT and FT train side by side in the background; a plain `wait` returned 0 whatever they did, so a failed
    GT went on to FNO1d, the evaluation and the table."""
    out = shell.work / "runs t2a"
    p = shell("reproduce_table2a.sh", "--epochs", "1", env={"OUT": str(out), "STUB_FAIL": "burgers-gt"})
    assert p.returncode == 1, p.stderr
    assert "opformer train failed for" in p.stderr and "gt-512" in p.stderr and "ft-512" not in p.stderr.split(
        "failed for")[1]
    assert not any("burgers-fno" in c or c.startswith("eval") for c in shell.calls())
    ok = shell("reproduce_table2a.sh", env={"OUT": str(out / "ok")})
    assert ok.returncode == 0, ok.stderr
    assert "| " in ok.stdout and any("burgers-fno" in c for c in shell.calls())


def test_table2a_refuses_a_misspelt_model(shell):
    p = shell("reproduce_table2a.sh", env={"MODELS": "gt fn0", "OUT": str(shell.work / "o")})
    assert p.returncode == 2 and "unknown model 'fn0'" in p.stderr and shell.calls() == []


@pytest.mark.parametrize("script, env", [("reproduce_burgers_traj.sh", {}), ("reproduce_ns.sh", {"MODE": "cpu"})])
def test_rollout_studies_find_their_table_script_from_another_directory(shell, script, env):
    """The last step ran `python scripts/collect_rollouts.py`, which exists only when started from the repository
    root: from anywhere else the study ended in an error after all its training."""
    out = shell.work / "rollout runs"
    p = shell(script, env={"OUT": str(out), **env})
    assert p.returncode == 0, p.stderr
    assert "| run | rollout |" in p.stdout


def test_ablations_name_a_failed_run_and_end_with_an_error(shell):
    """A failed row used to print a line to stdout and the script ended with status 0."""
    out = shell.work / "abl runs"
    (shell.work / "d.h5").write_bytes(b"")
    (shell.work / "t.h5").write_bytes(b"")
    p = shell("darcy_ablations.sh", env={"OUT": str(out), "DATA": "d.h5", "TEST": "t.h5", "STUB_FAIL": "--gamma 0"})
    assert p.returncode == 1
    assert "run gt-no-h1 failed" in p.stderr and "1 run(s) failed: gt-no-h1" in p.stderr
    assert (out / "fno-default-seed3" / "metrics.json").is_file()  # the other rows still ran
    assert json.loads((out / "gt-default" / "metrics.json").read_text())["epochs"] == 1


def test_darcy85_refuses_an_unknown_run_name_before_anything_runs(shell):
    p = shell("darcy85.sh", env={"RUNS": "gt-decw64 gt-decw46", "OUT": str(shell.work / "d85")})
    assert p.returncode == 2 and "no run named 'gt-decw46'" in p.stderr and shell.calls() == []
    p = shell("darcy85.sh", "--threads", "1", env={"RUNS": "gt-decw64 fno", "OUT": str(shell.work / "d85")})
    assert p.returncode == 0, p.stderr
    trained = [c for c in shell.calls() if c.startswith("train")]
    assert len(trained) == 2 and all(str(shell.work / "d85") in c for c in trained)


def _small_grid_files(data):
    """The (empty) data files small_grid_darcy.sh checks for, in the folder ``data``, made here."""
    data.mkdir()
    for name in ("d17.h5", "d33b.h5", "d33_test.h5", "d17_test.h5", "d64.h5", "d64_test.h5"):
        (data / name).write_bytes(b"")
    return data


def test_small_grid_evaluation_failure_is_named_not_silent(shell):
    """The cross-grid evaluation hid opformer eval's stderr and ran inside $(...): under set -e a failed evaluation
    ended the script at once, without a word."""
    data, out = _small_grid_files(shell.work / "data dir"), shell.work / "small grid"
    p = shell("small_grid_darcy.sh",
              env={"DATA": str(data), "OUT": str(out), "SEEDS": "2", "STUB_FAIL": "--resample always"})
    assert p.returncode == 1
    assert "--resample always failed: opformer: error: made to fail here" in p.stderr
    assert "step(s) failed" in p.stderr
    assert "resample never: test relative L2" in p.stdout  # the other evaluations went on


def test_ablations_refuse_a_missing_data_file_once(shell):
    p = shell("darcy_ablations.sh", env={"OUT": str(shell.work / "o"), "DATA": "missing d33.h5", "TEST": "t.h5"})
    assert p.returncode == 2 and "missing d33.h5: no such file" in p.stderr and shell.calls() == []


@pytest.mark.parametrize("script, env", [("reproduce_table2b.sh", {"MODE": "CPU"}),
                                         ("reproduce_table3.sh", {"MODE": "cpu "}),
                                         ("reproduce_ns.sh", {"MODE": "cpu-reduced"}),
                                         ("reproduce_burgers_traj.sh", {"FULL": "yes"})])
def test_a_misspelt_mode_is_refused_before_any_step(shell, script, env):
    """MODE=CPU used to run the full GPU setting (after generating its data); FULL=yes the reduced one."""
    p = shell(script, env={"OUT": str(shell.work / "o"), **env})
    assert p.returncode == 2 and "error: " in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert shell.calls() == []


def test_table2b_and_table3_cpu_runs_go_where_their_docs_say(shell):
    for script, first in (("reproduce_table2b.sh", "runs/table2b/darcy-gt-cpu"),
                          ("reproduce_table3.sh", "runs/table3/darcy-inverse-ft-cpu-eps0")):
        p = shell(script, "--epochs", "1", env={"MODE": "cpu"})
        assert p.returncode == 0, p.stderr
        assert (shell.work / first / "metrics.json").is_file()


def test_small_grid_only_names_a_run_that_does_not_exist(shell):
    """ONLY="17/fno-seed2" (the 17^2 FNO runs are 17/fno-SEED) trained nothing and ended with status 0."""
    data, out = _small_grid_files(shell.work / "data"), shell.work / "sg"
    p = shell("small_grid_darcy.sh",
              env={"DATA": str(data), "OUT": str(out), "SEEDS": "2", "ONLY": "17/fno-2 17/fno-seed2"})
    assert p.returncode == 1 and "no run named '17/fno-seed2'" in p.stderr
    assert (out / "17" / "fno-2" / "metrics.json").is_file()
    assert [c for c in shell.calls() if c.startswith("train")] == [c for c in shell.calls() if "17/fno-2" in c]
