"""What docs/models.md states about the models is what the code does.

The tables are read from the page itself (parameter counts, presets, scOT sizes, shapes, the grids each model
accepts, the middle and coarse grid rules), so that a changed page or a changed model fails here.  The prose claims
that code can check (defaults, option lists, error messages, signatures, mode limits, file names) are read from the
page too where it states them as numbers or names.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import opformer.nn
from opformer.models import (
    MODEL_PRESETS,
    MODELS,
    PAPER_PARAMETERS,
    SCOT_SIZES,
    EncoderConfig,
    build_model,
    count_parameters,
    default_coarse_size,
    default_coords,
    example_inputs,
    model_config,
    model_preset,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "models.md").read_text()
README = (ROOT / "README.md").read_text()


# --- reading the page ----------------------------------------------------------------------------------------------
def section(title: str) -> str:
    """The text of the first section whose heading starts with ``title`` (or is the heading ``title``, given with its
    #s), up to the next heading of its level or above."""
    if title.startswith("#"):
        hashes, name = title.split(" ", 1)
        pattern = "^(" + re.escape(hashes) + ") " + re.escape(name) + r"\n"
    else:
        pattern = r"^(#+) " + re.escape(title) + r"[^\n]*\n"
    m = re.search(pattern, DOC, re.M)
    assert m, f"docs/models.md has no heading with {title!r}"
    level = len(m.group(1))
    end = re.search(r"^#{1,%d} " % level, DOC[m.end():], re.M)
    return DOC[m.end(): m.end() + end.start() if end else len(DOC)]


def table(text: str, first_header: str) -> list[list[str]]:
    """The rows (cells stripped) of the markdown table in ``text`` whose header's first cell is ``first_header``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_header:
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            assert rows, f"the table {first_header!r} has no rows"
            return rows
    raise AssertionError(f"no table with the header {first_header!r}")


def number(text: str) -> int:
    """An integer as the page writes it: 2,220,829."""
    return int(text.replace(",", "").replace("*", "").strip())


def expand(pattern: str) -> list[str]:
    """Preset names of a pattern such as ``burgers-{gt,ft,st,lt}[-regular]``."""
    m = re.search(r"\[([^\]]*)\]", pattern)
    if m:
        return expand(pattern[:m.start()] + pattern[m.end():]) + expand(pattern[:m.start()] + m.group(1)
                                                                         + pattern[m.end():])
    m = re.search(r"\{([^}]*)\}", pattern)
    if m:
        return [n for alt in m.group(1).split(",") for n in expand(pattern[:m.start()] + alt + pattern[m.end():])]
    return [pattern]


def test_the_page_is_read():
    """The readers find what they look for (a changed heading must fail, not silently check nothing)."""
    assert len(table(section("Parameter counts: ours against"), "preset(s)")) == 6
    assert len(table(DOC, "size")) == 3
    assert len(table(DOC, "config")) >= 8
    assert len(table(section("Calling a model"), "model")) == 3
    assert len(table(section("Scalable operator transformers"), "model")) == 5


# --- models, configs and build_model ---------------------------------------------------------------------------------
def test_the_page_names_every_model_and_config_class():
    text = section("Configs and `build_model`")
    configs = re.search(r"Each model class has a frozen config dataclass: (.*?)\. The", text, re.S).group(1)
    named = set(re.findall(r"`(\w+Config)`", configs))
    assert named == {cls.config_class.__name__ for cls in MODELS.values()}
    for cls in MODELS.values():
        assert dataclasses.is_dataclass(cls.config_class) and cls.config_class.__dataclass_params__.frozen
    names = re.search(r'`build_model\(cfg\)` takes `\{"name": (.*?), \*\*fields\}`', text, re.S).group(1)
    assert re.findall(r'"(\w+)"', names) == list(MODELS)
    title = re.search(r"^## Scalable operator transformers and baselines: (.*)$", DOC, re.M).group(1)
    five = [n.strip() for n in title.split(",")]
    assert set(five) | {"transformer1d", "transformer2d", "fno1d", "fno2d"} == set(MODELS)
    assert f"These {['one', 'two', 'three', 'four', 'five', 'six'][len(five) - 1]} 2D models" in DOC
    assert all(MODELS[n].spatial_dim == 2 for n in five)


def test_constructors_take_a_config_or_its_fields():
    from opformer.models import Transformer1d, Transformer1dConfig

    a, b = Transformer1d(d_model=64, n_heads=2), Transformer1d(Transformer1dConfig(d_model=64, n_heads=2))
    assert a.config == b.config and count_parameters(a) == count_parameters(b)


def test_the_unknown_key_message_is_the_one_shown():
    text = section("Configs and `build_model`")
    shown = re.search(r"for example:\s*`([^`]*)`", text).group(1)
    key = re.search(r"unknown key '(\w+)' for model '(\w+)'", shown)
    with pytest.raises(ValueError) as err:
        build_model({"name": key.group(2), key.group(1): True})
    assert str(err.value).startswith(shown.rstrip(".")), str(err.value)


def test_numpy_scalars_are_the_numbers_they_hold():
    cfg = model_config({"name": "transformer1d", "d_model": np.int64(64), "n_heads": np.int64(4),
                        "dropout": np.float32(0.5)})
    assert type(cfg.d_model) is int and type(cfg.dropout) is float
    json.dumps(build_model({"name": "transformer1d", "d_model": np.int64(64)}).to_config())
    opformer.nn.SimpleAttention(np.int64(64), np.int64(4), scale=np.float32(0.5))


def test_model_config_validates_without_building_and_to_config_rebuilds():
    with pytest.raises(ValueError, match="divisible"):
        model_config({"name": "transformer1d", "d_model": 10, "n_heads": 4})
    for name in MODEL_PRESETS:
        assert model_config(name) == build_model(build_model(name).to_config()).config


# --- the shared encoder fields --------------------------------------------------------------------------------------
def _encoder_list() -> str:
    return re.search(r"Shared encoder fields of both transformers \(`EncoderConfig`\):\n(.*?)\n\n", DOC, re.S).group(1)


def test_the_encoder_field_list_names_every_field():
    """Every field of EncoderConfig is in the list (``time_conditioning`` has its own section), and every field the
    list names exists."""
    text = _encoder_list()
    named = set(re.findall(r"`(\w+)`", text))
    fields = {f.name for f in dataclasses.fields(EncoderConfig)}
    assert fields - named == {"time_conditioning"}
    assert "## Lead-time conditioning (`time_conditioning`)" in DOC
    assert named - fields == set(), named - fields


def test_the_encoder_field_options_are_the_valid_ones():
    from opformer.nn.attention import FOURIER_ORDERS, KERNELS, QUADRATIC
    from opformer.nn.encoder import NORM_SCHEMES

    text = _encoder_list()
    kinds = re.search(r"`kind` is one of ([\w, ]+) or (\w+)\.", text)
    assert [*kinds.group(1).split(", "), kinds.group(2)] == list(KERNELS)
    schemes = re.search(r"`norm_scheme` is (.*?) \(Ln inside.*?or (\"\w+\") \(pre-LN", text, re.S)
    assert re.findall(r'"(\w+)"', text[schemes.start():schemes.end()]) == list(NORM_SCHEMES)
    orders = text[text.index("- `fourier_order`:"):]
    assert orders.startswith('- `fourier_order`: "auto" (default)') and EncoderConfig.fourier_order == "auto"
    assert re.findall(r'"(\w+)" (?:\(default\) evaluates|forms|always)', " ".join(orders.split())) == \
        list(FOURIER_ORDERS)
    assert "`scale`: None, \"sqrt\" or a number" in text
    for scale in (None, "sqrt", 0.5):
        model_config({"name": "transformer1d", "scale": scale})
    with pytest.raises(ValueError):
        model_config({"name": "transformer1d", "scale": "cube"})
    chunked = re.search(r"`chunk_size` splits quadratic attention into chunks \((\w+) and (\w+) only", text)
    assert set(chunked.groups()) == set(QUADRATIC)
    for kind in KERNELS:
        if kind in QUADRATIC:
            model_config({"name": "transformer1d", "kind": kind, "chunk_size": 64})
        else:
            with pytest.raises(ValueError, match="chunk_size"):
                model_config({"name": "transformer1d", "kind": kind, "chunk_size": 64})
        if kind != "fourier":
            with pytest.raises(ValueError, match="fourier_order"):
                model_config({"name": "transformer1d", "kind": kind, "fourier_order": "linear"})
    assert '`init` "eta_delta" (default); "xavier"' in text and EncoderConfig.init == "eta_delta"
    model_config({"name": "transformer1d", "init": "xavier"})
    assert "attn_dropout = 0`, the presets' value" in text
    assert all(model_config(n).attn_dropout == 0 for n in MODEL_PRESETS if not n.endswith("-fno"))
    assert EncoderConfig.attn_dropout == 0.0 and not EncoderConfig.reference_attn_dropout


# --- presets --------------------------------------------------------------------------------------------------------
def _kind_names() -> dict[str, str]:
    text = re.search(r"In these names (.*?)\. `-regular`", DOC, re.S).group(1)
    return dict(re.findall(r"(\w\w) (?:is )?(galerkin|fourier|softmax|linear)", text))


def test_the_preset_list_is_the_presets():
    text = section("Presets (`opformer/models/presets.py`)")
    stated = int(re.search(r"There are (\d+) presets", text).group(1))
    assert stated == len(MODEL_PRESETS)
    names = []
    for pattern, extra in re.findall(r"^- `([\w-]+-\{[\w,]+\})` and the same four with `-regular`, plus `([\w-]+)`",
                                     text, re.M):
        names += expand(pattern) + [n + "-regular" for n in expand(pattern)] + [extra]
    assert sorted(names) == sorted(MODEL_PRESETS)
    kinds = _kind_names()
    assert len(kinds) == 4
    for name in MODEL_PRESETS:
        if not name.endswith("-fno"):
            short = name.removesuffix("-regular").rsplit("-", 1)[1]
            assert model_config(name).kind == kinds[short], name
            assert model_config(name).norm_scheme == ("regular" if name.endswith("-regular") else "galerkin")


def test_the_reference_choices_the_presets_keep():
    text = section("Presets (`opformer/models/presets.py`)")
    attention = {n: model_config(n) for n in MODEL_PRESETS if not n.endswith("-fno")}
    eta = re.search(r"W = ηU \+ δI with η = δ = ([\de.-]+)\.", text).group(1)
    assert all(c.eta == c.delta == float(eta) and c.init == "eta_delta" for c in attention.values())
    assert all(c.scale == ("sqrt" if c.kind == "fourier" else None) for c in attention.values())
    eps = re.search(r"Ln eps ([\de.-]+) in ex1 and ([\de.-]+) in ex2 and ex3", text)
    for name, c in attention.items():
        assert c.norm_eps == float(eps.group(1) if name.startswith("burgers") else eps.group(2)), name
    assert "ReLU in the FFN and in the CiNN downscaler; SiLU in the upscaler and the decoders" in text
    drop = float(re.search(r"Dropout ([\d.]+) on the encoder's residual branches and FFN", text).group(1))
    cinn = float(re.search(r"Dropout ([\d.]+) in the CiNN downscaler, and in the upscaler for ex3", text).group(1))
    for name, c in attention.items():
        assert c.activation == "relu" and c.decoder_activation == "silu"
        assert c.dropout == drop and c.ffn_dropout in (None, drop) and c.attn_branch_dropout in (None, drop)
        if name.startswith("darcy"):
            assert (c.downscaler_activation, c.upscaler_activation) == ("relu", "silu")
            assert c.downscaler_dropout == cinn
            assert c.upscaler_dropout == (cinn if name.startswith("darcy-inverse") else 0.0)
    ex2 = int(re.search(r"ex2 presets use the attention grid `coarse_size=(\d+)`", text).group(1))
    ex3 = re.search(r"ex3 presets use `coarse_size=out_size=(\d+)`", text).group(1)
    fno = re.search(r"`darcy-inverse-fno` has `out_size=(\d+)`", text).group(1)
    for name, c in attention.items():
        if name.startswith("darcy-inverse"):
            assert c.coarse_size == c.out_size == int(ex3)
        elif name.startswith("darcy"):
            assert c.coarse_size == ex2 and c.out_size is None
    assert model_config("darcy-inverse-fno").out_size == int(fno) and model_config("darcy-fno").out_size is None
    # "grids are a per-run choice and do not change the parameter count"
    for name, sizes in (("darcy-gt", {"coarse_size": 61}), ("darcy-inverse-gt", {"coarse_size": 71, "out_size": 71})):
        assert count_parameters(build_model({**model_preset(name), **sizes})) == count_parameters(build_model(name))


def _split(text: str) -> list[tuple[str, int, int | None, int | None]]:
    """(part, parameters, repeats, parameters of each) of a split like ``encoder 801,024 (6 × 133,504)`` or
    ``4 layers 540,928``."""
    out = []
    for term in text.split(" + "):
        m = re.fullmatch(r"(?:(\d+) )?(\w+) ([\d,]+)(?: \((\d+) × ([\d,]+)\))?", term.strip())
        assert m, f"cannot read the split term {term!r}"
        count, part, total, times, each = m.groups()
        repeats = int(times or count) if (times or count) else None
        out.append((part, number(total), repeats, number(each) if each else None))
    return out


@pytest.mark.parametrize("row", table(section("Parameter counts: ours against"), "preset(s)"),
                         ids=lambda row: row[0].split("`")[1])
def test_the_parameter_count_table(row):
    pattern, ours, paper, split = row
    names = expand(pattern.split("`")[1])
    many = re.search(r"\((\d+)\)", pattern)
    assert len(names) == (int(many.group(1)) if many else 1)
    if split.startswith("as `"):
        split = next(r[3] for r in table(section("Parameter counts: ours against"), "preset(s)")
                     if r[0].split("`")[1] == split.split("`")[1] and not r[3].startswith("as "))
    experiment = re.sub(r"-(gt|ft|st|lt|fno)(-regular)?$", "", names[0])
    assert number(paper) == PAPER_PARAMETERS[experiment][1 if names[0].endswith("-fno") else 0]
    assert number(ours) == number(paper)  # "the counts are equal, not only within 5%"
    for name in names:
        model = build_model(name)
        assert count_parameters(model) == number(ours), name
        parts = _split(split)
        assert sum(total for _, total, _, _ in parts) == number(ours)
        for part, total, repeats, each in parts:
            module = getattr(model, part)
            assert count_parameters(module) == total, (name, part)
            if repeats is not None:
                blocks = module.layers if part == "encoder" else module
                assert len(blocks) == repeats, (name, part)
                if each is not None:
                    assert {count_parameters(b) for b in blocks} == {each}, (name, part)


def test_the_models_section_counts():
    models = section("### Models")
    lift = int(re.search(r"lift `Linear\(in → d\)` on the value \((\d+) parameters in ex1\)", models).group(1))
    assert count_parameters(build_model("burgers-gt").lift) == lift
    head = re.search(r"the head `Linear\(width, (\d+)\) → ReLU → Linear\(\1, out\)`", models).group(1)
    for name in ("burgers-fno", "darcy-fno", "darcy-inverse-fno"):
        cfg = model_config(name)
        assert (cfg.head_width, cfg.activation, cfg.coord_features) == (int(head), "relu", "raw")
    assert "with `coord_features: periodic` (default `raw`)" in models
    for name, dim in (("fno1d", 1), ("fno2d", 2)):
        assert MODELS[name].config_class.coord_features == "raw"
        for features, per_axis in (("raw", 1), ("periodic", 2)):
            lift = build_model({"name": name, "in_channels": 3, "coord_features": features}).lift
            assert lift.in_features == 3 + per_axis * dim
    assert "`input_skip: true` (not in the paper, off in every preset)" in models
    assert not any(model_config(n).input_skip for n in MODEL_PRESETS if model_preset(n)["name"] == "transformer2d")
    decoders = {model_preset(n)["decoder"] for n in MODEL_PRESETS if n.startswith("darcy-") and "fno" not in n
                and not n.startswith("darcy-inverse")}
    assert decoders == {"spectral"}
    assert {model_preset(n)["decoder"] for n in MODEL_PRESETS if n.startswith("darcy-inverse-")
            and "fno" not in n} == {"pointwise"}


def test_the_periodic_lift_of_the_navier_stokes_fno():
    """"dim·width more lift parameters (418,345 instead of 418,305 here)": the ns-fno with its modes fitted to 8."""
    from opformer.tasks import get_task

    text = section("FNO across grids")
    periodic, raw = (number(n) for n in re.search(r"\(([\d,]+) instead of ([\d,]+) here\)", text).groups())
    modes = int(re.search(r"`ns-fno` \(modes fitted to (\d+) on 16²\)", text).group(1))
    assert MODELS["fno2d"].max_modes(model_config(get_task("ns").models["fno"]), (16, 16)) == modes
    cfg = {**get_task("ns").models["fno"], "modes": modes}
    assert count_parameters(build_model({**cfg, "coord_features": "periodic"})) == periodic
    assert count_parameters(build_model({**cfg, "coord_features": "raw"})) == raw
    assert periodic - raw == 2 * cfg["width"]
    assert count_parameters(build_model("burgers-fno")) == number(
        re.search(r"keeps the paper's\s+([\d,]+) parameters", section("Which presets lift")).group(1))


# --- the examples' values -----------------------------------------------------------------------------------------
def test_the_paper_examples_set_the_values_of_a_preset(tmp_path):
    """Each ``build_model`` dict of the examples block has the values of a preset (for every key it sets) and that
    preset's parameter count, which is the paper's."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", section("Configs and `build_model`"), re.S)
                 if "build_model({" in b)
    dicts = [ast.literal_eval(m) for m in re.findall(r"build_model\((\{.*?\})\)", block, re.S)]
    assert len(dicts) == 5
    budgets = {n for pair in PAPER_PARAMETERS.values() for n in pair}
    for cfg in dicts:
        matches = [name for name, preset in MODEL_PRESETS.items()
                   if all(getattr(model_config(name), k, object()) == v for k, v in cfg.items() if k != "name")
                   and preset["name"] == cfg["name"]]
        assert matches, cfg
        n = count_parameters(build_model(cfg))
        assert n == count_parameters(build_model(matches[0])) and n in budgets, cfg


