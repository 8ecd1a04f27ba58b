"""The student side (self-check, gated solutions) works from the exercise value alone: here on the tests'
tiny exercise (tests/exercises/tiny_relu.py: a lookup, a linear layer and a ReLU), named as course.yml
would name it, whose network, function and parts are not the makemore MLP's."""
from __future__ import annotations

import re

import pytest
import torch
from exercises.tiny_relu import EXERCISE as TINY
from exercises.tiny_relu_solution import CELLS

from grader.exercise import Sizes
from grader.student import solution
from grader.student.selfcheck import SelfCheck

# How course.yml would name it: the self-check, like the grader, loads an exercise by its name.
SPEC = "exercises.tiny_relu:EXERCISE"
RIGHT_FIT = CELLS["fit_backward"]


def fit(source: str):
    namespace = {"torch": torch}
    exec(source, namespace)
    return namespace["backward"]


@pytest.fixture
def values():
    """The forward pass with autograd's gradients, as the notebook's backward cell leaves it."""
    sizes = TINY.lecture
    g = torch.Generator().manual_seed(0)
    params = {k: v.requires_grad_() for k, v in TINY.init(sizes, g).items()}
    values = TINY.network.forward(params, TINY.batch(sizes, g))
    for k in TINY.network.intermediates:
        values[k].retain_grad()
    values["loss"].backward()
    return values


def line(check: SelfCheck, name: str, manual, tensor, capsys) -> str:
    check(name, manual, tensor)
    out, err = capsys.readouterr()
    assert err == "" and out.count("\n") == 1, (out, err)
    return out.strip()


def test_the_self_check_judges_an_answer_by_the_exercises_names(values, capsys):
    check = SelfCheck(n=TINY.lecture.n, exercise=SPEC)
    right = (values["a"].grad * (values["h"] > 0) + values["z"].grad).detach()
    assert "approximate: True" in line(check, "dh", right, values["h"], capsys)
    wrong = line(check, "dh", values["a"].grad.detach(), values["h"], capsys)
    # dh is also the fused cell's: the pointer names that answer of the exercise's too.
    assert "WRONG" in wrong and wrong.endswith(" — stuck? backprop-ninja solution dh --notebook YOUR_NOTEBOOK.ipynb"
                                               " (exercise 2: fused_dh)")


def test_a_parts_check_points_to_the_functions_grade_id(values, capsys):
    check = SelfCheck(n=TINY.lecture.n, exercise=SPEC, part=3)
    wrong = line(check, "dW", 2 * values["W"].grad, values["W"], capsys)
    assert wrong.endswith(" — stuck? backprop-ninja solution fit_dW --notebook YOUR_NOTEBOOK.ipynb"), wrong


def test_training_runs_the_exercises_network_with_the_students_function(capsys):
    g = torch.Generator().manual_seed(1)
    sizes = Sizes(n=10, vocab=6, dim=4, hidden=3)
    params = TINY.init(sizes, g)
    batches = [tuple(TINY.batch(sizes, g).values()) for _ in range(5)]
    check = SelfCheck(exercise=SPEC)
    check.training(fit(RIGHT_FIT), params, batches, lr=0.1)
    assert capsys.readouterr().out.startswith("training       | 5 steps match autograd: loss ")
    # An instructor trial read "loss 3.2204 -> 3.3218" as a failure: a rise is said to be no failure
    check.training(fit(RIGHT_FIT), params, batches, lr=-5.0)
    rose = capsys.readouterr().out
    first, last = map(float, re.search(r"loss (\S+) -> (\S+)", rose).groups())
    assert last > first and rose.rstrip().endswith("over so few the loss may rise; the steps are right)"), rose
    check.training(fit(RIGHT_FIT.replace("'b': dh.sum(0)", "'b': 3 * dh.sum(0)")), params, batches, lr=0.1)
    assert "WRONG: diverges from autograd at step 2" in capsys.readouterr().out
    # An instructor trial's batches made autograd's own run NaN: a right function was "nan times autograd's"
    nan = [(X, Y * float("nan")) for X, Y in batches]
    check.training(fit(RIGHT_FIT), params, nan, lr=0.1)
    said = capsys.readouterr().out.strip()
    assert said.startswith("training       | not checked: the training check's own run, with autograd's gradients at "
                           "learning rate 0.1, is not finite (its loss is nan at step 1)") and \
        said.endswith("; tell your instructor"), said
    blank = "def backward(params, cache, X, Y):\n    return {'E': None, 'W': None, 'b': None}\n"
    check.training(fit(blank), params, batches, lr=0.1)
    assert capsys.readouterr().out.strip() == "training       | not attempted yet"


def test_solution_names_the_exercises_function_and_parts():
    with pytest.raises(solution.SolutionError, match="fit_training has no reference of its own: ask for one of "
                                                     "exercise 3's gradients, fit_dE, fit_dW, fit_db"):
        solution.answer_for(TINY, "fit_training")
    with pytest.raises(solution.SolutionError, match="did you mean fit_dW"):
        solution.answer_for(TINY, "fit_W")
    answer = solution.answer_for(TINY, "fit_db")
    stub = 'def backward(params, cache, X, Y):\n    db = None  # TODO\n    return {"E": None, "W": None, "b": db}\n'
    assert solution.blank_reason(TINY, answer, stub) == \
        "backward still gives db (returned for 'b') no value but None (as released)"
    assert solution.blank_reason(TINY, answer, stub.replace("db = None", "db = Y.sum(0)")) is None
    assert solution.blank_reason(TINY, answer, "x = 1\n") == "the fit_backward cell defines no backward"
