"""The wrong answers next to the right one, generated from the exercise's forward pass, so that a
mistake nobody wrote down still gets its name.

For one answer on one configuration and check, each candidate is the value a slightly wrong cell
would produce: a branch of a tensor used twice dropped or scaled, another forward tensor of the same
shape where the derivative needs an operand, the local derivative or the upstream gradient left out,
a slip in an elementwise step's derivative (the exercise's `Mistakes.rules`), a constant factor (a
size, a size minus one, 2, -1), a sum or mean over the wrong dimension, a transpose, repeated indices
overwritten. Every candidate is computed here, in the trusted process, by autograd on the forward
pass with that one change (oracle.local_vjp), never from a hand-written wrong formula. A student's
answer is named when it equals the same candidate on every configuration
(grader.judge.diagnose.name); each sentence describes the student's code and never shows the right
expression.
"""
from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from grader.exercise import ATOMIC, Answer, Exercise
from grader.judge.exam import CHAIN, Case
from grader.judge.oracle import local_vjp


@dataclass(frozen=True)
class Candidate:
    key: str  # the same mistake has the same key on every configuration
    sentence: str  # what the student's code does, in words, without the right formula
    tensor: torch.Tensor


def _tensors(exercise: Exercise) -> tuple[str, ...]:
    """The forward tensors an answer cell may read: parameters and intermediates, not the loss."""
    net = exercise.network
    return (*net.parameters, *(name for name in net.intermediates if name != net.loss))


def factors(sizes: Mapping[str, int], words: Mapping[str, str]) -> tuple[tuple[str, float, str], ...]:
    """(key, factor, what an answer that many times the right one does), for the network's sizes
    (`words` says what each is)."""
    def per_size(make):
        return [entry for name, value in sizes.items() if value > 1 for entry in make(name, value)]

    def scaled(s, v):
        what = f" ({s} is {words[s]})" if s in words else ""
        return (
            (s, v, f"is {s} times too large{what}"),
            (f"1/{s}", 1 / v, f"is {s} times too small{what}"),
            (f"{s}-1", v - 1, f"is {s}-1 times too large{what}"),
            (f"1/({s}-1)", 1 / (v - 1), f"is {s}-1 times too small{what}"),
            (f"{s}/({s}-1)", v / (v - 1), f"is {s}/({s}-1) times the right value: it divides by {s}-1 where the "
                                         f"forward divides by {s}"),
            (f"({s}-1)/{s}", (v - 1) / v, f"is ({s}-1)/{s} times the right value: it divides by {s} where the "
                                         f"forward divides by {s}-1 (the unbiased variance, Bessel's correction)"),
        )

    def flipped(s, v):
        return ((f"-{s}", -v, f"has its sign flipped and is {s} times too large"),
                (f"-1/{s}", -1 / v, f"has its sign flipped and is {s} times too small"))

    return (
        ("sign", -1.0, "has its sign flipped"),
        *per_size(scaled),
        ("2", 2.0, "is twice the right value (a factor 2 too many, as from a square's derivative)"),
        ("1/2", 0.5, "is half the right value (a factor 2 missing, as from a square's derivative)"),
        *per_size(flipped),
        ("-2", -2.0, "has its sign flipped and is twice too large"),
        ("-1/2", -0.5, "has its sign flipped and is half the right value"),
    )


def _upstream(case: Case, answer: Answer, check: str) -> dict[str, torch.Tensor]:
    """What each consumer of the answer's tensor passes back on this check (step name -> gradient)."""
    net = case.exercise.network
    source = case.truth if check == CHAIN else case.random_upstream
    names = [c for c in net.consumers(answer.source) if c != net.loss]
    if check != CHAIN:
        names = [c for c in names if "d" + c in answer.local_upstream]
    return {c: source["d" + c] for c in names}


def _same_shape(case: Case, name: str) -> list[str]:
    shape = case.values[name].shape
    return [t for t in _tensors(case.exercise) if t != name and case.values[t].shape == shape]


def _branch(case: Case, answer: Answer, up: dict, step: str, values=None) -> torch.Tensor:
    return local_vjp(case.exercise.network, values or case.values, answer.source, {step: up[step]})


