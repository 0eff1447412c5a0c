"""A command refused because another opformer process holds the folder's lock names the holder by the command that
holds it, as its lock file records it (``PID COMMAND``), not by the refused command's own kind; a lock file of an
earlier version (the pid alone) is still read."""

import fcntl
import os
import shutil

import pytest

from opformer.cli import main
from opformer.train import run as run_module

from .conftest import one_line_error
from .test_eval_predict_paths import burgers_runs  # noqa: F401 (a fixture)


def _held(folder, content: str):
    """``folder/.lock`` held as another process holds it (another open file description), holding ``content``."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.write(fd, content.encode())
    return fd


def _refusal(folder, holder: str, pid) -> str:
    return (f"opformer: error: {folder} is in use by {holder} (pid {pid}); wait for it to end, or choose another "
            "--out")


def test_a_training_refused_by_a_running_eval_names_the_eval(burgers_runs, tmp_path, capsys):
    """(before: "in use by a running training", the refused command's kind)"""
    folder = tmp_path / "ev"
    with run_module.locked_output(folder, "eval"):  # as a running eval holds its folder
        assert (folder / ".lock").read_text() == f"{os.getpid()} eval\n"
        code = main(["train", str(burgers_runs[0].parent / "tiny.yaml"), "--out", str(folder), "--overwrite",
                     "--no-progress"])
        line = one_line_error(capsys.readouterr().err)
    assert code == 2 and line == _refusal(folder, "a running opformer eval", os.getpid())
    assert [p.name for p in folder.iterdir()] == [".lock"]


@pytest.mark.parametrize("command, holder", [("train", "a running training"), ("eval", "a running opformer eval"),
                                             ("rollout", "a running opformer rollout")])
def test_an_eval_refused_by_another_command_names_that_command(burgers_runs, tmp_path, capsys, command, holder):
    """(before: "in use by a running opformer eval (pid 4242 train)")"""
    folder = tmp_path / "ev"
    fd = _held(folder, f"4242 {command}\n")
    try:
        assert main(["eval", str(burgers_runs[0]), "--out", str(folder)]) == 2
        line = one_line_error(capsys.readouterr().err)
    finally:
        os.close(fd)
    assert line == _refusal(folder, holder, 4242)
    assert (folder / ".lock").read_text() == f"4242 {command}\n"  # a refused command leaves the file as it was


def test_a_lock_file_of_an_earlier_version_is_read(burgers_runs, tmp_path, capsys):
    """The pid alone: the holder is named as the refused command's kind, as that version did; other content is not
    repeated to the user."""
    folder = tmp_path / "ev"
    for content, pid in (("4242\n", "4242"), ("garbage that is no pid\n", "?")):
        fd = _held(folder, content)
        try:
            assert main(["eval", str(burgers_runs[0]), "--out", str(folder)]) == 2
            line = one_line_error(capsys.readouterr().err)
        finally:
            os.close(fd)
        assert line == _refusal(folder, "a running opformer eval", pid)


def test_commands_record_what_holds_the_lock(burgers_runs, tmp_path, capsys):
    """An eval signs its folder's lock as an eval; a training its run directory's as a training (the lock file a
    training writes is checked where a start would write it, in its own directory)."""
    folder = tmp_path / "ev"
    assert main(["eval", str(burgers_runs[0]), "--out", str(folder)]) == 0, capsys.readouterr().err
    assert (folder / ".lock").read_text() == f"{os.getpid()} eval\n"
    run = tmp_path / "run"
    shutil.copytree(burgers_runs[0], run)
    with run_module._locked_run_dir(run):  # signed as a training's when taken
        assert (run / ".lock").read_text() == f"{os.getpid()} train\n"
        assert main(["eval", str(run / "checkpoints" / "best.ckpt"), "--out", str(run / "ev")]) == 0
        assert main(["train", str(burgers_runs[0].parent / "tiny.yaml"), "--out", str(run), "--resume",
                     "--no-progress"]) == 2
        line = one_line_error(capsys.readouterr().err)
    assert line == _refusal(run, "a running training", os.getpid())
