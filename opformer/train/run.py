"""Train, evaluate and predict: the bodies of ``opformer train``, ``opformer eval`` and ``opformer predict``.

Nothing here knows a problem: the run's Task loads the data, builds the operator and defines the loss."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import functools
import hashlib
import itertools
import json
import os
import shutil
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Optional, Union

import lightning as L
import numpy as np
import torch
import yaml
from lightning.pytorch.plugins.io import AsyncCheckpointIO
from torch.utils.data import BatchSampler, DataLoader, Dataset

from .. import __version__
from ..atomic import atomic_write_text, replacing, unwritable
from ..interrupt import check_stop, ctrl_c_requests_stop
from .callbacks import (AtomicCheckpointIO, EpochLine, EpochShuffleSampler, FlushLoggersOnCheckpoint, ResumedHistory,
                        StopOnRequest)
from ..config import ConfigError, SettingError, TrainConfig, devices_value
from ..data.datasets import has_batch, stack_samples, suspicious_samples
from ..tasks.artifact import LoadError, Predictor, count_argument, load, make_artifact, read_checkpoint
from ..tasks.base import ensure_files
from ..tasks.losses import rel_l2
from .config import model_error, resolve
from .module import OperatorModule, count_parameters, lr_groups
from .plots import plot_curves, plot_predictions, read_run_history

__all__ = ["train", "evaluate", "predict", "prepare_run", "RunDirError"]

RUN_FILES = ("config.yaml", "metrics.json", "checkpoints")
LOCK = ".lock"  # held (flock) by the process that writes the run directory, for its whole life


class RunDirError(RuntimeError):
    """The output directory holds another run."""


def _is_rank_zero() -> bool:
    """Whether this is the job's first process, before Lightning has set the ranks up: torchrun's ``RANK``, else the
    SLURM task's number where Lightning takes the ranks from SLURM (every task of an ``srun``, outside its
    interactive mode), else ``LOCAL_RANK`` (set by Lightning's own launcher)."""
    rank = os.environ.get("RANK")
    if rank is None and "SLURM_NTASKS" in os.environ and \
            os.environ.get("SLURM_JOB_NAME") not in ("bash", "interactive"):
        rank = os.environ.get("SLURM_PROCID")
    if rank is None:
        rank = os.environ.get("LOCAL_RANK", 0)
    return int(rank or 0) == 0


#: train fields that do not change a run's result (how many processes ran it, on what hardware)
_HARDWARE = ("accelerator", "devices", "strategy", "num_nodes", "num_workers", "deterministic", "cuda_graphs",
             "background_checkpoints", "data_on_device")

#: train fields that change what a run shows or how often it saves, not what it trains: free to change on --resume
_PRESENTATION = ("plot_samples", "checkpoint_every_n_steps")


def _config_for_comparison(cfg: dict) -> dict:
    """The fields that define a run's result (how many processes ran it or whether bars are shown do not)."""
    c = json.loads(json.dumps(cfg))
    for key in ("name", "description"):  # labels: a run keeps its result whatever it is called
        c.pop(key, None)
    for key in (*_HARDWARE, *_PRESENTATION):
        c["train"].pop(key, None)
    # fields added in later versions: a run recorded without them had their default
    defaults = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        if f.name not in _HARDWARE and f.name not in _PRESENTATION:
            c["train"].setdefault(f.name, getattr(defaults, f.name))
    if isinstance(c.get("data"), dict):  # the same for the data's fields (grid)
        from ..config import DataConfig

        blank = DataConfig()
        for f in dataclasses.fields(DataConfig):
            c["data"].setdefault(f.name, getattr(blank, f.name))
    model = c.get("model")
    if isinstance(model, dict) and isinstance(model.get("name"), str):  # the same for the model's fields
        from ..models import model_config

        try:
            full = json.loads(json.dumps(dataclasses.asdict(model_config(model))))
        except Exception:  # a model section the models refuse: compared as written (the start refuses it anyway)
            full = {}
        for key, value in full.items():
            model.setdefault(key, value)
    return c


def absolute_data_paths(cfg: dict) -> dict:
    """A copy of the run config with its data files as absolute paths (``./b.h5`` and ``b.h5`` are one run, and the
    recorded config still names the file when read from elsewhere)."""
    cfg = copy.deepcopy(cfg)
    data = cfg.get("data")
    if isinstance(data, dict):
        for key in ("path", "test_path"):
            if isinstance(data.get(key), str) and data[key]:
                data[key] = os.path.abspath(os.path.expanduser(data[key]))
    return cfg


def check_out_dir(out: Path, cfg: dict, resume: bool, overwrite: bool, *, compare_model: bool = True,
                  locked: bool = False, fitted_train: tuple = (), data: Optional[dict] = None,
                  explicit: frozenset = frozenset(), check_checkpoint=None) -> Optional[Path]:
    """Refuse a directory holding a different run, or one a running training holds (reads only); returns the
    checkpoint to resume from (or None), read once with the safe loader so that a damaged or hostile file ends the
    start with one line before Lightning opens it.

    Only the first process checks: the others may start after it has written the new run's config, so they only
    look for the checkpoint to resume from.  A refusal on rank 0 ends the job.  ``compare_model=False`` leaves the
    model section out of the comparison (before the model is sized to the data), and with it the ``fitted_train``
    fields of the train section (those the task may still set from the data's grid); ``locked``: this process holds
    the directory's lock.  A checkpoint of another run (another task, model or config) and data that changed since
    the run started (the fingerprints and split sizes the checkpoint records) are refused; ``data``: this start's
    :func:`data_record`, once the data are loaded (before, the recorded files that exist are compared).
    ``explicit``: the fields the user set (flags), which fitting the model to the data never changes: with
    ``compare_model=False``, a refusal lists those of the model that differ too, first.  ``check_checkpoint``: called
    with the checkpoint to resume from, as read here, once it passed these checks (further checks of this start)."""
    if out.exists() and not out.is_dir():
        raise RunDirError(f"--out {out} is a file, not a directory")
    if not _is_rank_zero():
        last = out / "checkpoints" / "last.ckpt"
        return last if resume and not overwrite and last.exists() else None
    if not locked:
        _check_writable(out)
        _check_not_running(out)
    existing = [name for name in RUN_FILES if (out / name).exists()]
    if (existing and not overwrite and not resume and _never_checkpointed(out)
            and _same_stored_run(out / "config.yaml", cfg, compare_model, fitted_train)):
        if locked:
            warnings.warn(f"{out} holds a run that stopped before its first checkpoint (nothing to resume): starting "
                          "it over")
        return None
    if not existing or overwrite:
        if resume and not existing:
            warnings.warn(f"--resume: {out} holds no run yet; starting from scratch")
        return None
    if not resume:
        raise RunDirError(
            f"{out} already holds a run ({', '.join(existing)}). Pass --resume to continue it or --overwrite to "
            "replace it, or choose another --out."
        )
    last = out / "checkpoints" / "last.ckpt"
    ck = None
    if last.exists():
        try:
            ck = read_checkpoint(last)
        except LoadError as exc:
            raise RunDirError(f"--resume: {exc}; remove it to start afresh, or --overwrite") from None
        if not isinstance(ck.get("opformer"), dict) or "state_dict" not in ck:
            raise RunDirError(f"--resume: {last}: not an opformer training checkpoint")
        other = _other_run(ck, cfg)
        if other is not None:
            raise RunDirError(f"--resume: {last} is a checkpoint of another run ({other}); start again with "
                              "--overwrite, or choose another --out")
        best = out / "checkpoints" / "best.ckpt"
        if best.exists():  # read at the end of the run: a damaged one would fail only after all the epochs
            try:
                read_checkpoint(best)
            except LoadError as exc:
                raise RunDirError(f"--resume: {exc}; remove it (last.ckpt resumes the run, and the best epoch from "
                                  "here on is kept), or --overwrite") from None
    old_cfg_path = out / "config.yaml"
    old, source = None, None
    if old_cfg_path.exists():
        try:
            old, source = yaml.safe_load(old_cfg_path.read_text()), old_cfg_path
        except yaml.YAMLError as exc:
            raise RunDirError(f"--resume: {old_cfg_path} is not readable YAML ({str(exc).splitlines()[0]})") from None
    elif ck is not None:
        old, source = ck.get("run_config"), last
    if old is not None:
        if not isinstance(old, dict) or not isinstance(old.get("train"), dict):
            raise RunDirError(f"--resume: {source} holds no run config")
        a, b = _compared(old, cfg, compare_model, fitted_train)
        if a != b:
            hint = ""
            was, now = a["train"].get("epochs"), b["train"].get("epochs")
            if was != now:
                hint = f". The one-cycle learning-rate schedule spans the {was} epochs of that run, so it cannot be "
                if isinstance(was, int) and isinstance(now, int) and now < was:  # e.g. the run's --epochs left out
                    hint += (f"shortened; resume with --epochs {was}, or train a new run with the epochs you want into "
                             "another --out")
                else:
                    hint += "lengthened; train a new run with the epochs you want into another --out"
            if not compare_model:  # the model's fields that the user set are compared already: they are listed first
                a, b = _compared(old, cfg, compare_model, fitted_train, explicit)
            raise RunDirError(f"{out} holds a different run; --resume needs the same config (as in {source.name}). "
                              f"Differences: {_diff(a, b)}{hint}")
    if ck is None:
        warnings.warn(f"--resume: no checkpoint in {out / 'checkpoints'} yet; starting from scratch")
        return None
    if source != last and isinstance(ck.get("run_config"), dict) and isinstance(ck["run_config"].get("train"), dict):
        # config.yaml matched: the checkpoint must match it too, model included even before the data are read (both
        # were written once the model was fitted to the data), so that a model that differs is named from the start
        a, b = (_compared(ck["run_config"], absolute_data_paths(old), True, ()) if old is not None
                else _compared(ck["run_config"], cfg, compare_model, fitted_train))
        if a != b:
            raise RunDirError(f"--resume: {last} is a checkpoint of another run than {old_cfg_path.name} (differences: "
                              f"{_diff(a, b)}); start again with --overwrite, or choose another --out")
    _check_same_data(ck, data)
    if check_checkpoint is not None:
        check_checkpoint(ck)
    return last


def _other_run(ck: dict, cfg: dict) -> Optional[str]:
    """The task and model of the checkpoint ``ck`` and of the run config ``cfg`` in a few words when they differ,
    else None."""
    art = ck.get("opformer") or {}
    stored = ck.get("run_config") if isinstance(ck.get("run_config"), dict) else {}
    model = art.get("model") if isinstance(art.get("model"), dict) else {}
    theirs = (art.get("task") or stored.get("task"), model.get("name"))
    ours = (cfg.get("task"), (cfg.get("model") or {}).get("name") if isinstance(cfg.get("model"), dict) else None)
    if None in theirs or None in ours or theirs == ours:
        return None

    def named(name, task, model_name):
        return f"{name + ': ' if name else ''}task {task}, model {model_name}"

    return f"{named(stored.get('name'), *theirs)}; this run {named(cfg.get('name'), *ours)}"


# --- the data a run reads: fingerprints recorded in its checkpoints, compared on --resume -----------------------------
#: data files up to this size are hashed whole; larger ones in ``_BLOCKS`` evenly spaced blocks, their size and
#: modification time then telling the rest
_WHOLE_HASH_BYTES = 64 << 20
_BLOCK = 1 << 20
_BLOCKS = 16


@functools.lru_cache(maxsize=64)
def _hashed(path: str, size: int, mtime_ns: int, inode: int) -> tuple[str, bool]:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        if size <= _WHOLE_HASH_BYTES:
            for chunk in iter(lambda: fh.read(_BLOCK), b""):
                h.update(chunk)
            return h.hexdigest(), True
        for k in range(_BLOCKS):
            fh.seek((size - _BLOCK) * k // (_BLOCKS - 1))
            h.update(fh.read(_BLOCK))
    return h.hexdigest(), False


def file_fingerprint(path) -> dict:
    """{"size", "mtime_ns", "sha256", "whole"} of a file: its size, modification time and the SHA-256 of its content
    (of the whole file, or of evenly spaced blocks of a large one: ``whole`` false)."""
    path = os.path.abspath(path)
    st = os.stat(path)
    digest, whole = _hashed(path, st.st_size, st.st_mtime_ns, st.st_ino)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest, "whole": whole}


def data_record(bundle) -> dict:
    """What a run records of its data when it starts: {"files": {absolute path: :func:`file_fingerprint`} of every
    file it reads (its own or the cached default data, a pattern's every match), "splits": {split: samples}}."""
    from ..data.readers import resolve_paths

    files = {}
    for value in (bundle.files or {}).values():
        if value:
            for p in resolve_paths(value):
                path = os.path.abspath(p)
                if path not in files:
                    files[path] = file_fingerprint(path)
    return {"files": files, "splits": {split: len(ds) for split, ds in bundle.datasets.items()}}


def _shown(path: str) -> str:
    """A data file's path as the user most likely gave it: relative to the working directory when it is below it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _points(grid) -> str:
    """A grid in words: ``13 points``, ``30 x 30 points``."""
    return " x ".join(str(int(n)) for n in grid) + (" point" if int(np.prod(grid)) == 1 else " points")


def data_line(run, bundle) -> str:
    """What a training read, in one line: ``data: 300 samples of 13 points from last1d.npz (x -> y); train 240,
    val 30, test 30`` (trajectories: their count, snapshots and grid), for the user to see at the start what the
    files were taken to hold."""
    from .cli import _count

    ds = bundle.datasets
    splits = [s for s in ("train", "val", "test") if s in ds]
    files = dict(bundle.files or {})  # a task of the user's own may not record its files: the config's then
    files.setdefault("train", run.data.path)
    train_file = _shown(str(files["train"])) if files["train"] else None
    test_file = _shown(str(files["test"])) if files.get("test") else train_file
    where = ("the task's data" if train_file is None else train_file if test_file == train_file
             else f"{train_file} (test split from {test_file})")
    traj = getattr(ds[splits[0]], "traj", None)
    if traj is not None:  # (trajectories, snapshots, *grid, channels)
        counts = {s: int(ds[s].traj.shape[0]) for s in splits}
        key = bundle.info.get("key") or ",".join(run.data.keys or run.task.default_keys)
        total = sum(counts.values())
        what = (f"{_count(total, 'trajectory', 'trajectories')} of "
                f"{_count(int(traj.shape[1]), 'snapshot')} on {_points(traj.shape[2:-1])}")
        tail = f" trajectories ({_count(len(ds['train']), 'training pair')})" if "train" in ds else ""
        return (f"data: {what} from {where} ({key}); "
                + ", ".join(f"{s} {counts[s]}" for s in splits) + tail)
    counts = {s: len(ds[s]) for s in splits}
    keys = list(run.data.keys or run.task.default_keys)
    if not getattr(run.task, "input_first", True):  # shown input -> target, whatever the order of the keys
        keys = keys[::-1]
    grid = _points(bundle.input_grid)
    if tuple(bundle.target_grid) != tuple(bundle.input_grid):
        grid += f" (targets on {_points(bundle.target_grid)})"
    return (f"data: {_count(sum(counts.values()), 'sample')} of {grid} from {where} ({' -> '.join(keys)}); "
            + ", ".join(f"{s} {counts[s]}" for s in splits))


def samples_last_1d(run, files) -> Optional[str]:
    """A warning for a 1D task's own data whose input array has fewer points than samples, ``(N, M)`` with M < N:
    arrays stored samples last (M samples of N points) read that way, and train without complaint; None
    otherwise."""
    from ..data.readers import open_source
    from ..pde.errors import DataError
    from ..tasks.trajectories import TrajectoryTask

    if run.task.dim != 1 or run.data.path is None or isinstance(run.task, TrajectoryTask):
        return None
    key = list(run.data.keys or run.task.default_keys)[0]
    try:
        shape = tuple(open_source(files["train"], (key,)).shapes[key])
    except DataError:
        return None
    if len(shape) != 2 or shape[1] >= shape[0]:
        return None
    return (f"{_shown(str(files['train']))}: {key!r} {shape} reads as {shape[0]} samples of {shape[1]} points "
            f"(samples first); if it holds {shape[1]} samples of {shape[0]} points stored samples last, transpose "
            "it (a.T)")


def _data_change(old: dict, now: Optional[dict]) -> Optional[str]:
    """How a data file differs from its recorded fingerprint ``old`` (``now``: its fingerprint now, None when it is
    gone), in a few words; None when it is the same."""
    if now is None:
        return "it is gone"
    if old.get("size") != now["size"]:
        return f"size {old.get('size')} -> {now['size']} bytes"
    if old.get("sha256") != now["sha256"]:
        return "its content differs"
    if not old.get("whole", True) and old.get("mtime_ns") != now["mtime_ns"]:
        return "its modification time differs"
    return None


def _check_same_data(ck: dict, data: Optional[dict]) -> None:
    """Refuse to resume the checkpoint ``ck`` on data that changed since its run started: a recorded file that is
    gone or differs, a file read now that was not then, a split of another size.  ``data``: this start's
    :func:`data_record`; without it (before the data are loaded) only the recorded files that exist are compared
    (default data not generated yet is made, and compared, when it is loaded)."""
    advice = "resume with the same data, or start again with --overwrite"
    recorded = ck.get("data_files")
    if isinstance(recorded, dict):
        for path, old in recorded.items():
            if data is not None:
                now = data["files"].get(path)
            elif os.path.isfile(path):
                now = file_fingerprint(path)
            else:
                continue
            why = _data_change(old if isinstance(old, dict) else {}, now)
            if why is not None:
                raise RunDirError(f"--resume: {_shown(path)} changed since the run started ({why}); {advice}")
        for path in sorted(set(data["files"]) - set(recorded)) if data is not None else ():
            raise RunDirError(f"--resume: {_shown(path)} is read by this run but was not when the run started; "
                              f"{advice}")
    splits = ck.get("data_splits")
    if isinstance(splits, dict) and data is not None:
        for split, n in splits.items():
            m = data["splits"].get(split)
            if m is not None and m != n:
                raise RunDirError(f"--resume: the data changed since the run started: its {split} split has {m} "
                                  f"samples, it had {n}; {advice}")


def _compared(old: dict, cfg: dict, compare_model: bool, fitted_train, explicit=frozenset()) -> tuple[dict, dict]:
    """The stored run config ``old`` and the new ``cfg`` as compared for a resume (``compare_model=False``: without
    the model section and the ``fitted_train`` fields, before the model is sized to the data, except the fields
    named in ``explicit``: those the user set, which the sizing keeps)."""
    a, b = _config_for_comparison(absolute_data_paths(old)), _config_for_comparison(cfg)
    if not compare_model:
        for c in (a, b):
            model = c.pop("model", None)
            kept = {k: v for k, v in model.items() if k in explicit} if isinstance(model, dict) else {}
            if kept:
                c["model"] = kept
        for key in fitted_train:
            if key not in explicit:
                a.get("train", {}).pop(key, None), b.get("train", {}).pop(key, None)
    return a, b


def _same_stored_run(path: Path, cfg: dict, compare_model: bool, fitted_train) -> bool:
    """Whether ``path`` (a run directory's config.yaml) is the resolved config of this same run, as an earlier start
    of the same command wrote it: not a user's own file that happens to be there."""
    try:
        old = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    if not isinstance(old, dict) or not isinstance(old.get("train"), dict):
        return False
    a, b = _compared(old, cfg, compare_model, fitted_train)
    return a == b


def _never_checkpointed(out: Path) -> bool:
    """Whether ``out`` holds a run that stopped (a failure, Ctrl-C) before its first checkpoint: its config but no
    checkpoint and no metrics, and the lock file only a started run makes; such a run is started over, as nothing of
    it can be resumed."""
    return ((out / "config.yaml").exists() and (out / LOCK).exists() and not (out / "metrics.json").exists()
            and not any((out / "checkpoints").glob("*.ckpt")))


def _check_writable(out: Path, shown: Optional[Path] = None, error=RunDirError) -> None:
    """Fail now, not after the data are prepared, when ``out`` cannot be created or written: a directory is made and
    removed at once in the nearest existing ancestor (nothing is left behind).  ``shown``: the path the user gave,
    when ``out`` is the directory it goes into."""
    problem = unwritable(out)
    if problem is not None:
        raise error(f"--out {out if shown is None else shown}: {problem}")


def _check_not_running(out: Path, error=RunDirError, user: str = "a running training") -> None:
    """Refuse a directory whose lock another process holds (the lock file is opened, never created, here)."""
    try:
        fd = os.open(out / LOCK, os.O_RDWR)
    except OSError:
        return
    try:
        _flock(fd, out, error, user)
    finally:
        os.close(fd)  # releases the lock if it was taken


def _flock(fd: int, out: Path, error=RunDirError, user: str = "a running training") -> None:
    """Take the directory's lock without waiting, or raise ``error`` naming the process that holds it (``user``: what
    that process is doing there)."""
    try:
        import fcntl
    except ImportError:  # no flock on this platform: no protection against concurrent runs
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        pid, command = _read_holder(fd)
        holder = _LOCK_USERS.get(command, f"a running opformer {command}") if command else user
        raise error(f"{out} is in use by {holder} (pid {pid}); wait for it to end, or choose another --out") from None


#: what each command that holds a lock is called when another command is refused there (the lock file records the
#: command, ``PID COMMAND``; a lock file of an earlier version holds the pid alone, and the refused command then
#: names the holder by its own kind, as that version did)
_LOCK_USERS = {"train": "a running training", "eval": "a running opformer eval",
               "rollout": "a running opformer rollout"}


def _lock_holder(content: bytes) -> tuple[str, Optional[str]]:
    """(the pid, the command or None) that the lock file's ``content`` records: ``PID COMMAND`` (``PID`` alone in an
    earlier version's file); anything else in the file is not repeated to the user."""
    words = content.decode(errors="replace").split("\n", 1)[0].split()
    if not words or not words[0].isdigit():
        return "?", None
    command = words[1] if len(words) > 1 and words[1].isalpha() and len(words[1]) <= 20 else None
    return words[0], command


def _read_holder(fd: int) -> tuple[str, Optional[str]]:
    """(the pid, the command or None) of the process that holds the lock of ``fd``, as the lock file records it.  A
    holder signs the file right after taking the lock (:func:`_sign_fd`): a pid that is no running process is the
    previous holder's, read in that moment, so the file is read again for a little while before it is named."""
    for _ in range(5):
        pid, command = _lock_holder(os.pread(fd, 128, 0))
        if _running(pid):
            return pid, command
        time.sleep(0.02)
    return _lock_holder(os.pread(fd, 128, 0))


def _running(pid: str) -> bool:
    """Whether ``pid`` (the text a lock file records) is a running process."""
    if not pid.isdigit() or int(pid) <= 0:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # PermissionError: another user's process; else nothing we can tell
        return True
    return True


def _sign_fd(fd: int, command: str) -> None:
    """Record this process's pid and ``command`` (``train``, ``eval``, ``rollout``) in the lock file of ``fd``, whose
    lock this process has just taken: written over the previous holder's line in one write and then cut to its
    length, so that a reader never finds the file empty."""
    line = f"{os.getpid()} {command}\n".encode()
    os.pwrite(fd, line, 0)
    os.ftruncate(fd, len(line))


def _lock_content(out: Path) -> Optional[tuple]:
    """What ``out/.lock`` holds (the last holder's signature) and its access and modification times, for a refused
    start to put back (:func:`_put_back_signature`); None when it cannot be read."""
    try:
        st = (out / LOCK).stat()
        return (out / LOCK).read_bytes()[:4096], st.st_atime_ns, st.st_mtime_ns
    except OSError:
        return None


def _put_back_signature(out: Path, previous: Optional[tuple]) -> None:
    """Give ``out/.lock`` back the content and times it had before this process signed it (``previous``:
    :func:`_lock_content`; None: nothing to put back), once a start into ``out`` was refused: it leaves the file as
    it was."""
    if previous is None:
        return
    content, atime, mtime = previous
    with contextlib.suppress(OSError):
        fd = os.open(out / LOCK, os.O_WRONLY)
        try:
            os.pwrite(fd, content, 0)
            os.ftruncate(fd, len(content))
        finally:
            os.close(fd)
        os.utime(out / LOCK, ns=(atime, mtime))


@contextlib.contextmanager
def _locked_run_dir(out: Path):
    """Rank 0: create ``out`` and hold ``out/.lock`` until the block ends (the process's exit releases it too),
    signed as a training's the moment it is taken, so that a second command refused there names this process, never
    the previous holder.  Yields whether ``out`` was created here.  Other ranks take no lock."""
    if not _is_rank_zero():
        yield False
        return
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise RunDirError(f"--out {out}: cannot create the run directory ({exc.strerror or exc})") from None
    try:
        _flock(fd, out)
        _sign_fd(fd, "train")
        yield created
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would let two processes lock different files)


#: what an evaluation or a rollout holding its output folder's lock is called when a second one is refused there
_EVAL_USER = _LOCK_USERS["eval"]
_ROLLOUT_USER = _LOCK_USERS["rollout"]


@contextlib.contextmanager
def locked_output(out: Path, command: str):
    """Create ``out`` and hold ``out/.lock`` (the run directory's kind of lock) while an evaluation or a rollout
    (``command``: ``eval`` or ``rollout``) writes its files there: a second one into the same folder meanwhile is
    refused in one line instead of interleaving its files."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _flock(fd, out, ConfigError, _LOCK_USERS[command])
        _sign_fd(fd, command)
        yield
    finally:
        os.close(fd)  # the file stays, as the run directory's


#: an earlier run's own files, by folder (the temporary files of interrupted writes are removed, not kept)
_RUN_FILE_PATTERNS = (("", ("config.yaml", "metrics.json")),
                      ("checkpoints", ("best.ckpt", "last.ckpt")),
                      ("logs", ("metrics*.csv", "hparams.yaml", "events.out.tfevents.*")),
                      ("plots", ("predictions*.png", "training_curves.png")))
_RUN_TEMP_PATTERNS = (("", (".config.yaml.*.tmp", ".metrics.json.*.tmp")),
                      ("checkpoints", ("*.ckpt.tmp", ".best.ckpt.*.tmp", ".last.ckpt.*.tmp")))


def _set_aside_run(out: Path) -> Optional[Path]:
    """Move what an earlier run wrote (its own files only) into a hidden folder of ``out``, after the new run has
    been validated; returns that folder (None: nothing was there).  The new run deletes it once its training starts
    (:class:`_TrainingStarted`); a start that fails before then puts the files back (:func:`_put_back_run`), so an
    ``--overwrite`` whose setup fails loses nothing."""
    held = out / f".replaced-run.{os.getpid()}"
    moved = False
    for sub, patterns in _RUN_TEMP_PATTERNS:
        for pattern in patterns:
            for p in (out / sub).glob(pattern):
                p.unlink(missing_ok=True)
    for sub, patterns in _RUN_FILE_PATTERNS:
        for pattern in patterns:
            for p in sorted((out / sub).glob(pattern)):
                (held / sub).mkdir(parents=True, exist_ok=True)
                os.replace(p, held / sub / p.name)
                moved = True
        if sub and (out / sub).is_dir() and not any((out / sub).iterdir()):
            (out / sub).rmdir()
    return held if moved else None


def _restore_set_aside(out: Path) -> None:
    """Put back a run that an ``--overwrite`` killed between setting it aside and its training's start left in a
    hidden folder (called under the directory's lock, so no live training owns such a folder), with a warning."""
    for held in sorted(out.glob(".replaced-run.*")) if out.is_dir() else []:
        if held.is_dir():
            _put_back_run(out, held)
            warnings.warn(f"{out}: put back the run that an interrupted --overwrite had set aside in {held.name}",
                          stacklevel=3)


def _put_back_run(out: Path, held: Path) -> None:
    """The files :func:`_set_aside_run` moved into ``held`` back in their places (a file the failed start wrote
    there since is replaced), and ``held`` removed."""
    for p in sorted(held.rglob("*")):
        if p.is_file():
            dest = out / p.relative_to(held)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(p, dest)
    shutil.rmtree(held, ignore_errors=True)


#: the order of the sections in a list of differences between two run configs: the model first (why a checkpoint's
#: weights cannot load), then the data, the train section (the epochs, the schedule) last; others before it
_SECTION_ORDER = {"task": 0, "model": 1, "data": 2, "train": 4}


def _diff(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b), key=lambda k: (_SECTION_ORDER.get(k, 3) if not path else 0, str(k)))
        parts = [_diff(a.get(k), b.get(k), f"{path}{k}.") for k in keys if a.get(k) != b.get(k)]
        return "; ".join(p for p in parts if p)
    return f"{path.rstrip('.')}: {a!r} -> {b!r}"


class _WholeBatches(Dataset):
    """A dataset with a ``batch(indices)`` method, indexed by lists of indices (a DataLoader with ``batch_size=None``
    and a batch sampler then neither fetches items one by one nor stacks them)."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, indices):
        return self.ds.batch(indices)


class _IndexBatches(BatchSampler):
    """A batch sampler that passes ``set_epoch`` (called by Lightning every epoch) on to its sampler, and that, given
    ``resume`` = {"epoch": e, "batches": k}, leaves out the first k batches of its next pass if that pass is over
    epoch e (a run resumed in the middle of an epoch).  The check is made when the pass starts, after Lightning has
    set the epoch."""

    resume: Optional[dict] = None
    skipped: Optional[tuple[int, int]] = None  # (epoch, batches left out) of the last resumed pass

    def set_epoch(self, epoch: int) -> None:
        if callable(getattr(self.sampler, "set_epoch", None)):
            self.sampler.set_epoch(epoch)

    def __iter__(self):
        resume, self.resume = self.resume, None
        batches = super().__iter__()
        epoch = getattr(self.sampler, "epoch", None)
        if resume is not None and resume.get("epoch") == epoch and int(resume.get("batches", 0)) > 0:
            skip = int(resume["batches"])
            self.skipped = (epoch, skip)
            for _ in range(skip):
                if next(batches, None) is None:
                    return
        yield from batches


def _draw_like_one_process() -> None:
    """The draw from torch's generator that a loader without worker processes makes at every pass (its iterator's
    seed): loaders with workers seed them from a generator of their own and make it here instead, so that the
    dropout masks, and the run, do not depend on --num-workers."""
    torch.empty((), dtype=torch.int64).random_()


class _EvalLoader(DataLoader):
    """A validation or test loader whose passes draw from torch's generator as without worker processes."""

    def __iter__(self):
        if self.num_workers > 0:
            _draw_like_one_process()
        return super().__iter__()


