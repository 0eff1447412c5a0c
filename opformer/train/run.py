"""Train and evaluate from a resolved run config: the body of ``opformer train`` and ``opformer eval``."""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
import yaml
from torch.utils.data import DataLoader, Dataset

from .. import __version__
from .callbacks import AtomicCheckpointIO, EpochShuffleSampler, FlushLoggersOnCheckpoint, atomic_write_text
from .config import ConfigError, resolve
from .data_setup import DataBundle, build_data
from .module import OperatorModule, count_parameters
from .plots import plot_curves, plot_predictions, read_metrics_csv

__all__ = ["train", "evaluate", "RunDirError"]

RUN_FILES = ("config.yaml", "metrics.json", "checkpoints")


class RunDirError(RuntimeError):
    """The output directory holds another run."""


def _is_rank_zero() -> bool:
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0))) == 0


def _config_for_comparison(cfg: dict) -> dict:
    """The fields that define a run's result (how many processes ran it or whether bars are shown do not)."""
    c = json.loads(json.dumps(cfg))
    for key in ("accelerator", "devices", "strategy", "num_nodes", "num_workers"):
        c["train"].pop(key, None)
    return c


def prepare_out_dir(out: Path, cfg: dict, resume: bool, overwrite: bool) -> Optional[Path]:
    """Refuse a directory holding a different run; returns the checkpoint to resume from (or None).

    Only the first process checks (and clears, with ``overwrite``): the others may start after it has written the
    new run's config, so they only look for the checkpoint to resume from.  A refusal on rank 0 ends the job."""
    if not _is_rank_zero():
        last = out / "checkpoints" / "last.ckpt"
        return last if resume and not overwrite and last.exists() else None
    existing = [name for name in RUN_FILES if (out / name).exists()]
    if not existing:
        if resume:
            warnings.warn(f"--resume: {out} holds no run yet; starting from scratch")
        return None
    if overwrite:
        for name in RUN_FILES + ("logs", "plots"):
            p = out / name
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        return None
    if not resume:
        raise RunDirError(
            f"{out} already holds a run ({', '.join(existing)}). Pass --resume to continue it or --overwrite to "
            "replace it, or choose another --out."
        )
    old_cfg_path = out / "config.yaml"
    if old_cfg_path.exists():
        old = yaml.safe_load(old_cfg_path.read_text())
        if _config_for_comparison(old) != _config_for_comparison(cfg):
            diff = _diff(_config_for_comparison(old), _config_for_comparison(cfg))
            raise RunDirError(f"{out} holds a different run; --resume needs the same config. Differences: {diff}")
    last = out / "checkpoints" / "last.ckpt"
    if not last.exists():
        warnings.warn(f"--resume: no checkpoint in {out / 'checkpoints'} yet; starting from scratch")
        return None
    return last


