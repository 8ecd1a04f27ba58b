"""The neighbourhood's explanations on the shipped exercise and its variants: each kind of mistake the
search names, written as a student's cell and run on the grader's own configurations (the lecture's
sizes and hidden ones), and every slip of the rule table named the same way whatever the upstream
gradients are, so that no explanation rests on a coincidence of the true chain.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from grader import derive
from grader.course import Tolerance
from grader.exercise import ATOMIC
from grader.exercises.makemore_mlp import mistakes, variants
from grader.judge import neighbourhood
from grader.judge.compare import judge
from grader.judge.configs import generate
from grader.judge.diagnose import name
from grader.judge.exam import CHAIN, LOCAL, checks, prepare

torch.set_num_threads(1)
RTOL, ATOL = 1e-5, 1e-8


@functools.cache
def _cases(variant: str) -> tuple:
    """Two hidden configurations and the lecture-sized probe, as a course of that variant (or of an
    exercise file, FILE:ATTRIBUTE) grades."""
    spec = variant if ":" in variant else "makemore-mlp" if variant == "tanh-batchnorm" else f"makemore-mlp/{variant}"
    return tuple(prepare(config) for config in generate(spec, "neighbourhood-tests", 2))


def _run(code: str, case, answer, check: str) -> torch.Tensor:
    """What an answer cell holding `code` computes on `case`, with the gradients that check gives it."""
    namespace = {k: v.clone() if isinstance(v, torch.Tensor) else v
                 for k, v in {**case.values, **case.upstream(answer, check)}.items()}
    namespace.update(case.sizes, torch=torch, F=F)
    exec(code, namespace)  # noqa: S102 - the tests' own cells
    return namespace[answer.variable].detach().to(torch.float64)


def said(variant: str, grade_id: str, code: str, check: str = CHAIN, *, read: bool = False) -> str | None:
    """What the search names for a cell holding `code`; `read`: given the cell's source too, as the grader is."""
    cases = _cases(variant)
    answer = cases[0].exercise.by_grade_id[grade_id]
    return name([(case, _run(code, case, answer, check)) for case in cases], answer, check, RTOL, ATOL,
                code=code if read else None)


RNN = "grader/exercises/gallery/rnn.py:EXERCISE"
# Exercise 3's cell written as the chain of exercise 1's steps, from dhpreact.
CHAIN_EX3 = """dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
dbnraw = bngain * dhpreact
dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
dbnvar = -0.5 * (bnvar + 1e-5) ** -1.5 * dbnvar_inv
dbndiff2 = torch.ones_like(bndiff2) / (n - 1) * dbnvar
dbndiff = bnvar_inv * dbnraw + 2 * bndiff * dbndiff2
dbnmeani = -dbndiff.sum(0, keepdim=True)
dhprebn = dbndiff.clone()
dhprebn += 1.0 / n * torch.ones_like(hprebn) * dbnmeani
"""
CONV, SOFTMAX_L2 = (f"tests/corpus/blind/issue35/networks/{n}.py:EXERCISE" for n in ("conv1d", "softmax_l2"))


