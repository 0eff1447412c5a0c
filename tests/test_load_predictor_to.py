"""``Predictor.to``, as ``nn.Module.to``: a device, a floating dtype or both.  A model cast to float64 predicts in
float64 (the predictions are float32, as always); a device that is not there and a dtype that is not floating are
one-line errors naming them, not a message about the grid of the inputs."""

import numpy as np
import pytest
import torch

import opformer
from opformer.config import ConfigError


def _u0(n=128):
    g = np.arange(n) / n
    return np.stack([np.sin(2 * np.pi * g), np.cos(4 * np.pi * g) * 0.5])


@pytest.mark.parametrize("args", [(torch.float64,), ("cpu", torch.float64), (torch.device("cpu"),), ("cpu",)])
def test_a_moved_or_cast_model_predicts_as_before(args, one_thread):
    x = _u0()
    expected = opformer.load("burgers-gt").predict(x)
    model = opformer.load("burgers-gt")
    assert model.to(*args) is model
    dtype = args[-1] if isinstance(args[-1], torch.dtype) else torch.float32
    assert {p.dtype for p in model.operator.parameters()} == {dtype}
    got = model.predict(x)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    got_t = model.predict(torch.as_tensor(x))  # a tensor in, a float32 tensor out
    assert got_t.dtype == torch.float32


def test_a_model_cast_to_bfloat16_predicts_roughly_the_same(one_thread):
    x = _u0()
    expected = opformer.load("burgers-gt").predict(x)
    got = opformer.load("burgers-gt").to(torch.bfloat16).predict(x)
    assert got.dtype == np.float32
    assert np.abs(got - expected).max() < 0.05 * np.abs(expected).max()


@pytest.mark.parametrize("args, named", [((torch.int64,), "dtype"), (("nodevice",), "device"),
                                         ((torch.complex64,), "dtype")])
def test_what_a_model_cannot_be_moved_to_is_refused_naming_it(args, named):
    model = opformer.load("burgers-gt")
    with pytest.raises(ConfigError) as err:
        model.to(*args)
    assert str(err.value).startswith(named) and "\n" not in str(err.value)
    assert {p.dtype for p in model.operator.parameters()} == {torch.float32}  # left as it was


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_a_gpu_this_machine_lacks_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="^device 'cuda'"):
        opformer.load("burgers-gt").to("cuda")
