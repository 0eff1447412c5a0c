"""A YAML config file given in place of the preset: every problem with the file is one line naming the file and its
key (no traceback, nothing read or written), and a section that sets a few fields keeps the rest of its base's."""

from __future__ import annotations

import pytest
import yaml

from opformer.cli import main
from opformer.config import ConfigError as BaseConfigError
from opformer.train.config import load_preset, resolve

from .conftest import one_line_error


def _write(path, text: str):
    path.write_text(text)
    return str(path)


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    return one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize("text, expected", [
    # a section that is not a mapping (before: AttributeError: 'list' object has no attribute 'items')
    ("base: burgers-gt\ntrain: [1, 2]\n", "c.yaml: train: expected a mapping of field: value, got a list [1, 2]"),
    ("base: burgers-gt\ndata: 3\n", "c.yaml: data: expected a mapping of field: value, got the value 3"),
    # a base that is not a name (before: TypeError: unhashable type: 'list')
    ("base: [burgers-gt]\n", "c.yaml: base: expected a name, got a list ['burgers-gt']"),
    # a misspelt base is named as the file's base
    ("base: burgers-gtt\n", "c.yaml: base: unknown preset or task 'burgers-gtt'. Did you mean burgers-gt"),
    # an empty file (before: "the config names no task", naming no file)
    ("", "c.yaml: an empty config; name the preset it builds on"),
    ("# all commented out\n", "c.yaml: an empty config"),
])
def test_a_malformed_config_file_is_one_line_naming_it(tmp_path, capsys, monkeypatch, text, expected):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path / "c.yaml", text)
    line = _error(capsys, ["train", path, "--print-config"])
    assert line.startswith(f"opformer: error: {expected}".replace("c.yaml", path)), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_a_value_in_the_file_is_named_by_its_key_there_and_a_flag_by_the_flag(tmp_path, capsys):
    """(before: "--epochs: expected an integer, got 'two'" for a value the user wrote in the file, not as a flag)"""
    path = _write(tmp_path / "c.yaml", "base: burgers-gt\ntrain: {epochs: two}\ndata: {n_train: -3}\n")
    line = _error(capsys, ["train", path, "--print-config", "--n-train", "5"])
    assert line == f"opformer: error: {path}: train.epochs: expected an integer, got 'two'"
    line = _error(capsys, ["train", path, "--print-config", "--epochs", "3"])
    assert line == f"opformer: error: {path}: data.n_train: must be >= 1, got -3"
    line = _error(capsys, ["train", path, "--print-config", "--epochs", "x"])
    assert line == "opformer: error: --epochs: expected an integer, got 'x'"
    # a named preset's values are flags, as before; and Python's message names the flag, as before
    assert _error(capsys, ["train", "burgers-gt", "--epochs", "0"]) == "opformer: error: --epochs: must be >= 1, got 0"
    with pytest.raises(BaseConfigError, match=r"^--n-train: must be >= 1, got -3$") as info:
        resolve(load_preset(path))
    assert info.value.key == "data.n_train" and info.value.problem == "must be >= 1, got -3"


def test_a_file_that_is_no_yaml_text_is_one_line(tmp_path, capsys):
    """(before: IsADirectoryError and UnicodeDecodeError tracebacks)"""
    (tmp_path / "dir.yaml").mkdir()
    assert _error(capsys, ["train", str(tmp_path / "dir.yaml")]).endswith("dir.yaml: a directory, not a YAML config "
                                                                          "file")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00binary")
    assert _error(capsys, ["train", str(tmp_path / "bin.yaml")]).endswith("bin.yaml: not a text file (a YAML config "
                                                                          "is UTF-8 text)")


def test_a_python_tag_is_refused_without_running_it(tmp_path, capsys):
    marker = tmp_path / "ran"
    path = _write(tmp_path / "c.yaml", f"base: burgers-gt\ntrain: !!python/object/apply:os.system ['touch {marker}']\n")
    line = _error(capsys, ["train", path, "--print-config"])
    assert line.startswith(f"opformer: error: {path}: not valid YAML") and not marker.exists()