@pytest.mark.parametrize("spec, grade_id, code, sentence", [
    # another gradient the cell can read, in place of the one the step passes back
    ("relu-batchnorm", "dW1", "dW1 = embcat.T @ dbndiff",
     "your dW1 uses dbndiff where the derivative through hprebn needs dhprebn, the gradient flowing back from hprebn"),
    ("gelu-layernorm", "dembcat", "dembcat = dhpreact @ W1.T",
     "your dembcat uses dhpreact where the derivative through hpreln needs dhpreln, the gradient flowing back from "
     "hpreln"),
    # that gradient summed over a dimension first
    ("tanh-none", "dcounts", "dcounts = counts_sum_inv * dprobs.sum(1, keepdim=True) + torch.ones_like(counts) * "
                             "dcounts_sum",
     "your dcounts sums dprobs over dimension 1 before passing it back: each entry of probs sends back its own "
     "gradient"),
    # a step too early: the next step's local derivative applied already
    ("tanh-none-residual", "dr", "dr = (1 - r**2) * dhres",
     "your dr goes one step too far: it also applies the derivative of the step that computes r from rpreact, "
     "which belongs in drpreact"),
    # the derivative with respect to the step's other input
    ("gelu-none", "dhtanh", "dhtanh = 0.5 * (1 + htanh) * dh",
     "your dhtanh takes the derivative of h with respect to hpreact, where the one with respect to htanh is needed"),
    # the forward operation applied to the gradient
    ("relu-none", "dhpreact", "dhpreact = torch.relu(dh)",
     "your dhpreact applies the operation that computes h to dh, where it must multiply dh by that operation's "
     "derivative"),
    # branches multiplied, or one counted twice
    ("gelu-none-residual", "dh", "dh = dhres * (drpreact @ W3.T)",
     "your dh multiplies the parts flowing back through rpreact and hres, where the gradients of the uses of h "
     "add up"),
    ("tanh-batchnorm-residual", "dh", "dh = 2 * dhres + drpreact @ W3.T",
     "the part flowing back through hres is twice its value: counted twice (h reaches hres once), or a factor 1/2 "
     "left out"),
    # a factor that is a tensor the cell reads or a simple function of one, per element or per row
    ("sigmoid-batchnorm", "dbnraw", "dbnraw = bngain * dhpreact * bnraw",
     "your dbnraw is multiplied by bnraw, a factor the right gradient does not have"),
    ("gelu-batchnorm", "dhtanh", "dhtanh = 0.5 * (1 + htanh) * dh / (1 + htanh)",
     "your dhtanh is the right gradient divided by hpreact: a factor hpreact left out, or a 1/hpreact too many"),
    ("relu-none", "dhpreact", "dhpreact = (1 - h**2) * dh",
     "your dhpreact multiplies dh by 1 - h² where it needs the derivative of the step that computes h (1 - y² is "
     "tanh's derivative, y its output)"),
    ("relu-layernorm", "dhpreact", "dhpreact = h * (1 - h) * dh",
     "your dhpreact multiplies dh by h·(1 - h) where it needs the derivative of the step that computes h (y·(1 - y) "
     "is the sigmoid's derivative, y its output)"),
    ("tanh-none", "dprobs", "dprobs = -dlogprobs / probs**2",
     "your dprobs multiplies dlogprobs by -1/probs² where it needs the derivative of the step that computes "
     "logprobs (-1/x² is the derivative of 1/x)"),
    # a forgotten ReLU mask is a local derivative left out, not a derivative read at another tensor
    ("relu-layernorm", "dhpreact", "dhpreact = dh.clone()",
     "your dhpreact equals dh: the derivative of the step that computes h is not applied to it (left out, or the "
     "formula of dh copied)"),
    # the right entries in another order
    ("sigmoid-layernorm", "demb", "demb = dembcat.view(emb.shape[0], emb.shape[2], emb.shape[1]).permute(0, 2, 1)",
     "your demb has the right entries in the wrong places"),
    # any of the configuration's sizes, and a ratio of two
    ("gelu-none", "demb", "demb = dembcat.view(emb.shape) * emb.shape[2]",
     "your demb is n_embd times too large"),
    ("tanh-layernorm", "dhpreln", "dhpreln = dlndiff + dlnmean / n",
     "the part flowing back through lnmean is n_hidden/n times the right value, as when it divides by n where "
     "n_hidden belongs"),
    # issue 35: a slip inside a line that does several things, or one the code shows, each told only "wrong
    # values" before
    # a factor of a line that does several things left out: tanh' of h3 = tanh(emb[:, 2] @ Wx + h2 @ Wh + bh)
    (RNN, "dh2", "dh2 = dh3 @ Wh.T",
     "your dh2 leaves out the derivative of tanh on the way back through h3: the chain rule multiplies by it there"),
    (RNN, "dWx", "dWx = emb[:, 2].T @ dh3 + emb[:, 1].T @ ((1 - h2 ** 2) * dh2) + emb[:, 0].T @ ((1 - h1 ** 2) * dh1)",
     "your dWx leaves out the derivative of tanh on the way back through h3"),
    # the same derivative read at the neighbouring time step's output
    (RNN, "dh2", "dh2 = (1 - h2 ** 2) * dh3 @ Wh.T",
     "your dh2 uses h2 where the derivative of tanh needs h3, its output"),
    # operator precedence: what Python reads where the parentheses are left out
    (RNN, "dh2", "dh2 = 1 - h3 ** 2 * dh3 @ Wh.T",
     "your dh2 leaves out the parentheses around a difference: Python computes * before - (operator precedence)"),
    ("tanh-batchnorm", "dhpreact", "dhpreact = 1 - h**2 * dh",
     "your dhpreact leaves out the parentheses around a difference: Python computes * before -"),
    (RNN, "dh2", "dh2 = (1 - h3 ** 2) * (dh3 @ Wh.T)", "your dh2 groups * and @ the other way"),
    # a loop over the batch that assigns with =: the last example's part alone
    ("tanh-batchnorm", "dW2", "for i in range(n):\n    dW2 = h[i:i+1].T @ dlogits[i:i+1]\n",
     "your dW2 is the last example's part alone, where the gradient sums the parts of every example of the batch: "
     "as a loop over the examples that assigns with ="),
    (RNN, "dby", "for i in range(dlogits.shape[0]):\n    dby = dlogits[i]\n",
     "your dby is the last example's part alone"),
    # on networks written blind for issue 35 (its tune set), each once told only "wrong values" or a wrong sum
    (CONV, "dcols", "dcols = torch.relu(dconv) @ Wk.T",
     "your dcols applies the operation that computes conv to dconv, where it must multiply dconv by that "
     "operation's derivative"),
    (CONV, "dcols", "dcols = (cols @ Wk + bk) * dconv @ Wk.T", "your dcols multiplies by ReLU's input where its "
                                                               "derivative is a 0/1 mask"),
    (CONV, "dWk", "g = (cols @ Wk + bk > 0) * dconv\ndWk = torch.outer(cols.sum((0, 1)), g.sum((0, 1)))",
     "your dWk multiplies the sum of cols over the examples by the sum of the gradient"),
    (CONV, "dbk", "dbk = ((cols @ Wk + bk > 0) * dconv).sum(0)",
     "your dbk sums over dimension 0 alone: bk was broadcast along dimensions 0 and 1, and its gradient sums over "
     "all of them"),
    (SOFTMAX_L2, "dW1", "gh = (Xb @ W1 + b1 > 0) * dh\nfor i in range(Xb.shape[0]):\n"
                        "    dW1 = torch.outer(Xb[i], gh[i]) + 2 * W1 * dreg\n",
     "your dW1 is the last example's part alone"),
    # a batch size the exercise names N (CS231n's): the loop's last example is found by the data's first dimension
    ("tests/exercises/cs231n_net.py:EXERCISE", "dW2",
     "for i in range(X.shape[0]):\n    dW2 = torch.outer(h1[i], dscores[i]) + 0.1 * W2\n",
     "your dW2 is the last example's part alone"),
    # = where += is due at the entries another use picks (an instructor trial's SVM; the lecture's max): it was
    # told only "wrong in 16 of 80 entries"
    ("tests/exercises/svm_hinge.py:EXERCISE", "dscores",
     "dscores = (margins > 0) * dmargins\ndscores[range(N), y] = dcorrect\n",
     "your dscores assigns the part flowing back through correct to the entries of scores that correct picks (=), "
     "which replaces what the other uses of scores put there: add it (+=)"),
    ("tanh-batchnorm", "dlogits",
     "dlogits = dnorm_logits.clone()\ndlogits[range(n), logits.max(1).indices] = dlogit_maxes.view(-1)\n",
     "your dlogits assigns the part flowing back through logit_maxes to the entries of logits that logit_maxes "
     "picks (=)"),
    # softplus(-x) differentiated as softplus(x) (an instructor trial's word2vec: told only "wrong values")
    ("tests/exercises/bpr.py:EXERCISE", "dx", "dx = torch.sigmoid(x) / x.shape[0] * dbpr",
     "your dx takes the derivative of softplus at x, where the step applies softplus to -x"),
    (RNN, "dWh", "dWh = h2.T.sum(1, keepdim=True) @ ((1 - h3 ** 2) * dh3).sum(0, keepdim=True)\n"
                 "dWh += h1.T.sum(1, keepdim=True) @ ((1 - h2 ** 2) * dh2).sum(0, keepdim=True)\n",
     "your dWh multiplies the sum of h2 over the examples by the sum of the gradient: a product of sums is not the "
     "sum of each row's own product, which the matrix product h2.T @ gradient gives (the same slip in every use of "
     "Wh)"),
])
def test_a_kind_of_mistake_is_named_in_any_exercise(spec, grade_id, code, sentence):
    assert (said(spec, grade_id, code) or "").startswith(sentence)


