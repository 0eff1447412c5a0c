"""scripts/compare_curves.py: validation curves of several runs against epochs or minutes, a resumed run's parts too."""

import json

import pytest

from .conftest import load_script


def _run(root, name, rows, seconds=None, epochs=None):
    run = root / name
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "metrics.csv").write_text("epoch,step,val_rel_l2\n" + "".join(f"{e},{e},{v}\n" for e, v in rows))
    if seconds is not None:
        (run / "metrics.json").write_text(json.dumps({"test_rel_l2": 0.01, "seconds": seconds, "epochs": epochs}))
    return run


def test_curves_against_minutes_spread_each_runs_seconds_over_its_epochs(tmp_path, monkeypatch):
    mod = load_script("compare_curves")
    a = _run(tmp_path, "a", [(0, 0.5), (1, 0.3)], seconds=180.0, epochs=2)
    b = _run(tmp_path, "b", [(0, 0.4), (1, 0.35), (2, 0.2), (3, 0.1)], seconds=120.0, epochs=4)
    (b / "logs" / "metrics-0.csv").write_text("epoch,step,val_rel_l2\n0,0,0.9\n")  # replaced by the later part
    drawn = {}
    import matplotlib.axes

    real = matplotlib.axes.Axes.semilogy

    def spy(self, xs, ys, *args, **kw):
        drawn[kw["label"].split(" ")[0]] = (list(xs), list(ys))
        return real(self, xs, ys, *args, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "semilogy", spy)
    out = tmp_path / "curves.png"
    assert mod.main([f"A={a}", f"B={b}", "--x", "time", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn["A"] == ([1.5, 3.0], [0.5, 0.3])  # 90 s an epoch
    assert drawn["B"][0] == pytest.approx([0.5, 1.0, 1.5, 2.0]) and drawn["B"][1] == [0.4, 0.35, 0.2, 0.1]


def test_minutes_need_a_finished_run(tmp_path, capsys):
    mod = load_script("compare_curves")
    run = _run(tmp_path, "unfinished", [(0, 0.5)])
    assert mod.main([str(run), "--x", "time", "--out", str(tmp_path / "c.png")]) == 2
    assert "a finished run is needed" in capsys.readouterr().err
    assert not (tmp_path / "c.png").exists()


def test_a_broken_metrics_json_is_named_without_a_traceback(tmp_path, capsys):
    """A run whose metrics.json is cut short: one line naming the file, no figure."""
    mod = load_script("compare_curves")
    run = _run(tmp_path, "cut", [(0, 0.5), (1, 0.4)])
    (run / "metrics.json").write_text('{"test_rel_l2": 0.0')
    out = tmp_path / "c.png"
    assert mod.main([str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cut/metrics.json: not a readable metrics.json" in err and err.count("\n") == 1
    assert not out.exists()


def test_a_garbled_metrics_csv_is_named_without_a_traceback(tmp_path, capsys):
    mod = load_script("compare_curves")
    run = _run(tmp_path, "garbled", [(0, 0.5)])
    (run / "logs" / "metrics.csv").write_text("epoch,step,val_rel_l2\n0,0,abc\n")
    out = tmp_path / "c.png"
    assert mod.main([str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "garbled/logs: a metrics CSV is not readable" in err and err.count("\n") == 1
    assert not out.exists()
