"""Every model does all of its training step's work on its inputs' device.

A tensor made on the host in the forward pass (a ``torch.arange`` without a device, then ``.to(device)``) is copied
to the GPU at every step: the host waits for the GPU there, and the trainer cannot record the step as a CUDA graph
(docs/training.md, "One GPU"). No GPU is needed to find one: the model runs on the ``meta`` device, where a tensor
on the CPU can only have been made on the host, and a dispatch mode records every operator that touches one.
"""

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from opformer.models import build_model

from .test_model_api import TINY
from .test_scalable_models import SMALL, node_grid

CASES = {**{k: (v, 1 if k.endswith("1d") else 2) for k, v in TINY.items()}, **{k: (v, 2) for k, v in SMALL.items()}}


class HostTensors(TorchDispatchMode):
    """Records the operators that take or make a CPU tensor with at least one element axis."""

    def __init__(self):
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0
               for t in tree_flatten((args, kwargs, out))[0]):
            self.ops.add(str(func))
        return out


@pytest.fixture
def meta_autocast(monkeypatch):
    """Autocast has no "meta" backend: the models only ask whether it is on and turn it off, so stand-ins answer
    "off" and do nothing there."""
    real, real_enabled = torch.autocast, torch.is_autocast_enabled

    def autocast(device_type, *args, **kwargs):
        return contextlib.nullcontext() if device_type == "meta" else real(device_type, *args, **kwargs)

    def is_autocast_enabled(*args):
        return False if args and args[0] == "meta" else real_enabled(*args)

    monkeypatch.setattr(torch, "autocast", autocast)
    monkeypatch.setattr(torch, "is_autocast_enabled", is_autocast_enabled)


def _inputs(dim):
    if dim == 1:
        return torch.zeros(2, 32, 1), torch.linspace(0, 1, 32)[None, :, None]
    return torch.zeros(2, 16, 16, 1), node_grid(16)


@pytest.mark.parametrize("key, lead_time", [pytest.param(k, False, id=f"{k}-plain") for k in sorted(CASES)]
                         + [pytest.param(k, True, id=f"{k}-lead-time") for k in sorted(SMALL)])
def test_the_training_step_makes_no_tensor_on_the_host(key, lead_time, meta_autocast):
    """The paper's models take no lead time; the scalable ones are checked with and without it."""
    cfg, dim = CASES[key]
    if lead_time:
        cfg = {**cfg, "time_conditioning": "norm"}
    model = build_model(cfg).train().to("meta")
    x, coords = (t.to("meta") for t in _inputs(dim))
    extra = (torch.ones(2, device="meta"),) if lead_time else ()
    seen = HostTensors()
    with seen:
        model(x, coords, *extra).sum().backward()
    assert not seen.ops, f"{key}: made or used a tensor on the host: {sorted(seen.ops)}"


def test_the_probe_finds_a_host_tensor(meta_autocast):
    """The check can fail: an index made on the host and copied over is caught."""

    class Copies(torch.nn.Module):
        def forward(self, x):
            return x[:, torch.arange(x.shape[1]).to(x.device)]

    seen = HostTensors()
    with seen:
        Copies()(torch.zeros(2, 5, device="meta"))
    assert "aten.arange.default" in seen.ops
