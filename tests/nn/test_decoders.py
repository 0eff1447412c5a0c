"""Decoders: the reference's parameter counts, shapes, and the symmetries of their building blocks."""

import pytest
import torch

from opformer.nn import PointwiseDecoder, SpectralDecoder1d, SpectralDecoder2d


def _count(module):
    return sum(p.numel() for p in module.parameters())


def test_parameter_counts_match_the_reference_decoders():
    """ex1 spectral 230,593; ex2 spectral with coordinate lift 1,190,305; ex3 pointwise 74,689 (the reference
    implementation's counts, docs/models.md)."""
    assert _count(SpectralDecoder1d(96, 48, 1, modes=16, num_layers=2, ffn_width=48)) == 230_593
    assert _count(SpectralDecoder2d(128, 32, 1, modes=12, num_layers=2, ffn_width=128, coord_dim=2)) == 1_190_305
    assert _count(PointwiseDecoder(192, 192, 1, num_layers=1, coord_dim=2)) == 74_689


def test_shapes():
    torch.manual_seed(0)
    assert SpectralDecoder1d(8, 6, 2, modes=4)(torch.randn(3, 20, 8)).shape == (3, 20, 2)
    assert SpectralDecoder2d(8, 6, 1, modes=3, coord_dim=2)(torch.randn(2, 9, 7, 8), torch.rand(1, 9, 7, 2)).shape == (
        2, 9, 7, 1,
    )
    pw = PointwiseDecoder(8, 6, 3, num_layers=2, coord_dim=1)
    assert pw(torch.randn(2, 11, 8), torch.rand(2, 11, 1)).shape == (2, 11, 3)
    assert PointwiseDecoder(8, 6, 1)(torch.randn(2, 5, 4, 8)).shape == (2, 5, 4, 1)


def test_spectral_decoders_commute_with_circular_shifts():
    """Without the coordinate lift every layer (pointwise linear, Fourier multiplier, pointwise activation, pointwise
    head) commutes with periodic translations, hence so does the decoder."""
    torch.manual_seed(0)
    d1 = SpectralDecoder1d(4, 5, 1, modes=4).double()
    d2 = SpectralDecoder2d(4, 5, 1, modes=3).double()
    x1, x2 = torch.randn(2, 16, 4, dtype=torch.float64), torch.randn(2, 8, 9, 4, dtype=torch.float64)
    torch.testing.assert_close(d1(torch.roll(x1, 3, dims=1)), torch.roll(d1(x1), 3, dims=1))
    torch.testing.assert_close(d2(torch.roll(x2, (2, 5), dims=(1, 2))), torch.roll(d2(x2), (2, 5), dims=(1, 2)))


def test_pointwise_decoder_acts_on_each_point_alone():
    """Permuting the points (and their coordinates) permutes the outputs: no mixing between points."""
    torch.manual_seed(0)
    dec = PointwiseDecoder(4, 6, 2, num_layers=2, coord_dim=2).double()
    x, c = torch.randn(2, 30, 4, dtype=torch.float64), torch.rand(2, 30, 2, dtype=torch.float64)
    perm = torch.randperm(30)
    torch.testing.assert_close(dec(x[:, perm], c[:, perm]), dec(x, c)[:, perm])


def test_coordinate_lift_uses_the_coordinates():
    """With coord_dim > 0 the first layer is Linear([x, coords]); changing the coordinates changes the output."""
    torch.manual_seed(0)
    dec = SpectralDecoder2d(3, 4, 1, modes=2, coord_dim=2)
    x = torch.randn(1, 6, 6, 3)
    assert not torch.allclose(dec(x, torch.zeros(1, 6, 6, 2)), dec(x, torch.ones(1, 6, 6, 2)))


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match=r"needs coords"):
        SpectralDecoder1d(4, 4, modes=2, coord_dim=1)(torch.randn(1, 8, 4))
    with pytest.raises(ValueError, match=r"coords of shape \(1, 8, 1\)"):
        SpectralDecoder1d(4, 4, modes=2, coord_dim=1)(torch.randn(1, 8, 4), torch.rand(1, 9, 1))
    with pytest.raises(ValueError, match=r"in_channels=4"):
        SpectralDecoder2d(4, 4, modes=2)(torch.randn(1, 8, 8, 3))
    # a grid too coarse for the modes is no error: the 6 frequencies that 10 points hold are kept
    # (tests/nn/test_spectral.py checks which ones)
    assert torch.isfinite(SpectralDecoder1d(4, 4, modes=9)(torch.randn(1, 10, 4))).all()
    with pytest.raises(ValueError, match=r"unknown activation"):
        PointwiseDecoder(4, 4, activation="tanhh")
