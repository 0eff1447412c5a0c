"""scripts/collect_results.py --spread: the seeds column shows each run's seed; a metrics.json without one (written
or trimmed by other means than `opformer train`, which always records it) takes it from the run's config.yaml, and
a run that records it nowhere shows "unknown" (it showed "None")."""

import json

import yaml

from .conftest import load_script


def _run(root, name, err, seed=None, config_seed=None):
    run = root / name
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"test_rel_l2": err, "epochs": 2,
                                                  **({"seed": seed} if seed is not None else {})}))
    if config_seed is not None:
        (run / "config.yaml").write_text(yaml.safe_dump({"name": name, "train": {"epochs": 2, "seed": config_seed}}))


def test_the_seed_of_each_run_is_shown_and_unknown_said_in_words(tmp_path, capsys):
    mod = load_script("collect_results")
    _run(tmp_path, "gt", 1e-3, seed=1127802, config_seed=1127802)
    _run(tmp_path, "gt-seed2", 2e-3, config_seed=2)  # the seed in config.yaml only
    _run(tmp_path, "gt-seed3", 3e-3)  # recorded nowhere
    assert mod.main(["--spread", "--by-name", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| gt | 1127802, 2, unknown | 2.0000e-03 |" in out, out
    assert "None" not in out


def test_a_recorded_seed_needs_no_config(tmp_path, capsys):
    mod = load_script("collect_results")
    _run(tmp_path, "fno", 1e-3, seed=4)
    (tmp_path / "fno" / "config.yaml").write_text("train: [unclosed\n")  # not read: metrics.json has the seed
    assert mod.main(["--spread", str(tmp_path)]) == 0
    assert f"| {tmp_path / 'fno'} | 4 |" in capsys.readouterr().out
