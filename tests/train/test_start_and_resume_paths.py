"""What a user meets around a training run's start and resume: a moved run directory, a start that fails or is
stopped before its first checkpoint, precisions other than 32-bit, values that are not numbers, too-small splits,
a YAML file that names its own data."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from opformer.cli import main
from opformer.config import ConfigError
from opformer.data.datasets import DataError, make_splits
from opformer.train.config import apply_overrides, load_preset, resolve
from opformer.train.run import train


def _cfg(path, **over):
    return apply_overrides(load_preset(str(path)), over)[0]


def _stop_at(monkeypatch, n: int) -> None:
    """A stop request (as Ctrl-C) before the n-th training or validation batch."""
    from opformer.train import callbacks

    calls = {"n": 0}

    def stop():
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt

    monkeypatch.setattr(callbacks, "check_stop", stop)


def test_a_moved_run_directory_resumes_with_its_best_checkpoint_and_score(tiny_config, tmp_path, monkeypatch):
    """A run stopped in its last epoch, its directory moved (the old one gone), resumed from the new place: it ends
    as the uninterrupted run, its best checkpoint in the new directory.  (Before: the checkpoint callbacks kept the
    old folder's paths, forgot the best score, and the end of the run failed on the old path.)"""
    whole = train(_cfg(tiny_config), tmp_path / "whole", progress=False)
    _stop_at(monkeypatch, 19)  # 6 training and 2 validation batches an epoch: epoch 2, its third training batch
    with pytest.raises(KeyboardInterrupt):
        train(_cfg(tiny_config), tmp_path / "run", progress=False)
    shutil.move(tmp_path / "run", tmp_path / "moved")
    monkeypatch.undo()
    m = train(_cfg(tiny_config), tmp_path / "moved", progress=False, resume=True)
    assert m["best_checkpoint"] == "checkpoints/best.ckpt"
    assert (m["val_rel_l2"], m["test_rel_l2"], m["best_epoch"]) == (whole["val_rel_l2"], whole["test_rel_l2"],
                                                                    whole["best_epoch"])
    shutil.move(tmp_path / "whole", tmp_path / "whole-moved")  # a finished run, moved and resumed: nothing to train
    logs = tmp_path / "whole-moved" / "logs"
    rows = (logs / "metrics.csv").read_text()
    again = train(_cfg(tiny_config), tmp_path / "whole-moved", progress=False, resume=True)
    assert again["best_checkpoint"] == "checkpoints/best.ckpt"
    # nothing trained, nothing logged: the run's metrics.csv stays where it was, not moved aside for a new one
    assert (logs / "metrics.csv").read_text() == rows and not list(logs.glob("metrics-*.csv"))
    assert (again["val_rel_l2"], again["test_rel_l2"]) == (whole["val_rel_l2"], whole["test_rel_l2"])


def test_a_run_stopped_before_its_first_checkpoint_starts_over_with_the_same_command(tiny_config, tmp_path,
                                                                                     monkeypatch, capsys):
    """Ctrl-C before the first checkpoint leaves nothing to resume: the same command starts the run over (the
    interrupted message says so) instead of refusing the directory, and the aborted run's logs go."""
    _stop_at(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        train(_cfg(tiny_config), tmp_path / "run", progress=False)
    assert (tmp_path / "run" / "config.yaml").exists()
    assert not list((tmp_path / "run").rglob("*.ckpt"))
    old_events = set((tmp_path / "run" / "logs").glob("events.out.tfevents*"))
    monkeypatch.undo()
    with pytest.warns(UserWarning, match="stopped before its first checkpoint"):
        m = train(_cfg(tiny_config), tmp_path / "run", progress=False)
    assert m["epochs"] == 3
    assert not old_events & set((tmp_path / "run" / "logs").glob("events.out.tfevents*"))
    with pytest.raises(Exception, match="already holds a run"):  # a run with checkpoints is still protected
        train(_cfg(tiny_config), tmp_path / "run", progress=False)


def test_a_users_own_config_file_in_the_output_folder_is_never_replaced(tiny_config, tmp_path):
    """A folder holding the user's own config.yaml (a preset to train from, `--out` that same folder) is not a run
    that stopped early: refused as before, the file untouched."""
    exp = tmp_path / "exp1"
    exp.mkdir()
    text = "# my notes\n" + tiny_config.read_text()
    (exp / "config.yaml").write_text(text)
    with pytest.raises(Exception, match="already holds a run"):
        train(_cfg(exp / "config.yaml"), exp, progress=False)
    assert (exp / "config.yaml").read_text() == text


def test_a_start_the_machine_cannot_run_fails_before_anything_is_written(tiny_config, tmp_path):
    """A batch that the processes cannot share, --devices 0, or a GPU this machine lacks: a one-line error in the
    flags' terms, and no run directory."""
    import torch

    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"--batch-size 4 is not divisible by the 3 processes \(--devices 3"):
        train(_cfg(tiny_config, devices=3, accelerator="cpu"), out, progress=False)
    with pytest.raises(ConfigError, match="--devices 0: must be >= 1"):
        train(_cfg(tiny_config, devices="0"), out, progress=False)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="--accelerator gpu: this machine has no usable GPU"):
            train(_cfg(tiny_config, accelerator="gpu"), out, progress=False)
    assert not out.exists()