def _per_branch(case: Case, answer: Answer, check: str):
    """(want, {step: its branch}, upstream): the right answer as the sum of its branches."""
    up = _upstream(case, answer, check)
    branches = {step: _branch(case, answer, up, step) for step in up}
    return case.expected(answer, check), branches, up


def _sizes(case: Case) -> dict[str, int]:
    return case.exercise.network.size_values(case.values)


def _twice_used(case: Case, answer: Answer, check: str, want, branches) -> list[Candidate]:
    if len(branches) < 2:
        return []
    names = [f"in {step}" for step in branches]
    where = ", ".join(names[:-1]) + " and " + names[-1]
    count = {3: "three", 4: "four", 5: "five"}.get(len(names), str(len(names)))
    times, all_of = ("twice", "both") if len(names) == 2 else (f"{count} times", f"all {count}")
    out = []
    for step, part in branches.items():
        out.append(Candidate(f"drop:{step}", f"misses the branch through {step}: {answer.source} is used {times} "
                                             f"({where}), so its gradient is the sum of {all_of}", want - part))
        for key, factor, does in factors(_sizes(case), case.exercise.mistakes.words):
            out.append(Candidate(f"branch:{step}:{key}",
                                 f"the part flowing back through {step} {does}", want + (factor - 1) * part))
    return out


def _operands(case: Case, answer: Answer, want, branches, up) -> list[Candidate]:
    """Another forward tensor of the same shape in place of an operand the derivative reads."""
    out = []
    steps, tensors = case.exercise.network.step, _tensors(case.exercise)
    for step, part in branches.items():
        for operand in steps[step].inputs:
            if operand == answer.source or operand not in tensors:
                continue
            for other in _same_shape(case, operand):
                swapped = _branch(case, answer, up, step, values={**case.values, operand: case.values[other]})
                out.append(Candidate(f"operand:{step}:{operand}:{other}",
                                     f"uses {other} where the derivative through {step} needs {operand}",
                                     want - part + swapped))
    return out


def _elementwise(case: Case, answer: Answer, want, branches, up) -> list[Candidate]:
    """The exercise's classic slips in the derivative of an elementwise step, and its input or output
    swapped for another tensor of the same shape."""
    out = []
    for step, part in branches.items():
        rule = case.exercise.mistakes.rules.get(step)
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


def _index_of(case: Case, answer: Answer, step: str) -> str | None:
    """The data tensor `step` indexes the answer's tensor with, when the step is `source[index]`."""
    net = case.exercise.network
    tree = ast.parse(net.step[step].code, mode="eval").body
    if isinstance(tree, ast.Subscript) and isinstance(tree.value, ast.Name) and tree.value.id == answer.source \
            and isinstance(tree.slice, ast.Name) and tree.slice.id in net.data:
        return tree.slice.id
    return None


def _indexing(case: Case, answer: Answer, want, up) -> list[Candidate]:
    """A lookup `source[index]` reads some rows several times: an assignment keeps only one of their
    gradients."""
    out = []
    for step, grad in up.items():
        index = _index_of(case, answer, step)
        if index is None:
            continue
        table, rows = case.values[answer.source], case.values[index]
        kept = torch.zeros_like(table).index_put((rows.reshape(-1),), grad.reshape(-1, *table.shape[1:]))
        entry = case.exercise.mistakes.words.get(index, "an index")
        out.append(Candidate("overwrite", f"{entry} that occurs several times in {index} keeps the gradient of "
                                          f"only one of its uses (an assignment overwrites; the uses must add up)",
                             kept))
    return out


def _reductions(case: Case, answer: Answer, want, up) -> list[Candidate]:
    """A tensor broadcast in the forward pass sums its gradient back: the sums over the wrong dimension,
    with and without keepdim (no sum at all is the shape hints' to name, with the dimension)."""
    out = []
    for step, grad in up.items():
        value = case.values[answer.source]
        if value.shape == grad.shape or value.dim() > grad.dim():
            continue
        try:
            spread = local_vjp(case.exercise.network, {**case.values, answer.source: value.expand(grad.shape)},
                               answer.source, {step: grad})
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
                out.append(Candidate(f"sum:{step}:{dim}:{keep}",
                                     f"sums over the wrong dimension ({dim}): {answer.source} was broadcast along "
                                     f"another one", summed))
    return out


