"""Readers: opformer HDF5 files (one or several shards), the original FNO ``.mat`` files, and a user's arrays.

Supported inputs, each holding arrays whose first axis indexes samples:

* opformer data files (``.h5``/``.hdf5`` with ``format = opformer-dataset/1``): one file, a list of shard
  files, or a glob pattern (``"data/burgers_*.h5"``). Shards are concatenated by their global sample index;
  their recipes must agree and their ranges must be disjoint and contiguous.
* MATLAB ``.mat``: v5 through ``scipy.io.loadmat``; v7.3 (an HDF5 file) through h5py, where MATLAB's
  column-major arrays appear with their axes reversed, so they are transposed back (a MATLAB (N, 421, 421)
  array is stored as (421, 421, N)).
* A user's arrays: ``.h5``/``.hdf5`` (datasets by name, C order, not transposed), ``.npz`` (``np.savez``) and
  ``.pt`` (``torch.save`` of a dict of tensors, loaded with ``weights_only=True``: numpy values are refused
  by that safe loader, convert them to tensors).

Every problem is reported as :class:`opformer.data.DataError` naming the file, the key and the expected
versus found shape.
"""

from __future__ import annotations

import glob as _glob
import itertools
import os
import re
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

from ..pde.errors import DataError, MissingKeyError
from ..pde.storage import FORMAT, canonical_recipe, hdf5_detail, read_header, recipe_diff, refuse_empty_file

__all__ = ["ArraySource", "open_source", "load_arrays", "resolve_paths", "describe_arrays", "safe_torch_load"]

_HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message without terminal colour codes, or its type when it has none."""
    lines = [ln.strip() for ln in _ANSI.sub("", str(exc)).splitlines() if ln.strip()]
    return lines[0] if lines else f"{type(exc).__name__}: no further detail"


def _torch_load_detail(exc: BaseException) -> str:
    """What went wrong in a failed ``torch.load``, in one short clause: the first sentence of its message, or
    "unrecognised content" for the legacy loader's bare ``KeyError`` on a file torch.save did not write."""
    detail = _first_line(exc).split(". ")[0]
    return "unrecognised content" if isinstance(exc, KeyError) or len(detail) < 8 else detail


def _hdf5_datasets(h5) -> list[str]:
    """Every dataset of an open HDF5 file by its path (``group/name``: a key may name one inside a group), except
    MATLAB's ``#refs#`` internals, which are not variables."""
    names: list[str] = []
    h5.visititems(lambda name, obj: names.append(name)
                  if isinstance(obj, h5py.Dataset) and not name.startswith("#") else None)
    return names


