"""``opformer train``, ``opformer eval``, ``opformer predict`` and ``opformer data prepare`` (argument parsing only;
the work is in :mod:`opformer.train.run`).  Every error ends in one line naming the flag, file or key."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import warnings
from pathlib import Path

from ..config import one_line_warnings as _one_line_warnings


def _progress_bar_wanted(args) -> bool:
    """A live progress bar only on a terminal: redirected to a log, the bar's redraws would fill the file, so the run
    writes one line per epoch there instead (as with --no-progress)."""
    if args.no_progress:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


def register(sub) -> None:
    from ..bundled import known_pretrained

    bundled = known_pretrained()  # named in the help of eval and predict
    p = sub.add_parser(
        "train",
        help="train an operator learner from a preset",
        add_help=False,
        allow_abbrev=False,
        description=(
            "Train PRESET (a preset or task name from `opformer train --list`, or a YAML file). Any config field can "
            "be set with --FIELD VALUE (--lr 5e-4, --n-train 200, --modes 8); `opformer train PRESET --help` lists them all "
            "with their values."
        ),
    )
    p.add_argument("preset", nargs="?", help="preset name or YAML file")
    p.add_argument("-h", "--help", action="store_true", help="show the preset's fields (or this help) and exit")
    p.add_argument("--list", action="store_true", help="list the presets and exit")
    p.add_argument("--data", help="training data file (.h5/.mat/.npz/.pt); default: generate and cache")
    p.add_argument("--test-data", help="test data file (default: the last samples of --data)")
    p.add_argument("--keys", help="input and target array names, INPUT,TARGET (e.g. x,y)")
    p.add_argument("--model", help="another model for the preset's task (e.g. fno, gt, ft-regular)")
    p.add_argument("--out", help="output directory (default runs/PRESET, runs/PRESET-MODEL with --model)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace the run in --out")
    p.add_argument("--no-progress", action="store_true",
                   help="one line per epoch instead of a progress bar (the default when the output is not a terminal, "
                        "e.g. a log file)")
    p.add_argument("--threads", type=int, help="torch threads per process (default: $OMP_NUM_THREADS, else the CPUs "
                                                 "this process may use (affinity, cgroup quota) divided among local "
                                                 "processes, less those other work keeps busy at the start)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.set_defaults(func=_train, accepts_extra=True, parser=p)

    e = sub.add_parser("eval", help="evaluate a trained model on a data file, at any resolution")
    e.add_argument("model", help="a checkpoint (runs/NAME/checkpoints/best.ckpt), a save_pretrained directory or a "
                                 f"bundled model's name ({bundled}; without --data: its test samples, "
                                 "regenerated)")
    e.add_argument("--data", help="data file: all its samples are the test set (default: the run's test split)")
    e.add_argument("--keys", help="input and target array names, INPUT,TARGET (default: the training keys)")
    e.add_argument("--resolution", type=int, help="evaluation grid, a stride of the stored one (e.g. 2048)")
    e.add_argument("--batch-size", type=int, default=32, help="samples per batch, >= 1 (default 32)")
    e.add_argument("--time-key", help="time-dependent models: the array or HDF5 attribute of the file's snapshot "
                                      "times (default: the training's --time-key, or t; a file storing none is read "
                                      "at the training times)")
    e.add_argument("--time-axis", help="time-dependent models: the axis of the file's trajectory array that holds "
                                       "the snapshots, 1 or -1 (last) (default: the training's)")
    e.add_argument("--initial-key", help="time-dependent models: the array (samples, *grid) of the states at t = 0, "
                                         "put before the snapshots (default: the training's; none: the first "
                                         "snapshot is the initial state)")
    _add_resample(e)
    e.add_argument("--out", help="output directory for metrics.json and plots/predictions.png (default: "
                                 "RUN/eval-GRID, RUN/eval-FILE-GRID with --data, FILE with its extension; "
                                 "./eval-NAME-FILE-GRID for a bundled model with --data; -resample-RESAMPLE added unless "
                                 "auto; -2, -3, ... added where the default holds the eval of another file of the "
                                 "same name or of other keys); a previous eval's output there is replaced, a "
                                 "directory holding a training run or another metrics.json is refused")
    e.set_defaults(func=_eval)

    q = sub.add_parser("predict", help="write a trained model's predictions for a data file")
    q.add_argument("model", help="a checkpoint, a save_pretrained directory or a bundled model's name "
                                 f"({bundled})")
    q.add_argument("--data", required=True, help="data file with the inputs (and targets, for per-sample errors)")
    q.add_argument("--keys", help="INPUT[,TARGET] array names (default: the training keys)")
    q.add_argument("--resolution", type=int, help="predict on a stride of the stored grid")
    q.add_argument("--batch-size", type=int, default=32, help="samples per batch, >= 1 (default 32)")
    _add_resample(q)
    q.add_argument("--out", required=True, help="output .npz: prediction, in the layout of the file's target array "
                                                "(else of its inputs), and rel_l2 per sample with targets (a previous "
                                                "prediction file there is replaced, any other file refused)")
    q.add_argument("--save-pretrained", metavar="DIR",
                   help="also write the model as DIR/config.json + DIR/model.safetensors (DIR: new or empty; a "
                        "model saved there before only with --overwrite)")
    q.add_argument("--overwrite", action="store_true",
                   help="replace a model saved before in --save-pretrained DIR")
    q.set_defaults(func=_predict)


def register_prepare(data_sub) -> None:
    p = data_sub.add_parser("prepare", help="generate and cache the default data files of training presets",
                            description="Generate (once) the default data files that `opformer train PRESET` uses and "
                                        "print their paths; presets with the same recipe share the cached files "
                                        "($OPFORMER_DATA or ~/.cache/opformer/data).  Interrupted generation resumes.")
    p.add_argument("presets", nargs="+", help="preset names (opformer train --list) or YAML files")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: all local cores)")
    p.set_defaults(func=_run_prepare)


def _fail(msg) -> int:
    """Print one error line (``msg``: a message, or the exception to describe; a missing array also says how to name
    others, a bad setting is named by its flag) and return the exit status 2."""
    from ..config import SettingError
    from ..pde.errors import MissingKeyError

    if isinstance(msg, MissingKeyError):
        msg = f"{msg}; name the arrays with --keys"
    elif isinstance(msg, SettingError):
        msg = msg.cli
    print(f"opformer: error: {msg}", file=sys.stderr)
    return 2


def _in_config_file(exc, preset: str):
    """``exc``, a setting refused while a run config was read from ``preset``, as the line to print: a setting of the
    user's YAML file named by its key there, not by the flag (a value given by a flag is checked, and refused by its
    flag, before the file's values are)."""
    from ..config import FieldError, SettingError

    if Path(str(preset)).suffix.lower() in (".yaml", ".yml"):
        if isinstance(exc, FieldError):
            return f"{preset}: {exc.in_file}"
        if isinstance(exc, SettingError):
            return f"{preset}: {exc}"
    return exc


