"""Torch autograd as the ground truth: the true gradient of the loss for every tensor, and the
vector-Jacobian product of any one part of the forward pass for arbitrary upstream gradients, for any
exercise's network.

Only the trusted process calls this; nothing here is ever sent to a child before the child's own
answer for that tensor is back.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from grader.exercise import Network


def _held(network: Network, values: Mapping) -> dict:
    """`values` detached, with the network's sizes (plain numbers some steps read) added back."""
    held = {k: v.detach() for k, v in values.items() if isinstance(v, torch.Tensor)}
    held.update(network.size_values(held))
    return held


def chain_gradients(network: Network, params, data) -> dict[str, torch.Tensor]:
    """d loss / d X for every parameter and intermediate, keyed by the gradient's name (`dX`); an
    intermediate made from no parameter (a causal mask) is a constant and has none."""
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    values = network.forward(leaves, data)
    names = [*network.parameters, *(n for n in network.intermediates if n != network.loss and values[n].requires_grad)]
    grads = torch.autograd.grad(values[network.loss], [values[k] for k in names])
    return {"d" + k: g.detach() for k, g in zip(names, grads, strict=True)}


def against(outputs, upstream) -> torch.Tensor:
    """The sum of each output's inner product with its upstream gradient: its gradient is the vector-Jacobian
    product autograd's `grad_outputs` gives, without the check of shapes that makes torch import its symbolic
    shapes and sympy (half a second of every process that grades, checks or derives)."""
    total = 0
    for output, gradient in zip(outputs, upstream, strict=True):
        if output.shape != gradient.shape:
            raise ValueError(f"an upstream gradient of shape {tuple(gradient.shape)} for a value of shape "
                             f"{tuple(output.shape)}")
        total = total + (output * gradient).sum()
    return total


def local_vjp(network: Network, values: Mapping, source: str, upstream: Mapping[str, torch.Tensor],
              fns: Mapping | None = None) -> torch.Tensor:
    """One backward step: the sum, over the steps named in `upstream` that read `source` directly, of
    the gradient each passes back to `source` when its output receives `upstream[step]`.

    Every other input of those steps is held at its forward value, so nothing flows through a second
    path: this is exactly what one atomic answer cell computes from its upstream gradients. `fns`
    replaces some steps' functions (a forward with another eps, say): the diagnosis's wrong answers are
    the right computation of a slightly different network.
    """
    steps = network.step
    held = _held(network, values)
    with torch.enable_grad():
        leaf = held[source].clone().requires_grad_(True)
        outputs = []
        for name in upstream:
            step = steps[name]
            if source not in step.inputs:
                raise ValueError(f"{name} does not read {source} directly")
            fn = (fns or {}).get(name, step.fn)
            outputs.append(fn(*(leaf if i == source else held[i] for i in step.inputs)))
        (grad,) = torch.autograd.grad(against(outputs, upstream.values()), leaf)
    return grad.detach()


def _block(network: Network, values: Mapping, source: str, sink: str):
    """`sink` as a function of `source`, every other input held at its forward value."""
    held = _held(network, values)
    reached = network.descendants(source)
    if sink not in (source, *reached):
        raise ValueError(f"{sink} does not depend on {source}")
    needed = network.ancestors(sink) | {sink}
    steps = [network.step[name] for name in reached if name in needed]

    def run(x: torch.Tensor) -> torch.Tensor:
        live = {**held, source: x}
        for step in steps:
            live[step.name] = step.fn(*(live[i] for i in step.inputs))
        return live[sink]
    return run, held[source]


def block_vjp(network: Network, values: Mapping, source: str, sink: str, upstream: torch.Tensor,
              batched: bool = False) -> torch.Tensor:
    """The gradient reaching `source` through every path to `sink` when `sink` receives `upstream`:
    the expected answer of a fused cell that starts from an intermediate's gradient rather than the loss.
    `batched`: `upstream` stacks several along a first dimension, and so does the result: one forward pass
    and a backward pass each (autograd's own batching, `is_grads_batched`, makes torch import vmap's
    machinery and sympy, half a second of a process, for what a few backward passes do in milliseconds)."""
    run, value = _block(network, values, source, sink)
    with torch.enable_grad():
        leaf = value.clone().requires_grad_(True)
        out = run(leaf)
        grads = [torch.autograd.grad(against([out], [one]), leaf, retain_graph=True)[0]
                 for one in (upstream if batched else [upstream])]
    return (torch.stack(grads) if batched else grads[0]).detach()


def fused_vjp(network: Network, values: Mapping, source: str, sink: str, upstream: Mapping[str, torch.Tensor]
              ) -> torch.Tensor:
    """The gradient a fused cell of the block from `sink` back to `source` computes when `sink` and each step
    outside the block that reads into it (Network.outside_readers) receive `upstream[step]`: every path
    through the block to `sink`, and the one step of each outside reader, its other inputs held."""
    held = _held(network, values)
    inner = set(network.descendants(source)) & network.ancestors(sink)
    with torch.enable_grad():
        leaf = held[source].clone().requires_grad_(True)
        live = {**held, source: leaf}
        for step in network.steps:
            if step.name in inner:
                live[step.name] = step.fn(*(live[i] for i in step.inputs))
        outputs = [network.step[name].fn(*(live[i] for i in network.step[name].inputs)) for name in upstream]
        (grad,) = torch.autograd.grad(against(outputs, upstream.values()), leaf)
    return grad.detach()


def block_jvp(network: Network, values: Mapping, source: str, sink: str, direction: torch.Tensor) -> torch.Tensor:
    """How `sink` moves when `source` moves along `direction`: with it, <e, J d> = <J^T e, d> tests many
    gradients e of `sink` against one of `source` for the price of a single forward pass."""
    run, value = _block(network, values, source, sink)
    # J d as the gradient, with respect to u, of <J^T u, d>: two backward passes. Forward-mode AD (torch.func,
    # forward_ad) loads decompositions through torch.jit, which warns, and the notebook's self-check fails
    # on any warning.
    with torch.enable_grad():
        leaf = value.clone().requires_grad_(True)
        out = run(leaf)
        probe = torch.zeros_like(out, requires_grad=True)
        (back,) = torch.autograd.grad(against([out], [probe]), leaf, create_graph=True)
        (moved,) = torch.autograd.grad(against([back], [direction]), probe, allow_unused=True)
    return (torch.zeros_like(out) if moved is None else moved).detach()
