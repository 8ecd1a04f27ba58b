"""The lecture's reference answers, run the way the notebook and the grader run answer cells.

The answers are derived from the exercise's forward lines by the rule table (grader.derive), as every
exercise's are: nobody writes them, so none can drift from the network. This module executes them in
the forward pass's namespace for tests and benchmarks. Never released to students.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from grader.exercise import Sizes
from grader.exercises.makemore_mlp import EXERCISE


def forward(params: dict[str, torch.Tensor], Xb: torch.Tensor, Yb: torch.Tensor) -> dict[str, torch.Tensor]:
    """The parameters, the batch and every intermediate by name: the notebook's cache, so the sizes,
    which are numbers, left out."""
    network = EXERCISE.network
    values = network.forward(params, {"Xb": Xb, "Yb": Yb})
    return {k: v for k, v in values.items() if k not in network.sizes}


def shapes(sizes: Sizes) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape written out by hand from the lecture, to check the derived network against."""
    n, V, B, E, H = sizes.n, sizes.vocab, sizes.block_size, sizes.n_embd, sizes.n_hidden
    return {
        "C": (V, E), "W1": (B * E, H), "b1": (H,), "W2": (H, V), "b2": (V,),
        "bngain": (1, H), "bnbias": (1, H),
        "emb": (n, B, E), "embcat": (n, B * E), "hprebn": (n, H), "bnmeani": (1, H),
        "bndiff": (n, H), "bndiff2": (n, H), "bnvar": (1, H), "bnvar_inv": (1, H),
        "bnraw": (n, H), "hpreact": (n, H), "h": (n, H), "logits": (n, V),
        "logit_maxes": (n, 1), "norm_logits": (n, V), "counts": (n, V),
        "counts_sum": (n, 1), "counts_sum_inv": (n, 1), "probs": (n, V), "logprobs": (n, V),
        "loss": (),
    }


@functools.cache
def _cells() -> tuple[tuple[str, str], ...]:
    from grader.authoring import skeleton

    return tuple(skeleton.references(EXERCISE).items())


def cells() -> dict[str, str]:
    """answer cell id -> the source of its reference answer, comments included."""
    return dict(_cells())


def namespace(values: dict[str, torch.Tensor]) -> dict:
    """What an answer cell may read: the forward pass by its lecture names, n, torch and F."""
    return {**values, "n": values["Xb"].shape[0], "torch": torch, "F": F}


def run_cell(grade_id: str, ns: dict) -> dict:
    exec(compile(cells()[grade_id], f"<answer {grade_id}>", "exec"), ns)
    return ns


def atomic_gradients(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Exercise 1: all 26 gradients, in the notebook's order."""
    ns = namespace(values)
    for grade_id in EXERCISE.atomic:
        run_cell(grade_id, ns)
    return {g: ns[g] for g in EXERCISE.atomic}


def fused(grade_id: str, values: dict[str, torch.Tensor], **upstream: torch.Tensor) -> torch.Tensor:
    """Exercises 2 and 3: one fused answer, given only the forward pass and its allowed upstream."""
    answer = next(a for a in EXERCISE.answers if a.grade_id == grade_id)
    return run_cell(grade_id, {**namespace(values), **upstream})[answer.variable]


def manual_backward(params, cache, Yb) -> dict[str, torch.Tensor]:
    """Exercise 4: every parameter's gradient, without autograd."""
    function = EXERCISE.functions[0]
    return run_cell(function.cell, {"torch": torch, "F": F})[function.name](params, cache, Yb)


@torch.no_grad()
def train_step(params: dict[str, torch.Tensor], Xb, Yb, lr: float) -> torch.Tensor:
    """One SGD step driven only by the manual backward; updates `params` in place, returns the loss."""
    values = forward(params, Xb, Yb)
    grads = manual_backward(params, values, Yb)
    for name in EXERCISE.network.parameters:
        params[name] -= lr * grads[name]
    return values["loss"]