class _TrainLoader(DataLoader):
    """The training loader, resumable in the middle of an epoch: its ``state_dict`` (Lightning saves it in every
    checkpoint) is the epoch and the number of its batches the run has trained on, and after ``load_state_dict`` the
    next pass over that epoch leaves those batches out, so a run resumed from a checkpoint written inside an epoch
    (``checkpoint_every_n_steps``) goes on where it stopped, in the same order.  Without it the epoch's order starts
    again: its first batches are trained on twice and its last ones never."""

    def __init__(self, *args, batches: _IndexBatches, progress, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches, self._progress = batches, progress

    def state_dict(self) -> dict:
        """{"epoch": the epoch of the next pass, "batches": how many of its batches were trained on (0 when the
        checkpoint is written at an epoch's end)}."""
        epoch, done = self._progress()
        return {"epoch": int(epoch), "batches": int(done)}

    def load_state_dict(self, state: dict) -> None:
        self.batches.resume = dict(state)
        # the epoch of the next pass, set now: with worker processes the loader draws its first batches as soon as
        # it is iterated, which Lightning does before it sets the epoch of a resumed run (the pass was shuffled as
        # epoch 0's)
        if "epoch" in state:
            self.batches.set_epoch(int(state["epoch"]))

    def __iter__(self):
        inside = int((self.batches.resume or {}).get("batches", 0)) > 0  # a pass that resumes inside an epoch
        if self.num_workers > 0 and not inside:
            _draw_like_one_process()
        if self.generator is None and inside:
            # a pass that resumes inside an epoch: its iterator draws its seed from a generator of its own, not from
            # torch's, which the checkpoint restored as it was after the last step (the uninterrupted run drew this
            # number at the epoch's start); the dropout masks that follow are then the uninterrupted run's
            self.generator = torch.Generator()
            try:
                return super().__iter__()
            finally:
                self.generator = None
        return super().__iter__()


def _uses_gpu(t) -> bool:
    return t.accelerator in ("gpu", "cuda", "mps") or (
        t.accelerator == "auto" and (torch.cuda.is_available() or torch.backends.mps.is_available()))


def pin_batches(t) -> bool:
    """Whether the data loaders put their batches in pinned host memory: when the run will use a CUDA device."""
    return _uses_gpu(t) and torch.cuda.is_available()


def keeps_data_on_device(setting, device_type: str, nbytes: int, free_bytes: int) -> bool:
    """Whether the training split stays on the device for ``train.data_on_device`` = ``setting``: never off a CUDA
    device (on the CPU the data are there already); true: always; auto: when the split takes at most a quarter of
    the device's free memory."""
    if device_type != "cuda" or setting is False:
        return False
    return True if setting is True else nbytes <= free_bytes // 4


def background_checkpoints(t) -> bool:
    """Whether ``train.background_checkpoints`` writes the checkpoint files in a background thread (``auto``: when
    the run will use a GPU)."""
    on = t.background_checkpoints
    return _uses_gpu(t) if on == "auto" else bool(on)


def deterministic_mode(t) -> Union[str, bool]:
    """Lightning's ``deterministic`` for ``train.deterministic``: "warn" (deterministic kernels where torch has them,
    a warning where it has none) when on; ``auto`` is on unless the run will use a GPU."""
    on = t.deterministic
    if on == "auto":
        on = not _uses_gpu(t)
    return "warn" if on else False


class _DataModule(L.LightningDataModule):
    """Shards the splits over the processes Lightning started (samplers depend only on seed, epoch and rank)."""

    def __init__(self, datasets: dict, train_cfg):
        super().__init__()
        self.ds, self.t = datasets, train_cfg
        self._on_device = None  # the training split's copy on the device, made once (train.data_on_device)
        self._on_device_at = None

    def _device_copy(self, ds: Dataset):
        """The training split on this process's device when ``train.data_on_device`` keeps it there, else None."""
        if self.trainer is None or not callable(getattr(ds, "on_device", None)):
            return None
        device = self.trainer.strategy.root_device
        if device.type != "cuda":
            return None
        if self._on_device is None:
            free = torch.cuda.mem_get_info(device)[0] if self.t.data_on_device == "auto" else 0
            if not keeps_data_on_device(self.t.data_on_device, device.type, ds.nbytes(), free):
                return None
            try:
                self._on_device, self._on_device_at = ds.on_device(device), device
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                size = f"{ds.nbytes() / 1e6:.0f} MB"
                if self.t.data_on_device is True:
                    free = torch.cuda.mem_get_info(device)[0] / 1e6
                    raise ConfigError(f"--data-on-device true: the training split ({size}) does not fit on {device} "
                                      f"({free:.0f} MB free); use --data-on-device auto or false") from None
                if self.trainer.is_global_zero:
                    print(f"note: the training split ({size}) did not fit on {device}; its batches are copied from "
                          f"the host", flush=True)
                return None
        return self._on_device

    def device_copy_info(self) -> Optional[dict]:
        """Where the training split's copy is and its size, or None when the batches came from the host."""
        if self._on_device is None:
            return None
        return {"device": str(self._on_device_at), "megabytes": round(self.ds["train"].nbytes() / 1e6, 1)}

    def _per_device(self, batch: int) -> int:
        world = self.trainer.world_size if self.trainer else 1
        if batch % world:
            raise ConfigError(f"batch size {batch} is not divisible by the number of processes {world}")
        return batch // world

    def _sampler(self, ds: Dataset, shuffle: bool):
        world = self.trainer.world_size if self.trainer else 1
        rank = self.trainer.global_rank if self.trainer else 0
        if shuffle:
            return EpochShuffleSampler(len(ds), self.t.seed, world, rank, shuffle=True)
        return list(range(rank, len(ds), world))

    def train_batch_samples(self, epoch: int, batch_idx: int) -> list[str]:
        """The samples of this process's training batch ``batch_idx`` of ``epoch``, in the user's terms (e.g. "sample
        753 of data/d33.h5"), in batch order.  The shuffle depends only on (seed, epoch, rank), so the batch is
        found again from its position without the batches carrying their indices."""
        ds = self.ds["train"]
        batches = _IndexBatches(self._sampler(ds, True), self._per_device(self.t.batch_size), False)
        batches.set_epoch(epoch)
        ids = next(itertools.islice(batches, batch_idx, None), [])
        describe = getattr(ds, "describe", None)
        return [describe(k) if callable(describe) else f"sample {k} of the training split" for k in ids]

    def _loader(self, ds: Dataset, batch: int, shuffle: bool) -> DataLoader:
        t = self.t
        sampler = self._sampler(ds, shuffle)
        size = self._per_device(batch) if shuffle else batch
        # on a CUDA device the batches are put in pinned host memory: a copy from pageable memory may make the host wait
        # for the device's queue at every step (docs/benchmarks.md, CUDA graphs)
        pin = pin_batches(t)
        on_device = self._device_copy(ds) if shuffle else None
        batches = _IndexBatches(sampler, size, False)
        # worker processes: the loader seeds them from a generator of its own, not from torch's (a persistent loader
        # draws that seed once, when first iterated: before the checkpoint of an uninterrupted run, after it in a
        # resumed one, which would shift the dropout masks of a resumed run); without workers the seed is drawn
        # from torch's at every pass, at the same points in both
        workers = {"num_workers": t.num_workers, "persistent_workers": t.num_workers > 0, "pin_memory": pin,
                   "generator": torch.Generator().manual_seed(t.seed) if t.num_workers > 0 else None}
        if not shuffle:
            if has_batch(ds):
                return _EvalLoader(_WholeBatches(ds), batch_size=None, sampler=batches, **workers)
            return _EvalLoader(ds, batch_sampler=batches, **workers)
        resumable = {"batches": batches, "progress": self._train_progress}
        if on_device is not None:  # gathered on the device: nothing to pin, copy or hand to worker processes
            return _TrainLoader(_WholeBatches(on_device), batch_size=None, sampler=batches, **resumable)
        if has_batch(ds):  # whole batches in one gather per array (FieldDataset.batch)
            return _TrainLoader(_WholeBatches(ds), batch_size=None, sampler=batches, **workers, **resumable)
        return _TrainLoader(ds, batch_sampler=batches, **workers, **resumable)

    def _train_progress(self) -> tuple[int, int]:
        """(the epoch of the next pass, how many of its batches were trained on) of the running fit, for the
        training loader's state: (e, k) inside epoch e, (e + 1, 0) once its last batch is done (a checkpoint written
        after its last step, before or after its validation)."""
        done = self.trainer.fit_loop.epoch_loop.batch_progress.current.processed
        epoch = self.trainer.current_epoch
        return (epoch, done) if done < self.trainer.num_training_batches else (epoch + 1, 0)

    def resume_train_loader(self, state: dict) -> None:
        """Hand the training loader the state a checkpoint saved, now or when it is made (Lightning's own hand-over
        misses it: the loader is made and iterated, for the scheduler's step count, before the checkpoint's loop
        state is read)."""
        loader = getattr(self, "_train_loader", None)
        if isinstance(loader, _TrainLoader):
            loader.load_state_dict(state)
        else:
            self._pending_resume = dict(state)

    def train_batches_skipped(self, epoch: int) -> int:
        """How many batches of ``epoch`` the training loader left out because the run resumed inside it (0 if not)."""
        loader = getattr(self, "_train_loader", None)
        skipped = loader.batches.skipped if isinstance(loader, _TrainLoader) else None
        return skipped[1] if skipped is not None and skipped[0] == epoch else 0

    def train_dataloader(self):
        self._train_loader = self._loader(self.ds["train"], self.t.batch_size, True)
        pending, self._pending_resume = getattr(self, "_pending_resume", None), None
        if pending is not None:
            self._train_loader.load_state_dict(pending)
        return self._train_loader

    def val_dataloader(self):
        loaders = [self._loader(self.ds["val"], self.t.eval_batch_size, False)]
        if self.t.selection == "test":
            loaders.append(self._loader(self.ds["test"], self.t.eval_batch_size, False))
        return loaders

    def test_dataloader(self):
        return self._loader(self.ds["test"], self.t.eval_batch_size, False)


class _RunCheckpoint(L.pytorch.callbacks.ModelCheckpoint):
    """Lightning's ModelCheckpoint that follows its run directory when it was moved or copied: the checkpoint holds
    the absolute paths of the folder it was written in, and Lightning, finding another folder, keeps the best
    checkpoint's old path and forgets its score (the next epoch would then count as the best whatever its error).
    Every path is taken to the same file name in the folder the run is in now."""

    def _generate_state_key(self, **kwargs) -> str:
        return f"ModelCheckpoint{kwargs!r}"  # Lightning's own key: checkpoints written before and after read alike

    def load_state_dict(self, state_dict: dict) -> None:
        old = state_dict.get("dirpath")
        if old is not None and self.dirpath is not None and old != self.dirpath:
            def here(path):
                return os.path.join(self.dirpath, os.path.basename(path)) if path else path

            state_dict = {**state_dict, "dirpath": self.dirpath}
            for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
                if key in state_dict:
                    state_dict[key] = here(state_dict[key])
            if isinstance(state_dict.get("best_k_models"), dict):
                state_dict["best_k_models"] = {here(k): v for k, v in state_dict["best_k_models"].items()}
        super().load_state_dict(state_dict)


def checkpoint_callbacks(ckdir: Path, t) -> tuple:
    """(best, last): ``best.ckpt`` chosen on the selection metric, ``last.ckpt`` rewritten at the end of every epoch
    (or every ``checkpoint_every_n_steps`` steps), the resume point."""
    monitor = "test_rel_l2_selection" if t.selection == "test" else "val_rel_l2"
    best_cb = _RunCheckpoint(ckdir, filename="best", monitor=monitor, mode="min", save_top_k=1,
                                                  enable_version_counter=False)
    last_cb = _RunCheckpoint(ckdir, filename="last", monitor=None, save_top_k=1,
                                                  every_n_train_steps=t.checkpoint_every_n_steps or None,
                                                  enable_version_counter=False)
    return best_cb, last_cb


def _trainer(t, out: Path, progress: bool, callbacks: list, logger=True, **extra) -> L.Trainer:
    loggers = False
    if logger:
        loggers = [
            L.pytorch.loggers.CSVLogger(out, name="logs", version=""),
            L.pytorch.loggers.TensorBoardLogger(out, name="logs", version="", default_hp_metric=False),
        ]
        callbacks = callbacks + [FlushLoggersOnCheckpoint(), ResumedHistory(out / "logs")]
    callbacks = callbacks + [StopOnRequest()]
    # the background writer copies the state on the training thread, then writes and fsyncs the file in its own
    # thread (one write at a time, in order); Lightning waits for the last one when fit ends (its teardown)
    plugins = [AsyncCheckpointIO(AtomicCheckpointIO()) if background_checkpoints(t) else AtomicCheckpointIO()]
    if progress:
        callbacks = callbacks + [L.pytorch.callbacks.TQDMProgressBar(refresh_rate=1)]
    elif logger:
        callbacks = callbacks + [EpochLine()]
    strategy = t.strategy
    if strategy == "ddp" and t.accelerator == "cpu":
        strategy = L.pytorch.strategies.DDPStrategy(process_group_backend="gloo")
    trainer = L.Trainer(
        max_epochs=t.epochs,
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=strategy,
        precision=t.precision,
        gradient_clip_val=t.grad_clip or None,
        gradient_clip_algorithm="norm",
        deterministic=deterministic_mode(t),
        callbacks=callbacks,
        logger=loggers,
        plugins=plugins,
        enable_progress_bar=progress,
        enable_model_summary=False,
        log_every_n_steps=10,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        limit_train_batches=t.limit_train_batches,
        default_root_dir=out,
        **extra,
    )
    _keep_own_sigterm(trainer)
    _start_processes_quietly(trainer)
    return trainer


#: the processes Lightning started for this one (``--devices`` N without torchrun), ended with it
_STARTED: list = []

#: the signals a stop is asked with: the first process alone takes them (Ctrl-C reaches every process in the group)
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _start_processes_quietly(trainer: L.Trainer) -> None:
    """Start the other processes of ``--devices N`` (Lightning's launcher, when no torchrun or cluster starts them)
    with Ctrl-C and SIGTERM ignored, and note them to end with this one (:func:`_end_started_processes`).

    Ctrl-C reaches every process of the terminal's group, and a scheduler's SIGTERM every process of the job.  A
    process that ended on it by itself (one still starting says "interrupted" at once) made Lightning kill the
    first process before it had said where the run can be resumed from, or left it waiting in a collective.  The
    first process alone now stops, as with one process, and Lightning ends the others once it has."""
    launcher = trainer.strategy.launcher
    spawn = getattr(launcher, "_call_children_scripts", None)
    if spawn is None or not isinstance(getattr(launcher, "procs", None), list):
        return

    def spawn_ignoring_stops():
        main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _STOP_SIGNALS} if main else {}
        try:
            spawn()  # an ignored signal stays ignored in a started program (a handler does not)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            _STARTED.extend(launcher.procs)

    launcher._call_children_scripts = spawn_ignoring_stops


