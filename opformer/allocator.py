"""Keep freed memory for reuse instead of handing it back to the kernel after every step (Linux, glibc).

glibc's ``malloc`` serves a request above its mmap threshold (128 KiB at start, raised as blocks are freed, to 32 MiB
at most) with a fresh ``mmap`` and returns it with ``munmap`` when it is freed.  A training or benchmark step
allocates the same large activations and gradients every time, so every step page-faults that memory in again and
the kernel zeroes it first.  Measured on a 2-core AMD EPYC (Zen 3) VM: 48-104 MiB of page faults per step for one
Galerkin or linear layer at n = 8192 (batch 4) and 560 MiB for the 141² Darcy GT, 10-16 % of their step time
(``docs/benchmarks.md``, "Page faults").

:func:`keep_freed_memory` raises the mmap threshold to 1 GiB and the trim threshold to 2 GiB with ``mallopt``, so
that those blocks come from the heap and stay there once freed: from the second step on the same memory is used
again with no page faults.  Results are unchanged (the same arithmetic on the same values); the resident size of the
process stays at its peak rather than falling between steps (the peak itself is not raised: it is what each step
needs anyway).

The training and benchmark commands call it at start.  ``OPFORMER_MALLOC=system`` leaves the allocator as it is;
so does a process that sets glibc's own tunables (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
``GLIBC_TUNABLES``) or runs without glibc (macOS, Windows, musl), where the call does nothing.

Only the standard library is imported here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from typing import Optional

__all__ = ["keep_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

MMAP_THRESHOLD = 1 << 30  # bytes: blocks below this come from the heap
TRIM_THRESHOLD = (1 << 31) - 1  # bytes of free heap top kept before it is given back
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_USER_TUNABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
_applied: Optional[str] = None


def keep_freed_memory() -> Optional[str]:
    """Make glibc keep freed blocks up to 1 GiB for reuse (see the module docstring); idempotent.

    Returns a one-line note of what was done (``None`` where nothing was: not glibc, ``OPFORMER_MALLOC=system``, or
    glibc tunables set by the user).
    """
    global _applied
    if _applied is not None:
        return _applied
    if os.environ.get("OPFORMER_MALLOC", "").strip().lower() == "system":
        return None
    if any(os.environ.get(name) for name in _USER_TUNABLES):
        return None
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1:  # older glibc: at most 32 MiB; leave the default
        return None
    mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    _applied = "memory: freed blocks up to 1 GiB kept for reuse between steps (OPFORMER_MALLOC=system turns this off)"
    return _applied
