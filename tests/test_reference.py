"""The reference solutions equal torch autograd, and so do the grader's oracle functions.

The oracle here is built in the test itself (conftest.autograd_pass: forward, .retain_grad() on
every intermediate, loss.backward(), read .grad), independent of grader/judge/oracle.py, which is tested
against it. Sizes are unlike the lecture's (hard-coded 32/27/3/10/64 would pass otherwise), Xb repeats
indices (an overwriting dC would pass otherwise), and the init is the lecture's nonzero one.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from grader.exercise import Sizes
from grader.exercises.makemore_mlp import EXERCISE
from grader.judge import oracle
from solutions import reference
from solutions.reference import forward
from solutions.reference import shapes as model_shapes

LECTURE = EXERCISE.lecture

NETWORK = EXERCISE.network
# What exercise 4's `cache` argument holds: the forward values the notebook's training loop builds.
EX4_CACHE = dict(a for a in EXERCISE.functions[0].arguments if isinstance(a, tuple))["cache"]

CONFIGS = (
    Sizes(n=5, vocab=7, block_size=2, n_embd=3, n_hidden=4),
    Sizes(n=13, vocab=11, block_size=4, n_embd=5, n_hidden=9),
    Sizes(n=8, vocab=5, block_size=5, n_embd=2, n_hidden=6),
    Sizes(n=40, vocab=23, block_size=2, n_embd=7, n_hidden=17),
    LECTURE,
)
DTYPES = (torch.float32, torch.float64)
# float64: only a different order of operations (~1e-17 measured). float32: fused dlogits differs by up
# to 2.8e-8 and dlogit_maxes/db1, zero in exact arithmetic, are pure ~1e-8 noise: an atol above that noise.
TOL = {torch.float64: dict(rtol=1e-9, atol=1e-12), torch.float32: dict(rtol=1e-4, atol=1e-6)}
# Every tensor that has a gradient: the parameters and every intermediate but the loss.
GRADIENT_SOURCES = NETWORK.parameters + tuple(name for name in NETWORK.intermediates if name != "loss")


@dataclass
class Case:
    sizes: Sizes
    dtype: torch.dtype
    params: dict
    Xb: torch.Tensor
    Yb: torch.Tensor
    values: dict  # the forward pass, detached
    true: dict  # "dX" -> d loss / d X from the retain_grad oracle

    @property
    def tol(self):
        return TOL[self.dtype]


def _id(sizes):
    if sizes == LECTURE:
        return "lecture"
    return f"n{sizes.n}-V{sizes.vocab}-B{sizes.block_size}-E{sizes.n_embd}-H{sizes.n_hidden}"


@pytest.fixture(scope="module", params=[(s, d) for s in CONFIGS for d in DTYPES],
                ids=[f"{_id(s)}-{str(d)[6:]}" for s in CONFIGS for d in DTYPES])
def case(request, make_batch, autograd_pass):
    sizes, dtype = request.param
    params, Xb, Yb = make_batch(sizes, dtype, seed=CONFIGS.index(sizes))
    graph = autograd_pass(params, Xb, Yb)
    true = {"d" + name: graph[name].grad.detach() for name in GRADIENT_SOURCES}
    values = {k: v.detach() for k, v in graph.items()}
    return Case(sizes, dtype, params, Xb, Yb, values, true)


def assert_same(got, want, tol, what):
    assert type(got) is torch.Tensor, f"{what}: {type(got)}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert torch.isfinite(got).all(), what
    assert torch.allclose(got, want, **tol), f"{what}: max abs diff {(got - want).abs().max().item():.3g}"


def _random(case, name, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(case.values[name].shape, generator=g, dtype=case.dtype)


# --- the configurations themselves -------------------------------------------------------------

def test_configurations_are_unlike_the_lecture():
    assert len(CONFIGS) >= 4
    lecture = (LECTURE.n, LECTURE.vocab, LECTURE.block_size, LECTURE.n_embd, LECTURE.n_hidden)
    assert lecture == (32, 27, 3, 10, 64)
    assert sum(s == LECTURE for s in CONFIGS) <= 1
    assert len(set(CONFIGS)) == len(CONFIGS)
    for s in CONFIGS:
        assert s.block_size >= 2
        assert s.n * s.block_size > s.vocab  # pigeonhole: Xb must repeat an index
        if s != LECTURE:
            assert all(a != b for a, b in zip((s.n, s.vocab, s.block_size, s.n_embd, s.n_hidden), lecture)), s


def test_batch_repeats_indices_and_has_the_lecture_shapes(case):
    assert case.Xb.unique().numel() < case.Xb.numel()
    assert case.Yb.unique().numel() > 1
    shapes = model_shapes(case.sizes)
    for name in GRADIENT_SOURCES + ("loss",):
        assert tuple(case.values[name].shape) == shapes[name], name
        assert case.values[name].dtype == case.dtype, name
    # The lecture's nonzero init, not the "usual" one: W2 = 0 alone hid 25 of 63 realistic mistakes.
    assert case.params["W2"].abs().min() > 0
    assert not torch.equal(case.params["bngain"], torch.ones_like(case.params["bngain"]))
    assert case.params["bnbias"].abs().min() > 0


def test_repeated_indices_matter_for_dC(case):
    """An overwriting dC (dC[Xb] = demb) is wrong on this batch, so the dC comparison means something."""
    demb = case.true["demb"]
    overwritten = torch.zeros_like(case.params["C"])
    overwritten[case.Xb] = demb
    assert not torch.allclose(overwritten, case.true["dC"], **case.tol)


# --- the reference answers against the retain_grad oracle --------------------------------------

def test_atomic_gradients_equal_autograd(case):
    got = reference.atomic_gradients(case.values)
    assert tuple(got) == EXERCISE.atomic
    assert len(EXERCISE.atomic) == 26
    for name in EXERCISE.atomic:
        assert_same(got[name], case.true[name], case.tol, name)


def test_fused_dlogits_equals_autograd(case):
    assert_same(reference.fused("ex2_dlogits", case.values), case.true["dlogits"], case.tol, "ex2_dlogits")


def test_fused_dhprebn_equals_autograd(case):
    got = reference.fused("ex3_dhprebn", case.values, dhpreact=case.true["dhpreact"])
    assert_same(got, case.true["dhprebn"], case.tol, "ex3_dhprebn")


def test_manual_backward_equals_autograd(case):
    """Given only the parameters and the cache the notebook's training loop builds."""
    params = {k: case.values[k] for k in NETWORK.parameters}
    cache = {k: case.values[k] for k in EX4_CACHE}
    got = reference.manual_backward(params, cache, case.Yb)
    assert set(got) == set(NETWORK.parameters)
    for name in NETWORK.parameters:
        assert_same(got[name], case.true["d" + name], case.tol, "ex4 d" + name)


