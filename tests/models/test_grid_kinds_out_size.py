"""``out_size`` without ``grid_size``: the output grid has the input grid's kind.

FNO2d, U-Net, ViT, scOT, CNO and Transformer2d resample to their ``out_size x out_size`` output grid.  A bilinear
resampling with aligned corners puts the output's first and last points on the input's outermost points, which on a
cell grid sit half an input cell inside the walls (1/34 for 17 points, 1/66 for 33) and on a periodic grid one cell
short of the period's end: the output points then moved with the input grid.  The output grid is now the grid of
the input's kind (cell centres (j + 1/2) / m, periodic j / m), so one field sampled on a 17 x 17 and a 33 x 33 grid
lands on the same points; node grids resample as before, to the last bit.

Each model here is made to pass its input through (its last layer returns what its first layer read), so its
output is the input field resampled to the output grid, and a field linear in the coordinates gives the exact values
at the output grid's points."""

import pytest
import torch

from opformer.models import build_model
from opformer.nn.cinn import resize2d

OUT = 8

CONFIGS = {
    "fno2d": {"name": "fno2d", "width": 4, "modes": 2, "num_layers": 1, "head_width": 4},
    "unet": {"name": "unet", "width": 4, "levels": 2},
    "vit": {"name": "vit", "d_model": 8, "num_layers": 1, "n_heads": 2, "patch_size": 2},
    "scot": {"name": "scot", "embed_dim": 8, "depths": [1, 1], "num_heads": [2, 2], "window_size": 2,
             "patch_size": 2},
    "cno": {"name": "cno", "width": 4, "levels": 1, "res_blocks": 0},
}


def grid(n, kind):
    j = torch.arange(n, dtype=torch.float64)
    t = {"cell": (j + 0.5) / n, "periodic": j / n, "node": j / (n - 1)}[kind]
    return torch.stack(torch.meshgrid(t, t, indexing="ij"), -1)[None]


def linear(c):
    return c[..., :1] + 10 * c[..., 1:]


def pass_through(model):
    """Make the model's last layer return the input field as its first layer read it (same grid, padded alike)."""
    seen = []
    if model.name == "cno":  # channels first
        model.lift.conv.register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
        model.project.register_forward_hook(lambda mod, args, out: seen[-1][:, :1])
        return model
    first = {"fno2d": "lift", "unet": "inc"}.get(model.name, "embed")
    last = {"fno2d": "head", "unet": "head"}.get(model.name, "recover")
    getattr(model, first).register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    getattr(model, last).register_forward_hook(lambda mod, args, out: seen[-1][..., :1])
    return model


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("kind", ["cell", "periodic"])
def test_out_size_lands_on_the_output_grid_of_the_input_grids_kind(name, kind):
    model = pass_through(build_model({**CONFIGS[name], "out_size": OUT}).double().eval())
    want = linear(grid(OUT, kind))
    outputs = []
    for n in (17, 33):
        c = grid(n, kind)
        y = model(linear(c), c)
        # the linear field at the points of the 8 x 8 grid of the input's kind (inside the input's outermost points)
        torch.testing.assert_close(y, want, rtol=0, atol=1e-12)
        outputs.append(y)
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_node_grids_keep_the_bilinear_resampling_to_the_last_bit(name):
    torch.manual_seed(0)
    model = pass_through(build_model({**CONFIGS[name], "out_size": OUT}).eval())
    c = grid(21, "node").float()
    x = torch.randn(2, 21, 21, 1)
    assert torch.equal(model(x, c), resize2d(x, OUT))


def test_fno_runs_on_the_output_grid_of_the_input_grids_kind():
    """FNO2d with out_size resamples its input and coordinates to the output grid before its spectral layers."""
    model = build_model({**CONFIGS["fno2d"], "out_size": OUT}).double().eval()
    seen = []
    model.lift.register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    for kind in ("cell", "periodic"):
        want = grid(OUT, kind)
        for n in (17, 33):
            c = grid(n, kind)
            model(linear(c), c)
            torch.testing.assert_close(seen[-1][..., 1:], want, rtol=0, atol=1e-15)  # the lifted coordinates
            torch.testing.assert_close(seen[-1][..., :1], linear(want), rtol=0, atol=1e-12)
    c = grid(21, "node").float()
    x = torch.randn(2, 21, 21, 1)
    model.float()(x, c)
    assert torch.equal(seen[-1], torch.cat((resize2d(x, OUT), resize2d(c, OUT).expand(2, -1, -1, -1)), -1))


TRANSFORMER = {"name": "transformer2d", "d_model": 6, "num_layers": 1, "n_heads": 1, "dim_feedforward": 8,
               "coarse_size": 5, "decoder_width": 4, "decoder_layers": 1, "modes": 2, "decoder_ffn": 4,
               "input_skip": True, "out_size": OUT}


@pytest.mark.parametrize("kind", ["cell", "periodic", "node"])
def test_transformer_decodes_on_the_output_grid_of_the_input_grids_kind(kind):
    """The upscaler's features stand at n_o points evenly from the input grid's first to its last point: made a
    linear field of those points, the decoder gets that field at the output grid's points, with their coordinates
    and the input there."""
    model = build_model(TRANSFORMER).double().eval()

    def upscaled(mod, args, out):  # the linear field at the points the upscaler's bilinear resampling stands for
        return linear(resize2d(coords[0], OUT)).expand(out.shape[0], -1, -1, out.shape[-1])

    model.upscaler.register_forward_hook(upscaled)
    seen = []
    model.decoder.register_forward_pre_hook(lambda mod, args: seen.append(args))
    want = grid(OUT, kind)
    for n in (17, 33):
        coords = [grid(n, kind)]
        model(linear(coords[0]), coords[0])
        h, extra = seen[-1]
        torch.testing.assert_close(extra[..., :2], want, rtol=0, atol=1e-15)
        torch.testing.assert_close(extra[..., 2:], linear(want), rtol=0, atol=1e-12)
        torch.testing.assert_close(h, linear(want).expand_as(h), rtol=0, atol=1e-12)


def test_transformer_node_grids_decode_as_before():
    torch.manual_seed(0)
    model = build_model(TRANSFORMER).eval()
    seen = []
    model.upscaler.register_forward_hook(lambda mod, args, out: seen.append(out))
    model.decoder.register_forward_pre_hook(lambda mod, args: seen.append(args))
    c = grid(21, "node").float()
    x = torch.randn(2, 21, 21, 1)
    model(x, c)
    upscaled, (h, extra) = seen
    assert torch.equal(h, upscaled)
    assert torch.equal(extra, torch.cat((resize2d(c, OUT).expand(2, -1, -1, -1), resize2d(x, OUT)), -1))
