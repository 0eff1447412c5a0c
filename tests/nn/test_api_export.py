"""``torch.export`` of a model that uses the attention layers: every kind exports, in training and evaluation mode,
and the exported program computes what the eager layer does (the fused CPU paths, which write into preallocated
outputs, are left to eager runs; export traces the same function through the kernel path)."""

import pytest
import torch

from opformer.nn import EncoderLayer


class _Tiny(torch.nn.Module):
    """A user's model: a lift, one encoder layer, a head."""

    def __init__(self, kind: str):
        super().__init__()
        self.lift = torch.nn.Linear(1, 8)
        self.layer = EncoderLayer(8, 2, kind, dim_feedforward=16, pos_dim=1)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, u, pos):
        return self.head(self.layer(self.lift(u), pos))


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("kind", ["galerkin", "linear", "fourier", "softmax"])
def test_a_model_with_the_attention_exports_and_matches_eager(kind, mode, one_thread):
    torch.manual_seed(0)
    model = getattr(_Tiny(kind), mode)()  # no dropout: training mode computes the same function
    u, pos = torch.randn(2, 12, 1), torch.rand(2, 12, 1)
    program = torch.export.export(model, (u, pos))
    torch.testing.assert_close(program.module()(u, pos), model(u, pos), rtol=1e-5, atol=1e-6)
    u2 = torch.randn(2, 12, 1)  # the program is a function of its inputs, not a recording of one call
    torch.testing.assert_close(program.module()(u2, pos), model(u2, pos), rtol=1e-5, atol=1e-6)


def test_eager_runs_keep_the_fused_path_after_an_export(one_thread):
    layer = EncoderLayer(8, 2, "galerkin", dim_feedforward=16, pos_dim=1)
    x, pos = torch.randn(2, 12, 8, requires_grad=True), torch.rand(2, 12, 1)
    torch.export.export(layer, (x.detach(), pos))
    out = layer(x, pos)
    assert type(out.grad_fn).__name__ == "_ReluFFNResidualBackward"
    assert layer.attn._fused_applies(x, pos)
