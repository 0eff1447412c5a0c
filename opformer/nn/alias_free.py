"""Band-limited resampling and the alias-free activation of the Convolutional Neural Operator (CNO).

Fields are channels-last grids (batch, H, W, C) read as samples of a periodic function on [0, 1)^2 whose Fourier
modes lie below the grid's Nyquist frequency (band-limited).  Resampling keeps the modes that both grids represent
(|k| <= (min(n, m) - 1) // 2 per axis; the Nyquist mode of an even grid is dropped, it is not a real mode of a
band-limited function) and pads the rest with zeros, so a band-limited function is resampled exactly.

The activation sigma is not band-limited even when its argument is: applied pointwise on the grid, its high
frequencies fold back (alias) into the low ones.  :class:`AliasFreeActivation2d` applies it on a grid ``up`` times
finer (band-limited interpolation), then low-pass filters back to the band of the input grid and samples there:
upsample, activate, filter, downsample.  What aliases is only the part of sigma(u) above ``up`` times the input's
Nyquist frequency (the filter tolerance).
"""

from __future__ import annotations

from typing import Sequence, Union

import torch
from torch import Tensor, nn

from .activations import activation as _activation

__all__ = ["fourier_resample2d", "AliasFreeActivation2d"]


def _pair(size: Union[int, Sequence[int]]) -> tuple[int, int]:
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(s, int) and s >= 1 for s in pair):
        raise ValueError(f"size must be a positive int or a pair of positive ints, got {size!r}")
    return pair  # type: ignore[return-value]


def fourier_resample2d(x: Tensor, size: Union[int, Sequence[int]], channels_last: bool = True,
                       shift=None) -> Tensor:
    """Band-limited (trigonometric) resampling of a periodic grid to ``size``: (batch, H, W, C) -> (batch, h, w, C)
    (``channels_last=False``: (batch, C, H, W) -> (batch, C, h, w)).  Returns ``x`` when the size is unchanged and
    there is no ``shift``.

    Keeps the modes |k_1| <= (min(H, h) - 1) // 2 and |k_2| <= (min(W, w) - 1) // 2; exact for functions band-limited
    to those modes (values at the new points are the trigonometric interpolant's).  The input's point (i, j) is read
    at (i / H, j / W) of the period [0, 1)^2; the output's point (i, j) samples the interpolant at (i / h + s_1,
    j / w + s_2), ``shift = (s_1, s_2)`` (numbers or 0-dim tensors, in units of the period; None: no shift).  A grid
    of cell centres (i + 1/2) / n is resampled to the cell centres of another with s = 1 / (2 h) - 1 / (2 H)."""
    h, w = _pair(size)
    y = x.permute(0, 3, 1, 2) if channels_last else x
    H, W = y.shape[-2], y.shape[-1]
    if (H, W) == (h, w) and shift is None:
        return x
    dtype = y.dtype
    spec = torch.fft.rfft2(y.float() if dtype in (torch.float16, torch.bfloat16) else y, norm="forward")
    kh, kw = (min(H, h) - 1) // 2, (min(W, w) - 1) // 2
    out = spec.new_zeros(*spec.shape[:-2], h, w // 2 + 1)
    out[..., : kh + 1, : kw + 1] = spec[..., : kh + 1, : kw + 1]
    if kh > 0:
        out[..., h - kh :, : kw + 1] = spec[..., H - kh :, : kw + 1]
    if shift is not None:  # the interpolant at the points moved by the shift: a phase per mode
        real = out.real.dtype
        k1 = torch.fft.fftfreq(h, 1.0 / h, dtype=real, device=out.device)[:, None]
        k2 = torch.arange(w // 2 + 1, dtype=real, device=out.device)[None, :]
        s1, s2 = (torch.as_tensor(s, dtype=real, device=out.device) for s in shift)
        out = out * torch.polar(torch.ones_like(k1 * k2), 2 * torch.pi * (k1 * s1 + k2 * s2))
    z = torch.fft.irfft2(out, s=(h, w), norm="forward").to(dtype)
    return z.permute(0, 2, 3, 1) if channels_last else z


class AliasFreeActivation2d(nn.Module):
    """sigma applied without aliasing: band-limited upsampling by ``up``, sigma pointwise, low-pass filter to the
    input grid's band and downsampling to ``out_size`` (default: the input grid; half of it in a CNO down block).

    ``x`` (batch, C, H, W) channels first (it sits between convolutions) -> (batch, C, *out_size)."""

    def __init__(self, activation_name: str = "gelu", up: int = 2):
        super().__init__()
        if not isinstance(up, int) or up < 1:
            raise ValueError(f"up must be a positive int, got {up!r}")
        self.act, self.up = _activation(activation_name), up

    def forward(self, x: Tensor, out_size=None) -> Tensor:
        h, w = x.shape[-2], x.shape[-1]
        fine = fourier_resample2d(x, (self.up * h, self.up * w), channels_last=False)
        return fourier_resample2d(self.act(fine), out_size or (h, w), channels_last=False)
