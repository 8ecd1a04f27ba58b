"""A second exercise, as small as one can be and still have every kind of answer: one linear layer and
a ReLU regressed onto targets with a mean squared error.

It exists to prove that the engine grades any exercise value: nothing in grader/ names it, and the
tests grade it end to end with the same hidden suite, sandbox and outputs as the makemore course.
"""
from __future__ import annotations

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

PARAMETERS = ("W", "b")

NETWORK = Network.parse("""
z = x @ W + b
h = torch.relu(z)
diff = h - y
diff2 = diff**2
loss = diff2.sum() / n
""", parameters=PARAMETERS, data=("x", "y"), sizes={"n": "x.shape[0]"})

ATOMIC = ("ddiff2", "ddiff", "dh", "dz", "dW", "db")
BACKWARD = Function("fit_backward", "backward", (("params", PARAMETERS), ("cache", ("x", "z", "h")), "y"),
                    PARAMETERS, "fit_d", 3)
ANSWERS = (
    *atomic_answers(NETWORK, ATOMIC, 1),
    Answer("fused_dz", "dz", "z", FUSED, 2),
    *function_answers(BACKWARD),
)

# The reference answers, as a student would write each cell.
REFERENCE = {
    "ddiff2": "ddiff2 = torch.ones_like(diff2) / n\n",
    "ddiff": "ddiff = 2 * diff * ddiff2\n",
    "dh": "dh = ddiff.clone()\n",
    "dz": "dz = (z > 0).to(z.dtype) * dh\n",
    "dW": "dW = x.T @ dz\n",
    "db": "db = dz.sum(0)\n",
    "fused_dz": "dz = (z > 0).to(z.dtype) * 2 * (h - y) / n\n",
    "fit_backward": (
        "def backward(params, cache, y):\n"
        "    x, z, h = cache['x'], cache['z'], cache['h']\n"
        "    dz = (z > 0).to(z.dtype) * 2 * (h - y) / x.shape[0]\n"
        "    return {'W': x.T @ dz, 'b': dz.sum(0)}\n"
    ),
}


def init(sizes: Sizes, generator: torch.Generator, dtype=torch.float64) -> dict[str, torch.Tensor]:
    """Biases away from zero, so about half of the ReLUs are on."""
    return {"W": torch.randn(sizes.d_in, sizes.d_out, generator=generator, dtype=dtype),
            "b": torch.randn(sizes.d_out, generator=generator, dtype=dtype) * 0.5 + 0.1}


def batch(sizes: Sizes, generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {"x": torch.randn(sizes.n, sizes.d_in, generator=generator, dtype=torch.float64),
            "y": torch.randn(sizes.n, sizes.d_out, generator=generator, dtype=torch.float64)}


EXERCISE = Exercise(
    name="tiny-relu",
    title="One linear layer and a ReLU",
    network=NETWORK,
    answers=ANSWERS,
    functions=(BACKWARD,),
    training=Training("fit_training", BACKWARD),
    lecture=Sizes(n=6, d_in=4, d_out=3),
    ranges={"n": (7, 20), "d_in": (2, 9), "d_out": (2, 9)},
    init=init,
    batch=batch,
    sizes_of=lambda values: Sizes(n=values["x"].shape[0], d_in=values["x"].shape[1], d_out=values["y"].shape[1]),
    hidden=lambda index, count, sizes: {},
    assignment="tiny",
    notebook="tiny.ipynb",
)
