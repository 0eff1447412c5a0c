"""The thread count follows the CPUs a process may use (affinity set, cgroup quota), not the machine's CPU count."""

import os

import pytest

from opformer import threads as T


def _cgroup(tmp_path, v2=None, v1=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2)
    if v1 is not None:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(str(v1[0]))
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(str(v1[1]))
    return str(tmp_path)


def test_cgroup_quota_v2_and_v1(tmp_path):
    assert T.cgroup_cpu_quota(_cgroup(tmp_path / "a", v2="150000 100000")) == 1.5
    assert T.cgroup_cpu_quota(_cgroup(tmp_path / "b", v2="max 100000")) is None
    assert T.cgroup_cpu_quota(_cgroup(tmp_path / "c", v1=(300000, 100000))) == 3.0
    assert T.cgroup_cpu_quota(_cgroup(tmp_path / "d", v1=(-1, 100000))) is None
    assert T.cgroup_cpu_quota(str(tmp_path / "missing")) is None


def test_threads_are_the_smaller_of_affinity_and_quota(tmp_path):
    folder = "a"
    aff = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    root = _cgroup(tmp_path / folder, v2="100000 100000")  # a quota of one CPU
    n, note = T.choose_threads(root=root)
    assert n == 1 and "quota 1 CPUs" in note
    n, note = T.choose_threads(root=str(tmp_path / "none"))
    assert n == aff and f"affinity {aff}" in note


def test_requested_threads_win_and_excess_is_noted(tmp_path):
    root = _cgroup(tmp_path, v2="100000 100000")
    assert T.choose_threads(1, root=root) == (1, "1 threads (requested; " + T.available_cpus(root)[1] + ")")
    n, note = T.choose_threads(3, root=root)
    assert n == 3 and "more threads than the 1 CPUs available" in note
    with pytest.raises(ValueError, match="threads must be >= 1"):
        T.choose_threads(0)


def test_oversubscription_warning_compares_load_with_available_cpus(tmp_path, monkeypatch):
    root = _cgroup(tmp_path, v2="200000 100000")
    monkeypatch.setattr(T.os, "getloadavg", lambda: (5.0, 1.0, 1.0))
    monkeypatch.setattr(T, "_affinity_count", lambda: 8)
    warn = T.oversubscription_warning(2, root=root)
    assert warn and "load 5.00 > 2 CPUs" in warn
    monkeypatch.setattr(T.os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    assert T.oversubscription_warning(2, root=root) is None


def test_trainer_sets_and_prints_its_threads(capsys):
    import torch

    from opformer.cli import main
    from opformer.train.cli import _set_threads

    before = torch.get_num_threads()
    try:
        assert _set_threads(1) == 1 and torch.get_num_threads() == 1
        assert "torch threads: 1 threads (requested" in capsys.readouterr().out
    finally:
        torch.set_num_threads(before)
    assert main(["train", "burgers-quick", "--threads", "0"]) == 2
    assert "--threads must be >= 1" in capsys.readouterr().err


def _stat(*cpus):
    """A /proc/stat text with the aggregate line and one line per CPU: (user, nice, system, idle, iowait, irq,
    softirq, steal) jiffies each."""
    total = [sum(c[i] for c in cpus) for i in range(8)]
    lines = ["cpu  " + " ".join(map(str, total + [0, 0]))]
    lines += [f"cpu{i} " + " ".join(map(str, c + (0, 0))) for i, c in enumerate(cpus)]
    return "\n".join(lines + ["intr 123 4 5", "ctxt 99"]) + "\n"


def test_busy_cpus_from_two_snapshots_of_proc_stat():
    before = _stat((100, 0, 0, 100, 0, 0, 0, 0), (0, 0, 0, 200, 0, 0, 0, 0), (0, 0, 0, 200, 0, 0, 0, 0))
    # over 100 jiffies: cpu0 all user time, cpu1 idle 50 / iowait 50 (idle), cpu2 half system, half stolen (busy)
    after = _stat((200, 0, 0, 100, 0, 0, 0, 0), (0, 0, 0, 250, 50, 0, 0, 0), (0, 0, 50, 200, 0, 0, 0, 50))
    assert T.busy_between(before, after) == pytest.approx(2.0)
    assert T.busy_between(before, after, cpus={1}) == pytest.approx(0.0)
    assert T.busy_between(before, after, cpus={0, 1}) == pytest.approx(1.0)
    assert T.busy_between(before, before) is None  # no time passed
    assert T.busy_between("intr 1\n", "intr 2\n") is None  # nothing per CPU
    live = T.busy_cpus(interval=0.05)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert live is None or -1e-9 <= live <= cpus + 1e-9


def test_default_threads_leave_out_the_cpus_other_work_keeps_busy(tmp_path, monkeypatch):
    """Two threads on a 2-core machine with one core taken by another run made a training run 6-10x slower than one
    thread; by default the trainer now takes only the free CPUs, at least one, and says why."""
    monkeypatch.setattr(T, "_affinity_count", lambda: 4)
    root = str(tmp_path / "none")

    def choose(busy, *args, **kwargs):
        monkeypatch.setattr(T, "busy_cpus", lambda: busy)
        return T.choose_threads(*args, root=root, **kwargs)

    assert choose(1.2, avoid_busy=True)[0] == 3
    assert "1.2 of them busy with other work" in choose(1.2, avoid_busy=True)[1]
    assert choose(0.4, avoid_busy=True)[0] == 4  # under half a CPU: nothing to avoid
    assert choose(9.0, avoid_busy=True)[0] == 1  # never fewer than one
    assert choose(3.0)[0] == 4  # only when asked to (the benchmarks keep all)
    assert choose(3.0, 2, avoid_busy=True)[0] == 2  # --threads wins
    assert choose(None, avoid_busy=True)[0] == 4  # nothing measurable (not Linux): all of them


def test_trainer_default_threads_avoid_busy_cpus(monkeypatch, capsys):
    import torch

    from opformer.train.cli import _set_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(T, "_affinity_count", lambda: 2)
    monkeypatch.setattr(T, "cgroup_cpu_quota", lambda root="": None)
    monkeypatch.setattr(T, "busy_cpus", lambda: 1.0)
    before = torch.get_num_threads()
    try:
        assert _set_threads(None) == 1 and torch.get_num_threads() == 1
        out = capsys.readouterr().out
        assert "torch threads: 1 threads (affinity 2 of" in out and "1.0 of them busy with other work" in out
    finally:
        torch.set_num_threads(before)
