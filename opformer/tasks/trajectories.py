"""Time-dependent tasks: learn the solution operator S(tau, u(t_i)) = u(t_i + tau) from trajectories (the lecture).

Data: a trajectory array (samples, K+1, *grid[, 1]) under ``--keys KEY`` and its snapshot times: the file's
``t`` array (opformer files store it), else ``--dt`` times the snapshot index.  Other layouts are read through
``--time-axis`` (the axis of the snapshots, e.g. -1 for (samples, *grid, K)) and ``--initial-key`` (an array
(samples, *grid) of the states at t = 0, put before the snapshots), one block of samples at a time.  Splits are
by trajectory, never by pair, so no trajectory is in two splits; the normalizer (one mean and standard deviation
for the field, valid at any resolution) is fitted on the training trajectories.

Pairs: training uses ``--pairs all2all`` (every (t_i, t_j) with i < j, or i <= j with ``--include-zero``: (K^2+K)/2
per trajectory) or ``one-at-a-time`` ((t_0, t_k), K per trajectory); validation and test are always the direct
predictions (t_0, t_k) of every stored time.  ``--max-time T`` trains and validates only on snapshots with t <= T,
so that the times beyond are out of distribution at test time.  Each item carries ``lead_time`` = t_j - t_i; the
model is lead-time conditioned (``time_conditioning``: conditioned norms by default, or tau as an input channel).
``--residual`` makes the model predict u(t_j) - u(t_i).
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Literal, Optional, Union

import numpy as np
import torch
from torch import Tensor

from ..config import ConfigError, OpformerWarning, opt
from ..data.datasets import SplitArrays, UnitGaussianNormalizer, indices_on, make_splits, stride_for
from ..data.readers import load_arrays, open_source
from ..pde.errors import DataError, MissingKeyError
from .base import Bundle, Operator, Task, grid_coords, register_task
from .darcy import SCALABLE_2D


@dataclasses.dataclass
class TrajectoryOptions:
    pairs: Literal["all2all", "one-at-a-time"] = opt("all2all", "training pairs: all (t_i, t_j) with i < j, or "
                                                                "(t_0, t_k) only")
    include_zero: bool = opt(False, "all2all also trains the identity pairs i = j (tau = 0)")
    residual: bool = opt(False, "predict u(t_j) - u(t_i) instead of u(t_j)")
    max_time: Optional[float] = opt(None, "train and validate on snapshots with t <= max_time only (null: all)",
                                    above=0.0)
    history: int = opt(1, "input snapshots: 1 = u(t_i) with the lead time; H > 1 = the FNO paper's protocol, the last "
                          "H snapshots as channels -> the next one, rolled out recurrently", min=1)
    time_key: str = opt("t", "name of the snapshot times in the file: an array (K+1,) or an HDF5 attribute")
    dt: float = opt(1.0, "time between snapshots when the file stores no times", above=0.0)
    time_axis: Union[int, Literal["last"]] = opt(1, "the axis of the trajectory array that holds the snapshots: 1 for "
                                                    "(samples, K+1, *grid), -1 or last for (samples, *grid, K)")
    initial_key: Optional[str] = opt(None, "an array (samples, *grid) of each trajectory's state at t = 0, put "
                                           "before its snapshots, whose times must then all be > 0 (null: the "
                                           "first snapshot is the initial state)")

    def __post_init__(self):
        if not self.time_key.strip():  # h5py would fail on it with its own error, deep in the data loading
            raise ConfigError("--time-key: must not be empty (the name of the array or HDF5 attribute that holds "
                              "the snapshot times, e.g. t)")
        if self.time_axis == "last":  # stored as the number it stands for
            self.time_axis = -1
        if self.time_axis == 0:
            raise ConfigError("--time-axis 0 is the axis of the trajectories (samples); give the axis of the "
                              "snapshots: 1 (the default) or -1 (the last)")
        if self.initial_key is not None and not self.initial_key.strip():
            raise ConfigError("--initial-key: must not be empty (the name of the array of the states at t = 0, "
                              "e.g. a); leave it out where the first snapshot is the initial state")


def file_layout(options, *, time_key: Optional[str] = None, time_axis=None, initial_key: Optional[str] = None):
    """A trained model's task ``options`` for reading another file: its ``time_key``, ``time_axis`` (an integer, or
    its text from the command line) and ``initial_key`` (``""``, ``none`` or ``null``: the file has none, its first
    snapshot is the initial state) where given (None: the training's).  The marks of :func:`trained_times` are
    kept."""
    from ..config import coerce

    changes = {}
    if time_key is not None:
        changes["time_key"] = time_key
    if time_axis is not None:
        if isinstance(time_axis, np.integer):
            time_axis = int(time_axis)
        changes["time_axis"] = coerce(TrajectoryOptions, "time_axis", time_axis)
    if initial_key is not None:
        if not isinstance(initial_key, str):
            raise ConfigError(f"--initial-key: expected the name of an array (or none), got {initial_key!r}")
        changes["initial_key"] = None if initial_key.strip().lower() in ("", "none", "null") else initial_key
    if not changes:
        return options
    out = dataclasses.replace(options, **changes)  # checked as the training's values are
    for mark in (_TRAINED_TIMES, _TIME_KEY_NAMED):
        if hasattr(options, mark):
            setattr(out, mark, getattr(options, mark))
    return out


def _axis_flag(options) -> str:
    return f"--time-axis {options.time_axis}"


class _MovedTrajectories:
    """The trajectory array ``key`` of a file whose snapshots lie on another axis than 1, or whose initial states are
    a separate array ``initial_key``, read as (samples, K+1, *grid[, 1]) one block of samples at a time: the
    snapshot axis is moved to position 1 and the initial states put before the snapshots.  Everything else is the
    file's source's (:class:`opformer.data.readers.ArraySource`)."""

    def __init__(self, src, key: str, axis: int, initial, initial_key: Optional[str], options):
        self._src, self._initial = src, initial
        self.key, self.axis, self.initial_key, self.options = key, axis, initial_key, options
        self.file_shape = tuple(src.shapes[key])
        moved = (self.file_shape[0], self.file_shape[axis],
                 *(n for i, n in enumerate(self.file_shape) if i not in (0, axis)))
        self.file_times = moved[1]  # the snapshots the file holds (without the initial states)
        self.keys = (key,)
        self.shapes = {key: (moved[0], moved[1] + (initial is not None), *moved[2:])}

    def __getattr__(self, name):
        return getattr(self._src, name)

    def layout(self) -> str:
        """How the file is read, in flags: ``--time-axis -1 --initial-key a``."""
        parts = [] if self.axis == 1 else [_axis_flag(self.options)]
        return " ".join(parts + ([f"--initial-key {self.initial_key}"] if self.initial_key else []))

    def check_initial(self) -> None:
        """The initial states: one per trajectory, on the trajectories' grid (a channel axis of 1 on either side
        aside)."""
        if self._initial is None:
            return
        ik, key = self.initial_key, self.key
        ishape = tuple(self._initial.shapes[ik])
        where = self._src.describe()
        if ishape[0] != self.file_shape[0]:
            raise DataError(f"{where}: --initial-key {ik!r} holds {ishape[0]} initial states (shape {ishape}), the "
                            f"trajectories {key!r} {self.file_shape[0]} (shape {self.file_shape}): give one state at "
                            "t = 0 per trajectory")
        grid = self.shapes[key][2:]
        if ishape[1:] not in (grid, grid + (1,)) and ishape[1:] + (1,) != grid:
            bare = grid[:-1] if len(grid) > 1 and grid[-1] == 1 else grid
            raise DataError(f"{where}: --initial-key {ik!r} has shape {ishape}, expected "
                            f"{(self.file_shape[0], *bare)}: one state on the grid of the snapshots of {key!r} "
                            f"(shape {self.file_shape}, {_axis_flag(self.options)})")

    def read(self, key: str, indices) -> np.ndarray:
        w = np.moveaxis(self._src.read(key, indices), self.axis, 1)  # a view: no copy
        if self._initial is None:
            return w
        out = np.empty((w.shape[0], w.shape[1] + 1, *w.shape[2:]), dtype=w.dtype)
        out[:, 0] = self._initial.read(self.initial_key, indices).reshape(w.shape[0], *w.shape[2:])
        out[:, 1:] = w
        return out


def open_trajectories(path, key: str, options):
    """The trajectory array ``key`` of ``path`` as a source of (samples, K+1, *grid[, 1]) arrays: the file's own
    (:func:`opformer.data.readers.open_source`) in the default layout, else read through ``options.time_axis``
    and ``options.initial_key`` (see :class:`_MovedTrajectories`; call its ``check_initial`` once the trajectories'
    shape is checked)."""
    initial_key = getattr(options, "initial_key", None)
    time_axis = getattr(options, "time_axis", 1)
    if initial_key is not None and initial_key == key:
        raise ConfigError(f"--initial-key {initial_key} names the trajectory array itself (--keys {key}); give the "
                          "array of the states at t = 0, or leave --initial-key out where the first snapshot is the "
                          "initial state")
    src = open_source(path, (key,))
    if time_axis == 1 and initial_key is None:
        return src
    shape = tuple(src.shapes[key])
    axis = time_axis + len(shape) if time_axis < 0 else time_axis
    if not 1 <= axis < len(shape):
        span = (f"1 to {len(shape) - 1} (or -1 to -{len(shape) - 1})" if len(shape) > 2 else
                "1 (or -1)" if len(shape) == 2 else "none")
        raise DataError(f"{src.describe()}: --time-axis {time_axis} is out of range for key {key!r} of shape "
                        f"{shape}: the snapshots lie on axis {span}; axis 0 holds the trajectories")
    initial = None
    if initial_key is not None:
        try:
            initial = open_source(path, (initial_key,))
        except MissingKeyError as exc:
            held = f"; available keys: {exc.available}" if exc.available is not None else ""
            raise DataError(f"{src.describe()}: no array {initial_key!r} (--initial-key) holds the initial states"
                            f"{held}") from None
    return _MovedTrajectories(src, key, axis, initial, initial_key, options)


def shown_shape(src, key: str) -> str:
    """The shape of the trajectories of ``src`` for messages: the file's, and how it is read where that differs."""
    if not isinstance(src, _MovedTrajectories):
        return str(tuple(src.shapes[key]))
    return f"{src.file_shape}, read as {tuple(src.shapes[key])} ({src.layout()})"


