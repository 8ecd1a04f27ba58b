"""Cases the sandbox tests run answers on: configurations drawn from a salt of the test's own."""
from __future__ import annotations

from grader.judge.configs import generate
from grader.judge.exam import Case, prepare


def first_scored(salt: str, exercise: str = "makemore-mlp") -> Case:
    """The first scored configuration a salt draws, with its oracle values (not the lecture-sized probe)."""
    return next(prepare(config) for config in generate(exercise, salt, 4) if config.scored)
