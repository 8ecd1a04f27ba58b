"""The wrong answers next to the right one, generated from the forward pass, so that a mistake nobody
wrote down still gets its name.

For one answer on one configuration and check, each candidate is the value a slightly wrong cell
would produce: a branch of a tensor used twice dropped or scaled, another forward tensor of the same
shape where the derivative needs an operand (hpreact for h), the local derivative or the upstream
gradient left out, a power rule or eps slip in an elementwise step, a constant factor (n, n-1, 2,
-1), a transpose, repeated indices overwritten. Every candidate is computed here, in the trusted
process, by autograd on the forward pass with that one change (oracle.local_vjp), never from a
hand-written wrong formula. A student's answer is named when it equals the same candidate on every
configuration (grader.judge.diagnose.name); each sentence describes the student's code and never shows
the right expression.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch

from grader.judge.exam import CHAIN, Case
from grader.exercises.makemore_mlp.answers import FORWARD_NAMES, Answer
from grader.exercises.makemore_mlp.model import EPS, NETWORK, STEPS, consumers
from grader.judge.oracle import local_vjp

STEP = {s.name: s for s in STEPS}
TENSORS = tuple(name for name in FORWARD_NAMES if name not in ("Xb", "Yb", "n"))


@dataclass(frozen=True)
class Candidate:
    key: str  # the same mistake has the same key on every configuration
    sentence: str  # what the student's code does, in words, without the right formula
    tensor: torch.Tensor


@dataclass(frozen=True)
class Rule:
    """An elementwise step's local derivative, written with its input x or its output y as students
    write it; `slips` are the classic ways to get it wrong."""

    what: str
    uses: str  # "x" or "y": which tensor the derivative is written with
    derivative: Callable
    slips: tuple[tuple[str, str, Callable], ...] = ()


def _eps_slips() -> tuple[tuple[str, str, Callable], ...]:
    slips = [("eps-dropped", "leaves the forward's eps out of the derivative of (bnvar + eps)**-0.5",
              lambda x, y: -0.5 * x**-1.5)]
    for eps in (1e-3, 1e-4, 1e-6, 1e-8):
        slips.append((f"eps-{eps:g}", f"adds eps = {eps:g} in the derivative where the forward adds {EPS:g}",
                      lambda x, y, e=eps: -0.5 * (x + e) ** -1.5))
    slips.append(("power", "keeps the exponent -0.5 in the derivative: the power rule lowers it by one",
                  lambda x, y: -0.5 * (x + EPS) ** -0.5))
    slips.append(("power-up", "raises the exponent in the derivative: the power rule lowers it by one",
                  lambda x, y: -0.5 * (x + EPS) ** 0.5))
    return tuple(slips)


RULES = {
    "logprobs": Rule("the derivative of log", "x", lambda x, y: 1 / x, (
        ("multiplies", "multiplies by probs where the derivative of log divides by it", lambda x, y: x),)),
    "counts": Rule("the derivative of exp", "y", lambda x, y: y),
    "counts_sum_inv": Rule("the derivative of x**-1", "x", lambda x, y: -x**-2, (
        ("power", "keeps the exponent -1 in the derivative: the power rule lowers it by one", lambda x, y: -x**-1),
        ("power-twice", "lowers the exponent by two in the derivative of x**-1", lambda x, y: -x**-3),
        ("power-positive", "writes a positive exponent in the derivative of x**-1", lambda x, y: -x**2))),
    "bnvar_inv": Rule("the derivative of (bnvar + eps)**-0.5", "x", lambda x, y: -0.5 * (x + EPS) ** -1.5, _eps_slips()),
    "bndiff2": Rule("the derivative of the square", "x", lambda x, y: 2 * x, (
        ("square", "squares bndiff in the derivative of the square, which is linear in it", lambda x, y: x**2),)),
    "h": Rule("the derivative of tanh", "y", lambda x, y: 1 - y**2, (
        ("tanh-square", "squares (1 - h) in the tanh derivative: check the order of the square and the subtraction",
         lambda x, y: (1 - y) ** 2),
        ("tanh-plus", "adds the square of h in the tanh derivative instead of subtracting it", lambda x, y: 1 + y**2),
        ("tanh-cosh", "uses tanh's output where its derivative needs the square of it", lambda x, y: 1 - y),
        ("sigmoid", "uses the sigmoid's derivative where the tanh's is needed", lambda x, y: y * (1 - y)))),
}


def factors(n: int) -> tuple[tuple[str, float, str], ...]:
    """(key, factor, what an answer that many times the right one does)."""
    return (
        ("sign", -1.0, "has its sign flipped"),
        ("n", n, "is n times too large (n is the batch size)"),
        ("1/n", 1 / n, "is n times too small (n is the batch size)"),
        ("n-1", n - 1, "is n-1 times too large (n is the batch size)"),
        ("1/(n-1)", 1 / (n - 1), "is n-1 times too small (n is the batch size)"),
        ("n/(n-1)", n / (n - 1), "is n/(n-1) times the right value: it divides by n-1 where the forward divides by n"),
        ("(n-1)/n", (n - 1) / n, "is (n-1)/n times the right value: it divides by n where the forward divides "
                                 "by n-1 (the unbiased variance, Bessel's correction)"),
        ("2", 2.0, "is twice the right value (a factor 2 too many, as from a square's derivative)"),
        ("1/2", 0.5, "is half the right value (a factor 2 missing, as from a square's derivative)"),
        ("-n", -n, "has its sign flipped and is n times too large"),
        ("-1/n", -1 / n, "has its sign flipped and is n times too small"),
        ("-2", -2.0, "has its sign flipped and is twice too large"),
        ("-1/2", -0.5, "has its sign flipped and is half the right value"),
    )


def _upstream(case: Case, answer: Answer, check: str) -> dict[str, torch.Tensor]:
    """What each consumer of the answer's tensor passes back on this check (step name -> gradient)."""
    source = case.truth if check == CHAIN else case.random_upstream
    names = [c for c in consumers(answer.source) if c != "loss"]
    if check != CHAIN:
        names = [c for c in names if "d" + c in answer.local_upstream]
    return {c: source["d" + c] for c in names}


