"""CUDA graphs of the training step (opformer.train.cuda_graphs): the dispatch on the CPU with stand-in captures,
and on a GPU (skipped without one) the graphed training against the eager one."""

import copy
import json
import pickle

import pytest
import torch
from torch import nn

from opformer.models import build_model
from opformer.tasks.base import Operator
from opformer.train.cuda_graphs import GraphedModelCall, applies

from .conftest import TINY_MODEL

CUDA = torch.cuda.is_available()


def _model(dropout=0.0):
    return build_model({**TINY_MODEL, "dropout": dropout})


def _inputs(batch=4, n=32, device="cpu"):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, n, 1, generator=g).to(device)
    coords = torch.linspace(0, 1, n).reshape(1, n, 1).to(device)
    return x, coords


class _Recorder:
    """Stand-ins for the capture and the host-sync check: the 'graph' is the model itself, called eagerly."""

    def __init__(self, fail_check=False, fail_capture=False):
        self.captured, self.checked = [], 0
        self.fail_check, self.fail_capture = fail_check, fail_capture
        self.notes = []

    def check(self, model, args):
        self.checked += 1
        if self.fail_check:
            raise RuntimeError("called a synchronizing CUDA operation\nmore text")

    def capture(self, model, args):
        if self.fail_capture:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.captured.append(tuple(a.shape for a in args))
        return lambda x, coords, *rest: model(x, coords)

    def runner(self, model, **kw):
        return GraphedModelCall(model, capture=self.capture, check=self.check, note=self.notes.append,
                                device_type="cpu", **kw)


def test_one_graph_per_shape_up_to_the_limit_then_eager():
    rec = _Recorder()
    model = _model()
    run = rec.runner(model, max_graphs=2)
    x, c = _inputs(4)
    for _ in range(3):
        run(x, c)
    assert rec.captured == [((4, 32, 1), (1, 32, 1))] and run.replays == 3 and rec.checked == 1
    run(*_inputs(3))  # the epoch's shorter last batch: a second graph
    run(*_inputs(2))  # a third shape: eager
    assert len(rec.captured) == 2 and run.replays == 4 and run.eager_calls == 1
    assert rec.notes == [] and run.disabled is None


def test_evaluation_and_no_grad_never_use_the_graphs_and_are_not_counted():
    rec = _Recorder()
    model = _model()
    run = rec.runner(model)
    x, c = _inputs()
    with torch.no_grad():
        run(x, c)
    model.eval()
    run(x, c)
    assert rec.captured == [] and run.replays == 0 and run.eager_calls == 0


@pytest.mark.parametrize("failure", ["check", "capture"])
def test_a_network_that_cannot_be_captured_is_run_eagerly_with_one_note(failure):
    rec = _Recorder(fail_check=failure == "check", fail_capture=failure == "capture")
    model = _model()
    run = rec.runner(model)
    x, c = _inputs()
    y = run(x, c)
    torch.testing.assert_close(y, model(x, c), rtol=0, atol=0)
    run(x, c)
    assert run.disabled is not None and len(rec.notes) == 1 and rec.checked == 1
    assert rec.notes[0].startswith("note: CUDA graphs off") and "\n" not in rec.notes[0]
    assert "--cuda-graphs false" in rec.notes[0]
    assert run.eager_calls == 2 and run.replays == 0


def test_inputs_that_need_a_gradient_or_sit_elsewhere_are_not_graphed():
    rec = _Recorder()
    run = rec.runner(_model())
    x, c = _inputs()
    run(x.requires_grad_(True), c)
    run2 = GraphedModelCall(_model(), capture=rec.capture, check=rec.check, note=rec.notes.append,
                            device_type="cuda")
    run2(*_inputs())  # a CPU tensor for a runner of CUDA graphs
    assert rec.captured == [] and run.eager_calls == 1 and run2.eager_calls == 1


def test_the_operator_calls_the_network_through_an_attached_runner_and_copies_carry_none():
    rec = _Recorder()
    op = Operator(_model())
    keys = set(op.state_dict())
    x, c = _inputs()
    expected = op(x, c)
    op.graphed_call = rec.runner(op.model)
    torch.testing.assert_close(op(x, c), expected, rtol=0, atol=0)  # no dropout: the same function
    assert op.graphed_call.replays == 1
    assert set(op.state_dict()) == keys  # not part of the model's state
    twin = copy.deepcopy(op)
    assert twin.__dict__.get("graphed_call") is None
    again = pickle.loads(pickle.dumps(op))
    assert again.__dict__.get("graphed_call") is None
    torch.testing.assert_close(again(x, c), expected, rtol=0, atol=0)


