"""Batch norm written as one call, `F.batch_norm`, its gain starting at ones as nn.BatchNorm1d's does, then
SiLU, as an instructor trial wrote it. Batch norm of hbn equals batch norm of hpre but for eps, so a dgamma
with eps left out once fitted "uses hbn where the derivative needs hpre" (tests/test_neighbourhood.py)."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="bn-silu", title="A batch-norm SiLU classifier",
    sizes={"n": (24, (8, 40)), "din": (10, (4, 16)), "nh": (12, (6, 20)), "ncls": (5, (3, 8))},
    parameters="""
        W1 = randn(din, nh) / din ** 0.5
        gamma = ones(nh)
        beta = zeros(nh)
        W2 = randn(nh, ncls) * 0.1
    """,
    data="X = randn(n, din)\ny = randint(ncls, (n,))",
    forward="""
        hpre = X @ W1
        hbn = F.batch_norm(hpre, None, None, gamma, beta, training=True)
        h = F.silu(hbn)
        logits = h @ W2
        loss = F.cross_entropy(logits, y)
    """,
)
