"""scripts/attention_share.py and scripts/dropout_gap.py on a finished run whose data file has since been moved or
deleted: one line naming the file, no DataError traceback."""

import shutil

import pytest

from opformer.train.config import apply_overrides, load_preset
from opformer.train.run import train

from .conftest import load_script


@pytest.fixture(scope="module")
def run_without_its_data(tmp_path_factory, burgers_file):
    root = tmp_path_factory.mktemp("moved")
    data = root / "burgers copy.h5"
    shutil.copy(burgers_file, data)
    cfg, _ = apply_overrides(load_preset("burgers-gt"), {
        "data.path": str(data), "n_train": 8, "n_val": 4, "n_test": 4, "epochs": 1, "batch_size": 4, "d_model": 16,
        "dim_feedforward": 16, "num_layers": 2})
    train(cfg, root / "run", progress=False)
    data.unlink()
    return root / "run", data


def test_attention_share_names_the_missing_data_file(run_without_its_data, capsys, one_thread):
    run, data = run_without_its_data
    assert load_script("attention_share").main([str(run), "--samples", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(data) in err and err.count("\n") == 1, err


def test_dropout_gap_names_the_missing_data_file(run_without_its_data, capsys, one_thread):
    run, data = run_without_its_data
    assert load_script("dropout_gap").main([str(run), "--samples", "2", "--masks", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the run's data: ") and str(data) in err and err.count("\n") == 1, err
