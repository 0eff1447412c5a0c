"""The Lightning module that trains any opformer operator learner: loss, metrics, optimizer and schedule."""

from __future__ import annotations

import collections
import copy
import math
import statistics
import random
import time
from typing import Any, NamedTuple, Optional

import lightning as L
import numpy as np
import torch
from torch import Tensor

from ..tasks.losses import rel_l2


__all__ = ["OperatorModule", "DivergenceError", "make_adam"]


def make_adam(params, lr: float, weight_decay: float = 0.0, fused: bool = True,
              beta2: float = 0.999) -> torch.optim.Adam:
    """Adam with PyTorch's fused kernel where the parameters' device has one (CPU and CUDA): one pass over all
    parameters instead of a dozen small kernels per tensor, the same update up to rounding (on a 1 M-parameter FNO on
    one CPU thread about 1 ms instead of 8-19 ms a step); the multi-tensor version elsewhere or with ``fused=False``
    (float16 mixed precision, whose gradient scaler must unscale before the gradient clip)."""
    params = list(params)
    tensors = [p for g in params for p in g["params"]] if params and isinstance(params[0], dict) else params
    devices = {p.device.type for p in tensors}
    floats = all(p.is_floating_point() for p in tensors)
    if fused and floats and devices and devices <= {"cpu", "cuda"}:
        try:
            return torch.optim.Adam(params, lr=lr, betas=(0.9, beta2), weight_decay=weight_decay, fused=True)
        except (RuntimeError, ValueError):  # a build or dtype without the fused kernel
            pass
    return torch.optim.Adam(params, lr=lr, betas=(0.9, beta2), weight_decay=weight_decay)


