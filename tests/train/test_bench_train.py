"""`opformer bench train`: an epoch of the real trainer against its bare optimizer steps."""

from __future__ import annotations

import json

import pytest

from opformer.cli import main


def test_bench_train_times_an_epoch_against_its_steps(tiny_config, tmp_path, capsys, one_thread):
    out = tmp_path / "overhead.json"
    code = main(["bench", "train", str(tiny_config), f"{tiny_config}:n_train=16,batch_size=8", "--epochs", "2",
                 "--repeats", "2", "--warmup", "1", "--threads", "1", "--json", str(out)])
    assert code == 0
    a, b = json.loads(out.read_text())
    assert a["steps"] == 24 // 4 and b["steps"] == 16 // 8  # every training batch of the timed epoch is counted
    assert a["n_train"] == 24 and b["n_train"] == 16 and b["batch"] == 8
    for rec in (a, b):
        assert len(rec["epoch_seconds_all"]) == 2 and rec["epoch_seconds"] == rec["epoch_seconds_all"][-1]
        # on the CPU the bare steps are timed between the epoch's own steps (about 2 an epoch: after every
        # steps // 2-th step) and after every epoch (2 repeats each); every epoch gets its own ratio
        assert rec["bare_steps"] == "interleaved"
        assert rec["bare_step_seconds"] > 0 and len(rec["bare_step_seconds_all"]) == 2
        assert len(rec["bare_step_seconds_after_per_epoch"]) == 2
        assert len(rec["bare_step_seconds_per_epoch"]) == 2 and len(rec["overhead_per_epoch"]) == 2
        assert rec["bare_step_seconds"] == rec["bare_step_seconds_per_epoch"][-1]
        assert rec["overhead"] == pytest.approx(rec["epoch_seconds"] / (rec["steps"] * rec["bare_step_seconds"]))
        assert rec["overhead_per_epoch"][0] == pytest.approx(
            rec["epoch_seconds_all"][0] / (rec["steps"] * rec["bare_step_seconds_per_epoch"][0]))
        assert 0 < rec["model_step_seconds"]
        # where the rest went: every epoch validated and wrote its two checkpoints (best, last) inside its time
        assert len(rec["validation_seconds_all"]) == len(rec["checkpoint_seconds_all"]) == 2
        for e, v, c in zip(rec["epoch_seconds_all"], rec["validation_seconds_all"], rec["checkpoint_seconds_all"]):
            assert v > 0 and c > 0 and v + c < e
        assert rec["checkpoint_writer"] == "in the training loop"  # the CPU default
        assert len(rec["gc_seconds_all"]) == 2 and all(0 <= g < e for g, e in zip(rec["gc_seconds_all"],
                                                                                 rec["epoch_seconds_all"]))
    text = capsys.readouterr().out
    assert "validation" in text and "checkpoints" in text
    assert text.count("overhead") >= 3 and "goal <= 1.25" in text


def test_the_interleaved_bare_steps_are_taken_out_of_the_epoch(monkeypatch):
    """The epoch clock calls its probe after every k-th training step (k = steps // probes_per_epoch) and does not
    count the probe's time in the epoch: a probe that sleeps 50 ms in an epoch of 8 near-instant steps."""
    import time
    from types import SimpleNamespace

    from opformer.bench.train import _epoch_clock

    clock = _epoch_clock()
    calls = []

    def probe():
        calls.append(1)
        time.sleep(0.05)
        return [0.05]

    clock.probe, clock.probes_per_epoch = probe, 4
    trainer = SimpleNamespace(num_training_batches=8)
    for _epoch in range(2):
        clock.on_train_epoch_start(trainer, None)
        for i in range(8):
            clock.on_train_batch_end(trainer, None, None, None, i)
        clock.on_train_epoch_end(trainer, None)
    assert len(calls) == 8  # after steps 2, 4, 6 and 8 of each epoch
    assert clock.probes == [[0.05] * 4, [0.05] * 4]
    for seconds, batches in clock.epochs:
        assert batches == 8 and 0 <= seconds < 0.05  # 0.2 s of probes were left out


def test_bench_train_refuses_a_malformed_case(tiny_config, capsys):
    assert main(["bench", "train", f"{tiny_config}:n_train"]) == 2
    assert "expected PRESET:FIELD=VALUE" in capsys.readouterr().err


def test_bench_train_on_a_gpu_that_is_not_there_is_one_line(tiny_config, capsys, monkeypatch):
    """``--device cuda`` without a visible CUDA device: a one-line error before anything is trained."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "train", str(tiny_config), "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["opformer: error: --device cuda: no CUDA device is visible to torch"]
