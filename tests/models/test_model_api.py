"""The uniform model interface: shapes at several resolutions, the batch-dict call, configs, and input checks."""

import math

import pytest
import torch

from opformer.models import (
    FNO1d,
    FNO2d,
    Transformer1d,
    Transformer2d,
    build_model,
    default_coarse_size,
    default_coords,
    example_inputs,
    model_config,
)
from opformer.nn.cinn import resize2d

# tiny variants of each class (same structure as the presets, small widths) keep these tests fast
TINY = {
    "transformer1d": dict(name="transformer1d", d_model=8, num_layers=2, n_heads=2, dim_feedforward=16,
                          decoder_width=6, decoder_ffn=6, modes=4),
    "transformer2d": dict(name="transformer2d", d_model=12, num_layers=2, n_heads=2, dim_feedforward=16,
                          decoder_width=4, decoder_ffn=8, modes=3, coarse_size=5, boundary="dirichlet"),
    "transformer2d-inverse": dict(name="transformer2d", d_model=12, num_layers=1, n_heads=2, dim_feedforward=16,
                                  decoder="pointwise", decoder_width=12, decoder_layers=1, coarse_size=6, out_size=6),
    "fno1d": dict(name="fno1d", width=6, modes=4, num_layers=2, head_width=8),
    "fno2d": dict(name="fno2d", width=4, modes=3, num_layers=2, head_width=8),
}


@pytest.mark.parametrize("kind", ["galerkin", "fourier", "softmax", "linear"])
@pytest.mark.parametrize("n", [8, 33, 128])
def test_transformer1d_maps_n_points_to_n_points(kind, n):
    model = build_model({**TINY["transformer1d"], "kind": kind})
    x, c = example_inputs(model, batch=2, resolution=n)
    assert model(x, c).shape == (2, n, 1)


@pytest.mark.parametrize("name", ["transformer2d", "fno2d"])
@pytest.mark.parametrize("n", [7, 15, 29])
def test_2d_forward_models_map_the_fine_grid_to_itself(name, n):
    model = build_model(TINY[name])
    x, c = example_inputs(model, batch=2, resolution=n)
    assert model(x, c).shape == (2, n, n, 1)


@pytest.mark.parametrize("n", [9, 17, 30])
def test_inverse_models_return_the_target_grid(n):
    """Inverse problem: input on the fine grid, output on the out_size x out_size target grid, at any fine size."""
    inv = build_model(TINY["transformer2d-inverse"])
    fno = build_model({**TINY["fno2d"], "out_size": 6})
    x, c = example_inputs(inv, batch=2, resolution=n)
    assert inv(x, c).shape == (2, 6, 6, 1)
    assert fno(x, c).shape == (2, 6, 6, 1)


def test_fno1d_shapes_and_batch_dict_call():
    model = build_model(TINY["fno1d"])
    x, c = example_inputs(model, batch=3, resolution=16)
    torch.testing.assert_close(model({"input": x, "coords": c, "target": x}), model(x, c))
    assert model(x, c[:1]).shape == (3, 16, 1)  # a shared grid (batch 1) broadcasts


def test_batch_dict_call_matches_positional_call_2d():
    torch.manual_seed(0)
    model = build_model(TINY["transformer2d"]).eval()
    x, c = example_inputs(model, batch=2, resolution=11)
    torch.testing.assert_close(model({"input": x, "coords": c}), model(x, c))


def test_multichannel_inputs_and_outputs():
    m1 = build_model({**TINY["transformer1d"], "in_channels": 3, "out_channels": 2})
    x, c = example_inputs(m1, batch=2, resolution=12)
    assert x.shape == (2, 12, 3) and m1(x, c).shape == (2, 12, 2)
    m2 = build_model({**TINY["fno2d"], "in_channels": 2, "out_channels": 3})
    x, c = example_inputs(m2, batch=1, resolution=8)
    assert m2(x, c).shape == (1, 8, 8, 3)


def test_fno2d_accepts_rectangular_grids():
    model = build_model(TINY["fno2d"])
    t1, t2 = torch.linspace(0, 1, 8), torch.linspace(0, 1, 12)
    c = torch.stack(torch.meshgrid(t1, t2, indexing="ij"), dim=-1)[None]
    assert model(torch.randn(2, 8, 12, 1), c).shape == (2, 8, 12, 1)


def test_dirichlet_boundary_zeroes_exactly_the_outer_ring():
    torch.manual_seed(0)
    model = build_model(TINY["transformer2d"])
    x, c = example_inputs(model, batch=2, resolution=9)
    y = model(x, c)
    ring = torch.ones(9, 9, dtype=torch.bool)
    ring[1:-1, 1:-1] = False
    assert torch.all(y[:, ring] == 0)
    assert torch.all(y[:, 1:-1, 1:-1] != 0)
    free = build_model({**TINY["transformer2d"], "boundary": None})
    assert torch.all(free(x, c)[:, ring] != 0)


