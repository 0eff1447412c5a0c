"""Atomic file writes (standard library only, usable from every layer): a file is either the old one or the new one,
never half written, and a failed write leaves no temporary file behind."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["replacing", "atomic_write_text", "atomic_write_bytes", "fsync_dir", "unwritable"]

_UMASK = os.umask(0o022)  # read once (os.umask can only be read by setting it)
os.umask(_UMASK)


@contextlib.contextmanager
def replacing(path, mode: str, newline=None):
    """An open temporary file ``.NAME.XXXXXX.tmp`` next to ``path`` (a unique name, so concurrent or failed writers
    never share or leave one); on success it is flushed, fsynced and renamed over ``path``, and the directory is
    fsynced so the rename survives a power cut; on any failure it is removed.  ``newline`` as for :func:`open`."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # the user knows the file, not the temporary name
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    try:
        with os.fdopen(fd, mode, newline=newline) as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_UMASK)  # mkstemp's file is private; the result gets the usual mode
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename == tmp:
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    fsync_dir(path.parent)


def atomic_write_text(path, text: str) -> None:
    """Write a text file through a temporary file of its own, fsync and an atomic rename (then fsync the directory)."""
    with replacing(path, "w") as fh:
        fh.write(text)


def atomic_write_bytes(path, data: bytes) -> None:
    """:func:`atomic_write_text` for bytes."""
    with replacing(path, "wb") as fh:
        fh.write(data)


def fsync_dir(directory) -> None:
    """Make the entries of ``directory`` (a rename, a new file) durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def unwritable(folder) -> str | None:
    """Why ``folder`` cannot be created or written, or None: its nearest existing ancestor is a file, or a directory
    made there at once and removed (nothing is left behind) cannot be made.  For checks before any work starts."""
    base = Path(folder)
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        return f"{base} is a file, not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".opformer-probe-", dir=base))
    except OSError as exc:
        return f"cannot write there ({exc.strerror or exc})"
    return None
