"""A margin ranking loss: a positive example's score must beat a negative's by a margin, or the hinge is active.
Each score's gradient is the hinge's mask times the upstream one, with a minus sign for the positive's
(tests/test_neighbourhood.py: `dsp = -dviol`, the mask left out, is told so, not as sn read for sp)."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="margin-ranking", title="A margin ranking loss",
    sizes={"N": (12, (6, 30)), "D": (5, (2, 12))},
    parameters="w = randn(D, 1) * 0.5", data="Xp = randn(N, D)\nXn = randn(N, D)",
    forward="""
        sp = Xp @ w
        sn = Xn @ w
        viol = (sn - sp + 1).clamp(min=0)
        loss = viol.mean()
    """,
)
