"""A trained model as a loadable artifact: ``opformer.load(PATH)`` -> :class:`Predictor`.

PATH is a training checkpoint (``runs/NAME/checkpoints/best.ckpt``) or a directory written by
:meth:`Predictor.save_pretrained` (``config.json`` + ``model.safetensors``, the layout of Hugging Face's
``save_pretrained``).  Both hold all that inference needs: the task and its options, the model config, the
normalizers (valid on any grid), the grid convention, the array keys and the package version.  Loading never runs
code from the file: checkpoints are read with ``torch.load(weights_only=True)``, weights with safetensors, the
config with ``json``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from ..atomic import replacing
from ..config import RESAMPLE, ConfigError, OpformerWarning, SettingError, flag
from ..data.datasets import UnitGaussianNormalizer
from ..data.readers import safe_torch_load
from ..interrupt import deferred
from .base import TASKS_VARIABLE, Bundle, Operator, Task, get_task, grid_coords, list_tasks, options_from, \
    task_module_of
from .losses import rel_l2

__all__ = ["FORMAT", "LoadError", "Predictor", "check_save_directory", "load", "make_artifact", "read_checkpoint"]

FORMAT = "opformer-model/1"


class LoadError(ValueError):
    """A file or directory that is not a loadable opformer model."""


def make_artifact(task: Task, options, model_cfg: dict, bundle: Bundle, keys, resolution) -> dict:
    """The JSON-able description of a trained model (the weights travel separately)."""
    import dataclasses

    from .. import __version__

    return {
        "format": FORMAT,
        "version": __version__,
        "task": task.name,
        **({"task_module": task_module_of(task)} if task_module_of(task) else {}),
        "task_options": dataclasses.asdict(options),
        "model": dict(model_cfg),
        "normalizers": {k: v.describe() for k, v in bundle.normalizers.items()},
        "grid": bundle.grid,
        "keys": list(keys),
        "resolution": resolution,
        "input_grid": list(bundle.input_grid),
        "target_grid": list(bundle.target_grid),
        "info": dict(bundle.info),
    }


def build_operator(artifact: dict) -> tuple[Operator, Task, object]:
    """An operator with the artifact's architecture and empty normalizers (load the weights next)."""
    task = get_task(artifact["task"])
    options = options_from(task, artifact.get("task_options", {}))
    normalizers = {k: UnitGaussianNormalizer.empty(d) for k, d in artifact.get("normalizers", {}).items()}
    operator = task.build_operator(dict(artifact["model"]), normalizers, options)
    return operator, task, task.inference_options(options, artifact.get("info") or {})


def _not_a_checkpoint(path: Path) -> Optional[tuple[str, bool]]:
    """What ``path`` is when torch.save did not write it whole: (a description, whether it is a damaged checkpoint,
    i.e. a zip archive cut off or corrupted); None for a file that looks like torch.save's."""
    import zipfile

    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
    except OSError as exc:
        raise LoadError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not head:
        return "an empty file", False
    if head == b"PK":  # a zip archive: torch.save's format holds NAME/data.pkl
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError, ValueError):
            return "cut off or damaged", True
        if not any(n.endswith("/data.pkl") for n in names):
            return "a zip archive that torch.save did not write, such as a .npz data file", False
        return None
    if head[0] == 0x80:  # a pickle: torch.save's older format
        return None
    return "a file that torch.save did not write", False


def read_checkpoint(path: Union[str, os.PathLike], *, as_model: bool = False) -> dict:
    """``torch.load(path, weights_only=True)`` with errors in the user's terms (a pickled object is refused).
    ``as_model``: ``path`` was given as a model (:func:`load`), and a file that torch.save did not write is told as
    not being one."""
    path = Path(path)
    if not path.exists():
        raise LoadError(f"{path}: no such file or directory")
    if path.is_dir():
        raise LoadError(f"{path}: is a directory without config.json and model.safetensors")
    problem = _not_a_checkpoint(path)
    if problem is not None and as_model and not problem[1]:
        raise LoadError(f"{path} is not a model ({problem[0]}): expected a .ckpt checkpoint, a training's run "
                        "directory or a save_pretrained directory")
    if problem is not None:
        raise LoadError(f"{path}: not a readable checkpoint ({problem[0]})")
    ck = safe_torch_load(path, LoadError, unreadable="not a readable checkpoint",
                         refused="refused: the file holds pickled objects that would run code when loaded; "
                                 "opformer only loads plain tensors")
    if not isinstance(ck, dict):
        raise LoadError(f"{path}: not an opformer checkpoint (found a {type(ck).__name__})")
    return ck


def _check_resample(resample) -> str:
    if resample not in RESAMPLE:
        raise ConfigError(f"resample must be one of {', '.join(RESAMPLE)}, got {resample!r}")
    return resample


@functools.lru_cache(maxsize=32)
def _interpolation_matrix(kind: str, n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) weights of linear interpolation between two grids of the same kind on [0, 1] (read-only; built
    once per pair of grids, not per batch or rollout step)."""
    x_in, x_out = grid_coords(kind, (n_in,))[:, 0], grid_coords(kind, (n_out,))[:, 0]
    period = 1.0 if kind == "periodic" else None
    eye = np.eye(n_in)
    w = np.stack([np.interp(x_out, x_in, eye[j], period=period) for j in range(n_in)], axis=1)
    w.setflags(write=False)
    return w


def resample_grid(t: torch.Tensor, kind: str, shape) -> torch.Tensor:
    """``t`` (batch, *grid, channels) on a grid of ``kind`` -> (batch, *shape, channels) by linear interpolation
    along each axis (periodic grids wrap around; cell and node grids keep their end values beyond the outermost
    points)."""
    for axis, n in enumerate(shape, start=1):
        if t.shape[axis] != n:
            w = torch.tensor(_interpolation_matrix(kind, t.shape[axis], n), dtype=t.dtype, device=t.device)
            t = torch.movedim(torch.tensordot(w, torch.movedim(t, axis, 0), dims=1), 0, axis)
    return t


def _bad_argument(name: str, problem: str) -> SettingError:
    """An error naming the argument ``name`` (``times must be ...``), or its flag on the command line (``--times``)."""
    return SettingError(f"{name} {problem}", f"{flag(name)} {problem}")


#: the most model calls one autoregressive or mixed rollout may take (t / step); more is refused, not run for hours
MAX_ROLLOUT_STEPS = 1_000_000

#: the fewest grid points along an axis that a model predicts on (fewer sample no function; a 1x1 input was
#: interpolated to the training grid and gave a meaningless field)
MIN_GRID_POINTS = 3


def count_argument(name: str, value, least: int = 1) -> int:
    """``value``, the argument ``name``, as an int >= ``least`` (numpy integers too), else an error naming it (its
    flag on the command line): a bool, a string or a float is refused, never converted."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        what = "a positive integer" if least == 1 else f"an integer >= {least}"
        shown = str(int(value)) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else repr(value)
        raise _bad_argument(name, f"must be {what}, got {shown if len(shown) <= 40 else type(value).__name__}")
    return int(value)


