"""grader.judge.configs and grader.judge.exam: the hidden configurations and what the trusted process knows about
each before any student code runs.

Every rule here is one a real wrong answer slipped through without (about 70 realistic wrong answers
were run against many configurations): lecture sizes hide hard-coded numbers, equal sizes hide swapped
dimensions, Xb without repeats hides an overwriting dC, zero-ish inits hide a third of the mistakes, and
only a tiny activation variance shows a dropped eps.
"""
from __future__ import annotations

import dataclasses
import math
import pickle

import pytest
import torch

from grader.exercises.makemore_mlp import EXERCISE
from grader.exercises.makemore_mlp.mistakes import EPS
from grader.judge.compare import compare
from grader.judge.configs import PROBE_SEED, Config, generate
from grader.judge.exam import CHAIN, LOCAL, checks, prepare
from grader.judge.oracle import chain_gradients
from helpers.paths import COURSE
from solutions import reference
from solutions.reference import shapes as model_shapes

NETWORK = EXERCISE.network

TOL = COURSE.tolerance
LECTURE_VALUES = {32, 27, 3, 10, 64}
SIZE_FIELDS = ("n", "vocab", "block_size", "n_embd", "n_hidden")
SALTS = (COURSE.secret_salt, "test-salt-1", "another course, fall term", "b")
COUNTS = {COURSE.secret_salt: COURSE.configurations, "test-salt-1": 4, "another course, fall term": 6, "b": 4}


@pytest.fixture(scope="module", params=SALTS)
def batch(request):
    """(salt, configurations, prepared cases) for one salt."""
    salt = request.param
    configs = generate("makemore-mlp", salt, COUNTS[salt])
    return salt, configs, [prepare(c) for c in configs]


def scored(configs):
    return [c for c in configs if c.scored]


# ---------------------------------------------------------------------------------------------
# generate()


def test_generate_is_deterministic_for_a_salt_and_differs_for_another():
    first, again = generate("makemore-mlp", "salt-one", 4), generate("makemore-mlp", "salt-one", 4)
    assert first == again
    other = generate("makemore-mlp", "salt-two", 4)
    assert [(c.sizes, c.seed) for c in other] != [(c.sizes, c.seed) for c in first]
    assert {c.seed for c in scored(other)}.isdisjoint({c.seed for c in scored(first)})
    # The batch drawn from a config's seed is reproducible too.
    for c in first:
        one = EXERCISE.batch(c.sizes, torch.Generator().manual_seed(c.seed))
        two = EXERCISE.batch(c.sizes, torch.Generator().manual_seed(c.seed))
        assert one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)


def test_prepare_is_deterministic():
    config = generate("makemore-mlp", "salt-one", 4)[1]
    a, b = prepare(config), prepare(config)
    for field in ("values", "truth", "random_upstream", "local"):
        da, db = getattr(a, field), getattr(b, field)
        assert da.keys() == db.keys()
        assert all(torch.equal(da[k], db[k]) for k in da), field


def test_scored_configs_and_one_unscored_lecture_probe(batch):
    salt, configs, _ = batch
    assert len(configs) == COUNTS[salt] + 1
    assert len(scored(configs)) == COUNTS[salt] >= 4
    probes = [c for c in configs if not c.scored]
    assert len(probes) == 1 and probes[0].sizes == EXERCISE.lecture and probes[0].options == ()
    assert len({c.name for c in configs}) == len(configs)
    assert len({c.seed for c in configs}) == len(configs)


def test_the_probe_is_public_the_same_for_every_salt_while_the_scored_configs_are_not():
    """Feedback pages draw the probe's tensors: nothing drawn from it may depend on the secret salt."""
    probes = {[c for c in generate("makemore-mlp", salt, COUNTS[salt]) if not c.scored][0] for salt in SALTS}
    assert probes == {Config("makemore-mlp", "lecture-sizes", EXERCISE.lecture, PROBE_SEED, scored=False)}
    scored_seeds = [{c.seed for c in scored(generate("makemore-mlp", salt, COUNTS[salt]))} for salt in SALTS]
    assert all(a.isdisjoint(b) for i, a in enumerate(scored_seeds) for b in scored_seeds[i + 1:])
    assert PROBE_SEED not in set().union(*scored_seeds)


