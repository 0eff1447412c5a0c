"""A user's path through opformer: a new problem as a Task, one's own files with any keys and sample count, a
trained model loaded and run anywhere, and bad input refused before anything is written."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import opformer
import opformer.tasks.artifact  # noqa: F401  (the errors below are named through it)
from opformer.cli import main
from opformer.data.datasets import FieldDataset, read_blocks, sample_array, stride_for
from opformer.tasks import Bundle, Task, register_task, unregister_task
from opformer.tasks.base import open_pair, split_indices

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


# --- a problem the package does not know: the 1D heat equation, defined here --------------------------------------------
KAPPA, T_END = 0.01, 1.0


def heat_solution(u0: np.ndarray, t: float) -> np.ndarray:
    """Exact solution of u_t = kappa u_xx on the unit period: each Fourier mode k decays as exp(-4 pi^2 k^2 kappa t)."""
    n = u0.shape[-1]
    k = np.fft.rfftfreq(n, d=1.0 / n)
    return np.fft.irfft(np.fft.rfft(u0, axis=-1) * np.exp(-4 * np.pi**2 * k**2 * KAPPA * t), n=n, axis=-1)


def heat_file(path: Path, n_samples: int, n: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    k = np.arange(1, 9)
    x = np.arange(n) / n
    coef = rng.standard_normal((n_samples, k.size, 2)) / k[None, :, None] ** 1.5
    u0 = (coef[..., 0, None] * np.sin(2 * np.pi * k[None, :, None] * x) +
          coef[..., 1, None] * np.cos(2 * np.pi * k[None, :, None] * x)).sum(1)
    np.savez(path, u0=u0, ut=heat_solution(u0, T_END))
    return path


class HeatTask(Task):
    """u0 -> u(., T) for the heat equation on a periodic grid; files with arrays u0, ut of shape (N, n)."""

    name = "heat-toy"
    description = "1D heat equation u0 -> u(., 1) (test task)"
    dim = 1
    default_keys = ("u0", "ut")
    models = {"fno": {"name": "fno1d", "width": 16, "modes": 8, "num_layers": 2, "head_width": 32}}
    run_defaults = {"train": {"epochs": 6, "batch_size": 8, "lr": 5e-3, "gamma": 0.0, "pct_start": 0.1}}

    def load(self, data, options, files, splits=("train", "val", "test"), normalizers=None, test_all=False):
        keys, train, test, grid = open_pair(data, self.default_keys, files, 1)
        s = stride_for(grid[0], data.resolution, nodes=False, where=train.describe())
        idx = split_indices(data, train, test, test_all)

        def transform(u0, ut):
            return {"input": sample_array(u0, 1, keys[0], "")[:, ::s, None],
                    "target": sample_array(ut, 1, keys[1], "")[:, ::s, None]}

        x = (np.arange(grid[0]) / grid[0])[::s, None]
        ds = {sp: FieldDataset(read_blocks(test if sp == "test" else train, idx[sp], transform), {"coords": x})
              for sp in splits}
        return Bundle(ds, dict(normalizers or {}), "periodic", (len(x),), (len(x),))


def test_a_task_defined_outside_the_package_trains_through_the_cli_and_predicts_the_exact_solution(tmp_path, request):
    """One module and one registration: the toy task gets presets, trains via `opformer train`, and its loaded model
    predicts the exact heat solution of new initial data."""
    register_task(HeatTask())
    request.addfinalizer(lambda: unregister_task("heat-toy"))
    data = heat_file(tmp_path / "heat.npz", 100, 64, seed=0)
    out = tmp_path / "run"
    assert main(["train", "heat-toy-fno", "--data", str(data), "--out", str(out), "--no-progress"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "heat-toy" and metrics["n_test"] == 10 and metrics["n_train"] == 81
    assert metrics["test_rel_l2"] < 0.2, metrics  # predicting zero would give 1
    fresh = heat_file(tmp_path / "fresh.npz", 5, 64, seed=1)
    with np.load(fresh) as f:
        u0, exact = f["u0"], f["ut"]
    pred = opformer.load(out / "checkpoints" / "best.ckpt").predict(u0)
    assert pred.shape == exact.shape
    err = np.linalg.norm(pred - exact, axis=1) / np.linalg.norm(exact, axis=1)
    assert err.mean() < 3 * metrics["test_rel_l2"] + 0.02
    # in a process that has not registered the task (its module not imported): said so, not "the weights do not fit"
    unregister_task("heat-toy")
    try:
        with pytest.raises(opformer.tasks.artifact.LoadError, match="a model of task 'heat-toy', which is not "
                                                                    "registered in this process: import the module"):
            opformer.load(out)
    finally:
        register_task(HeatTask())


def test_loading_a_model_leaves_the_callers_random_stream_alone(own_run):
    """The model is built (its weights drawn) before the stored ones are loaded: those draws do not move the
    caller's seeded torch random stream."""
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    opformer.load(own_run)
    assert torch.equal(torch.rand(3), expected)