def _end_started_processes() -> None:
    """Kill the processes Lightning started for this one that still run (this one ends on an error or a stop;
    they write nothing, and would otherwise wait in their next collective)."""
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)


def _keep_own_sigterm(trainer: L.Trainer) -> None:
    """Leave SIGTERM to the command's own handler (it stops the run as Ctrl-C does) instead of Lightning's.

    Lightning's handler broadcasts from rank 0 inside the signal handler: a SIGTERM that reaches rank 0 while the
    other ranks wait in another collective (the barrier after a checkpoint) leaves every process waiting for ever.
    Without it, rank 0 ends on the interruption and Lightning's launcher ends the processes it started.  One process
    keeps Lightning's (it broadcasts nothing there)."""
    if trainer.world_size > 1:
        trainer._signal_connector.register_signal_handlers = _no_signal_handlers


def _no_signal_handlers() -> None:
    """In place of Lightning's signal handlers (a module-level function: ``ddp_spawn`` pickles the trainer)."""


def fit_run(run, bundle, explicit=frozenset()) -> list[str]:
    """Fit the model and train sections of the resolved ``run`` to the data of ``bundle`` (the task's
    :meth:`~opformer.tasks.base.Task.fit_model` and :meth:`~opformer.tasks.base.Task.fit_train`), in place; returns
    the notes on what changed."""
    model_cfg, notes = run.task.fit_model(run.model, bundle, set(explicit))
    run.model = model_cfg
    run.raw["model"] = model_cfg
    train_changes, train_notes = run.task.fit_train(run.train, model_cfg, bundle, set(explicit))
    if train_changes:
        run.train = dataclasses.replace(run.train, **train_changes)
        run.raw["train"] = {**run.raw.get("train", {}), **train_changes}
        notes = [*notes, *train_notes]
    return notes


