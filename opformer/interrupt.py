"""One stop request for the long commands (``opformer data``, ``opformer train``): a SIGTERM that is never lost.

:func:`request_stop` is the signal handler: it raises ``KeyboardInterrupt`` (the commands end on it as on Ctrl-C)
and sets a flag.  Python drops an exception raised while a weakref callback or ``__del__`` runs, so a signal that
lands there would be lost; the loops call :func:`check_stop` (a data generation between samples, a training before
every batch and between its phases), which raises ``KeyboardInterrupt`` again while the flag is set.  The flag is
shared, so a training that generates its data stops in the generation too.

:func:`deferred` holds SIGINT and SIGTERM back while a write runs that an exception in its middle would corrupt
rather than abandon: ``torch.save`` writes through Python callbacks, and a ``KeyboardInterrupt`` raised in one of them
surfaces as torch's ``RuntimeError`` ("unexpected pos ...") instead of the interruption."""

from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["request_stop", "check_stop", "clear_stop", "deferred"]

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


_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def deferred():
    """Run the block with SIGINT and SIGTERM held: a signal that arrives meanwhile is delivered again, to the handler
    that was in place, once the block has ended (normally or not), so the block is never cut in two and the signal
    is never lost.  An ignored signal stays ignored; off the main thread (where handlers cannot be set) the block
    runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum, frame):
        held.append(signum)

    previous = {}
    try:
        for signum in _HELD_SIGNALS:
            handler = signal.getsignal(signum)
            if handler is not signal.SIG_IGN and handler is not None:
                previous[signum] = signal.signal(signum, hold)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(held):  # once each, in order of arrival
            signal.raise_signal(signum)