@pytest.mark.parametrize("grade_id", EXERCISE.atomic)
def test_each_atomic_answer_follows_the_chain_rule_from_random_upstream(case, grade_id):
    """One answer cell with its own upstream gradients replaced by random ones equals one local
    backward step: catches what the true chain hides (a dropped max branch, db1 = 0, ...)."""
    answer = EXERCISE.by_grade_id[grade_id]
    ns = reference.namespace(case.values)
    ns.update({g: case.true[g] for g in answer.upstream})
    random_upstream = {g: _random(case, g[1:], 100 + i) for i, g in enumerate(answer.local_upstream)}
    ns.update(random_upstream)
    got = reference.run_cell(grade_id, ns)[answer.variable]
    if random_upstream:
        want = oracle.local_vjp(NETWORK, case.values, answer.source, {g[1:]: r for g, r in random_upstream.items()})
    else:  # dlogprobs: its only consumer is the loss
        want = case.true[grade_id]
    assert_same(got, want, case.tol, grade_id)


def test_reference_leaves_the_forward_pass_untouched(case):
    before = {k: v.clone() for k, v in case.values.items()}
    reference.atomic_gradients(case.values)
    reference.fused("ex2_dlogits", case.values)
    reference.fused("ex3_dhprebn", case.values, dhpreact=case.true["dhpreact"])
    reference.manual_backward({k: case.values[k] for k in NETWORK.parameters},
                              {k: case.values[k] for k in EX4_CACHE}, case.Yb)
    for k, v in before.items():
        assert torch.equal(case.values[k], v), k


# --- grader/judge/oracle.py against the retain_grad oracle -------------------------------------------

def test_chain_gradients_equal_the_retain_grad_oracle(case):
    got = oracle.chain_gradients(NETWORK, case.params, {"Xb": case.Xb, "Yb": case.Yb})
    assert set(got) == {"d" + name for name in GRADIENT_SOURCES}
    for name, want in case.true.items():
        assert_same(got[name], want, case.tol, name)
        assert not got[name].requires_grad, name


def _true_upstream(case, name):
    """Each direct consumer of `name` with its true gradient (the loss receives 1)."""
    return {c: (torch.ones((), dtype=case.dtype) if c == "loss" else case.true["d" + c])
            for c in NETWORK.consumers(name)}


@pytest.mark.parametrize("source", GRADIENT_SOURCES)
def test_local_vjp_from_direct_consumers_reproduces_the_true_gradient(case, source):
    upstream = _true_upstream(case, source)
    assert upstream, source
    assert_same(oracle.local_vjp(NETWORK, case.values, source, upstream), case.true["d" + source], case.tol, source)


