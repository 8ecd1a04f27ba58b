"""A softmax classifier with a temperature below one, its cross-entropy fused: a closed form that leaves out the
1/tau is tau times the right value, which feedback names by the hyperparameter (tests/test_neighbourhood.py), not
as "0.1 times the right value" (an instructor trial's InfoNCE), nor, at a temperature of 0.5, as a square's factor 2
(another trial's)."""
from grader.authoring.define import exercise


def _tempered(name: str, tau: float):
    return exercise(
        name=name, title="Softmax regression with a temperature",
        sizes={"N": (8, (6, 30)), "D": (5, (2, 12)), "K": (4, (3, 10)), "tau": tau},
        parameters="W = randn(D, K) * 0.3", data="X = randn(N, D)\nY = randint(K, (N,))",
        forward="""
            z = X @ W
            s = z / tau
            loss = F.cross_entropy(s, Y)
        """,
        fused={"dz": ("loss", "the tempered cross-entropy")},
    )


EXERCISE = _tempered("temperature", 0.1)
HALF = _tempered("temperature-half", 0.5)
