"""Every makemore variant is proven without the grader: its reference answers (derived by the rule table from
its forward lines, as its notebook holds them) equal autograd (the oracle differentiating the variant's own
network) on configurations drawn from its ranges, in float64 and float32; each atomic answer passes its
one-step LOCAL check; the reveal order never hands an answer its own gradient; every statement is explained;
the static check accepts the answers; and every mutant of its reference answers (the rule table's slips)
loses credit on its own tensor. The lecture's variant is the lecture's exercise, answer for answer.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import random
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

from grader import exercise as exercises
from grader.authoring import skeleton
from grader.course import choice
from grader.course import load as load_course
from grader.exercise import ATOMIC, FUNCTION, FUSED
from grader.exercises.makemore_mlp import EXERCISE, variants
from grader.exercises.makemore_mlp.mistakes import EPS
from grader.judge import oracle
from grader.sandbox import static_check
from grader.student import solution
from helpers.variant_courses import submissions_of

EX4 = EXERCISE.functions[0]

torch.set_num_threads(1)

NAMES = variants.NAMES
TOL = {torch.float64: dict(rtol=1e-9, atol=1e-12), torch.float32: dict(rtol=1e-4, atol=1e-6)}
# What the grader accepts (course.yml's default tolerance): a mutant must fall outside it.
GRADER_TOL = dict(rtol=1e-5, atol=1e-8)
CONFIGURATIONS = 3


@functools.cache
def _cells(name: str) -> dict[str, str]:
    """The variant's reference answer cells, as its notebook holds them."""
    return skeleton.references(exercises.load(f"makemore-mlp/{name}"))


@functools.cache
def _mutants(name: str) -> tuple[skeleton.Mutant, ...]:
    return skeleton.mutants(exercises.load(f"makemore-mlp/{name}"))


def _run(source: str, ns: dict, label: str) -> dict:
    exec(compile(source, f"<answer {label}>", "exec"), ns)  # noqa: S102
    return ns


def structural_zeros(name: str) -> frozenset[str]:
    """Gradients that are exactly zero in exact arithmetic, whatever the batch: softmax ignores a shift of
    its row (dlogit_maxes), and batch norm removes b1 with each column's mean (db1)."""
    return frozenset({"dlogit_maxes", *(("db1",) if variants.parse(name).norm.name == "batchnorm" else ())})


@dataclass
class Case:
    exercise: exercises.Exercise
    sizes: exercises.Sizes
    dtype: torch.dtype
    values: dict  # the forward pass, sizes included
    true: dict  # "dX" -> d loss / d X, from the oracle

    @property
    def tol(self):
        return TOL[self.dtype]


def _sizes(exercise, index: int, rng: random.Random) -> tuple[exercises.Sizes, dict]:
    """Sizes drawn from the exercise's ranges that its hidden configuration `index` accepts, and the init
    options that configuration uses (the last one: a tiny variance where there is a norm)."""
    while True:
        sizes = exercises.Sizes(**{k: rng.randrange(*r) for k, r in exercise.ranges.items()})
        options = exercise.hidden(index, CONFIGURATIONS, sizes)
        if options is not None:
            return sizes, options


@functools.cache
def cases(name: str) -> tuple[Case, ...]:
    exercise = exercises.load(f"makemore-mlp/{name}")
    rng = random.Random(f"test_variants {name}")
    found = []
    for index in range(CONFIGURATIONS):
        sizes, options = _sizes(exercise, index, rng)
        for dtype in (torch.float64, torch.float32):
            g = torch.Generator().manual_seed(index)
            # The grader computes in float64; float32 with a variance near eps is only rounding noise.
            params = exercise.init(sizes, g, dtype, **(options if dtype == torch.float64 else {}))
            data = exercise.batch(sizes, g)
            values = {k: v.detach() if isinstance(v, torch.Tensor) else v
                      for k, v in exercise.network.forward(params, data).items()}
            true = oracle.chain_gradients(exercise.network, params, data)
            found.append(Case(exercise, sizes, dtype, values, true))
    return tuple(found)


