"""One strict comparison of an answer with its expected gradient, shared by the self-check and the
hidden grader, so a student never sees a tensor pass one and fail the other.

Stricter than the lecture's `cmp`: that one broadcast and never looked at shapes, so five wrong-shape
answers passed it (NOTES §1). Here the answer must be a plain floating tensor of exactly the expected
shape, finite, and close with both rtol and atol.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from grader.diagnose import diagnose

MATCH, APPROXIMATE, BLANK, SQUEEZABLE, WRONG = "exact", "approximate", "blank", "squeezable", "wrong"


@dataclass(frozen=True)
class Verdict:
    status: str
    message: str
    maxdiff: float | None = None
    hints: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return self.status in (MATCH, APPROXIMATE)


def _shape(t) -> str:
    return str(tuple(t.shape))


def compare(answer, expected: torch.Tensor, *, rtol: float, atol: float, n: int | None = None) -> Verdict:
    if answer is None:
        return Verdict(BLANK, "not attempted yet")
    if type(answer) is not torch.Tensor:
        if isinstance(answer, torch.Tensor):
            return Verdict(WRONG, f"is a {type(answer).__name__}, a subclass of torch.Tensor: give a plain tensor")
        return Verdict(WRONG, f"is a {type(answer).__name__}, not a torch.Tensor")
    if not answer.dtype.is_floating_point:
        return Verdict(WRONG, f"has dtype {answer.dtype}: a gradient is a floating-point tensor")
    if answer.is_sparse or answer.layout != torch.strided:
        return Verdict(WRONG, "is not a dense tensor")
    got = answer.detach().to(torch.float64)
    want = expected.detach().to(torch.float64)
    if got.shape != want.shape:
        hints = tuple(diagnose(got, want, rtol=rtol, atol=atol, n=n))
        message = f"shape {_shape(got)}, expected {_shape(want)}"
        if got.numel() == want.numel() and [s for s in got.shape if s != 1] == [s for s in want.shape if s != 1]:
            if torch.isfinite(got).all() and torch.allclose(got.reshape(want.shape), want, rtol=rtol, atol=atol):
                return Verdict(SQUEEZABLE, message + ": right values, but a size-1 dimension is missing or extra", hints=hints)
        return Verdict(WRONG, message, hints=hints)
    # The right answers first, in as few tensor operations as possible: a class is hundreds of
    # thousands of comparisons. An answer equal or close to a finite expectation is finite.
    if torch.equal(got, want):
        return Verdict(MATCH, "exact", 0.0)
    if torch.allclose(got, want, rtol=rtol, atol=atol):
        return Verdict(APPROXIMATE, "approximately equal", (got - want).abs().max().item())
    if not torch.isfinite(got).all():
        bad = (~torch.isfinite(got)).sum().item()
        kinds = "NaN" if torch.isnan(got).any() else "inf"
        return Verdict(WRONG, f"contains {kinds} ({bad} of {got.numel()} entries are not finite)")
    maxdiff = (got - want).abs().max().item() if got.numel() else 0.0
    hints = tuple(diagnose(got, want, rtol=rtol, atol=atol, n=n))
    return Verdict(WRONG, f"wrong values (max abs diff {maxdiff:.3g})", maxdiff, hints)
