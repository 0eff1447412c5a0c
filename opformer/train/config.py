"""Run presets and the resolved, typed run configuration.

A run config is a plain dict (it is what ``config.yaml`` holds) with the sections ``task``, ``data``,
``task_options``, ``model`` and ``train``; :func:`resolve` checks every value against the typed sections of
:mod:`opformer.config`, the task's options and the model's config class, before anything is written.

Presets: every (task x model) pair of the registered tasks, named ``TASK-MODEL`` (``burgers-gt``,
``darcy-inverse-fno``, ...), generated from the task's ``models`` and ``run_defaults``; YAML files in
``opformer/configs/`` hold the real variants (the quick demo, the CPU-reduced Darcy runs) on top of one of them.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import typing
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..config import (ConfigError, DataConfig, SettingError, TrainConfig, check_section, coerce, field_help, flag,
                      flag_words, help_text, suggest, value_kind)

__all__ = ["ConfigError", "Run", "list_presets", "load_preset", "apply_overrides", "resolve", "RECIPE_BOUND",
           "field_table"]

#: data fields that describe a preset's generated data; with a user's --data file they fall back to their defaults
RECIPE_BOUND = ("resolution", "n_train", "n_val", "n_test", "train_pool", "recipe", "test_recipe")
_SECTIONS = ("data", "task_options", "model", "train")


@dataclasses.dataclass
class Run:
    """A resolved run: the typed sections and the plain dict they came from."""

    name: str
    task: Any  # opformer.tasks.Task
    data: DataConfig
    options: Any
    model: dict  # a build_model dict, checked
    train: TrainConfig
    raw: dict


def _configs_dir():
    return resources.files("opformer") / "configs"


def _generated() -> dict[str, dict]:
    from ..tasks import get_task, list_tasks

    out = {}
    for tname in list_tasks():
        task = get_task(tname)
        for short, model in task.models.items():
            d = task.run_defaults
            out[f"{tname}-{short}"] = {
                "name": f"{tname}-{short}",
                "task": tname,
                "description": f"{task.description}; model {model if isinstance(model, str) else short}",
                "data": copy.deepcopy(d.get("data", {})),
                "task_options": {},
                "model": copy.deepcopy(model),
                "train": {**d.get("train", {}), **task.model_train_overrides(short)},
            }
    return out


def _yaml_presets() -> dict[str, Any]:
    return {p.name[: -len(".yaml")]: p for p in _configs_dir().iterdir() if p.name.endswith(".yaml")}


def list_presets() -> list[str]:
    return sorted(set(_generated()) | set(_yaml_presets()))


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, val in over.items():
        if key in ("data", "train", "task_options") and isinstance(val, dict):
            out[key] = {**(out.get(key) or {}), **val}
        elif key == "model" and _is_model_update(val) and out.get("model") is not None:
            # the fields that differ from the base's model (``model: {d_model: 64}``): the base's model with them
            out[key] = {**_model_dict(out["model"]), **copy.deepcopy(val)}
        else:
            out[key] = copy.deepcopy(val)
    return out


def _is_model_update(model: Any) -> bool:
    """Whether a YAML file's ``model`` section sets some fields of its base's model rather than naming a model of
    its own (a ``name`` or a model ``preset``)."""
    return isinstance(model, dict) and bool(model) and "name" not in model and "preset" not in model


#: the YAML files being read, innermost last: a ``base`` that leads back to one of them is refused, not followed
_LOADING: list = []


def _from_yaml(text: str, name: str, where: str) -> dict:
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of config sections")
    if not raw:
        raise ConfigError(f"{where}: an empty config; name the preset it builds on and the fields that differ, e.g. "
                          "'base: burgers-gt' and 'train: {epochs: 10}' (`opformer train PRESET --print-config` "
                          "writes a complete one)")
    allowed = {"name", "base", "task", "description", *_SECTIONS}
    for key in raw:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown section {key!r}{suggest(str(key), allowed)}".replace("--", ""))
    for key in ("base", "task", "name"):  # a name, not a list or a mapping (a number is taken as its text)
        value = raw.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "base":
            raw[key] = value = str(value)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where}: {key}: expected a name, got {value_kind(value)}")
    for key in ("data", "train", "task_options"):
        if key in raw and raw[key] is None:  # a section left empty (its fields commented out): the base's as it is
            raw.pop(key)
        elif key in raw and not isinstance(raw[key], dict):
            raise ConfigError(f"{where}: {key}: expected a mapping of field: value, got {value_kind(raw[key])}")
    if raw.get("model") is None or raw.get("model") == {}:  # left empty: the base's model
        raw.pop("model", None)
    elif not isinstance(raw["model"], (dict, str)):
        raise ConfigError(f"{where}: model: expected a mapping of the model's fields or a model preset's name, got "
                          f"{value_kind(raw['model'])}")
    base_name = raw.pop("base", None)
    base = _base(base_name, where) if base_name else {"task": raw.get("task"), "data": {}, "train": {},
                                                       "task_options": {}, "model": None}
    data = raw.get("data")
    if isinstance(data, dict) and data.get("path") is not None and (base.get("data") or {}).get("path") is None:
        for key in RECIPE_BOUND:  # as with --data: the base's sizes describe its generated data, not this file
            if key not in data:
                (base.get("data") or {}).pop(key, None)
    if isinstance(data, dict) and Path(where).suffix.lower() in (".yaml", ".yml"):
        here = Path(where).parent
        for key in ("path", "test_path"):  # a relative file name that is not in the working directory but next to
            value = data.get(key)  # the YAML file is the one beside it
            if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
                if not Path(value).exists() and (here / value).exists():
                    data[key] = str(here / value)
    if _is_model_update(raw.get("model")) and base.get("model") is None:
        raise ConfigError(f"{where}: model: a model config needs a 'name' key (or a 'preset'), as there is no base "
                          "model to set these fields of")
    cfg = _merge(base, raw)
    cfg["name"] = raw.get("name", name)
    return cfg


def _base(base_name: str, where: str) -> dict:
    """The config a YAML file (``where``) builds on: a preset, or a YAML file, whose relative path is taken in the
    working directory or else next to the file."""
    path = Path(base_name)
    if path.suffix.lower() in (".yaml", ".yml") and not path.expanduser().is_absolute() and not path.exists():
        beside = Path(where).parent / path
        if Path(where).suffix.lower() in (".yaml", ".yml") and beside.exists():
            base_name = str(beside)
    try:
        return load_preset(base_name)
    except _BaseCycle:
        raise
    except ConfigError as exc:
        raise ConfigError(f"{where}: base: {exc}") from None


class _BaseCycle(ConfigError):
    """A chain of ``base`` files that leads back to one of them (its message names the chain once)."""


def load_preset(name_or_path: str) -> dict:
    """The run config dict of a preset name (see :func:`list_presets`) or a YAML file."""
    path = Path(str(name_or_path))
    if path.suffix.lower() in (".yaml", ".yml"):
        return _load_yaml_file(path)
    files, generated = _yaml_presets(), _generated()
    if name_or_path in files:
        return _from_yaml(files[name_or_path].read_text(), name_or_path, f"preset {name_or_path}")
    if name_or_path in generated:
        return copy.deepcopy(generated[name_or_path])
    from ..tasks import get_task, list_tasks

    if name_or_path in list_tasks():  # a bare task: its first model (pick another with --model)
        first = next(iter(get_task(name_or_path).models))
        cfg = copy.deepcopy(generated[f"{name_or_path}-{first}"])
        cfg["name"] = name_or_path
        return cfg
    names = sorted(set(files) | set(generated))
    near = difflib.get_close_matches(str(name_or_path), names, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(near)}?" if near else ""
    from ..tasks.base import TASKS_VARIABLE

    raise ConfigError(f"unknown preset or task {name_or_path!r}.{hint} `opformer train --list` shows them all (a "
                      f"task of your own: {TASKS_VARIABLE}=its module or .py file, docs/tasks.md)")


def _load_yaml_file(path: Path) -> dict:
    """The run config of the user's YAML file ``path``; a file that cannot be read, or whose ``base`` chain leads
    back to itself, is refused in one line naming it."""
    if not path.exists():
        raise ConfigError(f"{path}: no such preset file")
    if path.is_dir():
        raise ConfigError(f"{path}: a directory, not a YAML config file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (a YAML config is UTF-8 text)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    key = path.resolve()
    if key in _LOADING:
        chain = [str(p.name) for p in _LOADING[_LOADING.index(key):]] + [path.name]
        raise _BaseCycle(f"{_LOADING[-1].name}: base: {' -> '.join(chain)}: the bases lead back to {path.name}")
    _LOADING.append(key)
    try:
        return _from_yaml(text, path.stem, str(path))
    finally:
        _LOADING.pop()


# --- overrides ----------------------------------------------------------------------------------------------------------
def _model_class(model: Any):
    from ..models import MODELS, model_preset

    if isinstance(model, str):
        model = model_preset(model)
    name = model.get("name") if isinstance(model, dict) else None
    if name is None and isinstance(model, dict) and "preset" in model:
        name = model_preset(model["preset"])["name"]
    return MODELS.get(name)


def model_error(exc: Exception, model: Any, prefix: str = "model") -> SettingError:
    """The model's own complaint about its settings (``exc``, naming the keys of the config ``model``) as one line:
    ``"model: d_model=30 must be ..."`` from Python, ``"--d-model 30 must be ..."`` on the command line."""
    text = str(exc).splitlines()[0]
    try:
        names = [f.name for f in dataclasses.fields(_model_class(model).config_class)]
    except (AttributeError, TypeError, ValueError):  # no known model: no keys to name
        names = []
    cli = flag_words(text, names)
    return SettingError(f"{prefix}: {text}", cli if cli.startswith("--") else f"{prefix}: {cli}")


def _leaf_owners(cfg: dict) -> dict[str, tuple[str, type]]:
    """field name -> (section, dataclass) for every settable field of a run config."""
    from ..tasks import get_task

    owners: dict[str, list] = {}
    for section, cls in (("data", DataConfig), ("train", TrainConfig)):
        for f in dataclasses.fields(cls):
            owners.setdefault(f.name, []).append((section, cls))
    if cfg.get("task"):
        for f in dataclasses.fields(get_task(cfg["task"]).options_class):
            owners.setdefault(f.name, []).append(("task_options", get_task(cfg["task"]).options_class))
    mcls = _model_class(cfg.get("model")) if cfg.get("model") is not None else None
    if mcls is not None:
        for f in dataclasses.fields(mcls.config_class):
            owners.setdefault(f.name, []).append(("model", mcls.config_class))
    return owners


def _helps(cfg: dict) -> dict[str, str]:
    out = {}
    for name, owners in _leaf_owners(cfg).items():
        for _, cls in owners:
            text = help_text(cls, name)
            if text:
                out[name] = text
    return out


FLAG_ONLY = object()  # a command-line flag given without a value (``--residual``): true for a boolean field


def apply_overrides(cfg: dict, overrides: dict[str, Any], command_flags=()) -> tuple[dict, set]:
    """Set fields by name (``lr``, ``n-train``, ``modes``) or dotted path (``train.lr``); values may be strings
    from the command line (typed here).  ``model`` picks another model: a short name of the task (``fno``), a model
    preset or a ``build_model`` name.  Returns the new config and the set of fields given explicitly.
    ``command_flags``: the command's own options (``--resume``), suggested for an unknown name near one of them."""
    from ..tasks import get_task

    cfg = copy.deepcopy(cfg)
    overrides = dict(overrides)
    explicit: set = set()
    if "model" in overrides:  # first: the model decides which model fields exist
        picked = str(overrides.pop("model"))
        cfg["model"] = _pick_model(cfg, picked)
        # the run is named after the model too: `darcy --model gt` and `darcy --model fno` are two runs (their
        # default --out directories, their metrics and plot titles), and `burgers-gt --model fno` is not the GT
        base = cfg.get("name") or cfg.get("task") or "run"
        if not str(base).endswith(f"-{picked}"):
            cfg["name"] = f"{base}-{picked}"
        if "; model " in str(cfg.get("description", "")):
            cfg["description"] = f"{cfg['description'].rsplit('; model ', 1)[0]}; model {picked}"
    if "task" in overrides:
        cfg["task"] = str(overrides.pop("task"))
        get_task(cfg["task"])
    given = {k.replace("-", "_").split(".")[-1] for k in overrides}
    if overrides.get("path", overrides.get("data.path")) is not None and cfg.get("data", {}).get("path") is None:
        for key in RECIPE_BOUND:  # the preset's sizes describe its generated data, not the user's file
            if key not in given:
                cfg.setdefault("data", {}).pop(key, None)
    for raw_key, value in overrides.items():
        key = raw_key.replace("-", "_")
        section, name = (key.split(".", 1) if "." in key else (None, key))
        owners = _leaf_owners(cfg)
        if name == "name" or name not in owners:
            elsewhere = _models_with_field(cfg, name) if name != "name" else []
            if elsewhere:
                model = cfg.get("model")
                model = model.get("name") if isinstance(model, dict) else model
                raise ConfigError(f"unknown option {flag(raw_key)}: not a field of this preset's model"
                                  f"{f' ({model})' if model else ''}, but of {', '.join(elsewhere)} (pick one with "
                                  "--model)")
            if name in ("config", "config_file", "yaml"):
                raise ConfigError(f"unknown option {flag(raw_key)}: a YAML config is given in place of the preset, "
                                  "opformer train FILE.yaml [flags]")
            hint = suggest(name, owners, _helps(cfg))
            if not hint:  # the command's own options: --resum, --overwrit
                near = difflib.get_close_matches(f"--{raw_key}", list(command_flags), n=1, cutoff=0.75)
                hint = f"; did you mean {near[0]}?" if near else ""
            raise ConfigError(f"unknown option {flag(raw_key)}{hint}")
        choices = [o for o in owners[name] if section is None or o[0] == section]
        if not choices:
            raise ConfigError(f"unknown option --{raw_key}; {name} is in section {owners[name][0][0]}")
        if len(choices) > 1:
            raise ConfigError(f"{flag(name)} is ambiguous: use " + " or ".join(f"--{s}.{name}" for s, _ in choices))
        sec, cls = choices[0]
        if value is FLAG_ONLY:
            if typing.get_type_hints(cls)[name] not in (bool, typing.Optional[bool]):
                raise ConfigError(f"{flag(raw_key)} needs a value")
            value = True
        value = coerce(cls, name, value, flag(raw_key))
        if sec == "model":
            cfg["model"] = _model_dict(cfg["model"])
            cfg["model"][name] = value
        else:
            cfg.setdefault(sec, {})[name] = value
        explicit.add(name)
    return cfg, explicit


