"""``opformer bench`` as a new user meets it: a misspelt kind or model gets the nearest name, --dtype takes the
usual spellings, bad flags name themselves, Ctrl-C keeps the records measured so far, ``bench train`` checks every
case before it measures anything, says when it must generate a preset's data first, and its records carry the
machine's matmul rate like those of ``bench attention`` and ``bench model``."""

import json

import pytest

from opformer import cli as top
from opformer.bench import cli


def _run(argv, capsys):
    rc = top.main(["bench", *argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _boom(*a, **k):
    raise AssertionError("the command ran past its checks")


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fail the test if a check lets the command reach the thread choice, the measurements or a training."""
    import opformer.bench.runner as runner
    import opformer.bench.train as train

    monkeypatch.setattr(cli, "_threads", _boom)
    monkeypatch.setattr(runner, "machine_with_rates", _boom)
    monkeypatch.setattr(train, "train_overhead", _boom)


MACHINE = {"cpu": "Test CPU", "isa": "AVX2", "isa_flags": ["avx2", "fma"], "torch_cpu_capability": "AVX2",
           "cpu_count": 2, "cpus_available": 2, "torch_threads": 1, "torch": "2.13.0", "device": "cpu",
           "loadavg": [0.1, 0.1, 0.1], "matmul_gflops_fp32": 12.5, "matmul_size": 2048}


@pytest.fixture
def fake_machine(monkeypatch):
    """No thread choice and no matmul timing: a fixed machine record."""
    import opformer.bench.runner as runner

    monkeypatch.setattr(cli, "_threads", lambda args: 1)
    monkeypatch.setattr(runner, "machine_with_rates", lambda *a, **k: dict(MACHINE))


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("given, meant", [("galerkn", "galerkin"), ("Softmax", "softmax"), ("windw", "window")])
def test_a_misspelt_kind_gets_the_nearest_name(given, meant, capsys, nothing_runs):
    rc, out, err = _run(["attention", "--kinds", "galerkin", given, "--n", "64"], capsys)
    line = _one_error_line(err)
    assert rc == 2 and "--kinds" in line and f"did you mean {meant!r}" in line, line


@pytest.mark.parametrize("given, meant",
                         [("scot-smal", "scot-small"), ("vitgt", "vit-gt"), ("burgers-g", "burgers-gt")])
def test_a_misspelt_model_gets_the_nearest_name_of_either_set(given, meant, capsys, nothing_runs):
    """The nearest names used to come from the paper presets only: "scot-smal" got no suggestion."""
    rc, out, err = _run(["model", given, "--n", "64"], capsys)
    line = _one_error_line(err)
    assert rc == 2 and "did you mean" in line and repr(meant) in line.split("?")[0], line


@pytest.mark.parametrize("given, dtype", [("bf16", "bfloat16"), ("BFloat16", "bfloat16"), ("fp32", "float32")])
def test_dtype_takes_the_usual_spellings(given, dtype):
    args = top.build_parser().parse_args(["bench", "attention", "--dtype", given])
    assert args.dtype == dtype


@pytest.mark.parametrize("given", ["float16", "float64", "half"])
def test_a_dtype_that_is_not_measured_says_what_to_use(given, capsys, nothing_runs):
    with pytest.raises(SystemExit) as stop:
        top.main(["bench", "attention", "--n", "64", "--dtype", given])
    line = _one_error_line(capsys.readouterr().err)
    assert stop.value.code == 2 and "--dtype" in line and "not one of the dtypes measured" in line, line
    assert "float32" in line and "bfloat16" in line


@pytest.mark.parametrize("flag, kind", [("--window", "window"), ("--patch", "patched")])
def test_a_zero_window_or_patch_names_its_flag(flag, kind, capsys, nothing_runs):
    rc, out, err = _run(["attention", "--kinds", kind, "--n", "64", flag, "0"], capsys)
    line = _one_error_line(err)
    assert rc == 2 and f"{flag} must be >= 1" in line, line


def _interrupt_on(call: int):
    """A stand-in for run_case that returns a skipped record per case and raises KeyboardInterrupt on call ``call``
    (what Ctrl-C does in the middle of a case)."""
    calls = []

    def run_case(case, *, machine=None, **kw):
        calls.append(case["n"])
        if len(calls) == call:
            raise KeyboardInterrupt
        return dict(case, status="skipped", note="stand-in", machine=machine, loadavg=[0.1, 0.1, 0.1])

    return run_case


@pytest.mark.parametrize("argv, done, planned", [
    (["attention", "--kinds", "galerkin", "linear", "--n", "64", "128"], 2, 4),
    (["model", "burgers-gt", "burgers-lt", "--n", "64", "128"], 3, 4),
])
def test_ctrl_c_keeps_the_records_measured_so_far(argv, done, planned, tmp_path, capsys, fake_machine,
                                                  monkeypatch):
    """Ctrl-C in a sweep used to lose every record (--json never written) behind "opformer: interrupted"."""
    import opformer.bench.suite as suite

    monkeypatch.setattr(suite, "run_case", _interrupt_on(done + 1))
    out_file = tmp_path / "r.json"
    rc, out, err = _run([*argv, "--json", str(out_file)], capsys)
    line = _one_error_line(err)
    assert rc == 130 and f"interrupted after {done} of {planned} cases" in line and str(out_file) in line, line
    assert len(json.loads(out_file.read_text())) == done


def test_ctrl_c_before_the_first_record_writes_nothing(tmp_path, capsys, fake_machine, monkeypatch):
    import opformer.bench.suite as suite

    monkeypatch.setattr(suite, "run_case", _interrupt_on(1))
    out_file = tmp_path / "r.json"
    rc, out, err = _run(["attention", "--kinds", "galerkin", "--n", "64", "--json", str(out_file)], capsys)
    line = _one_error_line(err)
    assert rc == 130 and "interrupted after 0 of 1 cases" in line and not out_file.exists(), line


TRAIN_RECORD = dict(what="train", preset="burgers-quick", grid=[256], batch=8, steps=33, epoch_seconds=2.0,
                    bare_step_seconds=0.05, validation_seconds=0.1, checkpoint_seconds=0.01, gc_seconds=0.001,
                    overhead=1.2)


def test_train_ctrl_c_keeps_the_finished_cases(tmp_path, capsys, fake_machine, monkeypatch):
    import opformer.bench.train as train

    calls = []

    def overhead(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return dict(TRAIN_RECORD)

    monkeypatch.setattr(train, "train_overhead", overhead)
    out_file = tmp_path / "t.json"
    rc, out, err = _run(["train", "burgers-quick", "burgers-quick", "--json", str(out_file)], capsys)
    line = _one_error_line(err)
    assert rc == 130 and "interrupted after 1 of 2 cases" in line, line
    assert len(json.loads(out_file.read_text())) == 1


@pytest.mark.parametrize("argv, said", [
    (["train", "burgers-quick", "darcy-gt-cp"], "did you mean darcy-gt-cpu"),
    (["train", "burgers-quick", "burgers-quick:data=missing.npz"], "data=missing.npz: file not found"),
    (["train", "burgers-quick:no_such_field=1"], "no-such-field"),
])
def test_train_checks_every_case_before_anything_runs(argv, said, capsys, nothing_runs, tmp_path, monkeypatch):
    """A misspelt second preset, or a data file that is not there, used to be found only after the machine was
    measured and the first case had trained."""
    monkeypatch.chdir(tmp_path)
    rc, out, err = _run(argv, capsys)
    line = _one_error_line(err)
    assert rc == 2 and said in line.lower(), line
    assert out == ""


def test_train_names_the_first_case_it_refuses(capsys, nothing_runs, tmp_path, monkeypatch):
    """With two bad cases the line named the last one, after checking every case behind the first."""
    monkeypatch.chdir(tmp_path)
    rc, out, err = _run(["train", "burgers-quick:data=first.npz", "burgers-quick:data=second.npz"], capsys)
    line = _one_error_line(err)
    assert rc == 2 and "first.npz" in line and "second.npz" not in line, line


def test_train_says_when_it_must_generate_a_presets_data_first(tmp_path, capsys, fake_machine, monkeypatch):
    """Without a word, ``bench train darcy-gt-cpu`` on a fresh machine spent about 20 minutes generating data."""
    import opformer.bench.train as train

    monkeypatch.setenv("OPFORMER_DATA", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(train, "train_overhead", lambda *a, **k: dict(TRAIN_RECORD))
    rc, out, err = _run(["train", "burgers-quick"], capsys)
    assert rc == 0, err
    notes = [line for line in out.splitlines() if line.startswith("# note: burgers-quick:")]
    assert len(notes) == 1 and "not generated yet" in notes[0], out
    assert "opformer data prepare burgers-quick" in notes[0] and "burgers-quick:data=FILE" in notes[0]


def test_train_records_carry_the_machine_and_its_matmul_rate(tmp_path, capsys, fake_machine, monkeypatch):
    import opformer.bench.train as train

    monkeypatch.setattr(train, "train_overhead", lambda *a, **k: dict(TRAIN_RECORD))
    out_file = tmp_path / "t.json"
    rc, out, err = _run(["train", "burgers-quick", "--json", str(out_file)], capsys)
    assert rc == 0, err
    rec = json.loads(out_file.read_text())[0]
    assert rec["matmul_gflops_fp32"] == 12.5 and rec["machine"]["matmul_gflops_fp32"] == 12.5
    for field in ("cpu", "isa", "torch", "torch_threads"):
        assert rec["machine"][field] == MACHINE[field]
    assert rec["loadavg"]
    header = [line for line in out.splitlines() if line.startswith("# Test CPU")]
    assert len(header) == 1 and "AVX2" in header[0] and "matmul 12.5 GFLOP/s" in header[0], out


@pytest.mark.parametrize("argv", [
    ["model", "burgers-gt", "--n", "1000000000"],  # the default budget: 80% of the available memory
    ["model", "burgers-gt", "scot", "--n", "1048576", "--max-memory", "0.5"],
])
def test_a_model_size_that_cannot_fit_is_skipped_with_a_note(argv, tmp_path, capsys, fake_machine, monkeypatch):
    """Whole models had no memory estimate: every size was started, and one too large for the machine ended in
    the kernel's out-of-memory killer (which may pick another process than the worker)."""
    import opformer.bench.suite as suite

    monkeypatch.setattr(suite, "run_case", _boom)
    out_file = tmp_path / "m.json"
    rc, out, err = _run([*argv, "--json", str(out_file)], capsys)
    assert rc == 0, err
    records = json.loads(out_file.read_text())
    assert records and all(r["status"] == "skipped" and "exceeds the budget" in r["note"] for r in records)
    assert all(r["estimated_memory_bytes"] > 2**29 and r["machine"]["matmul_gflops_fp32"] for r in records)
    assert sum("skipped: estimated memory " in line for line in out.splitlines()) == len(records), out


@pytest.mark.parametrize("argv, said", [
    (["model", "burgers-gt", "--n", "1"], "model 'burgers-gt' at n=1: --n must be >= 2, got 1"),
    (["model", "scot", "--n", "4"], "model 'scot' at n=4"),
    (["model", "burgers-gt", "vit", "--n", "9"], "model 'vit' at n=9"),
])
def test_a_model_size_the_model_refuses_is_one_line_before_anything_runs(argv, said, capsys, nothing_runs):
    """It used to measure the machine, then fail case by case in the workers, and exit 1."""
    rc, out, err = _run(argv, capsys)
    line = _one_error_line(err)
    assert rc == 2 and said in line, line


def test_checking_a_model_size_leaves_the_callers_random_stream_alone():
    """The check builds the model under a fixed seed; that seed used to become the caller's torch random state."""
    import torch

    from opformer.bench.cases import check_model_size, model_case, model_memory_estimate_bytes

    torch.manual_seed(1234)
    state = torch.random.get_rng_state()
    check_model_size(model_case("burgers-gt", 64))
    assert model_memory_estimate_bytes(model_case("burgers-gt", 4096)) > 0
    assert torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.parametrize("argv", [
    ["attention", "--kinds", "galerkin", "--n", "64", "--json", ""],
    ["model", "burgers-gt", "--n", "64", "--plot", " "],
    ["train", "burgers-quick", "--json", ""],
])
def test_an_empty_output_file_name_is_refused(argv, capsys, nothing_runs):
    """``--json ""`` (an unset shell variable) used to run the whole sweep and write nothing, without a word."""
    rc, out, err = _run(argv, capsys)
    line = _one_error_line(err)
    assert rc == 2 and "needs a file name" in line, line


def test_a_2d_paper_preset_is_measured_at_its_own_grid_by_default(capsys, fake_machine, monkeypatch):
    """Every paper preset defaulted to n = 8192 points per dimension: for darcy-gt a grid of 8192^2 points."""
    import opformer.bench.suite as suite

    asked = {}

    def bench_model(preset, ns, **kw):
        asked[preset] = list(ns)
        return []

    monkeypatch.setattr(suite, "bench_model", bench_model)
    rc, out, err = _run(["model", "burgers-gt", "darcy-gt", "scot"], capsys)
    assert rc == 0, err
    assert asked == {"burgers-gt": [8192], "darcy-gt": [141], "scot": [16384]}


def test_train_shows_the_datas_warnings_in_one_line(tmp_path, capsys, fake_machine, monkeypatch):
    """A data file's notes (wrong-sign Darcy samples) came out as Python's two-line warning: the library's file and
    line number, then the source line of the call."""
    import warnings
    from pathlib import Path

    import opformer.bench.train as train

    def noted(*a, **k):
        warnings.warn_explicit("data: train split, samples 1, 2: the solution u has the wrong sign", UserWarning,
                               filename=str(Path(train.__file__).resolve()), lineno=173)
        return dict(TRAIN_RECORD)

    monkeypatch.setattr(train, "train_overhead", noted)
    rc, out, err = _run(["train", "burgers-quick"], capsys)
    assert rc == 0, err
    assert err.splitlines() == ["opformer: warning: data: train split, samples 1, 2: the solution u has the wrong sign"]
