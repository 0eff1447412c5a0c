"""A write of a checkpoint or a model file that the system refuses half-way (a full disk, an I/O error) ends the
command with one line naming the file and the system's reason ("could not write RUN/checkpoints/last.ckpt: No space
left on device"), not torch's words ("unexpected pos ...") or a traceback; the old file stays whole and no temporary
file is left."""

import errno
import io
import os
import re

import numpy as np
import pytest
import torch

from opformer.cli import main
from opformer.tasks import artifact as artifact_module
from opformer.train import callbacks

from .conftest import one_line_error, tree
from .test_eval_predict_paths import burgers_runs  # noqa: F401 (a fixture)


class _FillsUp(io.RawIOBase):
    """A file whose device fills up (``code``) after ``room`` bytes: what ``write`` raises on a full disk."""

    def __init__(self, fh, room: int, code: int):
        self.fh, self.room, self.code = fh, room, code

    def writable(self):
        return True

    def write(self, data):
        if len(data) > self.room:
            self.fh.write(bytes(data[: self.room]))
            self.room = 0
            raise OSError(self.code, os.strerror(self.code))
        self.room -= len(data)
        return self.fh.write(data)

    def flush(self):
        self.fh.flush()

    def fileno(self):
        return self.fh.fileno()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO], ids=["full-disk", "io-error"])
def test_a_checkpoint_write_that_fails_half_way_ends_in_one_line(tiny_config, tmp_path, capsys, monkeypatch, code):
    """The real torch.save writes the epoch-1 checkpoint into a file that fails after 1000 bytes: torch raises
    "unexpected pos ..." (before: that RuntimeError's traceback, or "the disk is full" without the file)."""
    out = tmp_path / "run"
    real, saves, before = torch.save, [], {}

    def save_on_a_filling_disk(obj, fh, *args, **kwargs):
        saves.append(1)
        if len(saves) <= 2:  # epoch 0: best.ckpt and last.ckpt
            return real(obj, fh, *args, **kwargs)
        before.update({k: v for k, v in tree(out / "checkpoints").items() if not k.endswith(".tmp")})
        return real(obj, _FillsUp(fh, 1000, code), *args, **kwargs)

    monkeypatch.setattr(callbacks.torch, "save", save_on_a_filling_disk)
    assert main(["train", str(tiny_config), "--epochs", "2", "--out", str(out), "--no-progress"]) == 2
    line = one_line_error(capsys.readouterr().err)
    ckdir = re.escape(str(out / "checkpoints"))
    if code == errno.ENOSPC:
        assert re.fullmatch(rf"opformer: error: could not write {ckdir}/(best|last)\.ckpt: No space left on device; "
                            rf"free some space and continue from {ckdir}/last\.ckpt with the same command and "
                            r"--resume", line), line
    else:
        assert re.fullmatch(rf"opformer: error: could not write {ckdir}/(best|last)\.ckpt: Input/output error",
                            line), line
    assert len(saves) == 3 and tree(out / "checkpoints") == before  # the epoch-0 files, whole
    assert not list(out.rglob("*.tmp"))
    assert torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO], ids=["full-disk", "io-error"])
def test_a_model_file_write_that_fails_half_way_ends_in_one_line(burgers_runs, tmp_path, capsys, monkeypatch, code):
    """predict --save-pretrained over a saved model: model.safetensors fails half-way (before: the full disk without
    the file's name, an I/O error as a traceback); the old model stays, file for file."""
    saved, pairs = tmp_path / "model", tmp_path / "pairs.npz"
    np.savez(pairs, x=np.zeros((2, 64)), y=np.zeros((2, 64)))
    args = ["predict", str(burgers_runs[0]), "--data", str(pairs), "--keys", "x,y", "--out", str(tmp_path / "p.npz"),
            "--save-pretrained", str(saved), "--overwrite"]
    assert main(args) == 0, capsys.readouterr().err
    capsys.readouterr()
    before = tree(saved)
    real = artifact_module.replacing

    def filling(path, mode, newline=None):
        cm = real(path, mode, newline)
        if path.name != "model.safetensors":
            return cm

        class _Ctx:
            def __enter__(self):
                return _FillsUp(cm.__enter__(), 1000, code)

            def __exit__(self, *exc):
                return cm.__exit__(*exc)

        return _Ctx()

    monkeypatch.setattr(artifact_module, "replacing", filling)
    assert main(args) == 2
    line = one_line_error(capsys.readouterr().err)
    reason = os.strerror(code)
    assert line.startswith(f"opformer: error: could not write {saved / 'model.safetensors'}: {reason}"), line
    assert ("free some space" in line) == (code == errno.ENOSPC)
    assert tree(saved) == before and sorted(p.name for p in saved.iterdir()) == ["config.json", "model.safetensors"]


def test_replacing_reports_a_refused_write_under_the_file_s_own_name(tmp_path):
    """The system's error, raised as it is or wrapped by the writer (torch's RuntimeError), becomes an OSError of the
    file (its errno kept); other errors pass unchanged; the temporary file goes and the old file stays."""
    from opformer.atomic import failed_write, replacing

    target = tmp_path / "last.ckpt"
    target.write_bytes(b"old")

    def wrapped():
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598") from None

    for fail in (lambda: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")), wrapped):
        with pytest.raises(OSError) as caught:
            with replacing(target, "wb") as fh:
                fh.write(b"half")
                fail()
        assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
        assert failed_write(caught.value) == f"could not write {target}: No space left on device"
    for other in (ValueError("not a write"), OSError(errno.ENOENT, "No such file or directory", "/elsewhere")):
        with pytest.raises(type(other)) as caught:
            with replacing(target, "wb"):
                raise other
        assert caught.value is other and failed_write(other) is None
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
