"""Names the mistake behind a wrong gradient from the tensors alone: each hint is a transform of the
expected gradient (its transpose, a sum over a broadcast dimension, a constant factor, ...) that the
answer turned out to equal, never a guess from the code.

Mistakes that need the forward pass to recognise (a missing branch, a biased variance, repeated
indices overwritten) are found by the hidden suite, which can compute those wrong answers itself.
"""
from __future__ import annotations

import torch


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=rtol, atol=atol))


def _shape(shape) -> str:
    return str(tuple(shape))


def _not_summed(dims, summed: bool) -> str:
    where = f"dimension {dims}" if isinstance(dims, int) else f"dimensions {dims}"
    return (f"not summed over {where}, along which this tensor was broadcast in the forward pass"
            + (" (summing it there gives the expected gradient)" if summed else ""))


def shape_hints(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> list[str]:
    hints = []
    gs, ws = tuple(got.shape), tuple(want.shape)
    if got.dim() == 2 and gs == ws[::-1]:
        same = _close(got.T, want, rtol, atol)
        hints.append("looks transposed" + (": its transpose is the expected gradient" if same else
                                           " (the reverse of the expected shape): swap the operands or add .T"))
    squeezed_want = tuple(s for s in ws if s != 1)
    squeezed_got = tuple(s for s in gs if s != 1)
    if squeezed_got == squeezed_want and len(gs) != len(ws):
        if len(gs) < len(ws):
            hints.append(f"missing keepdim=True: a gradient has its tensor's shape, {_shape(ws)}")
        else:
            hints.append(f"an extra dimension of size 1: a gradient has its tensor's shape, {_shape(ws)}")
    ones_got = [d for d, g in enumerate(gs) if g == 1]
    ones_want = [d for d, w in enumerate(ws) if w == 1]
    if len(gs) == len(ws) and len(ones_got) == len(ones_want) == 1 and ones_got != ones_want:
        hints.append(f"summed over the wrong dimension: a gradient of shape {_shape(ws)} comes from a sum over "
                     f"dimension {ones_want[0]} (keepdim=True), not over dimension {ones_got[0]}")
    if len(gs) == len(ws):
        for d, (g, w) in enumerate(zip(gs, ws)):
            others_equal = all(a == b for i, (a, b) in enumerate(zip(gs, ws)) if i != d)
            if w == 1 and g > 1 and others_equal:
                summed = _close(got.sum(d, keepdim=True), want, rtol, atol)
                hints.append(_not_summed(d, summed))
    elif len(gs) > len(ws) and gs[len(gs) - len(ws):] == ws and max(gs[: len(gs) - len(ws)]) > 1:
        leading = tuple(range(len(gs) - len(ws)))
        summed = _close(got.sum(leading), want, rtol, atol)
        hints.append(_not_summed(leading[0] if len(leading) == 1 else leading, summed))
    if not hints:
        hints.append(f"a gradient has exactly its tensor's shape, {_shape(ws)}")
    return hints


def _factor_hint(c: float, n: int | None) -> str:
    if abs(c + 1) < 1e-6:
        return "sign flipped"
    if n:
        for value, text in (
            (n, "n times too large: a missing /n?"),
            (1 / n, "n times too small: an extra /n?"),
            (n / (n - 1), "off by n/(n-1): the biased variance (1/n) where the forward uses 1/(n-1)?"),
            ((n - 1) / n, "off by (n-1)/n: 1/(n-1) where the forward uses 1/n?"),
            (-n, "sign flipped and n times too large"),
            (-1 / n, "sign flipped and n times too small"),
        ):
            if abs(c - value) <= 1e-6 * abs(value):
                return text
    if abs(c - 2) < 1e-6 or abs(c - 0.5) < 1e-6:
        return f"off by a factor of {c:g}: a missing or extra 2 (from a square)?"
    return f"off by a constant factor of {c:.4g}"


def value_hints(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float, n: int | None) -> list[str]:
    if not torch.any(got):
        return ["all zeros"]
    hints = []
    denominator = float((want * want).sum())
    if denominator > 0:
        c = float((got * want).sum()) / denominator
        if c != 0 and _close(got, c * want, rtol, atol):
            return [_factor_hint(c, n)]
    if got.dim() == 2 and got.shape[0] == got.shape[1] and _close(got.T, want, rtol, atol):
        return ["looks transposed: its transpose is the expected gradient"]
    wrong = ~torch.isclose(got, want, rtol=rtol, atol=atol)
    count, total = int(wrong.sum()), wrong.numel()
    if 0 < count <= total // 2:
        hints.append(f"right in {total - count} of {total} entries, wrong in {count}")
    return hints


def diagnose(got: torch.Tensor, want: torch.Tensor, *, rtol: float, atol: float, n: int | None = None) -> list[str]:
    """Hints for a wrong answer; `got` and `want` are float64 and `got` is finite when shapes agree."""
    if got.shape != want.shape:
        return shape_hints(got, want, rtol, atol)
    return value_hints(got, want, rtol, atol, n)