def _check_batch_size(batch_size) -> int:
    """``batch_size`` as a positive int, else an error naming it (``--batch-size`` on the command line)."""
    return count_argument("batch_size", batch_size)


def _numbers(values, name: str, what: str) -> np.ndarray:
    """``values`` (a number, a list or array of numbers, a tensor) as float64, else an error naming the argument
    and what it takes (``what``): strings, booleans and other values that are not numbers are refused, never
    converted."""
    x = None
    if torch.is_tensor(values):
        if not (values.is_complex() or values.dtype == torch.bool):
            x = values.detach().cpu().double().numpy()
    elif not isinstance(values, (str, bytes, bool, np.bool_)):
        try:
            x = np.asarray(values)
        except ValueError:  # nested lists of unequal lengths
            pass
        if x is not None and x.dtype.kind not in "iuf":
            x = None
    if x is None:
        raise _bad_argument(name, f"must be {what}, got {_shown(values)}")
    return x.astype(np.float64)


def _shown(value) -> str:
    """``value`` in a one-line message: its repr when short, else what it is (an array: of which values)."""
    if torch.is_tensor(value):
        return "an array of " + ("booleans" if value.dtype == torch.bool else "complex numbers")
    if isinstance(value, np.ndarray):
        kinds = {"b": "booleans", "c": "complex numbers", "U": "strings", "S": "bytes", "O": "objects"}
        return "an array of " + kinds.get(value.dtype.kind, str(value.dtype))
    text = repr(value)
    return text if len(text) <= 60 and "\n" not in text else f"a {type(value).__name__}"


def _user_array(values, name: str) -> tuple[np.ndarray, bool]:
    """The user's ``values`` (an array, a tensor or a nested list) as a numpy array, and whether they came as a
    tensor; complex or non-numeric values are refused, naming the argument, and so are NaN and inf (naming the
    samples: a model maps them to NaN everywhere, as a data file's are refused when it is read)."""
    as_torch = torch.is_tensor(values)
    if as_torch and values.dtype == torch.bfloat16:  # numpy has no bfloat16; every bfloat16 is a float32
        values = values.float()
    try:
        x = values.detach().cpu().numpy() if as_torch else np.asarray(values)
    except ValueError:  # nested lists of unequal lengths
        raise _bad_argument(name, "must be a rectangular array: its nested lists differ in length (every sample on "
                                  "one grid)") from None
    if np.iscomplexobj(x) or not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
        raise _bad_argument(name, f"must hold real numbers, got an array of {x.dtype}")
    if np.issubdtype(x.dtype, np.floating) and x.ndim > 0 and not np.isfinite(x).all():
        bad = np.flatnonzero(~np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1))
        shown = ", ".join(map(str, bad[:5])) + (f" and {bad.size - 5} more" if bad.size > 5 else "")
        raise _bad_argument(name, f"must be finite: NaN or inf in sample(s) {shown} of {x.shape[0]} (a prediction "
                                  "from them would be NaN)")
    if np.issubdtype(x.dtype, np.floating) and x.dtype.itemsize > 4 and x.size and np.abs(x).max() > F32_MAX:
        bad = np.flatnonzero((np.abs(x.reshape(x.shape[0], -1)) > F32_MAX).any(axis=1))
        raise _bad_argument(name, f"must lie within float32's range (|x| <= {F32_MAX:.3g}; the models compute in "
                                  f"float32): sample(s) {', '.join(map(str, bad[:5]))} of {x.shape[0]} do not")
    return x, as_torch


#: the largest float32, the models' working precision
F32_MAX = float(np.finfo(np.float32).max)


