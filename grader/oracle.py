"""Torch autograd as the ground truth: the true gradient of the loss for every tensor, and the
vector-Jacobian product of any one part of the forward pass for arbitrary upstream gradients.

Only the trusted process calls this; nothing here is ever sent to a child before the child's own
answer for that tensor is back.
"""
from __future__ import annotations

import torch

from grader.model import PARAMETERS, STEPS, forward


def chain_gradients(params, Xb, Yb) -> dict[str, torch.Tensor]:
    """d loss / d X for every parameter and intermediate, keyed by the gradient's name (`dX`)."""
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    values = forward(leaves, Xb, Yb)
    names = [*PARAMETERS, *(s.name for s in STEPS if s.name != "loss")]
    grads = torch.autograd.grad(values["loss"], [values[k] for k in names])
    return {"d" + k: g.detach() for k, g in zip(names, grads)}


def vjp(values: dict[str, torch.Tensor], source: str, upstream: dict[str, torch.Tensor]) -> torch.Tensor:
    """The gradient reaching `source` when each tensor named in `upstream` receives that gradient.

    Only the steps downstream of `source` are recomputed, with everything else held constant, so
    `upstream` = the direct consumers gives one local backward step and `{"hpreact": g}` from
    `hprebn` gives the whole batch-norm block.
    """
    with torch.enable_grad():
        leaf = values[source].detach().clone().requires_grad_(True)
        live = {k: v.detach() for k, v in values.items()}
        live[source] = leaf
        touched = {source}
        for step in STEPS:
            if touched.intersection(step.inputs):
                live[step.name] = step.fn(*(live[i] for i in step.inputs))
                touched.add(step.name)
        outputs = [live[name] for name in upstream]
        missing = [name for name in upstream if name not in touched]
        if missing:
            raise ValueError(f"{missing} do not depend on {source}")
        (grad,) = torch.autograd.grad(outputs, leaf, [upstream[name] for name in upstream])
    return grad.detach()
