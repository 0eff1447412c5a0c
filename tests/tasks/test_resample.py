"""Running a loaded model on its training grid: the grid interpolation, and which models it applies to."""

import numpy as np
import pytest
import torch

import opformer
from opformer.config import ConfigError
from opformer.models import build_model
from opformer.tasks.artifact import resample_grid
from opformer.tasks.base import grid_coords


def _field(kind, n, f):
    c = torch.as_tensor(grid_coords(kind, (n, n)), dtype=torch.float64)
    return f(c[..., 0], c[..., 1])[None, ..., None]


@pytest.mark.parametrize("n_in, n_out", [(9, 17), (17, 9), (33, 17)])
def test_linear_fields_are_interpolated_exactly_on_node_grids(n_in, n_out):
    f = lambda x, y: 2.0 * x - 3.0 * y + 0.5 * x * y + 1.0  # noqa: E731  (bilinear: exact for tensor-product linear)
    out = resample_grid(_field("node", n_in, f), "node", (n_out, n_out))
    torch.testing.assert_close(out, _field("node", n_out, f), rtol=1e-12, atol=1e-12)


def test_cell_grids_are_exact_inside_and_hold_the_end_values_outside():
    f = lambda x, y: 2.0 * x - 3.0 * y + 1.0  # noqa: E731
    out = resample_grid(_field("cell", 17, f), "cell", (33, 33))[0, ..., 0]
    want = _field("cell", 33, f)[0, ..., 0]
    inside = slice(1, 32)  # the 33-grid's first and last centres lie outside the 17-grid's outermost centres
    torch.testing.assert_close(out[inside, inside], want[inside, inside], rtol=1e-12, atol=1e-12)
    x17 = grid_coords("cell", (17,))[:, 0]
    assert out[0, 16].item() == pytest.approx(f(x17[0], grid_coords("cell", (33,))[16, 0]))


def test_periodic_grids_wrap_around():
    t = torch.arange(8, dtype=torch.float64)[None, :, None]  # values 0..7 at j/8
    out = resample_grid(t, "periodic", (16,))[0, :, 0]
    assert out[-1].item() == pytest.approx(3.5)  # at 15/16: halfway between 7 (at 7/8) and 0 (at 1 = 0)
    torch.testing.assert_close(out[::2], t[0, :, 0])  # the shared points keep their values
    torch.testing.assert_close(out[1:-1:2], t[0, :-1, 0] + 0.5)


def test_grid_bound_models_are_the_cell_convolution_and_patch_models():
    bound = {"transformer2d": True, "unet": True, "scot": True, "vit": True, "cno": True,
             "fno2d": False, "fno1d": False, "transformer1d": False, "deeponet": False}
    for name, want in bound.items():
        assert build_model({"name": name}).grid_bound is want, name
    assert build_model({"name": "vit", "grid_size": 32}).grid_bound is False  # resamples to its own grid


def test_a_grid_bound_model_runs_on_its_training_grid_unless_told_not_to(one_thread):
    """darcy33-gt on 17 x 17 inputs: "auto" equals interpolating to 33 x 33, running the operator there and
    interpolating back; "never" is the operator on the 17 x 17 grid; the training grid itself is never resampled."""
    rng = np.random.default_rng(0)
    a17 = np.where(rng.random((2, 17, 17)) > 0.5, 12.0, 3.0).astype(np.float32)
    auto, never = opformer.load("darcy33-gt"), opformer.load("darcy33-gt", resample="never")
    assert auto.runs_on_training_grid((17, 17)) and not auto.runs_on_training_grid((33, 33))
    assert not never.runs_on_training_grid((17, 17))
    with pytest.warns(UserWarning, match="runs on its 33x33 training grid"):
        p_auto = auto.predict(a17)
    with pytest.warns(UserWarning, match="resolves 8 of the 12 Fourier modes"):
        p_never = never.predict(a17)
    x = resample_grid(torch.as_tensor(a17)[..., None], "cell", (33, 33))
    c33 = torch.as_tensor(grid_coords("cell", (33, 33)), dtype=torch.float32)[None]
    with torch.no_grad():
        manual = resample_grid(auto.operator(x, c33), "cell", (17, 17))[..., 0].numpy()
    np.testing.assert_allclose(p_auto, manual, rtol=1e-5, atol=1e-6)
    assert np.abs(p_auto - p_never).max() > 1e-3
    a33 = np.where(rng.random((1, 33, 33)) > 0.5, 12.0, 3.0).astype(np.float32)
    np.testing.assert_array_equal(auto.predict(a33), never.predict(a33))