def _same_shape(case: Case, name: str) -> list[str]:
    shape = case.values[name].shape
    return [t for t in TENSORS if t != name and case.values[t].shape == shape]


def _branch(case: Case, answer: Answer, up: dict, step: str, fns=None, values=None) -> torch.Tensor:
    return local_vjp(NETWORK, values or case.values, answer.source, {step: up[step]}, fns)


def _per_branch(case: Case, answer: Answer, check: str):
    """(want, {step: its branch}, upstream): the right answer as the sum of its branches."""
    up = _upstream(case, answer, check)
    branches = {step: _branch(case, answer, up, step) for step in up}
    return case.expected(answer, check), branches, up


def _twice_used(case: Case, answer: Answer, check: str, want, branches) -> list[Candidate]:
    if len(branches) < 2:
        return []
    both = " and in ".join(branches)
    out = []
    for step, part in branches.items():
        out.append(Candidate(f"drop:{step}", f"misses the branch through {step}: {answer.source} is used twice "
                                             f"(in {both}), so its gradient is the sum of both", want - part))
        for key, factor, does in factors(case.n):
            out.append(Candidate(f"branch:{step}:{key}",
                                 f"the part flowing back through {step} {does}", want + (factor - 1) * part))
    return out


def _operands(case: Case, answer: Answer, want, branches, up) -> list[Candidate]:
    """Another forward tensor of the same shape in place of an operand the derivative reads."""
    out = []
    for step, part in branches.items():
        for operand in STEP[step].inputs:
            if operand == answer.source or operand not in TENSORS:
                continue
            for other in _same_shape(case, operand):
                swapped = _branch(case, answer, up, step, values={**case.values, operand: case.values[other]})
                out.append(Candidate(f"operand:{step}:{operand}:{other}",
                                     f"uses {other} where the derivative through {step} needs {operand}",
                                     want - part + swapped))
    return out


def _elementwise(case: Case, answer: Answer, want, branches, up) -> list[Candidate]:
    out = []
    for step, part in branches.items():
        rule = RULES.get(step)
        if rule is None:
            continue
        x, y = case.values[answer.source], case.values[step]
        variants = [(key, sentence, fn(x, y)) for key, sentence, fn in rule.slips]
        needed = answer.source if rule.uses == "x" else step
        role = f"{needed}, its output" if rule.uses == "y" else needed
        for other in _same_shape(case, needed):
            value = case.values[other]
            local = rule.derivative(value, y) if rule.uses == "x" else rule.derivative(x, value)
            variants.append((f"uses:{other}", f"uses {other} where {rule.what} needs {role}", local))
        for key, sentence, local in variants:
            out.append(Candidate(f"rule:{step}:{key}", sentence, want - part + local * up[step]))
    return out


