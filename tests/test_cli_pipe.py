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