def test_scored_sizes_are_unlike_the_lecture_and_unlike_each_other(batch):
    _, configs, _ = batch
    for c in scored(configs):
        values = [getattr(c.sizes, f) for f in SIZE_FIELDS]
        assert len(set(values)) == len(values), c
        assert not LECTURE_VALUES & set(values), c
        assert c.sizes.block_size >= 2, c
        assert c.sizes.n >= 3, c  # an unbiased variance needs n - 1 >= 2


def test_batches_repeat_indices_and_spread_targets(batch):
    _, configs, cases = batch
    assert any(c.sizes.n <= c.sizes.vocab for c in scored(configs))
    all_distinct = 0
    for config, case in zip(configs, cases):
        drawn = EXERCISE.batch(config.sizes, torch.Generator().manual_seed(config.seed))
        Xb, Yb = drawn["Xb"], drawn["Yb"]
        s = config.sizes
        assert Xb.shape == (s.n, s.block_size) and Yb.shape == (s.n,)
        assert Xb.dtype == Yb.dtype == torch.int64
        assert 0 <= int(Xb.min()) and int(Xb.max()) < s.vocab and 0 <= int(Yb.min()) and int(Yb.max()) < s.vocab
        assert Xb.unique().numel() < Xb.numel(), f"{config.name}: no repeated index in Xb"
        assert Yb.unique().numel() == min(s.n, s.vocab), f"{config.name}: targets not as distinct as possible"
        all_distinct += config.scored and Yb.unique().numel() == s.n
        # prepare() uses a batch of that shape and those properties as well.
        assert case.values["Xb"].unique().numel() < case.values["Xb"].numel()
        assert case.values["Yb"].unique().numel() == min(s.n, s.vocab)
    assert all_distinct >= 1


def test_the_lecture_init_scales(batch):
    _, configs, cases = batch
    for config, case in zip(configs, cases):
        v, s = case.values, config.sizes
        assert all(v[p].dtype == torch.float64 for p in NETWORK.parameters)
        w1_std = (5 / 3) / math.sqrt(s.block_size * s.n_embd) * config.init_options.get("W1", 1.0)
        assert 0.7 < float(v["C"].std()) < 1.3, config.name
        assert 0.7 * w1_std < float(v["W1"].std()) < 1.3 * w1_std, config.name
        assert 0.07 < float(v["W2"].std()) < 0.13, config.name  # never 0: W2 = 0 hid 25 of 63 mistakes
        for name in ("b1", "b2", "bnbias"):
            assert 0.03 < float(v[name].std()) < 0.2, (config.name, name)
        assert abs(float(v["bngain"].mean()) - 1) < 0.1 and 0.03 < float(v["bngain"].std()) < 0.2, config.name
        for p in NETWORK.parameters:
            assert v[p].shape == model_shapes(s)[p]


def test_the_last_config_has_a_tiny_activation_variance_that_exposes_a_dropped_eps(batch):
    _, configs, cases = batch
    small = [(c, k) for c, k in zip(configs, cases) if c.scored][-1]
    others = [(c, k) for c, k in zip(configs, cases) if c is not small[0]]
    config, case = small
    bnvar = case.values["bnvar"]
    assert float(bnvar.max()) < 1e-3, f"{config.name}: max bnvar {float(bnvar.max()):.3g}"
    assert float(bnvar.max()) > 0.1 * EPS  # eps must matter, not swamp the variance entirely
    for c, k in others:
        assert 1e-2 < float(k.values["bnvar"].min()) and float(k.values["bnvar"].max()) < 100, c.name
    # A dropped eps is wrong by far more than the course tolerance there.
    dropped = -0.5 * bnvar**-1.5 * case.truth["dbnvar_inv"]
    comparison = compare(dropped, case.truth["dbnvar"], rtol=TOL.rtol, atol=TOL.atol)
    assert not comparison.passed
    assert not torch.allclose(dropped, case.truth["dbnvar"], rtol=100 * TOL.rtol, atol=100 * TOL.atol)
    # ... while the right formula passes.
    right = -0.5 * (bnvar + EPS) ** -1.5 * case.truth["dbnvar_inv"]
    assert compare(right, case.truth["dbnvar"], rtol=TOL.rtol, atol=TOL.atol).passed


def test_config_is_a_frozen_value_that_pickles_naming_its_exercise():
    """Configurations cross to Dask workers by pickle: the exercise travels as course.yml's spec string."""
    config = generate("makemore-mlp", "salt-one", 4)[-2]
    assert isinstance(config, Config)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 0
    again = pickle.loads(pickle.dumps(config))
    assert again == config and again.exercise == "makemore-mlp" and again.init_options == config.init_options


