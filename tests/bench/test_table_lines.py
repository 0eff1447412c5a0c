"""The table lines of ``opformer bench``: the n= column stays aligned for long labels (patched, window), and a
``--compile`` case says so, with its ``--reference`` ratio marked as against the eager reference layer."""

import re

from opformer.bench import cli


def _ok(**kw):
    rec = dict(status="ok", kind="galerkin", n=4096, seconds_fwd_bwd=0.1, peak_memory_bytes=2**20,
               flops_fwd_bwd=10**9, gflops_per_s=10.0, loadavg=[1.0], note="")
    rec.update(kw)
    return rec


def test_n_column_aligned_for_long_labels(capsys):
    cli._log(_ok())
    cli._log(_ok(kind="patched", patch_size=4, tokens=1024, grid_side=128, n=16384))
    cli._log(_ok(kind="window", window_size=8, grid_side=128, n=16384))
    cli._log(dict(_ok(kind="patched", patch_size=4, tokens=64, grid_side=32, n=1024), status="skipped", note="x"))
    lines = capsys.readouterr().out.splitlines()
    assert len({line.index(" n=") for line in lines}) == 1, lines


def test_compiled_case_is_marked_and_its_reference_ratio_says_eager(capsys):
    cli._log(_ok(compile=True, reference_seconds_fwd_bwd=0.2, ratio_to_reference=0.5))
    cli._log(_ok(reference_seconds_fwd_bwd=0.2, ratio_to_reference=0.5))
    compiled, eager = capsys.readouterr().out.splitlines()
    assert "[compiled]" in compiled and "ref (eager, not compiled) 0.2000 s, ours/ref 0.500" in compiled
    assert "[compiled]" not in eager and re.search(r"  ref 0.2000 s, ours/ref 0.500", eager)
