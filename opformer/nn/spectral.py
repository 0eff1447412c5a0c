"""Spectral (Fourier) convolutions in 1D and 2D, channels-last (Li et al. 2021, FNO; Cao 2021 section 4 decoder).

A spectral convolution keeps the lowest ``modes`` Fourier coefficients of every input channel, multiplies them by
learned complex matrices (one ``in x out`` matrix per kept frequency), drops the other frequencies and transforms
back.  With ``norm="ortho"`` on both transforms the layer acts on the *function* sampled on the grid, not on the
sample vector: a band-limited input sampled on two grids gives the same output values at the shared points, which is
what lets a model trained at one resolution be evaluated at another.  On a grid too coarse to hold every kept
frequency, the layer keeps the ones the grid resolves (``kept_modes``) and leaves out the rest, which that grid
cannot carry in the input or the output: the operator restricted to the grid's band.  A band-limited input then
gives the same values at the shared points on a fine and on such a coarse grid.

Storage: complex weights are kept as real tensors with a trailing (re, im) axis of size 2, so ``numel()`` counts
real parameters (the paper's parameter budgets are real counts) and every optimizer sees real tensors; the forward
pass views them as complex (``torch.view_as_complex``), so the complex products are exact.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

__all__ = ["SpectralConv1d", "SpectralConv2d"]


def _init_complex_(weight: Tensor, in_channels: int, out_channels: int) -> None:
    """Real and imaginary parts i.i.d. U(-s, s), s = 1 / (in * out): the magnitude of the FNO reference init.

    FNO's own init is U(0, s) (non-zero mean); the paper's decoder uses an even smaller Xavier-normal gain.  The
    spectral path therefore starts almost silent and the pointwise path carries the signal at first; with Adam the
    weights grow at the learning rate's pace, whatever their initial size.
    """
    s = 1.0 / (in_channels * out_channels)
    with torch.no_grad():
        weight.uniform_(-s, s)


class SpectralConv1d(nn.Module):
    """1D spectral convolution plus an optional pointwise linear path.

    ``y = irfft(W . rfft(x)[:modes]) + Linear(x)`` with rfft/irfft in ``norm="ortho"``, ``W[k]`` a learned complex
    ``in x out`` matrix for each kept frequency ``k < modes``, the other frequencies set to zero.  The linear path
    (with bias) is FNO's 1x1 convolution ``W`` and the decoder's residual path; ``pointwise=False`` leaves only the
    spectral part.

    Shapes: ``x`` (batch, n, in_channels) -> (batch, n, out_channels); on a grid with ``n // 2 + 1 < modes`` only the
    first ``n // 2 + 1`` frequencies are kept.
    Parameters: ``in * out * modes * 2`` (+ ``in * out + out`` for the pointwise path).
    """

    def __init__(self, in_channels: int, out_channels: int, modes: int, *, pointwise: bool = True):
        super().__init__()
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels), ("modes", modes)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.in_channels, self.out_channels, self.modes = in_channels, out_channels, modes
        self.weight = nn.Parameter(torch.empty(in_channels, out_channels, modes, 2))
        _init_complex_(self.weight, in_channels, out_channels)
        self.linear: Optional[nn.Linear] = nn.Linear(in_channels, out_channels) if pointwise else None

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, modes={self.modes}"

    def _check(self, x: Tensor) -> None:
        if x.dim() != 3 or x.shape[-1] != self.in_channels:
            raise ValueError(
                f"SpectralConv1d expects x of shape (batch, n, in_channels={self.in_channels}), got {tuple(x.shape)}"
            )

    def kept_modes(self, n: int) -> int:
        """The frequencies kept on a grid of ``n`` points: ``modes``, or fewer where the grid resolves fewer."""
        return min(self.modes, n // 2 + 1)

    def spectral(self, x: Tensor) -> Tensor:
        """The spectral part alone: ``irfft(W . rfft(x)[:modes])``, (batch, n, in) -> (batch, n, out)."""
        self._check(x)
        n = x.shape[1]
        m = self.kept_modes(n)
        dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        x_hat = torch.fft.rfft(x.to(dtype), dim=1, norm="ortho")  # (batch, n//2+1, in)
        w = torch.view_as_complex(self.weight[:, :, :m].to(dtype))  # (in, out, m)
        y_hat = x_hat.new_zeros(x.shape[0], n // 2 + 1, self.out_channels)
        y_hat[:, :m] = torch.einsum("bki,iok->bko", x_hat[:, :m], w)
        return torch.fft.irfft(y_hat, n=n, dim=1, norm="ortho").to(x.dtype)

    def forward(self, x: Tensor) -> Tensor:
        y = self.spectral(x)
        return y if self.linear is None else y + self.linear(x)


class SpectralConv2d(nn.Module):
    """2D spectral convolution plus an optional pointwise linear path.

    ``y = irfft2(W . rfft2(x)) + Linear(x)`` over the two grid axes with ``norm="ortho"``.  Of the rfft2 coefficients
    ``X[k1, k2]`` (``k1`` in ``0..H-1``, ``k2`` in ``0..W//2``) the blocks ``k1 < m, k2 < m`` (weights ``weight1``)
    and ``k1 >= H - m, k2 < m`` (the negative first-axis frequencies, ``weight2``) are kept, all others set to zero.

    Shapes: ``x`` (batch, H, W, in_channels) -> (batch, H, W, out_channels).  All ``modes`` are kept where
    ``H >= 2 * modes`` (the two blocks do not overlap) and ``W // 2 + 1 >= modes``; on a coarser grid the blocks
    shrink to the frequencies it resolves (``kept_modes``: ``0..ceil(H/2)-1`` and ``-H//2..-1`` on the first axis,
    ``0..W//2`` on the second).  Rectangular grids are fine.
    Parameters: ``2 * in * out * modes**2 * 2`` (+ ``in * out + out`` for the pointwise path).
    """

    def __init__(self, in_channels: int, out_channels: int, modes: int, *, pointwise: bool = True):
        super().__init__()
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels), ("modes", modes)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.in_channels, self.out_channels, self.modes = in_channels, out_channels, modes
        self.weight1 = nn.Parameter(torch.empty(in_channels, out_channels, modes, modes, 2))
        self.weight2 = nn.Parameter(torch.empty(in_channels, out_channels, modes, modes, 2))
        _init_complex_(self.weight1, in_channels, out_channels)
        _init_complex_(self.weight2, in_channels, out_channels)
        self.linear: Optional[nn.Linear] = nn.Linear(in_channels, out_channels) if pointwise else None

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, modes={self.modes}"

    def _check(self, x: Tensor) -> None:
        if x.dim() != 4 or x.shape[-1] != self.in_channels:
            raise ValueError(
                f"SpectralConv2d expects x of shape (batch, H, W, in_channels={self.in_channels}), "
                f"got {tuple(x.shape)}"
            )

    def kept_modes(self, h: int, w: int) -> tuple[int, int, int]:
        """Frequencies kept on an ``h x w`` grid: (non-negative first-axis, negative first-axis, second-axis), each
        ``modes`` unless the grid resolves fewer."""
        m = self.modes
        return min(m, (h + 1) // 2), min(m, h // 2), min(m, w // 2 + 1)

    def spectral(self, x: Tensor) -> Tensor:
        """The spectral part alone, (batch, H, W, in) -> (batch, H, W, out)."""
        self._check(x)
        b, h, w, _ = x.shape
        m = self.modes
        mp, mn, m2 = self.kept_modes(h, w)
        dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        x_hat = torch.fft.rfft2(x.to(dtype), dim=(1, 2), norm="ortho")  # (batch, H, W//2+1, in)
        # weight1[..., k, :] acts on frequency k, weight2[..., j, :] on frequency j - m (the last mn of them kept)
        w1 = torch.view_as_complex(self.weight1[:, :, :mp, :m2].to(dtype))  # (in, out, mp, m2)
        w2 = torch.view_as_complex(self.weight2[:, :, m - mn :, :m2].to(dtype))
        y_hat = x_hat.new_zeros(b, h, w // 2 + 1, self.out_channels)
        y_hat[:, :mp, :m2] = torch.einsum("bxyi,ioxy->bxyo", x_hat[:, :mp, :m2], w1)
        y_hat[:, h - mn :, :m2] = torch.einsum("bxyi,ioxy->bxyo", x_hat[:, h - mn :, :m2], w2)
        return torch.fft.irfft2(y_hat, s=(h, w), dim=(1, 2), norm="ortho").to(x.dtype)

    def forward(self, x: Tensor) -> Tensor:
        y = self.spectral(x)
        return y if self.linear is None else y + self.linear(x)
