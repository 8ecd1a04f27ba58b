"""The self-check students call after each answer cell: their gradient against autograd's on the
notebook's own batch, one line each, like the lecture's `cmp` but strict about shapes.

It prints to stdout only, never stderr (nbgrader zeroes a cell that writes to stderr), and a blank
answer is "not attempted yet" so Run All still reaches the end of the notebook. It needs neither the
solutions nor the hidden tests; a failed check points to `backprop-ninja solution`, which shows the
reference once the notebook holds an attempt.
"""
from __future__ import annotations

import importlib.util
import time

import torch

from grader.compare import BLANK, SQUEEZABLE, compare
from grader.exercise import ANSWERS, BY_GRADE_ID

# Float64 rounding is ~1e-16, so these only absorb a different order of operations; float32 noise on
# gradients that are zero in exact arithmetic (dlogit_maxes, db1) reaches ~1e-8, hence its looser atol.
TOLERANCES = {torch.float64: (1e-5, 1e-8), torch.float32: (1e-4, 1e-6)}


def grade_ids(name: str, exercise: int | None = None) -> tuple[str, ...]:
    """The grade ids a check of `name` may be about. The notebook passes the variable's name, which
    exercises 1 to 3 share (`dlogits` is exercise 1's and exercise 2's); exercise 4 has its own check."""
    if exercise == 4:
        return tuple(g for g in (f"ex4_{name}",) if g in BY_GRADE_ID)
    return tuple(a.grade_id for a in ANSWERS if a.exercise != 4 and a.variable == name)


def pointer(name: str, exercise: int | None = None) -> str:
    """Where a student stuck on `name` finds the reference, explained (empty for a name of their own)."""
    ids = grade_ids(name, exercise)
    if not ids or importlib.util.find_spec("grader.solution") is None:  # backprop-ninja-student: no references
        return ""
    others = "".join(f" (exercise {BY_GRADE_ID[g].exercise}: {g})" for g in ids[1:])
    return f" — stuck? backprop-ninja solution {ids[0]} --notebook YOUR_NOTEBOOK.ipynb{others}"


class SelfCheck:
    """`check = SelfCheck(n=n)` once, then `check("dprobs", dprobs, probs)` after each answer;
    exercise 4's checks are `SelfCheck(n=n, exercise=4)`, so that a failure points to its grade ids."""

    def __init__(self, n: int | None = None, exercise: int | None = None):
        self.n = n
        self.exercise = exercise

    def __call__(self, name: str, manual, tensor: torch.Tensor) -> None:
        print(self.line(name, manual, tensor))

    def line(self, name: str, manual, tensor: torch.Tensor) -> str:
        label = f"{name:<15s}|"
        # Reading .grad of a non-leaf that never called retain_grad() makes torch warn on stderr.
        expected = tensor.grad if tensor.is_leaf or tensor.retains_grad else None
        if expected is None:
            return f"{label} no autograd gradient on {name}: run the forward and loss.backward() cells first"
        rtol, atol = TOLERANCES.get(expected.dtype, TOLERANCES[torch.float32])
        verdict = compare(manual, expected, rtol=rtol, atol=atol, n=self.n)
        if verdict.status == BLANK:
            return f"{label} not attempted yet"
        if verdict.passed:
            exact = verdict.status == "exact"
            return (f"{label} exact: {str(exact):5s} | approximate: True  | maxdiff: {verdict.maxdiff:.3g}"
                    f" | shape {tuple(expected.shape)} ok")
        status = "right values, wrong shape" if verdict.status == SQUEEZABLE else "WRONG"
        hints = "".join(f" — hint: {h}" for h in verdict.hints)
        return f"{label} {status}: {verdict.message}{hints}{pointer(name, self.exercise)}"

    def training(self, fused_forward, manual_backward, params: dict, batches, lr: float) -> None:
        """Exercise 4's self-check: the same SGD steps driven by manual_backward and by autograd, from the
        same parameters and batches; one line, naming the first step where the two part."""
        manual = {k: v.detach().clone() for k, v in params.items()}
        auto = {k: v.detach().clone() for k, v in params.items()}
        label = f"{'training':<15s}|"
        first = last = None
        spent = {"yours": 0.0, "autograd": 0.0}
        for step, (X, Y) in enumerate(batches, start=1):
            with torch.no_grad():
                loss, cache = fused_forward(manual, X, Y)
                started = time.perf_counter()
                grads = manual_backward(manual, cache, Y)
                spent["yours"] += time.perf_counter() - started
            if not grads or any(grads.get(k) is None for k in manual):
                print(f"{label} not attempted yet")
                return
            leaves = {k: v.clone().requires_grad_() for k, v in auto.items()}
            reference, _ = fused_forward(leaves, X, Y)
            started = time.perf_counter()
            true = dict(zip(leaves, torch.autograd.grad(reference, list(leaves.values()))))
            spent["autograd"] += time.perf_counter() - started
            if not torch.isclose(loss, reference.detach(), rtol=1e-5, atol=1e-8):
                print(f"{label} WRONG: diverges from autograd at step {step}: loss {loss.item():.6f} with your "
                      f"gradients, {reference.item():.6f} with autograd's")
                return
            first = loss.item() if first is None else first
            last = loss.item()
            with torch.no_grad():
                manual = {k: manual[k] - lr * grads[k] for k in manual}
                auto = {k: auto[k] - lr * true[k] for k in auto}
        mine, theirs = (1e3 * spent[k] / len(batches) for k in ("yours", "autograd"))
        print(f"{label} {len(batches)} steps match autograd: loss {first:.4f} -> {last:.4f}; your backward "
              f"{mine:.2f} ms/step, autograd's {theirs:.2f} ms/step ({theirs / mine:.1f}x)")