@pytest.mark.parametrize("precision", ["64-true", "bf16-mixed"])
def test_other_precisions_train_to_the_end(tiny_config, tmp_path, precision):
    """64-true ended in a dtype error while plotting (no metrics.json), bf16-mixed on the CPU in Lightning's refusal
    to clip the gradients of a fused Adam: both now write their metrics."""
    m = train(_cfg(tiny_config, epochs=1, precision=precision), tmp_path / "run", progress=False)
    assert np.isfinite(m["test_rel_l2"]) and (tmp_path / "run" / "metrics.json").exists()


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_a_value_that_is_not_a_finite_number_is_refused(tiny_config, value):
    with pytest.raises(ConfigError, match=f"--lr: must be a finite number, got {value}"):
        resolve(_cfg(tiny_config, lr=value))


def test_too_small_splits_say_which_flag_and_why():
    with pytest.raises(DataError, match=r"--n-val 0: the validation split needs at least 1 sample"):
        make_splits(37, n_val=0, min_val=1)
    with pytest.raises(DataError, match=r"--n-test 0: the test split needs at least one sample"):
        make_splits(37, n_test=0)
    with pytest.raises(DataError, match="has 2 samples: too few to train, validate and test on"):
        make_splits(2, min_val=1)
    # a pair task needs 2 training samples: a 3-sample file is refused up front with the count that works
    with pytest.raises(DataError, match=r"has 3 samples: too few to train, validate and test on \(at least 4\)"):
        make_splits(3, min_val=1, min_train=2)
    assert [len(v) for v in make_splits(4, min_val=1, min_train=2).values()] == [2, 1, 1]
    assert len(make_splits(10, n_test=2, n_val=0)["val"]) == 0  # the library function alone allows no validation


def test_generated_data_refuses_an_output_name_it_would_not_write(tmp_path, capsys):
    """`opformer data burgers --out x.npz` wrote HDF5 under a .npz name, which numpy then could not read."""
    rc = main(["data", "burgers", "--samples", "2", "--resolution", "64", "--out", str(tmp_path / "b.npz")])
    assert rc == 2 and "name the file .h5" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_few_training_samples_of_a_piecewise_constant_input_are_warned_about(tmp_path):
    """Four training samples of a two-valued coefficient agree at many grid points; where the other splits' inputs
    differ there, the per-point normalization blows them up (errors in the hundreds): the data's warnings say so,
    and say nothing for a training set in which every point varies."""
    from opformer.tasks import get_task

    rng = np.random.default_rng(0)
    n = 9
    a = np.where(rng.uniform(size=(12, n, n)) > 0.5, 12.0, 3.0)
    a[:4, :3, :3] = 3.0  # the training samples agree on one corner block; validation and test do not
    a[4:, 0, 0] = 12.0
    u = 1.0 / a
    np.savez(tmp_path / "few.npz", a=a, u=u)
    cfg = apply_overrides(load_preset("darcy"), {"data.path": str(tmp_path / "few.npz"), "keys": "a,u",
                                                 "n_train": 4, "n_val": 4, "n_test": 4})[0]
    run = resolve(cfg)
    task = get_task("darcy")
    from opformer.tasks.base import ensure_files

    files = ensure_files(task, run.data, run.options, generate=False)
    bundle = task.load(run.data, run.options, files)
    assert any("the input is the same in all 4 training samples" in w for w in bundle.warnings), bundle.warnings
    varied = np.where(rng.uniform(size=(40, n, n)) > 0.5, 12.0, 3.0)
    np.savez(tmp_path / "varied.npz", a=varied, u=1.0 / varied)
    run = resolve(apply_overrides(load_preset("darcy"), {"data.path": str(tmp_path / "varied.npz"), "keys": "a,u"})[0])
    bundle = task.load(run.data, run.options, ensure_files(task, run.data, run.options, generate=False))
    assert not any("the input is the same" in w for w in bundle.warnings), bundle.warnings


