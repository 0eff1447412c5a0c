"""``model.rollout(u0, times)`` with a file's own times, which start at t_0 = 0: the leading 0 was refused ("times
must be finite ascending values > 0, got [0.0, 0.5, ...]"); its frame is u0 itself."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

import opformer
from opformer.config import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _model(ns_file, path, history: int = 1):
    from opformer.tasks.artifact import Predictor
    from opformer.train.config import apply_overrides, load_preset
    from opformer.train.run import prepare_run

    cfg, explicit = apply_overrides(load_preset("ns-fno"), {"data.path": str(ns_file), "n_test": 2, "n_val": 2,
                                                            "width": 4, "history": history})
    run, _, operator, artifact, _ = prepare_run(cfg, frozenset(explicit))
    Predictor(operator, artifact, run.task, run.options).save_pretrained(path)  # untrained: shapes and frames only
    return opformer.load(path)


@pytest.mark.parametrize("mode", ["direct", "autoregressive", "mixed"])
def test_a_leading_zero_time_is_u0_itself(ns_file, tmp_path, mode):
    torch.set_num_threads(1)
    model = _model(ns_file, tmp_path / "m")
    with h5py.File(ns_file, "r") as h5:
        w, t = h5["w"][:3], np.asarray(h5["t"][:], dtype=np.float64)
    assert t[0] == 0 and len(t) == 5
    y = model.rollout(w[:, 0], t, mode=mode)
    assert y.shape == (3, 5, 16, 16)
    np.testing.assert_array_equal(y[:, 0], w[:, 0].astype(np.float32))
    np.testing.assert_array_equal(y[:, 1:], model.rollout(w[:, 0], t[1:], mode=mode))  # the same predictions
    # a tensor with a channel axis keeps its layout and type; [0] alone is u0
    u = torch.from_numpy(w[:, 0, ..., None])
    only = model.rollout(u, [0.0], mode=mode)
    assert torch.is_tensor(only) and only.shape == (3, 1, 16, 16, 1) and torch.equal(only[:, 0], u.float())
    with pytest.raises(ConfigError, match=r"times must be finite ascending values > 0 \(or a leading 0: u0 itself\), "
                                          r"got \[0.5, 0.0\]"):
        model.rollout(w[:, 0], [0.5, 0.0], mode=mode)


def test_with_a_history_the_zero_frame_is_the_last_given_snapshot(ns_file, tmp_path):
    torch.set_num_threads(1)
    model = _model(ns_file, tmp_path / "h", history=2)
    with h5py.File(ns_file, "r") as h5:
        w = h5["w"][:2]
    y = model.rollout(w[:, :2], [0.0, 0.5, 1.0], mode="autoregressive")
    assert y.shape == (2, 3, 16, 16)
    np.testing.assert_array_equal(y[:, 0], w[:, 1].astype(np.float32))
    np.testing.assert_array_equal(y[:, 1:], model.rollout(w[:, :2], [0.5, 1.0], mode="autoregressive"))