def _model_dict(model: Any) -> dict:
    from ..models import model_preset

    if isinstance(model, str):
        return model_preset(model)
    if isinstance(model, dict) and "preset" in model:
        over = dict(model)
        return {**model_preset(over.pop("preset")), **over}
    return dict(model)


def _models_of_dim(task) -> list[str]:
    """The registered models of ``task``'s spatial dimension (all of them without a task)."""
    from ..models import MODELS

    dim = getattr(task, "dim", None)
    return sorted(m for m, cls in MODELS.items() if dim is None or getattr(cls, "spatial_dim", dim) == dim)


def _models_with_field(cfg: dict, name: str) -> list[str]:
    """The models of the config's task's dimension whose config has field ``name`` (for a flag the preset's model
    lacks)."""
    from ..models import MODELS
    from ..tasks import get_task

    try:
        task = get_task(cfg["task"]) if cfg.get("task") else None
    except Exception:  # noqa: BLE001 - an unknown task is told elsewhere
        task = None
    return [m for m in _models_of_dim(task) if name in {f.name for f in dataclasses.fields(MODELS[m].config_class)}]


def _pick_model(cfg: dict, value: Any) -> Any:
    from ..models import MODEL_PRESETS, MODELS
    from ..tasks import get_task

    value = str(value)
    task = get_task(cfg["task"]) if cfg.get("task") else None
    if task is not None and value in task.models:
        return copy.deepcopy(task.models[value])
    if value in MODEL_PRESETS:
        return value
    fits = _models_of_dim(task)
    if value in MODELS:
        if value not in fits:
            raise ConfigError(f"--model {value}: a {MODELS[value].spatial_dim}D model, but task {task.name} is "
                              f"{task.dim}D "
                              f"(its models: {', '.join(sorted(task.models))}; any of {', '.join(fits)})")
        return {"name": value}
    known = sorted(task.models) if task else []
    near = difflib.get_close_matches(value, known + fits, n=1, cutoff=0.5)
    hint = f"; did you mean {near[0]}?" if near else ""
    raise ConfigError(f"--model {value}: unknown model{hint} (for this task: {', '.join(known)}; any of "
                      f"{', '.join(fits)} with its fields as flags)")


