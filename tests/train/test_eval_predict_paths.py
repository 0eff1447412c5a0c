"""Where eval, predict, rollout and save_pretrained write: never over a training run or the user's own files, into
distinct default directories for distinct inputs, their arguments checked before anything is written; and a file
that is not a model, or inputs a model does not take, told in the user's terms."""

import json
import pathlib
import shutil

import h5py
import numpy as np
import pytest
import torch
import yaml

import opformer
from opformer.cli import main
from opformer.config import ConfigError
from opformer.train.config import apply_overrides, load_preset
from opformer.train.run import prepare_run

from .conftest import TINY_MODEL, one_line_error, tree


def _run_dir(cfg: dict, out: pathlib.Path) -> pathlib.Path:
    """A run directory as a training leaves it (config.yaml, checkpoints/best.ckpt, metrics.json, plots/) holding
    the untrained model of ``cfg``: all that eval, predict and rollout read, without the training."""
    run, _, operator, artifact, _ = prepare_run(cfg)
    artifact["run"] = run.name
    (out / "checkpoints").mkdir(parents=True)
    (out / "plots").mkdir()
    state = {f"operator.{k}": v for k, v in operator.state_dict().items()}
    torch.save({"opformer": artifact, "run_config": run.raw, "state_dict": state}, out / "checkpoints" / "best.ckpt")
    (out / "config.yaml").write_text(yaml.safe_dump(run.raw))
    (out / "metrics.json").write_text(json.dumps({"test_rel_l2": 0.5, "epochs": 3}))
    (out / "plots" / "predictions.png").write_bytes(b"the training's plot")
    return out


@pytest.fixture(scope="module")
def burgers_runs(burgers_file, tmp_path_factory):
    """Two run directories of the tiny 1D Burgers model (n = 64)."""
    root = tmp_path_factory.mktemp("runs")
    cfg = {"name": "tiny", "task": "burgers",
           "data": {"path": str(burgers_file), "resolution": 64, "train_pool": 32, "n_val": 8, "n_train": 24,
                    "n_test": 8},
           "model": TINY_MODEL, "train": {"epochs": 3, "batch_size": 4}}
    (root / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    cfg = load_preset(str(root / "tiny.yaml"))
    return _run_dir(cfg, root / "a"), _run_dir(cfg, root / "b")


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    """6 input, target pairs on 64 points with a channel axis, keys x, y."""
    path = tmp_path_factory.mktemp("pairs") / "pairs.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.standard_normal((6, 64, 1)), y=rng.standard_normal((6, 64, 1)))
    return path


@pytest.fixture(scope="module")
def ns_run(ns_file, tmp_path_factory):
    cfg = apply_overrides(load_preset("ns-fno"), {"data.path": str(ns_file), "n_test": 2, "n_val": 2,
                                                  "width": 4})[0]
    return _run_dir(cfg, tmp_path_factory.mktemp("ns") / "run")


def test_eval_never_writes_over_a_training_run(burgers_runs, pairs_file, tmp_path, capsys):
    """--out naming a training run (the evaluated one or another) or a directory with a metrics.json that no eval
    wrote is refused in one line, nothing changed; an earlier eval's output directory is replaced."""
    a, b = burgers_runs
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "metrics.json").write_text('{"mine": 1}')
    for out, what in ((a, "holds a training run"), (b, "holds a training run"),
                      (foreign, "holds a metrics.json that opformer eval did not write")):
        before = tree(out)
        assert main(["eval", str(a), "--data", str(pairs_file), "--keys", "x,y", "--out", str(out)]) == 2
        line = one_line_error(capsys.readouterr().err)
        assert f"--out {out} {what}" in line
        assert tree(out) == before
    from opformer.train.run import evaluate

    with pytest.raises(ConfigError, match="holds a training run"):  # the same from Python
        evaluate(a, data=str(pairs_file), keys=["x", "y"], out=b)
    ev = tmp_path / "ev"
    for _ in range(2):  # running eval again replaces its own output
        assert main(["eval", str(a), "--data", str(pairs_file), "--keys", "x,y", "--out", str(ev)]) == 0
    assert json.loads((ev / "metrics.json").read_text())["n_test"] == 6


