"""What eval, predict and opformer.load say about a user's files and paths: the file and key of an input array of
the wrong dimension, that eval needs targets (and predict does not), "1 sample" in the singular, and the run's
checkpoints folder loaded as the run is."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml

import opformer
from opformer.cli import main
from opformer.tasks.artifact import LoadError

from .conftest import TINY_MODEL, one_line_error


def test_predict_names_the_file_and_key_of_inputs_of_the_wrong_dimension(tmp_path, capsys):
    """A (37, 30) array for a 2D model said "inputs of task darcy must have shape ..., got (37, 30)", without the
    file and the key."""
    np.savez(tmp_path / "bad.npz", coef=np.zeros((37, 30), dtype=np.float32))
    assert main(["predict", "darcy33-gt", "--data", str(tmp_path / "bad.npz"), "--keys", "coef",
                 "--out", str(tmp_path / "p.npz")]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line == (f"opformer: error: {tmp_path / 'bad.npz'}: key 'coef' expected shape (samples, n1, n2) or "
                    "(samples, n1, n2, channels) for a 2D model of task darcy, found (37, 30)")
    assert not (tmp_path / "p.npz").exists()


def test_eval_of_inputs_alone_says_it_needs_targets_and_points_to_predict(tmp_path, capsys):
    """eval on a file of inputs alone said "key 'sol' not found" (default keys) or "--keys needs two different
    array names" (one key): it says that it scores against targets, and how predict takes the inputs alone."""
    data = tmp_path / "inputs_only.npz"
    np.savez(data, coeff=np.ones((3, 33, 33), dtype=np.float32))
    predict = f"`opformer predict darcy33-gt --data {data} --keys coeff --out PRED.npz` predicts from the inputs alone"
    for keys, said in ((["--keys", "coeff"], "opformer: error: --keys coeff: eval scores the predictions against "
                                            f"targets, so it needs --keys INPUT,TARGET; {predict}"),
                       ([], f"opformer: error: {data}: no target array 'sol'; available keys: ['coeff']: eval scores "
                            f"the predictions against targets (give --keys INPUT,TARGET for other names); {predict}")):
        assert main(["eval", "darcy33-gt", "--data", str(data), *keys, "--out", str(tmp_path / "ev")]) == 2
        assert one_line_error(capsys.readouterr().err) == said
    assert not (tmp_path / "ev").exists()
    # an input key that is missing is still that key's error, with the hint to name the arrays
    assert main(["eval", "darcy33-gt", "--data", str(data), "--keys", "a,coeff", "--out", str(tmp_path / "ev")]) == 2
    assert one_line_error(capsys.readouterr().err).endswith("key 'a' not found; available keys: ['coeff']; name the "
                                                            "arrays with --keys")


def test_eval_of_one_sample_says_sample(tmp_path, capsys):
    rng = np.random.default_rng(0)
    data = tmp_path / "one.npz"
    np.savez(data, coeff=rng.choice([3.0, 12.0], size=(1, 33, 33)), sol=rng.random((1, 33, 33)))
    assert main(["eval", "darcy33-gt", "--data", str(data), "--out", str(tmp_path / "ev")]) == 0
    out = capsys.readouterr().out
    assert f"(1 sample of {data})" in out and "1 samples" not in out, out


def test_load_takes_a_runs_checkpoints_folder_and_says_what_it_takes(tmp_path):
    """opformer.load("RUN/checkpoints") (the folder holding best.ckpt) was refused as a directory without
    config.json; it loads best.ckpt as load("RUN") does, and a folder holding neither says all that load takes."""
    from opformer.train.config import apply_overrides, load_preset
    from opformer.train.run import prepare_run

    x = np.random.default_rng(0).standard_normal((12, 32)).astype(np.float32)
    np.savez(tmp_path / "pairs.npz", x=x, y=np.cumsum(x, 1))
    cfg = load_preset("burgers-quick")
    cfg["model"] = dict(TINY_MODEL)
    cfg, explicit = apply_overrides(cfg, {"data.path": str(tmp_path / "pairs.npz"), "data.keys": "x,y", "n_val": 2,
                                          "n_test": 2})
    run, _, operator, artifact, _ = prepare_run(cfg, frozenset(explicit))
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    state = {f"operator.{k}": v for k, v in operator.state_dict().items()}
    torch.save({"opformer": artifact, "run_config": run.raw, "state_dict": state},
               tmp_path / "run" / "checkpoints" / "best.ckpt")
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(run.raw))
    u = x[:2]
    want = opformer.load(tmp_path / "run" / "checkpoints" / "best.ckpt").predict(u)
    for path in (tmp_path / "run", tmp_path / "run" / "checkpoints", str(tmp_path / "run" / "checkpoints")):
        np.testing.assert_array_equal(opformer.load(path).predict(u), want)
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoadError) as caught:
        opformer.load(tmp_path / "empty")
    text = str(caught.value)
    assert "\n" not in text and "config.json and model.safetensors" in text and "checkpoints/best.ckpt" in text
    assert "best.ckpt (its checkpoints folder)" in text and "checkpoint file (.ckpt)" in text
