"""What a hostile or unlucky user cannot do to a run: make a file run code, lose their own files, run two trainings
into one directory, leave half-written or stray files, get a traceback for a bad path or file, or train silently on
broken samples.  See docs/guarantees.md."""

import json
import os
import pathlib
import signal
import stat
import subprocess
import threading
import time

import numpy as np
import pytest
import torch
import yaml

from opformer.cli import main
from opformer.train.config import apply_overrides, load_preset
from opformer.train.run import train

from .conftest import PYTHON, cli_env, one_line_error, tree


def _cfg(path, **over):
    return apply_overrides(load_preset(str(path)), over)[0]


def _stop_after_first_checkpoint(out: pathlib.Path) -> threading.Thread:
    """A started thread that sets the training's stop flag once ``out`` holds its first last.ckpt (what the SIGTERM
    handler does, without raising anywhere)."""
    from opformer import interrupt

    def set_flag():
        deadline = time.time() + 120
        while not (out / "checkpoints" / "last.ckpt").exists() and time.time() < deadline:
            time.sleep(0.01)
        interrupt._STOP.set()

    setter = threading.Thread(target=set_flag, daemon=True)
    setter.start()
    return setter


@pytest.fixture()
def finished_run(tiny_config, tmp_path):
    """A finished one-epoch run of the tiny config in tmp_path/run."""
    out = tmp_path / "run"
    train(_cfg(tiny_config, epochs=1), out, progress=False)
    return out


class _Marker:
    """Unpickling this object touches a file: the proof that loading ran code."""

    def __init__(self, path):
        self.path = pathlib.Path(path)

    def __reduce__(self):
        return (pathlib.Path.touch, (self.path,))


def _plant(checkpoint: pathlib.Path, marker: pathlib.Path) -> None:
    ck = torch.load(checkpoint, map_location="cpu", weights_only=True)
    ck["payload"] = _Marker(marker)
    torch.save(ck, checkpoint)


# --- 1. loading never runs code ----------------------------------------------------------------------------------