def _errors():
    from ..config import ConfigError
    from ..pde.errors import DataError
    from ..tasks.artifact import LoadError

    return ConfigError, DataError, LoadError


def _run_prepare(args) -> int:
    from ..tasks.base import ensure_files
    from .config import load_preset, resolve

    for name in args.presets:
        try:
            run = resolve(load_preset(name))
            if run.data.path is not None:
                print(f"{name}: uses the given file {run.data.path}, nothing to generate")
                continue
            run.data.workers = args.workers
            files = ensure_files(run.task, run.data, run.options)
        except _errors() as exc:
            return _fail(_in_config_file(exc, name))
        except KeyboardInterrupt:
            print("interrupted: the finished samples are kept; run the same command to resume", file=sys.stderr)
            return 130
        test = files.get("test")
        print(f"{name}: train {files['train']}" + (f"\n{' ' * len(name)}  test  {test}" if test else ""))
    return 0


def _print_config(run, explicit, preset: str) -> int:
    """Print the config a run would train with: fitted to its data's grid when the data is at hand (the user's
    files, or the default data already in the cache), else the preset's values with a comment saying so."""
    import yaml

    from ..tasks.base import ensure_files
    from .run import fit_run

    try:
        files = ensure_files(run.task, run.data, run.options, generate=False)
        if files is None:
            head = ["# the default data is not generated yet, so this is the preset before it is fitted to the data's",
                    "# grid (training may change grid-dependent sizes and small-grid defaults, and says so);",
                    f"# `opformer data prepare {preset}` generates it, and then this shows the fitted config"]
        else:
            bundle = run.task.load(run.data, run.options, files, splits=("train",))  # what the fitting reads
            notes = fit_run(run, bundle, set(explicit))
            head = [f"# fitted to the data {files['train']}" + (":" if notes else " (nothing changed)")]
            head += [f"# note: {note}" for note in notes]
    except _errors() as exc:
        return _fail(exc)
    print("\n".join(head))
    from .run import absolute_data_paths

    print(yaml.safe_dump(absolute_data_paths(run.raw), sort_keys=False))  # the files found from any folder
    return 0


