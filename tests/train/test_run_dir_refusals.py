"""What `opformer train` and `opformer eval` do when they are refused, interrupted or crowded: a refused resume leaves
the run directory as it was (its lock file too), a checkpoint of another run is described model first, a refused
checkpoint write names the checkpoint, a Ctrl-C after the last epoch still interrupts, and a second eval into one
folder is refused.  See docs/guarantees.md."""

import fcntl
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from opformer import interrupt
from opformer.cli import main
from opformer.train import callbacks
from opformer.train import run as run_module
from opformer.train.config import apply_overrides, load_preset
from opformer.train.module import OperatorModule
from opformer.train.run import train

from .conftest import one_line_error, tree


def _cfg(path, **over):
    return apply_overrides(load_preset(str(path)), over)[0]


def _train_cli(config, out, *flags):
    return main(["train", str(config), "--epochs", "1", "--out", str(out), "--no-progress", *flags])


@pytest.fixture()
def finished_run(tiny_config, tmp_path):
    """A finished one-epoch run of the tiny config in tmp_path/run."""
    out = tmp_path / "run"
    train(_cfg(tiny_config, epochs=1), out, progress=False)
    return out


def _hold_lock(folder: Path, pid: str = "4242"):
    """``folder/.lock`` held as another process holds it (another open file description), naming ``pid``."""
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.write(fd, f"{pid}\n".encode())
    return fd


# --- a refused start changes nothing, its lock file included ----------------------------------------------------------
def test_a_refused_resume_leaves_the_lock_file_as_it_was(finished_run, tiny_config, capsys):
    """A --resume refused once the data are read (another model) and one refused because another process holds the
    directory leave every file as it was: the lock file keeps the earlier process's pid, its inode and its time
    (before: the refused command had written its own pid into it).  A resume that starts writes its pid."""
    lock = finished_run / ".lock"
    lock.write_text("4242\n")  # the pid of the process that trained the run
    before, stamp = tree(finished_run), lock.stat().st_mtime_ns
    assert _train_cli(tiny_config, finished_run, "--resume", "--d-model", "32") == 2
    assert "Differences: model.d_model: 16 -> 32" in one_line_error(capsys.readouterr().err)
    other = os.open(lock, os.O_RDWR)
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        assert _train_cli(tiny_config, finished_run, "--resume") == 2
        assert "is in use by a running training (pid 4242)" in one_line_error(capsys.readouterr().err)
    finally:
        os.close(other)
    assert tree(finished_run) == before and lock.stat().st_mtime_ns == stamp
    assert lock.read_text() == "4242\n"
    assert _train_cli(tiny_config, finished_run, "--resume") == 0, capsys.readouterr().err
    assert lock.read_text() == f"{os.getpid()} train\n"


# --- a checkpoint of another run: the model differences first ----------------------------------------------------------
def test_a_checkpoint_of_another_run_lists_the_model_first(finished_run, tiny_config, tmp_path, capsys):
    """Another run's last.ckpt (another width, validation split and number of epochs) in the run directory: --resume
    is refused in one line, before the data are read, that names the model difference first, then the data's, then
    the epochs (before: only the epochs, the model's appearing once they were made equal)."""
    other = tmp_path / "other"
    train(_cfg(tiny_config, epochs=2, **{"model.d_model": 24, "data.n_val": 6}), other, progress=False)
    last = finished_run / "checkpoints" / "last.ckpt"
    shutil.copy(other / "checkpoints" / "last.ckpt", last)
    before = tree(finished_run)
    read = []
    with pytest.MonkeyPatch.context() as m:  # refused before the data are read
        m.setattr(run_module, "prepare_run", lambda *a, **k: read.append(1) or pytest.fail("the data were read"))
        assert _train_cli(tiny_config, finished_run, "--resume") == 2
    line = one_line_error(capsys.readouterr().err)
    assert f"--resume: {last} is a checkpoint of another run than config.yaml (differences: " in line, line
    parts = ["model.d_model: 24 -> 16", "data.n_val: 6 -> 8", "train.epochs: 2 -> 1"]
    assert all(p in line for p in parts), line
    assert [line.index(p) for p in parts] == sorted(line.index(p) for p in parts), line
    assert not read and tree(finished_run) == before


