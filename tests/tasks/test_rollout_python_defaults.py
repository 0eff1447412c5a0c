"""``model.rollout`` in Python: with a history the mode defaults to the only one such a model has
(autoregressive; the default "direct" refused every call without mode=), and u0 is read and checked once also when
the times start at 0."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from .test_rollout_initial_time import _model  # an untrained model saved and loaded: frames and calls only

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_a_history_model_rolls_out_without_a_mode(ns_file, tmp_path):
    torch.set_num_threads(1)
    model = _model(ns_file, tmp_path / "h", history=2)
    with h5py.File(ns_file, "r") as h5:
        w = h5["w"][:2]
    np.testing.assert_array_equal(model.rollout(w[:, :2], [0.5, 1.0]),
                                  model.rollout(w[:, :2], [0.5, 1.0], mode="autoregressive"))


def test_a_model_without_history_still_defaults_to_direct(ns_file, tmp_path):
    torch.set_num_threads(1)
    model = _model(ns_file, tmp_path / "d", history=1)
    with h5py.File(ns_file, "r") as h5:
        w = h5["w"][:2, 0]
    np.testing.assert_array_equal(model.rollout(w, [0.5, 1.5]), model.rollout(w, [0.5, 1.5], mode="direct"))


@pytest.mark.parametrize("history", [1, 2])
def test_u0_is_read_once_with_a_leading_zero_time(ns_file, tmp_path, array_checks, history):
    torch.set_num_threads(1)
    model = _model(ns_file, tmp_path / f"m{history}", history=history)
    with h5py.File(ns_file, "r") as h5:
        w = h5["w"][:2]
    u0 = w[:, 0] if history == 1 else w[:, :2]
    y = model.rollout(u0, [0.0, 0.5, 1.0])
    assert array_checks.count("u0") == 1
    assert y.shape == (2, 3, 16, 16)
    np.testing.assert_array_equal(y[:, 0], (u0 if history == 1 else u0[:, -1]).astype(np.float32))
