"""A multiclass SVM as CS231n writes it: the correct class's score picked out with `scores[range(N), y]` and
subtracted from every score, so the scores' gradient is the hinge's mask plus what flows back into the picked
entries (tests/test_neighbourhood.py names `=` written there for `+=`)."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="svm-hinge", title="A linear multiclass SVM",
    sizes={"N": (8, (6, 30)), "D": (5, (2, 12)), "K": (4, (3, 10))},
    data="X = randn(N, D)\ny = randint(K, (N,))", parameters="W = randn(D, K) * 0.5\nb = randn(K) * 0.1",
    forward="""
        scores = X @ W + b
        correct = scores[range(N), y]
        margins = (scores - correct.view(-1, 1) + 1).clamp(min=0)
        loss = (margins.sum() - N) / N
    """,
)
