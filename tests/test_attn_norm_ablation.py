"""scripts/attn_norm_ablation.py: the fourier kind keeps only the per-head norms asked for, or starts its output
projection smaller; other kinds are untouched; a wrong norm name is refused before anything runs."""

import pytest
import torch

from opformer.nn.attention import SimpleAttention

from .conftest import load_script


@pytest.fixture
def restore_init(monkeypatch):
    monkeypatch.setattr(SimpleAttention, "__init__", SimpleAttention.__init__)  # undone after the test


def test_norms_kept_are_the_ones_named_and_the_function_follows(restore_init):
    mod = load_script("attn_norm_ablation")
    torch.manual_seed(0)
    full = SimpleAttention(16, 2, "fourier", 2, norm=True)
    mod.patch({"k"}, 1.0)
    torch.manual_seed(0)
    konly = SimpleAttention(16, 2, "fourier", 2, norm=True)
    assert sorted(full.norms.keys()) == ["k", "q"] and list(konly.norms.keys()) == ["k"]
    # the same weights; the output is the eq. 4 layer's with the Q norm taken out (Q raw, K normed)
    x, pos = torch.randn(3, 10, 16), torch.rand(3, 10, 2)
    assert torch.equal(full.qkv.weight, konly.qkv.weight)
    q, k, v = torch.nn.functional.linear(x, full.qkv.weight, full.qkv.bias).view(3, 10, 3, 2, 8).unbind(2)
    k = torch.nn.functional.layer_norm(k, (8,), eps=full.norm_eps)
    ph = pos[:, :, None].expand(3, 10, 2, 2)
    q, k, v = (torch.cat((ph, t), -1).transpose(1, 2) for t in (q, k, v))
    z = (q @ (k.transpose(-1, -2) @ v) / 10).transpose(1, 2).reshape(3, 10, 20)
    assert torch.allclose(konly(x, pos), full.out_proj(z), atol=1e-5)
    assert not torch.allclose(full(x, pos), konly(x, pos), atol=1e-3)
    galerkin = SimpleAttention(16, 2, "galerkin", 2, norm=True)
    assert sorted(galerkin.norms.keys()) == ["k", "v"]  # other kinds untouched


def test_out_proj_gain_scales_the_start_only_where_q_is_normed(restore_init):
    mod = load_script("attn_norm_ablation")
    torch.manual_seed(0)
    plain = SimpleAttention(16, 2, "fourier", 2, norm=True)
    torch.manual_seed(0)
    regular_before = SimpleAttention(16, 2, "fourier", 2, norm=False)
    mod.patch(None, 0.01)
    torch.manual_seed(0)
    small = SimpleAttention(16, 2, "fourier", 2, norm=True)
    torch.manual_seed(0)
    regular_after = SimpleAttention(16, 2, "fourier", 2, norm=False)  # no Q norm: left as it was
    assert torch.allclose(small.out_proj.weight, 0.01 * plain.out_proj.weight)
    assert torch.equal(regular_after.out_proj.weight, regular_before.out_proj.weight)


def test_a_norm_the_kind_does_not_have_is_refused(restore_init, capsys):
    mod = load_script("attn_norm_ablation")
    with pytest.raises(SystemExit):
        mod.main(["--norms", "v", "--", "train", "darcy-ft-cpu"])
    assert "the fourier kind's norms are q and k" in capsys.readouterr().err
    assert mod.main(["train", "darcy-ft-cpu"]) == 2  # no "--": the usage line


def test_help_shows_the_help_and_exits_0(capsys):
    """`--help` without `--` used to get the usage error (status 2) instead of the help."""
    mod = load_script("attn_norm_ablation")
    with pytest.raises(SystemExit) as exc:
        mod.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--norms" in out and "--out-proj-gain" in out and "-- train PRESET" in out