def prepare_run(cfg: dict, explicit: frozenset = frozenset(), progress: bool = True, announce: bool = False):
    """Everything that can fail before training, with nothing written to the run directory: the typed config, the
    data (generated into the cache on first use), the model sized to the data.  Returns (run, bundle, operator,
    artifact, notes).  ``announce``: print what was read (:func:`data_line`) before the data's warnings."""
    run = resolve(cfg)
    run.task.check_augment(run.train.augment)  # before any data is generated
    files = ensure_files(run.task, run.data, run.options)
    bundle = run.task.load(run.data, run.options, files)
    if _is_rank_zero():  # the same data on every rank: say it once
        if announce:
            print(data_line(run, bundle), flush=True)
        layout = samples_last_1d(run, files)
        for line in suspicious_samples(bundle.datasets) + list(bundle.warnings) + ([layout] if layout else []):
            warnings.warn(f"data: {line}", stacklevel=2)
    run.task.check_augment(run.train.augment, bundle)
    n_train = len(bundle.datasets["train"])
    if n_train < 2:
        what = "training pair" if getattr(bundle.datasets["train"], "traj", None) is not None else "training sample"
        what += "" if n_train == 1 else "s"
        raise ConfigError(f"the splits leave {n_train} {what}, and at least 2 are needed (--n-train, --n-val and "
                          "--n-test set the splits; the validation and test splits take at least 1 each)")
    limit = run.train.limit_train_batches
    batches = -(-n_train // run.train.batch_size)
    if isinstance(limit, float) and limit < 1.0 and int(batches * limit) < 1:  # Lightning would refuse it at the fit
        raise ConfigError(f"--limit-train-batches {limit:g}: that fraction of the {batches} training batches is none; "
                          f"give at least {1 / batches:.3g}, or a count")
    notes = fit_run(run, bundle, explicit)
    model_cfg = run.model
    L.seed_everything(run.train.seed, workers=True, verbose=False)  # model init independent of data generation
    try:
        operator = run.task.build_operator(model_cfg, bundle.normalizers, run.options)
        sample = bundle.datasets["train"][0]
        with torch.no_grad():
            tau = sample.get("lead_time")
            operator.eval()(sample["input"][None], sample["coords"][None], None if tau is None else tau[None])
        operator.train()
    except (ValueError, TypeError) as exc:
        raise model_error(exc, model_cfg, f"model {model_cfg['name']}") from None
    try:
        lr_groups(operator, run.train.lr_scale)
    except ValueError as exc:
        raise ConfigError(f"--lr-scale: {exc}") from None
    keys = run.data.keys or list(run.task.default_keys)
    artifact = make_artifact(run.task, run.options, model_cfg, bundle, keys, run.data.resolution)
    artifact["run"] = run.name
    return run, bundle, operator, artifact, notes


def train(cfg: dict, out, *, resume: bool = False, overwrite: bool = False, progress: bool = True,
          explicit: frozenset = frozenset()) -> dict:
    """Train the run config ``cfg`` into directory ``out``; returns the metrics written to ``out/metrics.json``.

    The config, the data and the model are validated before the directory is touched: a start that fails leaves
    nothing behind, and ``overwrite`` removes the old run's files only once the new run is known to start.  Ctrl-C
    at any moment, the test at the end included, ends it with ``KeyboardInterrupt`` (:func:`ctrl_c_requests_stop`)."""
    with ctrl_c_requests_stop():
        return _train(cfg, out, resume, overwrite, progress, explicit)


def _train(cfg: dict, out, resume: bool, overwrite: bool, progress: bool, explicit: frozenset) -> dict:
    out = Path(out)
    cfg = absolute_data_paths(cfg)
    run0 = resolve(cfg)
    world = check_hardware(run0.train)
    check_out_dir(out, run0.raw, resume, overwrite, compare_model=False,  # fail early, before the data
                  fitted_train=run0.task.fitted_train_fields, explicit=explicit)
    run, bundle, operator, artifact, notes = prepare_run(cfg, explicit, progress, announce=True)
    check_split_sizes(bundle.datasets, world, run.train)
    record = data_record(bundle)
    had_lock = (out / LOCK).exists()
    previous = _lock_content(out) if had_lock else None  # the lock file's signature, for a refused start to put back
    new_dirs = _missing_dirs(out)  # the directories the lock makes (out and any missing parents)
    before = _run_dir_entries(out)
    with _locked_run_dir(out) as created:
        if _is_rank_zero():
            _restore_set_aside(out)
        try:
            ckpt_path = check_out_dir(  # (the checkpoint's processes checked on the copy read there)
                out, run.raw, resume, overwrite, locked=True, data=record,
                check_checkpoint=lambda ck: check_resume_processes(ck, run.train, len(bundle.datasets["train"]), world))
        except BaseException:
            if _is_rank_zero() and not had_lock:  # a refused start leaves the directory as it was
                (out / LOCK).unlink(missing_ok=True)
                if created:
                    _remove_empty_dirs(new_dirs)
            elif _is_rank_zero():
                _put_back_signature(out, previous)
            raise
        ours = not _process_group_exists()  # a group the caller made is the caller's to destroy
        started = _TrainingStarted()
        try:
            return _fit(run, bundle, operator, artifact, notes, out, ckpt_path, resume, overwrite, progress,
                        record, started)
        except BaseException:
            _end_started_processes()
            # a start that fails before its first epoch (Lightning refusing a setting, a failed setup) leaves no
            # run behind, so that the corrected command just works; a resumed run keeps all its files
            if _is_rank_zero() and ckpt_path is None and not started.fired:
                _undo_start(out, before, had_lock, new_dirs if created else [], started.wrote_config, previous)
                if started.held is not None:  # the run it was to replace, back as it was
                    _put_back_run(out, started.held)
            raise
        finally:
            if ours:
                _close_process_group()


class _TrainingStarted(L.Callback):
    """Notes that the fit reached its training loop (its first epoch begins): a failure from then on leaves the run
    to start over or resume, one before it leaves nothing behind.  ``wrote_config``: the start wrote its config.yaml
    (and set aside an earlier run's files where it replaces them, in the folder ``held``, deleted here)."""

    fired = False
    wrote_config = False
    held: Optional[Path] = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.fired = True
        if self.held is not None:
            shutil.rmtree(self.held, ignore_errors=True)


#: the folders of a run directory that a run writes into (what is in them is listed before a start)
_RUN_SUBDIRS = ("checkpoints", "logs", "plots")


def _run_dir_entries(out: Path) -> set:
    """The names in ``out`` and, in the folders a run writes, their files (relative paths), before a start."""
    if not out.is_dir():
        return set()
    names = {p.name for p in out.iterdir()}
    for sub in _RUN_SUBDIRS:
        if (out / sub).is_dir():
            names |= {str(p.relative_to(out)) for p in (out / sub).rglob("*")}
    return names


def _missing_dirs(out: Path) -> list[Path]:
    """``out`` and its ancestors that do not exist yet, deepest first."""
    missing, p = [], out.absolute()
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    return missing


def _remove_empty_dirs(dirs) -> None:
    for d in dirs:  # deepest first; one that holds anything stays
        with contextlib.suppress(OSError):
            d.rmdir()


def _undo_start(out: Path, before: set, had_lock: bool, new_dirs: list, wrote_config: bool,
                previous: Optional[tuple] = None) -> None:
    """Remove what a start that failed before its first epoch wrote into ``out``: the config it wrote
    (``wrote_config``; an earlier run's there was replaceable, or the start would have been refused), every file
    and folder that was not there before (``before``: :func:`_run_dir_entries`), the lock unless an earlier run left
    it (then its signature goes back to ``previous``), and the directories the start made (``new_dirs``) once
    empty.  The user's files stay."""
    if wrote_config:
        (out / "config.yaml").unlink(missing_ok=True)
    for sub in _RUN_SUBDIRS:
        if (out / sub).is_dir():
            for p in sorted((out / sub).rglob("*"), key=lambda q: len(q.parts), reverse=True):
                if str(p.relative_to(out)) in before:
                    continue
                with contextlib.suppress(OSError):
                    p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()
            if sub not in before:
                _remove_empty_dirs([out / sub])
    if "metrics.json" not in before:
        (out / "metrics.json").unlink(missing_ok=True)
    if not had_lock:
        (out / LOCK).unlink(missing_ok=True)
    else:
        _put_back_signature(out, previous)
    _remove_empty_dirs(new_dirs)


def check_hardware(t) -> int:
    """Refuse, before anything is read or written, an accelerator this machine lacks and a batch that the processes
    cannot share evenly (Lightning would fail only after the run directory was made); returns the number of
    processes the run will have."""
    acc = t.accelerator
    if acc in ("gpu", "cuda") and not torch.cuda.is_available():
        build = "a CPU-only build of torch" if torch.version.cuda is None else "no CUDA device is visible"
        raise ConfigError(f"--accelerator {acc}: this machine has no usable GPU ({build}, torch "
                          f"{torch.__version__}); use --accelerator cpu or auto")
    if acc == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("--accelerator mps: this machine has no usable Apple GPU; use --accelerator cpu or auto")
    if t.strategy == "ddp_spawn":
        # the fit runs in processes started afresh, whose trained module (epochs, the best validation error, the
        # divergence records) never comes back to this one: metrics.json would be wrong and the command fail
        raise ConfigError("--strategy ddp_spawn: not supported (the training runs in spawned processes whose results "
                          "do not come back to this one); use --strategy ddp, or auto (ddp with several devices)")
    text = str(t.devices).strip()
    value = devices_value(t.devices)
    if (isinstance(value, list) or value == -1) and not _uses_gpu(t):
        what = "GPU indices" if isinstance(value, list) else "-1 (every GPU)"
        raise ConfigError(f"--devices {text}: {what}, but this run uses the CPU; give a number of processes (or "
                          "auto)")
    count = None  # processes per node, where the value says (not "auto", "-1": all GPUs)
    if text.isdigit():
        count = int(text)
        if count < 1:
            raise ConfigError(f"--devices {text}: must be >= 1 (or auto)")
    elif text and all(part.strip().isdigit() for part in text.split(",") if part.strip()):
        count = len([part for part in text.split(",") if part.strip()])  # a list of GPU indices
    # under torchrun each process may see one GPU only (CUDA_VISIBLE_DEVICES per process): Lightning does not count
    # them there either
    launched = torch.distributed.is_available() and torch.distributed.is_torchelastic_launched()
    if acc in ("gpu", "cuda") and count is not None and not launched and count > torch.cuda.device_count():
        raise ConfigError(f"--devices {text}: this machine has {torch.cuda.device_count()} GPU(s)")
    if launched and os.environ.get("WORLD_SIZE", "").isdigit():  # the launcher's count is the one that holds
        world, how = int(os.environ["WORLD_SIZE"]), "of the launch"
    else:
        if count is None:  # auto, -1: every GPU of the node where one is used, else one process
            count = max(1, torch.cuda.device_count()) if _uses_gpu(t) and torch.cuda.is_available() else 1
        world, how = count * t.num_nodes, f"(--devices {t.devices} x --num-nodes {t.num_nodes})"
    if world > 1 and t.batch_size % world:
        raise ConfigError(f"--batch-size {t.batch_size} is not divisible by the {world} processes {how}: each "
                          "process takes an equal share of a batch")
    return world


def check_split_sizes(datasets: dict, world: int, t) -> None:
    """Refuse splits that cannot give each of ``world`` processes a sample: Lightning would stop with a traceback on
    the process left without a validation or test batch, and a process without training samples has no steps."""
    if world < 2:
        return
    how = f"--devices {t.devices}" + (f" x --num-nodes {t.num_nodes}" if t.num_nodes > 1 else "")
    for split, flag in (("train", "--n-train"), ("val", "--n-val"), ("test", "--n-test")):
        ds = datasets.get(split)
        n = len(ds) if ds is not None else world
        if n < world:
            name = {"train": "training", "val": "validation", "test": "test"}[split]
            pairs = getattr(ds, "traj", None) is not None
            unit = ("pair" if n == 1 else "pairs") if pairs else ("sample" if n == 1 else "samples")
            raise ConfigError(f"{how}: the {name} split has {n} {unit}, fewer than the {world} processes, and "
                              f"each process needs at least one; give {flag} a larger value (the splits: --n-train, "
                              "--n-val, --n-test), or use fewer processes")


def steps_per_epoch(n_train: int, t, world: int) -> int:
    """Optimizer steps in an epoch of ``n_train`` training samples on ``world`` processes: each process takes
    ``n_train // world`` of them (the rest is left out) in batches of ``batch_size // world``."""
    per_rank, size = n_train // world, max(1, t.batch_size // world)
    steps = -(-per_rank // size)
    limit = t.limit_train_batches
    if isinstance(limit, bool) or limit is None:
        return steps
    if isinstance(limit, int):
        return min(steps, limit)
    return max(1, int(steps * limit)) if limit > 0 else 0


def _checkpoint_world(ck: dict) -> Optional[int]:
    """How many processes wrote the checkpoint: recorded since multi-process resumes are checked, else read from its
    run config where that gives a number (None: not known)."""
    if isinstance(ck.get("world_size"), int):
        return ck["world_size"]
    train = (ck.get("run_config") or {}).get("train") or {}
    devices, nodes = str(train.get("devices", 1)).strip(), train.get("num_nodes", 1)
    return int(devices) * int(nodes) if devices.isdigit() and isinstance(nodes, int) else None


def check_resume_processes(ck: dict, t, n_train: int, world: int) -> None:
    """Refuse to resume from the checkpoint ``ck`` on another number of processes when that changes the steps of an
    epoch (a training split that is no multiple of both counts, a batch split otherwise): the checkpoint's
    learning-rate schedule and its position in the epoch are counted in its own steps.  Where the steps are the
    same, the resume goes on."""
    theirs = _checkpoint_world(ck)
    if theirs is None or theirs == world:
        return
    mine, before = steps_per_epoch(n_train, t, world), steps_per_epoch(n_train, t, theirs)
    if mine == before:
        return

    def procs(p):
        return f"{p} process{'es' if p > 1 else ''}"

    def steps(p, count):
        kept = n_train - n_train % p
        left = f", the last {n_train - kept} left out" if kept < n_train else ""
        return (f"{count} steps an epoch ({kept} of the {n_train} training samples in batches of {t.batch_size // p} "
                f"per process{left})")

    raise ConfigError(f"--resume: the checkpoint was written by {procs(theirs)}, {steps(theirs, before)}; this start "
                      f"has {procs(world)}, {steps(world, mine)}: the checkpoint's learning-rate schedule and place "
                      f"in its epoch are counted in its own steps; resume on {procs(theirs)} (--devices, "
                      "--num-nodes), or start again with --overwrite")


def _process_group_exists() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _close_process_group() -> None:
    """Destroy the distributed process group that training made (each rank, once its last collective is done).

    Left to interpreter exit, gloo's worker threads can abort a rank ("terminate called without an active
    exception"), and Lightning's launcher then kills every rank: a run that trained and tested would end as a
    failure."""
    if _process_group_exists():
        torch.distributed.destroy_process_group()


def _fit(run, bundle, operator, artifact, notes, out: Path, ckpt_path, resume: bool, overwrite: bool,
         progress: bool, record: Optional[dict] = None, started: Optional[L.Callback] = None) -> dict:
    for note in notes if _is_rank_zero() else ():  # the same on every process: said once
        print(f"note: {note}")
    t = run.train
    module = OperatorModule(run, operator, artifact)
    module.data_record = record
    ckdir = out / "checkpoints"
    best_cb, last_cb = checkpoint_callbacks(ckdir, t)
    # the trainer is made before anything of an earlier run is removed: a setting Lightning refuses deletes nothing
    with _lightning_refusals():
        trainer = _trainer(t, out, progress, [best_cb, last_cb] + ([started] if started is not None else []))
    if _is_rank_zero():
        if (overwrite and not resume) or (ckpt_path is None and _never_checkpointed(out)):
            held = _set_aside_run(out)
            stale = sorted(p.name for p in out.iterdir() if p.is_dir() and p.name.startswith(("eval-", "rollout-"))
                           and ((p / "metrics.json").exists() or (p / "rollout.json").exists()))
            if held is not None and stale:  # results of the replaced model: the user's to keep or delete
                print(f"note: {out} keeps {', '.join(stale[:4])}{' ...' if len(stale) > 4 else ''}: the evaluations "
                      "of the model being replaced (delete them, or run them again on the new one)")
            if started is not None:
                started.held = held
            elif held is not None:
                shutil.rmtree(held, ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "config.yaml", yaml.safe_dump(run.raw, sort_keys=False))
        if started is not None:
            started.wrote_config = True
    kept = _keep_csv_history(out / "logs") if ckpt_path is not None and _is_rank_zero() else None
    dm = _DataModule(bundle.datasets, t)
    n_train, world = len(bundle.datasets["train"]), trainer.world_size
    if world > 1 and n_train % world and _is_rank_zero():
        left = n_train % world
        print(f"note: the {n_train} training samples are not a multiple of the {world} processes: each epoch leaves "
              f"out the last {left} sample{'s' if left > 1 else ''} of its shuffled order (others each epoch), which "
              "one process would train on")
    try:
        check_stop()  # a stop requested while the data loaded, its exception lost
        with _lightning_refusals():
            _interruptible(trainer, trainer.fit, module, datamodule=dm, ckpt_path=ckpt_path, weights_only=True)
    finally:
        if kept is not None and not (out / "logs" / "metrics.csv").exists():  # nothing logged (a finished run)
            os.replace(kept, out / "logs" / "metrics.csv")
    seconds = module.training_seconds()
    check_stop()
    dropout_check = _dropout_check(module, t, out, dm)
    if dropout_check and "note" in dropout_check and _is_rank_zero():
        print(f"note: {dropout_check['note']}")
    best_path = best_cb.best_model_path or str(ckdir / "last.ckpt")
    best_score = best_cb.best_model_score
    mean_err = module.mean_field_error
    weak = _weak_model_note(None if best_score is None else float(best_score), mean_err, run.task)
    if weak and _is_rank_zero():
        print(f"note: {weak}")
    best = torch.load(best_path, map_location="cpu", weights_only=True)
    module.load_state_dict(best["state_dict"])
    check_stop()
    tester = _trainer(t, out, False, [], logger=False)
    result = _interruptible(tester, tester.test, module, datamodule=dm, verbose=False)
    check_stop()  # a stop requested during the test, its exception lost: no results are written
    test_err = float(result[0]["test_rel_l2"])
    on_device = dm.device_copy_info()
    metrics = {
        "preset": run.name,
        "task": run.task.name,
        "val_rel_l2": None if best_score is None else float(best_score),
        # the validation error of predicting the validation targets' mean field for every sample: what the model beats
        "val_mean_field_rel_l2": mean_err,
        **({"weak_model_note": weak} if weak else {}),
        "selection": (
            "validation split carved from the training file"
            if t.selection == "val"
            else "REFERENCE PROTOCOL: best epoch chosen on the test set (for comparison with the paper only)"
        ),
        "test_rel_l2": test_err,
        "epochs": int(trainer.current_epoch),
        "best_epoch": int(best["epoch"]) if "epoch" in best else None,
        "seconds": round(seconds, 2),
        "lr_halvings": module.lr_halvings,  # blow-ups recovered from (train.divergence_retries)
        "divergence_notes": module.divergence_log,
        # single step losses over train.divergence_factor x the recent median whose next step was normal: kept
        "loss_spikes": module.loss_spike_count,
        # (epoch, step, loss, the batch's largest per-sample relative L2 error, that sample), the first 50
        "loss_spike_steps": [list(t) for t in module.loss_spikes],
        # the samples that were the worst of a spiking batch, most often first, with how often: samples to check
        "loss_spike_samples": [[name, n] for name, n in module.loss_spike_samples.most_common(20)],
        **({"cuda_graphs": module.cuda_graphs_used} if module.cuda_graphs_used else {}),
        # where the training batches were gathered: on the GPU from a copy of the split (train.data_on_device)
        **({"data_on_device": on_device} if on_device else {}),
        **({"dropout_check": dropout_check} if dropout_check else {}),
        "parameters": count_parameters(module.operator.model),
        "seed": t.seed,
        "resolution": list(bundle.input_grid),
        "n_train": len(bundle.datasets["train"]),
        "n_val": len(bundle.datasets["val"]),
        "n_test": len(bundle.datasets["test"]),
        **_trajectory_counts(bundle),
        "data": bundle.files,
        "version": __version__,
        "torch": torch.__version__,
        "best_checkpoint": str(Path(best_path).resolve().relative_to(out.resolve())) if best_path else None,
    }
    if trainer.is_global_zero:
        module.to("cpu", torch.float32)  # as opformer.load gives it (a 64-true run's float64 weights too)
        predictor = Predictor(module.operator, artifact, run.task, run.options)
        plots = write_plots(predictor, bundle.datasets["test"], out, t.plot_samples, f"{run.name}: test samples")
        metrics["plots"] = sorted(str(p.relative_to(out)) for p in plots)
        atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=2))
    return metrics