@pytest.mark.parametrize("spec, grade_id, code, sentence", [
    # an older upstream gradient read where the one the step passes back flows: another shape, so the
    # values alone could only say which dimension is not summed
    ("tanh-batchnorm", "dcounts_sum", "dcounts_sum = (-counts_sum**-2) * dprobs",
     "your dcounts_sum reads dprobs where the derivative needs dcounts_sum_inv"),
    # another tensor's whole gradient, in its shape: the comparison tells the shape, the code what was read
    ("tanh-batchnorm", "db1", "db1 = dbnbias", "your db1 reads dbnbias where the derivative needs dhprebn"),
    # a time step's neighbour read in one use of a weight shared over time
    (RNN, "dWh", "dWh = h2.T @ ((1 - h3**2) * dh3) + h2.T @ ((1 - h2**2) * dh2)",
     "your dWh reads h2 where the derivative needs h1"),
])
def test_a_name_the_code_reads_in_place_of_another_is_said_where_the_values_confirm_it(spec, grade_id, code,
                                                                                     sentence):
    assert said(spec, grade_id, code, read=True) == sentence
    assert said(spec, grade_id, code) != sentence, "the code, not the values alone, says which name"


def test_a_fused_cell_is_read_against_its_closed_form():
    code = "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) - n / (n - 1) * hprebn * " \
           "(dhpreact * hprebn).sum(0))"
    assert said("tanh-batchnorm", "ex3_dhprebn", code, read=True) == \
        "your dhprebn reads hprebn where the derivative needs bnraw"
    # one use of a name the code reads elsewhere too (the fourteenth student trial: "wrong values", nothing more)
    code = "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) - n / (n - 1) * bnraw * " \
           "(dhpreact * bndiff).sum(0))"
    assert said("tanh-batchnorm", "ex3_dhprebn", code, read=True) == \
        "your dhprebn reads bndiff where the derivative needs bnraw (in one of its 2 uses: your code reads both)"


@pytest.mark.parametrize("grade_id, code, sentence", [
    # the closed form's own slips: exercise check found them unnamed (only inner steps' were searched)
    ("ex2_dlogits", "dlogits = F.softmax(logits, 1) - F.one_hot(Yb, num_classes=logits.shape[1]) / n",
     "your dlogits leaves out the parentheses around a difference: Python computes / before - (operator "
     "precedence)"),
    ("ex2_dlogits", "dlogits = (F.softmax(logits, 0) - F.one_hot(Yb, num_classes=logits.shape[1])) / n",
     "your dlogits takes the softmax over dimension 0, the examples, where cross_entropy's runs over each row's "
     "classes (dimension 1)"),
    # the block's own last line, written out as the chain
    ("ex3_dhprebn", CHAIN_EX3.replace("dhprebn = dbndiff.clone()", "dhprebn = bndiff.clone()"),
     "your dhprebn uses bndiff, the forward value, where the upstream gradient dbndiff is needed"),
    ("ex3_dhprebn", CHAIN_EX3.replace("dhprebn += ", "dhprebn = "),
     "your dhprebn misses the branch through bndiff: hprebn is used twice (in bnmeani and in bndiff), so its "
     "gradient is the sum of both"),
])
def test_a_fused_cells_own_slips_are_named(grade_id, code, sentence):
    assert said("tanh-batchnorm", grade_id, code) == sentence


