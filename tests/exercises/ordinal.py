"""The head of a cumulative-logit ordinal regression, as an instructor trial wrote it: class probabilities are
differences of neighbouring cumulative probabilities, `cum_pad[:, 1:] - cum_pad[:, :-1]`, one step reading its input
through two slices that overlap (tests/test_neighbourhood.py: each slice's part written with =). The trial's hidden
ReLU layer adds nothing to that step and is left out."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="ordinal",
    title="A cumulative-logit ordinal head",
    sizes={"n": (32, (8, 40)), "d": (12, (4, 20)), "T": (4, (2, 8))},
    parameters="""
        w = randn(d) / d ** 0.5
        theta = torch.linspace(-2.0, 2.0, T)
    """,
    data="""
        X = randn(n, d)
        y = randint(T + 1, (n,))
    """,
    forward="""
        cum = torch.sigmoid(theta - (X @ w).unsqueeze(1))
        cum_pad = torch.cat([torch.zeros(n, 1), cum, torch.ones(n, 1)], 1)
        probs = cum_pad[:, 1:] - cum_pad[:, :-1]
        loss = -probs[range(n), y].log().mean()
    """,
)