# --- resolution -----------------------------------------------------------------------------------------------------------
def resolve(cfg: dict) -> Run:
    """Check every section of a run config dict; raises :class:`ConfigError` naming the flag and the value."""
    from ..models import model_config
    from ..tasks import get_task

    cfg = copy.deepcopy(cfg)
    if not cfg.get("task"):
        raise ConfigError("the config names no task (set task: burgers | darcy | darcy-inverse | ...)")
    task = get_task(cfg["task"])
    if cfg.get("model") is None:
        raise ConfigError(f"the config has no model: pass --model, one of {', '.join(task.models)}")
    try:
        model = _model_dict(cfg["model"])
        model_config(model)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise model_error(exc, cfg["model"]) from None
    data = check_section(DataConfig, cfg.get("data") or {}, "data")
    train = check_section(TrainConfig, cfg.get("train") or {}, "train")
    options = check_section(task.options_class, cfg.get("task_options") or {}, "task_options")
    if data.test_path is not None and data.path is None:
        raise ConfigError("--test-data needs --data (the default data has its own test file)")
    if data.grid is not None and not task.grid_choice:
        raise ConfigError(f"--grid applies to the tasks on a square with walls (darcy, darcy-inverse); task "
                          f"{task.name}'s grid is fixed by the problem: leave --grid out")
    if data.grid is not None and data.path is None:
        raise ConfigError("--grid describes your files (--data): the default data store their coordinates")
    raw = {
        "name": cfg.get("name") or f"{task.name}-{model['name']}",
        "task": task.name,
        "description": cfg.get("description", ""),
        "data": dataclasses.asdict(data),
        "task_options": dataclasses.asdict(options),
        "model": model,
        "train": dataclasses.asdict(train),
    }
    return Run(raw["name"], task, data, options, model, train, raw)


