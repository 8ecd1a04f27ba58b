"""The hidden configurations: sizes, seeds and batches drawn from the course's secret salt.

Each rule is here because a real wrong answer passed without it (NOTES §2): sizes unlike the
lecture's and unlike each other catch hard-coded numbers and swapped dimensions, repeated indices in
Xb catch an embedding gradient that overwrites instead of accumulating, distinct targets and the
lecture's nonzero init keep mistakes from cancelling, and one configuration with a tiny activation
variance makes a dropped eps visible.
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

import torch

from grader.exercises.makemore_mlp.model import LECTURE, Sizes

RANGES = {"n": (8, 40), "vocab": (11, 41), "block_size": (2, 6), "n_embd": (4, 17), "n_hidden": (12, 72)}
SMALL_VARIANCE_W1_SCALE = 3e-3  # makes the batch variance of hprebn comparable to eps = 1e-5
# The probe's seed is public (the lecture's): its job, catching hard-coded lecture sizes, needs no
# secret, and so whatever is drawn from it (the feedback page's pictures) shows nothing hidden.
PROBE_SEED = 2147483647


@dataclass(frozen=True)
class Config:
    name: str
    sizes: Sizes
    seed: int
    w1_scale: float = 1.0
    scored: bool = True

    def batch(self, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.sizes
        Xb = torch.randint(0, s.vocab, (s.n, s.block_size), generator=generator)
        if Xb.unique().numel() == Xb.numel():
            Xb[-1, -1] = Xb[0, 0]
        order = torch.randperm(s.vocab, generator=generator)
        Yb = order.repeat(s.n // s.vocab + 1)[: s.n]
        Yb = Yb[torch.randperm(s.n, generator=generator)]
        return Xb, Yb


def _rng(salt: str, label: str) -> random.Random:
    digest = hashlib.sha256(f"{salt}\0{label}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _sizes(rng: random.Random, targets_distinct: bool) -> Sizes:
    lecture = set(LECTURE.values())
    while True:
        picked = {k: rng.randrange(*RANGES[k]) for k in RANGES}
        values = list(picked.values())
        if len(set(values)) < len(values) or lecture.intersection(values):
            continue
        if targets_distinct and picked["n"] > picked["vocab"]:
            continue
        return Sizes(**picked)


def generate(salt: str, count: int) -> list[Config]:
    """`count` scored configurations, plus an unscored lecture-sized probe.

    The probe is what lets feedback say "right for the lecture's sizes but not for the others": an answer
    that matches there and nowhere else hard-codes a lecture size. It is the same for every salt.
    """
    configs = []
    for i in range(count):
        rng = _rng(salt, f"config{i}")
        # The first batch is no larger than its vocabulary, so that all its targets are distinct.
        sizes = _sizes(rng, targets_distinct=i == 0)
        w1_scale = SMALL_VARIANCE_W1_SCALE if i == count - 1 else 1.0
        configs.append(Config(f"config{i + 1}", sizes, rng.getrandbits(63), w1_scale))
    configs.append(Config("lecture-sizes", LECTURE, PROBE_SEED, scored=False))
    return configs