def _namespace(case: Case, **gradients) -> dict:
    return {**case.values, "torch": torch, "F": torch.nn.functional, **gradients}


def _same(got, want, tol) -> bool:
    return (isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype
            and bool(torch.isfinite(got).all()) and torch.allclose(got, want, **tol))


def _gap(got, want) -> str:
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return f"got {type(got).__name__} {tuple(getattr(got, 'shape', ()))}, want {tuple(want.shape)}"
    return f"max abs diff {(got - want).abs().max().item():.3g}"


def _function_result(case: Case, source: str) -> dict:
    function = case.exercise.functions[0]
    ns = _run(source, {"torch": torch, "F": torch.nn.functional}, function.cell)
    return ns[function.name](*function.call_arguments(case.values))


# --- the variants as exercises -----------------------------------------------------------------

def test_the_variants_are_every_activation_norm_and_structure():
    assert len(NAMES) == len(set(NAMES)) == 4 * 3 * 2
    assert {"tanh-batchnorm", "relu-layernorm", "gelu-none-residual", "sigmoid-batchnorm-residual"} <= set(NAMES)


def test_the_lecture_variant_is_the_lecture_exercise():
    assert exercises.load("makemore-mlp/tanh-batchnorm") is EXERCISE
    built = variants.build("tanh-batchnorm")
    assert built.network == EXERCISE.network and built.network.source() == EXERCISE.network.source()
    assert built.answers == EXERCISE.answers and built.grade_ids == EXERCISE.grade_ids
    assert built.functions == EXERCISE.functions
    assert built.training.grade_id == EXERCISE.training.grade_id
    assert built.training.function == EXERCISE.training.function
    assert (built.lecture, dict(built.ranges)) == (EXERCISE.lecture, dict(EXERCISE.ranges))
    for sizes in (EXERCISE.lecture, exercises.Sizes(n=9, vocab=13, block_size=4, n_embd=5, n_hidden=20)):
        for options in ({}, {"W1": 3e-3}):
            ours, theirs = (e.init(sizes, torch.Generator().manual_seed(7), torch.float32, **options)
                            for e in (built, EXERCISE))
            assert list(ours) == list(theirs) and all(torch.equal(ours[k], theirs[k]) for k in theirs)
        for batch, args in (("batch", ()), ("training", (3,))):
            ours, theirs = (getattr(e, batch) if batch == "batch" else e.training.batches
                            for e in (built, EXERCISE))
            ours, theirs = (draw(sizes, torch.Generator().manual_seed(7), *args) for draw in (ours, theirs))
            assert list(ours) == list(theirs) and all(torch.equal(ours[k], theirs[k]) for k in theirs)
        for index in range(4):
            assert built.hidden(index, 4, sizes) == EXERCISE.hidden(index, 4, sizes)


@pytest.mark.parametrize("name", NAMES)
def test_each_variant_loads_by_name_with_an_answer_per_gradient(name):
    exercise = exercises.load(f"makemore-mlp/{name}")
    net = exercise.network
    assert exercise.name == ("makemore-mlp" if name == variants.LECTURE_VARIANT else f"makemore-mlp/{name}")
    assert exercises.load(exercise.name) is exercise  # a child process loads it again by its name
    # One atomic answer per parameter and intermediate, grade id "d" + its name, from dlogprobs to dC.
    assert sorted(exercise.atomic) == sorted("d" + k for k in (*net.parameters, *net.intermediates) if k != net.loss)
    assert exercise.atomic[0] == "dlogprobs" and exercise.atomic[-1] == "dC"
    assert list(_cells(name)) == list(exercise.answer_cells)
    fused = [a.grade_id for a in exercise.answers if a.kind == FUSED]
    assert fused == ["ex2_dlogits", *((f"ex3_d{variants.parse(name).norm.pre}",) if "-none" not in name else ())]


def test_an_unknown_variant_is_one_line_naming_the_known_ones():
    with pytest.raises(exercises.ExerciseError) as raised:
        exercises.load("makemore-mlp/swish-batchnorm")
    assert "\n" not in str(raised.value) and "relu" in str(raised.value) and "layernorm" in str(raised.value)


