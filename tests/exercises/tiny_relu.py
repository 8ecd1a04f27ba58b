"""A second exercise, as small as one can be and still have every kind of answer and the mistakes the
tests need the engine to name: a lookup, one linear layer and a ReLU with a skip around it, regressed
onto targets with a squared error.

It lives outside the grader package, as a course's own exercise would, and names nothing the engine
knows: grading it proves the engine works from what an Exercise declares. The tests load it both ways
a course can name it, by module (`exercises.tiny_relu:EXERCISE`) and by the path of this file, and
the sandboxed child may read this file and nothing beside it: its answer cells, right, are in
tiny_relu_solution.py, which nothing the sandbox imports reads.

Each line is there for a mistake a test needs: the lookup `E[X]` for a gradient that overwrites
where it should accumulate (a batch with more rows than the vocabulary repeats an index), `h` read
twice (by the ReLU and by the skip) for a branch left out, the ReLU for an elementwise rule, `/ n`
for a factor of a size.
"""
from __future__ import annotations

import dataclasses

import torch

from grader import exercise as ex

PARAMETERS = ("E", "W", "b")

NETWORK = ex.Network.parse("""
e = E[X]
h = e @ W + b
a = torch.relu(h)
z = a + h
loss = ((z - Y) ** 2).sum() / n
""", parameters=PARAMETERS, data=("X", "Y"), sizes={"n": "X.shape[0]"})

# The whole backward pass as one function, graded per parameter and trained with.
BACKWARD = ex.Function("fit_backward", "backward", (("params", PARAMETERS), ("cache", ("e", "h")), "X", "Y"),
                       PARAMETERS, "fit_d", 3)


def init(sizes: ex.Sizes, generator: torch.Generator, dtype=torch.float64, scale: float = 1.0) -> dict:
    """Pre-activations of about unit variance and biases near zero, so that about half of the ReLUs are
    on; `scale` shrinks W (the last hidden configuration's)."""
    return {"E": torch.randn(sizes.vocab, sizes.dim, generator=generator, dtype=dtype),
            "W": torch.randn(sizes.dim, sizes.hidden, generator=generator, dtype=dtype) * scale / sizes.dim**0.5,
            "b": torch.randn(sizes.hidden, generator=generator, dtype=dtype) * 0.1}


def batch(sizes: ex.Sizes, generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {"X": torch.randint(0, sizes.vocab, (sizes.n,), generator=generator),
            "Y": torch.randn(sizes.n, sizes.hidden, generator=generator, dtype=torch.float64)}


def hidden(index: int, count: int, sizes: ex.Sizes) -> dict | None:
    """More rows than the vocabulary everywhere (None redraws), so every batch repeats an index; the last
    configuration with a smaller W."""
    if sizes.n <= sizes.vocab:
        return None
    return {"scale": 0.5} if index == count - 1 else {}


EXERCISE = ex.Exercise(
    name="tiny-relu",
    title="A lookup, a linear layer and a ReLU",
    network=NETWORK,
    answers=(
        *ex.atomic_answers(NETWORK, ("dz", "da", "dh", "db", "dW", "de", "dE"), 1),
        ex.Answer("fused_dh", "dh", "h", ex.FUSED, 2),
        *ex.function_answers(BACKWARD),
    ),
    functions=(BACKWARD,),
    training=ex.Training("fit_training", BACKWARD),
    lecture=ex.Sizes(n=8, vocab=5, dim=3, hidden=4),
    ranges={"n": (6, 30), "vocab": (2, 12), "dim": (2, 10), "hidden": (2, 10)},
    init=init,
    batch=batch,
    sizes_of=lambda values: ex.Sizes(n=values["X"].shape[0], vocab=values["E"].shape[0], dim=values["E"].shape[1],
                                     hidden=values["W"].shape[1]),
    hidden=hidden,
    assignment="tiny",
    notebook="tiny.ipynb",
)

# The same exercise with no whole-run check: an exercise need not have one.
UNTRAINED = dataclasses.replace(EXERCISE, training=None)
