"""CiNN down/upscalers: the reference's layer sizes, the middle-grid rule, exact affine interpolation."""

import pytest
import torch
import torch.nn.functional as F

from opformer.nn import CiNNDownscaler2d, CiNNUpscaler2d, middle_size, resize2d


def _count(module):
    return sum(p.numel() for p in module.parameters())


def test_parameter_counts_match_the_reference():
    """ex2 (d=128): 82,044 + 147,456; ex3 (d=192): 186,048 + 331,776 (the reference implementation's counts,
    docs/models.md)."""
    assert _count(CiNNDownscaler2d(1, 128)) == 82_044
    assert _count(CiNNUpscaler2d(128)) == 147_456
    assert _count(CiNNDownscaler2d(1, 192)) == 186_048
    assert _count(CiNNUpscaler2d(192)) == 331_776


def test_downscaler_channel_split_is_dense_concatenation():
    """d = 128 splits as 42 / 42 / 44 and d = 192 as 64 / 64 / 64; the concatenation has d channels."""
    down = CiNNDownscaler2d(1, 128)
    assert [c.out_channels for c in (down.conv1, down.conv2, down.conv3)] == [42, 42, 44]
    assert all(c.bias is None for c in (down.conv0, down.conv1, down.conv2, down.conv3))
    wide = CiNNDownscaler2d(1, 192)
    assert [c.out_channels for c in (wide.conv1, wide.conv2, wide.conv3)] == [64, 64, 64]


@pytest.mark.parametrize(
    "n_f, n_c, mid", [(141, 43, 78), (211, 61, 113), (141, 71, 100), (85, 29, 50), (141, 36, 71), (211, 71, 122)]
)
def test_middle_grid_is_the_rounded_geometric_mean(n_f, n_c, mid):
    """mid = round(sqrt(n_f n_c)); it equals the reference downscaler's middle grid except 211->71 (122 vs 123)."""
    assert middle_size(n_f, n_c) == mid == middle_size(n_c, n_f)


@pytest.mark.parametrize("n_f, n_c", [(141, 43), (211, 61), (85, 29), (29, 15), (20, 20)])
def test_down_and_up_shapes_for_any_pair_of_sizes(n_f, n_c):
    torch.manual_seed(0)
    down, up = CiNNDownscaler2d(2, 6), CiNNUpscaler2d(6)
    x = torch.randn(1, n_f, n_f, 2)
    h = down(x, n_c)
    assert h.shape == (1, n_c, n_c, 6)
    assert up(h, n_f).shape == (1, n_f, n_f, 6)
    assert down(torch.randn(1, n_f, n_f + 3, 2), (n_c, n_c + 1)).shape == (1, n_c, n_c + 1, 6)  # rectangles too


def test_resize2d_reproduces_affine_functions_exactly():
    """Bilinear interpolation with align_corners=True maps the meshgrid of linspace(0,1,n) to that of linspace(0,1,m)
    and is exact for a + b x + c y + e x y (each coordinate's affine functions)."""
    def grid(n):
        t = torch.linspace(0, 1, n, dtype=torch.float64)
        return torch.stack(torch.meshgrid(t, t, indexing="ij"), dim=-1)[None]

    f = lambda g: (0.3 + 2 * g[..., 0] - g[..., 1] + 0.5 * g[..., 0] * g[..., 1])[..., None]  # noqa: E731
    for n, m in ((29, 15), (15, 29), (141, 43)):
        torch.testing.assert_close(resize2d(grid(n), m), grid(m), rtol=0, atol=1e-12)
        torch.testing.assert_close(resize2d(f(grid(n)), m), f(grid(m)), rtol=0, atol=1e-12)
    x = torch.randn(1, 5, 5, 1)
    assert resize2d(x, 5) is x


def test_upscaler_on_the_same_grid_is_one_conv_layer():
    """Output grid = coarse grid (the inverse problem): the upscaler is act(conv3x3(x)), the activation applied once
    (the reference's double SiLU is not kept)."""
    torch.manual_seed(0)
    up = CiNNUpscaler2d(4)
    x = torch.randn(2, 9, 9, 4)
    expected = F.silu(F.conv2d(x.permute(0, 3, 1, 2), up.conv.weight, padding=1)).permute(0, 2, 3, 1)
    torch.testing.assert_close(up(x, 9), expected)


def test_bad_inputs_raise_clear_errors():
    down = CiNNDownscaler2d(1, 6)
    with pytest.raises(ValueError, match=r"in_channels=1"):
        down(torch.randn(1, 10, 10, 2), 5)
    with pytest.raises(ValueError, match=r"size must be a positive int"):
        down(torch.randn(1, 10, 10, 1), 0)
    with pytest.raises(ValueError, match=r"out_channels must be an int >= 3"):
        CiNNDownscaler2d(1, 2)
    with pytest.raises(ValueError, match=r"unknown activation"):
        CiNNUpscaler2d(4, activation="tanh")
