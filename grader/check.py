"""The self-check students call after each answer cell: their gradient against autograd's on the
notebook's own batch, one line each, like the lecture's `cmp` but strict about shapes.

It prints to stdout only, never stderr (nbgrader zeroes a cell that writes to stderr), and a blank
answer is "not attempted yet" so Run All still reaches the end of the notebook. It needs neither the
solutions nor the hidden tests.
"""
from __future__ import annotations

import torch

from grader.compare import BLANK, SQUEEZABLE, compare

# Float64 rounding is ~1e-16, so these only absorb a different order of operations; float32 noise on
# gradients that are zero in exact arithmetic (dlogit_maxes, db1) reaches ~1e-8, hence its looser atol.
TOLERANCES = {torch.float64: (1e-5, 1e-8), torch.float32: (1e-4, 1e-6)}


class SelfCheck:
    """`check = SelfCheck(n=n)` once, then `check("dprobs", dprobs, probs)` after each answer."""

    def __init__(self, n: int | None = None):
        self.n = n

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
        return f"{label} {status}: {verdict.message}{hints}"