@pytest.mark.parametrize("name", NAMES)
def test_no_gradient_hides_behind_the_init(name):
    """Nonzero parameters, gains unlike 1, and every true gradient nonzero but those that are zero for
    every batch (a shift softmax and batch norm ignore)."""
    for case in cases(name):
        for p in case.exercise.network.parameters:
            assert case.values[p].abs().min() > 0, p
            if p.endswith("gain"):
                assert (case.values[p] != 1).all(), p
        if case.dtype == torch.float64:  # float32's rounding noise (~1e-8) is no zero to test
            zeros = structural_zeros(name)
            for g, value in case.true.items():
                assert (value.abs().max().item() < 1e-10) == (g in zeros), (g, case.sizes)


@pytest.mark.parametrize("name", NAMES)
def test_the_last_hidden_configuration_brings_the_variance_near_eps(name):
    """Where a dropped eps could hide (a normalization), the last configuration makes it show: its variance
    is within a few hundred eps (layer norm scales b1 too, whose spread across features would keep each
    row's variance far above eps); the others' is far above it. Without a norm, nothing is scaled."""
    exercise = exercises.load(f"makemore-mlp/{name}")
    norm = variants.parse(name).norm
    sizes = exercise.lecture
    assert [exercise.hidden(i, CONFIGURATIONS, sizes) == {} for i in range(1, CONFIGURATIONS)] == \
        [True] * (CONFIGURATIONS - 2) + [not norm.parameters]
    if norm.parameters:
        variance = norm.cache[2]  # bnvar, lnvar
        first, last = cases(name)[0], cases(name)[-2]
        assert last.values[variance].max() < 300 * EPS < first.values[variance].min() / 100, name


@pytest.mark.parametrize("name", NAMES)
def test_reveal_order_never_gives_an_answer_its_own_gradient(name):
    exercise = exercises.load(f"makemore-mlp/{name}")
    schedule, revealed = exercise.chain_schedule(), set()
    assert sorted(schedule) == sorted(a.grade_id for a in exercise.answers)
    for grade_id in schedule:
        answer = exercise.by_grade_id[grade_id]
        assert "d" + answer.source not in revealed, grade_id
        assert set(answer.upstream) <= revealed, grade_id
        if answer.kind == ATOMIC:
            revealed.add(grade_id)


# --- the reference answers against the oracle --------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_reference_answers_equal_autograd(name):
    for case in cases(name):
        ns = _namespace(case)
        for g in case.exercise.atomic:
            _run(_cells(name)[g], ns, g)
        got = {g: ns[g] for g in case.exercise.atomic}
        for g in case.exercise.atomic:
            assert _same(got[g], case.true[g], case.tol), (g, case.sizes, case.dtype, _gap(got[g], case.true[g]))
        for answer in case.exercise.answers:
            if answer.kind == FUSED:
                ns = _run(_cells(name)[answer.grade_id],
                                 _namespace(case, **{u: case.true[u] for u in answer.upstream}), answer.grade_id)
                want = case.true["d" + answer.source]
                assert _same(ns[answer.variable], want, case.tol), (answer.grade_id, _gap(ns[answer.variable], want))
        returned = _function_result(case, _cells(name)[EX4.cell])
        for p in case.exercise.network.parameters:
            assert _same(returned[p], case.true["d" + p], case.tol), (p, case.sizes, case.dtype)


@pytest.mark.parametrize("name", NAMES)
def test_atomic_answers_pass_their_local_check(name):
    """With random upstream gradients, each cell computes exactly its one step's vector-Jacobian product."""
    for case in cases(name)[::2]:  # float64, every configuration
        g = torch.Generator().manual_seed(1)
        for answer in case.exercise.answers:
            if answer.kind != ATOMIC or not answer.local_upstream:
                continue
            random_up = {u: torch.randn(case.values[u[1:]].shape, generator=g, dtype=case.dtype)
                         for u in answer.local_upstream}
            gradients = {**{u: case.true[u] for u in answer.upstream}, **random_up}
            got = _run(_cells(name)[answer.grade_id], _namespace(case, **gradients),
                              answer.grade_id)[answer.variable]
            want = oracle.local_vjp(case.exercise.network, case.values, answer.source,
                                    {u[1:]: v for u, v in random_up.items()})
            assert _same(got, want, case.tol), (answer.grade_id, _gap(got, want))


