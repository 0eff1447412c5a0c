"""Spectral convolutions: exact against dense DFT sums, translation equivariant, resolution consistent."""

import math

import pytest
import torch

from opformer.nn import SpectralConv1d, SpectralConv2d


def _dft_1d(x, modes):
    """X[b, k, i] = n^{-1/2} sum_j x[b, j, i] exp(-2 pi i j k / n) for k < modes, with an explicit DFT matrix."""
    n = x.shape[1]
    j, k = torch.arange(n, dtype=torch.float64), torch.arange(modes, dtype=torch.float64)
    f = torch.exp(-2j * math.pi * torch.outer(k, j) / n) / math.sqrt(n)  # (modes, n)
    return torch.einsum("kj,bji->bki", f, x.to(torch.complex128))


def _real_synthesis_1d(y_hat, n):
    """y[j] = n^{-1/2} sum_k c_k Re(Y_k exp(2 pi i j k / n)), c_0 = 1, c_{n/2} = 1, else 2 (a real Hermitian signal)."""
    modes = y_hat.shape[1]
    j = torch.arange(n, dtype=torch.float64)
    y = torch.zeros(y_hat.shape[0], n, y_hat.shape[2], dtype=torch.float64)
    for k in range(modes):
        c = 1.0 if (k == 0 or 2 * k == n) else 2.0
        phase = torch.exp(2j * math.pi * j * k / n)[None, :, None]
        y += c * (y_hat[:, k : k + 1, :] * phase).real / math.sqrt(n)
    return y


def _dense_spectral_1d(conv, x):
    w = torch.view_as_complex(conv.weight.detach().double().contiguous())  # (in, out, modes)
    x_hat = _dft_1d(x.double(), conv.modes)
    y_hat = torch.einsum("bki,iok->bko", x_hat, w)
    return _real_synthesis_1d(y_hat, x.shape[1])


@pytest.mark.parametrize("n, modes", [(16, 5), (17, 9), (16, 9), (33, 12)])  # (16, 9) keeps the Nyquist mode
def test_spectral_conv1d_equals_dense_dft_sum(n, modes):
    """irfft(W . rfft(x)[:modes]) equals the explicit sum over kept frequencies (float64, to round-off)."""
    torch.manual_seed(0)
    conv = SpectralConv1d(3, 4, modes, pointwise=False).double()
    with torch.no_grad():
        conv.weight.normal_()
    x = torch.randn(2, n, 3, dtype=torch.float64)
    torch.testing.assert_close(conv(x), _dense_spectral_1d(conv, x), rtol=1e-10, atol=1e-10)


def test_spectral_conv1d_pointwise_path_is_a_linear_layer():
    """forward = spectral part + Linear(x) (the FNO 1x1 conv / the decoder's residual path)."""
    torch.manual_seed(0)
    conv = SpectralConv1d(3, 2, 4).double()
    x = torch.randn(2, 12, 3, dtype=torch.float64)
    torch.testing.assert_close(conv(x), conv.spectral(x) + conv.linear(x))


def _dense_spectral_2d(conv, x):
    """Explicit 2D DFT over the kept blocks k1 in [0, m) u [H-m, H), k2 in [0, m), then the real synthesis."""
    b, h, w, _ = x.shape
    m = conv.modes
    w1 = torch.view_as_complex(conv.weight1.detach().double().contiguous())
    w2 = torch.view_as_complex(conv.weight2.detach().double().contiguous())
    j1, j2 = torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64)
    y = torch.zeros(b, h, w, conv.out_channels, dtype=torch.float64)
    xc = x.double().to(torch.complex128)
    for k1 in list(range(m)) + list(range(h - m, h)):
        weight = w1[:, :, k1] if k1 < m else w2[:, :, k1 - (h - m)]  # (in, out, m)
        for k2 in range(m):
            phase = torch.exp(-2j * math.pi * (torch.outer(j1, torch.ones(w)) * k1 / h + torch.outer(torch.ones(h), j2) * k2 / w))
            x_hat = torch.einsum("xy,bxyi->bi", phase, xc) / math.sqrt(h * w)
            y_hat = torch.einsum("bi,io->bo", x_hat, weight[:, :, k2])
            c = 1.0 if (k2 == 0 or 2 * k2 == w) else 2.0
            y += c * (y_hat[:, None, None, :] * phase.conj()[None, :, :, None]).real / math.sqrt(h * w)
    return y


@pytest.mark.parametrize("h, w, modes", [(8, 8, 3), (9, 7, 4), (10, 6, 4)])  # (10, 6, 4) keeps the Nyquist column
def test_spectral_conv2d_equals_dense_dft_sum(h, w, modes):
    """irfft2 of the two weighted low-frequency blocks equals the explicit DFT sum (float64, to round-off)."""
    torch.manual_seed(0)
    conv = SpectralConv2d(2, 3, modes, pointwise=False).double()
    with torch.no_grad():
        conv.weight1.normal_()
        conv.weight2.normal_()
    x = torch.randn(2, h, w, 2, dtype=torch.float64)
    torch.testing.assert_close(conv(x), _dense_spectral_2d(conv, x), rtol=1e-10, atol=1e-10)


