"""Inputs that cannot give a file are refused before FILE.partial is created: a data set larger than the free
space (whose fill values would otherwise be written until the disk is full), a seed HDF5 cannot store."""

from __future__ import annotations

import shutil
from collections import namedtuple

import pytest

from opformer.cli import main
from opformer.pde import storage

Usage = namedtuple("Usage", "total used free")


def test_a_data_set_larger_than_the_free_space_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    real = shutil.disk_usage
    monkeypatch.setattr(storage.shutil, "disk_usage", lambda p: Usage(real(p).total, real(p).used, 100_000))
    created = []
    monkeypatch.setattr(storage.h5py, "File", lambda *a, **k: created.append(a) or pytest.fail("file opened"))
    out = tmp_path / "b.h5"
    # 16 samples x (a, u) x 1024 points x 8 bytes = 262 kB > 100 kB free
    code = main(["data", "burgers", "--samples", "16", "--resolution", "1024", "--workers", "1", "--no-progress",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and created == []
    assert err.strip().splitlines() == [
        f"opformer: error: {out}.partial: cannot be created, the file needs about 0.3 MB and its disk has 0.1 MB "
        "free; free space or write elsewhere, or split the data with --start/--stop"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("seed", ["18446744073709551616", "99999999999999999999"])
def test_a_seed_of_2_to_the_64_or_more_is_refused_in_one_line(tmp_path, capsys, seed):
    out = tmp_path / "b.h5"
    code = main(["data", "burgers", "--samples", "2", "--resolution", "64", "--seed", seed, "--workers", "1",
                 "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"opformer: error: --seed: seed must be a non-negative integer below 2^64, found {seed}\n"
    assert list(tmp_path.iterdir()) == []


def test_the_largest_seed_is_stored_and_read_back(tmp_path, capsys):
    out = tmp_path / "b.h5"
    seed = 2**64 - 1
    assert main(["data", "burgers", "--samples", "2", "--resolution", "64", "--seed", str(seed), "--workers", "1",
                 "--no-progress", "--out", str(out)]) == 0
    assert storage.read_header(out)["recipe"]["seed"] == seed
    assert main(["data", "burgers", "--samples", "2", "--resolution", "64", "--seed", str(seed), "--workers", "1",
                 "--no-progress", "--out", str(out)]) == 0  # the same recipe: accepted as complete