def test_manual_backward_trains_like_autograd():
    """Exercise 4's whole-run check, in small: the course's default 50 SGD steps at learning rate 0.1 with
    each variant's manual_backward follow the same steps with autograd's gradients, and the loss falls."""
    for name in NAMES:
        exercise = exercises.load(f"makemore-mlp/{name}")
        function = exercise.functions[0]
        manual = _run(_cells(name)[EX4.cell], {"torch": torch, "F": torch.nn.functional},
                             function.cell)[function.name]
        g = torch.Generator().manual_seed(3)
        params = exercise.init(exercise.lecture, g)
        data = exercise.batch(exercise.lecture, g)
        twin = {k: v.clone() for k, v in params.items()}
        losses = []
        for _ in range(50):
            values = exercise.network.forward(params, data)
            losses.append(values[exercise.network.loss].item())
            grads = manual(*function.call_arguments(values))
            true = oracle.chain_gradients(exercise.network, twin, data)
            for p in params:
                params[p] -= 0.1 * grads[p]
                twin[p] -= 0.1 * true["d" + p]
        assert all(torch.allclose(params[p], twin[p], rtol=1e-9, atol=1e-12) for p in params), name
        assert losses[-1] < 0.9 * losses[0], (name, losses[0], losses[-1])


# --- the reference answers as text ---------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_every_reference_statement_has_its_explanation(name):
    """Each statement of an atomic or fused answer under one or two lines that explain it (a function's body
    is the same gradients' text, after the lines that unpack its arguments)."""
    exercise = exercises.load(f"makemore-mlp/{name}")
    for answer in (a for a in exercise.answers if a.kind != FUNCTION):
        steps = solution.steps(_cells(name)[answer.cell_id])
        assert steps, answer.cell_id
        for step in steps:
            assert 1 <= len(step.explanation) <= 3, (name, answer.cell_id, step.code)
            assert len(" ".join(step.explanation).split()) >= 6, (name, answer.cell_id, step.explanation)
            assert len(step.statements) <= 2, (name, answer.cell_id, step.code)


def test_a_fused_block_that_is_one_operation_gets_its_short_formula():
    """Exercise 2's block (the lecture's eight lines from logits to the loss) computes F.cross_entropy, so its
    reference is the rule table's formula for that one line, not the chain of exercise 1's steps; batch or
    layer norm's block gets its closed form (grader/derive/simplify.py), one expression ending in its
    gradient."""
    for name in ("relu-layernorm", "gelu-batchnorm-residual"):
        cells = _cells(name)
        code = [line for line in cells["ex2_dlogits"].splitlines() if not line.startswith("#")]
        assert code == ["dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, num_classes=logits.shape[1])) / n"], name
        pre = variants.parse(name).norm.pre
        norm = [line for line in cells[f"ex3_d{pre}"].splitlines() if not line.startswith("#")]
        assert norm[-1].startswith(f"d{pre} = ") and len(norm) <= 2 and "dlogits" not in cells[f"ex3_d{pre}"], norm
        assert "dlogprobs" not in cells["ex2_dlogits"]
    # A loss that is the cross-entropy's sum, not its mean, is the summed call's formula: softmax minus the
    # one-hot, not divided by n (it was the log-softmax's three lines of chain).
    exercise = exercises.load("makemore-mlp/relu-none")
    network = exercise.network
    text = network.source().replace("loss = -logprobs[range(n), Yb].mean()", "loss = -logprobs[range(n), Yb].sum()")
    other = exercises.Network.parse(text, parameters=network.parameters, data=network.data, sizes=network.sizes)
    changed = dataclasses.replace(exercise, network=other)
    found = skeleton.derived(changed)
    assert found.closed["ex2_dlogits"].what == "a summed cross-entropy"
    cell = skeleton.references(changed, found)["ex2_dlogits"]
    assert [line for line in cell.splitlines() if not line.startswith("#")] == \
        ["dlogits = F.softmax(logits, 1) - F.one_hot(Yb, num_classes=logits.shape[1])"], cell


