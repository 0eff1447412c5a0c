"""PyTorch datasets of the paper's three experiments, with splits and per-point Gaussian normalizers.

Every item is a dict of float32 tensors (a DataLoader stacks them into a leading batch axis):

========================  =====================  ==============================================================
dataset                   key                    shape and meaning
========================  =====================  ==============================================================
:class:`BurgersDataset`   ``input``              (n, 1) initial condition a = u0 (normalized if ``normalize``)
                          ``target``             (n, 1) u(., T)
                          ``coords``             (n, 1) x_j = j/n on [0, 1), endpoint excluded
                          ``target_grad``        (n, 1) du/dx (unit coordinate), periodic central difference on
                                                 the stored grid, then subsampled
:class:`DarcyDataset`     ``input``              (nf, nf, 1) coefficient a (normalized unless
                                                 ``normalize_input=False``)
                          ``target``             (nf, nf, 1) u (physical units)
                          ``coords``             (nf, nf, 2) the grid points (x, y), ``[..., 0]`` is x = axis 0
                          ``target_grad``        (nf, nf, 2) (du/dx, du/dy) on the stored grid, then subsampled
                          ``coeff``              (nf, nf, 1) the raw coefficient a (for the H1 weighting)
:class:`DarcyInverse...`  ``input``              (nf, nf, 1) normalized u plus eps * N(0, 1) noise
                          ``target``             (nc, nc, 1) a average-pooled to the coarse grid (physical)
                          ``coords``             (nf, nf, 2) the fine grid
                          ``coarse_coords``      (nc, nc, 2) the coarse grid (coordinates pooled like a)
========================  =====================  ==============================================================

Resolutions are strided views of the stored grid: Burgers n = 512, 2048, 8192 from 8192 (strides 16, 4, 1);
Darcy nf = 211, 141, 85 from 421 (strides 2, 3, 5 on the 421-point grid, both ends kept).

Splits (:func:`make_splits`): "train" and "val" are carved from the training file (the first ``train_pool``
samples; "val" is the last ``n_val`` of them), "test" is ``test_range`` of the test file (default: the last
100, the paper's protocol). For Burgers the test file is the training file itself (R10: train from the first
1024, test = the last 100 of 2048). Normalizers are always fitted on the "train" split only and stored on the
dataset (``dataset.normalizers``), so training can save them with the model.

Differences from the reference implementation (deliberate): Burgers ``coords`` exclude the endpoint x = 1
(the stored points are j/n, the reference used linspace(0, 1, n)); gradients use the true grid spacing and
one-sided second-order differences at the Darcy walls (the reference used h = 1/421 and zero padding); the
inverse-problem noise of the test file is independent of the training noise (the reference reused it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from ..pde.darcy import cell_coords, node_coords, pool_nanmean
from ..pde.errors import DataError
from .readers import ArraySource, open_source

__all__ = ["UnitGaussianNormalizer", "make_splits", "BurgersDataset", "DarcyDataset", "DarcyInverseDataset"]

_BLOCK = 32  # samples read and transformed at a time (bounds the memory of full-resolution arrays)


class UnitGaussianNormalizer(torch.nn.Module):
    """Per-point standardization ``(x - mean) / (std + eps)`` with statistics over the sample axis.

    ``mean`` and ``std`` have the shape of one sample (e.g. ``(nf, nf, 1)``) and broadcast over leading batch
    axes. They are buffers: ``state_dict()`` saves them, ``.to(device)`` moves them, and
    :meth:`from_state_dict` rebuilds the normalizer. ``std`` is the unbiased standard deviation (as the reference).
    """

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, eps: float = 1e-5):
        super().__init__()
        mean = torch.as_tensor(mean, dtype=torch.float32)
        std = torch.as_tensor(std, dtype=torch.float32)
        if mean.shape != std.shape:
            raise DataError(f"UnitGaussianNormalizer: mean shape {tuple(mean.shape)} != std shape {tuple(std.shape)}")
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.register_buffer("eps", torch.tensor(float(eps), dtype=torch.float32))

    @classmethod
    def fit(cls, x, eps: float = 1e-5) -> UnitGaussianNormalizer:
        """Fit on ``x`` of shape ``(n_samples, *point_shape)`` (tensor or array; statistics in float64)."""
        x = torch.as_tensor(np.asarray(x), dtype=torch.float64)
        if x.ndim < 1 or x.shape[0] < 2:
            raise DataError(f"UnitGaussianNormalizer.fit: expected (n_samples >= 2, ...), found shape {tuple(x.shape)}")
        return cls(x.mean(0), x.std(0), eps)

    @classmethod
    def from_state_dict(cls, state: dict) -> UnitGaussianNormalizer:
        """Rebuild a normalizer saved with ``state_dict()``."""
        return cls(state["mean"], state["std"], float(state["eps"]))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / (std + eps)``; ``x`` is ``(..., *point_shape)``."""
        return (x - self.mean) / (self.std + self.eps)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`encode`: ``x * (std + eps) + mean``."""
        return x * (self.std + self.eps) + self.mean

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encode(x)

    def extra_repr(self) -> str:
        return f"shape={tuple(self.mean.shape)}, eps={float(self.eps):g}"


def make_splits(
    n_train_file: int,
    n_test_file: int | None = None,
    *,
    train_pool: int | None = None,
    n_val: int | float = 0.1,
    n_train: int | None = None,
    test_range: tuple[int | None, int | None] = (-100, None),
    same_file: bool = False,
) -> dict[str, np.ndarray]:
    """Sample indices of the train, validation and test splits.

    Args:
        n_train_file: samples in the training file.
        n_test_file: samples in the test file (default: the training file's count).
        train_pool: the first ``train_pool`` samples of the training file are used for train + val
            (default: all of them; with ``same_file``, all samples before the test range).
        n_val: validation samples, carved from the *end* of the pool: an int, or a fraction of the pool.
        n_train: training samples, taken from the start of the pool (default: the rest of the pool).
        test_range: ``(start, stop)`` slice of the test file (Python slice semantics, negative from the end;
            default the last 100 samples, the paper's protocol).
        same_file: the test split comes from the training file (Burgers R10); it must not overlap the pool.

    Returns:
        ``{"train": idx, "val": idx, "test": idx}``, int64 arrays of local sample positions in their file.
    """
    n_test_file = n_train_file if n_test_file is None else n_test_file
    test = np.arange(n_test_file)[slice(*test_range)]
    if test.size == 0:
        raise DataError(f"make_splits: test_range={test_range} selects no sample of the {n_test_file} in the test file")
    if train_pool is None:
        pool = int(test.min()) if same_file else n_train_file
    else:
        pool = int(train_pool)
    if not 1 <= pool <= n_train_file:
        raise DataError(f"make_splits: train_pool={train_pool} must be in [1, {n_train_file}] (samples in the training file)")
    nv = int(round(n_val * pool)) if isinstance(n_val, float) else int(n_val)
    if not 0 <= nv < pool:
        raise DataError(f"make_splits: n_val={n_val} must leave training samples in the pool of {pool}")
    nt = pool - nv if n_train is None else int(n_train)
    if not 1 <= nt <= pool - nv:
        raise DataError(f"make_splits: n_train={n_train} must be in [1, {pool - nv}] (pool {pool} minus {nv} validation samples)")
    if same_file and test.min() < pool:
        raise DataError(
            f"make_splits: the test samples {test.min()}..{test.max()} overlap the train/val pool 0..{pool - 1} "
            f"of the same file; shrink train_pool or move test_range"
        )
    return {"train": np.arange(nt), "val": np.arange(pool - nv, pool), "test": test}


def _stride(found: int, wanted: int, *, nodes: bool, where: str) -> int:
    """Stride that takes the stored size ``found`` to ``wanted`` (periodic: found = s * wanted; nodes: found - 1 = s (wanted - 1))."""
    if nodes:
        ok = sorted({(found - 1) // s + 1 for s in range(1, found) if (found - 1) % s == 0 and (found - 1) // s >= 2})
        if wanted >= 3 and (found - 1) % (wanted - 1) == 0:
            return (found - 1) // (wanted - 1)
    else:
        ok = sorted({found // s for s in range(1, found + 1) if found % s == 0 and found // s >= 4})
        if wanted >= 1 and found % wanted == 0:
            return found // wanted
    raise DataError(
        f"{where}: resolution {wanted} is not a stride of the stored resolution {found}; possible resolutions: {ok[::-1]}"
    )


class _Base(torch.utils.data.Dataset):
    """Common machinery: tensors stored per split, dict items."""

    _items: dict[str, torch.Tensor]
    _shared: dict[str, torch.Tensor]

    def __len__(self) -> int:
        return int(self._items["input"].shape[0])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        item = {k: v[i] for k, v in self._items.items()}
        item.update(self._shared)
        return item

    @property
    def normalizers(self) -> dict[str, UnitGaussianNormalizer]:
        """The fitted normalizers (``input``, ``target``), to save with a model (``{k: n.state_dict()}``)."""
        out = {}
        if getattr(self, "input_normalizer", None) is not None:
            out["input"] = self.input_normalizer
        if getattr(self, "target_normalizer", None) is not None:
            out["target"] = self.target_normalizer
        return out

    def _open_sources(self, path, test_path, keys, split, check_shapes, train_pool, n_val, n_train, test_range):
        """Open the training and test files, check their shapes agree, and set ``split``, ``keys``, ``indices``."""
        _check_split(split)
        self.split = split
        self.keys = tuple(keys)
        train_src = open_source(path, self.keys)
        same = test_path is None or os.fspath(test_path) == os.fspath(path)
        test_src = train_src if same else open_source(test_path, self.keys)
        for src in {id(train_src): train_src, id(test_src): test_src}.values():
            check_shapes(src, self.keys)
        if test_src.shapes[self.keys[0]][1:] != train_src.shapes[self.keys[0]][1:]:
            raise DataError(f"{test_src.describe()}: sample shape {test_src.shapes[self.keys[0]][1:]}, expected "
                            f"{train_src.shapes[self.keys[0]][1:]} like the training file {train_src.describe()}")
        self.indices = make_splits(train_src.n_samples, test_src.n_samples, train_pool=train_pool, n_val=n_val,
                                   n_train=n_train, test_range=test_range, same_file=same)
        return train_src, test_src, same

    @classmethod
    def splits(cls, path, test_path=None, **kwargs) -> dict[str, _Base]:
        """``{"train", "val", "test"}`` datasets sharing the normalizers fitted once on the train split."""
        train = cls(path, "train", test_path=test_path, **kwargs)
        shared = dict(kwargs, normalizers=train.normalizers)
        return {
            "train": train,
            "val": cls(path, "val", test_path=test_path, **shared),
            "test": cls(path, "test", test_path=test_path, **shared),
        }


def _check_split(split: str) -> None:
    if split not in ("train", "val", "test"):
        raise DataError(f"split must be 'train', 'val' or 'test', found {split!r}")


def _blocks(indices: np.ndarray):
    for lo in range(0, len(indices), _BLOCK):
        yield indices[lo : lo + _BLOCK]


def _f32(x) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float32)


class BurgersDataset(_Base):
    """Burgers (paper §5.1): map the initial condition a = u(., 0) to u(., T) on a strided view of the stored grid.

    Args:
        path: the data file (opformer ``.h5`` or shards/glob, the original ``burgers_data_R10.mat``, or a user's
            ``.h5``/``.npz``/``.pt`` with arrays ``(N, n)`` under ``keys``).
        split: ``"train"``, ``"val"`` or ``"test"``.
        resolution: n, a divisor of the stored n (8192 -> 8192, 4096, 2048, 1024, 512, ...).
        test_path: the test file (default: ``path``, and then the test range must not overlap the pool).
        train_pool, n_val, n_train, test_range: see :func:`make_splits` (defaults: pool = first 1024 samples,
            val = last 10% of them, test = last 100 samples of the test file).
        normalize: standardize the input per point (fitted on the train split); off by default as in the paper.
        normalizers: ``{"input": UnitGaussianNormalizer}`` fitted elsewhere (e.g. ``train_ds.normalizers``).
        keys: ``(input key, target key)``.

    Items: ``input (n, 1), target (n, 1), coords (n, 1), target_grad (n, 1)``; see the module doc.
    """

    def __init__(
        self,
        path,
        split: str = "train",
        *,
        resolution: int = 2048,
        test_path=None,
        train_pool: int | None = 1024,
        n_val: int | float = 0.1,
        n_train: int | None = None,
        test_range: tuple[int | None, int | None] = (-100, None),
        normalize: bool = False,
        normalizers: dict | None = None,
        keys: Sequence[str] = ("a", "u"),
    ):
        train_src, test_src, same = self._open_sources(path, test_path, keys, split, _check_shapes_1d, train_pool,
                                                       n_val, n_train, test_range)
        n_fine = train_src.shapes[self.keys[0]][1]
        self.stride = _stride(n_fine, resolution, nodes=False, where=train_src.describe())
        self.resolution = resolution
        src = test_src if split == "test" else train_src
        self.source_paths = [str(p) for p in src.paths]
        self.recipe = src.recipe
        a, u, du = self._load(src, self.indices[split], n_fine)
        x = train_src.coords.get("x", np.arange(n_fine) / n_fine)[:: self.stride]

        normalizers = normalizers or {}
        self.input_normalizer = normalizers.get("input")
        self.target_normalizer = normalizers.get("target")
        if normalize and self.input_normalizer is None:
            a_train = a if split == "train" else self._load(train_src, self.indices["train"], n_fine)[0]
            self.input_normalizer = UnitGaussianNormalizer.fit(a_train[..., None])
        inp = _f32(a[..., None])
        if normalize:
            inp = self.input_normalizer.encode(inp)
        self._items = {"input": inp, "target": _f32(u[..., None]), "target_grad": _f32(du[..., None])}
        self._shared = {"coords": _f32(x[:, None])}

    def _load(self, src: ArraySource, idx: np.ndarray, n_fine: int):
        s = self.stride
        a_out, u_out, du_out = [], [], []
        for block in _blocks(idx):
            a = src.read(self.keys[0], block)
            u = src.read(self.keys[1], block)
            du = (np.roll(u, -1, axis=-1) - np.roll(u, 1, axis=-1)) * (n_fine / 2.0)  # h = 1/n_fine on the unit period
            a_out.append(a[:, ::s])
            u_out.append(u[:, ::s])
            du_out.append(du[:, ::s])
        return np.concatenate(a_out), np.concatenate(u_out), np.concatenate(du_out)


def _check_shapes_1d(src: ArraySource, keys) -> None:
    ka, ku = keys
    sa, su = src.shapes[ka], src.shapes[ku]
    if len(sa) != 2:
        raise DataError(f"{src.describe()}: key {ka!r} expected shape (n_samples, n), found {sa}")
    if su != sa:
        raise DataError(f"{src.describe()}: key {ku!r} expected shape {sa} like key {ka!r}, found {su}")


def _check_shapes_2d(src: ArraySource, keys) -> None:
    ka, ku = keys
    sa, su = src.shapes[ka], src.shapes[ku]
    if len(sa) != 3 or sa[1] != sa[2]:
        raise DataError(f"{src.describe()}: key {ka!r} expected shape (n_samples, n, n), found {sa}")
    if su != sa:
        raise DataError(f"{src.describe()}: key {ku!r} expected shape {sa} like key {ka!r}, found {su}")


def _grid_1d(src: ArraySource, n: int, grid: str | None) -> np.ndarray:
    if grid is None:
        if "x" in src.coords:
            return np.asarray(src.coords["x"], dtype=np.float64)
        grid = "cell" if src.kind == "mat" else "node"
    if grid == "cell":
        return cell_coords(n)
    if grid == "node":
        return node_coords(n)
    raise DataError(f"grid must be None, 'cell' or 'node', found {grid!r}")


class _Darcy2D(_Base):
    """Shared loading for the forward and inverse Darcy datasets."""

    def _open(self, path, test_path, keys, split, resolution, train_pool, n_val, n_train, test_range, grid):
        train_src, test_src, same = self._open_sources(path, test_path, keys, split, _check_shapes_2d, train_pool,
                                                       n_val, n_train, test_range)
        n_fine = train_src.shapes[self.keys[0]][1]
        self.n_stored = n_fine
        self.stride = _stride(n_fine, resolution, nodes=True, where=train_src.describe())
        self.resolution = resolution
        self.grid_fine = _grid_1d(train_src, n_fine, grid)
        if self.grid_fine.shape != (n_fine,):
            raise DataError(f"{train_src.describe()}: coordinates 'x' expected shape {(n_fine,)}, found {self.grid_fine.shape}")
        self._train_src, self._test_src = train_src, test_src
        self.file_id = 1 if (split == "test" and not same) else 0
        src = test_src if split == "test" else train_src
        self.source_paths = [str(p) for p in src.paths]
        self.recipe = src.recipe
        return src

    def _coords(self, x: np.ndarray) -> torch.Tensor:
        gx, gy = np.meshgrid(x, x, indexing="ij")
        return _f32(np.stack([gx, gy], axis=-1))


class DarcyDataset(_Darcy2D):
    """Darcy forward problem (paper §5.2): map the coefficient a to the solution u on a strided view.

    Args:
        path: the training file (opformer ``.h5``/shards/glob, ``piececonst_r421_N1024_smooth1.mat``, or a user's
            ``.h5``/``.npz``/``.pt`` with ``(N, n, n)`` arrays under ``keys``).
        split: ``"train"``, ``"val"`` or ``"test"``.
        resolution: nf with ``(n - 1) % (nf - 1) == 0`` (421 -> 421, 211, 141, 106, 85, 61, 43, ...).
        test_path: the test file (``..._smooth2`` / the ``split="test"`` file); default ``path``.
        train_pool, n_val, n_train, test_range: see :func:`make_splits` (defaults: all of the training file for
            train + val, val = its last 10%, test = the last 100 of the test file).
        normalize_input: standardize a per point with the train-split statistics (default True).
        normalizers: ``{"input": ..., "target": ...}`` fitted elsewhere (e.g. ``train_ds.normalizers``).
        grid: the stored grid when the file has no coordinates: ``"cell"`` centres (i + 1/2)/n (default for
            ``.mat``, as the FNO files) or ``"node"`` points i/(n - 1) (default for other files).
        keys: ``(coefficient key, solution key)``.

    Items: ``input, target, coeff (nf, nf, 1); coords, target_grad (nf, nf, 2)``. ``target_normalizer`` (fitted
    on the train targets, not applied to the items) is there for models that predict normalized u.
    """

    def __init__(
        self,
        path,
        split: str = "train",
        *,
        resolution: int = 141,
        test_path=None,
        train_pool: int | None = None,
        n_val: int | float = 0.1,
        n_train: int | None = None,
        test_range: tuple[int | None, int | None] = (-100, None),
        normalize_input: bool = True,
        normalizers: dict | None = None,
        grid: str | None = None,
        keys: Sequence[str] = ("coeff", "sol"),
    ):
        src = self._open(path, test_path, keys, split, resolution, train_pool, n_val, n_train, test_range, grid)
        a, u, du = self._load(src, self.indices[split])
        normalizers = normalizers or {}
        self.input_normalizer = normalizers.get("input")
        self.target_normalizer = normalizers.get("target")
        if self.input_normalizer is None or self.target_normalizer is None:
            a_tr, u_tr = (a, u) if split == "train" else self._load(self._train_src, self.indices["train"])[:2]
            if self.input_normalizer is None:
                self.input_normalizer = UnitGaussianNormalizer.fit(a_tr[..., None])
            if self.target_normalizer is None:
                self.target_normalizer = UnitGaussianNormalizer.fit(u_tr[..., None])
        coeff = _f32(a[..., None])
        inp = self.input_normalizer.encode(coeff) if normalize_input else coeff.clone()
        self._items = {"input": inp, "target": _f32(u[..., None]), "target_grad": _f32(du), "coeff": coeff}
        self._shared = {"coords": self._coords(self.grid_fine[:: self.stride])}

    def _load(self, src: ArraySource, idx: np.ndarray):
        s = self.stride
        h = float(self.grid_fine[1] - self.grid_fine[0])
        a_out, u_out, du_out = [], [], []
        for block in _blocks(idx):
            a = src.read(self.keys[0], block)
            u = src.read(self.keys[1], block)
            dx, dy = np.gradient(u, h, axis=(1, 2), edge_order=2)
            a_out.append(a[:, ::s, ::s])
            u_out.append(u[:, ::s, ::s])
            du_out.append(np.stack([dx[:, ::s, ::s], dy[:, ::s, ::s]], axis=-1))
        return np.concatenate(a_out), np.concatenate(u_out), np.concatenate(du_out)


class DarcyInverseDataset(_Darcy2D):
    """Inverse Darcy (paper §5.3): recover the coarse coefficient from a noisy solution.

    The input is u on the fine strided grid, standardized per point with the train-split statistics, plus
    ``noise * xi`` with xi ~ N(0, 1) i.i.d. per point (so in physical units the noise is ``noise`` times the
    per-point training std of u). xi is drawn once, when the dataset is built, from
    ``np.random.default_rng([noise_seed, file_id, global sample index])`` (file_id 0 for the training file, 1 for
    a separate test file): fixed across epochs, the same in every process, independent between files. The noise
    is not stored in the data files; they hold the clean forward-problem data (the Darcy files).

    The target is the coefficient mean-pooled first by ``stride`` (the fine stride; NaN-padded, ceil sizes) and
    then by ``coarse_factor``: 421 -> 141 -> 36 for (resolution 141, coarse_factor 4) and 421 -> 211 -> 71 for
    (211, 3) -- the paper's (n_f, n_c) pairs.

    Args:
        path, split, test_path, train_pool, n_val, n_train, test_range, grid, keys: as :class:`DarcyDataset`.
        resolution: nf, the fine grid of the input (a node stride of the stored grid).
        coarse_factor: the second pooling kernel (the reference's ``subsample_attn // subsample_nodes``).
        noise: eps (the paper uses 0, 0.01, 0.1).
        noise_seed: seed of the noise.
        normalizers: ``{"input": ..., "target": ...}`` fitted elsewhere.

    Items: ``input (nf, nf, 1), target (nc, nc, 1), coords (nf, nf, 2), coarse_coords (nc, nc, 2)``.
    """

    def __init__(
        self,
        path,
        split: str = "train",
        *,
        resolution: int = 141,
        coarse_factor: int = 4,
        noise: float = 0.01,
        noise_seed: int = 0,
        test_path=None,
        train_pool: int | None = None,
        n_val: int | float = 0.1,
        n_train: int | None = None,
        test_range: tuple[int | None, int | None] = (-100, None),
        normalizers: dict | None = None,
        grid: str | None = None,
        keys: Sequence[str] = ("coeff", "sol"),
    ):
        if not noise >= 0:
            raise DataError(f"DarcyInverseDataset: noise must be >= 0, found {noise}")
        if int(coarse_factor) != coarse_factor or coarse_factor < 1:
            raise DataError(f"DarcyInverseDataset: coarse_factor must be a positive integer, found {coarse_factor}")
        src = self._open(path, test_path, keys, split, resolution, train_pool, n_val, n_train, test_range, grid)
        self.coarse_factor = int(coarse_factor)
        self.noise = float(noise)
        self.noise_seed = int(noise_seed)
        u, a_c = self._load(src, self.indices[split])
        normalizers = normalizers or {}
        self.input_normalizer = normalizers.get("input")
        self.target_normalizer = normalizers.get("target")
        if self.input_normalizer is None or self.target_normalizer is None:
            u_tr, a_tr = (u, a_c) if split == "train" else self._load(self._train_src, self.indices["train"])
            if self.input_normalizer is None:
                self.input_normalizer = UnitGaussianNormalizer.fit(u_tr[..., None])
            if self.target_normalizer is None:
                self.target_normalizer = UnitGaussianNormalizer.fit(a_tr[..., None])
        inp = self.input_normalizer.encode(_f32(u[..., None]))
        if self.noise > 0:
            first = src.first_index
            xi = np.stack([
                np.random.default_rng([self.noise_seed, self.file_id, first + int(i)]).standard_normal(u.shape[1:])
                for i in self.indices[split]
            ])
            inp = inp + self.noise * _f32(xi[..., None])
        self.coarse_resolution = a_c.shape[-1]
        x_f = self.grid_fine[:: self.stride]
        g = np.broadcast_to(self.grid_fine[:, None], (self.n_stored, self.n_stored))
        x_c = pool_nanmean(pool_nanmean(g, self.stride), self.coarse_factor)[:, 0]  # pooled like the target
        self._items = {"input": inp, "target": _f32(a_c[..., None])}
        self._shared = {"coords": self._coords(x_f), "coarse_coords": self._coords(x_c)}

    def _load(self, src: ArraySource, idx: np.ndarray):
        s = self.stride
        u_out, a_out = [], []
        for block in _blocks(idx):
            a = src.read(self.keys[0], block)
            u = src.read(self.keys[1], block)
            u_out.append(u[:, ::s, ::s])
            a_out.append(pool_nanmean(pool_nanmean(a, s), self.coarse_factor))
        return np.concatenate(u_out), np.concatenate(a_out)
