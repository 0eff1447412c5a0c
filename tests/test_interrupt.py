"""Signals held over a write that an exception in its middle would corrupt (opformer.interrupt.deferred)."""

from __future__ import annotations

import signal

import pytest
import torch

from opformer.interrupt import deferred
from opformer.train.callbacks import AtomicCheckpointIO


class _SignalWhilePickled:
    """An object whose pickling raises ``signum`` in this thread: the signal lands inside ``torch.save``."""

    def __init__(self, signum):
        self.signum = signum

    def __reduce__(self):
        signal.raise_signal(self.signum)
        return (int, (7,))


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this test whatever the process inherited: a process started in the
    background of a non-interactive shell inherits SIGINT ignored, and Python then installs no handler for it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_signal_in_the_block_comes_after_it_and_only_once(ctrl_c_raises):
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with deferred():
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
            steps.append("block ended")
    assert steps == ["block ended"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_handlers_are_restored_and_nothing_is_raised_without_a_signal():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
    try:
        with deferred():
            pass
        assert seen == []
        with deferred():
            signal.raise_signal(signal.SIGTERM)
            assert seen == []  # held while the block runs
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_ignored_signal_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with deferred():
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_inside_a_checkpoint_write_leaves_the_whole_file_and_then_interrupts(tmp_path, signum, ctrl_c_raises):
    """Raised inside torch.save, the KeyboardInterrupt became torch's RuntimeError ("unexpected pos") and the run
    ended with a traceback; held, the checkpoint is written whole and the interruption follows."""
    path = tmp_path / "checkpoints" / "last.ckpt"
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM as the train command handles it
    try:
        with pytest.raises(KeyboardInterrupt):
            AtomicCheckpointIO().save_checkpoint({"w": torch.arange(50_000.0), "x": _SignalWhilePickled(signum)},
                                                 path)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]  # no temporary file left
    back = torch.load(path, weights_only=False)
    assert back["x"] == 7 and torch.equal(back["w"], torch.arange(50_000.0))
