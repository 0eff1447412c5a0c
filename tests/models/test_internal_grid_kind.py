"""scOT, ViT and U-Net with ``grid_size`` read every input at the same points of the domain.

``grid_size`` resamples the input to an internal grid so that one trained model evaluates at any resolution.  The
internal grid used to be a bilinear resampling with aligned corners: its first and last points sat on the input
grid's outermost points.  On a cell-centred grid (the Darcy data's default) those are half an input cell inside the
walls, on a periodic grid one cell short of the period's end, so a 17 x 17 and a 33 x 33 grid of the same function
put the internal points at different places, and the network saw different inputs (0.08 and 0.17 apart here).  The internal grid now has the kind
of the input grid (cell centres (j + 1/2) / size, periodic j / size, node grids as before), so grids of one kind
agree up to the interpolation error, and an ``out_size`` output sits on the points of that kind's output grid."""

import pytest
import torch

from opformer.models import build_model
from opformer.nn.cinn import resize2d

CONFIGS = {
    "unet": {"name": "unet", "width": 4, "levels": 2},
    "scot": {"name": "scot", "embed_dim": 8, "depths": [1, 1], "num_heads": [2, 2], "window_size": 2,
             "patch_size": 2},
    "vit": {"name": "vit", "d_model": 8, "num_layers": 1, "n_heads": 2, "patch_size": 2},
}


def first_layer(model):
    return model.inc if model.name == "unet" else model.embed


def grid(n, kind):
    j = torch.arange(n, dtype=torch.float64)
    t = {"cell": (j + 0.5) / n, "periodic": j / n, "node": j / (n - 1)}[kind]
    return torch.stack(torch.meshgrid(t, t, indexing="ij"), -1)[None]


def smooth(c):
    return torch.sin(2 * torch.pi * c[..., :1] + 1) * torch.cos(2 * torch.pi * c[..., 1:])


def internal_inputs(model, sizes, kind):
    """What the model's first layer sees for the smooth field on an n x n grid of ``kind``, for each n."""
    seen = []
    handle = first_layer(model).register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    try:
        for n in sizes:
            c = grid(n, kind)
            model(smooth(c), c)
    finally:
        handle.remove()
    return seen


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("kind", ["cell", "periodic"])
def test_internal_grid_is_the_same_points_on_every_input_grid(name, kind):
    torch.manual_seed(0)
    model = build_model({**CONFIGS[name], "grid_size": 16}).double().eval()
    a, b = internal_inputs(model, (17, 33), kind)
    # the coordinate channels: the same internal points, whatever the input grid
    torch.testing.assert_close(a[..., -2:], b[..., -2:], rtol=0, atol=1e-12)
    want = smooth(a[..., -2:])[:, :16, :16]  # the field at the internal points
    for seen in (a, b):
        err = (seen[:, :16, :16, :1] - want).abs().max()
        assert err < 0.04, err  # linear interpolation between the 17 or 33 grid's points
    assert (a[..., :1] - b[..., :1]).abs().max() < 0.05  # an internal grid that moved with the input: 0.08-0.17


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_node_grids_resample_as_before(name):
    """On node grids the internal grid is the aligned-corner bilinear resampling, to the last bit."""
    torch.manual_seed(0)
    model = build_model({**CONFIGS[name], "grid_size": 12}).eval()
    c = grid(21, "node").float()
    x = torch.randn(2, 21, 21, 1)
    seen = []
    handle = first_layer(model).register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    model(x, c)
    handle.remove()
    assert torch.equal(seen[0][:, :12, :12], resize2d(torch.cat((x, c.expand(2, -1, -1, -1)), -1), 12))


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("out_size", [None, 9])
def test_output_lands_on_the_points_of_the_output_grid(name, out_size):
    """A network whose output on the internal grid is x + 10 y of the internal points: the model then returns
    x + 10 y at the points of its output grid (the input's cell centres, or the out_size cell grid's)."""
    model = build_model({**CONFIGS[name], "grid_size": 16, "out_size": out_size}).double().eval()
    seen = []
    first_layer(model).register_forward_pre_hook(lambda mod, args: seen.append(args[0]))

    def affine(mod, args, out):  # the internal points are the last two channels of the first layer's input
        c = seen[-1][..., -2:]
        if model.name != "unet":  # the recovered patches (after the decoder) are (batch, H, W, out)
            return (c[..., :1] + 10 * c[..., 1:]).to(out.dtype)
        return c[..., :1] + 10 * c[..., 1:]

    last = model.head if model.name == "unet" else model.recover
    last.register_forward_hook(affine)
    c = grid(33, "cell")
    y = model(smooth(c), c)
    m = out_size or 33
    t = (torch.arange(m, dtype=torch.float64) + 0.5) / m
    want = (t[:, None] + 10 * t[None, :])[None, :, :, None]
    inside = slice(1, -1) if out_size is None else slice(None)  # the input's outermost centres lie beyond the
    torch.testing.assert_close(y[:, inside, inside], want[:, inside, inside])  # internal grid's: held there
