"""A second exercise, as small as one can be: one linear layer, a ReLU and a squared error. It lives
outside the grader package, as a course's own exercise would, and names nothing the engine knows:
grading it proves the engine works from what an Exercise declares."""
from __future__ import annotations

import dataclasses

import torch

from grader.exercise import (
    FUSED,
    Answer,
    Exercise,
    Function,
    Network,
    Sizes,
    Training,
    atomic_answers,
    function_answers,
)

NETWORK = Network.parse("""
hpre = X @ W + b
h = torch.relu(hpre)
loss = ((h - Y) ** 2).mean()
""", parameters=("W", "b"), data=("X", "Y"), sizes={"n": "X.shape[0]"})

BACKWARD = Function("tiny_backward", "backward", (("params", ("W", "b")), "X", "Y"), ("W", "b"), "fn_d", 3)


def init(sizes: Sizes, generator: torch.Generator, dtype=torch.float64, scale: float = 1.0) -> dict[str, torch.Tensor]:
    return {"W": torch.randn(sizes.d_in, sizes.d_out, generator=generator, dtype=dtype) * scale,
            "b": torch.randn(sizes.d_out, generator=generator, dtype=dtype) * 0.1}


def batch(sizes: Sizes, generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {"X": torch.randn(sizes.n, sizes.d_in, generator=generator, dtype=torch.float64),
            "Y": torch.randn(sizes.n, sizes.d_out, generator=generator, dtype=torch.float64)}


def hidden(index: int, count: int, sizes: Sizes) -> dict | None:
    """More rows than inputs everywhere (None redraws); the last configuration with a smaller init."""
    if sizes.n <= sizes.d_in:
        return None
    return {"scale": 0.5} if index == count - 1 else {}


EXERCISE = Exercise(
    name="tinynet",
    title="One linear layer and a ReLU",
    network=NETWORK,
    answers=(
        *atomic_answers(NETWORK, ("dh", "dhpre", "dW", "db"), 1),
        Answer("fused_dhpre", "dhpre", "hpre", FUSED, 2),
        *function_answers(BACKWARD),
    ),
    functions=(BACKWARD,),
    training=Training("tiny_training", BACKWARD),
    lecture=Sizes(n=8, d_in=5, d_out=3),
    ranges={"n": (6, 30), "d_in": (2, 12), "d_out": (2, 10)},
    init=init,
    batch=batch,
    sizes_of=lambda values: Sizes(n=values["X"].shape[0], d_in=values["W"].shape[0], d_out=values["W"].shape[1]),
    hidden=hidden,
    assignment="tinynet",
    notebook="tinynet.ipynb",
)

# The same exercise with no whole-run check: an exercise need not have one.
UNTRAINED = dataclasses.replace(EXERCISE, training=None)
