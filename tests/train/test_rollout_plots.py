"""What `opformer rollout` reports and draws: t = 0 (u(t_0) itself) is in no error mean and not on the log plot,
times the file does not store still get snapshot panels (input and prediction), the command lists the plots it
wrote, an out-of-range --show names the usable values, the panels name the trajectory shown, errors within a decade
are labelled as plain numbers, and the summary line says that --samples takes the first trajectories."""

import json
import warnings

import matplotlib
import pytest

from opformer.cli import main
from opformer.train.config import apply_overrides, load_preset
from opformer.train.rollout import rollout_file

from .test_eval_predict_paths import _run_dir


@pytest.fixture(scope="module")
def ns_run(ns_file, tmp_path_factory):
    """A run directory of an untrained FNO of the Navier-Stokes file (test trajectories 18 and 19)."""
    cfg = apply_overrides(load_preset("ns-fno"), {"data.path": str(ns_file), "n_test": 2, "n_val": 2,
                                                  "width": 4})[0]
    return _run_dir(cfg, tmp_path_factory.mktemp("ns") / "run")


def test_time_zero_is_in_no_mean_and_not_plotted(ns_run, ns_file, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = rollout_file(ns_run, data=ns_file, times=[0, 1], out=tmp_path / "ro")
    assert m["rel_l2"][0] == 0.0 and m["rel_l2"][1] > 0
    assert m["mean_rel_l2"] == m["rel_l2"][1] == m["mean_rel_l2_in_horizon"]
    assert json.loads((tmp_path / "ro" / "rollout.json").read_text())["mean_rel_l2"] == m["rel_l2"][1]
    assert not [w for w in caught if "log" in str(w.message)]


def test_times_zero_only_says_so(ns_run, ns_file, tmp_path, capsys):
    assert main(["rollout", str(ns_run), "--data", str(ns_file), "--times", "0", "--out", str(tmp_path / "ro")]) == 0
    out, err = capsys.readouterr()
    assert "at t = 0 only: u(t_0) itself, nothing predicted" in out
    assert "0.0000e+00" not in out and "log-scaled" not in err
    listed = out.split("plots/ (")[1].split(")")[0].split(", ")
    assert sorted(listed) == sorted(p.name for p in (tmp_path / "ro" / "plots").iterdir())


def test_times_with_and_without_truth_are_counted(ns_run, ns_file, tmp_path, capsys):
    assert main(["rollout", str(ns_run), "--data", str(ns_file), "--times", "0,1",
                 "--out", str(tmp_path / "ro")]) == 0
    assert "have no truth" not in capsys.readouterr().out  # t = 0 has its truth: u(t_0)


def test_times_without_truth_get_snapshot_panels(ns_run, ns_file, tmp_path, capsys):
    assert main(["rollout", str(ns_run), "--data", str(ns_file), "--times", "6,8", "--out", str(tmp_path / "ro")]) == 0
    out = capsys.readouterr().out
    assert "predictions only" in out
    assert (tmp_path / "ro" / "plots" / "snapshots.png").is_file()
    listed = out.split("plots/ (")[1].split(")")[0].split(", ")
    assert sorted(listed) == sorted(p.name for p in (tmp_path / "ro" / "plots").iterdir())


@pytest.mark.parametrize("extra, message", [
    (["--samples", "1", "--show", "1"],
     "--show 1 is out of range: 1 trajectory is used (--samples 1); give --show 0\n"),
    (["--show", "5"], "--show 5 is out of range: 2 trajectories are rolled out (the run's test trajectories); give "
                      "--show 0 to 1\n"),
])
def test_show_out_of_range_names_the_usable_values(ns_run, ns_file, tmp_path, capsys, extra, message):
    assert main(["rollout", str(ns_run), "--data", str(ns_file), "--out", str(tmp_path / "ro"), *extra]) != 0
    err = capsys.readouterr().err
    assert err.endswith(message) and err.count("\n") == 1


def test_panels_name_the_trajectory_and_errors_read_as_plain_numbers(ns_run, ns_file, tmp_path, monkeypatch):
    from matplotlib.figure import Figure
    from matplotlib.ticker import FormatStrFormatter

    seen = {}
    save = Figure.savefig

    def record(fig, fname, *args, **kwargs):
        sup = fig._suptitle.get_text() if fig._suptitle is not None else ""
        seen[str(fname).rsplit("/", 1)[-1]] = (sup, fig.axes[0].yaxis.get_major_formatter())
        return save(fig, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    matplotlib.use("Agg")
    rollout_file(ns_run, data=ns_file, show=1, out=tmp_path / "ro")  # untrained: errors near 1, within a decade
    assert seen["snapshots.png"][0] == "trajectory 19 of ns.h5, direct rollout"
    assert isinstance(seen["error_vs_time.png"][1], FormatStrFormatter)


@pytest.mark.parametrize("own, line", [
    (True, "direct rollout of the first 1 of the run's 2 test trajectories (--samples 1): "),
    (False, "direct rollout of the first 3 of the file's 20 trajectories (--samples 3): "),
])
def test_samples_is_said_to_take_the_first_trajectories(ns_run, ns_file, tmp_path, capsys, own, line):
    data = ns_file
    if not own:  # a copy: another file than the run's, all of whose trajectories are rolled out
        data = tmp_path / "other.h5"
        data.write_bytes(ns_file.read_bytes())
    assert main(["rollout", str(ns_run), "--data", str(data), "--samples", "1" if own else "3",
                 "--out", str(tmp_path / "ro")]) == 0
    assert capsys.readouterr().out.startswith(line)
    assert json.loads((tmp_path / "ro" / "rollout.json").read_text())["n_available"] == (2 if own else 20)


def test_a_nan_prediction_is_named_in_its_panel(ns_run, ns_file, tmp_path, monkeypatch):
    import numpy as np
    from matplotlib.figure import Figure

    from opformer.tasks.artifact import Predictor

    rollout = Predictor.rollout
    monkeypatch.setattr(Predictor, "rollout", lambda self, *a, **k: rollout(self, *a, **k) * np.nan)
    titles = {}
    save = Figure.savefig

    def record(fig, fname, *args, **kwargs):
        titles[str(fname).rsplit("/", 1)[-1]] = [ax.get_title() for ax in fig.axes]
        return save(fig, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rollout_file(ns_run, data=ns_file, times=[1], out=tmp_path / "ro")
    assert "prediction (direct) t=1 (NaN/inf)" in titles["snapshots.png"]
    # rollout.json stays strict JSON: the time is listed, its error null, in no mean
    text = (tmp_path / "ro" / "rollout.json").read_text()
    r = json.loads(text, parse_constant=lambda c: pytest.fail(f"rollout.json holds {c}"))
    assert r["rel_l2"] == [None] and r["nonfinite_times"] == [1.0] and r["mean_rel_l2"] is None