def test_a_bias_gradient_never_summed_is_not_told_as_a_sum_over_a_dimension_of_one():
    """An instructor trial's `db_out = dpred` of a (N, 1) prediction: "sums over the wrong dimension (1)", which the
    student never wrote; a sum over a dimension of one is the gradient itself. The shape hints say what it is."""
    assert said("tests/exercises/linear_regression.py:EXERCISE", "db", "db = dpred\n") is None


@pytest.mark.parametrize("code, sentence", [
    ("dz = (F.softmax(s, 1) - F.one_hot(Y, s.shape[1])) / s.shape[0]\n",
     "your dz is tau times the right value: a division by tau left out, or a multiplication too many"),
    ("dz = (F.softmax(s, 1) - F.one_hot(Y, s.shape[1])) / s.shape[0] / tau ** 2\n",
     "your dz is 1/tau times the right value: a division by tau too many, or a multiplication left out"),
])
@pytest.mark.parametrize("spec", ["EXERCISE", "HALF"])
def test_a_factor_of_a_hyperparameter_below_one_is_named_by_it(code, sentence, spec):
    """An instructor trial's InfoNCE: a closed form without its 1/tau was "0.1 times the right value", naming no
    cause; sizes above one were named, a temperature of 0.1 was not. Another's, at a temperature of 0.5, was told
    "half the right value (a factor 2 missing, as from a square's derivative)": the hyperparameter goes first."""
    assert said(f"tests/exercises/temperature.py:{spec}", "ex2_dz", code) == sentence


@pytest.mark.parametrize("grade_id, code, sentence", [
    ("dsp", "dsp = -dviol\n", "your dsp passes -dviol back: of the derivative of the step that computes viol, only "
                              "its minus sign is applied, the rest of it is left out"),
    ("dsn", "dsn = dviol\n", "your dsn equals dviol: the derivative of the step that computes viol is not applied to "
                             "it (left out, or the formula of dviol copied)")])
def test_a_hinges_mask_left_out_is_told_so_on_both_sides(grade_id, code, sentence):
    """An instructor trial's triplet loss: `dneg_d = -dviol` was told it "uses neg_d where the derivative through viol
    needs pos_d", since reading the one for the other in `(sn - sp + 1) > 0` makes a mask of ones, the same values;
    `dpos_d = dviol`, its twin, was told the derivative was not applied."""
    assert said("tests/exercises/margin_ranking.py:EXERCISE", grade_id, code) == sentence


def test_a_swap_a_normalization_cannot_see_is_never_named():
    """An instructor trial's dgamma with eps left out of batch norm was told it "uses hbn where the derivative
    through hbn needs hpre": batch norm of hbn is batch norm of hpre but for eps, so the swap fitted the slip."""
    code = "dgamma = (dhbn * (hpre - hpre.mean(0)) / hpre.std(0, unbiased=False)).sum(0)"
    for check in (CHAIN, LOCAL):
        assert said("tests/exercises/bn_silu.py:EXERCISE", "dgamma", code, check, read=True) is None


def test_a_max_pool_s_mask_that_counts_ties_is_told_so():
    """A third instructor trial's `(act == pooled.unsqueeze(1)) * dpooled.unsqueeze(1)`: right wherever no two
    positions tie, wrong at a ReLU channel that is zero everywhere, and told only "right in 2296 of 2304 entries"."""
    code = "dact = (act == pooled.unsqueeze(1)) * dpooled.unsqueeze(1)"
    assert "ties for the max in pooled" in (said("tests/exercises/relu_maxpool.py:EXERCISE", "dact", code) or "")


def test_a_name_the_code_reads_is_not_said_where_the_values_deny_it():
    code = "dcounts_sum = (-counts_sum**-2) * dprobs.sum(1, keepdim=True)"
    assert "reads" not in (said("tanh-batchnorm", "dcounts_sum", code, read=True) or "")


def test_a_branch_forgotten_whole_is_not_told_as_a_slip_inside_it_that_cancels_it():
    """The instructor trial's VAE: the KL term's branch of dlogvar forgotten. Leaving out exp's derivative there
    makes the branch's two terms cancel, so the rule table's slip "leaves out the derivative of exp" has the
    same values, and was said on every route to a student who never wrote an exp. The code reads neither dkl
    nor logvar, which that slip reads: the forgotten branch is said."""
    line = said("tests/exercises/vae.py:EXERCISE", "dlogvar", "dlogvar = 0.5 * std * dstd", read=True)
    assert line.startswith("your dlogvar misses the branch through kl") and "exp" not in line, line


@pytest.mark.parametrize("code, sentence", [
    ("dWd = z.T @ (xhat * (1 - xhat) * dxhat) * X.shape[0]", "your dWd is X.shape[0] times too large"),
    ("dWd = z.T @ (xhat * (1 - xhat) * dxhat) * X.shape[0] / X.shape[1]",
     "your dWd is X.shape[0]/X.shape[1] times the right value, as when it divides by X.shape[1] where X.shape[0] "
     "belongs"),
])
def test_a_size_the_notebook_binds_no_name_for_is_said_as_a_shape_it_has(code, sentence):
    """The instructor trial's VAE: its forward pass averages with .mean(), so the notebook binds no B or D, and
    "your dxlogits is N times too large" named a size the student could not find."""
    assert said("tests/exercises/vae.py:EXERCISE", "dWd", code, read=True) == sentence