# --- one's own Burgers-like data: other keys, a channel axis, 80 samples, no split flags -----------------------------------
@pytest.fixture(scope="module")
def own_file(tmp_path_factory) -> Path:
    """80 samples (N, 64, 1) under keys x, y: the Burgers solution operator of a smooth initial condition, cheap
    stand-in data (the heat map above) with a channel axis and float32/float64 mixed."""
    d = tmp_path_factory.mktemp("own")
    base = heat_file(d / "base.npz", 80, 64, seed=3)
    with np.load(base) as f:
        np.savez(d / "mine.npz", x=f["u0"][..., None], y=f["ut"][..., None].astype(np.float32))
    return d / "mine.npz"


@pytest.fixture(scope="module")
def own_run(own_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "gt"
    code = main(["train", "burgers-gt", "--data", str(own_file), "--keys", "x,y", "--epochs", "2", "--num-layers",
                 "1", "--out", str(out), "--no-progress"])
    assert code == 0
    return out


def test_own_file_with_any_sample_count_keys_and_channel_axis_trains_with_default_fractions(own_run):
    m = json.loads((own_run / "metrics.json").read_text())
    # 10% test (8), 10% of the remaining 72 for validation (7), the rest for training
    assert (m["n_train"], m["n_val"], m["n_test"]) == (65, 7, 8)
    assert m["resolution"] == [64]  # the preset's 512 describes its own data, not the user's file
    assert np.isfinite(m["test_rel_l2"])


def test_a_failed_start_leaves_no_directory(own_file, tmp_path, capsys):
    for bad in (["--keys", "x,nope"], ["--n-train", "1000"], ["--resolution", "48"], ["--modes", "40"]):
        out = tmp_path / "never"
        code = main(["train", "burgers-gt", "--data", str(own_file), "--keys", "x,y", "--out", str(out),
                     "--no-progress", *bad])
        err = capsys.readouterr().err
        assert code == 2, bad
        assert not out.exists(), f"{bad} left {list(out.rglob('*'))}"
        assert bad[0] in err or "nope" in err, err
        if bad[0] == "--keys":  # a missing array: the line names the file's arrays and the flag that picks them
            assert err.count("\n") == 1 and "key 'nope' not found; available keys:" in err, err
            assert err.rstrip().endswith("; name the arrays with --keys"), err


def test_bad_values_give_one_line_errors_in_flag_terms(own_file, tmp_path, capsys):
    cases = {("--lr", "abc"): "--lr: expected a number, got 'abc'",
             ("--lr", "-1e-3"): "--lr: must be > 0.0",
             ("--learning-rate", "1e-3"): "did you mean --lr?",
             ("--n-val", "x"): "--n-val: expected an integer or a number"}
    for (flag, value), text in cases.items():
        code = main(["train", "burgers-gt", "--data", str(own_file), "--out", str(tmp_path / "r"), flag, value])
        err = capsys.readouterr().err
        assert code == 2 and text in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "r").exists()