def _parse_extra(extra: list[str]) -> dict:
    from ..config import ConfigError
    from .config import FLAG_ONLY

    out, i = {}, 0
    while i < len(extra):
        tok = extra[i]
        if not tok.startswith("--") or tok == "--":
            raise ConfigError(f"unexpected argument {tok!r}; fields are set as --FIELD VALUE")
        key = tok[2:]
        if "=" in key:
            key, val = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(extra) or (extra[i + 1].startswith("--") and len(extra[i + 1]) > 2):
                val, i = FLAG_ONLY, i + 1  # a bare flag: true for a boolean field, else "needs a value"
            else:
                val, i = extra[i + 1], i + 2
        out[key] = val
    return out


#: the options whose value names a file, a directory or a model, with what to give: an empty value (``--out ""``,
#: ``--out "$DIR"`` with DIR unset) would otherwise be read as the current directory, or as not given at all
_NAMED_VALUES = {"model": "a checkpoint, a run directory or a model's name", "out": "a path",
                 "data": "a data file", "test_data": "a data file", "save_pretrained": "a directory"}


def _empty_value(args) -> str | None:
    """The error line for an option of ``args`` given as an empty (or blank) path or name, or None."""
    for name, what in _NAMED_VALUES.items():
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.strip():
            shown = f"--{name.replace('_', '-')}"
            if name == "model":  # train's --model picks a model of the task; eval's and predict's MODEL is loaded
                shown, what = ("--model", "a model of the preset's task (e.g. fno)") if hasattr(args, "preset") else (
                    "MODEL", what)
            return f"{shown} is empty ({value!r}); give {what}"
    return None


def _command_flags(parser) -> list[str]:
    """The options of ``opformer train`` itself (``--out``, ``--resume``, ...), which a mistyped field may have
    meant."""
    return [opt for action in parser._actions for opt in action.option_strings if opt.startswith("--")]


def _preset_after_flags(args) -> None:
    """Refuse ``opformer train --epochs 3 burgers-gt``, where the flag's value was read as the preset (the flags of
    the config fields are not known before the preset is), in one line that shows the order the command takes."""
    from ..config import ConfigError
    from .config import load_preset

    for i, tok in enumerate(args.extra):
        if tok.startswith("-") or not (i and args.extra[i - 1].startswith("--") and "=" not in args.extra[i - 1]):
            continue  # a preset left among the flags follows a flag whose value was taken as the preset
        try:
            load_preset(tok)
        except ConfigError:
            continue
        flag = args.extra[i - 1]
        raise ConfigError(f"{args.preset!r} is not a preset but the value of {flag}: the preset comes first, "
                          f"`opformer train {tok} {flag} {args.preset} ...`")


