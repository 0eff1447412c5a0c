"""The Task contract: everything problem-specific, asked for by name, so that training, evaluation, prediction,
plots and data preparation never branch on a problem.

A Task answers, for its problem (see ``docs/tasks.md`` for a worked example):

* ``generator`` and :meth:`Task.default_recipes`: the default data it generates (an :mod:`opformer.pde` recipe);
* :meth:`Task.load`: how files become the train / val / test datasets (keys, splits, resolution, noise) and the
  normalizers fitted on the training split;
* :meth:`Task.build_operator`: the model wrapped with its normalizers, physical units in and out;
* :meth:`Task.loss`: the loss per sample (relative L2 and the task's regularizer);
* ``plot_labels``: the plot layout; ``models`` and ``run_defaults``: the run presets; :meth:`Task.fit_model`: model
  sizes that depend on the grid, adapted to the data.

Registering makes the Task known to ``opformer train/eval/predict`` and ``opformer data prepare``::

    register_task(MyTask())
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import warnings
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np
import torch
from torch import Tensor, nn

from ..config import ConfigError, DataConfig, OpformerWarning, TrainConfig, flag, suggest
from ..data.datasets import UnitGaussianNormalizer, keys_pair, make_splits
from ..data.readers import open_source
from ..models.presets import ATTENTION_KINDS
from ..pde.errors import DataError
from .losses import rel_l2

__all__ = ["Task", "Bundle", "Operator", "NoOptions", "register_task", "unregister_task", "get_task", "open_pair",
           "split_indices", "model_table", "list_tasks", "grid_coords", "import_task_module", "task_module_of",
           "TASKS_VARIABLE", "ENTRY_POINT_GROUP",
           "cache_dir", "ensure_files", "grid_kind_of"]

_TASKS: dict[str, "Task"] = {}


@dataclasses.dataclass
class NoOptions:
    """A task without options of its own."""


@dataclasses.dataclass
class Bundle:
    """What :meth:`Task.load` returns: datasets by split, normalizers by role, and the facts the model needs."""

    datasets: dict
    normalizers: dict
    grid: str  # "periodic", "node" or "cell": where the points sit in [0, 1]^d
    input_grid: tuple
    target_grid: tuple
    files: dict = dataclasses.field(default_factory=dict)
    info: dict = dataclasses.field(default_factory=dict)  # JSON-able facts stored with the model (e.g. the times)
    warnings: list = dataclasses.field(default_factory=list)  # one line per finding of the task's own data checks


def run_network(model: nn.Module, x: Tensor, coords: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
    """``model(x, coords)``, with ``lead_time=`` only when there is one (models without time take no such argument)."""
    return model(x, coords) if lead_time is None else model(x, coords, lead_time=lead_time)


class Operator(nn.Module):
    """A trained operator in physical units: ``input`` (batch, *grid, c_in) and ``coords`` (batch or 1, *grid, d)
    -> the prediction (batch, *grid_out, c_out).  The input is standardized and the output decoded with the
    normalizers fitted on the training split (valid on any grid); ``zero_boundary`` sets the outer ring of a 2D
    output to zero (homogeneous Dirichlet data, as the Darcy solutions)."""

    def __init__(self, model: nn.Module, input_normalizer: Optional[UnitGaussianNormalizer] = None,
                 target_normalizer: Optional[UnitGaussianNormalizer] = None, zero_boundary: bool = False):
        super().__init__()
        self.model = model
        self.input_normalizer = input_normalizer
        self.target_normalizer = target_normalizer
        self.zero_boundary = bool(zero_boundary)

    def forward(self, input: Tensor, coords: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
        x = input if self.input_normalizer is None else self.input_normalizer.encode(input, coords)
        y = self.call_model(x, coords, lead_time)
        if self.target_normalizer is not None:
            same = tuple(y.shape[1:-1]) == tuple(input.shape[1:-1])
            y = self.target_normalizer.decode(y, coords if same else None)
        if self.zero_boundary:
            ring = torch.ones_like(y)
            ring[:, 0], ring[:, -1], ring[:, :, 0], ring[:, :, -1] = 0, 0, 0, 0
            y = y * ring
        return y

    def call_model(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
        """The network on standardized input; through the trainer's CUDA graphs while it has them attached
        (``opformer.train.cuda_graphs``), else directly."""
        graphed = self.__dict__.get("graphed_call")
        if graphed is not None:
            return graphed(x, coords, lead_time)
        return run_network(self.model, x, coords, lead_time)

    def resolution_note(self, grid: tuple[int, ...]) -> Optional[str]:
        """What the model leaves out on ``grid`` (Fourier modes a coarse grid cannot hold), or None."""
        note = getattr(self.model, "resolution_note", None)
        return note(grid) if note is not None else None


def grid_coords(kind: str, shape: tuple) -> np.ndarray:
    """Coordinates ``(*shape, d)`` of a grid in [0, 1]^d: "periodic" j/n, "node" i/(n-1), "cell" (i + 1/2)/n."""
    axes = []
    for n in shape:
        if kind == "periodic":
            axes.append(np.arange(n) / n)
        elif kind == "node":
            axes.append(np.arange(n) / max(n - 1, 1))
        elif kind == "cell":
            axes.append((np.arange(n) + 0.5) / n)
        else:
            raise ValueError(f"grid kind must be periodic, node or cell, got {kind!r}")
    return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)


def grid_kind_of(x: np.ndarray) -> str:
    """The kind of a stored 1D coordinate array (node when it holds both ends of [0, 1])."""
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    if n >= 2 and abs(x[0]) < 1e-9 and abs(x[-1] - 1) < 1e-9:
        return "node"
    if n >= 1 and abs(x[0] - 0.5 / n) < 1e-9:
        return "cell"
    return "periodic"


class Task:
    """One problem.  Subclasses set the class attributes and implement :meth:`load`; the rest has defaults."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    dim: ClassVar[int] = 1  # spatial dimension of the input grid
    default_keys: ClassVar[tuple] = ("input", "target")
    #: whether the first of the two keys (``--keys A,B``, ``default_keys``) names the input; False where the files'
    #: order puts the target first (the inverse Darcy task: ``coeff,sol``, the solution its input)
    input_first: ClassVar[bool] = True
    generator: ClassVar[Optional[str]] = None  # the pde recipe of the default data (None: the user's files only)
    options_class: ClassVar[type] = NoOptions
    #: whether the user's files may say where their points sit (``data.grid``, ``--grid node|cell``): the tasks on a
    #: square with walls, whose files may hold either grid; periodic problems have one kind of grid
    grid_choice: ClassVar[bool] = False
    #: whether a ``--resolution`` stride keeps both ends of the stored grid (found - 1 = s (wanted - 1), a grid with
    #: both walls) rather than dividing the points (found = s * wanted, periodic grids)
    resolution_keeps_ends: ClassVar[bool] = False
    #: short model name -> build_model dict or model preset name; run presets are f"{name}-{short}"
    models: ClassVar[dict] = {}
    #: defaults of the run presets: {"data": {...}, "train": {...}} over DataConfig / TrainConfig
    run_defaults: ClassVar[dict] = {}
    plot_labels: ClassVar[dict] = {"input": "input", "target": "target", "prediction": "prediction"}
    #: the symmetry augmentations (``train.augment``) that the problem and its data layout keep exactly; a task that
    #: lists one implements :meth:`augment`
    symmetries: ClassVar[tuple] = ()

    # --- presets ----------------------------------------------------------------------------------------------
    def model_train_overrides(self, short: str) -> dict:
        """Training settings that differ by model (e.g. no H1 term for FNO)."""
        return {}

    # --- data -------------------------------------------------------------------------------------------------
    def default_recipes(self, data: DataConfig, options) -> tuple[dict, Optional[dict]]:
        """Recipe overrides of the default training file and of a separate test file (or None)."""
        test = {**data.recipe, **data.test_recipe} if data.test_recipe else None
        return dict(data.recipe), test

    def load(self, data: DataConfig, options, files: dict, splits=("train", "val", "test"),
             normalizers: Optional[dict] = None, test_all: bool = False) -> Bundle:
        """Datasets of ``splits`` from ``files`` ({"train": path, "test": path or None}); normalizers fitted on the
        training split unless given.  ``test_all``: every sample of the file is a test sample (evaluation)."""
        raise NotImplementedError

    # --- model ------------------------------------------------------------------------------------------------
    def build_operator(self, model_cfg: dict, normalizers: dict, options) -> Operator:
        from ..models import build_model

        return Operator(build_model(model_cfg), normalizers.get("input"), normalizers.get("target"))

    #: the defaults of a model on small grids: (the model: its name, or {model field: value} the model config must
    #: have, e.g. its name and kind; the largest grid side, or (the smallest, the largest); {field: (the preset's
    #: value, the small grid's value)}); a
    #: field is changed only when it still has the preset's value and was not set; the first rule that changes a
    #: field wins
    small_grid_defaults: tuple = ()
    #: the same for fields of the ``train`` section: ({model field: value} that the model config must have, e.g.
    #: its name and kind, the largest grid side, {train field: (the preset's value, the small grid's value)})
    small_grid_train_defaults: tuple = ()
    #: rules (the model as in :attr:`small_grid_defaults`, the largest grid side): where one applies, an attention
    #: grid (``coarse_size``) larger than the data's grid becomes the whole grid instead of the automatic one
    whole_grid_attention: tuple = ()

    def fit_model(self, model_cfg: dict, bundle: Bundle, explicit: set) -> tuple[dict, list[str]]:
        """Adapt grid-dependent sizes of ``model_cfg`` to the data (spectral modes, attention grid, output grid, and
        the :attr:`small_grid_defaults` and :attr:`whole_grid_attention`).

        A size the user set explicitly (``explicit`` holds the field names) is never changed: when it does not fit,
        :class:`ConfigError` names its flag.  Returns the new config and notes on what was changed."""
        from ..models import MODELS

        cfg, notes = dict(model_cfg), []
        cls = MODELS[cfg["name"]]
        fields = {f.name for f in dataclasses.fields(cls.config_class)}
        if cls.spatial_dim != len(bundle.input_grid):
            raise ConfigError(f"model {cfg['name']} is {cls.spatial_dim}D but the data of task {self.name} is "
                              f"{len(bundle.input_grid)}D; choose a {len(bundle.input_grid)}D model")
        side = max(bundle.input_grid)
        done: set = set()
        changed: dict = {}
        for model, limit, values in self.small_grid_defaults:
            if not _rule_applies(model, limit, cfg, side):
                continue
            changed.update(_still_preset({k: v for k, v in values.items() if k in fields and k not in done}, cfg.get,
                                         explicit))
            done.update(values)
        if changed:
            notes.append(f"a small grid ({side} points a side): " + ", ".join(
                f"{k} {cfg.get(k)} -> {v}" for k, v in changed.items()) +
                f" (set {'it' if len(changed) == 1 else 'them'} to keep the preset's)")
            cfg.update(changed)
        if "out_size" in fields:
            want = bundle.target_grid[0] if bundle.target_grid != bundle.input_grid else None
            if cfg.get("out_size") != want:
                if "out_size" in explicit:
                    raise ConfigError(f"--out-size {cfg['out_size']} does not match the target grid "
                                      f"{bundle.target_grid} of the data")
                if "coarse_size" in fields and cfg.get("coarse_size") is not None and \
                        cfg.get("coarse_size") == cfg.get("out_size") and want is not None:
                    cfg["coarse_size"] = want  # the attention grid was tied to the output grid
                cfg["out_size"] = want
        if "coarse_size" in fields and cfg.get("coarse_size") is not None and cfg["coarse_size"] > bundle.input_grid[0]:
            if "coarse_size" in explicit:
                raise ConfigError(f"--coarse-size {cfg['coarse_size']} is larger than the input grid "
                                  f"{bundle.input_grid[0]}; choose at most {bundle.input_grid[0]}")
            n = bundle.input_grid[0]
            whole = any(_rule_applies(model, limit, cfg, n) for model, limit in self.whole_grid_attention)
            notes.append(f"attention grid {cfg['coarse_size']} -> {f'{n}, the whole grid,' if whole else 'automatic'} "
                         f"for a {n}-point grid")
            cfg["coarse_size"] = n if whole else None
        if "modes" in fields:
            limit = cls.max_modes(cls.config_class(**{k: v for k, v in cfg.items() if k != "name"}), bundle.input_grid)
            if limit < 1:
                raise ConfigError(f"the {bundle.input_grid} grid is too small for model {cfg['name']}")
            if cfg.get("modes", cls.config_class.modes) > limit:
                if "modes" in explicit:
                    raise ConfigError(f"--modes {cfg['modes']} needs a finer grid than the data's {bundle.input_grid}; "
                                      f"choose --modes {limit} or less")
                notes.append(f"spectral modes {cfg.get('modes')} -> {limit} to fit the {bundle.input_grid} grid")
                cfg["modes"] = limit
        if "levels" in fields and isinstance(cfg.get("levels"), int):
            # each level halves the grid (and doubles the width): past a grid of one cell a level only pads, and the
            # doubled widths exhaust the memory long before (U-Net, CNO)
            side_min = cfg.get("grid_size") or min(bundle.input_grid)
            most = max(int(side_min).bit_length() - 1, 0)  # floor(log2)
            if cfg["levels"] > most:
                if "levels" in explicit:
                    raise ConfigError(f"--levels {cfg['levels']} is too many for a grid of {side_min} points a side "
                                      f"(each level halves it); choose --levels {most} or less")
                notes.append(f"levels {cfg['levels']} -> {most} for a grid of {side_min} points a side")
                cfg["levels"] = most
        return cfg, notes

    @property
    def fitted_train_fields(self) -> tuple:
        """The train fields :meth:`fit_train` may set from the data's grid."""
        return tuple({k: None for _, _, values in self.small_grid_train_defaults for k in values})

    def fit_train(self, train_cfg, model_cfg: dict, bundle: Bundle, explicit: set) -> tuple[dict, list[str]]:
        """The fields of ``train_cfg`` that :attr:`small_grid_train_defaults` change for the model of ``model_cfg`` on
        the data's grid (a field the user set, or whose value is not the preset's, is kept), and a note on them."""
        side, changed = max(bundle.input_grid), {}
        for model, limit, values in self.small_grid_train_defaults:
            if _rule_applies(model, limit, model_cfg, side):
                changed.update(_still_preset(values, lambda k: getattr(train_cfg, k), explicit))
        if not changed:
            return {}, []
        return changed, [f"a grid of {side} points a side: " + ", ".join(
            f"{k} {getattr(train_cfg, k)} -> {v}" for k, v in changed.items()) +
            f" (set {', '.join(flag(k) for k in changed)} to keep the preset's)"]

    # --- symmetry augmentation ---------------------------------------------------------------------------------
    def check_augment(self, kind: str, bundle: Optional[Bundle] = None) -> None:
        """Refuse ``--augment kind`` (one line) when the task, or the data of ``bundle`` when given, does not have
        that symmetry."""
        if kind == "none":
            return
        if kind not in self.symmetries:
            have = f"it supports {', '.join(self.symmetries)}" if self.symmetries else "it has no symmetry listed"
            raise ConfigError(f"--augment {kind}: task {self.name} does not have that symmetry ({have}); "
                              "use --augment none")

    def augment(self, batch: dict, kind: str, generator: torch.Generator) -> dict:
        """A training batch mapped by one random element of the symmetry group ``kind`` per sample."""
        raise NotImplementedError(f"task {self.name} has no {kind} augmentation")

    # --- loss, metrics --------------------------------------------------------------------------------------------
    def loss(self, pred: Tensor, batch: dict, train: TrainConfig) -> tuple[Tensor, Tensor]:
        """(relative L2 error, regularizer), one value per sample; the training loss is their sum, averaged."""
        l2 = rel_l2(pred, batch["target"])
        return l2, torch.zeros_like(l2)

    # --- inference on arrays ----------------------------------------------------------------------------------------
    def inference_options(self, options, info: dict):
        """The task options a loaded model reads new data with (``info``: what its training data recorded)."""
        return options

    def inputs_from_array(self, x: np.ndarray, grid: str) -> tuple[Tensor, Tensor]:
        """A user's input array in the file layout, (samples, *grid) or (samples, *grid, channels), as the
        operator's ``(input, coords)``."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim == self.dim + 1:
            x = x[..., None]
        if x.ndim != self.dim + 2:
            shape = "n" if self.dim == 1 else ", ".join(f"n{i + 1}" for i in range(self.dim))
            one = f" (one sample: inputs[None], of shape {(1, *x.shape)})" if x.ndim == self.dim else ""
            raise ConfigError(f"inputs of task {self.name} must have shape (samples, {shape}[, channels]), "
                              f"got {x.shape}{one}")
        coords = torch.as_tensor(grid_coords(grid, x.shape[1:-1]), dtype=torch.float32)[None]
        return torch.from_numpy(np.ascontiguousarray(x)), coords


def _rule_applies(model, limit, model_cfg: dict, side: int) -> bool:
    """Whether a small-grid rule (``model``: a model name or {model field: value}; ``limit``: the largest grid side,
    or (the smallest, the largest)) applies to ``model_cfg`` on a grid of ``side`` points a side."""
    match = {"name": model} if isinstance(model, str) else model
    lo, hi = limit if isinstance(limit, tuple) else (1, limit)
    return lo <= side <= hi and all(model_cfg.get(k) == v for k, v in match.items())


def _still_preset(values: dict, current, explicit: set) -> dict:
    """{field: the small grid's value} for the fields of ``values`` ({field: (the preset's value, the small grid's
    value)}) that the user did not set and whose ``current(field)`` is still the preset's value."""
    return {k: new for k, (old, new) in values.items() if k not in explicit and current(k) == old}