def _warn_nonfinite(y: torch.Tensor, likely: Optional[str]) -> None:
    """One warning where predictions from finite inputs came out NaN or inf (which samples, and the likely cause)."""
    if y.numel() and not bool(torch.isfinite(y).all()):
        bad = torch.nonzero(~torch.isfinite(y.reshape(y.shape[0], -1)).all(dim=1)).reshape(-1).tolist()
        why = f" ({likely}, or inputs far from the training data)" if likely else " (inputs far from the training data)"
        warnings.warn(f"the predictions of sample(s) {', '.join(map(str, bad[:5]))} of {y.shape[0]} hold NaN or inf"
                      f"{why}", OpformerWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside this package (and torch's decorators): a warning names the
    user's line that called ``predict``/``rollout``/``evaluate``, not ours."""
    ours = (str(Path(__file__).resolve().parents[1]), str(Path(torch.__file__).resolve().parent))  # and no_grad's
    frame, level = sys._getframe(1), 1
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(ours):
        frame, level = frame.f_back, level + 1
    return level


class Predictor:
    """A trained operator in evaluation mode, physical units in and out.

    ``predict(inputs)`` takes numpy arrays or tensors in the file layout, ``(samples, *grid)`` or
    ``(samples, *grid, channels)``, at any resolution the model supports, and returns the predictions in the same
    kind of array (a channel axis of size 1 is dropped when the input had none).
    """

    def __init__(self, operator: Operator, artifact: dict, task: Task, options, run_config: Optional[dict] = None,
                 resample: str = "auto"):
        self.operator = operator.eval()
        self.artifact = artifact
        self.task = task
        self.options = options
        self.run_config = run_config  # the training run's config (checkpoints only): its data, for eval and rollout
        self.data_files: Optional[dict] = None  # {path: fingerprint} of the files the run read (checkpoints only)
        self._noted: set = set()
        self.resample = _check_resample(resample)  # see RESAMPLE

    @property
    def grid(self) -> str:
        return self.artifact["grid"]

    def __repr__(self) -> str:
        a = self.artifact
        return (f"Predictor(task={a['task']!r}, model={a['model'].get('name')!r}, trained on grid "
                f"{tuple(a['input_grid'])}, opformer {a.get('version', '(version not recorded)')})")

    def to(self, device=None, dtype: Optional[torch.dtype] = None) -> Predictor:
        """Move the model to ``device`` and/or cast it to the floating ``dtype``, as ``nn.Module.to``:
        ``to("cuda")``, ``to(torch.float64)``, ``to("cuda", torch.bfloat16)``.  The inputs are then given to the
        network in its dtype (a float64 model predicts in float64); the predictions are float32 as always."""
        if isinstance(device, torch.dtype):
            device, dtype = None, device
        if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
            raise _bad_argument("dtype", f"must be a floating torch dtype (torch.float64, torch.bfloat16, ...), got "
                                         f"{_shown(dtype)}")
        dev = None if device is None else _usable_device(device)
        self.operator.to(device=dev, dtype=dtype)
        return self

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the network computes in (float32 unless cast by :meth:`to`)."""
        return next(self.operator.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.operator.parameters()).device

    @torch.no_grad()
    def __call__(self, input: torch.Tensor, coords: torch.Tensor, lead_time=None) -> torch.Tensor:
        """The operator on model-layout tensors ``(batch, *grid, c)`` and coordinates (and lead times (batch,))."""
        if lead_time is not None:
            lead_time = torch.as_tensor(lead_time, dtype=input.dtype).reshape(-1).expand(input.shape[0])
            lead_time = lead_time.to(self.device)
        grid, trained = tuple(input.shape[1:-1]), tuple(self.artifact["input_grid"])
        if min(grid, default=0) < MIN_GRID_POINTS:  # no function is sampled on fewer: nothing to interpolate from
            raise ConfigError(self._too_few_points(grid))
        if self.runs_on_training_grid(grid):
            x, c = self._to_training_grid(input, coords)
            y = self._run(x, c, lead_time)
            return resample_grid(y, self.artifact["grid"], grid) if tuple(y.shape[1:-1]) == trained else y
        note = self.operator.resolution_note(grid)
        if note is not None:
            self._note(f"{note} (it was trained on {'x'.join(map(str, trained))})")
        return self._run(input, coords, lead_time)

    def _too_few_points(self, grid) -> str:
        trained = tuple(self.artifact["input_grid"])
        return (f"inputs on a {'x'.join(map(str, grid))} grid: the {self._name()} model needs at least "
                f"{MIN_GRID_POINTS} points along each axis (it was trained on {'x'.join(map(str, trained))})")

    def runs_on_training_grid(self, grid) -> bool:
        """Whether inputs on ``grid`` are interpolated to the training grid and the predictions back (``resample``:
        "auto" does so for models whose layers act on grid cells, see ``OperatorModel.grid_bound``)."""
        trained = tuple(self.artifact["input_grid"])
        if self.resample == "never" or tuple(grid) == trained or len(grid) != len(trained):
            return False
        return self.resample == "always" or bool(getattr(self.operator.model, "grid_bound", False))

    def _to_training_grid(self, input: torch.Tensor, coords: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``input`` (batch, *grid, c) interpolated to the training grid, and that grid's coordinates (with a note
        the first time)."""
        grid, trained = tuple(input.shape[1:-1]), tuple(self.artifact["input_grid"])
        never = " (resample 'never' runs it on the data's grid)" if self._fits_grid(grid) else ""
        self._note(f"this model runs on its {'x'.join(map(str, trained))} training grid: the inputs on "
                   f"{'x'.join(map(str, grid))} are interpolated to it and its predictions back{never}")
        kind = self.artifact["grid"]
        c = torch.as_tensor(grid_coords(kind, trained), dtype=coords.dtype)[None]
        return resample_grid(input, kind, trained), c

    def _fits_grid(self, grid) -> bool:
        """Whether the network can run on ``grid`` at all (square-only models, grids their patches or levels do not
        divide cannot), by its own checks, without running it."""
        model = getattr(self.operator, "model", self.operator)
        if getattr(model, "square_only", False) and len(set(grid)) > 1:
            return False
        check = getattr(model, "_check_grid", None)  # a network of the user's own may have no such check
        try:
            if check is not None:
                check(tuple(grid))
        except (ValueError, ConfigError):
            return False
        return True

    def _frames_back(self, y: torch.Tensor, grid) -> torch.Tensor:
        """Rollout frames (samples, times, *training grid, c) interpolated to ``grid``."""
        n, t = y.shape[:2]
        back = resample_grid(y.reshape(n * t, *y.shape[2:]), self.artifact["grid"], grid)
        return back.reshape(n, t, *back.shape[1:])

    def _note(self, text: str) -> None:
        if text not in self._noted:  # once per grid
            self._noted.add(text)
            warnings.warn(text, OpformerWarning, stacklevel=_caller_level())

    def _name(self) -> str:
        """The model as the user knows it: its run's preset and its model name (``burgers-gt (transformer1d)``)."""
        model, run = self.artifact["model"].get("name", "model"), self.artifact.get("run")
        return f"{run} ({model})" if run and run != model else str(model)

    def _check_channels(self, shape, xin: torch.Tensor, frames: int = 1) -> None:
        """Refuse inputs (the user's array of ``shape``, as the model's ``xin``) whose channels the model does not
        take, naming the shape it does (``frames``: snapshots stacked into the channels by a history rollout)."""
        model = getattr(self.operator, "model", None)
        expected = getattr(getattr(model, "config", None), "in_channels", None)
        if expected is None or xin.shape[-1] * frames == expected:
            return
        c = expected // frames
        grid = ", ".join(["n"] if self.task.dim == 1 else ["H", "W"])
        head = "samples, " + ("" if frames == 1 else f"{frames}, ")
        shapes = f"({head}{grid}) or ({head}{grid}, 1)" if c == 1 else f"({head}{grid}, {c})"
        raise ConfigError(f"the {self._name()} model takes inputs of shape {shapes}, got {tuple(shape)}")

    def _run(self, input, coords, lead_time):
        device, dtype = self.device, self.dtype
        if lead_time is not None:
            lead_time = lead_time.to(device, dtype)
        try:
            return self.operator(input.to(device, dtype), coords.to(device, dtype), lead_time)
        except ValueError as exc:  # the model's own input checks (a grid smaller than its patches, ...)
            from ..models._grid2d import PATCH_ADVICE  # a trained model's patch size is fixed: advice for training

            grid = "x".join(map(str, input.shape[1:-1]))
            network = type(getattr(self.operator, "model", self.operator)).__name__
            why = str(exc).replace(network, f"the {self._name()} model")
            why = why.replace(PATCH_ADVICE, "")
            raise ConfigError(f"this model cannot predict on the {grid} grid of these inputs: {why} (it was "
                              f"trained on {'x'.join(map(str, self.artifact['input_grid']))}; resample 'always' runs it "
                              "there, the inputs interpolated to that grid and the predictions back)") from None

    @property
    def time_dependent(self) -> bool:
        """Whether the model maps u(t) to u(t + tau) (a trajectories task): its predictions need a lead time."""
        return "times" in (self.artifact.get("info") or {})

    @property
    def history(self) -> int:
        """How many past snapshots a time-dependent model takes (> 1: the FNO protocol, one snapshot a step)."""
        return int((self.artifact.get("info") or {}).get("history", 1))

    def predict(self, inputs, coords=None, batch_size: int = 32, lead_time=None):
        """Predictions for ``inputs`` (samples, *grid[, channels]): a numpy array, a tensor or a nested list of any
        real dtype (float64 and integers are cast to the models' float32).  The predictions are float32, a tensor for
        a tensor, else a numpy array; a one-channel output loses its channel axis where the input had none.  A
        time-dependent model also needs ``lead_time``: tau, one number or one per sample (see :meth:`rollout` for
        several times); one trained with a history of h snapshots takes them stacked in the channels instead.
        ``coords``: the points' coordinates when they are not the data's standard grid, (*grid, dim) for all samples
        (in 1D also (n,)), or (samples, *grid, dim), one set per sample (a model that runs on its training grid
        uses that grid's own)."""
        batch_size = _check_batch_size(batch_size)
        history = self.history
        needs_tau = self.time_dependent and history == 1  # a history model steps one snapshot from its h channels
        if needs_tau and lead_time is None:
            raise ConfigError("this model is time-dependent: give lead_time (how far ahead to predict, tau) or use "
                              "rollout(u0, times) (opformer rollout)")
        if not needs_tau and lead_time is not None:
            what = (f"predicts the next snapshot from the last {history} stacked in the channels" if history > 1 else
                    "is not time-dependent")
            raise ConfigError(f"the model of task {self.task.name} {what}: it takes no lead_time")
        x, as_torch = _user_array(inputs, "inputs")
        squeeze = x.ndim == self.task.dim + 1
        xin, c = self.task.inputs_from_array(x, self.grid)
        grid = tuple(xin.shape[1:-1])
        if squeeze and x.shape[-1] == 1 and min(grid) < MIN_GRID_POINTS:  # (n, 1), (H, W, 1): one sample, likely
            raise ConfigError(f"{self._too_few_points(grid)}: inputs of shape {x.shape} are {x.shape[0]} samples on "
                              f"a {'x'.join(map(str, grid))} grid; one sample with a channel axis is given as "
                              f"inputs[None], of shape {(1, *x.shape)}")
        self._check_channels(x.shape, xin)
        if coords is not None:
            c = self._user_coords(coords, xin)
        tau = None
        if lead_time is not None:
            what = f"a number or an array of numbers, one value or one per sample ({xin.shape[0]})"
            t = _numbers(lead_time, "lead_time", what)
            if t.ndim > 1 or t.size not in (1, xin.shape[0]):
                got = f"an array of shape {t.shape}" if t.ndim > 1 else f"{t.size} values"
                raise _bad_argument("lead_time", f"must be {what}, got {got}")
            tau = torch.as_tensor(t, dtype=torch.float32).reshape(-1)
            if not bool(torch.all(torch.isfinite(tau) & (tau >= 0))):
                raise ConfigError(f"lead_time must be finite and >= 0 (how far ahead to predict), got {t.tolist()}")
            tau = tau.expand(xin.shape[0])
        outs = []
        for lo in range(0, xin.shape[0], batch_size):  # coordinates per sample go with their samples
            c_lo = c if c.shape[0] == 1 else c[lo : lo + batch_size]
            outs.append(self(xin[lo : lo + batch_size], c_lo, None if tau is None else tau[lo : lo + batch_size])
                        .float().cpu())
        if not outs:  # no samples: the output's shape from one zero sample, with none of it kept
            c_one = c if c.shape[0] == 1 else self.task.inputs_from_array(x[:1], self.grid)[1]
            outs.append(self(torch.zeros((1, *xin.shape[1:]), dtype=xin.dtype), c_one,
                             None if tau is None else torch.ones(1)).float().cpu()[:0])
        y = torch.cat(outs)
        _warn_nonfinite(y, "lead times far beyond the training's" if tau is not None else None)
        if squeeze and y.shape[-1] == 1:
            y = y[..., 0]
        return y if as_torch else y.numpy()

    def _user_coords(self, coords, xin: torch.Tensor) -> torch.Tensor:
        """``coords`` of :meth:`predict` as a (1 or samples, *grid, dim) tensor for the inputs ``xin`` (samples,
        *grid, channels): the points' coordinates shared by all samples, (*grid, dim) (or (n,) in 1D), or one set per
        sample; any other shape is refused naming the argument and the shapes it takes."""
        c = torch.as_tensor(np.array(_user_array(coords, "coords")[0], dtype=np.float32))  # a copy: writable
        grid, d, samples = tuple(xin.shape[1:-1]), self.task.dim, xin.shape[0]
        given = tuple(c.shape)
        if d == 1 and given == grid:
            c = c[:, None]
        if c.dim() == xin.dim() - 1:
            c = c[None]
        if c.dim() != xin.dim() or c.shape[0] not in (1, samples) or tuple(c.shape[1:]) != (*grid, d):
            points = ", ".join(map(str, grid))
            shapes = [f"({points},)"] * (d == 1) + [f"({points}, {d})", f"(1, {points}, {d})"]
            raise _bad_argument("coords", f"must have shape {', '.join(shapes)} or ({samples}, {points}, {d}) (one "
                                          f"set per sample) for inputs on the grid {grid}, got {given}")
        return c

    def rollout_arguments(self, times, mode: Optional[str] = None, step: Optional[float] = None,
                          file_times: bool = False) -> tuple[Optional[list], str, float]:
        """:meth:`rollout`'s ``times``, ``mode`` and ``step`` checked, before any data is read: (the times as floats,
        the mode (None: its default), the step (None: the training's snapshot spacing)), else an error naming the
        argument (its flag on the command line).  ``file_times``: ``times`` None stands for a file's own times (those
        of ``opformer rollout`` without ``--times``) and is not checked here."""
        info = self.artifact.get("info") or {}
        if not self.time_dependent:
            raise ConfigError(f"the model of task {self.task.name} is not time-dependent: it has no rollout")
        if step is not None and _numbers(step, "step", "a finite number > 0").ndim:
            raise _bad_argument("step", f"must be a finite number > 0, got an array of shape {np.shape(step)}")
        trained_step = float(info["step"])
        resolved = trained_step if step is None else float(step)
        if not (math.isfinite(resolved) and resolved > 0):
            raise _bad_argument("step", f"must be a finite number > 0, got {resolved}")
        if self.history > 1 and step is not None and not math.isclose(resolved, trained_step, rel_tol=1e-6):
            # such a model moves one training snapshot a call, whatever step says: another step would mislabel times
            raise _bad_argument("step", f"of a model with history {self.history} is its training snapshot spacing "
                                        f"{trained_step:g} (each call predicts the next snapshot); got {step}")
        step = resolved
        if times is not None or not file_times:
            t_arr = _numbers(times, "times", "a number or a list of numbers (finite, ascending, > 0)")
            if t_arr.ndim > 1:
                raise _bad_argument("times", f"must be one list of times, got an array of shape {t_arr.shape}")
            times = [float(t) for t in np.atleast_1d(t_arr)]
            if (not times or not all(math.isfinite(t) for t in times) or min(times) < 0
                    or any(b <= a for a, b in zip(times, times[1:]))):
                raise _bad_argument("times", f"must be finite ascending values > 0 (or a leading 0: u0 itself), "
                                             f"got {times}")
        if mode is None:
            mode = "autoregressive" if self.history > 1 else "direct"
        if mode not in ("direct", "autoregressive", "mixed"):
            raise _bad_argument("mode", f"must be direct, autoregressive or mixed, got {mode!r}")
        if self.history > 1 and mode != "autoregressive":
            raise SettingError(
                f"a model with history {self.history} rolls out one snapshot at a time: use mode='autoregressive'",
                f"a model with --history {self.history} rolls out one snapshot at a time: use --mode autoregressive")
        return times, mode, step

    def rollout(self, u0, times, mode: Optional[str] = None, step: Optional[float] = None, batch_size: int = 32):
        """Predictions at ``times`` (> 0, ascending) from initial states ``u0`` (samples, *grid[, channels]) of a
        time-dependent model: (samples, len(times), *grid[, channels]).  A model trained with a history of h
        snapshots takes ``u0`` (samples, h, *grid) and counts ``times`` from the last of them (``opformer rollout``
        counts them from a file's first snapshot, t_0).  ``times`` may start with 0, as a file's own times often do
        (``rollout(u[:, 0], t)``): that frame is ``u0`` itself (with a history, its last snapshot), not a prediction.

        ``direct``: one jump of tau = t for every t.  ``autoregressive``: repeated steps of ``step`` (default: the
        training data's snapshot spacing), a last shorter step where t is not a multiple.  ``mixed``: the largest
        jumps first: repeated jumps of the longest lead time seen in training (a multiple of ``step``), then
        shorter ones, down to ``step``.  Any t > 0 is allowed, also beyond the training horizon.  ``mode`` None:
        ``autoregressive`` for a model with a history (the only mode it has), else ``direct``."""
        batch_size = _check_batch_size(batch_size)
        times, mode, step = self.rollout_arguments(times, mode, step)
        x, as_torch = _user_array(u0, "u0")  # once: a leading t = 0 takes its frame from the same array
        if times[0] == 0:  # t_0: the initial state as given, then the predictions at the later times
            return self._with_initial_frame(x, as_torch, times[1:], mode, step, batch_size)
        return self._rollout_checked(x, as_torch, times, mode, step, batch_size)

    def _rollout_checked(self, x: np.ndarray, as_torch: bool, times: list, mode: str, step: float,
                         batch_size: int):
        """:meth:`rollout` once its arguments are checked: ``x`` the user's ``u0`` as a numpy array, ``times`` > 0."""
        info = self.artifact.get("info") or {}
        longest = max(step, float(info.get("max_lead", step))) if mode == "mixed" else step
        calls = 0 if mode == "direct" else times[-1] / longest + longest / step
        if calls > MAX_ROLLOUT_STEPS:
            raise _bad_argument("times", f"up to {times[-1]:g} take about {calls:.3g} model calls of {mode} steps "
                                         f"(more than {MAX_ROLLOUT_STEPS:,}); give a larger step or mode direct")
        if self.history > 1:
            return self._rollout_history(x, as_torch, times, mode, step, self.history)
        squeeze = x.ndim == self.task.dim + 1
        xin, c = self.task.inputs_from_array(x, self.grid)
        self._check_channels(x.shape, xin)
        # a model that runs on its training grid rolls out there: the state is interpolated once, not at every step
        grid = tuple(xin.shape[1:-1])
        on_trained = self.runs_on_training_grid(grid)
        if on_trained:
            xin, c = self._to_training_grid(xin, c)
        eps = 1e-9 * times[-1]  # relative: an absolute one let tiny steps run far past a tiny t
        jumps = [step]
        if mode == "mixed":
            jumps = sorted({step * k for k in range(1, int(longest / step + 1e-9) + 1)}, reverse=True)
        outs = []
        if xin.shape[0] == 0:  # no samples: none predicted, in the shape of the predictions
            outs.append(self(torch.zeros((1, *xin.shape[1:]), dtype=xin.dtype), c, times[0]).float().cpu()[:0, None]
                        .expand(0, len(times), *xin.shape[1:-1], -1))
        for lo in range(0, xin.shape[0], batch_size):
            # every time t from t_0 on its own, as the same steps give it whatever other times are asked for: the
            # chain of the largest jump (``step`` in autoregressive mode), shared by the times in order, then the
            # largest jumps that fit (mixed), then one shorter step where t is not reached exactly
            state, t_now, frames = xin[lo : lo + batch_size], 0.0, []
            for t in times:
                if mode == "direct":
                    frames.append(self(state, c, t).float().cpu())
                    continue
                while t_now + jumps[0] <= t + eps:
                    state, t_now = self(state, c, jumps[0]).float().cpu(), t_now + jumps[0]
                here, t_here = state, t_now
                for jump in jumps[1:]:  # mixed: each shorter jump at most once (a second would make a longer one)
                    if t_here + jump <= t + eps:
                        here, t_here = self(here, c, jump).float().cpu(), t_here + jump
                rest = t - t_here
                frames.append(here if rest <= eps else self(here, c, rest).float().cpu())
            outs.append(torch.stack(frames, dim=1))
        y = torch.cat(outs)
        _warn_nonfinite(y, "times far beyond the training's")
        if on_trained:
            y = self._frames_back(y, grid)
        if squeeze and y.shape[-1] == 1:
            y = y[..., 0]
        return y if as_torch else y.numpy()

    def _with_initial_frame(self, x: np.ndarray, as_torch: bool, times: list, mode: str, step: float,
                            batch_size: int):
        """:meth:`rollout` at ``[0, *times]``: ``x`` (the user's ``u0``; its last snapshot for a model with a
        history) as the frame of t = 0, in the layout of the predictions, before those at ``times``."""
        u0 = x
        if self.history > 1:
            if x.ndim < self.task.dim + 2 or x.shape[1] != self.history:
                raise ConfigError(f"this model needs the last {self.history} snapshots: inputs of shape (samples, "
                                  f"{self.history}, *grid)")
            x = x[:, -1]
        self.task.inputs_from_array(x, self.grid)  # refuses a u0 of the wrong dimension, as a rollout would
        first = np.asarray(x, dtype=np.float32)[:, None]
        if not times:
            return torch.from_numpy(first) if as_torch else first
        later = self._rollout_checked(u0, False, times, mode, step, batch_size)
        if later.shape[:1] + later.shape[2:] != first.shape[:1] + first.shape[2:]:
            raise _bad_argument("times", f"starts with 0, whose frame is u0 {x.shape}, but the predictions have shape "
                                         f"{later.shape[:1] + later.shape[2:]}: drop t_0 (times[1:])")
        out = np.concatenate([first, later], axis=1)
        return torch.from_numpy(out) if as_torch else out

    def _rollout_history(self, x: np.ndarray, as_torch: bool, times, mode: str, step: float, h: int):
        """The FNO protocol: ``u0`` (samples, h, *grid[, c]) holds the last h snapshots; each step predicts the next
        snapshot from the last h; ``times`` are multiples of ``step`` after the last given snapshot."""
        if x.ndim < self.task.dim + 2 or x.shape[1] != h:
            raise ConfigError(f"this model needs the last {h} snapshots: inputs of shape (samples, {h}, *grid)")
        n_steps = [round(t / step) for t in times]
        if any(abs(t / step - k) > 1e-6 for t, k in zip(times, n_steps)):
            raise SettingError(f"times must be multiples of the step {step:g} for a model with history {h}",
                               f"--times must be multiples of the step {step:g} for a model with --history {h}")
        frames = [self.task.inputs_from_array(x[:, k], self.grid) for k in range(h)]
        self._check_channels(x.shape, frames[0][0], frames=h)
        coords = frames[0][1]
        window = torch.cat([f[0] for f in frames], dim=-1)
        grid = tuple(window.shape[1:-1])
        on_trained = self.runs_on_training_grid(grid)  # then the window is interpolated once, not at every step
        if on_trained:
            window, coords = self._to_training_grid(window, coords)
        c = frames[0][0].shape[-1]
        out, k = [], 0
        for target in n_steps:
            while k < target:
                y = self(window, coords).float().cpu()
                window, k = torch.cat((window[..., c:], y), dim=-1), k + 1
            out.append(window[..., -c:])
        y = torch.stack(out, dim=1)
        if on_trained:
            y = self._frames_back(y, grid)
        if x.ndim == self.task.dim + 2 and y.shape[-1] == 1:
            y = y[..., 0]
        return y if as_torch else y.numpy()

    @torch.no_grad()
    def evaluate(self, dataset, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
        """(predictions, per-sample relative L2 errors) over a dataset of the task (items ``input``, ``target``,
        ``coords``), as ``opformer eval`` measures them.  For arrays: ``predict`` and compare."""
        if isinstance(dataset, (np.ndarray, list, tuple)) or torch.is_tensor(dataset):
            raise SettingError("evaluate takes a dataset of the task (items input, target, coords); for arrays use "
                               "predict(inputs) and compare with the targets",
                               "evaluate takes a dataset of the task")
        batch_size = _check_batch_size(batch_size)
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False)
        preds, errs = [], []
        for batch in loader:
            p = self(batch["input"], batch["coords"][:1], batch.get("lead_time"))
            grid = tuple(batch["target"].shape[1:-1])
            if tuple(p.shape[1:-1]) != grid:  # a fixed output grid (out_size) on data of another resolution:
                p = resample_grid(p, self.grid, grid)  # the prediction interpolated to the data's target grid
            preds.append(p.float().cpu())
            errs.append(rel_l2(p.cpu(), batch["target"]).double())
        return torch.cat(preds).numpy(), torch.cat(errs).numpy()

    def save_pretrained(self, directory: Union[str, os.PathLike], overwrite: bool = False) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory``: a new or empty directory, or with
        ``overwrite=True`` one that holds a model saved here before, which is replaced; any other directory is
        refused (see :func:`check_save_directory`).  Both files are written in full to temporary files before either
        replaces its old version, so a save that fails or is interrupted leaves the old model whole."""
        from safetensors.torch import save

        directory = check_save_directory(directory, overwrite)
        replaced = (directory / "config.json").is_file()
        state = {k: v.detach().cpu().contiguous() for k, v in self.operator.state_dict().items()}
        files = {"model.safetensors": save(state, metadata={"format": FORMAT}),
                 "config.json": json.dumps(self.artifact, indent=2).encode()}
        directory.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as staged:
            for name, data in files.items():  # each in full, fsynced, next to the file it replaces
                fh = staged.enter_context(replacing(directory / name, "wb"))
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            with deferred():  # then both renamed into place, with Ctrl-C held so that it cannot fall in between
                staged.close()
        stale = _command_outputs(directory) if replaced else []
        if stale:  # results of the replaced model: the user's to keep or delete
            warnings.warn(f"{directory} keeps {', '.join(stale[:4])}{' ...' if len(stale) > 4 else ''}: the "
                          "evaluations of the model it replaced (delete them, or run them again on the new one)",
                          stacklevel=2)
        return directory


def _command_outputs(directory: Path) -> list[str]:
    """The folders ``opformer eval`` and ``opformer rollout`` wrote into ``directory`` (``eval-*`` holding
    ``metrics.json``, ``rollout-*`` holding ``rollout.json``), sorted."""
    return sorted(p.name for p in directory.iterdir() if p.is_dir() and (
        (p.name.startswith("eval-") and (p / "metrics.json").is_file())
        or (p.name.startswith("rollout-") and (p / "rollout.json").is_file())))


def _saved_here(path: Path) -> bool:
    """Whether ``path`` (config.json or model.safetensors) was written by :meth:`Predictor.save_pretrained`."""
    try:
        if path.name == "config.json":
            return json.loads(path.read_text()).get("format") == FORMAT
        from safetensors import safe_open

        with safe_open(str(path), "pt") as fh:
            return (fh.metadata() or {}).get("format") == FORMAT
    except Exception:  # noqa: BLE001 - unreadable, not JSON, not safetensors: not ours
        return False


def check_save_directory(directory: Union[str, os.PathLike], overwrite: bool = False) -> Path:
    """``directory`` as a :class:`Path` if :meth:`Predictor.save_pretrained` may write there: a new or empty
    directory, or with ``overwrite`` one holding only a model it saved before; else a
    :class:`~opformer.config.SettingError` (a saved model without ``overwrite``, the user's own files, a file in its
    place, a place that cannot be written)."""
    if not isinstance(overwrite, (bool, np.bool_)):
        raise _bad_argument("overwrite", f"must be True or False, got {_shown(overwrite)}")
    if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
        # Path("") is the working directory (written into when empty), Path(None) a TypeError from pathlib
        problem = f"must be a path (a new or empty directory, or one saved here before), got {_shown(directory)}"
        raise SettingError(f"directory {problem}", f"--save-pretrained {problem}")
    directory = Path(directory)

    def refuse(problem: str):
        return SettingError(f"save_pretrained: {directory} {problem}", f"--save-pretrained {directory} {problem}")

    if directory.exists() and not directory.is_dir():
        raise refuse("is a file, not a directory")
    base = directory
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise refuse(f"cannot be made: {base} is a file")
    if not os.access(base, os.W_OK | os.X_OK):
        raise refuse(f"cannot be written ({base}: permission denied)")
    if directory.is_dir():
        names = ("config.json", "model.safetensors")
        entries = [p for p in directory.iterdir()  # a temporary file an interrupted save left is no one's
                   if not (p.name.endswith(".tmp") and p.name.startswith(tuple(f".{n}." for n in names)))]
        outputs = set(_command_outputs(directory))  # eval/rollout results of the saved model: kept, as in a run
        entries = [p for p in entries if p.name not in outputs]
        others = sorted(p.name for p in entries if p.name not in names or not p.is_file() or not _saved_here(p))
        if others:
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise refuse(f"holds files that are not a model saved by save_pretrained ({shown}); give a new or "
                         "empty directory")
        if entries and not overwrite:
            raise SettingError(f"save_pretrained: {directory} already holds a saved model; pass overwrite=True to "
                               "replace it, or give a new or empty directory",
                               f"--save-pretrained {directory} already holds a saved model; add --overwrite to "
                               "replace it, or give a new or empty directory")
    return directory


def _check_artifact(artifact, where: Path) -> dict:
    """``artifact`` if it is a model description of the form :func:`make_artifact` writes, else a
    :class:`LoadError` naming the first entry that is missing or of the wrong type (a damaged or hand-edited
    ``config.json`` is refused on loading, not met as a KeyError or AttributeError at the first prediction)."""
    if not isinstance(artifact, dict) or artifact.get("format") != FORMAT:
        raise LoadError(f"{where}: not an opformer model (no {FORMAT} description)")
    for key in ("task", "model", "grid", "input_grid"):
        if key not in artifact:
            raise LoadError(f"{where}: the model description lacks {key!r}")

    def bad(key: str, what: str):
        return LoadError(f"{where}: the model description's {key!r} must be {what}, got {_shown(artifact[key])}")

    def sizes(value, least: int) -> bool:
        return isinstance(value, list) and all(type(n) is int and n >= least for n in value)

    for key in ("task", "task_module", "version", "run"):
        if key in artifact and not isinstance(artifact[key], str):
            raise bad(key, "a string")
    if not isinstance(artifact["model"], dict) or not isinstance(artifact["model"].get("name"), str):
        raise bad("model", "a dict with the model's 'name'")
    from ..data.datasets import _KINDS

    if artifact["grid"] not in _KINDS:
        raise bad("grid", f"one of {', '.join(_KINDS)}")
    for key in ("input_grid", "target_grid"):
        if key in artifact and not (sizes(artifact[key], 1) and artifact[key]):
            raise bad(key, "a list of grid sizes (positive integers)")
    for key in ("task_options", "normalizers"):
        if key in artifact and not isinstance(artifact[key], dict):
            raise bad(key, "a dict")
    if "info" in artifact and not isinstance(artifact["info"], (dict, type(None))):
        raise bad("info", "a dict")
    if "keys" in artifact and not (isinstance(artifact["keys"], list)
                                   and all(isinstance(k, str) for k in artifact["keys"])):
        raise bad("keys", "a list of array names")
    for name, desc in artifact.get("normalizers", {}).items():
        if not (isinstance(desc, dict) and sizes(desc.get("shape"), 0) and isinstance(desc.get("eps"), (int, float))
                and not isinstance(desc.get("eps"), bool)):
            raise LoadError(f"{where}: the model description's normalizer {name!r} must be a dict with its 'shape' "
                            f"(a list of sizes) and 'eps' (a number), got {_shown(desc)}")
    return artifact


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message (a KeyError's key as what it lacks)."""
    text = f"lacks {exc}" if isinstance(exc, KeyError) else str(exc)
    return (text.splitlines() or [type(exc).__name__])[0]


def _check_sizes(artifact: dict, state: dict, where: Path) -> None:
    """Refuse a description whose network's tensors are not those of the weights, before the network is built: the
    network is first laid out on the "meta" device, which allocates nothing, and its parameters' names and shapes
    compared with the weights'.  (A ``config.json`` edited to ask for a network of many gigabytes otherwise had it
    allocated, and the process killed for want of memory, before the weights were found not to fit.)  A network
    that cannot be laid out on that device is left to the ordinary build and its own checks."""
    for key, value in state.items():
        if not torch.is_tensor(value):
            raise LoadError(f"{where}: the weights hold a {type(value).__name__} under {key!r}, not a tensor")
    try:
        with torch.device("meta"):
            meta = build_operator(artifact)[0]
    except Exception:  # noqa: BLE001 - the real build below raises the description's error, or builds it
        return
    with warnings.catch_warnings():  # copying into a meta parameter is a no-op (torch says so): names and shapes
        warnings.simplefilter("ignore")  # are checked as the real load checks them, its hooks included (weights
        try:  # saved before a module existed are filled in there, e.g. SimpleAttention's cond_out)
            meta.load_state_dict(state, strict=True)
            return
        except RuntimeError as exc:
            text = str(exc)
    got = {k: tuple(v.shape) for k, v in state.items()}
    want = {k: tuple(v.shape) for k, v in meta.state_dict().items()}
    problems = [f"{k!r} is {got[k]} in the weights, {want[k]} in the description" for k in want
                if k in got and got[k] != want[k]]
    problems += [f"the weights hold {k!r} {got[k]}, which the described model has not" for k in got if k not in want]
    problems += [f"the weights lack {k!r} {want[k]}" for k in want if k not in got and f'"{k}"' in text]
    if not problems:
        problems = [" ".join(text.split())]
    if problems:
        more = f"; and {len(problems) - 1} more" if len(problems) > 1 else ""
        raise LoadError(f"{where}: the weights do not fit the described model ({problems[0]}{more})")


def load(path: Union[str, os.PathLike], device: Optional[Union[str, torch.device]] = None,
         resample: str = "auto") -> Predictor:
    """The trained model at ``path`` (a checkpoint file, a ``save_pretrained`` directory, a training's run directory
    or its ``checkpoints`` folder, of which it loads ``best.ckpt``), or the bundled model of
    that name (``opformer.load("burgers-ft")``, :mod:`opformer.tasks.pretrained`), in evaluation mode.

    ``resample``: on a grid other than the training grid, "auto" runs models whose layers act on grid cells (the
    2D transformers' CNN parts, U-Net, scOT, ...) on their training grid, with the inputs interpolated to it and the
    predictions back; "always" does so for every model, "never" for none (``RESAMPLE``)."""
    _check_resample(resample)  # before any file is read
    from .pretrained import known_pretrained, pretrained_path

    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        # Path("") is the working directory and Path(None) a TypeError about bytes: neither says what was given
        raise LoadError(f"path must be a checkpoint, a run or save_pretrained directory, or a bundled model's name "
                        f"({known_pretrained()}), got {_shown(path)}")
    path = Path(path)
    if not path.exists():
        bundled = pretrained_path(str(path))
        if bundled is None:
            raise LoadError(f"{path}: no such file or directory, and no bundled model of that name (bundled: "
                            f"{known_pretrained()})")
        path = bundled
    elif pretrained_path(str(path)) is not None:  # a file or directory here has a bundled model's name: it is read
        name = str(path)
        try:
            return _load_path(path, device, resample)
        except LoadError as exc:  # say that it hid the bundled model, and how to reach that one
            raise LoadError(f"{exc} (this is the {'directory' if path.is_dir() else 'file'} {name!r} in "
                            f"{Path.cwd()}, not the bundled model {name!r}: opformer.load(opformer.tasks.pretrained."
                            f"pretrained_path({name!r})) loads that one)") from None
    return _load_path(path, device, resample)


def _load_path(path: Path, device, resample: str) -> Predictor:
    """:func:`load` of an existing ``path`` (a bundled model's name resolved to its directory)."""
    if path.is_dir() and not (path / "config.json").exists():
        for best in (path / "checkpoints" / "best.ckpt", path / "best.ckpt"):
            if best.is_file():  # a training's run directory (opformer train --out), or its checkpoints folder
                path = best
                break
    if path.is_dir():
        cfg_path, weights = path / "config.json", path / "model.safetensors"
        if not cfg_path.exists() or not weights.exists():
            raise LoadError(f"{path}: expected config.json and model.safetensors in this directory (a saved model), "
                            "or checkpoints/best.ckpt (a training's run directory), or best.ckpt (its checkpoints "
                            "folder); or give a checkpoint file (.ckpt) or a bundled model's name")
        try:
            artifact = json.loads(cfg_path.read_text())
        except (OSError, ValueError) as exc:
            raise LoadError(f"{cfg_path}: not valid JSON ({exc})") from None
        except RecursionError:  # lists or dicts nested thousands deep: no description is
            raise LoadError(f"{cfg_path}: not a model description (nested too deeply to read)") from None
        _check_artifact(artifact, cfg_path)
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state = load_file(weights)
        except (SafetensorError, OSError) as exc:
            raise LoadError(f"{weights}: not a readable safetensors file ({exc})") from None
        run_config = data_files = None
    else:
        ck = read_checkpoint(path, as_model=True)
        artifact = _check_artifact(ck.get("opformer"), path)
        run_config, data_files = ck.get("run_config"), ck.get("data_files")
        prefix = "operator."
        state = {k[len(prefix):]: v for k, v in ck.get("state_dict", {}).items() if k.startswith(prefix)}
    try:
        known = list_tasks()
    except ConfigError as exc:  # a module named in OPFORMER_TASKS that cannot be imported
        raise LoadError(str(exc)) from None
    if artifact.get("task") not in known:  # a task of the user's own, its module not imported
        raise LoadError(_unregistered(path, artifact, known))
    try:
        with torch.random.fork_rng(devices=[]):  # the weights' initial draws leave the caller's random stream alone
            _check_sizes(artifact, state, path)
            operator, task, options = build_operator(artifact)
    except LoadError:
        raise
    except (ConfigError, ValueError, RuntimeError, TypeError, KeyError, AttributeError) as exc:
        raise LoadError(f"{path}: the model description cannot be built ({_first_line(exc)})") from None
    try:
        operator.load_state_dict(state, strict=True)
    except (ValueError, RuntimeError, TypeError) as exc:
        raise LoadError(f"{path}: the weights do not fit the described model ({_first_line(exc)})") from None
    predictor = Predictor(operator, artifact, task, options, run_config, resample=resample)
    # the fingerprints of the files the run read (checkpoints only): eval of the run's own split checks them
    predictor.data_files = data_files if isinstance(data_files, dict) else None
    if device is not None:
        dev, problem = _device_or_problem(device)
        if problem is not None:
            raise LoadError(f"cannot use the device {str(device)!r}: {problem}")
        predictor.to(dev)
    return predictor


def _unregistered(path: Path, artifact: dict, known: list) -> str:
    """The one-line refusal of a model whose task is not registered in this process, naming the module to import
    (recorded with the model; loading never imports it: that is the user's choice)."""
    task, module = artifact.get("task"), artifact.get("task_module")
    if isinstance(module, str) and all(p.isidentifier() for p in module.split(".")) and module != "__main__":
        how = (f"import the module that registers it, {module}, before loading (the command line: "
               f"{TASKS_VARIABLE}={module}, or the path of its .py file)")
    elif module == "__main__":
        how = ("import the module that registers it before loading; its Task was defined in a script run directly, "
               "so move the class into a module of its own (docs/tasks.md)")
    else:
        how = f"import the module that registers it (register_task) before loading, or name it in {TASKS_VARIABLE}"
    return f"{path}: a model of task {task!r}, which is not registered in this process: {how}; known tasks: " \
           f"{', '.join(known)}"


def _device_or_problem(device) -> tuple[Optional[torch.device], Optional[str]]:
    """(``device`` as a :class:`torch.device`, None) where it exists on this machine, else (None, why not: torch's
    own words, one line)."""
    try:
        dev = torch.device(device)
        torch.empty(0, device=dev)  # torch's own check that the device exists here
    except (RuntimeError, AssertionError, TypeError) as exc:
        return None, (str(exc).splitlines() or [type(exc).__name__])[0]
    return dev, None


def _usable_device(device) -> torch.device:
    """``device`` as a :class:`torch.device` that exists on this machine, else an error naming the argument."""
    dev, problem = _device_or_problem(device)
    if problem is not None:
        raise _bad_argument("device", f"{str(device)!r} cannot be used here: {problem}")
    return dev