@pytest.mark.parametrize("spec, grade_id, code, sentence", [
    ("tests/exercises/vae.py:EXERCISE", "dWd", "dWd = z.T @ (torch.sigmoid(xhat) * (1 - torch.sigmoid(xhat)) * dxhat)",
     "your dWd applies the sigmoid again to its output xhat: the derivative of the sigmoid is xhat * (1 - xhat), "
     "with no sigmoid left in it"),
    ("tanh-batchnorm", "dhpreact", "dhpreact = (1.0 - torch.tanh(h)**2) * dh",
     "your dhpreact applies tanh again to its output h: the derivative of tanh is 1 - h**2, with no tanh left in it"),
])
def test_an_activation_applied_again_to_its_own_output_is_named(spec, grade_id, code, sentence):
    """A blind set's sigmoid(xhat) * (1 - sigmoid(xhat)) with xhat already the sigmoid's output, and the unseen
    corpus's 1 - tanh(h)**2: each was "wrong values" alone."""
    assert said(spec, grade_id, code, read=True) == sentence


@pytest.mark.parametrize("code, left_out", [("dg = (dhn * h0).sum(0)", "rrms"), ("dg = (rrms * dhn).sum(0)", "h0")])
def test_one_factor_of_a_products_local_derivative_left_out_is_named(code, left_out):
    """A blind set's dg for hn = h0 * rrms * g without the normalizing rrms: "wrong values" alone."""
    assert said("tests/exercises/rms_residual.py:EXERCISE", "dg", code, read=True) == \
        f"your dg leaves out {left_out} of the product's local derivative h0 * rrms"


GRU_EMB = """t1 = torch.tanh(emb[:, 0] @ Wh)
t2 = torch.tanh(emb[:, 1] @ Wh)
demb = torch.zeros_like(emb)
demb[:, 0] = (dz1 * z1 * (1 - z1)) @ Wz.T + (dh1 * z1 * (1 - t1**2)) @ Wh.T
demb[:, 1] = (dz2 * z2 * (1 - z2)) @ Wz.T + (dh2 * z2 * (1 - t2**2)) @ Wh.T
"""


@pytest.mark.parametrize("right, slipped, sentence", [
    ("(1 - t1**2)", "(1 - t1)", "uses torch.tanh(emb[:, 1] @ Wh) where the derivative of tanh needs its square"),
    ("z1 * (1 - t1**2)", "(1 - t1**2)", "leaves out the local derivative z2 of the product"),
])
def test_the_same_slip_in_each_use_that_has_its_step_is_named(right, slipped, sentence):
    """A blind set's GRU: emb is read by both gates and both candidates, and the same slip in both candidates
    (not the gates, which have no tanh) was "wrong values" alone: only a slip in every use was tried."""
    code = GRU_EMB.replace(right, slipped).replace(right.replace("t1", "t2").replace("z1", "z2"),
                                                   slipped.replace("t1", "t2").replace("z1", "z2"))
    assert said("tests/exercises/gru_gate.py:EXERCISE", "demb", code, read=True) == \
        f"your demb {sentence} (the same slip in emb's uses in h1 and h2)"


def test_a_slip_inside_a_fused_cell_is_named_at_the_step_it_enters():
    code = "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) - bnraw * (dhpreact * bnraw).sum(0))"
    assert said("relu-batchnorm", "ex3_dhprebn", code) == (
        "your dhprebn goes wrong at bndiff: the part flowing back through bndiff2 is (n-1)/n times the right value: "
        "it divides by n where the forward divides by n-1 (the unbiased variance, Bessel's correction)")


@pytest.mark.parametrize("code", ["dscores = F.softmax(scores, 1) / N",
                                  "dscores = F.softmax(scores, 1) - F.one_hot(y, num_classes=scores.shape[1]) / N"])
def test_a_fused_block_through_a_scalar_step_is_searched_without_an_error(code):
    """A block whose chain passes a 0-d gradient (the regularised loss's nll): its steps' candidates were
    measured along a direction with flatten(1), an IndexError that graded the cell as a grader error
    (exercise check's dry run found it)."""
    named = said("tests/exercises/regularised_softmax.py:EXERCISE", "ex2_dscores", code)
    assert named is None or named.startswith("your dscores"), named


def test_gradients_equal_on_the_true_chain_are_named_together():
    assert said("sigmoid-none-residual", "dhpreact", "dhpreact = h * (1 - h) * dhres") == (
        "your dhpreact uses dr (or dhres, equal to it here) where the derivative through h needs dh, the gradient "
        "flowing back from h")


def test_zeros_are_told_as_zeros_where_a_cause_would_be_a_coincidence():
    """Layer norm's gradient sums to zero over each row: zeros are not "summed over dimension 1"."""
    assert said("relu-layernorm", "db1", "db1 = torch.zeros_like(b1)") == "your db1 is all zeros"


def test_a_substituted_gradient_is_named_on_the_random_upstream_check_too():
    """With random upstream gradients the neighbour's gradient is random too: the cell's slip, not a value."""
    assert said("relu-batchnorm", "db1", "db1 = dbndiff.sum(0)", LOCAL) == (
        "your db1 uses dbndiff where the derivative through hprebn needs dhprebn, the gradient flowing back from "
        "hprebn")


