"""CNO with ``grid_size`` on a grid of cell centres.

The CNO resamples its input to the internal grid by Fourier modes, reading the grid as periodic.  A cell grid's
point i sits at (i + 1/2) / n, but it was read as i / n: the internal grid then sampled the function half an input
cell off, by a different amount for every input grid (17 and 33 points of one band-limited field gave internal
inputs 0.09 apart).  The resampling now moves the cell points onto the internal cell centres (j + 1/2) / size and
back, exactly for band-limited fields; a periodic grid is resampled as before, a node grid linearly."""

import torch

from opformer.models import build_model
from opformer.nn.alias_free import fourier_resample2d
from opformer.nn.cinn import resize2d

CNO = {"name": "cno", "width": 4, "levels": 2, "res_blocks": 1, "grid_size": 16}


def grid(n, kind):
    j = torch.arange(n, dtype=torch.float64)
    t = {"cell": (j + 0.5) / n, "periodic": j / n, "node": j / (n - 1)}[kind]
    return torch.stack(torch.meshgrid(t, t, indexing="ij"), -1)[None]


def field(c):
    """Band-limited on the period [0, 1)^2 (modes up to 2)."""
    x, y = c[..., :1], c[..., 1:]
    return torch.sin(2 * torch.pi * x + 1) * torch.cos(2 * torch.pi * y) + 0.5 * torch.cos(4 * torch.pi * y - 0.3)


def test_cell_grids_give_the_internal_cell_centres():
    model = build_model(CNO).double().eval()
    seen = []
    model.lift.conv.register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    want = field(grid(16, "cell")).permute(0, 3, 1, 2)
    for n in (17, 33, 12):
        c = grid(n, "cell")
        model(field(c), c)
        torch.testing.assert_close(seen[-1], want, rtol=0, atol=1e-9)


def test_the_output_returns_to_the_input_cell_centres():
    """A network whose internal output is the field at the internal cell centres gives the field at the input's."""
    model = build_model(CNO).double().eval()
    model.project.register_forward_hook(lambda mod, args, out: field(grid(16, "cell")).permute(0, 3, 1, 2))
    for n in (17, 33):
        c = grid(n, "cell")
        torch.testing.assert_close(model(field(c), c), field(c), rtol=0, atol=1e-9)


def test_periodic_grids_resample_by_fourier_and_node_grids_linearly():
    """A periodic grid is resampled in Fourier space; a node grid (both ends among its points) linearly, corner to
    corner, onto the node internal grid (read as periodic it was shifted by up to a point)."""
    torch.manual_seed(0)
    model = build_model(CNO).eval()
    for kind in ("periodic", "node"):
        seen = []
        handle = model.lift.conv.register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
        c = grid(21, kind).float()
        x = torch.randn(2, 21, 21, 1)
        model(x, c)
        handle.remove()
        want = fourier_resample2d(x, 16) if kind == "periodic" else resize2d(x, 16)
        assert torch.equal(seen[0], want.permute(0, 3, 1, 2))