def test_each_variant_explains_its_own_derivatives():
    """The teaching text adapts: no variant's answers talk about a piece it does not have."""
    for name in NAMES:
        text = "".join(_cells(name).values())
        variant = variants.parse(name)
        assert ("tanh" in text) == (variant.activation.name in ("tanh", "gelu")), name
        assert ("(n - 1)" in text) == (variant.norm.name == "batchnorm"), name
        assert ("ReLU passes the gradient" in text) == (variant.activation.name == "relu"), name
        assert ("d sigmoid(x)/dx" in text) == (variant.activation.name == "sigmoid"), name
        assert ("lnvar_inv (n, 1) was broadcast over dim 1" in text) == (variant.norm.name == "layernorm"), name
        assert ("h is used twice" in text) == variant.residual, name


@pytest.mark.parametrize("name", NAMES)
def test_the_static_check_accepts_every_reference_answer(name):
    for cell, source in _cells(name).items():
        assert static_check.check(source) is None, (name, cell, static_check.check(source))


# Natural answers to the variants' new steps, as students write them: relu, heaviside and greater by name,
# torch.pi for GELU's constant, besides comparisons, where, masks and the tensor methods.
@pytest.mark.parametrize("source", [
    "dhpreact = (hpreact > 0) * dh",
    "dhpreact = (hpreact > 0).float() * dh",
    "dhpreact = (hpreact > 0).to(dh.dtype) * dh",
    "dhpreact = hpreact.gt(0) * dh",
    "dhpreact = torch.where(hpreact > 0, dh, torch.zeros_like(dh))",
    "dhpreact = torch.where(h > 0, dh, 0.0)",
    "dhpreact = dh.masked_fill(hpreact <= 0, 0.0)",
    "dhpreact = dh.clone()\ndhpreact[hpreact <= 0] = 0",
    "dhpreact = F.relu(hpreact).sign() * dh",
    "dhpreact = torch.clamp(hpreact, min=0).sign() * dh",
    "dhpreact = torch.relu(hpreact).sign() * dh",
    "dhpreact = torch.heaviside(hpreact, torch.zeros_like(hpreact)) * dh",
    "dhpreact = hpreact.heaviside(torch.zeros_like(hpreact)) * dh",
    "dhpreact = torch.greater(hpreact, 0) * dh",
    "dhpreact = torch.sigmoid(hpreact) * (1 - torch.sigmoid(hpreact)) * dh",
    "dhpreact = F.sigmoid(hpreact) * (1 - F.sigmoid(hpreact)) * dh",
    "dhcube = math.sqrt(2 / math.pi) * 0.044715 * dhinner",
    "dhcube = (2 / torch.pi) ** 0.5 * 0.044715 * dhinner",
    "dhinner = (1 - torch.tanh(hinner) ** 2) * dhtanh",
    "dhinner = torch.cosh(hinner) ** -2 * dhtanh",
    "dlnvar_inv = (lndiff * dlnraw).sum(dim=-1, keepdim=True)",
    "dlndiff2 = dlnvar.expand_as(lndiff2) / lndiff2.size(1)",
    "dr = dhres.clone()",
    "dh = dhres + drpreact @ W3.t()",
    "dW3 = torch.einsum('ni,nj->ij', h, drpreact)",
])
def test_the_static_check_accepts_natural_variant_answers(source):
    """Answers a student writes for a variant's new steps: ReLU's mask, sigmoid's and GELU's derivatives,
    layer norm's sums over features, the residual's two paths."""
    assert static_check.check(source) is None, static_check.check(source)


# --- the mutation corpus ---------------------------------------------------------------------------

