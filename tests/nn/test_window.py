"""Windowed attention (opformer.nn.window): equal to a masked full attention, shifts move information across
windows, the relative position bias is a function of the offset (any window size), cost linear in the tokens."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from opformer.nn.window import (
    ContinuousPositionBias,
    GalerkinBlock2d,
    WindowAttention2d,
    WindowBlock2d,
    window_groups,
    window_partition,
    window_reverse,
)


pytestmark = pytest.mark.usefixtures("one_thread")


def masked_full_attention(attn: WindowAttention2d, x, groups, m):
    """Softmax attention over all h*w tokens, token i seeing token j iff groups[i] == groups[j], with the same
    projections, scores and relative bias as ``attn`` (offsets read from its bias table)."""
    b, h, w, d = x.shape
    heads = attn.n_heads
    t = x.reshape(b, h * w, d)
    q, k, v = attn.qkv(t).reshape(b, h * w, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
    s = attn.scores(q, k)
    ii, jj = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    ii, jj = ii.reshape(-1), jj.reshape(-1)
    dh = (ii[:, None] - ii[None, :]).clamp(-(m - 1), m - 1) + m - 1
    dw = (jj[:, None] - jj[None, :]).clamp(-(m - 1), m - 1) + m - 1
    s = s + attn.bias.table(m)[:, dh, dw]
    g = groups.reshape(-1)
    s = s.masked_fill(g[:, None] != g[None, :], float("-inf"))
    out = torch.softmax(s, -1) @ v
    return attn.proj(out.transpose(1, 2).reshape(b, h * w, d)).reshape(b, h, w, d)


def test_partition_reverse_identity():
    x = torch.randn(2, 8, 12, 3)
    assert torch.equal(window_reverse(window_partition(x, 4), 4, 8, 12), x)


@pytest.mark.parametrize("h,w,shift", [(8, 8, 0), (8, 8, 2), (5, 7, 0), (5, 7, 2), (6, 3, 2)])
@pytest.mark.parametrize("cosine", [True, False])
def test_windowed_equals_masked_full_attention(h, w, shift, cosine):
    """The windowed evaluation (pad, cyclic shift, partition, mask) is the full attention masked to the windows."""
    torch.manual_seed(0)
    m = 4
    attn = WindowAttention2d(8, 2, m, shift, cosine=cosine).double()
    x = torch.randn(2, h, w, 8, dtype=torch.float64)
    expected = masked_full_attention(attn, x, window_groups(h, w, m, shift), m)
    torch.testing.assert_close(attn(x), expected)


def test_groups_are_windows_without_shift():
    g = window_groups(8, 8, 4, 0)
    assert g.unique().numel() == 4
    assert (g[:4, :4] == g[0, 0]).all() and (g[4:, :4] != g[0, 0]).all()


def influence(model, x, point):
    """|d <out[point], r> / d x| summed over channels (r random: a plain sum would vanish through the layer norm's
    zero-mean output): which input tokens the output token depends on, (H, W)."""
    x = x.clone().requires_grad_(True)
    out = model(x)
    r = torch.randn(out.shape[-1], generator=torch.Generator().manual_seed(1))
    (out[0, point[0], point[1]] @ r).backward()
    return x.grad[0].abs().sum(-1)


def test_shifted_layer_reaches_outside_the_first_window():
    """Token (3, 3) of window [0,4)^2: one plain window layer sees only its window; after a shifted layer it
    depends on tokens of other windows (e.g. (4, 4))."""
    torch.manual_seed(0)
    m, d = 4, 8
    plain = WindowBlock2d(d, 2, m, 0)
    shifted = WindowBlock2d(d, 2, m, m // 2)
    x = torch.randn(1, 8, 8, d)
    g1 = influence(plain, x, (3, 3))
    assert g1[:4, :4].sum() > 0 and g1[4:, :].sum() == 0 and g1[:, 4:].sum() == 0
    g2 = influence(lambda t: shifted(plain(t)), x, (3, 3))
    assert g2[4, 4] > 0 and g2[4:, :].sum() > 0


def test_relative_bias_is_a_function_of_the_offset():
    """The bias table of window 8 restricted to offsets |d| < 4 is the table of window 4."""
    torch.manual_seed(0)
    cpb = ContinuousPositionBias(3)
    small, large = cpb.table(4), cpb.table(8)
    torch.testing.assert_close(large[:, 4:11, 4:11], small)
    assert cpb(8).shape == (3, 64, 64)


def test_trained_window_evaluates_with_another_window():
    """A layer built with M = 4 evaluated with M = 8 on an 8 x 8 grid (one window) is the full attention with the
    relative bias of every offset; with M = 2 it is the masked attention of 2 x 2 windows."""
    torch.manual_seed(0)
    attn = WindowAttention2d(8, 2, 4, 0).double()
    x = torch.randn(1, 8, 8, 8, dtype=torch.float64)
    full = masked_full_attention(attn, x, torch.zeros(8, 8, dtype=torch.long), 8)
    torch.testing.assert_close(attn(x, window_size=8), full)
    torch.testing.assert_close(attn(x, window_size=2), masked_full_attention(attn, x, window_groups(8, 8, 2), 2))


def flops(module, x):
    with FlopCounterMode(display=False) as counter:
        module(x)
    return counter.get_total_flops()


def test_window_attention_flops_grow_linearly_in_tokens():
    """At fixed window, 4x the tokens costs 4x the FLOPs (up to the bias MLP, which is per window size); a global
    attention over the same tokens costs 16x."""
    attn = WindowAttention2d(16, 2, 4, 2)
    f1, f4, f16 = (flops(attn, torch.randn(1, n, n, 16)) for n in (16, 32, 64))
    assert f16 - f4 == 4 * (f4 - f1)  # affine in N with slope independent of N
    assert 3.9 < f4 / f1 <= 4.0
    one = WindowAttention2d(16, 2, 16, 0)  # one window over 16 x 16, then 32 x 32 tokens in one window
    g1 = flops(one, torch.randn(1, 16, 16, 16))
    g4 = flops(lambda t: one(t, window_size=32), torch.randn(1, 32, 32, 16))
    assert g4 / g1 > 10


def test_padding_is_masked():
    """A grid that is not a multiple of the window, shifted: finite output of the input's shape, and no padded
    (all-masked) query produces NaN (the masked full-attention comparison above covers the values)."""
    torch.manual_seed(0)
    attn = WindowAttention2d(8, 2, 4, 2)
    x = torch.randn(2, 6, 5, 8)
    y = attn(x)
    assert y.shape == x.shape and torch.isfinite(y).all()


def test_blocks_take_the_lead_time_and_galerkin():
    torch.manual_seed(0)
    block = WindowBlock2d(8, 2, 4, 2, galerkin=True, conditioned=True)
    x = torch.randn(2, 6, 6, 8)
    t = torch.linspace(0, 1, 6)
    pos = torch.stack(torch.meshgrid(t, t, indexing="ij"), -1)[None]
    y0 = block(x, None, pos)
    y1 = block(x, torch.tensor([0.5, 2.0]), pos)
    torch.testing.assert_close(y0, y1)  # conditioned norms are the identity at initialisation
    assert isinstance(block.galerkin, GalerkinBlock2d)
    with pytest.raises(ValueError, match="pos"):
        block(x, None, None)


def test_wrong_shapes_are_one_line_in_the_layers_terms():
    attn = WindowAttention2d(8, 2, 4, 2)
    for bad in (torch.randn(6, 5, 8), torch.randn(1, 6, 5, 7)):
        with pytest.raises(ValueError, match=r"x must have shape \(batch, H, W, d_model=8\), got"):
            attn(bad)
    with pytest.raises(ValueError, match="window_size must be a positive int"):
        attn(torch.randn(1, 6, 5, 8), window_size=0)
    block = WindowBlock2d(8, 2, 4, 2, galerkin=True)
    with pytest.raises(ValueError, match=r"x must have shape \(batch, H, W, d_model=8\)"):
        block(torch.randn(36, 8))
    with pytest.raises(ValueError, match=r"x must have shape \(batch, H, W, d_model\)"):
        GalerkinBlock2d(8, 2)(torch.randn(36, 8), torch.rand(1, 6, 6, 2))