def _train(args: argparse.Namespace) -> int:
    from ..config import ConfigError
    from ..tasks import get_task, list_tasks
    from .config import apply_overrides, field_table, list_presets, load_preset, resolve

    try:  # the modules of OPFORMER_TASKS and installed packages' tasks first: a failure told in one line
        with _one_line_warnings():
            list_tasks()
    except ConfigError as exc:
        return _fail(exc)
    if args.list:
        print("presets:\n  " + "\n  ".join(list_presets()))
        tasks = [f"{name} (= {name}-{next(iter(get_task(name).models))})" for name in list_tasks()
                 if get_task(name).models]
        print("tasks (a task's name trains its first model; --model picks another):\n  " + "\n  ".join(tasks))
        return 0
    if not args.preset:
        args.parser.print_help()
        return 0 if args.help else 2
    ConfigError, DataError, LoadError = _errors()
    if empty := _empty_value(args):
        return _fail(empty)
    try:
        try:
            cfg = load_preset(args.preset)
        except ConfigError:
            _preset_after_flags(args)
            raise
        overrides = _parse_extra(args.extra)
        named = {"model": args.model, "data.path": args.data, "data.test_path": args.test_data,
                 "data.keys": args.keys}
        overrides = {**{k: v for k, v in named.items() if v is not None}, **overrides}
        cfg, explicit = apply_overrides(cfg, overrides, _command_flags(args.parser))
        if args.help:
            print(field_table(cfg))
            return 0
        run = resolve(cfg)
        if run.data.path is not None:  # a mistyped file name is told at once, not after the training stack loads
            from ..data.readers import resolve_paths

            for value in (run.data.path, run.data.test_path):
                if value is not None:
                    resolve_paths(value)
    except (ConfigError, DataError) as exc:
        return _fail(_in_config_file(exc, args.preset))
    if args.print_config:
        with _one_line_warnings():  # the data's notes (e.g. no stored times) as one line each, as a training says them
            return _print_config(run, explicit, args.preset)
    _quiet_lightning()
    from ..interrupt import clear_stop, request_stop
    from .module import DivergenceError
    from .run import RunDirError, train

    if args.threads is not None and args.threads < 1:
        return _fail(f"--threads must be >= 1, got {args.threads}")
    from .run import check_hardware

    try:
        world = check_hardware(run.train)
    except ConfigError as exc:
        return _fail(exc)
    _set_threads(args.threads, processes=max(1, world // max(1, run.train.num_nodes)),
                 devices=str(run.train.devices))

    out = args.out or f"runs/{run.name}"
    received = []

    def on_sigterm(signum, frame):  # a SIGTERM (a scheduler, `kill`) ends the run the way Ctrl-C does
        received.append(signum)
        request_stop(signum, frame)  # raises KeyboardInterrupt, and sets the flag the training checks if it is lost

    # an ignored SIGTERM stays ignored: the processes that the first of several starts leave stopping to it
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with _one_line_warnings():
            metrics = train(cfg, out, resume=args.resume, overwrite=args.overwrite, progress=_progress_bar_wanted(args),
                            explicit=frozenset(explicit))
    except (RunDirError, DivergenceError, DataError, ConfigError, LoadError) as exc:
        return _fail(exc)
    except BrokenPipeError:  # its output's reader went away (`| head`): stopped as other tools stop, told on stderr
        from ..cli import closed_pipe_status

        with contextlib.suppress(OSError):
            print(_interrupted(out, "stopped (its output was closed)"), file=sys.stderr)
        return closed_pipe_status()
    except OSError as exc:  # a full disk, a directory that vanished, a permission taken away
        return _fail(_os_error(exc, out))
    except KeyboardInterrupt:
        print(_interrupted(out, "terminated" if received else "interrupted"), file=sys.stderr)
        return 128 + (received[0] if received else signal.SIGINT)
    except RuntimeError as exc:
        if not _peer_lost(exc):
            raise
        return _fail(_interrupted(out, "stopped, the connection to another process of this run lost (it ended "
                                       "or was killed, e.g. out of memory; its own output or the system log says why)"))
    finally:
        if previous is not signal.SIG_IGN:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        clear_stop()
    if metrics.get("plots") is not None:
        use = "opformer.load / opformer rollout" if "trajectories" in metrics else "opformer.load / opformer predict"
        print(
            f"\n{run.name}: test relative L2 = {metrics['test_rel_l2']:.4e} "
            f"(validation {metrics['val_rel_l2']:.4e}, {metrics['epochs']} epoch{'' if metrics['epochs'] == 1 else 's'}, "
            f"{metrics['seconds']:.0f} s, "
            f"{metrics['parameters']:,} parameters)\n"
            f"model:   {out}/{metrics['best_checkpoint']}   ({use})\n"
            f"metrics: {out}/metrics.json\nplots:   " + "\n         ".join(f"{out}/{p}" for p in metrics["plots"])
        )
    return 0


#: what torch's process-group backends say when a peer process is gone (gloo's TCP pairs, NCCL's abort)
_PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "NCCL communicator was aborted",
              "remote process exited or there was a network error")