def _caught(mutant: skeleton.Mutant, cases_: tuple[Case, ...]) -> tuple[bool, bool]:
    """(caught on the chain, caught by the LOCAL check): does the mutated cell, given the true upstream
    gradients (or random ones, where the grader draws them), answer outside the grader's tolerance?"""
    exercise = cases_[0].exercise
    (answer,) = (exercise.by_grade_id[g] for g in mutant.grade_ids)
    source = mutant.cells[mutant.cell]
    chain = local = False
    for case in cases_:
        if answer.kind == FUNCTION:
            try:
                returned = _function_result(case, source)
                chain |= not _same(returned.get(answer.variable), case.true["d" + answer.source], GRADER_TOL)
            except Exception:  # noqa: BLE001 - a mutant that raises loses credit: that is what is asked
                chain = True
            continue
        try:
            ns = _run(source, _namespace(case, **{u: case.true[u] for u in answer.upstream}), mutant.cell)
            chain |= not _same(ns.get(answer.variable), case.true["d" + answer.source], GRADER_TOL)
        except Exception:  # noqa: BLE001
            chain = True
        if answer.kind == ATOMIC and answer.local_upstream:
            g = torch.Generator().manual_seed(2)
            random_up = {u: torch.randn(case.values[u[1:]].shape, generator=g, dtype=case.dtype)
                         for u in answer.local_upstream}
            want = oracle.local_vjp(exercise.network, case.values, answer.source,
                                    {u[1:]: v for u, v in random_up.items()})
            try:
                ns = _run(source, _namespace(case, **{**{u: case.true[u] for u in answer.upstream}, **random_up}),
                          mutant.cell)
                local |= not _same(ns.get(answer.variable), want, GRADER_TOL)
            except Exception:  # noqa: BLE001
                local = True
    return chain, local


@pytest.mark.parametrize("name", NAMES)
def test_every_mutant_loses_credit_on_its_own_tensor(name):
    """Each mutant of the reference answers is wrong where the grader looks: on the chain (true upstream,
    so no other cell's tensor can change) or, for an atomic cell, in its LOCAL check. Only a mistake in a
    gradient that is zero for every batch (or in a term it scales) escapes the chain, and the LOCAL
    check's random upstream catches it."""
    float64 = cases(name)[::2]
    mutants = _mutants(name)
    assert len(mutants) >= 3 * len(_cells(name))
    assert {"sign", "broadcast-no-sum", "broadcast-wrong-dim", "missed-branch", "matmul-order", "mean-count"} <= \
        {m.slip.name for m in mutants}
    assert {m.cell for m in mutants} == set(_cells(name)), "every answer cell has its mutants"
    zeros = structural_zeros(name)
    for mutant in mutants:
        chain, local = _caught(mutant, float64)
        assert chain or local, (mutant.cell, mutant.slip.name, mutant.cells[mutant.cell])
        if not chain:  # the mistake is in a gradient that is zero for every batch, or in a term it scales
            assert mutant.slip.gradient in zeros or f"d{mutant.slip.consumer}" in zeros, mutant


def test_a_mutants_submission_is_the_reference_but_its_cell():
    mutants = _mutants("relu-layernorm")
    mutant = next(m for m in mutants if m.cell == "dlnvar_inv" and m.slip.name == "broadcast-wrong-dim")
    reference_cells = _cells("relu-layernorm")
    assert list(mutant.cells) == list(reference_cells)
    assert [c for c in mutant.cells if mutant.cells[c] != reference_cells[c]] == ["dlnvar_inv"]
    assert ".sum(0, keepdim=True)" in mutant.cells["dlnvar_inv"]
    assert mutant.grade_ids == ("dlnvar_inv",)
    parameters = exercises.load("makemore-mlp/relu-layernorm").network.parameters
    ex4 = {m.grade_ids for m in mutants if m.cell == EX4.cell}
    assert ex4 == {("ex4_d" + p,) for p in parameters}, "a slip in every parameter's gradient"


# --- choosing a variant ------------------------------------------------------------------------------

def test_a_salt_always_draws_the_same_variant_and_salts_spread_over_all_but_the_lecture():
    assert variants.from_salt("term 2027 spring") == variants.from_salt("term 2027 spring")
    drawn = [variants.from_salt(f"salt {i}") for i in range(400)]
    assert set(drawn) == set(NAMES) - {variants.LECTURE_VARIANT}
    assert max(drawn.count(n) for n in set(drawn)) < 3 * len(drawn) / len(set(drawn))