#: the end of a run notes a model whose best validation error is above this fraction of the error of predicting the
#: validation targets' mean field for every sample (a constant prediction)
WEAK_MODEL_NOTE = 0.5


def _weak_model_note(val_err: Optional[float], mean_err: Optional[float], task) -> Optional[str]:
    """A note where the model barely beats predicting the mean field: its error may look small while the model has
    learnt little of how the target varies (a target with a large offset against its variation)."""
    if val_err is None or mean_err is None or not val_err > WEAK_MODEL_NOTE * mean_err:
        return None
    cure = ("train with --normalize-target (the model then predicts the standardized target)"
            if dataclasses.is_dataclass(getattr(task, "options_class", None))
            and any(f.name == "normalize_target" for f in dataclasses.fields(task.options_class)) else
            "center and scale the targets of the data")
    return (f"the best validation error, {val_err:.4g}, is {val_err / max(mean_err, 1e-300):.2g}x that of predicting "
            f"the validation targets' mean field for every sample ({mean_err:.4g}): the model has learnt little of how "
            f"the target varies; if the targets vary little about a large mean, {cure} (docs/training.md)")


#: the end-of-run dropout check notes a network whose validation error with its dropout on is below this fraction
#: of its error with dropout off (the mode it is validated and tested in)
DROPOUT_GAP_NOTE = 1 / 1.2