def lr_groups(operator: torch.nn.Module, scales: dict) -> list[dict]:
    """The operator's parameters as optimizer groups, one per learning-rate multiplier of ``scales`` ({module name of
    the model: multiplier}; a parameter takes the multiplier of the longest name it lies under, else 1).  Raises
    ValueError naming a module name that no parameter lies under, or a multiplier that is not positive."""
    for key, scale in scales.items():
        if not (scale > 0 and math.isfinite(scale)):
            raise ValueError(f"{key}={scale}: a multiplier must be a finite number > 0")
    groups: dict = {}
    names, used = [], set()
    for name, param in operator.named_parameters():
        name = name.removeprefix("model.")
        under = [k for k in scales if name == k or name.startswith(k + ".")]
        used.update(under)
        names.append(name)
        groups.setdefault(float(scales[max(under, key=len)]) if under else 1.0, []).append(param)
    for key in scales:
        if key not in used:
            tops = sorted({n.split(".")[0] for n in names})
            raise ValueError(f"{key!r} names no module of the model (its modules: {', '.join(tops)})")
    return [{"params": params, "lr_scale": scale} for scale, params in groups.items()]


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss; nothing was checkpointed for the diverged state."""


class _StepLoss:
    """A training step's loss (detached) and per-sample errors, with its value on the host: read at once, or, when
    ``deferred`` on a GPU, copied into pinned host memory without waiting and read at the next step (an event marks
    the copy's end, long past by then)."""

    def __init__(self, loss: Tensor, l2: Tensor, epoch: int, step: int, deferred: bool = False, batch_idx: int = -1):
        self.loss, self.l2, self.epoch, self.step, self.deferred = loss.detach(), l2.detach(), epoch, step, deferred
        self.batch_idx = batch_idx  # the batch's position in its epoch (finds its samples again, see _sample_names)
        self._host, self._event = None, None
        if deferred and self.loss.device.type == "cuda":
            self._host = torch.empty((), dtype=self.loss.dtype, pin_memory=True)
            self._host.copy_(self.loss, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()

    def value(self) -> float:
        if self._event is not None:
            self._event.synchronize()
            return float(self._host)
        return float(self.loss)


def checkpoint_loader_state(checkpoint: dict) -> Optional[dict]:
    """The training loader's state a checkpoint holds (Lightning's fit-loop state: {"epoch": the epoch of the next
    pass, "batches": how many of its batches were trained on}), or None."""
    fit_state = ((checkpoint.get("loops") or {}).get("fit_loop") or {}).get("state_dict") or {}
    return (fit_state.get("combined_loader") or [None])[0]


def _worst_and_others(errs: list) -> tuple[int, float]:
    """The position of a batch's worst per-sample error and the median of the others (two samples at least)."""
    at = max(range(len(errs)), key=errs.__getitem__)
    return at, statistics.median(errs[:at] + errs[at + 1:])


class _Spike(NamedTuple):
    """A finite step loss over ``divergence_factor`` times the recent median, kept and judged by the next step."""

    epoch: int
    step: int
    loss: float
    median: float  # of the recent step losses it was judged against
    sums: Tensor  # its share of the epoch's sums, added once it is judged
    errs: list  # the relative L2 error of each sample of the batch (this process's)
    samples: Optional[list]  # those samples in the user's terms ("sample 753 of FILE"), when they can be found
    whole: bool  # the batch's samples rose with it (on some process): not one sample's spike


class _ResumableOneCycle(torch.optim.lr_scheduler.OneCycleLR):
    """The one-cycle schedule, refusing in one line to resume the schedule of a checkpoint that is shorter than this
    run's (its training split had fewer samples): torch would fail with its own error once the steps ran past its
    end, possibly many epochs later."""

    def load_state_dict(self, state_dict: dict) -> None:
        theirs = state_dict.get("total_steps")
        if isinstance(theirs, int) and theirs < self.total_steps:
            from ..config import ConfigError

            raise ConfigError(f"--resume: the checkpoint's learning-rate schedule spans {theirs} steps, but this run "
                              f"takes {self.total_steps}: its training data changed (another number of samples); "
                              "resume with the same data, or start again with --overwrite")
        super().load_state_dict(state_dict)


class OperatorModule(L.LightningModule):
    """Trains a task's :class:`~opformer.tasks.Operator` on batches ``{"input", "target", "coords", ...}``.

    The loss is the task's (relative L2 per sample plus its regularizer), averaged over the batch; the metric is the
    relative L2 error without the regularizer, averaged over samples (summed and counted across processes).  The
    checkpoint carries the artifact (``checkpoint["opformer"]``) that :func:`opformer.load` needs.
    """

    def __init__(self, run, operator, artifact: dict):
        super().__init__()
        self.run_cfg = run
        self.task = run.task
        self.train_cfg = run.train
        self.operator = operator
        self.artifact = artifact
        # {"files": {absolute path: fingerprint}, "splits": {split: samples}} of the data the run started on (set by
        # the training before it fits; kept in every checkpoint)
        self.data_record: Optional[dict] = None
        self._last_finite = None  # (epoch, step, loss)
        self.elapsed_before = 0.0  # training seconds of earlier (interrupted) runs of this run directory
        self._fit_started = None
        self._rng_restored = False  # on_load_checkpoint gave this process its own random stream back
        self._val_sums: dict[str, list] = {}
        self._good_state = None  # (weights, optimizer state, epoch) at the start of the epoch
        self._retries_used = 0
        self._recent: collections.deque = collections.deque(maxlen=50)  # the last finite step losses
        self._best_epoch_loss: Optional[float] = None
        self._best_val: Optional[float] = None  # the best validation error so far, and (epoch, error) of the last one
        self._epoch_val: Optional[tuple[int, float]] = None
        self._last_epoch_suspect = False  # the state at the next epoch's start is then not a good one
        # the validation targets' mean field (summed over the first validation epoch), then the validation error of
        # predicting it for every sample: the level a model that collapsed to the mean sits at
        self._mean_sum: Optional[list] = None  # [sum of targets, count] while being summed
        self._mean_field: Optional[Tensor] = None
        self._mean_field_err: Optional[float] = None
        self.lr_halvings = 0
        self.divergence_log: list[str] = []
        # a spike waiting for the next step: a blow-up's loss stays high, a hard batch's (one outlier sample) does not
        self._spike: Optional[_Spike] = None
        # the isolated spikes kept: (epoch, step, loss, the largest relative L2 error of a sample of the batch, that
        # sample in the user's terms when it alone caused the spike and can be found, else None)
        self.loss_spikes: list[tuple[int, int, float, Optional[float], Optional[str]]] = []
        self.loss_spike_count = 0
        self.loss_spike_samples: collections.Counter = collections.Counter()  # worst sample of a spike: how often
        self._spikes_announced: set = set()  # the kinds of spike announced so far ("sample", "batch")
        self._epoch_first_batch: Optional[int] = None
        self._resumed_sums: Optional[list] = None  # the epoch's sums so far, from a mid-epoch checkpoint
        self._train_sums: Optional[Tensor] = None  # this epoch's (sum of loss x batch, sum of rel. L2, samples)
        # (epoch, its means over all ranks, its mean loss without the isolated spikes), computed once
        self._train_means: Optional[tuple[int, dict, Optional[float]]] = None
        self._pending: Optional[_StepLoss] = None  # a step loss whose check is deferred to the next step
        self.cuda_graphs_used: Optional[dict] = None  # set at the end of a run that had CUDA graphs attached
        # test passes with the network's dropout modules switched on (the trainer's end-of-run dropout check)
        self.dropout_on_in_test = False

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Lightning's generic transfer walks the batch recursively at every step; a batch of tensors already on
        the device (training on the CPU) is returned as it is."""
        if isinstance(batch, dict) and all(not torch.is_tensor(v) or v.device == device for v in batch.values()):
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def forward(self, batch: dict) -> Tensor:
        """Prediction in physical units."""
        return self.operator(batch["input"], batch["coords"][:1], batch.get("lead_time"))

    def _losses(self, batch: dict) -> tuple[Tensor, Tensor, Tensor]:
        pred = self(batch)
        l2, reg = self.task.loss(pred, batch, self.train_cfg)
        return pred, l2, reg

    # --- training ----------------------------------------------------------------------------------------------
    def on_train_epoch_start(self) -> None:
        self._begin_epoch()

    def _begin_epoch(self, sums: Optional[list] = None) -> None:
        """The epoch's starting state: its sums (zero, or ``sums`` carried by a mid-epoch checkpoint) and the restore
        point.  Lightning calls on_train_epoch_start for every epoch but the one a run resumes in the middle of (from
        a ``checkpoint_every_n_steps`` checkpoint): that one begins at its first step instead."""
        self._resumed_sums = None
        # the state a diverged step goes back to (host copies: the device keeps only the live state), refreshed
        # unless the epoch just finished was suspect, a blow-up included (decided once, on the mean over all ranks,
        # at its end): a blow-up often starts an epoch before a step trips the check, and the state that epoch left
        # behind is already damaged
        suspect, self._last_epoch_suspect = self._last_epoch_suspect, False
        self._epoch_first_batch = None  # the batch_idx of the epoch's first step (not 0 after a mid-epoch resume)
        # (loss x batch, rel. L2, samples) of the epoch's kept steps, then the same of its isolated spikes alone
        self._train_sums = torch.zeros(6, dtype=torch.float64, device=self.device)
        if sums is not None:
            self._train_sums += torch.tensor(sums, dtype=torch.float64, device=self.device)
        self._train_means = None
        if suspect and self._good_state is not None:  # (a resumed run has no earlier state: it keeps this one)
            return
        if self.train_cfg.divergence_retries > 0:
            self._good_state = (
                {k: v.detach().to("cpu", copy=True) for k, v in self.operator.state_dict().items()},
                copy.deepcopy(_to_cpu(self.optimizers().optimizer.state_dict())),
                self.current_epoch,
            )

    def _above(self, value: Optional[float], best: Optional[float], divisor: float) -> bool:
        """``value`` (an epoch's mean training loss or validation error) is above ``divergence_factor / divisor``
        times the ``best`` so far.  Divisor 4 (5 by default), training loss: a blow-up that grew over several steps,
        too slowly for the per-step check, restored from.  Divisor 10 (2 by default): suspect, not restored from, but
        the state it leaves is not kept as the one a later restore goes back to (a blow-up is suspect too)."""
        factor = self.train_cfg.divergence_factor / divisor
        return bool(factor) and value is not None and best is not None and value > factor * best

    def train_epoch_means(self) -> dict:
        """``{"train_loss_epoch", "train_rel_l2"}`` of the epoch that just ended, averaged over the samples of every
        rank (a collective the first time it is called in an epoch: call it on every rank); empty without steps."""
        if self._train_means is None or self._train_means[0] != self.current_epoch:
            self._train_means = self._epoch_means()
        return self._train_means[1]

    def _epoch_means(self) -> tuple[int, dict, Optional[float]]:
        """(epoch, :meth:`train_epoch_means`, the mean loss without the isolated spikes: what the epoch's blow-up
        rules judge)."""
        sums = self._train_sums if self._train_sums is not None else torch.zeros(6, dtype=torch.float64)
        if self.trainer is not None and self.trainer.world_size > 1:
            sums = self.trainer.strategy.reduce(sums.clone(), reduce_op="sum")
        loss, l2, count, spike_loss, _, spike_count = (float(v) for v in sums)
        means = {"train_loss_epoch": loss / count, "train_rel_l2": l2 / count} if count > 0 else {}
        without_spikes = (loss - spike_loss) / (count - spike_count) if count > spike_count else None
        return self.current_epoch, means, without_spikes

    def on_train_epoch_end(self) -> None:
        # the epoch's training metrics, logged once (per-step logging costs milliseconds a step); the values are
        # the means over all ranks already, so sync_dist leaves them unchanged and marks them as global
        means = self.train_epoch_means()
        for name, value in means.items():
            self.log(name, value, sync_dist=True)
        if not means:
            return
        # over the samples of every rank (one decision for all ranks), without the isolated spikes: one hard batch
        # is no slow blow-up
        without_spikes = self._train_means[2]
        mean = without_spikes if without_spikes is not None else means["train_loss_epoch"]
        # this epoch's validation error (Lightning validates before this hook), over all ranks: an epoch that more
        # than doubled it (divergence_factor / 10 times the best) left a damaged state even where its training loss
        # did not rise
        val = self._epoch_val[1] if self._epoch_val and self._epoch_val[0] == self.current_epoch else None
        best_loss, best_val = self._best_epoch_loss, self._best_val
        collapsed = self._collapsed(val, best_val)
        # an unresolved spike on the epoch's last step (judged by the next epoch's first) makes the epoch suspect too
        self._last_epoch_suspect = (self._above(mean, best_loss, 10) or self._above(val, best_val, 10) or collapsed
                                    or self._spike is not None)
        if val is not None and (best_val is None or val < best_val):
            self._best_val = val
        if self._above(mean, best_loss, 4):
            self._recover(mean, f"the mean training loss of epoch {self.current_epoch}, {mean:.4g}, "
                          f"is over {self.train_cfg.divergence_factor / 4:g}x the lowest epoch mean so far "
                          f"({best_loss:.3g})", epoch_rule=True)
        elif collapsed:
            self._recover(mean, f"the validation error of epoch {self.current_epoch}, {val:.4g}, is "
                          f"that of predicting the mean field ({self._mean_field_err:.4g}) after {best_val:.3g}: the "
                          "model collapsed to the mean", epoch_rule=True)
        elif best_loss is None or mean < best_loss:
            self._best_epoch_loss = mean

    @property
    def mean_field_error(self) -> Optional[float]:
        """The validation error of predicting the validation targets' mean field for every sample (None before the
        first validation epoch)."""
        return self._mean_field_err

    def _collapsed(self, val: Optional[float], best_val: Optional[float]) -> bool:
        """A collapse to the mean: the validation error is back at that of predicting the validation targets' mean
        field for every sample (0.95-1.2x of it; far above is a blow-up, left to the other rules), after the model
        had been clearly better (below 0.75x of it).  The training loss of such a collapse rises by less than the
        blow-up rules catch (1.6-2x, then flat)."""
        base = self._mean_field_err
        return (bool(self.train_cfg.divergence_factor) and val is not None and best_val is not None
                and base is not None and 0.95 * base < val < 1.2 * base and best_val < 0.75 * base)

    def _blown_up(self, value: float) -> bool:
        """A finite loss above ``divergence_factor`` times the median of the last 50 kept step losses (once 20 were
        seen): a spike; two in a row are the blow-up of a learning rate that is too high, before it turns into NaN
        (see :meth:`_accept`)."""
        factor, hist = self.train_cfg.divergence_factor, self._recent
        return bool(factor) and len(hist) >= 20 and value > factor * statistics.median(hist)

    def _check(self, step: _StepLoss, value: float) -> tuple[bool, bool, bool, Optional[list]]:
        """(finite on every process, finite and not blown up on every process, the batch rose as a whole on some
        process, this process's per-sample errors when its own loss is a spike) for a step whose loss on the host is
        ``value``: all ranks take the same branch.  A spike's batch rose as a whole when the median error of its
        samples other than the worst is over :attr:`OUTLIER_FRACTION` of the factor times the recent median: not one
        outlier sample's spike."""
        finite = math.isfinite(value)
        ok = finite and not self._blown_up(value)
        errs, whole = None, False
        if finite and not ok:
            errs = step.l2.detach().to("cpu", torch.float64).flatten().tolist()
            whole = not self._one_sample(errs, statistics.median(self._recent))
        if self.trainer is not None and self.trainer.world_size > 1:
            flags = step.loss.new_tensor([float(finite), float(ok), float(not whole)])
            flags = self.trainer.strategy.reduce(flags, reduce_op="min")
            return bool(flags[0] > 0), bool(flags[1] > 0), bool(flags[2] == 0), errs
        return finite, ok, whole, errs

    #: a spike is one sample's (an outlier) when the median error of the batch's other samples stays at most this
    #: fraction of ``divergence_factor`` times the recent median; over it, the batch rose as a whole
    OUTLIER_FRACTION = 0.25

    def _one_sample(self, errs: list, median: float) -> bool:
        """Whether a spiking batch's per-sample errors ``errs`` point at one sample: the others at their usual level
        (a batch of one sample: yes)."""
        if len(errs) < 2:
            return True
        return _worst_and_others(errs)[1] <= self.OUTLIER_FRACTION * self.train_cfg.divergence_factor * median

    _defer_always = False  # tests set it to check the deferred path on the CPU

    def _defers_check(self, loss: Tensor) -> bool:
        """Whether a step's loss is checked one step late: on a GPU, one process, no step checkpoints.  Reading the
        loss on the host at once would make the host wait for the device at every step; the copy started now is there
        by the next step.  Restoring the last good state undoes the one extra step as well.  With several processes
        the ranks must agree on every step, and a step checkpoint must not hold an unchecked state: those check at
        once."""
        if self._defer_always:
            return True
        return (loss.device.type == "cuda" and self.train_cfg.checkpoint_every_n_steps == 0
                and (self.trainer is None or self.trainer.world_size == 1))

    def _accept(self, step: _StepLoss) -> bool:
        """Judge one step's loss: True when it is kept (its loss and error enter the epoch's sums), False when the
        last good state was restored instead (the step is skipped); raises when training cannot go on.

        A finite loss over ``divergence_factor`` times the recent median (a spike) is kept and judged by the next
        step: a blow-up's loss stays high (two such steps in a row are restored from), while a batch that holds one
        hard or mislabelled sample raises one step's loss alone (kept, counted in ``loss_spikes``, the sample named),
        and so does a passing rise of the whole batch that the next step does not confirm (kept and counted)."""
        value = step.value()
        finite, ok, whole, errs = self._check(step, value)
        spike, self._spike = self._spike, None
        counted = ok  # whether this step enters the step median and the epoch's sums now
        factor = self.train_cfg.divergence_factor
        if finite and not ok and spike is None:
            names = self._sample_names(step, len(errs)) if errs is not None and not whole else None
            self._spike = _Spike(step.epoch, step.step, value, statistics.median(self._recent), self._sums_of(step),
                                 errs or [], names, whole)
        elif not ok:
            why, at = None, (step.epoch, step.step)
            if finite:  # the second spike in a row: a blow-up, reported from its first step
                why = (f"losses {spike.loss:.4g} and {value:.4g} of two steps in a row (over {factor:g}x the median "
                       f"{spike.median:.3g} of the recent steps)")
                at = (spike.epoch, spike.step)
            if self._recover(value, why, at=at):
                return False
            if finite:  # no retries left: both steps are kept and counted as they are
                self._recent.append(spike.loss)
                self._train_sums[:3] += spike.sums
                counted = True
        elif spike is not None:
            self._isolated_spike(spike)
        if not finite:
            last = self._last_finite
            where = f"epoch {step.epoch} (step {step.step})"
            prev = f"the last finite loss was {last[2]:.6g} at epoch {last[0]}, step {last[1]}" if last else (
                "no finite loss was seen")
            tried = (f" after {self._retries_used} restart(s) with a halved learning rate"
                     if self._retries_used else "")
            raise DivergenceError(
                f"training diverged at {where}{tried}: loss is {value}; {prev}. No checkpoint of the diverged "
                "state was written; lower train.lr or check the data."
            )
        self._last_finite = (step.epoch, step.step, value)
        if counted:  # a spike enters neither the median it is judged against nor the epoch's sums until it is judged
            self._recent.append(value)
            self._train_sums[:3] += self._sums_of(step)
        return True

    @staticmethod
    def _sums_of(step: _StepLoss) -> Tensor:
        """A step's share of the epoch's sums: (loss x batch, sum of rel. L2, batch)."""
        bs = step.l2.shape[0]
        d = step.loss.to(torch.float64)
        # torch.full_like, not new_tensor: a tensor made from a Python number is copied from the host, and on a GPU
        # that copy makes the host wait for the device at every step
        return torch.stack((d * bs, step.l2.to(torch.float64).sum(), torch.full_like(d, float(bs))))

    _SPIKES_KEPT = 50  # isolated spikes listed in the metrics (all are counted)

    def _positions_hold(self) -> bool:
        """Whether this epoch's batch_idx is the batch's position in the epoch's order: always, but after a resume
        inside the epoch from a checkpoint whose loader state was not restored (Lightning's batch_idx then goes on
        counting while the loader starts the order again)."""
        first = self._epoch_first_batch
        if first == 0:
            return True
        dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        skipped = getattr(dm, "train_batches_skipped", None)
        return callable(skipped) and skipped(self.current_epoch) == first

    def _sample_names(self, step: _StepLoss, count: int) -> Optional[list]:
        """The samples of a training step's batch on this process in the user's terms, or None where they cannot be
        found (no data module that knows the run's batches)."""
        dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        find = getattr(dm, "train_batch_samples", None)
        if step.batch_idx < 0 or not callable(find):
            return None
        names = find(step.epoch, step.batch_idx)
        return names if len(names) == count else None

    def _isolated_spike(self, spike: _Spike) -> None:
        """A spike whose next step was normal: kept (its loss enters the sums of the epoch running now) and counted.
        One sample's spike (the batch's other samples at their usual level) names that sample where it can be found
        (``loss_spike_samples``); a spike whose whole batch rose is a passing rise of the loss, and names none.  The
        first of each kind is announced.  With several processes the record is that of the process whose own batch
        spiked (the highest loss where several did), the same on every process."""
        epoch, step, value, median, sums, errs, names, whole = spike
        self._train_sums += torch.cat((sums, sums))
        self.loss_spike_count += 1
        own = None  # (loss, median, worst, the others' median, name, batch size) of this process's own spike
        if errs:
            at, others = _worst_and_others(errs) if len(errs) > 1 else (0, None)
            own = (value, median, errs[at], others, names[at] if names else None, len(errs))
        if self.trainer is not None and self.trainer.world_size > 1:
            import torch.distributed as dist

            every = [None] * self.trainer.world_size
            dist.all_gather_object(every, own)  # every process is here at the same step (the flags were reduced)
            own = max((r for r in every if r is not None), key=lambda r: r[0], default=None)
        if own is None:  # (not reached: some process's own loss spiked)
            return
        value, median, worst, others, name, count = own
        if name is not None:
            self.loss_spike_samples[name] += 1
        if len(self.loss_spikes) < self._SPIKES_KEPT:
            self.loss_spikes.append((epoch, step, value, worst, name))
        kind = "batch" if whole else "sample"
        if kind in self._spikes_announced or self.trainer is None or not self.trainer.is_global_zero:
            return
        self._spikes_announced.add(kind)
        head = (f"note: the loss of epoch {epoch}, step {step} ({value:.4g}) was over "
                f"{self.train_cfg.divergence_factor:g}x the median {median:.3g} of the recent steps")
        if self.trainer.world_size > 1:
            head += " (on one of the processes, for its share of the batch)"
        if count < 2:
            print(f"{head}, and the next step's was not: kept and counted in metrics.json (loss_spikes, "
                  "loss_spike_steps, loss_spike_samples)", flush=True)
            return
        if whole:
            print(f"{head}; the batch's samples rose together (the median relative L2 error of the {count - 1} "
                  f"besides the worst {others:.3g}, the worst {worst:.3g}), and the next step's was not: kept as a "
                  "passing rise of the loss (no one sample is the cause, and the next step shows no damaged state); "
                  "such steps are counted in metrics.json (loss_spikes, loss_spike_steps)", flush=True)
            return
        who = f"its worst sample ({name})" if name is not None else "its worst sample"
        print(f"{head}; {who} has relative L2 error {worst:.3g}, the other {count - 1} samples' median "
              f"{others:.3g}, and the next step's was not: kept as a hard batch (an outlier sample, not a blow-up); "
              "such steps are counted in metrics.json (loss_spikes, loss_spike_steps, loss_spike_samples)",
              flush=True)

    def _judge_pending(self) -> bool:
        """Judge the deferred step, if any (see :meth:`_accept`)."""
        pending, self._pending = self._pending, None
        return pending is None or self._accept(pending)

    def _recover(self, value: float, why: Optional[str] = None, at: Optional[tuple[int, int]] = None,
                 epoch_rule: bool = False) -> bool:
        """After a non-finite or blown-up loss (``why`` says which when given): go back to the last good state (that
        of the start of the last epoch that did not blow up) with half the learning rate, while retries are left
        (True); False when none are left.  ``epoch_rule``: ``why`` names the epoch itself (no step is added)."""
        if self._retries_used >= self.train_cfg.divergence_retries or self._good_state is None:
            return False
        self._retries_used += 1
        self._spike = None  # what follows is judged from the restored state
        weights, opt_state, good_epoch = self._good_state
        self.operator.load_state_dict(weights)
        opt = self.optimizers().optimizer
        keys = ("lr", "max_lr", "initial_lr", "min_lr")
        rates = [{k: g[k] for k in keys if k in g} for g in opt.param_groups]  # halvings so far included
        opt.load_state_dict(opt_state)
        # OneCycleLR computes every step from these rates in the groups: the schedule keeps its position, at half rate
        for group, now in zip(opt.param_groups, rates):
            for key, rate in now.items():
                group[key] = rate * 0.5
        self.lr_halvings += 1
        peak = max(g.get("max_lr", g["lr"]) / g.get("lr_scale", 1.0) for g in opt.param_groups)
        # the loss a step minimizes: the relative L2 error alone, or with the H1 term, which can be far larger than
        # the train_rel_l2 that the epoch lines show
        what = "training loss" + (" (relative L2 + gamma x H1 term)" if self.train_cfg.gamma > 0 else "")
        if why is not None:
            head = why
        elif math.isfinite(value):
            head = (f"{what} {value:.4g} (over {self.train_cfg.divergence_factor:g}x the median "
                    f"{statistics.median(self._recent):.3g} of the recent steps)")
        else:
            head = f"{what} {value}"
        epoch, step = at if at is not None else (self.current_epoch, self.global_step)
        where = "" if epoch_rule else f" at epoch {epoch} (step {step})"
        msg = (f"{head}{where}: restored the state of "
               f"the start of epoch {good_epoch} and halved the learning rate (peak now {peak:.3g}; retry "
               f"{self._retries_used} of {self.train_cfg.divergence_retries})")
        self.divergence_log.append(msg)
        if self.trainer.is_global_zero:
            print(f"note: {msg}", flush=True)
        return True

    def training_step(self, batch: dict, batch_idx: int) -> Optional[Tensor]:
        if self._train_sums is None:  # resumed in the middle of an epoch: no on_train_epoch_start was called
            self._begin_epoch(self._resumed_sums)
        if self.train_cfg.augment != "none":
            # one group element per sample, drawn from (seed, step, rank): the same on a resumed run
            rank = self.trainer.global_rank if self._trainer is not None else 0
            gen = torch.Generator().manual_seed((self.train_cfg.seed * 1_000_003 + self.global_step) * 64 + rank)
            batch = self.task.augment(batch, self.train_cfg.augment, gen)
        _, l2, reg = self._losses(batch)
        loss = (l2 + reg).mean()
        if self._epoch_first_batch is None:
            self._epoch_first_batch = batch_idx
        step = _StepLoss(loss, l2, self.current_epoch, self.global_step, deferred=self._defers_check(loss),
                         batch_idx=batch_idx if self._positions_hold() else -1)
        if step.deferred:  # this step's loss is judged at the next step; the previous one's now
            kept = self._judge_pending()
            self._pending = step if kept else None  # after a restore this step's loss is from the diverged state
        else:
            kept = self._accept(step)
        if not kept:
            return None  # Lightning skips this batch's backward and optimizer step
        if self.trainer is not None and self.trainer.progress_bar_callback is not None:
            self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=l2.shape[0],
                     logger=False)
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # the last step of an epoch is judged before validation, the epoch's checkpoints and its means
        if self._pending is not None and batch_idx + 1 >= self.trainer.num_training_batches:
            self._judge_pending()

    # validation: dataloader 0 is the validation split; with selection=test a second loader is the test split
    def on_validation_epoch_start(self) -> None:
        self._val_sums = {}
        if self._mean_field is None and self._mean_sum is None and not self.trainer.sanity_checking:
            self._mean_sum = [None, 0]

    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        pred, l2, _ = self._losses(batch)
        name = "val_rel_l2" if dataloader_idx == 0 else "test_rel_l2_selection"
        acc = self._val_sums.setdefault(name, [0.0, 0])
        acc[0] += float(l2.double().sum())
        acc[1] += int(l2.numel())
        if dataloader_idx == 0 and not self.trainer.sanity_checking:
            self._mean_field_step(pred, batch)

    def _mean_field_step(self, pred: Tensor, batch: dict) -> None:
        """First validation epoch: sum the targets; the next one: the error of predicting their mean field."""
        target = batch["target"]
        if self._mean_sum is not None:
            t = target.detach().to(torch.float64).sum(0)
            self._mean_sum[0] = t if self._mean_sum[0] is None else self._mean_sum[0] + t
            self._mean_sum[1] += target.shape[0]
        elif self._mean_field is not None and self._mean_field_err is None:
            # every task's metric is the relative L2 error of the whole field (opformer.tasks.losses.rel_l2)
            l2c = rel_l2(self._mean_field.to(pred.dtype).expand_as(target), target)
            acc = self._val_sums.setdefault("mean_field", [0.0, 0])
            acc[0] += float(l2c.double().sum())
            acc[1] += int(l2c.numel())

    def on_validation_epoch_end(self) -> None:
        if self._mean_sum is not None and self._mean_sum[0] is not None:
            total = torch.cat((self._mean_sum[0].flatten(), self._mean_sum[0].new_tensor([self._mean_sum[1]])))
            total = self.trainer.strategy.reduce(total, reduce_op="sum")
            self._mean_field = (total[:-1] / total[-1].clamp_min(1)).view_as(self._mean_sum[0])
            self._mean_sum = None
        if "mean_field" in self._val_sums:
            self._mean_field_err = float(self._mean_over_ranks(*self._val_sums.pop("mean_field")))
        for name, (s, c) in self._val_sums.items():
            # the value is already the mean over all ranks' samples (identical on every rank); sync_dist averages
            # those equal values, which leaves them unchanged and tells Lightning the metric is global
            mean = self._mean_over_ranks(s, c)
            self.log(name, mean.float(), prog_bar=True, sync_dist=True, add_dataloader_idx=False)
            if name == "val_rel_l2" and not self.trainer.sanity_checking:
                self._epoch_val = (self.current_epoch, float(mean))

    def on_test_epoch_start(self) -> None:
        self._test_sum = [0.0, 0]
        if self.dropout_on_in_test:  # after Lightning's eval(): each dropout module follows its own mode
            for m in self.operator.modules():
                if isinstance(m, torch.nn.Dropout):
                    m.train()

    def test_step(self, batch: dict, batch_idx: int) -> None:
        _, l2, _ = self._losses(batch)
        self._test_sum[0] += float(l2.double().sum())
        self._test_sum[1] += int(l2.numel())

    def on_test_epoch_end(self) -> None:
        self.log("test_rel_l2", self._mean_over_ranks(*self._test_sum).float(), sync_dist=True)  # equal on all ranks

    def _mean_over_ranks(self, total: float, count: int) -> Tensor:
        """The mean of per-sample values given this rank's ``total`` and ``count``, over the samples of every rank
        (a collective: call it on every rank)."""
        t = torch.tensor([total, float(count)], dtype=torch.float64, device=self.device)
        t = self.trainer.strategy.reduce(t, reduce_op="sum")
        return t[0] / t[1].clamp_min(1)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Lightning's clip, but under bf16 mixed precision (no gradient scaler: the gradients are the true ones) the
        clip by norm is done here: Lightning refuses to clip for an optimizer with a fused step, which it takes for
        one that unscales by itself."""
        if gradient_clip_val and str(self.trainer.precision) == "bf16-mixed":
            torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_optimizers(self) -> Any:
        t = self.train_cfg
        groups = lr_groups(self.operator, t.lr_scale)
        for g in groups:
            g["lr"] = t.lr * g["lr_scale"]
        opt = make_adam(groups, lr=t.lr, weight_decay=t.weight_decay,
                        fused=t.precision != "16-mixed", beta2=t.adam_beta2)
        steps = self.trainer.estimated_stepping_batches
        sched = _ResumableOneCycle(
            opt,
            max_lr=[g["lr"] for g in groups],
            # OneCycleLR needs pct_start * total_steps > 1 (a warm-up of at least one step); tiny runs get a
            # schedule of that minimal length, of which they use the first steps
            total_steps=max(int(steps), math.ceil(1.0 / t.pct_start) + 2),
            pct_start=t.pct_start,
            div_factor=t.div_factor,
            final_div_factor=t.final_div_factor,
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_fit_start(self) -> None:
        self._fit_started = time.perf_counter()
        # every process was seeded alike (the same initial weights), so their random streams were one: each share of
        # a batch drew the same dropout masks.  The first process keeps the run's stream (that of one process), the
        # others take streams of their own; a resumed run has each process's stream from its checkpoint instead
        if self._trainer is not None and self.trainer.world_size > 1 and not self._rng_restored:
            rank = self.trainer.global_rank
            if rank > 0:
                torch.manual_seed(_rank_seed(self.train_cfg.seed, rank, self.global_step))

    def on_train_start(self) -> None:
        # the network's training forward and backward as CUDA graphs where they apply (opformer.train.cuda_graphs)
        want = self.train_cfg.cuda_graphs
        if want is False or self._trainer is None:
            return
        from .cuda_graphs import GraphedModelCall, applies

        why_not = applies(self.device.type == "cuda", self.trainer.world_size, str(self.trainer.precision))
        if why_not is None:
            on_rank_zero = lambda msg: print(msg, flush=True) if self.trainer.is_global_zero else None  # noqa: E731
            self.operator.graphed_call = GraphedModelCall(self.operator.model, note=on_rank_zero)
        elif want is True and self.trainer.is_global_zero:
            print(f"note: --cuda-graphs true has no effect: {why_not}", flush=True)

    def teardown(self, stage: str) -> None:
        g = self.operator.__dict__.pop("graphed_call", None)  # the trained operator carries no graphs
        if g is not None:  # what they did, for metrics.json
            self.cuda_graphs_used = {"shapes_captured": len(g.graphs), "graphed_steps": g.replays,
                                     "eager_steps": g.eager_calls, "given_up": g.disabled}

    def training_seconds(self) -> float:
        """Wall time spent training this run, summed over resumed runs."""
        now = 0.0 if self._fit_started is None else time.perf_counter() - self._fit_started
        return self.elapsed_before + now

    # --- exact resume: the random streams (and the clock) travel with the checkpoint -----------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["opformer"] = self.artifact
        checkpoint["run_config"] = self.run_cfg.raw
        if self.data_record is not None:  # the data files as the run found them, compared by --resume
            checkpoint["data_files"] = self.data_record["files"]
            checkpoint["data_splits"] = self.data_record["splits"]
        checkpoint["training_seconds"] = self.training_seconds()
        # how many processes trained it: a resume on another count is checked against it (the steps of an epoch)
        checkpoint["world_size"] = self.trainer.world_size if self._trainer is not None else 1
        checkpoint["divergence"] = {"retries_used": self._retries_used, "lr_halvings": self.lr_halvings,
                                    "log": list(self.divergence_log), "spike_count": self.loss_spike_count,
                                    "spikes": [list(t) for t in self.loss_spikes],
                                    "spike_samples": dict(self.loss_spike_samples),
                                    # the running epoch's sums: a resume from a mid-epoch checkpoint goes on with them
                                    "epoch_sums": None if self._train_sums is None else self._train_sums.tolist(),
                                    "recent": list(self._recent),  # the step losses the next spike is judged by
                                    # what the epoch rules judge by: the best epoch so far, the last validation, the
                                    # mean-field level of a collapse, whether the last epoch is a restore point
                                    "rules": {"best_epoch_loss": self._best_epoch_loss, "best_val": self._best_val,
                                              "epoch_val": None if self._epoch_val is None else list(self._epoch_val),
                                              "last_epoch_suspect": self._last_epoch_suspect,
                                              "mean_field_err": self._mean_field_err}}
        checkpoint["rng_states"] = {
            "torch": torch.get_rng_state(),
            "numpy": _np_state_to_plain(np.random.get_state()),
            "python": random.getstate(),
        }
        if self._trainer is not None and self.trainer.world_size > 1:
            # every process's torch stream (the dropout masks of its share of the batch), gathered on each: Lightning
            # makes the checkpoint on every process, and the first writes it
            mine = torch.get_rng_state().to(self.trainer.strategy.root_device)
            every = self.trainer.strategy.all_gather(mine)
            checkpoint["rng_states"]["torch_by_rank"] = [t.cpu().clone() for t in every.unbind(0)]

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.elapsed_before = float(checkpoint.get("training_seconds", 0.0))
        div = checkpoint.get("divergence") or {}
        self._retries_used = int(div.get("retries_used", 0))
        self.lr_halvings = int(div.get("lr_halvings", 0))
        self.divergence_log = list(div.get("log", []))
        self.loss_spike_count = int(div.get("spike_count", 0))
        # a spike's sample name was added later: a checkpoint without it resumes with None there
        self.loss_spikes = [(int(t[0]), int(t[1]), float(t[2]), None if t[3] is None else float(t[3]),
                             t[4] if len(t) > 4 else None) for t in div.get("spikes", [])]
        self.loss_spike_samples = collections.Counter({str(k): int(v) for k, v in div.get("spike_samples", {}).items()})
        self._resumed_sums = div.get("epoch_sums")  # used only if the run resumes in the middle of that epoch
        self._recent.extend(float(v) for v in div.get("recent", []))
        rules = div.get("rules") or {}
        self._best_epoch_loss, self._best_val = rules.get("best_epoch_loss"), rules.get("best_val")
        self._epoch_val = tuple(rules["epoch_val"]) if rules.get("epoch_val") else None
        self._last_epoch_suspect = bool(rules.get("last_epoch_suspect", False))
        self._mean_field_err = rules.get("mean_field_err")
        # the training loader's position in its epoch, handed to the data module before the loader is made and
        # iterated (Lightning's own hand-over comes too late, see _DataModule.resume_train_loader)
        loader = checkpoint_loader_state(checkpoint)
        resume = getattr(getattr(self._trainer, "datamodule", None), "resume_train_loader", None)
        if loader is not None and callable(resume):
            resume(loader)
        states = checkpoint.get("rng_states")
        if states:
            torch.set_rng_state(states["torch"])
            np.random.set_state(_np_state_from_plain(states["numpy"]))
            random.setstate(states["python"])
            world = self.trainer.world_size if self._trainer is not None else 1
            rank = self.trainer.global_rank if self._trainer is not None else 0
            by_rank = states.get("torch_by_rank")
            if world > 1 and isinstance(by_rank, list) and len(by_rank) == world:
                torch.set_rng_state(by_rank[rank])
                self._rng_restored = True
            elif world == 1:
                self._rng_restored = True
            # else (a checkpoint of another number of processes, or from before the streams were kept): the first
            # process goes on with the checkpoint's stream, the others start streams of their own in on_fit_start


def _rank_seed(seed: int, rank: int, step: int) -> int:
    """The seed of process ``rank``'s own random stream (dropout masks), started at optimizer step ``step``."""
    return (seed * 1_000_003 + step * 7919 + rank * 104_729) % (2 ** 63)


def _to_cpu(obj):
    """A copy of a (nested) optimizer state with its tensors on the host."""
    if torch.is_tensor(obj):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _np_state_to_plain(state: tuple) -> tuple:
    """NumPy's RNG state with its key array as a list (checkpoints then load with torch's weights_only=True)."""
    return (state[0], [int(x) for x in state[1]], int(state[2]), int(state[3]), float(state[4]))


def _np_state_from_plain(state) -> tuple:
    return (state[0], np.asarray(state[1], dtype=np.uint32), state[2], state[3], state[4])


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def nan_to_none(x: float) -> Optional[float]:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x
