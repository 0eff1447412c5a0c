"""The one typed configuration of a run: data, task options, model and training settings.

Every section is a dataclass whose fields carry their type (the annotation), a default, a one-line help text and,
where it applies, a range.  :func:`coerce` turns a command-line string into the field's type, :func:`check_section`
checks a whole section, and both raise :class:`ConfigError` naming the flag, the expected type or range and the
value given.  The model section is the model's own config dataclass (:mod:`opformer.models`), checked the same way.
Why plain dataclasses and not a configuration library: see ``docs/training.md`` ("The configuration").

This module imports no torch: parsing and checking a configuration is instant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import re
import types
import typing
from typing import Any, Literal, Optional, Union

__all__ = [
    "ConfigError",
    "SettingError",
    "FieldError",
    "DataConfig",
    "TrainConfig",
    "coerce",
    "check_section",
    "flag",
    "flag_words",
    "help_text",
    "suggest",
    "opt",
    "RESAMPLE",
]

#: where a loaded model runs on a grid other than its training grid: "auto" (on the training grid for models whose
#: layers act on grid cells), "always" (on the training grid), "never" (on the data's grid)
RESAMPLE = ("auto", "always", "never")


class ConfigError(ValueError):
    """A preset name, a field or a value that is not valid; the message names the flag."""


class SettingError(ConfigError):
    """A value that is not valid for a setting which Python code names by its argument or key (``times``) and the
    command line by its flag (``--times``): the message names the argument, :attr:`cli` is the same message naming
    the flag, which the command line prints."""

    def __init__(self, message: str, cli: str):
        super().__init__(message)
        self.cli = cli


class FieldError(ConfigError):
    """A value of a config section's field that is not valid (:func:`check_section`).  The message names the field by
    its flag, as the command line sets it; ``key`` is its ``section.field`` and ``problem`` what is wrong with the
    value, so that a value read from a YAML file can be named by its key there (:attr:`in_file`)."""

    def __init__(self, message: str, key: str, problem: str):
        super().__init__(message)
        self.key = key
        self.problem = problem

    @property
    def in_file(self) -> str:
        return f"{self.key}: {self.problem}"


class OpformerWarning(UserWarning):
    """A note about what was done with the user's data or model (a grid resampled, modes clipped); the command line
    prints it as one line."""


@contextlib.contextmanager
def one_line_warnings():
    """For the commands: our own warnings (data, resume notes) as one line each, ``opformer: warning: ...``; others
    as Python shows them."""
    import sys
    import warnings
    from pathlib import Path

    package = str(Path(__file__).resolve().parent)
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        ours = str(Path(filename).resolve()).startswith(package) and issubclass(category, UserWarning)
        if ours or issubclass(category, OpformerWarning):  # the latter points at the caller's line
            print(f"opformer: warning: {message}", file=file or sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def opt(default: Any, help: str, *, min: Any = None, max: Any = None, above: Any = None, choices=None):
    """A dataclass field with a help text and an optional range (``min <= v``, ``v <= max``, ``v > above``)."""
    meta = {"help": help, "min": min, "max": max, "above": above, "choices": choices}
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def flag(name: str) -> str:
    """The command-line flag of a field name: ``n_train`` -> ``--n-train``, ``path`` -> ``--data``."""
    name = name.split(".")[-1].replace("-", "_")
    return _ALIASES.get(name, "--" + name.replace("_", "-"))


_ALIASES = {"path": "--data", "test_path": "--test-data"}


def flag_words(text: str, names) -> str:
    """``text``, a message naming settings by their keys, with their flags instead: every ``key=value`` and every key
    of several words anywhere, a one-word key (possibly a plain word elsewhere) where it begins the text
    (``d_model=30 must be divisible by n_heads=4`` -> ``--d-model 30 must be divisible by --n-heads 4``)."""
    for name in sorted(names, key=len, reverse=True):  # grid_size before size
        key = re.escape(name)
        text = re.sub(rf"(?<![\w-]){key}=", lambda m: flag(name) + " ", text)
        text = re.sub(rf"(?<![\w-]){key}\b" if "_" in name else rf"^{key}\b", lambda m: flag(name), text)
    return text


def nearest(word: str, options, helps: Optional[dict] = None) -> Optional[str]:
    """The field ``word`` most likely meant: one whose help mentions its words, else the nearest name, else None."""
    words = word.replace("-", " ").replace("_", " ").lower()
    if helps:
        hits = [name for name, text in helps.items() if words and words in text.lower()]
        if hits:
            return hits[0]
    near = difflib.get_close_matches(word.replace("-", "_"), list(options), n=1, cutoff=0.6)
    return near[0] if near else None


def suggest(word: str, options, helps: Optional[dict] = None) -> str:
    """A 'did you mean' hint naming the flag of :func:`nearest` (empty when nothing is near)."""
    near = nearest(word, options, helps)
    return f"; did you mean {flag(near)}?" if near else ""


# --- types ------------------------------------------------------------------------------------------------------------
def _args(tp) -> tuple:
    return typing.get_args(tp)


def _is_union(tp) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _describe(tp) -> str:
    if tp is Any:
        return "any value"
    if _is_union(tp):
        parts = [_describe(a) for a in _args(tp) if a is not type(None)]
        text = " or ".join(parts)
        return text + (" or null" if type(None) in _args(tp) else "")
    if typing.get_origin(tp) is Literal:
        choices = _args(tp)
        return repr(choices[0]) if len(choices) == 1 else "one of " + ", ".join(repr(a) for a in choices)
    if typing.get_origin(tp) in (list, tuple):
        return "a comma-separated list"
    if typing.get_origin(tp) is dict or tp is dict:
        return "a mapping (key=value,key=value)"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, str(tp))


def _from_text(text: str, tp) -> Any:
    """A command-line string as a value of type ``tp`` (raises ValueError when it is not one)."""
    low = text.strip().lower()
    if tp is Any:
        for cast in (int, float):
            try:
                return cast(text)
            except ValueError:
                pass
        return None if low in ("null", "none") else text
    if _is_union(tp):
        members = _args(tp)
        if type(None) in members and low in ("null", "none", ""):
            return None
        for member in members:  # int before float: "3" is an int where both are allowed
            if member is type(None):
                continue
            try:
                return _from_text(text, member)
            except ValueError:
                continue
        raise ValueError(text)
    if typing.get_origin(tp) is Literal:
        for choice in _args(tp):
            if str(choice) == text.strip():
                return choice
        raise ValueError(text)
    if typing.get_origin(tp) in (list, tuple):
        (inner,) = _args(tp)[:1] or (str,)
        if not text.strip():
            return []
        parts = [part.strip() for part in text.split(",")]
        if not all(parts):  # "a,,u" or "a,u,": a name left out, not a shorter list
            raise ValueError(text)
        return [_from_text(part, inner) for part in parts]
    if typing.get_origin(tp) is dict or tp is dict:
        inner = _args(tp)[1] if len(_args(tp)) == 2 else Any
        out = {}
        for part in filter(None, (part.strip() for part in text.split(","))):
            key, eq, value = part.partition("=")
            if not eq or not key.strip():
                raise ValueError(text)
            out[key.strip()] = _from_text(value.strip(), inner)
        return out
    if tp is bool:
        if low in ("true", "yes", "1", "on"):
            return True
        if low in ("false", "no", "0", "off"):
            return False
        raise ValueError(text)
    if tp is int:
        return int(text)
    if tp is float:
        return float(text)
    if tp is str:
        return text
    raise ValueError(text)


def _matches(value: Any, tp) -> bool:
    if tp is Any:
        return True
    if _is_union(tp):
        return any(_matches(value, a) for a in _args(tp))
    if tp is type(None):
        return value is None
    if typing.get_origin(tp) is Literal:
        return value in _args(tp)
    if typing.get_origin(tp) in (list, tuple):
        inner = _args(tp)[0] if _args(tp) else Any
        return isinstance(value, (list, tuple)) and all(_matches(v, inner) for v in value)
    if typing.get_origin(tp) is dict or tp is dict:
        kinds = _args(tp) if len(_args(tp)) == 2 else (Any, Any)
        return isinstance(value, dict) and all(_matches(k, kinds[0]) and _matches(v, kinds[1])
                                               for k, v in value.items())
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def coerce(cls, name: str, value: Any, where: str = "") -> Any:
    """``value`` (a command-line string or a YAML value) for field ``name`` of dataclass ``cls``, typed and checked.

    ``where`` names the flag in messages (default ``--name``)."""
    tp = _hints(cls)[name]
    where = where or flag(name)
    # a string where any value goes (``scale``) is read as a number or null where it is one: "--scale null", "0.5"
    if isinstance(value, str) and (not _matches(value, tp) or tp in (int, float, bool) or tp is Any):
        try:
            value = _from_text(value, tp)
        except ValueError:
            raise ConfigError(f"{where}: expected {_describe(tp)}, got {value!r}") from None
    if isinstance(value, int) and not isinstance(value, bool) and _matches(value, tp) is False and _matches(1.0, tp):
        value = float(value)
    if isinstance(value, tuple):
        value = list(value)
    if not _matches(value, tp):
        raise ConfigError(f"{where}: expected {_describe(tp)}, got {value!r}")
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    _check_range(field, value, where)
    return value


def _check_range(field: dataclasses.Field, value: Any, where: str) -> None:
    meta = field.metadata or {}
    if value is None or isinstance(value, (bool, str, list, dict)):
        if meta.get("choices") is not None and value is not None and value not in meta["choices"]:
            raise ConfigError(f"{where}: expected one of {', '.join(map(str, meta['choices']))}, got {value!r}")
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: must be a finite number, got {value!r}")
    lo, hi, above = meta.get("min"), meta.get("max"), meta.get("above")
    if lo is not None and value < lo:
        raise ConfigError(f"{where}: must be >= {lo}, got {value!r}")
    if hi is not None and value > hi:
        raise ConfigError(f"{where}: must be <= {hi}, got {value!r}")
    if above is not None and not value > above:
        raise ConfigError(f"{where}: must be > {above}, got {value!r}")


def check_section(cls, values: dict, section: str) -> Any:
    """Build dataclass ``cls`` from ``values`` with every field typed and range-checked; unknown keys are refused."""
    if not isinstance(values, dict):  # a YAML list or a single value where the section's fields belong
        raise ConfigError(f"{section}: expected a mapping of field: value, got {value_kind(values)}")
    names = [f.name for f in dataclasses.fields(cls)]
    helps = {f.name: help_text(cls, f) for f in dataclasses.fields(cls)}
    out = {}
    for key, value in values.items():
        if key not in names:
            near = nearest(key, names, helps)
            raise SettingError(f"unknown field {section}.{key}" + (f"; did you mean {section}.{near}?" if near else ""),
                               f"unknown field {section}.{key}{suggest(key, names, helps)}")
        where = flag(key)
        try:
            out[key] = coerce(cls, key, value, where)
        except ConfigError as exc:  # coerce's messages read "WHERE: PROBLEM"
            text = str(exc)
            problem = text[len(where) + 2:] if text.startswith(f"{where}: ") else text
            raise FieldError(text, f"{section}.{key}", problem) from None
    return cls(**out)


def value_kind(value: Any) -> str:
    """What a YAML value is, in a few words, for a message: ``a list [1, 2]``, ``the text 'abc'``."""
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    kind = ("a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict)
            else "the text" if isinstance(value, str) else "the value")
    return f"{kind} {shown}"


def help_text(cls, field: Union[str, dataclasses.Field]) -> str:
    """The one-line help of ``field`` (a name or a Field) of dataclass ``cls``: the field's ``metadata["help"]`` (the
    fields made by :func:`opt`), else its entry in a ``FIELD_HELP`` class attribute, looked up along the MRO with the
    most derived class first (the model configs: :mod:`opformer.models` does not import this module); "" if none."""
    cls = cls if isinstance(cls, type) else type(cls)
    if isinstance(field, str):
        field = {f.name: f for f in dataclasses.fields(cls)}[field]
    text = (field.metadata or {}).get("help")
    if text:
        return text
    for klass in cls.__mro__:
        table = vars(klass).get("FIELD_HELP")
        if isinstance(table, dict) and table.get(field.name):
            return table[field.name]
    return ""


def field_help(cls) -> list[tuple[str, Any, str]]:
    """(name, default, help) of every field of a dataclass (help: :func:`help_text`)."""
    rows = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        rows.append((f.name, default, help_text(cls, f)))
    return rows


# --- the sections -----------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class DataConfig:
    """Where the data comes from and how it is split.

    Splits: the test samples are the last ``n_test`` of the training file (a count, or a fraction of the file), or
    all of ``test_path`` when a separate test file is given (``n_test`` then takes its last samples).  The first
    ``train_pool`` samples (default: all samples before the test samples) hold training and validation: validation is
    the last ``n_val`` of them (count or fraction), training the first ``n_train`` (default: the rest).
    """

    path: Optional[str] = opt(None, "training data file (.h5/.mat/.npz/.pt); null: generate and cache the default data")
    test_path: Optional[str] = opt(None, "test data file; null: the test samples are taken from the training file")
    keys: Optional[list[str]] = opt(None, "input and target array names in the files, e.g. x,y (null: the task's)")
    resolution: Optional[int] = opt(None, "grid points per axis to train at (a stride of the stored grid); null: "
                                          "the file's own", min=0)
    n_train: Optional[int] = opt(None, "training samples, the first of the pool (null: all the pool minus "
                                       "validation)", min=1)
    n_val: Union[int, float] = opt(0.1, "validation samples: a count, or a fraction (< 1) of the pool", min=0)
    n_test: Optional[Union[int, float]] = opt(None, "test samples, the last of the file: a count, or a fraction (< 1) "
                                                    "of it (null: 10% of the training file, or all of a test file)",
                                              min=0)
    train_pool: Optional[int] = opt(None, "the first train_pool samples of the training file hold training and "
                                          "validation (null: all before the test samples)", min=1)
    recipe: dict = opt({}, "overrides of the task's default generation recipe (used when path is null)")
    test_recipe: dict = opt({}, "overrides for a generated test file (used when path is null)")
    workers: Optional[int] = opt(None, "processes generating default data (null: all cores)", min=1)
    grid: Optional[Literal["node", "cell"]] = opt(
        None, "where the points of your 2D arrays sit in the square (darcy tasks): node = i/(n-1), both walls "
              "included; cell = the cell centres (i+1/2)/n (null: the coordinates the file stores, else cell for "
              ".mat files (the FNO data) and node for the others)")


@dataclasses.dataclass
class TrainConfig:
    """Optimizer, schedule, loss weights, model selection and the hardware a run uses."""

    epochs: int = opt(100, "training epochs", min=1)
    batch_size: int = opt(8, "training batch size (global: split over the processes)", min=1)
    eval_batch_size: int = opt(8, "validation and test batch size", min=1)
    lr: float = opt(1.0e-3, "peak learning rate of the one-cycle schedule", above=0.0)
    pct_start: float = opt(0.2, "fraction of the steps spent warming up the learning rate", above=0.0, max=1.0)
    div_factor: float = opt(1.0e4, "initial learning rate = lr / div_factor", above=0.0)
    final_div_factor: float = opt(1.0e4, "final learning rate = initial / final_div_factor", above=0.0)
    weight_decay: float = opt(0.0, "Adam weight decay", min=0.0)
    adam_beta2: float = opt(0.999, "Adam's second-moment decay; lower (0.98, 0.95) adapts faster to a sudden large "
                                   "gradient, a common remedy for loss spikes (beta1 follows the one-cycle schedule)",
                            min=0.0, max=0.9999)
    lr_scale: dict[str, float] = opt(
        {}, "learning-rate multipliers by the model's module name, e.g. encoder=0.25: the parameters under that "
            "module follow the same schedule at 0.25 times its rates (the longest matching name wins; the rest at 1)")
    grad_clip: float = opt(0.999, "gradient norm clip (0: none)", min=0.0)
    divergence_retries: int = opt(
        2, "times a non-finite loss restores the weights and optimizer of the epoch's start and halves the "
           "learning rate (the rest of the schedule too) before training stops (0: stop at once)", min=0)
    divergence_factor: float = opt(
        20.0, "blow-ups before NaN are restored from too, while retries are left: step losses above this many times "
              "the median of the last 50 steps on two steps in a row (one such step alone is kept and counted in "
              "metrics.json's loss_spikes, with the sample that caused it when one did), or an epoch's mean training "
              "loss above a quarter of it times the best epoch's; an epoch whose loss or validation error is above a "
              "tenth of it times the best is not kept as a restore point (0: only non-finite losses)", min=0.0)
    gamma: float = opt(0.1, "weight of the H1-seminorm regularizer (0: plain relative L2 loss)", min=0.0)
    augment: Literal["none", "d4"] = opt(
        "none", "symmetry augmentation of the training pairs: none, or d4 (one of the square's 8 rotations and "
                "reflections per sample and step; only for problems that have that symmetry, e.g. the darcy task's "
                "data: docs/training.md)")
    gamma_convention: Literal["reference", "plain"] = opt(
        "reference", "reference: weight sqrt(gamma*h) as the paper's code; plain: gamma")
    selection: Literal["val", "test"] = opt(
        "val", "model selection on the validation split (val), or on the test set (test: the paper's protocol, "
               "labelled so)")
    seed: int = opt(1127802, "random seed (model init, shuffling)", min=0)
    precision: Literal["32-true", "bf16-mixed", "16-mixed", "64-true"] = opt("32-true", "numeric precision")
    accelerator: Literal["auto", "cpu", "gpu", "cuda", "mps"] = opt("auto", "hardware")
    devices: Union[int, str] = opt(1, "devices (processes) per node, or 'auto'")
    strategy: Literal["auto", "ddp", "ddp_spawn", "ddp_find_unused_parameters_true"] = opt(
        "auto", "distribution strategy: auto (ddp with several devices), ddp, ddp_find_unused_parameters_true "
        "(ddp_spawn is refused: its processes' results do not come back)")
    num_nodes: int = opt(1, "nodes", min=1)
    num_workers: int = opt(0, "data loader worker processes", min=0)
    deterministic: Union[bool, Literal["auto"]] = opt(
        "auto", "deterministic kernels (same seed and machine, same result): true, false, or auto: on for the CPU "
                "(where they cost nothing), off on a GPU (there they replace fast kernels, e.g. the bilinear "
                "resampling of the 2D models, by slow ones)")
    cuda_graphs: Union[bool, Literal["auto"]] = opt(
        "auto", "replay the network's training forward and backward as CUDA graphs (one launch instead of hundreds "
                "of small kernels): true, false, or auto: on where they apply (one CUDA GPU, 32- or 64-bit "
                "precision); a network that cannot be captured is run as before, with a note (docs/training.md)")
    background_checkpoints: Union[bool, Literal["auto"]] = opt(
        "auto", "write checkpoint files in a background thread: the state is copied at once and training goes on "
                "while the file is written and synced to disk (still atomically): true, false, or auto: on a GPU, "
                "where a step is short and a slow disk's sync would stall the card")
    data_on_device: Union[bool, Literal["auto"]] = opt(
        "auto", "keep the training split on the GPU and gather each batch there, instead of gathering it on the host "
                "and copying it over at every step: true, false, or auto: on a CUDA GPU when the split takes at most a "
                "quarter of the device's free memory (docs/training.md)")
    checkpoint_every_n_steps: int = opt(0, "also write last.ckpt every N steps (0: at the end of each epoch only)",
                                        min=0)
    plot_samples: int = opt(4, "test samples shown in the prediction plot", min=0)
    limit_train_batches: Optional[Union[int, float]] = opt(None, "batches per epoch (a count or a fraction; "
                                                                 "null: all)", above=0)

    def __post_init__(self):
        # the values that go to Lightning's Trainer as they are, in the forms it takes: refused here in the user's
        # terms, before anything is read or written (Lightning would fail once the run directory exists)
        limit = self.limit_train_batches
        if isinstance(limit, float) and limit > 1.0 and not limit.is_integer():
            raise ConfigError(f"--limit-train-batches: a fraction must be <= 1.0, got {limit!r} (a count of batches "
                              "is a whole number)")
        if devices_value(self.devices) is None:
            raise ConfigError(f"--devices: expected a positive integer, a list of GPU indices (0,1), -1 or auto, "
                              f"got {self.devices!r}")


def devices_value(devices) -> Optional[Union[int, str, list]]:
    """``train.devices`` as Lightning takes it: a count (an integer; -1: every GPU), ``"auto"``, or a list of GPU
    indices (``"0,1"``, ``"1,"``); None for anything else.  (A count below 1 is refused with the hardware check.)"""
    if isinstance(devices, bool):
        return None
    if isinstance(devices, int):
        return devices if devices >= -1 else None
    if not isinstance(devices, str):
        return None
    text = devices.strip()
    if text == "auto":
        return text
    if re.fullmatch(r"-1|\d+", text):
        return int(text)
    parts = [part.strip() for part in text.split(",")]
    if "," in text and parts[-1] == "":  # "1,": the GPU of index 1 (not one device)
        parts = parts[:-1]
    if "," in text and parts and all(part.isdigit() for part in parts):
        return [int(part) for part in parts]
    return None
