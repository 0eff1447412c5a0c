"""The 2D attention kinds of the bench (window, patched), the 2D models of ``bench model``, and the lecture's
complexity statements checked on exact FLOP counts (torch.utils.flop_counter): softmax O(N^2), patched
O(N^2 / p^4), windowed O(N M^2), Galerkin O(N d^2).  No timing is asserted (the CPU is shared)."""

import argparse
import json
from fractions import Fraction

import pytest

from opformer.bench import bench_attention, bench_model, estimate_memory_bytes, loglog_slope
from opformer.bench.cases import GRID_MODELS, attention_case, build_case, grid_side, model_case
from opformer.bench.cli import register
from opformer.bench.measure import count_flops, count_flops_fake, fwd_bwd_step
from opformer.bench.plot import fit_slopes
from opformer.bench.runner import machine_with_rates

SMALL = dict(d_model=16, n_heads=2, batch=1)


def _flops(kind, n, fake=True, **kw):
    module, inputs = build_case(attention_case(kind, n, **{**SMALL, **kw}))
    return (count_flops_fake if fake else lambda m, *i: count_flops(fwd_bwd_step(m, *i)))(module, *inputs)


@pytest.fixture(scope="module")
def machine():
    return machine_with_rates("cpu", size=128)


@pytest.mark.parametrize("kind", ["window", "patched", "softmax", "galerkin", "fourier", "linear"])
def test_fake_tensor_flop_count_equals_the_real_one(kind):
    """The shape-only count (used below at sizes too large to run) is the count of the real forward+backward."""
    assert _flops(kind, 1024, fake=True) == _flops(kind, 1024, fake=False) > 0


# n = 2^18 -> 2^20 points (grid side 512 -> 1024): large enough that the leading term dominates at d_model 16
BIG = (2**18, 2**20)


@pytest.mark.parametrize("kind,slope", [("softmax", 2.0), ("patched", 2.0), ("window", 1.0), ("galerkin", 1.0)])
def test_flop_slopes_match_the_lecture(kind, slope):
    s = loglog_slope(BIG, [_flops(kind, n) for n in BIG])
    assert s == pytest.approx(slope, abs=0.02)


def test_patched_costs_one_over_p4_of_softmax_at_equal_n():
    n = BIG[1]
    for p in (2, 4):
        ratio = _flops("patched", n, patch=p) / _flops("softmax", n)
        assert ratio == pytest.approx(1 / p**4, rel=0.02)


def _quadratic_fit(ns, fs):
    """Exact (c, a, b) of f = c + a n + b n^2 through the first three points (Fractions)."""
    (n1, n2, n3), (f1, f2, f3) = ns[:3], fs[:3]
    d1, d2 = Fraction(f2 - f1, n2 - n1), Fraction(f3 - f2, n3 - n2)
    b = (d2 - d1) / (n3 - n1)
    a = d1 - b * (n1 + n2)
    return f1 - a * n1 - b * n1 * n1, a, b


@pytest.mark.parametrize("p", [2, 4])
def test_quadratic_terms_are_exactly_one_over_p4_apart(p):
    """FLOPs are c + a N + b N^2 exactly (a fourth point is predicted); b(patched) / b(softmax) = 1 / p^4."""
    ns = [(s * p) ** 2 for s in (4, 8, 12, 16)]
    fits = {}
    for kind in ("softmax", "patched"):
        fs = [_flops(kind, n, patch=p) for n in ns]
        c, a, b = _quadratic_fit(ns, fs)
        assert c + a * ns[3] + b * ns[3] ** 2 == fs[3]
        fits[kind] = b
    assert fits["softmax"] > 0
    assert fits["patched"] / fits["softmax"] == Fraction(1, p**4)


def test_window_flops_grow_with_the_window_area():
    """O(N M^2): at fixed N the score products grow as M^2 (the projections and MLP do not depend on M)."""
    n = 64**2
    f = {m: _flops("window", n, window=m) for m in (4, 8, 16)}
    assert f[16] - f[8] == pytest.approx(4 * (f[8] - f[4]), rel=0.02)


