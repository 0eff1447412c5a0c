"""Band-limited resampling and the CNO's alias-free activation (opformer.nn.alias_free)."""

import math

import pytest
import torch

from opformer.nn.alias_free import AliasFreeActivation2d, fourier_resample2d


pytestmark = pytest.mark.usefixtures("one_thread")


def band_limited(n, k_max=3, batch=2, channels=2, seed=0):
    """A random trigonometric polynomial with modes |k| <= k_max per axis, sampled on the n x n periodic grid j/n,
    channels first (batch, C, n, n), in float64."""
    g = torch.Generator().manual_seed(seed)
    x = torch.arange(n, dtype=torch.float64) / n
    out = torch.zeros(batch, channels, n, n, dtype=torch.float64)
    for k1 in range(-k_max, k_max + 1):
        for k2 in range(-k_max, k_max + 1):
            a, b = torch.randn(2, batch, channels, 1, 1, generator=g, dtype=torch.float64)
            phase = 2 * math.pi * (k1 * x[:, None] + k2 * x[None, :])
            out = out + a * torch.cos(phase) + b * torch.sin(phase)
    return out / (2 * k_max + 1)


def spectrum_beyond(y, k):
    """Largest |Fourier coefficient| of y (.., n, n) with max(|k1|, |k2|) > k."""
    s = torch.fft.fft2(y, norm="forward").abs()
    n = y.shape[-1]
    freq = torch.fft.fftfreq(n, 1.0 / n).abs()
    outside = (freq[:, None] > k) | (freq[None, :] > k)
    return s[..., outside].max()


def test_resampling_is_exact_on_band_limited_functions():
    u16, u24, u40 = (band_limited(n) for n in (16, 24, 40))
    torch.testing.assert_close(fourier_resample2d(u16, 40, channels_last=False), u40)
    torch.testing.assert_close(fourier_resample2d(u40, 16, channels_last=False), u16)
    torch.testing.assert_close(fourier_resample2d(u24, (16, 40), channels_last=False),
                               fourier_resample2d(u40, (16, 40), channels_last=False))  # rectangular, both exact
    x = u16.permute(0, 2, 3, 1)  # channels last, the default layout
    torch.testing.assert_close(fourier_resample2d(x, 40), u40.permute(0, 2, 3, 1))


@pytest.mark.parametrize("name", ["relu", "gelu"])
def test_activation_is_alias_free(name):
    """A band-limited input gives an output band-limited to the input grid's band, and the same continuous
    function whatever grid the input is sampled on (32 vs 64 points), up to the filter tolerance; the pointwise
    activation does not (its high frequencies fold back into the band)."""
    act = AliasFreeActivation2d(name, up=2)
    u32, u64 = band_limited(32, 4), band_limited(64, 4)
    y32, y64 = act(u32), act(u64)
    assert spectrum_beyond(y32, 15) < 1e-12  # band-limited to the 32-grid's band
    gap = (fourier_resample2d(y64, 32, channels_last=False) - y32).abs().max() / y32.abs().max()
    naive = torch.relu if name == "relu" else torch.nn.functional.gelu
    naive_gap = (fourier_resample2d(naive(u64), 32, channels_last=False) - naive(u32)).abs().max() / y32.abs().max()
    assert gap < 2e-2
    assert gap < naive_gap / 3
