"""Higher-order derivatives through the fused layer functions.

The fused CPU paths (the Galerkin and linear attention, the ReLU feed-forward block) are custom autograd functions
whose backward is hand-written with in-place and ``out=`` products: fast, but not itself differentiable, and without
the rules that ``torch.func``'s transforms (``vmap``, ``jacrev``, ``jvp``, ``grad``) need.  Users of operator
networks differentiate them again (a physics-informed residual of the output, a gradient penalty, a Hessian-vector
product), so:

* :func:`graph_backward` is what the fused functions' backward does when autograd asks for a differentiable
  gradient (``backward(create_graph=True)``, ``torch.autograd.grad(..., create_graph=True)``; then the backward runs
  with grad mode on): it recomputes the function's output from the same inputs with plain torch operations and
  differentiates that with a graph, so the gradient can be differentiated again.  First-order gradients keep the
  hand-written backward (grad mode is off there).
* :func:`transforms_active` tells the layers to take their plain path while a ``torch.func`` transform or forward-mode
  AD is running.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["graph_backward", "transforms_active"]


def graph_backward(plain: Callable, inputs: Sequence, needs: Sequence[bool], grads: Sequence[Tensor]) -> tuple:
    """The gradients of ``plain(*inputs)`` (a tensor or a tuple of tensors) against ``grads``, for the inputs whose
    ``needs`` is true (None for the others), formed with a graph so that they can be differentiated again."""
    with torch.enable_grad():
        # each input that needs a gradient enters through its own view: the gradients are then the partial
        # derivatives along those views only (an input that also depends on another, as the folded matrices of a
        # layer depend on its x, would otherwise be counted twice, once here and once by autograd's own chain)
        args = [t.view_as(t) if need else t for t, need in zip(inputs, needs)]
        out = plain(*args)
        outs = out if isinstance(out, tuple) else (out,)
        wrt = [t for t, need in zip(args, needs) if need]
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        if not wrt or not pairs:
            return tuple(None for _ in needs)
        got = iter(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], create_graph=True,
                                       allow_unused=True))
    res = []
    for t, need in zip(args, needs):
        if not need:
            res.append(None)
            continue
        g = next(got)
        res.append(torch.zeros_like(t) if g is None else g)
    return tuple(res)


def transforms_active(*tensors: Tensor) -> bool:
    """Whether a ``torch.func`` transform (vmap, grad, jacrev, jvp, ...) is running, or one of ``tensors`` carries a
    forward-mode tangent: custom autograd functions without transform rules must not be used then."""
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    if active is not None and active():
        return True
    from torch.autograd import forward_ad

    if getattr(forward_ad, "_current_level", -1) >= 0:
        return any(forward_ad.unpack_dual(t).tangent is not None for t in tensors if isinstance(t, Tensor))
    return False
