"""scripts/attention_share.py: the share of each attention layer's output in the residual stream of a trained model."""

import math

import pytest
import torch

from opformer.train.config import apply_overrides, load_preset
from opformer.train.run import train

from .conftest import load_script


@pytest.fixture(scope="module")
def tiny_ft_run(tmp_path_factory, darcy_files):
    root = tmp_path_factory.mktemp("share")
    cfg, _ = apply_overrides(load_preset("darcy-ft-regular"), {
        "data.path": str(darcy_files[0]), "n_val": 2, "n_test": 2, "epochs": 1, "batch_size": 2, "d_model": 16,
        "dim_feedforward": 16, "num_layers": 2, "n_heads": 2, "decoder_width": 8, "modes": 4})
    train(cfg, root / "run", progress=False)
    return root / "run"


def test_the_share_of_each_layer_and_of_a_layer_switched_off(tiny_ft_run):
    """One (share, varying) pair per encoder layer, share >= 0 and varying in [0, 1]; with the output projection of
    the first layer zeroed its attention adds nothing: share 0 exactly."""
    mod = load_script("attention_share")
    rows = mod.shares(tiny_ft_run, 2)
    assert len(rows) == 2
    assert all(math.isfinite(s) and s > 0 and 0 <= v <= 1 + 1e-6 for s, v in rows), rows
    ckpt = tiny_ft_run / "checkpoints" / "best.ckpt"
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    keys = [k for k in state["state_dict"] if ".layers.0.attn.out_proj." in k]
    assert keys, list(state["state_dict"])[:20]
    for k in keys:
        state["state_dict"][k].zero_()
    torch.save(state, ckpt)
    rows = mod.shares(tiny_ft_run, 2)
    assert rows[0] == (0.0, 0.0) and rows[1][0] > 0


def test_a_path_that_is_no_run_is_one_line_error(tmp_path, capsys):
    """A mistyped run directory or an empty one (no checkpoint): one line naming it, not a LoadError traceback."""
    mod = load_script("attention_share")
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "nowhere", tmp_path / "empty"):
        assert mod.main([str(path)]) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith(f"error: {path}") and captured.err.count("\n") == 1, captured.err
    with pytest.raises(SystemExit):
        mod.main([str(tmp_path / "empty"), "--samples", "0"])
    assert "--samples must be at least 1" in capsys.readouterr().err
