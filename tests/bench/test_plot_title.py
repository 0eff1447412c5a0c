"""The title of ``--plot``: settings shared by every record, never the first record's config passed off as all of
them (``opformer bench model burgers-gt scot unet`` has three configs)."""

import json
from pathlib import Path

import pytest

from opformer.bench.plot import plot_records

MACHINE = {"cpu": "Test CPU"}


def _rec(preset, d_model, heads, layers):
    return dict(what="model", preset=preset, kind=preset, n=1024, status="ok", seconds_fwd_bwd=0.1,
                peak_memory_bytes=2**20, d_model=d_model, n_heads=heads, layers=layers, batch=4, device="cpu",
                dtype="float32", machine=MACHINE)


def _title(records, tmp_path, monkeypatch):
    import matplotlib.figure

    seen = []
    real = matplotlib.figure.Figure.suptitle
    monkeypatch.setattr(matplotlib.figure.Figure, "suptitle", lambda self, t, **k: (seen.append(t), real(self, t, **k))[1])
    plot_records(records, str(tmp_path / "p.png"))
    return seen[0]


def test_mixed_models_title_has_only_shared_settings(tmp_path, monkeypatch):
    recs = [_rec("burgers-gt", 96, 1, 4), _rec("scot", 32, [2, 4], [2, 2]), _rec("unet", 16, None, 3)]
    title = _title(recs, tmp_path, monkeypatch)
    assert "d_model" not in title and "heads" not in title and "layers" not in title, title
    assert title == "batch=4, cpu float32 — Test CPU"


def test_one_config_title_keeps_it(tmp_path, monkeypatch):
    recs = [_rec("burgers-gt", 96, 1, 4), dict(_rec("burgers-gt", 96, 1, 4), n=2048)]
    assert _title(recs, tmp_path, monkeypatch) == "d_model=96, heads=1, batch=4, layers=4, cpu float32 — Test CPU"
