"""The exercise's network, written once as a list of atomic steps.

Everything that needs the forward pass (the oracle, the reference solutions, the self-check, the
configurations of the hidden suite) runs these steps, so a local vector-Jacobian product of any one
step can be taken by recomputing only what lies downstream of the tensor being differentiated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

EPS = 1e-5

PARAMETERS = ("C", "W1", "b1", "W2", "b2", "bngain", "bnbias")


@dataclass(frozen=True)
class Sizes:
    n: int
    vocab: int
    block_size: int
    n_embd: int
    n_hidden: int

    def shapes(self) -> dict[str, tuple[int, ...]]:
        n, V, B, E, H = self.n, self.vocab, self.block_size, self.n_embd, self.n_hidden
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


LECTURE = Sizes(n=32, vocab=27, block_size=3, n_embd=10, n_hidden=64)


@dataclass(frozen=True)
class Step:
    name: str
    inputs: tuple[str, ...]
    fn: Callable[..., torch.Tensor]


def _batch_mean(hprebn):
    n = hprebn.shape[0]
    return 1 / n * hprebn.sum(0, keepdim=True)


def _unbiased_var(bndiff2):
    n = bndiff2.shape[0]
    return 1 / (n - 1) * bndiff2.sum(0, keepdim=True)


def _nll(logprobs, Yb):
    n = logprobs.shape[0]
    return -logprobs[range(n), Yb].mean()


# The lecture's forward pass, one named intermediate per line (NOTES §1), in execution order.
STEPS: tuple[Step, ...] = (
    Step("emb", ("C", "Xb"), lambda C, Xb: C[Xb]),
    Step("embcat", ("emb",), lambda emb: emb.view(emb.shape[0], -1)),
    Step("hprebn", ("embcat", "W1", "b1"), lambda embcat, W1, b1: embcat @ W1 + b1),
    Step("bnmeani", ("hprebn",), _batch_mean),
    Step("bndiff", ("hprebn", "bnmeani"), lambda hprebn, bnmeani: hprebn - bnmeani),
    Step("bndiff2", ("bndiff",), lambda bndiff: bndiff**2),
    Step("bnvar", ("bndiff2",), _unbiased_var),
    Step("bnvar_inv", ("bnvar",), lambda bnvar: (bnvar + EPS) ** -0.5),
    Step("bnraw", ("bndiff", "bnvar_inv"), lambda bndiff, bnvar_inv: bndiff * bnvar_inv),
    Step("hpreact", ("bngain", "bnraw", "bnbias"), lambda bngain, bnraw, bnbias: bngain * bnraw + bnbias),
    Step("h", ("hpreact",), torch.tanh),
    Step("logits", ("h", "W2", "b2"), lambda h, W2, b2: h @ W2 + b2),
    Step("logit_maxes", ("logits",), lambda logits: logits.max(1, keepdim=True).values),
    Step("norm_logits", ("logits", "logit_maxes"), lambda logits, logit_maxes: logits - logit_maxes),
    Step("counts", ("norm_logits",), lambda norm_logits: norm_logits.exp()),
    Step("counts_sum", ("counts",), lambda counts: counts.sum(1, keepdim=True)),
    Step("counts_sum_inv", ("counts_sum",), lambda counts_sum: counts_sum**-1),
    Step("probs", ("counts", "counts_sum_inv"), lambda counts, counts_sum_inv: counts * counts_sum_inv),
    Step("logprobs", ("probs",), lambda probs: probs.log()),
    Step("loss", ("logprobs", "Yb"), _nll),
)

INTERMEDIATES = tuple(step.name for step in STEPS)


def consumers(name: str) -> tuple[str, ...]:
    """The steps that read `name` directly: the upstream gradients its one-step backward combines."""
    return tuple(step.name for step in STEPS if name in step.inputs)


def forward(params: dict[str, torch.Tensor], Xb: torch.Tensor, Yb: torch.Tensor) -> dict[str, torch.Tensor]:
    values = {**params, "Xb": Xb, "Yb": Yb}
    for step in STEPS:
        values[step.name] = step.fn(*(values[i] for i in step.inputs))
    return values


def init_params(sizes: Sizes, generator: torch.Generator, dtype=torch.float64, w1_scale: float = 1.0):
    """The lecture's init, deliberately nonzero: W2 = 0 or bngain = 1 would hide wrong gradients.

    Every draw takes the explicit generator, so a seed reproduces the whole set (the lecture drew
    bngain and bnbias from the global RNG, which nothing could reproduce).
    """
    V, B, E, H = sizes.vocab, sizes.block_size, sizes.n_embd, sizes.n_hidden

    def randn(*shape):
        return torch.randn(*shape, generator=generator, dtype=dtype)

    return {
        "C": randn(V, E),
        "W1": randn(B * E, H) * (5 / 3) / math.sqrt(B * E) * w1_scale,
        "b1": randn(H) * 0.1,
        "W2": randn(H, V) * 0.1,
        "b2": randn(V) * 0.1,
        "bngain": randn(1, H) * 0.1 + 1.0,
        "bnbias": randn(1, H) * 0.1,
    }
