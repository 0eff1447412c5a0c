"""`opformer data` refuses, before computing any sample, an output it could not write or keep: a resume whose
`FILE.partial` or directory is read-only, an `--out` that is a directory. One line, the finished samples untouched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opformer.cli import main
from opformer.pde import DataError, generate, generate_dataset, make_recipe
from opformer.pde.storage import partial_path, read_header

TINY = dict(n_samples=8, resolution=64, solve_resolution=None, steps=20, grf={"modes": 5})
ARGV = ["--samples", "8", "--resolution", "64", "--solve-resolution", "0", "--modes", "5", "--steps", "20",
        "--workers", "1", "--no-progress"]


def _interrupted(out: Path) -> bytes:
    """Leave ``out.partial`` with the first 2 of 8 samples written, as Ctrl-C does; returns its bytes."""
    real, calls = generate.compute_samples, []

    def stop_after_one_chunk(recipe, indices, **options):
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return real(recipe, indices, **options)

    generate.compute_samples = stop_after_one_chunk
    try:
        with pytest.raises(KeyboardInterrupt):
            generate_dataset(make_recipe("burgers", **TINY), out, workers=1, chunk_size=2, progress=False)
    finally:
        generate.compute_samples = real
    assert read_header(partial_path(out))["n_done"] == 2
    return partial_path(out).read_bytes()


def _no_computing(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a sample was computed before the output was checked")

    monkeypatch.setattr(generate, "compute_samples", refuse)


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("opformer: error: "), err
    return lines[0]


def _refuse_writes_to(monkeypatch, refused: Path) -> None:
    """``os.access`` says ``refused`` is not writable (chmod does not stop root, who runs the tests here)."""
    real = os.access

    def access(path, mode, *args, **kwargs):
        if Path(path) == refused and mode & os.W_OK:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


@pytest.mark.parametrize("refused", ["directory", "partial"])
def test_a_resume_that_could_not_be_written_stops_before_computing(tmp_path, monkeypatch, capsys, refused):
    out = tmp_path / "out" / "b.h5"
    out.parent.mkdir()
    before = _interrupted(out)
    _refuse_writes_to(monkeypatch, out.parent if refused == "directory" else partial_path(out))
    _no_computing(monkeypatch)
    assert main(["data", "burgers", "--out", str(out), *ARGV]) == 2
    line = _one_error_line(capsys.readouterr().err)
    if refused == "directory":
        assert f"the directory {out.parent} is not writable" in line and f"chmod u+w {out.parent}" in line, line
    else:
        assert f"{partial_path(out)}: the file is read-only" in line and f"chmod u+w {partial_path(out)}" in line, line
    assert "run the same command again to resume (2 of 8 samples are written and kept)" in line, line
    assert partial_path(out).read_bytes() == before and not out.exists()


def test_the_check_passes_a_writable_resume_and_refuses_a_new_file_in_a_read_only_directory(
        tmp_path, monkeypatch):
    out = tmp_path / "b.h5"
    _interrupted(out)
    assert generate_dataset(make_recipe("burgers", **TINY), out, workers=1, progress=False) == out  # resumes
    _refuse_writes_to(monkeypatch, tmp_path)
    with pytest.raises(DataError, match=r"new\.h5: cannot write, the directory .* is not writable; make it writable"):
        generate_dataset(make_recipe("burgers", **TINY), tmp_path / "new.h5", workers=1, progress=False)
    assert not partial_path(tmp_path / "new.h5").exists()


def _unprivileged() -> list[str] | None:
    """A command prefix under which chmod stops writes: none for a user, root without CAP_DAC_OVERRIDE (setpriv);
    None when neither is possible."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    drop = "-dac_override,-dac_read_search"
    prefix = [setpriv, f"--bounding-set={drop}", f"--inh-caps={drop}"]
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0
    except OSError:
        ok = False
    return prefix if ok else None


@pytest.mark.parametrize("refused", ["directory", "partial"])
def test_a_real_read_only_resume_keeps_the_partial_file(tmp_path, refused):
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("running as root without setpriv: chmod does not stop writes")
    out = tmp_path / "out" / "b.h5"
    out.parent.mkdir()
    before = _interrupted(out)
    target = out.parent if refused == "directory" else partial_path(out)
    mode = target.stat().st_mode
    target.chmod(0o555 if refused == "directory" else 0o444)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), OMP_NUM_THREADS="1")
    try:
        proc = subprocess.run([*prefix, sys.executable, "-m", "opformer.cli", "data", "burgers", "--out", str(out),
                               *ARGV], env=env, capture_output=True, text=True, timeout=120)
    finally:
        target.chmod(mode)
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc.stderr)
    assert "chmod u+w" in line and "2 of 8 samples are written and kept" in line, line
    assert partial_path(out).read_bytes() == before and not out.exists()


def test_an_out_that_is_a_directory_is_one_line(tmp_path, monkeypatch, capsys):
    _no_computing(monkeypatch)
    out = tmp_path / "X.h5"
    out.mkdir()
    assert main(["data", "burgers", "--out", str(out), *ARGV]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == f"opformer: error: --out {out} is a directory; give a file path, such as {out / 'burgers.h5'}"
    partial_path(tmp_path / "Y.h5").mkdir()
    assert main(["data", "burgers", "--out", str(tmp_path / "Y.h5"), *ARGV]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{partial_path(tmp_path / 'Y.h5')}," in line and "is a directory; move it away or delete it" in line
    assert main(["data", "info", str(out)]) == 2
    assert _one_error_line(capsys.readouterr().err) == f"opformer: error: {out}: is a directory, not a data file"
    with pytest.raises(DataError, match="is a directory, not a data file"):
        generate_dataset(make_recipe("burgers", **TINY), out, workers=1, progress=False)
