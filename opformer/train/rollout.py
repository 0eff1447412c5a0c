"""``opformer rollout``: a time-dependent model's predictions over time from the initial states of a trajectory file,
direct, autoregressive or mixed, with per-time errors (JSON and CSV), the error-vs-time plot, snapshot panels and
an animated GIF of one trajectory."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path
from typing import Optional

import numpy as np

from ..atomic import atomic_write_text, replacing
from .cli import _add_resample, _count, _fail, _one_line_warnings

__all__ = ["register", "rollout_file"]


def register(sub) -> None:
    r = sub.add_parser("rollout", help="roll a time-dependent model out over time on a trajectory file",
                       description="Predict u(t) from u(t_0) of every trajectory in --data: direct (one jump of "
                                   "tau = t - t_0), autoregressive (repeated steps of --step) or mixed (largest "
                                   "trained jumps first). Any t > 0, also beyond the training horizon.")
    r.add_argument("model", help="a checkpoint or a save_pretrained directory of a time-dependent task")
    r.add_argument("--data", required=True, help="trajectory file (samples, K+1, *grid): u(t_0) and the truth; "
                                                 "every trajectory of it, or only the run's test trajectories when "
                                                 "it is the file the model was trained on")
    r.add_argument("--keys", help="the trajectory array (default: the training key)")
    r.add_argument("--mode", choices=("direct", "autoregressive", "mixed"),
                   help="direct (the default), autoregressive (the default and only mode of a --history model) or "
                        "mixed")
    r.add_argument("--step", type=float, help="autoregressive step (default: the training snapshot spacing)")
    r.add_argument("--times", help="comma-separated times t - t_0 (default: the file's snapshot times)")
    r.add_argument("--time-key", help="the array (or HDF5 attribute) of the file's snapshot times (default: the "
                                      "training's, or t)")
    r.add_argument("--time-axis", help="the axis of the trajectory array that holds the snapshots: 1, or -1 (last) "
                                       "for (samples, *grid, K) (default: the training's)")
    r.add_argument("--initial-key", help="the array (samples, *grid) of the states at t = 0, put before the "
                                         "snapshots (default: the training's; none: the first snapshot is the "
                                         "initial state)")
    r.add_argument("--samples", type=int, help="use the first N >= 1 trajectories of the file (default: all)")
    r.add_argument("--show", type=int, default=0, help="trajectory shown in the panels and the GIF (default 0)")
    r.add_argument("--out", help="output directory (default: RUN/rollout-MODE on the run's own data file, "
                                 "RUN/rollout-FILE-MODE on another; -resample-RESAMPLE added unless auto; -2, -3, "
                                 "... where it holds the rollout of another file of that name or key): "
                                 "rollout.json, rollout.csv, predictions.npz and plots/")
    _add_resample(r)
    r.set_defaults(func=_run)


def _run(args) -> int:
    from ..config import ConfigError
    from ..pde.errors import DataError
    from ..tasks.artifact import LoadError

    try:
        times = None if args.times is None else [float(t) for t in args.times.split(",") if t.strip()]
    except ValueError:
        return _fail(f"--times expects comma-separated numbers, got {args.times!r}")
    try:
        with _one_line_warnings():
            m = rollout_file(args.model, data=args.data, mode=args.mode, step=args.step, times=times, out=args.out,
                             key=args.keys, samples=args.samples, show=args.show, resample=args.resample,
                             time_key=args.time_key, time_axis=args.time_axis, initial_key=args.initial_key)
    except (ConfigError, DataError, LoadError) as exc:
        return _fail(exc)
    known = [(t, e) for t, e in zip(m["times"], m["rel_l2"]) if e is not None and t > 0]  # t = 0: u0 itself
    if m["n"] < m["n_available"]:  # --samples: the first of them, which the line says
        whose = "the run's" if m["trajectories"] == _OWN_TEST_TRAJECTORIES else "the file's"
        test = " test" if m["trajectories"] == _OWN_TEST_TRAJECTORIES else ""
        rolled = f"the first {m['n']} of {whose} {m['n_available']}{test} trajectories (--samples {m['n']})"
    else:
        rolled = f"{_count(m['n'], 'trajectory', 'trajectories')} ({m['trajectories']})"
    if known:
        bad = len(m["nonfinite_times"])
        unscored = sum(e is None for e in m["rel_l2"]) - bad
        verb = "has" if unscored == 1 else "have"
        beyond = (f"; {unscored} of the {len(m['times'])} times {verb} no truth in the file (predictions only)"
                  if unscored else "") + (f"; NaN or inf predictions (unscored) at {_count(bad, 'time', 'times')}: "
                                          f"{', '.join(f'{t:g}' for t in m['nonfinite_times'])}" if bad else "")
        print(f"{m['mode']} rollout of {rolled}: mean "
              f"relative L2 over time {m['mean_rel_l2']:.4e}, at t = {known[-1][0]:g}: {known[-1][1]:.4e}{beyond}")
    elif m["nonfinite_times"]:
        print(f"{m['mode']} rollout of {rolled}: NaN or inf predictions (unscored) at every time with a truth")
    elif all(t == 0 for t in m["times"]):
        print(f"{m['mode']} rollout of {_count(m['n'], 'trajectory', 'trajectories')} at t = 0 only: u(t_0) itself, "
              "nothing predicted")
    else:
        print(f"{m['mode']} rollout of {_count(m['n'], 'trajectory', 'trajectories')} at times the file does not "
              "store: predictions only")
    print(f"wrote {m['out']}/rollout.json, rollout.csv, predictions.npz and plots/ ({', '.join(m['plots'])})")
    return 0


def _check_layout(data, key: str, src, dim: int) -> None:
    """A trajectory array of a ``dim``-D model: (samples, times, *grid) or (samples, times, *grid, 1), as read
    (``src``: :func:`opformer.tasks.trajectories.open_trajectories`)."""
    from ..pde.errors import DataError
    from ..tasks.trajectories import shown_shape

    shape = src.shapes[key]
    if len(shape) == dim + 2 or (len(shape) == dim + 3 and shape[-1] == 1):
        return
    grid = "n" if dim == 1 else ", ".join(["n"] * dim)
    raise DataError(f"{data}: key {key!r} has shape {shown_shape(src, key)}; this {dim}D model rolls out trajectory "
                    f"arrays (samples, times, {grid}) or (samples, times, {grid}, 1)")


def rollout_file(model, *, data, mode: Optional[str] = None, step: Optional[float] = None, times=None, out=None,
                 key=None, samples: Optional[int] = None, show: int = 0, resample: str = "auto",
                 time_key: Optional[str] = None, time_axis=None, initial_key: Optional[str] = None) -> dict:
    """Roll ``model`` out on the trajectories of ``data``; writes the errors and plots into ``out``.  ``mode``:
    direct, autoregressive or mixed (None: direct, autoregressive for a ``--history`` model, which steps only).
    ``time_key``: the array or HDF5 attribute of the file's snapshot times; ``time_axis``: the axis of the
    trajectory array that holds the snapshots; ``initial_key``: the array of the states at t = 0 (``"none"``: the
    first snapshot is the initial state); each by default the training's."""
    from ..config import ConfigError, OpformerWarning, SettingError
    from ..pde.errors import DataError
    from ..tasks.artifact import count_argument, load
    from ..tasks.trajectories import check_initial, even_step, file_layout, open_trajectories, rollout_times
    from .run import _ROLLOUT_USER, locked_output

    for name, value, least in (("samples", samples, 1), ("show", show, 0)):
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value < least:
            raise SettingError(f"{name} must be >= {least}, got {value}", f"--{name} must be >= {least}, got {value}")
        if value is not None:
            count_argument(name, value, least)  # a bool, a string or a float: refused, never converted
    if out is not None:  # checked before the model is loaded and the data read (a file there is refused too)
        from .run import _check_not_running, _check_writable, training_run_files

        out = Path(out)
        _check_writable(out, error=ConfigError)
        held = training_run_files(out)
        if not held and (out / "predictions.npz").exists() and not (out / "rollout.json").exists():
            held = ["a predictions.npz that no rollout wrote"]
        if held:
            raise SettingError(f"out {out} holds {', '.join(held)}: its files would be replaced; give another "
                               "directory", f"--out {out} holds {', '.join(held)}: its files would be replaced; give "
                               "another directory")
        _check_not_running(out, ConfigError, _ROLLOUT_USER)
    predictor = load(model, resample=resample)
    info = predictor.artifact.get("info") or {}
    if not predictor.time_dependent:
        raise ConfigError(f"{model}: the model of task {predictor.task.name} is not time-dependent")
    if times is not None:  # numbers, whatever the rest of the rollout's checks say of them
        try:
            times = [float(t) for t in np.asarray(times, dtype=np.float64).reshape(-1)]
        except (TypeError, ValueError):
            raise SettingError(f"times must be numbers (finite, ascending, > 0), got {times!r}"[:200],
                               f"--times must be numbers (finite, ascending, > 0), got {times!r}"[:200]) from None
    # checked before the file is read (no note ahead of the refusal); the mode resolved to its default
    mode = predictor.rollout_arguments(times, mode, step, file_times=True)[1]
    if key and len([k for k in str(key).split(",") if k.strip()]) > 1:  # as training takes it: one array
        raise SettingError(f"keys needs the one trajectory array of the file, got {key}",
                           f"--keys needs the one trajectory array of the file, got {key}")
    key = key or info.get("key") or predictor.artifact["keys"][0]
    # an empty --time-key is refused by the options themselves
    options = file_layout(predictor.options, time_key=time_key, time_axis=time_axis, initial_key=initial_key)
    src = open_trajectories(data, key, options)
    _check_layout(data, key, src, predictor.task.dim)
    check_initial(src)
    indices, which = _trajectories(predictor.run_config, Path(data), src.n_samples)
    available = len(indices)  # --samples takes the first of these
    if samples is not None:
        if samples > len(indices):
            warnings.warn(f"--samples {samples}: {data} has {_count(len(indices), 'trajectory', 'trajectories')} "
                          f"to roll out ({which}); all are used", OpformerWarning, stacklevel=2)
        indices = indices[: int(samples)]
    n = len(indices)
    if n < 1 or not 0 <= show < n:
        used = _count(n, "trajectory is", "trajectories are") + (f" used (--samples {samples})" if samples is not None
                                                                  else f" rolled out ({which})")
        usable = "0" if n == 1 else f"0 to {n - 1}"
        raise ConfigError(f"--show {show} is out of range: {used}; give --show {usable}" if n else
                          f"--show {show}: no trajectory is rolled out")
    traj = src.read(key, indices)
    channel = traj.ndim == predictor.task.dim + 3  # (samples, times, *grid, 1): the predictions are written so too
    if channel:
        traj = traj[..., 0]
    file_times = rollout_times(data, src, key, traj.shape[1], options, info["times"], named=time_key is not None)
    rel = file_times - file_times[0]
    h = predictor.history
    want = rel[h:] if times is None else np.asarray(times, dtype=np.float64)
    if not len(want):
        raise DataError(f"{data}: key {key!r} holds {_count(traj.shape[1], 'snapshot', 'snapshots')} per trajectory, "
                        f"shape {tuple(src.shapes[key])}: no later time to roll out to"
                        + (f" after the {h} that a model with --history {h} takes" if h > 1 else "")
                        + "; give --times T1,T2,... for predictions only")
    if h > 1:
        _check_history_times(data, options.time_key, rel, want if times is None else None, h, float(info["step"]))
    if h > 1 and times is not None and not np.all(want > rel[h - 1]):
        raise SettingError(
            f"times of a model with history {h} lie after its {h} given snapshots (t > {rel[h - 1]:g}), got {times}",
            f"--times of a model with --history {h} lie after its {h} given snapshots (t > {rel[h - 1]:g}), got "
            f"{','.join(f'{t:g}' for t in times)}")
    if h > 1:  # the FNO protocol: the first h snapshots in, the rest predicted one step at a time
        pred = predictor.rollout(traj[:, :h], want - rel[h - 1], mode=mode, step=step)
    else:
        pred = predictor.rollout(traj[:, 0], want, mode=mode, step=step)  # a leading t = 0: u0 itself
    if mode != "direct" and step is None and h == 1 and even_step(info["times"]) is None:  # after the rollout's checks
        warnings.warn(f"the training snapshots are unevenly spaced: the {mode} steps are {info['step']:g}, the smallest "
                      "spacing (--step sets another)", OpformerWarning, stacklevel=2)
    truth_idx = [int(np.argmin(np.abs(rel - t))) if np.min(np.abs(rel - t)) < 1e-6 * max(1.0, t) else None
                 for t in want]
    errors = []
    for k, idx in enumerate(truth_idx):
        if idx is None:
            errors.append(None)
            continue
        if want[k] == 0:  # u(t_0) itself, given, not predicted
            errors.append(0.0)
            continue
        # in float64 with only an all-zero truth bounded: the error is the same at any scale of the data that
        # float32 holds (an absolute clamp at 1e-12 misreported data of scale 1e-15)
        truth = traj[:, idx].reshape(n, -1).astype(np.float64)
        diff = pred[:, k].reshape(n, -1).astype(np.float64) - truth
        errors.append(float(np.mean(np.linalg.norm(diff, axis=1)
                                    / np.linalg.norm(truth, axis=1).clip(np.finfo(np.float64).tiny))))
    horizon = float(info.get("max_lead", rel[-1]))
    # a NaN or inf prediction has no error: null in rollout.json (strict JSON), its time listed under nonfinite_times
    nonfinite = [float(t) for t, e in zip(want, errors) if e is not None and not np.isfinite(e)]
    errors = [None if e is not None and not np.isfinite(e) else e for e in errors]
    # scored: the predicted times with a truth; t = 0 is u0 itself (error 0), kept in rel_l2 but in no mean
    scored = [(t, e) for t, e in zip(want, errors) if e is not None and t > 0]
    known = [e for _, e in scored]
    if out is None:
        own = which == _OWN_TEST_TRAJECTORIES
        from .run import distinct_output_folder

        out = distinct_output_folder(_default_out(Path(model), mode, None if own else Path(str(data)), resample),
                                     "rollout.json", {"data_path": str(Path(data).resolve()), "key": key})
    metrics = {"model": str(model), "data": str(data), "data_path": str(Path(data).resolve()), "key": key,
               "trajectories": which, "n_available": available, "mode": mode,
               # the training's snapshot spacing, a difference of stored times: 0.4, not 0.3999999999999999
               "step": _decimal(step or info.get("step")), "n": n,
               "times": [float(t) for t in want], "rel_l2": errors, "training_horizon": horizon,
               "mean_rel_l2": float(np.mean(known)) if known else None,
               "mean_rel_l2_in_horizon": _mean([e for t, e in scored if t <= horizon]),
               "mean_rel_l2_beyond_horizon": _mean([e for t, e in scored if t > horizon]),
               "nonfinite_times": nonfinite}
    with locked_output(out, "rollout"):  # a second rollout into out meanwhile is refused
        (out / "plots").mkdir(parents=True, exist_ok=True)
        with replacing(out / "predictions.npz", "wb") as fh:  # the predicted fields, for the user's own analysis
            layout = np.asarray(pred, dtype=np.float32)
            np.savez(fh, prediction=layout[..., None] if channel else layout, times=np.asarray(want, dtype=np.float64),
                     trajectories=np.asarray(indices, dtype=np.int64))
        atomic_write_text(out / "rollout.json", json.dumps(metrics, indent=2))
        with replacing(out / "rollout.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["time", "rel_l2"])
            for t, e in zip(want, errors):
                w.writerow([f"{t:g}", "" if e is None else f"{e:.6e}"])
        written = _plots(out / "plots", predictor, want, errors, horizon, mode, traj[show], pred[show], truth_idx,
                         data=data, trajectory=int(indices[show]))
    metrics["out"] = str(out)
    metrics["plots"] = written
    return metrics


def _check_history_times(data, time_key: str, rel: np.ndarray, want: Optional[np.ndarray], h: int,
                         step: float) -> None:
    """A model with a history of ``h`` snapshots (trained ``step`` apart) takes a file's first ``h`` snapshots as its
    input window, so they must be ``step`` apart; ``want``, the file's later times when the user gave no
    ``--times``, must then be multiples of ``step`` (one snapshot a call)."""
    from ..pde.errors import DataError

    gaps = np.diff(rel[:h])
    if not np.allclose(gaps, step, rtol=1e-6, atol=0.0):
        even = np.allclose(gaps, gaps[0], rtol=1e-6, atol=0.0)
        spacing = f"{gaps[0]:g}" if even else f"{gaps.min():g} to {gaps.max():g}"
        raise DataError(f"{data}: its first {h} snapshots are {spacing} apart (times {time_key!r}); this model with "
                        f"--history {h} was trained on snapshots {step:g} apart, one snapshot a call: its input window "
                        "would be spaced otherwise")
    for t in [] if want is None else want:
        if abs(t / step - round(t / step)) > 1e-6:
            raise DataError(f"{data}: its snapshot time {t:g} (times {time_key!r}) is not a multiple of the step "
                            f"{step:g} of this model with --history {h} (one snapshot a call): give --times at "
                            f"multiples of {step:g}")


_OWN_TEST_TRAJECTORIES = "the run's test trajectories"  # what _trajectories calls the run's own file's test split


def _trajectories(run: Optional[dict], data: Path, n_file: int) -> tuple[np.ndarray, str]:
    """The trajectories to roll out: the run's own test trajectories when ``data`` is the file the model was trained
    on (``run``: the training run's config, so that no training trajectory is scored), else all of the file."""
    from ..data.datasets import make_splits

    d = (run or {}).get("data") or {}
    own = bool(d.get("path")) and Path(d["path"]).resolve() == data.resolve()
    if own and not d.get("test_path"):
        split = make_splits(n_file, None, n_train=d.get("n_train"), n_val=d.get("n_val", 0.1),
                            n_test=d.get("n_test"), train_pool=d.get("train_pool"))
        return split["test"], _OWN_TEST_TRAJECTORIES
    if own:  # trained with --test-data: this file holds no test trajectory of the run
        from ..config import OpformerWarning

        warnings.warn(f"{data} is the file this model was trained on and holds none of its test trajectories (they are "
                      f"in {d['test_path']}, --test-data): the errors are on its training and validation trajectories",
                      OpformerWarning, stacklevel=3)
        return np.arange(n_file), "the run's training and validation trajectories"
    return np.arange(n_file), "all trajectories of the file"


def _mean(values):
    return float(np.mean(values)) if values else None


def _default_out(model: Path, mode: str, data: Optional[Path] = None, resample: str = "auto") -> Path:
    """RUN/rollout-MODE on the run's own trajectory file, RUN/rollout-FILE-MODE on another (``data``: its path, the
    file name with its extension, so that ns.h5 and ns.npz differ), with -resample-RESAMPLE unless it is auto."""
    from .run import file_part

    base = model.parent.parent if model.is_file() and model.parent.name == "checkpoints" else (
        model if model.is_dir() else model.parent)
    return base / (f"rollout-{file_part(data)}{mode}" + ("" if resample == "auto" else f"-resample-{resample}"))


def _decimal(x):
    """``x`` (a number or None) rounded to 12 significant digits: the decimal a difference of stored times stands
    for, without its binary rounding noise."""
    return None if x is None else float(f"{float(x):.12g}")


def _spread(ks: list, m: int) -> list:
    """Up to ``m`` of ``ks``, evenly spread from the first to the last."""
    return [ks[int(round(x))] for x in np.linspace(0, len(ks) - 1, min(m, len(ks)))] if ks else []


def _shown_frames(times, truth_idx) -> list:
    """The indices of the (up to four) times of snapshots.png, in order: spread over the times > 0 with a truth in
    the file, the last of them replaced by the last asked time when the rollout goes beyond the file (there is
    what a rollout past the data is for); the predictions alone when no time has a truth."""
    later = [k for k, t in enumerate(times) if t > 0]
    known = [k for k in later if truth_idx[k] is not None]
    beyond = [k for k in later if truth_idx[k] is None and (not known or k > known[-1])]
    if not known:
        return _spread(later, 4)
    if not beyond:
        return _spread(known, 4)
    return _spread(known, 3) + [beyond[-1]]


def _plots(folder: Path, predictor, times, errors, horizon, mode, truth, pred, truth_idx, data=None,
           trajectory: Optional[int] = None) -> list:
    """error_vs_time.png, snapshots.png (input, truth, prediction, error at up to four times; at times the file does
    not store, input and prediction), trajectory.gif; returns the names of the files written.  ``data``: the path of
    the trajectory file, whose name the titles give; ``trajectory``: the number in it of the trajectory shown
    (``trajectory 22 of ns.h5``).  t = 0 (u0 itself) is neither plotted nor shown."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation, PillowWriter

    times = [float(t) for t in times]
    file_name = Path(str(data)).name if data is not None else ""
    shown_name = " of ".join(part for part in (f"trajectory {trajectory}" if trajectory is not None else "",
                                               file_name) if part)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    pts = [(t, e) for t, e in zip(times, errors) if e is not None and t > 0 and np.isfinite(e) and e > 0]
    if pts:
        ax.semilogy(*zip(*pts), marker="o", ms=3, label=f"{mode}")
        low, high = min(e for _, e in pts), max(e for _, e in pts)
        if high < 10 * low:  # within a decade: plain numbers (0.9965), not 9.965 x 10^-1 on every minor tick
            from matplotlib.ticker import FormatStrFormatter

            ax.yaxis.set_major_formatter(FormatStrFormatter("%.4g"))
            ax.yaxis.set_minor_formatter(FormatStrFormatter("%.4g"))
    else:
        ax.text(0.5, 0.5, "no truth in the file at these times: predictions only", ha="center", va="center",
                transform=ax.transAxes, fontsize=9, color="0.3")
        ax.set_yticks([])
    ax.axvline(horizon, color="0.5", ls="--", lw=1, label="training horizon")
    ax.set_xlim(0, 1.04 * max([horizon] + times))  # every asked time, with or without a truth
    ax.set_xlabel("t - t_0")
    ax.set_ylabel("relative L2 error")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(f"{mode} rollout" + (f", mean over the trajectories ({file_name})" if file_name else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(folder / "error_vs_time.png", dpi=110)
    plt.close(fig)
    written = ["error_vs_time.png"]

    two_d = predictor.task.dim == 2
    later = [k for k, t in enumerate(times) if t > 0]
    shown = _shown_frames(times, truth_idx)
    if shown:
        fig, axes = plt.subplots(len(shown), 4 if two_d else 1, figsize=(13 if two_d else 7, 3 * len(shown)),
                                 squeeze=False)
        for row, k in enumerate(shown):
            true_k = truth[truth_idx[k]] if truth_idx[k] is not None else None
            if two_d:
                ref = pred[k] if true_k is None else true_k
                lim = _limit(ref)
                lim0 = _limit(truth[0])  # the initial state on its own scale (decay, growth)
                panels = [(truth[0], "u(t_0)", lim0), (true_k, f"truth t={times[k]:g}", lim),
                          (pred[k], f"prediction ({mode}) t={times[k]:g}{_nonfinite(pred[k])}", lim),
                          (None if true_k is None else pred[k] - true_k, "error",
                           None if true_k is None else _limit(pred[k] - true_k))]
                for ax, (img, title, v) in zip(axes[row], panels):
                    ax.set_xticks([])
                    ax.set_yticks([])
                    if img is None:
                        ax.text(0.5, 0.5, f"no truth in the file\nat t={times[k]:g}", ha="center", va="center",
                                transform=ax.transAxes, fontsize=9, color="0.3")
                        continue
                    im = ax.imshow(np.asarray(img).T, origin="lower", cmap="RdBu_r", vmin=-v, vmax=v,
                                   extent=(0, 1, 0, 1))
                    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
                    ax.set_title(title, fontsize=8)
            else:
                ax = axes[row, 0]
                x = np.arange(truth.shape[-1]) / truth.shape[-1]
                ax.plot(x, truth[0], color="0.6", ls="--", lw=1, label="u(t_0)")
                if true_k is not None:
                    ax.plot(x, true_k, color="k", lw=1.5, label=f"truth t={times[k]:g}")
                ax.plot(x, pred[k], color="C3", lw=1, label=f"prediction ({mode}) t={times[k]:g}{_nonfinite(pred[k])}")
                ax.legend(fontsize=7)
        if shown_name:
            fig.suptitle(f"{shown_name}, {mode} rollout", fontsize=10)
        fig.tight_layout()
        fig.savefig(folder / "snapshots.png", dpi=100)
        plt.close(fig)
        written.append("snapshots.png")

    frames = later or list(range(len(times)))
    fig, axes = plt.subplots(1, 2 if two_d else 1, figsize=(8 if two_d else 6, 3.6), squeeze=False)
    known = [truth[i] for i in truth_idx if i is not None]
    lim = _limit(np.asarray(known) if known else pred)  # no truth at the asked times: the predictions' own scale

    def draw(f):
        k = frames[f]
        i = truth_idx[k]
        for ax in axes[0]:
            ax.clear()
        if two_d:
            for ax, img, title in ((axes[0, 0], truth[i] if i is not None else None,
                                    "truth" if i is not None else "no truth in the file"),
                                   (axes[0, 1], pred[k], f"{mode} prediction{_nonfinite(pred[k])}")):
                ax.set_title(f"{title}, t = {times[k]:g}", fontsize=9)
                ax.set_xticks([])
                ax.set_yticks([])
                if img is not None:
                    ax.imshow(np.asarray(img).T, origin="lower", cmap="RdBu_r", vmin=-lim, vmax=lim,
                              extent=(0, 1, 0, 1))
        else:
            ax = axes[0, 0]
            x = np.arange(truth.shape[-1]) / truth.shape[-1]
            if i is not None:
                ax.plot(x, truth[i], color="k", lw=1.5, label="truth")
            ax.plot(x, pred[k], color="C3", lw=1, label=f"prediction{_nonfinite(pred[k])}")
            ax.set_ylim(-1.1 * lim, 1.1 * lim)
            ax.set_title(f"t = {times[k]:g}" + ("" if i is not None else " (no truth in the file)"), fontsize=9)
            ax.legend(fontsize=7, loc="upper right")
        return []

    if shown_name:
        fig.suptitle(shown_name, fontsize=9)
        fig.subplots_adjust(top=0.84)
    anim = FuncAnimation(fig, draw, frames=len(frames), blit=False)
    anim.save(folder / "trajectory.gif", writer=PillowWriter(fps=4), dpi=70)
    plt.close(fig)
    written.append("trajectory.gif")
    return written


def _limit(field) -> float:
    """The symmetric colour limit of ``field``: its largest finite magnitude (1 where it has none)."""
    a = np.abs(np.asarray(field, dtype=np.float64))
    a = a[np.isfinite(a)]
    return float(a.max()) if a.size and a.max() > 0 else 1.0


def _nonfinite(field) -> str:
    """A title's note where a predicted field holds NaN or inf (drawn blank): " (NaN/inf)", else ""."""
    return "" if np.isfinite(np.asarray(field)).all() else " (NaN/inf)"
