"""End-to-end training facts: outputs, determinism, exact resume after kill -9, DDP = one process, bad input."""

import copy
import json
import math
import random
import re
import signal
import subprocess
import time

import pytest
import torch
import yaml

from opformer.cli import main
from opformer.train.config import apply_overrides, load_preset
from opformer.train.module import DivergenceError
from opformer.train.run import RunDirError, evaluate, train

from .conftest import PYTHON, cli_env, tensorboard_scalars


def _cfg(path, **over):
    return apply_overrides(load_preset(str(path)), over)[0]


def _one_sample(errors, factor):
    """Per-sample errors with the first sample's scaled by ``factor``: a batch holding one bad sample."""
    out = errors.clone()
    out[0] = out[0] * factor
    return out


def test_train_writes_run_and_two_seeded_runs_agree(tiny_config, tmp_path):
    """A run writes checkpoints, metrics.json, the resolved config, CSV/TensorBoard logs and PNG plots; the same
    seed on CPU gives the same metrics (deterministic training)."""
    a = train(_cfg(tiny_config), tmp_path / "a", progress=False)
    b = train(_cfg(tiny_config), tmp_path / "b", progress=False)
    for key in ("val_rel_l2", "test_rel_l2", "epochs", "seconds", "parameters", "preset", "seed", "version"):
        assert key in a, key
    assert a["epochs"] == 3 and a["n_train"] == 24 and a["n_val"] == 8 and a["n_test"] == 8
    assert a["val_rel_l2"] == b["val_rel_l2"] and a["test_rel_l2"] == b["test_rel_l2"]
    assert 0 < a["test_rel_l2"] < 1.5
    run = tmp_path / "a"
    for rel in ("checkpoints/best.ckpt", "checkpoints/last.ckpt", "metrics.json", "config.yaml",
                "logs/metrics.csv", "plots/predictions.png", "plots/training_curves.png"):
        assert (run / rel).exists(), rel
    assert list((run / "logs").glob("events.out.tfevents*")), "no TensorBoard log"
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["d_model"] == 16
    assert not list(run.rglob("*.tmp")), "a temporary file was left behind"
    c = train(_cfg(tiny_config, seed=7), tmp_path / "c", progress=False)
    assert c["test_rel_l2"] != a["test_rel_l2"]  # the seed matters