def check_initial(src) -> None:
    """The initial states of a source of :func:`open_trajectories` checked against its trajectories (nothing to
    check for a file read in the default layout)."""
    if isinstance(src, _MovedTrajectories):
        src.check_initial()


def _stored_count(src, n_times: int) -> int:
    """How many of ``n_times`` snapshots the file itself holds times for (the initial states come without)."""
    return n_times - 1 if isinstance(src, _MovedTrajectories) and src.initial_key is not None else n_times


def time_last_hint(path, key: str, src, options) -> str:
    """For a trajectory array of ``src`` read with its snapshots on axis 1 that looks stored with them last,
    (samples, n, n, T) or with times as long as its last axis: '; ... --time-axis -1 ...', naming also an array of
    the file that could hold the initial states (samples, *grid) where no --initial-key is given; else ''."""
    shape = tuple(getattr(src, "file_shape", src.shapes[key]))
    if getattr(options, "time_axis", 1) != 1 or len(shape) < 3:
        return ""
    arrays = _array_shapes(path)
    times = arrays.get(options.time_key)
    times_last = times is not None and int(np.prod(times)) == shape[-1] != shape[1]
    square_last = len(shape) == 4 and shape[1] == shape[2] != shape[3]
    if not (times_last or square_last):
        return ""
    grid = tuple(shape[1:-1])
    text = (f"; it looks stored with its {shape[-1]} snapshots last (samples, {', '.join(map(str, grid))}, times): "
            "--time-axis -1 reads it so")
    initial = [name for name, s in arrays.items() if name != key and tuple(s) in ((shape[0], *grid),
                                                                                  (shape[0], *grid, 1))]
    if initial and getattr(options, "initial_key", None) is None:
        text += (f", and --initial-key {initial[0]} puts the states of {initial[0]!r} {tuple(arrays[initial[0]])} "
                 "before them as those at t = 0")
    return text