def test_the_trajectory_operator_routes_its_residual_path_through_the_runner():
    from opformer.tasks.trajectories import TrajectoryOperator
    from opformer.data.datasets import UnitGaussianNormalizer

    calls = []

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(1, 1)

        def forward(self, x, coords, lead_time=None):
            return self.lin(x)

    norm = UnitGaussianNormalizer(torch.zeros(1), torch.ones(1))
    op = TrajectoryOperator(Net(), {"input": norm, "target": norm}, residual=True)
    op.graphed_call = lambda x, coords, tau: calls.append(tau) or op.model(x, coords, lead_time=tau)
    x, c = _inputs()
    op(x, c, torch.ones(4))
    assert len(calls) == 1


def test_where_cuda_graphs_apply():
    assert applies(True, 1, "32-true") is None and applies(True, 1, "64-true") is None
    assert "CUDA" in applies(False, 1, "32-true")
    assert "process" in applies(True, 2, "32-true")
    assert "--precision bf16-mixed" in applies(True, 1, "bf16-mixed")


def test_the_flag_parses_and_a_cpu_run_attaches_nothing(tiny_config, tmp_path, capsys):
    from opformer.cli import main

    out = tmp_path / "run"
    assert main(["train", str(tiny_config), "--out", str(out), "--epochs", "1", "--cuda-graphs", "true",
                 "--accelerator", "cpu", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "--cuda-graphs true has no effect: the run is not on a CUDA GPU" in text
    metrics = json.loads((out / "metrics.json").read_text())
    assert "cuda_graphs" not in metrics
    # a hardware setting: resuming with another value is the same run
    capsys.readouterr()
    main(["train", str(tiny_config), "--out", str(out), "--epochs", "1", "--cuda-graphs", "false",
          "--accelerator", "cpu", "--no-progress", "--resume"])
    assert "different run" not in capsys.readouterr().err


def test_a_bad_value_of_the_flag_is_one_line(tiny_config, tmp_path, capsys):
    from opformer.cli import main

    assert main(["train", str(tiny_config), "--out", str(tmp_path / "r"), "--cuda-graphs", "sometimes"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--cuda-graphs" in err and "\n" not in err and "Traceback" not in err


# --- on a GPU ----------------------------------------------------------------------------------------------------
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


def _steps(model, graphed: bool, steps=4, batch=4):
    torch.manual_seed(3)
    op = Operator(model).cuda().train()
    if graphed:
        op.graphed_call = GraphedModelCall(op.model)
    opt = torch.optim.Adam(op.parameters(), lr=1e-3)
    losses = []
    for i in range(steps):
        x, c = _inputs(batch, device="cuda")
        x = x * (1 + 0.1 * i)
        opt.zero_grad(set_to_none=True)
        loss = op(x, c).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return op, losses


@needs_cuda
def test_graphed_training_steps_match_the_eager_ones():
    torch.manual_seed(0)
    base = _model()
    eager, l_eager = _steps(copy.deepcopy(base), graphed=False)
    graphed, l_graphed = _steps(copy.deepcopy(base), graphed=True)
    assert graphed.graphed_call.replays == 4 and graphed.graphed_call.disabled is None
    torch.testing.assert_close(torch.tensor(l_graphed), torch.tensor(l_eager), rtol=1e-5, atol=1e-7)
    for p, q in zip(graphed.parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


@needs_cuda
def test_dropout_draws_new_masks_at_every_replay():
    op = Operator(_model(dropout=0.3)).cuda().train()
    op.graphed_call = GraphedModelCall(op.model)
    x, c = _inputs(device="cuda")
    y1 = op(x, c).detach().clone()
    y2 = op(x, c).detach().clone()
    assert op.graphed_call.replays == 2
    assert not torch.equal(y1, y2)


@needs_cuda
def test_a_network_that_waits_on_the_host_falls_back_with_a_note():
    class Syncs(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(1, 1)

        def forward(self, x, coords):
            y = self.lin(x)
            return y * float(y.abs().max())  # a host synchronisation

    notes = []
    op = Operator(Syncs()).cuda().train()
    op.graphed_call = GraphedModelCall(op.model, note=notes.append)
    x, c = _inputs(device="cuda")
    y = op(x, c)
    y.sum().backward()
    assert op.graphed_call.disabled and len(notes) == 1 and op.graphed_call.eager_calls == 1


@needs_cuda
def test_a_gpu_training_run_graphs_its_steps(tiny_config, tmp_path):
    from opformer.cli import main

    out = tmp_path / "gpu"
    assert main(["train", str(tiny_config), "--out", str(out), "--epochs", "2", "--accelerator", "gpu",
                 "--no-progress"]) == 0
    used = json.loads((out / "metrics.json").read_text())["cuda_graphs"]
    assert used["given_up"] is None and used["shapes_captured"] >= 1 and used["graphed_steps"] >= 10


@needs_cuda
@pytest.mark.parametrize("graphs", ["true", "false"])
def test_training_steps_do_not_make_the_host_wait_for_the_gpu(tiny_config, tmp_path, monkeypatch, graphs):
    """From the third step of an epoch on, a training step (forward, loss, guard, backward, clipping, Adam, schedule)
    has no host-device synchronisation: the host can queue the next step while the GPU runs this one."""
    import lightning as L

    from opformer.train import run as run_mod

    class NoSync(L.Callback):
        def __init__(self):
            self.checked = 0

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if batch_idx >= 2:
                torch.cuda.set_sync_debug_mode("error")
                self.checked += 1

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            torch.cuda.set_sync_debug_mode(0)

    probe = NoSync()
    build = run_mod._trainer

    def with_probe(t, out, progress, callbacks, **kw):
        return build(t, out, progress, [*callbacks, probe], **kw)

    monkeypatch.setattr(run_mod, "_trainer", with_probe)
    from opformer.cli import main

    try:
        rc = main(["train", str(tiny_config), "--out", str(tmp_path / "r"), "--epochs", "2", "--accelerator", "gpu",
                   "--no-progress", "--cuda-graphs", graphs])
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert rc == 0 and probe.checked >= 4


@needs_cuda
def test_a_gpu_run_with_its_training_split_on_the_device_trains_as_one_that_copies_each_batch(tiny_config, tmp_path):
    """The training split gathered on the GPU gives the batches the host gives, in the same order: the same run
    (eager, so that only the data path differs) ends at the same errors."""
    import lightning as L

    from opformer.cli import main
    from opformer.train import run as run_mod

    seen = {}
    build = run_mod._trainer

    class Where(L.Callback):
        def __init__(self, key):
            self.key = key

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            loader = trainer.train_dataloader
            held = loader.dataset.ds.tensors("input").device.type  # where the gathered split is held
            seen[self.key] = (held == "cuda", batch["input"].device.type)

    metrics = {}
    for setting in ("true", "false"):
        run_mod._trainer = lambda t, out, progress, callbacks, setting=setting, **kw: build(
            t, out, progress, [*callbacks, Where(setting)], **kw)
        try:
            out = tmp_path / setting
            assert main(["train", str(tiny_config), "--out", str(out), "--epochs", "2", "--accelerator", "gpu",
                         "--no-progress", "--cuda-graphs", "false", "--data-on-device", setting]) == 0
        finally:
            run_mod._trainer = build
        metrics[setting] = json.loads((out / "metrics.json").read_text())
    assert seen == {"true": (True, "cuda"), "false": (False, "cuda")}
    assert metrics["true"]["data_on_device"]["device"].startswith("cuda") and "data_on_device" not in metrics["false"]
    for key in ("val_rel_l2", "test_rel_l2"):
        assert metrics["true"][key] == pytest.approx(metrics["false"][key], rel=1e-4), key


@needs_cuda
@pytest.mark.parametrize("preset", ["ns-fno", "ns-gt", "ns-scot"])
def test_lead_time_models_train_through_graphs_on_a_gpu(ns_file, tmp_path, preset):
    """Time-dependent models take the lead time as a third graphed input (all2all pairs, one graph per shape)."""
    from opformer.cli import main

    out = tmp_path / preset
    assert main(["train", preset, "--data", str(ns_file), "--n-test", "4", "--n-val", "2", "--epochs", "2",
                 "--accelerator", "gpu", "--no-progress", "--out", str(out)]) == 0
    used = json.loads((out / "metrics.json").read_text())["cuda_graphs"]
    assert used["given_up"] is None and used["graphed_steps"] >= 1


@pytest.mark.parametrize("which", ["burgers", "ns"])
def test_the_trainer_routes_training_steps_through_an_attached_runner(which, tiny_config, ns_file, tmp_path,
                                                                     monkeypatch):
    """The trainer's wiring, on the CPU: with the runner made to apply there (a stand-in capture that calls the
    network), every full training batch goes through it, the lead time included, evaluation does not, and
    metrics.json says so."""
    import functools

    from opformer.cli import main
    from opformer.train import cuda_graphs

    calls = []

    def capture(model, args):
        def run(*a):
            calls.append(len(a))
            return model(a[0], a[1]) if len(a) == 2 else model(a[0], a[1], lead_time=a[2])
        return run

    monkeypatch.setattr(cuda_graphs, "applies", lambda *a: None)
    monkeypatch.setattr(cuda_graphs, "GraphedModelCall", functools.partial(
        cuda_graphs.GraphedModelCall, capture=capture, check=lambda m, a: None, device_type="cpu"))
    out = tmp_path / which
    if which == "burgers":
        args = ["train", str(tiny_config), "--epochs", "2"]
    else:
        args = ["train", "ns-fno", "--data", str(ns_file), "--n-test", "4", "--n-val", "2", "--epochs", "1",
                "--width", "8"]
    assert main([*args, "--accelerator", "cpu", "--no-progress", "--out", str(out)]) == 0
    used = json.loads((out / "metrics.json").read_text())["cuda_graphs"]
    assert used["given_up"] is None and used["graphed_steps"] == len(calls) > 0
    assert set(calls) == ({2} if which == "burgers" else {3})
