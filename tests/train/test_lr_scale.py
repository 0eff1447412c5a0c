"""Learning-rate multipliers by module (``--lr-scale``): parsing, grouping and their effect on training."""

import pytest
import torch

from opformer.train.config import ConfigError, apply_overrides, load_preset, resolve
from opformer.train.module import lr_groups
from opformer.train.run import prepare_run, train


def test_the_flag_reads_key_value_pairs_and_refuses_anything_else():
    cfg, explicit = apply_overrides(load_preset("burgers-gt"), {"lr-scale": "encoder=0.25, decoder=2"})
    assert resolve(cfg).train.lr_scale == {"encoder": 0.25, "decoder": 2.0} and explicit == {"lr_scale"}
    assert resolve(load_preset("burgers-gt")).train.lr_scale == {}
    for bad in ("encoder", "encoder=fast", "=0.5"):
        with pytest.raises(ConfigError, match=r"--lr-scale: expected a mapping \(key=value,key=value\)"):
            apply_overrides(load_preset("burgers-gt"), {"lr-scale": bad})


def test_groups_take_the_longest_matching_module_name_and_name_what_is_wrong(tiny_config):
    run, _, operator, _, _ = prepare_run(apply_overrides(load_preset(str(tiny_config)), {})[0], frozenset(), False)
    params = dict(operator.named_parameters())
    groups = lr_groups(operator, {"encoder": 0.5, "encoder.layers.0": 0.1})
    by_scale = {g["lr_scale"]: {id(p) for p in g["params"]} for g in groups}
    assert set(by_scale) == {0.5, 0.1, 1.0}
    for name, p in params.items():
        want = 0.1 if name.startswith("model.encoder.layers.0.") else 0.5 if name.startswith("model.encoder.") else 1.0
        assert id(p) in by_scale[want], name
    assert sum(len(g["params"]) for g in groups) == len(params)
    assert [g["lr_scale"] for g in lr_groups(operator, {})] == [1.0]
    with pytest.raises(ValueError, match=r"'encodr' names no module of the model \(its modules: decoder, encoder, lift"):
        lr_groups(operator, {"encodr": 0.5})
    for bad in (0.0, float("inf")):
        with pytest.raises(ValueError, match="must be a finite number > 0"):
            lr_groups(operator, {"encoder": bad})


def test_a_module_at_a_tiny_multiplier_keeps_its_initial_weights_while_the_rest_trains(tiny_config, tmp_path):
    cfg = apply_overrides(load_preset(str(tiny_config)), {"lr-scale": "encoder=1e-9", "epochs": 1})[0]
    _, _, start, _, _ = prepare_run(cfg, frozenset(), False)  # the seeded initial weights train() starts from
    train(cfg, tmp_path / "run", progress=False)
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    trained = {k[len("operator."):]: v for k, v in state["state_dict"].items() if k.startswith("operator.")}
    moved = {name: (trained[name] - p.detach()).abs().max().item() for name, p in start.named_parameters()}
    encoder = [v for k, v in moved.items() if k.startswith("model.encoder.")]
    others = [v for k, v in moved.items() if not k.startswith("model.encoder.")]
    assert encoder and others
    assert max(encoder) < 1e-8
    assert min(others) > 1e-5


def test_a_bad_module_name_fails_before_the_run_directory_is_made(tiny_config, tmp_path):
    cfg = apply_overrides(load_preset(str(tiny_config)), {"lr-scale": "encodr=0.5"})[0]
    with pytest.raises(ConfigError, match=r"^--lr-scale: 'encodr' names no module of the model"):
        train(cfg, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