def _chain_rule(case: Case, answer: Answer, want, branches, up) -> list[Candidate]:
    out = []
    for step, part in branches.items():
        alone = _branch(case, answer, {step: torch.ones_like(up[step])}, step)
        out.append(Candidate(f"local-only:{step}", f"the local derivative through {step} is not multiplied by "
                                                   f"d{step}, the gradient flowing back from it (chain rule)",
                             want - part + alone))
        if up[step].shape == want.shape:
            out.append(Candidate(f"upstream-only:{step}", f"passes d{step} back unchanged: the local derivative "
                                                          f"of the step that computes {step} is missing",
                                 want - part + up[step]))
    return out


def _indexing(case: Case, answer: Answer, want, up) -> list[Candidate]:
    """emb = C[Xb] read some rows several times: an assignment keeps only one of their gradients."""
    if answer.source != "C" or "emb" not in up:
        return []
    C, Xb, demb = case.values["C"], case.values["Xb"], up["emb"]
    kept = torch.zeros_like(C).index_put((Xb.reshape(-1),), demb.reshape(-1, C.shape[1]))
    return [Candidate("overwrite", "a character that occurs several times in Xb keeps the gradient of only "
                                   "one of its uses (an assignment overwrites; the uses must add up)", kept)]


def _reductions(case: Case, answer: Answer, want, up) -> list[Candidate]:
    """A tensor broadcast in the forward pass sums its gradient back: the sums over the wrong dimension,
    with and without keepdim (no sum at all is the shape hints' to name, with the dimension)."""
    out = []
    for step, grad in up.items():
        value = case.values[answer.source]
        if value.shape == grad.shape or value.dim() > grad.dim():
            continue
        try:
            spread = local_vjp(NETWORK, {**case.values, answer.source: value.expand(grad.shape)}, answer.source, {step: grad})
        except RuntimeError:  # not an elementwise broadcast (a matrix product): nothing to sum back
            continue
        lead = grad.dim() - value.dim()
        dims = [d for d in range(grad.dim()) if d < lead or (value.shape[d - lead] == 1 and grad.shape[d] != 1)]
        averaged = spread.mean(dims, keepdim=True).reshape(want.shape)
        out.append(Candidate(f"mean:{step}", f"averages over the dimension along which {answer.source} was "
                                             f"broadcast, where the gradient adds up", averaged))
        for dim in range(spread.dim()):
            for keep in (True, False):
                summed = spread.sum(dim, keepdim=keep)
                if summed.shape == want.shape or summed.numel() == want.numel():
                    continue  # the right sum, or a harmless keepdim slip (the shape check names it)
                out.append(Candidate(f"sum:{step}:{dim}:{keep}", f"sums over the wrong dimension ({dim}): "
                                                                 f"{answer.source} was broadcast along another one", summed))
    return out


def _generic(case: Case, want: torch.Tensor) -> list[Candidate]:
    out = [Candidate(f"factor:{key}", does, factor * want) for key, factor, does in factors(case.n)]
    if want.dim() == 2 and want.shape[0] == want.shape[1]:
        out.append(Candidate("transpose", "is the transpose of the right gradient", want.T))
    out.append(Candidate("zeros", "is all zeros", torch.zeros_like(want)))
    return out


@functools.lru_cache(maxsize=4096)  # Case hashes by identity: a class reuses each case's neighbourhood
def candidates(case: Case, answer: Answer, check: str) -> tuple[Candidate, ...]:
    """Every candidate of this answer on this case and check, the most specific first."""
    if answer.exercise != 1 or not any(c != "loss" for c in consumers(answer.source)):
        return tuple(_generic(case, case.expected(answer, check)))
    want, branches, up = _per_branch(case, answer, check)
    found = [*_indexing(case, answer, want, up), *_twice_used(case, answer, check, want, branches),
             *_elementwise(case, answer, want, branches, up), *_operands(case, answer, want, branches, up),
             *_chain_rule(case, answer, want, branches, up), *_reductions(case, answer, want, up),
             *_generic(case, want)]
    return tuple(found)
