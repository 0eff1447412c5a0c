"""How many torch threads a process should use: the CPUs it may run on, not the CPUs the machine has.

``os.cpu_count()`` counts the machine's CPUs; a process pinned to fewer (``taskset``, a batch scheduler's affinity)
or limited by a cgroup CPU quota (containers: ``docker --cpus``, Kubernetes limits) that starts one thread per
machine CPU oversubscribes its share, and every thread then waits on the others.  :func:`choose_threads` takes the
smaller of the affinity set and the quota; :func:`oversubscription_warning` compares the load average with that
number before a measurement starts.

Only the standard library is imported here (torch only inside :func:`apply_threads`), so that any part of the
package -- the trainer included -- can import this module without importing the benchmarks.
"""

from __future__ import annotations

import math
import os
from typing import Optional

__all__ = ["available_cpus", "busy_cpus", "cgroup_cpu_quota", "choose_threads", "oversubscription_warning",
           "apply_threads"]


def _affinity_count() -> Optional[int]:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return None


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> Optional[float]:
    """The CPU quota of this process's cgroup in CPUs (e.g. 1.5), or ``None`` when there is none.

    cgroup v2: ``cpu.max`` holds ``"QUOTA PERIOD"`` or ``"max PERIOD"``; cgroup v1: ``cpu/cpu.cfs_quota_us`` (-1 for
    none) over ``cpu/cpu.cfs_period_us``.
    """
    v2 = _read(os.path.join(root, "cpu.max"))
    if v2:
        parts = v2.split()
        if len(parts) == 2 and parts[0] != "max":
            try:
                quota, period = int(parts[0]), int(parts[1])
                return quota / period if quota > 0 and period > 0 else None
            except ValueError:
                return None
        return None
    q, p = _read(os.path.join(root, "cpu", "cpu.cfs_quota_us")), _read(os.path.join(root, "cpu", "cpu.cfs_period_us"))
    try:
        quota, period = int(q), int(p)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def available_cpus(root: str = "/sys/fs/cgroup") -> tuple[int, str]:
    """(number of CPUs this process may use, how it was found): min(affinity set, floor of the cgroup quota)."""
    aff = _affinity_count()
    total = os.cpu_count() or 1
    n, how = (aff, f"affinity {aff} of {total} CPUs") if aff else (total, f"{total} CPUs")
    quota = cgroup_cpu_quota(root)
    if quota is not None:
        q = max(1, math.floor(quota))
        how += f", cgroup quota {quota:g} CPUs"
        n = min(n, q)
    return n, how


def _cpu_jiffies(text: str, cpus: Optional[set[int]]) -> dict[int, tuple[int, int]]:
    """{cpu: (busy, total)} from the per-CPU lines of /proc/stat (user nice system idle iowait irq softirq steal;
    idle and iowait are idle, steal -- time the hypervisor gave to others -- counts as busy)."""
    out = {}
    for line in text.splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or not name[3:].isdigit():
            continue
        cpu = int(name[3:])
        if cpus is not None and cpu not in cpus:
            continue
        v = [int(f) for f in fields[:8]] + [0] * max(0, 8 - len(fields))
        total = sum(v)
        out[cpu] = (total - v[3] - v[4], total)
    return out


def busy_between(before: str, after: str, cpus: Optional[set[int]] = None) -> Optional[float]:
    """How many CPUs (of ``cpus``, default all) were busy between two snapshots of /proc/stat: the sum of each CPU's
    busy fraction; ``None`` when the snapshots say nothing (no per-CPU lines, no time passed)."""
    a, b = _cpu_jiffies(before, cpus), _cpu_jiffies(after, cpus)
    busy = 0.0
    seen = False
    for cpu, (busy1, total1) in b.items():
        if cpu in a and total1 > a[cpu][1]:
            busy += (busy1 - a[cpu][0]) / (total1 - a[cpu][1])
            seen = True
    return busy if seen else None


def busy_cpus(interval: float = 0.25, stat: str = "/proc/stat") -> Optional[float]:
    """How many of the CPUs this process may run on other work keeps busy, measured over ``interval`` seconds while
    this process sleeps (Linux; ``None`` elsewhere).  Unlike the load average this is the present, not the last
    minute's mean, so a job that has just ended does not count and one that has just started does."""
    import time

    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        cpus = None
    first = _read(stat)
    if first is None:
        return None
    time.sleep(interval)
    second = _read(stat)
    return None if second is None else busy_between(first, second, cpus)


def choose_threads(requested: Optional[int] = None, root: str = "/sys/fs/cgroup",
                   avoid_busy: bool = False) -> tuple[int, str]:
    """(torch threads to use, a note saying why).  ``requested`` (e.g. ``--threads``) wins when given; the note
    then says if it exceeds the CPUs available.  Otherwise: the CPUs this process may use (:func:`available_cpus`),
    and with ``avoid_busy`` fewer by the CPUs that other work keeps busy now (:func:`busy_cpus`), at least one:
    threads that must share a core with another process wait on each other at every parallel region, which on a
    2-core machine made a training run 6-10x slower than one thread."""
    n, how = available_cpus(root)
    if requested is not None:
        if requested < 1:
            raise ValueError(f"threads must be >= 1, got {requested}")
        note = f"{requested} threads (requested; {how})"
        if requested > n:
            note += f"; more threads than the {n} CPUs available: they will compete"
        return int(requested), note
    if avoid_busy and n > 1:
        busy = busy_cpus()
        if busy is not None and round(busy) >= 1:
            free = max(1, n - round(busy))
            return free, f"{free} threads ({how}, {busy:.1f} of them busy with other work; --threads N sets it)"
    return n, f"{n} threads ({how})"


BENCH_ADVICE = "absolute times are inflated; trust only ratios measured interleaved in one process"
TRAIN_ADVICE = "training will be slower than this machine can do; fewer threads (--threads 1) may run faster"


def oversubscription_warning(threads: Optional[int] = None, root: str = "/sys/fs/cgroup",
                             advice: str = BENCH_ADVICE) -> Optional[str]:
    """A warning when the 1-minute load average exceeds the CPUs available (others are running: timings are slower
    than the machine can do, only ratios measured interleaved in one process remain meaningful); else ``None``."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    n, _ = available_cpus(root)
    if load > n:
        return (
            f"warning: the machine is oversubscribed (1-min load {load:.2f} > {n} CPUs available"
            + (f", {threads} torch threads" if threads else "")
            + f"): {advice}"
        )
    return None


def apply_threads(requested: Optional[int] = None, log=print, advice: str = BENCH_ADVICE,
                  chosen: Optional[tuple[int, str]] = None) -> int:
    """Choose the number of threads (:func:`choose_threads`, or ``chosen``: its answer already in hand), set it in
    torch (``torch.set_num_threads``), keep freed memory for reuse (:func:`opformer.allocator.keep_freed_memory`),
    log the notes and any oversubscription warning; returns the number."""
    import torch

    from .allocator import keep_freed_memory

    n, note = chosen if chosen is not None else choose_threads(requested)
    torch.set_num_threads(n)
    memory = keep_freed_memory()
    if log is not None:
        log(f"# torch threads: {note}")
        if memory:
            log(f"# {memory}")
        warn = oversubscription_warning(n, advice=advice)
        if warn:
            log(f"# {warn}")
    return n