@pytest.mark.parametrize("size", [0, -1])
def test_a_batch_size_below_one_is_one_line(burgers_runs, pairs_file, tmp_path, capsys, size):
    a, _ = burgers_runs
    for cmd in (["eval", str(a), "--data", str(pairs_file), "--keys", "x,y", "--out", str(tmp_path / "ev")],
                ["predict", str(a), "--data", str(pairs_file), "--keys", "x,y", "--out", str(tmp_path / "p.npz")]):
        assert main([*cmd, "--batch-size", str(size)]) == 2
        assert one_line_error(capsys.readouterr().err) == f"opformer: error: --batch-size must be >= 1, got {size}"
    assert sorted(tmp_path.iterdir()) == []


def test_predict_checks_its_outputs_before_writing_any(burgers_runs, pairs_file, tmp_path, capsys):
    """--save-pretrained naming a file, or a directory with the user's own files, and --out naming the data file
    or another .npz than a prediction are refused before anything is written; a saved model and a prediction file
    are replaced."""
    a, _ = burgers_runs
    data = tmp_path / "data.npz"
    shutil.copy(pairs_file, data)
    a_file, own = tmp_path / "a-file", tmp_path / "own"
    a_file.write_text("mine")
    own.mkdir()
    (own / "config.json").write_text('{"mine": 1}')
    pred = tmp_path / "p.npz"
    predict = ["predict", str(a), "--data", str(data), "--keys", "x,y"]
    before = tree(tmp_path)
    for args, text in ((["--out", str(pred), "--save-pretrained", str(a_file)],
                        f"--save-pretrained {a_file} is a file, not a directory"),
                       (["--out", str(pred), "--save-pretrained", str(own)],
                        f"--save-pretrained {own} holds files that are not a model saved by save_pretrained "
                        "(config.json)"),
                       (["--out", str(tmp_path / "m" / "p.npz"), "--save-pretrained", str(tmp_path / "m")],
                        "is inside --save-pretrained"),
                       (["--out", str(data)], f"--out {data} is the --data file"),
                       (["--out", str(pairs_file)], f"--out {pairs_file} exists and is not a prediction file")):
        assert main([*predict, *args]) == 2
        assert text in one_line_error(capsys.readouterr().err)
        assert tree(tmp_path) == before
    from opformer.train.run import predict as predict_in_python

    for out in (data, pairs_file):  # the same from Python
        with pytest.raises(ConfigError, match="is the --data file|is not a prediction file"):
            predict_in_python(a, data=str(data), keys=["x", "y"], out=out)
    assert tree(tmp_path) == before
    assert main([*predict, "--out", str(pred), "--save-pretrained", str(tmp_path / "m")]) == 0
    saved = tree(tmp_path / "m")
    assert main([*predict, "--out", str(pred), "--save-pretrained", str(tmp_path / "m")]) == 2  # a saved model stays
    assert "already holds a saved model; add --overwrite" in one_line_error(capsys.readouterr().err)
    assert tree(tmp_path / "m") == saved
    # with --overwrite the prediction file and the saved model are replaced
    assert main([*predict, "--out", str(pred), "--save-pretrained", str(tmp_path / "m"), "--overwrite"]) == 0
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors"]
    assert opformer.load(tmp_path / "m").artifact == opformer.load(a).artifact


def test_save_pretrained_in_python_refuses_the_users_files(burgers_runs, tmp_path):
    model = opformer.load(burgers_runs[0])
    own = tmp_path / "own"
    own.mkdir()
    (own / "config.json").write_text('{"mine": 1}')
    (tmp_path / "a-file").write_text("mine")
    with pytest.raises(ConfigError, match=r"own holds files that are not a model saved by save_pretrained "
                                          r"\(config\.json\); give a new or empty directory"):
        model.save_pretrained(own)
    with pytest.raises(ConfigError, match="a-file is a file, not a directory"):
        model.save_pretrained(tmp_path / "a-file")
    assert (own / "config.json").read_text() == '{"mine": 1}' and sorted(own.iterdir()) == [own / "config.json"]
    model.save_pretrained(tmp_path / "m")
    model.save_pretrained(tmp_path / "m", overwrite=True)  # its own earlier save is replaced
    assert opformer.load(tmp_path / "m").artifact == model.artifact