# --- helpers for task modules ------------------------------------------------------------------------------------------
def model_table(experiment: str) -> dict:
    """short name -> model preset name, for every attention kind, both norm schemes, and FNO."""
    table = {}
    for short in ATTENTION_KINDS:
        table[short] = f"{experiment}-{short}"
        table[f"{short}-regular"] = f"{experiment}-{short}-regular"
    table["fno"] = f"{experiment}-fno"
    return table


def samples_last_hint(shape, dim: int) -> str:
    """A hint when a 2D task's (a, a, b) array (b != a) looks like b samples of a x a grids stored samples last (as
    MATLAB writes them), which reads as a samples of a x b grids; else ''."""
    shape = tuple(shape)
    if dim != 2 or len(shape) != 3 or shape[0] != shape[1] or shape[2] == shape[0]:
        return ""
    return (f"; if it holds {shape[2]} samples of {shape[0]}x{shape[1]} grids stored samples last, move that axis "
            "first (numpy.moveaxis(a, -1, 0))")


def open_pair(data: DataConfig, default_keys, files: dict, dim: int):
    """The training and test sources with their keys, checked to hold (samples, *grid[, 1]) arrays of one shape."""
    keys = keys_pair(data.keys, default_keys)
    train = open_source(files["train"], keys)
    test = train if files.get("test") is None else open_source(files["test"], keys)
    grid = None
    for src in {id(train): train, id(test): test}.values():
        shapes = []
        for key in keys:
            shape = src.shapes[key][1:]
            if len(shape) == dim + 1 and shape[-1] == 1:
                shape = shape[:-1]
            if len(shape) != dim:
                g = ", ".join(["n"] * dim)
                raise DataError(f"{src.describe()}: key {key!r} expected shape (samples, {g}) or (samples, {g}, 1), "
                                f"found {src.shapes[key]}")
            shapes.append(shape)
        if grid is None:
            grid = shapes[0]
        if src is test and test is not train and all(s == shapes[0] for s in shapes) and shapes[0] != grid:
            raise DataError(f"{src.describe()}: the test file's grid {shapes[0]} differs from the training file's "
                            f"{grid}; give test data on the training grid")
        if any(s != grid for s in shapes):
            raise DataError(f"{src.describe()}: keys {keys} must hold grids of one shape {grid}, found {shapes}")
    return keys, train, test, grid


