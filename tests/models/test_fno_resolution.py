"""FNO2d across grids: a band-limited input sampled on 16 x 16 and on 32 x 32 points gives the same values at the
shared points, for one spectral layer and for the whole network once its activations are linear.

What remains between grids in a trained FNO comes from the parts that are not band-limited: the pointwise
activations and the coordinate features (x, y in [0, 1) jump at the periodic boundary), see docs/models.md.
"""

import math

import pytest
import torch
from torch import nn

from opformer.models import build_model
from opformer.nn import SpectralConv2d

TOP = 7  # the highest frequency per axis that both grids hold below their Nyquist frequency (16 // 2 = 8)


def band_limited(n, channels, seed=0):
    """A random real trigonometric polynomial with every frequency |k1|, |k2| <= TOP, sampled on the n x n periodic
    grid x_j = j / n: (1, n, n, channels), float64."""
    g = torch.Generator().manual_seed(seed)
    k = torch.arange(-TOP, TOP + 1, dtype=torch.float64)
    amp = torch.randn(channels, len(k), len(k), generator=g, dtype=torch.float64)
    phase = 2 * math.pi * torch.rand(channels, len(k), len(k), generator=g, dtype=torch.float64)
    x = torch.arange(n, dtype=torch.float64) / n
    k1, k2, x1, x2 = k[:, None, None, None], k[None, :, None, None], x[None, None, :, None], x[None, None, None, :]
    arg = 2 * math.pi * (k1 * x1 + k2 * x2)
    f = (amp[..., None, None] * torch.cos(arg[None] + phase[..., None, None])).sum((1, 2)) / len(k)  # RMS ~ 0.7
    return f.permute(1, 2, 0)[None]


def assert_same_on_shared_points(coarse, fine):
    scale = fine.abs().max()
    assert scale > 1e-3  # the output is not trivially zero
    torch.testing.assert_close(fine[:, ::2, ::2] / scale, coarse / scale, rtol=0, atol=1e-12)


@pytest.mark.parametrize("modes", [4, 7, 8])  # 8 = 16 // 2: the coarse grid's Nyquist row is kept (zero here)
@pytest.mark.parametrize("pointwise", [False, True])
def test_a_spectral_layer_gives_the_same_values_on_16_and_32_points(modes, pointwise):
    """Random, untrained weights of order one (the spectral path dominates); every kept frequency below 8 carries
    signal.  Fails if the two FFTs' normalisations do not cancel ("ortho" on one and "backward" or "forward" on the
    other), or if the negative first-axis frequencies are found by a grid-dependent rule (rows after the positive
    block instead of the last rows)."""
    torch.manual_seed(0)
    conv = SpectralConv2d(3, 2, modes, pointwise=pointwise).double()
    with torch.no_grad():
        conv.weight1.normal_()
        conv.weight2.normal_()
    assert conv.kept_modes(32, 32) == (modes, modes, modes)
    coarse, fine = conv(band_limited(16, 3)), conv(band_limited(32, 3))
    assert_same_on_shared_points(coarse, fine)


def linear_activations(model):
    """The model with every activation replaced by the identity: an affine map of (input, coords)."""
    model.act = nn.Identity()
    model.head[1] = nn.Identity()
    return model


def grid_coords(n):
    """The periodic grid's coordinates x_j = j / n, (1, n, n, 2)."""
    x = torch.arange(n, dtype=torch.float64) / n
    return torch.stack(torch.meshgrid(x, x, indexing="ij"), -1)[None]


def smooth_features(n):
    """Band-limited position features (sin 2 pi x, cos 2 pi y) in place of the coordinates, (1, n, n, 2)."""
    c = 2 * math.pi * grid_coords(n)
    return torch.stack((torch.sin(c[..., 0]), torch.cos(c[..., 1])), -1)


def small_fno(conditioning="none", coord_features="raw"):
    torch.manual_seed(0)
    model = build_model({"name": "fno2d", "width": 6, "modes": 7, "num_layers": 3, "head_width": 8,
                         "time_conditioning": conditioning, "coord_features": coord_features}).double().eval()
    with torch.no_grad():
        for layer in model.layers:
            layer.weight1.normal_(std=0.3)
            layer.weight2.normal_(std=0.3)
    return linear_activations(model)


def outputs_on_16_and_32(model, coords, tau=None):
    with torch.no_grad():
        return [model(band_limited(n, 1, seed=3), coords(n), lead_time=tau) for n in (16, 32)]


@pytest.mark.parametrize("conditioning", ["none", "norm"])
def test_fno2d_with_linear_activations_gives_the_same_values_on_16_and_32_points(conditioning):
    """Lift, spectral layers, lead-time affine and head with identity activations, on a band-limited input and
    band-limited position features given as the coordinates: the whole network agrees on both grids to rounding.
    This pins that nothing else in FNO2d depends on the grid (no padding, no resizing, the coordinates used as
    given)."""
    tau = torch.tensor([0.5], dtype=torch.float64) if conditioning == "norm" else None
    assert_same_on_shared_points(*outputs_on_16_and_32(small_fno(conditioning), smooth_features, tau))


def test_periodic_coordinate_features_make_fno2d_agree_on_16_and_32_points():
    """With the grid's own coordinates j / n: the periodic features (cos, sin of 2 pi x) are band-limited and the
    network (linear activations) agrees on both grids to rounding; the raw coordinates are a sawtooth whose
    discrete spectrum depends on the grid, and the same network differs by several percent."""
    assert_same_on_shared_points(*outputs_on_16_and_32(small_fno(coord_features="periodic"), grid_coords))
    coarse, fine = outputs_on_16_and_32(small_fno(coord_features="raw"), grid_coords)
    difference = (fine[:, ::2, ::2] - coarse).norm() / coarse.norm()
    assert difference > 0.02, difference


def test_periodic_coordinate_features_add_one_lift_input_per_axis():
    raw, periodic = small_fno(), small_fno(coord_features="periodic")
    assert raw.lift.in_features == 1 + 2 and periodic.lift.in_features == 1 + 4
    fno1d = build_model({"name": "fno1d", "width": 4, "modes": 3, "coord_features": "periodic"})
    assert fno1d.lift.in_features == 1 + 2
    assert fno1d(torch.randn(2, 10, 1), torch.arange(10.0)[None, :, None] / 10).shape == (2, 10, 1)
    with pytest.raises(ValueError, match="coord_features"):
        build_model({"name": "fno2d", "coord_features": "sine"})
