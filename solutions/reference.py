"""The reference solutions, run the way the notebook and the grader run answer cells.

The answers themselves live in `answers.py`, one cell per grade id; this module splits that file
into cells and executes them in the forward pass's namespace. Never released to students.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch
import torch.nn.functional as F

from grader.exercises.makemore_mlp.answers import ANSWERS, ATOMIC, EX4_CELL, EX4_FUNCTION
from grader.exercises.makemore_mlp.model import PARAMETERS, forward

ANSWERS_FILE = Path(__file__).with_name("answers.py")
_MARKER = re.compile(r"^# %% (\S+)\s*$", re.MULTILINE)


def cells() -> dict[str, str]:
    """grade id -> the source of its reference answer cell."""
    parts = _MARKER.split(ANSWERS_FILE.read_text())
    return {grade_id: body.strip() + "\n" for grade_id, body in zip(parts[1::2], parts[2::2], strict=True)}


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
