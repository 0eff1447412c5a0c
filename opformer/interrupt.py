"""One stop request for the long commands (``opformer data``, ``opformer train``): a SIGTERM that is never lost.

:func:`request_stop` is the signal handler: it raises ``KeyboardInterrupt`` (the commands end on it as on Ctrl-C)
and sets a flag.  Python drops an exception raised while a weakref callback or ``__del__`` runs, so a signal that
lands there would be lost; the loops call :func:`check_stop` (a data generation between samples, a training before
every batch and between its phases), which raises ``KeyboardInterrupt`` again while the flag is set.  The flag is
shared, so a training that generates its data stops in the generation too.  :func:`ctrl_c_requests_stop` makes
Ctrl-C set the flag as well for the length of a command, and checks it once more as the command ends.

:func:`deferred` holds SIGINT and SIGTERM back while a write runs that an exception in its middle would corrupt
rather than abandon: ``torch.save`` writes through Python callbacks, and a ``KeyboardInterrupt`` raised in one of them
surfaces as torch's ``RuntimeError`` ("unexpected pos ...") instead of the interruption."""

from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["request_stop", "check_stop", "clear_stop", "ctrl_c_requests_stop", "deferred"]

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


@contextlib.contextmanager
def ctrl_c_requests_stop():
    """Run the block with Ctrl-C (SIGINT) handled as a stop request (:func:`request_stop`) where Python's own handler
    is in place, so that a Ctrl-C whose exception Python drops (one that lands in a weakref callback or ``__del__``,
    as at the end of a test pass) still stops the block at its next :func:`check_stop`, or as the block ends: a stop
    requested while the block ran is never ignored.  The handler in place before is put back, and a Ctrl-C the block
    ended on is cleared; an ignored or another handler is left as it is, and so is any handler off the main thread."""
    own = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    received = []

    def on_ctrl_c(signum, frame):
        received.append(signum)
        request_stop(signum, frame)

    previous = signal.signal(signal.SIGINT, on_ctrl_c) if own else None
    try:
        yield
        check_stop()
    finally:
        if own:
            signal.signal(signal.SIGINT, previous)
        if received:
            clear_stop()


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
