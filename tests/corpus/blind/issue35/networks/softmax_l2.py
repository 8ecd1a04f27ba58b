"""A two-layer network on real-valued inputs whose loss is written out by hand: exponentials, their sum,
log-probabilities, the mean negative log-likelihood of the targets, plus an L2 penalty on both weights."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="softmax_l2",
    title="A two-layer net with hand-written softmax cross-entropy and L2",
    sizes={"n": (32, (8, 40)), "n_in": (12, (3, 20)), "n_hidden": (40, (6, 48)), "n_out": (10, (4, 30))},
    parameters="""
        W1 = randn(n_in, n_hidden) / n_in ** 0.5
        b1 = randn(n_hidden) * 0.1
        W2 = randn(n_hidden, n_out) * 0.1
        b2 = randn(n_out) * 0.1
    """,
    data="""
        Xb = randn(n, n_in)
        Yb = randint(n_out, (n,))
    """,
    forward="""
        h = torch.relu(Xb @ W1 + b1)
        logits = h @ W2 + b2
        counts = logits.exp()
        counts_sum = counts.sum(1, keepdim=True)
        logprobs = logits - counts_sum.log()
        data_loss = -logprobs[range(n), Yb].mean()
        reg = (W1 ** 2).sum() + (W2 ** 2).sum()
        loss = data_loss + 0.01 * reg
    """,
)
