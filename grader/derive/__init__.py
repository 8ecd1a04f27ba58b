"""Reference answers derived, not written: a forward pass, one named intermediate per line, becomes the
backward cells a student writes (a rule per operation, sums over broadcast dimensions, `+=` where a
tensor is read twice, each line under a comment in the lecture's words), and every rule's classic
slips become the mistakes feedback names and the mutants the tests grade.

    gradients = derive.for_exercise(exercise)      # or derive.derive(network, configurations)
    for g in gradients:
        print(g.source)                            # the cell, explained
        for slip in g.slips():                     # slip.name, slip.sentence, slip.code
            ...
    derive.closed_forms(exercise)                  # each fused cell's closed form, or why it has none

An operation without a rule raises `DeriveError` naming the line.
"""
from __future__ import annotations

import random
from collections.abc import Iterator

import torch

from grader.derive import simplify
from grader.derive.engine import TOLERANCE, Configuration, Contribution, DeriveError, Gradient, Slip, derive
from grader.derive.rules import GRAMMAR
from grader.exercise import FUSED, Exercise, Sizes

__all__ = ["GRAMMAR", "TOLERANCE", "Configuration", "Contribution", "DeriveError", "Gradient", "Slip",
           "closed_forms", "configurations", "corpus", "derive", "for_exercise"]


def _other_sizes(exercise: Exercise, seed: int) -> Sizes:
    """Sizes unlike the lecture's and unlike each other where the ranges allow (a structural constant
    keeps its value), so that a shape that follows a size is told apart from a constant one."""
    rng = random.Random(f"derive {exercise.name} {seed}")
    for _ in range(200):
        drawn = {k: rng.randrange(*exercise.ranges[k]) if k in exercise.ranges else v
                 for k, v in exercise.lecture.items()}
        free = [drawn[k] for k in exercise.ranges if k in drawn]
        if len(set(free)) == len(free) and not any(drawn[k] == exercise.lecture[k] for k in exercise.ranges):
            return Sizes(**drawn)
    return Sizes(**drawn)


def configurations(exercise: Exercise, count: int = 2) -> tuple[Configuration, ...]:
    """The lecture's sizes and `count - 1` others, drawn in float64 from the exercise's own init and batch."""
    found = []
    for index in range(count):
        sizes = exercise.lecture if index == 0 else _other_sizes(exercise, index)
        generator = torch.Generator().manual_seed(index)
        inputs = {**exercise.init(sizes, generator, torch.float64), **exercise.batch(sizes, generator)}
        found.append(Configuration(inputs, sizes))
    return tuple(found)


# What is derived of each exercise a process holds, once: `course init` writes the notebooks and the slips'
# fingerprints from the same derivation, and the closed forms' proofs cost more than the gradients.
_DERIVED: dict[int, tuple[Exercise, tuple[Configuration, ...], tuple[Gradient, ...]]] = {}
_CLOSED: dict[int, tuple[Exercise, dict[str, simplify.Closed | str]]] = {}


def _derived(exercise: Exercise) -> tuple[tuple[Configuration, ...], tuple[Gradient, ...]]:
    if id(exercise) not in _DERIVED:
        found = configurations(exercise)
        _DERIVED[id(exercise)] = (exercise, found, derive(exercise.network, found))
    return _DERIVED[id(exercise)][1:]


def for_exercise(exercise: Exercise) -> tuple[Gradient, ...]:
    return _derived(exercise)[1]


def closed_forms(exercise: Exercise) -> dict[str, simplify.Closed | str]:
    """Each fused cell's closed form (proven against autograd), or why its chain of atomic steps stays, by
    cell id; a block of one line has neither, its gradient being one statement already."""
    if id(exercise) not in _CLOSED:
        found, gradients = _derived(exercise)
        net = exercise.network
        _CLOSED[id(exercise)] = (exercise, {
            answer.cell_id: simplify.fuse(net, answer.source, answer.sink, found, gradients)
            for answer in exercise.answers
            if answer.kind == FUSED and len(simplify.block_lines(net, answer.source, answer.sink)) > 1})
    return dict(_CLOSED[id(exercise)][1])


def corpus(gradients: tuple[Gradient, ...]) -> Iterator[tuple[Slip, dict[str, str]]]:
    """The mutant corpus: for every slip, the answer cells (gradient name -> code) of a notebook that
    makes that one mistake and answers every other gradient as derived. Each cell reads its upstream
    gradients as given, so the mutant loses credit on the slip's gradient alone."""
    reference = {g.name: g.source for g in gradients}
    for gradient in gradients:
        for slip in gradient.slips():
            yield slip, {**reference, gradient.name: slip.code}