def test_rollout_directories_differ_by_data_file_and_resample(ns_run, ns_file, tmp_path, capsys):
    """The run's own file: RUN/rollout-MODE; another (the same stem, or a copy under another name):
    RUN/rollout-FILE-MODE; a resample other than auto is named too."""
    other = tmp_path / "ns32.h5"
    same_stem = tmp_path / "ns.npz"
    shutil.copy(ns_file, other)
    with h5py.File(ns_file, "r") as h5:
        np.savez(same_stem, w=np.asarray(h5["w"]), t=np.asarray(h5["t"]))
    for data, extra, name in ((ns_file, [], "rollout-direct"), (other, [], "rollout-ns32.h5-direct"),
                              (same_stem, [], "rollout-ns.npz-direct"),
                              (ns_file, ["--resample", "never"], "rollout-direct-resample-never")):
        assert main(["rollout", str(ns_run), "--data", str(data), "--samples", "1", *extra]) == 0, name
        capsys.readouterr()
        assert json.loads((ns_run / name / "rollout.json").read_text())["data"] == str(data)


@pytest.mark.parametrize("samples", [0, -2])
def test_rollout_refuses_samples_below_one(ns_run, ns_file, tmp_path, capsys, samples):
    from opformer.train.rollout import rollout_file

    out = tmp_path / "r"
    assert main(["rollout", str(ns_run), "--data", str(ns_file), "--samples", str(samples), "--out", str(out)]) == 2
    assert one_line_error(capsys.readouterr().err) == f"opformer: error: --samples must be >= 1, got {samples}"
    with pytest.raises(ConfigError, match=f"^samples must be >= 1, got {samples}$"):
        rollout_file(ns_run, data=ns_file, samples=samples, out=out)
    assert not out.exists()


def test_rollout_never_writes_over_a_training_run_or_the_users_predictions(ns_run, ns_file, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "predictions.npz").write_bytes(b"the user's own")
    for out, what in ((ns_run, "holds config.yaml, checkpoints"), (mine, "a predictions.npz that no rollout wrote")):
        assert main(["rollout", str(ns_run), "--data", str(ns_file), "--out", str(out)]) == 2
        assert what in one_line_error(capsys.readouterr().err)
    assert (mine / "predictions.npz").read_bytes() == b"the user's own"


def test_a_file_that_is_not_a_model_is_told_in_plain_words(burgers_runs, pairs_file, tmp_path, capsys):
    """A text file, a data file or an empty file given as the model: not a model, and what is expected; never torch's
    own message or a claim that it holds pickled objects."""
    text = tmp_path / "empty.ckpt"
    text.write_text("{}")
    empty = tmp_path / "nothing.ckpt"
    empty.write_bytes(b"")
    for model, what in ((text, "a file that torch.save did not write"),
                        (pairs_file, "a zip archive that torch.save did not write, such as a .npz data file"),
                        (empty, "an empty file")):
        for cmd in (["eval", str(model)], ["predict", str(model), "--data", str(pairs_file),
                                           "--out", str(tmp_path / "p.npz")]):
            assert main(cmd) == 2
            assert one_line_error(capsys.readouterr().err) == (
                f"opformer: error: {model} is not a model ({what}): expected a .ckpt checkpoint, a training's run "
                "directory or a save_pretrained directory")
    assert not (tmp_path / "p.npz").exists()
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes((burgers_runs[0] / "checkpoints" / "best.ckpt").read_bytes()[:3000])
    assert main(["eval", str(cut)]) == 2
    assert one_line_error(capsys.readouterr().err) == (f"opformer: error: {cut}: not a readable checkpoint (cut "
                                                        "off or damaged)")


