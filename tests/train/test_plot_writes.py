"""Plots are written through a temporary file and a rename: a failed write keeps the earlier PNG."""

from __future__ import annotations

import errno

import numpy as np
import pytest

from opformer.train.plots import plot_curves, plot_predictions

PNG = b"\x89PNG\r\n\x1a\n"
CURVES = {"train_loss_epoch": [(0, 1.0), (1, 0.5)], "val_rel_l2": [(0, 0.8), (1, 0.4)]}


def _predictions(path):
    rng = np.random.default_rng(0)
    a, u = rng.normal(size=(2, 2, 16, 1))
    return plot_predictions(path, a, u, u + 0.1, {"input": "a", "target": "u", "prediction": "pred"}, [0.1, 0.2])


@pytest.mark.parametrize("plot", [lambda path: plot_curves(path, CURVES, "tiny"), _predictions],
                         ids=["curves", "predictions"])
def test_a_failed_plot_write_keeps_the_earlier_png_and_no_temporary(tmp_path, monkeypatch, plot):
    import matplotlib.figure

    path = tmp_path / "plots" / "plot.png"
    assert plot(path) == path
    before = path.read_bytes()
    assert before.startswith(PNG)

    def half_then_full_disk(fig, fname, *args, **kwargs):
        if hasattr(fname, "write"):
            fname.write(before[:100])
        else:
            with open(fname, "wb") as fh:
                fh.write(before[:100])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", half_then_full_disk)
    with pytest.raises(OSError):
        plot(path)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["plot.png"]
    monkeypatch.undo()
    plot(path)  # a later write replaces it
    assert path.read_bytes().startswith(PNG) and [p.name for p in path.parent.iterdir()] == ["plot.png"]
