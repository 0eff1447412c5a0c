"""`opformer rollout` without --mode: direct, and autoregressive for a --history model (the only mode it rolls out
in), so that the README's plain command runs for both."""

import json

import pytest

from opformer.cli import main
from opformer.train.config import apply_overrides, load_preset
from opformer.train.run import prepare_run

from .test_eval_predict_paths import _run_dir


@pytest.mark.parametrize("history, mode", [(1, "direct"), (2, "autoregressive")])
def test_the_default_mode_is_one_the_model_rolls_out_in(ns_file, tmp_path, capsys, history, mode):
    cfg, explicit = apply_overrides(load_preset("ns-fno"), {"data.path": str(ns_file), "n_test": 2, "n_val": 2,
                                                            "width": 4, "history": history})
    run = _run_dir(cfg, tmp_path / "run")
    assert main(["rollout", str(run), "--data", str(ns_file)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{mode} rollout of 2 trajectories")
    assert json.loads((run / f"rollout-{mode}" / "rollout.json").read_text())["mode"] == mode