def _diff(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        parts = [_diff(a.get(k), b.get(k), f"{path}{k}.") for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        return "; ".join(p for p in parts if p)
    return f"{path.rstrip('.')}: {a!r} -> {b!r}"


class _DataModule(L.LightningDataModule):
    """Shards the splits over the processes Lightning started (samplers depend only on seed, epoch and rank)."""

    def __init__(self, bundle: DataBundle, cfg: dict):
        super().__init__()
        self.bundle, self.cfg = bundle, cfg

    def _per_device(self, batch: int) -> int:
        world = self.trainer.world_size if self.trainer else 1
        if batch % world:
            raise ConfigError(f"batch size {batch} is not divisible by the number of processes {world}")
        return batch // world

    def _loader(self, ds: Dataset, batch: int, shuffle: bool) -> DataLoader:
        world = self.trainer.world_size if self.trainer else 1
        rank = self.trainer.global_rank if self.trainer else 0
        t = self.cfg["train"]
        if shuffle:
            sampler = EpochShuffleSampler(len(ds), t["seed"], world, rank, shuffle=True)
        else:
            sampler = list(range(rank, len(ds), world))
        return DataLoader(ds, batch_size=self._per_device(batch) if shuffle else batch, sampler=sampler,
                          num_workers=t["num_workers"], persistent_workers=t["num_workers"] > 0)

    def train_dataloader(self):
        return self._loader(self.bundle.train, self.cfg["train"]["batch_size"], True)

    def val_dataloader(self):
        loaders = [self._loader(self.bundle.val, self.cfg["train"]["eval_batch_size"], False)]
        if self.cfg["train"]["selection"] == "test":
            loaders.append(self._loader(self.bundle.test, self.cfg["train"]["eval_batch_size"], False))
        return loaders

    def test_dataloader(self):
        return self._loader(self.bundle.test, self.cfg["train"]["eval_batch_size"], False)


def _trainer(cfg: dict, out: Path, progress: bool, callbacks: list, logger=True, **extra) -> L.Trainer:
    t = cfg["train"]
    loggers = False
    if logger:
        loggers = [
            L.pytorch.loggers.CSVLogger(out, name="logs", version=""),
            L.pytorch.loggers.TensorBoardLogger(out, name="logs", version="", default_hp_metric=False),
        ]
        callbacks = callbacks + [FlushLoggersOnCheckpoint()]
    plugins = [AtomicCheckpointIO()]
    if progress:
        callbacks = callbacks + [L.pytorch.callbacks.TQDMProgressBar(refresh_rate=1)]
    strategy = t["strategy"]
    if strategy == "ddp" and t["accelerator"] == "cpu":
        strategy = L.pytorch.strategies.DDPStrategy(process_group_backend="gloo")
    return L.Trainer(
        max_epochs=t["epochs"],
        accelerator=t["accelerator"],
        devices=t["devices"],
        num_nodes=t["num_nodes"],
        strategy=strategy,
        precision=t["precision"],
        gradient_clip_val=t["grad_clip"] or None,
        gradient_clip_algorithm="norm",
        deterministic="warn",
        callbacks=callbacks,
        logger=loggers,
        plugins=plugins,
        enable_progress_bar=progress,
        enable_model_summary=False,
        log_every_n_steps=10,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        limit_train_batches=t["limit_train_batches"],
        default_root_dir=out,
        **extra,
    )


def _predict_samples(module: OperatorModule, ds: Dataset, k: int):
    """The first k samples of a split: inputs, targets, predictions (physical units) and per-sample errors."""
    from .losses import rel_l2

    module.eval()
    k = min(k, len(ds))
    batch = torch.utils.data.default_collate([ds[i] for i in range(k)])
    batch = {key: v.to(module.device) if torch.is_tensor(v) else v for key, v in batch.items()}
    with torch.no_grad():
        pred = module(batch)
    raw_input = batch.get("coeff", batch["input"])  # Darcy: show the physical coefficient, not the standardized one
    return raw_input.cpu(), batch["target"].cpu(), pred.float().cpu(), rel_l2(pred, batch["target"]).cpu().tolist()


def train(cfg: dict, out, *, resume: bool = False, overwrite: bool = False, progress: bool = True) -> dict:
    """Train ``cfg`` into directory ``out``; returns the metrics written to ``out/metrics.json``."""
    cfg = resolve(cfg)
    out = Path(out)
    ckpt_path = prepare_out_dir(out, cfg, resume, overwrite)
    if _is_rank_zero():
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "config.yaml", yaml.safe_dump(cfg, sort_keys=False))
    t = cfg["train"]
    if ckpt_path is not None and _is_rank_zero():
        _keep_csv_history(out / "logs")
    L.seed_everything(t["seed"], workers=True, verbose=False)
    bundle = build_data(cfg)
    L.seed_everything(t["seed"], workers=True, verbose=False)  # model init independent of data generation
    module = OperatorModule(cfg, target_shape=bundle.target_shape)
    if bundle.target_normalizer is not None:
        module.set_target_normalizer(*bundle.target_normalizer)

    monitor = "test_rel_l2_selection" if t["selection"] == "test" else "val_rel_l2"
    ckdir = out / "checkpoints"
    best_cb = L.pytorch.callbacks.ModelCheckpoint(ckdir, filename="best", monitor=monitor, mode="min", save_top_k=1,
                                                  enable_version_counter=False)
    every = t["checkpoint_every_n_steps"] or None
    # "last.ckpt", rewritten at the end of every epoch (or every N steps): the resume point
    last_cb = L.pytorch.callbacks.ModelCheckpoint(ckdir, filename="last", monitor=None, save_top_k=1,
                                                  every_n_train_steps=every, enable_version_counter=False)
    trainer = _trainer(cfg, out, progress, [best_cb, last_cb])
    dm = _DataModule(bundle, cfg)
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    seconds = module.training_seconds()
    best_path = best_cb.best_model_path or str(ckdir / "last.ckpt")
    best_score = best_cb.best_model_score
    module.load_state_dict(torch.load(best_path, map_location="cpu", weights_only=True)["state_dict"])
    tester = _trainer(cfg, out, False, [], logger=False)
    result = tester.test(module, datamodule=dm, verbose=False)
    test_err = float(result[0]["test_rel_l2"])
    metrics = {
        "preset": cfg["name"],
        "problem": cfg["problem"],
        "val_rel_l2": None if best_score is None else float(best_score),
        "selection": (
            "validation split carved from the training file"
            if t["selection"] == "val"
            else "REFERENCE PROTOCOL: best epoch chosen on the test set (for comparison with the paper only)"
        ),
        "test_rel_l2": test_err,
        "epochs": int(trainer.current_epoch),
        "best_epoch": _epoch_of(best_path),
        "seconds": round(seconds, 2),
        "parameters": count_parameters(module.model),
        "seed": t["seed"],
        "resolution": cfg["data"]["resolution"],
        "n_train": len(bundle.train),
        "n_val": len(bundle.val),
        "n_test": len(bundle.test),
        "version": __version__,
        "torch": torch.__version__,
        "best_checkpoint": str(Path(best_path).resolve().relative_to(out.resolve())) if best_path else None,
    }
    if trainer.is_global_zero:
        module.to("cpu")
        write_plots(module, bundle.test, cfg, out, t["plot_samples"], f"{cfg['name']}: test samples")
        metrics["plots"] = sorted(str(p.relative_to(out)) for p in (out / "plots").glob("*.png"))
        atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=2))
    return metrics


