"""The model help that ``opformer train PRESET --model NAME --help`` prints agrees with the config dataclasses: every
field in order, its one-line help (``FIELD_HELP``), and its value, the model's own when the task's model dict does
not set it; the option lists in the help texts are the options the configs accept; and the defaults that
docs/models.md states are the dataclasses' defaults."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from opformer.cli import main
from opformer.config import field_help, flag, help_text
from opformer.models import MODELS, model_preset

DOC = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()

#: a task and its --model choice for each model
RUNS = {
    "transformer1d": ("burgers", "gt"),
    "fno1d": ("burgers", "fno"),
    "transformer2d": ("darcy", "gt"),
    "fno2d": ("darcy", "fno"),
    "scot": ("darcy", "scot"),
    "vit": ("darcy", "vit-gt"),
    "unet": ("darcy", "unet"),
    "deeponet": ("darcy", "deeponet"),
    "cno": ("darcy", "cno"),
}


def test_every_model_has_a_run():
    assert set(RUNS) == set(MODELS)


def _shown(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _model_rows(out: str, name: str) -> list[tuple[str, str, str]]:
    section = out.split(f"model ({name}):\n", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in section.splitlines():
        m = re.fullmatch(r"  (--[\w-]+) +(\S+) +(.*)", line)
        assert m, f"cannot read the help line {line!r}"
        rows.append(m.groups())
    return rows


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_model_help_shows_every_field_its_help_and_value(name, capsys):
    from opformer.tasks import get_task

    task, short = RUNS[name]
    assert main(["train", task, "--model", short, "--help"]) == 0
    rows = _model_rows(capsys.readouterr().out, name)
    cls = MODELS[name].config_class
    given = get_task(task).models[short]
    given = model_preset(given) if isinstance(given, str) else dict(given)
    assert given["name"] == name
    fields = dataclasses.fields(cls)
    assert [row[0] for row in rows] == [flag(f.name) for f in fields]
    for (shown_flag, value, text), f in zip(rows, fields):
        assert text == help_text(cls, f) and text, shown_flag
        expected = given[f.name] if f.name in given else getattr(cls(), f.name)
        assert value == _shown(expected), (shown_flag, value, expected)


def _options(cls, field) -> list | None:
    """The values a config field accepts when it takes one of a few, from the error of a value it refuses."""
    try:
        cls(**{field: "not-an-option"})
    except ValueError as exc:
        m = re.search(r"must be one of \[(.*)\], got", str(exc))
        return [v.strip().strip("'") for v in m.group(1).split(",")] if m else None
    return None


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_help_texts_list_the_accepted_options(name):
    """A field that takes one of a few values names each of them in its help (None as null)."""
    cls = MODELS[name].config_class
    checked = 0
    for field, _, text in field_help(cls):
        options = _options(cls, field)
        if options is None:
            continue
        checked += 1
        for option in options:
            shown = "null" if option == "None" else option
            assert re.search(rf"\b{re.escape(shown)}\b", text), f"{cls.__name__}.{field}: {shown!r} not in {text!r}"
    assert checked >= 2


def test_the_defaults_the_page_states():
    from opformer.models import EncoderConfig, FNO1dConfig, FNO2dConfig, ScOTConfig

    assert re.search(r"`fourier_order`: \"auto\" \(default\)", DOC) and EncoderConfig.fourier_order == "auto"
    assert "`coord_features: periodic` (default `raw`)" in DOC
    assert FNO1dConfig.coord_features == FNO2dConfig.coord_features == "raw"
    assert re.search(r"`time_conditioning`: `\"none\"` \(default\)", DOC)
    assert all(cls.config_class.time_conditioning == "none" for cls in MODELS.values())
    assert "a field set explicitly overrides the size's value" in DOC and ScOTConfig.size == "tiny"
    assert re.search(r"Not the default: `attn_dropout=0\.0`", DOC) and EncoderConfig.attn_dropout == 0.0