# --- scalable models -------------------------------------------------------------------------------------------------
def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(","))


@pytest.mark.parametrize("row", table(DOC, "size"), ids=lambda row: row[0].split()[0])
def test_the_scot_size_table(row):
    size, embed, depths, heads, window, patch, params = row
    size = size.split()[0]
    assert SCOT_SIZES[size] == dict(embed_dim=int(embed), depths=_ints(depths), num_heads=_ints(heads),
                                    window_size=int(window), patch_size=int(patch))
    assert count_parameters(build_model({"name": "scot", "size": size})) == number(params)


def test_the_scot_sizes_table_lists_every_size_and_a_field_overrides_its_size():
    assert [row[0].split()[0] for row in table(DOC, "size")] == list(SCOT_SIZES)
    cfg = model_config({"name": "scot", "size": "small", "embed_dim": 24})
    assert cfg.dim == 24 and cfg.window == SCOT_SIZES["small"]["window_size"]


#: what the annotations of the parameter table's configs say of the defaults
_ANNOTATIONS = {
    "(tiny)": ("scot", {"size": "tiny"}),
    "(softmax, d 64, 4 layers, 4 heads, p 4, sincos)": ("vit", {"kind": "softmax", "d_model": 64, "num_layers": 4,
                                                                "n_heads": 4, "patch_size": 4,
                                                                "pos_encoding": "sincos"}),
    "(16 sensors)": ("deeponet", {"sensors": 16}),
}