def split_indices(data: DataConfig, train, test, test_all: bool) -> dict:
    if test_all:
        return {"test": np.arange(test.n_samples)}
    separate = test is not train
    return make_splits(train.n_samples, test.n_samples if separate else None, n_train=data.n_train,
                       n_val=data.n_val, n_test=data.n_test,
                       train_pool=data.train_pool, where=train.describe(), min_val=1, min_train=2)


# --- the registry ---------------------------------------------------------------------------------------------------------
def register_task(task: Task) -> Task:
    """Make ``task`` known by its name (replacing a task of the same name; a task of another class, from another
    module, is replaced with a warning naming both: two modules that register one name would otherwise decide by
    their import order which one trains)."""
    if not task.name:
        raise ValueError("a Task needs a name")
    old = _TASKS.get(task.name)
    if old is not None and _class_name(old) != _class_name(task):
        warnings.warn(f"task {task.name!r} of {_class_name(task)} replaces the one of {_class_name(old)}",
                      OpformerWarning, stacklevel=2)
    _TASKS[task.name] = task
    return task


def _class_name(task: Task) -> str:
    return f"{type(task).__module__}.{type(task).__qualname__}"


def unregister_task(name: str) -> None:
    """Forget the task ``name`` (e.g. one registered for a single experiment)."""
    _TASKS.pop(name, None)


