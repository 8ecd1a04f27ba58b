"""A softmax classifier whose every batch holds every class (its targets cycle through them):
`F.one_hot(Y)` without num_classes is right on every configuration here and breaks on a batch without the
last class, so the grader and the self-check say so beside full marks (tests/test_own_course.py)."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="every-class", title="Softmax regression over batches that hold every class",
    sizes={"N": (12, (12, 30)), "D": (4, (2, 8)), "K": (5, (3, 6))},
    parameters="W = randn(D, K) * 0.3", data="X = randn(N, D)\nY = randperm(K).repeat(N // K + 1)[:N]",
    forward="""
        logits = X @ W
        loss = F.cross_entropy(logits, Y)
    """,
)