def stored_times(path, src, key: str, time_key: str) -> Optional[np.ndarray]:
    """The snapshot times a file stores, or None: the array ``time_key``, an HDF5 attribute ``time_key`` of the
    trajectory dataset ``key``, of a group holding it or of the file, an array ``time_key`` in a group holding it,
    else an opformer file's ``t``.  With initial states of their own (``--initial-key``) the file's times, all > 0
    and one per snapshot of the file, come after a first time 0."""
    times = _file_times(path, src, key, time_key)
    if times is None or not isinstance(src, _MovedTrajectories) or src.initial_key is None:
        return times
    ik = src.initial_key
    if (np.isfinite(times) & (times <= 0)).any():
        shown = ", ".join(f"{t:g}" for t in times.reshape(-1)[:3]) + (", ..." if times.size > 3 else "")
        raise DataError(f"{path}: the times {time_key!r} (--time-key) are {shown}, but the states of --initial-key "
                        f"{ik} are those at t = 0, before the snapshots of {key!r}, whose times must then all be > 0; "
                        f"leave --initial-key {ik} out where {key!r} holds the initial state itself")
    if times.shape != (src.file_times,):
        raise DataError(f"{path}: the times {time_key!r} (--time-key) are {times.size} values, the snapshots of "
                        f"{key!r} {src.file_times} (shape {src.file_shape}, {_axis_flag(src.options)}): give one time "
                        f"per snapshot (the states of --initial-key {ik} are at t = 0)")
    return np.concatenate([[0.0], times])


