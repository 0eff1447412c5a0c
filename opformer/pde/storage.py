"""HDF5 storage of generated data sets: incremental, resumable, never half-written.

Layout of one file (one *shard*: the samples with global indices ``start <= i < stop``)::

    /<input key>   (stop - start, *shape)   float64 (or the recipe's dtype); Burgers "a", Darcy "coeff"
    /<target key>  (stop - start, *shape)   Burgers "u", Darcy "sol"
    /done          (stop - start,) bool     True once the sample is written
    /x [, /y]      (n,) float64             the grid coordinates (unit square / unit period)
    attrs: format="opformer-dataset/1", problem, recipe (JSON string), seed, opformer_version,
           start, stop, n_samples (the whole data set), complete (bool)

A generation writes to ``FILE.partial``; each finished chunk of samples is written and flushed before its
``done`` flags are set and flushed. Only when every sample is done is the file marked complete and renamed
to ``FILE`` (``os.replace``, atomic on one file system). An interrupted generation therefore leaves either no
``FILE`` or a complete one, and its ``FILE.partial`` is resumed by the next call with the same recipe and range.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np

from .errors import DataError

__all__ = ["FORMAT", "PROBLEM_KEYS", "canonical_recipe", "recipe_diff", "partial_path", "ShardWriter", "read_header"]

FORMAT = "opformer-dataset/1"

#: (input key, target key) per problem: the names of the original FNO files.
PROBLEM_KEYS = {"burgers": ("a", "u"), "darcy": ("coeff", "sol")}


def canonical_recipe(recipe: dict) -> str:
    """The recipe as canonical JSON (sorted keys, no spaces): the form stored in files and compared on resume."""
    try:
        return json.dumps(recipe, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise DataError(f"the recipe must be JSON-serialisable (numbers, strings, lists, dicts): {exc}") from exc


def recipe_diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Human-readable differences between two recipes, e.g. ``["nu: 0.1 != 0.01"]``."""
    a = json.loads(canonical_recipe(a))
    b = json.loads(canonical_recipe(b))
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, "<missing>"), b.get(key, "<missing>")
        if isinstance(va, dict) and isinstance(vb, dict):
            out += recipe_diff(va, vb, prefix + key + ".")
        elif va != vb:
            out.append(f"{prefix}{key}: {va!r} != {vb!r}")
    return out


def partial_path(path: str | os.PathLike) -> Path:
    """``FILE.partial``: where an unfinished generation of ``FILE`` lives."""
    path = Path(path)
    return path.with_name(path.name + ".partial")


