"""Lightning plumbing of our own: atomic checkpoint writes and index samplers that make resume and DDP exact."""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from torch.utils.data import Sampler

from ..atomic import replacing
from ..interrupt import check_stop, deferred
from .plots import history_parts


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write a checkpoint to a temporary file of its own in the same directory, fsync it, rename it over ``path``
    and fsync the directory: a kill at any moment leaves either the old or the new file, never a half-written one,
    and a failed write (full disk, an exception) removes its temporary file.  Ctrl-C or SIGTERM during the write is
    held until the file is in place (:func:`opformer.interrupt.deferred`): raised inside ``torch.save`` it would
    surface as a torch ``RuntimeError`` instead of the interruption.  Reads only plain tensors and containers
    (``weights_only=True``).  A write the system refuses (permission denied, the directory gone) is reported as an
    ``OSError`` of the checkpoint's own path, not of its temporary file (:func:`opformer.atomic.replacing`)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Optional[Any] = None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with deferred(), replacing(path, "wb") as fh:  # deferred outermost: the signal comes after the rename
            torch.save(checkpoint, fh)

    def load_checkpoint(self, path, map_location: Optional[Any] = lambda storage, loc: storage,
                        weights_only: Optional[bool] = None) -> dict[str, Any]:
        """Lightning's load, always with ``weights_only=True`` given explicitly: no caller can ask for unpickling,
        and torch's ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` overrides only calls that leave ``weights_only`` unset."""
        return super().load_checkpoint(path, map_location=map_location, weights_only=True)


class StopOnRequest(L.Callback):
    """Raise ``KeyboardInterrupt`` before the next training, validation or test batch once a stop was requested
    (:mod:`opformer.interrupt`), so that Lightning ends the run as it does on Ctrl-C (``last.ckpt`` stays the resume
    point)."""

    def on_train_batch_start(self, *args, **kwargs) -> None:
        check_stop()

    def on_validation_batch_start(self, *args, **kwargs) -> None:
        check_stop()

    def on_test_batch_start(self, *args, **kwargs) -> None:
        check_stop()