def _peer_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective of a multi-process run failing because another process went away (killed,
    out of memory): torch raises it as a RuntimeError with the backend's message (by the time it reaches the
    command, Lightning has taken the process group down)."""
    text = str(exc)
    return any(backend in text for backend in ("gloo", "NCCL")) and any(part in text for part in _PEER_LOST)


def _count(n: int, one: str, many: str = "") -> str:
    """``n`` and ``one`` or ``many`` (default ``one`` + "s") as n asks: "1 sample", "3 trajectories"."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def _os_error(exc: OSError, out: str) -> str:
    """The one line for a training that the system stopped: the file it could not write (a checkpoint, the config,
    the metrics) or read, and the system's reason; for a full disk, how to go on once there is space."""
    from ..cli import write_error_line

    line = write_error_line(exc, Path(out) / "checkpoints" / "last.ckpt")
    return line or f"{f'{exc.filename}: ' if exc.filename else ''}{exc.strerror or exc}"


def _interrupted(out: str, how: str) -> str:
    """Where the interrupted run's last checkpoint is and how to continue from it."""
    from pathlib import Path

    last = Path(out) / "checkpoints" / "last.ckpt"
    if not last.exists():
        return f"{how} before the first checkpoint: nothing to resume in {out}; run the command again to start over"
    try:
        from ..tasks.artifact import read_checkpoint
        from .module import checkpoint_loader_state

        ck = read_checkpoint(last)
        inside = checkpoint_loader_state(ck) or {}
        if inside.get("batches"):  # written inside an epoch (checkpoint_every_n_steps): the resume goes on there
            epochs = f" (epoch {inside['epoch']}, after {inside['batches']} of its batches)"
        else:
            epochs = f" (after {_count(int(ck['epoch']) + 1, 'epoch')})"
    except Exception:  # noqa: BLE001 - the epoch is informative only
        epochs = ""
    return (f"{how}: the last checkpoint is {last}{epochs}; continue from it with the same command and --resume "
            f"(--out {out})")


