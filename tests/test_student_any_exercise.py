"""The student side (self-check, gated solutions) works from the exercise value alone: here on a tiny
exercise of its own, one linear layer and a ReLU, whose names share nothing with the makemore MLP's."""
from __future__ import annotations

import pytest
import torch

from grader.exercise import (
    Exercise,
    Function,
    Network,
    Sizes,
    Training,
    atomic_answers,
    function_answers,
)
from grader.student import solution
from grader.student.check import SelfCheck

NETWORK = Network.parse("""
h = x @ W + b
a = torch.relu(h)
loss = ((a - t) ** 2).sum() / m
""", parameters=("W", "b"), data=("x", "t"), sizes={"m": "x.shape[0]"})
FIT = Function("fit_cell", "fit", (("weights", ("W", "b")), "x", "h", "a", "t"), ("W", "b"), "fit_d", 2)


def init(sizes: Sizes, generator: torch.Generator, dtype=torch.float64) -> dict[str, torch.Tensor]:
    return {"W": torch.randn(sizes.d, sizes.k, generator=generator, dtype=dtype),
            "b": torch.randn(sizes.k, generator=generator, dtype=dtype)}


def batch(sizes: Sizes, generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {"x": torch.randn(sizes.m, sizes.d, generator=generator, dtype=torch.float64),
            "t": torch.randn(sizes.m, sizes.k, generator=generator, dtype=torch.float64)}


TINY = Exercise(
    name="tiny-relu", title="One linear layer and a ReLU", network=NETWORK,
    answers=(*atomic_answers(NETWORK, ("da", "dh", "dW", "db"), 1), *function_answers(FIT)),
    functions=(FIT,), training=Training("fit_training", FIT), lecture=Sizes(m=5, d=3, k=2),
    ranges={"m": (8, 14), "d": (4, 8), "k": (2, 5)}, init=init, batch=batch,
    sizes_of=lambda v: Sizes(m=v["x"].shape[0], d=v["W"].shape[0], k=v["W"].shape[1]),
    hidden=lambda index, count, sizes: {}, assignment="tiny", notebook="tiny.ipynb",
)
# How course.yml would name it: the self-check, like the grader, loads an exercise by its name.
SPEC = f"{__name__}:TINY"
RIGHT_FIT = '''
def fit(weights, x, h, a, t):
    dh = 2 * (a - t) / x.shape[0] * (h > 0)
    return {"W": x.T @ dh, "b": dh.sum(0)}
'''


def fit(source: str):
    namespace = {"torch": torch}
    exec(source, namespace)
    return namespace["fit"]


@pytest.fixture
def values():
    """The forward pass with autograd's gradients, as the notebook's backward cell leaves it."""
    sizes = TINY.lecture
    g = torch.Generator().manual_seed(0)
    params = {k: v.requires_grad_() for k, v in init(sizes, g).items()}
    values = NETWORK.forward(params, batch(sizes, g))
    for k in NETWORK.intermediates:
        values[k].retain_grad()
    values["loss"].backward()
    return values


def line(check: SelfCheck, name: str, manual, tensor, capsys) -> str:
    check(name, manual, tensor)
    out, err = capsys.readouterr()
    assert err == "" and out.count("\n") == 1, (out, err)
    return out.strip()


def test_the_self_check_judges_an_answer_by_the_exercises_names(values, capsys):
    check = SelfCheck(n=5, exercise=SPEC)
    right = (values["a"].grad * (values["h"] > 0)).detach()
    assert "approximate: True" in line(check, "dh", right, values["h"], capsys)
    wrong = line(check, "dh", values["a"].grad.detach(), values["h"], capsys)
    assert "WRONG" in wrong and wrong.endswith(" — stuck? backprop-ninja solution dh --notebook YOUR_NOTEBOOK.ipynb")


def test_a_parts_check_points_to_the_functions_grade_id(values, capsys):
    check = SelfCheck(n=5, exercise=SPEC, part=2)
    wrong = line(check, "dW", 2 * values["W"].grad, values["W"], capsys)
    assert wrong.endswith(" — stuck? backprop-ninja solution fit_dW --notebook YOUR_NOTEBOOK.ipynb"), wrong


def test_training_runs_the_exercises_network_with_the_students_function(capsys):
    g = torch.Generator().manual_seed(1)
    params = init(Sizes(m=8, d=4, k=3), g)
    batches = [tuple(batch(Sizes(m=8, d=4, k=3), g).values()) for _ in range(5)]
    check = SelfCheck(exercise=SPEC)
    check.training(fit(RIGHT_FIT), params, batches, lr=0.1)
    assert capsys.readouterr().out.startswith("training       | 5 steps match autograd: loss ")
    check.training(fit(RIGHT_FIT.replace('"b": dh.sum(0)', '"b": 3 * dh.sum(0)')), params, batches, lr=0.1)
    assert "WRONG: diverges from autograd at step 2" in capsys.readouterr().out
    check.training(fit('def fit(weights, x, h, a, t):\n    return {"W": None, "b": None}\n'), params, batches, lr=0.1)
    assert capsys.readouterr().out.strip() == "training       | not attempted yet"


def test_solution_names_the_exercises_function_and_parts():
    with pytest.raises(solution.SolutionError, match="fit_training has no reference of its own: ask for one of "
                                                     "exercise 2's gradients, fit_dW, fit_db"):
        solution.answer_for(TINY, "fit_training")
    with pytest.raises(solution.SolutionError, match="did you mean fit_dW"):
        solution.answer_for(TINY, "fit_W")
    answer = solution.answer_for(TINY, "fit_db")
    stub = 'def fit(weights, x, h, a, t):\n    db = None  # TODO\n    return {"W": None, "b": db}\n'
    assert solution.blank_reason(TINY, answer, stub) == \
        "fit still gives db (returned for 'b') no value but None (as released)"
    assert solution.blank_reason(TINY, answer, stub.replace("db = None", "db = a.sum(0)")) is None
    assert solution.blank_reason(TINY, answer, "x = 1\n") == "the fit_cell cell defines no fit"
