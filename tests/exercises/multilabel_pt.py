"""A multi-label classifier whose loss reads each label's probability as a focal loss writes it, `p_t = Y * p +
(1 - Y) * (1 - p)`: p read twice in one step, as an instructor trial wrote it (tests/test_neighbourhood.py)."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="multilabel-pt", title="A multi-label classifier with the probability of the true label",
    sizes={"B": (16, (6, 24)), "D": (6, (3, 9)), "L": (4, (2, 6))},
    parameters="""
        W = randn(D, L) / D ** 0.5
        b = randn(L) * 0.1
    """,
    data="""
        X = randn(B, D)
        Y = (rand(B, L) < 0.3) * 1.0
    """,
    forward="""
        logits = X @ W + b
        p = torch.sigmoid(logits)
        p_t = Y * p + (1 - Y) * (1 - p)
        nll = -p_t.log()
        loss = nll.mean()
    """,
)
