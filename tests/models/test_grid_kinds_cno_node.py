"""CNO with ``grid_size`` on a node grid.

The CNO resamples its input to the internal grid by Fourier modes, which read a grid as periodic, its point i at
i / n.  A node grid's point i sits at i / (n - 1) and it holds both ends of the domain, so read that way its points
moved with the input grid and the jump between its two ends rang through the resampling (x + 10 y, from 0 to 11
over the domain, on 17 and 33 points reached the 8 x 8 internal grid up to 3.4 and 4.5 off, and 1.0 apart).  A
node grid now stays a node grid: it is resampled linearly to the internal node grid, grid_size points from its
first to its last point, and the output back."""

import torch

from opformer.models import build_model
from opformer.nn.cinn import resize2d

G = 8
CNO = {"name": "cno", "width": 4, "levels": 1, "res_blocks": 0, "grid_size": G}


def node_grid(n):
    t = torch.arange(n, dtype=torch.float64) / (n - 1)
    return torch.stack(torch.meshgrid(t, t, indexing="ij"), -1)[None]


def linear(c):
    return c[..., :1] + 10 * c[..., 1:]


def test_node_grids_give_the_internal_node_points():
    model = build_model(CNO).double().eval()
    seen = []
    model.lift.conv.register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    want = linear(node_grid(G)).permute(0, 3, 1, 2)  # the field at j / (G - 1)
    for n in (17, 33, 5):
        c = node_grid(n)
        model(linear(c), c)
        torch.testing.assert_close(seen[-1], want, rtol=0, atol=1e-12)


def test_the_output_returns_to_the_input_node_points():
    """A network whose internal output is the field at the internal node points gives the field at the input's."""
    model = build_model(CNO).double().eval()
    model.project.register_forward_hook(lambda mod, args, out: linear(node_grid(G)).permute(0, 3, 1, 2))
    outputs = []
    for n in (17, 33):
        c = node_grid(n)
        y = model(linear(c), c)
        torch.testing.assert_close(y, linear(c), rtol=0, atol=1e-12)
        outputs.append(y)
    # the 17 grid's points are the 33 grid's even ones: the same values there
    torch.testing.assert_close(outputs[0], outputs[1][:, ::2, ::2], rtol=0, atol=1e-12)


def test_node_grids_take_the_bilinear_resampling_with_aligned_corners():
    torch.manual_seed(0)
    model = build_model(CNO).eval()
    seen = []
    model.lift.conv.register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    model.project.register_forward_hook(lambda mod, args, out: seen.append(out) or out)
    c = node_grid(21).float()
    x = torch.randn(2, 21, 21, 1)
    y = model(x, c)
    assert torch.equal(seen[0], resize2d(x, G).permute(0, 3, 1, 2))
    assert torch.equal(y, resize2d(seen[1].permute(0, 2, 3, 1), 21))
