"""Every recipe key that an `opformer data` flag sets: a bad value is refused with exit status 2 in one line that
names the flag and the value, and nothing is written. The flag is found from the recipe key the check refused
(RecipeError.key), not from the wording of the check's message."""

from __future__ import annotations

import pytest

from opformer.cli import main
from opformer.pde import generate
from opformer.pde.cli import _FLAGS, _in_flag_terms, register
from opformer.pde.errors import DataError, RecipeError

# (command, flag, bad value, the recipe key the flag sets; None: argparse refuses the value itself)
CASES = [
    ("burgers", "--samples", "0", "n_samples"),
    ("burgers", "--resolution", "4", "resolution"),
    ("burgers", "--seed", "-1", "seed"),
    ("burgers", "--dtype", "float16", None),
    ("burgers", "--domain", "sphere", None),
    ("burgers", "--nu", "-0.5", "nu"),
    ("burgers", "--nu", "nan", "nu"),
    ("burgers", "--t-final", "0", "t_final"),
    ("burgers", "--steps", "0", "steps"),
    ("burgers", "--solve-resolution", "4", "solve_resolution"),
    ("burgers", "--snapshots", "-3", "snapshots"),
    ("burgers", "--modes", "40", "grf.modes"),
    ("burgers", "--sigma", "0", "grf.sigma"),
    ("burgers", "--tau", "-1", "grf.tau"),
    ("burgers", "--gamma", "-1", "grf.gamma"),
    ("darcy", "--samples", "-2", "n_samples"),
    ("darcy", "--resolution", "3", "resolution"),
    ("darcy", "--seed", "-5", "seed"),
    ("darcy", "--dtype", "int8", None),
    ("darcy", "--split", "valid", None),
    ("darcy", "--grid", "edge", None),
    ("darcy", "--face", "geometric", None),
    ("darcy", "--solver", "cg", None),
    ("darcy", "--high", "0", "high"),
    ("darcy", "--low", "-3", "low"),
    ("darcy", "--alpha", "0", "grf.alpha"),
    ("darcy", "--tau", "-1", "grf.tau"),
    ("navier-stokes", "--samples", "0", "n_samples"),
    ("navier-stokes", "--resolution", "4", "resolution"),
    ("navier-stokes", "--seed", "-1", "seed"),
    ("navier-stokes", "--dtype", "float16", None),
    ("navier-stokes", "--nu", "0", "nu"),
    ("navier-stokes", "--t-final", "-1", "t_final"),
    ("navier-stokes", "--snapshots", "0", "snapshots"),
    ("navier-stokes", "--solve-resolution", "24", "solve_resolution"),
    ("navier-stokes", "--cfl", "2", "cfl"),
    ("navier-stokes", "--dt", "-1", "dt"),
    ("navier-stokes", "--forcing", "wind", None),
]

_SMALL = {"burgers": ["--resolution", "64"], "darcy": ["--resolution", "9"], "navier-stokes": ["--resolution", "16"]}


@pytest.mark.parametrize("command, flag, value, key", CASES, ids=[f"{c[0]} {c[1]} {c[2]}" for c in CASES])
def test_a_bad_value_is_refused_in_one_line_naming_its_flag(tmp_path, capsys, command, flag, value, key):
    argv = ["data", command, flag, value, "--workers", "1", "--no-progress", "--out", str(tmp_path / "o.h5")]
    if flag != "--samples":
        argv += ["--samples", "2"]
    if flag != "--resolution":
        argv += _SMALL[command]
    with pytest.raises(SystemExit) if key is None else _no_exit() as stopped:
        code = main(argv)
    if key is None:
        code = stopped.value.code
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("opformer") and ": error: " in err and flag in err and value in err, err
    assert "Traceback" not in err and "null" not in err and "bad " not in err, err
    if key is not None:  # the flag, then the recipe key as `data info` prints the recipe, what it takes, the value
        shown = value if flag in ("--seed", "--samples", "--resolution", "--steps", "--solve-resolution",
                                  "--snapshots", "--modes") else repr(float(value))
        assert err.startswith(f"opformer: error: {flag}: {key} must be "), err
        assert err.rstrip().endswith(f", found {shown}"), err
    assert list(tmp_path.iterdir()) == []


class _no_exit:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_the_flag_follows_the_refused_key_whatever_the_wording():
    """The command line words a refusal from the key, the value and what is allowed, so another wording of a
    check's text (here one that no text pattern would know) still names the flag."""
    exc = RecipeError("burgers", "grf.sigma", -2.0, "strictly positive (a standard deviation)")
    assert str(exc) == "bad burgers recipe: grf.sigma must be strictly positive (a standard deviation), found -2.0"
    assert _in_flag_terms(exc) == "--sigma: grf.sigma must be strictly positive (a standard deviation), found -2.0"
    other = RecipeError("ns", "grf.scale", 0.0, "a finite number > 0")  # no flag sets it: the message as it is
    assert _in_flag_terms(other) == str(other)
    assert _in_flag_terms(DataError("x.h5: file not found")) == "x.h5: file not found"


def test_a_null_value_is_named_as_the_flag_writes_it():
    exc = RecipeError("burgers", "grf.modes", 40, "an integer in [1, 31] (below the Nyquist mode of the "
                      "{resolution} and {solve_resolution} grids)", nullable=True)
    assert str(exc) == ("bad burgers recipe: grf.modes must be null or an integer in [1, 31] (below the Nyquist "
                        "mode of the resolution and solve_resolution grids), found 40")
    assert _in_flag_terms(exc) == ("--modes: grf.modes must be 0 (all modes) or an integer in [1, 31] (below the "
                                   "Nyquist mode of the --resolution and --solve-resolution grids), found 40")
    dt = RecipeError("ns", "dt", -1.0, "> 0", nullable=True)  # null: --dt left out
    assert _in_flag_terms(dt) == "--dt: dt must be > 0, found -1.0"


@pytest.mark.parametrize("problem, overrides, key", [
    ("burgers", {"nu": -1.0}, "nu"), ("burgers", {"grf": {"modes": 0}}, "grf.modes"),
    ("burgers", {"snapshots": 0}, "snapshots"), ("darcy", {"low": 0.0}, "low"), ("darcy", {"split": "x"}, "split"),
    ("ns", {"cfl": 0.0}, "cfl"), ("ns", {"gamma": 1.0}, "grf.gamma"), ("shear-layer", {"rho": -1.0}, "shear.rho"),
    ("shear-layer", {"n_samples": 1.5}, "n_samples"),
])
def test_recipe_checks_name_the_refused_key_and_value(problem, overrides, key):
    with pytest.raises(RecipeError) as info:
        generate.make_recipe(problem, **overrides)
    assert info.value.key == key and info.value.problem == problem
    assert str(info.value).startswith(f"bad {problem} recipe: {key} must be ")
    assert str(info.value).endswith(f", found {info.value.value!r}")


def test_every_key_of_the_flag_table_is_set_by_a_flag_of_a_data_command():
    import argparse

    parser = argparse.ArgumentParser(prog="opformer")
    sub = register(parser.add_subparsers())
    flags = {opt for name in ("burgers", "darcy", "navier-stokes")
             for action in sub.choices[name]._actions for opt in action.option_strings}
    assert set(_FLAGS.values()) <= flags
    defaults = {}
    for kind in generate.RECIPES.values():
        for key, value in kind.defaults.items():
            defaults.update({f"{key}.{k}": v for k, v in value.items()} if isinstance(value, dict) else {key: value})
    assert set(_FLAGS) - {"snapshots"} <= set(defaults)  # Burgers' snapshots is an optional key
