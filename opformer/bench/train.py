"""Training overhead: the wall time of an ``opformer train`` epoch against the bare optimizer steps it contains.

For a preset (with any ``--FIELD VALUE`` overrides), in one process:

* **bare step**: one optimizer step on a batch already in memory: the operator (normalizers included) forward, the
  task's loss (with its regularizer), backward, the gradient clip, Adam, ``zero_grad``.  The median of ``repeats``
  after ``warmup`` steps.
* **epoch**: the real trainer of ``opformer train`` (the same Lightning trainer, data module, loggers and the two
  checkpoint callbacks writing into a temporary directory), timed from the start of a training epoch to its end,
  which includes the epoch's validation and checkpoints.  The first epoch carries one-time costs (allocator warm-up,
  first checkpoint); the figure is the last of ``epochs`` epochs.

Where the rest of the epoch goes is recorded beside it: the seconds of its validation loop and of its checkpoint
writes as the training loop waits for them (``checkpoint_seconds``; with the background writer, the default on a
GPU, only the copy of the state), and the time the Python garbage collector ran within it (``gc_seconds``).

``overhead = epoch / (steps × bare step)``, where steps is the number of training batches of the epoch.  The bare
steps are timed on the training batches' shape, on a copy of the operator.  On the CPU they are interleaved with the
epoch's own steps: after every k-th training step one bare step is timed (about ``repeats`` an epoch) and its time
is taken out of the epoch's, so that the epoch and the bare step it is divided by are sampled over the same seconds
of the machine's load (on a shared machine the median of bare steps timed after an epoch drifted by up to 50 % from
one epoch to the next).  The bare step of an epoch is the median of its interleaved ones.  On a GPU the bare steps
are timed right after every epoch only (``repeats`` of them): a synchronising probe inside the epoch would stall the
trainer's queued work, which is what is measured there.  The after-epoch timings are recorded on the CPU too
(``bare_step_seconds_after_per_epoch``); the ratio of every epoch is recorded, the figure is the last one's.  The
model's share is reported too: one forward + backward of the network alone (``operator.model``) on already
normalized inputs.
"""

from __future__ import annotations

import copy
import gc
import statistics
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch

__all__ = ["train_overhead"]