class FlushLoggersOnCheckpoint(L.Callback):
    """Write the loggers' buffered rows whenever a checkpoint is made (before its file is written), so that a run
    killed after a checkpoint keeps the training history up to that checkpoint: the CSV logger otherwise buffers
    up to ``flush_logs_every_n_steps`` (100) steps, and a resumed run starts after the checkpoint's epoch."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        for logger in trainer.loggers:
            logger.save()


class ResumedHistory(L.Callback):
    """Continue the history of a resumed run without repeating an epoch: when the checkpoint is loaded (before the
    resumed fit logs anything), the CSV rows of the epochs that the checkpoint does not hold are dropped from the
    earlier parts in ``logs`` (:func:`drop_rows_from`), and the TensorBoard writer starts a new events file that
    purges the earlier files' events from the checkpoint's step on (:func:`purge_tensorboard_from`).  A run stopped
    after an epoch's validation was logged but before that epoch's checkpoint was written (its output closed or
    Ctrl-C at the epoch's line) kept that validation value, and the resumed run, which trains the epoch again,
    logged it a second time."""

    def __init__(self, logs):
        self.logs = Path(logs)

    def on_load_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        if trainer.is_global_zero:
            drop_rows_from(self.logs, first_epoch_to_train(checkpoint))
            purge_tensorboard_from(trainer, int(checkpoint.get("global_step", 0)))


def purge_tensorboard_from(trainer, step: int) -> None:
    """Close the TensorBoard loggers' writers and open new ones that purge ``step`` and later steps of the earlier
    events files (TensorBoard's ``purge_step``: the events a resumed run logs again).  A resumed run logs its first
    batch at the checkpoint's global step; what the checkpoint holds was logged at earlier steps (an epoch's
    validation at its last batch's step)."""
    from lightning.pytorch.loggers import TensorBoardLogger

    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger) and step > 0:
            # the writer was made when the fit set up (Lightning touches every logger's experiment there); the next
            # use of ``experiment`` makes the new one with the kwargs given to SummaryWriter
            if logger._experiment is not None:
                logger._experiment.flush()
                logger._experiment.close()
                logger._experiment = None
            logger._kwargs["purge_step"] = step


def first_epoch_to_train(checkpoint: dict) -> int:
    """The epoch a run resumed from ``checkpoint`` trains first: the epoch of the training loader's next pass (the
    epoch the checkpoint was written in when it was written inside it), else the one after the checkpoint's."""
    from .module import checkpoint_loader_state

    state = checkpoint_loader_state(checkpoint)
    if isinstance(state, dict) and isinstance(state.get("epoch"), int):
        return state["epoch"]
    return int(checkpoint.get("epoch", -1)) + 1


def drop_rows_from(logs, epoch: int) -> list[Path]:
    """Remove the rows of ``epoch`` and later epochs from every part of the history in ``logs``; returns the parts
    rewritten.  A part is rewritten only when it loses a row, through a temporary file renamed over it (a kill leaves
    the old part or the new one), its other lines as they were; a part left with its header only is kept, so that
    the parts' numbers stay as they are."""
    rewritten = []
    for part in history_parts(logs):
        with open(part, newline="") as fh:
            lines = fh.read().splitlines(keepends=True)
        if not lines:
            continue
        header = next(csv.reader([lines[0]]))
        if "epoch" not in header:
            continue
        at = header.index("epoch")
        kept = [lines[0]] + [line for line in lines[1:] if not _epoch_at_least(line, at, epoch)]
        if len(kept) == len(lines):
            continue
        with replacing(part, "w", newline="") as fh:
            fh.writelines(kept)
        rewritten.append(part)
    return rewritten


def _epoch_at_least(line: str, at: int, epoch: int) -> bool:
    """Whether the CSV row ``line`` is of ``epoch`` or a later epoch (a row with no epoch is not)."""
    cells = next(csv.reader([line]), [])
    try:
        return int(float(cells[at])) >= epoch
    except (IndexError, ValueError):
        return False


class EpochLine(L.Callback):
    """One line per epoch on stdout (rank zero) when the progress bar is off, for logs of long or background runs:
    ``epoch 2 [3/100]  train_rel_l2 1.2e-02  val_rel_l2 3.4e-02  12.3 s/epoch  eta 19.9 min`` (the epoch's index from
    0, as everywhere else, and the progress); the seconds per epoch
    count from the start of the epoch to the end of its validation."""

    def __init__(self):
        self._t0 = None

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._t0 = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:  # after the epoch's validation
        if self._t0 is None:
            return
        dt = time.perf_counter() - self._t0
        # on every rank: the training means and reading a metric logged with sync_dist are collectives
        m = dict(trainer.callback_metrics)
        if hasattr(pl_module, "train_epoch_means"):  # logged by the module after this hook: taken from it directly
            m.update(pl_module.train_epoch_means())
        vals = "".join(f"  {k} {float(m[k]):.4e}" for k in ("train_rel_l2", "val_rel_l2") if k in m)
        if not trainer.is_global_zero:
            return
        left = max(trainer.max_epochs - trainer.current_epoch - 1, 0)
        # the epoch index counts from 0, as in metrics.csv, metrics.json and the notes; [done/total] is the progress
        print(f"epoch {trainer.current_epoch} [{trainer.current_epoch + 1}/{trainer.max_epochs}]{vals}  {dt:.2f} "
              f"s/epoch  eta {left * dt / 60:.1f} min", flush=True)


class EpochShuffleSampler(Sampler[int]):
    """Shuffle that depends only on (seed, epoch), sharded over ``num_replicas`` processes without padding.

    Rank r takes positions r, r + R, r + 2R, ... of the epoch's permutation, so the union of the ranks' k-th batches
    of size b/R is exactly the single-process k-th batch of size b: DDP on R processes reproduces one process.
    With several processes a tail of fewer than ``num_replicas`` samples is dropped so every rank steps equally.
    Lightning calls :meth:`set_epoch` every epoch, so a resumed run sees the same order as an uninterrupted one.
    """

    def __init__(self, n: int, seed: int, num_replicas: int = 1, rank: int = 0, shuffle: bool = True):
        self.n, self.seed, self.num_replicas, self.rank, self.shuffle = n, seed, num_replicas, rank, shuffle
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + 7919 * self.epoch)
            order = torch.randperm(self.n, generator=g).tolist()
        else:
            order = list(range(self.n))
        # every rank gets the same number of samples (a tail of fewer than num_replicas samples is dropped)
        order = order[: len(order) - len(order) % self.num_replicas]
        return iter(order[self.rank :: self.num_replicas])

    def __len__(self) -> int:
        return self.n // self.num_replicas