def get_task(name: str) -> Task:
    _builtin()
    if name not in _TASKS:
        failed = "".join(f"; {why}" for why in _failed_entry_points)
        raise ConfigError(f"unknown task {name!r}{_near(name)}; known tasks: {', '.join(sorted(_TASKS))} (a task of "
                          f"your own: import its module first, or name it in {TASKS_VARIABLE}, docs/tasks.md){failed}")
    return _TASKS[name]


def list_tasks() -> list[str]:
    _builtin()
    return sorted(_TASKS)


def _near(name: str) -> str:
    hint = suggest(name, list(_TASKS))
    return hint.replace("--", "")


#: the environment variable naming the modules of the user's own tasks (comma-separated module names or .py files)
TASKS_VARIABLE = "OPFORMER_TASKS"
#: the entry-point group through which an installed package makes its tasks known
ENTRY_POINT_GROUP = "opformer.tasks"
_imported: set = set()  # the OPFORMER_TASKS entries and entry points imported so far
_entry_points_done = False  # whether every entry point of the group has been imported (looked up once a process)
_failed_entry_points: list = []  # why entry points failed to import (said once, and with an unknown task)


def _builtin() -> None:
    from . import burgers, darcy, darcy_inverse, trajectories  # noqa: F401  (each registers itself)

    for entry in os.environ.get(TASKS_VARIABLE, "").split(","):
        entry = entry.strip()
        if entry and entry not in _imported:
            _imported.add(entry)  # first: a module that looks a task up while it is imported does not import itself
            try:
                import_task_module(entry)
            except ConfigError as exc:
                _imported.discard(entry)
                raise ConfigError(f"{TASKS_VARIABLE}={os.environ[TASKS_VARIABLE]}: {exc}") from None
    _entry_points()


