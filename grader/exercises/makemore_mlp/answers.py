"""The makemore exercise's answers by the names grader 0.1's hidden suites and the package's notebook
checks import: grade ids, what each answer cell assigns and which gradients it may read, all read from
the exercise file (lecture.py).

Grade ids never change meaning once a course has released a notebook: a gradebook keys its scores on
them.
"""
from __future__ import annotations

from grader.exercise import ATOMIC as _ATOMIC_KIND
from grader.exercise import (  # noqa: F401 - grader 0.1's names
    FUSED,
    GRADE_CELL_PREFIX,
    Answer,
    Function,
    Training,
    atomic_answers,
    function_answers,
    grade_cell_id,
)
from grader.exercises.makemore_mlp.lecture import EXERCISE

NETWORK, PARAMETERS = EXERCISE.network, EXERCISE.network.parameters
# Exercise 1, in the order the notebook asks for them; each is also a valid computation order.
ATOMIC = tuple(a.grade_id for a in EXERCISE.answers if a.kind == _ATOMIC_KIND)
# Exercise 4: the student's whole backward pass as one function, `manual_backward(params, cache, Yb)`,
# graded per parameter; `cache` holds exactly the forward values the notebook's training loop builds.
BACKWARD = EXERCISE.functions[0]
EX4_CELL, EX4_FUNCTION = BACKWARD.cell, BACKWARD.name
EX4_CACHE = dict(a for a in BACKWARD.arguments if isinstance(a, tuple))["cache"]
ANSWERS: tuple[Answer, ...] = EXERCISE.answers
BY_GRADE_ID = {a.grade_id: a for a in ANSWERS}
# Exercise 4 as a whole: a short training run driven by the student's manual_backward, against the
# same run driven by autograd.
TRAINING = EXERCISE.training
EX4_TRAINING = TRAINING.grade_id
GRADE_IDS = (*BY_GRADE_ID, EX4_TRAINING)
ANSWER_CELLS = tuple(dict.fromkeys(a.cell_id for a in ANSWERS))
# What every answer cell may read besides gradients: the notebook says the same to students.
FORWARD_NAMES = (*PARAMETERS, *(name for name in NETWORK.intermediates if name != "loss"), "Xb", "Yb", "n")
