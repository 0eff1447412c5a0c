"""A bad value on the `opformer data` command line is refused in one line that starts with the flag the user typed
(then the recipe key it sets, as `data info` shows the recipe), and nothing is written."""

from __future__ import annotations

import pytest

from opformer.cli import main

CASES = [
    (["burgers", "--resolution", "8"], "--modes: grf.modes must be 0 (all modes) or an integer in [1, 3]"),
    (["burgers", "--modes", "40"], "--modes: grf.modes must be 0 (all modes) or an integer in [1, 31]"),
    (["burgers", "--solve-resolution", "4"], "--solve-resolution: solve_resolution must be 0 (the output grid) or an integer >= 8"),
    (["burgers", "--samples", "0"], "--samples: n_samples must be a positive integer, found 0"),
    (["burgers", "--seed", "-2"], "--seed: seed must be a non-negative integer"),
    (["burgers", "--t-final", "0"], "--t-final: t_final must be a finite number > 0"),
    (["burgers", "--steps", "0"], "--steps: steps must be a positive integer"),
    (["burgers", "--start", "2", "--stop", "1"], "--start 2 --stop 1: a shard needs 0 <= --start < --stop <= --samples (3)"),
    (["burgers", "--start", "3"], "--start 3 --stop 3: a shard needs"),
    (["burgers", "--stop", "5"], "--start 0 --stop 5: a shard needs"),
    (["darcy", "--resolution", "3"], "--resolution: resolution must be an integer >= 5, found 3"),
    (["darcy", "--resolution", "9", "--high", "-1"], "--high: high must be a finite number > 0, found -1.0"),
    (["navier-stokes", "--resolution", "16", "--cfl", "2"], "--cfl: cfl must be in (0, 1]"),
    (["navier-stokes", "--resolution", "16", "--dt", "-1"], "--dt: dt must be > 0, found -1.0"),
    (["navier-stokes", "--resolution", "16", "--solve-resolution", "24"],
     "--solve-resolution: solve_resolution must be a multiple of resolution=16, found 24"),
]


@pytest.mark.parametrize("argv, expected", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_value_is_named_by_its_flag(tmp_path, capsys, argv, expected):
    out = tmp_path / "o.h5"
    defaults = [] if "--samples" in argv else ["--samples", "3"]
    if "--resolution" not in argv:
        defaults += ["--resolution", "64"]
    code = main(["data", *argv, *defaults, "--workers", "1", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [f"opformer: error: {err.strip().split('error: ', 1)[1]}"]  # one line
    assert expected in err, err
    assert err.startswith("opformer: error: --") and "null" not in err and "bad " not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag, value", [("--alpha", "0"), ("--tau", "-1"), ("--tau", "0")])
def test_darcy_field_parameters_must_be_positive(tmp_path, capsys, flag, value):
    """tau^(alpha-1) scales the Darcy field: with tau < 0 it flips the field's sign (alpha = 2) or is NaN (alpha
    = 1.5) and every coefficient silently became 3; such values are refused before anything is written."""
    out = tmp_path / "d.h5"
    code = main(["data", "darcy", "--samples", "2", "--resolution", "9", flag, value, "--workers", "1",
                 "--no-progress", "--out", str(out)])
    assert code == 2
    assert f"{flag}: grf.{flag[2:]} must be a finite number > 0" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_second_run_on_a_complete_file_says_nothing_was_written(tmp_path, capsys):
    out = tmp_path / "b.h5"
    argv = ["data", "burgers", "--samples", "2", "--resolution", "64", "--workers", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    before = out.stat().st_mtime_ns
    assert main(argv) == 0
    assert capsys.readouterr().out == f"{out}: complete already, with this recipe; nothing written\n"
    assert out.stat().st_mtime_ns == before
