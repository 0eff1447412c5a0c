"""A resumed run continues its CSV history (logs/metrics-N.csv, logs/metrics.csv) without logging an epoch twice.

A training stopped at an epoch's line on stdout (its output's reader gone, `opformer train ... | head`, or Ctrl-C
there) has logged that epoch's validation row but not written that epoch's checkpoint: the resumed run trains the
epoch again and logged its validation row a second time."""

from __future__ import annotations

import collections
import csv
import signal
import sys

import pytest
import torch

from opformer.cli import main

from .conftest import tensorboard_scalars

EPOCHS = 4


class _Output:
    """stdout whose reader goes away (``"pipe"``) or where Ctrl-C comes (``"ctrl-c"``) as the line of epoch 1 is
    written."""

    def __init__(self, how: str):
        self.how, self.lines = how, []

    def write(self, text: str) -> int:
        if text.startswith("epoch 1 "):
            if self.how == "pipe":
                raise BrokenPipeError(32, "Broken pipe")
            signal.raise_signal(signal.SIGINT)
        self.lines.append(text)
        return len(text)

    def flush(self) -> None:
        pass


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this test whatever the process inherited (a background process of a
    non-interactive shell inherits it ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _logged(logs) -> list[tuple[str, int, str]]:
    """(part, epoch, metric) of every value in the run's CSV history, in the order written."""
    parts = sorted(logs.glob("metrics-*.csv"), key=lambda p: int(p.stem.split("-")[1])) + [logs / "metrics.csv"]
    seen = []
    for part in parts:
        with open(part, newline="") as fh:
            for row in csv.DictReader(fh):
                seen += [(part.name, int(row["epoch"]), key) for key, value in row.items()
                         if key not in ("epoch", "step") and value not in (None, "")]
    return seen


@pytest.mark.parametrize("how, status", [("pipe", 141), ("ctrl-c", 130)])
def test_a_run_stopped_at_an_epoch_line_and_resumed_logs_each_epoch_once(tiny_config, tmp_path, monkeypatch, capsys,
                                                                         ctrl_c_raises, how, status):
    out = tmp_path / "run"
    args = ["train", str(tiny_config), "--epochs", str(EPOCHS), "--out", str(out), "--no-progress"]
    with monkeypatch.context() as m:
        m.setattr(sys, "stdout", _Output(how))
        assert main(args) == status, capsys.readouterr().err
    assert f"the last checkpoint is {out}/checkpoints/last.ckpt (after 1 epoch);" in capsys.readouterr().err
    stopped = _logged(out / "logs")
    assert ("metrics.csv", 1, "val_rel_l2") in stopped  # the stopped epoch's validation row, its checkpoint not written
    assert main(args + ["--resume"]) == 0, capsys.readouterr().err
    logged = _logged(out / "logs")
    counts = collections.Counter((epoch, key) for _, epoch, key in logged)
    assert not [seen for seen, n in counts.items() if n > 1], "an epoch's value logged twice"
    assert [epoch for _, epoch, key in logged if key == "val_rel_l2"] == list(range(EPOCHS))
    assert not list((out / "logs").glob(".*.tmp"))
    # TensorBoard's view of the same history (events after the resumed run's start step purged, as TensorBoard
    # itself reads them): every value once, the epochs in order
    scalars = tensorboard_scalars(out / "logs")
    for tag, points in scalars.items():  # "epoch" goes with the training and the validation values of a step
        steps = [step for step, _ in points]
        assert len(steps) == len(set(steps)) * (2 if tag == "epoch" else 1), f"{tag}: a step logged again: {steps}"
    val_steps = [step for step, _ in scalars["val_rel_l2"]]
    assert len(val_steps) == EPOCHS and val_steps == sorted(val_steps)
    assert [value for _, value in scalars["epoch"]] == [float(e) for e in range(EPOCHS) for _ in range(2)]



def test_rows_of_the_epochs_to_train_again_are_dropped_and_the_others_kept_as_they_were(tmp_path):
    from opformer.train.callbacks import drop_rows_from

    logs = tmp_path
    (logs / "metrics-0.csv").write_text("epoch,step,val_rel_l2\n0,5,0.5\n1,11,0.4\n")
    (logs / "metrics-1.csv").write_text("epoch,step,train_rel_l2,val_rel_l2\n1,11,,0.45\n1,11,0.7,\n2,17,,0.3000001\n")
    (logs / "metrics-old.csv").write_text("epoch,step\n9,99\n")  # the user's, not a part of the history
    kept, replaced = ((logs / name).stat().st_ino for name in ("metrics-0.csv", "metrics-1.csv"))
    assert drop_rows_from(logs, 2) == [logs / "metrics-1.csv"]
    assert (logs / "metrics-0.csv").stat().st_ino == kept  # untouched: nothing of it dropped
    assert (logs / "metrics-1.csv").stat().st_ino != replaced  # a new file renamed over it, never written in place
    assert (logs / "metrics-1.csv").read_text() == "epoch,step,train_rel_l2,val_rel_l2\n1,11,,0.45\n1,11,0.7,\n"
    assert (logs / "metrics-old.csv").read_text() == "epoch,step\n9,99\n"
    assert drop_rows_from(logs, 0) == [logs / "metrics-0.csv", logs / "metrics-1.csv"]
    assert (logs / "metrics-0.csv").read_text() == "epoch,step,val_rel_l2\n"  # the part stays: the numbers hold
    assert sorted(p.name for p in logs.iterdir()) == ["metrics-0.csv", "metrics-1.csv", "metrics-old.csv"]


def test_the_first_epoch_to_train_is_the_loaders_next_pass():
    from opformer.train.callbacks import first_epoch_to_train

    def written(epoch, loader):
        return {"epoch": epoch, "loops": {"fit_loop": {"state_dict": {"combined_loader": [loader]}}}}

    after_epoch = written(1, {"epoch": 2, "batches": 0})  # at the end of epoch 1
    inside_epoch = written(3, {"epoch": 3, "batches": 4})  # after 4 batches of epoch 3
    assert first_epoch_to_train(after_epoch) == 2
    assert first_epoch_to_train(inside_epoch) == 3
    assert first_epoch_to_train({"epoch": 4, "state_dict": {"w": torch.zeros(1)}}) == 5  # no loader state recorded


def test_the_next_kept_part_follows_the_highest_one(tmp_path):
    """metrics.csv is kept under the number after the highest part there: after metrics-0.csv was removed (or beside
    a user's metrics-old.csv) a count of the parts named metrics-1.csv again and the older rows were written over."""
    from opformer.train.run import _keep_csv_history

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "metrics-1.csv").write_text("epoch,val_rel_l2\n1,0.5\n")  # metrics-0.csv was removed
    (logs / "metrics.csv").write_text("epoch,val_rel_l2\n2,0.4\n")
    assert _keep_csv_history(logs) == logs / "metrics-2.csv"
    assert (logs / "metrics-1.csv").read_text() == "epoch,val_rel_l2\n1,0.5\n"
    assert (logs / "metrics-2.csv").read_text() == "epoch,val_rel_l2\n2,0.4\n"
    (logs / "metrics-old.csv").write_text("mine\n")
    (logs / "metrics.csv").write_text("epoch,val_rel_l2\n3,0.3\n")
    assert _keep_csv_history(logs) == logs / "metrics-3.csv"
    assert (logs / "metrics-old.csv").read_text() == "mine\n" and not (logs / "metrics.csv").exists()