def read_header(path: str | os.PathLike) -> dict:
    """The attributes of an opformer data file: ``problem, recipe (dict), seed, start, stop, n_samples, complete,
    opformer_version``, plus ``n_done`` (the number of finished samples). Raises :class:`DataError` if the file is
    missing or is not an opformer data file."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    try:
        with h5py.File(path, "r") as h5:
            attrs = dict(h5.attrs)
            if attrs.get("format") != FORMAT:
                raise DataError(f"{path}: not an opformer data file (attribute format={attrs.get('format')!r}, expected {FORMAT!r})")
            n_done = int(np.count_nonzero(h5["done"][...])) if "done" in h5 else 0
    except OSError as exc:
        hint = ""
        if "lock" in str(exc).lower():
            hint = "; another process (a running generation?) holds it open"
        elif path.name.endswith(".partial"):
            hint = "; an interrupted generation left it unreadable: delete it and run again"
        raise DataError(f"{path}: cannot be read as HDF5 ({exc}){hint}") from exc
    return {
        "problem": str(attrs["problem"]),
        "recipe": json.loads(attrs["recipe"]),
        "seed": int(attrs["seed"]),
        "start": int(attrs["start"]),
        "stop": int(attrs["stop"]),
        "n_samples": int(attrs["n_samples"]),
        "complete": bool(attrs.get("complete", False)),
        "opformer_version": str(attrs.get("opformer_version", "")),
        "n_done": n_done,
    }


class ShardWriter:
    """Write the samples ``start <= i < stop`` of a data set into ``path`` incrementally (see the module doc).

    Usage::

        with ShardWriter(path, recipe, start=0, stop=N, shapes={"a": (n,), "u": (n,)}, coords={"x": x}) as w:
            if not w.complete:
                for idx in chunks(w.pending()):
                    w.write(idx, {"a": ..., "u": ...})
                w.finish()            # marks complete and renames FILE.partial -> FILE

    Leaving the ``with`` block without :meth:`finish` (an exception, Ctrl-C) closes ``FILE.partial`` with every
    written sample flushed; a new writer with the same recipe and range resumes it.

    Args:
        path: the final file name.
        recipe: the full recipe (JSON-serialisable dict with at least ``problem``, ``seed``, ``n_samples``).
        start, stop: the global sample range of this shard.
        shapes: the per-sample shape of each stored array (keys in order: input, target).
        coords: coordinate arrays to store (``x``, ``y``).
        dtype: the stored floating type.
        compress: keys to store with gzip compression (e.g. the piecewise-constant Darcy coefficient).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        recipe: dict,
        *,
        start: int,
        stop: int,
        shapes: dict[str, tuple[int, ...]],
        coords: dict[str, np.ndarray],
        dtype: str = "float64",
        compress: tuple[str, ...] = (),
    ):
        self.path = Path(path)
        self.partial = partial_path(self.path)
        self.recipe = json.loads(canonical_recipe(recipe))
        self.start, self.stop = int(start), int(stop)
        if not 0 <= self.start < self.stop:
            raise DataError(f"{self.path}: expected 0 <= start < stop, found start={start}, stop={stop}")
        self.shapes = {k: tuple(int(d) for d in v) for k, v in shapes.items()}
        self.coords = coords
        self.dtype = np.dtype(dtype)
        self.compress = tuple(compress)
        self.complete = False
        self._h5: h5py.File | None = None
        self._open()

    # -- opening ---------------------------------------------------------------------------------------------
    def _check_header(self, where: Path, header: dict) -> None:
        diffs = recipe_diff(header["recipe"], self.recipe)
        if diffs or header["problem"] != self.recipe.get("problem"):
            raise DataError(
                f"{where}: exists with a different recipe ({'; '.join(diffs) or 'problem differs'}). "
                f"Use another output path, or delete {where} to regenerate."
            )
        if (header["start"], header["stop"]) != (self.start, self.stop):
            raise DataError(
                f"{where}: exists for the sample range [{header['start']}, {header['stop']}), not the requested "
                f"[{self.start}, {self.stop}). Use another output path, or delete {where} to regenerate."
            )

    def _open(self) -> None:
        if self.path.exists():
            self._check_header(self.path, read_header(self.path))
            header = read_header(self.path)
            if not header["complete"] or header["n_done"] != self.stop - self.start:
                raise DataError(f"{self.path}: is marked incomplete ({header['n_done']} of {self.stop - self.start} samples); delete it to regenerate")
            self.complete = True
            return
        if self.partial.exists():
            # never delete it here: it may be locked by a generation still running in another process
            header = read_header(self.partial)
            self._check_header(self.partial, header)
            try:
                self._h5 = h5py.File(self.partial, "r+")
            except OSError as exc:
                raise DataError(
                    f"{self.partial}: cannot be opened for resuming ({exc}). If no other generation is writing it, "
                    f"delete it and run again."
                ) from exc
            self._check_layout()
            return
        self._create()

    def _check_layout(self) -> None:
        n = self.stop - self.start
        for key, shape in self.shapes.items():
            if key not in self._h5 or self._h5[key].shape != (n, *shape):
                found = self._h5[key].shape if key in self._h5 else "missing"
                self._h5.close()
                raise DataError(f"{self.partial}: key {key!r} expected shape {(n, *shape)}, found {found}; delete it to regenerate")

    def _create(self) -> None:
        parent = self.path.parent
        if not parent.is_dir():
            raise DataError(f"{self.path}: cannot write, the directory {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise DataError(f"{self.path}: cannot write, the directory {parent} is not writable")
        try:
            h5 = h5py.File(self.partial, "w")
        except OSError as exc:
            raise DataError(f"{self.partial}: cannot be created ({exc})") from exc
        from .. import __version__

        n = self.stop - self.start
        h5.attrs["format"] = FORMAT
        h5.attrs["problem"] = str(self.recipe["problem"])
        h5.attrs["recipe"] = canonical_recipe(self.recipe)
        h5.attrs["seed"] = int(self.recipe["seed"])
        h5.attrs["n_samples"] = int(self.recipe["n_samples"])
        h5.attrs["start"] = self.start
        h5.attrs["stop"] = self.stop
        h5.attrs["opformer_version"] = __version__
        h5.attrs["complete"] = False
        for key, shape in self.shapes.items():
            kwargs = {"compression": "gzip", "compression_opts": 4, "shuffle": True} if key in self.compress else {}
            h5.create_dataset(key, shape=(n, *shape), dtype=self.dtype, chunks=(1, *shape), **kwargs)
        h5.create_dataset("done", shape=(n,), dtype=bool, fillvalue=False)
        for name, values in self.coords.items():
            h5.create_dataset(name, data=np.asarray(values, dtype=np.float64))
        h5.flush()
        self._h5 = h5

    # -- writing ---------------------------------------------------------------------------------------------
    def pending(self) -> np.ndarray:
        """Global indices of the samples not yet written (sorted)."""
        if self.complete:
            return np.zeros(0, dtype=np.int64)
        done = self._h5["done"][...]
        return np.flatnonzero(~done).astype(np.int64) + self.start

    def n_done(self) -> int:
        """Number of samples already written."""
        if self.complete:
            return self.stop - self.start
        return int(np.count_nonzero(self._h5["done"][...]))

    def write(self, indices, arrays: dict[str, np.ndarray]) -> None:
        """Write the samples with global ``indices`` (1D, any order); ``arrays[key]`` is ``(len(indices), *shape)``."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if np.any(indices < self.start) or np.any(indices >= self.stop):
            raise DataError(f"{self.partial}: indices {indices.tolist()} outside the shard range [{self.start}, {self.stop})")
        order = np.argsort(indices)
        local = indices[order] - self.start
        for key, shape in self.shapes.items():
            values = np.asarray(arrays[key])
            if values.shape != (len(indices), *shape):
                raise DataError(f"{self.partial}: key {key!r} expected shape {(len(indices), *shape)}, found {values.shape}")
            if not np.all(np.isfinite(values)):
                raise DataError(f"{self.partial}: key {key!r}: the solver produced NaN or inf for samples {indices.tolist()}")
            values = values[order]
            # contiguous runs as slices (h5py fancy writes are slow)
            breaks = np.flatnonzero(np.diff(local) != 1) + 1
            for run_idx, run_val in zip(np.split(np.arange(len(local)), breaks), np.split(values, breaks)):
                lo = int(local[run_idx[0]])
                self._h5[key][lo : lo + len(run_idx)] = run_val
        self._h5.flush()
        done = self._h5["done"]
        for i in local:
            done[int(i)] = True
        self._h5.flush()

    def finish(self) -> Path:
        """Mark the shard complete and rename ``FILE.partial`` to ``FILE``. Every sample must be written."""
        if self.complete:
            return self.path
        missing = self.pending()
        if missing.size:
            raise DataError(f"{self.partial}: cannot finish, {missing.size} samples are not written yet")
        self._h5.attrs["complete"] = True
        self._h5.close()
        self._h5 = None
        os.replace(self.partial, self.path)
        self.complete = True
        return self.path

    def close(self) -> None:
        """Flush and close the file (an unfinished generation stays in ``FILE.partial``)."""
        if self._h5 is not None:
            try:
                self._h5.flush()
            finally:
                self._h5.close()
                self._h5 = None

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
