"""Ordinal regression with cumulative logits on a ReLU MLP, as an instructor trial wrote it: the class probabilities
are differences of neighbouring cumulative probabilities, `cum_pad[:, 1:] - cum_pad[:, :-1]`, one step reading its
input through two slices that overlap (tests/test_neighbourhood.py: each slice's part written with =)."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="ordinal",
    title="Cumulative-logit ordinal regression",
    sizes={"n": (32, (8, 40)), "d": (12, (4, 20)), "H": (24, (6, 40)), "T": (4, (2, 8))},
    parameters="""
        W1 = randn(d, H) / d ** 0.5
        b1 = randn(H) * 0.1
        w = randn(H) / H ** 0.5
        theta = torch.linspace(-2.0, 2.0, T)
    """,
    data="""
        X = randn(n, d)
        y = randint(T + 1, (n,))
    """,
    forward="""
        h = torch.relu(X @ W1 + b1)
        s = h @ w
        cum = torch.sigmoid(theta - s.unsqueeze(1))
        cum_pad = torch.cat([torch.zeros(n, 1), cum, torch.ones(n, 1)], 1)
        probs = cum_pad[:, 1:] - cum_pad[:, :-1]
        loss = -probs[range(n), y].log().mean()
    """,
)
