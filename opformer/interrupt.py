"""One stop request for the long commands (``opformer data``, ``opformer train``): a SIGTERM that is never lost.

:func:`request_stop` is the signal handler: it raises ``KeyboardInterrupt`` (the commands end on it as on Ctrl-C)
and sets a flag.  Python drops an exception raised while a weakref callback or ``__del__`` runs, so a signal that
lands there would be lost; the loops call :func:`check_stop` (a data generation between samples, a training before
every batch and between its phases), which raises ``KeyboardInterrupt`` again while the flag is set.  The flag is
shared, so a training that generates its data stops in the generation too."""

from __future__ import annotations

import threading

__all__ = ["request_stop", "check_stop", "clear_stop"]

_STOP = threading.Event()


def request_stop(signum=None, frame=None) -> None:
    """Set the stop flag and raise ``KeyboardInterrupt`` (a ``signal.signal`` handler)."""
    _STOP.set()
    raise KeyboardInterrupt


def check_stop() -> None:
    """Raise ``KeyboardInterrupt`` while a stop is requested (the flag stays set until :func:`clear_stop`)."""
    if _STOP.is_set():
        raise KeyboardInterrupt


def clear_stop() -> None:
    """End the stop request (the command that handled it is done)."""
    _STOP.clear()
