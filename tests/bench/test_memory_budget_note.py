"""``--max-memory`` below 1 GiB: the skip note gives both sizes in MiB, never "0.0 GiB exceeds the budget 0.0 GiB"."""

from opformer.bench import bench_attention


def test_small_budget_note_shows_mib():
    machine = {"cpu": "test", "matmul_gflops_fp32": 1.0}
    recs = bench_attention(["galerkin"], [512], max_memory=int(0.01 * 2**30), machine=machine,
                           d_model=128, n_heads=4, batch=4)
    (rec,) = recs
    assert rec["status"] == "skipped"
    assert "0.0 GiB" not in rec["note"] and "exceeds the budget 10.2 MiB" in rec["note"], rec["note"]
    assert "MiB" in rec["note"].split("exceeds")[0]


def test_large_budget_note_keeps_gib():
    machine = {"cpu": "test", "matmul_gflops_fp32": 1.0}
    (rec,) = bench_attention(["softmax"], [2**17], max_memory=2**30, machine=machine, batch=4)
    assert rec["status"] == "skipped" and rec["note"].endswith("exceeds the budget 1.0 GiB"), rec["note"]
