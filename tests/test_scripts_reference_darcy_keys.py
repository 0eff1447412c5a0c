"""scripts/reference_darcy.py: a misspelt ``--reference KEY=VALUE`` is refused before the data are generated or read
(it used to be found only when the network was built, after the data set: 20-40 minutes on a CPU)."""

import pytest

from .conftest import load_script


def test_an_unknown_reference_key_is_refused_before_training(monkeypatch, capsys):
    mod = load_script("reference_darcy")
    monkeypatch.setattr(mod, "reference_available", lambda: True)

    def no_training(*args, **kwargs):
        raise AssertionError("training started with a key the network does not have")

    monkeypatch.setattr(mod, "train_in_pipeline", no_training)
    with pytest.raises(SystemExit) as exc:
        mod.main(["darcy-gt-cpu", "--reference", "ffn_dropuot=0.05", "--out", "unused"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--reference: unknown key(s) ffn_dropuot" in err and "ffn_dropout" in err


def test_the_known_keys_are_the_networks_config():
    mod = load_script("reference_darcy")
    cfg = mod.reference_config(85, 29)
    assert set(cfg) == mod.CONFIG_KEYS and cfg["upscaler_size"] == ((49, 49), (85, 85))