def test_background_checkpoints_write_the_same_files_and_resume(tiny_config, tmp_path, monkeypatch):
    """With the background checkpoint writer (the default on a GPU, forced here on the CPU) a run ends with the
    same metrics and the same checkpoint contents as with the writer in the training loop; a resume from its
    last.ckpt continues it exactly; a write that fails in the background stops the run with that error."""
    from lightning.pytorch.plugins.io import AsyncCheckpointIO

    import opformer.train.run as run_module

    made = []
    real = run_module.AsyncCheckpointIO

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(run_module, "AsyncCheckpointIO", spy)
    a = train(_cfg(tiny_config, background_checkpoints=False), tmp_path / "a", progress=False)
    assert not made
    b = train(_cfg(tiny_config, background_checkpoints=True), tmp_path / "b", progress=False)
    assert made and all(isinstance(m, AsyncCheckpointIO) for m in made)
    assert a["test_rel_l2"] == b["test_rel_l2"] and a["val_rel_l2"] == b["val_rel_l2"]
    for name in ("best.ckpt", "last.ckpt"):
        ca, cb = (torch.load(tmp_path / r / "checkpoints" / name, weights_only=True) for r in "ab")
        assert ca["epoch"] == cb["epoch"] and ca["global_step"] == cb["global_step"]
        for key, value in ca["state_dict"].items():
            assert torch.equal(value, cb["state_dict"][key]), (name, key)
    assert not list((tmp_path / "b").rglob("*.tmp")), "a temporary file was left behind"
    auto = run_module.resolve(_cfg(tiny_config)).train  # the default, auto: on when the run will use a GPU
    assert run_module.background_checkpoints(auto) is torch.cuda.is_available()

    # stopped (as by SIGTERM) after its second epoch, the run's last.ckpt is complete once train() has returned,
    # and a resume from it ends as the uninterrupted run did
    from opformer import interrupt
    from opformer.train.module import OperatorModule

    end_of_epoch = OperatorModule.on_train_epoch_end

    def stop_after_epoch_1(self):
        end_of_epoch(self)
        if self.current_epoch == 1:
            interrupt._STOP.set()  # what the SIGTERM handler sets; the run stops before its next batch

    monkeypatch.setattr(OperatorModule, "on_train_epoch_end", stop_after_epoch_1)
    try:
        with pytest.raises(KeyboardInterrupt):
            train(_cfg(tiny_config, background_checkpoints=True), tmp_path / "c", progress=False)
    finally:
        interrupt.clear_stop()
    monkeypatch.setattr(OperatorModule, "on_train_epoch_end", end_of_epoch)
    assert torch.load(tmp_path / "c" / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 1
    c = train(_cfg(tiny_config, background_checkpoints=True), tmp_path / "c", resume=True, progress=False)
    assert c["test_rel_l2"] == a["test_rel_l2"]

    # a write that fails in the writer's thread ends the run with its error (not a silent missing checkpoint)
    def full_disk(self, checkpoint, path, storage_options=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_module.AtomicCheckpointIO, "save_checkpoint", full_disk)
    with pytest.raises(OSError, match="No space left"):
        train(_cfg(tiny_config, background_checkpoints=True), tmp_path / "d", progress=False)


def test_the_end_of_run_dropout_check(tiny_config, tmp_path, monkeypatch, capsys):
    """A network with dropout gets its final validation error with dropout off (the last epoch's figure) and on
    (different: the masks act), a note when dropout on is the better one, and no check without dropout."""
    import csv

    import opformer.train.run as run_module

    m = train(_cfg(tiny_config, epochs=2), tmp_path / "a", progress=False)
    check = m["dropout_check"]
    rows = [r for r in csv.DictReader((tmp_path / "a" / "logs" / "metrics.csv").open()) if r["val_rel_l2"]]
    assert check["val_rel_l2_last"] == pytest.approx(float(rows[-1]["val_rel_l2"]), rel=1e-5)
    assert abs(check["val_rel_l2_last_dropout_on"] - check["val_rel_l2_last"]) > 1e-6 * check["val_rel_l2_last"]
    has_note = check["val_rel_l2_last_dropout_on"] < run_module.DROPOUT_GAP_NOTE * check["val_rel_l2_last"]
    assert ("note" in check) == has_note
    assert json.loads((tmp_path / "a" / "metrics.json").read_text())["dropout_check"] == check
    # the check leaves the trained model as it was: the test error is that of the best checkpoint, dropout off
    assert evaluate(tmp_path / "a" / "checkpoints" / "best.ckpt")["test_rel_l2"] == pytest.approx(
        m["test_rel_l2"], rel=1e-5)

    capsys.readouterr()
    monkeypatch.setattr(run_module, "DROPOUT_GAP_NOTE", 1e9)  # every network "relies on its dropout"
    b = train(_cfg(tiny_config, epochs=2), tmp_path / "b", progress=False)
    for key in ("val_rel_l2_last", "val_rel_l2_last_dropout_on"):  # the same seed: the same masks
        assert b["dropout_check"][key] == check[key]
    assert "has come to rely on its dropout noise" in b["dropout_check"]["note"]
    assert "note: with its dropout on" in capsys.readouterr().out

    c = train(_cfg(tiny_config, epochs=2, dropout=0.0), tmp_path / "c", progress=False)
    assert "dropout_check" not in c


def test_relative_output_directory(tiny_config, tmp_path, monkeypatch):
    """The default --out is relative (runs/PRESET): the run must finish and write its metrics there."""
    monkeypatch.chdir(tmp_path)
    m = train(_cfg(tiny_config, epochs=1), "runs/tiny", progress=False)
    assert m["best_checkpoint"] == "checkpoints/best.ckpt"
    assert (tmp_path / "runs" / "tiny" / "metrics.json").exists()


def test_eval_at_another_resolution(tiny_config, tmp_path):
    """A 1D model trained at n=64 evaluates at n=128 and 256 (its layers are resolution independent)."""
    m = train(_cfg(tiny_config), tmp_path / "run", progress=False)
    ck = tmp_path / "run" / "checkpoints" / "best.ckpt"
    same = evaluate(ck, resolution=64)
    assert same["test_rel_l2"] == pytest.approx(m["test_rel_l2"], rel=1e-5)
    for n in (128, 256):
        e = evaluate(ck, resolution=n, out=tmp_path / f"eval{n}")
        assert e["resolution"] == [n] and e["test_rel_l2"] < 3 * m["test_rel_l2"] + 0.05
        assert (tmp_path / f"eval{n}" / "plots" / "predictions.png").exists()


def test_output_directory_holding_a_run_is_refused_unless_resume_or_overwrite(tiny_config, tmp_path):
    out = tmp_path / "run"
    train(_cfg(tiny_config, epochs=1), out, progress=False)
    with pytest.raises(RunDirError, match=r"already holds a run .*--resume.*--overwrite"):
        train(_cfg(tiny_config, epochs=1), out, progress=False)
    with pytest.raises(RunDirError, match=r"holds a different run.*train.lr: 0.003 -> 0.001"):
        train(_cfg(tiny_config, epochs=1, lr=1e-3), out, resume=True, progress=False)
    with pytest.raises(RunDirError, match=r"train.epochs: 1 -> 3\. The one-cycle learning-rate schedule spans the 1 "
                                          r"epochs of that run, so it cannot be lengthened"):
        train(_cfg(tiny_config, epochs=3), out, resume=True, progress=False)
    m = train(_cfg(tiny_config, epochs=1, lr=1e-3), out, overwrite=True, progress=False)
    assert json.loads((out / "metrics.json").read_text())["test_rel_l2"] == m["test_rel_l2"]


def test_divergence_stops_with_epoch_and_last_finite_loss(tiny_config, tmp_path, monkeypatch):
    """A non-finite loss stops training with a message naming the epoch and the last finite loss, and no
    checkpoint is written for the diverged state."""
    from opformer.tasks import burgers as M

    calls = {"n": 0}  # 6 training steps + 2 validation batches per epoch: call 10 is epoch 1, step 7
    real = M.rel_l2

    def poisoned(pred, target):
        calls["n"] += 1
        out = real(pred, target)
        return out * float("nan") if calls["n"] > 9 else out

    monkeypatch.setattr(M, "rel_l2", poisoned)
    with pytest.raises(DivergenceError, match=r"diverged at epoch 1 \(step 7\).*last finite loss was [0-9.]+ at epoch 1, step 6"):
        train(_cfg(tiny_config, divergence_retries=0), tmp_path / "run", progress=False)
    for ck in (tmp_path / "run" / "checkpoints").glob("*.ckpt"):
        state = torch.load(ck, map_location="cpu", weights_only=True)["state_dict"]
        assert all(torch.isfinite(v).all() for v in state.values())


def test_a_diverged_step_restores_the_epoch_start_and_halves_the_learning_rate(tiny_config, tmp_path, monkeypatch,
                                                                              capsys):
    """One non-finite loss (epoch 1, step 7): the weights and optimizer go back to the start of epoch 1, every rate
    of the one-cycle schedule is halved, training completes, and the run records it.  A loss that stays non-finite
    stops after the allowed retries."""
    from opformer.tasks import burgers as M

    real, calls = M.rel_l2, {"n": 0}

    def once(pred, target):
        calls["n"] += 1
        out = real(pred, target)
        return out * float("nan") if calls["n"] == 10 else out

    monkeypatch.setattr(M, "rel_l2", once)
    m = train(_cfg(tiny_config), tmp_path / "run", progress=False)
    assert m["lr_halvings"] == 1 and "restored the state of the start of epoch 1" in m["divergence_notes"][0]
    # the loss named as what it is (with the H1 term it is no relative L2 error, which the epoch lines show)
    assert re.match(r"training loss( \(relative L2 \+ gamma x H1 term\))? nan at epoch 1", m["divergence_notes"][0])
    assert "halved the learning rate" in capsys.readouterr().out
    ck = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    group = ck["optimizer_states"][0]["param_groups"][0]
    ref = train(_cfg(tiny_config, divergence_retries=0), tmp_path / "ref", progress=False)  # no NaN now: calls > 10
    ref_group = torch.load(tmp_path / "ref" / "checkpoints" / "last.ckpt", map_location="cpu",
                           weights_only=True)["optimizer_states"][0]["param_groups"][0]
    assert ref["lr_halvings"] == 0
    assert group["max_lr"] == pytest.approx(0.5 * ref_group["max_lr"], rel=1e-12)
    assert group["initial_lr"] == pytest.approx(0.5 * ref_group["initial_lr"], rel=1e-12)
    assert all(torch.isfinite(v).all() for v in ck["state_dict"].values())

    # a blow-up that stays finite (step losses 1000x the recent median, two steps in a row) is caught the same way
    calls["n"] = 0

    def spike(pred, target):
        calls["n"] += 1
        out = real(pred, target)  # 8 calls per epoch: epoch 4, steps 25 and 26, one sample of each batch
        return _one_sample(out, 1000.0) if calls["n"] in (34, 35) else out

    monkeypatch.setattr(M, "rel_l2", spike)
    m = train(_cfg(tiny_config, epochs=5), tmp_path / "spike", progress=False)
    assert m["lr_halvings"] == 1 and "two steps in a row (over 20x the median" in m["divergence_notes"][0], (
        m["divergence_notes"])
    assert "at epoch 4 (step 25): restored the state of the start of epoch 4" in m["divergence_notes"][0]
    assert m["loss_spikes"] == 0

    # a step whose whole batch rose (every sample 1000x) and whose next step is normal is a passing rise of the
    # loss: kept and counted, no sample named (two such steps in a row are a blow-up, as above)
    calls["n"] = 0

    def whole_batch(pred, target):
        calls["n"] += 1
        out = real(pred, target)
        return out * 1000.0 if calls["n"] == 34 else out

    monkeypatch.setattr(M, "rel_l2", whole_batch)
    m = train(_cfg(tiny_config, epochs=5), tmp_path / "whole", progress=False)
    assert m["lr_halvings"] == 0 and m["loss_spikes"] == 1, m["divergence_notes"]
    assert m["loss_spike_steps"][0][:2] == [4, 25] and m["loss_spike_steps"][0][4] is None
    assert m["loss_spike_samples"] == []
    calls["n"] = 0
    m = train(_cfg(tiny_config, epochs=5, divergence_factor=0), tmp_path / "spike0", progress=False)
    assert m["lr_halvings"] == 0  # the check can be switched off

    # a slower blow-up: every step of epoch 3 at 8x (under the step factor 20, over the epoch factor 5 of the best)
    calls["n"] = 0

    def slow(pred, target):
        calls["n"] += 1
        out = real(pred, target)
        return out * 8.0 if 25 <= calls["n"] <= 30 else out  # calls 25-30: the six training steps of epoch 3

    monkeypatch.setattr(M, "rel_l2", slow)
    m = train(_cfg(tiny_config, epochs=5), tmp_path / "slow", progress=False)
    assert m["lr_halvings"] == 1, m["divergence_notes"]
    assert m["divergence_notes"][0].startswith("the mean training loss of epoch 3")
    assert "x the lowest epoch mean so far (" in m["divergence_notes"][0] and "(step" not in m["divergence_notes"][0]
    assert "restored the state of the start of epoch 3" in m["divergence_notes"][0]

    calls["n"] = 0
    monkeypatch.setattr(M, "rel_l2", lambda p, t: real(p, t) * float("nan"))
    with pytest.raises(DivergenceError, match=r"after 2 restart\(s\) with a halved learning rate"):
        train(_cfg(tiny_config, epochs=2), tmp_path / "bad", progress=False)


def test_the_deferred_check_of_a_gpu_run_catches_what_the_immediate_one_does(tiny_config, tmp_path, monkeypatch):
    """On a GPU a step's loss is checked at the next step (no host-device wait per step); forced on here.  A NaN at
    epoch 1, step 7 and a 1000x spike at epoch 4, step 25 are restored from and reported with their own steps; a NaN
    on the last step of an epoch is caught before the epoch's checkpoints; a loss that stays NaN stops the run with
    no checkpoint of a non-finite state."""
    from opformer.tasks import burgers as M
    from opformer.train.module import OperatorModule

    monkeypatch.setattr(OperatorModule, "_defer_always", True)
    real, calls = M.rel_l2, {"n": 0}

    def poisoned_at(bad: set, factor: float):
        def f(pred, target):
            calls["n"] += 1
            out = real(pred, target)
            if calls["n"] not in bad:
                return out
            return out * factor if not math.isfinite(factor) else _one_sample(out, factor)
        return f

    monkeypatch.setattr(M, "rel_l2", poisoned_at({10}, float("nan")))
    m = train(_cfg(tiny_config), tmp_path / "nan", progress=False)
    assert m["lr_halvings"] == 1, m["divergence_notes"]
    assert "at epoch 1 (step 7): restored the state of the start of epoch 1" in m["divergence_notes"][0]

    calls["n"] = 0
    monkeypatch.setattr(M, "rel_l2", poisoned_at({34, 35}, 1000.0))
    m = train(_cfg(tiny_config, epochs=5), tmp_path / "spike", progress=False)
    assert m["lr_halvings"] == 1 and "two steps in a row" in m["divergence_notes"][0], m["divergence_notes"]
    assert "at epoch 4 (step 25): restored the state of the start of epoch 4" in m["divergence_notes"][0]

    calls["n"] = 0  # one spike alone is a hard batch on this path too
    monkeypatch.setattr(M, "rel_l2", poisoned_at({34}, 1000.0))
    m = train(_cfg(tiny_config, epochs=5), tmp_path / "one-spike", progress=False)
    assert m["lr_halvings"] == 0 and m["loss_spikes"] == 1 and m["loss_spike_steps"][0][:2] == [4, 25], (
        m["divergence_notes"])

    calls["n"] = 0  # call 14: the sixth and last training step of epoch 1 (step 11)
    monkeypatch.setattr(M, "rel_l2", poisoned_at({14}, float("nan")))
    m = train(_cfg(tiny_config), tmp_path / "last", progress=False)
    assert m["lr_halvings"] == 1 and "at epoch 1 (step 11)" in m["divergence_notes"][0], m["divergence_notes"]

    calls["n"] = 0
    monkeypatch.setattr(M, "rel_l2", poisoned_at(set(range(10, 10**6)), float("nan")))
    with pytest.raises(DivergenceError, match=r"diverged at epoch 1 \(step 7\).*last finite loss was [0-9.]+ at "
                                              r"epoch 1, step 6"):
        train(_cfg(tiny_config, divergence_retries=0), tmp_path / "stop", progress=False)
    for ck in (tmp_path / "stop" / "checkpoints").glob("*.ckpt"):
        state = torch.load(ck, map_location="cpu", weights_only=True)["state_dict"]
        assert all(torch.isfinite(v).all() for v in state.values())


# rel_l2 is called 8 times an epoch (6 training steps, 2 validation batches): calls 25-30 are epoch 3's training
# steps, 31-32 its validation, 34 a training step of epoch 4 (step 25)
@pytest.mark.parametrize("rise", [
    pytest.param((range(25, 31), 4.0), id="training-loss"),  # over twice the best epoch's, under the blow-up factor 5
    pytest.param((range(31, 33), 10.0), id="validation-error"),  # the training loss unchanged
])
def test_a_blow_up_goes_back_past_an_epoch_whose_error_rose_before_it(tiny_config, tmp_path, monkeypatch, rise):
    """Epoch 3's training loss at 4x, or its validation error at 10x, then two steps of epoch 4 at 1000x: the restore
    goes back to the start of epoch 3, not to the state epoch 3 left behind.  (Without the rise the same spike goes
    back to the start of epoch 4: the spike case of the test above.)"""
    from opformer.tasks import burgers as M

    real, calls = M.rel_l2, {"n": 0}
    raised, factor = rise

    def rise_then_spike(pred, target):
        calls["n"] += 1
        out = real(pred, target)
        if calls["n"] in raised:
            return out * factor
        return _one_sample(out, 1000.0) if calls["n"] in (34, 35) else out

    monkeypatch.setattr(M, "rel_l2", rise_then_spike)
    m = train(_cfg(tiny_config, epochs=5), tmp_path / "rise", progress=False)
    assert m["lr_halvings"] == 1, m["divergence_notes"]
    assert "at epoch 4 (step 25): restored the state of the start of epoch 3" in m["divergence_notes"][0]


def test_one_step_spike_is_kept_and_counted(tiny_config, tmp_path, monkeypatch, capsys):
    """A single step loss 1000x the recent median from one sample of the batch, whose next step is normal, is not a
    blow-up: the run keeps its learning rate and ends as a run without the spike does (same number of steps), says
    so once, and counts it in metrics.json with the sample that caused it.  Such a spike on an epoch's last step
    followed by one on the next epoch's first is a blow-up across the epoch boundary: the restore goes back to the
    start of the spiking epoch, not to the state it left."""
    from opformer.tasks import burgers as M

    real, calls = M.rel_l2, {"n": 0}

    def at(bad: set):
        def f(pred, target):
            calls["n"] += 1
            out = real(pred, target)
            return _one_sample(out, 1000.0) if calls["n"] in bad else out
        return f

    monkeypatch.setattr(M, "rel_l2", at({34, 37}))  # epoch 4, steps 25 and 28: two isolated spikes
    m = train(_cfg(tiny_config, epochs=5), tmp_path / "hard", progress=False)
    out = capsys.readouterr().out
    assert m["lr_halvings"] == 0 and m["divergence_notes"] == [], m["divergence_notes"]
    assert m["loss_spikes"] == 2 and [s[:2] for s in m["loss_spike_steps"]] == [[4, 25], [4, 28]]
    assert m["loss_spike_steps"][0][2] > 10.0  # the recorded loss is the spiked one (1000x a loss of order 0.1)
    # one sample of each batch was scaled: it is named (by its number in the data file), the others stay usual
    assert out.count("kept as a hard batch") == 1 and "epoch 4, step 25" in out, out
    assert "its worst sample (sample " in out and m["loss_spike_steps"][0][3] > 10.0
    assert all(s[4].startswith("sample ") for s in m["loss_spike_steps"]), m["loss_spike_steps"]
    assert sum(n for _, n in m["loss_spike_samples"]) == 2
    assert m["epochs"] == 5 and math.isfinite(m["test_rel_l2"])

    calls["n"] = 0  # call 30: the last training step of epoch 3 (step 23); call 33: the first of epoch 4 (step 24)
    monkeypatch.setattr(M, "rel_l2", at({30, 33}))
    m = train(_cfg(tiny_config, epochs=5), tmp_path / "across", progress=False)
    assert m["lr_halvings"] == 1 and m["loss_spikes"] == 0, m["divergence_notes"]
    assert "two steps in a row" in m["divergence_notes"][0]
    assert "at epoch 3 (step 23): restored the state of the start of epoch 3" in m["divergence_notes"][0]


def test_a_blow_up_with_no_retries_left_is_trained_on_and_counted(tiny_config, tmp_path, monkeypatch):
    """Every training step of epoch 4 at 1000x with no retries (--divergence-retries 0): nothing is restored, the run
    ends, and the epoch's logged training loss holds those steps (a spike and the one after it are both counted once
    no restore can follow), not an empty or spike-free mean."""
    from opformer.tasks import burgers as M
    from opformer.train.plots import read_run_history

    real, calls = M.rel_l2, {"n": 0}

    def blown(pred, target):
        calls["n"] += 1
        out = real(pred, target)
        return out * 1000.0 if 33 <= calls["n"] <= 38 else out  # the six training steps of epoch 4

    monkeypatch.setattr(M, "rel_l2", blown)
    m = train(_cfg(tiny_config, epochs=5, divergence_retries=0), tmp_path / "run", progress=False)
    assert m["lr_halvings"] == 0 and m["epochs"] == 5
    loss = dict(read_run_history(tmp_path / "run" / "logs")["train_loss_epoch"])
    assert loss[4] > 100 * loss[3], loss


def test_a_collapse_to_the_mean_is_restored_from(tiny_config, tmp_path, monkeypatch):
    """Epoch 3's validation predictions replaced by the validation targets' mean field (what a model that collapsed
    to the mean predicts): its error is the mean field's, well above the best so far but far under the blow-up
    rules' thresholds; the run goes back to the start of epoch 3 with half the learning rate and says why."""
    from opformer.train.module import OperatorModule

    real = OperatorModule.forward

    def collapsing(self, batch):
        out = real(self, batch)
        if not self.training and self.current_epoch == 3 and self._mean_field is not None:
            return self._mean_field.to(out.dtype).expand_as(out).clone()
        return out

    monkeypatch.setattr(OperatorModule, "forward", collapsing)
    m = train(_cfg(tiny_config, epochs=5), tmp_path / "collapse", progress=False)
    assert m["lr_halvings"] == 1, m["divergence_notes"]
    note = m["divergence_notes"][0]
    assert note.startswith("the validation error of epoch 3") and "collapsed to the mean: restored" in note, note
    assert "restored the state of the start of epoch 3" in note
    assert m["val_rel_l2"] < 0.75 * float(note.split("mean field (")[1].split(")")[0])


def test_missing_or_wrong_problem_data_is_refused(tmp_path, capsys):
    """A missing file, or 2D (Darcy-shaped) arrays given to a 1D Burgers preset, fail with the file and shapes."""
    import numpy as np

    code = main(["train", "burgers-gt", "--data", str(tmp_path / "missing.h5"), "--out", str(tmp_path / "y"),
                 "--no-progress"])
    assert code == 2 and "missing.h5" in capsys.readouterr().err
    darcy_like = tmp_path / "darcy_like.npz"
    np.savez(darcy_like, a=np.ones((4, 9, 9)), u=np.ones((4, 9, 9)))
    code = main(["train", "burgers-gt", "--data", str(darcy_like), "--out", str(tmp_path / "z"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "darcy_like.npz" in err and "(4, 9, 9)" in err, err


def _cli(args, **kw):
    return subprocess.Popen([PYTHON, "-m", "opformer", *args], env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


@pytest.mark.slow
def test_kill_9_then_resume_gives_the_uninterrupted_metrics(tiny_config, tmp_path):
    """kill -9 at an arbitrary moment after the first checkpoint; --resume ends with the same metrics."""
    args = ["train", str(tiny_config), "--epochs", "60", "--no-progress"]
    # the uninterrupted run goes through the same command and thread count (float sums depend on the threads)
    ref = _cli(args + ["--out", str(tmp_path / "full")])
    assert ref.wait(timeout=600) == 0, ref.stdout.read()[-3000:]
    full = json.loads((tmp_path / "full" / "metrics.json").read_text())
    out = tmp_path / "killed"
    proc = _cli(args + ["--out", str(out)])
    last = out / "checkpoints" / "last.ckpt"
    deadline = time.time() + 240
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(random.uniform(0.0, 0.3))
    assert proc.poll() is None, "the run ended before it could be killed: " + proc.stdout.read()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "metrics.json").exists()
    epoch_at_kill = torch.load(last, map_location="cpu", weights_only=True)["epoch"]
    assert epoch_at_kill < 50
    res = _cli(args + ["--out", str(out), "--resume"])
    log, _ = res.communicate(timeout=400)
    assert res.returncode == 0, log[-3000:]
    resumed = json.loads((out / "metrics.json").read_text())
    assert resumed["epochs"] == 60
    # the training history of both runs is kept (Lightning's CSV logger restarts its file)
    from opformer.train.plots import read_run_history

    epochs = {e for e, _ in read_run_history(out / "logs").get("val_rel_l2", [])}
    assert epochs == set(range(60))
    assert (out / "plots" / "training_curves.png").exists()
    assert resumed["val_rel_l2"] == pytest.approx(full["val_rel_l2"], rel=1e-5, abs=1e-7)
    assert resumed["test_rel_l2"] == pytest.approx(full["test_rel_l2"], rel=1e-5, abs=1e-7)


@pytest.mark.slow
def test_ddp_two_cpu_processes_match_one_process(tiny_config, tmp_path):
    """torchrun with 2 gloo processes (each half of every batch, gradients averaged) = 1 process, within float
    tolerance: the sampler shards each single-process batch exactly over the ranks."""
    cfg_path = tmp_path / "nodrop.yaml"
    cfg = yaml.safe_load(tiny_config.read_text())
    cfg["model"]["dropout"] = 0.0  # dropout masks are drawn per process; without them the runs are comparable
    cfg_path.write_text(yaml.safe_dump(cfg))
    one = _cli(["train", str(cfg_path), "--epochs", "2", "--no-progress", "--out", str(tmp_path / "single")])
    assert one.wait(timeout=600) == 0, one.stdout.read()[-3000:]
    single = json.loads((tmp_path / "single" / "metrics.json").read_text())
    out = tmp_path / "ddp"
    cmd = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "opformer", "train",
           str(cfg_path), "--epochs", "2", "--devices", "2", "--strategy", "ddp", "--accelerator", "cpu",
           "--no-progress", "--out", str(out)]
    res = subprocess.run([PYTHON, *cmd], env=cli_env(), capture_output=True, text=True, timeout=500)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    ddp = json.loads((out / "metrics.json").read_text())
    assert ddp["val_rel_l2"] == pytest.approx(single["val_rel_l2"], rel=1e-4)
    assert ddp["test_rel_l2"] == pytest.approx(single["test_rel_l2"], rel=1e-4)


def test_checkpoint_flushes_the_csv_history(tmp_path):
    """A run killed right after a checkpoint keeps its history: the CSV logger's buffered rows are written when the
    checkpoint is made (Lightning's CSVLogger otherwise writes every 100 steps)."""
    from types import SimpleNamespace

    import lightning as L

    from opformer.train.callbacks import FlushLoggersOnCheckpoint
    from opformer.train.plots import read_metrics_csv

    logger = L.pytorch.loggers.CSVLogger(tmp_path, name="logs", version="")
    for epoch in range(3):
        logger.log_metrics({"epoch": epoch, "val_rel_l2": 1.0 / (epoch + 1)}, step=epoch)
    csv = tmp_path / "logs" / "metrics.csv"
    assert not csv.exists() or "val_rel_l2" not in csv.read_text()  # still buffered
    FlushLoggersOnCheckpoint().on_save_checkpoint(SimpleNamespace(loggers=[logger]), None, {})
    assert [e for e, _ in read_metrics_csv(csv)["val_rel_l2"]] == [0, 1, 2]


def test_run_history_joins_the_parts_a_resumed_run_kept(tmp_path):
    """A resumed run's logs: the parts of earlier processes (metrics-0.csv, metrics-1.csv, ... in that order, also
    past 9) and then metrics.csv, a later row of an epoch replacing an earlier one; no log at all gives nothing."""
    from opformer.train.plots import read_run_history

    logs = tmp_path / "logs"
    logs.mkdir()
    head = "epoch,step,train_rel_l2,val_rel_l2\n"
    (logs / "metrics-0.csv").write_text(head + "0,9,,0.5\n0,9,0.6,\n1,19,,0.4\n")
    (logs / "metrics-10.csv").write_text(head + "3,39,,0.2\n")
    (logs / "metrics-2.csv").write_text(head + "1,19,,0.35\n2,29,,0.3\n")  # epoch 1 again after a kill
    (logs / "metrics.csv").write_text(head + "3,39,,0.25\n4,49,,0.1\n")
    hist = read_run_history(logs)
    assert hist["val_rel_l2"] == [(0, 0.5), (1, 0.35), (2, 0.3), (3, 0.25), (4, 0.1)]
    assert hist["train_rel_l2"] == [(0, 0.6)]
    assert read_run_history(tmp_path / "missing") == {}


def test_the_trainers_adam_is_fused_and_updates_as_plain_adam():
    """The fused Adam the trainer uses makes the same update as the reference per-tensor Adam, to rounding."""
    from opformer.train.module import make_adam

    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).double()
    b = copy.deepcopy(a)
    fused = make_adam(a.parameters(), lr=1e-2, weight_decay=1e-3)
    plain = torch.optim.Adam(b.parameters(), lr=1e-2, weight_decay=1e-3, foreach=False)
    assert fused.defaults["fused"] is True
    assert make_adam(a.parameters(), lr=1e-2, fused=False).defaults.get("fused") in (None, False)
    x = torch.randn(32, 8, dtype=torch.float64)
    for _ in range(10):
        for net, opt in ((a, fused), (b, plain)):
            opt.zero_grad()
            net(x).pow(2).mean().backward()
            opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)


def test_adam_beta2_reaches_the_trainers_optimizer(tiny_config, tmp_path):
    """``train.adam_beta2`` is the second-moment decay of the optimizer a run uses (the checkpoint's param groups),
    the fused and per-tensor versions make plain Adam's update with it, and a value outside [0, 0.9999] is refused."""
    from opformer.config import ConfigError
    from opformer.train.module import make_adam

    train(_cfg(tiny_config, adam_beta2=0.95), tmp_path / "run", progress=False)
    ck = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ck["optimizer_states"][0]["param_groups"][0]["betas"][1] == pytest.approx(0.95, rel=1e-12)
    torch.manual_seed(0)
    nets = [torch.nn.Linear(6, 4).double() for _ in range(3)]
    for net in nets[1:]:
        net.load_state_dict(nets[0].state_dict())
    opts = [make_adam(nets[0].parameters(), lr=1e-2, beta2=0.9),
            make_adam(nets[1].parameters(), lr=1e-2, beta2=0.9, fused=False),
            torch.optim.Adam(nets[2].parameters(), lr=1e-2, betas=(0.9, 0.9), foreach=False)]
    x = torch.randn(16, 6, dtype=torch.float64)
    for step in range(8):
        for net, opt in zip(nets, opts):
            opt.zero_grad()
            (net(x) * (1 + 10 * (step == 5))).pow(2).mean().backward()  # one large gradient
            opt.step()
    for net in nets[:2]:
        for p, q in zip(net.parameters(), nets[2].parameters()):
            torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)
    default = torch.nn.Linear(6, 4).double()
    assert make_adam(default.parameters(), lr=1e-2).defaults["betas"] == (0.9, 0.999)
    with pytest.raises(ConfigError, match="adam-beta2: must be <= 0.9999"):
        _cfg(tiny_config, adam_beta2=1.0)



