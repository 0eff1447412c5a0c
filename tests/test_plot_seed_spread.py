"""scripts/plot_seed_spread.py: runs grouped by glob into panels, their statistics printed, the figure written."""

import json
import statistics
from pathlib import Path

import pytest

from .conftest import load_script


def _script():
    return load_script("plot_seed_spread")


def _run(root: Path, name: str, err: float) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "metrics.json").write_text(json.dumps({"test_rel_l2": err, "epochs": 1}))


def test_groups_panels_and_figure(tmp_path, capsys):
    mod = _script()
    for name, err in [("fno-seed1", 0.04), ("fno-seed2", 0.05), ("gt-a", 0.03), ("gt-b", 0.02), ("other", 0.9)]:
        _run(tmp_path, name, err)
    (tmp_path / "unfinished").mkdir()  # no metrics.json: not a run
    r = str(tmp_path)
    panels = mod.load_groups([f"17², b16, FNO2d={r}/fno-*", f"17², b16, GT={r}/gt-a|{r}/gt-b|{r}/unfinished"])
    assert panels == {"17², b16": {"FNO2d": [0.04, 0.05], "GT": [0.03, 0.02]}}  # split at the last comma
    out = tmp_path / "fig" / "spread.png"
    assert mod.main([f"a, x={r}/fno-*", f"b, x={r}/gt-*", "--out", str(out)]) == 0
    assert out.stat().st_size > 0 and [p.name for p in out.parent.iterdir()] == ["spread.png"]  # no temporary left
    text = capsys.readouterr().out
    assert f"{statistics.fmean([0.04, 0.05]):.4e} ± {statistics.stdev([0.04, 0.05]):.2e}" in text


def test_bad_arguments_end_with_one_line(tmp_path):
    mod = _script()
    with pytest.raises(SystemExit, match="is not LABEL=GLOB"):
        mod.load_groups(["no-equals-sign"])
    with pytest.raises(SystemExit, match="no finished run matches"):
        mod.load_groups([f"x={tmp_path}/nothing-*"])


def test_a_broken_metrics_file_is_named_and_no_figure_written(tmp_path):
    """A metrics.json that is not JSON, or has no test error, used to end in a traceback."""
    mod = _script()
    _run(tmp_path, "ok", 0.1)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "metrics.json").write_text("{")
    out = tmp_path / "x.png"
    with pytest.raises(SystemExit, match=r"broken/metrics.json: not a readable metrics.json"):
        mod.main([f"a={tmp_path}/*", "--out", str(out)])
    (tmp_path / "broken" / "metrics.json").write_text(json.dumps({"epochs": 3}))
    with pytest.raises(SystemExit, match=r"broken/metrics.json has no test_rel_l2"):
        mod.main([f"a={tmp_path}/*", "--out", str(out)])
    (tmp_path / "broken" / "metrics.json").write_text("[1, 2]")
    with pytest.raises(SystemExit, match=r"not a readable metrics.json"):
        mod.main([f"a={tmp_path}/*", "--out", str(out)])
    assert not out.exists()


def test_an_alternative_that_matches_nothing_is_noted(tmp_path, capsys):
    """GROUP=A|B with a typo in B used to drop B's runs from the group without a word."""
    mod = _script()
    _run(tmp_path, "gt-a", 0.03)
    panels = mod.load_groups([f"GT={tmp_path}/gt-a|{tmp_path}/gt-typo*"])
    assert panels == {"": {"GT": [0.03]}}
    err = capsys.readouterr().err
    assert "gt-typo*" in err and "matches nothing" in err and "gt-a'" not in err
