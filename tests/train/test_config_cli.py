"""Presets, overrides and the command line's error messages."""

import pytest

from opformer.cli import main
from opformer.train.config import ConfigError, apply_overrides, list_presets, load_preset, resolve


def test_presets_exist_and_resolve_to_their_model():
    names = list_presets()
    for name in ("burgers-gt", "burgers-ft", "burgers-st", "burgers-lt", "burgers-fno", "burgers-gt-regular"):
        assert name in names
    cfg = resolve(load_preset("burgers-ft-regular"))
    assert cfg["model"]["kind"] == "fourier" and cfg["model"]["norm_scheme"] == "regular"
    assert cfg["train"]["epochs"] == 100 and cfg["train"]["lr"] == 1e-3 and cfg["train"]["div_factor"] == 1e4


def test_unknown_preset_lists_known_ones():
    with pytest.raises(ConfigError, match=r"unknown preset 'burgers-gtt'\. Did you mean burgers-gt.*Known presets:"):
        load_preset("burgers-gtt")


def test_overrides_by_leaf_and_dotted_name_and_typo_suggestion():
    cfg = resolve(load_preset("burgers-gt"))
    out = apply_overrides(cfg, {"lr": 5e-4, "train.epochs": 3, "norm-scheme": "regular"})
    assert out["train"]["lr"] == 5e-4 and out["train"]["epochs"] == 3 and out["model"]["norm_scheme"] == "regular"
    with pytest.raises(ConfigError, match=r"unknown field 'epocs'; did you mean 'epochs'\?"):
        apply_overrides(cfg, {"epocs": 3})
    with pytest.raises(ConfigError, match=r"field 'x' is ambiguous: a.x, b.x; use the dotted name"):
        apply_overrides({"a": {"x": 1}, "b": {"x": 2}}, {"x": 3})


def test_cli_errors_are_one_line_with_exit_status_2(capsys):
    assert main(["train", "burgers-xx"]) == 2
    assert "unknown preset 'burgers-xx'" in capsys.readouterr().err
    assert main(["train", "burgers-gt", "--lerning-rate", "1e-3"]) == 2
    assert "unknown field 'lerning-rate'" in capsys.readouterr().err
    assert main(["train", "burgers-gt", "--epochs", "0", "--print-config"]) == 2
    assert "train.epochs must be a positive integer, got 0" in capsys.readouterr().err


def test_cli_print_config_applies_overrides(capsys):
    assert main(["train", "burgers-gt", "--print-config", "--norm-scheme", "regular", "--lr", "5e-4"]) == 0
    out = capsys.readouterr().out
    assert "norm_scheme: regular" in out and "lr: 0.0005" in out
