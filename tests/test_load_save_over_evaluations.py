"""A saved model's folder that ``opformer eval`` / ``rollout`` wrote into (eval-*/rollout-* folders) can be saved
over with overwrite=True, the evaluations kept with a warning, as a training run keeps them (it was refused as
"holds files that are not a model saved by save_pretrained")."""

from __future__ import annotations

import json

import pytest

import opformer
from opformer.config import SettingError


def _evaluated(tmp_path):
    model = opformer.load("burgers-ft")
    folder = model.save_pretrained(tmp_path / "m")
    (folder / "eval-d.h5-512").mkdir()
    (folder / "eval-d.h5-512" / "metrics.json").write_text(json.dumps({"test_rel_l2": 0.1}))
    (folder / "rollout-t.h5").mkdir()
    (folder / "rollout-t.h5" / "rollout.json").write_text("{}")
    return model, folder


def test_saving_over_an_evaluated_model_keeps_the_evaluations(tmp_path):
    model, folder = _evaluated(tmp_path)
    with pytest.warns(UserWarning, match=r"keeps eval-d.h5-512, rollout-t.h5: the evaluations of the model it "
                                         r"replaced"):
        model.save_pretrained(folder, overwrite=True)
    assert (folder / "eval-d.h5-512" / "metrics.json").is_file() and (folder / "rollout-t.h5").is_dir()
    assert opformer.load(folder).predict is not None


def test_without_overwrite_it_is_still_refused_as_a_saved_model(tmp_path):
    model, folder = _evaluated(tmp_path)
    with pytest.raises(SettingError, match="already holds a saved model; pass overwrite=True"):
        model.save_pretrained(folder)


def test_other_folders_are_still_the_users_files(tmp_path):
    model, folder = _evaluated(tmp_path)
    (folder / "eval-notes").mkdir()  # no metrics.json: not an evaluation opformer wrote
    with pytest.raises(SettingError, match=r"holds files that are not a model saved by save_pretrained \(eval-notes\)"):
        model.save_pretrained(folder, overwrite=True)