def _configs(cell: str) -> tuple[list[dict], str]:
    """The build_model dicts of a cell like ``{"name": "vit", "kind": "galerkin"}` / `"fourier"``, and its note."""
    first = json.loads(re.match(r"`(\{.*?\})`", cell).group(1))
    configs = [first]
    rest = cell[cell.index("}`") + 2:].strip()
    alt = re.match(r'/ `"(\w+)"`', rest)
    if alt:
        key = [k for k in first if k != "name"][-1]
        configs.append({**first, key: alt.group(1)})
        rest = rest[alt.end():].strip()
    return configs, rest


@pytest.mark.parametrize("row", table(DOC, "config"), ids=lambda row: row[0])
def test_the_scalable_parameter_table(row):
    configs, note = _configs(row[0])
    for cfg in configs:
        assert count_parameters(build_model(cfg)) == number(row[1]), cfg
        name = cfg["name"]
        defaults = MODELS[name].config_class()
        if note == "(default)":
            assert all(getattr(defaults, k) == v for k, v in cfg.items() if k != "name"), cfg
        elif note:
            model, values = _ANNOTATIONS[note]
            assert model == name and all(getattr(defaults, k) == v for k, v in values.items())
    assert configs[0]["name"] in MODELS


def test_conditioning_adds_what_the_page_says():
    text = re.search(r'"norm" conditioning adds .*?input\s+channel\.', DOC, re.S).group(0)
    tiny = number(re.search(r"tiny scot goes to ([\d,]+) parameters", text).group(1))
    assert count_parameters(build_model({"name": "scot", "time_conditioning": "norm"})) == tiny
    for name in ("scot", "vit", "unet", "deeponet", "cno", "fno2d", "transformer2d"):
        channel = build_model({"name": name, "time_conditioning": "channel"})
        assert channel.lift_channels == 2
        assert count_parameters(channel) == count_parameters(build_model({"name": name, "in_channels": 2}))
    hidden = int(re.search(r"`opformer\.nn\.LeadTimeMLP`, hidden width (\d+)", DOC).group(1))
    assert inspect.signature(opformer.nn.LeadTimeMLP).parameters["hidden"].default == hidden
    for name in ("ConditionalLayerNorm", "ConditionalAffine"):
        assert f"`{name}`" in DOC and hasattr(opformer.nn, name)