def _file_times(path, src, key: str, time_key: str) -> Optional[np.ndarray]:
    """The times of :func:`stored_times` as the file holds them."""
    if time_key == "t" and "t" in src.coords:
        return np.asarray(src.coords["t"], dtype=np.float64).reshape(-1)
    try:
        raw = load_arrays(path, (time_key,))[time_key]
    except DataError as exc:
        if _names_an_array(path, time_key):  # there, but not numbers the times can be: say why, not "no array"
            raise DataError(f"{exc} (the snapshot times, --time-key {time_key})") from None
        raw = None
    if raw is not None:
        return _one_time_axis(raw, path, time_key)
    if str(path).endswith((".h5", ".hdf5")):
        import h5py

        with h5py.File(path, "r") as h5:
            # the trajectory dataset's attribute, then its groups' from the nearest up (an array of that name beside
            # the dataset in a group too), then the file's
            parts = key.strip("/").split("/")
            groups = ["/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
            for obj in (h5.get(key), *(h5.get(g) for g in groups), h5):
                if obj is not None and time_key in obj.attrs:
                    return _one_time_axis(obj.attrs[time_key], path, time_key)
                if obj is not None and obj is not h5 and isinstance(obj, h5py.Group) and "/" not in time_key \
                        and isinstance(obj.get(time_key), h5py.Dataset):
                    return _one_time_axis(obj[time_key][()], path, f"{obj.name.strip('/')}/{time_key}")
    if "t" in src.coords:
        return np.asarray(src.coords["t"], dtype=np.float64).reshape(-1)
    return None


def _array_shapes(path) -> dict:
    """{name: shape} of the arrays of ``path`` ({} for a file that cannot be listed): for the notes on times."""
    from ..data.readers import describe_arrays

    try:
        return {name: shape for name, shape, _ in describe_arrays(path)}
    except DataError:
        return {}


def _names_an_array(path, name: str) -> bool:
    return name in _array_shapes(path)


def _one_time_axis(values, path, time_key: str) -> np.ndarray:
    """Stored times as one axis: a vector, or a (trajectories, times) array whose rows are all the same times (the
    snapshot times are shared by all trajectories)."""
    raw = np.asarray(values)
    if not (np.issubdtype(raw.dtype, np.integer) or np.issubdtype(raw.dtype, np.floating)):  # text, bool, complex
        kind = {"U": "text", "S": "text", "b": "booleans", "c": "complex numbers"}.get(raw.dtype.kind, str(raw.dtype))
        shown = f" {raw.tolist()!r}"[:60] if raw.size <= 5 else f" of shape {raw.shape}"
        raise DataError(f"{path}: the times {time_key!r} must be numbers, one per snapshot, found {kind}{shown}")
    t = raw.astype(np.float64)
    if t.ndim == 2 and t.shape[0] >= 1 and np.array_equal(t, np.broadcast_to(t[:1], t.shape)):
        return t[0]
    if t.ndim > 2 and t.size != max(t.shape):  # a field, not times: no rows to compare
        raise DataError(f"{path}: the times {time_key!r} have shape {t.shape}: give one time axis (one value per "
                        "snapshot) or a (trajectories, times) array whose rows are all the same")
    if t.ndim > 1 and t.size != max(t.shape):
        raise DataError(f"{path}: the times {time_key!r} have shape {t.shape}: give one time axis shared by every "
                        "trajectory (its rows differ)")
    return t.reshape(-1)


def _time_attributes(path, key: str, n_times: int) -> list[str]:
    """The HDF5 attributes of ``n_times`` values that ``--time-key`` can name for the trajectory dataset ``key``
    (where :func:`stored_times` looks: the dataset's, its groups' from the nearest up, the file's); ``[]`` for
    other files."""
    if not str(path).endswith((".h5", ".hdf5")):
        return []
    import h5py

    names: list[str] = []
    try:
        with h5py.File(path, "r") as h5:
            parts = key.strip("/").split("/")
            groups = ["/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
            for obj in (h5.get(key), *(h5.get(g) for g in groups), h5):
                if obj is None:
                    continue
                for name in obj.attrs:
                    try:
                        size = np.asarray(obj.attrs[name]).size
                    except (OSError, TypeError, ValueError):  # an attribute h5py cannot read as values
                        continue
                    if size == n_times and name not in names:
                        names.append(name)
    except OSError:
        return []
    return names


def _time_candidates(path, key: str, n_times: int) -> list[str]:
    """The arrays (other than ``key``) of ``path`` that hold ``n_times`` values per row, then its HDF5 attributes of
    ``n_times`` values: what ``--time-key`` could name."""
    names = [name for name, shape in _array_shapes(path).items()
             if name != key and len(shape) in (1, 2) and shape[-1] == n_times]
    return names + [name for name in _time_attributes(path, key, n_times) if name not in names]


def time_array_hint(path, key: str, n_times: int) -> str:
    """'; the file has 'times' of N values: --time-key times names them' for the arrays of ``path`` (other than
    ``key``) and its HDF5 attributes that hold ``n_times`` values, else ''."""
    names = _time_candidates(path, key, n_times)
    if not names:
        return ""
    return f"; the file has {', '.join(repr(n) for n in names[:3])} of {n_times} values: --time-key {names[0]} names them"


def _missing_time_key(path, key: str, n_times: int, time_key: str) -> str:
    """The error for a ``--time-key`` that names nothing in ``path``, with what the file has instead: the arrays or
    attributes of ``n_times`` values, else its arrays."""
    names = _time_candidates(path, key, n_times)
    if names:
        found = (f"; the file has {', '.join(repr(n) for n in names[:5])} of {n_times} values (one per snapshot): "
                 f"--time-key {names[0]} names them")
    else:
        arrays = list(_array_shapes(path))
        found = (f"; its arrays: {', '.join(repr(n) for n in arrays[:10])}{' ...' if len(arrays) > 10 else ''}, none "
                 f"of {n_times} values (one per snapshot)" if arrays else "")
    return f"{path}: no array or HDF5 attribute {time_key!r} (--time-key) holds the snapshot times{found}"


def _snapshot_times(path, src, options, n_times: int, key: str, fitting: bool) -> np.ndarray:
    """The times of the snapshots: the array or HDF5 attribute ``--time-key`` (an opformer file's ``t``), else
    ``--dt`` times the snapshot index.  A ``--time-key`` the user named for training (``fitting``) must exist."""
    times = stored_times(path, src, key, options.time_key)
    if times is not None:
        return times
    if fitting and options.time_key != "t":
        raise DataError(f"{_missing_time_key(path, key, _stored_count(src, n_times), options.time_key)}; leave "
                        "--time-key out and give "
                        "--dt when the file stores none")
    warnings.warn(f"{path} stores no snapshot times (no array or attribute {options.time_key!r}, --time-key): the "
                  f"snapshots are taken {options.dt:g} apart (--dt)"
                  f"{time_array_hint(path, key, _stored_count(src, n_times))}",
                  OpformerWarning, stacklevel=2)
    return np.arange(n_times) * options.dt


def _checked_times(where, times: np.ndarray, n_times: int, time_key: str, hint=None) -> np.ndarray:
    """``times`` if they are ``n_times`` increasing values, else a DataError naming ``where`` and ``time_key`` (and
    what ``hint()`` says where their count is not the snapshots')."""
    if times.shape != (n_times,):
        raise DataError(f"{where}: the times {time_key!r} must be {n_times} increasing values (one per snapshot), "
                        f"found an array of shape {times.shape}{hint() if hint is not None else ''}")
    if not np.isfinite(times).all():
        i = int(np.flatnonzero(~np.isfinite(times))[0])
        raise DataError(f"{where}: the times {time_key!r} must be finite, found {times[i]:g} (snapshot {i})")
    bad = np.flatnonzero(np.diff(times) <= 0)
    if bad.size:
        i = int(bad[0])
        raise DataError(f"{where}: the times {time_key!r} must be increasing, found {times[i + 1]:g} (snapshot "
                        f"{i + 1}) after {times[i]:g} (snapshot {i})")
    return times


def even_step(times) -> Optional[float]:
    """The spacing of evenly spaced increasing ``times`` (to 1e-6 relative), else None."""
    steps = np.diff(np.asarray(times, dtype=np.float64))
    if len(steps) and np.allclose(steps, steps[0], rtol=1e-6, atol=0.0) and steps[0] > 0:
        return float(steps[0])
    return None


#: the attributes (not fields: no flags, not stored) of a trained model's task options that carry, for reading another
#: file, its training snapshot times and whether the user named the --time-key of that file
_TRAINED_TIMES, _TIME_KEY_NAMED = "_trained_times", "_time_key_named"


def trained_times(options, times, named: bool = False):
    """Mark ``options`` (a trained model's task options, modified in place and returned) with the training snapshot
    ``times``: a file the model is evaluated on that stores no times is then read at those (as its rollouts read
    one); ``named``: the user gave its ``time_key`` (``opformer eval --time-key``), which must then name the file's
    times."""
    if times is not None:
        setattr(options, _TRAINED_TIMES, [float(t) for t in times])
    if named:
        setattr(options, _TIME_KEY_NAMED, True)
    return options


def rollout_times(path, src, key: str, n_times: int, options, trained, named: bool = False) -> np.ndarray:
    """The snapshot times of a file a trained model rolls out on: the times it stores (``options.time_key``: the
    training's ``--time-key``, or ``t``, or one the user ``named``, which must exist), else the training times
    (``trained``), continued at their spacing where the file has more snapshots, with a note."""
    times = stored_times(path, src, key, options.time_key)
    if times is None:
        if named:
            raise DataError(_missing_time_key(path, key, _stored_count(src, n_times), options.time_key))
        trained = np.asarray(trained, dtype=np.float64)
        step = even_step(trained)
        if n_times > len(trained) and step is None:  # refused before any note that the training times are taken
            raise DataError(f"{path}: {n_times} snapshots and no times ({options.time_key!r}, --time-key); the model "
                            f"was trained on {len(trained)} unevenly spaced times, so the later ones are unknown: "
                            f"store the times in the file{time_array_hint(path, key, _stored_count(src, n_times))}")
        warnings.warn(f"{path} stores no snapshot times (no array or attribute {options.time_key!r}, --time-key): its "
                      f"snapshots are taken at the training times"
                      f"{time_array_hint(path, key, _stored_count(src, n_times))}",
                      OpformerWarning, stacklevel=3)
        times = trained[:n_times] if n_times <= len(trained) else trained[0] + step * np.arange(n_times)
    return _checked_times(path, times, n_times, options.time_key,
                          lambda: time_last_hint(path, key, src, options))


def make_pairs(n_traj: int, allowed: np.ndarray, strategy: str, include_zero: bool) -> np.ndarray:
    """(trajectory, i, j) triples: all2all (i < j, or i <= j) or one-at-a-time (0, k) over snapshot indices
    ``allowed`` (ascending, starting at 0)."""
    allowed = [int(k) for k in allowed]
    if strategy == "one-at-a-time":
        ij = [(allowed[0], k) for k in allowed[1:]]
    elif strategy == "all2all":
        ij = [(a, b) for x, a in enumerate(allowed) for b in allowed[x if include_zero else x + 1:]]
    else:
        raise ConfigError(f"--pairs must be all2all or one-at-a-time, got {strategy!r}")
    return np.array([(t, i, j) for t in range(n_traj) for i, j in ij], dtype=np.int64).reshape(-1, 3)


class PairDataset(torch.utils.data.Dataset):
    """Items ``{"input": u(t_i), "target": u(t_j), "coords", "lead_time": t_j - t_i}`` from stored trajectories
    (traj, K+1, *grid, c) and (traj, i, j) triples.  With ``history`` H > 1 the input is the snapshots i-H+1..i
    side by side in the channel axis, the target snapshot i+1, and there is no lead time (the FNO protocol)."""

    def __init__(self, trajectories: np.ndarray, times: np.ndarray, pairs: np.ndarray, coords: np.ndarray,
                 history: int = 1, origin: Optional[tuple] = None):
        self.traj = torch.as_tensor(np.ascontiguousarray(trajectories), dtype=torch.float32)
        self.times = torch.as_tensor(np.asarray(times, dtype=np.float64))
        self.pairs = torch.as_tensor(pairs)
        self.coords = torch.as_tensor(coords, dtype=torch.float32)
        self.history = int(history)
        self.origin = origin  # (the trajectories' numbers in their file, the file's short name)

    def describe(self, k: int) -> str:
        """Item ``k`` in the user's terms: its trajectory (by number in the file when the origin is known) and the
        snapshots it maps between."""
        t, i, j = (int(v) for v in self.pairs[k])
        traj = f"trajectory {t} of the split" if self.origin is None else (
            f"trajectory {int(self.origin[0][t])} of {self.origin[1]}")
        return f"{traj}, snapshot {i} -> {j}"

    def __len__(self) -> int:
        return int(self.pairs.shape[0])

    def __getitem__(self, k: int) -> dict:
        t, i, j = (int(v) for v in self.pairs[k])
        if self.history > 1:
            window = self.traj[t, i - self.history + 1 : i + 1]  # (H, *grid, c) -> (*grid, H * c)
            return {"input": torch.cat(window.unbind(0), dim=-1), "target": self.traj[t, j], "coords": self.coords}
        return {"input": self.traj[t, i], "target": self.traj[t, j], "coords": self.coords,
                "lead_time": (self.times[j] - self.times[i]).float()}

    def batch(self, indices) -> dict:
        """Items ``indices`` as one batch: what stacking them gives, gathered with one indexing per array (on the
        device the arrays are on, see :meth:`on_device`)."""
        device = self.traj.device
        idx = indices_on(indices, device)
        t, i, j = self.pairs[idx].unbind(1)
        b = int(idx.shape[0])
        coords = self.coords.unsqueeze(0).expand(b, *self.coords.shape).contiguous()
        if self.history > 1:
            offsets = torch.arange(1 - self.history, 1, device=device)
            window = self.traj[t[:, None], i[:, None] + offsets]  # (B, H, *grid, c) -> (B, *grid, H * c)
            return {"input": window.movedim(1, -2).flatten(-2), "target": self.traj[t, j], "coords": coords}
        return {"input": self.traj[t, i], "target": self.traj[t, j], "coords": coords,
                "lead_time": (self.times[j] - self.times[i]).float()}

    def nbytes(self) -> int:
        """The bytes its arrays take."""
        return sum(v.numel() * v.element_size() for v in (self.traj, self.times, self.pairs, self.coords))

    def on_device(self, device) -> "PairDataset":
        """The same items with the trajectories, times and pairs copied to ``device`` once; :meth:`batch` then
        gathers there."""
        moved = copy.copy(self)
        for name in ("traj", "times", "pairs", "coords"):
            setattr(moved, name, getattr(self, name).to(device))
        return moved

    def tensors(self, name: str) -> Tensor:
        return torch.stack([self[k][name] for k in range(len(self))])

    def snapshots(self) -> tuple[Tensor, list]:
        """The stored trajectories and the distinct (trajectory, snapshot) pairs used as targets (for the data
        checks of :func:`opformer.data.datasets.suspicious_samples`)."""
        used = sorted({(int(t), int(j)) for t, _, j in self.pairs.tolist()})
        return self.traj, used


class TrajectoryOperator(Operator):
    """The operator of a time-dependent task: ``(u(t), coords, tau) -> u(t + tau)`` in physical units."""

    def __init__(self, model, normalizers: dict, residual: bool):
        super().__init__(model, normalizers.get("input"), normalizers.get("target"))
        self.residual = bool(residual)

    def forward(self, input: Tensor, coords: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
        if not self.residual:
            return super().forward(input, coords, lead_time)
        x = self.input_normalizer.encode(input, coords)
        y = self.call_model(x, coords, lead_time)
        return input + y * self.target_normalizer._fields(y, None)[1]  # u_i + std * (model output)


class TrajectoryTask(Task):
    """A time-dependent problem; subclasses set name, dim, default_keys, generator, models and run_defaults."""

    options_class = TrajectoryOptions
    plot_labels = {"input": "u(t_0)", "target": "u(t)", "prediction": "prediction"}

    def load(self, data, options, files, splits=("train", "val", "test"), normalizers=None, test_all=False):
        if normalizers is None and options.include_zero and (options.pairs != "all2all" or options.history > 1):
            # training only: a trained model's options are read back as they were
            which = f"--history {options.history}" if options.history > 1 else f"--pairs {options.pairs}"
            raise ConfigError(f"--include-zero adds the pairs (t_i, t_i) to --pairs all2all; {which} trains no such "
                              "pairs, so it would do nothing: leave it out")
        keys = list(data.keys) if data.keys else list(self.default_keys)
        if len(keys) != 1:
            raise DataError(f"--keys needs the one trajectory array of task {self.name}, got {','.join(keys)}")
        key = keys[0]
        train_src = open_trajectories(files["train"], key, options)
        test_src = train_src if files.get("test") is None else open_trajectories(files["test"], key, options)
        shape = train_src.shapes[key][2:]
        if len(shape) == self.dim + 1 and shape[-1] == 1:
            shape = shape[:-1]
        if len(train_src.shapes[key]) < 3 or len(shape) != self.dim or (self.dim == 2 and shape[0] != shape[1]):
            g = ", ".join(["n"] * self.dim)
            square = (f" (a {shape[0]}x{shape[1]} grid: task {self.name} takes square grids)"
                      if self.dim == 2 and len(shape) == 2 and len(train_src.shapes[key]) >= 3 else "")
            found = shown_shape(train_src, key)
            hint = time_last_hint(files["train"], key, train_src, options)
            raise DataError(f"{train_src.describe()}: key {key!r} expected trajectories (samples, times, {g}) or "
                            f"(samples, times, {g}, 1), found {found}{square}{hint}")
        if test_src is not train_src and test_src.shapes[key][1:] != train_src.shapes[key][1:]:
            raise DataError(f"{test_src.describe()}: key {key!r} shape {shown_shape(test_src, key)} differs from "
                            f"the training file's {shown_shape(train_src, key)}")
        for src in {id(train_src): train_src, id(test_src): test_src}.values():
            check_initial(src)
        n_times = train_src.shapes[key][1]
        if n_times < 2:
            need = ("learning u(t) -> u(t + tau) needs at least 2" if normalizers is None else
                    "scoring a model on (t_0, t_k) needs at least 2 (opformer rollout --times predicts from one)")
            raise DataError(f"{train_src.describe()}: key {key!r} holds {n_times} snapshot per trajectory "
                            f"(shape {shown_shape(train_src, key)}); {need}")
        trained = getattr(options, _TRAINED_TIMES, None)
        if normalizers is not None and trained is not None:  # a trained model's evaluation: as its rollouts read files
            times = rollout_times(files["train"], train_src, key, n_times, options, trained,
                                  named=getattr(options, _TIME_KEY_NAMED, False))
        else:
            times = _checked_times(train_src.describe(),
                                   _snapshot_times(files["train"], train_src, options, n_times, key,
                                                   normalizers is None),
                                   n_times, options.time_key,
                                   lambda: time_last_hint(files["train"], key, train_src, options))
        test_times = times  # a separate test file is read at its own times where it stores them
        if test_src is not train_src:
            found = stored_times(files["test"], test_src, key, options.time_key)
            if found is not None:
                test_times = _checked_times(test_src.describe(), found, n_times, options.time_key,
                                            lambda: time_last_hint(files["test"], key, test_src, options))
        n = shape[0]
        s = stride_for(n, data.resolution, nodes=self.resolution_keeps_ends, where=train_src.describe())
        if test_all:
            idx = {"test": np.arange(test_src.n_samples)}
        else:
            idx = make_splits(train_src.n_samples, None if test_src is train_src else test_src.n_samples,
                              n_train=data.n_train, n_val=data.n_val, n_test=data.n_test,
                              train_pool=data.train_pool, where=train_src.describe(), min_val=1)
        spatial = (slice(None, None, s),) * self.dim

        def transform(w):
            if w.ndim == self.dim + 3:
                w = w[..., 0]
            return {"traj": w[(slice(None), slice(None)) + spatial][..., None]}

        read = SplitArrays(train_src, test_src, idx, splits, transform)
        arrays = {split: read[split]["traj"] for split in splits}
        normalizers = dict(normalizers or {})
        if "input" not in normalizers:
            tr = read.train()["traj"]
            flat = tr.reshape(-1, *tr.shape[2:])
            normalizers["input"] = UnitGaussianNormalizer.fit(flat, per_point=False, kind="periodic")
            normalizers["target"] = UnitGaussianNormalizer.fit(flat, per_point=False, kind="periodic")
        allowed = np.arange(n_times) if options.max_time is None else np.flatnonzero(times <= options.max_time + 1e-12)
        if len(allowed) < 2 and set(splits) != {"test"}:  # the test split takes every snapshot
            shown = ", ".join(f"{t:g}" for t in times[:3]) + (", ..." if len(times) > 3 else "")
            raise ConfigError(f"--max-time {options.max_time:g} leaves fewer than two snapshots (the snapshot times: "
                              f"{shown}); give a --max-time of at least {times[1]:g}")
        grid = (len(range(0, n, s)),) * self.dim
        coords = grid_coords("periodic", grid)
        datasets = {}
        h = options.history
        if h > 1:
            if options.residual:
                raise ConfigError("--residual is not available with --history > 1")
            if len(allowed) < h + 1:
                raise ConfigError(f"--history {h} needs at least {h + 1} snapshots for training, "
                                  f"{len(allowed)} are available")
            if even_step(times) is None:  # the model steps one snapshot, labelled one spacing
                gaps = np.diff(times)
                raise ConfigError(f"--history {h} steps from snapshot to snapshot, which needs evenly spaced "
                                  f"snapshot times; these are spaced {gaps.min():g} to {gaps.max():g} apart (train "
                                  "with --history 1, whose lead-time input takes any spacing)")
        for split in splits:
            if h > 1:  # one step from the last h snapshots: (t, i, i + 1) for i = h-1, ...
                last = allowed[-1] if split != "test" else n_times - 1
                ij = [(i, i + 1) for i in range(h - 1, last)]
                pairs = np.array([(t, i, j) for t in range(len(arrays[split])) for i, j in ij],
                                 dtype=np.int64).reshape(-1, 3)
            elif split == "train":
                pairs = make_pairs(len(arrays[split]), allowed, options.pairs, options.include_zero)
            elif split == "val":
                pairs = make_pairs(len(arrays[split]), allowed, "one-at-a-time", False)
            else:
                pairs = make_pairs(len(arrays[split]), np.arange(n_times), "one-at-a-time", False)
            datasets[split] = PairDataset(arrays[split], test_times if split == "test" else times, pairs, coords, h,
                                         origin=read.origin(split))
        info = {"times": times.tolist(), "max_lead": float(times[allowed[-1]] - times[allowed[0]]),
                "step": float(np.min(np.diff(times))), "key": key, "history": h}
        return Bundle(datasets, normalizers, "periodic", grid, grid,
                      {"train": str(files["train"]), "test": str(files.get("test") or files["train"])}, info)

    def inference_options(self, options, info: dict):
        """A file without times is read at the training's snapshot spacing (when it was even), not at ``--dt``'s
        default: the lead times of ``opformer eval`` are then those the model was trained on."""
        step = even_step(info.get("times", []))
        options = dataclasses.replace(options) if step is None else dataclasses.replace(options, dt=step)
        trained_times(options, info.get("times"))
        return options

    def build_operator(self, model_cfg, normalizers, options) -> Operator:
        from ..models import build_model

        return TrajectoryOperator(build_model(model_cfg), normalizers, options.residual)

    def fit_model(self, model_cfg, bundle, explicit):
        cfg, notes = super().fit_model(model_cfg, bundle, explicit)
        h = int(bundle.info.get("history", 1))
        if h > 1:  # the FNO protocol: h snapshots in, the next one out, no lead time
            if cfg.get("in_channels", 1) != h:
                cfg["in_channels"] = h
                notes.append(f"in_channels -> {h} (the last {h} snapshots are the input)")
            if cfg.get("time_conditioning", "none") != "none":
                if "time_conditioning" in explicit:
                    raise ConfigError("--history > 1 steps by one snapshot: use --time-conditioning none")
                cfg["time_conditioning"] = "none"
                notes.append("time_conditioning -> none (--history steps by one snapshot)")
            return cfg, notes
        if cfg.get("time_conditioning", "none") == "none":
            if "time_conditioning" in explicit:
                raise ConfigError(f"--time-conditioning none: task {self.name} needs a lead-time conditioned model "
                                  "(norm or channel)")
            if "time_conditioning" in cfg:  # a value the preset gave; a model config without one is simply completed
                notes.append("time_conditioning none -> norm (the task is time-dependent)")
            cfg["time_conditioning"] = "norm"
        return cfg, notes


def _models(dim: int, width: int) -> dict:
    """Lead-time conditioned models of one task: Galerkin and Fourier transformers and FNO, CPU-sized defaults."""
    if dim == 1:
        body = dict(name="transformer1d", d_model=64, num_layers=4, n_heads=4, dim_feedforward=128, dropout=0.0,
                    norm_eps=1e-5, decoder_width=32, decoder_layers=2, modes=16, decoder_ffn=32,
                    decoder_activation="silu", time_conditioning="norm")
        fno = dict(name="fno1d", width=width, modes=16, num_layers=4, head_width=64, time_conditioning="norm")
    else:
        body = dict(name="transformer2d", d_model=64, num_layers=4, n_heads=4, dim_feedforward=128, dropout=0.0,
                    norm_eps=1e-5, coarse_size=None, decoder="spectral", decoder_width=16, decoder_layers=2,
                    modes=12, decoder_ffn=64, spatial_fc=True, boundary=None, time_conditioning="norm")
        # periodic data: cos/sin 2 pi x, y instead of the raw coordinates, whose jump at the boundary made an ns-fno
        # trained at 16^2 err 4x more at 32^2 (docs/models.md, "FNO across grids")
        fno = dict(name="fno2d", width=width, modes=12, num_layers=4, head_width=64, time_conditioning="norm",
                   coord_features="periodic")
    out = {}
    for short, kind in (("gt", "galerkin"), ("ft", "fourier")):
        out[short] = {**body, "kind": kind, "norm_scheme": "galerkin", **({"scale": "sqrt"} if kind == "fourier"
                                                                           else {})}
        out[f"{short}-regular"] = {**out[short], "norm_scheme": "regular"}
    out["fno"] = fno
    out["fno-channel"] = {**fno, "time_conditioning": "channel"}
    return out


class NavierStokesTask(TrajectoryTask):
    name = "ns"
    description = "2D Navier-Stokes vorticity trajectories on the unit torus, S(tau, w(t)) = w(t + tau)"
    dim = 2
    default_keys = ("w",)
    generator = "ns"
    models = {**_models(2, 20), **{short: {**cfg, "time_conditioning": "norm"} for short, cfg in SCALABLE_2D.items()}}
    run_defaults = {
        "data": {"recipe": {"n_samples": 1300}, "n_test": 200, "n_val": 100, "n_train": 1000},
        "train": {"epochs": 100, "batch_size": 16, "eval_batch_size": 16, "lr": 1.0e-3, "pct_start": 0.1,
                  "gamma": 0.0},
    }
    plot_labels = {"input": "vorticity w(t_0)", "target": "w(t)", "prediction": "prediction"}


class ShearLayerTask(NavierStokesTask):
    name = "shear-layer"
    description = "2D Navier-Stokes double shear layer (the lecture's example), S(tau, w(t)) = w(t + tau)"
    generator = "shear-layer"
    #: FNO with the raw coordinates: the periodic features trained worse here (docs/models.md, "FNO across grids")
    models = {**NavierStokesTask.models, **{short: {**NavierStokesTask.models[short], "coord_features": "raw"}
                                            for short in ("fno", "fno-channel")}}
    run_defaults = {
        "data": {"recipe": {"n_samples": 1024}, "n_test": 128, "n_val": 64},
        "train": NavierStokesTask.run_defaults["train"],
    }


class BurgersTrajectoryTask(TrajectoryTask):
    name = "burgers-traj"
    description = "viscous Burgers trajectories u(t_i) -> u(t_j), periodic 1D (20 snapshots on [0, 1])"
    dim = 1
    default_keys = ("u",)
    generator = "burgers"
    models = _models(1, 32)
    run_defaults = {
        "data": {"recipe": {"n_samples": 1200, "snapshots": 20, "resolution": 1024}, "resolution": 256,
                 "n_test": 100, "n_val": 100},
        "train": {"epochs": 50, "batch_size": 16, "eval_batch_size": 32, "lr": 1.0e-3, "pct_start": 0.1,
                  "gamma": 0.0},
    }
    plot_labels = {"input": "$u(t_0)$", "target": "$u(t)$", "prediction": "prediction"}


for _task in (NavierStokesTask(), ShearLayerTask(), BurgersTrajectoryTask()):
    register_task(_task)
