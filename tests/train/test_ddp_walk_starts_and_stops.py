"""Several CPU processes (gloo), as a user with a cluster runs them: splits too small for the processes, resuming on
another number of processes, a SIGTERM that reaches the first process only, and a process killed outright."""

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import yaml

from opformer.config import ConfigError, TrainConfig

from .conftest import cli_env

PYTHON = sys.executable


def _config(tiny_config, tmp_path, model=None, **data):
    cfg = yaml.safe_load(tiny_config.read_text())
    cfg["data"].update(data)
    cfg["model"].update(model or {})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _running(pid) -> bool:
    """The process is there and no zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill_left(proc, children) -> None:
    """Kill the command ``proc`` and its processes ``children`` where a test left them running."""
    if proc.poll() is None:
        proc.kill()
    for pid in children:
        if _running(pid):
            os.kill(int(pid), signal.SIGKILL)


def _all_ended(children, wait: float = 15) -> bool:
    """Whether the processes ``children`` end within ``wait`` seconds."""
    deadline = time.time() + wait
    while time.time() < deadline and [pid for pid in children if _running(pid)]:
        time.sleep(0.2)
    return not [pid for pid in children if _running(pid)]


def _long_two_process_run(tiny_config, out, **popen) -> subprocess.Popen:
    """``opformer train`` of 500 epochs on two CPU processes into ``out``, started and left running (``popen``: more
    arguments of ``subprocess.Popen``)."""
    return subprocess.Popen([PYTHON, "-m", "opformer", "train", str(tiny_config), "--epochs", "500", "--no-progress",
                             "--devices", "2", "--accelerator", "cpu", "--out", str(out)], env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _wait_for_checkpoint(proc, out, poll: float = 0.05) -> None:
    """Wait (4 minutes at most) until the run ``proc`` trains into ``out`` has written its first last.ckpt; the run
    ending before is a failure showing its errors."""
    deadline = time.time() + 240
    while time.time() < deadline and not (out / "checkpoints" / "last.ckpt").exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(poll)


def _opformer(*args, timeout=300):
    return subprocess.run([PYTHON, "-m", "opformer", *map(str, args)], env=cli_env(), capture_output=True, text=True,
                          timeout=timeout)


def test_a_split_smaller_than_the_processes_is_refused_in_one_line(tiny_config, tmp_path):
    """One validation sample for two processes: one line naming the flags, before any process is started or any
    file written (Lightning stopped the second process with a traceback)."""
    cfg = _config(tiny_config, tmp_path, n_val=1, n_train=25, train_pool=26)
    out = tmp_path / "run"
    res = _opformer("train", cfg, "--epochs", 1, "--no-progress", "--devices", 2, "--accelerator", "cpu",
                    "--out", out, timeout=120)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "[rank" not in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("opformer: error:")]
    assert len(errors) == 1 and "--devices 2" in errors[0] and "validation split has 1 sample" in errors[0]
    assert "--n-val" in errors[0]
    assert not out.exists()


def test_check_split_sizes_names_each_split():
    from opformer.train.run import check_split_sizes

    t = TrainConfig(devices=3, num_nodes=2)
    sets = {"train": list(range(10)), "val": list(range(6)), "test": list(range(5))}
    with pytest.raises(ConfigError, match=r"--devices 3 x --num-nodes 2: the test split has 5 samples, fewer than "
                                          r"the 6 processes.*--n-test"):
        check_split_sizes(sets, 6, t)
    check_split_sizes(sets, 5, t)
    check_split_sizes({"train": [0, 1], "val": [0], "test": [0]}, 1, t)  # one process: any split is enough


def test_steps_per_epoch_on_several_processes():
    from opformer.train.run import steps_per_epoch

    t = TrainConfig(batch_size=4)
    assert steps_per_epoch(25, t, 1) == 7  # the last batch holds one sample
    assert steps_per_epoch(25, t, 2) == 6  # 24 samples shared out, 12 a process in batches of 2
    assert steps_per_epoch(24, t, 2) == steps_per_epoch(24, t, 1) == 6
    assert steps_per_epoch(25, TrainConfig(batch_size=4, limit_train_batches=3), 1) == 3
    assert steps_per_epoch(25, TrainConfig(batch_size=4, limit_train_batches=0.5), 1) == 3


def test_resuming_on_another_number_of_processes_is_refused_when_the_steps_differ(tiny_config, tmp_path):
    """A one-process checkpoint of 25 training samples (7 steps an epoch at batch 4) resumed on two processes (6
    steps): refused in one line naming both counts, before a process is started (it was resumed on a schedule of
    the wrong length, whose learning rate then never came down to its end)."""
    cfg = _config(tiny_config, tmp_path, n_train=25, train_pool=33)
    out = tmp_path / "run"
    first = _opformer("train", cfg, "--epochs", 1, "--no-progress", "--accelerator", "cpu", "--out", out)
    assert first.returncode == 0, first.stderr[-3000:]
    before = (out / "checkpoints" / "last.ckpt").stat().st_mtime_ns
    res = _opformer("train", cfg, "--epochs", 1, "--no-progress", "--accelerator", "cpu", "--out", out, "--resume",
                    "--devices", 2, timeout=120)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("opformer: error:")]
    assert len(errors) == 1, res.stderr
    assert "written by 1 process, 7 steps an epoch" in errors[0] and "has 2 processes, 6 steps an epoch" in errors[0]
    assert "resume on 1 process" in errors[0]
    assert (out / "checkpoints" / "last.ckpt").stat().st_mtime_ns == before


def test_check_resume_processes_reads_the_count_of_older_checkpoints():
    """A checkpoint written before the count was recorded: its run config's devices and nodes give it."""
    from opformer.train.run import check_resume_processes

    ck = {"run_config": {"train": {"devices": 2, "num_nodes": 1}}, "state_dict": {}}
    t = TrainConfig(batch_size=4)
    with pytest.raises(ConfigError, match="written by 2 processes, 6 steps an epoch"):
        check_resume_processes(ck, t, 25, 1)
    check_resume_processes(ck, t, 24, 1)  # the same 6 steps an epoch: goes on
    check_resume_processes({"world_size": 1, "state_dict": {}}, t, 25, 1)


