"""scripts/scaling_study.py: wrong paths, failed trainings and empty collections end with one line, no traceback,
and the tables and figures come only from finished runs."""

import json
import subprocess

import pytest

from .conftest import load_script


@pytest.fixture()
def mod(monkeypatch):
    m = load_script("scaling_study")
    calls = []

    def no_training(cmd, check=False):
        calls.append(cmd)
        raise subprocess.CalledProcessError(2, cmd)

    monkeypatch.setattr(m.subprocess, "run", no_training)
    m.calls = calls
    return m


def test_a_missing_data_file_is_refused_before_any_training(mod, tmp_path, capsys):
    data = tmp_path / "d.h5"
    assert mod.main(["--data", str(data), "--out", str(tmp_path / "o"), "--models", "fno", "--samples", "4"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --data {data}: no such file\n" and mod.calls == []
    data.write_bytes(b"")
    assert mod.main(["--data", str(data), "--test-data", str(tmp_path / "t.h5"), "--out", str(tmp_path / "o"),
                     "--models", "fno", "--samples", "4"]) == 2
    assert "--test-data" in capsys.readouterr().err and mod.calls == []


def test_a_failed_training_is_one_line_naming_the_run(mod, tmp_path, capsys):
    data = tmp_path / "d.h5"
    data.write_bytes(b"")
    assert mod.main(["--data", str(data), "--out", str(tmp_path / "o"), "--models", "fno", "--samples", "4"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: the run ") and "fno-4 failed" in err and err.count("\n") == 1
    assert len(mod.calls) == 1


def test_collect_with_no_finished_run_writes_nothing(mod, tmp_path, capsys):
    out = tmp_path / "o"
    assert mod.main(["--data", "unused.h5", "--out", str(out), "--collect", "--models", "fno", "--samples", "4"]) == 1
    assert "no finished run under" in capsys.readouterr().err and not out.exists()
    (out / "fno-4").mkdir(parents=True)  # an interrupted run: no metrics.json
    assert mod.main(["--data", "unused.h5", "--out", str(out), "--collect", "--models", "fno", "--samples", "4"]) == 1
    assert not (out / "scaling.json").exists()


def test_collect_of_finished_runs_writes_the_table_and_figure(mod, tmp_path, capsys):
    out = tmp_path / "o"
    for n, err in ((4, 0.2), (8, 0.1)):
        (out / f"fno-{n}").mkdir(parents=True)
        (out / f"fno-{n}" / "metrics.json").write_text(json.dumps(
            {"test_rel_l2": err, "parameters": 10, "seconds": 1.0, "epochs": 1}))
    assert mod.main(["--data", "unused.h5", "--out", str(out), "--collect", "--models", "fno", "--samples", "4",
                     "8"]) == 0
    assert "| fno | 10 | 2.000e-01 | 1.000e-01 | -1.00 |" in capsys.readouterr().out
    assert json.loads((out / "scaling.json").read_text())["slopes"]["fno"] == pytest.approx(-1.0)
    assert (out / "scaling.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in out.iterdir()) == ["fno-4", "fno-8", "scaling.json", "scaling.png"]
    (out / "fno-8" / "metrics.json").write_text("{")
    assert mod.main(["--data", "unused.h5", "--out", str(out), "--collect", "--models", "fno", "--samples", "4",
                     "8"]) == 1
    assert "fno-8/metrics.json: not a readable training record" in capsys.readouterr().err