def test_a_yaml_file_with_its_own_data_reads_like_the_data_flag(tmp_path, monkeypatch):
    """`base: burgers-gt` with `data: {path: ...}`: the preset's sizes of its generated data (resolution 512,
    n_test 100) are not imposed on the user's file, as with --data; a relative file name that is not in the working
    directory is the one next to the YAML file."""
    x = np.random.default_rng(0).standard_normal((37, 64))
    (tmp_path / "cfg").mkdir()
    np.savez(tmp_path / "cfg" / "mine.npz", inp=x, out=0.5 * x)
    (tmp_path / "cfg" / "run.yaml").write_text(yaml.safe_dump({"base": "burgers-gt", "data": {
        "path": "mine.npz", "keys": ["inp", "out"]}}))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    run = resolve(load_preset("../cfg/run.yaml"))
    assert run.data.resolution is None and run.data.n_test is None
    assert Path(run.data.path).resolve() == (tmp_path / "cfg" / "mine.npz").resolve()
    flag = resolve(apply_overrides(load_preset("burgers-gt"), {"data.path": "x.npz"})[0])
    assert (flag.data.resolution, flag.data.n_test) == (run.data.resolution, run.data.n_test)


def test_worker_processes_do_not_change_the_run(tiny_config, tmp_path):
    """--num-workers is a speed setting: the loaders with worker processes draw from torch's generator at every pass
    as those without do, so the dropout masks and the metrics are the same (before: a different result)."""
    a = train(_cfg(tiny_config, epochs=2), tmp_path / "w0", progress=False)
    b = train(_cfg(tiny_config, epochs=2, num_workers=2), tmp_path / "w2", progress=False)
    assert (a["val_rel_l2"], a["test_rel_l2"]) == (b["val_rel_l2"], b["test_rel_l2"])


def test_the_run_lists_only_the_plots_it_wrote(tiny_config, tmp_path):
    """A user's own picture in the output folder's plots/ stays, and is not listed as one of the run's plots."""
    (tmp_path / "run" / "plots").mkdir(parents=True)
    (tmp_path / "run" / "plots" / "mine.png").write_bytes(b"not ours")
    m = train(_cfg(tiny_config, epochs=1), tmp_path / "run", progress=False)
    assert m["plots"] == ["plots/predictions.png", "plots/training_curves.png"]
    assert (tmp_path / "run" / "plots" / "mine.png").read_bytes() == b"not ours"


def test_a_model_of_the_wrong_dimension_is_refused_before_the_data_and_suggestions_fit_the_task():
    with pytest.raises(ConfigError, match="--model scot: a 2D model, but task burgers is 1D"):
        apply_overrides(load_preset("burgers"), {"model": "scot"})
    with pytest.raises(ConfigError) as info:
        apply_overrides(load_preset("burgers"), {"model": "xyz"})
    assert "any of fno1d, transformer1d with" in str(info.value)  # no 2D model offered for a 1D task


def test_a_field_of_another_model_names_the_models_that_have_it():
    with pytest.raises(ConfigError, match=r"--width: not a field of this preset's model \(burgers-gt\), but of fno1d"):
        apply_overrides(load_preset("burgers-gt"), {"width": 8})


def test_a_resolution_below_the_smallest_grid_is_refused_as_the_list_says():
    """The list of possible resolutions ends at 4 points on a cell grid; 2 was accepted all the same."""
    from opformer.data.datasets import stride_for

    with pytest.raises(DataError, match=r"--resolution 2 is below the smallest grid of 4 points; possible: 64, 32, "
                                        r"16, 8, 4$"):
        stride_for(64, 2, nodes=False, where="f.h5")
    assert stride_for(64, 4, nodes=False, where="f.h5") == 16


def test_a_torchrun_process_that_sees_one_gpu_is_not_refused(monkeypatch):
    """Under torchrun each process may see only its own GPU: --devices 4 is not compared with the one it sees (as
    Lightning does not); the batch must still divide over the processes."""
    import torch

    from opformer.config import TrainConfig
    from opformer.train.run import check_hardware

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.distributed, "is_torchelastic_launched", lambda: True)
    monkeypatch.setenv("WORLD_SIZE", "4")
    check_hardware(TrainConfig(accelerator="gpu", devices=4, batch_size=8))
    with pytest.raises(ConfigError, match="--batch-size 6 is not divisible by the 4 processes of the launch"):
        check_hardware(TrainConfig(accelerator="gpu", devices=4, batch_size=6))
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setattr(torch.distributed, "is_torchelastic_launched", lambda: False)
    with pytest.raises(ConfigError, match="--devices 4: this machine has 1 GPU"):
        check_hardware(TrainConfig(accelerator="gpu", devices=4, batch_size=8))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)  # auto: every GPU of the node
    with pytest.raises(ConfigError, match=r"--batch-size 8 is not divisible by the 3 processes \(--devices auto"):
        check_hardware(TrainConfig(accelerator="gpu", devices="auto", batch_size=8))
    check_hardware(TrainConfig(accelerator="cpu", devices="auto", batch_size=8))  # one process on the CPU
