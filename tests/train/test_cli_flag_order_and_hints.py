"""Command-line slips: a flag before the preset, a mistyped option of the command itself, a resume with the run's
--epochs left out, and eval on a file without its target array, each answered in one line that says what to type."""

from __future__ import annotations

import types

import pytest
import yaml

from opformer.cli import main
from opformer.pde.errors import DataError, MissingKeyError
from opformer.train import run as run_module
from opformer.train.config import load_preset, resolve
from opformer.train.run import RunDirError, check_out_dir

from .conftest import one_line_error


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    return one_line_error(capsys.readouterr().err)


def test_a_flag_before_the_preset_says_the_preset_comes_first(capsys):
    """(before: "unknown preset or task '3'", the flag's value read as the preset)"""
    line = _error(capsys, ["train", "--epochs", "3", "burgers-gt", "--print-config"])
    assert line == ("opformer: error: '3' is not a preset but the value of --epochs: the preset comes first, "
                    "`opformer train burgers-gt --epochs 3 ...`")
    # a preset that is only misspelt is still told as such
    line = _error(capsys, ["train", "burgers-gtt", "--epochs", "3"])
    assert line.startswith("opformer: error: unknown preset or task 'burgers-gtt'. Did you mean burgers-gt")


@pytest.mark.parametrize("typed, meant", [("--resum", "--resume"), ("--overwrit", "--overwrite"),
                                          ("--no-progres", "--no-progress"), ("--print-confg", "--print-config")])
def test_a_mistyped_option_of_the_command_gets_a_suggestion(capsys, typed, meant):
    """(before: "unknown option --resum" with no hint: only the config fields were suggested)"""
    line = _error(capsys, ["train", "burgers-gt", typed])
    assert line == f"opformer: error: unknown option {typed}; did you mean {meant}?"


def test_a_mistyped_field_is_still_suggested_as_the_field(capsys):
    assert _error(capsys, ["train", "burgers-gt", "--epoch", "3"]) == ("opformer: error: unknown option --epoch; did "
                                                                       "you mean --epochs?")


def test_a_resume_with_fewer_epochs_says_to_give_the_runs_epochs(tmp_path):
    """The run was started with --epochs 200 and resumed with the same command without it (before: "so it cannot
    be lengthened", for a run that would be shortened, with no word of the --epochs to give)."""
    out = tmp_path / "run"
    out.mkdir()
    started = resolve(load_preset("burgers-gt")).raw
    started["train"]["epochs"] = 200
    (out / "config.yaml").write_text(yaml.safe_dump(started, sort_keys=False))
    again = resolve(load_preset("burgers-gt")).raw
    with pytest.raises(RunDirError) as info:
        check_out_dir(out, again, True, False)
    assert str(info.value).endswith("Differences: train.epochs: 200 -> 100. The one-cycle learning-rate schedule spans "
                                    "the 200 epochs of that run, so it cannot be shortened; resume with --epochs 200, "
                                    "or train a new run with the epochs you want into another --out")
    again["train"]["epochs"] = 300
    with pytest.raises(RunDirError, match=r"200 -> 300\. .* so it cannot be lengthened; train a new run with the "
                                          r"epochs you want into another --out$"):
        check_out_dir(out, again, True, False)


def test_eval_knows_a_missing_target_by_the_errors_key_not_its_words(tmp_path, monkeypatch):
    """``evaluate`` tells a file of inputs alone (no target array) from another missing array by the key the
    MissingKeyError records, whatever its message says (before: by the words "key 'y' not found" in the message)."""
    predictor = types.SimpleNamespace(time_dependent=False, artifact={"keys": ["x", "y"]}, data_files=None)
    monkeypatch.setattr(run_module, "load", lambda *args, **kwargs: predictor)

    def missing(key):
        def read(*args, **kwargs):
            raise MissingKeyError(f"inputs.npz: the array {key} is not in this file", key=key, path="inputs.npz",
                                  available=["u"])
        return read

    monkeypatch.setattr(run_module, "_test_set", missing("y"))
    with pytest.raises(DataError, match=r"^inputs.npz: no target array 'y'; available keys: \['u'\]: eval scores the "
                                        r"predictions against targets \(give --keys INPUT,TARGET"):
        run_module.evaluate(tmp_path / "model.ckpt", data=str(tmp_path / "inputs.npz"))
    monkeypatch.setattr(run_module, "_test_set", missing("x"))  # the input missing: the reader's own message
    with pytest.raises(MissingKeyError, match=r"^inputs.npz: the array x is not in this file$"):
        run_module.evaluate(tmp_path / "model.ckpt", data=str(tmp_path / "inputs.npz"))


@pytest.mark.parametrize("argv, line", [
    # (before: taken as not given: the run went to the default runs/PRESET; here it stopped at the missing file)
    (["train", "burgers-gt", "--data", "missing.npz", "--out", ""], "--out is empty (''); give a path"),
    (["train", "burgers-gt", "--data", " "], "--data is empty (' '); give a data file"),
    (["train", "burgers-gt", "--model", ""], "--model is empty (''); give a model of the preset's task (e.g. fno)"),
    # (before: an eval wrote metrics.json, plots/ and .lock into the current directory)
    (["eval", "model.ckpt", "--out", ""], "--out is empty (''); give a path"),
    (["eval", ""], "MODEL is empty (''); give a checkpoint, a run directory or a model's name"),
    # (before: --save-pretrained "" was taken as not given, and nothing was saved)
    (["predict", "model.ckpt", "--data", "d.npz", "--out", "p.npz", "--save-pretrained", ""],
     "--save-pretrained is empty (''); give a directory"),
])
def test_an_empty_path_is_refused_not_read_as_the_current_directory(tmp_path, monkeypatch, capsys, argv, line):
    monkeypatch.chdir(tmp_path)
    assert _error(capsys, argv) == f"opformer: error: {line}"
    assert list(tmp_path.iterdir()) == []


def test_data_prepare_names_a_bad_value_of_a_yaml_file_by_its_key(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("base: burgers-gt\ntrain: {epochs: two}\n")
    assert _error(capsys, ["data", "prepare", str(path)]) == (f"opformer: error: {path}: train.epochs: expected an "
                                                              "integer, got 'two'")
