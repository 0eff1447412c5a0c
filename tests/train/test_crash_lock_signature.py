"""The lock file of a run directory or an eval folder names its holder from the moment the lock is taken: a second
command refused meanwhile names the process that holds it, never the one that held it before (whose signature
stayed in the file), and a start refused after taking the lock leaves the file as it was."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from opformer.train import run as run_module
from opformer.train.run import RunDirError


def _dead_pid() -> int:
    """The pid of a process that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_run_directory_is_signed_when_its_lock_is_taken(tmp_path):
    """(before: until the start was validated, which reads the checkpoint and builds the trainer, the file held the
    previous holder's line, and a refused second training named that process)"""
    out = tmp_path / "run"
    out.mkdir()
    stale = _dead_pid()
    (out / ".lock").write_text(f"{stale} eval\n")
    with run_module._locked_run_dir(out):
        assert (out / ".lock").read_text() == f"{os.getpid()} train\n"
        with pytest.raises(RunDirError) as info:
            run_module._check_not_running(out)
    assert str(info.value) == (f"{out} is in use by a running training (pid {os.getpid()}); wait for it to end, or "
                               "choose another --out")


def test_an_eval_folder_is_signed_when_its_lock_is_taken(tmp_path):
    out = tmp_path / "ev"
    out.mkdir()
    (out / ".lock").write_text(f"{_dead_pid()} train with a longer line than the new one\n")
    with run_module.locked_output(out, "eval"):
        assert (out / ".lock").read_text() == f"{os.getpid()} eval\n"


def test_a_refusal_rereads_a_signature_of_an_ended_process(tmp_path, monkeypatch):
    """The holder signs right after taking the lock; a refusal that reads the file in between finds the previous
    holder's pid, no running process, and reads it again before naming anyone."""
    import fcntl

    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text(f"{_dead_pid()} eval\n")
    fd = os.open(out / ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken, not signed yet
    sleeps = []

    def sign_while_waiting(seconds):  # the holder signs while the refused command waits
        sleeps.append(seconds)
        run_module._sign_fd(fd, "rollout")

    monkeypatch.setattr(run_module.time, "sleep", sign_while_waiting)
    try:
        with pytest.raises(RunDirError, match=rf"in use by a running opformer rollout \(pid {os.getpid()}\)"):
            run_module._check_not_running(out)
    finally:
        os.close(fd)
    assert len(sleeps) == 1


def test_a_start_refused_under_the_lock_leaves_its_signature_as_it_was(tiny_config, tmp_path, monkeypatch):
    """A start refused once it holds the lock (here: the trainer refused) signed the file while it held it, and puts
    the previous signature back; the directory is left as it was."""
    from opformer.config import ConfigError
    from opformer.train.config import load_preset

    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text("4242 eval\n")
    os.utime(out / ".lock", ns=(10**18, 10**18))
    seen = []

    def refuse(*args, **kwargs):
        seen.append((out / ".lock").read_text())
        raise ConfigError("--strategy: refused here")

    monkeypatch.setattr(run_module, "_trainer", refuse)
    cfg = load_preset(str(tiny_config))
    cfg["train"]["epochs"] = 1
    with pytest.raises(ConfigError, match="refused here"):
        run_module.train(cfg, out, progress=False)
    assert seen == [f"{os.getpid()} train\n"]
    assert (out / ".lock").read_text() == "4242 eval\n" and [p.name for p in out.iterdir()] == [".lock"]
    assert (out / ".lock").stat().st_mtime_ns == 10**18