def test_a_resolution_invariant_model_is_not_resampled_by_default():
    p = opformer.load("burgers-ft")
    assert not p.runs_on_training_grid((256,))
    assert opformer.load("burgers-ft", resample="always").runs_on_training_grid((256,))
    with pytest.raises(ConfigError, match="resample must be one of auto, always, never"):
        opformer.load("burgers-ft", resample="yes")


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("history", [1, 2])
def test_a_rollout_on_another_grid_interpolates_the_state_once(ns_file, tmp_path, history):
    """A model that runs on its training grid rolls out there: a 12 x 12 rollout is the 16 x 16 rollout of the
    interpolated initial state, each frame interpolated back; not a chain of 12 -> 16 -> 12 round trips, whose
    interpolations would smooth the state at every step."""
    from opformer.cli import main

    out = tmp_path / "run"
    assert main(["train", "ns-fno", "--data", str(ns_file), "--n-test", "4", "--n-val", "2", "--epochs", "1",
                 "--width", "8", "--history", str(history), "--out", str(out), "--no-progress"]) == 0
    ck = out / "checkpoints" / "best.ckpt"
    always, plain = opformer.load(ck, resample="always"), opformer.load(ck, resample="never")
    step = always.artifact["info"]["step"]
    import h5py

    with h5py.File(ns_file) as h5:
        key = next(k for k in h5 if h5[k].ndim == 4)
        u16 = torch.as_tensor(np.asarray(h5[key][:2, :history], dtype=np.float32))  # (2, h, 16, 16)
    to = lambda u, n: resample_grid(u.reshape(-1, *u.shape[-2:], 1), "periodic", (n, n)).reshape(  # noqa: E731
        *u.shape[:-2], n, n)
    u12 = to(u16, 12)
    times = [step, 2 * step, 3 * step]
    start = u12 if history > 1 else u12[:, 0]
    got = always.rollout(start, times, mode="autoregressive")
    on16 = plain.rollout(to(u12, 16) if history > 1 else to(u12, 16)[:, 0], times, mode="autoregressive")
    torch.testing.assert_close(got, to(on16, 12), rtol=1e-5, atol=1e-5)
    # with an operator that keeps the state, the rollout's frames are all one round trip of the initial state; a
    # chain of per-step round trips would smooth it further at every step
    class Keep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(()))

        def forward(self, input, coords, lead_time=None):
            return input[..., -1:]

        def resolution_note(self, grid):
            return None

    always.operator = Keep()
    kept = always.rollout(start, times, mode="autoregressive")
    once = to(to(u12[:, -1], 16), 12)
    for k in range(len(times)):
        torch.testing.assert_close(kept[:, k], once, rtol=1e-6, atol=1e-6)
    twice = to(to(once, 16), 12)
    assert (twice - once).abs().max() > 1e-3 * once.abs().max()  # so a chain of round trips would show


def test_the_resampling_note_names_the_callers_line_and_can_be_filtered(one_thread):
    import warnings

    p = opformer.load("darcy33-scot")
    a = np.full((1, 17, 17), 3.0, dtype=np.float32)
    with pytest.warns(opformer.OpformerWarning, match="runs on its 33x33 training grid") as rec:
        p.predict(a)
    assert rec[0].filename == __file__  # the user's line, not the library's
    p = opformer.load("darcy33-scot")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=opformer.OpformerWarning)
        p.predict(a)


def test_an_inverse_model_evaluated_at_another_resolution_is_scored_on_the_datas_target_grid(darcy_files, tmp_path):
    """darcy-inverse predicts a on its fixed training target grid (out_size, 8 x 8 from 29 x 29); on the data at
    15 x 15 the target grid is 4 x 4: eval and predict interpolate the prediction to it (a shape error before)."""
    import json

    from opformer.cli import main

    train, test = darcy_files
    out = tmp_path / "run"
    assert main(["train", "darcy-inverse-fno", "--data", str(train), "--test-data", str(test), "--n-val", "2",
                 "--epochs", "1", "--width", "8", "--out", str(out), "--no-progress"]) == 0
    model = opformer.load(out)
    assert tuple(model.artifact["target_grid"]) == (8, 8)
    assert main(["eval", str(out), "--resolution", "15", "--out", str(tmp_path / "eval")]) == 0
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert np.isfinite(metrics["test_rel_l2"])
    assert main(["predict", str(out), "--data", str(test), "--resolution", "15", "--out",
                 str(tmp_path / "p.npz")]) == 0
    saved = np.load(tmp_path / "p.npz")
    assert saved["prediction"].shape == (10, 4, 4) and np.all(np.isfinite(saved["rel_l2"]))
