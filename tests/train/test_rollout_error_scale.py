"""The rollout's relative L2 error per time is ||pred - u|| / ||u||, whatever the scale of the data: a prediction of
zeros has error exactly 1 against trajectories of scale 1 and of scale 1e-15 alike (an absolute clamp of ||u|| at
1e-12 reported 4e-3 for the latter)."""

import json

import numpy as np
import pytest

from opformer.cli import main
from opformer.tasks.artifact import Predictor


@pytest.mark.parametrize("scale", [1.0, 1e-15, 1e20])
def test_a_zero_prediction_has_error_one_at_any_scale(tmp_path, monkeypatch, scale):
    q = np.random.default_rng(5).standard_normal((6, 4, 16))
    np.savez(tmp_path / "traj.npz", q=q, time=0.1 * np.arange(4))
    np.savez(tmp_path / "scaled.npz", q=scale * q, time=0.1 * np.arange(4))
    run = tmp_path / "run"
    assert main(["train", "burgers-traj-fno", "--data", str(tmp_path / "traj.npz"), "--keys", "q", "--time-key",
                 "time", "--n-test", "1", "--n-val", "1", "--epochs", "1", "--out", str(run), "--no-progress"]) == 0

    def zeros(self, u0, times, **kwargs):
        return np.zeros((np.asarray(u0).shape[0], len(times), *np.asarray(u0).shape[1:]), dtype=np.float32)

    monkeypatch.setattr(Predictor, "rollout", zeros)
    out = tmp_path / "ro"
    assert main(["rollout", str(run), "--data", str(tmp_path / "scaled.npz"), "--out", str(out)]) == 0
    errors = json.loads((out / "rollout.json").read_text())["rel_l2"]
    assert errors == pytest.approx([1.0, 1.0, 1.0], rel=1e-12)