def test_output_transform_is_applied_before_the_boundary_condition():
    """A target de-normalizer set as output_transform acts first; the ring is then zero in physical units."""
    model = build_model(TINY["transformer2d"])
    x, c = example_inputs(model, batch=1, resolution=9)
    model.output_transform = lambda y: 3.0 * y + 1.0
    y = model(x, c)
    assert torch.all(y[:, 0] == 0) and torch.all(y[:, 1:-1, 1:-1] != 0)


@pytest.mark.parametrize("variant", ["transformer2d", "transformer2d-inverse"])
def test_input_skip_gives_the_decoder_the_input_resampled_to_the_output_grid(variant):
    """With the attention path silenced (the upscaler's output replaced by zeros), the output still follows the input
    with input_skip, and is the decoder applied to [coordinates, input on the output grid]; without it, it does
    not depend on the input at all."""
    torch.manual_seed(0)
    cfg = {**TINY[variant], "boundary": None}
    for skip in (False, True):
        model = build_model({**cfg, "input_skip": skip}).eval()
        model.upscaler.register_forward_hook(lambda mod, args, out: torch.zeros_like(out))
        x, c = example_inputs(model, batch=2, resolution=11)
        y1, y2 = model(x, c), model(2.0 * x + 1.0, c)
        if not skip:
            torch.testing.assert_close(y1, y2, rtol=0, atol=0)
            continue
        assert (y1 - y2).abs().max() > 1e-3
        n_o = model.grid_sizes(11)[1]
        feats = torch.zeros(2, n_o, n_o, model.config.d_model)
        extra = torch.cat([resize2d(c, n_o), resize2d(x, n_o)], -1)
        torch.testing.assert_close(y1, model.decoder(feats, extra))


def test_coarse_grid_coordinates_are_the_meshgrid_of_linspace():
    """The attention sees the bilinear restriction of the fine coordinates: for meshgrid(linspace(0,1,n_f)) that is
    exactly meshgrid(linspace(0,1,n_c)) (checked by capturing the encoder's pos)."""
    model = build_model(TINY["transformer2d"])
    seen = {}
    model.encoder.register_forward_pre_hook(lambda mod, args: seen.__setitem__("pos", args[1]))
    x, c = example_inputs(model, batch=2, resolution=13)
    model(x, c)
    expected = default_coords(5, 2, batch=2).reshape(2, 25, 2)
    torch.testing.assert_close(seen["pos"], expected, rtol=0, atol=1e-6)


def test_coarse_size_rule():
    """Without coarse_size: round(0.3 (n_f - 1)) + 1, which gives the paper's 141 -> 43."""
    assert [default_coarse_size(n) for n in (141, 211, 85, 29, 2)] == [43, 64, 26, 9, 2]
    model = build_model({**TINY["transformer2d"], "coarse_size": None})
    assert model.grid_sizes(29) == (9, 29)
    assert model.grid_sizes(141) == (43, 141)


def test_to_config_round_trip_rebuilds_the_same_architecture():
    for cfg in TINY.values():
        model = build_model(cfg)
        clone = build_model(model.to_config())
        clone.load_state_dict(model.state_dict())  # same parameter names and shapes
        assert clone.to_config() == model.to_config()


def test_constructors_take_configs_or_keywords():
    assert isinstance(Transformer1d(d_model=8, n_heads=1, dim_feedforward=8, decoder_width=4, modes=4), Transformer1d)
    assert isinstance(FNO1d(model_config(TINY["fno1d"])), FNO1d)
    assert isinstance(FNO2d(), FNO2d) and isinstance(Transformer2d(), Transformer2d)
    with pytest.raises(ValueError, match=r"unknown key 'widht'.*did you mean 'width'"):
        FNO1d(widht=3)


def test_models_are_deterministic_in_eval_mode():
    """No always-on dropout: two eval passes agree (the reference's p=0.5 bug is not the default)."""
    torch.manual_seed(0)
    model = build_model({**TINY["transformer1d"], "dropout": 0.1, "attn_dropout": 0.1}).eval()
    x, c = example_inputs(model, batch=2, resolution=16)
    torch.testing.assert_close(model(x, c), model(x, c), rtol=0, atol=0)


# ---------------------------------------------------------------- errors


def test_build_model_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"unknown key 'd_modle'.*did you mean 'd_model'"):
        build_model({**TINY["transformer1d"], "d_modle": 8})
    with pytest.raises(ValueError, match=r"did you mean 'spatial_fc'"):
        build_model({**TINY["transformer2d"], "spacial_fc": True})
    with pytest.raises(ValueError, match=r"unknown model name 'transformer_1d'.*did you mean 'transformer1d'"):
        build_model({"name": "transformer_1d"})
    with pytest.raises(ValueError, match=r"needs a 'name' key"):
        build_model({"d_model": 8})
    with pytest.raises(ValueError, match=r"kind must be one of"):
        build_model({**TINY["transformer1d"], "kind": "galerkn"})
    with pytest.raises(ValueError, match=r"divisible by n_heads"):
        build_model({**TINY["transformer1d"], "n_heads": 3})
    with pytest.raises(ValueError, match=r"boundary must be one of"):
        build_model({**TINY["transformer2d"], "boundary": "neumann"})