def _entry_points() -> None:
    """Import the task modules that installed packages declare in the ``opformer.tasks`` entry-point group
    (``[project.entry-points."opformer.tasks"] heat = "mypackage.heat"``), once each.  One that fails to import is
    said in a one-line warning and left out (an installed package's fault does not stop opformer's own tasks, nor
    the others'); a lookup of a task that is then unknown names it."""
    global _entry_points_done
    if _entry_points_done:
        return
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        key = f"entry point {ep.name} = {ep.value}"
        if key in _imported:
            continue
        _imported.add(key)
        try:
            ep.load()
        except Exception as exc:  # noqa: BLE001  (an installed package's own failure, told in one line)
            dist = getattr(getattr(ep, "dist", None), "name", None)
            why = (f"the {ENTRY_POINT_GROUP} entry point {ep.name} = {ep.value}"
                   f"{f' of the installed package {dist}' if dist else ''} failed to import: {_exception_line(exc)}")
            _failed_entry_points.append(why)
            warnings.warn(f"{why}; its tasks are left out", OpformerWarning, stacklevel=4)
    _entry_points_done = True


def _exception_line(exc: BaseException) -> str:
    line = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def import_task_module(name: str):
    """Import the module that registers a task of the user's own and return it: a module name (``heat_task``,
    ``mypackage.heat``; found on ``sys.path`` and in the working directory, as ``python -m`` finds one) or the path
    of a ``.py`` file.  A module that cannot be imported, or whose import fails, is told in one line naming it."""
    import importlib
    import importlib.util
    import sys

    name = str(name).strip()
    as_file = name.endswith(".py") or os.sep in name or (os.altsep is not None and os.altsep in name)
    try:
        if as_file:
            path = Path(name).expanduser().resolve()
            if not path.is_file():
                raise ConfigError(f"task module file {name} does not exist")
            mod_name = path.stem
            known = sys.modules.get(mod_name)
            if known is not None:
                if Path(getattr(known, "__file__", "") or "").resolve() == path:
                    return known  # imported already (under its own name, as a module name would import it)
                raise ConfigError(f"task module file {name}: another module named {mod_name} is imported already "
                                  f"({getattr(known, '__file__', None) or 'built in'}); rename the file")
            spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module  # under its name: dataclasses and pickling look their module up there
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(mod_name, None)
                raise
            return module
        if not all(part.isidentifier() for part in name.split(".")):
            raise ConfigError(f"task module {name!r} is neither a module name (such as my_tasks or "
                              "mypackage.heat) nor a .py file")
        cwd = os.getcwd()
        added = cwd not in sys.path and "" not in sys.path
        if added:
            sys.path.append(cwd)  # after the installed packages: the working directory never shadows them
        try:
            return importlib.import_module(name)
        finally:
            if added and cwd in sys.path:
                sys.path.remove(cwd)
    except ConfigError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == name or name.startswith(exc.name + ".")):
            raise ConfigError(f"no task module {name!r} (not on the Python path nor in the working directory "
                              f"{os.getcwd()}; give its .py file or add its folder to PYTHONPATH)") from None
        raise ConfigError(f"task module {name} failed to import: {_exception_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001  (the user's module's own error, told in one line)
        raise ConfigError(f"task module {name} failed to import: {_exception_line(exc)}") from None


def task_module_of(task: Task) -> Optional[str]:
    """The module a registered task's class is defined in, as a user would import it (None for a built-in task or a
    class defined in a script run directly)."""
    module = type(task).__module__
    return None if module.startswith("opformer.") else module


# --- default data: generated once and cached ---------------------------------------------------------------------------
def cache_dir() -> Path:
    """Where generated data sets are cached: ``$OPFORMER_DATA`` or ``~/.cache/opformer/data``."""
    return Path(os.environ.get("OPFORMER_DATA", Path.home() / ".cache" / "opformer" / "data"))


def _cached(generator: str, overrides: dict, workers, generate: bool = True) -> Optional[Path]:
    from ..pde.generate import ensure_dataset, make_recipe

    recipe = make_recipe(generator, **overrides)
    key = hashlib.sha1(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:10]
    path = cache_dir() / f"{recipe['problem']}-{recipe['resolution']}-{recipe['n_samples']}-{key}.h5"
    if not generate:
        return path if path.exists() else None
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))
    if rank != 0:  # the first process generates; the others wait for the complete file (written atomically)
        # ... but not forever: rank 0 may have failed.  The clock restarts whenever its FILE.partial grows or
        # changes, so a long generation that makes progress is waited for.
        try:
            limit = float(os.environ.get("OPFORMER_DATA_WAIT", 1800))
        except ValueError:
            raise ConfigError(f"OPFORMER_DATA_WAIT: expected seconds, got {os.environ['OPFORMER_DATA_WAIT']!r}") from None
        partial = path.with_name(path.name + ".partial")
        seen, since = None, time.monotonic()
        while not path.exists():
            try:
                st = partial.stat()
                state = (st.st_size, st.st_mtime_ns)
            except OSError:
                state = None
            if state != seen:
                seen, since = state, time.monotonic()
            elif time.monotonic() - since > limit:
                raise DataError(
                    f"process {rank} waited {limit:g} s for the first process to write the data file {path} and saw "
                    "no progress: the first process has probably failed (see its output). Generate the file "
                    "beforehand with `opformer data prepare PRESET`, or set OPFORMER_DATA_WAIT (seconds) to wait longer"
                )
            time.sleep(min(2.0, max(limit / 10, 0.01)))
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # OPFORMER_DATA naming a file, or a place below one, or one that cannot be written
        where = "OPFORMER_DATA=" if "OPFORMER_DATA" in os.environ else "the data cache "
        raise DataError(f"{where}{path.parent}: cannot create the data cache directory ({exc.strerror or exc}); set "
                        "OPFORMER_DATA to a writable directory") from None
    if not _builtin_recipe(generator):  # worker processes start afresh: they know opformer's own recipes only
        if workers is not None and int(workers) > 1:
            raise ConfigError(f"--workers {workers}: the recipe {generator!r} of a task module is computed in this "
                              "process (worker processes know opformer's own recipes only); leave --workers out")
        workers = 1
    return ensure_dataset(generator, path, workers=workers, **overrides)