def test_a_random_tensor_factor_is_named_by_no_one():
    code = "dhpreact = (1 - h**2) * dh * (1 + 0.1 * torch.randn_like(h))"
    assert said("tanh-batchnorm", "dhpreact", code) is None


def _slip_tensors(cases, answer, slip, check):
    """The slip's answer on every case, or None when it cannot run there, changes the shape (the shape
    hints tell that) or equals the right answer."""
    out = []
    for case in cases:
        try:
            got = _run(slip.code, case, answer, check)
        except Exception:  # noqa: BLE001 - a slip that fails to run loses credit another way
            return None
        if got.shape != case.expected(answer, check).shape:
            return None
        out.append((case, got))
    if all(torch.allclose(got, case.expected(answer, check), rtol=RTOL, atol=ATOL) for case, got in out):
        return None
    return out


GALLERY = ("attention", "rnn", "wavenet")


def _own(slip, variable: str) -> str:
    return slip.sentence if slip.sentence.startswith(("the ", "a ", "an ")) else f"your {variable} {slip.sentence}"


@pytest.mark.slow
@pytest.mark.parametrize("spec", [*variants.NAMES, *(f"grader/exercises/gallery/{g}.py:EXERCISE" for g in GALLERY)])
def test_every_rule_table_slip_is_named_by_its_own_sentence(spec):
    """Each slip of every gradient, on the true chain and with random upstream gradients, is told by its
    own sentence: the one edit of the derived answer that makes it, in this exercise's names. Two accounts
    the values cannot tell apart are both its own: another slip of the same gradient (one the rule table
    keeps beside it for its values, `alike`, too) equal to it on every
    configuration of that check, and "all zeros" where the slip's values are zero everywhere (a fact, where
    any cause would be one of many)."""
    cases = _cases(spec)
    exercise = cases[0].exercise
    wrong = []
    for gradient in derive.for_exercise(exercise):
        answer = next((a for a in exercise.answers if a.kind == ATOMIC and a.variable == gradient.name), None)
        if answer is None:
            continue
        for check in checks(answer):
            made = {slip: _slip_tensors(cases, answer, slip, check) for slip in (*gradient.slips(), *gradient.alike)}
            made = {slip: tensors for slip, tensors in made.items() if tensors is not None}
            for slip, tensors in made.items():
                said_ = name(tensors, answer, check, RTOL, ATOL)
                own = {_own(other, answer.variable) for other, others in made.items()
                       if all(torch.allclose(a, b, rtol=RTOL, atol=ATOL) for (_, a), (_, b) in zip(tensors, others))}
                if all(torch.allclose(got, torch.zeros_like(got), rtol=RTOL, atol=ATOL) for _, got in tensors):
                    own.add(f"your {answer.variable} is all zeros")
                if said_ not in own and not _both_own(said_, answer.variable, own):
                    wrong.append((gradient.name, slip.name, check, said_))
    assert not wrong


def _both_own(said: str, variable: str, own: set[str]) -> bool:
    """Two of the step's slips that give the same values, both said (grader.judge.diagnose): each its own."""
    first, _, rest = said.removesuffix(": either gives these values").partition(", or ")
    return said.endswith(": either gives these values") and first in own and f"your {variable} {rest}" in own


def test_a_batch_of_square_matrices_transposed_is_told_as_a_transpose():
    """The attention head's datt is (B, T, T): a transpose too many there swaps two dimensions of one size,
    which is no view's order (a blind held-out answer was once told so)."""
    spec = "grader/exercises/gallery/attention.py:EXERCISE"
    cases = tuple(prepare(config) for config in generate(spec, "neighbourhood-tests", 2))
    answer = cases[0].exercise.by_grade_id["datt"]
    code = "datt = dout @ v.transpose(-2, -1)\ndatt = datt.transpose(-2, -1)\n"
    assert name([(case, _run(code, case, answer, CHAIN)) for case in cases], answer, CHAIN, RTOL, ATOL) == (
        "your datt is the transpose of the gradient, as from multiplying in the wrong order (or one transpose too "
        "many)")


def test_a_sentence_with_a_subject_of_its_own_keeps_it_whatever_its_first_word(monkeypatch, tmp_path):
    """Where no rule table is installed and no fingerprints lie beside the notebook (the student package), the
    search names an overwritten lookup in the exercise's words for an index entry: "each character ..." was
    once said as what "your dC" does, since only a first word "the", "a" or "an" marked a subject."""
    monkeypatch.setattr(neighbourhood, "_derived", lambda exercise: None)
    monkeypatch.setitem(mistakes.WORDS, "Xb", "each character")
    monkeypatch.chdir(tmp_path)
    neighbourhood.candidates.cache_clear()
    try:
        got = said("relu-none", "dC", "dC = torch.zeros_like(C)\ndC[Xb] = demb")
    finally:
        neighbourhood.candidates.cache_clear()
    assert got == ("each character that occurs several times in Xb keeps the gradient of only one of its uses (an "
                   "assignment overwrites; the uses must add up)")