# --- a refused checkpoint write names the checkpoint --------------------------------------------------------------------
@pytest.mark.parametrize("cause", ["permission", "removed"])
def test_a_refused_checkpoint_write_names_the_checkpoint(tiny_config, tmp_path, capsys, monkeypatch, cause):
    """A checkpoint write that the system refuses (the folder may not be written; the folder removed while the file
    was written) ends with one line naming the checkpoint and the cause, not its temporary file, and leaves no
    temporary file."""
    out = tmp_path / "run"
    ckdir = out / "checkpoints"
    if cause == "permission":  # what mkstemp raises in a folder one may not write (the tests may run as root)
        real = tempfile.mkstemp

        def mkstemp(*args, dir=None, prefix="", suffix="", **kwargs):
            if dir is not None and Path(dir) == ckdir:
                raise PermissionError(13, "Permission denied", os.path.join(dir, f"{prefix}x1y2z3{suffix}"))
            return real(*args, dir=dir, prefix=prefix, suffix=suffix, **kwargs)

        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
        reason = "Permission denied"
    else:
        real_save = callbacks.torch.save

        def save_then_remove(obj, fh, *args, **kwargs):
            real_save(obj, fh, *args, **kwargs)
            shutil.rmtree(ckdir)

        monkeypatch.setattr(callbacks.torch, "save", save_then_remove)
        reason = "No such file or directory"
    assert _train_cli(tiny_config, out) == 2
    line = one_line_error(capsys.readouterr().err)
    assert re.fullmatch(rf"opformer: error: could not write {re.escape(str(ckdir))}/(best|last)\.ckpt: {reason}", line), line
    assert not list(out.rglob("*.tmp"))


# --- Ctrl-C between the last epoch and the end of the test --------------------------------------------------------------
class _CtrlCInDel:
    """Ctrl-C landing while a ``__del__`` runs: Python drops the KeyboardInterrupt that its handler raises there."""

    def __del__(self):
        signal.raise_signal(signal.SIGINT)


@pytest.fixture()
def ctrl_c_raises():
    """SIGINT with Python's own handler, whatever the test process inherited or Lightning left (it ignores SIGINT
    once it has handled a Ctrl-C)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("hook", ["on_train_end", "on_test_end"], ids=["after-the-last-epoch", "end-of-the-test"])
def test_ctrl_c_after_the_last_epoch_still_interrupts(tiny_config, tmp_path, capsys, monkeypatch,
                                                              ctrl_c_raises, hook):
    """A Ctrl-C whose exception is lost after the last epoch (as the training ends, or at the end of the final test)
    ends the command as an interruption: exit status 130, the line naming last.ckpt and --resume, the checkpoints
    kept and no metrics.json (before: the command went on and ended as a success)."""
    real = getattr(OperatorModule, hook)

    def ctrl_c_lost(self, *args, **kwargs):
        # the final test (the dropout check before it tests on a loader of its own, without the data module)
        if hook == "on_train_end" or self.trainer.datamodule is not None:
            _CtrlCInDel()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(OperatorModule, hook, ctrl_c_lost)
    out = tmp_path / "run"
    assert _train_cli(tiny_config, out) == 130
    last_line = capsys.readouterr().err.strip().splitlines()[-1]
    assert last_line.startswith(f"interrupted: the last checkpoint is {out}/checkpoints/last.ckpt"), last_line
    assert "--resume" in last_line
    assert (out / "checkpoints" / "last.ckpt").exists() and (out / "checkpoints" / "best.ckpt").exists()
    assert not (out / "metrics.json").exists()
    assert not interrupt._STOP.is_set() and signal.getsignal(signal.SIGINT) is signal.default_int_handler


# --- one eval per output folder ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("when", ["at-the-start", "while-it-evaluates", "default-folder"])
def test_a_second_eval_into_the_same_folder_is_refused(finished_run, tmp_path, capsys, monkeypatch, when):
    """While an eval writes into a folder (it holds the folder's .lock), another eval into it is refused in one line
    naming the folder and the holder, and writes nothing there: given with --out, whether the first one started
    writing before or while the second evaluates, and in the default folder; once the first ends, it runs."""
    ev = finished_run / "eval-64" if when == "default-folder" else tmp_path / "ev"
    args = ["eval", str(finished_run)] + ([] if when == "default-folder" else ["--out", str(ev)])
    hook = (run_module, "_test_set") if when == "while-it-evaluates" else None
    second_writer_is_refused(args, ev, "eval", hook, "metrics.json", capsys, monkeypatch)


def second_writer_is_refused(args, folder, command, hook, written, capsys, monkeypatch):
    """``opformer ARGS`` into ``folder`` while another process holds its lock (taken before the command, or, with
    ``hook`` = (module, function name), as the command reaches that function) is refused in one line naming the folder
    and the holder and writes nothing there; once the lock is free the same command runs, writes ``written`` and
    signs the lock with its own pid."""
    folder.mkdir()
    held = []
    if hook is not None:
        real = getattr(*hook)

        def lock_taken_as_the_command_gets_there(*a, **k):
            held.append(_hold_lock(folder))
            return real(*a, **k)

        monkeypatch.setattr(*hook, lock_taken_as_the_command_gets_there)
    else:
        held.append(_hold_lock(folder))
    try:
        assert main(args) == 2
        line = one_line_error(capsys.readouterr().err)
    finally:
        for fd in held:
            os.close(fd)
    assert line == (f"opformer: error: {folder} is in use by a running opformer {command} (pid 4242); wait for it to "
                    "end, or choose another --out")
    assert [p.name for p in folder.iterdir()] == [".lock"] and (folder / ".lock").read_text() == "4242\n"
    monkeypatch.undo()
    assert main(args) == 0, capsys.readouterr().err
    assert (folder / written).exists() and (folder / ".lock").read_text() == f"{os.getpid()} {command}\n"
