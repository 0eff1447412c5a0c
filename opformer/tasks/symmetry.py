"""Symmetry augmentation of 2D training batches: the dihedral group D4 of the square.

Darcy flow ``-div(a grad u) = 1`` on the unit square with ``u = 0`` on its boundary is unchanged by the eight
rotations and reflections of the square: if ``u`` solves the problem for ``a``, then ``u o g`` solves it for
``a o g``.  A training pair mapped by such a ``g`` is therefore another exact training pair, and sampling one of the
eight per sample and step (``--augment d4``) shows the model eight times the distinct pairs of the same data set.
It holds for the data only if the grid maps onto itself (a square grid, symmetric about the centre, the same on both
axes; :func:`check_symmetric_grid`) and the problem has the symmetry (a constant or itself symmetric forcing, the
same condition on all four walls): a user's own data with another forcing must not use it.

A group element is a code 0-7, bits (transpose, flip of axis 1, flip of axis 2) applied in that order to the grid
axes (1, 2) of (batch, n, n, channels) fields.  Gradient fields (channel 0 the derivative along axis 1, channel 1
along axis 2) are moved as vectors: a transpose swaps the two components, a flip of an axis negates its component.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import torch
from torch import Tensor

from ..config import ConfigError

__all__ = ["D4_ELEMENTS", "dihedral_field", "dihedral_gradient", "dihedral_batch", "check_symmetric_grid"]

#: the codes of the eight elements of D4 (0: identity)
D4_ELEMENTS = tuple(range(8))


def _bits(code: int) -> tuple[bool, bool, bool]:
    return bool(code & 1), bool(code & 2), bool(code & 4)


def dihedral_field(f: Tensor, code: int) -> Tensor:
    """A scalar (or channel-wise scalar) field ``f`` (..., n, n, channels) on the grid axes -3, -2 mapped by D4
    element ``code``."""
    transpose, flip1, flip2 = _bits(code)
    if transpose:
        f = f.transpose(-3, -2)
    dims = [d for d, on in ((-3, flip1), (-2, flip2)) if on]
    return f.flip(dims) if dims else f


def dihedral_gradient(g: Tensor, code: int) -> Tensor:
    """A gradient field ``g`` (..., n, n, 2) (components along axes -3 and -2) mapped by D4 element ``code`` as the
    gradient of the mapped scalar field."""
    transpose, flip1, flip2 = _bits(code)
    g = dihedral_field(g, code)
    if transpose:
        g = g.flip(-1)
    if not (flip1 or flip2):
        return g
    # the two components scaled by Python numbers (a sign tensor made on the host would be copied to a GPU, and the
    # host would wait for the device at every step)
    return torch.cat((g[..., :1] * (-1.0 if flip1 else 1.0), g[..., 1:] * (-1.0 if flip2 else 1.0)), -1)


def dihedral_batch(batch: dict, generator: torch.Generator, fields: Iterable[str],
                   gradients: Iterable[str] = ()) -> dict:
    """A copy of ``batch`` with one random D4 element per sample applied to the (batch, n, n, c) tensors named in
    ``fields`` (as scalars) and ``gradients`` (as gradient vectors); other entries (the coordinates) are kept."""
    names = [k for k in fields if k in batch] + [k for k in gradients if k in batch]
    if not names:
        return batch
    b = batch[names[0]].shape[0]
    codes = torch.randint(0, len(D4_ELEMENTS), (b,), generator=generator).tolist()
    out = dict(batch)
    grads = set(gradients)
    for k in names:
        t = batch[k]
        move = dihedral_gradient if k in grads else dihedral_field
        out[k] = torch.stack([move(t[i], c) for i, c in enumerate(codes)])
    return out


def check_symmetric_grid(coords, where: str) -> None:
    """Refuse 2D grid coordinates (n, n, 2) that the square's rotations and reflections do not map onto themselves:
    the two axes' points must be the same and symmetric about their centre."""
    c = np.asarray(coords, dtype=np.float64)
    if c.ndim == 4:
        c = c[0]
    if c.ndim != 3 or c.shape[0] != c.shape[1] or c.shape[-1] != 2:
        raise ConfigError(f"--augment d4 needs a square 2D grid; {where} has coordinates of shape {c.shape}")
    x, y = c[:, 0, 0], c[0, :, 1]
    tol = 1e-6 * max(float(np.abs(x).max()), 1.0)
    if not (np.allclose(x, y, atol=tol, rtol=0) and np.allclose(x + x[::-1], x[0] + x[-1], atol=tol, rtol=0)):
        raise ConfigError(f"--augment d4 needs a grid that the square's rotations and reflections map onto itself "
                          f"(the same points on both axes, symmetric about the centre); {where} is not")
