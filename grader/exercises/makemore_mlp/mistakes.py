"""The makemore exercise's mistakes that its network alone does not show: the classic slips in the
derivatives of its elementwise steps (log, exp, x**-1, batch norm's (bnvar + eps)**-0.5, the square,
tanh), what its sizes and data are called, and what sets its small-variance configuration apart.

The engine's search (grader.judge.neighbourhood) tries each slip on the forward pass, in the trusted
process, and names a wrong answer with its sentence when the answer equals it on every configuration.
The rule table (grader.derive) derives the classic slips of every operation; these are only the ones
it lacks.
"""
from __future__ import annotations

from dataclasses import replace

from grader.exercise import ELEMENTWISE, Mistakes, Rule

# The eps the forward pass adds to batch norm's variance: (bnvar + 1e-5) ** -0.5.
EPS = 1e-5


def _eps_slips() -> tuple:
    """An eps other than the forward's in the derivative (the rule table knows eps left out, the exponent
    kept or raised, the factor -0.5 left out)."""
    return tuple((f"eps-{eps:g}", f"adds eps = {eps:g} in the derivative where the forward adds {EPS:g}",
                  lambda x, y, e=eps: -0.5 * (x + e) ** -1.5) for eps in (1e-3, 1e-4, 1e-6, 1e-8))


def _inverse_sqrt(var: str) -> Rule:
    return Rule(f"the derivative of ({var} + eps)**-0.5", "x", lambda x, y: -0.5 * (x + EPS) ** -1.5, _eps_slips())


def _square(diff: str) -> Rule:
    return Rule("the derivative of the square", "x", lambda x, y: 2 * x, (
        ("square", f"squares {diff} in the derivative of the square, which is linear in it", lambda x, y: x**2),))


# Each rule's derivative, the grammar's own (grader.exercise.ELEMENTWISE), also serves the search for one
# read at another tensor of the same shape; its slips are only those the rule table's own lack.
TANH = ELEMENTWISE["tanh"].rule
SIGMOID = replace(ELEMENTWISE["sigmoid"].rule, slips=(
    ("sigmoid-other-half", "keeps only the (1 - {y}) factor of the sigmoid's derivative", lambda x, y: 1 - y),))
RELU = ELEMENTWISE["relu"].rule
CUBE = Rule("the derivative of the cube", "x", lambda x, y: 3 * x**2)
# The cross-entropy's steps, the same in every variant.
CROSS_ENTROPY = {
    "logprobs": ELEMENTWISE["log"].rule,
    "counts": ELEMENTWISE["exp"].rule,
    "counts_sum_inv": Rule("the derivative of x**-1", "x", lambda x, y: -x**-2, (
        ("power-twice", "lowers the exponent by two in the derivative of x**-1", lambda x, y: -x**-3),
        ("power-positive", "writes a positive exponent in the derivative of x**-1", lambda x, y: -x**2))),
}
RULES = {**CROSS_ENTROPY, "bnvar_inv": _inverse_sqrt("bnvar"), "bndiff2": _square("bndiff"), "h": TANH}
WORDS = {"n": "the batch size", "Xb": "a character"}
# The lecture's setup cells bind its sizes under the lecture's names, though the forward pass reads only n.
SHOWN = {"vocab": "vocab_size", "block_size": "block_size", "n_embd": "n_embd", "n_hidden": "n_hidden"}
# The sizes the course's feedback has always named: the batch, the vocabulary and the hidden layer.
HARDCODED = ("n", "vocab", "n_hidden")


def for_variant(activation: str, norm: str, outputs: tuple[str, ...]) -> Mistakes:
    """A variant's slips: the cross-entropy's, its normalization's and its activation's, keyed by the step
    names the variant's network uses; `outputs` are the activation's outputs (h, and r with a residual)."""
    rules = dict(CROSS_ENTROPY)
    if norm == "batchnorm":
        rules.update(bnvar_inv=_inverse_sqrt("bnvar"), bndiff2=_square("bndiff"))
    elif norm == "layernorm":
        rules.update(lnvar_inv=_inverse_sqrt("lnvar"), lndiff2=_square("lndiff"))
    for y in outputs:
        if activation == "gelu":
            rules.update({f"{y}tanh": TANH, f"{y}cube": CUBE})
        else:
            rules[y] = {"tanh": TANH, "sigmoid": SIGMOID, "relu": RELU}[activation]
    unusual = {"batchnorm": "whose hidden activations have a tiny variance (comparable to batch norm's eps)",
               "layernorm": "whose examples' features have a tiny variance (comparable to layer norm's eps)"}
    return Mistakes(rules=rules, words=WORDS, hardcoded=HARDCODED, unusual=unusual.get(norm, ""), shown=SHOWN)


MISTAKES = for_variant("tanh", "batchnorm", ("h",))