@pytest.mark.parametrize("force_unsafe", [False, True], ids=["default", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1"])
def test_resume_from_a_checkpoint_with_a_pickled_payload_runs_no_code(finished_run, tiny_config, tmp_path, capsys,
                                                                      monkeypatch, force_unsafe):
    """A last.ckpt whose unpickling would touch a file is refused with one line on --resume, also when the
    environment asks torch to unpickle everything; the file is never touched."""
    marker = tmp_path / "code-ran"
    _plant(finished_run / "checkpoints" / "last.ckpt", marker)
    if force_unsafe:
        monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    code = main(["train", str(tiny_config), "--epochs", "2", "--out", str(finished_run), "--resume", "--no-progress"])
    line = one_line_error(capsys.readouterr().err)
    assert code == 2 and "last.ckpt" in line and "refused" in line
    assert not marker.exists()


def test_the_trainers_checkpoint_reader_never_unpickles(tmp_path, monkeypatch):
    """Lightning reads checkpoints through AtomicCheckpointIO: even a caller asking for weights_only=False under
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 gets a refusal, not the payload's side effect."""
    from opformer.train.callbacks import AtomicCheckpointIO

    ck, marker = tmp_path / "x.ckpt", tmp_path / "code-ran"
    torch.save({"state_dict": {"w": torch.ones(2)}, "payload": _Marker(marker)}, ck)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(Exception, match="(?i)weights.only|unsupported global"):
        AtomicCheckpointIO().load_checkpoint(ck, weights_only=False)
    assert not marker.exists()
    plain = tmp_path / "plain.ckpt"
    torch.save({"w": torch.ones(2)}, plain)
    assert AtomicCheckpointIO().load_checkpoint(plain)["w"].sum() == 2  # plain tensors still load


def test_torch_requirement_makes_weights_only_safe():
    """pyproject requires torch >= 2.6 (the release whose weights_only unpickler is the default and is not bypassed
    by an explicit weights_only=True under TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD)."""
    import tomllib

    root = pathlib.Path(__file__).resolve().parents[2]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "torch>=2.6" in deps


# --- 2. --overwrite removes only the run's own files, and only after validation ---------------------------------

def test_overwrite_keeps_the_users_files_and_a_rejected_overwrite_deletes_nothing(finished_run, tiny_config,
                                                                                  tmp_path, capsys):
    """Files of the user's own in the run directory and its checkpoints/, logs/, plots/ survive --overwrite; an
    --overwrite with an invalid value or a missing data file fails with one line and leaves every file as it was."""
    mine = ["notes.md", "checkpoints/mine.ckpt", "logs/mine.csv", "plots/mine.png"]
    for rel in mine:
        (finished_run / rel).write_text(f"the user's {rel}")
    before = tree(finished_run)
    for bad in (["--lr", "-1e-3"], ["--data", str(tmp_path / "missing.h5")]):
        code = main(["train", str(tiny_config), "--out", str(finished_run), "--overwrite", "--no-progress", *bad])
        assert code == 2
        one_line_error(capsys.readouterr().err)
        assert tree(finished_run) == before, bad
    code = main(["train", str(tiny_config), "--epochs", "1", "--lr", "1e-3", "--out", str(finished_run),
                 "--overwrite", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    for rel in mine:
        assert (finished_run / rel).read_text() == f"the user's {rel}"
    assert yaml.safe_load((finished_run / "config.yaml").read_text())["train"]["lr"] == 1e-3
    assert tree(finished_run)["metrics.json"] != before["metrics.json"]


# --- 3. one training per directory ---------------------------------------------------------------------------------

def test_a_directory_locked_by_a_running_training_is_refused_and_unchanged(finished_run, tiny_config, capsys):
    """While a process holds OUT/.lock (as a training does for its whole life), --overwrite and --resume into OUT are
    refused with one line naming the holder, and no file changes."""
    from opformer.train.run import _locked_run_dir

    before = tree(finished_run)
    with _locked_run_dir(finished_run):  # another open file description: flock conflicts as with another process
        for flag in ("--overwrite", "--resume"):
            code = main(["train", str(tiny_config), "--epochs", "1", "--out", str(finished_run), flag, "--no-progress"])
            line = one_line_error(capsys.readouterr().err)
            assert code == 2 and "in use by a running training" in line and f"pid {os.getpid()}" in line
            assert tree(finished_run) == {**before, ".lock": tree(finished_run)[".lock"]}
    code = main(["train", str(tiny_config), "--epochs", "1", "--out", str(finished_run), "--overwrite",
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err  # released when the holder ends


# --- 5. atomic writes -------------------------------------------------------------------------------------------

def _record_fsyncs(monkeypatch) -> list:
    kinds = []
    real = os.fsync

    def fsync(fd):
        kinds.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return kinds


def test_a_failed_checkpoint_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    """A write that fails half-way (a full disk) leaves the previous checkpoint intact and no temporary file; a
    successful one is fsynced, renamed into place and the directory fsynced; temporary names are unique."""
    from opformer.train import callbacks
    from opformer.atomic import atomic_write_text
    from opformer.train.callbacks import AtomicCheckpointIO

    path = tmp_path / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"epoch": 1, "w": torch.ones(3)}, path)
    real_save = torch.save

    def disk_full(obj, fh, *a, **k):
        fh.write(b"half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(callbacks.torch, "save", disk_full)
    with pytest.raises(OSError, match="No space"):
        io.save_checkpoint({"epoch": 2, "w": torch.zeros(3)}, path)
    monkeypatch.setattr(callbacks.torch, "save", real_save)
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]
    assert torch.load(path, weights_only=True)["epoch"] == 1

    sources, real_replace = [], os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (sources.append(src), real_replace(src, dst))[1])
    kinds = _record_fsyncs(monkeypatch)
    io.save_checkpoint({"epoch": 3}, path)
    io.save_checkpoint({"epoch": 4}, path)
    atomic_write_text(tmp_path / "metrics.json", "{}")
    assert len(set(sources)) == 3 and all(pathlib.Path(s).name != "last.ckpt.tmp" for s in sources)
    assert kinds == ["file", "dir"] * 3  # the data before the rename, the directory entry after it
    assert torch.load(path, weights_only=True)["epoch"] == 4
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["checkpoints", "last.ckpt", "metrics.json"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_a_failed_text_write_leaves_no_temporary(tmp_path, monkeypatch):
    """atomic_write_text (config.yaml, metrics.json) removes its temporary file when the write fails."""
    from opformer.atomic import atomic_write_text

    target = tmp_path / "metrics.json"
    atomic_write_text(target, "old")

    def failing_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_a_refused_atomic_write_names_the_file_not_its_temporary(tmp_path, monkeypatch):
    """A write the system refuses (the folder gone, the rename refused) is reported under the file the caller named
    (config.yaml, metrics.json), with the cause: the temporary name means nothing to the user."""
    from opformer.atomic import atomic_write_text

    with pytest.raises(FileNotFoundError) as caught:  # the folder is not there: mkstemp fails
        atomic_write_text(tmp_path / "gone" / "config.yaml", "x")
    assert caught.value.filename == str(tmp_path / "gone" / "config.yaml")
    target = tmp_path / "metrics.json"
    atomic_write_text(target, "old")
    real_replace = os.replace

    def refused(src, dst):
        raise PermissionError(13, "Permission denied", str(src))

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(PermissionError) as caught:
        atomic_write_text(target, "new")
    monkeypatch.setattr(os, "replace", real_replace)
    assert caught.value.filename == str(target) and ".tmp" not in str(caught.value)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


# --- 6. a waiting rank does not wait forever ----------------------------------------------------------------------

def _wait_in_thread(monkeypatch, tmp_path, limit: float):
    from opformer.tasks.base import _cached

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("OPFORMER_DATA", str(tmp_path / "cache"))
    monkeypatch.setenv("OPFORMER_DATA_WAIT", str(limit))
    result = {}

    def run():
        try:
            result["path"] = _cached("burgers", {"n_samples": 4, "resolution": 64}, 1)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_a_rank_waiting_for_the_data_of_a_failed_first_rank_gives_up_with_a_message(tmp_path, monkeypatch):
    """Rank 1 waits for rank 0's data file; with no progress for OPFORMER_DATA_WAIT seconds it stops with a message
    naming the file and what to do, instead of waiting forever."""
    from opformer.pde.errors import DataError

    thread, result = _wait_in_thread(monkeypatch, tmp_path, 0.5)
    thread.join(15)
    assert not thread.is_alive(), "rank 1 still waits for a file that will never come"
    err = result["error"]
    assert isinstance(err, DataError) and "first process" in str(err) and "OPFORMER_DATA_WAIT" in str(err)
    assert "burgers-64-4-" in str(err) and "opformer data prepare" in str(err)


def test_a_rank_waits_as_long_as_the_first_rank_makes_progress(tmp_path, monkeypatch):
    """A growing FILE.partial restarts the clock: the wait outlasts the limit and ends with the finished file."""
    thread, result = _wait_in_thread(monkeypatch, tmp_path, 0.5)
    thread.join(15)
    path = pathlib.Path(str(result["error"]).split("data file ")[1].split(" and saw")[0])
    thread, result = _wait_in_thread(monkeypatch, tmp_path, 0.5)
    partial = path.with_name(path.name + ".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    for i in range(8):  # 2 s of progress, four times the limit
        partial.write_bytes(b"x" * (i + 1))
        time.sleep(0.25)
    assert thread.is_alive()
    os.replace(partial, path)
    thread.join(15)
    assert result == {"path": path}


# --- 7. failed starts and bad files: one line, exit 2 -------------------------------------------------------------

@pytest.mark.parametrize("where", ["proc", "file", "under-a-file"])
def test_an_output_directory_that_cannot_be_written_is_one_line(tiny_config, tmp_path, capsys, where):
    """--out under /proc, --out naming a file, and --out below a file end with one line (exit 2), nothing written."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    out = {"proc": pathlib.Path("/proc/opformer-run"), "file": a_file, "under-a-file": a_file / "run"}[where]
    code = main(["train", str(tiny_config), "--epochs", "1", "--out", str(out), "--no-progress"])
    line = one_line_error(capsys.readouterr().err)
    assert code == 2 and str(out) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "tiny.yaml"] and a_file.read_text() == "x"


def _bad_checkpoints(run: pathlib.Path, tmp_path: pathlib.Path) -> dict:
    good = (run / "checkpoints" / "best.ckpt").read_bytes()
    files = {"empty": b"", "truncated": good[: len(good) // 2], "text": b"not a checkpoint\n"}
    out = {}
    for name, data in files.items():
        out[name] = tmp_path / f"{name}.ckpt"
        out[name].write_bytes(data)
    out["foreign"] = tmp_path / "foreign.ckpt"
    torch.save({"weights": torch.ones(2)}, out["foreign"])
    return out


def test_bad_checkpoints_given_to_eval_and_predict_are_one_line(finished_run, burgers_file, tmp_path, capsys):
    """An empty, truncated, text or non-opformer checkpoint passed to eval or predict ends with one line naming it."""
    for name, ck in _bad_checkpoints(finished_run, tmp_path).items():
        for cmd in (["eval", str(ck), "--data", str(burgers_file)],
                    ["predict", str(ck), "--data", str(burgers_file), "--out", str(tmp_path / "p.npz")]):
            code = main(cmd)
            line = one_line_error(capsys.readouterr().err)
            assert code == 2 and ck.name in line, (name, cmd[0], line)
    assert not (tmp_path / "p.npz").exists()


def test_a_truncated_last_checkpoint_on_resume_is_one_line(finished_run, tiny_config, capsys):
    """--resume from a truncated last.ckpt (a copy cut short) ends with one line naming it; nothing changes."""
    last = finished_run / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:3000])
    before = tree(finished_run)
    code = main(["train", str(tiny_config), "--epochs", "2", "--out", str(finished_run), "--resume", "--no-progress"])
    line = one_line_error(capsys.readouterr().err)
    assert code == 2 and "last.ckpt" in line and "not a readable checkpoint" in line
    assert tree(finished_run) == before


def test_a_damaged_best_checkpoint_is_refused_before_resuming(finished_run, tiny_config, tmp_path, capsys):
    """best.ckpt is read only when the run ends: a damaged one is refused up front in one line, not after every
    remaining epoch with a traceback (and again on every later --resume)."""
    import shutil

    run = tmp_path / "copy"
    shutil.copytree(finished_run, run)
    best = run / "checkpoints" / "best.ckpt"
    best.write_bytes(best.read_bytes()[:3000])
    before = tree(run)
    code = main(["train", str(tiny_config), "--epochs", "2", "--out", str(run), "--resume", "--no-progress"])
    line = one_line_error(capsys.readouterr().err)
    assert code == 2 and "best.ckpt" in line and "not a readable checkpoint" in line and "remove it" in line
    assert tree(run) == before


def test_a_run_set_aside_by_a_killed_overwrite_is_put_back(finished_run, tiny_config, tmp_path):
    """An --overwrite killed after it set the old run aside (OUT/.replaced-run.PID) and before its training started:
    the next start in that directory puts the old run back (with a warning), so --resume finds it."""
    import shutil

    from opformer.train.run import _set_aside_run

    run = tmp_path / "copy"
    shutil.copytree(finished_run, run)
    before = tree(run)
    held = _set_aside_run(run)
    assert held is not None and not (run / "checkpoints" / "last.ckpt").exists()
    with pytest.warns(UserWarning, match=r"put back the run that an interrupted --overwrite had set aside"):
        m = train(apply_overrides(load_preset(str(tiny_config)), {"train.epochs": 1})[0], run, progress=False,
                  resume=True)
    assert m["epochs"] == json.loads((finished_run / "metrics.json").read_text())["epochs"]
    assert not held.exists() and (run / "checkpoints" / "best.ckpt").exists()
    assert {k for k in tree(run) if k.startswith("checkpoints/")} == {k for k in before if k.startswith("checkpoints/")}


def test_resume_keeps_the_earlier_history_and_says_nothing_about_deleting_it(tiny_config, tmp_path, capsys):
    """A run stopped after its first checkpoint and resumed from the command line keeps the first part's metrics
    rows (as metrics-0.csv) and shows none of Lightning's notices that the log or checkpoint directory is not
    empty and that earlier log files will be deleted."""
    import warnings

    from opformer import interrupt

    out = tmp_path / "run"
    setter = _stop_after_first_checkpoint(out)
    try:
        with pytest.raises(KeyboardInterrupt):
            train(_cfg(tiny_config, epochs=30), out, progress=False)
    finally:
        setter.join()
        interrupt.clear_stop()
    assert (out / "logs" / "metrics.csv").exists(), "the stopped run wrote no metrics.csv"
    first = (out / "logs" / "metrics.csv").read_text()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["train", str(tiny_config), "--epochs", "30", "--out", str(out), "--resume", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    shown = [str(w.message) for w in caught]
    assert not [m for m in shown if "not empty" in m or "will be deleted" in m], shown
    assert (out / "logs" / "metrics-0.csv").read_text() == first
    assert "\n29," in (out / "logs" / "metrics.csv").read_text()


def test_resume_with_the_same_data_file_spelled_differently_is_the_same_run(tiny_config, burgers_file, tmp_path,
                                                                           monkeypatch):
    """``./FILE`` and ``FILE`` (relative to the working directory) name one file: --resume accepts it, and the
    recorded config holds the absolute path."""
    monkeypatch.chdir(burgers_file.parent)
    out = tmp_path / "run"
    first = train(_cfg(tiny_config, epochs=1, **{"data.path": burgers_file.name}), out, progress=False)
    recorded = yaml.safe_load((out / "config.yaml").read_text())["data"]["path"]
    assert recorded == str(burgers_file)
    again = train(_cfg(tiny_config, epochs=1, **{"data.path": f"./{burgers_file.name}"}), out, resume=True,
                  progress=False)
    assert again["test_rel_l2"] == first["test_rel_l2"]


def test_resume_with_another_config_is_refused_without_config_yaml(finished_run, tiny_config, capsys):
    """With config.yaml gone, --resume compares against the run config stored in last.ckpt: a changed --lr is refused
    with the difference named."""
    (finished_run / "config.yaml").unlink()
    before = tree(finished_run)
    code = main(["train", str(tiny_config), "--epochs", "1", "--lr", "1e-2", "--out", str(finished_run), "--resume",
                 "--no-progress"])
    line = one_line_error(capsys.readouterr().err)
    assert code == 2 and "train.lr: 0.003 -> 0.01" in line
    assert tree(finished_run) == before


def _cli(args, **kw):
    return subprocess.Popen([PYTHON, "-m", "opformer", *args], env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _wait_for(path: pathlib.Path, proc, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while not path.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None and path.exists(), proc.communicate()[1][-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_training_says_where_its_checkpoint_is_and_holds_its_directory(tiny_config, tmp_path, sig):
    """While a training runs, a second training with --overwrite into its directory is refused with one line and
    deletes nothing; Ctrl-C or SIGTERM then ends the training with one line naming last.ckpt and --resume (exit
    128 + signal), and the directory is free again."""
    out = tmp_path / "run"
    # far more epochs than the test lasts on any machine: the run must still be going when the signal comes (500
    # epochs of the tiny model once ended on a loaded machine before the second command had started)
    # an ignored SIGINT is inherited: when the test process ignores it (after Lightning handled a Ctrl-C in it, or
    # under nohup), the child must still get Python's default handler, as a training started from a shell does
    proc = _cli(["train", str(tiny_config), "--epochs", "1000000", "--out", str(out), "--no-progress"],
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for(out / "checkpoints" / "last.ckpt", proc)
        config = (out / "config.yaml").stat().st_ino
        second = subprocess.run([PYTHON, "-m", "opformer", "train", str(tiny_config), "--out", str(out),
                                 "--overwrite", "--no-progress"], env=cli_env(), capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 2 and "in use by a running training" in one_line_error(second.stderr)
        assert (out / "config.yaml").stat().st_ino == config and (out / "checkpoints" / "last.ckpt").exists()
        assert proc.poll() is None, "the training ended before it was interrupted"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, err[-3000:]
    last_line = err.strip().splitlines()[-1]
    assert "Traceback" not in err
    assert f"{out}/checkpoints/last.ckpt" in last_line and "--resume" in last_line, err[-2000:]
    assert not (out / "metrics.json").exists()
    from opformer.train.run import _check_not_running

    _check_not_running(out)  # the lock went with the process


def test_a_stop_request_whose_exception_was_lost_still_ends_the_training(tiny_config, tmp_path):
    """Python drops an exception raised in a weakref callback or ``__del__``; a SIGTERM that lands there must not be
    lost.  With the flag of the training's SIGTERM handler set and no exception in flight (the dropped case), a
    training stops before its next batch with last.ckpt kept and no metrics.json, or, when the flag was set while
    the data loaded, before it starts; once the flag is cleared a training runs to the end."""
    from opformer import interrupt

    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        interrupt.request_stop()  # what the handler does: set the flag, raise (here the exception is not lost)
    try:
        with pytest.raises(KeyboardInterrupt):
            train(_cfg(tiny_config, epochs=2), out, progress=False)
        assert not (out / "checkpoints").exists() and not (out / "metrics.json").exists()
        interrupt.clear_stop()
        setter = _stop_after_first_checkpoint(out)  # mid-training, no exception raised anywhere
        with pytest.raises(KeyboardInterrupt):
            train(_cfg(tiny_config, epochs=200), out, progress=False, overwrite=True)  # ends if not stopped
        setter.join()
        assert (out / "checkpoints" / "last.ckpt").exists() and not (out / "metrics.json").exists()
    finally:
        interrupt.clear_stop()
    metrics = train(_cfg(tiny_config, epochs=1), out, progress=False, overwrite=True)
    assert metrics["epochs"] == 1 and (out / "metrics.json").exists()


# --- 6. DDP launched by Lightning equals one process ------------------------------------------------------------

@pytest.mark.slow
def test_ddp_launched_by_lightning_matches_one_process(tiny_config, tmp_path):
    """``--devices 2 --strategy ddp --accelerator cpu`` without torchrun (Lightning starts the second process) gives
    the metrics of one process within 1e-4, and every logged metric is reduced over the ranks (no sync_dist
    warning)."""
    cfg_path = tmp_path / "nodrop.yaml"
    cfg = yaml.safe_load(tiny_config.read_text())
    cfg["model"]["dropout"] = 0.0
    cfg_path.write_text(yaml.safe_dump(cfg))
    args = ["train", str(cfg_path), "--epochs", "2", "--no-progress"]
    one = subprocess.run([PYTHON, "-m", "opformer", *args, "--out", str(tmp_path / "single")], env=cli_env(),
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([PYTHON, "-m", "opformer", *args, "--out", str(tmp_path / "ddp"), "--devices", "2",
                          "--strategy", "ddp", "--accelerator", "cpu"], env=cli_env(), capture_output=True, text=True,
                         timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "sync_dist" not in two.stdout + two.stderr
    assert "not a multiple of the 2 processes" not in two.stdout  # 24 training samples: none left out
    single = json.loads((tmp_path / "single" / "metrics.json").read_text())
    ddp = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    for key in ("val_rel_l2", "test_rel_l2"):
        assert ddp[key] == pytest.approx(single[key], rel=1e-4), key
    assert ddp["epochs"] == single["epochs"] == 2


def test_a_finished_run_destroys_its_process_group_and_leaves_a_callers_alone(tiny_config, tmp_path):
    """Every rank destroys the process group training made when it ends (left to interpreter exit, gloo's threads
    can abort a rank and the launcher then kills the whole run); a group the caller made before training stays."""
    code = f"""
import torch.distributed as dist, tempfile, os
from opformer.cli import main
from opformer.train.run import _close_process_group
_close_process_group()  # no group: nothing to do
dist.init_process_group("gloo", init_method="file://" + os.path.join(tempfile.mkdtemp(), "store"), rank=0, world_size=1)
assert main(["train", {str(tiny_config)!r}, "--epochs", "1", "--out", {str(tmp_path / "run")!r}, "--no-progress"]) == 0
assert dist.is_initialized()  # the caller's group
_close_process_group()
assert not dist.is_initialized()
print("closed")
"""
    res = subprocess.run([PYTHON, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("closed"), res.stderr[-2000:]


# --- 8. silent bad data -------------------------------------------------------------------------------------------

def test_zero_norm_targets_and_far_outliers_are_named_by_split_and_sample():
    """A zero target (the relative L2 loss divides by its norm) and samples far outside the training distribution
    (max |x - mean| / std > 50) are each named with their split and positions; ordinary samples are not."""
    from opformer.data.datasets import FieldDataset, suspicious_samples

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 32, 1)), rng.normal(size=(60, 32, 1))
    val_x, val_y = x[40:].copy(), y[40:].copy()
    val_y[3] = 0.0
    val_x[5, 7, 0] = 1e4
    val_y[11] *= 1e3
    data = {"train": FieldDataset({"input": x[:40], "target": y[:40]}),
            "val": FieldDataset({"input": val_x, "target": val_y})}
    lines = suspicious_samples(data)
    assert len(lines) == 3, lines
    assert lines[0].startswith("val split, samples 3 (1 of 20): the target has zero norm")
    assert lines[1].startswith("val split, samples 5 (1 of 20): the input lies far outside the training data")
    assert lines[2].startswith("val split, samples 11 (1 of 20): the target lies far outside the training data")
    assert suspicious_samples({"train": data["train"], "val": FieldDataset({"input": x[40:], "target": y[40:]})}) == []


def test_bad_snapshots_of_trajectory_data_are_named_by_trajectory_and_snapshot():
    """Pairs drawn from trajectories: a zero snapshot used as a target and a wildly scaled snapshot are named by
    split, trajectory and snapshot; a zero snapshot that is never a target is not reported; clean data gives none."""
    from opformer.data.datasets import suspicious_samples
    from opformer.tasks.trajectories import PairDataset

    rng = np.random.default_rng(1)
    traj = rng.normal(size=(12, 4, 8, 8, 1)).astype(np.float32)
    times, coords = np.arange(4.0), np.zeros((8, 8, 2), np.float32)
    pairs = lambda n: np.array([(t, i, j) for t in range(n) for i in range(4) for j in range(i + 1, 4)])  # noqa: E731
    val = traj[8:].copy()
    val[1, 2] = 0.0   # a target (j = 2 occurs)
    val[2, 0] = 0.0   # snapshot 0 is only ever an input: no loss divides by it, and 0 is within the spread
    val[3, 3, 4, 4, 0] = 1e4
    data = {"train": PairDataset(traj[:8], times, pairs(8), coords), "val": PairDataset(val, times, pairs(4), coords)}
    lines = suspicious_samples(data)
    assert len(lines) == 2, lines
    assert lines[0].startswith("val split, trajectory 1 snapshot 2: the target snapshot has zero norm")
    assert lines[1].startswith("val split, trajectory 3 snapshot 3: the snapshot lies far outside the training")
    clean = {"train": data["train"], "val": PairDataset(traj[8:], times, pairs(4), coords)}
    assert suspicious_samples(clean) == []


def test_darcy_solutions_of_the_wrong_sign_are_named_when_training_starts(tmp_path):
    """Samples 530-535 of the 17^2 cell recipe hold sample 533, whose solution has the wrong sign for f = 1 (the
    recipe's spline artefact, docs/data.md).  With 4 training samples it dominates the training statistics, so the
    generic far-outside check cannot see it; the Darcy tasks (forward: the target, inverse: the input before noise)
    name it by split position and file sample.  The same arrays without an opformer recipe, whose source term is
    unknown, are not checked."""
    import warnings

    from opformer.data import load_arrays
    from opformer.pde import generate_dataset, make_recipe
    from opformer.train.run import prepare_run

    path = generate_dataset(make_recipe("darcy", n_samples=1000, resolution=17), tmp_path / "d17.h5", start=530,
                            stop=536, workers=1, progress=False)
    plain = tmp_path / "plain.npz"
    np.savez(plain, **load_arrays(path, ("coeff", "sol")))

    def data_warnings(preset, file, **extra):
        cfg, explicit = apply_overrides(load_preset(preset), {"data.path": str(file), "resolution": 17, "n_train": 4,
                                                              "n_val": 1, "n_test": 1, **extra})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            prepare_run(cfg, frozenset(explicit), progress=False)
        # (4 training samples of a two-valued coefficient also agree at some grid points: that warning is left out)
        return [str(w.message) for w in caught if str(w.message).startswith("data:")
                and "the input is the same" not in str(w.message)]

    for preset, extra in (("darcy-fno-cpu", {}), ("darcy-inverse-fno-cpu", {"noise": 0.01})):
        lines = data_warnings(preset, path, **extra)
        assert len(lines) == 1, (preset, lines)
        assert lines[0].startswith(f"data: train split, samples 3 (1 of 4; samples 533 of {path}): the solution u "
                                   "has the wrong sign"), lines
        assert data_warnings(preset, plain, **extra) == []


def test_training_on_a_file_with_bad_samples_warns_once_per_finding(tiny_config, tmp_path, capsys):
    """A user's file with a zero target in the test split and a wildly scaled input in the validation split: the
    training prints one warning line for each, naming split and sample; the generated Burgers data prints none."""
    from opformer.data.readers import open_source

    cfg = yaml.safe_load(tiny_config.read_text())
    src = open_source(cfg["data"]["path"], ["a", "u"])
    a, u = (src.read(k, np.arange(40)) for k in ("a", "u"))
    a[26] *= 1e6  # file samples 24-31 are the validation split, 32-39 the test split
    u[35] = 0.0
    npz = tmp_path / "bad.npz"
    np.savez(npz, a=a, u=u)
    code = main(["train", str(tiny_config), "--data", str(npz), "--epochs", "1", "--out", str(tmp_path / "bad"),
                 "--no-progress"])
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("opformer: warning: data:")]
    assert code == 0
    assert len(warned) == 2, warned
    # positions in the split, and the samples' numbers in the user's file
    assert f"val split, samples 2 (1 of 8; samples 26 of {npz}): the input lies far outside" in warned[0]
    assert f"test split, samples 3 (1 of 8; samples 35 of {npz}): the target has zero norm" in warned[1]
    code = main(["train", str(tiny_config), "--epochs", "1", "--out", str(tmp_path / "good"), "--no-progress"])
    assert code == 0 and "opformer: warning: data:" not in capsys.readouterr().err


def test_a_log_file_gets_one_line_per_epoch_not_a_progress_bar(tiny_config, tmp_path, capsys):
    """Output that is not a terminal (here pytest's capture; a log file in practice) gets the per-epoch lines that
    --no-progress gives, not the bar's redraws."""
    assert main(["train", str(tiny_config), "--epochs", "2", "--out", str(tmp_path / "run")]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.startswith("epoch ")]
    assert [line.split()[:3] for line in lines] == [["epoch", "0", "[1/2]"], ["epoch", "1", "[2/2]"]]
    assert all("val_rel_l2" in line and "s/epoch" in line for line in lines)
    assert "it/s" not in captured.out + captured.err


def test_a_write_refused_for_lack_of_space_is_one_line(tiny_config, tmp_path):
    """A training whose checkpoint write hits the file size limit (as a full disk would): one line saying so and
    what to do, exit status 2, no traceback (torch.save turns the OSError into a RuntimeError)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))  # bytes: the checkpoint is larger

    out = tmp_path / "run"
    proc = subprocess.run([PYTHON, "-m", "opformer", "train", str(tiny_config), "--epochs", "1", "--no-progress",
                           "--out", str(out)], env=cli_env(), capture_output=True, text=True, timeout=300,
                          preexec_fn=limit)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = one_line_error(proc.stderr)
    assert line.startswith("opformer: error: could not write ")
    assert "the file size limit of this process (ulimit -f) is reached" in line
    assert "run the same command again" in line and "Traceback" not in proc.stderr
    assert not list(out.rglob("*.tmp"))  # the refused write left no temporary file
