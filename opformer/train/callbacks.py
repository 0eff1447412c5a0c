"""Lightning plumbing of our own: atomic checkpoint writes and index samplers that make resume and DDP exact."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Optional

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from torch.utils.data import Sampler


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write a checkpoint to ``NAME.tmp``, fsync, then rename: a kill at any moment leaves either the old or the
    new file, never a half-written one."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Optional[Any] = None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as fh:
            torch.save(checkpoint, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


class FlushLoggersOnCheckpoint(L.Callback):
    """Write the loggers' buffered rows whenever a checkpoint is made (before its file is written), so that a run
    killed after a checkpoint keeps the training history up to that checkpoint: the CSV logger otherwise buffers
    up to ``flush_logs_every_n_steps`` (100) steps, and a resumed run starts after the checkpoint's epoch."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        for logger in trainer.loggers:
            logger.save()


def atomic_write_text(path, text: str) -> None:
    """Write a text file through a temporary name and an atomic rename."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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
