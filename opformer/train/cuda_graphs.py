"""The network's training forward and backward replayed as CUDA graphs (one GPU, 32- or 64-bit precision).

At the paper's batch sizes an attention operator's training step on a GPU is a chain of several hundred small
kernels, and the host spends longer launching them than the card spends running them (``docs/benchmarks.md``,
"Training overhead on the GPU").  A CUDA graph records the chain once and replays it with one launch.  Only the
network (``Operator.model``) is graphed, forward and backward, through
:func:`torch.cuda.make_graphed_callables`; the normalizers, the loss, gradient clipping, the optimizer, the
schedule and the divergence guard stay as they are, so nothing else of the trainer changes.

What it takes, and what happens otherwise (the step is then run as before, never wrongly):

- one graph per input shape, captured at the first training batch of that shape (a few extra forward and backward
  passes on it, on a side stream); at most ``max_graphs`` shapes (the full batch and the epoch's last, shorter one),
  any other shape runs eagerly;
- the network must not synchronise with the host in its forward or backward (``.item()``, data-dependent shapes): a
  first pass under ``torch.cuda.set_sync_debug_mode("error")`` checks that before anything is captured, and a
  network that fails it, or whose capture fails, is run eagerly from then on, with a one-line note;
- the parameters are updated in place (the optimizer, ``load_state_dict`` of the divergence guard and of a resumed
  run all do), never replaced;
- dropout draws fresh masks at every replay (the CUDA generator advances with each replay);
- each graph keeps the memory of its step's activations between steps (one set per shape captured), where the eager
  step frees and reallocates it: a run at the edge of the GPU's memory may need ``--cuda-graphs false``.

Evaluation (validation, test, prediction) always runs eagerly: the graphs are used only in training mode with
gradients on.
"""

from __future__ import annotations

import warnings
from typing import Callable, Optional

import torch
from torch import Tensor, nn

from ..tasks.base import run_network


class _Positional(nn.Module):
    """``model(x, coords[, lead_time=tau])`` as a module of positional tensors (what a graphed callable takes)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, coords: Tensor, *lead_time: Tensor) -> Tensor:
        return run_network(self.model, x, coords, *lead_time)


def _nothing():
    return None


def applies(accelerator_is_cuda: bool, world_size: int, precision: str) -> Optional[str]:
    """None when CUDA graphs can serve a run, else why not (in the user's terms)."""
    if not accelerator_is_cuda:
        return "the run is not on a CUDA GPU"
    if world_size != 1:
        return "the run uses more than one process"
    if precision not in ("32-true", "64-true", "32", "64"):
        return f"--precision {precision} (mixed precision) is not graphed"
    return None


def capture_with_torch(model: nn.Module, args: tuple, warmup: int = 3) -> Callable:
    """The graphed forward+backward of ``model`` for inputs shaped like ``args`` (torch's own capture)."""
    wrapper = _Positional(model)
    static = tuple(a.detach().clone() for a in args)
    return torch.cuda.make_graphed_callables(wrapper, static, num_warmup_iters=warmup, allow_unused_input=True)


def check_no_host_sync(model: nn.Module, args: tuple) -> None:
    """One forward and backward of ``model`` with host synchronisations turned into errors (raises on one); the
    gradients are not accumulated into the parameters."""
    wrapper = _Positional(model)
    params = [p for p in model.parameters() if p.requires_grad]
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        y = wrapper(*args)
        torch.autograd.grad(y, params, grad_outputs=torch.ones_like(y), allow_unused=True)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()


class GraphedModelCall:
    """Calls ``model(x, coords[, lead_time=tau])`` through a CUDA graph where it can (see the module docstring).

    ``capture(model, args)`` and ``check(model, args)`` are :func:`capture_with_torch` and
    :func:`check_no_host_sync` unless given (the tests pass stand-ins); ``note`` receives the one-line note when the
    graphs are given up.  Held outside the module tree: it is not part of the model's state, and a copy of the
    model (``copy.deepcopy``, pickling) carries no graphs.
    """

    def __init__(self, model: nn.Module, *, max_graphs: int = 2, capture: Callable = capture_with_torch,
                 check: Callable = check_no_host_sync, note: Callable[[str], None] = print,
                 device_type: str = "cuda"):
        self.model = model
        self.max_graphs = int(max_graphs)
        self.graphs: dict = {}
        self.disabled: Optional[str] = None  # why the graphs were given up
        self.replays = 0
        self.eager_calls = 0
        self._capture, self._check, self._note = capture, check, note
        self._device_type = device_type

    def __deepcopy__(self, memo):
        return None

    def __reduce__(self):
        return (_nothing, ())

    def _eager(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        self.eager_calls += 1
        return run_network(self.model, x, coords, lead_time)

    def _give_up(self, why: str) -> None:
        self.disabled = why
        self.graphs.clear()
        self._note(f"note: CUDA graphs off for this run ({why}); training goes on without them "
                   f"(--cuda-graphs false turns them off from the start)")

    def __call__(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
        args = (x, coords) if lead_time is None else (x, coords, lead_time)
        if not self.model.training or not torch.is_grad_enabled():  # evaluation: never graphed, not counted
            return run_network(self.model, x, coords, lead_time)
        if (self.disabled is not None or x.device.type != self._device_type
                or torch.is_autocast_enabled(x.device.type)
                or any(a.requires_grad for a in args) or not all(a.is_floating_point() for a in args[:2])):
            return self._eager(x, coords, lead_time)
        key = tuple((tuple(a.shape), a.dtype, a.device) for a in args)
        graphed = self.graphs.get(key)
        if graphed is None:
            if len(self.graphs) >= self.max_graphs:
                return self._eager(x, coords, lead_time)
            with warnings.catch_warnings():
                # torch's notes on a prototype sync check and on the side stream the capture runs on: expected here
                warnings.filterwarnings("ignore", message=".*(Synchronization debug mode|AccumulateGrad node's stream"
                                                          "|no current CUDA context)")
                try:
                    self._check(self.model, args)
                except Exception as e:  # the network synchronises with the host: it cannot be captured
                    self._give_up(f"the network waits on the host in its training step: {_first_line(e)}")
                    return self._eager(x, coords, lead_time)
                try:
                    graphed = self._capture(self.model, args)
                except Exception as e:
                    self._give_up(f"capturing the training step failed: {_first_line(e)}")
                    return self._eager(x, coords, lead_time)
            self.graphs[key] = graphed
        self.replays += 1
        return graphed(*args)


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]
