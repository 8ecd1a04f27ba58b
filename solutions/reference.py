"""The lecture's reference answers, run the way the notebook and the grader run answer cells.

The answers are derived from the exercise's forward lines by the rule table (grader.derive), as every
exercise's are: nobody writes them, so none can drift from the network. This module executes them in
the forward pass's namespace for tests and benchmarks. Never released to students.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from grader.exercises.makemore_mlp import EXERCISE
from grader.exercises.makemore_mlp.answers import ANSWERS, ATOMIC, EX4_CELL, EX4_FUNCTION
from grader.exercises.makemore_mlp.model import PARAMETERS, forward


@functools.cache
def _cells() -> tuple[tuple[str, str], ...]:
    from grader.lms import skeleton

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
    for grade_id in ATOMIC:
        run_cell(grade_id, ns)
    return {g: ns[g] for g in ATOMIC}


def fused(grade_id: str, values: dict[str, torch.Tensor], **upstream: torch.Tensor) -> torch.Tensor:
    """Exercises 2 and 3: one fused answer, given only the forward pass and its allowed upstream."""
    answer = next(a for a in ANSWERS if a.grade_id == grade_id)
    return run_cell(grade_id, {**namespace(values), **upstream})[answer.variable]


def manual_backward(params, cache, Yb) -> dict[str, torch.Tensor]:
    """Exercise 4: every parameter's gradient, without autograd."""
    return run_cell(EX4_CELL, {"torch": torch, "F": F})[EX4_FUNCTION](params, cache, Yb)


@torch.no_grad()
def train_step(params: dict[str, torch.Tensor], Xb, Yb, lr: float) -> torch.Tensor:
    """One SGD step driven only by the manual backward; updates `params` in place, returns the loss."""
    values = forward(params, Xb, Yb)
    grads = manual_backward(params, values, Yb)
    for name in PARAMETERS:
        params[name] -= lr * grads[name]
    return values["loss"]