def test_inputs_of_another_shape_name_the_model_and_the_shape_it_takes(burgers_runs):
    model = opformer.load(burgers_runs[0])
    for x in (np.zeros((2, 8, 8)), np.zeros((2, 64, 3))):
        with pytest.raises(ConfigError) as caught:
            model.predict(x)
        assert str(caught.value) == (f"the tiny (transformer1d) model takes inputs of shape (samples, n) or "
                                     f"(samples, n, 1), got {x.shape}")


def test_eval_directories_differ_by_data_file_and_resample(burgers_runs, pairs_file, tmp_path, capsys):
    """RUN/eval-GRID on the run's test split, RUN/eval-FILE-GRID on a file (its name with the extension: d.npz and
    d.h5 differ), -resample-RESAMPLE unless auto."""
    a, _ = burgers_runs
    with np.load(pairs_file) as f:
        x, y = f["x"], f["y"]
    np.savez(tmp_path / "d.npz", x=x, y=y)
    with h5py.File(tmp_path / "d.h5", "w") as h5:
        h5["x"], h5["y"] = x, y
    for args, name in (([], "eval-64"), (["--resolution", "32"], "eval-32"),
                       (["--resolution", "32", "--resample", "never"], "eval-32-resample-never"),
                       (["--data", str(tmp_path / "d.npz"), "--keys", "x,y"], "eval-d.npz-64"),
                       (["--data", str(tmp_path / "d.h5"), "--keys", "x,y"], "eval-d.h5-64")):
        assert main(["eval", str(a), *args]) == 0, name
        capsys.readouterr()
        assert json.loads((a / name / "metrics.json").read_text())["checkpoint"] == str(a)
        shutil.rmtree(a / name)  # each name is written by its own command, not found from an earlier one


def test_eval_of_another_file_of_the_same_name_or_other_keys_is_kept(burgers_runs, pairs_file, tmp_path, capsys):
    """Two files d.npz in two folders, and the same file with its keys swapped, go to eval-d.npz-64, -2 and -3; the
    same command again replaces its own earlier output (no -4); each keeps the errors of its own data."""
    _, b = burgers_runs
    with np.load(pairs_file) as f:
        x, y = f["x"], f["y"]
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    np.savez(tmp_path / "one" / "d.npz", x=x, y=y)
    np.savez(tmp_path / "two" / "d.npz", x=x, y=2 * y)
    one, two = tmp_path / "one" / "d.npz", tmp_path / "two" / "d.npz"
    runs = [(one, "x,y", "eval-d.npz-64"), (two, "x,y", "eval-d.npz-64-2"), (one, "y,x", "eval-d.npz-64-3"),
            (two, "x,y", "eval-d.npz-64-2")]
    errors = {}
    for data, keys, name in runs:
        assert main(["eval", str(b), "--data", str(data), "--keys", keys]) == 0, name
        assert name in capsys.readouterr().out
        m = json.loads((b / name / "metrics.json").read_text())
        assert (m["data_path"], m["keys"]) == (str(data.resolve()), keys.split(","))
        errors.setdefault(name, m["test_rel_l2"])
        assert m["test_rel_l2"] == errors[name]
    assert len(set(errors.values())) == 3
    assert sorted(p.name for p in b.glob("eval-d.npz-*")) == ["eval-d.npz-64", "eval-d.npz-64-2", "eval-d.npz-64-3"]


def test_rollout_of_another_file_of_the_same_name_is_kept(ns_run, ns_file, tmp_path, capsys):
    """The rollouts of two trajectory files named mine.h5 in two folders: rollout-mine.h5-direct and -2."""
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        shutil.copy(ns_file, tmp_path / folder / "mine.h5")
    for folder, name in (("one", "rollout-mine.h5-direct"), ("two", "rollout-mine.h5-direct-2"),
                         ("one", "rollout-mine.h5-direct")):
        data = tmp_path / folder / "mine.h5"
        assert main(["rollout", str(ns_run), "--data", str(data), "--samples", "1"]) == 0, name
        capsys.readouterr()
        assert json.loads((ns_run / name / "rollout.json").read_text())["data_path"] == str(data.resolve())
    assert not (ns_run / "rollout-mine.h5-direct-3").exists()