def test_bases_that_lead_back_to_themselves_are_one_line(tmp_path, capsys):
    """(before: RecursionError after a thousand lines of traceback)"""
    own = _write(tmp_path / "own.yaml", "base: own.yaml\n")
    assert _error(capsys, ["train", own]).endswith("own.yaml: base: own.yaml -> own.yaml: the bases lead back to "
                                                   "own.yaml")
    _write(tmp_path / "b.yaml", "base: a.yaml\n")
    a = _write(tmp_path / "a.yaml", "base: b.yaml\ntrain: {epochs: 3}\n")
    assert _error(capsys, ["train", a]).endswith("b.yaml: base: a.yaml -> b.yaml -> a.yaml: the bases lead back to "
                                                 "a.yaml")


def test_a_base_file_is_found_next_to_the_file_and_its_values_are_kept(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    _write(tmp_path / "cfg" / "common.yaml", "base: burgers-gt\ntrain: {epochs: 7}\n")
    path = _write(tmp_path / "cfg" / "run.yaml", "base: common.yaml\ntrain: {lr: 0.002}\n")
    monkeypatch.chdir(tmp_path)
    run = resolve(load_preset(path))
    assert (run.train.epochs, run.train.lr, run.train.batch_size) == (7, 0.002, 8)


def test_an_empty_section_keeps_the_base_section(tmp_path):
    """``data:`` with its fields commented out (YAML's null) replaced the base preset's whole section by nothing:
    the run silently lost the preset's resolution, split sizes and training settings."""
    path = _write(tmp_path / "c.yaml", "base: burgers-gt\ndata:\n  # n_train: 10\ntrain:\nmodel:\n")
    run, base = resolve(load_preset(path)), resolve(load_preset("burgers-gt"))
    assert run.raw["data"] == base.raw["data"] and run.raw["train"] == base.raw["train"]
    assert run.raw["model"] == base.raw["model"]
    path = _write(tmp_path / "c.yaml", "base: burgers-gt\ndata: {}\nmodel: {}\n")
    assert resolve(load_preset(path)).raw["model"] == base.raw["model"]


def test_a_model_section_sets_fields_of_the_base_model(tmp_path, capsys):
    """The docs' "base: burgers-gt and the sections that differ" for the model section too (before: "a model config
    needs a 'name' key")."""
    path = _write(tmp_path / "c.yaml", "base: burgers-gt\nmodel: {d_model: 32, num_layers: 2}\n")
    model, base = resolve(load_preset(path)).model, resolve(load_preset("burgers-gt")).model
    assert model == {**base, "d_model": 32, "num_layers": 2}
    # a model of its own (a name or a preset) still replaces the base's
    path = _write(tmp_path / "own.yaml", "base: burgers-gt\nmodel: {name: fno1d, modes: 8}\n")
    assert resolve(load_preset(path)).model["name"] == "fno1d"
    # a preset that sets fields of its model over another preset's keeps working
    assert resolve(load_preset("darcy-gt-cpu")).model["coarse_size"] == 29
    # without a base there is no model to set fields of
    path = _write(tmp_path / "nobase.yaml", "task: burgers\nmodel: {d_model: 32}\n")
    assert "as there is no base model to set these fields of" in _error(capsys, ["train", path])


def test_a_config_yaml_of_a_run_and_an_upper_case_suffix_are_read(tmp_path):
    """A run's config.yaml (as ``--print-config`` writes it) is a complete config; ``.YAML`` is a YAML file too
    (before: "unknown preset or task 'C.YAML'")."""
    cfg = resolve(load_preset("burgers-gt")).raw
    path = _write(tmp_path / "C.YAML", yaml.safe_dump(cfg, sort_keys=False))
    assert resolve(load_preset(path)).raw == {**cfg, "name": cfg["name"]}
