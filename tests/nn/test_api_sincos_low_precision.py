"""The sine-cosine position encoding of points held in bfloat16 or float16: the encoding of the points they hold,
rounded once to their dtype.  Its phases reach 64 pi, so evaluated in bfloat16 itself (8 bits of mantissa) they
were off by up to a radian: a ViT cast to bfloat16 (``model.to(torch.bfloat16)``) gave positions noise."""

import pytest
import torch

from opformer.nn import PatchEmbed2d, sincos_encoding_2d


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_encoding_of_low_precision_points_is_that_of_the_points_they_hold(dtype):
    g = torch.linspace(0, 1, 33)
    points = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).to(dtype)
    got = sincos_encoding_2d(points, 64)
    exact = sincos_encoding_2d(points.double(), 64)  # the same (rounded) points, in float64
    assert got.dtype == dtype
    assert (got.double() - exact).abs().max() <= torch.finfo(dtype).eps  # one rounding of values in [-1, 1]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_patch_embedding_cast_to_low_precision_encodes_the_patch_centres_as_float32_does(dtype):
    torch.manual_seed(0)
    embed = PatchEmbed2d(3, 32, 4, pos="sincos")
    g = torch.linspace(0, 1, 16)
    coords = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1)[None].to(dtype)
    reference = embed.positional(coords.float(), (4, 4))  # the same (rounded) coordinates, in float32
    low = embed.to(dtype).positional(coords, (4, 4))
    assert low.dtype == dtype
    assert (low.double() - reference.double()).abs().max() <= torch.finfo(dtype).eps
