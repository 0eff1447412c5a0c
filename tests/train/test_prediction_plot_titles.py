"""The 2D prediction plot's panel titles lie inside the figure, also for a time-dependent sample's long name
("trajectory 12 of ns32.h5, snapshot 0 -> 1"), which ran past the figure's left edge on one line."""

import numpy as np

from opformer.train import plots


def test_long_sample_names_stay_inside_the_figure(tmp_path, monkeypatch):
    seen = {}
    save = plots._save

    def spy(plt, fig, path):
        fig.tight_layout()
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        seen["boxes"] = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_title()]
        seen["width"] = fig.bbox.width
        return save(plt, fig, path)

    monkeypatch.setattr(plots, "_save", spy)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 16, 16, 1))
    names = ["trajectory 12 of runs/data/ns32.h5, snapshot 0 -> 1", "trajectory 3 of runs/data/ns32.h5, snapshot 2 -> 9"]
    labels = {"input": "vorticity w(t_0)", "target": "w(t)", "prediction": "predicted w(t)"}
    plots.plot_predictions(tmp_path / "p.png", a, a, a + 0.1, labels, errors=[0.1, 0.2], names=names)
    assert (tmp_path / "p.png").stat().st_size > 0
    assert len(seen["boxes"]) == 8
    for box in seen["boxes"]:
        assert box.x0 >= 0 and box.x1 <= seen["width"], (box, seen["width"])
