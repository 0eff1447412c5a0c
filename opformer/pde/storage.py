"""HDF5 storage of generated data sets: incremental, resumable, never half-written.

Layout of one file (one *shard*: the samples with global indices ``start <= i < stop``)::

    /<input key>   (stop - start, *shape)   float64 (or the recipe's dtype); Burgers "a", Darcy "coeff"
    /<target key>  (stop - start, *shape)   Burgers "u", Darcy "sol"
    /done          (stop - start,) bool     True once the sample is written
    /x [, /y]      (n,) float64             the grid coordinates (unit square / unit period)
    attrs: format="opformer-dataset/1", problem, recipe (JSON string), seed, opformer_version,
           start, stop, n_samples (the whole data set), complete (bool)
           [, method: the version of how the samples were computed, where the recipe kind has one]
           [, checks (JSON string): facts about the samples stored when the file was finished]

Every sample array is stored in chunks of one sample with a Fletcher-32 checksum, verified by HDF5 on every read;
:func:`read_samples` turns a checksum failure into a :class:`DataError` naming the file and the key. The
uncompressed arrays are allocated (and their fill value written) when the file is created, so writing samples
never extends the file: a disk that is too small fails at the start, and a disk that fills up during a run
cannot leave a ``FILE.partial`` whose metadata points past its end (HDF5 then refuses it as truncated). Before
each write of a gzip-compressed key (whose size is only known when written) the free space is checked.

A generation writes to ``FILE.partial``; each finished chunk of samples is written and flushed before its
``done`` flags are set and flushed. Only when every sample is done is the file marked complete and renamed
to ``FILE`` (``os.replace``, atomic on one file system). An interrupted generation therefore leaves either no
``FILE`` or a complete one, and its ``FILE.partial`` is resumed by the next call with the same recipe and range.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import h5py
import numpy as np

from .errors import DataError, MissingKeyError

__all__ = [
    "FORMAT",
    "PROBLEM_KEYS",
    "canonical_recipe",
    "recipe_diff",
    "partial_path",
    "ShardWriter",
    "read_header",
    "read_samples",
    "no_space_reason",
]

FORMAT = "opformer-dataset/1"

#: (input key, target key) per problem: the names of the original FNO files (one key for trajectories); the
#: recipe registry of :mod:`opformer.pde.generate` adds each kind's keys here.
PROBLEM_KEYS = {"burgers": ("a", "u"), "darcy": ("coeff", "sol")}

_NO_SPACE = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EFBIG: "the file size limit of this process (ulimit -f) is reached",
}


def no_space_reason(exc: BaseException) -> str | None:
    """``"the disk is full"`` (or the quota / file size limit) if ``exc`` is a failed write for lack of space, else
    None. Looks at ``errno`` and at the ``errno = N`` that HDF5 puts into its messages."""
    codes = {getattr(exc, "errno", None)}
    codes.update(int(m) for m in re.findall(r"errno = (\d+)", str(exc)))
    for code in codes:
        if code in _NO_SPACE:
            return _NO_SPACE[code]
    return None


def not_a_file(path: Path) -> str | None:
    """What ``path`` is when it exists but is no regular file (``"a directory"``, ``"a pipe, socket or device"``),
    else None: HDF5 would answer such a path in two lines, and a named pipe would make it wait."""
    if not path.exists() or path.is_file():
        return None
    return "a directory" if path.is_dir() else "a pipe, socket or device"


def hdf5_detail(text: str) -> str:
    """What went wrong opening an HDF5 file (``text``: h5py's message on one line), in the user's words where
    h5py's are the library's."""
    if "file signature not found" in text:
        return "not an HDF5 file: truncated, or written by something else"
    return text


def refuse_empty_file(path: Path, what: str) -> None:
    """A DataError for a file of 0 bytes (``what``: the format it was to be read as), before a reader's own words."""
    if path.is_file() and path.stat().st_size == 0:
        raise DataError(f"{path}: cannot be read as {what} (an empty file)")


def _one_line(exc: BaseException) -> str:
    """The text of ``exc`` on one line (HDF5's messages hold the time with its newline)."""
    return " ".join(str(exc).split())


def _open_hint(path: Path, exc: OSError) -> str:
    text = str(exc)
    if "unable to lock file" in text:  # HDF5's own message (not "lock" anywhere: "sblock" would match)
        return "; another process (a running generation?) holds it open"
    if "truncated file" in text:
        return "; the file is shorter than its header says (a write failed or a copy was cut short): delete it and run again"
    if path.name.endswith(".partial"):
        return "; an interrupted generation left it unreadable: delete it and run again"
    return ""


def read_samples(path: str | os.PathLike, key: str, lo: int, hi: int) -> np.ndarray:
    """The samples ``lo <= i < hi`` (local indices) of ``key`` in an HDF5 file, checksums verified.

    Raises :class:`DataError` naming the file and the key if a Fletcher-32 checksum does not match (bytes were
    changed after writing) or the file cannot be read."""
    path = Path(path)
    try:
        with h5py.File(path, "r") as h5:
            if key not in h5:
                raise MissingKeyError(f"{path}: key {key!r} not found; available keys: {sorted(h5)}", key=key,
                                      path=str(path), available=sorted(h5))
            return h5[key][lo:hi]
    except OSError as exc:
        if "checksum" in str(exc).lower() or "filter returned failure" in str(exc):
            raise DataError(f"{path}: key {key!r}, samples [{lo}, {hi}): the data fail their checksum (the file "
                            f"was damaged after writing); regenerate it or restore a copy") from exc
        raise DataError(f"{path}: key {key!r} cannot be read ({_one_line(exc)}){_open_hint(path, exc)}") from exc


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
    opformer_version``, plus ``n_done`` (the number of finished samples), ``checks`` (the facts stored when the
    file was finished, see :meth:`ShardWriter.finish`; ``None`` for files without them) and ``method`` (how the
    samples were computed, see :class:`ShardWriter`; ``None`` for files without it). Raises :class:`DataError` if the file is
    missing or is not an opformer data file."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    what = not_a_file(path)
    if what is not None:
        raise DataError(f"{path}: is {what}, not a data file")
    try:
        try:
            h5 = h5py.File(path, "r")
        except OSError as exc:
            if "unable to lock file" not in str(exc):  # HDF5's words ("sblock" would match a bare "lock")
                raise
            # a generation holds it open for writing: its header and progress as last flushed (samples are flushed
            # as they are written), read without HDF5's file lock
            h5 = h5py.File(path, "r", locking=False)
        with h5:
            attrs = dict(h5.attrs)
            if attrs.get("format") != FORMAT:
                raise DataError(f"{path}: not an opformer data file (attribute format={attrs.get('format')!r}, expected {FORMAT!r})")
            n_done = int(np.count_nonzero(h5["done"][...])) if "done" in h5 else 0
    except OSError as exc:
        hint = _open_hint(path, exc)
        try:
            refuse_empty_file(path, "HDF5")  # 0 bytes: said so, not in HDF5's words ("file signature not found")
        except DataError as empty:
            raise DataError(f"{empty}{hint}") from None
        raise DataError(f"{path}: cannot be read as HDF5 ({hdf5_detail(_one_line(exc))}){hint}") from exc
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
        "checks": json.loads(attrs["checks"]) if "checks" in attrs else None,
        "method": _text(attrs["method"]) if "method" in attrs else None,
    }


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _remove_folders(folders: list[Path]) -> None:
    """Remove the folders a failed start made (the deepest first), where they are still empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


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
        path: the final file name; the missing folders above it are made (as ``mkdir -p``) when ``FILE.partial``
            is created, after every check, and removed again if that fails.
        recipe: the full recipe (JSON-serialisable dict with at least ``problem``, ``seed``, ``n_samples``).
        start, stop: the global sample range of this shard.
        shapes: the per-sample shape of each stored array (keys in order: input, target).
        coords: coordinate arrays to store (``x``, ``y``).
        dtype: the stored floating type.
        compress: keys to store with gzip compression (e.g. the piecewise-constant Darcy coefficient).
        method: how the samples are computed (a version of the generator), stored as the attribute ``method``;
            None stores none.
        same_method: ``stored method (None: none stored) -> bool``: whether a ``FILE.partial`` with that method
            holds the samples this writer would add; one that does not is refused rather than resumed (default:
            the same method).
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
        method: str | None = None,
        same_method=None,
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
        self.method = method
        self.same_method = same_method or (lambda stored: stored == method)
        self.complete = False
        self._h5: h5py.File | None = None
        self._open()

    # -- opening ---------------------------------------------------------------------------------------------
    def _check_header(self, where: Path, header: dict) -> None:
        diffs = recipe_diff(header["recipe"], self.recipe)
        if header["problem"] != self.recipe.get("problem"):
            raise DataError(
                f"{where}: exists and holds a {header['problem']} data set, not {self.recipe.get('problem')}. Use "
                f"another output path, or delete {where} to regenerate."
            )
        if diffs:
            raise DataError(
                f"{where}: exists with a different recipe ({'; '.join(diffs)}). "
                f"Use another output path, or delete {where} to regenerate."
            )
        if (header["start"], header["stop"]) != (self.start, self.stop):
            raise DataError(
                f"{where}: exists for the sample range [{header['start']}, {header['stop']}), not the requested "
                f"[{self.start}, {self.stop}). Use another output path, or delete {where} to regenerate."
            )

    def _check_method(self, header: dict, where: Path) -> None:
        """Refuse a ``FILE.partial`` begun, or a complete ``FILE`` made, by a version of the generator whose samples
        differ: resuming the one would mix two kinds of samples, and the other is not what the recipe now gives."""
        stored = header["method"]
        if self.same_method(stored):
            return
        by = ("an earlier opformer that computed this recipe's samples differently" if stored is None else
              f"another version of the {header['problem']} generator ({stored}"
              + (f"; this one is {self.method})" if self.method else ")"))
        if where == self.partial:
            raise DataError(f"{where}: was begun by {by}; resuming it would mix the two kinds of samples. Use "
                            f"another output path, or delete {where} to regenerate.")
        raise DataError(f"{where}: was made by {by}; its samples are not the ones this recipe gives now. Use "
                        f"another output path, or delete {where} to regenerate.")

    def _open(self) -> None:
        if self.path.exists():
            header = read_header(self.path)
            self._check_header(self.path, header)
            if not header["complete"] or header["n_done"] != self.stop - self.start:
                raise DataError(f"{self.path}: is marked incomplete ({header['n_done']} of {self.stop - self.start} samples); delete it to regenerate")
            self._check_method(header, self.path)
            self.complete = True
            return
        if self.partial.exists():
            # never delete it here: it may be locked by a generation still running in another process
            header = read_header(self.partial)
            self._check_header(self.partial, header)
            self._check_method(header, self.partial)
            self._check_writable(header)
            try:
                self._h5 = h5py.File(self.partial, "r+")
            except OSError as exc:
                raise DataError(
                    f"{self.partial}: cannot be opened for resuming ({_one_line(exc)}). If no other generation is writing it, "
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

    def _existing_folder(self) -> Path:
        """The nearest folder above ``FILE`` that exists (its parent, or the folder below which the missing ones
        will be made by :meth:`_make_folders`); a DataError where that is a file or where the folders cannot be made
        there."""
        parent = self.path.parent
        folder = parent
        while not folder.exists() and not folder.is_symlink() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            what = "a file, not a directory" if folder.is_file() else "not a directory"
            raise DataError(f"{self.path}: cannot write, {folder} is {what}")
        if not os.access(folder, os.W_OK | os.X_OK):
            if folder == parent:
                raise DataError(f"{self.path}: cannot write, the directory {parent} is not writable; make it "
                                f"writable or write elsewhere")
            raise DataError(f"{self.path}: cannot make the directory {parent}, {folder} is not writable; make it "
                            f"writable or write elsewhere")
        return folder

    def _make_folders(self) -> list[Path]:
        """Make the missing folders above ``FILE`` (as ``mkdir -p``); returns those made, the deepest first."""
        made = [p for p in [self.path.parent, *self.path.parent.parents] if not p.exists()]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            _remove_folders(made)
            raise DataError(f"{self.path}: cannot make the directory {self.path.parent} "
                            f"({exc.strerror or _one_line(exc)})") from None
        return made

    def _check_writable(self, header: dict | None) -> None:
        """Refuse, before any sample is computed, a shard whose samples could not be written or kept: the directory
        (where ``FILE.partial`` is made, and renamed to ``FILE`` when complete; for a new file, the nearest existing
        folder above it, below which the missing ones are made) and, on a resume (``header``: the header of
        ``FILE.partial``), ``FILE.partial`` itself must be writable."""
        parent = self.path.parent
        if header is None:
            self._existing_folder()
            return
        if not parent.is_dir():
            what = "is a file" if parent.exists() else "does not exist"
            raise DataError(f"{self.path}: cannot write, the directory {parent} {what}")
        kept = (f"run the same command again to resume ({header['n_done']} of {self.stop - self.start} samples are "
                f"written and kept)")
        if not os.access(self.partial, os.W_OK):
            raise DataError(f"{self.partial}: the file is read-only; make it writable (chmod u+w {self.partial}) and "
                            f"{kept}")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise DataError(f"{self.path}: the directory {parent} is not writable, so {self.partial.name} cannot "
                            f"be renamed to {self.path.name} when complete; make it writable (chmod u+w {parent}) "
                            f"and {kept}")

    def _create(self) -> None:
        folder = self._existing_folder()
        need = sum(int(np.prod(s)) for s in self.shapes.values()) * (self.stop - self.start) * self.dtype.itemsize
        free = shutil.disk_usage(folder).free
        if free < need:  # refused before the fill values take the disk (a disk other jobs may share)
            raise DataError(f"{self.partial}: cannot be created, the file needs about {need / 1e6:.1f} MB and its disk "
                            f"has {free / 1e6:.1f} MB free; free space or write elsewhere, or split the data with "
                            f"--start/--stop")
        made = self._make_folders()  # as output paths are: the last step before the file itself
        try:
            h5 = h5py.File(self.partial, "w")
        except OSError as exc:
            _remove_folders(made)
            raise DataError(f"{self.partial}: cannot be created ({_one_line(exc)})") from exc
        try:
            self._fill_new(h5)
        except (OSError, RuntimeError, ValueError) as exc:  # h5py raises all three for a failed write
            try:
                h5.close()
            except (OSError, RuntimeError, ValueError):
                pass
            self.partial.unlink(missing_ok=True)  # created by this call, nothing computed yet
            _remove_folders(made)
            reason = no_space_reason(exc)
            if reason:
                raise DataError(f"{self.partial}: cannot be created, {reason} (the file needs about {need / 1e6:.1f} MB); "
                                f"free space or write elsewhere, or split the data with --start/--stop") from exc
            raise DataError(f"{self.partial}: cannot be created ({_one_line(exc)})") from exc
        self._h5 = h5

    def _fill_new(self, h5: h5py.File) -> None:
        from h5py import h5d, h5p

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
        if self.method is not None:
            h5.attrs["method"] = self.method
        for key, shape in self.shapes.items():
            if key in self.compress:
                kwargs = {"compression": "gzip", "compression_opts": 4, "shuffle": True}
            else:  # all space now, so that writing a sample never extends the file (see the module doc)
                dcpl = h5p.create(h5p.DATASET_CREATE)
                dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)
                kwargs = {"dcpl": dcpl, "fill_time": "alloc"}
            h5.create_dataset(key, shape=(n, *shape), dtype=self.dtype, chunks=(1, *shape), fletcher32=True, **kwargs)
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)
        h5.create_dataset("done", shape=(n,), dtype=bool, fillvalue=False, dcpl=dcpl, fill_time="alloc")
        for name, values in self.coords.items():
            h5.create_dataset(name, data=np.asarray(values, dtype=np.float64))
        h5.flush()

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
        if self.compress:
            self._check_room(sum(np.asarray(arrays[k]).size for k in self.compress) * self.dtype.itemsize)
        try:
            self._write_arrays(arrays, order, local)
        except (OSError, RuntimeError, ValueError) as exc:
            reason = no_space_reason(exc)
            if reason:
                raise DataError(self.no_space_message(reason)) from exc
            raise

    def no_space_message(self, reason: str) -> str:
        """One line: why the run stopped, what is kept, how to go on."""
        total = self.stop - self.start
        try:
            done = self.n_done()
        except (OSError, RuntimeError):  # pragma: no cover - the file cannot even be read now
            done = "?"
        return (f"{self.partial}: {reason}; {done} of {total} samples are written and kept: free space and run the "
                f"same command to resume")

    def _check_room(self, nbytes: int) -> None:
        """Stop before a write that may not fit (the size of compressed data is known only once written)."""
        if shutil.disk_usage(self.partial.parent).free < nbytes + 16 * 2**20:
            raise DataError(self.no_space_message(_NO_SPACE[errno.ENOSPC]))
        margin = nbytes + 2**16  # the data and some metadata
        try:
            import resource

            limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        except (ImportError, ValueError, OSError):  # pragma: no cover - not on POSIX
            return
        if limit != resource.RLIM_INFINITY and self.partial.stat().st_size + margin > limit:
            raise DataError(self.no_space_message(_NO_SPACE[errno.EFBIG]))

    def _write_arrays(self, arrays: dict, order: np.ndarray, local: np.ndarray) -> None:
        for key in self.shapes:
            values = np.asarray(arrays[key])[order]
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

    def finish(self, summarize=None) -> Path:
        """Mark the shard complete and rename ``FILE.partial`` to ``FILE``. Every sample must be written.

        ``summarize(h5) -> dict`` (optional) reads the finished samples through the open file and returns facts
        about them (JSON-serialisable), stored as the attribute ``checks`` before the rename, so that a reader need
        not read the samples again (``read_header(path)["checks"]``)."""
        if self.complete:
            return self.path
        missing = self.pending()
        if missing.size:
            raise DataError(f"{self.partial}: cannot finish, {missing.size} samples are not written yet")
        if summarize is not None:
            self._h5.attrs["checks"] = json.dumps(summarize(self._h5), sort_keys=True)
        self._h5.attrs["complete"] = True
        self._h5.close()
        self._h5 = None
        os.replace(self.partial, self.path)
        self.complete = True
        return self.path

    def close(self) -> None:
        """Flush and close the file (an unfinished generation stays in ``FILE.partial``).

        Errors of the flush are swallowed when an exception is already on its way (a full disk would otherwise
        hide the message that says so)."""
        if self._h5 is not None:
            h5, self._h5 = self._h5, None
            try:
                h5.flush()
            finally:
                h5.close()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except (OSError, RuntimeError, ValueError):
            pass
