"""scripts/make_pretrained.py: a missing or unfinished run directory, or a wrong check file, is refused in one line
before anything is loaded, generated or written."""

import json

import h5py
import pytest

from opformer.tasks.pretrained import PRETRAINED_DIR

from .conftest import load_script

NAME = "no-such-bundle-for-a-test"


def _args(run, check, *more):
    return [str(run), NAME, "--description", "d", "--train-cmd", "t", "--check-file", str(check), "--start", "0",
            "--stop", "2", *more]


@pytest.fixture()
def finished_run(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "best.ckpt").write_bytes(b"not read before the inputs are checked")
    (run / "metrics.json").write_text(json.dumps({"test_rel_l2": 0.01}))
    return run


def _refused(mod, args, capsys, said):
    assert mod.main(args) == 2
    captured = capsys.readouterr()
    assert said in captured.err and captured.err.count("\n") == 1, captured.err
    assert not (PRETRAINED_DIR / NAME).exists()


def test_missing_and_unfinished_run_directories(tmp_path, capsys, finished_run):
    mod = load_script("make_pretrained")
    check = tmp_path / "check.h5"
    with h5py.File(check, "w") as f:
        f.attrs["recipe"] = json.dumps({"pde": "x"})
    _refused(mod, _args(tmp_path / "nowhere", check), capsys, "nowhere: no such directory")
    (finished_run / "metrics.json").unlink()  # interrupted: a checkpoint, no metrics
    _refused(mod, _args(finished_run, check), capsys, "no checkpoints/best.ckpt and metrics.json")
    (finished_run / "metrics.json").write_text("{")
    _refused(mod, _args(finished_run, check), capsys, "not a readable metrics.json")


def test_a_wrong_check_file_or_sample_range(tmp_path, capsys, finished_run):
    mod = load_script("make_pretrained")
    _refused(mod, _args(finished_run, tmp_path / "none.h5"), capsys, "--check-file")
    (tmp_path / "text.h5").write_text("not hdf5")
    _refused(mod, _args(finished_run, tmp_path / "text.h5"), capsys, "not a readable HDF5 file")
    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f["x"] = [1.0]
    _refused(mod, _args(finished_run, tmp_path / "plain.h5"), capsys, "no recipe in it")
    _refused(mod, _args(finished_run, tmp_path / "plain.h5", "--stride", "0"), capsys, "stride >= 1")


def test_a_checkpoint_that_is_not_loadable_is_one_line(tmp_path, capsys, finished_run):
    mod = load_script("make_pretrained")
    check = tmp_path / "check.h5"
    with h5py.File(check, "w") as f:
        f.attrs["recipe"] = json.dumps({"pde": "x"})
    _refused(mod, _args(finished_run, check), capsys, "best.ckpt")


@pytest.mark.parametrize("name", ["../outside", "a/b", ".hidden", ""])
def test_a_name_that_is_not_one_folder_is_refused(tmp_path, capsys, finished_run, name):
    """NAME became a path under opformer/pretrained: '../x' with --replace would have replaced a folder outside."""
    mod = load_script("make_pretrained")
    args = _args(finished_run, tmp_path / "none.h5", "--replace")
    args[1] = name
    assert mod.main(args) == 2
    err = capsys.readouterr().err
    assert "NAME" in err and err.count("\n") == 1