def field_table(cfg: dict) -> str:
    """Every field of a run config with its current value and help, by section (``opformer train PRESET --help``)."""
    from ..tasks import get_task

    run = resolve(cfg)
    lines = [f"{run.name}: {run.raw['description']}".rstrip(": "), ""]
    sections = [("data", DataConfig, run.raw["data"]), ("train", TrainConfig, run.raw["train"])]
    task = get_task(run.raw["task"])
    if dataclasses.fields(task.options_class):
        sections.append(("task options", task.options_class, run.raw["task_options"]))
    mcls = _model_class(run.model)
    sections.append((f"model ({run.model['name']})", mcls.config_class, {
        **{f.name: getattr(mcls.config_class(), f.name) for f in dataclasses.fields(mcls.config_class)
           if _has_default(f)}, **run.model}))
    for title, cls, values in sections:
        lines.append(f"{title}:")
        for name, _, text in field_help(cls):
            value = values.get(name)
            lines.append(f"  {flag(name):<28} {_show(value):<14} {text}")
        lines.append("")
    lines.append("Set any of them with --FIELD VALUE; --model picks another model ("
                 + ", ".join(task.models) + ").")
    small = bool(task.small_grid_defaults or task.small_grid_train_defaults)
    if small or "modes" in run.model or "coarse_size" in run.model:
        lines.append("These are the preset's values: training fits the grid-dependent sizes"
                     + (" and the task's small-grid defaults" if small else "") +
                     " to the data (a value you set is kept); --print-config shows the values it will use.")
    return "\n".join(lines)


def _has_default(f) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)

