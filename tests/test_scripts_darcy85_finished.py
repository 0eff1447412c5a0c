"""scripts/darcy85.sh run again: a run that finished (its metrics.json is there) is not trained again, as the other
studies (darcy_ablations.sh, small_grid_darcy.sh, ns_models.sh) decide; an unfinished one is.  With the stand-in
`opformer` of test_scripts_shell_failures.py on PATH."""

from .test_scripts_shell_failures import shell  # noqa: F401 - the fixture


def _trained(calls) -> list[str]:
    return [c.split("--out ")[1].split(" --")[0] for c in calls if c.startswith("train")]


def test_a_second_pass_trains_only_the_runs_that_did_not_finish(shell):  # noqa: F811
    out = shell.work / "d85 runs"
    env = {"RUNS": "fno gt gt-d64", "OUT": str(out)}
    first = shell("darcy85.sh", "--threads", "1", env=env)
    assert first.returncode == 0, first.stderr
    assert _trained(shell.calls()) == [str(out / "fno"), str(out / "gt"), str(out / "gt-d64")]
    (out / "gt" / "metrics.json").unlink()  # stopped before its end: logs and checkpoints, no metrics.json
    before = len(shell.calls())
    again = shell("darcy85.sh", "--threads", "1", env=env)
    assert again.returncode == 0, again.stderr
    assert _trained(shell.calls()[before:]) == [str(out / "gt")]
    assert f"darcy85.sh: {out / 'fno'} has finished (its metrics.json is there): not run again" in again.stdout
    assert f"{out / 'gt-d64'} has finished" in again.stdout and f"{out / 'gt'} has finished" not in again.stdout


def test_a_finished_reference_run_is_not_run_again(shell):  # noqa: F811
    out = shell.work / "d85"
    (out / "ref-gt").mkdir(parents=True)
    (out / "ref-gt" / "metrics.json").write_text('{"test_rel_l2": 0.02, "epochs": 10}')
    p = shell("darcy85.sh", env={"RUNS": "ref-gt", "OUT": str(out)})
    assert p.returncode == 0, p.stderr
    assert f"{out / 'ref-gt'} has finished" in p.stdout
    assert (out / "ref-gt" / "metrics.json").read_text() == '{"test_rel_l2": 0.02, "epochs": 10}'
