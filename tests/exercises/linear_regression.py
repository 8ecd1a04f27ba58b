"""Linear regression onto one output: the prediction is (N, 1) and its bias (1,), so its gradient's last dimension
is of size one (tests/test_neighbourhood.py: a bias gradient never summed is told so, not a sum over dimension 1)."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="linear-regression", title="Linear regression with a squared error",
    sizes={"N": (16, (6, 30)), "D": (5, (2, 12))},
    parameters="w = randn(D, 1) * 0.3\nb = randn(1) * 0.1", data="X = randn(N, D)\ny = randn(N, 1)",
    forward="""
        pred = X @ w + b
        loss = ((pred - y) ** 2).mean()
    """,
)