def _dropout_check(module: OperatorModule, t, out: Path, dm: _DataModule) -> Optional[dict]:
    """The final weights' validation error with the network's dropout modules off and on (one mask, drawn from the
    run's seed), with a note when dropout on is clearly better: the network then relies on its dropout noise, which
    looks like overfitting in the curves (validation error rising, training error falling) but is not
    (docs/training.md).  None for a network without dropout."""
    if not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in module.operator.modules()):
        return None
    loader = dm._loader(dm.ds["val"], t.eval_batch_size, False)
    errors = []
    for on in (False, True):
        module.dropout_on_in_test = on
        tester = _trainer(t, out, False, [], logger=False)
        try:
            with torch.random.fork_rng(devices=[]):  # the run's own random state is left as it was
                torch.manual_seed(t.seed)
                result = _interruptible(tester, tester.test, module, dataloaders=loader, verbose=False)
        finally:
            module.dropout_on_in_test = False
        errors.append(float(result[0]["test_rel_l2"]))
    off, on = errors
    check = {"val_rel_l2_last": off, "val_rel_l2_last_dropout_on": on}
    if on < DROPOUT_GAP_NOTE * off:
        check["note"] = (
            f"with its dropout on, the final model's validation error is {on:.4e}, {off / on:.1f}x below its error "
            f"with dropout off ({off:.4e}), the mode it is validated and tested in: the network has come to rely on "
            "its dropout noise (this is not overfitting); its dropout set to 0 (e.g. --dropout 0) or longer "
            "training avoids it (docs/training.md; scripts/dropout_gap.py finds which dropout)")
    return check


