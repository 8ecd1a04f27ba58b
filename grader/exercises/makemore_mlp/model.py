"""The lecture's network by the names the rest of the package (the notebook's checks, the demo, grader
0.1's hidden suites) has always imported; all of it read from the exercise file, lecture.py.

Everything that needs the forward pass (the oracle, the reference solutions, the self-check, the
notebook's own forward cell, the configurations of the hidden suite) runs the same lines, so a local
vector-Jacobian product of any one step can be taken by recomputing only what lies downstream of the
tensor being differentiated.
"""
from __future__ import annotations

import torch

from grader.exercise import Sizes
from grader.exercises.makemore_mlp.lecture import EXERCISE
from grader.exercises.makemore_mlp.mistakes import EPS  # noqa: F401 - grader 0.1's name

NETWORK = EXERCISE.network
PARAMETERS = NETWORK.parameters
STEPS = NETWORK.steps
INTERMEDIATES = NETWORK.intermediates
consumers = NETWORK.consumers
LECTURE = EXERCISE.lecture
init_params = EXERCISE.init
batch = EXERCISE.batch
training_batches = EXERCISE.training.batches
sizes_of = EXERCISE.sizes_of
hidden = EXERCISE.hidden


def shapes(sizes: Sizes) -> dict[str, tuple[int, ...]]:
    n, V, B, E, H = sizes.n, sizes.vocab, sizes.block_size, sizes.n_embd, sizes.n_hidden
    return {
        "C": (V, E), "W1": (B * E, H), "b1": (H,), "W2": (H, V), "b2": (V,),
        "bngain": (1, H), "bnbias": (1, H),
        "emb": (n, B, E), "embcat": (n, B * E), "hprebn": (n, H), "bnmeani": (1, H),
        "bndiff": (n, H), "bndiff2": (n, H), "bnvar": (1, H), "bnvar_inv": (1, H),
        "bnraw": (n, H), "hpreact": (n, H), "h": (n, H), "logits": (n, V),
        "logit_maxes": (n, 1), "norm_logits": (n, V), "counts": (n, V),
        "counts_sum": (n, 1), "counts_sum_inv": (n, 1), "probs": (n, V), "logprobs": (n, V),
        "loss": (),
    }


def forward(params: dict[str, torch.Tensor], Xb: torch.Tensor, Yb: torch.Tensor) -> dict[str, torch.Tensor]:
    """The parameters, the batch and every intermediate by name (the sizes left out: they are numbers)."""
    values = NETWORK.forward(params, {"Xb": Xb, "Yb": Yb})
    return {k: v for k, v in values.items() if k not in NETWORK.sizes}
