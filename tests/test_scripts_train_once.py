"""The paper-table scripts run again after a stop (scripts/lib.sh, train_once): a finished run (its metrics.json) is
kept and said in one line, a stopped one (config.yaml, no metrics.json) continues with --resume, --overwrite among
the arguments trains everything afresh.  Before, a second run of reproduce_table2b.sh or reproduce_table3.sh stopped
at its first finished run ("already holds a run"), and table2a trained every run again.  With the stand-in
`opformer` of test_scripts_shell_failures.py on PATH."""

import pytest

from .test_scripts_shell_failures import shell  # noqa: F401 - the fixture


def _trains(calls):
    return [c for c in calls if c.startswith("train")]


@pytest.mark.parametrize("script, runs", [
    ("reproduce_table2b.sh", ["runs/table2b/darcy-gt-cpu", "runs/table2b/darcy-ft-cpu", "runs/table2b/darcy-fno-cpu"]),
    ("reproduce_table3.sh", [f"runs/table3/{p}-eps{e}" for e in ("0", "0.01", "0.1") for p in
                             ("darcy-inverse-ft-cpu", "darcy-inverse-gt-cpu", "darcy-inverse-fno-cpu")]),
])
def test_a_second_pass_keeps_finished_runs_and_resumes_a_stopped_one(shell, script, runs):  # noqa: F811
    first = shell(script, "--epochs", "1", env={"MODE": "cpu"})
    assert first.returncode == 0, first.stderr
    assert len(_trains(shell.calls())) == len(runs)
    stopped = shell.work / runs[1]
    (stopped / "metrics.json").unlink()
    (stopped / "config.yaml").write_text("task: x\n")
    before = len(shell.calls())
    again = shell(script, "--epochs", "1", env={"MODE": "cpu"})
    assert again.returncode == 0, again.stderr
    trained = _trains(shell.calls()[before:])
    assert len(trained) == 1 and f"--out {runs[1]} " in trained[0] and trained[0].endswith("--resume"), trained
    for run in runs[:1] + runs[2:]:
        assert f"{script}: {shell.work / run}" not in again.stdout  # relative --out: said as given
        assert f"{script}: {run} has finished (its metrics.json is there): not run again" in again.stdout
    assert f"{runs[1]} has finished" not in again.stdout


def test_overwrite_trains_everything_afresh(shell):  # noqa: F811
    assert shell("reproduce_table2b.sh", env={"MODE": "cpu"}).returncode == 0
    before = len(shell.calls())
    p = shell("reproduce_table2b.sh", "--overwrite", env={"MODE": "cpu"})
    assert p.returncode == 0, p.stderr
    trained = _trains(shell.calls()[before:])
    assert len(trained) == 3 and all("--overwrite" in c and "--resume" not in c for c in trained)
    assert "has finished" not in p.stdout


def test_table2a_second_pass_trains_nothing_and_still_makes_its_table(shell):  # noqa: F811
    out = shell.work / "t2a"
    assert shell("reproduce_table2a.sh", env={"OUT": str(out)}).returncode == 0
    before = len(shell.calls())
    p = shell("reproduce_table2a.sh", env={"OUT": str(out)})
    assert p.returncode == 0, p.stderr
    assert _trains(shell.calls()[before:]) == []
    assert p.stdout.count("has finished") == 3 and "| " in p.stdout