@pytest.mark.parametrize("shift, where", [("- 1", "before"), ("+ 1", "after")])
def test_a_lookup_index_shifted_by_one_is_named(shift, where):
    """The thirteenth student trial's `dC[Xb[k, j] - 1] += demb[k, j]` was told only "wrong values"."""
    code = (f"dC = torch.zeros_like(C)\nfor k in range(Xb.shape[0]):\n    for j in range(Xb.shape[1]):\n"
            f"        dC[(Xb[k, j] {shift}) % C.shape[0]] += demb[k, j]\n")
    assert said("relu-none", "dC", code) == (f"your dC adds each use's gradient to the row {where} its own (an index "
                                             "shifted by one: index with Xb itself)")


def test_one_order_of_preference_orders_a_steps_candidates():
    """A step's candidates go in PREFERENCE's one order (a fused block's inner ones too, in `inside`): the first
    that fits on every configuration is the one named."""
    case = _cases("tanh-batchnorm")[0]
    found = neighbourhood.candidates(case, case.exercise.by_grade_id["dbndiff"], CHAIN)
    rank = [neighbourhood.PREFERENCE.index(c.family) for c in found]
    assert rank == sorted(rank)
    assert len({c.family for c in found}) > 5





def test_a_sigmoid_left_out_inside_a_gate_s_line_is_named():
    """Issue 35's `dUz = h1.T @ dz2`: the sigmoid's derivative of z2 = sigmoid(x @ Wz + h1 @ Uz + bz) left out."""
    spec = "tests/exercises/gru_gate.py:EXERCISE"
    assert said(spec, "dUz", "dUz = h1.T @ dz2") == (
        "your dUz leaves out the derivative of the sigmoid on the way back through z2: the chain rule multiplies by "
        "it there")
    assert said(spec, "dUz", "dUz = h1.T @ (z1 * (1 - z1) * dz2)") == (
        "your dUz uses z1 where the derivative of the sigmoid needs z2, its output")


@pytest.mark.parametrize("code", ["dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[:, Yb] = -1.0 / n\n",
                                  "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[:, Yb] -= 1.0 / n\n"])
def test_every_row_at_the_labels_columns_is_named_where_no_catalogue_names_it(code):
    """The thirteenth student trial's `dlogprobs[:, Yb] = -1.0 / n`: the grader's feedback named it by the hidden
    suite's catalogue, the self-check (which has none) only "wrong values". Judged as both judge it: the catalogue's
    sentence first, and without one this."""
    cases = _cases("tanh-batchnorm")
    answer = cases[0].exercise.by_grade_id["dlogprobs"]
    outcomes = {case.config.name: SimpleNamespace(status="tensor", tensor=_run(code, case, answer, CHAIN), detail={})
                for case in cases}
    tol = Tolerance(RTOL, ATOL)
    sentence = ("your dlogprobs[:, Yb] is every row at each of Yb's columns, where the gradient has one entry per row "
                "(row i at column Yb[i]): index with dlogprobs[range(Yb.shape[0]), Yb]")
    assert judge(outcomes, cases, answer, CHAIN, tol, code=code, public=True).mistake == sentence
    catalogued = judge(outcomes, cases, answer, CHAIN, tol, code=code, catalogue=lambda case, **_: "the catalogue's")
    assert catalogued.mistake == "the catalogue's"
    # the right answer, and a slip elsewhere in the same cell, are not it
    right = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0 / n\n"
    assert judge({c.config.name: SimpleNamespace(status="tensor", tensor=_run(right, c, answer, CHAIN), detail={})
                  for c in cases}, cases, answer, CHAIN, tol, code=right) is None
    other = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[:, Yb] = -1.0 / n\ndlogprobs[0, 0] += 1.0\n"
    wrong = judge({c.config.name: SimpleNamespace(status="tensor", tensor=_run(other, c, answer, CHAIN), detail={})
                   for c in cases}, cases, answer, CHAIN, tol, code=other, public=True)
    assert "every row at each of Yb's columns" not in wrong.mistake


ATTENTION = "grader/exercises/gallery/attention.py:EXERCISE"