@contextlib.contextmanager
def _lightning_refusals():
    """Lightning's refusal of a setting (MisconfigurationException) as one line: the values it checks are checked
    before the start (:class:`~opformer.config.TrainConfig`, :func:`check_hardware`), this catches the rest."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    try:
        yield
    except MisconfigurationException as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"Lightning refused the training settings: {text}") from None
    except RuntimeError as exc:  # a resumed checkpoint whose weights are another model's (its config not recorded)
        if "Error(s) in loading state_dict" not in str(exc):
            raise
        raise ConfigError("--resume: the checkpoint's weights do not fit this run's model (a checkpoint of another "
                          "model); start again with --overwrite, or choose another --out") from None


def _interruptible(trainer: L.Trainer, call, *args, **kwargs):
    """``call(*args, **kwargs)`` with an interruption reported as KeyboardInterrupt: Lightning turns Ctrl-C into
    ``sys.exit(1)`` and a SIGTERM into a SystemExit of status 0 after its graceful shutdown, either of which would end
    the command silently (the second even as a success)."""
    try:
        return call(*args, **kwargs)
    except SystemExit:
        if trainer.interrupted:
            raise KeyboardInterrupt from None
        raise


def _keep_csv_history(logs: Path) -> Optional[Path]:
    """Lightning's CSVLogger starts metrics.csv afresh in a new process: keep the earlier runs' rows as
    metrics-0.csv, metrics-1.csv, ... (the training-curve plot reads them all); returns the name it was kept as
    (None: there was none), for the caller to put back when the resumed fit logged nothing."""
    from .plots import history_parts

    csv_path = logs / "metrics.csv"
    if not csv_path.exists():
        return None
    # one more than the highest part kept (a count would reuse a number after a part was removed, or count a user's
    # metrics-old.csv, and os.replace would then write over a kept part)
    numbers = [int(p.stem.split("-", 1)[1]) for p in history_parts(logs) if p.name != "metrics.csv"]
    kept = logs / f"metrics-{max(numbers, default=-1) + 1}.csv"
    os.replace(csv_path, kept)
    return kept


def write_plots(predictor: Predictor, ds, out: Path, k: int, title: str, curves: bool = True) -> list[Path]:
    """The prediction plot of the first ``k`` samples of ``ds`` and (for a run directory) the training curves;
    returns the files written (other files in ``out/plots`` are the user's)."""
    k = min(k, len(ds))
    written = []
    if k > 0:
        sub = torch.utils.data.Subset(ds, range(k))
        preds, errs = predictor.evaluate(sub)
        batch = stack_samples(ds, range(k))
        describe = getattr(ds, "describe", None)
        names = [describe(j) for j in range(k)] if callable(describe) else None
        written.append(plot_predictions(out / "plots" / "predictions.png", batch["input"].numpy(),
                                        batch["target"].numpy(), preds, predictor.task.plot_labels, errs.tolist(),
                                        title, names=names))
    lines = read_run_history(out / "logs") if curves else {}
    if lines:
        written.append(plot_curves(out / "plots" / "training_curves.png", lines, title.split(":")[0]))
    return [Path(p) for p in written]


def _resolution_argument(resolution) -> Optional[int]:
    """Evaluate's and predict's ``resolution`` as an int (None: the file's grid).  A value that is no integer (a
    string, a float, a bool) is refused at once; a count below 1 is refused once the stored grid is read, with the
    resolutions it has (:func:`_test_set`), as any other resolution that is no stride of it."""
    if resolution is None:
        return None
    if isinstance(resolution, (int, np.integer)) and not isinstance(resolution, bool):
        return int(resolution)
    return count_argument("resolution", resolution)  # raises: no integer


def _test_set(predictor: Predictor, data: Optional[str], keys, resolution: Optional[int]):
    """The test dataset of an evaluation: every sample of ``data``, or the run's own test split.  A ``resolution``
    that is no stride of the stored grid, or below 1, is refused naming the grid's possible resolutions."""
    from ..pde.errors import DataError

    try:
        return _read_test_set(predictor, data, keys, resolution)
    except DataError as exc:
        possible = getattr(exc, "possible", None) if resolution is not None and resolution < 1 else None
        if not possible:
            raise
        text = f"must be a positive integer, got {resolution}; possible: {', '.join(map(str, possible))}"
        raise SettingError(f"resolution {text}", f"--resolution {text}") from None


def _read_test_set(predictor: Predictor, data: Optional[str], keys, resolution: Optional[int]):
    from ..config import DataConfig

    task, art = predictor.task, predictor.artifact
    norms = {k: v for k, v in (("input", predictor.operator.input_normalizer),
                                ("target", predictor.operator.target_normalizer)) if v is not None}
    keys = list(keys) if keys else art.get("keys")
    if data is not None:  # a file like the training's: its points where the training said they sit (--grid)
        grid = (predictor.run_config or {}).get("data", {}).get("grid") if task.grid_choice else None
        dcfg = DataConfig(path=str(data), keys=keys, resolution=resolution, grid=grid)
        bundle = task.load(dcfg, predictor.options, {"train": Path(data), "test": None}, splits=("test",),
                           normalizers=norms, test_all=True)
        return bundle, str(data)
    run_cfg = predictor.run_config
    if run_cfg is None:
        raise ConfigError("give the data to evaluate on with --data FILE (this model does not name its run's data)")
    from ..config import check_section

    dcfg = check_section(DataConfig, dict(run_cfg["data"]), "data")
    if resolution is not None:  # checked against the stored grid by the task's loader (which lists what it has)
        dcfg = dataclasses.replace(dcfg, resolution=resolution)
    files = ensure_files(task, dcfg, predictor.options)
    bundle = task.load(dcfg, predictor.options, files, splits=("test",), normalizers=norms)
    return bundle, str(files.get("test") or files["train"])


def _trajectory_counts(bundle) -> dict:
    """For a time-dependent task, whose n_train/n_val/n_test count (input, target) pairs: the trajectories of each
    split (what --n-train/--n-val/--n-test set)."""
    sets = {split: getattr(ds, "traj", None) for split, ds in bundle.datasets.items()}
    if any(t is None for t in sets.values()):
        return {}
    return {"trajectories": {split: int(t.shape[0]) for split, t in sets.items()}}


def training_run_files(out: Path) -> list[str]:
    """The files of a training run that ``out`` holds (an output folder of eval or rollout must hold none)."""
    return [name for name in ("config.yaml", "checkpoints") if (out / name).exists()]


def foreign_eval_out(out: Path) -> Optional[str]:
    """Why ``opformer eval`` may not write into ``out``, or None: it holds a training run, or a metrics.json or
    plots/predictions.png that no earlier eval wrote (an earlier eval's output is replaced)."""
    if not out.is_dir():
        return None  # a new directory (a file there is refused when the evaluation starts)
    held = training_run_files(out)
    if held:
        return f"holds a training run ({', '.join(held)})"
    metrics = out / "metrics.json"
    if metrics.exists():
        try:
            m = json.loads(metrics.read_text())
        except (OSError, ValueError):
            m = None
        if not (isinstance(m, dict) and "checkpoint" in m and "n_test" in m and "epochs" not in m):
            return "holds a metrics.json that opformer eval did not write"
    elif (out / "plots" / "predictions.png").exists():
        return "holds a plots/predictions.png that opformer eval did not write"
    return None


def file_part(data) -> str:
    """The part of a default eval or rollout folder name that names another data file: ``FILE-`` (its name with the
    extension, so that d.mat and d.npz differ; glob characters dropped), or "" for the run's own data (None)."""
    return "" if data is None else "".join(ch for ch in Path(str(data)).name if ch not in "*?[]") + "-"


def _held_source(folder: Path, record: str) -> Optional[dict]:
    """The source fields of an earlier eval or rollout output in ``folder`` (its ``record`` JSON), or None."""
    try:
        held = json.loads((folder / record).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(held, dict):
        return None
    if "data_path" not in held and isinstance(held.get("data"), str):  # written before data_path was recorded
        held["data_path"] = str(Path(held["data"]).resolve())
    return held


def distinct_output_folder(out: Path, record: str, source: dict) -> Path:
    """A default output folder of eval or rollout: ``out``, or else ``out-2``, ``out-3``, ..., the first that holds
    no earlier output of another source (``record``: that output's JSON; ``source``: this one's fields, e.g. the
    absolute data path and the keys).  An earlier output of the same source is replaced; one of another file of the
    same name, or of other keys, is kept."""
    folder, k = out, 1
    while True:
        held = _held_source(folder, record)
        if held is None or all(held.get(name) == value for name, value in source.items()):
            return folder
        k += 1
        folder = out.with_name(f"{out.name}-{k}")


def _predict_instead(model, data, key: str) -> str:
    """The command that predicts from a file of inputs alone (what eval cannot score)."""
    return f"`opformer predict {model} --data {data} --keys {key} --out PRED.npz` predicts from the inputs alone"


def evaluate(checkpoint, *, data: Optional[str] = None, keys=None, resolution: Optional[int] = None, out=None,
             batch_size: int = 32, plot_samples: int = 4, resample: str = "auto",
             time_key: Optional[str] = None, time_axis=None, initial_key: Optional[str] = None) -> dict:
    """Test error of a trained model on ``data`` (every sample is a test sample) or, without ``data``, on its run's
    own test split; at the file's resolution or ``resolution``.  Writes metrics.json and a prediction plot.
    ``resample``: see :func:`opformer.load`.  ``time_key``: a time-dependent model's data file's array or attribute
    of snapshot times (default: the training's name, or ``t``; a file without times is read at the training times).
    ``time_axis`` and ``initial_key``: the axis of its trajectory array that holds the snapshots and the array of the
    states at t = 0 (``"none"``: the first snapshot is the initial state), by default the training's."""
    from ..pde.errors import DataError, MissingKeyError

    resolution = _resolution_argument(resolution)
    batch_size, plot_samples = count_argument("batch_size", batch_size), count_argument("plot_samples", plot_samples, 0)
    checkpoint = Path(checkpoint)
    if out is not None:  # checked before the model is loaded and the data read (a file there is refused too)
        out = Path(out)
        _check_writable(out, error=ConfigError)
        foreign = foreign_eval_out(out)
        if foreign is not None:
            raise ConfigError(f"out {out} {foreign}: its files would be replaced; give another directory")
        _check_not_running(out, ConfigError, _EVAL_USER)
    predictor = load(checkpoint, resample=resample)
    given = [name for name, value in (("--time-key", time_key), ("--time-axis", time_axis),
                                      ("--initial-key", initial_key)) if value is not None]
    if given:
        if not predictor.time_dependent:
            raise ConfigError(f"{given[0]}: the model of task {predictor.task.name} is not time-dependent")
        from ..tasks.trajectories import file_layout, trained_times

        # checked as the training's values are (an empty --time-key is refused)
        predictor.options = trained_times(file_layout(predictor.options, time_key=time_key, time_axis=time_axis,
                                                      initial_key=initial_key),
                                          predictor.artifact["info"]["times"], named=time_key is not None)
    if data is None:  # the run's own test split: from the files it trained on, if they are still those
        for path, old in (predictor.data_files or {}).items():
            if os.path.isfile(path) and isinstance(old, dict):
                why = _data_change(old, file_fingerprint(path))
                if why is not None:
                    warnings.warn(f"{_shown(path)} changed since the run trained on it ({why}): its test split now "
                                  "holds other samples than those the run was tested on", stacklevel=2)
    started = time.perf_counter()
    if data is not None and not predictor.time_dependent and keys is not None and len(list(keys)) == 1:
        raise ConfigError(f"--keys {list(keys)[0]}: eval scores the predictions against targets, so it needs "
                          f"--keys INPUT,TARGET; {_predict_instead(checkpoint, data, list(keys)[0])}")
    try:
        bundle, source = _test_set(predictor, data, keys, resolution)
    except MissingKeyError as exc:
        pair = list(keys) if keys else list(predictor.artifact.get("keys") or ())
        # the loader looks for the input array first: a missing target means a file of inputs alone
        if data is None or predictor.time_dependent or len(pair) != 2 or exc.key != pair[1]:
            raise
        where = exc.path if exc.path is not None else data
        holds = f"; available keys: {exc.available}" if exc.available is not None else ""
        raise DataError(f"{where}: no target array {pair[1]!r}{holds}: eval "
                        "scores the predictions against targets (give --keys INPUT,TARGET for other names); "
                        f"{_predict_instead(checkpoint, data, pair[0])}") from None
    except DataError as exc:
        if data is None or "needs square grids" not in str(exc):
            raise
        # the task's loader takes square grids; predict runs the model on this one (interpolated) and scores it
        raise DataError(f"{exc}; `opformer predict {checkpoint} --data {data} --out PRED.npz` predicts on this grid "
                        "and scores every sample against the file's targets") from None
    test = bundle.datasets["test"]
    _, errs = predictor.evaluate(test, batch_size)
    grid = "x".join(map(str, bundle.input_grid))
    data_path = str(Path(source).resolve())
    used_keys = list(keys) if keys else predictor.artifact.get("keys")
    if out is None:
        # RUN/eval-GRID for the run's own test split, RUN/eval-FILE-GRID for another file (its name with the
        # extension: d.mat and d.npz differ), -resample-RESAMPLE unless auto; a bundled model (a name, not a path)
        # writes into the working directory, under its name; -2, -3, ... added where that folder holds the eval of
        # another file of the same name or of other keys
        on_disk = checkpoint.exists()
        base = checkpoint.parent.parent if checkpoint.is_file() and checkpoint.parent.name == "checkpoints" else (
            checkpoint if checkpoint.is_dir() else (checkpoint.parent if on_disk else Path(".")))
        name = file_part(data)
        grid_name = grid + ("" if resample == "auto" else f"-resample-{resample}")
        out = base / (f"eval-{name}{grid_name}" if on_disk else f"eval-{checkpoint.name}-{name}{grid_name}")
        out = distinct_output_folder(out, "metrics.json", {"data_path": data_path, "keys": used_keys})
        _check_writable(out, error=ConfigError)
    metrics = {
        "checkpoint": str(checkpoint),
        "data": source,
        "data_path": data_path,
        "keys": used_keys,
        "resolution": list(bundle.input_grid),
        # true when the inputs were interpolated to the training grid and the predictions back (see --resample)
        "resampled_to_training_grid": predictor.runs_on_training_grid(tuple(bundle.input_grid)),
        "test_rel_l2": float(np.mean(errs)),
        "n_test": len(test),
        **({"n_trajectories": int(test.traj.shape[0])} if getattr(test, "traj", None) is not None else {}),
        "seconds": round(time.perf_counter() - started, 2),
        "version": __version__,
    }
    with locked_output(out, "eval"):
        plots = write_plots(predictor, test, out, plot_samples,
                            f"{predictor.artifact.get('run', 'model')} on {grid}", curves=False)
        metrics["plots"] = sorted(str(p) for p in plots)
        atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=2))
    return metrics


