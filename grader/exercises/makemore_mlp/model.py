"""The lecture's network, written once as the notebook's forward cell writes it.

Everything that needs the forward pass (the oracle, the reference solutions, the self-check, the
notebook's own forward cell, the configurations of the hidden suite) runs these lines, so a local
vector-Jacobian product of any one step can be taken by recomputing only what lies downstream of the
tensor being differentiated.
"""
from __future__ import annotations

import math

import torch

from grader.exercise import Network, Sizes

EPS = 1e-5

PARAMETERS = ("C", "W1", "b1", "W2", "b2", "bngain", "bnbias")

# One named intermediate per line, in execution order, exactly as the lecture's forward cell: batch
# norm with the unbiased variance (1/(n-1)), the max subtracted from the logits for stability.
FORWARD = """
emb = C[Xb]
embcat = emb.view(emb.shape[0], -1)
hprebn = embcat @ W1 + b1
bnmeani = 1 / n * hprebn.sum(0, keepdim=True)
bndiff = hprebn - bnmeani
bndiff2 = bndiff**2
bnvar = 1 / (n - 1) * bndiff2.sum(0, keepdim=True)
bnvar_inv = (bnvar + 1e-5) ** -0.5
bnraw = bndiff * bnvar_inv
hpreact = bngain * bnraw + bnbias
h = torch.tanh(hpreact)
logits = h @ W2 + b2
logit_maxes = logits.max(1, keepdim=True).values
norm_logits = logits - logit_maxes
counts = norm_logits.exp()
counts_sum = counts.sum(1, keepdim=True)
counts_sum_inv = counts_sum**-1
probs = counts * counts_sum_inv
logprobs = probs.log()
loss = -logprobs[range(n), Yb].mean()
"""

NETWORK = Network.parse(FORWARD, parameters=PARAMETERS, data=("Xb", "Yb"), sizes={"n": "Xb.shape[0]"})
STEPS = NETWORK.steps
INTERMEDIATES = NETWORK.intermediates
consumers = NETWORK.consumers

LECTURE = Sizes(n=32, vocab=27, block_size=3, n_embd=10, n_hidden=64)


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


def batch(sizes: Sizes, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A batch whose Xb repeats an index (an embedding gradient that overwrites instead of accumulating
    fails on it) and whose targets are as distinct as the vocabulary allows (so mistakes do not cancel)."""
    Xb = torch.randint(0, sizes.vocab, (sizes.n, sizes.block_size), generator=generator)
    if Xb.unique().numel() == Xb.numel():
        Xb[-1, -1] = Xb[0, 0]
    order = torch.randperm(sizes.vocab, generator=generator)
    Yb = order.repeat(sizes.n // sizes.vocab + 1)[: sizes.n]
    Yb = Yb[torch.randperm(sizes.n, generator=generator)]
    return {"Xb": Xb, "Yb": Yb}


def training_batches(sizes: Sizes, generator: torch.Generator, steps: int) -> dict[str, torch.Tensor]:
    """The training check's batches as the course has always drawn them (every index and target
    uniform, nothing forced), so that the losses its feedback quotes stay the same."""
    Xb = torch.randint(0, sizes.vocab, (steps, sizes.n, sizes.block_size), generator=generator)
    Yb = torch.randint(0, sizes.vocab, (steps, sizes.n), generator=generator)
    return {"Xb": Xb, "Yb": Yb}


def sizes_of(values) -> Sizes:
    """The sizes of a notebook's own tensors (the self-check builds its cases from them)."""
    C, Xb, W1 = values["C"], values["Xb"], values["W1"]
    return Sizes(n=Xb.shape[0], vocab=C.shape[0], block_size=Xb.shape[1], n_embd=C.shape[1], n_hidden=W1.shape[1])


# Makes the batch variance of hprebn comparable to eps = 1e-5, so a dropped eps shows.
SMALL_VARIANCE_W1_SCALE = 3e-3


def hidden(index: int, count: int, sizes: Sizes) -> dict | None:
    """Hidden configuration `index` of `count`: the first has no more rows than its vocabulary, so all
    its targets are distinct (None refuses the drawn sizes); the last has a tiny activation variance."""
    if index == 0 and sizes.n > sizes.vocab:
        return None
    return {"w1_scale": SMALL_VARIANCE_W1_SCALE} if index == count - 1 else {}