def _keep_csv_history(logs: Path) -> None:
    """Lightning's CSVLogger starts metrics.csv afresh in a new process: keep the earlier sessions' rows as
    metrics-0.csv, metrics-1.csv, ... (the training-curve plot reads them all)."""
    csv_path = logs / "metrics.csv"
    if csv_path.exists():
        k = len(list(logs.glob("metrics-*.csv")))
        os.replace(csv_path, logs / f"metrics-{k}.csv")


def _epoch_of(path: str) -> Optional[int]:
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True)["epoch"])
    except Exception:  # noqa: BLE001 - informative only
        return None


def write_plots(module: OperatorModule, ds: Dataset, cfg: dict, out: Path, k: int, title: str, suffix: str = ""):
    inputs, targets, preds, errs = _predict_samples(module, ds, k)
    plot_predictions(out / "plots" / f"predictions{suffix}.png", inputs, targets, preds, cfg["problem"], errs, title)
    parts = sorted((out / "logs").glob("metrics-*.csv"), key=lambda p: int(p.stem.split("-")[1]))
    parts += [p for p in [out / "logs" / "metrics.csv"] if p.exists()]
    if parts and not suffix:
        history: dict = {}
        for part in parts:  # later sessions override earlier rows of the same epoch
            for key, rows in read_metrics_csv(part).items():
                history.setdefault(key, {}).update(dict(rows))
        curves = {key: sorted(rows.items()) for key, rows in history.items()}
        plot_curves(out / "plots" / "training_curves.png", curves, cfg["name"])


def evaluate(checkpoint, *, data: Optional[str] = None, resolution: Optional[int] = None, out=None,
             progress: bool = False, batch_size: Optional[int] = None) -> dict:
    """Test error of a checkpoint on the test split of ``data`` (default: the run's own), at any resolution."""
    checkpoint = Path(checkpoint)
    if not checkpoint.exists():
        raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
    ck = torch.load(checkpoint, map_location="cpu", weights_only=True)
    cfg = json.loads(json.dumps(ck["hyper_parameters"]["config"]))
    if data is not None:
        cfg["data"]["path"] = data
        cfg["data"]["test_path"] = None if cfg["problem"] == "burgers" else data
    if resolution is not None:
        cfg["data"]["resolution"] = int(resolution)
    if batch_size is not None:
        cfg["train"]["eval_batch_size"] = batch_size
    cfg["train"].update(devices=1, strategy="auto", num_nodes=1)
    bundle = build_data(cfg, splits=("test",))
    module = OperatorModule(cfg, target_shape=ck["hyper_parameters"]["target_shape"])
    module.load_state_dict(ck["state_dict"])
    if bundle.target_normalizer is not None and bundle.target_shape != tuple(module.y_mean.shape):
        raise ConfigError(
            f"this model normalizes its {cfg['problem']} targets per point at the training grid "
            f"{tuple(module.y_mean.shape)}; evaluation at {bundle.target_shape} is not supported"
        )
    out = Path(out) if out is not None else checkpoint.parent.parent / f"eval-{cfg['data']['resolution']}"
    out.mkdir(parents=True, exist_ok=True)
    tester = _trainer(cfg, out, progress, [], logger=False)
    started = time.perf_counter()
    result = tester.test(module, datamodule=_DataModule(bundle, cfg), verbose=False)
    metrics = {
        "checkpoint": str(checkpoint),
        "data": cfg["data"]["path"],
        "resolution": cfg["data"]["resolution"],
        "test_rel_l2": float(result[0]["test_rel_l2"]),
        "n_test": len(bundle.test),
        "seconds": round(time.perf_counter() - started, 2),
        "version": __version__,
    }
    module.to("cpu")
    write_plots(module, bundle.test, cfg, out, cfg["train"]["plot_samples"],
                f"{cfg['name']} at resolution {cfg['data']['resolution']}", suffix="")
    metrics["plots"] = sorted(str(p) for p in (out / "plots").glob("predictions*.png"))
    atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=2))
    return metrics
