"""scripts/dropout_gap.py: a finished run's error with its dropouts off and on, by group."""

import json

import pytest
import torch

from opformer.bench.reference import reference_available
from opformer.train.config import apply_overrides, load_preset
from opformer.train.run import train

from ..conftest import load_script


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, burgers_file):
    """A 3-epoch run of a 2-layer Galerkin Transformer1d with dropout 0.05 (the tiny config of conftest, one head as
    the reference network's weight map needs)."""
    from .conftest import TINY_MODEL

    cfg = {"name": "tiny", "task": "burgers",
           "data": {"path": str(burgers_file), "resolution": 64, "train_pool": 32, "n_val": 8, "n_train": 24,
                    "n_test": 8},
           "model": dict(TINY_MODEL, n_heads=1),
           "train": {"epochs": 3, "batch_size": 4, "eval_batch_size": 4, "lr": 3e-3, "plot_samples": 0}}
    out = tmp_path_factory.mktemp("gap") / "run"
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(cfg, out, progress=False)
    finally:
        torch.set_num_threads(before)
    return out


def _rows(text: str) -> dict:
    rows = {}
    for line in text.splitlines()[2:]:
        if line.startswith("mean norm per point"):
            break
        label, rest = line[:44].strip(), line[44:].split()
        rows[label] = [float(v) for v in rest]
    return rows


def test_every_group_of_dropouts_and_the_evaluation_error_the_trainer_recorded(tiny_run, capsys):
    gap = load_script("dropout_gap")
    assert gap.main([str(tiny_run), "--masks", "2"]) == 0
    text = capsys.readouterr().out
    rows = _rows(text)
    # the evaluation-mode error is the validation error the trainer selected its best checkpoint on
    recorded = json.loads((tiny_run / "metrics.json").read_text())["val_rel_l2"]
    assert rows["none (evaluation mode)"][0] == pytest.approx(recorded, rel=1e-5)
    assert set(rows) == {"none (evaluation mode)", "all", "attention branch (residual), every layer",
                         "FFN branch (residual), every layer", "FFN hidden layer, every layer",
                         "layer 0, all its dropouts", "layer 1, all its dropouts"}
    assert [line.split(":")[0] for line in text.splitlines() if line.startswith("  layer ")] == [
        "  layer 0", "  layer 1"]  # the branch sizes follow the table, a line per layer

    for label, (err, ratio, mean_pred) in ((k, v) for k, v in rows.items() if len(v) == 3):
        assert err != rows["none (evaluation mode)"][0], label  # each group's dropout acts
        assert ratio == pytest.approx(err / rows["none (evaluation mode)"][0], abs=6e-3)


def test_the_same_seed_draws_the_same_masks_and_another_split_is_measured(tiny_run, capsys):
    gap = load_script("dropout_gap")
    assert gap.main([str(tiny_run), "--masks", "2", "--seed", "3"]) == 0
    a = _rows(capsys.readouterr().out)
    assert gap.main([str(tiny_run), "--masks", "2", "--seed", "3"]) == 0
    assert _rows(capsys.readouterr().out) == a
    assert gap.main([str(tiny_run), "--masks", "2", "--split", "train", "--samples", "5"]) == 0
    out = capsys.readouterr().out
    assert "train split, 5 samples" in out and _rows(out)["none (evaluation mode)"] != a["none (evaluation mode)"]


def test_bad_input_is_one_line(tiny_run, tmp_path, capsys):
    gap = load_script("dropout_gap")
    assert gap.main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "no such file" in err and len(err.splitlines()) == 1
    assert gap.main([str(tmp_path)]) == 2
    assert "no checkpoints/best.ckpt" in capsys.readouterr().err
    assert gap.main([str(tiny_run), "--reference"]) == 2  # our own run is not the reference's
    err = capsys.readouterr().err.strip()
    assert "not a checkpoint of scripts/reference_burgers.py" in err and len(err.splitlines()) == 1


@pytest.mark.skipif(not reference_available(), reason="the reference package is not installed")
def test_a_reference_checkpoint_is_read_into_the_same_function(tiny_run, tmp_path, capsys):
    """A checkpoint whose network is the paper's SimpleTransformer (as scripts/reference_burgers.py writes them):
    read into our Transformer1d, its evaluation error is the reference network's own."""
    from opformer.data.readers import safe_torch_load
    from opformer.tasks.artifact import LoadError
    from opformer.tasks.base import Operator
    from opformer.tasks.losses import rel_l2

    ref_mod, gap = load_script("reference_burgers"), load_script("dropout_gap")
    ck = safe_torch_load(tiny_run / "checkpoints" / "best.ckpt", LoadError, "refused", "unreadable")
    cfg = ck["opformer"]["model"]
    torch.manual_seed(0)
    ref = ref_mod.ReferenceBurgers(cfg, "off")
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ck["state_dict"] = {**{k: v for k, v in ck["state_dict"].items() if not k.startswith("operator.model.")},
                        **{"operator.model.net." + k: v for k, v in ref.net.state_dict().items()}}
    (tmp_path / "checkpoints").mkdir()
    torch.save(ck, tmp_path / "checkpoints" / "best.ckpt")

    assert gap.main([str(tmp_path), "--reference", "--masks", "1"]) == 0
    rows = _rows(capsys.readouterr().out)
    import opformer

    predictor = opformer.load(tiny_run)  # the run's data and normalisers
    x, coords, y = gap._data(predictor, "val", 0)
    op = predictor.operator
    with torch.no_grad():  # the reference network behind the run's normalisers, as reference_burgers.py trains it
        pred = Operator(ref, op.input_normalizer, op.target_normalizer).eval()(x, coords)

    assert rows["none (evaluation mode)"][0] == pytest.approx(rel_l2(pred, y).double().mean().item(), rel=1e-4)


def test_branch_sizes_are_those_of_the_layers_own_branches():
    """The attention branch of a layer whose output projection is zero has size 0, the others do not, and each
    layer's residual-stream input is the previous layer's output (the eq. (4) scheme has no norm in the stream)."""
    from opformer.models import build_model

    from .conftest import TINY_MODEL

    gap = load_script("dropout_gap")
    torch.manual_seed(0)
    model = build_model(dict(TINY_MODEL)).eval()
    with torch.no_grad():
        model.encoder.layers[1].attn.out_proj.weight.zero_()
        model.encoder.layers[1].attn.out_proj.bias.zero_()
    x, coords = torch.randn(3, 40, 1), torch.linspace(0, 1, 40).view(1, 40, 1)
    outs = []
    hook = model.encoder.layers[0].register_forward_hook(lambda mod, args, out: outs.append(out))
    sizes = gap.branch_sizes(model, x, coords, batch=2)  # two batches: the sums are weighted by batch size
    hook.remove()
    assert len(sizes) == 2 and sizes[1][1] == 0.0
    assert sizes[0][1] > 0 and sizes[0][2] > 0 and sizes[1][2] > 0
    out0 = torch.cat(outs)
    assert sizes[1][0] == pytest.approx(out0.norm(dim=-1).mean().item(), rel=1e-5)
