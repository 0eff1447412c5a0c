"""The Python API of a loaded model: numeric arguments that are not numbers are refused naming the argument, and
save_pretrained neither replaces a saved model unasked nor leaves a half-replaced one."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import torch

import opformer
from opformer.config import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def ns_model(ns_file, tmp_path_factory):
    """An untrained lead-time conditioned FNO of the ns task on 16 x 16, saved (its errors and outputs only)."""
    from opformer.tasks.artifact import Predictor
    from opformer.train.config import apply_overrides, load_preset
    from opformer.train.run import prepare_run

    cfg, explicit = apply_overrides(load_preset("ns-fno"), {"data.path": str(ns_file), "n_test": 2, "n_val": 2,
                                                            "width": 4})
    run, _, operator, artifact, _ = prepare_run(cfg, frozenset(explicit))
    path = tmp_path_factory.mktemp("ns-model") / "m"
    Predictor(operator, artifact, run.task, run.options).save_pretrained(path)
    return path


PER_SAMPLE = "a number or an array of numbers, one value or one per sample (2)"


@pytest.mark.parametrize("bad,shown", [("0.5", "'0.5'"), (["0.5", "1"], "['0.5', '1']"), (True, "True"),
                                       (b"1", "b'1'"), ([0.5, None], "[0.5, None]"),
                                       (np.array(["0.5", "1"]), "an array of strings"),
                                       (torch.tensor([True, False]), "an array of booleans"),
                                       ([[0.5], [1.0]], "an array of shape (2, 1)"), ([0.5, 1.0, 2.0], "3 values")])
def test_a_lead_time_that_is_not_numbers_of_the_right_shape_is_refused(ns_model, bad, shown):
    model = opformer.load(ns_model)
    u0 = np.random.default_rng(0).standard_normal((2, 16, 16))
    with pytest.raises(ConfigError) as caught:
        model.predict(u0, lead_time=bad)
    assert str(caught.value) == f"lead_time must be {PER_SAMPLE}, got {shown}"


def test_lead_times_given_as_numbers_in_any_container_agree(ns_model):
    model = opformer.load(ns_model)
    u0 = np.random.default_rng(0).standard_normal((2, 16, 16))
    ref = model.predict(u0, lead_time=0.5)
    for tau in (np.float32(0.5), torch.tensor(0.5), [0.5, 0.5], np.array([0.5, 0.5]), torch.tensor([0.5, 0.5])):
        np.testing.assert_array_equal(model.predict(u0, lead_time=tau), ref)
    with pytest.raises(ConfigError, match=r"^lead_time must be finite and >= 0 \(how far ahead to predict\), got "
                                          r"\[0.5, -1.0\]$"):
        model.predict(u0, lead_time=[0.5, -1])


@pytest.mark.parametrize("kwargs,message", [
    ({"times": "0.5"}, "times must be a number or a list of numbers (finite, ascending, > 0), got '0.5'"),
    ({"times": ["0.5", "1"]}, "times must be a number or a list of numbers (finite, ascending, > 0), got ['0.5', '1']"),
    ({"times": [True]}, "times must be a number or a list of numbers (finite, ascending, > 0), got [True]"),
    ({"times": [0.5], "step": "0.5"}, "step must be a finite number > 0, got '0.5'"),
    ({"times": [0.5], "step": True}, "step must be a finite number > 0, got True"),
    ({"times": [0.5], "step": [0.5]}, "step must be a finite number > 0, got an array of shape (1,)"),
    ({"times": [0.5], "batch_size": "8"}, "batch_size must be a positive integer, got '8'"),
])
def test_rollout_refuses_times_step_and_batch_size_that_are_not_numbers(ns_model, kwargs, message):
    model = opformer.load(ns_model)
    with pytest.raises(ConfigError) as caught:
        model.rollout(np.zeros((1, 16, 16)), **kwargs)
    assert str(caught.value) == message
    np.testing.assert_array_equal(model.rollout(np.zeros((1, 16, 16)), 0.5, step=np.float64(0.5)),
                                  model.rollout(np.zeros((1, 16, 16)), [0.5]))


def files_of(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def other_model(path):
    """The model at ``path`` with other weights."""
    model = opformer.load(path)
    with torch.no_grad():
        for p in model.operator.parameters():
            p.add_(1.0)
    return model


def test_a_saved_model_is_replaced_only_with_overwrite(ns_model, tmp_path):
    first, second = opformer.load(ns_model), other_model(ns_model)
    (tmp_path / "empty").mkdir()
    assert first.save_pretrained(tmp_path / "empty") == tmp_path / "empty"  # an empty directory as before
    saved = first.save_pretrained(tmp_path / "m")
    before = files_of(saved)
    with pytest.raises(ConfigError) as caught:
        second.save_pretrained(saved)
    assert str(caught.value) == (f"save_pretrained: {saved} already holds a saved model; pass overwrite=True to "
                                 "replace it, or give a new or empty directory")
    assert caught.value.cli == (f"--save-pretrained {saved} already holds a saved model; add --overwrite to "
                                 "replace it, or give a new or empty directory")
    with pytest.raises(ConfigError, match="already holds a saved model"):
        first.save_pretrained(saved)  # the same model again: asked for, like any other
    assert files_of(saved) == before
    with pytest.raises(ConfigError, match="^overwrite must be True or False, got 'yes'$"):
        second.save_pretrained(saved, overwrite="yes")
    assert second.save_pretrained(saved, overwrite=True) == saved
    assert sorted(files_of(saved)) == ["config.json", "model.safetensors"]
    loaded = opformer.load(saved).operator.state_dict()
    for k, v in second.operator.state_dict().items():
        torch.testing.assert_close(loaded[k], v, rtol=0, atol=0)


def test_a_failed_overwrite_leaves_the_old_model_whole(ns_model, tmp_path, monkeypatch):
    """The disk fills up while the second file is written: the first one, written in full, has not replaced its old
    version, so the directory still holds the old model, file for file, and no temporary file."""
    saved = opformer.load(ns_model).save_pretrained(tmp_path / "m")
    before = files_of(saved)
    real, synced = os.fsync, []

    def fsync(fd):
        if stat.S_ISREG(os.fstat(fd).st_mode):
            synced.append(fd)
            if len(synced) == 2:
                raise OSError(28, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="No space left"):
        other_model(ns_model).save_pretrained(saved, overwrite=True)
    monkeypatch.undo()
    assert len(synced) == 2 and files_of(saved) == before
    assert opformer.load(saved).artifact == opformer.load(ns_model).artifact
