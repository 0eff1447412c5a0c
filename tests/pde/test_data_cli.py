"""The `opformer data` sub-command, driven through the top-level command."""

from __future__ import annotations

import numpy as np
import pytest

from opformer.data import load_arrays
from opformer.pde import read_header
from opformer.cli import main


def _run(argv: list[str]) -> int:
    return main(argv)


def test_burgers_command_writes_the_requested_recipe(tmp_path, capsys):
    out = tmp_path / "b.h5"
    argv = ["data", "burgers", "--samples", "6", "--resolution", "64", "--out", str(out), "--seed", "3",
            "--workers", "1", "--steps", "20", "--solve-resolution", "0", "--modes", "10", "--domain", "unit"]
    assert _run(argv) == 0
    recipe = read_header(out)["recipe"]
    assert (recipe["seed"], recipe["domain"], recipe["solve_resolution"], recipe["grf"]["modes"]) == (3, "unit", None, 10)
    assert load_arrays(out)["u"].shape == (6, 64)
    assert "wrote" in capsys.readouterr().out
    assert _run(argv) == 0  # a complete file with the same recipe: nothing to do


def test_darcy_command_and_info_report_wrong_sign_samples(tmp_path, capsys):
    """Samples 530-535 of a 17^2 cell-recipe set hold sample 533, whose solution has the wrong sign: generation
    warns (the file is still written) and `data info` says so; the node-grid recipe of the same range does not."""
    out, node = tmp_path / "d17.h5", tmp_path / "d17node.h5"
    common = ["data", "darcy", "--samples", "1000", "--resolution", "17", "--start", "530", "--stop", "536",
              "--workers", "1", "--no-progress"]
    assert _run([*common, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "1 of 6 samples have a solution of the wrong sign" in err and "samples 533" in err and "--grid node" in err
    assert _run(["data", "info", str(out)]) == 0
    assert "samples 533" in capsys.readouterr().out
    assert _run([*common, "--grid", "node", "--out", str(node)]) == 0
    assert read_header(node)["checks"] == {"wrong_sign": [], "wrong_sign_tol": 0.1}
    assert "wrong sign" not in capsys.readouterr().err
    assert _run(["data", "info", str(node)]) == 0
    assert "wrong sign" not in capsys.readouterr().out


def test_darcy_command_shards_and_split(tmp_path):
    common = ["data", "darcy", "--samples", "4", "--resolution", "13", "--workers", "2", "--split", "test", "--no-progress"]
    assert _run(common + ["--out", str(tmp_path / "d0.h5"), "--start", "0", "--stop", "2"]) == 0
    assert _run(common + ["--out", str(tmp_path / "d1.h5"), "--start", "2", "--stop", "4"]) == 0
    assert _run(common + ["--out", str(tmp_path / "whole.h5"), "--workers", "1"]) == 0
    shards = load_arrays(str(tmp_path / "d?.h5"), ("coeff", "sol"))
    whole = load_arrays(tmp_path / "whole.h5", ("coeff", "sol"))
    np.testing.assert_array_equal(shards["sol"], whole["sol"])
    assert read_header(tmp_path / "whole.h5")["recipe"]["split"] == "test"


def test_errors_are_reported_with_exit_status_2(tmp_path, capsys):
    assert _run(["data", "burgers", "--out", str(tmp_path / "x.h5"), "--resolution", "16"]) == 2
    assert "grf.modes" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert _run(["data", "darcy", "--out", str(tmp_path / "afile" / "x.h5"), "--resolution", "9", "--samples", "1"]) == 2
    assert "afile is a file" in capsys.readouterr().err


def test_info_command_prints_recipe_and_progress(tmp_path, capsys):
    out = tmp_path / "d.h5"
    assert _run(["data", "darcy", "--samples", "2", "--resolution", "9", "--out", str(out), "--workers", "1"]) == 0
    capsys.readouterr()
    assert _run(["data", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "darcy, samples [0, 2) of 2, 2/2 written (complete)" in text and '"resolution": 9' in text
    assert _run(["data", "info", str(tmp_path / "none.h5")]) == 2
    # a quoted pattern, as --data takes: every match, in order; one matching nothing is an error line
    np.savez(tmp_path / "e.npz", x=np.zeros((3, 8)))
    capsys.readouterr()
    assert _run(["data", "info", str(tmp_path / "[de].*"), str(tmp_path / "z*.h5")]) == 2
    printed, err = capsys.readouterr()
    assert [line.split(":")[0] for line in printed.splitlines() if not line.startswith(" ")] == [
        str(out), str(tmp_path / "e.npz")]
    assert err == f"opformer: error: {tmp_path / 'z*.h5'}: no file matches this pattern\n"


def test_info_suggests_the_flags_of_the_files_kind(tmp_path, capsys):
    import h5py

    np.savez(tmp_path / "pairs.npz", x=np.zeros((4, 16)), y=np.zeros((4, 16)))
    np.savez(tmp_path / "traj.npz", u=np.zeros((4, 5, 16)), time=np.linspace(0, 1, 5))
    np.savez(tmp_path / "w.npz", w=np.zeros((4, 5, 8, 8, 1)))
    with h5py.File(tmp_path / "traj.h5", "w") as h5:
        h5.create_dataset("sim/vort", data=np.zeros((4, 6, 8, 8))).attrs["t"] = np.arange(6.0)
        h5.create_dataset("sim/other", data=np.zeros((4, 6, 8, 8)))
    with h5py.File(tmp_path / "grouped.h5", "w") as h5:  # times as an attribute of a group holding the dataset
        h5.create_dataset("run/sim/q", data=np.zeros((4, 5, 16)))
        h5["run"].attrs["time"] = np.arange(5.0)
    np.savez(tmp_path / "named.npz", **{"u field": np.zeros((4, 9, 16)), "snap_times": np.linspace(0, 1, 9)})
    np.savez(tmp_path / "rect.npz", w=np.zeros((4, 5, 16, 12)), t=np.arange(5.0))
    expected = {"pairs.npz": "train with --keys INPUT,TARGET):",
                # times under any name, found by their length; a key with a space quoted for the shell
                "grouped.h5": "1D trajectories: train burgers-traj-* with --keys run/sim/q --time-key time):",
                "named.npz": "1D trajectories: train burgers-traj-* with --keys 'u field' --time-key snap_times):",
                "rect.npz": "2D trajectories: train ns-* or shear-layer-* with --keys w --time-key t; they take square "
                            "grids, this file's are 16x12: resample it to a square grid first):",
                "traj.npz": "1D trajectories: train burgers-traj-* with --keys u --time-key time):",
                "w.npz": "if these are 2D trajectories: train ns-* or shear-layer-* with --keys w --dt STEP):",
                "traj.h5": "2D trajectories: train ns-* or shear-layer-* with --keys sim/vort --time-key t):"}
    for name, hint in expected.items():
        assert _run(["data", "info", str(tmp_path / name)]) == 0
        first = capsys.readouterr().out.splitlines()[0]
        assert first.endswith(hint), first
        assert name == "pairs.npz" or "INPUT,TARGET" not in first


def test_data_requires_a_sub_command():
    with pytest.raises(SystemExit):
        _run(["data"])


def test_prepare_generates_a_presets_files_once_and_shares_them(tmp_path, monkeypatch, capsys):
    """`opformer data prepare PRESET` writes the files `opformer train PRESET` would generate, into the cache;
    a second preset with the same recipe reuses them (nothing regenerated)."""
    monkeypatch.setenv("OPFORMER_DATA", str(tmp_path / "cache"))
    body = ("task: darcy\ndata:\n  resolution: 15\n  recipe: {n_samples: 3, resolution: 29}\n"
            "  test_recipe: {n_samples: 2}\nmodel: darcy-fno\n")
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(body)
    b.write_text(body.replace("darcy-fno", "darcy-gt"))
    assert _run(["data", "prepare", str(a), "--workers", "1"]) == 0
    files = sorted((tmp_path / "cache").glob("*.h5"))
    assert sorted(read_header(f)["recipe"]["n_samples"] for f in files) == [2, 3]
    stamps = [f.stat().st_mtime_ns for f in files]
    assert _run(["data", "prepare", str(b)]) == 0
    assert sorted((tmp_path / "cache").glob("*.h5")) == files and [f.stat().st_mtime_ns for f in files] == stamps
    out = capsys.readouterr().out
    assert out.count("train ") == 2 and out.count("test ") == 2
    assert _run(["data", "prepare", "darcy-nope"]) == 2
    assert "unknown preset or task 'darcy-nope'" in capsys.readouterr().err


def test_data_progress_bar_redraws_rarely_into_a_log_file():
    """Under pytest stderr is not a terminal, as when the output goes to a log: the text bar is redrawn once a
    minute, not ten times a second."""
    import io

    from opformer.pde.generate import _progress_bar

    bar = _progress_bar(total=2, file=io.StringIO())
    try:
        assert bar.mininterval == 60.0
    finally:
        bar.close()


def test_the_findings_are_stored_when_the_file_is_finished(tmp_path, capsys):
    """The wrong-sign check reads every solution once, when the file is finished (1.6 GB for the default 421^2
    file), and stores what it found; `data info` then reports the stored findings without reading the samples, and
    reads them only for a file without stored findings (an unfinished one, or one from an older version)."""
    import h5py

    from opformer.pde import check_dataset

    out = tmp_path / "d17.h5"
    assert _run(["data", "darcy", "--samples", "1000", "--resolution", "17", "--start", "532", "--stop", "535",
                 "--workers", "1", "--no-progress", "--out", str(out)]) == 0
    assert read_header(out)["checks"] == {"wrong_sign": [533], "wrong_sign_tol": 0.1}
    with h5py.File(out, "r+") as h5:  # stored findings are believed: a forged one is reported
        h5.attrs["checks"] = '{"wrong_sign": [532], "wrong_sign_tol": 0.1}'
    assert "samples 532" in check_dataset(out)[0]
    with h5py.File(out, "r+") as h5:  # findings of another tolerance, or none, are made again from the samples
        h5.attrs["checks"] = '{"wrong_sign": [532], "wrong_sign_tol": 0.5}'
    assert "samples 533" in check_dataset(out)[0]
    with h5py.File(out, "r+") as h5:
        del h5.attrs["checks"]
    assert read_header(out)["checks"] is None
    assert _run(["data", "info", str(out)]) == 0
    assert "1 of 3 samples have a solution of the wrong sign" in capsys.readouterr().out


@pytest.mark.parametrize("args, said", [(["--sigma", "nan"], "--sigma: grf.sigma must be a finite number > 0, found nan"),
                                        (["--sigma", "inf"], "--sigma: grf.sigma must be a finite number > 0, found inf"),
                                        (["--workers", "0"], "--workers must be >= 1, got 0")])
def test_a_value_no_recipe_can_hold_is_named_by_its_flag(tmp_path, capsys, args, said):
    assert main(["data", "burgers", "--samples", "2", "--out", str(tmp_path / "b.h5"), *args]) == 2
    assert capsys.readouterr().err == f"opformer: error: {said}\n"
    assert list(tmp_path.iterdir()) == []


def test_a_device_torch_cannot_use_is_refused_before_the_file_is_made(tmp_path, capsys):
    assert main(["data", "navier-stokes", "--samples", "2", "--resolution", "16", "--t-final", "1", "--snapshots",
                 "2", "--device", "tpu", "--no-progress", "--out", str(tmp_path / "ns.h5")]) == 2
    assert capsys.readouterr().err.startswith("opformer: error: cannot use the device 'tpu'")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_of_another_problem_or_recipe_is_named_as_such(tmp_path, capsys):
    out = tmp_path / "d.h5"
    base = ["--samples", "2", "--out", str(out), "--workers", "1", "--no-progress"]
    assert main(["data", "darcy", "--resolution", "17", *base]) == 0
    capsys.readouterr()
    assert main(["data", "burgers", *base]) == 2
    assert f"{out}: exists and holds a darcy data set, not burgers." in capsys.readouterr().err
    assert main(["data", "darcy", "--resolution", "17", "--seed", "5", *base]) == 2
    assert "exists with a different recipe (seed: 0 != 5)" in capsys.readouterr().err


def test_info_reads_a_file_a_generation_holds_open(tmp_path, capsys):
    """While a generation writes a file (it holds HDF5's write lock), `data info` still shows its header and
    progress, as the docs say to watch a generation with it (it failed on the lock)."""
    import subprocess
    import sys

    out = tmp_path / "d.h5"
    assert _run(["data", "darcy", "--samples", "2", "--resolution", "9", "--out", str(out), "--workers", "1"]) == 0
    capsys.readouterr()
    holder = subprocess.Popen([sys.executable, "-c", "import h5py, sys, time\nh = h5py.File(sys.argv[1], 'r+')\n"
                               "print('open', flush=True)\ntime.sleep(60)", str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        assert _run(["data", "info", str(out)]) == 0
        assert "darcy, samples [0, 2) of 2, 2/2 written (complete)" in capsys.readouterr().out
    finally:
        holder.kill()
        holder.wait()