def test_predict_writes_what_eval_measures(own_run, own_file, tmp_path, capsys):
    ck = own_run / "checkpoints" / "best.ckpt"
    assert main(["eval", str(ck), "--data", str(own_file), "--out", str(tmp_path / "ev")]) == 0
    ev = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert main(["predict", str(ck), "--data", str(own_file), "--out", str(tmp_path / "p.npz")]) == 0
    with np.load(tmp_path / "p.npz") as p:
        # the layout of the file's target array (80, 64, 1), as model.predict keeps that of its inputs
        assert p["prediction"].shape == (80, 64, 1) and p["rel_l2"].shape == (80,)
        assert float(np.mean(p["rel_l2"])) == pytest.approx(ev["test_rel_l2"], rel=1e-12)
        with np.load(own_file) as f:
            y = f["y"][..., 0]
            direct = np.linalg.norm(p["prediction"][..., 0] - y, axis=1) / np.linalg.norm(y, axis=1)
        assert np.allclose(direct, p["rel_l2"], rtol=1e-5)
    assert ev["n_test"] == 80  # every sample of the file is a test sample


def test_load_in_a_fresh_process_from_another_directory(own_run, own_file, tmp_path):
    ck = (own_run / "checkpoints" / "best.ckpt").resolve()
    with np.load(own_file) as f:
        x = f["x"][:4]
    np.save(tmp_path / "x.npy", x)
    expected = opformer.load(ck).predict(x)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import numpy as np, opformer\n"
            f"m = opformer.load({str(ck)!r})\n"
            f"np.save('y.npy', m.predict(np.load({str(tmp_path / 'x.npy')!r})))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-c", code], cwd=elsewhere, env=env, check=True, timeout=120)
    assert np.array_equal(np.load(elsewhere / "y.npy"), expected)
    assert expected.shape == (4, 64, 1)  # the input had a channel axis: so does the output


def test_a_run_directory_loads_its_best_checkpoint(own_run, own_file, tmp_path):
    """``opformer.load(RUN_DIR)`` (the directory ``opformer train --out`` made) is its checkpoints/best.ckpt; a
    directory that is neither a run nor a saved model is refused with one line naming both layouts."""
    with np.load(own_file) as f:
        x = f["x"][:3]
    best = opformer.load(own_run / "checkpoints" / "best.ckpt").predict(x)
    assert np.array_equal(opformer.load(own_run).predict(x), best)
    (tmp_path / "empty").mkdir()
    with pytest.raises(opformer.tasks.artifact.LoadError,
                       match=r"config\.json and model\.safetensors .* or checkpoints/best\.ckpt"):
        opformer.load(tmp_path / "empty")


def test_save_pretrained_round_trip(own_run, own_file, tmp_path):
    model = opformer.load(own_run / "checkpoints" / "best.ckpt")
    model.save_pretrained(tmp_path / "pre")
    assert sorted(p.name for p in (tmp_path / "pre").iterdir()) == ["config.json", "model.safetensors"]
    mask = os.umask(0o022)
    os.umask(mask)
    for f in (tmp_path / "pre").iterdir():  # written atomically, with the usual mode (not the temporary's 0600)
        assert oct(f.stat().st_mode & 0o777) == oct(0o666 & ~mask)
    cfg = json.loads((tmp_path / "pre" / "config.json").read_text())
    assert cfg["task"] == "burgers" and cfg["keys"] == ["x", "y"] and cfg["model"]["name"] == "transformer1d"
    again = opformer.load(tmp_path / "pre")
    with np.load(own_file) as f:
        x = torch.as_tensor(f["x"][:6, :, 0])
    a, b = model.predict(x), again.predict(x)
    assert torch.is_tensor(b) and b.shape == (6, 64) and torch.equal(a, b)


