"""The command stops quietly when the reader of its output goes away (`opformer ... | head`)."""

from __future__ import annotations

import os
import subprocess
import sys

#: `opformer train --list` in a fresh interpreter: output that starts with the first write
LIST_PRESETS = [sys.executable, "-c", "import sys; from opformer.cli import main; sys.exit(main(['train', '--list']))"]


def test_closed_pipe_gives_no_traceback() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes a line: every write fails with EPIPE
    try:
        proc = subprocess.run(
            LIST_PRESETS,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "BrokenPipeError" not in proc.stderr, proc.stderr
    assert proc.returncode == 141


def test_open_pipe_still_succeeds() -> None:
    proc = subprocess.run(
        LIST_PRESETS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "burgers-ft" in proc.stdout



def test_a_training_whose_output_closes_says_on_stderr_that_it_stopped(tmp_path, monkeypatch, capsys) -> None:
    """A closed pipe while training (its epoch lines' reader gone): status 141 and the interrupted run's line on
    stderr (it ended with "opformer: error: Broken pipe", status 2, the closed pipe taken for a failed write)."""
    import numpy as np

    import opformer.train.run as run_module
    from opformer.cli import main

    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(run_module, "train", closed)
    x = np.random.default_rng(0).standard_normal((20, 64)).astype(np.float32)
    np.savez(tmp_path / "m.npz", x=x, y=np.cumsum(x, axis=1))
    out = tmp_path / "run"
    assert main(["train", "burgers-gt", "--data", str(tmp_path / "m.npz"), "--keys", "x,y", "--epochs", "1",
                 "--no-progress", "--out", str(out)]) == 141
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (f"stopped (its output was closed) before the first checkpoint: nothing to "
                                            f"resume in {out}; run the command again to start over")
    assert "Broken pipe" not in err
