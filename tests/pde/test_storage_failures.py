"""Storage failures: a full disk keeps the finished samples; checksums turn damaged bytes into a clear error."""

from __future__ import annotations

import errno
import importlib
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from opformer.pde import DataError, generate_dataset, make_recipe
from opformer.pde.storage import partial_path, read_header

storage_module = importlib.import_module("opformer.pde.storage")

TINY = dict(n_samples=12, resolution=64, solve_resolution=None, steps=20, grf={"modes": 10})


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_keeps_the_finished_samples_and_says_so(tmp_path, monkeypatch):
    recipe = make_recipe("burgers", **TINY)
    reference = generate_dataset(recipe, tmp_path / "ref.h5", workers=1, progress=False)
    out = tmp_path / "b.h5"
    real_write = storage_module.ShardWriter.write
    calls = []

    def write_then_fill_the_disk(self, indices, arrays):
        calls.append(1)
        if len(calls) == 3:
            _enospc()
        return real_write(self, indices, arrays)

    monkeypatch.setattr(storage_module.ShardWriter, "write", write_then_fill_the_disk)
    with pytest.raises(DataError) as info:
        generate_dataset(recipe, out, workers=1, chunk_size=3, progress=False)
    message = str(info.value)
    assert "disk is full" in message and "b.h5.partial" in message and "\n" not in message
    assert "6 of 12" in message  # what is kept
    monkeypatch.undo()
    header = read_header(partial_path(out))
    assert header["n_done"] == 6 and not header["complete"]
    generate_dataset(recipe, out, workers=1, chunk_size=3, progress=False)  # resumes
    with h5py.File(out, "r") as a, h5py.File(reference, "r") as b:
        np.testing.assert_array_equal(a["u"][...], b["u"][...])


def _run_limited(code: str, limit: int) -> subprocess.CompletedProcess:
    """Run python code with a file size limit (writes past it fail with EFBIG, as on a full disk)."""
    prelude = ("import resource, signal, sys\n"
               "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
               f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run([sys.executable, "-c", prelude + code], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses RLIMIT_FSIZE")
def test_a_file_that_cannot_fit_is_refused_before_any_sample_is_computed(tmp_path):
    out = tmp_path / "d.h5"
    proc = _run_limited(
        "from opformer.pde.cli import main\n"
        f"sys.exit(main(['darcy', '--samples', '20', '--resolution', '29', '--out', {str(out)!r}, '--workers', '1',"
        " '--no-progress']))\n", limit=100_000)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert err.startswith("opformer: error:") and "\n" not in err, err
    assert "d.h5.partial" in err and "file size limit" in err and "needs about" in err, err
    assert not partial_path(out).exists() and not out.exists()


def test_writing_samples_never_extends_the_file(tmp_path, monkeypatch):
    """The uncompressed arrays are allocated when the file is created: a disk that fills up later cannot cut a
    write in half (HDF5 would then find its metadata pointing past the end of the file)."""
    generate_module = importlib.import_module("opformer.pde.generate")
    real = generate_module.compute_samples
    out = tmp_path / "b.h5"
    sizes = []

    def record_size(recipe, idx):
        sizes.append(partial_path(out).stat().st_size)
        return real(recipe, idx)

    monkeypatch.setattr(generate_module, "compute_samples", record_size)
    generate_dataset(make_recipe("burgers", **TINY), out, workers=1, chunk_size=3, progress=False)
    assert len(sizes) == 4 and len(set(sizes)) == 1, sizes
    assert out.stat().st_size == sizes[0]


def test_a_truncated_file_is_not_reported_as_locked(tmp_path):
    """HDF5's "truncated file ... sblock ..." message contains "lock": the hint must not blame another process."""
    path = generate_dataset(make_recipe("burgers", **TINY), tmp_path / "b.h5", workers=1, progress=False)
    os.truncate(path, path.stat().st_size - 1000)
    with pytest.raises(DataError) as info:
        read_header(path)
    assert "shorter than its header" in str(info.value) and "another process" not in str(info.value)


def _flip_bytes_inside(path: Path, key: str, sample: int) -> None:
    with h5py.File(path, "r") as h5:
        ds = h5[key]
        offset = ds.id.get_chunk_info_by_coord((sample,) + (0,) * (ds.ndim - 1)).byte_offset
        size = ds.id.get_chunk_info_by_coord((sample,) + (0,) * (ds.ndim - 1)).size
    with open(path, "r+b") as f:
        f.seek(offset + size // 2)
        b = f.read(8)
        f.seek(offset + size // 2)
        f.write(bytes(x ^ 0xFF for x in b))


def test_generated_arrays_carry_checksums_and_damage_is_reported_with_file_and_key(tmp_path):
    path = generate_dataset(make_recipe("burgers", **TINY), tmp_path / "b.h5", workers=1, progress=False)
    with h5py.File(path, "r") as h5:
        assert h5["a"].fletcher32 and h5["u"].fletcher32
    _flip_bytes_inside(path, "u", 5)
    from opformer.pde.storage import read_samples

    np.testing.assert_array_equal(read_samples(path, "a", 0, 12).shape, (12, 64))  # the other key is intact
    with pytest.raises(DataError) as info:
        read_samples(path, "u", 0, 12)
    message = str(info.value)
    assert "b.h5" in message and "'u'" in message and "checksum" in message and "\n" not in message
    read_samples(path, "u", 0, 5)  # the samples before the damaged one read fine
