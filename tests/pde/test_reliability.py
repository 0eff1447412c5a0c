"""Worker processes: they end with the main process (SIGKILL, SIGTERM) and never hold the output file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest

from opformer.pde.storage import partial_path, read_header

LONG_RUN = ["burgers", "--samples", "640", "--resolution", "2048", "--workers", "2", "--no-progress"]


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start_long_generation(out: Path) -> tuple[subprocess.Popen, list[int]]:
    """Start the CLI with 2 workers and wait until both compute and the .partial exists; return its worker pids."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen([sys.executable, "-m", "opformer.pde.cli", *LONG_RUN, "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    workers: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        workers = [p for p in _children(proc.pid) if _alive(p)]
        if len(workers) >= 2 and partial_path(out).exists():
            time.sleep(1.0)  # let the workers start their first tasks
            return proc, _children(proc.pid)
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"the generation did not start its workers: {proc.communicate()}")


def _reap(pids: list[int]) -> None:
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _wait_dead(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killing_the_main_process_ends_its_workers_and_frees_the_file(tmp_path):
    """SIGKILL cannot be handled by the main process: the workers must notice that their parent died, and
    must not hold the output file open (HDF5 locks it for as long as any process holds it)."""
    out = tmp_path / "b.h5"
    proc, workers = _start_long_generation(out)
    try:
        assert workers
        proc.kill()
        proc.wait()
        left = _wait_dead(workers, timeout=10)
        assert not left, f"workers {left} outlived the killed main process"
        with h5py.File(partial_path(out), "r+"):  # not locked by an orphan: a rerun can resume it
            pass
    finally:
        _reap(workers)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_first_sigterm_stops_the_workers_and_keeps_the_finished_samples(tmp_path):
    out = tmp_path / "b.h5"
    proc, workers = _start_long_generation(out)
    try:
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
        elapsed = time.monotonic() - t0
        assert proc.returncode == 130, stderr
        assert "interrupted" in stderr and "run the same command to resume" in stderr
        assert not _wait_dead(workers, timeout=2)
        assert elapsed < 5, f"the generation took {elapsed:.1f} s to stop"
        header = read_header(partial_path(out))
        assert not header["complete"]
    finally:
        _reap(workers)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stop_request_whose_exception_was_lost_still_stops_the_generation(tmp_path, workers):
    """Python drops an exception raised in a weakref callback or ``__del__``; a SIGTERM that lands there must not be
    lost.  With the flag of ``request_stop`` set and no exception in flight (the dropped case), the generation stops
    at its next check, keeps the .partial, and a later call is not stopped by the old request."""
    from opformer import interrupt
    from opformer.pde import generate as gen

    recipe = gen.make_recipe("burgers", n_samples=8, resolution=64, solve_resolution=64, steps=20)
    out = tmp_path / "b.h5"
    with pytest.raises(KeyboardInterrupt):
        interrupt.request_stop()  # what the signal handler does: set the flag, raise
    with pytest.raises(KeyboardInterrupt):
        gen.generate_dataset(recipe, out, workers=workers, chunk_size=2, progress=False)
    assert partial_path(out).exists() and not out.exists()
    assert not interrupt._STOP.is_set()
    assert gen.generate_dataset(recipe, out, workers=workers, chunk_size=2, progress=False) == out


@pytest.mark.parametrize("how", ["script", "stdin"])
def test_workers_start_from_a_script_without_a_main_guard(tmp_path, how):
    """``spawn`` re-imports the caller's ``__main__`` in every worker; a plain script (no ``if __name__ ==
    "__main__":``) or code piped to ``python -`` would run the generation again inside each worker and kill it. The
    workers must start from either and the file must come out complete, with the script run once."""
    code = ("import sys\n"
            "from opformer.pde import ensure_dataset\n"
            "print('script ran', file=sys.stderr)\n"
            "ensure_dataset('burgers', 'b.h5', n_samples=8, resolution=64, solve_resolution=64, steps=20, "
            "workers=2, progress=False)\n")
    if how == "script":
        (tmp_path / "make.py").write_text(code)
        args, stdin = [sys.executable, "make.py"], None
    else:
        args, stdin = [sys.executable, "-"], code
    proc = subprocess.run(args, cwd=tmp_path, input=stdin, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("script ran") == 1
    with h5py.File(tmp_path / "b.h5", "r") as f:
        assert f["a"].shape == (8, 64)