def test_predict_writes_the_layout_of_the_files_target_as_the_python_api(burgers_runs, pairs_file, tmp_path):
    """Targets (N, n, 1): predictions (N, n, 1), the same as model.predict on inputs (N, n, 1); targets (N, n):
    predictions (N, n); no targets: the layout of the inputs."""
    a, _ = burgers_runs
    model = opformer.load(a)
    with np.load(pairs_file) as f:
        x, y = f["x"], f["y"]
    np.savez(tmp_path / "flat.npz", x=x, y=y[..., 0])
    for data, keys, shape in ((pairs_file, "x,y", (6, 64, 1)), (tmp_path / "flat.npz", "x,y", (6, 64)),
                              (pairs_file, "x", (6, 64, 1))):
        out = tmp_path / "p.npz"
        assert main(["predict", str(a), "--data", str(data), "--keys", keys, "--out", str(out)]) == 0
        with np.load(out) as p:
            assert p["prediction"].shape == shape
            np.testing.assert_allclose(p["prediction"].reshape(6, 64, 1), model.predict(x), rtol=1e-5, atol=1e-6)


def test_rollout_refuses_complex_initial_states(ns_run):
    """Like predict's inputs, a rollout's u0 must hold real numbers (the imaginary part would be dropped)."""
    from opformer.config import SettingError

    model = opformer.load(ns_run)
    grid = tuple(model.artifact["input_grid"])
    with pytest.raises(SettingError, match="u0 must hold real numbers, got an array of complex128"):
        model.rollout(np.zeros((1, *grid), complex), [1.0])