def test_course_settings_name_a_variant_or_draw_one_from_the_salt():
    assert choice.spec("makemore-mlp", "s") == "makemore-mlp"
    assert choice.spec("makemore-mlp/gelu-none", "s") == "makemore-mlp/gelu-none"
    assert choice.spec({"name": "makemore-mlp", "variant": "relu-layernorm"}, "s") == "makemore-mlp/relu-layernorm"
    one, other = (({"name": "makemore-mlp", "variant": "from-salt"}, salt) for salt in ("salt A", "salt B"))
    assert choice.spec(*one) == f"makemore-mlp/{variants.from_salt('salt A')}"
    assert choice.spec(*one) != choice.spec(*other)
    assert exercises.load(choice.spec(*one)).name == choice.spec(*one)


@pytest.mark.parametrize("setting, said", [
    ({"name": "makemore-mlp"}, "variant"),
    ({"name": "makemore-mlp", "variant": "relu-batchnorm", "seed": 1}, "unknown: seed"),
    ({"name": "makemore-mlp", "variant": "swish-batchnorm"}, "unknown variant 'swish-batchnorm'"),
    ({"name": "tiny", "variant": "from-salt"}, "has no variants"),
    (["makemore-mlp"], "not list"),
])
def test_a_wrong_course_setting_is_one_line(setting, said):
    with pytest.raises(exercises.ExerciseError) as raised:
        choice.spec(setting, "salt")
    assert said in str(raised.value) and "\n" not in str(raised.value)


def test_the_listing_says_what_changes_for_the_student_in_each_variant():
    lines = choice.listing().splitlines()
    assert "from-salt" in lines[0]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == list(NAMES)
    assert "lecture" in rows["tanh-batchnorm"]
    assert "ReLU" in rows["relu-layernorm"] and "layer norm" in rows["relu-layernorm"]
    assert "tanh" not in rows["relu-layernorm"] and "residual" not in rows["relu-layernorm"]
    assert "residual" in rows["gelu-none-residual"] and "no exercise 3" in rows["gelu-none-residual"]
    assert "(29 gradients, 2 fused)" in rows["gelu-batchnorm"]


def test_the_corpus_is_one_submission_per_mutant_named_by_its_mistake():
    mutants = _mutants("gelu-layernorm-residual")
    found = submissions_of(mutants)
    assert list(found.values()) == list(mutants)
    assert "dlnvar_inv-broadcast-wrong-dim-1" in found and "dh-missed-branch-1" in found
    reference_cells = _cells("gelu-layernorm-residual")
    for stem, mutant in found.items():
        assert stem.startswith(f"{mutant.cell}-{mutant.slip.name}-")
        assert [c for c in mutant.cells if mutant.cells[c] != reference_cells[c]] == [mutant.cell], stem


# --- the students' notebook's text -------------------------------------------------------------------

def test_each_variants_notebook_text_replaces_exactly_the_lecture_places_it_changes():
    for name in NAMES:
        variant = variants.parse(name)
        places = variants.prose(name)
        assert ("1b" in places) == (variant.activation.name != "tanh" or variant.residual), name
        assert set(places) - {"1b"} == (set() if variant.norm.name == "batchnorm" else {"1c", "1d", "ex3", "ex4"})
        assert (places.get("1c") == "" and places.get("ex3") == "") == (variant.norm.name == "none"), name
        assert all(places.values()) or variant.norm.name == "none", name
        assert len(variants.groups(name)) == 3 + bool(variant.norm.parameters)
        assert set(variants.groups(name)) <= set(exercises.load(f"makemore-mlp/{name}").atomic)
    for key, section in variants._prose().items():
        place = key.split(":")[0]
        assert any(section in variants.prose(name).get(place, "") for name in NAMES), f"{key}: no variant uses it"


def test_the_notebook_text_gives_no_answer_away():
    """Hints of the lecture's kind: no statement of any reference answer appears in the students' text."""
    text = "".join(variants._prose().values())
    for name in NAMES:
        for source in _cells(name).values():
            for line in source.splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "def ", '"""', "return")) and len(line) > 12:
                    assert line not in text, (name, line)


