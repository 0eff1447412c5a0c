"""Every field of every model's config has a one-line help text, and ``opformer train PRESET --help`` shows it."""

from __future__ import annotations

import dataclasses

import pytest

from opformer.cli import main
from opformer.config import ConfigError, check_section, field_help, flag, help_text
from opformer.models import MODELS, Transformer2dConfig


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_config_field_has_a_one_line_help(name):
    cls = MODELS[name].config_class
    names = [f.name for f in dataclasses.fields(cls)]
    assert "FIELD_HELP" not in names  # a ClassVar, not a field
    rows = field_help(cls)
    assert [row[0] for row in rows] == names
    missing = [field for field, _, text in rows if not text]
    assert not missing, f"{cls.__name__}: no help for {missing}"
    for field, _, text in rows:
        assert text == help_text(cls, field)
        assert "\n" not in text and text == text.strip() and not text.endswith("."), (field, text)
        assert not text[0].isupper(), (field, text)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_field_help_tables_name_only_fields_of_their_class(name):
    cls = MODELS[name].config_class
    names = {f.name for f in dataclasses.fields(cls)}
    for klass in cls.__mro__:
        table = vars(klass).get("FIELD_HELP", {})
        assert set(table) <= names, f"{klass.__name__}.FIELD_HELP names no field: {sorted(set(table) - names)}"


def test_a_subclass_help_overrides_its_base_and_inherits_the_rest():
    from opformer.models import EncoderConfig, FNO1dConfig, FNO2dConfig

    assert help_text(FNO2dConfig, "modes") != help_text(FNO1dConfig, "modes")
    assert "per axis" in help_text(FNO2dConfig, "modes")
    assert help_text(FNO2dConfig, "width") == help_text(FNO1dConfig, "width")
    assert help_text(Transformer2dConfig, "eta") == help_text(EncoderConfig, "eta")


def test_check_section_suggests_a_model_field_by_its_help():
    """By its key in Python and in a YAML file, by its flag on the command line."""
    with pytest.raises(ConfigError, match=r"did you mean model\.coarse_size\?") as err:
        check_section(Transformer2dConfig, {"attention_grid": 29}, "model")
    assert err.value.cli.endswith("did you mean --coarse-size?")


@pytest.mark.parametrize("preset, model", [("darcy-gt-cpu", "transformer2d"), ("burgers-gt", "transformer1d"),
                                           ("darcy-fno-cpu", "fno2d")])
def test_preset_help_shows_the_help_of_every_model_field(capsys, preset, model):
    assert main(["train", preset, "--help"]) == 0
    out = capsys.readouterr().out
    section = out.split(f"model ({model}):\n", 1)[1].split("\n\n", 1)[0]
    rows = {line.split()[0]: line for line in section.splitlines() if line.startswith("  --")}
    cls = MODELS[model].config_class
    assert set(rows) == {flag(f.name) for f in dataclasses.fields(cls)}
    for f in dataclasses.fields(cls):
        text = help_text(cls, f)
        assert text and rows[flag(f.name)].endswith(" " + text), rows[flag(f.name)]
    if model == "transformer2d":
        assert "Xavier-uniform" in rows["--eta"] and "attention grid" in rows["--coarse-size"]