def _one_bad_sample(tiny_config, burgers_file, tmp_path, bad: int):
    """(a copy of the tiny Burgers file with sample ``bad``'s target scaled down 100 times, an 8-epoch run config on
    it): the model's relative error on that sample is then about 100 times the others'."""
    import shutil

    import h5py

    data = tmp_path / "one-bad-sample.h5"
    shutil.copy(burgers_file, data)
    with h5py.File(data, "r+") as f:
        f["u"][bad] = f["u"][bad] * 1e-2
    cfg = yaml.safe_load(tiny_config.read_text())
    cfg["data"]["path"] = str(data)
    cfg["train"]["epochs"] = 8
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return data, path


def test_a_spike_names_the_sample_that_caused_it(tiny_config, burgers_file, tmp_path, capsys):
    """A training file with one bad sample (its target scaled down 100 times, so the model's relative error on it is
    about 100 times the others'): each batch that holds it spikes alone and is kept, and the note and metrics.json
    name that sample by its number in the file, found again from the batch's position in its epoch."""
    bad = 13  # a training sample (the training split is the file's first 24)
    data, path = _one_bad_sample(tiny_config, burgers_file, tmp_path, bad)
    m = train(_cfg(path), tmp_path / "run", progress=False)
    out = capsys.readouterr().out
    name = f"sample {bad} of {data}"
    assert m["loss_spikes"] >= 2, (m["loss_spikes"], m["divergence_notes"])
    assert all(s[4] == name for s in m["loss_spike_steps"]), m["loss_spike_steps"]
    assert m["loss_spike_samples"] == [[name, m["loss_spikes"]]]
    assert f"its worst sample ({name}) has relative L2 error" in out and out.count("kept as a hard batch") == 1, out
    assert m["lr_halvings"] == 0, m["divergence_notes"]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_run_resumed_in_the_middle_of_an_epoch_ends_as_an_uninterrupted_one(tiny_config, tmp_path, monkeypatch,
                                                                              workers):
    """``checkpoint_every_n_steps`` writes checkpoints inside an epoch.  A run stopped after one and resumed goes on
    where it stopped: the epoch's remaining batches in the same order (the training loader's position is in the
    checkpoint), the same dropout masks, the epoch's sums so far; it ends with the uninterrupted run's metrics, with
    and without worker processes.  (Such a resume crashed before: Lightning calls no on_train_epoch_start for the
    epoch it resumes inside; the loader started the epoch's order again; with workers the resumed epoch was
    shuffled as epoch 0.)"""
    from opformer.train import callbacks

    calls = {"n": 0}

    def stop_at_the_13th_batch():  # 6 training batches an epoch, then 2 validation batches: epoch 1, its fifth
        calls["n"] += 1
        if calls["n"] == 13:
            raise KeyboardInterrupt

    steps = {"checkpoint_every_n_steps": 2, "num_workers": workers}
    whole = train(_cfg(tiny_config, **steps), tmp_path / "whole", progress=False)
    monkeypatch.setattr(callbacks, "check_stop", stop_at_the_13th_batch)
    with pytest.raises(KeyboardInterrupt):
        train(_cfg(tiny_config, **steps), tmp_path / "run", progress=False)
    saved = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["global_step"] == 10  # written inside epoch 1, after its fourth step
    from opformer.train.cli import _interrupted

    assert "(epoch 1, after 4 of its batches)" in _interrupted(str(tmp_path / "run"), "interrupted")
    assert saved["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [{"epoch": 1, "batches": 4}]
    assert saved["divergence"]["epoch_sums"][2] == 16.0  # four kept steps of 4 samples so far in that epoch
    rules = saved["divergence"]["rules"]  # what the guard's epoch rules judge by travels too
    assert rules["best_val"] > 0 and rules["epoch_val"][0] == 0 and rules["mean_field_err"] is None  # after epoch 0
    assert len(saved["divergence"]["recent"]) == 10
    monkeypatch.setattr(callbacks, "check_stop", lambda: None)
    m = train(_cfg(tiny_config, **steps), tmp_path / "run", progress=False, resume=True)
    assert m["epochs"] == 3 and m["lr_halvings"] == 0
    assert (m["val_rel_l2"], m["test_rel_l2"]) == (whole["val_rel_l2"], whole["test_rel_l2"])
    # TensorBoard shows the values of the uninterrupted run's steps, each once (those the stopped run logged after
    # its checkpoint purged)
    steps = {tag: [s for s, _ in v] for tag, v in tensorboard_scalars(tmp_path / "run" / "logs").items()}
    assert steps == {tag: [s for s, _ in v] for tag, v in tensorboard_scalars(tmp_path / "whole" / "logs").items()}


def test_a_one_sample_spike_on_one_of_two_processes_is_kept_by_both(tiny_config, burgers_file, tmp_path):
    """torchrun with 2 processes on a file with one bad sample (its target scaled down 100 times): the rank whose half
    of a batch holds it spikes alone, the ranks agree that it is one sample's spike (the kind is reduced over them),
    keep it and go on; every process records the spike of the process whose half held it (its loss, its worst error,
    the sample's name), and rank 0's note names the sample."""
    bad = 13
    data, path = _one_bad_sample(tiny_config, burgers_file, tmp_path, bad)
    out = tmp_path / "ddp"
    cmd = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "opformer", "train", str(path),
           "--devices", "2", "--strategy", "ddp", "--accelerator", "cpu", "--no-progress", "--out", str(out)]
    res = subprocess.run([PYTHON, *cmd], env=cli_env(), capture_output=True, text=True, timeout=500)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["loss_spikes"] >= 2 and m["lr_halvings"] == 0, (m["loss_spikes"], m["divergence_notes"])
    name = f"sample {bad} of {data}"
    for _, _, loss, worst, who in m["loss_spike_steps"]:  # the spiking half's record, whichever rank held it
        assert who == name and worst > 10.0 and loss > 1.0, m["loss_spike_steps"]
    assert m["loss_spike_samples"] == [[name, m["loss_spikes"]]]
    assert f"its worst sample ({name}) has relative L2 error" in res.stdout, res.stdout[-4000:]
