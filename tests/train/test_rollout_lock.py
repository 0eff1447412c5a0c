"""One rollout per output folder: while a rollout writes into a folder (it holds the folder's .lock, as eval does),
another rollout into it is refused in one line naming the folder and the holder's pid, and writes nothing there.
See docs/guarantees.md."""

import pytest

from opformer.train import rollout as rollout_module
from opformer.train.config import apply_overrides, load_preset

from .test_eval_predict_paths import _run_dir
from .test_run_dir_refusals import second_writer_is_refused


@pytest.fixture(scope="module")
def ns_run(ns_file, tmp_path_factory):
    """A run directory of an untrained 2-trajectory-test FNO of the Navier-Stokes file."""
    cfg = apply_overrides(load_preset("ns-fno"), {"data.path": str(ns_file), "n_test": 2, "n_val": 2,
                                                  "width": 4})[0]
    return _run_dir(cfg, tmp_path_factory.mktemp("ns") / "run")


@pytest.mark.parametrize("when", ["at-the-start", "while-it-rolls-out", "default-folder"])
def test_a_second_rollout_into_the_same_folder_is_refused(ns_run, ns_file, tmp_path, capsys, monkeypatch, when):
    """Given with --out, whether the first rollout started writing before or while the second rolls out, and in the
    default folder; once the first ends, the second runs and signs the lock with its pid."""
    folder = ns_run / "rollout-direct" if when == "default-folder" else tmp_path / "ro"
    args = ["rollout", str(ns_run), "--data", str(ns_file), "--samples", "1"]
    args += [] if when == "default-folder" else ["--out", str(folder)]
    hook = (rollout_module, "_trajectories") if when == "while-it-rolls-out" else None
    second_writer_is_refused(args, folder, "rollout", hook, "rollout.json", capsys, monkeypatch)