def _builtin_recipe(generator: str) -> bool:
    """Whether the recipe kind ``generator`` is one of opformer's own (not registered by a user's module)."""
    from ..pde.generate import RECIPES

    kind = RECIPES.get(generator)
    return kind is not None and getattr(kind.compute, "__module__", "").startswith("opformer.")


def ensure_files(task: Task, data: DataConfig, options, generate: bool = True) -> Optional[dict]:
    """``{"train": path, "test": path or None}``: the user's files, or the task's default data, generated and cached
    on first use.  With ``generate=False`` nothing is generated: None when the default data is not cached yet."""
    if data.path is not None:
        return {"train": Path(data.path), "test": Path(data.test_path) if data.test_path else None}
    if task.generator is None:
        raise ConfigError(f"task {task.name} has no default data: give a data file with --data")
    train, test = task.default_recipes(data, options)
    if data.resolution is not None:  # refused now, not after minutes of generating the data it is no stride of
        from ..data.datasets import stride_for
        from ..pde.generate import make_recipe

        for overrides in (train, test):
            if overrides is not None:
                n = make_recipe(task.generator, **overrides)["resolution"]
                stride_for(n, data.resolution, nodes=task.resolution_keeps_ends,
                           where=f"the default data of task {task.name}")
    files = {"train": _cached(task.generator, train, data.workers, generate),
             "test": None if test is None else _cached(task.generator, test, data.workers, generate)}
    if files["train"] is None or (test is not None and files["test"] is None):
        return None
    return files


def options_from(task: Task, values: dict):
    """The task's options dataclass from a dict, typed and checked."""
    from ..config import check_section

    return check_section(task.options_class, values or {}, "task")
