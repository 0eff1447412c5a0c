"""The problem-independent pieces between a data file and a batch: splits, normalizers valid on any grid, strided
views of a stored grid, reading samples in blocks, and a dataset of named tensors.

What a problem does with its arrays (gradients for the H1 term, pooling, noise) is its Task's business
(:mod:`opformer.tasks`); this module knows nothing of problems.

Every item of :class:`FieldDataset` is a dict of float32 tensors (a DataLoader stacks them into a batch axis).
Grids are channels-last: one sample is ``(*grid, channels)``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Optional, Union

import numpy as np
import torch

from ..pde.errors import DataError
from .readers import ArraySource

__all__ = ["UnitGaussianNormalizer", "make_splits", "FieldDataset", "stride_for", "read_blocks", "SplitArrays",
           "sample_array", "suspicious_samples"]

_BLOCK = 32  # samples read and transformed at a time (bounds the memory of full-resolution arrays)


def constant_input_warning(normalizer: "UnitGaussianNormalizer", arrays, splits=("val", "test")) -> Optional[str]:
    """A warning when the training inputs are the same in every sample at some grid points while the inputs of the
    other ``splits`` differ there: a per-point normalizer divides those differences by its eps alone and the model
    sees values about 1/eps times larger than any it was trained on (a few training samples of a piecewise-constant
    field do this).  ``arrays``: the :class:`SplitArrays` the normalizer was fitted on.  None when all is well."""
    if not normalizer.per_point:
        return None
    std = normalizer.std.double()
    flat = std.reshape(-1)
    constant = std <= 1e-9 * float(flat.max()) if float(flat.max()) > 0 else torch.ones_like(std, dtype=torch.bool)
    if not bool(constant.any()):
        return None
    mean = normalizer.mean.double()
    tol = 1e-6 * (float(mean.abs().max()) + float(flat.max()) + 1e-30)
    differ = []
    for split in splits:
        if split not in arrays.arrays:
            continue
        x = torch.as_tensor(np.asarray(arrays[split]["input"]), dtype=torch.float64)
        if x.shape[1:] != mean.shape or not len(x):
            continue
        if bool(((x - mean).abs() > tol)[:, constant].any()):
            differ.append(split)
    if not differ:
        return None
    n_train = len(arrays.train()["input"])
    return (f"the input is the same in all {n_train} training samples at {int(constant.sum())} of {constant.numel()} "
            f"grid points, while the {' and '.join(differ)} inputs differ there: the per-point normalization has no "
            f"spread to divide by at those points and amplifies the differences about {1 / normalizer.eps:.0e} times, "
            "so expect large errors on those samples; train on more samples (each point's input must vary over the "
            "training set)")


class UnitGaussianNormalizer(torch.nn.Module):
    """Standardization ``(x - mean) / (std + eps)``, per grid point or per channel, valid on any grid.

    ``mean`` and ``std`` have the shape of one sample, ``(*grid, channels)`` (per point, as the paper's code), or
    ``(channels,)`` (per channel).  A per-point normalizer is a function on the domain: its fields sit at the
    training coordinates ``axes`` (one 1D array per grid axis, a tensor-product grid in [0, 1]^d) and are evaluated
    elsewhere by (multi)linear interpolation, with wrap-around for ``kind="periodic"``.  The coordinates of the
    evaluation grid are taken from ``coords`` when given, else from its shape and ``kind``: "node" i/(n-1),
    "cell" (i + 1/2)/n, "periodic" j/n.
    """

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, eps: float = 1e-5, nodes: bool = True, *,
                 kind: Optional[str] = None, axes=None):
        super().__init__()
        mean = torch.as_tensor(mean, dtype=torch.float32)
        std = torch.as_tensor(std, dtype=torch.float32)
        if mean.shape != std.shape:
            raise DataError(f"normalizer: mean shape {tuple(mean.shape)} != std shape {tuple(std.shape)}")
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.eps = float(eps)
        self.kind = kind or ("node" if nodes else "cell")
        if self.kind not in _KINDS:
            raise DataError(f"normalizer: grid kind must be one of {', '.join(_KINDS)}, got {self.kind!r}")
        grid = tuple(mean.shape[:-1]) if mean.dim() > 1 else ()
        if axes is None:
            axes = [_standard_axis(self.kind, n) for n in grid]
        self.axes = [np.asarray(a, dtype=np.float64).reshape(-1) for a in axes]
        if tuple(len(a) for a in self.axes) != grid:
            raise DataError(f"normalizer: coordinate axes of lengths {[len(a) for a in self.axes]} for a grid {grid}")

    @property
    def nodes(self) -> bool:
        return self.kind == "node"

    @classmethod
    def fit(cls, x, eps: float = 1e-5, *, per_point: bool = True, nodes: bool = True, kind: Optional[str] = None,
            axes=None) -> UnitGaussianNormalizer:
        """Fit on ``x`` of shape ``(n_samples, *grid, channels)`` (statistics in float64, unbiased std)."""
        x = torch.as_tensor(np.asarray(x), dtype=torch.float64)
        if x.ndim < 2 or x.shape[0] < 2:
            raise DataError(f"the inputs are standardized with the training samples' mean and spread, which needs at "
                            f"least 2 training samples; the training split has {x.shape[0] if x.ndim else 0} (more "
                            "samples, or a smaller --n-val/--n-test)")
        if per_point:
            std = x.std(0)
            return cls(x.mean(0), std, _scaled_eps(eps, std), nodes, kind=kind, axes=axes)
        flat = x.reshape(-1, x.shape[-1])
        std = flat.std(0)
        return cls(flat.mean(0), std, _scaled_eps(eps, std), nodes, kind=kind)

    @property
    def per_point(self) -> bool:
        return self.mean.dim() > 1

    def describe(self) -> dict:
        """The JSON-able description that rebuilds an empty normalizer of this shape (values come from weights)."""
        return {"shape": list(self.mean.shape), "eps": self.eps, "kind": self.kind,
                "axes": [a.tolist() for a in self.axes]}

    @classmethod
    def empty(cls, desc: dict) -> UnitGaussianNormalizer:
        shape = tuple(desc["shape"])
        return cls(torch.zeros(shape), torch.ones(shape), float(desc["eps"]), kind=desc.get("kind", "node"),
                   axes=desc.get("axes"))

    def _fields(self, like: torch.Tensor, coords: Optional[torch.Tensor] = None):
        """mean and std + eps on the grid of ``like`` (batch, *grid, channels)."""
        mean, std = self.mean, self.std + self.eps
        grid = tuple(like.shape[1:-1])
        if self.per_point and tuple(mean.shape[:-1]) != grid:
            if len(grid) != mean.dim() - 1:
                raise DataError(f"a normalizer of a {mean.dim() - 1}D grid cannot be evaluated on a grid {grid}")
            if coords is not None:
                c = coords[0]
                targets = [c[(slice(None),) + (0,) * (len(grid) - 1) + (0,)] if k == 0 else
                           c[(0,) * k + (slice(None),) + (0,) * (len(grid) - 1 - k) + (k,)] for k in range(len(grid))]
                targets = [t.detach().double().cpu().numpy() for t in targets]
            else:
                targets = [_standard_axis(self.kind, n) for n in grid]
            mats = [torch.as_tensor(_interp_matrix(a, t, self.kind == "periodic"), dtype=mean.dtype,
                                    device=mean.device) for a, t in zip(self.axes, targets)]
            mean, std = (_apply(mats, f) for f in (mean, std))
        return mean.to(like.dtype), std.to(like.dtype)

    def encode(self, x: torch.Tensor, coords: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(x - mean) / (std + eps)`` for ``x`` of shape ``(batch, *grid, channels)`` at ``coords`` (optional)."""
        mean, std = self._fields(x, coords)
        return (x - mean) / std

    def decode(self, x: torch.Tensor, coords: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Inverse of :meth:`encode`."""
        mean, std = self._fields(x, coords)
        return x * std + mean

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encode(x)

    def extra_repr(self) -> str:
        return f"shape={tuple(self.mean.shape)}, eps={self.eps:g}, kind={self.kind}"


_KINDS = ("node", "cell", "periodic")


def _scaled_eps(eps: float, std: torch.Tensor) -> float:
    """``eps``, or the data's own spread where that is smaller: the smallest root-mean-square ``std`` (*grid,
    channels) of a channel that varies.  The reference's absolute 1e-5 is negligible next to the spread of data in
    units of order one (the paper's data: 1e-3 and up), but data in small units (a spread of 4e-9) were divided by
    ~eps instead of their spread and standardized to ~4e-4: a model's starting outputs of order one decoded to noise
    far above the targets (a 1-epoch FNO: relative L2 0.54 against 0.058 on the same data in larger units).
    Unchanged (``eps``) for every spread >= eps and for data that do not vary at all."""
    s = std.double().reshape(-1, std.shape[-1]) if std.dim() else std.double().reshape(1, 1)
    rms = s.pow(2).mean(0).sqrt()
    rms = rms[rms > 0]
    return float(min(eps, float(rms.min()))) if rms.numel() else float(eps)


def _standard_axis(kind: str, n: int) -> np.ndarray:
    if kind == "node":
        return np.arange(n) / max(n - 1, 1)
    if kind == "cell":
        return (np.arange(n) + 0.5) / n
    return np.arange(n) / n


def _interp_matrix(x0: np.ndarray, x1: np.ndarray, periodic: bool) -> np.ndarray:
    """The (n1, n0) matrix of linear interpolation from points ``x0`` (ascending) to ``x1``; constant beyond the
    ends, or wrapped around the unit period."""
    n0 = len(x0)
    if n0 == 1:
        return np.ones((len(x1), 1))
    if periodic:
        xe, x1 = np.append(x0, x0[0] + 1.0), np.mod(x1 - x0[0], 1.0) + x0[0]
    else:
        xe, x1 = x0, np.clip(x1, x0[0], x0[-1])
    i = np.clip(np.searchsorted(xe, x1, side="right") - 1, 0, len(xe) - 2)
    w = (x1 - xe[i]) / (xe[i + 1] - xe[i])
    m = np.zeros((len(x1), len(xe)))
    rows = np.arange(len(x1))
    np.add.at(m, (rows, i), 1.0 - w)
    np.add.at(m, (rows, i + 1), w)
    if periodic:
        m[:, 0] += m[:, -1]
        m = m[:, :-1]
    return m


def _apply(mats: list, field: torch.Tensor) -> torch.Tensor:
    """Apply one interpolation matrix per grid axis to ``field`` (*grid, channels)."""
    for k, m in enumerate(mats):
        field = torch.tensordot(m, field.movedim(k, 0), dims=1).movedim(0, k)
    return field


def _count(value: Union[int, float, None], total: int, what: str, flag: str) -> int:
    """A count given as an int, or as a fraction (< 1) of ``total`` (rounded, at least 1 if the fraction is > 0)."""
    if isinstance(value, float) and value < 1:
        return max(1, int(round(value * total))) if value > 0 else 0
    n = int(value)
    if n < 0:
        raise DataError(f"{flag} must be >= 0, got {value}")
    return n


def make_splits(
    n_file: int,
    n_test_file: Optional[int] = None,
    *,
    n_train: Optional[int] = None,
    n_val: Union[int, float] = 0.1,
    n_test: Union[int, float, None] = None,
    train_pool: Optional[int] = None,
    where: str = "the training file",
    min_val: int = 0,
    min_train: int = 1,
) -> dict[str, np.ndarray]:
    """Sample positions of the train, validation and test splits (flags as in ``opformer train --help``).

    Test: with a separate test file (``n_test_file`` given), its last ``n_test`` samples (None: all of them);
    otherwise the last ``n_test`` samples of the training file (a count, or a fraction of it).  Pool: the first
    ``train_pool`` samples (default: all that are not test samples).  Validation: the last ``n_val`` of the pool
    (count or fraction of the pool).  Training: the first ``n_train`` of the pool (default: the rest).  ``min_val``:
    the fewest validation samples accepted (a training run needs one); ``min_train``: the fewest training samples a
    file must leave (a pair task trains on at least 2; a trajectory gives many pairs).
    """
    separate = n_test_file is not None
    if separate:
        nt = n_test_file if n_test is None else _count(n_test, n_test_file, "test", "--n-test")
        if not 1 <= nt <= n_test_file:
            raise DataError(f"--n-test {n_test} must be between 1 and the {n_test_file} samples of the test file")
        test = np.arange(n_test_file - nt, n_test_file)
        available = n_file
    else:
        nt = _count(0.1 if n_test is None else n_test, n_file, "test", "--n-test")
        if n_file < min_train + 1 + min_val:
            raise DataError(f"{where} has {n_file} sample{'s' if n_file != 1 else ''}: too few to train, "
                            f"{'validate ' if min_val else ''}and test on (at least {min_train + 1 + min_val})")
        if nt < 1:
            raise DataError(f"--n-test {n_test}: the test split needs at least one sample (the run's error is "
                            "measured on it)")
        if nt >= n_file:
            raise DataError(f"--n-test {n_test} must leave samples for training: {where} has {n_file} samples")
        test = np.arange(n_file - nt, n_file)
        available = n_file - nt
    pool = available if train_pool is None else int(train_pool)
    if not 1 <= pool <= available:
        extra = "" if separate else f" ({nt} are test samples)"
        raise DataError(f"--train-pool {train_pool} is more than the {available} samples available in {where}{extra}")
    nv = _count(n_val, pool, "validation", "--n-val")
    if nv < min_val:
        raise DataError(f"--n-val {n_val}: the validation split needs at least {min_val} sample"
                        f"{'s' if min_val != 1 else ''} (the best epoch is chosen on it, and the divergence guard "
                        "watches it)")
    if nv >= pool:
        plural = "s" if pool != 1 else ""
        raise DataError(f"--n-val {n_val} leaves no training sample: {where} has {pool} sample{plural} "
                        f"for training and validation{'' if separate else f' after {nt} for testing'} (the "
                        "splits default to 10 % test and 10 % validation; too few samples, or set --n-val/--n-test)")
    ntr = pool - nv if n_train is None else int(n_train)
    if not 1 <= ntr <= pool - nv:
        raise DataError(f"--n-train {n_train} is more than the {pool - nv} samples left for training in {where} "
                        f"({n_file} samples: {nv} validation" + ("" if separate else f", {nt} test") + ")")
    return {"train": np.arange(ntr), "val": np.arange(pool - nv, pool), "test": test}


def stride_for(found: int, wanted: Optional[int], *, nodes: bool, where: str) -> int:
    """The stride that takes a stored grid of ``found`` points to ``wanted`` (None: 1).

    Node grids keep both ends, ``found - 1 = s (wanted - 1)``; periodic/cell grids ``found = s * wanted``."""
    if wanted is None or wanted == found:
        return 1
    if nodes:
        ok = sorted({(found - 1) // s + 1 for s in range(1, found) if (found - 1) % s == 0 and (found - 1) // s >= 2})
        if wanted >= 3 and (found - 1) % (wanted - 1) == 0:
            return (found - 1) // (wanted - 1)
    else:
        ok = sorted({found // s for s in range(1, found + 1) if found % s == 0 and found // s >= 4})
        if wanted >= 4 and found % wanted == 0:  # (the smallest grid listed below)
            return found // wanted
    least = 3 if nodes else 4
    why = (f"is below the smallest grid of {least} points" if wanted < least
           else f"is not a stride of the {found} points stored in {where}")
    error = DataError(f"--resolution {wanted} {why}; possible: {', '.join(map(str, ok[::-1]))}")
    error.possible = ok[::-1]  # the resolutions the stored grid has, for a caller that words the refusal itself
    raise error


def sample_array(a: np.ndarray, dim: int, key: str, where: str) -> np.ndarray:
    """``a`` as ``(n, *grid)`` with ``dim`` grid axes: a trailing channel axis of size 1 is dropped."""
    if a.ndim == dim + 2 and a.shape[-1] == 1:
        a = a[..., 0]
    if a.ndim != dim + 1:
        grid = "n" if dim == 1 else "n, n"
        raise DataError(f"{where}: key {key!r} expected shape (samples, {grid}) or (samples, {grid}, 1), "
                        f"found {a.shape}")
    return a


def read_blocks(src: ArraySource, indices: np.ndarray, transform: Callable[..., dict]) -> dict[str, np.ndarray]:
    """Read ``src.keys`` for ``indices`` in blocks, apply ``transform(*arrays) -> {name: array}``, concatenate."""
    parts: dict[str, list] = {}
    for lo in range(0, len(indices), _BLOCK):
        block = indices[lo : lo + _BLOCK]
        for name, arr in transform(*(src.read(k, block) for k in src.keys)).items():
            parts.setdefault(name, []).append(arr)
    return {k: np.concatenate(v) for k, v in parts.items()}


class SplitArrays:
    """The transformed arrays of the requested splits: the test samples from the test source, the others from the
    training source.  :meth:`train` gives the training split, reading it only when it was not requested (a
    normalizer is always fitted on it, also when only the test split is built)."""

    def __init__(self, train_src: ArraySource, test_src: ArraySource, indices: dict, splits, transform: Callable):
        self._train_src, self._test_src, self._indices, self._transform = train_src, test_src, indices, transform
        self.arrays = {split: self._read(split) for split in splits}

    def _read(self, split: str) -> dict[str, np.ndarray]:
        src = self._test_src if split == "test" else self._train_src
        return read_blocks(src, self._indices[split], self._transform)

    def __getitem__(self, split: str) -> dict[str, np.ndarray]:
        return self.arrays[split]

    def train(self) -> dict[str, np.ndarray]:
        return self.arrays["train"] if "train" in self.arrays else self._read("train")

    def origin(self, split: str) -> tuple[np.ndarray, str]:
        """Where the samples of ``split`` come from: their numbers in the source (its own sample numbers: the global
        ones of a sharded file) and the source's short name, for messages about single samples."""
        src = self._test_src if split == "test" else self._train_src
        return src.first_index + np.asarray(self._indices[split], dtype=np.int64), src.describe()


def _f32(x) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float32)


class FieldDataset(torch.utils.data.Dataset):
    """Samples as dicts of tensors: ``items`` hold one entry per sample (first axis), ``shared`` the same for all
    (e.g. the coordinates).  Arrays are stored as float32 tensors.  ``origin`` (numbers, source name), as
    :meth:`SplitArrays.origin` gives it, lets :meth:`describe` name a sample by its number in the user's file."""

    def __init__(self, items: dict, shared: Optional[dict] = None, info: Optional[dict] = None,
                 origin: Optional[tuple] = None):
        self._items = {k: _f32(v) for k, v in items.items()}
        self._shared = {k: _f32(v) for k, v in (shared or {}).items()}
        lengths = {int(v.shape[0]) for v in self._items.values()}
        if len(lengths) != 1:
            raise DataError(f"items of different lengths: { {k: v.shape for k, v in self._items.items()} }")
        self.info = dict(info or {})
        self.origin = origin

    def describe(self, k: int) -> str:
        """Sample ``k`` in the user's terms: "sample N of FILE" (N its number in the file) when the origin is known."""
        if self.origin is None:
            return f"sample {k} of the split"
        numbers, where = self.origin
        return f"sample {int(numbers[k])} of {where}"

    def __len__(self) -> int:
        return int(next(iter(self._items.values())).shape[0])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        item = {k: v[i] for k, v in self._items.items()}
        item.update(self._shared)
        return item

    def batch(self, indices) -> dict[str, torch.Tensor]:
        """Samples ``indices`` as one batch: what stacking their items gives, with one gather per array instead of a
        copy per item (the training loaders fetch whole batches this way), on the device the arrays are on (see
        :meth:`on_device`)."""
        idx = indices_on(indices, next(iter(self._items.values())).device)
        out = {k: v.index_select(0, idx) for k, v in self._items.items()}
        out.update({k: v.unsqueeze(0).expand(len(idx), *v.shape).contiguous() for k, v in self._shared.items()})
        return out

    def tensors(self, name: str) -> torch.Tensor:
        """All samples of one item, ``(len, ...)``."""
        return self._items[name]

    def nbytes(self) -> int:
        """The bytes its arrays take."""
        return sum(v.numel() * v.element_size() for v in (*self._items.values(), *self._shared.values()))

    def on_device(self, device) -> "FieldDataset":
        """The same samples with every array copied to ``device`` once: :meth:`batch` then gathers there, so a
        training step neither gathers on the host nor copies its batch."""
        moved = copy.copy(self)
        moved._items = {k: v.to(device) for k, v in self._items.items()}
        moved._shared = {k: v.to(device) for k, v in self._shared.items()}
        return moved


def indices_on(indices, device: torch.device) -> torch.Tensor:
    """Sample indices as a long tensor on ``device``: to a CUDA device from pinned memory, so that the copy is queued
    without making the host wait for the device."""
    idx = torch.as_tensor(indices, dtype=torch.long)
    if device.type == "cuda":
        return idx.pin_memory().to(device, non_blocking=True)
    return idx.to(device)


def has_batch(ds) -> bool:
    """Whether a dataset gathers whole batches itself (a callable ``batch(indices)``, as :meth:`FieldDataset.batch`)."""
    return callable(getattr(ds, "batch", None))


def stack_samples(ds, indices) -> dict[str, torch.Tensor]:
    """Samples ``indices`` of any dataset of dicts of tensors as one batch: ``ds.batch(indices)`` where the dataset
    has it (:meth:`FieldDataset.batch`), else its items stacked."""
    if has_batch(ds):
        return ds.batch(indices)
    return torch.utils.data.default_collate([ds[i] for i in indices])


_ZERO_NORM = torch.finfo(torch.float32).tiny  # a target with a norm at or below this is a zero target


def _channel_stats(blocks) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation per channel (the last axis) over float64 blocks of samples."""
    count, s1, s2 = 0, 0.0, 0.0
    for b in blocks:
        dims = tuple(range(b.dim() - 1))
        count, s1, s2 = count + math.prod(b.shape[:-1]), s1 + b.sum(dims), s2 + (b * b).sum(dims)
    mean = s1 / count
    return mean, (s2 / count - mean * mean).clamp_min(0).sqrt()


def _max_scaled_deviation(b: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, start: int) -> torch.Tensor:
    """``max |x - mean_c| / std_c`` over the axes of ``b`` from ``start`` on (a channel of zero spread: infinite
    where x differs from its mean)."""
    dev = (b - mean).abs()
    scaled = torch.where(std > 0, dev / std.clamp_min(torch.finfo(torch.float64).tiny),
                         torch.where(dev > 0, torch.inf, 0.0)).nan_to_num(nan=torch.inf)
    return scaled.flatten(start).amax(dim=start)


def suspicious_samples(datasets: dict, *, limit: float = 50.0, show: int = 10) -> list[str]:
    """One line per split and finding, naming the samples (positions within the split) that would silently spoil a
    run: a target of zero norm (the relative L2 error ``||pred - u|| / ||u||`` divides by it), and an input or target
    far outside the training data, ``max_points |x - mean_c| / std_c > limit`` with the mean and standard deviation
    of channel ``c`` over the whole training split (a corrupted or mis-scaled sample).  Reads each split once, in
    blocks of samples; datasets of pairs drawn from trajectories (with a ``snapshots()`` method) are checked per
    trajectory and snapshot instead."""

    def blocks(ds, name):  # (first index, float64 block (samples, points, channels))
        t = ds.tensors(name)
        for lo in range(0, t.shape[0], _BLOCK):
            b = t[lo : lo + _BLOCK].double()
            yield lo, b.reshape(b.shape[0], -1, b.shape[-1] if b.dim() > 2 else 1)

    def has(ds, name):
        return isinstance(ds, FieldDataset) and name in ds._items and len(ds) > 0

    train = datasets.get("train")
    stats = {name: _channel_stats(b for _, b in blocks(train, name)) for name in ("input", "target")
             if has(train, name)}

    def listed(idx: list, n: int, ds=None) -> str:
        """Positions in the split, with the samples' own numbers in their file where the dataset knows them."""
        more = ", ..." if len(idx) > show else ""
        origin = getattr(ds, "origin", None)
        where = ""
        if origin is not None:
            numbers, source = origin
            where = "; samples " + ", ".join(str(int(numbers[i])) for i in idx[:show]) + f"{more} of {source}"
        return "samples " + ", ".join(map(str, idx[:show])) + more + f" ({len(idx)} of {n}{where})"

    lines = []
    for split, ds in datasets.items():
        n = len(ds) if isinstance(ds, FieldDataset) else 0
        if has(ds, "target"):
            zero = [lo + int(i) for lo, b in blocks(ds, "target")
                    for i in torch.nonzero(b.flatten(1).norm(dim=1) <= _ZERO_NORM).flatten()]
            if zero:
                lines.append(f"{split} split, {listed(zero, n, ds)}: the target has zero norm; the relative L2 loss "
                             "divides by it (remove these samples or choose another loss)")
        for name, (mean, std) in stats.items():
            if not has(ds, name):
                continue
            far, worst = [], 0.0
            for lo, b in blocks(ds, name):
                per_sample = _max_scaled_deviation(b, mean, std, 1)
                for i in torch.nonzero(per_sample > limit).flatten():
                    far.append(lo + int(i))
                    worst = max(worst, float(per_sample[i]))
            if far:
                lines.append(f"{split} split, {listed(far, n, ds)}: the {name} lies far outside the training data "
                             f"(max |x - mean| / std = {worst:.3g} > {limit:g}, mean and std per channel over the "
                             "training split)")
    return lines + _suspicious_snapshots(datasets, limit, show)


def _suspicious_snapshots(datasets: dict, limit: float, show: int) -> list[str]:
    """The same two checks for datasets of pairs drawn from trajectories: any object with ``snapshots()`` ->
    (trajectories (traj, K+1, *grid, c) as a tensor, the (traj, snapshot) pairs used as targets).  A snapshot of
    zero norm used as a target, and any snapshot far outside the training trajectories (mean and std per channel
    over every snapshot of the training split), named by trajectory and snapshot."""
    views = {k: ds.snapshots() for k, ds in datasets.items() if callable(getattr(ds, "snapshots", None)) and len(ds)}
    if "train" not in views:
        return []

    def blocks(traj):  # (first trajectory, float64 block (traj, K+1, points, channels)), a few MB at a time
        step = max(1, _BLOCK // max(1, traj.shape[1]))
        for lo in range(0, traj.shape[0], step):
            b = traj[lo : lo + step].double()
            yield lo, b.reshape(b.shape[0], b.shape[1], -1, b.shape[-1] if b.dim() > 3 else 1)

    mean, std = _channel_stats(b for _, b in blocks(views["train"][0]))

    def named(pairs: list) -> str:
        shown = ", ".join(f"trajectory {t} snapshot {k}" for t, k in pairs[:show])
        return shown + (", ..." if len(pairs) > show else "")

    lines = []
    for split, (traj, targets) in views.items():
        norms, far, worst = [], [], 0.0
        for lo, u in blocks(traj):
            norms.append(u.flatten(2).norm(dim=2))  # (traj, K+1)
            per = _max_scaled_deviation(u, mean, std, 2)
            far += [(lo + int(t), int(k)) for t, k in torch.nonzero(per > limit)]
            worst = max(worst, float(per.max()))
        norms = torch.cat(norms)
        zero = [(int(t), int(k)) for t, k in targets if norms[t, k] <= _ZERO_NORM]
        if zero:
            lines.append(f"{split} split, {named(zero)}: the target snapshot has zero norm; the relative L2 loss "
                         "divides by it (remove these trajectories or choose another loss)")
        if far:
            lines.append(f"{split} split, {named(far)}: the snapshot lies far outside the training trajectories "
                         f"(max |x - mean| / std = {worst:.3g} > {limit:g}, mean and std per channel over the "
                         "training split)")
    return lines


def keys_pair(keys: Optional[Sequence[str]], default: Sequence[str]) -> tuple[str, str]:
    """The (input, target) keys: ``keys`` when given (exactly two names), else ``default``."""
    if keys is None:
        return tuple(default)
    keys = [k for k in keys if k]
    if len(keys) != 2 or len(set(keys)) != 2:
        raise DataError(f"--keys needs two different array names INPUT,TARGET, got {','.join(keys) or 'nothing'}")
    return tuple(keys)
