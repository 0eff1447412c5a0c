"""``opformer bench train --json FILE`` says where it wrote the records, as ``bench attention`` and ``bench model``
do (it used to write the file without a word)."""

import json

from opformer.bench import cli


def test_train_json_is_announced(tmp_path, capsys, monkeypatch):
    import opformer.bench.train as train

    rec = dict(what="train", preset="burgers-quick", grid=[256], batch=8, steps=33, epoch_seconds=2.0,
               bare_step_seconds=0.05, validation_seconds=0.1, checkpoint_seconds=0.01, gc_seconds=0.001,
               overhead=1.2)
    monkeypatch.setattr(train, "train_overhead", lambda *a, **k: dict(rec))
    monkeypatch.setattr(cli, "_threads", lambda args: 1)
    out_file = tmp_path / "sub" / "t.json"
    assert cli.main(["bench", "train", "burgers-quick", "--json", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {out_file}" in out.splitlines()[-1]
    assert json.loads(out_file.read_text())[0]["overhead"] == 1.2


def test_figures_that_cannot_be_right_are_flagged(tmp_path, capsys, monkeypatch):
    """An epoch cannot be shorter than its bare steps, nor the network alone slower than the whole step: such figures
    (seen on a loaded machine: overhead 0.221, network alone 1.6 of the step) get a note, in the record too."""
    import opformer.bench.train as train

    rec = dict(what="train", preset="burgers-quick", grid=[256], batch=8, steps=33, epoch_seconds=2.0,
               bare_step_seconds=0.05, validation_seconds=0.1, checkpoint_seconds=0.01, gc_seconds=0.001,
               overhead=0.221, model_step_seconds=0.08)
    monkeypatch.setattr(train, "train_overhead", lambda *a, **k: dict(rec))
    monkeypatch.setattr(cli, "_threads", lambda args: 1)
    out_file = tmp_path / "t.json"
    assert cli.main(["bench", "train", "burgers-quick", "--json", str(out_file)]) == 0
    out = capsys.readouterr().out
    note = [line for line in out.splitlines() if line.startswith("note: burgers-quick:")]
    assert len(note) == 1 and "overhead of 0.221" in note[0] and "network alone at 1.60" in note[0], out
    assert "timing_note" in json.loads(out_file.read_text())[0]
    # plausible figures: no note
    rec.update(overhead=1.1, model_step_seconds=0.04)
    assert cli.main(["bench", "train", "burgers-quick"]) == 0
    out = capsys.readouterr().out  # (a "# note:" that the preset's data is not generated yet depends on the cache)
    assert not [line for line in out.splitlines() if line.startswith("note:")], out
