"""Patch embedding and recovery as operators (opformer.nn.patch)."""

import pytest
import torch

from opformer.nn.patch import (
    PatchEmbed2d,
    PatchExpand2d,
    PatchMerge2d,
    PatchRecover2d,
    crop,
    pad_to_multiple,
    patch_centres,
    patchify,
    sincos_encoding_2d,
    unpatchify,
)


def meshgrid(h, w):
    return torch.stack(torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij"), -1)[None]


def piecewise_constant(batch, hp, wp, p, c, seed=0):
    """A field constant on each p x p patch: (batch, hp*p, wp*p, c)."""
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(batch, hp, wp, c, generator=g, dtype=torch.float64)
    return values.repeat_interleave(p, 1).repeat_interleave(p, 2)


def test_patchify_unpatchify_identity():
    x = torch.randn(2, 8, 12, 3)
    assert torch.equal(unpatchify(patchify(x, 4), 4), x)
    with pytest.raises(ValueError, match="multiple of the patch"):
        patchify(torch.randn(1, 7, 8, 1), 4)


def test_recover_inverts_embed_on_piecewise_constant_fields():
    """On a field constant on each patch, the embedding is v_k -> A v_k + b with A = sum over the patch's pixels of
    the pixel maps; a recovery whose every pixel map is the left inverse A^+ (bias -A^+ b) gives the field back."""
    torch.manual_seed(0)
    p, c, d = 4, 2, 8
    embed = PatchEmbed2d(c, d, p).double()
    recover = PatchRecover2d(d, c, p).double()
    w = embed.proj.weight.reshape(d, p * p, c)  # pixel maps, in patchify's (row, col, channel) order
    a = w.sum(1)  # (d, c)
    a_pinv = torch.linalg.pinv(a)  # (c, d)
    with torch.no_grad():
        recover.proj.weight.copy_(a_pinv.repeat(p * p, 1))
        recover.proj.bias.copy_((-a_pinv @ embed.proj.bias).repeat(p * p))
    v = piecewise_constant(3, 3, 2, p, c)
    torch.testing.assert_close(recover(embed(v)), v)
    u = v + 0.1 * torch.randn_like(v)  # not piecewise constant: not recovered
    assert (recover(embed(u)) - u).abs().max() > 1e-3


def test_sincos_is_a_function_of_position():
    """The sine-cosine encoding at the patch centres of a 16^2 and a 32^2 grid of [0, 1]^2 is the same function of
    the centres (evaluated wherever they are)."""
    d = 12
    embed = PatchEmbed2d(1, d, 4, pos="sincos")
    for n in (16, 32):
        coords = meshgrid(n, n)
        centres = patch_centres(coords, 4)
        torch.testing.assert_close(embed.positional(coords, (n // 4, n // 4)), sincos_encoding_2d(centres, d))
    assert embed(torch.randn(2, 32, 32, 1), meshgrid(32, 32)).shape == (2, 8, 8, d)


def test_learned_encoding_resamples_to_another_token_grid():
    embed = PatchEmbed2d(1, 6, 2, pos="learned", pos_grid=4)
    assert embed(torch.randn(1, 8, 8, 1)).shape == (1, 4, 4, 6)
    torch.testing.assert_close(embed.positional(None, (4, 4)), embed.pos_table.permute(0, 2, 3, 1))
    assert embed(torch.randn(1, 12, 16, 1)).shape == (1, 6, 8, 6)


def test_pad_crop_and_merge_expand_shapes():
    x = torch.randn(2, 7, 5, 3)
    y = pad_to_multiple(x, 4)
    assert y.shape == (2, 8, 8, 3) and torch.equal(crop(y, 7, 5), x)
    assert torch.equal(y[:, 7], y[:, 6])  # replicate padding
    t = torch.randn(2, 5, 6, 8)
    merged = PatchMerge2d(8)(t)
    assert merged.shape == (2, 3, 3, 16)
    assert PatchExpand2d(16, 8)(merged).shape == (2, 6, 6, 8)
