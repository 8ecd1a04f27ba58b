"""The hidden suite's hook and fixtures, for whatever exercise the course grades: which grade ids its
tests run for, and judging, which grader.judge.verdicts does (so a course copied by `course init` keeps
nothing of it but this call and its own known_mistakes.yml).

Never released to students. The grader's plugin supplies the fixtures `each` (judges every submission
of the batch with a function of one graded submission: its answer cells and what they produced in the
sandbox), `cases` (the configurations with their oracle values), `training` and `course`; the tests'
grade ids come from the exercise course.yml names (`pytest_generate_tests`).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.judge import verdicts
from grader.judge.exam import checks
from grader.judge.suite import COURSE

# The course's own named mistakes, beside this file: an instructor adds to them without touching the grader.
CATALOGUE = verdicts.Catalogue.read(Path(__file__).with_name("known_mistakes.yml"))


def pytest_generate_tests(metafunc):
    """A test marked `answers(check)` runs for every answer of the course's exercise that has that
    check, one marked `training` for the exercise's whole-run check (none when it has no such check)."""
    exercise = metafunc.config.stash[COURSE].exercise
    marker = metafunc.definition.get_closest_marker("answers")
    if marker is not None:
        metafunc.parametrize("grade_id", [a.grade_id for a in exercise.answers if marker.args[0] in checks(a)])
    elif metafunc.definition.get_closest_marker("training") is not None:
        metafunc.parametrize("grade_id", [exercise.training.grade_id] if exercise.training else [])


@pytest.fixture
def judge(each, cases, course):
    """judge(grade_id, check): judge every submission's answer for that grade id and check."""

    def run(grade_id: str, check: str) -> None:
        answer = course.exercise.by_grade_id[grade_id]
        each(lambda submission: verdicts.judge(submission, cases, course, answer, check, CATALOGUE))

    return run


@pytest.fixture
def judge_training(each, training, course):
    """judge_training(): judge every submission's training run."""
    return lambda: each(lambda submission: verdicts.judge_training(submission, training, course))