def test_local_vjp_combines_both_branches_of_tensors_used_twice(case):
    assert set(_true_upstream(case, "counts")) == {"probs", "counts_sum"}
    assert set(_true_upstream(case, "logits")) == {"norm_logits", "logit_maxes"}
    for source in ("counts", "logits", "bndiff", "hprebn"):
        upstream = _true_upstream(case, source)
        assert len(upstream) == 2, source
        assert_same(oracle.local_vjp(NETWORK, case.values, source, upstream), case.true["d" + source], case.tol, source)
        # one branch alone is not the true gradient
        first = dict([next(iter(upstream.items()))])
        alone = oracle.local_vjp(NETWORK, case.values, source, first)
        assert not torch.allclose(alone, case.true["d" + source], **case.tol)


def test_local_vjp_semantics_with_random_upstream(case):
    """One backward step, every other input held at its forward value: the hand formulas."""
    v = case.values
    # counts -> probs = counts * counts_sum_inv, counts_sum = counts.sum(1, keepdim=True)
    R1, R2 = _random(case, "probs", 1), _random(case, "counts_sum", 2)
    got = oracle.local_vjp(NETWORK, v, "counts", {"probs": R1, "counts_sum": R2})
    assert_same(got, v["counts_sum_inv"] * R1 + R2.expand_as(R1), case.tol, "dcounts")
    via_probs = oracle.local_vjp(NETWORK, v, "counts", {"probs": R1})
    assert_same(via_probs, v["counts_sum_inv"] * R1, case.tol, "dcounts via probs")
    # logits -> norm_logits = logits - logit_maxes, logit_maxes = max over the row (routes to the argmax)
    R1, R2 = _random(case, "norm_logits", 3), _random(case, "logit_maxes", 4)
    got = oracle.local_vjp(NETWORK, v, "logits", {"norm_logits": R1, "logit_maxes": R2})
    onehot = F.one_hot(v["logits"].argmax(1), v["logits"].shape[1]).to(case.dtype)
    assert_same(got, R1 + onehot * R2, case.tol, "dlogits")
    # hprebn -> bndiff = hprebn - bnmeani, bnmeani = 1/n * column sum
    R1, R2 = _random(case, "bndiff", 5), _random(case, "bnmeani", 6)
    got = oracle.local_vjp(NETWORK, v, "hprebn", {"bndiff": R1, "bnmeani": R2})
    assert_same(got, R1 + R2.expand_as(R1) / case.sizes.n, case.tol, "dhprebn")
    # bndiff -> bnraw = bndiff * bnvar_inv, bndiff2 = bndiff**2
    R1, R2 = _random(case, "bnraw", 7), _random(case, "bndiff2", 8)
    got = oracle.local_vjp(NETWORK, v, "bndiff", {"bnraw": R1, "bndiff2": R2})
    assert_same(got, v["bnvar_inv"] * R1 + 2 * v["bndiff"] * R2, case.tol, "dbndiff")
    # W2, h, b2 -> logits = h @ W2 + b2
    R = _random(case, "logits", 9)
    assert_same(oracle.local_vjp(NETWORK, v, "W2", {"logits": R}), v["h"].T @ R, case.tol, "dW2")
    assert_same(oracle.local_vjp(NETWORK, v, "h", {"logits": R}), R @ v["W2"].T, case.tol, "dh")
    assert_same(oracle.local_vjp(NETWORK, v, "b2", {"logits": R}), R.sum(0), case.tol, "db2")
    # C -> emb = C[Xb]: a scatter-add over the repeated indices
    R = _random(case, "emb", 10)
    want = torch.zeros_like(v["C"]).index_add_(0, case.Xb.reshape(-1), R.reshape(-1, case.sizes.n_embd))
    assert_same(oracle.local_vjp(NETWORK, v, "C", {"emb": R}), want, case.tol, "dC")


def test_local_vjp_rejects_a_step_that_does_not_read_the_source(case):
    with pytest.raises(ValueError, match="hprebn"):
        oracle.local_vjp(NETWORK, case.values, "logits", {"hprebn": case.true["dhprebn"]})
    with pytest.raises(ValueError, match="probs"):  # probs reads counts_sum_inv, not counts_sum
        oracle.local_vjp(NETWORK, case.values, "counts_sum", {"probs": case.true["dprobs"]})


