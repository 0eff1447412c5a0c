"""scripts/collect_results.py --compare: two groups of runs, their statistics and the exact rank test."""

import json
import os
import subprocess
import sys
from math import comb
from pathlib import Path

from .conftest import load_script


def _run(root: Path, name: str, err: float) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "metrics.json").write_text(json.dumps({"test_rel_l2": err, "epochs": 1}))


def test_fully_separated_groups_get_the_exact_p_value(tmp_path, capsys):
    """Three runs all below four others: of the C(7, 3) = 35 equally likely rank sets under "no difference", one
    puts the first group lowest and one highest, so the exact two-sided p is 2/35."""
    mod = load_script("collect_results")
    for i, err in enumerate([1.15e-3, 1.18e-3, 1.29e-3]):
        _run(tmp_path / "a", f"s{i}", err)
    for i, err in enumerate([1.42e-3, 1.61e-3, 2.93e-3, 4.50e-3]):
        _run(tmp_path / "b", f"s{i}", err)
    (tmp_path / "b" / "unfinished").mkdir()  # no metrics.json: not a run
    assert mod.main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert f"exact two-sided p = {2 / comb(7, 3):.3f}" in out
    assert "U = 0 of 12 pairs (a run of the first group has the lower error in 12 of them)" in out
    assert "| 3 | 1.2067e-03 |" in out  # mean of the first group


def test_one_swapped_pair_raises_the_p_value(tmp_path, capsys):
    """Swap the largest of the first group with the smallest of the second: U = 1, and the rank sets with U <= 1
    or U >= 11 are 4 of 35 (two each), so p = 4/35."""
    mod = load_script("collect_results")
    for i, err in enumerate([1.15e-3, 1.18e-3, 1.50e-3]):
        _run(tmp_path / "a", f"s{i}", err)
    for i, err in enumerate([1.42e-3, 1.61e-3, 2.93e-3, 4.50e-3]):
        _run(tmp_path / "b", f"s{i}", err)
    assert mod.main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "U = 1 of 12" in out and f"p = {4 / comb(7, 3):.3f}" in out


def test_bad_arguments_get_one_line_errors(tmp_path, capsys):
    mod = load_script("collect_results")
    (tmp_path / "empty").mkdir()
    assert mod.main(["--compare", str(tmp_path / "empty")]) == 2
    assert "takes two directories" in capsys.readouterr().err
    assert mod.main(["--compare", str(tmp_path / "empty"), str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "no training run" in err and err.count("\n") == 1
    _run(tmp_path / "a", "s0", 1e-3)
    assert mod.main(["--compare", str(tmp_path / "a"), str(tmp_path / "nowhere")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_a_group_may_be_a_directory_of_links_to_runs(tmp_path, capsys):
    """Runs kept where they were trained, grouped by links: the links are followed."""
    mod = load_script("collect_results")
    for i, err in enumerate([1.0, 2.0, 3.0]):
        _run(tmp_path / "runs", f"a{i}", err)
        _run(tmp_path / "runs", f"b{i}", 10.0 + err)
    for group in ("a", "b"):
        (tmp_path / group).mkdir()
        for i in range(3):
            (tmp_path / group / f"s{i}").symlink_to(tmp_path / "runs" / f"{group}{i}", target_is_directory=True)
    assert mod.main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "| 3 | 2.0000e+00 |" in out and "| 3 | 1.2000e+01 |" in out
    assert f"p = {2 / comb(6, 3):.3f}" in out


def test_a_closed_pipe_gives_no_traceback(tmp_path):
    """`collect_results.py ... | head`: the reader goes away before the table is written."""
    for i in range(5):
        _run(tmp_path, f"s{i}", 1e-3 * (i + 1))
    script = Path(__file__).resolve().parents[1] / "scripts" / "collect_results.py"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, str(script), "--spread", str(tmp_path)], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 141


def test_a_missing_or_empty_directory_is_one_line_error_not_an_empty_table(tmp_path, capsys):
    """A mistyped path used to give a header with no rows and exit 0, as if no run had finished."""
    mod = load_script("collect_results")
    (tmp_path / "empty").mkdir()
    for args in ([str(tmp_path / "nowhere")], ["--spread", str(tmp_path / "nowhere")], [str(tmp_path / "empty")],
                 ["--spread", "--by-name", str(tmp_path / "empty")]):
        assert mod.main(args) == 2, args
        captured = capsys.readouterr()
        assert captured.out == "", args  # no table at all
        assert captured.err.count("\n") == 1 and captured.err.startswith("error: "), captured.err
    assert mod.main([str(tmp_path / "nowhere")]) == 2
    assert "nowhere is not a directory" in capsys.readouterr().err


def test_unreadable_or_partial_metrics_are_named_without_a_traceback(tmp_path, capsys):
    """A metrics.json that is not JSON names its file; one without the table's other columns gets "-" there."""
    mod = load_script("collect_results")
    (tmp_path / "bad" / "r").mkdir(parents=True)
    (tmp_path / "bad" / "r" / "metrics.json").write_text("{truncated")
    assert mod.main([str(tmp_path / "bad")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "r/metrics.json: not a readable metrics.json" in captured.err
    assert captured.err.count("\n") == 1
    _run(tmp_path / "partial", "r", 2e-3)  # test_rel_l2 and epochs only: no preset, val, seconds, parameters
    assert mod.main([str(tmp_path / "partial")]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert "| - |" in row and "2.0000e-03" in row


def test_an_interrupted_run_is_left_out_with_a_note(tmp_path, capsys):
    """A run directory with logs and checkpoints but no metrics.json (training stopped): a note names it."""
    mod = load_script("collect_results")
    _run(tmp_path, "done", 1e-3)
    (tmp_path / "stopped" / "checkpoints").mkdir(parents=True)
    (tmp_path / "stopped" / "logs").mkdir()
    assert mod.main(["--spread", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "1.0000e-03" in captured.out and "stopped" not in captured.out
    assert "without metrics.json" in captured.err and "stopped" in captured.err


def test_options_after_the_directories_are_options_not_paths(tmp_path, capsys):
    """`collect_results.py runs/x --spread` used to read --spread as a directory (and print an empty table)."""
    mod = load_script("collect_results")
    _run(tmp_path, "a-seed2", 1e-3)
    _run(tmp_path, "a", 3e-3)
    assert mod.main([str(tmp_path), "--spread"]) == 0
    assert "| 2.0000e-03 |" in capsys.readouterr().out  # one group: a and a-seed2
    assert mod.main(["--by-name", str(tmp_path)]) == 2
    assert "--by-name goes with --spread" in capsys.readouterr().err
    assert mod.main([str(tmp_path), "--help"]) == 0
    assert "--compare A B" in capsys.readouterr().out