@pytest.mark.parametrize("spec, grade_id, code, sentence", [
    # A blind set's attention answers (2026-12-06): 1 taken from every entry, the exps never normalized, the -1
    # subtracted after the 1/n, a position's gradient given to all of them, a softmax's sum over the other
    # dimension, a product transposed back with one factor left as it was
    (ATTENTION, "dlogits", "dlogits = (F.softmax(logits, dim=1) - 1) / logits.shape[0]",
     "your dlogits takes 1 from every entry, where only one_hot(target) is taken from the softmax"),
    (ATTENTION, "ex2_dlogits", "dlogits = (logits.exp() - F.one_hot(Yb, logits.shape[-1])) / Yb.shape[0]",
     "your dlogits uses exp(logits) without dividing each row by its sum"),
    (ATTENTION, "ex2_dlogits", "dlogits = F.softmax(logits, -1) / Yb.shape[0]\ndlogits[range(Yb.shape[0]), Yb] -= 1",
     "your dlogits divides the softmax by logits.shape[0] but not the one_hot(target) taken from it"),
    (ATTENTION, "dout", "dout = torch.zeros_like(out) + dlast.unsqueeze(1)",
     "your dout gives every entry of out the gradient of the entries out[:, -1] it read"),
    (ATTENTION, "dmasked", "dmasked = att * (datt - (att * datt).sum(1, keepdim=True))",
     "your dmasked sums att * datt over dimension 1, where softmax normalizes over dimension 2"),
    # told by the factor the student wrote untransposed (an instructor trial's was told of a transpose never written)
    (ATTENTION, "dk", "dk = dscores @ q * head ** -0.5", "your dk multiplies by dscores where the shape rule needs its "
                                                         "transpose"),
    (ATTENTION, "dC", "dC = torch.zeros_like(C)\ndC.index_add_(0, Xb[:, -1], demb[:, -1])",
     "your dC adds back the gradients of the last position of each row of Xb alone (Xb[:, -1])"),
    ("relu-none", "dC", "dC = torch.zeros_like(C)\nfor i in range(Xb.shape[0]):\n    dC[Xb[i, 0]] += demb[i, 0]\n",
     "your dC adds back the gradients of the first position of each row of Xb alone (Xb[:, 0])"),
    # The blind set before it (held out then): C's rows by Xb flattened in the other order, a loop over the
    # examples whose indexed += loses a character repeated within a context, a layer norm's sums over the batch
    ("sigmoid-layernorm-residual", "dC", "dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.T.reshape(-1), "
                                         "demb.view(-1, C.shape[1]))",
     "your dC adds each use's gradient into the row of another entry of Xb: Xb flattened in one order"),
    ("sigmoid-layernorm-residual", "dC", "dC = torch.zeros_like(C)\nfor i in range(Xb.shape[0]):\n    "
                                         "dC[Xb[i]] += demb[i]\n",
     "a character that occurs twice in one row of Xb keeps the gradient of only one of those uses"),
    ("sigmoid-layernorm-residual", "ex3_dhpreln",
     "dlnraw = lngain * dhpreact\ndhpreln = lnvar_inv / hpreln.shape[1] * (hpreln.shape[1] * dlnraw - "
     "dlnraw.sum(0, keepdim=True) - lnraw * (dlnraw * lnraw).sum(0, keepdim=True))",
     "your dhpreln sums over dim 0 where the normalization's statistics run over dim 1"),
])
def test_blind_sets_answers_are_named(spec, grade_id, code, sentence):
    told = said(spec, grade_id, code)
    assert told is not None and told.startswith(sentence), told


@pytest.mark.parametrize("grade_id, code, read, skipped", [
    ("dmu", "dmu = dz + mu / X.shape[0]", "dz", "dkl_terms"),
    ("dlogvar", "dlogvar = 0.5 * (logvar.exp() - 1) / X.shape[0] + 0.5 * std * dstd", "dstd", "dkl_terms")])
def test_a_closed_form_for_one_use_names_the_gradient_it_skips_and_not_the_one_it_reads(grade_id, code, read,
                                                                                      skipped):
    """A second instructor trial's VAE: the KL's textbook gradient `mu / B` beside `dz`, right on the loss's own chain,
    was told it skipped dz and dkl_terms: the student looked for a slip in dz that was not there."""
    assert said("tests/exercises/vae.py:EXERCISE", grade_id, code, LOCAL) == (
        f"your {grade_id} reads {read} but not {skipped}: it computes the part flowing back through {skipped[1:]} "
        f"from this loss's own values, so with other values of {skipped} it gives a different result; compute that "
        f"part from {skipped} as the chain rule does")


@pytest.mark.parametrize("first, last", [("1:", ":-1"), (":-1", "1:")])
def test_slices_that_overlap_written_with_assignment_are_told_so(first, last):
    """A second instructor trial's ordinal regression: `dcum_pad[:, 1:] = dprobs` then `dcum_pad[:, :-1] = -dprobs`
    for `probs = cum_pad[:, 1:] - cum_pad[:, :-1]` was told only the rows it is wrong in."""
    sign = {"1:": "", ":-1": "-"}
    code = (f"dcum_pad = torch.zeros_like(cum_pad)\ndcum_pad[:, {first}] = {sign[first]}dprobs\n"
            f"dcum_pad[:, {last}] = {sign[last]}dprobs\n")
    assert said("tests/exercises/ordinal.py:EXERCISE", "dcum_pad", code) == (
        "your dcum_pad writes the parts flowing back through cum_pad[:, 1:] and cum_pad[:, :-1] with = where those "
        f"slices of cum_pad overlap, so the one written last (cum_pad[:, {last}]) replaces the other there: add "
        "them (+=)")


def test_two_slips_of_the_same_values_are_both_said_unless_the_code_says_which():
    # p read twice in one step, one read's part left out: the values equal the first read's local derivative
    # left out too (Y + (1 - Y) = 1), and the code, which multiplies by Y, cannot tell which: both are said.
    assert said("tests/exercises/multilabel_pt.py:EXERCISE", "dp", "dp = Y * dp_t", read=True) == (
        "your dp leaves out the local derivative Y of the product, or counts p once in p_t, which reads it twice: "
        "each read sends back its own term, and they add up: either gives these values")
    # Each use's gradient assigned with = equals the first use's branch left out: the code's two assignments say
    # which, and its one assignment the other.
    overwritten = "dhprebn = dbndiff.clone()\ndhprebn = 1.0 / n * torch.ones_like(hprebn) * dbnmeani"
    assert said("tanh-batchnorm", "dhprebn", overwritten, read=True) == (
        "your dhprebn assigns each use's gradient with = where they must add up (+=): only the last one is left")
    assert said("tanh-batchnorm", "dhprebn", "dhprebn = dbndiff.clone()", read=True).startswith(
        "your dhprebn misses the branch through bnmeani")