def test_the_variants_command_prints_the_listing():
    run = subprocess.run([sys.executable, "-c", "from grader.cli import main; main()", "variants"],
                         capture_output=True, text=True, check=True)
    assert run.stdout == choice.listing() and not run.stderr


def _same_draws(ours, theirs, sizes) -> None:
    for index in range(3):
        options = theirs.hidden(index, 3, sizes)
        assert ours.hidden(index, 3, sizes) == options
        for draw in (lambda e, g, o=options or {}: e.init(sizes, g, torch.float64, **o),
                     lambda e, g: e.batch(sizes, g), lambda e, g: e.training.batches(sizes, g, 2)):
            mine, right = (draw(e, torch.Generator().manual_seed(index)) for e in (ours, theirs))
            assert list(mine) == list(right) and all(torch.equal(mine[k], right[k]) for k in right)


@pytest.mark.parametrize("name", NAMES)
def test_each_variant_written_out_is_an_exercise_file_that_grades_as_the_variant(name):
    """`backprop-ninja variants NAME` prints the file an instructor starts an exercise of their own from:
    the variant's short form, everything the grader uses the same as the variant's."""
    namespace: dict = {}
    exec(choice.exercise_file(name), namespace)  # noqa: S102 - the file the command prints
    own, variant = namespace["EXERCISE"], variants.variant(name)
    assert own.name == name and exercises.problems(own) == []
    for field in ("network", "answers", "functions", "lecture", "parts", "assignment"):
        assert getattr(own, field) == getattr(variant, field), field
    assert dict(own.ranges) == dict(variant.ranges) and own.training.function == variant.training.function
    assert set(own.mistakes.rules) == set(variant.mistakes.rules)
    _same_draws(own, variant, exercises.Sizes(n=13, vocab=17, block_size=4, n_embd=5, n_hidden=21))


def test_the_variants_command_writes_one_out_and_names_the_list_for_a_wrong_name():
    """In this process (the listing's test above runs the command as a user does): the same output and exit."""
    from click.testing import CliRunner

    from grader.cli import main

    run = CliRunner().invoke(main, ["variants", "makemore-mlp/relu-layernorm"])
    assert run.exit_code == 0 and run.stdout == choice.exercise_file("relu-layernorm") and not run.stderr
    wrong = CliRunner().invoke(main, ["variants", "relu-nope"])
    assert wrong.exit_code == 1 and wrong.stderr.strip() == \
        "Error: unknown variant 'relu-nope': `backprop-ninja variants` lists them"


@pytest.mark.slow
def test_a_variant_written_out_is_a_course_of_its_own_that_grades(tmp_path):
    """The file written out, as an instructor's own exercise: `course init --exercise` makes its course from the
    file, and the solved notebook gets full marks. (The test above holds it equal to the variant in every field;
    the variant's course grades every slip in tests/test_variant_courses.py, and `.ci/nightly` runs exercise check
    on each; exercise check of a file of one's own is tests/test_own_exercise_wheel.py's.)"""
    (tmp_path / "mine.py").write_text(choice.exercise_file("relu-layernorm"))
    cli = [sys.executable, "-c", "from grader.cli import main; main()"]
    init = subprocess.run([*cli, "course", "init", str(tmp_path / "course"), "--exercise", str(tmp_path / "mine.py")],
                          capture_output=True, text=True)
    assert init.returncode == 0, init.stderr
    course = load_course(tmp_path / "course" / "course.yml")
    assert course.exercise.network == variants.variant("relu-layernorm").network
    solved = tmp_path / "course" / "source" / course.assignment / course.notebook
    graded = subprocess.run([*cli, "grade", str(solved), "--out", str(tmp_path / "results"), "--course",
                             str(tmp_path / "course" / "course.yml")], capture_output=True, text=True)
    assert graded.returncode == 0, graded.stderr
    (result,) = [json.loads(p.read_text()) for p in (tmp_path / "results").glob("*.json")]
    assert result["score"] == result["max_score"] == sum(course.points.values()), result["output"]
