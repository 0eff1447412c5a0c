"""The models bundled in the package load by name and reproduce the test error recorded in their cards."""

import json
import re

import numpy as np
import pytest
import torch

import opformer
from opformer.cli import main
from opformer.tasks.artifact import LoadError
from opformer.tasks.pretrained import check_error, list_pretrained, pretrained_card

BUNDLED = list_pretrained()


def test_the_package_ships_bundled_models():
    assert {"burgers-ft", "burgers-gt", "darcy33-ft", "darcy33-gt", "darcy33-scot"} <= set(BUNDLED)


@pytest.fixture(scope="module")
def check_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("pretrained-check")  # the two Burgers models share their test samples


@pytest.mark.parametrize("name", BUNDLED)
def test_a_bundled_model_reproduces_its_recorded_test_error(name, check_dir, one_thread):
    card = pretrained_card(name)
    for key in ("description", "task", "data", "train", "metrics", "check"):
        assert key in card, key
    recorded = card["check"]["test_rel_l2"]
    # the card's figure is the training run's own test error (the trainer's evaluation path), to 1e-4
    assert recorded == pytest.approx(card["metrics"]["test_rel_l2"], rel=1e-4)
    # regenerated data, the weights as a user loads them: equal up to rounding differences between CPUs
    assert check_error(name, workdir=check_dir) == pytest.approx(recorded, rel=2e-3)


def test_load_by_name_predicts_at_once(one_thread):
    model = opformer.load("darcy33-scot")
    x = np.full((2, 33, 33), 12.0)
    y = model.predict(x)
    assert y.shape == (2, 33, 33) and np.isfinite(y).all()
    # a constant coefficient a: the solution of -div(a grad u) = 1 is symmetric under the square's reflections
    assert np.abs(y - y[:, ::-1, :]).max() < 0.1 * np.abs(y).max()


def test_predict_takes_any_real_dtype_and_a_list_and_returns_float32(one_thread):
    import torch

    model = opformer.load("burgers-ft")
    x = np.random.default_rng(0).standard_normal((2, 128))  # float64
    ints = np.arange(256, dtype=np.int64).reshape(2, 128) % 3
    for given, same in ((x, x), (x.tolist(), x), (ints, ints)):
        y = model.predict(given)
        assert isinstance(y, np.ndarray) and y.dtype == np.float32
        np.testing.assert_allclose(y, model.predict(same.astype(np.float32)), rtol=1e-6, atol=1e-6)
    y = model.predict(torch.from_numpy(x))  # a float64 tensor: a float32 tensor back
    assert torch.is_tensor(y) and y.dtype == torch.float32
    np.testing.assert_allclose(y.numpy(), model.predict(x.astype(np.float32)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("size", [0, -1, 2.5, None, True, [2]])
def test_a_batch_size_that_is_not_a_positive_integer_is_refused(size, one_thread):
    """A batch size below 1 would return no predictions at all (range() with a negative step): refused, by name."""
    from opformer.config import SettingError

    model = opformer.load("burgers-ft")
    with pytest.raises(SettingError, match="batch_size must be a positive integer"):
        model.predict(np.zeros((2, 128)), batch_size=size)
    with pytest.raises(SettingError, match="evaluate takes a dataset of the task"):
        model.evaluate(np.zeros((2, 128)), np.zeros((2, 128)))


def test_complex_or_text_inputs_are_refused(one_thread):
    from opformer.config import SettingError

    model = opformer.load("burgers-ft")
    for x in (np.zeros((2, 128), complex), np.full((1, 128), "a")):
        with pytest.raises(SettingError, match="inputs must hold real numbers"):
            model.predict(x)


def test_inputs_with_nan_or_inf_are_refused_naming_the_samples(one_thread):
    """A NaN anywhere in a sample makes the whole prediction NaN (the attention mixes all points): refused, naming
    the samples, as a data file's NaN is refused when it is read; finite samples still predict."""
    from opformer.config import SettingError

    model = opformer.load("burgers-ft")
    x = np.zeros((9, 128))
    x[3, 5], x[7, 0] = np.nan, -np.inf
    with pytest.raises(SettingError, match=r"inputs must be finite: NaN or inf in sample\(s\) 3, 7 of 9 "):
        model.predict(x)
    with pytest.raises(SettingError, match=r"sample\(s\) 3 of 9 "):
        model.predict(torch.from_numpy(np.where(np.isneginf(x), 0.0, x)[:, :, None]).float())  # a tensor too
    assert np.isfinite(model.predict(np.delete(x, [3, 7], axis=0))).all()


@pytest.mark.parametrize("name, shape", [("darcy33-gt", (1, 1, 1)), ("darcy33-gt", (1, 2, 2)), ("burgers-ft", (1, 0)),
                                         ("burgers-ft", (1, 2))])
def test_a_grid_of_fewer_than_three_points_a_side_is_refused(name, shape, one_thread):
    """A 1x1 input was interpolated to the training grid into a meaningless field; n = 0 warned before failing."""
    import warnings

    from opformer.config import ConfigError

    model = opformer.load(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConfigError, match="needs at least 3 points along each axis"):
            model.predict(np.ones(shape))


def test_a_device_torch_cannot_use_is_a_load_error():
    from opformer.tasks.artifact import LoadError

    with pytest.raises(LoadError, match="cannot use the device 'tpu'"):
        opformer.load("burgers-ft", device="tpu")


def test_an_unknown_name_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LoadError, match="no bundled model of that name"):
        opformer.load("burgers-xx")
    assert main(["eval", "burgers-xx"]) == 2
    assert "no bundled model" in capsys.readouterr().err


def test_opformer_eval_of_a_bundled_name_regenerates_its_test_samples(tmp_path, capsys, monkeypatch, one_thread):
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "darcy33-scot"]) == 0
    out = capsys.readouterr().out
    card = pretrained_card("darcy33-scot")
    assert f"recorded {card['check']['test_rel_l2']:.4e}" in out
    assert not any(tmp_path.iterdir())  # nothing written into the working directory


