"""``opformer bench attention|model|train``: a bad flag value is refused up front, in one line naming the flag
(exit 2), before any matmul rate or case is measured; ``--plot`` with one n says there are no slopes (no "nan")."""

import argparse
import types

import pytest

from opformer.bench import cli


def _run(argv, capsys):
    rc = cli.main(["bench", *argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fail the test if a check lets the command reach the thread choice or the measurements."""

    def boom(*a, **k):
        raise AssertionError("the command ran past its flag checks")

    monkeypatch.setattr(cli, "_threads", boom)
    import opformer.bench.runner as runner

    monkeypatch.setattr(runner, "machine_with_rates", boom)


@pytest.mark.parametrize("argv, flag", [
    (["attention", "--n", "512", "--threads", "0"], "--threads"),
    (["attention", "--n", "512", "--chunk-size", "0"], "--chunk-size"),
    (["attention", "--n", "512", "--chunk-size", "-3"], "--chunk-size"),
    (["attention", "--n", "512", "--max-memory", "-1"], "--max-memory"),
    (["attention", "--n", "512", "--max-memory", "0"], "--max-memory"),
    (["attention", "--n", "512", "--timeout", "-1"], "--timeout"),
    (["attention", "--n", "512", "--matmul-size", "0"], "--matmul-size"),
    (["attention", "--n", "512", "--device", "foo"], "--device"),
    (["attention", "--n", "512", "--plot", "plot.txt"], "--plot"),
    (["attention", "--n", "512", "--dtype", "tf32"], "--dtype tf32"),  # a GPU mode: on the CPU, float32 renamed
    (["model", "burgers-gt", "--n", "512", "--dtype", "tf32"], "--dtype tf32"),
    (["model", "burgers-gt", "--n", "512", "--repeats", "0"], "--repeats"),
    (["model", "burgers-gt", "--n", "512", "--batch", "0"], "--batch"),
    (["model", "burgers-gt", "--n", "512", "--warmup", "0"], "--warmup"),
    (["model", "burgers-gt", "--n", "512", "--threads", "0"], "--threads"),
    (["model", "burgers-gt", "--n", "512", "--device", "cuda:x"], "--device"),
    (["train", "burgers-quick", "--repeats", "0"], "--repeats"),
    (["train", "burgers-quick", "--epochs", "0"], "--epochs"),
    (["train", "burgers-quick", "--threads", "0"], "--threads"),
    (["train", "burgers-quick", "--warmup", "-1"], "--warmup"),
])
def test_bad_flag_values_are_refused_in_one_line(argv, flag, capsys, nothing_runs):
    rc, out, err = _run(argv, capsys)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opformer: error: ") and flag in lines[0], err
    assert "Traceback" not in err


def test_cuda_without_a_gpu_is_refused_in_one_line(capsys, nothing_runs, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for argv in (["attention", "--n", "512", "--device", "cuda"], ["model", "burgers-gt", "--device", "cuda:0"]):
        rc, out, err = _run(argv, capsys)
        assert rc == 2 and err.count("\n") == 1 and "--device cuda" in err and "no CUDA device" in err, err


def test_plot_formats_matplotlib_writes_are_accepted():
    for name in ("a.png", "a.pdf", "a.svg", "a"):
        args = types.SimpleNamespace(plot=name)
        assert cli._check_numbers(args) is None


def test_plot_with_one_n_says_no_slopes_instead_of_nan(tmp_path, capsys):
    rec = dict(status="ok", what="attention", kind="galerkin", n=512, seconds_fwd_bwd=0.01,
               peak_memory_bytes=2**20, flops_fwd_bwd=10**9, d_model=16, n_heads=2, batch=1, layers=1,
               device="cpu", dtype="float32", machine={"cpu": "test"})
    args = argparse.Namespace(json=None, plot=str(tmp_path / "p.png"))
    assert cli._finish([rec], args) == 0
    out = capsys.readouterr().out
    assert "nan" not in out and "no slopes" in out and (tmp_path / "p.png").exists()
    rec2 = dict(rec, n=1024, seconds_fwd_bwd=0.02, peak_memory_bytes=2**21)
    assert cli._finish([rec, rec2], args) == 0
    out = capsys.readouterr().out
    assert "galerkin: time 1.00 memory 1.00" in out and "nan" not in out


@pytest.mark.parametrize("argv, said", [
    (["train", "burgers-quick:epochs=3"], "burgers-quick: epochs= is set by opformer bench train; use --epochs"),
    (["train", "burgers-quick", "--set", "epochs=3"], "--set: epochs= is set by opformer bench train; use --epochs"),
    (["train", "burgers-quick:accelerator=gpu"], "use --device"),
])
def test_train_override_of_a_field_the_bench_sets_is_refused(argv, said, capsys, nothing_runs):
    """``PRESET:epochs=3`` used to be replaced by --epochs without a word."""
    rc, out, err = _run(argv, capsys)
    assert rc == 2 and err.count("\n") == 1 and said in err, err


def test_reference_without_the_package_says_how_to_install_before_measuring(capsys, nothing_runs, monkeypatch):
    import opformer.bench.reference as reference

    monkeypatch.setattr(reference, "reference_available", lambda: False)
    rc, out, err = _run(["attention", "--kinds", "galerkin", "--n", "512", "--reference"], capsys)
    assert rc == 2 and err.count("\n") == 1
    assert "--reference" in err and "pip install --no-deps galerkin-transformer==0.2.1" in err, err


@pytest.mark.parametrize("kind", ["window", "patched"])
def test_reference_with_a_grid_kind_is_refused_in_one_line(kind, capsys, nothing_runs):
    """It used to run and fail per case with the reference package's UnboundLocalError (p_attn)."""
    rc, out, err = _run(["attention", "--kinds", "galerkin", kind, "--n", "1024", "--reference"], capsys)
    assert rc == 2 and err.count("\n") == 1 and f"kind '{kind}' has no reference implementation" in err, err
    assert "without --reference" in err


def test_attention_case_refuses_a_reference_comparison_of_a_grid_kind():
    from opformer.bench.cases import attention_case

    with pytest.raises(ValueError, match="no reference implementation"):
        attention_case("window", 1024, compare_reference=True)
    assert attention_case("galerkin", 1024, compare_reference=True)["compare_reference"]


def test_plot_help_says_the_format_follows_the_extension():
    """``--plot a.pdf`` writes a PDF (matplotlib picks the format from the name): the help said only "PNG"."""
    import argparse

    parser = argparse.ArgumentParser(prog="opformer")
    bench = cli.register(parser.add_subparsers())
    for name in ("attention", "model"):
        sub = bench._subparsers._group_actions[0].choices[name]
        text = sub.format_help()
        assert "extension" in text and ".pdf" in text, text


@pytest.mark.parametrize("sub", [["attention", "--n", "512"], ["model", "burgers-gt", "--n", "512"]])
def test_timeout_with_in_process_is_refused(sub, capsys, nothing_runs):
    """--timeout used to be ignored without a word under --in-process (only a worker process can be stopped)."""
    rc, out, err = _run([*sub, "--timeout", "5", "--in-process"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "--timeout" in err and "--in-process" in err, err
