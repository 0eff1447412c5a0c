"""The benchmark's output: every record has the documented fields, sizes that do not fit are reported as skipped
(never crash), and the CLI writes the JSON list and the plot.  No timing is asserted (the CPU is shared)."""

import argparse
import json
import math

import pytest

from opformer.bench import REQUIRED_FIELDS, bench_attention, bench_model, estimate_memory_bytes, loglog_slope
from opformer.bench.cases import attention_case
from opformer.bench.cli import register
from opformer.bench.runner import machine_with_rates, run_case
from opformer.bench.suite import write_json

SMALL = dict(d_model=16, n_heads=2, batch=1, repeats=1, warmup=1)


@pytest.fixture(scope="module")
def machine():
    return machine_with_rates("cpu", size=128)


def _check_record(r):
    for field in REQUIRED_FIELDS:
        assert field in r, field
    assert r["status"] in ("ok", "skipped", "failed")
    assert isinstance(r["machine"], dict) and r["machine"]["cpu"] and r["machine"]["torch"]
    assert r["matmul_gflops_fp32"] > 0
    if r["status"] == "ok":
        assert r["seconds_fwd_bwd"] > 0 and r["flops_fwd_bwd"] > 0
        assert r["gflops_per_s"] == pytest.approx(r["flops_fwd_bwd"] / r["seconds_fwd_bwd"] / 1e9)
        assert isinstance(r["peak_memory_bytes"], int) and r["memory_method"]
        assert 0 < r["fraction_of_matmul_rate"]


def test_records_have_the_schema_and_survive_json(tmp_path, machine):
    recs = bench_attention(["galerkin", "fourier"], [32, 64], isolate=False, machine=machine, **SMALL)
    assert [(r["kind"], r["n"]) for r in recs] == [("galerkin", 32), ("galerkin", 64), ("fourier", 32), ("fourier", 64)]
    path = tmp_path / "b.json"
    write_json(recs, str(path))
    loaded = json.loads(path.read_text())
    assert isinstance(loaded, list) and len(loaded) == 4
    for r in loaded:
        _check_record(r)
        assert r["status"] == "ok", r["note"]
        assert (r["d_model"], r["n_heads"], r["batch"]) == (16, 2, 1)


def test_sizes_over_the_memory_budget_are_skipped_with_a_note(machine):
    n = 4096
    budget = estimate_memory_bytes(attention_case("galerkin", n, **SMALL))  # galerkin fits, fourier does not
    assert estimate_memory_bytes(attention_case("fourier", n, **SMALL)) > 10 * budget
    gal, fou = bench_attention(["galerkin", "fourier"], [n], max_memory=budget, isolate=False, machine=machine, **SMALL)
    assert gal["status"] == "ok", gal["note"]
    assert fou["status"] == "skipped" and "exceeds the budget" in fou["note"] and fou["seconds_fwd_bwd"] is None
    _check_record(fou)


def test_a_worker_that_dies_is_reported_as_skipped_not_raised(machine):
    rec = run_case(attention_case("galerkin", 64, **SMALL), machine=machine, isolate=True, timeout=0.01)
    assert rec["status"] == "skipped" and "timed out" in rec["note"]
    _check_record(rec)


def test_memory_estimate_orders_match_the_kinds():
    est = {k: [estimate_memory_bytes(attention_case(k, n)) for n in (4096, 16384)] for k in ("galerkin", "fourier")}
    assert est["galerkin"][1] == 4 * est["galerkin"][0]  # O(n)
    assert est["fourier"][1] > 12 * est["fourier"][0]  # O(n^2) dominates
    chunked = [estimate_memory_bytes(attention_case("fourier", n, chunk_size=256)) for n in (4096, 16384)]
    assert chunked[1] == 4 * chunked[0]  # O(n * chunk)


def test_cli_writes_json_and_plot(tmp_path):
    parser = argparse.ArgumentParser(prog="opformer")
    register(parser.add_subparsers(dest="command", required=True))
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    args = parser.parse_args(
        ["bench", "attention", "--kinds", "galerkin", "--n", "16", "64", "--d-model", "8",
         "--heads", "2", "--batch", "1", "--repeats", "1", "--in-process", "--matmul-size", "128",
         "--json", str(out), "--plot", str(png)]
    )
    assert args.func(args) == 0
    recs = json.loads(out.read_text())
    assert len(recs) == 2 and all(r["status"] == "ok" for r in recs)
    assert png.stat().st_size > 1000


def test_cli_rejects_an_unknown_kind():
    parser = argparse.ArgumentParser(prog="opformer")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", "attention", "--kinds", "nope", "--n", "16", "--matmul-size", "64"])
    assert args.func(args) == 2


def test_loglog_slope_recovers_a_power_law():
    ns = [512, 2048, 8192]
    assert loglog_slope(ns, [3e-9 * n**2 for n in ns]) == pytest.approx(2.0)
    assert loglog_slope([512], [1.0]) is None
    assert math.isclose(loglog_slope(ns, [n for n in ns]), 1.0)


def test_model_preset_bench(machine):
    pytest.importorskip("opformer.models")
    (rec,) = bench_model("burgers-gt", [64], batch=1, repeats=1, isolate=False, machine=machine)
    _check_record(rec)
    assert rec["status"] == "ok", rec["note"]
    assert rec["preset"] == "burgers-gt" and rec["parameters"] > 0


@pytest.mark.parametrize("extra, said", [
    (["--json", "{tmp}"], "is a directory"), (["--plot", "{tmp}/a-file/p.png"], "is a file, not a directory"),
    (["--n", "0"], "--n must be >= 1"), (["--heads", "3"], "--d-model 8 must be a multiple of --heads 3"),
])
def test_cli_checks_its_arguments_and_outputs_before_it_runs(tmp_path, capsys, extra, said):
    """Bad outputs and arguments: one line and exit 2 before any timing (nothing written, no traceback)."""
    (tmp_path / "a-file").write_text("mine")
    parser = argparse.ArgumentParser(prog="opformer")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", "attention", "--kinds", "galerkin", "--n", "16", "--d-model", "8",
                              "--heads", "2", "--in-process", "--matmul-size", "64",
                              *[e.format(tmp=tmp_path) for e in extra]])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_cli_makes_the_folder_of_its_json(tmp_path):
    parser = argparse.ArgumentParser(prog="opformer")
    register(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "new" / "dir" / "r.json"
    args = parser.parse_args(["bench", "attention", "--kinds", "galerkin", "--n", "16", "--d-model", "8",
                              "--heads", "2", "--batch", "1", "--repeats", "1", "--in-process", "--matmul-size", "64",
                              "--json", str(out)])
    assert args.func(args) == 0 and len(json.loads(out.read_text())) == 1
