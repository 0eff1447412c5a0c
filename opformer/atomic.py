"""Atomic file writes (standard library only, usable from every layer): a file is either the old one or the new one,
never half written, and a failed write leaves no temporary file behind."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["replacing", "atomic_write_text", "atomic_write_bytes", "fsync_dir", "unwritable", "failed_write"]

_UMASK = os.umask(0o022)  # read once (os.umask can only be read by setting it)
os.umask(_UMASK)


@contextlib.contextmanager
def replacing(path, mode: str, newline=None):
    """An open temporary file ``.NAME.XXXXXX.tmp`` next to ``path`` (a unique name, so concurrent or failed writers
    never share or leave one); on success it is flushed, fsynced and renamed over ``path``, and the directory is
    fsynced so the rename survives a power cut; on any failure it is removed.  ``newline`` as for :func:`open`.

    A write the system refuses (a full disk, an I/O error, the folder gone, the rename refused) is raised as an
    ``OSError`` of ``path`` itself, not of the temporary file, with the system's reason (:func:`failed_write` says
    it in one line), also where the writer turned it into an error of its own (``torch.save`` raises a
    ``RuntimeError`` "unexpected pos ..." when the file's write fails)."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # the user knows the file, not the temporary name
        raise _refused(exc, path) from exc
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
        cause = _system_error(exc, tmp)
        if cause is not None:
            raise _refused(cause, path) from exc
        raise
    fsync_dir(path.parent)


def _system_error(exc: BaseException, tmp: str) -> OSError | None:
    """The system's refusal of the write of ``tmp`` that ``exc`` is or came from (an ``OSError`` of ``tmp`` or of no
    file; a ``RuntimeError`` raised while handling one, as ``torch.save``'s writer does), else None: an error of
    another file, or no system error, is left as it is."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError):
            return exc if exc.errno is not None and exc.filename in (None, tmp) else None
        if not isinstance(exc, RuntimeError):
            return None
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _refused(exc: OSError, path: Path) -> OSError:
    """``exc`` as an ``OSError`` of ``path`` (the class that its errno gives: ``FileNotFoundError``, ...), marked as a
    failed write for :func:`failed_write`."""
    error = OSError(exc.errno, exc.strerror or str(exc), str(path))
    error.failed_write = True
    return error


def failed_write(exc: BaseException) -> str | None:
    """``"could not write PATH: REASON"`` when ``exc``, or an exception it came from, is a write that
    :func:`replacing` reported as refused by the system, else None."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and getattr(exc, "failed_write", False):
            return f"could not write {exc.filename}: {exc.strerror}"
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


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
