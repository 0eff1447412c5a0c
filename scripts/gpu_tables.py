"""The paper's full-size runs side by side on one GPU, fitted to a time budget.

Every run is an ``opformer train`` process, and they share the GPU: at the paper's batch sizes (4 and 8) an eager
run is limited by kernel launches rather than by the card, so running them together uses the card better than one
after another.  (With the training step replayed as CUDA graphs, the trainer's default on one GPU, each run keeps
the card busier and a step is 2-4x shorter, so side by side gains less: docs/benchmarks.md, "CUDA graphs of the
training step".)  The data are generated first on the CPUs (``opformer data prepare``), one group at a time, and a
group's runs start as soon as its data are there.

The epochs are fitted to the budget: every run starts with its preset's epochs (the paper's 100); once all groups
run, each run's seconds per epoch are measured under the shared load over a few epochs, and a run that would not
end in time restarts from scratch with the most epochs that fit (its one-cycle schedule then spans those epochs).
The summary records the epochs each run had: a run with fewer than the paper's 100 is labelled so.  Runs named
with ``--keep`` are never restarted: they keep the paper's epochs, and the others fit around them.

    python scripts/gpu_tables.py start --budget-min 20 [--runs darcy141-gt ...] [--wait-for FILE]
    python scripts/gpu_tables.py status            # one line per run: state, epoch, s/epoch, validation error
    python scripts/gpu_tables.py collect DIR       # metrics, logs, plots and the trained models (save_pretrained)
    python scripts/gpu_tables.py list              # the runs it knows

``start`` returns at once: a supervisor process in its own session does the work and writes
``runs/gpu/state.json`` (atomically) as it goes.  ``--wait-for FILE`` holds the training back (not the data
generation) until FILE exists, so that a benchmark can have the GPU to itself first.

**Across leases** (each machine starts bare, and a run at the paper's size may need more than one lease): runs named
with ``--keep`` are stopped at the deadline instead (``last.ckpt`` stays their resume point), and ``collect DIR``
also writes each unfinished run's resume files (its config, logs and ``last.ckpt``) as ``resume-NAME.tar.partNN``
pieces small enough to come back.  On the next machine, with those pieces in a folder that travels with the working
tree, ``start --resume-dir FOLDER`` puts each run back together and continues it with ``opformer train --resume``
(the data are generated again: the same recipe gives the same file)::

    python scripts/gpu_tables.py start --budget-min 10 --runs darcy141-gt --keep darcy141-gt
    python scripts/gpu_tables.py collect OUT          # ... resume-darcy141-gt.tar.part00, part01
    python scripts/gpu_tables.py start --budget-min 10 --runs darcy141-gt --keep darcy141-gt --resume-dir FOLDER
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path("runs/gpu")
STATE = ROOT / "state.json"

#: name -> (data group, opformer train arguments); the paper's settings are the presets' defaults
RUNS = {
    "burgers2048-gt": ("burgers", ["burgers-gt", "--resolution", "2048"]),
    "burgers2048-ft": ("burgers", ["burgers-ft", "--resolution", "2048"]),
    "burgers8192-gt": ("burgers", ["burgers-gt", "--resolution", "8192"]),
    "burgers8192-ft": ("burgers", ["burgers-ft", "--resolution", "8192"]),
    "burgers8192-fno": ("burgers", ["burgers-fno", "--resolution", "8192"]),
    # GT without dropout: at n = 512 it was what brought the GT below the paper (docs/results.md, Table 2a)
    "burgers2048-gt-drop0": ("burgers", ["burgers-gt", "--resolution", "2048", "--dropout", "0.0"]),
    "burgers8192-gt-drop0": ("burgers", ["burgers-gt", "--resolution", "8192", "--dropout", "0.0"]),
    "darcy141-gt": ("darcy", ["darcy-gt", "--resolution", "141", "--coarse-size", "43"]),
    "darcy141-ft": ("darcy", ["darcy-ft-regular", "--resolution", "141", "--coarse-size", "43"]),
    "darcy141-fno": ("darcy", ["darcy-fno", "--resolution", "141"]),
    "inverse141-gt-e0.01": ("darcy", ["darcy-inverse-gt", "--noise", "0.01"]),
    "inverse141-ft-e0.01": ("darcy", ["darcy-inverse-ft-regular", "--noise", "0.01"]),
    "inverse141-fno-e0.01": ("darcy", ["darcy-inverse-fno", "--noise", "0.01"]),
    # the other two noise levels of the paper's Table 3
    **{f"inverse141-{m}-e{eps}": ("darcy", [preset, "--noise", eps])
       for eps in ("0", "0.1")
       for m, preset in (("gt", "darcy-inverse-gt"), ("ft", "darcy-inverse-ft-regular"), ("fno", "darcy-inverse-fno"))},
    # Table 2b's and Table 3's 211 columns (the same 421^2 data, strided by 2): 211 -> 61 forward, 211 -> 71 inverse
    "darcy211-gt": ("darcy", ["darcy-gt", "--resolution", "211", "--coarse-size", "61"]),
    "darcy211-ft": ("darcy", ["darcy-ft-regular", "--resolution", "211", "--coarse-size", "61"]),
    "darcy211-fno": ("darcy", ["darcy-fno", "--resolution", "211"]),
    **{f"inverse211-{m}-e0.01": ("darcy", [preset, "--resolution", "211", "--coarse-factor", "3", "--noise", "0.01"])
       for m, preset in (("gt", "darcy-inverse-gt"), ("ft", "darcy-inverse-ft-regular"), ("fno", "darcy-inverse-fno"))},
    "quick": ("quick", ["burgers-quick"]),  # the README's CPU demo: to try this script on any machine
}
GROUP_PRESETS = {"burgers": ["burgers-gt"], "darcy": ["darcy-gt"], "quick": ["burgers-quick"]}
DEFAULT_RUNS = ["darcy141-gt", "darcy141-ft", "darcy141-fno", "inverse141-gt-e0.01", "inverse141-ft-e0.01",
                "burgers2048-gt", "burgers2048-ft"]
EPOCH_RE = re.compile(r"^epoch \d+ \[(\d+)/(\d+)\].*?([0-9.]+) s/epoch", re.M)


def _alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_state(state: dict) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, STATE)


def _epochs_logged(name: str) -> list[tuple[int, int, float]]:
    log = ROOT / f"{name}.log"
    if not log.exists():
        return []
    return [(int(a), int(b), float(c)) for a, b, c in EPOCH_RE.findall(log.read_text(errors="replace"))]


PART_RE = re.compile(r"^resume-(.+)\.tar\.part(\d\d)$")


def write_resume_parts(run: Path, out: Path, max_bytes: int) -> list[Path]:
    """The resume files of ``run`` (config, logs, ``checkpoints/last.ckpt``) as one tar split into pieces of at most
    ``max_bytes``, ``out/resume-NAME.tar.part00``, ``part01``, ...  Returns the pieces."""
    members = [run / "config.yaml", run / "checkpoints" / "last.ckpt", *sorted((run / "logs").glob("*"))]
    tmp = out / f".resume-{run.name}.tar"
    with tarfile.open(tmp, "w") as tf:
        for f in members:
            if f.is_file():
                tf.add(f, arcname=str(f.relative_to(run)))
    parts = []
    with open(tmp, "rb") as src:
        while chunk := src.read(max_bytes):
            part = out / f"resume-{run.name}.tar.part{len(parts):02d}"
            part.write_bytes(chunk)
            parts.append(part)
    tmp.unlink()
    return parts


def read_resume_parts(folder: Path) -> dict[str, list[Path]]:
    """{run name: its pieces in order} for the ``resume-NAME.tar.partNN`` files in ``folder``; a run whose pieces
    are not numbered 00, 01, ... without a gap is refused (a piece is missing)."""
    found: dict[str, dict[int, Path]] = {}
    for f in folder.iterdir():
        m = PART_RE.match(f.name)
        if m:
            found.setdefault(m.group(1), {})[int(m.group(2))] = f
    out = {}
    for name, parts in found.items():
        if sorted(parts) != list(range(len(parts))):
            sys.exit(f"{folder}: the pieces of run {name} are {sorted(parts)}: one is missing")
        out[name] = [parts[i] for i in range(len(parts))]
    return out


def restore_run(name: str, parts: list[Path]) -> None:
    """Put run ``name`` back together in ROOT/name from its pieces (only plain files under the run's folder)."""
    data = b"".join(p.read_bytes() for p in parts)
    run = ROOT / name
    run.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tf:
        for member in tf.getmembers():
            if not member.isfile() or member.name.startswith(("/", "..")) or "/../" in member.name:
                sys.exit(f"resume pieces of {name}: unexpected entry {member.name!r}")
        tf.extractall(run, filter="data")


def _data_cpus(workers: int):
    """A pre-exec hook that keeps the data generation on the first ``workers`` CPUs the process may use, or None when
    there are no more CPUs than that.  The CPUs left over are the ones a benchmark run meanwhile should be given
    (benchmarks/gpu_session.sh does): a launch-bound GPU step measured on CPUs busy with the solver measures the
    contention, not the step."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) <= workers:
        return None
    keep = set(cpus[:workers])
    return lambda: os.sched_setaffinity(0, keep)


def _launch(name: str, epochs: int | None, args, resume: bool = False) -> subprocess.Popen:
    cmd = ["opformer", "train", *RUNS[name][1], "--out", str(ROOT / name), "--no-progress", "--threads",
           str(args.threads), "--accelerator", args.accelerator, "--resume" if resume else "--overwrite",
           *shlex.split(args.extra)]
    if epochs is not None:
        cmd += ["--epochs", str(epochs)]
    log = open(ROOT / f"{name}.log", "a" if resume else "w")
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def supervise(args) -> None:
    t_start = time.time()
    deadline = t_start + 60 * args.budget_min
    groups = []
    for name in args.runs:
        g = RUNS[name][0]
        if g not in groups:
            groups.append(g)
    state = {"started": t_start, "deadline": deadline, "runs": {n: {"state": "waiting for data"} for n in args.runs},
             "notes": [], "pid": os.getpid()}
    _write_state(state)
    procs: dict[str, subprocess.Popen] = {}
    fitted: set[str] = set()
    resumed: set[str] = set()
    if args.resume_dir:
        for name, parts in read_resume_parts(Path(args.resume_dir)).items():
            if name in args.runs:
                restore_run(name, parts)
                resumed.add(name)
                state["notes"].append(f"{name}: continued from its resume pieces ({len(parts)})")
        args.keep = sorted(set(args.keep) | resumed)  # a continued run is never restarted from scratch to fit

    def poll() -> None:
        for n, p in list(procs.items()):
            rc = p.poll()
            logged = _epochs_logged(n)
            run = state["runs"][n]
            if logged:
                run["epoch"], run["epochs"] = logged[-1][0], logged[-1][1]
                run["s_per_epoch"] = statistics.median([e[2] for e in logged[1:]] or [logged[0][2]])
            if rc is not None:
                run["state"] = "done" if rc == 0 and (ROOT / n / "metrics.json").exists() else f"failed (exit {rc})"
                run["seconds"] = time.time() - run["t_launch"]
                del procs[n]
        _write_state(state)

    for g in groups:
        prep = subprocess.run(["opformer", "data", "prepare", *GROUP_PRESETS[g], "--workers", str(args.workers)],
                              stdout=open(ROOT / f"data-{g}.log", "w"), stderr=subprocess.STDOUT,
                              preexec_fn=_data_cpus(args.workers))
        if prep.returncode != 0:
            state["notes"].append(f"data for {g} failed: see {ROOT}/data-{g}.log")
            for n in args.runs:
                if RUNS[n][0] == g:
                    state["runs"][n]["state"] = "no data"
            _write_state(state)
            continue
        while args.wait_for and not Path(args.wait_for).exists():
            time.sleep(2)
        for n in args.runs:
            if RUNS[n][0] == g:
                procs[n] = _launch(n, None, args, resume=n in resumed)
                state["runs"][n].update(state="running", t_launch=time.time(), restarts=0)
        poll()
    lines_at_all_launched = {n: len(_epochs_logged(n)) for n in procs}

    while procs:
        time.sleep(5)
        poll()
        if time.time() > deadline and any(n in args.keep for n in procs):
            # runs kept at their epochs stop here, resumable: SIGINT ends them as Ctrl-C does (last.ckpt stays)
            stopping = [n for n in procs if n in args.keep]
            for n in stopping:
                procs[n].send_signal(signal.SIGINT)
            for n in stopping:
                try:
                    procs[n].wait(90)
                except subprocess.TimeoutExpired:
                    procs[n].kill()
                state["runs"][n].update(state="stopped at the deadline (resumable)")
                state["notes"].append(f"{n}: stopped at the deadline; collect writes its resume pieces")
                del procs[n]
            _write_state(state)
            continue
        for n, p in list(procs.items()):
            if n in fitted or n in args.keep:
                continue
            logged = _epochs_logged(n)
            shared = logged[lines_at_all_launched.get(n, 0) + 1:]  # epochs wholly under the shared load
            if len(shared) < args.probe_epochs:
                continue
            fitted.add(n)
            spe = statistics.median(e[2] for e in shared)
            done, total = logged[-1][0], logged[-1][1]
            now = time.time()
            if now + (total - done) * spe <= deadline:
                continue
            fit = int((deadline - now - args.restart_overhead) / spe * args.safety)
            if fit >= done + (total - done) * 0.9 or fit < 3:
                state["notes"].append(f"{n}: {total} epochs would not end in time ({spe:.1f} s/epoch); "
                                      f"left running" if fit >= 3 else f"{n}: no time for 3 epochs; left running")
                continue
            p.send_signal(signal.SIGINT)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
            procs[n] = _launch(n, fit, args)
            state["runs"][n].update(state="running", t_launch=time.time(), restarts=1, epochs=fit, epoch=0)
            state["notes"].append(f"{n}: {spe:.1f} s/epoch under the shared load; restarted with {fit} epochs "
                                  f"(of {total}) to end within the budget")
            _write_state(state)
    state["finished"] = time.time()
    _write_state(state)


def start(args) -> None:
    ROOT.mkdir(parents=True, exist_ok=True)
    unknown = [n for n in [*args.runs, *args.keep] if n not in RUNS]
    if unknown:
        sys.exit(f"unknown run(s) {', '.join(unknown)}; known: {', '.join(RUNS)}")
    cmd = [sys.executable, __file__, "_supervise", "--budget-min", str(args.budget_min), "--workers",
           str(args.workers), "--threads", str(args.threads), "--probe-epochs", str(args.probe_epochs),
           "--safety", str(args.safety), "--restart-overhead", str(args.restart_overhead), "--accelerator",
           args.accelerator, "--extra=" + args.extra, "--runs", *args.runs]
    if args.keep:
        cmd += ["--keep", *args.keep]
    if args.wait_for:
        cmd += ["--wait-for", args.wait_for]
    if args.resume_dir:
        if not Path(args.resume_dir).is_dir():
            sys.exit(f"--resume-dir {args.resume_dir}: no such folder")
        read_resume_parts(Path(args.resume_dir))  # refuse missing pieces before anything starts
        cmd += ["--resume-dir", str(Path(args.resume_dir).resolve())]
    if STATE.exists():
        try:
            old = json.loads(STATE.read_text())
        except (OSError, ValueError):
            old = {}
        if not old.get("finished") and _alive(old.get("pid")):
            sys.exit(f"a supervisor is still running here (pid {old['pid']}): let it end, or kill it, before starting")
    # a fresh state before the supervisor starts: the last one's "finished" must not be read as this one's
    now = time.time()
    _write_state({"started": now, "deadline": now + 60 * args.budget_min,
                  "runs": {n: {"state": "starting"} for n in args.runs}, "notes": []})
    subprocess.Popen(cmd, stdout=open(ROOT / "supervisor.log", "w"), stderr=subprocess.STDOUT,
                     start_new_session=True)  # it writes its own state, with its pid, as it goes
    print(f"started: {len(args.runs)} runs, budget {args.budget_min} min; `python {__file__} status` to follow")


def status(_args=None) -> None:
    if not STATE.exists():
        sys.exit(f"nothing started: {STATE} does not exist")
    try:
        st = json.loads(STATE.read_text())
        st["started"], st["deadline"], st["runs"].items  # noqa: B018 - the fields read below
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        sys.exit(f"{STATE}: not a readable state file ({type(exc).__name__}: {exc})")
    now = time.time()
    print(f"elapsed {(now - st['started']) / 60:.1f} min, deadline in {(st['deadline'] - now) / 60:.1f} min"
          + ("  (supervisor finished)" if st.get("finished") else ""))
    for n, r in st["runs"].items():
        m = ROOT / n / "metrics.json"
        res = ""
        if m.exists():
            mm = json.loads(m.read_text())
            res = f"test {mm.get('test_rel_l2', float('nan')):.4e} val {mm.get('val_rel_l2', float('nan')):.4e}"
        last = _epochs_logged(n)
        val = re.findall(r"val_rel_l2 ([0-9.e+-]+)", (ROOT / f"{n}.log").read_text()) if last else []
        print(f"{n:24s} {r['state']:18s} epoch {r.get('epoch', 0)}/{r.get('epochs', '?')} "
              f"{r.get('s_per_epoch', float('nan')):6.2f} s/epoch  val {val[-1] if val else '-':>10s}  {res}")
    for note in st.get("notes", []):
        print("note:", note)


def collect(args) -> None:
    """Small files only: per run its metrics, config, logs and plots, and the model as config.json +
    model.safetensors (weights only); packed into at most ``--max-files`` tarballs under ``--max-mb`` each."""
    if not ROOT.is_dir():
        sys.exit(f"nothing to collect: {ROOT} does not exist here (collect reads the runs of `start`, run from the "
                 "same directory)")
    import opformer

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    stage = ROOT / "_collect"
    items: list[tuple[Path, str]] = []
    for f in [STATE, ROOT / "supervisor.log", *ROOT.glob("*.log")]:
        if f.exists():
            items.append((f, f.name))
    for run in sorted(p for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("_")):
        for f in [run / "metrics.json", run / "config.yaml", *run.glob("logs/metrics*.csv"), *run.glob("plots/*")]:
            if f.is_file():
                items.append((f, f"{run.name}/{f.relative_to(run)}"))
        best = run / "checkpoints" / "best.ckpt"
        if best.exists() and (run / "metrics.json").exists():
            try:
                d = opformer.load(best).save_pretrained(stage / run.name, overwrite=True)
                for f in d.iterdir():
                    items.append((f, f"{run.name}/model/{f.name}"))
            except Exception as exc:  # noqa: BLE001 - collect what can be collected
                print(f"{run.name}: model not exported ({exc})")
    limit = args.max_mb * 2**20
    packs: list[list[tuple[Path, str]]] = [[]]
    size = 0
    for f, arc in sorted(items, key=lambda t: t[1]):
        s = f.stat().st_size
        if packs[-1] and size + s > limit:
            packs.append([])
            size = 0
        packs[-1].append((f, arc))
        size += s
    for i, pack in enumerate(packs[: args.max_files]):
        dest = out / f"gpu-runs-{i}.tar.gz"
        partial = out / f".{dest.name}.partial"  # renamed once complete: a failed write leaves no cut tarball
        try:
            with tarfile.open(partial, "w:gz") as tf:
                for f, arc in pack:
                    tf.add(f, arcname=arc)
            os.replace(partial, dest)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            sys.exit(f"collect: writing {dest} failed ({exc}); the tarballs written before it are complete")
    if len(packs) > args.max_files:
        print(f"{len(packs) - args.max_files} pack(s) left out (over --max-files)")
    n_parts = 0
    for run in sorted(p for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("_")):
        if not (run / "metrics.json").exists() and (run / "checkpoints" / "last.ckpt").exists():
            parts = write_resume_parts(run, out, int(limit))
            n_parts += len(parts)
            print(f"{run.name}: unfinished; its resume files in {len(parts)} piece(s) "
                  f"{parts[0].name} ... (start --resume-dir FOLDER continues it)")
    if n_parts:
        print(f"{n_parts} resume piece(s) besides the {min(len(packs), args.max_files)} tarball(s)")
    print(f"{sum(len(p) for p in packs)} files in {min(len(packs), args.max_files)} tarball(s) under {out}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("start", "_supervise"):
        p = sub.add_parser(name)
        p.add_argument("--budget-min", type=float, default=20.0, help="minutes from now by which every run ends")
        p.add_argument("--runs", nargs="+", default=DEFAULT_RUNS)
        p.add_argument("--workers", type=int, default=max((os.cpu_count() or 2) - 2, 1),
                       help="data generation processes")
        p.add_argument("--threads", type=int, default=2, help="torch CPU threads per run")
        p.add_argument("--probe-epochs", type=int, default=2, help="epochs timed under the shared load")
        p.add_argument("--safety", type=float, default=0.85, help="fraction of the fitted epochs kept")
        p.add_argument("--restart-overhead", type=float, default=45.0, help="seconds a restart costs")
        p.add_argument("--keep", nargs="*", default=[],
                       help="runs that keep their preset's epochs even if they would not end in the budget")
        p.add_argument("--wait-for", default=None, help="start training only once this file exists")
        p.add_argument("--accelerator", default="gpu", help="opformer train --accelerator (gpu; cpu to try it)")
        p.add_argument("--extra", default="", help="more opformer train arguments for every run, one string")
        p.add_argument("--resume-dir", default=None,
                       help="a folder with resume-NAME.tar.partNN pieces (from collect): those runs continue")
    sub.add_parser("status")
    sub.add_parser("list")
    p = sub.add_parser("collect")
    p.add_argument("dir")
    p.add_argument("--max-mb", type=float, default=15.0)
    p.add_argument("--max-files", type=int, default=7)
    args = ap.parse_args(argv)
    if args.cmd == "list":
        for n, (g, a) in RUNS.items():
            print(f"{n:24s} {g:8s} opformer train {' '.join(a)}")
    elif args.cmd == "start":
        start(args)
    elif args.cmd == "_supervise":
        ROOT.mkdir(parents=True, exist_ok=True)
        supervise(args)
    elif args.cmd == "status":
        status()
    else:
        collect(args)


if __name__ == "__main__":
    main()
