"""A contrastive loss over paired views whose positives sit on the diagonal (`pos = torch.arange(N)`), as an
instructor trial's InfoNCE drew them: the loss's own dlogp is symmetric on every draw, so a sum over the wrong
dimension, transposed, is this loss's value (tests/test_exercise_check.py: exercise check says so)."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="paired-views", title="A contrastive loss over paired views",
    sizes={"N": (8, (6, 20)), "D": (4, (2, 8))},
    parameters="W = randn(D, D) * 0.5",
    data="""
        xa = randn(N, D)
        xb = xa + 0.3 * randn(N, D)
        pos = torch.arange(N)
    """,
    forward="""
        za = xa @ W
        zb = xb @ W
        sim = za @ zb.T
        rowmax = sim.max(1, keepdim=True).values
        shifted = sim - rowmax
        lse = shifted.exp().sum(1, keepdim=True).log()
        logp = shifted - lse
        loss = -logp[range(N), pos].mean()
    """,
)
