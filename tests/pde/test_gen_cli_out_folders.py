"""`opformer data ... --out new/sub/file.h5` makes the missing folders, as output paths do, but only once the command
has been accepted: a refused command leaves nothing behind. A path below a file is refused in one line."""

from __future__ import annotations

import os

import pytest

from opformer.cli import main
from opformer.data import load_arrays


def _argv(out, *extra):
    return ["data", "burgers", "--samples", "2", "--resolution", "64", "--workers", "1", "--no-progress",
            "--out", str(out), *extra]


def test_missing_folders_of_the_output_path_are_made(tmp_path, capsys):
    out = tmp_path / "new" / "sub" / "b.h5"
    assert main(_argv(out)) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert load_arrays(out, ("a", "u"))["u"].shape == (2, 64)
    assert sorted(p.name for p in out.parent.iterdir()) == ["b.h5"]


@pytest.mark.parametrize("extra", [["--modes", "40"], ["--start", "3"], ["--workers", "0"], ["--nu", "inf"],
                                   ["--sigma", "-1"]])
def test_a_refused_command_makes_no_folder(tmp_path, capsys, extra):
    out = tmp_path / "new" / "sub" / "b.h5"
    assert main(_argv(out, *extra)) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_relative_path_is_made_below_the_working_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(_argv(os.path.join("runs", "data", "b.h5"))) == 0
    assert (tmp_path / "runs" / "data" / "b.h5").is_file()


@pytest.mark.parametrize("below", [("afile",), ("afile", "sub")])
def test_a_path_below_a_file_is_refused_in_one_line(tmp_path, capsys, below):
    (tmp_path / "afile").write_text("not a folder")
    out = tmp_path.joinpath(*below, "b.h5")
    assert main(_argv(out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"opformer: error: {out}: cannot write, ") and f"{tmp_path / 'afile'} is a file" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_folder_that_cannot_be_made_is_refused_in_one_line_and_nothing_is_left(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("this user may write to any folder")
        out = locked / "new" / "b.h5"
        assert main(_argv(out)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{locked} is not writable" in err, err
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)
