"""The makemore exercise's mistakes that its network alone does not show: the classic slips in the
derivatives of its elementwise steps (log, exp, x**-1, batch norm's (bnvar + eps)**-0.5, the square,
tanh), what its sizes and data are called, and what sets its small-variance configuration apart.

The engine's search (grader.judge.neighbourhood) tries each slip on the forward pass, in the trusted
process, and names a wrong answer with its sentence when the answer equals it on every configuration.
"""
from __future__ import annotations

from grader.exercise import Mistakes, Rule
from grader.exercises.makemore_mlp.model import EPS


def _eps_slips() -> tuple:
    slips = [("eps-dropped", "leaves the forward's eps out of the derivative of (bnvar + eps)**-0.5",
              lambda x, y: -0.5 * x**-1.5)]
    for eps in (1e-3, 1e-4, 1e-6, 1e-8):
        slips.append((f"eps-{eps:g}", f"adds eps = {eps:g} in the derivative where the forward adds {EPS:g}",
                      lambda x, y, e=eps: -0.5 * (x + e) ** -1.5))
    slips.append(("power", "keeps the exponent -0.5 in the derivative: the power rule lowers it by one",
                  lambda x, y: -0.5 * (x + EPS) ** -0.5))
    slips.append(("power-up", "raises the exponent in the derivative: the power rule lowers it by one",
                  lambda x, y: -0.5 * (x + EPS) ** 0.5))
    return tuple(slips)


RULES = {
    "logprobs": Rule("the derivative of log", "x", lambda x, y: 1 / x, (
        ("multiplies", "multiplies by probs where the derivative of log divides by it", lambda x, y: x),)),
    "counts": Rule("the derivative of exp", "y", lambda x, y: y),
    "counts_sum_inv": Rule("the derivative of x**-1", "x", lambda x, y: -x**-2, (
        ("power", "keeps the exponent -1 in the derivative: the power rule lowers it by one", lambda x, y: -x**-1),
        ("power-twice", "lowers the exponent by two in the derivative of x**-1", lambda x, y: -x**-3),
        ("power-positive", "writes a positive exponent in the derivative of x**-1", lambda x, y: -x**2))),
    "bnvar_inv": Rule("the derivative of (bnvar + eps)**-0.5", "x", lambda x, y: -0.5 * (x + EPS) ** -1.5,
                      _eps_slips()),
    "bndiff2": Rule("the derivative of the square", "x", lambda x, y: 2 * x, (
        ("square", "squares bndiff in the derivative of the square, which is linear in it", lambda x, y: x**2),)),
    "h": Rule("the derivative of tanh", "y", lambda x, y: 1 - y**2, (
        ("tanh-square", "squares (1 - h) in the tanh derivative: check the order of the square and the subtraction",
         lambda x, y: (1 - y) ** 2),
        ("tanh-plus", "adds the square of h in the tanh derivative instead of subtracting it", lambda x, y: 1 + y**2),
        ("tanh-cosh", "uses tanh's output where its derivative needs the square of it", lambda x, y: 1 - y),
        ("sigmoid", "uses the sigmoid's derivative where the tanh's is needed", lambda x, y: y * (1 - y)))),
}

MISTAKES = Mistakes(
    rules=RULES,
    words={"n": "the batch size", "Xb": "a character"},
    # The sizes the course's feedback has always named: the batch, the vocabulary and the hidden layer.
    hardcoded=("n", "vocab", "n_hidden"),
    unusual="whose hidden activations have a tiny variance (comparable to batch norm's eps)",
)