def _set_threads(requested, processes: int = 1, devices: str = "1") -> int:
    """Torch threads for this process: ``--threads``, else ``$OMP_NUM_THREADS``, else the CPUs it may use shared
    among the local processes (torchrun, or the ``processes`` per node that Lightning starts for ``--devices``),
    or, for one process, less the CPUs other work keeps busy at the start; printed (by the first process), with a
    warning when the machine is already loaded beyond its CPUs or the local processes' threads exceed them.  With
    several processes the count is put in ``$OMP_NUM_THREADS`` as well: Lightning would otherwise replace it with
    its own share of the CPUs, and the processes it starts read it from there."""
    import os

    from ..threads import TRAIN_ADVICE, apply_threads, available_cpus, choose_threads

    local = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0) or max(1, processes)
    if requested is None and os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
        requested = max(1, int(os.environ["OMP_NUM_THREADS"]))  # the user's explicit setting
    if requested is None and local > 1:
        requested = max(1, choose_threads()[0] // local)
    # one process choosing for itself: leave out the CPUs that other work keeps busy now
    chosen = choose_threads(requested, avoid_busy=requested is None)
    advice = TRAIN_ADVICE if chosen[0] > 1 else "training will be slower than this machine can do"
    from .run import _is_rank_zero

    first = _is_rank_zero()
    log = (lambda line: print(line.replace("# ", "", 1), flush=True)) if first else None
    n = apply_threads(chosen=chosen, log=log, advice=advice)
    if local > 1:
        os.environ["OMP_NUM_THREADS"] = str(n)
        cpus = available_cpus()[0]
        if first and local * n > cpus:
            if cpus >= local:  # fewer threads each fit
                fix = f"--threads {cpus // local}" + (f", or at most {cpus // n} processes" if cpus // n > 1 else "")
            else:
                fix = f"at most {cpus} processes" if cpus > 1 else "one process"
            print(f"warning: --devices {devices}: {local} processes of {n} thread{'s' if n > 1 else ''} on {cpus} "
                  f"CPU{'s' if cpus > 1 else ''}: they take turns on the CPUs and wait for each other at every step; "
                  f"use {fix} here", flush=True)
    return n


def _quiet_lightning() -> None:
    """Keep Lightning's banner lines (accelerator tips, advertisements) and a known deprecation notice off the
    terminal; warnings and errors still show."""
    import logging
    import warnings

    import lightning.pytorch  # noqa: F401  (it sets its loggers to INFO when imported)

    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # a step skipped after a non-finite loss is announced by our own note (train.divergence_retries)
    warnings.filterwarnings("ignore", message=r"`training_step` returned `None`.*")
    # small data sets: fewer batches than the logging interval is expected, the epoch metrics are still logged
    warnings.filterwarnings("ignore", message=r"The number of training batches \(\d+\) is smaller than the logging.*")
    # the module's own batch transfer (it skips batches already on the device) is meant to be the one used
    warnings.filterwarnings("ignore", message=r"You have overridden `transfer_batch_to_device` in `LightningModule`.*")
    # --resume continues in the run's own directories: the earlier metrics.csv is kept as metrics-<k>.csv before
    # the logger starts, so Lightning's "previous log files will be deleted" and "not empty" notices are wrong there
    warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty.*")
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty.*")
    # torch's notice about the gather that Lightning's all_gather calls, once per process of a multi-process run
    warnings.filterwarnings("ignore", message=r"torch\.distributed\.nn\.functional\.all_gather is deprecated.*")


def _add_resample(parser) -> None:
    from ..config import RESAMPLE

    parser.add_argument("--resample", choices=RESAMPLE, default="auto",
                        help="on a grid other than the training grid: auto runs models whose layers act on grid cells "
                             "(2D transformers, U-Net, scOT, ...) on their training grid, inputs interpolated to it "
                             "and predictions back; always: every model; never: none (default auto)")


def _keys(text):
    """--keys as a list of array names (None when not given); a value naming none is refused, not read as the
    default keys."""
    if text is None:
        return None
    keys = [k.strip() for k in text.split(",")]
    if not all(keys):  # "" or "a,,u": a name left out
        from ..config import ConfigError

        raise ConfigError(f"--keys needs INPUT or INPUT,TARGET array names, got {text!r}")
    return keys


def _eval(args: argparse.Namespace) -> int:
    from ..allocator import keep_freed_memory
    from ..tasks.pretrained import check_error, pretrained_card, pretrained_path
    from .run import evaluate

    keep_freed_memory()  # batch after batch of the same size: no page faults (opformer/allocator.py)
    if empty := _empty_value(args):
        return _fail(empty)
    if args.batch_size < 1:
        return _fail(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.out is not None:
        from .run import foreign_eval_out

        foreign = foreign_eval_out(Path(args.out))
        if foreign is not None:
            return _fail(f"--out {args.out} {foreign}: its files would be replaced; give another directory")

    if args.data is None and not Path(args.model).exists() and pretrained_path(args.model) is not None:
        # a bundled model without --data: its recorded test samples, regenerated from their recipe
        given = [name for name, value in (("--out", args.out), ("--resolution", args.resolution),
                                          ("--keys", args.keys), ("--time-key", args.time_key),
                                          ("--time-axis", args.time_axis), ("--initial-key", args.initial_key))
                 if value is not None]
        given += ["--batch-size"] * (args.batch_size != 32) + ["--resample"] * (args.resample != "auto")
        if given:
            return _fail(f"{args.model} without --data checks its recorded test samples at their recorded grid and "
                         f"writes nothing, so it takes no {', '.join(given)}: give --data FILE to evaluate with them")
        check = pretrained_card(args.model)["check"]
        try:
            err = check_error(args.model, workers=None)
        except _errors() as exc:
            return _fail(exc)
        print(f"test relative L2 of {args.model}: {err:.4e} on samples [{check['start']}, {check['stop']}) of its "
              f"test recipe, regenerated (recorded {check['test_rel_l2']:.4e})")
        return 0
    try:
        with _one_line_warnings():
            m = evaluate(args.model, data=args.data, keys=_keys(args.keys), resolution=args.resolution, out=args.out,
                         batch_size=args.batch_size, resample=args.resample, time_key=args.time_key,
                         time_axis=args.time_axis, initial_key=args.initial_key)
    except _errors() as exc:
        return _fail(exc)
    grid = "x".join(map(str, m["resolution"]))
    n = m["n_test"]
    what = _count(n, "sample")
    if "n_trajectories" in m:  # a time-dependent model: its samples are (t_0, t_k) pairs of trajectories
        what = f"{_count(n, '(t_0, t_k) pair')} of {_count(m['n_trajectories'], 'trajectory', 'trajectories')}"
    print(f"test relative L2 on {grid}: {m['test_rel_l2']:.4e} ({what} of {m['data']})")
    print("plots: " + ", ".join(m["plots"]))
    return 0


def _predict(args: argparse.Namespace) -> int:
    from ..allocator import keep_freed_memory
    from .run import predict

    keep_freed_memory()
    if empty := _empty_value(args):
        return _fail(empty)
    if args.batch_size < 1:
        return _fail(f"--batch-size must be >= 1, got {args.batch_size}")
    out = Path(args.out)  # (predict refuses an --out it would write over before reading anything)
    if args.save_pretrained:
        from ..tasks.artifact import check_save_directory

        try:
            saved = check_save_directory(args.save_pretrained, overwrite=args.overwrite).resolve()
        except _errors() as exc:
            return _fail(exc)
        if saved == out.resolve() or saved in out.resolve().parents:
            return _fail(f"--out {out} is inside --save-pretrained {args.save_pretrained}, which holds only the "
                         "model; give another --out")

    try:
        with _one_line_warnings():
            s = predict(args.model, data=args.data, out=args.out, keys=_keys(args.keys), resolution=args.resolution,
                        batch_size=args.batch_size, resample=args.resample)
        if args.save_pretrained:
            from ..tasks.artifact import load

            load(args.model).save_pretrained(args.save_pretrained, overwrite=args.overwrite)
    except _errors() as exc:
        return _fail(exc)
    err = f", mean relative L2 {s['test_rel_l2']:.4e}" if "test_rel_l2" in s else ""
    print(f"wrote {s['out']}: {s['n']} predictions{err}")
    if args.save_pretrained:
        print(f"wrote {args.save_pretrained}/config.json and model.safetensors")
    return 0
