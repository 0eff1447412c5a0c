"""Log-log plot of forward+backward time and peak memory against n, one line per kind, with fitted slopes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

__all__ = ["loglog_slope", "record_label", "fit_slopes", "SLOPE_FIELDS", "plot_records", "plot_title"]

#: record fields whose log-log slope against n is reported, and their short names
SLOPE_FIELDS = {
    "flops_fwd_bwd": "FLOPs",
    "saved_activation_bytes": "saved",
    "peak_live_bytes": "live peak",
    "peak_memory_bytes": "RSS peak",
    "seconds_fwd_bwd": "time",
}


def loglog_slope(ns, values, tail: int = 2) -> Optional[float]:
    """Least-squares slope of log(value) against log(n) over the ``tail`` largest n (default: the two largest, the asymptotic order)."""
    pts = sorted((n, v) for n, v in zip(ns, values) if v is not None and v > 0)[-tail:]
    if len(pts) < 2:
        return None
    xs, ys = [math.log(n) for n, _ in pts], [math.log(v) for _, v in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else None


def record_label(r: dict) -> str:
    """The series a record belongs to: the model preset, or the attention kind with its window, patch or chunk."""
    label = (r.get("preset") if r.get("what") == "model" else None) or r.get("kind") or r.get("preset")
    if r.get("what") != "model":
        if r.get("window_size"):
            label = f"{label} (M {r['window_size']})"
        if r.get("patch_size"):
            label = f"{label} (p {r['patch_size']})"
    if r.get("chunk_size"):
        label = f"{label} (chunk {r['chunk_size']})"
    return label


def _series(records, field):
    out: dict[str, tuple[list, list]] = {}
    for r in records:
        if r.get("status") != "ok" or r.get(field) is None:
            continue
        ns, vs = out.setdefault(record_label(r), ([], []))
        ns.append(r["n"])
        vs.append(r[field])
    return out


def fit_slopes(records: list[dict], fields=tuple(SLOPE_FIELDS), tail: int = 2) -> dict:
    """``{label: {field: slope or None, "n": [n, ...]}}``: the log-log slope of each field against n per series
    (:func:`record_label`), over the ``tail`` largest n (default two: the asymptotic order)."""
    out: dict[str, dict] = {}
    for field in fields:
        for label, (ns, vs) in _series(records, field).items():
            entry = out.setdefault(label, {})
            entry[field] = loglog_slope(ns, vs, tail)
            entry["n"] = sorted(set(entry.get("n", [])) | set(ns))
    return out


def plot_title(records: list[dict]) -> str:
    """The settings every record shares (d_model, heads, batch, layers, device and dtype) and the machine; a setting
    the records differ in (several model presets, each with its own config) is left out rather than taken from the
    first record."""

    def shared(field):
        values = [r.get(field) for r in records]
        return values[0] if values[0] is not None and all(v == values[0] for v in values) else None

    parts = [f"{name}={shared(field)}" for field, name in
             (("d_model", "d_model"), ("n_heads", "heads"), ("batch", "batch"), ("layers", "layers"))
             if shared(field) is not None]
    where = " ".join(str(shared(f)) for f in ("device", "dtype") if shared(f) is not None)
    if where:
        parts.append(where)
    m = records[0].get("machine") or {}
    return ", ".join(parts) + f" — {m.get('gpu') or m.get('cpu', '')}"


def plot_records(records: list[dict], path: str, title: Optional[str] = None) -> dict:
    """Write a two-panel log-log PNG (time, memory against n); return the fitted slopes ``{label: {field: s}}``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    slopes: dict[str, dict[str, Optional[float]]] = {}
    for ax, field, ylabel, scale in (
        (axes[0], "seconds_fwd_bwd", "forward+backward time [s]", 1.0),
        (axes[1], "peak_memory_bytes", "peak memory [MiB]", 1.0 / 2**20),
    ):
        drawn = 0
        for label, (ns, vs) in sorted(_series(records, field).items()):
            order = sorted(range(len(ns)), key=ns.__getitem__)
            ns, vs = [ns[i] for i in order], [vs[i] for i in order]
            s = loglog_slope(ns, vs)
            slopes.setdefault(label, {})[field] = s
            keep = [i for i, v in enumerate(vs) if v is not None and v > 0]  # a log axis shows positive values only
            if keep:
                ax.loglog([ns[i] for i in keep], [vs[i] * scale for i in keep], "o-",
                          label=f"{label} (slope {s:.2f})" if s else label)
                drawn += 1
        ax.set_xlabel("n (points)")
        ax.set_ylabel(ylabel)
        if drawn:
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
    if title is None and records:
        title = plot_title(records)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return slopes
