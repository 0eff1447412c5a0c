"""Arguments of SimpleAttention / EncoderLayer given as numpy numbers (a value from ``np.arange`` or a sweep's
array) are the numbers they hold, as pos_dim already was; values that are not numbers are one ValueError naming
the argument, never a TypeError from deep inside or a silently accepted bool."""

import math

import numpy as np
import pytest
import torch

from opformer.nn import EncoderLayer, SimpleAttention


def test_numpy_sizes_and_scale_build_the_same_layer_as_python_numbers():
    x, pos = torch.randn(2, 7, 8), torch.rand(2, 7, 1)
    torch.manual_seed(0)
    plain = EncoderLayer(8, 2, "fourier", pos_dim=1, scale=0.5, dim_feedforward=16)
    torch.manual_seed(0)
    numpy = EncoderLayer(np.int64(8), np.int32(2), "fourier", pos_dim=np.int64(1), scale=np.float32(0.5),
                         dim_feedforward=np.int64(16))
    assert type(numpy.attn.d_model) is int and type(numpy.attn.n_heads) is int and type(numpy.attn.pos_dim) is int
    assert type(numpy.attn.scale) is float and numpy.attn.scale == 0.5
    torch.testing.assert_close(numpy(x, pos), plain(x, pos), rtol=0, atol=0)


@pytest.mark.parametrize("kwargs, name", [
    (dict(d_model=True), "d_model"),
    (dict(scale=True), "scale"),
    (dict(scale=math.nan), "scale"),
    (dict(scale=math.inf), "scale"),
    (dict(dropout="0.1"), "dropout"),
    (dict(kind=["galerkin"]), "attention kind"),
    (dict(kind="fourier", fourier_order="quadratic", chunk_size=2.5), "chunk_size"),
    (dict(kind="fourier", fourier_order="quadratic", chunk_size=True), "chunk_size"),
])
def test_values_that_are_not_the_numbers_asked_for_are_refused_naming_them(kwargs, name):
    args = {"d_model": 8, "n_heads": 2, **kwargs}
    with pytest.raises(ValueError, match=name):
        SimpleAttention(**args)


@pytest.mark.parametrize("name", ["dropout", "attn_dropout", "ffn_dropout", "attn_branch_dropout"])
def test_a_dropout_rate_given_as_text_is_refused_naming_it(name):
    with pytest.raises(ValueError, match=f"^{name} must be in"):
        EncoderLayer(8, 2, **{name: "0.1"})
