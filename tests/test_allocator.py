"""Freed memory kept for reuse (opformer/allocator.py): a step that frees and allocates the same large buffers
again page-faults them in again under glibc's defaults, and not once the training or benchmark commands set the
allocator up; OPFORMER_MALLOC=system and glibc's own tunables leave it as it is."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="the allocator setting applies to glibc on Linux only")

# each "step" allocates and fills a 64 MiB and a 200 MiB tensor, then frees them; minor page faults per step
PROBE = """
import resource, sys
import torch
from opformer.allocator import keep_freed_memory
note = keep_freed_memory() if sys.argv[1] == "apply" else None
def step():
    a = torch.empty(16 << 20).fill_(1.0)
    b = torch.empty(50 << 20).fill_(2.0)
    return float(a[-1] + b[-1])
for _ in range(6):  # the heap settles (glibc's aligned requests need a little more than a freed block holds)
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(6):
    assert step() == 3.0
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 6
print(int(faults), "applied" if note else "not-applied")
"""


def _probe(mode: str, **env_extra) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPFORMER_MALLOC", "MALLOC_MMAP_THRESHOLD_",
                                                            "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    faults, state = out.stdout.split()
    return int(faults), state


@glibc
def test_large_buffers_are_reused_without_page_faults():
    pages = (264 << 20) // 4096  # the two buffers of a step, in 4 KiB pages
    default, state = _probe("leave")
    assert state == "not-applied" and default > pages // 2  # glibc maps them afresh every step
    reused, state = _probe("apply")
    assert state == "applied" and reused < pages // 10


@glibc
@pytest.mark.parametrize("env", [{"OPFORMER_MALLOC": "system"}, {"MALLOC_MMAP_THRESHOLD_": "65536"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}],
                         ids=["OPFORMER_MALLOC=system", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"])
def test_the_users_choice_is_left_alone(env):
    faults, state = _probe("apply", **env)
    assert state == "not-applied"


def test_the_training_and_benchmark_setup_applies_it_and_says_so(monkeypatch):
    from opformer import allocator
    from opformer.threads import apply_threads

    import torch

    monkeypatch.setattr(allocator, "_applied", "memory: a note")
    lines = []
    threads = torch.get_num_threads()
    try:
        apply_threads(1, log=lines.append)
    finally:
        torch.set_num_threads(threads)
    assert "# memory: a note" in lines