def test_cards_are_plain_json_without_paths_outside_the_repo():
    for name in BUNDLED:
        text = json.dumps(pretrained_card(name))
        assert "/work/" not in text and "/home/" not in text and "/tmp/" not in text


def test_a_grid_too_coarse_for_the_model_is_a_one_line_error(tmp_path, capsys, one_thread):
    data = tmp_path / "d3.npz"  # 3 x 3 points: less than one of scOT's 4 x 4 patches
    np.savez(data, coeff=np.full((2, 3, 3), 3.0), sol=np.zeros((2, 3, 3)))
    argv = ["predict", "darcy33-scot", "--data", str(data), "--out", str(tmp_path / "p.npz")]
    assert main(argv + ["--resample", "never"]) == 2  # on the 3 x 3 grid itself
    err = capsys.readouterr().err
    assert "cannot predict on the 3x3 grid" in err and "trained on 33x33" in err and "Traceback" not in err
    # a trained model's patch size is fixed: the training advice is not repeated, the way to run it is given
    assert "choose a smaller patch_size" not in err and "resample 'always' runs it there" in err
    assert not (tmp_path / "p.npz").exists()


def test_another_grid_runs_on_the_training_grid_or_with_the_modes_it_resolves(tmp_path, capsys, one_thread):
    """darcy33-gt on 17 x 17 data: by default on its 33 x 33 training grid (its CNN layers act on grid cells), with
    --resample never on the 17 x 17 grid itself with 8 of its 12 Fourier modes; each says so in one line."""
    from opformer.pde.generate import generate_dataset, make_recipe

    data = generate_dataset(make_recipe("darcy", n_samples=2, resolution=17), tmp_path / "d17.h5", workers=1,
                            progress=False)
    preds = {}
    for mode, note in (("auto", "runs on its 33x33 training grid: the inputs on 17x17 are interpolated"),
                       ("never", "the 17x17 grid resolves 8 of the 12 Fourier modes")):
        out = tmp_path / f"p-{mode}.npz"
        assert main(["predict", "darcy33-gt", "--data", str(data), "--out", str(out), "--resample", mode]) == 0
        err = capsys.readouterr().err
        assert f"opformer: warning: " in err and note in err and "Traceback" not in err
        with np.load(out) as f:
            preds[mode] = f["prediction"]
        assert preds[mode].shape == (2, 17, 17) and np.isfinite(preds[mode]).all()
    # two different computations (u is about 1e-2 here, so the difference is taken relative to it)
    assert np.linalg.norm(preds["auto"] - preds["never"]) > 1e-2 * np.linalg.norm(preds["never"])


@pytest.mark.parametrize("command", ["eval", "predict"])
def test_the_help_names_every_bundled_model(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    # argparse wraps the help text at spaces and after hyphens
    text = re.sub(r"-\s+", "-", " ".join(capsys.readouterr().out.split()))
    for name in BUNDLED:
        assert name in text, name


def test_inputs_beyond_float32_are_refused_and_nonfinite_predictions_warned(one_thread):
    """float64 values beyond float32's range became inf in the model (after the finite check): refused; finite
    inputs whose predictions still overflow are returned with a warning naming the samples; bfloat16 tensors (which
    numpy lacks) predict like float32 ones."""
    import warnings

    from opformer.config import SettingError

    model = opformer.load("burgers-ft")
    x = np.zeros((3, 128))
    x[1, 0] = 1e39
    with pytest.raises(SettingError, match=r"inputs must lie within float32's range .*: sample\(s\) 1 of 3 do not"):
        model.predict(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = model.predict(np.full((2, 128), 3e38))
    assert not np.isfinite(y).all()
    assert [str(w.message) for w in caught if "hold NaN or inf" in str(w.message)] == [
        "the predictions of sample(s) 0, 1 of 2 hold NaN or inf (inputs far from the training data)"]
    t = torch.randn(2, 128)
    np.testing.assert_array_equal(model.predict(t.bfloat16()).numpy(), model.predict(t.bfloat16().float()).numpy())
    # float16 inputs: no range check to make (every float16 is a float32), so no numpy overflow warning from one
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        h = t.numpy().astype(np.float16)
        np.testing.assert_array_equal(model.predict(h), model.predict(h.astype(np.float32)))


def test_a_bundled_model_without_data_refuses_the_options_it_would_ignore(tmp_path, capsys):
    """Without --data a bundled model's recorded test samples are scored and nothing is written: --out, --resolution
    and the like would be ignored, so they are refused in one line (before any sample is generated)."""
    assert main(["eval", "burgers-ft", "--resolution", "2048", "--out", str(tmp_path / "e")]) == 2
    assert capsys.readouterr().err == ("opformer: error: burgers-ft without --data checks its recorded test samples at "
                                       "their recorded grid and writes nothing, so it takes no --out, --resolution: "
                                       "give --data FILE to evaluate with them\n")
    assert not (tmp_path / "e").exists()