def test_lightning_does_not_take_over_sigterm(tmp_path):
    """The command's SIGTERM handler stays in place while Lightning runs several processes: Lightning's own
    broadcasts from inside the handler, and a SIGTERM reaching the first process while the others waited in a
    barrier hung every process."""
    from opformer.train.run import _trainer

    t = TrainConfig(accelerator="cpu", devices=2, batch_size=4, epochs=1)

    def ours(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        trainer = _trainer(t, tmp_path, False, [], logger=False)
        trainer._signal_connector.register_signal_handlers()
        assert signal.getsignal(signal.SIGTERM) is ours
        trainer._signal_connector.teardown()
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.slow
def test_sigterm_to_the_first_of_two_processes_ends_both(tiny_config, tmp_path):
    """``kill`` of the command's process (the first of two) ends the run with its one line and status, the second
    process with it, and leaves a checkpoint to resume from."""
    out = tmp_path / "run"
    proc = _long_two_process_run(tiny_config, out)
    children = []
    try:
        _wait_for_checkpoint(proc, out, poll=0.5)
        time.sleep(2.0)
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        _kill_left(proc, children)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert [line for line in stderr.splitlines() if line.startswith("terminated:")], stderr[-3000:]
    assert "Traceback" not in stderr
    assert children and _all_ended(children)
    ck = __import__("torch").load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ck["world_size"] == 2


def test_threads_of_several_processes_are_kept_and_oversubscription_warned(monkeypatch, capsys):
    """``--devices 3`` on 2 CPUs is warned of, once; the threads chosen for several processes go into
    ``$OMP_NUM_THREADS``, which Lightning then leaves alone (it replaced ``--threads`` with its own share) and the
    processes it starts read."""
    import torch

    import opformer.threads as T
    from opformer.train.cli import _set_threads

    monkeypatch.setattr(T, "available_cpus", lambda root="/sys/fs/cgroup": (2, "affinity 2 of 2 CPUs"))
    monkeypatch.setattr(T, "oversubscription_warning", lambda *a, **k: None)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        assert _set_threads(1, processes=3, devices="3") == 1
        out = capsys.readouterr().out
        assert out.count("torch threads:") == 1
        assert "warning: --devices 3: 3 processes of 1 thread on 2 CPUs" in out and "at most 2 processes" in out
        assert os.environ["OMP_NUM_THREADS"] == "1"
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        assert _set_threads(2, processes=2, devices="2") == 2
        assert os.environ["OMP_NUM_THREADS"] == "2" and "use --threads 1" in capsys.readouterr().out
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        assert _set_threads(None, processes=2, devices="2") == 1  # the 2 CPUs shared out
        assert "warning: --devices" not in capsys.readouterr().out
        monkeypatch.setenv("LOCAL_RANK", "1")  # a process Lightning started: silent
        assert _set_threads(1, processes=2, devices="2") == 1 and capsys.readouterr().out == ""
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_two_processes_write_one_run_whose_test_error_an_evaluation_repeats(tiny_config, tmp_path):
    """25 training and 7 test samples on two processes: the notes and the threads line once, one set of run files,
    a test error equal to ``opformer eval`` of the best checkpoint in one process (no sample counted twice), and a
    checkpoint that a fresh process loads."""
    cfg = _config(tiny_config, tmp_path, model={"modes": 40}, n_train=25, train_pool=33, n_test=7)
    out = tmp_path / "run"
    res = _opformer("train", cfg, "--epochs", 2, "--no-progress", "--devices", 2, "--accelerator", "cpu",
                    "--out", out)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("torch threads:") == 1
    notes = [line for line in res.stdout.splitlines() if line.startswith("note: ")]
    assert len(notes) == len(set(notes)) and any("modes" in n for n in notes), res.stdout
    assert "not a multiple of the 2 processes" in res.stdout
    assert sorted(p.name for p in out.iterdir()) == [".lock", "checkpoints", "config.yaml", "logs", "metrics.json",
                                                     "plots"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert sorted(p.name for p in (out / "plots").iterdir()) == ["predictions.png", "training_curves.png"]
    assert [p.name for p in (out / "logs").iterdir() if p.name.startswith("events")].__len__() == 1
    rows = (out / "logs" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2  # header, then a validation and a training row per epoch
    metrics = __import__("json").loads((out / "metrics.json").read_text())
    ev = _opformer("eval", out / "checkpoints" / "best.ckpt", "--out", tmp_path / "ev", timeout=120)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert "7 samples" in ev.stdout
    shown = float(ev.stdout.split("test relative L2 on 64: ")[1].split()[0])
    assert shown == pytest.approx(metrics["test_rel_l2"], rel=1e-4)
    # each process drew its own dropout masks (the streams were one: both shares of a batch had the same masks);
    # the first keeps the stream of one process
    ck = __import__("torch").load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    streams = ck["rng_states"]["torch_by_rank"]
    assert len(streams) == 2 and not bool((streams[0] == streams[1]).all())
    assert bool((streams[0] == ck["rng_states"]["torch"]).all())
    code = f"import opformer; m = opformer.load({str(out)!r}); print(type(m).__name__)"
    loaded = subprocess.run([PYTHON, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "Predictor", loaded.stderr[-2000:]


@pytest.mark.slow
def test_ctrl_c_while_the_second_process_starts_ends_the_run_in_one_line(tiny_config, tmp_path):
    """Ctrl-C reaches every process of the terminal's group; the second process, still starting, used to end on it
    by itself ("opformer: interrupted"), and Lightning then killed the first with SIGKILL before it said anything
    or cleaned up its start.  Now the first alone stops, says so once, and ends the second."""
    out = tmp_path / "run"
    proc = _long_two_process_run(tiny_config, out, start_new_session=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    children = []
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not children:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
            time.sleep(0.05)
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        _kill_left(proc, children)
    assert proc.returncode == 130, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if "interrupted" in line]
    assert len(lines) == 1 and lines[0].startswith("interrupted"), stderr[-3000:]
    assert "Traceback" not in stderr
    assert children and _all_ended(children)
    assert not (out / "config.yaml").exists() or (out / "checkpoints" / "last.ckpt").exists()


def test_the_first_process_of_an_srun_job_is_told_by_its_task_number(monkeypatch):
    """Under ``srun`` Lightning takes the ranks from SLURM (no ``RANK``): every task had taken itself for the first
    process, and all but one were refused the run directory that the first had locked."""
    from opformer.train.run import _is_rank_zero

    for name in ("RANK", "LOCAL_RANK", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_JOB_NAME"):
        monkeypatch.delenv(name, raising=False)
    assert _is_rank_zero()
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    assert not _is_rank_zero()
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert _is_rank_zero()
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("RANK", "0")  # torchrun's rank wins
    assert _is_rank_zero()
    monkeypatch.delenv("RANK")
    monkeypatch.setenv("SLURM_JOB_NAME", "interactive")  # Lightning does not take SLURM's ranks there
    assert _is_rank_zero()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert not _is_rank_zero()


def test_ddp_spawn_is_refused_in_one_line(tiny_config, tmp_path):
    """``--strategy ddp_spawn`` trained in spawned processes whose results never came back: metrics.json said 0
    epochs and no validation error, and the command ended on a traceback."""
    out = tmp_path / "run"
    res = _opformer("train", tiny_config, "--epochs", 1, "--no-progress", "--devices", 2, "--accelerator", "cpu",
                    "--strategy", "ddp_spawn", "--out", out, timeout=120)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [line for line in res.stderr.strip().splitlines()
                                                if line.startswith("opformer: error: --strategy ddp_spawn")]
    assert not out.exists()


@pytest.mark.slow
def test_two_processes_with_dropout_resume_exactly(tiny_config, tmp_path):
    """Each process's own dropout stream travels with the checkpoint: two processes stopped after a checkpoint and
    resumed end with the uninterrupted run's errors."""
    args = ["train", str(tiny_config), "--epochs", "12", "--no-progress", "--devices", "2", "--accelerator", "cpu"]
    full = _opformer(*args, "--out", tmp_path / "full")
    assert full.returncode == 0, full.stderr[-3000:]
    out = tmp_path / "stopped"
    proc = subprocess.Popen([PYTHON, "-m", "opformer", *args, "--out", str(out)], env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for_checkpoint(proc, out)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "interrupted: the last checkpoint" in stderr, stderr[-3000:]
    ck = __import__("torch").load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ck["epoch"] < 11
    resumed = _opformer(*args, "--out", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = __import__("json").loads((tmp_path / "full" / "metrics.json").read_text())
    b = __import__("json").loads((out / "metrics.json").read_text())
    for key in ("val_rel_l2", "test_rel_l2"):
        assert b[key] == pytest.approx(a[key], rel=1e-6), key


@pytest.mark.slow
@pytest.mark.parametrize("killed", ["first", "second"])
def test_a_process_killed_mid_run_leaves_one_line_from_the_other(tiny_config, tmp_path, killed):
    """SIGKILL of one of two processes (the out-of-memory killer's way) left the other ending on a gloo traceback of
    some 150 lines prefixed [rank0]:, with torch's deprecation notices before it. Now the process left says in one
    line that the connection to the other was lost, where the last checkpoint is and how to resume."""
    out = tmp_path / "run"
    proc = _long_two_process_run(tiny_config, out, start_new_session=True)
    children = []
    try:
        _wait_for_checkpoint(proc, out)
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 1
        os.kill(proc.pid if killed == "first" else int(children[0]), signal.SIGKILL)
        _, stderr = proc.communicate(timeout=120)  # the pipes close when the process left ends too
    finally:
        _kill_left(proc, children)
    assert proc.returncode == (-signal.SIGKILL if killed == "first" else 2), stderr[-3000:]
    assert "Traceback" not in stderr and "[rank" not in stderr and "deprecated" not in stderr, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith("opformer: error: stopped, the connection to another process of this run lost")
    assert f"the last checkpoint is {out}/checkpoints/last.ckpt" in lines[0] and "--resume" in lines[0]
    assert _all_ended(children)


def test_a_lost_peer_is_told_by_the_backends_message():
    from opformer.train.cli import _peer_lost

    gloo = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:18866: "
                        "Connection reset by peer. This is typically caused by a remote worker hanging")
    assert _peer_lost(gloo)
    assert _peer_lost(RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:589] Connection closed by peer"))
    assert _peer_lost(RuntimeError("NCCL communicator was aborted on rank 1."))
    assert not _peer_lost(RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x2)"))
    assert not _peer_lost(RuntimeError("Connection reset by peer"))  # not a collective's: left to show as it is
