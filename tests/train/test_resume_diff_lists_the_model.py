"""A --resume refused before the data are read (another schedule, other data settings) lists the model fields the
user set that differ from the stored run too, first: from config.yaml, or, where the run directory has none, from
the checkpoint's own stored config.  (Before: only the data and train sections, the model's difference appearing
once those were made equal and the data read.)"""

import shutil

import pytest

from opformer.cli import main
from opformer.train import run as run_module

from .conftest import one_line_error, tree
from .test_eval_predict_paths import burgers_runs  # noqa: F401 (a fixture)


@pytest.fixture()
def stopped_run(burgers_runs, tmp_path):
    """A copy of the tiny Burgers run (d_model 16, 3 epochs, n_val 8) with a last.ckpt to resume."""
    run = tmp_path / "run"
    shutil.copytree(burgers_runs[0], run)
    shutil.copy(run / "checkpoints" / "best.ckpt", run / "checkpoints" / "last.ckpt")
    (run / "metrics.json").unlink()
    return run


@pytest.mark.parametrize("stored", ["config.yaml", "last.ckpt"])
def test_the_model_fields_the_user_set_are_listed_first(burgers_runs, stopped_run, capsys, monkeypatch, stored):
    if stored == "last.ckpt":
        (stopped_run / "config.yaml").unlink()
    before = tree(stopped_run)
    monkeypatch.setattr(run_module, "prepare_run", lambda *a, **k: pytest.fail("the data were read"))
    preset = str(burgers_runs[0].parent / "tiny.yaml")
    assert main(["train", preset, "--out", str(stopped_run), "--resume", "--no-progress", "--epochs", "2",
                 "--n-val", "6", "--d-model", "32"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert (f"{stopped_run} holds a different run; --resume needs the same config (as in {stored}). Differences: "
            "model.d_model: 16 -> 32; data.n_val: 8 -> 6; train.epochs: 3 -> 2. ") in line, line
    assert tree(stopped_run) == before