def _generic(case: Case, want: torch.Tensor) -> list[Candidate]:
    out = [Candidate(f"factor:{key}", does, factor * want)
           for key, factor, does in factors(_sizes(case), case.exercise.mistakes.words)]
    if want.dim() == 2 and want.shape[0] == want.shape[1]:
        out.append(Candidate("transpose", "is the transpose of the right gradient", want.T))
    out.append(Candidate("zeros", "is all zeros", torch.zeros_like(want)))
    return out


# The rule table's slips by exercise (grader.derive), derived once per exercise a process grades.
_DERIVED: dict[int, tuple[Exercise, dict]] = {}


def _rule_slips(case: Case, answer: Answer, check: str) -> list[Candidate]:
    """The slips the rule table knows for this gradient's own step (grader.derive), each run here on this
    case: the upstream gradients of this check, the forward values. Their code is derived from the
    exercise's forward lines, never a student's, so running it in the trusted process is running the
    grader's own. An exercise the rule table cannot derive has none."""
    exercise = case.exercise
    if id(exercise) not in _DERIVED:
        try:
            # Imported by name, not by an import statement: backprop-ninja-student ships the modules the
            # self-check imports, and grader.derive writes every reference answer from the forward lines, so
            # it must stay out of that wheel (where the self-check then names these slips no more).
            derive = importlib.import_module("grader.derive")
            gradients = {g.name: g for g in derive.for_exercise(exercise)}
        except ImportError:
            gradients = {}
        except ValueError:  # derive.DeriveError: an operation the rule table has no rule for
            gradients = {}
        _DERIVED[id(exercise)] = (exercise, gradients)
    gradient = _DERIVED[id(exercise)][1].get(answer.variable)
    if gradient is None:
        return []
    found, shape = [], case.expected(answer, check).shape
    for slip in gradient.slips():
        namespace = {k: v.clone() if isinstance(v, torch.Tensor) else v
                     for k, v in {**case.values, **case.upstream(answer, check)}.items()}
        namespace.update(case.sizes, torch=torch, F=F)
        try:
            exec(compile(slip.code, f"<slip {slip.name}>", "exec"), namespace)  # noqa: S102 - derived, not a student's
        except Exception:  # noqa: BLE001 - a slip that cannot run on this case is no candidate here
            continue
        value = namespace.get(answer.variable)
        # A slip that changes the shape is told more exactly by the shape hints (which dimension, keepdim).
        if isinstance(value, torch.Tensor) and value.shape == shape:
            found.append(Candidate(f"slip:{slip.name}", slip.sentence, value.detach().to(torch.float64)))
    return found


@functools.lru_cache(maxsize=4096)  # Case hashes by identity: a class reuses each case's neighbourhood
def candidates(case: Case, answer: Answer, check: str) -> tuple[Candidate, ...]:
    """Every candidate of this answer on this case and check, in the order they are preferred: the search
    of its neighbourhood (its sentences were written for students), then the rule table's slips of the
    step itself, for what the search does not reach. Only an atomic answer is one
    backward step, whose branches the forward pass shows; any other is searched for factors, a
    transpose and zeros."""
    net = case.exercise.network
    if answer.kind != ATOMIC:
        return tuple(_generic(case, case.expected(answer, check)))
    slips = _rule_slips(case, answer, check)
    if not any(c != net.loss for c in net.consumers(answer.source)):
        return (*_generic(case, case.expected(answer, check)), *slips)
    want, branches, up = _per_branch(case, answer, check)
    found = [*_indexing(case, answer, want, up), *_twice_used(case, answer, check, want, branches),
             *_elementwise(case, answer, want, branches, up), *_operands(case, answer, want, branches, up),
             *_chain_rule(case, answer, want, branches, up), *_reductions(case, answer, want, up),
             *_generic(case, want), *slips]
    return tuple(found)
