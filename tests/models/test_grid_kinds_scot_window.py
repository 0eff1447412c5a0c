"""scOT with a window larger than a stage's token grid.

The window blocks padded the token grid up to the window: a 4 x 4 token grid with window 8 was attended as one
window of 64 tokens, 48 of them padding (masked, but scored, and 16 times the scores).  As in Swin, the window is now
clamped to the token grid (its longer side): the whole grid is one window of its own tokens, without a shift, and
the model computes what it computes with that window set by hand.  A token grid larger than the window keeps it."""

import copy

import pytest
import torch

from opformer.models import build_model

SCOT = {"name": "scot", "embed_dim": 8, "depths": [2], "num_heads": [2], "patch_size": 2}


def grid(h, w):
    x, y = ((torch.arange(n, dtype=torch.float64) + 0.5) / n for n in (h, w))
    return torch.stack(torch.meshgrid(x, y, indexing="ij"), -1)[None]


def smooth(c):
    return torch.sin(2 * torch.pi * c[..., :1] + 1) * torch.cos(2 * torch.pi * c[..., 1:])


def windows_seen(model, x, c):
    """The model's output and, per window block, (windows, tokens per window) its attention scored."""
    seen = []
    handles = [block.attn.qkv.register_forward_pre_hook(lambda mod, args: seen.append(tuple(args[0].shape[:2])))
               for block in model.encoder[0]]
    y = model(x, c)
    for handle in handles:
        handle.remove()
    return y, seen


@pytest.mark.parametrize("h, w, side", [(8, 8, 4), (6, 10, 5)])
def test_a_window_larger_than_the_token_grid_is_clamped_to_it(h, w, side):
    torch.manual_seed(0)
    model = build_model({**SCOT, "window_size": 8}).double().eval()
    c = grid(h, w)
    y, seen = windows_seen(model, smooth(c), c)
    assert seen == [(1, side * side)] * 2  # one window per block, the token grid's (no padding on a square one)
    # the same weights with the window set to the token grid's side and no shift, by hand
    clamped = copy.deepcopy(model)
    for block in clamped.encoder[0]:
        block.attn.window_size, block.attn.shift = side, 0
    torch.testing.assert_close(y, clamped(smooth(c), c), rtol=0, atol=1e-12)


def test_a_token_grid_larger_than_the_window_keeps_it():
    torch.manual_seed(0)
    model = build_model({**SCOT, "window_size": 2}).double().eval()
    c = grid(8, 8)
    y, seen = windows_seen(model, smooth(c), c)
    assert seen == [(4, 4)] * 2  # four 2 x 2 windows; the second block's shifted by one token
    unshifted = copy.deepcopy(model)
    unshifted.encoder[0][1].attn.shift = 0
    assert (y - unshifted(smooth(c), c)).abs().max() > 1e-6