def foreign_predict_out(out: Path, data) -> Optional[str]:
    """Why ``opformer predict`` may not write ``out``, or None: it is the --data file, or a file that no earlier
    predict wrote (an earlier prediction file is replaced)."""
    if not out.is_file():
        return None
    if Path(str(data)).is_file() and out.resolve() == Path(str(data)).resolve():
        return "is the --data file"
    try:
        with np.load(out) as held:
            names = set(held.files)
    except Exception:  # noqa: BLE001 - not a readable .npz: not a prediction file
        names = set()
    if not names or not names <= {"prediction", "rel_l2"}:
        return "exists and is not a prediction file of opformer predict"
    return None


def _same_grid_arrays(pairs, keys, dim: int) -> bool:
    """Whether the input and target arrays of a file have one grid (their first ``dim`` axes after the samples)
    and the target one channel at most."""
    xs, ys = pairs.shapes[keys[0]], pairs.shapes[keys[1]]
    return xs[: dim + 1] == ys[: dim + 1] and (len(ys) == dim + 1 or (len(ys) == dim + 2 and ys[-1] == 1))


def _check_input_shape(data, key: str, shape, task) -> None:
    """Refuse, naming the file and the key, an input array of another dimension than the model's (samples, *grid) or
    (samples, *grid, channels), before it is read (as the training's loader names them)."""
    from ..pde.errors import DataError

    if len(shape) not in (task.dim + 1, task.dim + 2):
        g = "n" if task.dim == 1 else ", ".join(f"n{i + 1}" for i in range(task.dim))
        raise DataError(f"{data}: key {key!r} expected shape (samples, {g}) or (samples, {g}, channels) for a "
                        f"{task.dim}D model of task {task.name}, found {tuple(shape)}")


def _warn_samples_last(data, key: str, shape, dim: int) -> None:
    """A warning where the input array looks stored samples last (:func:`opformer.tasks.base.samples_last_hint`):
    it is predicted as it reads, samples first."""
    from ..config import OpformerWarning
    from ..tasks.base import samples_last_hint

    hint = samples_last_hint(shape, dim)
    if hint:
        warnings.warn(f"{data}: {key} {tuple(shape)} reads as {shape[0]} samples on {shape[1]}x{shape[2]} "
                      f"grids{hint}", OpformerWarning, stacklevel=2)


def predict(model, *, data: str, out, keys=None, resolution: Optional[int] = None, batch_size: int = 32,
            resample: str = "auto") -> dict:
    """Predictions of a trained model for every sample of ``data``, written to ``out`` (.npz) with the per-sample
    relative L2 errors when the file holds targets.  Returns a summary."""
    from ..data.readers import open_source
    from ..pde.errors import DataError

    resolution = _resolution_argument(resolution)
    batch_size = count_argument("batch_size", batch_size)
    out = Path(out)
    if out.suffix != ".npz":
        raise ConfigError(f"--out {out}: predictions are written as .npz; give a file name ending in .npz")
    if out.exists() and out.is_dir():
        raise ConfigError(f"--out {out} is a directory; give a file name ending in .npz")
    _check_writable(out.parent, shown=out, error=ConfigError)
    foreign = foreign_predict_out(out, data)
    if foreign is not None:
        raise ConfigError(f"--out {out} {foreign}; give a new file name")
    predictor = load(model, resample=resample)
    if predictor.time_dependent:  # a trajectory file: rolled out from each trajectory's first state(s)
        mode = " --mode autoregressive" if predictor.history > 1 else ""
        raise ConfigError(f"{model} is a time-dependent model: `opformer rollout {model} --data {data}{mode}` writes "
                          "its predictions at the times you ask for")
    keys = list(keys) if keys else list(predictor.artifact.get("keys"))
    if len(keys) not in (1, 2):
        raise ConfigError(f"--keys needs INPUT or INPUT,TARGET, got {','.join(keys)}")
    has_target = len(keys) == 2
    if has_target:
        try:
            pairs = open_source(data, keys)
        except DataError:
            has_target = False  # no target array in the file: predictions only
    summary = {"model": str(model), "data": str(data), "n": 0}
    arrays: dict = {}
    bundle = None
    if has_target:
        try:
            bundle, _ = _test_set(predictor, data, keys, resolution)
        except DataError as exc:
            # a grid the task's data loader does not take (a 2D task's non-square grid) but the model predicts on
            # (interpolated to its training grid and back, as without targets): the same errors from the arrays
            if resolution is not None or not _same_grid_arrays(pairs, keys, predictor.task.dim):
                raise
            _warn_samples_last(data, keys[0], pairs.shapes[keys[0]], predictor.task.dim)
            x, y = pairs.read(keys[0], np.arange(pairs.n_samples)), pairs.read(keys[1], np.arange(pairs.n_samples))
            try:
                pred = predictor.predict(x, batch_size=batch_size)
            except (ConfigError, DataError) as why:  # the model's own reason (e.g. --resample never on this grid)
                raise why from None
            errs = rel_l2(torch.from_numpy(pred.reshape(len(y), -1)).double(),
                          torch.from_numpy(y.reshape(len(y), -1))).double().numpy()  # as evaluate's
            arrays = {"prediction": pred.reshape(y.shape), "rel_l2": errs}
            summary.update(n=len(errs), test_rel_l2=float(np.mean(errs)))
    if bundle is not None:
        preds, errs = predictor.evaluate(bundle.datasets["test"], batch_size)
        # the layout of the file's target array: a channel axis of size 1 only where it has one (as Predictor.predict
        # keeps the layout of its inputs)
        channels = len(pairs.shapes[keys[1]]) > predictor.task.dim + 1
        arrays = {"prediction": preds[..., 0] if preds.shape[-1] == 1 and not channels else preds, "rel_l2": errs}
        summary.update(n=len(errs), test_rel_l2=float(np.mean(errs)))
    elif not has_target:
        src = open_source(data, keys[:1])
        _check_input_shape(data, keys[0], src.shapes[keys[0]], predictor.task)
        _warn_samples_last(data, keys[0], src.shapes[keys[0]], predictor.task.dim)
        x = src.read(keys[0], np.arange(src.n_samples))
        if resolution is not None:
            count_argument("resolution", resolution)  # a count below 1 first: it is wrong with targets too
            raise ConfigError("--resolution needs a file with targets; give the inputs at the wanted resolution")
        arrays = {"prediction": predictor.predict(x, batch_size=batch_size)}
        summary.update(n=int(x.shape[0]))
    out.parent.mkdir(parents=True, exist_ok=True)
    with replacing(out, "wb") as fh:
        np.savez(fh, **arrays)
    summary["out"] = str(out)
    return summary