def test_predict_with_targets_on_a_non_square_grid_as_without(tmp_path, capsys, one_thread):
    """A 2D task's data loader takes square grids only, but the model predicts on others (interpolated to its
    training grid and back): with targets, the predictions are those of Python's predict and the errors their
    relative L2 to the targets, checked against targets of exactly known error."""
    model = opformer.load("darcy33-gt")
    rng = np.random.default_rng(0)
    a = np.where(rng.random((3, 33, 41)) > 0.5, 12.0, 3.0)
    pred = model.predict(a)
    data, out = tmp_path / "rect.npz", tmp_path / "p.npz"
    np.savez(data, coeff=a, sol=pred * 1.25)  # ||p - 1.25 p|| / ||1.25 p|| = 0.2 exactly
    assert main(["predict", "darcy33-gt", "--data", str(data), "--keys", "coeff,sol", "--out", str(out)]) == 0
    with np.load(out) as p:
        np.testing.assert_allclose(p["prediction"], pred, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(p["rel_l2"], 0.2, rtol=1e-5)
        assert p["rel_l2"].dtype == np.float64  # as on square grids
    err = capsys.readouterr().err
    # a square-only model: the note does not point to --resample never, which cannot run it on 33x41
    assert "interpolated" in err and "never" not in err
    # on a square grid (not its training grid) that it can run on, it does
    with pytest.warns(UserWarning, match=r"interpolated to it and its predictions back \(resample 'never' runs it"):
        model.predict(a[:, :29, :29])
    # --resolution still needs what the task's loader takes
    assert main(["predict", "darcy33-gt", "--data", str(data), "--keys", "coeff,sol", "--out", str(out),
                 "--resolution", "2"]) == 2
    assert "needs square grids, found (33, 41)" in capsys.readouterr().err
    # --resample never: the model's own reason, not the data loader's
    assert main(["predict", "darcy33-gt", "--data", str(data), "--keys", "coeff,sol", "--out", str(out),
                 "--resample", "never"]) == 2
    assert "this model cannot predict on the 33x41 grid of these inputs" in capsys.readouterr().err
    # eval, whose plots and metrics need the task's dataset, points to predict
    assert main(["eval", "darcy33-gt", "--data", str(data), "--keys", "coeff,sol", "--out", str(tmp_path / "e")]) == 2
    assert capsys.readouterr().err.endswith(f"needs square grids, found (33, 41); `opformer predict darcy33-gt --data "
                                            f"{data} --out PRED.npz` predicts on this grid and scores every sample "
                                            "against the file's targets\n")


@pytest.mark.parametrize("command", ["predict", "eval"])
def test_keys_naming_no_array_are_refused_not_read_as_the_defaults(command, pairs_file, tmp_path, capsys):
    out = ["--out", str(tmp_path / ("p.npz" if command == "predict" else "e"))]
    assert main([command, "burgers-ft", "--data", str(pairs_file), "--keys", ",", *out]) == 2
    assert capsys.readouterr().err == "opformer: error: --keys needs INPUT or INPUT,TARGET array names, got ','\n"
    # a name left out between commas is refused too, not read as a shorter list
    assert main([command, "burgers-ft", "--data", str(pairs_file), "--keys", "a,,u", *out]) == 2
    assert capsys.readouterr().err == "opformer: error: --keys needs INPUT or INPUT,TARGET array names, got 'a,,u'\n"
    assert not (tmp_path / "p.npz").exists() and not (tmp_path / "e").exists()


def test_train_keys_with_a_name_left_out_are_refused(tmp_path, capsys):
    assert main(["train", "burgers-quick", "--keys", "a,,u", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == "opformer: error: --keys: expected a comma-separated list or null, got 'a,,u'\n"
    assert not (tmp_path / "r").exists()


def test_ragged_nested_lists_are_refused_naming_the_argument():
    """Nested lists whose samples differ in length are no array: one line naming the argument, not numpy's
    'inhomogeneous shape'."""
    from opformer.config import SettingError

    model = opformer.load("burgers-ft")
    with pytest.raises(SettingError, match="^inputs must be a rectangular array: its nested lists differ in length"):
        model.predict([[1.0] * 8, [1.0] * 7])
    with pytest.raises(SettingError, match="^coords must be a rectangular array"):
        model.predict([[1.0] * 8], coords=[[0.0], [0.5, 1.0]])
    # one sample without its samples axis: the shape a 2D model takes, which need not be square
    with pytest.raises(ConfigError, match=r"inputs of task darcy must have shape \(samples, n1, n2\[, channels\]\), "
                                          r"got \(19,\)"):
        opformer.load("darcy33-gt").predict(np.ones(19))


def test_arrays_stored_samples_last_are_pointed_out(tmp_path, capsys, one_thread):
    """(17, 17, 40) arrays read as 17 samples on a 17x40 grid: training a 2D task refuses them with a hint to move
    the samples axis first, predict warns with the same hint (and predicts as the file reads)."""
    rng = np.random.default_rng(0)
    data = tmp_path / "last.npz"
    np.savez(data, coeff=rng.random((17, 17, 40), dtype=np.float32), sol=rng.random((17, 17, 40), dtype=np.float32))
    hint = ("if it holds 40 samples of 17x17 grids stored samples last, move that axis first "
            "(numpy.moveaxis(a, -1, 0))")
    assert main(["train", "darcy-gt-cpu", "--data", str(data), "--keys", "coeff,sol", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.strip().endswith(f"needs square grids, found (17, 40); {hint}")
    for keys in ("coeff,sol", "coeff"):
        assert main(["predict", "darcy33-gt", "--data", str(data), "--keys", keys, "--out", str(tmp_path / "p.npz")]) == 0
        assert f"coeff (17, 17, 40) reads as 17 samples on 17x40 grids; {hint}" in capsys.readouterr().err
    np.savez(data, coeff=rng.random((40, 17, 17), dtype=np.float32))  # samples first: no such warning
    assert main(["predict", "darcy33-gt", "--data", str(data), "--keys", "coeff", "--out", str(tmp_path / "q.npz")]) == 0
    assert "samples last" not in capsys.readouterr().err
