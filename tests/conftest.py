"""Small generated data files shared by the data, pde and task tests (session scope: generated once), and the
loader of the repository's scripts.

Tiny recipes: the same code paths as the full-size ones at a fraction of the cost."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from opformer.pde import generate_dataset, make_recipe

SMALL_BURGERS = dict(n_samples=24, resolution=128, solve_resolution=64, steps=40)
SMALL_DARCY = dict(n_samples=10, resolution=29)


def load_script(name: str):
    """The module ``scripts/NAME.py`` of the repository, imported from its file (the scripts are not a package)."""
    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="session")
def burgers_file(data_dir):
    """24 samples of the R10 recipe on a periodic grid of 128 points."""
    return generate_dataset(make_recipe("burgers", **SMALL_BURGERS), data_dir / "burgers.h5", workers=1,
                            progress=False)


@pytest.fixture(scope="session")
def darcy_files(data_dir):
    """A training and an independent test file of 10 piececonst samples each, 29 x 29 cell centres."""
    train = generate_dataset(make_recipe("darcy", **SMALL_DARCY), data_dir / "darcy_train.h5", workers=1,
                             progress=False)
    test = generate_dataset(make_recipe("darcy", split="test", **SMALL_DARCY), data_dir / "darcy_test.h5",
                            workers=1, progress=False)
    return train, test


@pytest.fixture()
def one_thread():
    """Small tensors on shared cores: one torch thread is faster and makes the runs reproducible."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def ns_file(data_dir):
    """20 Navier-Stokes trajectories (the ns recipe) on 16 x 16, 5 snapshots on [0, 2]."""
    from opformer.cli import main

    path = data_dir / "ns.h5"
    assert main(["data", "navier-stokes", "--samples", "20", "--resolution", "16", "--t-final", "2",
                 "--snapshots", "4", "--out", str(path), "--workers", "1", "--no-progress"]) == 0
    return path
