"""scripts/collect_rollouts.py: the rollout table and figure; bad inputs end with one line, no empty table."""

import json

from .conftest import load_script


def _rollout(root, run, mode, errs=(0.01, 0.02)):
    d = root / run / f"rollout-{mode}"
    d.mkdir(parents=True)
    (d / "rollout.json").write_text(json.dumps({
        "mode": mode, "times": [1.0 + i for i in range(len(errs))], "rel_l2": list(errs), "training_horizon": 1.5,
        "mean_rel_l2_in_horizon": errs[0], "mean_rel_l2_beyond_horizon": errs[-1]}))


def test_table_and_figure(tmp_path, capsys):
    mod = load_script("collect_rollouts")
    _rollout(tmp_path / "r", "gt", "direct")
    _rollout(tmp_path / "r", "gt", "autoregressive", (0.01, 0.05))
    png = tmp_path / "fig" / "r.png"
    assert mod.main([str(tmp_path / "r"), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "| gt | autoregressive | 5.000e-02 |" in out and f"wrote {png}" in out
    assert png.read_bytes()[:4] == b"\x89PNG" and [p.name for p in png.parent.iterdir()] == ["r.png"]


def test_missing_or_empty_root_is_an_error_and_writes_no_figure(tmp_path, capsys):
    """A mistyped directory used to print an empty table, exit 0 and silently skip --plot."""
    mod = load_script("collect_rollouts")
    (tmp_path / "empty" / "gt").mkdir(parents=True)  # a training run without a rollout yet
    png = tmp_path / "out.png"
    for root, said in ((tmp_path / "nowhere", "is not a directory"), (tmp_path / "empty", "no rollout under")):
        assert mod.main([str(root), "--plot", str(png)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and said in captured.err and captured.err.count("\n") == 1
        assert not png.exists()


def test_a_broken_rollout_record_is_named_and_nothing_is_written(tmp_path, capsys):
    mod = load_script("collect_rollouts")
    _rollout(tmp_path, "gt", "direct")
    bad = tmp_path / "fno" / "rollout-direct"
    bad.mkdir(parents=True)
    (bad / "rollout.json").write_text(json.dumps({"mode": "direct"}))
    png = tmp_path / "out.png"
    assert mod.main([str(tmp_path), "--plot", str(png)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "fno/rollout-direct/rollout.json" in captured.err and "no times" in captured.err
    assert not png.exists()
    (bad / "rollout.json").write_text("{")
    assert mod.main([str(tmp_path)]) == 2
    assert "fno/rollout-direct/rollout.json: not a readable rollout.json" in capsys.readouterr().err