def test_block_vjp_through_the_batch_norm_block(case):
    got = oracle.block_vjp(NETWORK, case.values, "hprebn", "hpreact", case.true["dhpreact"])
    assert_same(got, case.true["dhprebn"], case.tol, "dhprebn")
    # with a random upstream it is the fused formula of exercise 3
    R = _random(case, "hpreact", 11)
    got = oracle.block_vjp(NETWORK, case.values, "hprebn", "hpreact", R)
    assert_same(got, reference.fused("ex3_dhprebn", case.values, dhpreact=R), case.tol, "dhprebn (random)")


def test_block_vjp_to_the_loss_is_the_true_gradient(case):
    one = torch.ones((), dtype=case.dtype)
    for source in ("logits", "h", "hprebn", "C"):
        got = oracle.block_vjp(NETWORK, case.values, source, "loss", one)
        assert_same(got, case.true["d" + source], case.tol, source)


def test_block_vjp_rejects_a_sink_that_does_not_depend_on_the_source(case):
    with pytest.raises(ValueError, match="hprebn"):
        oracle.block_vjp(NETWORK, case.values, "logits", "hprebn", case.true["dhprebn"])


def test_oracle_does_not_modify_values(case):
    before = {k: v.clone() for k, v in case.values.items()}
    oracle.block_vjp(NETWORK, case.values, "hprebn", "hpreact", case.true["dhpreact"])
    oracle.local_vjp(NETWORK, case.values, "counts", _true_upstream(case, "counts"))
    for k, v in before.items():
        assert torch.equal(case.values[k], v), k
        assert not case.values[k].requires_grad, k


# --- exercise 4: training with the manual backward only ----------------------------------------

def test_train_step_equals_an_autograd_sgd_step(case):
    lr = 0.1
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in case.params.items()}
    loss = forward(leaves, case.Xb, case.Yb)["loss"]
    loss.backward()
    want = {k: (p - lr * p.grad).detach() for k, p in leaves.items()}

    params = {k: v.clone() for k, v in case.params.items()}
    got_loss = reference.train_step(params, case.Xb, case.Yb, lr)
    assert torch.allclose(got_loss, loss.detach(), **case.tol)
    for name in NETWORK.parameters:
        assert_same(params[name], want[name], case.tol, name)
        if name != "b1":  # db1 is zero in exact arithmetic: b1 does not move
            assert not torch.allclose(params[name], case.params[name], **case.tol), f"{name} did not move"


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("sizes", CONFIGS[:3], ids=_id)
def test_a_few_dozen_steps_decrease_the_loss(make_batch, sizes, dtype):
    params, Xb, Yb = make_batch(sizes, dtype, seed=11)
    initial = forward(params, Xb, Yb)["loss"].item()
    losses = [reference.train_step(params, Xb, Yb, lr=0.1).item() for _ in range(30)]
    assert losses[0] == pytest.approx(initial, rel=1e-6)
    final = forward(params, Xb, Yb)["loss"].item()
    assert final < losses[-1] < 0.9 * initial


# --- the answer cells ----------------------------------------------------------------------------

def test_answer_cells_cover_exactly_the_grade_ids():
    """One cell per grade id of exercises 1-3, and one "ex4_backward" cell for exercise 4's seven."""
    ex4 = {a.grade_id for a in EXERCISE.answers if a.part == 4}
    assert ex4 == {"ex4_d" + p for p in NETWORK.parameters}
    assert EXERCISE.functions[0].cell == "ex4_backward"
    expected = (set(EXERCISE.grade_ids) - ex4 - {"ex4_training"}) | {"ex4_backward"}
    assert len(expected) == 26 + 2 + 1
    assert set(reference.cells()) == expected == set(EXERCISE.answer_cells)
    assert all(body.strip() for body in reference.cells().values())


def test_the_network_answers_what_a_tensor_reads_and_what_reads_it():
    # Every walk over the steps (a fused block, the parameters a gradient spoils, what a notebook
    # recomputes) asks these two questions of the network.
    assert NETWORK.descendants("bnvar") == ("bnvar_inv", "bnraw", "hpreact", "h", "logits", "logit_maxes",
                                            "norm_logits", "counts", "counts_sum", "counts_sum_inv", "probs",
                                            "logprobs", "loss")
    assert NETWORK.descendants("bngain", "bnbias")[:2] == ("hpreact", "h")
    assert NETWORK.ancestors("bnvar") == {"bndiff2", "bndiff", "hprebn", "bnmeani", "embcat", "emb", "C", "Xb", "W1",
                                          "b1", "n"}
    # A held value is read as given: what a function's cache holds is not recomputed from its inputs.
    assert NETWORK.ancestors("bnraw", held={"bndiff", "bnvar_inv"}) == {"bndiff", "bnvar_inv"}
    assert NETWORK.upstream_of("bnraw") == ("C", "W1", "b1")
