"""A --resolution that is no stride of the default data's grid is refused before that data is generated (it was
refused only after generating it: 20-40 minutes for the Darcy files), naming the resolutions it has."""

from __future__ import annotations

import pytest

import opformer.pde.generate as generate_module
from opformer.config import DataConfig, check_section
from opformer.pde.errors import DataError
from opformer.tasks import get_task
from opformer.tasks.base import ensure_files


@pytest.fixture
def no_generation(monkeypatch, tmp_path):
    monkeypatch.setenv("OPFORMER_DATA", str(tmp_path / "cache"))

    def refuse(*args, **kwargs):
        raise AssertionError("data generated before the resolution was checked")

    monkeypatch.setattr(generate_module, "ensure_dataset", refuse)


@pytest.mark.parametrize("task,resolution,line", [
    ("darcy", 9, "--resolution 9 is not a stride of the 421 points stored in the default data of task darcy; "
                 "possible: 421, 211, 141, 106, 85"),
    ("darcy-inverse", 0, "--resolution 0 is below the smallest grid of 3 points; possible: 421, 211, 141"),
    ("burgers", 100, "--resolution 100 is not a stride of the 8192 points stored in the default data of task "
                     "burgers; possible: 8192, 4096"),
    ("ns", 7, "--resolution 7 is not a stride of the 64 points stored in the default data of task ns; possible: "
              "64, 32, 16, 8, 4"),
])
def test_refused_before_generating(no_generation, task, resolution, line):
    t = get_task(task)
    options = check_section(t.options_class, {}, "task")
    with pytest.raises(DataError) as err:
        ensure_files(t, DataConfig(resolution=resolution), options)
    assert str(err.value).startswith(line)


def test_a_stride_goes_on_to_the_data(no_generation):
    t = get_task("darcy")
    with pytest.raises(AssertionError, match="data generated before"):  # checked, then on to generating
        ensure_files(t, DataConfig(resolution=85), check_section(t.options_class, {}, "task"))


@pytest.mark.parametrize("resolution", ["0", "1", "5"])
def test_train_lists_the_resolutions_of_the_users_file(tmp_path, capsys, resolution):
    """(``--resolution 0`` got "must be >= 2", without the sizes the file has, which eval and predict list.)"""
    import numpy as np

    from opformer.cli import main

    x = np.random.default_rng(0).standard_normal((20, 64)).astype(np.float32)
    np.savez(tmp_path / "m.npz", x=x, y=np.cumsum(x, axis=1))
    out = tmp_path / "run"
    assert main(["train", "burgers-gt", "--data", str(tmp_path / "m.npz"), "--keys", "x,y", "--resolution",
                 resolution, "--out", str(out), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip().endswith("possible: 64, 32, 16, 8, 4")
    assert not out.exists()


@pytest.mark.parametrize("below", [False, True])
def test_a_data_cache_that_is_a_file_is_refused_in_one_line(tmp_path, monkeypatch, capsys, below):
    """OPFORMER_DATA naming a file, or a place below one: a FileExistsError / NotADirectoryError traceback before."""
    from opformer.cli import main

    (tmp_path / "afile").write_text("")
    cache = tmp_path / "afile" / "sub" if below else tmp_path / "afile"
    monkeypatch.setenv("OPFORMER_DATA", str(cache))
    assert main(["data", "prepare", "burgers-quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"opformer: error: OPFORMER_DATA={cache}: cannot create the data cache directory (")
    assert err.strip().endswith("set OPFORMER_DATA to a writable directory") and err.count("\n") == 1
