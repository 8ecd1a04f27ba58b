"""Names the mistake behind a wrong gradient, for the self-check and the grader alike.

`name` searches the answer's neighbourhood (grader.judge.neighbourhood): the mistake is named only when the
answer equals the same wrong candidate on every configuration. Otherwise the hints say only what the
tensors make certain: a shape that is the transpose of the right one, a sum left out over a broadcast
dimension, all zeros, the rows or columns where the values are wrong. Never a guess stated as fact.
"""
from __future__ import annotations

import ast

import torch

from grader.exercise import ATOMIC, FUNCTION, FUSED, Answer, Exercise
from grader.judge import neighbourhood
from grader.judge.exam import CHAIN, Case
from grader.vocabulary import Broadcast, Transpose, Zeros, constant_multiple
from grader.vocabulary import shape_text as _shape


def _other_slip(keys: list[str], sentences: dict[str, tuple[str, bool]]) -> str:
    """The sentence of a second rule-table slip of the step that fits as well as the first and says something
    else ("" where none does): a variance term left out and one whose sum of a product is written as a
    product of sums, with a factor summing to zero, are the same values (a blind answer set's student was told
    the first for the second)."""
    first, whole = sentences[keys[0]]
    if whole or not keys[0].startswith(neighbourhood.SLIP):
        return ""
    return next((sentences[k][0] for k in keys[1:] if k.startswith(neighbourhood.SLIP) and not sentences[k][1]
                 and sentences[k][0] != first), "")


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=rtol, atol=atol))


