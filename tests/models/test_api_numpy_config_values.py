"""``build_model`` with values that are numpy scalars (a sweep over ``np.arange``, a value read from an array): the
model is the one the same Python numbers build, and its config holds Python numbers (JSON-able, as a checkpoint and
``save_pretrained`` write it)."""

import json

import numpy as np
import pytest
import torch

from opformer.models import build_model, example_inputs

TINY = dict(name="transformer1d", d_model=8, num_layers=1, n_heads=2, dim_feedforward=16, decoder_width=6,
            decoder_ffn=6, modes=4)


def _numpy(cfg):
    return {k: (np.int64(v) if type(v) is int else np.float64(v) if type(v) is float else v) for k, v in cfg.items()}


@pytest.mark.parametrize("cfg", [
    {**TINY, "kind": "fourier", "scale": 0.5, "dropout": 0.1},
    dict(name="fno1d", width=6, modes=4, num_layers=2, head_width=8),
    dict(name="scot", embed_dim=8, depths=(1, 1), num_heads=(1, 2), patch_size=2, window_size=2),
])
def test_numpy_values_build_the_same_model_with_a_plain_config(cfg, one_thread):
    numpy = _numpy({**cfg, **({"depths": tuple(np.int64(d) for d in cfg["depths"])} if "depths" in cfg else {})})
    torch.manual_seed(0)
    plain_model = build_model(cfg)
    torch.manual_seed(0)
    numpy_model = build_model(numpy)
    assert numpy_model.to_config() == plain_model.to_config()
    json.dumps(numpy_model.to_config())  # what a checkpoint's description holds
    x, c = example_inputs(plain_model, batch=1, resolution=16)
    plain_model.eval(), numpy_model.eval()
    torch.testing.assert_close(numpy_model(x, c), plain_model(x, c), rtol=0, atol=0)


def test_a_numpy_float32_scale_is_a_number():
    model = build_model({**TINY, "kind": "fourier", "scale": np.float32(0.25)})
    assert model.to_config()["scale"] == 0.25 and type(model.to_config()["scale"]) is float


@pytest.mark.parametrize("scale", [True, float("nan"), float("inf")])
def test_a_scale_that_is_not_a_finite_number_is_refused(scale):
    with pytest.raises(ValueError, match="scale must be None, 'sqrt' or a finite number"):
        build_model({**TINY, "scale": scale})


def test_example_inputs_take_numpy_sizes():
    x, coords = example_inputs(TINY, batch=np.int64(2), resolution=np.int32(16))
    assert x.shape == (2, 16, 1) and coords.shape == (2, 16, 1)


@pytest.mark.parametrize("name", [["fno1d"], 3, None])
def test_a_model_name_that_is_not_a_string_is_refused_naming_it(name):
    with pytest.raises(ValueError, match="unknown model name"):
        build_model({"name": name})