# ---------------------------------------------------------------------------------------------
# prepare(): truth, random upstream and local expectations


def test_truth_is_the_oracle_of_the_case_batch(batch, autograd_pass):
    _, configs, cases = batch
    for case in cases:
        v = case.values
        params = {p: v[p] for p in NETWORK.parameters}
        again = chain_gradients(NETWORK, params, {"Xb": v["Xb"], "Yb": v["Yb"]})
        assert case.truth.keys() == again.keys()
        assert all(torch.equal(case.truth[k], again[k]) for k in again)
        # And independently of grader.judge.oracle: the notebook's own retain_grad()/backward() pass.
        graph = autograd_pass(params, v["Xb"], v["Yb"])
        for g in EXERCISE.atomic:
            expected = graph[g[1:]].grad
            assert case.truth[g].shape == expected.shape
            assert torch.allclose(case.truth[g], expected, rtol=1e-9, atol=1e-14), (case.config.name, g)


def test_the_student_view_holds_no_gradient_and_no_loss(batch):
    _, _, cases = batch
    for case in cases:
        view = case.student_view()
        assert "loss" not in view and not any(k.startswith("d") and k in case.truth for k in view)
        assert all(not t.requires_grad for t in view.values())


def test_random_upstream_is_random_not_the_truth(batch):
    _, _, cases = batch
    for case in cases:
        assert set(case.random_upstream) == set(EXERCISE.atomic)
        for g in EXERCISE.atomic:
            r = case.random_upstream[g]
            assert r.shape == case.truth[g].shape and r.dtype == torch.float64
            assert not torch.allclose(r, case.truth[g], rtol=TOL.rtol, atol=TOL.atol), g


def test_the_reference_answer_passes_the_local_check_on_every_config(batch):
    """case.local is what the reference answer cell computes from the random upstream gradients."""
    _, _, cases = batch
    with_local = {a.grade_id for a in EXERCISE.answers if LOCAL in checks(a)}
    assert set(cases[0].local) == with_local
    ex1_local = {a.grade_id for a in EXERCISE.answers if a.part == 1 and a.local_upstream}
    assert with_local == ex1_local | {"ex3_dhprebn"}
    for case in cases:
        for grade_id in sorted(with_local):
            answer = EXERCISE.by_grade_id[grade_id]
            ns = {**reference.namespace(case.values), **case.upstream(answer, LOCAL)}
            got = reference.run_cell(answer.cell_id, ns)[answer.variable]
            expected = case.expected(answer, LOCAL)
            assert expected is case.local[grade_id]
            comparison = compare(got, expected, rtol=TOL.rtol, atol=TOL.atol)
            assert comparison.passed, (case.config.name, grade_id, comparison.message)


def test_the_local_check_is_not_the_chain_check(batch):
    """With random upstream the expected values differ from the truth: the LOCAL check adds something."""
    _, _, cases = batch
    for case in cases:
        for grade_id, local in case.local.items():
            answer = EXERCISE.by_grade_id[grade_id]
            assert local.shape == case.expected(answer, CHAIN).shape
            assert not torch.allclose(local, case.expected(answer, CHAIN), rtol=TOL.rtol, atol=TOL.atol), grade_id


def test_narrow_ranges_draw_configurations_unlike_each_other(tmp_path):
    """An instructor's transformer: two of the exercise check's four configurations drew the same sizes, so
    three were tried where four were meant. Where the ranges hold enough, no two configurations are alike."""
    path = tmp_path / "narrow.py"
    path.write_text('''from grader.authoring.define import exercise

EXERCISE = exercise(
    name="narrow", title="narrow ranges", sizes={"n": (6, (2, 5)), "d": (5, (3, 6))},
    parameters="W = randn(d, d) * 0.3",
    data="X = randn(n, d)",
    forward="""
        h = torch.tanh(X @ W)
        loss = (h * h).sum() / n
    """,
)
''')
    for salt in ("exercise check", *SALTS):
        drawn = [c.sizes for c in generate(f"{path}:EXERCISE", salt, 4) if c.scored]
        assert len({tuple(s.items()) for s in drawn}) == 4, (salt, drawn)