def test_a_galerkin_scot_has_a_galerkin_block_after_every_window_block():
    from opformer.nn.window import GalerkinBlock2d, WindowBlock2d

    assert "`galerkin=True` adds a global Galerkin block after every window block" in DOC
    assert "global Galerkin block after each window block" in " ".join(README.split())
    for size in SCOT_SIZES:
        model = build_model({"name": "scot", "size": size, "galerkin": True})
        windows = [m for m in model.modules() if isinstance(m, WindowBlock2d)]
        assert all(isinstance(w.galerkin, GalerkinBlock2d) for w in windows)
        assert len(windows) == sum(SCOT_SIZES[size]["depths"]) * 2 - SCOT_SIZES[size]["depths"][-1]


def _grid(h: int, w: int) -> torch.Tensor:
    return default_coords(max(h, w), 2)[:, :h, :w] if h == w else torch.stack(torch.meshgrid(
        torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij"), -1)[None]


def _run(model, h: int, w: int, batch: int = 2) -> tuple:
    with torch.no_grad():
        return tuple(model(torch.randn(batch, h, w, model.config.in_channels), _grid(h, w)).shape)


@pytest.mark.parametrize("row", table(section("Scalable operator transformers"), "model"),
                         ids=lambda row: row[0].strip("`"))
def test_the_grids_each_scalable_model_accepts(row, one_thread):
    """"any H, W ≥ patch_size" / "any H, W ≥ 2": the smallest square and a rectangle of odd sides run and keep
    their grid (padded and cropped back); one point less is refused with a ValueError."""
    name, grids = row[0].strip("`"), row[2]
    low = re.match(r"any H, W ≥ (\w+)", grids).group(1)
    model = build_model({"name": name}).eval()
    least = model.config.patch if name == "scot" else getattr(model.config, low, None) if low != "2" else 2
    assert isinstance(least, int) and least >= 2
    for h, w in ((least, least), (least, least + 3), (least + 5, least + 2)):
        assert _run(model, h, w) == (2, h, w, 1)
    with pytest.raises(ValueError, match=f"at least {least} x {least}"):
        _run(model, least - 1, least + 3)
    if "with `grid_size`" in grids:
        size = re.search(r"any H, W ≥ (\d+) with `grid_size`", grids).group(1)
        inner = build_model({"name": name, "grid_size": 2 * least}).eval()
        assert _run(inner, int(size), int(size) + 1) == (2, int(size), int(size) + 1, 1)
    with pytest.raises(ValueError, match="at least 2 x 2"):
        _run(model, 1, least + 3)
    if "multiple of 2**levels" in grids:
        levels = model.config.levels
        assert "at least 2·2**levels" in grids
        for size in (2**levels * k for k in (2, 3)):
            build_model({"name": name, "grid_size": size})
        for size in (2**levels, 2**levels * 2 + 1):
            with pytest.raises(ValueError, match="multiple of 2\\*\\*levels"):
                build_model({"name": name, "grid_size": size})
    out = build_model({"name": name, "out_size": 6}).eval()
    assert _run(out, least + 5, least + 2) == (2, 6, 6, 1)


def test_the_scalable_models_take_the_time_conditioning_options():
    from opformer.models.base import TIME_CONDITIONING

    shown = re.search(r'`time_conditioning` "(\w+)" \| "(\w+)" \|\s+"(\w+)"', DOC).groups()
    assert shown == TIME_CONDITIONING
    for name in ("scot", "vit", "unet", "deeponet", "cno"):
        for mode in TIME_CONDITIONING:
            model_config({"name": name, "time_conditioning": mode})


# --- the calling convention ----------------------------------------------------------------------------------------
_SMALL = {
    "transformer1d": dict(d_model=8, num_layers=1, n_heads=1, dim_feedforward=8, decoder_width=4, modes=4),
    "fno1d": dict(width=4, modes=4, head_width=4),
    "transformer2d": dict(d_model=6, num_layers=1, n_heads=1, dim_feedforward=6, decoder_width=4, modes=3,
                          decoder_ffn=4),
    "fno2d": dict(width=4, modes=3, head_width=4),
}


def _shape(text: str, values: dict) -> tuple:
    tup = re.match(r"\(([^)]*)\)", text.strip()).group(1)
    return tuple(int(v) if v.strip().isdigit() else values[v.strip()] for v in tup.split(","))


@pytest.mark.parametrize("row", table(section("Calling a model"), "model"), ids=lambda row: row[0])
def test_the_shape_table(row, one_thread):
    values = dict(B=3, n=20, n_f=12, C_in=2, C_out=3, out_size=8)
    names = re.findall(r"`(\w+)`", row[0].split(" with ")[0])
    with_out_size = "`out_size`" in row[0]
    assert names
    for name in names:
        cfg = {"name": name, **_SMALL[name], "in_channels": values["C_in"], "out_channels": values["C_out"]}
        if with_out_size:
            cfg["out_size"] = values["out_size"]
        model = build_model(cfg).eval()
        x, coords = torch.randn(_shape(row[1], values)), _shape(row[2], values)
        n = x.shape[1]
        assert coords == (values["B"], *x.shape[1:-1], model.spatial_dim)
        standard = default_coords(n, model.spatial_dim, batch=values["B"])
        assert tuple(standard.shape) == coords
        described = row[2].split(")", 1)[1].strip(", ")
        if model.spatial_dim == 1:
            assert described == "the periodic grid j/n in [0, 1)"
            assert torch.equal(standard[0, :, 0], torch.arange(n) / n)
        else:
            assert described in ('meshgrid (indexing "ij") of linspace(0, 1, n_f)', "")
            t = torch.linspace(0, 1, n)
            assert torch.equal(standard[0], torch.stack(torch.meshgrid(t, t, indexing="ij"), -1))
        with torch.no_grad():
            y = model(x, standard)
            assert tuple(y.shape) == _shape(row[3], values), (name, row)
            # "coords may have batch size 1; it is then shared by the whole batch", and the batch dict
            torch.testing.assert_close(model(x, standard[:1]), y)
            torch.testing.assert_close(model({"input": x, "coords": standard}), y)


def test_channels_default_to_one_and_example_inputs():
    text = section("Calling a model")
    assert "C_in and C_out are `in_channels` and `out_channels`, 1 by default." in text
    for cls in MODELS.values():
        assert cls.config_class().in_channels == cls.config_class().out_channels == 1
    n1, n2 = (int(v) for v in re.search(r"The default\s+resolution is (\d+) in 1D and (\d+) in 2D", text).groups())
    signature = re.search(r"`example_inputs\((.*?)\)` returns", text).group(1)
    params = inspect.signature(example_inputs).parameters
    shown = [p.strip() for p in signature.split(",")]
    assert shown[0] == list(params)[0]
    for item in shown[1:]:
        if item == "*":
            continue
        key, value = item.split("=")
        assert params[key].default == ast.literal_eval(value), item
        if list(shown).index(item) > shown.index("*"):
            assert params[key].kind is inspect.Parameter.KEYWORD_ONLY
    for spec in ("burgers-gt", {"name": "fno1d"}, build_model("burgers-fno")):
        x, coords = example_inputs(spec)
        assert x.shape == (4, n1, 1) and coords.shape == (4, n1, 1)
    x, coords = example_inputs("darcy-fno", batch=2)
    assert x.shape == (2, n2, n2, 1) and coords.shape == (2, n2, n2, 2)
    x0, _ = example_inputs("burgers-gt")
    assert x0.std().item() == pytest.approx(1, abs=0.05)
    assert re.search(r"`default_coords\(n, dim, batch=1\)`", text)
    assert inspect.signature(default_coords).parameters["batch"].default == 1


def test_the_mode_limits_the_page_gives():
    from opformer.models import FNO1d, FNO2d, Transformer1d, Transformer2d

    text = section("Calling a model")
    n, modes = (int(v) for v in re.search(r"\(n >= (\d+) for (\d+) modes\)", text).groups())
    for cls, name in ((Transformer1d, "transformer1d"), (FNO1d, "fno1d")):
        cfg = model_config({"name": name, "modes": modes})
        assert min(k for k in range(2, 200) if cls.max_modes(cfg, (k,)) >= modes) == n
    side, modes2 = (int(v) for v in re.search(r"\((\d+) x \d+ for (\d+) modes;", text).groups())
    fno = model_config({"name": "fno2d", "modes": modes2})
    assert FNO2d.max_modes(fno, (side, side)) >= modes2 > FNO2d.max_modes(fno, (side - 1, side - 1))
    assert FNO2d.max_modes(fno, (2 * modes2, 2 * modes2 - 2)) >= modes2 > FNO2d.max_modes(fno, (2 * modes2 - 1, 99))
    bundled = re.search(r"the bundled `darcy\d+-gt` \((\d+)\s+modes\) predicts on (\d+) x \d+ data with (\d+)", text)
    m, grid, kept = (int(v) for v in bundled.groups())
    model = build_model({**model_preset("darcy-gt"), "modes": m})
    assert Transformer2d.max_modes(model.config, (grid, grid)) == kept
    assert f"resolves {kept} of the {m} Fourier modes" in model.resolution_note((grid, grid))
    assert model.resolution_note((33, 33)) is None


def test_bad_inputs_raise_the_errors_listed():
    text = section("Calling a model")
    assert "Transformer2d needs a square fine grid. FNO2d accepts rectangles when `out_size` is not set." in text
    t2 = build_model({"name": "transformer2d", **_SMALL["transformer2d"]})
    f2 = build_model({"name": "fno2d", **_SMALL["fno2d"]})
    x, c = torch.randn(2, 9, 7, 1), _grid(9, 7)
    assert f2(x, c).shape == (2, 9, 7, 1)
    cases = [
        (t2, (x, c), "square grid"),
        (f2, (torch.randn(2, 9, 7), c), "dims"),
        (f2, (torch.randn(2, 9, 7, 2), c), "input channel"),
        (f2, (x, _grid(9, 8)), "coords of shape"),
        (f2, (torch.randn(2, 1, 7, 1), _grid(1, 7)), "at least 2 x 2"),
        (build_model({"name": "vit"}), (torch.randn(2, 3, 7, 1), _grid(3, 7)), "at least 4 x 4"),
        (f2, ({"input": x},), "needs keys 'input' and 'coords'"),
        (f2, ({"coords": c},), "needs keys 'input' and 'coords'"),
    ]
    for model, args, message in cases:
        with pytest.raises(ValueError, match=message):
            model(*args)



#: a small model of each kind, for the claims that hold for every model
_TINY = {**_SMALL, "scot": {}, "vit": {"d_model": 8, "n_heads": 2, "num_layers": 1}, "unet": {"width": 4},
         "deeponet": {"sensors": 4}, "cno": {"width": 4}}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_exports(name, one_thread):
    """"`torch.export.export(model, (x, coords))` works on every model": the exported program predicts as the
    model."""
    assert "`torch.export.export(model, (x, coords))` works on every model" in " ".join(DOC.split())
    assert set(_TINY) == set(MODELS)
    torch.manual_seed(0)
    model = build_model({"name": name, **_TINY[name]}).eval()
    x, coords = example_inputs(model, batch=2, resolution=12)
    program = torch.export.export(model, (x, coords))
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x, coords), model(x, coords), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_lead_time_is_required_when_conditioned_and_refused_otherwise(name, one_thread):
    assert "`model(input, coords, lead_time=tau)` with `tau` of shape (batch,) (required when conditioned, " \
           "refused otherwise)" in " ".join(DOC.split())
    x, coords = example_inputs({"name": name, **_TINY[name]}, batch=2, resolution=12)
    tau = torch.tensor([0.5, 1.0])
    with torch.no_grad():
        plain = build_model({"name": name, **_TINY[name]}).eval()
        assert plain(x, coords).shape[0] == 2
        with pytest.raises(ValueError, match="lead_time"):
            plain(x, coords, lead_time=tau)
        for mode in ("norm", "channel"):
            model = build_model({"name": name, **_TINY[name], "time_conditioning": mode}).eval()
            assert model(x, coords, lead_time=tau).shape == plain(x, coords).shape
            with pytest.raises(ValueError, match="lead_time"):
                model(x, coords)


def test_parameters_are_real_and_fno_has_no_batch_norm():
    """"Spectral weights are complex numbers stored as (re, im) pairs of reals"; "FNO1d / FNO2d (no batch norm)";
    the regular scheme's conditioned norm is "a `nn.LayerNorm` subclass"."""
    for name in ("burgers-gt", "burgers-fno", "darcy-gt", "darcy-fno", "darcy-inverse-gt"):
        model = build_model(name)
        assert not any(p.is_complex() for p in model.parameters())
        assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert "Spectral weights are complex numbers stored as (re, im) pairs of reals" in " ".join(DOC.split())
    assert "**FNO1d / FNO2d** (no batch norm)" in DOC
    assert issubclass(opformer.nn.ConditionalLayerNorm, torch.nn.LayerNorm)
    assert "`ConditionalLayerNorm`, a\n    `nn.LayerNorm` subclass" in DOC or \
        "`ConditionalLayerNorm`, a `nn.LayerNorm` subclass" in " ".join(DOC.split())

# --- building blocks and grid rules ---------------------------------------------------------------------------------
def _signature_claims() -> list[tuple[str, str]]:
    """(name, arguments) of ``**`Name(args)`**`` and of ``**`A` / `B`** take `(args)``."""
    text = section("Building blocks")
    claims = re.findall(r"\*\*`(\w+)\(([^`]*)\)`\*\*", text)
    for first, second, args in re.findall(r"\*\*`(\w+)` / `(\w+)`\*\* take `\(([^`]*)\)`", text):
        claims += [(first, args), (second, args)]
    return claims


def test_the_building_block_signatures():
    claims = _signature_claims()
    assert len(claims) >= 6
    for name, args in claims:
        params = list(inspect.signature(getattr(opformer.nn, name)).parameters.values())
        shown = [a.strip() for a in re.sub(r"\s+", " ", args).split(",")]
        star = shown.index("*") if "*" in shown else len(shown)
        positional = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert len(positional) == star, (name, shown)
        keywords = {p.name: p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
        for item in shown[star + 1:]:
            key, _, value = item.partition("=")
            assert keywords[key].kind is inspect.Parameter.KEYWORD_ONLY, (name, key)
            if value:
                assert keywords[key].default == ast.literal_eval(value), (name, item)
            else:
                assert keywords[key].default is inspect.Parameter.empty, (name, item)
    assert {"SpectralDecoder1d", "SpectralDecoder2d", "PointwiseDecoder"} <= {n for n, _ in claims}


def test_the_middle_and_coarse_grid_rules():
    from opformer.models.transformer import COARSE_RATIO
    from opformer.nn.cinn import middle_size

    row = next(r for r in table(section("Decisions on the reference"), "quirk of the reference")
               if r[0].startswith("Middle grid"))
    sizes = re.findall(r"(\d+) \((\d+)→(\d+)\)", row[2])
    assert len(sizes) == 5
    for mid, a, b in sizes:
        assert middle_size(int(a), int(b)) == int(mid)
    mid, ref, a, b = re.search(r"and (\d+) instead of (\d+) for (\d+)→(\d+)", row[2]).groups()
    assert middle_size(int(a), int(b)) == int(mid) != int(ref)
    row = next(r for r in table(section("Decisions on the reference"), "quirk of the reference")
               if r[0].startswith("Coarse grid"))
    ratio = re.search(r"coarse = round\(([\d.]+)·\(n_f − 1\)\) \+ 1\*\*, at least (\d+)", row[1])
    assert float(ratio.group(1)) == COARSE_RATIO and default_coarse_size(2) == int(ratio.group(2))
    pairs = re.findall(r"(\d+)→(\d+)", row[1].split("which gives")[1])
    assert len(pairs) == 4
    for fine, coarse in pairs:
        assert default_coarse_size(int(fine)) == int(coarse)
    presets = re.search(r"The presets set (\d+) \(ex2\) and (\d+) \(ex3\)", row[2]).groups()
    assert (model_config("darcy-gt").coarse_size, model_config("darcy-inverse-gt").coarse_size) == tuple(
        map(int, presets))


def test_the_files_the_page_names_exist():
    paths = set(re.findall(r"`((?:tests|scripts|opformer|docs)/[\w/.-]+\.(?:py|md|sh|yaml))`", DOC))
    paths |= set(re.findall(r"\b((?:tests|scripts)/[\w/.-]+\.py)\b", DOC))
    assert len(paths) >= 20
    missing = sorted(p for p in paths if not (ROOT / p).is_file())
    assert not missing, missing


# --- the tests the page describes ------------------------------------------------------------------------------------
def test_the_numbers_of_the_test_table():
    rows = {r[0].strip("`"): r[1] for r in table(section("Tests and their runtime"), "file")}
    assert f"The preset table is complete ({len(MODEL_PRESETS)})" in rows["tests/models/test_presets.py"]
    darcy = [n for n in MODEL_PRESETS if n.startswith("darcy")]
    full = int(re.search(r"All (\d+) full 2D presets take", rows["tests/models/test_overfit.py"]).group(1))
    assert full == len(darcy)
    attention = int(re.search(r"overfitting each of the (\d+) full-size 2D attention presets", DOC).group(1))
    assert attention == len([n for n in darcy if not n.endswith("-fno")])
    burgers = [n for n in MODEL_PRESETS if n.startswith("burgers")]
    assert "Every 1D preset at full size" in rows["tests/models/test_overfit.py"] and len(burgers) == 9


def test_the_config_docstrings_give_the_default_parameter_counts():
    """"the defaults are the layer sizes of the paper's ex1 GT (530,305 parameters; ...)" and the like."""
    stated = 0
    for name, cls in MODELS.items():
        for count in re.findall(r"\(([\d,]+) parameters", inspect.getdoc(cls.config_class)):
            assert count_parameters(build_model({"name": name})) == number(count), name
            stated += 1
    assert stated == 4


def test_the_sawtooth_coefficients():
    """"Its discrete Fourier coefficients are −1/(2n) + i·cot(πk/n)/(2n), against i/(2πk) for the function ... they
    differ by about πk/n: 20 % at k = 1 on 16 points and 10 % on 32"."""
    text = " ".join(section("FNO across grids").split())
    assert "−1/(2n) + i·cot(πk/n)/(2n), against i/(2πk)" in text
    shown = dict((int(n), int(p)) for p, n in re.findall(r"(\d+) % (?:at k = 1 )?on (\d+)", text)[:2])
    assert shown == {16: 20, 32: 10}
    for n, percent in shown.items():
        k = np.arange(1, n // 2)
        dft = np.fft.fft(np.arange(n) / n)[1: n // 2] / n
        np.testing.assert_allclose(dft, -1 / (2 * n) + 1j / np.tan(np.pi * k / n) / (2 * n), atol=1e-12)
        gap = abs(dft[0] - 1j / (2 * np.pi)) / abs(1j / (2 * np.pi))
        assert round(100 * gap / 10) * 10 == percent and gap == pytest.approx(np.pi / n, rel=0.05)