def test_galerkin_flops_grow_as_d_squared():
    """O(N d^2): at fixed N, doubling d_model (and the heads, so d_head stays) multiplies the FLOPs by about 4."""
    n = 2**14
    f1 = _flops("galerkin", n, d_model=32, n_heads=2)
    f2 = _flops("galerkin", n, d_model=64, n_heads=4)
    assert 3.5 < f2 / f1 <= 4.0


def test_2d_kinds_need_a_perfect_square():
    assert grid_side(16384) == 128
    with pytest.raises(ValueError, match="not a perfect square"):
        attention_case("window", 1000)
    with pytest.raises(ValueError, match="not a multiple of the patch"):
        attention_case("patched", 36**2, patch=8)
    with pytest.raises(ValueError, match="not a perfect square"):
        model_case("vit", 1000)
    attention_case("galerkin", 1000)  # 1D kinds take any n


def test_cli_rejects_a_non_square_n_in_one_line(capsys):
    parser = argparse.ArgumentParser(prog="opformer")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", "attention", "--kinds", "window", "galerkin", "--n", "1000"])
    assert args.func(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "perfect square" in err and "1024" in err


def test_memory_estimates_of_the_2d_kinds():
    est = {k: [estimate_memory_bytes(attention_case(k, n)) for n in (4096, 16384)] for k in ("window", "patched")}
    assert est["window"][1] == 4 * est["window"][0]  # O(N M^2): linear at fixed M
    assert 0 < est["patched"][0] < estimate_memory_bytes(attention_case("softmax", 4096))


def test_cli_runs_the_new_kinds_and_prints_slopes(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="opformer")
    register(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "r.json"
    args = parser.parse_args(
        ["bench", "attention", "--kinds", "window", "patched", "softmax", "--n", "256", "1024", "--d-model", "8",
         "--heads", "2", "--batch", "1", "--repeats", "1", "--in-process", "--matmul-size", "64", "--threads", "1",
         "--window", "4", "--patch", "2", "--json", str(out)]
    )
    assert args.func(args) == 0
    recs = json.loads(out.read_text())
    assert [r["status"] for r in recs] == ["ok"] * 6
    window = [r for r in recs if r["kind"] == "window"]
    patched = [r for r in recs if r["kind"] == "patched"]
    assert {r["window_size"] for r in window} == {4} and [r["grid_side"] for r in window] == [16, 32]
    assert [r["tokens"] for r in patched] == [64, 256] and {r["patch_size"] for r in patched} == {2}
    text = capsys.readouterr().out
    assert "log-log slopes" in text and "window (M 4)" in text and "patched (p 2)" in text
    assert "patched (p 2) / softmax FLOPs at n=1024" in text
    slopes = fit_slopes(recs)
    assert slopes["softmax"]["flops_fwd_bwd"] > 1.5 and slopes["window (M 4)"]["flops_fwd_bwd"] < 1.1


@pytest.mark.parametrize("name", ["scot", "vit", "unet", "deeponet", "cno", "vit-gt", "vit-ft", "scot-galerkin"])
def test_bench_model_runs_the_2d_models(name, machine):
    """Every 2D model by name, also under the names `opformer train --model` uses for the attention variants."""
    assert name in GRID_MODELS
    (rec,) = bench_model(name, [256], batch=1, repeats=1, isolate=False, machine=machine)
    assert rec["status"] == "ok", rec["note"]
    assert rec["preset"] == name and rec["grid_side"] == 16 and rec["parameters"] > 0 and rec["flops_fwd_bwd"] > 0


def test_bench_attention_records_the_grid(machine):
    (rec,) = bench_attention(["window"], [256], isolate=False, machine=machine, repeats=1, window=4, **SMALL)
    assert rec["status"] == "ok", rec["note"]
    assert (rec["grid_side"], rec["tokens"], rec["window_size"]) == (16, 256, 4)
