"""``--grid node|cell`` (``data.grid``) says where the points of a user's 2D arrays sit: the same arrays in an
``.npz`` with ``--grid cell`` give the model exactly the coordinates of the ``.mat`` file (cell centres
(i + 1/2)/n, the FNO files' convention), and ``node`` those i/(n - 1); a file that stores its coordinates keeps
them (a contradicting ``--grid`` is refused); the periodic problems refuse the flag; an evaluation on another file
of the run's kind takes the run's ``--grid``; a run recorded before the field resumes as the same run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.io

from opformer.cli import main
from opformer.config import DataConfig
from opformer.pde.errors import DataError
from opformer.tasks import get_task
from opformer.train.run import _config_for_comparison


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    d = tmp_path_factory.mktemp("grid")
    rng = np.random.default_rng(0)
    a, u = rng.uniform(1, 3, (20, 17, 17)), rng.standard_normal((20, 17, 17))
    np.savez(d / "d.npz", coeff=a, sol=u)
    scipy.io.savemat(d / "d.mat", {"coeff": a, "sol": u})
    return d


def _coords(path, grid=None):
    task = get_task("darcy")
    cfg = DataConfig(path=str(path), grid=grid)
    bundle = task.load(cfg, task.options_class(), {"train": path, "test": None})
    return bundle.grid, bundle.datasets["train"][0]["coords"].numpy()


def test_the_npz_with_grid_cell_has_the_mat_files_coordinates(arrays):
    kind_mat, c_mat = _coords(arrays / "d.mat")
    kind_cell, c_cell = _coords(arrays / "d.npz", "cell")
    kind_node, c_node = _coords(arrays / "d.npz")
    assert kind_mat == kind_cell == "cell" and kind_node == "node"
    np.testing.assert_array_equal(c_cell, c_mat)
    np.testing.assert_allclose(c_cell[:, 0, 0], (np.arange(17) + 0.5) / 17, rtol=0, atol=1e-7)
    np.testing.assert_allclose(c_node[:, 0, 0], np.arange(17) / 16, rtol=0, atol=1e-7)
    assert _coords(arrays / "d.mat", "node")[0] == "node"  # the flag also overrides the .mat convention


def test_stored_coordinates_win_and_a_contradiction_is_refused(darcy_files):
    train, _ = darcy_files  # opformer's own file: 29 x 29 cell centres, stored
    assert _coords(train)[0] == "cell" and _coords(train, "cell")[0] == "cell"
    with pytest.raises(DataError, match="--grid node: .* stores its coordinates x, on a cell grid"):
        _coords(train, "node")


def test_the_periodic_problems_refuse_the_flag(arrays, capsys):
    assert main(["train", "burgers-gt", "--data", str(arrays / "d.npz"), "--grid", "cell", "--epochs", "1"]) == 2
    assert "--grid applies to the tasks on a square with walls" in capsys.readouterr().err


def test_an_evaluation_on_another_file_takes_the_runs_grid(arrays, tmp_path, one_thread):
    """Trained on the .npz with --grid cell: evaluating on the .npz and on the .mat (cell by convention) is the same
    evaluation, to the last bit (without the run's grid the .npz would be read on nodes)."""
    run = tmp_path / "run"
    assert main(["train", "darcy", "--model", "fno", "--modes", "4", "--width", "8", "--data",
                 str(arrays / "d.npz"), "--grid", "cell", "--epochs", "1", "--n-test", "4", "--n-val", "2",
                 "--out", str(run), "--no-progress"]) == 0
    errors = []
    for name in ("d.npz", "d.mat"):
        assert main(["eval", str(run), "--data", str(arrays / name), "--out", str(tmp_path / f"e-{name}")]) == 0
        errors.append(json.loads((tmp_path / f"e-{name}" / "metrics.json").read_text())["test_rel_l2"])
    assert errors[0] == errors[1]


def test_a_run_recorded_before_the_field_compares_as_the_same_run():
    new = {"task": "darcy", "model": {}, "train": {}, "data": {"path": "/d.npz", "grid": None}}
    old = {"task": "darcy", "model": {}, "train": {}, "data": {"path": "/d.npz"}}
    assert _config_for_comparison(old) == _config_for_comparison(new)
    assert _config_for_comparison(old) != _config_for_comparison({**new, "data": {"path": "/d.npz", "grid": "cell"}})