def test_spectral_convs_commute_with_circular_shifts():
    """A Fourier multiplier (plus a pointwise map) is translation equivariant on the periodic grid."""
    torch.manual_seed(0)
    c1, c2 = SpectralConv1d(2, 3, 5).double(), SpectralConv2d(2, 3, 3).double()
    x1, x2 = torch.randn(2, 16, 2, dtype=torch.float64), torch.randn(2, 8, 10, 2, dtype=torch.float64)
    torch.testing.assert_close(c1(torch.roll(x1, 5, dims=1)), torch.roll(c1(x1), 5, dims=1))
    torch.testing.assert_close(c2(torch.roll(x2, (3, -4), dims=(1, 2))), torch.roll(c2(x2), (3, -4), dims=(1, 2)))


def test_spectral_conv_is_resolution_consistent_on_band_limited_input():
    """With orthonormal FFTs, a band-limited function sampled on n and 4n points gives the same output values
    at the shared points: the layer acts on the function, not on the sample vector."""
    torch.manual_seed(0)
    conv1, conv2 = SpectralConv1d(1, 2, 6).double(), SpectralConv2d(1, 2, 4).double()
    f = lambda x: torch.sin(2 * math.pi * x) + 0.3 * torch.cos(6 * math.pi * x + 0.2)  # noqa: E731
    for n in (16, 64):
        x = torch.arange(n, dtype=torch.float64) / n
        out = conv1(f(x)[None, :, None])
        if n == 16:
            coarse = out
    torch.testing.assert_close(out[:, ::4], coarse, rtol=1e-10, atol=1e-10)
    g = lambda x, y: torch.sin(2 * math.pi * x) * torch.cos(4 * math.pi * y) + torch.cos(2 * math.pi * y)  # noqa: E731
    outs = []
    for n in (12, 24):
        t = torch.arange(n, dtype=torch.float64) / n
        xx, yy = torch.meshgrid(t, t, indexing="ij")
        outs.append(conv2(g(xx, yy)[None, :, :, None]))
    torch.testing.assert_close(outs[1][:, ::2, ::2], outs[0], rtol=1e-10, atol=1e-10)


def test_spectral_parameter_counts_count_real_numbers():
    """Complex weights are stored as (re, im) pairs: in*out*modes*2 (+ in*out + out) real parameters."""
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(SpectralConv1d(64, 64, 16)) == 64 * 64 * 16 * 2 + 64 * 64 + 64  # one FNO1d layer: 135,232
    assert count(SpectralConv2d(32, 32, 12)) == 2 * 32 * 32 * 144 * 2 + 32 * 32 + 32  # one FNO2d layer: 590,880
    assert count(SpectralConv1d(96, 48, 16, pointwise=False)) == 147_456


def test_spectral_convs_reject_wrong_channels_and_modes():
    conv1 = SpectralConv1d(2, 2, 16)
    with pytest.raises(ValueError, match=r"in_channels=2"):
        conv1(torch.randn(1, 64, 3))
    with pytest.raises(ValueError, match=r"modes must be a positive int"):
        SpectralConv1d(2, 2, 0)


@pytest.mark.parametrize("coarse, factor", [(16, 3), (15, 3), (9, 4)])
def test_a_grid_too_coarse_for_the_modes_keeps_the_ones_it_resolves(coarse, factor):
    """Modes 12 on a grid of 16, 15 or 9 points a side (which hold 8/8, 8/7 and 5/4 non-negative/negative
    frequencies): a function band-limited below the coarse grid's Nyquist frequency gives, at the shared points,
    the output of a fine grid that holds all 12 modes.  The kept weights are the ones the fine grid uses for the
    same frequencies, so this fails if a block is shifted (weight2's last rows act on -mn..-1)."""
    torch.manual_seed(1)
    conv1, conv2 = SpectralConv1d(1, 2, 12).double(), SpectralConv2d(1, 2, 12).double()
    top = (coarse - 1) // 2  # the highest frequency both grids hold without aliasing
    fine = coarse * factor
    assert fine // 2 + 1 >= 12 and fine >= 24 and top < 12
    assert conv1.kept_modes(coarse) == min(12, coarse // 2 + 1)
    assert conv2.kept_modes(coarse, coarse) == ((coarse + 1) // 2, coarse // 2, min(12, coarse // 2 + 1))

    def f(t):
        return sum(torch.cos(2 * math.pi * k * t + 0.3 * k) / (1 + k) for k in range(top + 1))

    def g(x, y):
        return sum(torch.sin(2 * math.pi * (k * x - j * y) + 0.1 * k + 0.2 * j) / (1 + abs(k) + j)
                   for k in range(-top, top + 1) for j in range(top + 1))

    out1, out2 = [], []
    for n in (coarse, fine):
        t = torch.arange(n, dtype=torch.float64) / n
        out1.append(conv1(f(t)[None, :, None]))
        xx, yy = torch.meshgrid(t, t, indexing="ij")
        out2.append(conv2(g(xx, yy)[None, :, :, None]))
    torch.testing.assert_close(out1[1][:, ::factor], out1[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out2[1][:, ::factor, ::factor], out2[0], rtol=1e-10, atol=1e-10)


def test_spectral_conv_backward_reaches_the_complex_weights():
    conv = SpectralConv2d(2, 2, 3)
    conv(torch.randn(1, 8, 8, 2)).square().sum().backward()
    assert conv.weight1.grad is not None and conv.weight1.grad.abs().sum() > 0
    assert conv.weight2.grad is not None and conv.weight2.grad.abs().sum() > 0