NARROW_CLASSES = '''from grader.authoring.define import exercise

EXERCISE = exercise(
    name="pool", title="attention pooling", sizes={"B": (8, (4, 14)), "T": (6, (3, 10)), "D": (5, (3, 9)),
                                                 "C": (4, (2, 7))},
    parameters="q = randn(D, 1)\\nW = randn(D, C)",
    data="X = randn(B, T, D)\\nY = randint(C, (B,))",
    forward="""
        s = F.softmax((X @ q).squeeze(2), 1)
        pooled = (s.unsqueeze(2) * X).sum(1)
        loss = F.cross_entropy(pooled @ W, Y)
    """,
)
'''


def test_a_side_held_only_by_other_sizes_lecture_values_is_drawn_too(tmp_path):
    """An instructor trial's classes, 4 in 2..6 beside sizes of 5, 6 and 8 in the notebook: every value above 4 was
    another size's lecture value, so C was 2 or 3 in every configuration and `dlogits[:, :4]` scored full."""
    path = tmp_path / "pool.py"
    path.write_text(NARROW_CLASSES)
    for salt in (*SALTS, "exercise check", *(f"salt {i}" for i in range(20))):
        drawn = [c.sizes for c in generate(f"{path}:EXERCISE", salt, 4) if c.scored]
        for key, lecture in (("B", 8), ("T", 6), ("D", 5), ("C", 4)):
            assert {getattr(s, key) > lecture for s in drawn} == {True, False}, (salt, key, drawn)


@pytest.mark.parametrize("spec", ["makemore-mlp", "wavenet", "attention", "rnn", "makemore-mlp/gelu-layernorm"])
def test_every_size_is_drawn_above_and_below_its_lecture_value_somewhere(spec):
    """A size hard-coded to the lecture's fails only on a draw on the right side of it (a slice `[:32]` of a
    batch of 21 takes every row): the twenty-first student trial's `db2 = dlogits[:32].sum(0)` passed the
    self-check, whose three batches all had n <= 32, and lost its points to a hidden n of 35, while
    `dhprebn[:, :64]` failed the self-check and got full marks (no hidden n_hidden above 64). Every salt's
    configurations, the grader's and the self-check's alike, now hold each ranged size on both sides."""
    from grader.exercise import load
    from grader.judge.configs import _sides

    exercise = load(spec)
    sides = _sides(exercise)
    assert sides, spec
    for salt in (*SALTS, "backprop-ninja self-check", *(f"salt {i}" for i in range(40))):
        for count in (2, 3, 4, 6):
            drawn = [c.sizes for c in generate(spec, salt, count) if c.scored]
            for key in sides:
                above = {getattr(s, key) > exercise.lecture[key] for s in drawn}
                assert above == {True, False}, (spec, salt, count, key, [getattr(s, key) for s in drawn])


@pytest.mark.parametrize("spec", ["makemore-mlp", "wavenet", "attention", "rnn", "makemore-mlp/gelu-layernorm"])
def test_the_training_run_draws_every_size_above_its_lecture_value(spec):
    """The whole-run check trains on one configuration: the grader's first, once, and the self-check's three, so a
    trial's `[:32]` in the training function failed the self-check's run (a batch of 37) and passed the grader's (11).
    Both now train on a plain configuration with every size above the lecture's, from their salts."""
    from grader.exercise import load
    from grader.judge.configs import _sides, training_config

    exercise = load(spec)
    for salt in (*SALTS, "backprop-ninja self-check", *(f"salt {i}" for i in range(20))):
        config = training_config(spec, salt)
        assert config == training_config(spec, salt) and config.name == "training" and config.options == ()
        for key in _sides(exercise):
            assert config.sizes[key] > exercise.lecture[key], (spec, salt, key, config.sizes)
        values = list(config.sizes.values())
        assert len(set(values)) == len(values)


def test_preparing_a_configuration_imports_no_symbolic_shapes():
    """Every grading, self-check and derivation prepares configurations: a vector-Jacobian product written with
    autograd's grad_outputs made torch import its symbolic shapes and sympy, half a second of every such
    process. The configuration's local answers, and a fused block's, are the same without."""
    import subprocess
    import sys

    from helpers.paths import ROOT

    code = ("import sys\nfrom grader.judge.configs import generate\nfrom grader.judge.exam import prepare\n"
            "for spec in ('makemore-mlp', 'makemore-mlp/relu-layernorm-residual'):\n"
            "    [prepare(config) for config in generate(spec, 'sympy', 2)]\n"
            "print('sympy' in sys.modules, 'torch.fx.experimental.symbolic_shapes' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False"]
