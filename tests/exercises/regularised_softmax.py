"""A softmax classifier whose loss is a cross-entropy written out the stable way (the max subtracted, a
log-sum-exp) plus an L2 penalty, as CS231n's assignments write it: its fused block from the loss back to
the scores must come out as the three lines at most a teacher writes (tests/test_simplify.py)."""
from grader.authoring.define import exercise

# The loss is the data term plus the penalty: the block from the loss to the scores needs only the first.
FORWARD = """
    scores = X @ W + b
    shifted = scores - scores.max(1, keepdim=True).values
    lse = shifted.exp().sum(1, keepdim=True).log()
    logp = shifted - lse
    nll = -logp[range(N), y].mean()
    decay = 0.5 * 1e-3 * (W * W).sum()
    loss = nll + decay
"""

EXERCISE = exercise(
    name="regularised-softmax", title="A softmax classifier with a max-shifted cross-entropy and weight decay",
    sizes={"N": (8, (6, 30)), "D": (5, (2, 12)), "K": (4, (3, 10))},
    data="X = randn(N, D)\ny = randint(K, (N,))", parameters="W = randn(D, K) * 0.5\nb = randn(K) * 0.1",
    forward=FORWARD, fused={"dscores": "loss"},
)