def test_files_that_would_run_code_are_refused_and_the_code_never_runs(tmp_path, capsys):
    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    evil = tmp_path / "evil.ckpt"
    with open(evil, "wb") as fh:
        pickle.dump({"state_dict": {}, "opformer": Payload()}, fh)
    torch.save({"opformer": Payload()}, tmp_path / "evil2.ckpt")
    for path in (evil, tmp_path / "evil2.ckpt"):
        with pytest.raises(opformer.tasks.artifact.LoadError, match="refused|not a readable"):
            opformer.load(path)
        assert main(["eval", str(path), "--data", str(tmp_path / "none.npz")]) == 2
        assert main(["predict", str(path), "--data", str(tmp_path / "none.npz"), "--out", str(tmp_path / "p.npz")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "refused" in err
    assert not marker.exists(), "loading a file ran code from it"
    assert not (tmp_path / "p.npz").exists()


def test_broken_data_files_and_outputs_under_a_file_are_one_line_errors(own_run, own_file, tmp_path, capsys):
    """Empty, cut-off and foreign data files, a pickled .pt whose code must not run, and --out under an existing
    file: each is one line naming the file, with nothing written."""
    ck = str(own_run / "checkpoints" / "best.ckpt")
    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "cut.npz").write_bytes(own_file.read_bytes()[:300])
    (tmp_path / "text.pt").write_text("hello\n")
    torch.save({"x": Payload(), "y": torch.zeros(3)}, tmp_path / "evil.pt")
    expected = {"empty.npz": "cannot be read as .npz (an empty file)", "cut.npz": "not a zip archive",
                "text.pt": "cannot be read as .pt", "evil.pt": "refused: the file holds pickled Python objects"}
    for name, text in expected.items():
        for argv in (["train", "burgers-gt", "--data", str(tmp_path / name), "--keys", "x,y", "--out",
                      str(tmp_path / "r")],
                     ["eval", ck, "--data", str(tmp_path / name), "--keys", "x,y"],
                     ["predict", ck, "--data", str(tmp_path / name), "--keys", "x", "--out", str(tmp_path / "p.npz")]):
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and text in err and "Traceback" not in err, (argv, err)
    assert not marker.exists(), "reading a data file ran code from it"
    (tmp_path / "afile").write_text("mine")
    for argv in (["predict", ck, "--data", str(own_file), "--out", str(tmp_path / "afile" / "p.npz")],
                 ["eval", ck, "--data", str(own_file), "--out", str(tmp_path / "afile")],
                 ["eval", ck, "--data", str(own_file), "--out", str(tmp_path / "afile" / "sub")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "afile is a file, not a directory" in err, err
    assert (tmp_path / "afile").read_text() == "mine"
    assert not (tmp_path / "r").exists() and not (tmp_path / "p.npz").exists()


def test_eval_names_its_directory_after_the_file_and_data_info_lists_arrays(own_run, own_file, tmp_path, capsys):
    ck = own_run / "checkpoints" / "best.ckpt"
    assert main(["eval", str(ck), "--data", str(own_file)]) == 0
    m = json.loads((own_run / "eval-mine.npz-64" / "metrics.json").read_text())  # not the run's own eval-64
    assert m["n_test"] == 80 and m["resampled_to_training_grid"] is False
    capsys.readouterr()
    assert main(["data", "info", str(own_file)]) == 0
    out = capsys.readouterr().out
    assert "not an opformer data file" in out and "x  (80, 64, 1)  float64" in out and "y  (80, 64, 1)  float32" in out
    assert opformer.load(ck).predict(np.zeros((0, 64))).shape == (0, 64)  # no samples: an empty batch of the shape


# --- 2D: a model trained at 17 x 17 evaluates on a 33 x 33 file of the same fields --------------------------------------
def test_darcy_model_trained_at_17_evaluates_at_33(tmp_path, capsys):
    train_f, test_f = tmp_path / "d33.h5", tmp_path / "d33_test.h5"
    assert main(["data", "darcy", "--samples", "60", "--resolution", "33", "--out", str(train_f), "--workers", "1",
                 "--no-progress"]) == 0
    assert main(["data", "darcy", "--samples", "12", "--resolution", "33", "--split", "test", "--out", str(test_f),
                 "--workers", "1", "--no-progress"]) == 0
    out = tmp_path / "run"
    assert main(["train", "darcy-fno", "--data", str(train_f), "--test-data", str(test_f), "--resolution", "17",
                 "--width", "12", "--epochs", "8", "--lr", "5e-3", "--out", str(out), "--no-progress"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    out_text = capsys.readouterr().out
    assert "spectral modes 12 -> 8" in out_text  # 12 modes do not fit a 17-point grid: the preset adapted, and said so
    ck = out / "checkpoints" / "best.ckpt"
    assert main(["eval", str(ck), "--data", str(test_f), "--resolution", "17", "--out", str(tmp_path / "e17")]) == 0
    assert main(["eval", str(ck), "--data", str(test_f), "--out", str(tmp_path / "e33")]) == 0
    e17 = json.loads((tmp_path / "e17" / "metrics.json").read_text())
    e33 = json.loads((tmp_path / "e33" / "metrics.json").read_text())
    assert e17["test_rel_l2"] == pytest.approx(m["test_rel_l2"], rel=1e-5)  # the run's own test set
    assert e33["resolution"] == [33, 33]
    assert m["test_rel_l2"] < 0.5 and e33["test_rel_l2"] < 1.5 * m["test_rel_l2"] + 0.05, (m, e33)



def test_a_2d_grid_too_small_for_the_task_is_one_line(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for n in (1, 2):
        np.savez(tmp_path / f"g{n}.npz", perm=rng.random((9, n, n)), pressure=rng.random((9, n, n)))
        for preset in ("darcy-gt", "darcy-inverse-fno"):
            code = main(["train", preset, "--data", str(tmp_path / f"g{n}.npz"), "--keys", "perm,pressure",
                         "--out", str(tmp_path / "r"), "--no-progress"])
            err = capsys.readouterr().err
            assert code == 2 and err.count("\n") == 1, err
            assert f"needs grids of at least 3 x 3 points, found {n} x {n}" in err, err
    assert not (tmp_path / "r").exists()


def test_a_test_file_on_another_grid_says_so(own_file, tmp_path, capsys):
    np.savez(tmp_path / "t128.npz", x=np.zeros((5, 128)), y=np.ones((5, 128)))
    assert main(["train", "burgers-gt", "--data", str(own_file), "--test-data", str(tmp_path / "t128.npz"), "--keys",
                 "x,y", "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "the test file's grid (128,) differs from the training file's (64,)" in err and err.count("\n") == 1, err


def _offset_file(path: Path) -> Path:
    """60 samples (N, 64) whose target varies by about 1 % about a mean of 5: predicting the mean field alone scores
    a relative L2 error of about 2e-3."""
    rng = np.random.default_rng(0)
    x = np.arange(64) / 64
    k = np.arange(1, 5)
    coef = rng.standard_normal((60, 4, 2)) / k[None, :, None]
    a = (coef[..., 0, None] * np.sin(2 * np.pi * k[None, :, None] * x)
         + coef[..., 1, None] * np.cos(2 * np.pi * k[None, :, None] * x)).sum(1)
    u = 5 + 0.02 * (0.5 * np.roll(a, 3, axis=1) + 0.1 * a ** 2)
    np.savez(path, a=a.astype(np.float32), u=u.astype(np.float32))
    return path


def test_a_target_about_a_large_mean_is_noted_and_normalize_target_learns_it(tmp_path, capsys):
    """A model whose error is above half that of a constant prediction (the validation targets' mean field) gets a
    note pointing to --normalize-target, and metrics.json holds both errors; with --normalize-target the model
    predicts the standardized target, beats the mean field, and the loaded model predicts in physical units."""
    data = _offset_file(tmp_path / "off.npz")
    common = ["--data", str(data), "--epochs", "6", "--num-layers", "1", "--n-val", "8", "--n-test", "8",
              "--no-progress"]
    assert main(["train", "burgers-gt", *common, "--out", str(tmp_path / "plain")]) == 0
    plain = json.loads((tmp_path / "plain" / "metrics.json").read_text())
    base = plain["val_mean_field_rel_l2"]
    assert 5e-4 < base < 5e-3 and plain["val_rel_l2"] > 0.5 * base
    assert plain["weak_model_note"].endswith("train with --normalize-target (the model then predicts the standardized "
                                             "target) (docs/training.md)")
    assert f"note: {plain['weak_model_note']}" in capsys.readouterr().out

    assert main(["train", "burgers-gt", *common, "--normalize-target", "--out", str(tmp_path / "norm")]) == 0
    norm = json.loads((tmp_path / "norm" / "metrics.json").read_text())
    assert norm["val_mean_field_rel_l2"] == pytest.approx(base)
    assert norm["val_rel_l2"] < 0.5 * base and "weak_model_note" not in norm
    assert "note: the best validation error" not in capsys.readouterr().out
    with np.load(data) as f:
        a, u = f["a"][-8:], f["u"][-8:]
    pred = opformer.load(tmp_path / "norm").predict(a)
    err = np.linalg.norm(pred - u, axis=1) / np.linalg.norm(u, axis=1)
    assert err.mean() == pytest.approx(norm["test_rel_l2"], rel=1e-3)
