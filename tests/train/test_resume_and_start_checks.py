"""Resuming on the data and the checkpoint the run started with, and starts that fail leaving nothing behind: a data
file that changed since the run started, a training split of another size, a checkpoint of another run, and
training settings that Lightning or h5py would refuse only once the run directory exists (docs/guarantees.md)."""

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from opformer.cli import main
from opformer.config import ConfigError
from opformer.train import run as run_module
from opformer.train.config import apply_overrides, load_preset
from opformer.train.run import RunDirError, evaluate, train

from .conftest import TINY_MODEL, one_line_error, tree


def _data_file(path: Path, n: int, seed: int) -> Path:
    """A small Burgers-like pair file (``a``, ``u``: n samples on 64 points): smooth random inputs and a smoothed,
    shifted copy as the target."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 1, 64, endpoint=False)
    k = np.arange(1, 5)
    coef = rng.standard_normal((n, 4, 2)) / k[None, :, None]
    a = (coef[..., 0, None] * np.sin(2 * np.pi * k[None, :, None] * x)
         + coef[..., 1, None] * np.cos(2 * np.pi * k[None, :, None] * x)).sum(1)
    u = 0.5 * np.roll(a, 3, axis=1) + 0.1 * a ** 2
    np.savez(path, a=a.astype(np.float32), u=u.astype(np.float32))
    return path


def _config(tmp_path: Path, data: Path, **model) -> Path:
    """A tiny run on ``data``: the last 8 samples for testing, 8 for validation, the rest (24 of 40) for training,
    a 2-layer Galerkin model, 3 epochs of 6 batches."""
    cfg = {
        "name": "tiny",
        "task": "burgers",
        "data": {"path": str(data), "n_val": 8, "n_test": 8},
        "model": {**TINY_MODEL, **model},
        "train": {"epochs": 3, "batch_size": 4, "eval_batch_size": 4, "lr": 3e-3, "plot_samples": 1},
    }
    path = tmp_path / f"tiny{'-' + '-'.join(map(str, model.values())) if model else ''}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _cfg(path, **over):
    return apply_overrides(load_preset(str(path)), over)[0]


def _stopped_after_first_epoch(cfg_path: Path, out: Path, monkeypatch) -> None:
    """Train ``cfg_path`` into ``out`` and stop it (as Ctrl-C) in its second epoch: ``last.ckpt`` holds epoch 1."""
    from opformer.train import callbacks

    calls = {"n": 0}

    def stop():
        calls["n"] += 1
        if calls["n"] == 10:  # 6 training and 2 validation batches an epoch: the second epoch's second batch
            raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(callbacks, "check_stop", stop)
        with pytest.raises(KeyboardInterrupt):
            train(_cfg(cfg_path), out, progress=False)
    assert (out / "checkpoints" / "last.ckpt").exists()


def _edit_checkpoint(path: Path, edit) -> None:
    ck = torch.load(path, map_location="cpu", weights_only=True)
    edit(ck)
    torch.save(ck, path)


# --- a data file that changed -----------------------------------------------------------------------------------------
def test_resume_refuses_a_data_file_that_changed_since_the_run_started(tmp_path, monkeypatch, capsys):
    """The data file regenerated (other values, same size) or with more samples after the run was stopped: --resume
    refuses in one line naming the file, the run untouched.  The same bytes again (a copy, a new modification time)
    resume."""
    data = _data_file(tmp_path / "d.npz", 40, seed=0)
    original = data.read_bytes()
    cfg_path = _config(tmp_path, data)
    out = tmp_path / "run"
    _stopped_after_first_epoch(cfg_path, out, monkeypatch)
    ck = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert list(ck["data_files"]) == [str(data)] and ck["data_splits"]["train"] == 24
    kept = tree(out)

    _data_file(data, 40, seed=1)  # other values, the same size
    with pytest.raises(RunDirError, match=r"d\.npz changed since the run started \(its content differs\); resume "
                                          "with the same data, or start again with --overwrite"):
        train(_cfg(cfg_path), out, progress=False, resume=True)
    _data_file(data, 48, seed=0)  # more samples
    monkeypatch.chdir(tmp_path)
    assert main(["train", str(cfg_path), "--out", str(out), "--resume", "--no-progress"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "--resume: d.npz changed since the run started (size " in line and "Traceback" not in line
    assert tree(out) == kept

    data.unlink()
    data.write_bytes(original)  # the same content, written anew
    m = train(_cfg(cfg_path), out, progress=False, resume=True)
    assert m["epochs"] == 3


def test_resume_with_another_number_of_samples_never_reaches_the_schedule(tmp_path, monkeypatch):
    """A checkpoint that records no file fingerprints (as an earlier version wrote) resumed on a file with more
    samples: refused by the split sizes it records, and without them by the length of its learning-rate schedule
    (torch's own error came only after the steps had run past its end)."""
    data = _data_file(tmp_path / "d.npz", 40, seed=0)
    cfg_path = _config(tmp_path, data)
    out = tmp_path / "run"
    _stopped_after_first_epoch(cfg_path, out, monkeypatch)
    last = out / "checkpoints" / "last.ckpt"
    _edit_checkpoint(last, lambda ck: ck.pop("data_files"))
    _data_file(data, 48, seed=0)
    with pytest.raises(RunDirError, match="its train split has 32 samples, it had 24"):
        train(_cfg(cfg_path), out, progress=False, resume=True)
    _edit_checkpoint(last, lambda ck: ck.pop("data_splits"))
    with pytest.raises(ConfigError, match=r"learning-rate schedule spans 18 steps, but this run takes 24: its "
                                          r"training data changed"):
        train(_cfg(cfg_path), out, progress=False, resume=True)
    assert last.exists() and (out / "config.yaml").exists()


# --- a checkpoint of another run --------------------------------------------------------------------------------------
def test_resume_refuses_a_checkpoint_of_another_run_in_one_line(tmp_path, monkeypatch, capsys):
    """A last.ckpt of another model or task copied into a stopped run: one line naming the file and both runs
    (before: Lightning's 40-line error on loading the weights)."""
    data = _data_file(tmp_path / "d.npz", 40, seed=0)
    cfg_path, wide_path = _config(tmp_path, data), _config(tmp_path, data, d_model=24)
    out, wide = tmp_path / "run", tmp_path / "wide"
    _stopped_after_first_epoch(cfg_path, out, monkeypatch)
    _stopped_after_first_epoch(wide_path, wide, monkeypatch)
    last = out / "checkpoints" / "last.ckpt"
    shutil.copy(wide / "checkpoints" / "last.ckpt", last)
    kept = tree(out)
    assert main(["train", str(cfg_path), "--out", str(out), "--resume", "--no-progress"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert f"--resume: {last} is a checkpoint of another run than config.yaml (differences: model.d_model: 24 -> 16" \
           in line and line.endswith("start again with --overwrite, or choose another --out")

    def other_task(ck):
        ck["opformer"]["task"], ck["opformer"]["model"]["name"] = "ns", "fno2d"
        ck["run_config"]["name"], ck["run_config"]["task"] = "ns-fno", "ns"

    _edit_checkpoint(last, other_task)
    assert main(["train", str(cfg_path), "--out", str(out), "--resume", "--no-progress"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert (f"{last} is a checkpoint of another run (ns-fno: task ns, model fno2d; this run tiny: task burgers, "
            "model transformer1d)") in line
    assert set(tree(out)) == set(kept)


# --- settings refused before anything is written ---------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--limit-train-batches", "1.5"], "--limit-train-batches: a fraction must be <= 1.0, got 1.5"),
    (["--limit-train-batches", "0.01"], "--limit-train-batches 0.01: that fraction of the 6 training batches is none"),
    (["--devices", "abc"],
     "--devices: expected a positive integer, a list of GPU indices (0,1), -1 or auto, got 'abc'"),
    (["--devices", "0,1", "--accelerator", "cpu"], "--devices 0,1: GPU indices, but this run uses the CPU"),
])
def test_settings_lightning_would_refuse_are_one_line_and_write_nothing(tmp_path, capsys, args, message):
    data = _data_file(tmp_path / "d.npz", 40, seed=0)
    out = tmp_path / "runs" / "bad"
    assert main(["train", str(_config(tmp_path, data)), "--out", str(out), "--no-progress", *args]) == 2
    assert message in one_line_error(capsys.readouterr().err)
    assert not (tmp_path / "runs").exists()


def test_an_empty_time_key_is_refused_before_the_data_are_read(tmp_path, capsys):
    """(h5py failed on it with its own error while the data loaded.)"""
    import h5py

    data = tmp_path / "traj.h5"
    with h5py.File(data, "w") as f:
        f["w"] = np.random.default_rng(0).standard_normal((6, 5, 16, 16)).astype(np.float32)
    assert main(["train", "ns-fno", "--data", str(data), "--time-key", "", "--out", str(tmp_path / "bad")]) == 2
    assert one_line_error(capsys.readouterr().err) == (
        "opformer: error: --time-key: must not be empty (the name of the array or HDF5 attribute that holds the "
        "snapshot times, e.g. t)")
    assert not (tmp_path / "bad").exists()


# --- a start that fails leaves nothing behind ------------------------------------------------------------------------
def _refusing_trainer(monkeypatch):
    """Lightning's Trainer refusing its settings as it is made (a value no check of ours knows)."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    def refuse(*args, **kwargs):
        raise MisconfigurationException("`Trainer(devices=...)` value is not a valid input using cpu accelerator.")

    monkeypatch.setattr(run_module.L, "Trainer", refuse)


def test_a_start_that_fails_before_its_first_epoch_leaves_nothing_behind(tmp_path, monkeypatch, capsys):
    """A start that fails once the run directory is made (Lightning refusing a setting, a failure while the fit
    sets up) removes what it wrote: a new directory (and its new parents) goes, the user's own files in an existing
    one stay, and the corrected command then just works (before: the directory held .lock and config.yaml, and the
    same command was refused as "already holds a run")."""
    data = _data_file(tmp_path / "d.npz", 40, seed=0)
    cfg_path = _config(tmp_path, data)
    out = tmp_path / "runs" / "new"
    with monkeypatch.context() as m:
        _refusing_trainer(m)
        assert main(["train", str(cfg_path), "--out", str(out), "--no-progress"]) == 2
    assert "Lightning refused the training settings: `Trainer(devices=...)` value is not a valid input" in \
        one_line_error(capsys.readouterr().err)
    assert not (tmp_path / "runs").exists()

    mine = tmp_path / "mine"
    (mine / "logs").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    (mine / "logs" / "old.txt").write_text("mine too")
    with monkeypatch.context() as m:  # a failure inside the fit's setup, before the first epoch
        def fail(self):
            raise RuntimeError("setup failed")

        m.setattr(run_module.OperatorModule, "configure_optimizers", fail)
        with pytest.raises(RuntimeError, match="setup failed"):
            train(_cfg(cfg_path), mine, progress=False)
    assert sorted(str(p.relative_to(mine)) for p in mine.rglob("*")) == ["logs", "logs/old.txt", "notes.txt"]
    m = train(_cfg(cfg_path), mine, progress=False)  # the corrected start: no --overwrite needed
    assert m["epochs"] == 3 and (mine / "notes.txt").read_text() == "mine"


def test_a_failed_overwrite_or_resume_start_keeps_the_run(tmp_path, monkeypatch, capsys):
    """--overwrite refused by Lightning deletes nothing of the run it would replace (the trainer is made before the
    old files go), and a resumed run that fails to start keeps every file."""
    data = _data_file(tmp_path / "d.npz", 40, seed=0)
    cfg_path = _config(tmp_path, data)
    out = tmp_path / "run"
    _stopped_after_first_epoch(cfg_path, out, monkeypatch)
    kept = tree(out)
    with monkeypatch.context() as m:
        _refusing_trainer(m)
        for flag in ("--overwrite", "--resume"):
            assert main(["train", str(cfg_path), "--out", str(out), "--no-progress", flag]) == 2
            one_line_error(capsys.readouterr().err)
            assert tree(out) == kept
    with monkeypatch.context() as m:  # --overwrite failing inside the fit's setup, after the old files went aside
        def fail(self):
            raise RuntimeError("setup failed")

        m.setattr(run_module.OperatorModule, "configure_optimizers", fail)
        with pytest.raises(RuntimeError, match="setup failed"):
            train(_cfg(cfg_path), out, progress=False, overwrite=True)
    assert tree(out) == kept
    m = train(_cfg(cfg_path), out, progress=False, resume=True)
    assert m["epochs"] == 3
    assert main(["eval", str(out)]) == 0  # writes out/eval-64
    capsys.readouterr()
    again = train(_cfg(cfg_path), out, progress=False, overwrite=True)  # a replacing run leaves no old files aside
    assert again["epochs"] == 3 and not list(out.glob(".replaced-run*"))
    # the replaced model's evaluation stays (it is the user's result), with a note that it describes that model
    assert (out / "eval-64" / "metrics.json").exists()
    assert f"note: {out} keeps eval-64: the evaluations of the model being replaced" in capsys.readouterr().out


def test_resume_takes_other_plot_and_checkpoint_settings(tmp_path, monkeypatch):
    """--plot-samples and --checkpoint-every-n-steps change what a run shows and how often it saves, not what it
    trains: a stopped run resumes with new values of them (another learning rate is still another run)."""
    data = _data_file(tmp_path / "d.npz", 40, seed=0)
    cfg_path = _config(tmp_path, data)
    out = tmp_path / "run"
    _stopped_after_first_epoch(cfg_path, out, monkeypatch)
    with pytest.raises(RunDirError, match="holds a different run.*lr"):
        train(_cfg(cfg_path, **{"train.lr": 1e-3}), out, progress=False, resume=True)
    m = train(_cfg(cfg_path, **{"train.plot_samples": 2, "train.checkpoint_every_n_steps": 5}), out, progress=False,
              resume=True)
    assert m["epochs"] == 3


def test_eval_of_the_runs_own_split_warns_when_its_data_changed(tmp_path, monkeypatch):
    """eval without --data scores the run's test split of its data file: a file regenerated since is said (the
    samples are others than those the run was tested on), the same bytes are not."""
    data = _data_file(tmp_path / "d.npz", 40, seed=0)
    cfg_path = _config(tmp_path, data)
    out = tmp_path / "run"
    _stopped_after_first_epoch(cfg_path, out, monkeypatch)
    ckpt = out / "checkpoints" / "last.ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        evaluate(ckpt, out=tmp_path / "e1")  # unchanged: no warning about the data
    _data_file(data, 40, seed=1)
    with pytest.warns(UserWarning, match=r"d\.npz changed since the run trained on it \(its content differs\): its "
                                         r"test split now holds other samples"):
        evaluate(ckpt, out=tmp_path / "e2")