def _epoch_clock():
    """A Lightning callback that records (wall seconds, training batches) of every training epoch, its validation
    and checkpoints included, in its ``epochs`` list, and where the time outside the training steps went: the
    seconds of the epoch's validation loop (``validation``) and of its checkpoint writes as the training loop waits
    for them (``checkpoints``, through :meth:`watch_checkpoints`).  Lightning writes the end-of-epoch checkpoints
    in its checkpoint callbacks' epoch-end hooks, which run after every other callback's, so their time is added to
    the epoch that has just been closed (without it, as before, the epoch figure left the checkpoints out)."""
    import lightning as L

    class EpochClock(L.Callback):
        def __init__(self):
            self.epochs: list[tuple[float, int]] = []
            self.validation: list[float] = []
            self.checkpoints: list[float] = []
            self.collections: list[float] = []
            self._val = self._ckpt = self._gc = 0.0
            self._closed = False  # between this callback's epoch end and the next epoch's start
            # interleaved bare steps: `probe()` returns step times; called after every `_every`-th training step,
            # its wall time is taken out of the epoch's; `probes` holds each epoch's step times
            self.probe, self.probes_per_epoch, self.probes = None, 0, []
            self._every, self._excluded, self._probed = 0, 0.0, []
            self._gc_t0 = None

        def gc_event(self, phase: str, info: dict) -> None:
            """A ``gc.callbacks`` hook: the seconds the Python garbage collector ran within each epoch."""
            if phase == "start":
                self._gc_t0 = time.perf_counter()
            elif self._gc_t0 is not None:
                self._gc += time.perf_counter() - self._gc_t0
                self._gc_t0 = None

        def watch_checkpoints(self, trainer) -> None:
            """Time every ``trainer.save_checkpoint`` call (the state gathered and handed to the checkpoint writer,
            and the write itself unless it runs in the background)."""
            save = trainer.save_checkpoint

            def timed(*args, **kwargs):
                t0 = time.perf_counter()
                try:
                    return save(*args, **kwargs)
                finally:
                    dt = time.perf_counter() - t0
                    if self._closed:  # the end-of-epoch checkpoints come after this callback's epoch end
                        seconds, batches = self.epochs[-1]
                        self.epochs[-1] = (seconds + dt, batches)
                        self.checkpoints[-1] += dt
                    else:
                        self._ckpt += dt

            trainer.save_checkpoint = timed

        def on_train_epoch_start(self, trainer, pl_module):
            self._closed = False
            self._excluded, self._probed = 0.0, []
            if self.probe is not None:
                steps = trainer.num_training_batches
                finite = isinstance(steps, int) and steps > 0
                self._every = max(1, steps // max(1, self.probes_per_epoch)) if finite else 1
            self._t0, self._batches, self._val, self._ckpt, self._gc = time.perf_counter(), 0, 0.0, 0.0, 0.0

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self._batches += 1
            if self.probe is not None and self._batches % self._every == 0:
                t0 = time.perf_counter()
                self._probed.extend(self.probe())
                self._excluded += time.perf_counter() - t0

        def on_validation_epoch_start(self, trainer, pl_module):
            self._v0 = time.perf_counter()

        def on_validation_epoch_end(self, trainer, pl_module):
            self._val += time.perf_counter() - self._v0

        def on_train_epoch_end(self, trainer, pl_module):
            self.epochs.append((time.perf_counter() - self._t0 - self._excluded, self._batches))
            self.probes.append(self._probed)
            self.validation.append(self._val)
            self.checkpoints.append(self._ckpt)
            self.collections.append(self._gc)
            self._closed = True

    return EpochClock()


def _after_each_epoch(fn):
    """A Lightning callback that calls ``fn(first_epoch)`` at the end of every training epoch (after the epoch clock,
    which comes before it in the callback list) and keeps the results in its ``results`` list."""
    import lightning as L

    class AfterEpoch(L.Callback):
        def __init__(self):
            self.results: list = []

        def on_train_epoch_end(self, trainer, pl_module):
            self.results.append(fn(not self.results))

    return AfterEpoch()


def _time(fn, repeats: int, warmup: int, sync=lambda: None) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return out


def train_overhead(preset: str, overrides: Optional[dict] = None, *, epochs: int = 2, repeats: int = 10,
                   warmup: int = 3, device: str = "cpu") -> dict:
    """Measure the training overhead of ``preset`` (see the module docstring) on ``device`` ("cpu" or "cuda", one
    device; the trainer's own settings otherwise); returns a record (dict)."""
    from ..data.datasets import stack_samples
    from ..train.cli import _quiet_lightning
    from ..train.config import apply_overrides, load_preset
    from ..train.module import OperatorModule, make_adam
    from ..train.run import (_DataModule, _interruptible, _trainer, background_checkpoints, checkpoint_callbacks,
                             prepare_run)

    cfg = load_preset(preset)
    dev = torch.device(device)
    gpu = dev.type == "cuda"
    cfg, explicit = apply_overrides(cfg, {**(overrides or {}), "epochs": epochs, "accelerator": "gpu" if gpu else "cpu",
                                          "devices": 1})
    run, bundle, operator, artifact, _notes = prepare_run(cfg, frozenset(explicit), progress=False)
    t = run.train
    rec = {"what": "train", "preset": preset, "overrides": dict(overrides or {}), "batch": t.batch_size,
           "n_train": len(bundle.datasets["train"]), "n_val": len(bundle.datasets["val"]),
           "grid": list(bundle.input_grid), "threads": torch.get_num_threads(), "device": device}

    # the bare step on one training batch of the same shape, on a copy of the operator (the training is untouched),
    # timed right after every epoch: the two figures of a ratio see the same machine load
    ds = bundle.datasets["train"]
    batch = {k: v.to(dev) for k, v in stack_samples(ds, range(min(t.batch_size, len(ds)))).items()}
    op = copy.deepcopy(operator).to(dev).train()
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    opt = make_adam(op.parameters(), lr=1e-12)  # the trainer's optimizer; a tiny lr: the timing does not depend on it
    from ..train.cuda_graphs import GraphedModelCall, applies

    # where the trainer graphs the network (opformer.train.cuda_graphs), so does the bare step: like with like
    graphs = t.cuda_graphs is not False and applies(gpu, 1, t.precision) is None
    rec["cuda_graphs"] = graphs
    if graphs:
        op.graphed_call = GraphedModelCall(op.model)

    def bare():
        opt.zero_grad(set_to_none=True)
        pred = op(batch["input"], batch["coords"][:1], batch.get("lead_time"))
        l2, reg = run.task.loss(pred, batch, t)
        (l2 + reg).mean().backward()
        if t.grad_clip:
            torch.nn.utils.clip_grad_norm_(op.parameters(), t.grad_clip)
        opt.step()

    # the network alone (no normalizers, loss or optimizer): its share of the bare step
    coords = batch["coords"][:1]
    with torch.no_grad():
        norm = op.input_normalizer
        x_in = batch["input"] if norm is None else norm.encode(batch["input"], coords)
    model = op.model

    def net():
        model.zero_grad(set_to_none=True)
        tau = batch.get("lead_time")
        y = op.call_model(x_in, coords, tau)
        y.float().pow(2).mean().backward()

    # the real trainer, as opformer train builds it
    module = OperatorModule(run, operator, artifact)
    clock = _epoch_clock()
    if not gpu:  # bare steps interleaved with the epoch's (see the module docstring); warmed up first
        _time(bare, 0, warmup)
        clock.probe, clock.probes_per_epoch = (lambda: _time(bare, 1, 0)), repeats
    bare_after = _after_each_epoch(lambda first: _time(bare, repeats, warmup if first else 1, sync))
    with tempfile.TemporaryDirectory(prefix="opformer-bench-train-") as tmp:
        out = Path(tmp)
        _quiet_lightning()
        trainer = _trainer(t, out, False, [*checkpoint_callbacks(out / "checkpoints", t), clock, bare_after])
        clock.watch_checkpoints(trainer)
        gc.callbacks.append(clock.gc_event)
        try:
            # Ctrl-C: a KeyboardInterrupt, not Lightning's silent exit(1) after its own shutdown
            _interruptible(trainer, trainer.fit, module, datamodule=_DataModule(bundle.datasets, t))
        finally:
            gc.callbacks.remove(clock.gc_event)
    epoch_s, steps = clock.epochs[-1]
    rec.update(epoch_seconds=epoch_s, steps=steps, epoch_seconds_all=[e[0] for e in clock.epochs])
    # where the epoch's time outside its training steps went (each epoch; the figures are the last one's)
    rec.update(validation_seconds=clock.validation[-1], validation_seconds_all=clock.validation,
               checkpoint_seconds=clock.checkpoints[-1], checkpoint_seconds_all=clock.checkpoints,
               checkpoint_writer="background" if background_checkpoints(t) else "in the training loop",
               gc_seconds=clock.collections[-1], gc_seconds_all=clock.collections)
    after = [statistics.median(ts) for ts in bare_after.results]
    rec["bare_step_seconds_after_per_epoch"] = after
    if gpu:
        rec["bare_steps"] = "after each epoch"
        bare_all, rec["bare_step_seconds_all"] = after, bare_after.results[-1]
    else:
        rec["bare_steps"] = "interleaved"
        bare_all = [statistics.median(ts) for ts in clock.probes]
        rec["bare_step_seconds_all"] = clock.probes[-1]
    rec["bare_step_seconds"] = bare_all[-1]
    rec["bare_step_seconds_per_epoch"] = bare_all
    try:
        rec["model_step_seconds"] = statistics.median(_time(net, repeats, warmup, sync))
    except (TypeError, RuntimeError, AttributeError):  # a model with another calling convention: not reported
        rec["model_step_seconds"] = None
    rec["overhead_per_epoch"] = [e / (n * b) for (e, n), b in zip(clock.epochs, bare_all)]
    rec["overhead"] = rec["overhead_per_epoch"][-1]
    return rec