#: the MATLAB classes of real numbers; a logical variable is read as 0/1, as a boolean array of the other formats is
_MATLAB_NUMERIC = ("double", "single", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_MATLAB_REAL = (*_MATLAB_NUMERIC, "logical")
#: MATLAB classes that hold no numbers, listed by ``data info`` as they are named (other classes, such as MATLAB
#: objects of a class of their own, are listed as ``CLASS (a MATLAB object: cannot be read)``)
_MATLAB_NOT_NUMERIC = ("char", "cell", "struct", "sparse", "object", "function", "function_handle", "opaque")


def _matlab_class(obj) -> str | None:
    """The ``MATLAB_class`` attribute of a v7.3 MAT-file variable (``"double"``, ``"char"``, ...), or None."""
    value = obj.attrs.get("MATLAB_class")
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _matlab_type(cls: str, complex_values: bool = False) -> str:
    """How ``data info`` lists a MATLAB variable of class ``cls``: the class (``complex double`` for complex values),
    or, for a class that holds no numbers and has no name of its own here, ``CLASS (a MATLAB object: ...)``."""
    if cls in _MATLAB_NUMERIC:
        return f"complex {cls}" if complex_values else cls
    if cls == "logical" or cls in _MATLAB_NOT_NUMERIC:
        return cls
    return f"{cls} (a MATLAB object: cannot be read)"


def _mat_v5_complex(path: Path, count: int) -> list[bool]:
    """Per variable of a v5 MAT-file, in file order: whether its array flags mark it complex (``whosmat`` does not
    say so), read from the first bytes of each variable (decompressed where it is compressed), not its values;
    all False where the file does not hold ``count`` variables as expected."""
    import struct
    import zlib

    found: list[bool] = []
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        fh.seek(126)
        order = "<" if fh.read(2) == b"IM" else ">"
        pos = 128
        while pos + 8 <= size:
            fh.seek(pos)
            kind, nbytes = struct.unpack(order + "II", fh.read(8))
            if kind == 15:  # miCOMPRESSED: a zlib stream of one miMATRIX element
                try:
                    head = zlib.decompressobj().decompress(fh.read(min(nbytes, 1024)), 20)[8:]
                except zlib.error:
                    head = b""
            else:
                head = fh.read(12)
            # the element starts with its array flags (an 8-byte tag, then the flags; bit 11: complex)
            found.append(len(head) >= 12 and bool(struct.unpack(order + "I", head[8:12])[0] & 0x800))
            pos += 8 + nbytes
    return found if len(found) == count else [False] * count


def _mat_v4_complex(path: Path, count: int) -> list[bool]:
    """Per variable of a v4 MAT-file, in file order: whether its header's imagf marks it complex (``whosmat`` does
    not say so), read from the 20-byte headers only; all False where the file does not hold ``count`` variables as
    expected."""
    import struct

    found: list[bool] = []
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        pos = 0
        while pos + 20 <= size:
            fh.seek(pos)
            head = fh.read(20)
            mopt = struct.unpack("<i", head[:4])[0]
            order = "<" if 0 <= mopt <= 5000 else ">"  # the type number, byte-swapped in a big-endian file
            mopt, rows, cols, imagf, namlen = struct.unpack(order + "5i", head)
            item = {0: 8, 1: 4, 2: 4, 3: 2, 4: 2, 5: 1}.get(mopt // 10 % 10)
            if item is None or min(rows, cols, namlen) < 0:
                break
            found.append(bool(imagf))
            pos += 20 + namlen + rows * cols * item * (2 if imagf else 1)
    return found if len(found) == count else [False] * count


def _mat_v5_variables(path: Path, structs=None, read: dict | None = None) -> list[tuple[str, tuple, str]]:
    """``(name, shape, class)`` of the variables of a v4/v5 MAT-file, from their headers: the shapes as MATLAB
    gives them (a char row of 5 letters is (1, 5)), the class as :func:`_matlab_type` lists it.  A 1 x 1 struct is
    followed by its fields as ``struct/field`` (a key may name them, as in a v7.3 file); those are found by reading
    the struct (the v5 format keeps no separate header of its fields): every such struct, or those named in
    ``structs``; ``read``: a dict that receives the structs read, by name (so that the caller reads none twice)."""
    import scipy.io

    try:
        listed = scipy.io.whosmat(path, chars_as_strings=False)
        complex_flags = (_mat_v5_complex if scipy.io.matlab.matfile_version(path)[0] == 1 else
                         _mat_v4_complex)(path, len(listed))
    except Exception as exc:  # noqa: BLE001 - scipy raises several types for corrupt files
        raise DataError(f"{path}: cannot be read as a MATLAB file ({_first_line(exc)})") from None
    found = []
    for (name, shape, cls), cplx in zip(listed, complex_flags):
        shape = tuple(int(d) for d in shape)
        found.append((name, shape, _matlab_type(cls, cplx)))
        if cls == "struct" and shape == (1, 1) and (structs is None or name in structs):
            record = _load_mat_v5_variables(path, [name])[name]
            if read is not None:
                read[name] = record
            found += _v5_fields(name, record)
    return found


def _load_mat_v5_variables(path: Path, names) -> dict:
    """The v4/v5 MAT-file variables ``names`` as scipy reads them (structs as record arrays, text as characters)."""
    import scipy.io

    try:
        return scipy.io.loadmat(path, variable_names=list(names), chars_as_strings=False)
    except Exception as exc:  # noqa: BLE001 - scipy raises several types for corrupt files
        raise DataError(f"{path}: cannot be read as a MATLAB file ({_first_line(exc)})") from None


def _v5_class(value) -> str:
    """The MATLAB class of a value scipy read from a v5 MAT-file, as :func:`_matlab_type` lists it."""
    import scipy.io
    import scipy.sparse

    if scipy.sparse.issparse(value):
        return "sparse"
    if isinstance(value, scipy.io.matlab.MatlabFunction):
        return "function_handle"
    if isinstance(value, scipy.io.matlab.MatlabObject):
        return "object"
    dtype = np.asarray(value).dtype
    if dtype.names:
        return "struct"
    if dtype.kind == "O":
        return "cell"
    if dtype.kind in "US":
        return "char"
    if dtype.kind == "b":
        return "logical"
    if dtype.kind == "c":
        return _matlab_type("double" if dtype.itemsize == 16 else "single", True)
    return {"float64": "double", "float32": "single"}.get(dtype.name, dtype.name)


def _v5_fields(prefix: str, record) -> list[tuple[str, tuple, str]]:
    """``(prefix/field, shape, class)`` of the fields of a 1 x 1 struct read from a v5 MAT-file (a nested 1 x 1
    struct followed by its own fields)."""
    found = []
    for field in record.dtype.names or ():
        value = record[0, 0][field]
        name, cls = f"{prefix}/{field}", _v5_class(value)
        shape = tuple(int(d) for d in getattr(value, "shape", ()))
        found.append((name, shape, cls))
        if cls == "struct" and shape == (1, 1):
            found += _v5_fields(name, value)
    return found


def _v5_field(record, path: list[str]):
    """The value at ``path`` (field names) inside a 1 x 1 struct read from a v5 MAT-file."""
    for field in path:
        record = record[0, 0][field]
    return record


def _mat73_variables(h5) -> list[tuple[str, tuple, str]]:
    """``(name, shape, class)`` of the variables of an open v7.3 MAT-file (shapes as MATLAB gives them, the class
    as :func:`_matlab_type` lists it), without reading their values: a struct is listed, and then its fields as
    ``struct/field`` (a key may name them); a sparse matrix is one variable; MATLAB's internals (``#refs#``,
    ``#subsystem#``) are left out; a dataset without a MATLAB class is listed by its HDF5 type."""
    found: list[tuple[str, tuple, str]] = []

    def visit(group, prefix: str) -> None:
        for name in group:
            if name.startswith("#"):
                continue
            obj, key = group[name], prefix + name
            cls = _matlab_class(obj)
            if isinstance(obj, h5py.Group):
                if "MATLAB_sparse" in obj.attrs:  # rows in the attribute, columns + 1 offsets in jc
                    cols = obj["jc"].shape[0] - 1 if "jc" in obj and obj["jc"].shape else 0
                    found.append((key, (int(np.asarray(obj.attrs["MATLAB_sparse"]).reshape(-1)[0]), cols), "sparse"))
                elif cls is None:  # a plain HDF5 group
                    visit(obj, key + "/")
                else:
                    found.append((key, (1, 1), _matlab_type(cls)))
                    if cls == "struct":
                        visit(obj, key + "/")
            elif isinstance(obj, h5py.Dataset):
                if obj.shape is None:  # h5py.Empty: a type and no values
                    found.append((key, (), f"{cls or obj.dtype} (empty: no values)"))
                elif int(np.asarray(obj.attrs.get("MATLAB_empty", 0)).reshape(-1)[0]):  # the values are its size
                    found.append((key, (), f"{cls or obj.dtype} (empty: no values)"))
                elif cls is None:
                    found.append((key, tuple(obj.shape)[::-1], str(obj.dtype)))
                else:
                    complex_values = obj.dtype.names is not None and set(obj.dtype.names) == {"real", "imag"}
                    found.append((key, tuple(obj.shape)[::-1], _matlab_type(cls, complex_values)))

    visit(h5, "")
    return found


def _real_numbers(dtype: str) -> bool:
    """Whether an array listed (by :func:`describe_arrays`) with this type holds real numbers the readers read."""
    if dtype in _MATLAB_REAL:
        return True
    try:
        return np.dtype(dtype).kind in "biuf"
    except (TypeError, ValueError):
        return False


def _refuse_matlab(path, key: str, variables, every=None) -> None:
    """Refuse the MATLAB variable ``key`` (one of ``variables``, ``(name, shape, class)``) unless it holds real
    numbers, in one line naming the key, the file, its class and the numeric variables there are (those of
    ``every()`` where given: a v5 file's listing with the fields of all its structs)."""
    listed = {name: dtype for name, _, dtype in variables}
    dtype = listed.get(key)
    if dtype is None or _real_numbers(dtype):
        return
    numeric = [name for name, _, d in (every() if every is not None else variables) if _real_numbers(d)]
    there = f"numeric keys: {numeric}" if numeric else "the file holds no numeric variable"
    if dtype.endswith("(empty: no values)"):
        raise DataError(f"{path}: key {key!r} is an empty MATLAB variable (it holds no values); {there}")
    cls = dtype.split(" (", 1)[0]
    raise DataError(f"{path}: key {key!r} expected a real numeric array, found a MATLAB {cls} variable; {there}")


def _check_hdf5_numeric(path, key: str, dataset) -> None:
    """Refuse, before its values are read, an HDF5 dataset that holds no real numbers: complex, text, compound or
    reference types, as the other readers do."""
    if dataset.dtype.kind not in "biuf":
        raise DataError(f"{path}: key {key!r} expected a real numeric array, found dtype {dataset.dtype}")


def _unsupported(suffix: str) -> str:
    """Why a file type is refused, with the way to a supported one for a bare NumPy array."""
    text = f"unsupported file type {suffix!r}; expected .h5/.hdf5, .mat, .npz or .pt"
    if suffix == ".npy":
        text += (" (a .npy holds one unnamed array: save the arrays by name in one file, "
                 "np.savez('data.npz', INPUT=inputs, TARGET=targets), and give --keys INPUT,TARGET)")
    return text


def _check_npz(path: Path) -> None:
    """np.savez writes a zip archive; anything else (an empty or cut-off file, text, a bare .npy) is refused here,
    before np.load could read it as a pickle or fail with zipfile's own wording."""
    import zipfile

    if not zipfile.is_zipfile(path):
        what = ("an empty file" if path.stat().st_size == 0 else
                "not a zip archive: truncated, or not written by np.savez")
        raise DataError(f"{path}: cannot be read as .npz ({what})")


def _npz_object_keys(path: Path, keys) -> list[str]:
    """The members among ``keys`` of an ``.npz`` whose dtype holds Python objects (np.save pickles them; loading
    them could run code), read from the .npy headers only."""
    import zipfile

    found = []
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        for key in keys:
            member = f"{key}.npy"
            if member not in names:
                continue
            try:
                with z.open(member) as fh:
                    major, _ = np.lib.format.read_magic(fh)
                    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                    _, _, dtype = read(fh)
            except (ValueError, OSError, zipfile.BadZipFile):
                continue  # a damaged member: np.load says what is wrong with it
            if np.dtype(dtype).hasobject:
                found.append(key)
    return found


def _pickle_refusal(keys) -> str:
    names = ", ".join(repr(k) for k in keys)
    return (f"refused: {'key' if len(keys) == 1 else 'keys'} {names} hold{'s' if len(keys) == 1 else ''} pickled "
            "Python objects (loading them can run code); save numeric arrays instead: np.savez(FILE, NAME=array, ...)")


def safe_torch_load(path, error: type[Exception], refused: str, unreadable: str):
    """``torch.load(path, weights_only=True)`` on the CPU, torch's warnings muted; a failure is one ``error`` line:
    ``"PATH: refused"`` for a file holding pickled objects (whose code never runs), else ``"PATH: unreadable
    (what went wrong)"``.  The one loader of checkpoints and of a user's ``.pt`` data."""
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # torch warns about old pickle protocols: the error below says enough
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises several types for foreign or broken files
        text = str(exc)
        if "weights_only" in text or "Unsupported global" in text or "GLOBAL" in text:
            raise error(f"{path}: {refused}") from None
        raise error(f"{path}: {unreadable} ({_torch_load_detail(exc)})") from None


def _read_pt(path: Path):
    """A user's ``.pt`` data file through :func:`safe_torch_load`, its failures in the data's terms."""
    if path.stat().st_size == 0:
        raise DataError(f"{path}: cannot be read as .pt (an empty file)")
    return safe_torch_load(path, DataError,
                           refused="refused: the file holds pickled Python objects (loading them can run code); "
                                   "save a dict of tensors instead: torch.save({'x': tensor, ...})",
                           unreadable="cannot be read as .pt, a file written by torch.save")


def resolve_paths(paths) -> list[Path]:
    """Expand one path, a glob pattern or a sequence of them into a list of existing files (sorted per pattern)."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not items:
        raise DataError("no data file given")
    out: list[Path] = []
    for item in items:
        text = os.fspath(item)
        if any(ch in text for ch in "*?["):
            matches = sorted(_glob.glob(text))
            if not matches:
                raise DataError(f"{text}: no file matches this pattern")
            out += [Path(m) for m in matches]
        else:
            path = Path(text)
            if not path.exists():
                hint = ""
                if Path(text + ".partial").exists():
                    hint = f" (an unfinished generation {text}.partial exists: run the generation again to resume it)"
                raise DataError(f"{path}: file not found{hint}")
            if path.is_dir():
                raise DataError(f"{path}: is a directory, expected a data file")
            out.append(path)
    return out


class _File:
    """One file: a lazy HDF5 reader (opformer or v7.3 or plain) or an in-memory dict."""

    def __init__(self, path: Path, keys: Sequence[str]):
        self.path = path
        self.keys = tuple(keys)
        self.memory: dict[str, np.ndarray] | None = None
        self.transposed = False
        self.header: dict | None = None
        self.coords: dict[str, np.ndarray] = {}
        suffix = path.suffix.lower()
        if suffix == ".partial":  # an unfinished opformer generation (reported as such below)
            suffix = Path(path.stem).suffix.lower() or ".h5"
        if suffix == ".mat":
            if h5py.is_hdf5(path):
                self.transposed = True
                self._probe_hdf5()
            else:
                self._load_mat_v5()
        elif suffix in _HDF5_SUFFIXES:
            self._probe_hdf5()
        elif suffix == ".npz":
            self._load_npz()
        elif suffix == ".pt":
            self._load_pt()
        else:
            raise DataError(f"{path}: {_unsupported(suffix)}")
        self._check_samples()

    # -- opening ---------------------------------------------------------------------------------------------
    def _missing(self, available) -> None:
        available = sorted(str(k) for k in available)
        for key in self.keys:
            if key not in available:
                raise MissingKeyError(f"{self.path}: key {key!r} not found; available keys: {available}", key=key,
                                      path=str(self.path), available=available)

    def _probe_hdf5(self) -> None:
        refuse_empty_file(self.path, "HDF5")
        try:
            with h5py.File(self.path, "r") as h5:
                if h5.attrs.get("format") == FORMAT:
                    self.header = read_header(self.path)
                    n = self.header["stop"] - self.header["start"]
                    if not self.header["complete"] or self.header["n_done"] != n:
                        raise DataError(
                            f"{self.path}: incomplete data file ({self.header['n_done']} of {n} samples written); "
                            f"finish the generation first"
                        )
                    self.coords = {k: h5[k][...] for k in ("x", "y", "t") if k in h5}
                if self.transposed:  # a v7.3 MAT-file: its variables and their MATLAB classes
                    variables = _mat73_variables(h5)
                    self._missing(name for name, _, _ in variables)
                    for key in self.keys:
                        _refuse_matlab(self.path, key, variables)
                else:
                    self._missing(_hdf5_datasets(h5))
                self.shapes = {}
                for key in self.keys:
                    if h5[key].shape is None:  # h5py.Empty: a dataset with a type and no values
                        raise DataError(f"{self.path}: {key!r} is an empty HDF5 dataset (it holds no values)")
                    _check_hdf5_numeric(self.path, key, h5[key])
                    shape = tuple(h5[key].shape)
                    self.shapes[key] = shape[::-1] if self.transposed else shape
        except OSError as exc:
            raise DataError(f"{self.path}: cannot be read as HDF5 ({hdf5_detail(_first_line(exc))})") from None

    def _load_mat_v5(self) -> None:
        refuse_empty_file(self.path, "a MATLAB file")
        # the headers (a key that holds no numbers is refused unread); the fields of the structs that keys name
        tops, structs = {key.split("/", 1)[0] for key in self.keys}, {}
        variables = _mat_v5_variables(self.path, structs={key.split("/", 1)[0] for key in self.keys if "/" in key},
                                      read=structs)
        self._missing(name for name, _, _ in variables)
        for key in self.keys:
            _refuse_matlab(self.path, key, variables, every=lambda: _mat_v5_variables(self.path))
        rest = sorted(tops - set(structs))  # the structs read for the listing are not read again
        data = {**(_load_mat_v5_variables(self.path, rest) if rest else {}), **structs}
        self._missing([k for k in data if not k.startswith("__")] + [k for k in self.keys if "/" in k])
        self._set_memory({k: _v5_field(data[k.split("/", 1)[0]], k.split("/")[1:]) for k in self.keys})

    def _load_npz(self) -> None:
        _check_npz(self.path)
        pickled = _npz_object_keys(self.path, self.keys)
        if pickled:
            raise DataError(f"{self.path}: {_pickle_refusal(pickled)}")
        try:
            with np.load(self.path, allow_pickle=False) as data:
                self._missing(data.files)
                self._set_memory({k: data[k] for k in self.keys})
        except DataError:
            raise
        except (OSError, ValueError, EOFError) as exc:
            raise DataError(f"{self.path}: cannot be read as .npz ({_first_line(exc)})") from None

    def _load_pt(self) -> None:
        import torch

        data = _read_pt(self.path)
        if not isinstance(data, dict):
            raise DataError(f"{self.path}: expected a dict of named tensors or arrays, found {type(data).__name__}")
        self._missing(list(data))
        arrays = {}
        for key in self.keys:
            value = data[key]
            arrays[key] = value.detach().cpu().double().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        self._set_memory(arrays)

    def _set_memory(self, arrays: dict) -> None:
        self.memory = {}
        for key, value in arrays.items():
            value = np.asarray(value)
            if value.dtype == np.bool_:  # masks and indicator fields are read as 0/1
                value = value.astype(np.float64)
            if not np.issubdtype(value.dtype, np.number) or np.issubdtype(value.dtype, np.complexfloating):
                raise DataError(f"{self.path}: key {key!r} expected a real numeric array, found dtype {value.dtype}")
            self.memory[key] = value
        self.shapes = {k: tuple(v.shape) for k, v in self.memory.items()}

    def _check_samples(self) -> None:
        first = self.keys[0]
        for key in self.keys:
            if len(self.shapes[key]) < 1:
                raise DataError(f"{self.path}: key {key!r} expected an array with a sample axis, found shape {self.shapes[key]}")
            if self.shapes[key][0] == 0:
                raise DataError(f"{self.path}: key {key!r} holds no samples (shape {self.shapes[key]}): an empty array")
            if self.shapes[key][0] != self.shapes[first][0]:
                raise DataError(
                    f"{self.path}: key {key!r} has {self.shapes[key][0]} samples (shape {self.shapes[key]}), "
                    f"expected {self.shapes[first][0]} like key {first!r} (shape {self.shapes[first]})"
                )

    @property
    def n_samples(self) -> int:
        return self.shapes[self.keys[0]][0]

    # -- reading ---------------------------------------------------------------------------------------------
    def read(self, key: str, lo: int, hi: int) -> np.ndarray:
        if self.memory is not None:
            out = self.memory[key][lo:hi]
        else:
            try:
                with h5py.File(self.path, "r") as h5:
                    ds = h5[key]
                    if self.transposed:
                        out = np.transpose(ds[..., lo:hi])
                    else:
                        out = ds[lo:hi]
            except OSError as exc:  # a failed Fletcher-32 checksum or a damaged chunk
                raise DataError(f"{self.path}: key {key!r}, samples [{lo}, {hi}): cannot be read ({exc}); a checksum "
                                "failure means the file was damaged after writing: regenerate it") from None
        return np.asarray(out, dtype=np.float64)


def _nonfinite_rows(block: np.ndarray) -> np.ndarray:
    """Per sample (first axis) of ``block``: whether it holds a NaN or an inf."""
    return ~np.isfinite(block.reshape(block.shape[0], -1)).all(axis=1)


#: the largest float32: the datasets hand the models float32 tensors, where a larger value becomes inf
_F32_MAX = float(np.finfo(np.float32).max)


def _beyond_float32_rows(block: np.ndarray) -> np.ndarray:
    """Per sample (first axis) of ``block``: whether it holds a finite value beyond float32's range."""
    return (np.abs(block.reshape(block.shape[0], -1)) > _F32_MAX).any(axis=1)


def _method(header: dict) -> str | None:
    """How the samples of an opformer file were computed: its ``method`` attribute, or, for a file without one, the
    current method where that computes the same samples (None where it does not or the problem is not known)."""
    from ..pde.generate import RECIPES, method_of, same_method

    stored, recipe = header["method"], header["recipe"]
    if stored is None and recipe.get("problem") in RECIPES and same_method(recipe, None):
        return method_of(recipe)
    return stored


def _shown_method(header: dict) -> str:
    return f"generator {header['method']}" if header["method"] else "an earlier opformer"


class ArraySource:
    """Named sample arrays of one data set, read by global sample index without loading everything.

    Attributes:
        paths: the files, in index order.
        keys: the array names.
        n_samples: the number of samples.
        shapes: ``{key: (n_samples, *sample_shape)}``.
        first_index: global index of sample 0 (the ``start`` of the first shard; 0 for other files).
        recipe: the generation recipe (dict) of opformer files, else ``None``.
        coords: ``{"x": (n,), "y": (n,)}`` stored grid coordinates of opformer files, else ``{}``.
        kind: ``"opformer"``, ``"mat"`` or ``"arrays"``.
    """

    def __init__(self, paths, keys: Sequence[str]):
        self.paths = resolve_paths(paths)
        self.keys = tuple(keys)
        if not self.keys:
            raise DataError("no keys given")
        files = [_File(p, self.keys) for p in self.paths]
        self.recipe = None
        self.coords: dict[str, np.ndarray] = {}
        self.first_index = 0
        if any(f.header is not None for f in files):
            self.kind = "opformer"
            self._check_shards(files)
            self.recipe = files[0].header["recipe"]
            self.coords = files[0].coords
            self.first_index = files[0].header["start"]
        else:
            if len(files) > 1:
                raise DataError(
                    f"several files ({[str(p) for p in self.paths]}) can only be read as one data set if they are "
                    f"opformer shards; read other files one by one"
                )
            self.kind = "mat" if self.paths[0].suffix.lower() == ".mat" else "arrays"
        self._files = files
        self._offsets = np.cumsum([0] + [f.n_samples for f in files])
        self.n_samples = int(self._offsets[-1])
        first = files[0]
        for f in files[1:]:
            for key in self.keys:
                if f.shapes[key][1:] != first.shapes[key][1:]:
                    raise DataError(f"{f.path}: key {key!r} sample shape {f.shapes[key][1:]}, expected {first.shapes[key][1:]} like {first.path}")
        self.shapes = {k: (self.n_samples, *first.shapes[k][1:]) for k in self.keys}

    def _check_shards(self, files: list[_File]) -> None:
        for f in files:
            if f.header is None:
                raise DataError(f"{f.path}: not an opformer data file; it cannot be combined with the shards {[str(g.path) for g in files if g.header]}")
        files.sort(key=lambda f: f.header["start"])
        ref = files[0]
        for f in files[1:]:
            diffs = recipe_diff(ref.header["recipe"], f.header["recipe"])
            if diffs:
                raise DataError(f"{f.path}: recipe differs from {ref.path} ({'; '.join(diffs)}); shards must share one recipe")
        for prev, nxt in itertools.pairwise(files):
            a, b = prev.header, nxt.header
            if b["start"] < a["stop"]:
                raise DataError(f"{nxt.path}: samples [{b['start']}, {b['stop']}) overlap {prev.path} [{a['start']}, {a['stop']})")
            if b["start"] > a["stop"]:
                raise DataError(f"{nxt.path}: starts at sample {b['start']} but {prev.path} stops at {a['stop']}; samples [{a['stop']}, {b['start']}) are missing")
        methods = {f.path: _method(f.header) for f in files}
        for f in files[1:]:
            if methods[f.path] != methods[ref.path]:
                raise DataError(f"{f.path}: its samples were computed by {_shown_method(f.header)}, those of "
                                f"{ref.path} by {_shown_method(ref.header)}; shards must come from one version of "
                                f"the generator: regenerate the older one")
        self._canonical = canonical_recipe(ref.header["recipe"])

    @staticmethod
    def _nonfinite_samples(f, key: str, rows=_nonfinite_rows) -> list[int]:
        """The samples of ``key`` in file ``f`` (its own positions) that hold NaN or inf (``rows``: another test
        per sample), read in blocks."""
        per = max(1, (1 << 24) // max(1, int(np.prod(f.shapes[key][1:]))))  # about 16M values a block
        bad: list[int] = []
        for lo in range(0, f.n_samples, per):
            bad += (np.flatnonzero(rows(f.read(key, lo, min(lo + per, f.n_samples)))) + lo).tolist()
        return bad

    def describe(self) -> str:
        """Short name for messages: the file, or the first file and the count."""
        return str(self.paths[0]) if len(self.paths) == 1 else f"{self.paths[0]} (+{len(self.paths) - 1} shards)"

    def read(self, key: str, indices) -> np.ndarray:
        """Samples ``indices`` (local positions 0..n_samples-1, any order) of ``key`` as float64 ``(len, *shape)``.

        Raises :class:`DataError` naming the file, key and sample if a value is NaN or infinite.
        """
        if key not in self.keys:
            raise DataError(f"{self.describe()}: key {key!r} was not opened; opened keys: {list(self.keys)}")
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_samples):
            raise DataError(f"{self.describe()}: sample indices must be in [0, {self.n_samples}), found {idx.min()}..{idx.max()}")
        out = np.empty((idx.size, *self.shapes[key][1:]), dtype=np.float64)
        if idx.size == 0:
            return out
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]
        pos = 0
        # read contiguous runs inside each file as one slice
        breaks = np.flatnonzero(np.diff(sorted_idx) != 1) + 1
        for run in np.split(sorted_idx, breaks):
            lo_run, hi_run = int(run[0]), int(run[-1]) + 1
            while lo_run < hi_run:
                fi = int(np.searchsorted(self._offsets, lo_run, side="right") - 1)
                f = self._files[fi]
                lo, hi = lo_run - self._offsets[fi], min(hi_run, self._offsets[fi + 1]) - self._offsets[fi]
                block = f.read(key, int(lo), int(hi))
                # one pass for both checks: a row's largest |value| is NaN or inf where the row holds one
                largest = (np.abs(block.reshape(block.shape[0], -1)).max(axis=1) if block[:1].size else
                           np.zeros(block.shape[0]))
                if not np.isfinite(largest).all():  # every such sample of the file named, not only those of this read (a split)
                    which = self._nonfinite_samples(f, key)
                    shown = ", ".join(map(str, which[:8])) + (f" and {len(which) - 8} more" if len(which) > 8 else "")
                    raise DataError(f"{f.path}: key {key!r} contains NaN or inf in {len(which)} of its "
                                    f"{f.n_samples} samples: {shown} (shape {f.shapes[key]})")
                if (largest > _F32_MAX).any():  # float32 (the models' precision) would make them inf
                    which = self._nonfinite_samples(f, key, _beyond_float32_rows)
                    shown = ", ".join(map(str, which[:8])) + (f" and {len(which) - 8} more" if len(which) > 8 else "")
                    raise DataError(f"{f.path}: key {key!r} holds values beyond float32's range (|x| > "
                                    f"{_F32_MAX:.3g}, largest {largest.max():.3g}) in {len(which)} of its "
                                    f"{f.n_samples} samples: {shown}; the models compute in float32: rescale the data")
                out[pos : pos + block.shape[0]] = block
                pos += block.shape[0]
                lo_run += hi - lo
        result = np.empty_like(out)
        result[order] = out
        return result


def describe_arrays(path) -> list[tuple[str, tuple, str]]:
    """``(name, shape, dtype)`` of every array in one file of any supported type, without reading the values (for
    ``opformer data info`` and key errors): HDF5 datasets by their full path (``group/name``), MATLAB variables
    with their MATLAB class as the type (``double``, ``logical``, ``char``, ``cell``, ``struct``, ``complex
    double``, ...; shapes as MATLAB gives them), the members of an ``.npz``, the tensors of a ``.pt`` dict."""
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path}: is a directory; give a data file (.h5, .npz, .pt, .mat)")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    suffix = path.suffix.lower()
    found: list[tuple[str, tuple, str]] = []
    if suffix in _HDF5_SUFFIXES or suffix == ".mat":
        refuse_empty_file(path, "a MATLAB file" if suffix == ".mat" else "HDF5")
    if suffix == ".mat" and h5py.is_hdf5(path):
        try:
            with h5py.File(path, "r") as h5:
                found = _mat73_variables(h5)
        except OSError as exc:
            raise DataError(f"{path}: cannot be read as HDF5 ({hdf5_detail(_first_line(exc))})") from None
    elif suffix in _HDF5_SUFFIXES:
        try:
            with h5py.File(path, "r") as h5:
                for name in _hdf5_datasets(h5):
                    if h5[name].shape is None:  # h5py.Empty: a type and no values
                        found.append((name, (), f"{h5[name].dtype} (empty: no values)"))
                        continue
                    found.append((name, tuple(h5[name].shape), str(h5[name].dtype)))
        except OSError as exc:
            raise DataError(f"{path}: cannot be read as HDF5 ({hdf5_detail(_first_line(exc))})") from None
    elif suffix == ".mat":
        found = _mat_v5_variables(path)
    elif suffix == ".npz":
        import zipfile

        _check_npz(path)
        with zipfile.ZipFile(path) as z:  # the .npy headers only, not the values
            for member in z.namelist():
                if member.endswith(".npy"):
                    with z.open(member) as fh:
                        major, _ = np.lib.format.read_magic(fh)
                        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                        shape, _, dtype = read(fh)
                    found.append((member[: -len(".npy")], tuple(shape), str(dtype)))
    elif suffix == ".pt":
        data = _read_pt(path)
        if not isinstance(data, dict):
            raise DataError(f"{path}: expected a dict of named tensors or arrays, found {type(data).__name__}")
        found = [(str(k), tuple(v.shape), str(v.dtype).replace("torch.", "")) if hasattr(v, "shape") else
                 (str(k), (), f"{type(v).__name__} (not an array)") for k, v in data.items()]
    else:
        raise DataError(f"{path}: {_unsupported(suffix)}")
    return found


def open_source(paths, keys: Sequence[str]) -> ArraySource:
    """Open a data set for reading by sample index; see :class:`ArraySource` and the module doc for the formats."""
    return ArraySource(paths, keys)


def load_arrays(path, keys: Sequence[str] = ("a", "u")) -> dict[str, np.ndarray]:
    """Load whole named arrays ``{key: float64 array (n_samples, ...)}`` from any supported file (or shard set).

    Examples: ``load_arrays("burgers_data_R10.mat", keys=("a", "u"))``,
    ``load_arrays("my_data.npz", keys=("coeff", "sol"))``, ``load_arrays("shards/darcy_*.h5", ("coeff", "sol"))``.
    """
    if isinstance(keys, str):
        keys = (keys,)
    source = ArraySource(path, keys)
    everything = np.arange(source.n_samples)
    return {k: source.read(k, everything) for k in source.keys}