def test_settings_of_other_kinds_are_refused_not_ignored():
    # chunk_size only acts where an n x n matrix is formed, fourier_order only on the fourier kind
    for kind in ("galerkin", "linear"):
        with pytest.raises(ValueError, match=rf"chunk_size applies to .*fourier, softmax.*kind is {kind}"):
            build_model({**TINY["transformer1d"], "kind": kind, "chunk_size": 16})
    for kind in ("galerkin", "linear", "softmax"):
        with pytest.raises(ValueError, match=rf"fourier_order applies to kind fourier only; .*kind is {kind}"):
            build_model({**TINY["transformer1d"], "kind": kind, "fourier_order": "linear"})
    for kind in ("fourier", "softmax"):  # where they act, they are taken
        assert build_model({**TINY["transformer1d"], "kind": kind, "chunk_size": 16}) is not None
    assert build_model({**TINY["transformer1d"], "kind": "fourier", "fourier_order": "quadratic"}) is not None


def test_models_predict_on_grids_coarser_than_their_modes_and_say_what_they_keep():
    """A grid that resolves fewer Fourier modes than a model keeps is evaluated with the modes it resolves (the
    spectral layers' band-limited consistency is tested in tests/nn/test_spectral.py); the note says how many."""
    torch.manual_seed(0)
    for key, n, kept in (("transformer1d", 5, 3), ("fno1d", 4, 3), ("transformer2d", 5, 2), ("fno2d", 4, 2)):
        model = build_model(TINY[key]).double()
        x, c = example_inputs(model, batch=2, resolution=n)
        assert torch.isfinite(model(x.double(), c.double())).all()
        grid = (n,) * model.spatial_dim
        assert f"resolves {kept} of the {TINY[key]['modes']} Fourier modes" in model.resolution_note(grid)
        assert model.resolution_note((16,) * model.spatial_dim) is None


def test_bad_inputs_raise_value_errors_saying_what_was_expected():
    m1, m2 = build_model(TINY["transformer1d"]), build_model(TINY["transformer2d"])
    x1, c1 = example_inputs(m1, batch=2, resolution=16)
    x2, c2 = example_inputs(m2, batch=2, resolution=11)
    with pytest.raises(ValueError, match=r"expects 1 input channel\(s\).*got shape \(2, 16, 2\)"):
        m1(torch.randn(2, 16, 2), c1)
    with pytest.raises(ValueError, match=r"\(batch, n, channels=1\) \(3 dims\), got \(16, 1\)"):
        m1(torch.randn(16, 1), c1)
    with pytest.raises(ValueError, match=r"coords of shape \(2, 16, 1\).*got \(2, 15, 1\)"):
        m1(x1, c1[:, :15])
    with pytest.raises(ValueError, match=r"coords of shape \(2, 11, 11, 2\).*got \(2, 11, 11, 1\)"):
        m2(x2, c2[..., :1])
    with pytest.raises(ValueError, match=r"needs a square grid \(H == W\), got input of shape \(2, 11, 9, 1\)"):
        m2(torch.randn(2, 11, 9, 1), c2[:, :, :9])
    with pytest.raises(ValueError, match=r"needs a grid of at least 2 points, got n=1"):
        m1(torch.randn(2, 1, 1), c1[:, :1])
    with pytest.raises(ValueError, match=r"needs keys 'input' and 'coords'; missing \['coords'\]"):
        m1({"input": x1})
    with pytest.raises(TypeError, match=r"coords must be a tensor"):
        m1(x1)
    # another dtype than the weights': one line naming both, not torch's "mat1 and mat2" from inside the first layer
    with pytest.raises(ValueError, match=r"input is float64 but the model's parameters are float32: convert one of "
                                         r"them \(input.to\(torch.float32\) or model.to\(torch.float64\)\)"):
        m1(x1.double(), c1)
    with pytest.raises(ValueError, match=r"input is int64 but the model's parameters are float32: give "
                                         r"floating-point values"):
        m1(torch.ones(2, 16, 1, dtype=torch.int64), c1)


def test_example_inputs_shapes_and_grids():
    x, c = example_inputs("burgers-gt", batch=3, resolution=64)
    assert x.shape == (3, 64, 1) and c.shape == (3, 64, 1)
    torch.testing.assert_close(c[0, :, 0], torch.arange(64) / 64)  # periodic grid, values in [0, 1)
    x, c = example_inputs("darcy-fno", batch=2, resolution=15)
    assert x.shape == (2, 15, 15, 1) and c.shape == (2, 15, 15, 2)
    assert c[0, -1, 0, 0] == 1 and c[0, 0, -1, 1] == 1 and c[0, 0, 0].abs().sum() == 0
    x, c = example_inputs("darcy-inverse-gt", batch=1)
    assert x.shape == (1, 141, 141, 1)  # default: the paper's fine grid
    x1, _ = example_inputs(TINY["fno1d"], batch=1, resolution=8, seed=3)
    x2, _ = example_inputs(TINY["fno1d"], batch=1, resolution=8, seed=3)
    assert torch.equal(x1, x2) and not math.isnan(x1.sum().item())
    with pytest.raises(ValueError, match=r"unknown model preset 'burgers-xt'"):
        example_inputs("burgers-xt")
