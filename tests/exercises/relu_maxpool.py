"""A global max-pool over positions after a ReLU, as a third instructor trial's CNN pooled: a channel the ReLU left
at zero at every position ties for its max, where the textbook's mask `(act == pooled[:, None]) * dpooled[:, None]`
gives every tied entry the gradient (tests/test_neighbourhood.py: told so)."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="relu-maxpool", title="A global max-pool after a ReLU",
    sizes={"n": (8, (4, 16)), "P": (3, (2, 5)), "D": (4, (2, 6)), "C": (5, (3, 8))},
    parameters="W = randn(D, C)\nV = randn(C, 2) * 0.1",
    data="X = randn(n, P, D)\ny = randint(2, (n,))",
    forward="""
        conv = X @ W
        act = torch.relu(conv)
        pooled = act.max(1).values
        logits = pooled @ V
        loss = F.cross_entropy(logits, y)
    """,
)
