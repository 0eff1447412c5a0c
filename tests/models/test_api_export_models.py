"""Every model built by name exports with ``torch.export`` and the exported program predicts what the model does
(the attention models failed: their fused CPU paths write into preallocated outputs, which export refuses)."""

import pytest
import torch

from opformer.models import build_model, example_inputs

CONFIGS = {
    "transformer1d": dict(name="transformer1d", d_model=8, num_layers=1, n_heads=2, dim_feedforward=16,
                          decoder_width=6, decoder_ffn=6, modes=4),
    "transformer2d": dict(name="transformer2d", d_model=12, num_layers=1, n_heads=2, dim_feedforward=16,
                          decoder_width=4, decoder_ffn=8, modes=3, coarse_size=5, boundary="dirichlet"),
    "transformer1d-linear": dict(name="transformer1d", kind="linear", d_model=8, num_layers=1, n_heads=2,
                                 dim_feedforward=16, decoder_width=6, decoder_ffn=6, modes=4),
    "fno1d": dict(name="fno1d", width=6, modes=4, num_layers=2, head_width=8),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_model_built_by_name_exports_and_predicts_as_itself(name, one_thread):
    torch.manual_seed(0)
    model = build_model(CONFIGS[name]).eval()
    x, coords = example_inputs(model, batch=2, resolution=12)
    program = torch.export.export(model, (x, coords))
    torch.testing.assert_close(program.module()(x, coords), model(x, coords), rtol=1e-5, atol=1e-6)