def shape_hints(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> list[str]:
    hints = []
    gs, ws = tuple(got.shape), tuple(want.shape)
    squeezed_want = tuple(s for s in ws if s != 1)
    squeezed_got = tuple(s for s in gs if s != 1)
    if squeezed_got == squeezed_want and len(gs) == len(ws):
        # Only a size-1 dimension moved, e.g. (1, n) for (n, 1): not a transpose, not a wrong sum.
        same = _close(got.reshape(ws), want, rtol, atol)
        return [Broadcast.moved_one(_shape(gs), _shape(ws), same)]
    try:
        spread = got.expand(ws) if got.dim() <= len(ws) and got.numel() < want.numel() else None
    except RuntimeError:
        spread = None
    if spread is not None and _close(spread, want, rtol, atol):
        # e.g. a gradient of shape (1, H) given where it is (n, H) with every row that one row.
        return [Broadcast.left_broadcast(_shape(ws))]
    summed_to = [d for d, w in enumerate(ws) if w == 1]
    if got.dim() == 0 and summed_to and got.numel() < want.numel():
        # e.g. a batch-norm gain's gradient summed with .sum(): its (1, H) shape sums over the rows only.
        over = summed_to[0] if len(summed_to) == 1 else tuple(summed_to)
        hints.append(Broadcast.summed_everywhere(_shape(ws), over))
    if got.dim() == 2 and gs == ws[::-1]:
        hints.append(Transpose.looks(_close(got.T, want, rtol, atol)))
    elif (swapped := _swapped_dims(gs, ws)) and _close(got.transpose(*swapped), want, rtol, atol):
        # Only where the values confirm it: a view in the wrong order has these shapes too.
        hints.append(Transpose.swapped_shape(*swapped))
    if squeezed_got == squeezed_want and len(gs) != len(ws):
        if not gs:  # `.sum()` of everything: no keepdim=True gives it a dimension (an instructor trial's (1,) bias)
            hints.append(Broadcast.no_dimension(_shape(ws)))
        elif len(gs) < len(ws):
            hints.append(Broadcast.missing_keepdim(_shape(ws)))
        else:
            hints.append(Broadcast.extra_dim(_shape(ws)))
    ones_got = [d for d, g in enumerate(gs) if g == 1]
    ones_want = [d for d, w in enumerate(ws) if w == 1]
    if len(gs) == len(ws) and len(ones_got) == len(ones_want) == 1 and ones_got != ones_want:
        hints.append(Broadcast.wrong_dim_shape(_shape(ws), ones_want[0], ones_got[0]))
    if len(gs) == len(ws):
        for d, (g, w) in enumerate(zip(gs, ws, strict=True)):
            others_equal = all(a == b for i, (a, b) in enumerate(zip(gs, ws, strict=True)) if i != d)
            if w == 1 and g > 1 and others_equal:
                summed = _close(got.sum(d, keepdim=True), want, rtol, atol)
                hints.append(Broadcast.not_summed(d, summed))
    elif len(gs) > len(ws) and gs[len(gs) - len(ws):] == ws and max(gs[: len(gs) - len(ws)]) > 1:
        leading = tuple(range(len(gs) - len(ws)))
        summed = _close(got.sum(leading), want, rtol, atol)
        hints.append(Broadcast.not_summed(leading[0] if len(leading) == 1 else leading, summed))
    reduced = _reduced_over(got, want, rtol, atol)
    if reduced is not None:  # a sum where nothing was broadcast (the sum belongs to another tensor's gradient)
        hints.append(Broadcast.summed_unbroadcast(reduced, _shape(ws)))
    if not hints:
        hints.append(Broadcast.full_shape(_shape(ws)))
    return hints


def _reduced_over(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> int | None:
    """The dimension over which the expected gradient, summed (with keepdim or without), is the answer."""
    for d, w in enumerate(want.shape):
        if w > 1 and got.numel() * w == want.numel() and got.dim() in (want.dim(), want.dim() - 1):
            total = want.sum(d, keepdim=got.dim() == want.dim())
            if total.shape == got.shape and _close(got, total, rtol, atol):
                return d
    return None


def _swapped_dims(got: tuple[int, ...], want: tuple[int, ...]) -> tuple[int, int] | None:
    """The two dimensions whose sizes a shape has the other way round from the gradient's, in any rank
    (a batch of matrices transposed): a transpose in a 2-D one, told the same way in three or more."""
    if len(got) != len(want) or len(got) < 3:
        return None
    moved = [d for d, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    if len(moved) == 2 and got[moved[0]] == want[moved[1]] and got[moved[1]] == want[moved[0]]:
        return moved[0], moved[1]
    return None


def _indices(mask: torch.Tensor) -> str:
    picked = mask.nonzero().flatten().tolist()
    return ", ".join(map(str, picked[:8])) + (", ..." if len(picked) > 8 else "")


# How many times the tolerance an answer may be off everywhere and still be called close: a wrong step is off by
# about its own size, a dropped eps by about eps over a variance.
NEAR = 100
# How that hint starts: an account of the values (compare.judge), not a guess, so a check with random upstream
# gradients that shows it is not told it skipped them.
NEAR_SAID = "off by no more than a few times the tolerance anywhere"


def where_wrong(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> list[str]:
    """Where the values are wrong, when that is not everywhere: rows, columns or a count of entries. Right
    only where the gradient is zero (the rows of C no index of the batch picks) is wrong everywhere it
    could be: no place is named, which would point at the indexing."""
    wrong = ~torch.isclose(got, want, rtol=rtol, atol=atol)
    count, total = int(wrong.sum()), wrong.numel()
    if count == 0 or count == total or not bool((~wrong & want.ne(0)).any()):
        return []
    off = float(((got - want).abs() / (atol + rtol * want.abs())).max())
    if off < NEAR:
        # The places are only where a uniformly tiny difference crosses the tolerance: "wrong only in rows 0, 1,
        # 2, ..." sent an instructor trial's student with eps left out of batch norm looking for a row bug.
        # No number in it: a hint with none is said of a hidden configuration too
        return [f"{NEAR_SAID}: a small difference in the computation (a constant such as an eps left out or "
                "changed), not a wrong step or index"]
    if got.dim() == 2:
        for axis, label in ((1, "rows"), (0, "columns")):
            bad = wrong.any(axis)
            if int(bad.sum()) < bad.numel() and wrong.shape[1 - axis] > 1 and bool((~bad & want.ne(0).any(axis)).any()):
                return [f"wrong only in {label} {_indices(bad)} ({int(bad.sum())} of {bad.numel()}),"
                        " right in the others"]
    return [f"right in {total - count} of {total} entries, wrong in {count}"]


def value_hints(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> list[str]:
    if not torch.any(got):
        return [Zeros.HINT]
    if got.dim() == 2 and got.shape[0] == got.shape[1] and _close(got.T, want, rtol, atol):
        return [Transpose.looks(True)]
    return where_wrong(got, want, rtol, atol)


def diagnose(got: torch.Tensor, want: torch.Tensor, *, rtol: float, atol: float) -> list[str]:
    """Hints for a wrong answer on one configuration; `got` and `want` are float64 and `got` is finite
    when shapes agree. A constant factor is not claimed here: one configuration cannot tell a factor
    of n from any other number, so `name` looks for it on every configuration."""
    if got.shape != want.shape:
        return shape_hints(got, want, rtol, atol)
    return value_hints(got, want, rtol, atol)


def _constant(got: torch.Tensor, want: torch.Tensor, atol: float) -> float | None:
    """c when got is c times want, beyond doubt: want is far from zero and c is neither 0 nor 1."""
    scale = float(want.abs().max()) if want.numel() else 0.0
    if scale < 1e3 * atol:
        return None
    c = float((got * want).sum() / (want * want).sum())
    if abs(c) < 1e-6 or abs(c - 1) < 1e-5:
        return None
    if float((got - c * want).abs().max()) > 1e-6 * max(float(got.abs().max()), atol):
        return None
    return c


def counterpart(exercise: Exercise, answer: Answer) -> tuple[Answer, str] | None:
    """For a function's answer, the atomic answer of the same tensor and its CHAIN check: a gradient a
    function returns makes the same mistakes as the one-step cell of that tensor, so it is named with
    that cell's neighbourhood and catalogue, on the true upstream gradients."""
    if answer.kind != FUNCTION:
        return None
    atomic = next((a for a in exercise.answers if a.kind == ATOMIC and a.source == answer.source), None)
    return (atomic, CHAIN) if atomic else None


def name(tensors: list[tuple[Case, torch.Tensor]], answer: Answer, check: str, rtol: float, atol: float, *,
         factor: bool = True, code: str | None = None) -> str | None:
    """The mistake the answer's values equal on every configuration given, in a sentence about the
    student's code; None when no candidate fits them all. Without `factor`, a constant factor the
    answer is off by is named but not given (the configurations it was seen on are hidden). `code`: the
    answer cell's source, when the caller has it, read (never run) for the names it reads."""
    # A function's answer is the key it returns (C): its sentences name the gradient (dC), as a cell's do.
    variable = f"d{answer.source}" if answer.kind == FUNCTION else answer.variable
    # A fused cell and a function run a whole block: a step inside it may be wrong. A function's gradient
    # is first named as its tensor's one-step cell's would be; its inner steps are searched only when
    # nothing else fits (the step's candidates are cached per case, so a class pays for them once).
    block = answer if answer.kind in (FUSED, FUNCTION) else None
    if any(got.is_meta or got.layout != torch.strided for _, got in tensors):
        return None  # no values to name a mistake by (the comparison said what the tensor is)
    own = answer
    if tensors:
        answer, check = counterpart(tensors[0][0].exercise, answer) or (answer, check)
    tensors = [(case, got.detach().to(torch.float64)) for case, got in tensors]
    sentences: dict[str, tuple[str, bool]] = {}  # key: (sentence, whether it has its own subject)

    def search(found) -> list[str]:
        """The keys, in the order `found(case, got, keys)` gives them as (key, sentence, whole, fits), whose
        candidate equals the answer on every configuration where that is known, and on at least one.
        Tensor factors are many: each is made only while it has fitted every configuration before."""
        keys: list[str] | None = None
        seen: set[str] = set()  # keys that fitted somewhere, not only went unknown
        for case, got in tensors:
            fitted = []
            for key, sentence, whole, fits in found(case, got, keys):
                if keys is None or key in keys:
                    fit = fits(got, rtol, atol)
                    if fit is not False:
                        fitted.append(key)
                        if fit:  # a fingerprint's sentence is known once an answer fits it
                            sentences.setdefault(key, (sentence() if callable(sentence) else sentence, whole))
                            seen.add(key)
            keys = fitted if keys is None else [k for k in keys if k in fitted]
            if not keys:
                return []
        return [k for k in keys or [] if k in seen]

    def made(candidates):
        return ((c.key, c.said, c.whole, c.fits) for c in candidates)

    def factors(case, got, keys):
        for key, sentence, whole, make in neighbourhood.tensor_factors(case, answer, check):
            yield key, sentence, whole, lambda got, rtol, atol, make=make: _close(got, make(), rtol, atol)

    searches = {"candidates": lambda case, got, keys: made(neighbourhood.candidates(case, answer, check)),
                "tensor factors": factors}
    if answer is own:  # a function's code is not its gradient's one-step cell
        searches["reads"] = lambda case, got, keys: made(neighbourhood.read_swaps(case, answer, check, code, got))
    if block is not None:
        searches["inside"] = lambda case, got, keys: made(neighbourhood.inside(
            case, block, CHAIN if block.kind == FUNCTION else check, None if keys is None else set(keys), got))
    for family in neighbourhood.SEARCHES:
        keys = search(searches[family]) if family in searches else None
        if keys and family == "candidates" and "reads" in searches and tensors \
                and neighbourhood.unwritten(tensors[0][0], answer, check, keys[0], code):
            # The code's own reading, where it fits, over a slip not written; else the next account that fits
            # and reads nothing the code leaves out (a branch forgotten whole, where leaving out a factor of
            # it cancels the branch too: the KL term's exp).
            written = [k for k in keys if not neighbourhood.unwritten(tensors[0][0], answer, check, k, code)]
            keys = search(searches["reads"]) or written or keys
        if keys:
            sentence, whole = sentences[keys[0]]
            # A second slip the code says the student did not write is not offered beside the first.
            other = _other_slip([k for i, k in enumerate(keys) if not i or not tensors or not neighbourhood.unwritten(
                tensors[0][0], answer, check, k, code)], sentences)
            if other:  # two of the step's slips give these values: both said, neither chosen
                return f"your {variable} {sentence}, or {other}: either gives these values"
            return sentence if whole else f"your {variable} {sentence}"
    constants = []
    for case, got in tensors:
        want = case.expected(answer, check)
        constants.append(_constant(got, want.to(torch.float64), atol) if got.shape == want.shape else None)
    if constants and None not in constants and max(constants) - min(constants) <= 1e-6 * abs(constants[0]):
        return f"your {variable} {constant_multiple(constants[0] if factor else None)}"
    return None


def every_row_picked(tensors: list[tuple[Case, torch.Tensor]], answer: Answer, check: str, rtol: float, atol: float,
                     tree: ast.AST | None) -> str | None:
    """`dx[:, idx]` written for `dx[range(n), idx]` (the thirteenth student trial's, told only "wrong values" by the
    self-check, which has no hidden catalogue): every row's entries at each of idx's columns, where the gradient has
    one entry per row. Told by the code's subscript and by the values on every configuration: they differ from the
    gradient only in idx's columns, and never at a row's own entry. `tree`: the cell's code parsed."""
    variable = answer.variable
    if tree is None:
        return None
    index = next((n.slice.elts[1].id for n in ast.walk(tree) if isinstance(n, ast.Subscript)
                  and isinstance(n.value, ast.Name) and n.value.id == variable and isinstance(n.slice, ast.Tuple)
                  and len(n.slice.elts) == 2 and isinstance(n.slice.elts[1], ast.Name)
                  and ast.unparse(n.slice.elts[0]) == ":"), None)
    if index is None or not tensors or answer.kind == FUNCTION:
        return None
    for case, got in tensors:
        picked, want = case.values.get(index), case.expected(answer, check).to(torch.float64)
        if not isinstance(picked, torch.Tensor) or picked.dtype.is_floating_point or picked.dim() != 1 \
                or want.dim() != 2 or got.shape != want.shape or len(picked) != want.shape[0]:
            return None
        wrong = ~torch.isclose(got.detach().to(torch.float64), want, rtol=rtol, atol=atol)
        columns = torch.zeros(want.shape[1], dtype=torch.bool)
        columns[picked] = True
        if not wrong.any() or wrong[torch.arange(len(picked)), picked].any() or (wrong & ~columns).any():
            return None
    return (f"your {variable}[:, {index}] is every row at each of {index}'s columns, where the gradient has one entry "
            f"per row (row i at column {index}[i]): index with {variable}[range({index}.shape[0]), {index}]")
