"""Wrong arguments to SimpleAttention / EncoderLayer / Encoder: one ValueError/TypeError naming the argument.

Each case used to fail deep inside torch (a shape or type error naming none of the user's arguments) or not at all.
"""

import numpy as np
import pytest
import torch

from opformer.nn import Encoder, EncoderLayer, SimpleAttention


@pytest.mark.parametrize("value", [2.0, "2", -1, True])
def test_pos_dim_must_be_a_non_negative_int(value):
    """pos_dim is a width: 2.0 failed in torch.empty ('argument size ... got float'), '2' in a comparison."""
    with pytest.raises(ValueError, match="pos_dim"):
        SimpleAttention(16, 4, "galerkin", value)


def test_pos_dim_numpy_int_is_an_int():
    """A numpy integer is an integer (numbers.Integral): accepted."""
    assert SimpleAttention(16, 4, "galerkin", np.int64(2)).pos_dim == 2


@pytest.mark.parametrize("value", ["galerkin", 0, 2.0])
def test_n_heads_must_be_a_positive_int_and_says_so(value):
    """SimpleAttention(16, 'galerkin') (kind passed as n_heads) said 'd_model=16 must be divisible by
    n_heads=galerkin'; the message names n_heads' type requirement."""
    with pytest.raises(ValueError, match="n_heads must be a positive int"):
        SimpleAttention(16, value)


def test_n_heads_not_dividing_d_model():
    with pytest.raises(ValueError, match="divisible by n_heads=3"):
        Encoder(2, 16, 3)


@pytest.mark.parametrize("value", [0, -3, 64.0])
def test_dim_feedforward_must_be_a_positive_int(value):
    """-3 failed in nn.Linear ('negative dimension -3: [-3, 16]'); 0 built an FFN of no width with a warning."""
    with pytest.raises(ValueError, match="dim_feedforward"):
        EncoderLayer(16, 4, dim_feedforward=value)


@pytest.mark.parametrize("name", ["dropout", "attn_dropout", "ffn_dropout", "attn_branch_dropout"])
def test_each_dropout_rate_is_named_when_out_of_range(name):
    """attn_dropout=1.5 was reported as 'dropout must be in [0, 1)' (SimpleAttention's own name)."""
    with pytest.raises(ValueError, match=f"^{name} must be in"):
        EncoderLayer(16, 4, **{name: 1.5})


@pytest.mark.parametrize("value", [0, 2.0])
def test_num_layers_must_be_a_positive_int(value):
    """2.0 failed in range() ('float object cannot be interpreted as an integer')."""
    with pytest.raises(ValueError, match="num_layers"):
        Encoder(value, 16, 4)


@pytest.mark.parametrize("module", ["attn", "layer", "enc"])
def test_inputs_that_are_not_tensors_are_a_type_error_naming_them(module):
    """A numpy x or a list pos failed with AttributeError ('ndarray' object has no attribute 'dim')."""
    m = {"attn": lambda: SimpleAttention(8, 2, "galerkin", 1), "layer": lambda: EncoderLayer(8, 2, pos_dim=1),
         "enc": lambda: Encoder(2, 8, 2, pos_dim=1)}[module]()
    x, pos = torch.randn(2, 5, 8), torch.rand(2, 5, 1)
    with pytest.raises(TypeError, match="^x must be a torch.Tensor"):
        m(x.numpy(), pos)
    with pytest.raises(TypeError, match="^pos must be a torch.Tensor"):
        m(x, pos.tolist())
    with pytest.raises(TypeError, match="^weights must be a torch.Tensor"):
        m(x, pos, np.full((2, 5), 0.2))


def test_shape_errors_say_that_batch_one_is_accepted():
    """pos and weights of batch 1 are shared by the batch (they are accepted), so the message offers it."""
    m = SimpleAttention(8, 2, "galerkin", 2)
    x = torch.randn(3, 5, 8)
    with pytest.raises(ValueError, match=r"pos must have shape \(batch=3 or 1, n=5, pos_dim=2\), got \(5, 2\)"):
        m(x, torch.rand(5, 2))
    with pytest.raises(ValueError, match=r"weights must have shape \(batch=3 or 1, n=5\), got \(5,\)"):
        m(x, torch.rand(3, 5, 2), torch.rand(5))
    out = m(x, torch.rand(1, 5, 2), torch.rand(1, 5))
    assert out.shape == (3, 5, 8)


@pytest.mark.parametrize("value", [0.0, -1e-5, "1e-5", float("nan")])
def test_norm_eps_must_be_positive(value):
    """A negative norm_eps was accepted: the per-head norm then divides by sqrt(variance - |eps|), NaN for a
    constant row; 0 divides by zero there."""
    with pytest.raises(ValueError, match="norm_eps must be a number > 0"):
        SimpleAttention(16, 4, "galerkin", 1, norm_eps=value)
