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


@pytest.mark.parametrize("preset", ["darcy-inverse-gt", "darcy-inverse-ft-regular", "darcy-inverse-fno"])
def test_inverse_model_output_grid_follows_the_data_target_grid(preset):
    """The paper's pairs: fine 141 pooled by 4 -> 36, fine 211 pooled by 3 -> 71 (the attention grid moves along);
    the same pooling the dataset does (NaN-padded, so ceil)."""
    from opformer.train.config import inverse_target_size

    cfg = resolve(load_preset(preset))
    assert cfg["model"]["out_size"] == 36
    big = resolve(apply_overrides(cfg, {"resolution": 211, "coarse_factor": 3}))
    assert big["model"]["out_size"] == 71
    if "coarse_size" in cfg["model"]:
        assert cfg["model"]["coarse_size"] == 36 and big["model"]["coarse_size"] == 71
        own = resolve(apply_overrides(cfg, {"resolution": 211, "coarse_factor": 3, "coarse_size": 50}))
        assert own["model"]["coarse_size"] == 50 and own["model"]["out_size"] == 71
    assert [inverse_target_size(n, f) for n, f in ((141, 4), (211, 3), (85, 3), (29, 4))] == [36, 71, 29, 8]
    with pytest.raises(ConfigError, match="coarse_factor must be a positive integer"):
        resolve(apply_overrides(cfg, {"coarse_factor": 0}))


def test_inverse_target_grid_matches_the_dataset_pooling():
    import numpy as np

    from opformer.pde.darcy import pool_nanmean
    from opformer.train.config import inverse_target_size

    for n, f in ((141, 4), (211, 3), (85, 3), (29, 4), (30, 7)):
        pooled = pool_nanmean(np.zeros((1, 1, n, n)), f)
        assert pooled.shape[-1] == inverse_target_size(n, f), (n, f, pooled.shape)


def test_cpu_reduced_darcy_presets_share_the_default_files_and_use_85_and_29():
    """The CPU-reduced presets read the same cached r421 files as the full presets (same recipes), strided to 85
    (420 / 84 = stride 5), with a 29 x 29 attention / target grid."""
    full = {"darcy": resolve(load_preset("darcy-gt")), "darcy-inverse": resolve(load_preset("darcy-inverse-gt"))}
    names = [n for n in list_presets() if n.startswith("darcy") and n.endswith("-cpu")]
    assert len(names) == 6
    for name in names:
        cfg = resolve(load_preset(name))
        d, ref = cfg["data"], full[cfg["problem"]]["data"]
        assert (d["recipe"], d["test_recipe"], d["train_pool"], d["n_val"]) == (
            ref["recipe"], ref["test_recipe"], ref["train_pool"], ref["n_val"])
        assert d["resolution"] == 85 and 420 % (d["resolution"] - 1) == 0
        assert cfg["model"].get("coarse_size", 29) == 29 and cfg["model"].get("out_size", 29) == 29
