"""The derived reference answers (grader.derive) equal autograd: on the lecture's network, every makemore
variant and the tiny ReLU exercise, on configurations the derivation never saw, and on random forward
passes drawn from the grammar (Hypothesis). Every derived slip changes its own gradient, and an
operation without a rule is an error naming its line.
"""
from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from grader import derive
from grader.derive import rules
from grader.exercise import ELEMENTWISE, Network, Sizes, load
from grader.exercises.makemore_mlp import variants
from grader.sandbox import static_check
from grader.vocabulary import SLIPS

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).parent))
from exercises import tiny_relu  # noqa: E402

TOL = dict(rtol=1e-9, atol=1e-12)
EXERCISES = {**{name: f"makemore-mlp/{name}" for name in variants.NAMES}, "tiny-relu": None}


def _exercise(name: str):
    return tiny_relu.EXERCISE if name == "tiny-relu" else load(EXERCISES[name])


@functools.cache
def _derived(name: str) -> tuple[derive.Gradient, ...]:
    return derive.for_exercise(_exercise(name))


def _forward(network: Network, inputs) -> tuple[dict, dict]:
    """The forward values and autograd's gradient of every tensor the loss depends on (a mask has none)."""
    params = {k: v.detach().clone().requires_grad_(True) for k, v in inputs.items() if k in network.parameters}
    data = {k: v for k, v in inputs.items() if k in network.data}
    graph = network.forward(params, data)
    names = [k for k in (*network.parameters, *network.intermediates)
             if k != network.loss and isinstance(graph[k], torch.Tensor) and graph[k].requires_grad]
    grads = torch.autograd.grad(graph[network.loss], [graph[k] for k in names])
    values = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in graph.items()}
    return values, {"d" + k: g for k, g in zip(names, grads, strict=True)}


def _run_all(gradients, values) -> dict:
    namespace = {**values, "torch": torch, "F": torch.nn.functional}
    for gradient in gradients:
        exec(gradient.source, namespace)  # noqa: S102
    return namespace


@pytest.mark.parametrize("name", list(EXERCISES))
def test_derived_answers_equal_autograd(name):
    """On three configurations, the third one not used to derive: every gradient, in the derived order,
    each cell reading the ones before it as a notebook does."""
    exercise = _exercise(name)
    gradients = _derived(name)
    network = exercise.network
    assert {g.name for g in gradients} == {"d" + k for k in (*network.parameters, *network.intermediates)
                                          if k != network.loss}
    for configuration in derive.configurations(exercise, 3):
        values, true = _forward(network, configuration.inputs)
        namespace = _run_all(gradients, values)
        for gradient in gradients:
            assert torch.allclose(namespace[gradient.name], true[gradient.name], **TOL), (name, gradient.name)


@pytest.mark.parametrize("name", list(EXERCISES))
def test_order_reads_only_what_is_known(name):
    """Each cell reads forward values, sizes and gradients computed before it, never its own before
    assigning it."""
    exercise = _exercise(name)
    network = exercise.network
    known = {*network.parameters, *network.data, *network.sizes, *network.intermediates}
    for gradient in _derived(name):
        assert set(gradient.reads) <= known, (gradient.name, set(gradient.reads) - known)
        known.add(gradient.name)


@pytest.mark.parametrize("name", list(EXERCISES))
def test_every_slip_changes_its_own_gradient(name):
    """Every slip's cell runs and gives its gradient another value or shape on some configuration, with
    the upstream gradients at their true values or random ones, the other cells untouched."""
    exercise = _exercise(name)
    gradients = _derived(name)
    cases = []
    for configuration in derive.configurations(exercise, 3):
        values, true = _forward(exercise.network, configuration.inputs)
        generator = torch.Generator().manual_seed(1)
        noise = {k: torch.randn(v.shape, generator=generator, dtype=v.dtype) for k, v in true.items()}
        cases += [{**values, **true}, {**values, **noise}]
    total = 0
    for gradient in gradients:
        names = [s.name for s in gradient.slips()]
        assert all(s.sentence and s.gradient == gradient.name for s in gradient.slips())
        for slip in gradient.slips():
            differs = False
            for case in cases:
                expected = _cell(gradient.code, gradient.name, case)
                got = _cell(slip.code, gradient.name, case)
                differs |= got.shape != expected.shape or not torch.allclose(got, expected, rtol=1e-5, atol=1e-8)
            assert differs, (gradient.name, slip.name)
        total += len(names)
    assert total >= 2 * len(gradients)


def _cell(source: str, variable: str, case: dict) -> torch.Tensor:
    namespace = {**case, "torch": torch, "F": torch.nn.functional}
    namespace.pop(variable, None)
    exec(source, namespace)  # noqa: S102
    return namespace[variable]


def test_the_lecture_answers_read_as_the_lecture_writes_them():
    """The derived code of the lecture's network, statement by statement, where it matches the hand-written
    answers (the lecture's forms of broadcasting sums, accumulation, matrix products and index_add)."""
    code = {g.name: g.code for g in _derived("tanh-batchnorm")}
    assert code["dlogprobs"] == "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1 / n\n"
    assert code["dcounts_sum_inv"] == "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\n"
    assert code["dlogit_maxes"] == "dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)\n"
    assert code["dlogits"] == (
        "dlogits = dnorm_logits.clone()\n"
        "dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes\n")
    assert code["dh"] == "dh = dlogits @ W2.T\n"
    assert code["dW2"] == "dW2 = h.T @ dlogits\n"
    assert code["db2"] == "db2 = dlogits.sum(0)\n"
    assert code["dhpreact"] == "dhpreact = (1 - h ** 2) * dh\n"
    assert code["dbndiff2"] == "dbndiff2 = 1 / (n - 1) * torch.ones_like(bndiff2) * dbnvar\n"
    assert code["dbndiff"] == "dbndiff = bnvar_inv * dbnraw\ndbndiff += 2 * bndiff * dbndiff2\n"
    assert code["dbnvar"] == "dbnvar = -0.5 * (bnvar + 1e-5) ** -1.5 * dbnvar_inv\n"
    assert code["demb"] == "demb = dembcat.view(emb.shape)\n"
    assert code["dC"] == "dC = torch.zeros_like(C).index_add(0, Xb.view(-1), demb.view(-1, C.shape[1]))\n"


def test_every_statement_is_explained():
    for name in ("tanh-batchnorm", "gelu-layernorm-residual", "tiny-relu"):
        for gradient in _derived(name):
            lines = gradient.source.splitlines()
            for i, line in enumerate(lines):
                if not line.startswith("#") and not line.startswith(f"{gradient.name}[") and \
                        not line.endswith("zeros_like(" + gradient.tensor + ")"):
                    assert lines[i - 1].startswith("#"), (gradient.name, line)


def test_the_corpus_changes_one_cell_per_mutant():
    gradients = _derived("tiny-relu")
    reference = {g.name: g.source for g in gradients}
    mutants = list(derive.corpus(gradients))
    assert len(mutants) == sum(len(g.slips()) for g in gradients)
    for slip, cells in mutants:
        assert [k for k in cells if cells[k] != reference[k]] == [slip.gradient]


def test_the_lecture_slips_are_named():
    """The classic mistakes of the lecture's network, each by its stable name on its own gradient."""
    slips = {g.name: {s.name for s in g.slips()} for g in _derived("tanh-batchnorm")}
    assert {"tanh-input", "tanh-square", "sign", "forward-value"} <= slips["dhpreact"]
    assert {"broadcast-keepdim", "broadcast-no-sum", "broadcast-wrong-dim", "mul-local"} <= slips["dbngain"]
    assert "bessel" in slips["dbndiff2"]
    assert "missed-branch" in slips["dbndiff"] and "missed-branch" in slips["dhprebn"]
    assert "index-overwrite" in slips["dC"]
    assert "matmul-transpose" in slips["dW2"] or "matmul-order" in slips["dW2"]
    assert {"neg-sign", "mean-count"} <= slips["dlogprobs"]
    assert "max-everywhere" in slips["dlogits"]
    assert "log-multiplies" in slips["dprobs"]
    assert "exp-input" in slips["dnorm_logits"]
    assert "power-exponent" in slips["dcounts_sum"]
    assert {"eps-dropped", "power-exponent", "power-raised"} <= slips["dbnvar"]
    residual = {g.name: {s.name for s in g.slips()} for g in _derived("relu-none-residual")}
    assert "matmul-transpose" in residual["dh"]  # W3 is square: W3 in place of W3.T runs, and is wrong
    assert {"relu-output", "relu-inverted"} <= residual["dhpreact"]


def _network(text: str, parameters=("W",), data=("X",)):
    return Network.parse(text, parameters=parameters, data=data, sizes={"n": "X.shape[0]"})


def test_a_tree_is_copied_by_its_fields_alone():
    """After any traceback in a Jupyter kernel, IPython's `executing` has set `.parent` on the parser's shared ctx
    and operator nodes: copy.deepcopy of a tree then copied the notebook's whole source with it, and a check cell
    that derived a GRU's slips ran seven minutes (an instructor trial)."""
    from grader.derive.algebra import clone

    tree = ast.parse("a * b + c", mode="eval")
    walked = list(ast.walk(tree))
    for node in walked:
        for child in ast.iter_child_nodes(node):
            child.parent = node
    try:
        copied = clone(tree)
        assert ast.dump(copied, include_attributes=True) == ast.dump(tree, include_attributes=True)
        assert copied.body is not tree.body and not hasattr(copied.body.left, "parent")
        assert copied.body.left.left.ctx is tree.body.left.left.ctx and copied.body.op is tree.body.op  # shared
    finally:
        for node in walked:
            node.__dict__.pop("parent", None)


def test_a_count_no_forward_line_names_is_read_from_the_data_and_a_double_minus_is_folded():
    """An instructor trial's VAE: the mean of an expression written inline divided by that whole expression's
    `.shape[0]`, where a teacher writes the data's `X.shape[0]`; and -(-0.5) printed `--0.5`."""
    network = Network.parse("h = X @ W\nkl = (-0.5 * (1 + h - h.exp()).sum(1)).mean()\nloss = kl\n",
                            parameters=("W",), data=("X",), sizes={})
    found = []
    for rows in (5, 7):
        generator = torch.Generator().manual_seed(rows)
        inputs = {"W": torch.randn(3, 4, dtype=torch.float64, generator=generator),
                  "X": torch.randn(rows, 3, dtype=torch.float64, generator=generator)}
        found.append(derive.Configuration(inputs, Sizes()))
    [dh] = [g for g in derive.derive(network, found) if g.name == "dh"]
    code = "\n".join(line for line in dh.source.splitlines() if not line.startswith("#"))
    assert code == ("dh = -0.5 * torch.ones_like(h) * dkl / X.shape[0]\n"
                    "dh += 0.5 * h.exp() * dkl / X.shape[0]"), code


def test_a_power_rules_factor_and_the_forwards_constant_fold_where_they_make_a_whole_number():
    """The same trial's KL term: `-0.5 * (... - mu ** 2 ...)` derived as `-2 * -0.5 * mu`, where a teacher
    writes `mu`; a constant that does not fold with it (0.3 * 2) is still quoted as the forward writes it."""
    network = Network.parse("kl = (-0.5 * (1 - mu ** 2)).sum()\nq = (0.3 * mu ** 2).sum()\nloss = kl + q\n",
                            parameters=("mu",), data=(), sizes={})
    configurations = [derive.Configuration({"mu": torch.randn(4, 3, dtype=torch.float64,
                                                               generator=torch.Generator().manual_seed(k))}, Sizes())
                      for k in (1, 2)]
    [dmu] = [g for g in derive.derive(network, configurations) if g.name == "dmu"]
    code = [line for line in dmu.source.splitlines() if not line.startswith("#")]
    assert code == ["dmu = 2 * 0.3 * mu * dq", "dmu += mu * dkl"], code


def test_a_number_inside_a_local_derivative_folds_with_the_chains_others():
    """An instructor trial: weight decay `0.5 * lam * (W ** 2).sum()` derived as `2 * (0.5 * lam) * W`, and an L2
    length `.square().sum(1, keepdim=True).sqrt()` as `2 * x * (0.5 / x_len)`, where a teacher writes `lam * W` and
    `x / x_len`. A reciprocal keeps the lecture's `1 / (n - 1) * ...` (test_the_lecture_answers_read_as...)."""
    network = Network.parse("x_len = X.square().sum(1, keepdim=True).sqrt()\nu = X / x_len\n"
                            "wd = 0.5 * lam * (X ** 2).sum()\nloss = (u * W).sum() + wd\n",
                            parameters=("W", "X"), data=(), sizes={"lam": "0.01"})
    configurations = [derive.Configuration({name: torch.randn(4, 3, dtype=torch.float64,
                                                               generator=torch.Generator().manual_seed(k))
                                            for name in ("W", "X")}, Sizes(lam=0.01)) for k in (1, 2)]
    gradients = derive.derive(network, configurations)
    [dX] = [g for g in gradients if g.name == "dX"]
    code = [line for line in dX.source.splitlines() if not line.startswith("#")]
    assert "dX = lam * X * dwd" in code and "dX += X * dx_len / x_len" in code, code
    values, grads = _forward(network, configurations[1].inputs)
    assert torch.allclose(_run_all(gradients, values)["dX"], grads["dX"])


def _derived_lines(forward: str, w: tuple[int, ...], p: tuple[int, ...]) -> dict[str, list[str]]:
    """The derived cells' lines (without comments) of `forward` on X (4, 3) and parameters W and P of shapes `w`
    and `p`, its dq checked against autograd's."""
    network = Network.parse(forward, parameters=("W", "P"), data=("X",), sizes={})
    g = torch.Generator().manual_seed(0)
    configurations = [derive.Configuration({"X": torch.randn(4, 3, dtype=torch.float64, generator=g),
                                            "W": torch.randn(*w, dtype=torch.float64, generator=g),
                                            "P": torch.randn(*p, dtype=torch.float64, generator=g)}, Sizes())
                      for _ in (0, 1)]
    gradients = derive.derive(network, configurations)
    values, grads = _forward(network, configurations[1].inputs)
    assert torch.allclose(_run_all(gradients, values)["dq"], grads["dq"])
    return {g.name: [line for line in g.source.splitlines() if not line.startswith("#")] for g in gradients}


def test_an_unsqueeze_and_a_number_inside_a_sum_read_as_a_teacher_writes_them():
    """A third instructor trial: `dquery = (...).sum(1, keepdim=True).view(query.shape)` where a teacher writes
    `.sum(1)`, and `dz = 2 * z * (-0.5 * dlogpz).unsqueeze(1)` for `-z * dlogpz.unsqueeze(1)`."""
    code = _derived_lines("q = X @ W\ne = torch.tanh(P + q.unsqueeze(1))\nlogp = -0.5 * (e ** 2).sum(2)\n"
                          "loss = -logp.sum()\n", (3, 2), (4, 5, 2))
    assert code["dq"] == ["dq = ((1 - e ** 2) * de).sum(1)"], code["dq"]
    assert code["de"] == ["de = -e * dlogp.unsqueeze(2)"], code["de"]


def test_a_dimension_inserted_by_none_indexing_is_an_unsqueeze():
    """A fourth instructor trial's SVM, `margins = (scores - correct[:, None] + 1.0).clamp(min=0)`: the derivation
    assigned into `dcorrect[:, None]` and stopped as a wrong rule; its gradient is the sum a teacher writes."""
    code = _derived_lines("q = X @ W\nm = (P - q[:, None] + 1.0).clamp(min=0)\nloss = m.sum()\n", (3, 5), (4, 4, 5))
    assert code["dq"] == ["dq = ((P - q[:, None] + 1.0 >= 0) * -dm).sum(1)"], code["dq"]


def test_a_width_that_is_a_multiple_of_a_size_is_written_so():
    """An instructor trial's LSTM: its gates, 4*nh wide with T = 2 steps on every configuration, were written T*T*nh
    in the comments."""
    network = Network.parse("z = X @ W + b\nloss = z.tanh().sum()\n", parameters=("W", "b"), data=("X",), sizes={})
    g = torch.Generator().manual_seed(0)
    configurations = [derive.Configuration({"X": torch.randn(3, 2, dtype=torch.float64, generator=g),
                                            "W": torch.randn(2, 4 * nh, dtype=torch.float64, generator=g),
                                            "b": torch.randn(4 * nh, dtype=torch.float64, generator=g)},
                                           Sizes(T=2, nh=nh)) for nh in (3, 5)]
    [db] = [g for g in derive.derive(network, configurations) if g.name == "db"]
    assert "b (4*nh,)" in db.source and "T*T" not in db.source, db.source


def test_a_piece_between_pads_of_fixed_width_is_sliced_as_a_teacher_writes_it():
    """A second instructor trial's ordinal regression padded its cumulative probabilities with a column of zeros and
    one of ones: `dcum_pad[:, lo.shape[1]:lo.shape[1] + cum.shape[1]]`, where a teacher writes `[:, 1:-1]`."""
    network = Network.parse("h = X @ W\np = torch.cat([A, h, B], 1)\nloss = (p ** 2).sum()\n",
                            parameters=("W",), data=("X", "A", "B"), sizes={})
    g = torch.Generator().manual_seed(0)
    configurations = [derive.Configuration({"X": torch.randn(3, 2, dtype=torch.float64, generator=g),
                                            "W": torch.randn(2, k, dtype=torch.float64, generator=g),
                                            "A": torch.randn(3, 1, dtype=torch.float64, generator=g),
                                            "B": torch.randn(3, 1, dtype=torch.float64, generator=g)}, Sizes())
                      for k in (3, 5)]
    gradients = derive.derive(network, configurations)
    [dh] = [g for g in gradients if g.name == "dh"]
    assert [line for line in dh.source.splitlines() if not line.startswith("#")] == ["dh = dp[:, 1:-1]"], dh.source
    values, grads = _forward(network, configurations[1].inputs)
    assert torch.allclose(_run_all(gradients, values)["dh"], grads["dh"])


def test_a_product_of_three_matrices_derives():
    """An instructor trial's graph convolution, `Z = A @ h @ W`: the gradient `A.T @ dZ @ W.T` regrouped is the same
    product, which the slips' regrouping took for a slip of two operators and crashed on (TypeError)."""
    network = Network.parse("Z = A @ h @ W\nloss = Z.tanh().sum()\n", parameters=("h", "W"), data=("A",), sizes={})
    configurations = [derive.Configuration({"A": torch.randn(5, 5, dtype=torch.float64),
                                            "h": torch.randn(5, 3, dtype=torch.float64),
                                            "W": torch.randn(3, 4, dtype=torch.float64)}, Sizes()) for _ in (0, 1)]
    gradients = derive.derive(network, configurations)
    values, grads = _forward(network, configurations[0].inputs)
    found = _run_all(gradients, values)
    assert all(torch.allclose(found[k], grads[k]) for k in ("dh", "dW"))
    assert not any(slip.name == "regrouped" and "A.T @ dZ @ W.T" in slip.sentence
                   for g in gradients for slip in g.slips())


def test_an_operation_without_a_rule_names_its_line():
    network = _network("h = X @ W\nc = torch.cos(h)\nloss = c.sum()\n")
    inputs = {"W": torch.randn(3, 4, dtype=torch.float64), "X": torch.randn(5, 3, dtype=torch.float64)}
    with pytest.raises(derive.DeriveError, match=r"line `c = torch.cos\(h\)`: no backward rule for `torch.cos\(h\)`"):
        derive.derive(network, [derive.Configuration(inputs, Sizes(n=5))])


@pytest.mark.parametrize("line, instead", [("c = h.unfold(1, 2, 1)", "its windows stacked, torch.stack("),
                                           # an instructor trial's slope of 0.1 was told to write 0.01
                                           ("c = F.leaky_relu(h, 0.1)", "torch.where(x > 0, x, slope * x), with its "
                                                                        "negative slope written"),
                                           ("c = h.mm(h.T)", "a @ b"),
                                           # an instructor trial's gate halves: the call under an index too, whose
                                           # "name it on a line of its own" would not help
                                           ("c = h.chunk(2, 1)[0]", "slices, a part on each line"),
                                           ("c = h.split(2, 1)[1]", "slices, a part on each line"),
                                           ("c = h.unbind(1)[0]", "an index on each line"),
                                           # an instructor trial's row norms were told to write a matrix's norm
                                           ("c = h / h.norm(dim=1, keepdim=True)",
                                            "(x ** 2).sum(dim=1, keepdim=True).sqrt()"),
                                           ("c = h.norm()", "(x ** 2).sum().sqrt()"),
                                           ("c = F.normalize(h, dim=0)", "x / (x ** 2).sum(0, keepdim=True).sqrt()"),
                                           # a second trial's BPR loss and distillation
                                           ("c = F.logsigmoid(h)", "-F.softplus(-x)"),
                                           ("c = F.kl_div(h, h, reduction='batchmean')", "(p * (p.log() - logq))"),
                                           # a third trial's attention, its dims by position
                                           ("c = h - h.amax(1, keepdim=True)", "x.max(1, keepdim=True).values"),
                                           ("c = h - torch.amin(h, 0)", "x.min(0).values")])
def test_a_common_call_outside_the_grammar_says_how_to_write_it(line, instead):
    network = _network(f"h = X @ W\n{line}\nloss = c.sum()\n")
    inputs = {"W": torch.randn(3, 4, dtype=torch.float64), "X": torch.randn(5, 3, dtype=torch.float64)}
    with pytest.raises(derive.DeriveError) as raised:
        derive.derive(network, [derive.Configuration(inputs, Sizes(n=5))])
    assert f"; write it as {instead}" in str(raised.value) and "; the grammar is a + b" in str(raised.value)
    assert "line of its own" not in str(raised.value)


def test_the_first_line_outside_the_grammar_is_the_one_named():
    """An instructor trial's three `.norm(...)` lines: the walk back from the loss named the third."""
    network = _network("a = (X @ W).norm(dim=1)\nb = (X @ W).norm(dim=0)\nloss = a.sum() + b.sum()\n")
    inputs = {"W": torch.randn(3, 4, dtype=torch.float64), "X": torch.randn(5, 3, dtype=torch.float64)}
    with pytest.raises(derive.DeriveError, match=r"^line `a = \(X @ W\).norm\(dim=1\)`"):
        derive.derive(network, [derive.Configuration(inputs, Sizes(n=5))])


def test_an_elementwise_function_with_an_option_is_refused_naming_it():
    """`F.softplus(z, beta=2)` was derived as F.softplus(z): exercise check said a rule was wrong, to be reported."""
    network = _network("h = X @ W\nc = F.softplus(h, beta=2)\nloss = c.sum()\n")
    inputs = {"W": torch.randn(3, 4, dtype=torch.float64), "X": torch.randn(5, 3, dtype=torch.float64)}
    with pytest.raises(derive.DeriveError, match=r"\(F.softplus is in the grammar with its input alone, not with "
                                                 r"beta=\)"):
        derive.derive(network, [derive.Configuration(inputs, Sizes(n=5))])


def test_functional_spelt_out_is_functional_and_another_torch_module_is_no_tensor():
    """`torch.nn.functional.relu(h)` is F.relu (its receiver was taken for a tensor: a TypeError, a traceback
    from exercise check); `torch.special.logsumexp(h, 1)` is no tensor's method: no rule, its line named."""
    inputs = {"W": torch.randn(3, 4, dtype=torch.float64), "X": torch.randn(5, 3, dtype=torch.float64)}
    configurations = [derive.Configuration(inputs, Sizes(n=5))]
    spelt, short = (derive.derive(_network(f"h = X @ W\nr = {relu}(h)\nloss = r.sum()\n"), configurations)
                    for relu in ("torch.nn.functional.relu", "F.relu"))
    assert [g.name for g in spelt] == [g.name for g in short] and "dh" in [g.name for g in spelt]
    network = _network("h = X @ W\nc = torch.special.logsumexp(h, 1)\nloss = c.sum()\n")
    with pytest.raises(derive.DeriveError, match=r"line `c = torch.special.logsumexp\(h, 1\)`: no backward rule"):
        derive.derive(network, configurations)


# ------------------------------------------------------------------------------- what a rule emits, a cell may run

# Every operation the rule table differentiates, at least once (checked against rules.OPERATIONS below, so a new
# rule without a line here fails, naming it).
EVERY_OPERATION = """
x0 = X @ W0 + g0
x1 = x0 - x0.mean(1, keepdim=True)
x2 = -x1 * x0 + (+x1)
x3 = torch.sigmoid(x2)
x4 = x0 / x3 + x3 ** 2 + x3.sqrt() + x3.log()
x5 = torch.tanh(x4) + torch.relu(x4) + x4.exp() + x4.clone() + F.softplus(x4)
x6 = F.gelu(x5) + F.gelu(x5, approximate='tanh')
x7 = F.softmax(x6, 1) + F.log_softmax(x6, 1)
x8 = x7 * x7.var(0, keepdim=True) * x7.std(1, keepdim=True) + x7.max(1, keepdim=True).values + x7.sum(0)
x9 = x8.view(-1).reshape(x8.shape[1], x8.shape[0]) + x8.transpose(0, 1) + x8.mT
x10 = torch.cat([x9, x9], 0).sum(0) + torch.stack([x9, x9], 0).sum(0).permute(1, 0).T.sum(0)
x11 = x9.masked_fill(M.T > 0, 0.0) + torch.where(M.T > 0, x9, x9 * 2)
x12 = torch.matmul(x11.T, x11) + x10[:2].sum() + x11.max() + C0[I].sum()
x13 = x12.square() + x12.abs() + (x12 * x12 + 1).rsqrt() + F.silu(x12) + x12.clamp(min=0) + torch.clamp(x12, -0.5, 0.5)
x14 = torch.maximum(x13, x12) + torch.minimum(x13, x12.T) + x13.logsumexp(1, keepdim=True)
x15 = F.layer_norm(x14, (x14.shape[1],), L0, L1, eps=1e-3) + F.batch_norm(x14, None, None, training=True)
x16 = torch.einsum('ij,jk->ik', x15, x15.T) @ x15[0] + x15[0] @ x15 + x15[0] @ x15[1]
x17 = x16 + F.mse_loss(x15, x14) + F.mse_loss(x15, x12, reduction='sum')
loss = F.cross_entropy(x12, T) + x12[range(x12.shape[0]), T].sum() + x17.sum()
"""


def _every_operation_inputs(n: int, a: int, b: int, c: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)
    return {"W0": randn(a, b), "g0": randn(b), "C0": randn(c, a), "L0": randn(n), "L1": randn(n), "X": randn(n, a),
            "M": randn(n, b),
            "I": torch.randint(0, c, (n, 2), generator=generator), "T": torch.randint(0, n, (n,), generator=generator)}


def _refused(gradients) -> list[tuple[str, str, str]]:
    """Each derived answer's and slip's line the static check refuses, with the default allowlist (the least a
    course allows: course.yml only adds to it)."""
    found = []
    for gradient in gradients:
        for source in (gradient.source, *(slip.code for slip in gradient.slips())):
            refusal = static_check.check(source)
            if refusal is not None:
                found.append((gradient.name, refusal.reason, refusal.code))
    return found


def test_every_rule_derives_only_what_an_answer_cell_may_run():
    """Exact F.gelu derived `torch.erf`, which the static check refused: the solved notebook lost a point with an
    integrity flag, and every student who wrote the right derivative 0 (and a whole-backward function, which
    computes the forward again, lost its gradients to `F.gelu`)."""
    used = {op.kind for line in EVERY_OPERATION.strip().splitlines()
            for node in ast.walk(ast.parse(line.split("=", 1)[1].strip(), mode="eval"))
            if (op := rules.classify(node)) is not None}
    assert not set(rules.OPERATIONS) - used, f"no line of EVERY_OPERATION uses {sorted(set(rules.OPERATIONS) - used)}"
    network = Network.parse(EVERY_OPERATION, parameters=("W0", "g0", "C0", "L0", "L1"), data=("X", "M", "I", "T"),
                            sizes={"n": "X.shape[0]"})
    gradients = derive.derive(network, [derive.Configuration(_every_operation_inputs(5, 3, 4, 6, 0), Sizes(n=5)),
                                        derive.Configuration(_every_operation_inputs(7, 2, 5, 3, 1), Sizes(n=7))])
    assert _refused(gradients) == []
    # An exercise may accept a slip by its name (define's `accept`), checked where no rule table is loaded.
    assert {s.name for g in gradients for s in g.slips()} - set(SLIPS) == set()
    # A whole-backward function's derived answer computes the forward lines again.
    assert [line for line in EVERY_OPERATION.strip().splitlines() if static_check.check(line) is not None] == []


# ------------------------------------------------------------------------------- networks of the gallery to come

# An attention head (batched matmuls, a causal mask, softmax), an unrolled RNN (a hidden state read by the
# next step, slices of the embedding) and a WaveNet block (a flatten of consecutive pairs, batch norm over
# two dims of a 3-D tensor): the networks issue 24's gallery names, written as an instructor would.
GALLERY_NETWORKS = {
"attention": ("""
emb = C[Xb]
q = emb @ Wq
k = emb @ Wk
v = emb @ Wv
scores = q @ k.transpose(1, 2) * q.shape[-1] ** -0.5
tril = torch.tril(torch.ones(T, T))
masked = scores.masked_fill(tril == 0, float('-inf'))
att = F.softmax(masked, dim=-1)
out = att @ v
last = out[:, -1]
logits = last @ Wo + bo
loss = F.cross_entropy(logits, Yb)
""", {"C": ("V", "E"), "Wq": ("E", "H"), "Wk": ("E", "H"), "Wv": ("E", "H"), "Wo": ("H", "V"), "bo": ("V",)}),
"rnn": ("""
emb = C[Xb]
h1 = torch.tanh(emb[:, 0] @ Wx + h0 @ Wh + bh)
h2 = torch.tanh(emb[:, 1] @ Wx + h1 @ Wh + bh)
h3 = torch.tanh(emb[:, 2] @ Wx + h2 @ Wh + bh)
logits = h3 @ Wy + by
loss = F.cross_entropy(logits, Yb)
""", {"C": ("V", "E"), "Wx": ("E", "H"), "Wh": ("H", "H"), "h0": (1, "H"), "bh": ("H",), "Wy": ("H", "V"),
      "by": ("V",)}),
"wavenet": ("""
emb = C[Xb]
x1 = emb.view(emb.shape[0], emb.shape[1] // 2, -1)
h1 = x1 @ W1
m1 = h1.mean((0, 1), keepdim=True)
v1 = h1.var((0, 1), keepdim=True, unbiased=False)
r1 = (h1 - m1) / (v1 + 1e-5) ** 0.5
y1 = g1 * r1 + b1
t1 = torch.tanh(y1)
x2 = t1.view(t1.shape[0], -1)
logits = x2 @ W2 + b2
loss = F.cross_entropy(logits, Yb)
""", {"C": ("V", "E"), "W1": ("2E", "H"), "g1": (1, 1, "H"), "b1": (1, 1, "H"), "W2": ("TH", "V"), "b2": ("V",)}),
}
GALLERY_STEPS = {"attention": 5, "rnn": 3, "wavenet": 4}


def _gallery_inputs(shapes: dict, sizes: dict, seed: int, steps: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    dims = {**sizes, "2E": 2 * sizes["E"], "TH": (steps // 2) * sizes["H"]}
    inputs = {k: 0.5 * torch.randn(*[dims[d] if isinstance(d, str) else d for d in shape], generator=generator,
                                   dtype=torch.float64) for k, shape in shapes.items()}
    inputs["Xb"] = torch.randint(0, sizes["V"], (sizes["n"], steps), generator=generator)
    inputs["Yb"] = torch.randint(0, sizes["V"], (sizes["n"],), generator=generator)
    return inputs


@pytest.mark.parametrize("name", list(GALLERY_NETWORKS))
def test_the_gallery_networks_derive_and_equal_autograd(name):
    text, shapes = GALLERY_NETWORKS[name]
    steps = GALLERY_STEPS[name]
    network = Network.parse(text, parameters=tuple(shapes), data=("Xb", "Yb"),
                            sizes={"n": "Xb.shape[0]", "T": "Xb.shape[1]"})
    sizes = (dict(n=6, V=7, E=3, H=4), dict(n=9, V=5, E=4, H=2), dict(n=5, V=8, E=2, H=3))
    gradients = derive.derive(network, [derive.Configuration(_gallery_inputs(shapes, s, i, steps), Sizes(**s))
                                        for i, s in enumerate(sizes[:2])])
    values, true = _forward(network, _gallery_inputs(shapes, sizes[2], 7, steps))
    namespace = _run_all(gradients, values)
    assert {g.name for g in gradients} == {"d" + k for k in (*shapes, *network.intermediates)
                                          if k not in ("loss", "tril")}
    for gradient in gradients:
        assert torch.allclose(namespace[gradient.name], true[gradient.name], **TOL), gradient.name
        assert gradient.slips()


# ------------------------------------------------------------------------------- random forward passes

# Symbolic sizes: each configuration gives them different values.
DIMS = ("n", "a", "b", "c")
SIZE_VALUES = ({"n": 5, "a": 3, "b": 4, "c": 6}, {"n": 7, "a": 2, "b": 5, "c": 3}, {"n": 4, "a": 5, "b": 3, "c": 2})


@st.composite
def forward_passes(draw):
    """A random well-shaped forward pass: (lines, parameter shapes, data shapes), every line one operation of
    the grammar on earlier tensors, every tensor reaching the loss. Shapes are tuples of size names or 1;
    `pos` marks tensors that are positive (what log, sqrt, division and negative powers may take)."""
    params = {"W0": ("a", "b"), "g0": (1, "b"), "C0": ("c", "a")}
    data = {"X": ("n", "a"), "I": ("n", 2), "M": ("n", "b"), "T": ("n",)}
    pool = {"x0": (("n", "b"), False)}
    lines = ["x0 = X @ W0 + g0"]
    unused = {"x0"}
    sparse = set()
    count = draw(st.integers(3, 9))
    for k in range(1, count + 1):
        out = f"x{k}"
        name = draw(st.sampled_from(sorted(pool)))
        shape, pos = pool[name]
        two = [n for n, (s, _) in pool.items() if s == shape]
        kind = draw(st.sampled_from(["unary", "binary", "broadcast", "reduce", "matmul", "shape", "softmax",
                                     "cat", "mask", "power", "embed", "index", "batched", "whole", "ce", "norm",
                                     "pair", "vector"]))
        new_pos = False
        if kind == "unary":
            fn = draw(st.sampled_from(["torch.tanh({})", "torch.sigmoid({})", "torch.relu({})", "F.gelu({})",
                                       "F.gelu({}, approximate='tanh')", "{}.exp()" if not pos else "{}.log()",
                                       "torch.tanh({}).exp()", "-{}", "{}.sqrt()" if pos else "{}.clone()",
                                       "{}.square()", "{}.abs()", "F.silu({})", "F.softplus({})", "{}.clamp(min=0)",
                                       "torch.clamp({}, -0.5, 0.5)", "{}.rsqrt()" if pos else "{}.square()"]))
            # Of a line's own sum or difference too (an SVM's hinge, `(scores - correct + 1).clamp(min=0)`, met a
            # minus put on the clamp's 0/1 mask), where the function takes any number.
            operand = name
            if fn not in ("{}.log()", "{}.sqrt()", "{}.rsqrt()"):
                operand = draw(st.sampled_from([name, f"({name} + 0.5)", *(f"({name} - {o})" for o in two[:2]
                                                                             if o != name)]))
            code = fn.format(operand)
            new_pos = fn in ("torch.sigmoid({})", "torch.tanh({}).exp()", "{}.exp()", "{}.sqrt()", "{}.rsqrt()") or (
                pos and "-" not in operand and fn in ("{}.clone()", "{}.square()", "{}.abs()"))
            if fn in ("torch.relu({})", "{}.clamp(min=0)", "torch.clamp({}, -0.5, 0.5)"):
                sparse.add(out)  # a row of ReLUs all off has a standard deviation of 0: no std over it
            new_shape = shape
        elif kind == "binary":
            other = draw(st.sampled_from(two))
            ops = ["+", "*"] + (["-"] if other != name else []) + (["/"] if pool[other][1] else [])
            op = draw(st.sampled_from(ops))
            # a divisor of at least 1: x / x with x a sigmoid near 0 is right in rule and wrong in float64 (the
            # derivative's two terms, each huge, cancel), which told nothing of the rules
            code, new_shape = (f"{name} / ({other} + 1)" if op == "/" else f"{name} {op} {other}"), shape
            new_pos = op in "*/+" and pos and pool[other][1]
        elif kind == "broadcast" and len(shape) == 2:
            axis = draw(st.integers(0, 1))
            statistics = ["sum", "mean"] + (["std", "var"] if shape[axis] != 1 and name not in sparse else [])
            reduced = f"{name}.{draw(st.sampled_from(statistics))}({axis}, keepdim=True)"
            op = draw(st.sampled_from(["-", "*", "+"]))
            code, new_shape = f"{name} {op} {reduced}", shape
        elif kind == "reduce" and len(shape) == 2:
            axis = draw(st.integers(0, 1))
            keep = draw(st.booleans())
            fn = draw(st.sampled_from(["sum", "mean", "var", "std", "max", "logsumexp"]))
            code = f"{name}.{fn}({axis}, keepdim={keep})" + (".values" if fn == "max" else "")
            if fn in ("var", "std") and (shape[axis] == 1 or name in sparse):
                continue
            new_shape = tuple(1 if i == axis else s for i, s in enumerate(shape)) if keep else \
                tuple(s for i, s in enumerate(shape) if i != axis)
            new_pos = fn in ("var", "std")
        elif kind == "matmul" and len(shape) == 2 and shape[1] in DIMS:
            pname = f"P{k}"
            params[pname] = (shape[1], draw(st.sampled_from(DIMS[1:])))
            bias = draw(st.booleans())
            if bias:
                params[f"B{k}"] = (params[pname][1],)
            code = f"{name} @ {pname}" + (f" + B{k}" if bias else "")
            new_shape = (shape[0], params[pname][1])
        elif kind == "shape" and len(shape) == 2:
            fn = draw(st.sampled_from(["{}.T", "{}.transpose(0, 1)", "{}.flatten()", "{}.unsqueeze(0)",
                                       "{}.reshape({}.shape[1], {}.shape[0])"]))
            code = fn.format(name, name, name)
            new_shape = {"{}.flatten()": ("flat",), "{}.unsqueeze(0)": (1, *shape)}.get(fn, shape[::-1])
            new_pos = pos
        elif kind == "softmax" and len(shape) == 2:
            fn = draw(st.sampled_from(["F.softmax({}, 1)", "F.log_softmax({}, 1)", "F.softmax({}, dim=0)"]))
            code, new_shape, new_pos = fn.format(name), shape, "log_" not in fn
            if shape[0 if "dim=0" in fn else 1] == 1:
                sparse.add(out)  # a softmax over one element is 1 everywhere (its log 0): no std over it
        elif kind == "cat" and len(shape) == 2:
            other = draw(st.sampled_from(two))
            fn = draw(st.sampled_from(["torch.cat([{}, {}], 1)", "torch.stack([{}, {}], 0).sum(0)",
                                       "torch.cat([{}, {}], 0)", "torch.stack([{}, {}], 2)"]))
            code = fn.format(name, other)
            new_shape = {"torch.cat([{}, {}], 1)": (shape[0], "cat"), "torch.cat([{}, {}], 0)": ("cat", shape[1]),
                         "torch.stack([{}, {}], 2)": (*shape, 2)}.get(fn, shape)
        elif kind == "mask" and shape == ("n", "b"):
            other = draw(st.sampled_from(two))
            fn = draw(st.sampled_from(["{}.masked_fill(M > 0, 0.0)", "torch.where(M > 0, {}, {})",
                                       "{}.masked_fill(M[:1] > 0, -1.5)"]))
            code, new_shape = fn.format(name, other), shape
            if "masked_fill" in fn:
                sparse.add(out)  # a column filled whole has a standard deviation of 0: no std over it
        elif kind == "power":
            exponent = draw(st.sampled_from(["2", "3"] + (["-0.5", "-1", "0.5"] if pos else [])))
            code, new_shape, new_pos = f"{name} ** {exponent}", shape, pos or exponent == "2"
        elif kind == "embed" and shape == ("n", "b"):
            code, new_shape = f"C0[I].view(C0[I].shape[0], -1) * {name}.mean()", ("n", "2a")
        elif kind == "index" and len(shape) == 2:
            code = draw(st.sampled_from([f"{name}[:, 0]", f"{name}[range({name}.shape[0]), 0]"]
                                        # not of a slice: its rows, n - 2, would be taken for n - 1's
                                        + ([f"{name}[1:]"] if shape[0] not in (1, "m1") else [])))
            new_shape = {f"{name}[:, 0]": (shape[0],), f"{name}[1:]": ("m1", shape[1])}.get(code, (shape[0],))
        elif kind == "batched" and len(shape) == 3:
            three = [n for n in two if n != name] or [name]
            options = ["{x}.permute(2, 0, 1)", "{x}.transpose(1, 2)", "{x}.sum(0)", "{x}.mean((0, 1), keepdim=True)",
                       "{x} @ {y}.transpose(1, 2)"] + (["{x} @ P{k}"] if shape[2] in DIMS else [])
            fn = draw(st.sampled_from(options))
            code = fn.format(x=name, y=draw(st.sampled_from(three)), k=k)
            if fn == "{x} @ P{k}":
                params[f"P{k}"] = (shape[2], draw(st.sampled_from(DIMS[1:])))
            new_shape = {"{x}.permute(2, 0, 1)": (shape[2], shape[0], shape[1]),
                         "{x}.transpose(1, 2)": (shape[0], shape[2], shape[1]), "{x}.sum(0)": shape[1:],
                         "{x}.mean((0, 1), keepdim=True)": (1, 1, shape[2]),
                         "{x} @ {y}.transpose(1, 2)": (shape[0], shape[1], shape[1]),
                         "{x} @ P{k}": (shape[0], shape[1], params.get(f"P{k}", (0, 0))[1])}[fn]
        elif kind == "whole" and shape:
            spread = ["{}.std()", "{}.var()"] if len(shape) > 1 and name not in sparse else []
            fn = draw(st.sampled_from(["{}.sum()", "{}.mean()", *spread]))
            code, new_shape = fn.format(name), ()
        elif kind == "ce" and shape == ("n", "b"):
            code, new_shape = f"F.cross_entropy({name}, T)", ()
        elif kind == "norm" and len(shape) == 2 and all(s in DIMS for s in shape) and name not in sparse:
            fn = draw(st.sampled_from(["F.layer_norm({x}, ({x}.shape[1],))", "F.layer_norm({x}, ({x}.shape[1],), L{k})",
                                       "F.batch_norm({x}, None, None, L{k}, B{k}, training=True)",
                                       "F.layer_norm({x}, {x}.shape[1:], L{k}, B{k}, eps=1e-3)",
                                       "torch.einsum('ij,jk->ik', {x}, P{k})", "torch.einsum('ij,ik->jk', {x}, {x})"]))
            code = fn.format(x=name, k=k)
            for prefix in "LBP":
                if f"{prefix}{k}" in code:
                    params[f"{prefix}{k}"] = (shape[1], "c") if prefix == "P" else (shape[1],)
            new_shape = (shape[0], "c") if f"P{k}" in code else (shape[1], shape[1]) if "ik->jk" in code else shape
        elif kind == "pair" and len(shape) <= 2:
            other = draw(st.sampled_from(two))
            # A tie splits autograd's gradient in halves, where no course writes one; two tensors of one lineage
            # tie wherever an op kept its input (a masked_fill, a ReLU), hence the shift.
            fn = draw(st.sampled_from(["F.mse_loss({}, {})", "F.mse_loss({}, {}, reduction='sum')"]
                                      + (["torch.maximum({}, {} + 0.5)", "torch.minimum({}, {} - 0.5)"]
                                         if other != name else [])))
            code = fn.format(name, other)
            new_shape = () if "mse" in fn else shape
        elif kind == "vector" and len(shape) == 2 and all(s in DIMS for s in shape):
            side = draw(st.sampled_from([0, 1]))
            params[f"V{k}"] = (shape[side],)
            code = f"V{k} @ {name}" if side == 0 else f"{name} @ V{k}"
            new_shape = (shape[1 - side],)
        else:
            continue
        lines.append(f"{out} = {code}")
        pool[out] = (new_shape, new_pos)
        unused -= {n for n in pool if _reads(code, n)}
        unused.add(out)
    weights = {name: f"R{i}" for i, name in enumerate(sorted(unused))}
    loss = " + ".join(f"({name} * {weight}).sum()" for name, weight in weights.items())
    for name, weight in weights.items():
        data[weight] = ("like", name)
    lines.append(f"loss = {loss}")
    params = {k: v for k, v in params.items() if any(_reads(line.split("=", 1)[1].strip(), k) for line in lines)}
    return lines, params, data


def _reads(code: str, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(ast.parse(code)))


def _draw_inputs(lines, params, data, sizes: dict, seed: int) -> dict:
    """Parameters and data at `sizes`; a weight `R` takes the shape of the tensor it weighs, from a forward
    run without the loss line."""
    generator = torch.Generator().manual_seed(seed)

    def concrete(shape):
        return tuple(sizes[s] if isinstance(s, str) else s for s in shape)

    inputs = {k: torch.randn(concrete(s), generator=generator, dtype=torch.float64) for k, s in params.items()}
    inputs["X"] = torch.randn(sizes["n"], sizes["a"], generator=generator, dtype=torch.float64)
    inputs["I"] = torch.randint(0, sizes["c"], (sizes["n"], 2), generator=generator)
    inputs["I"][:2] = torch.tensor([[0], [1]])  # two rows apart in every column: a lookup's std is never 0
    inputs["M"] = torch.randn(sizes["n"], sizes["b"], generator=generator, dtype=torch.float64)
    inputs["T"] = torch.randint(0, sizes["b"], (sizes["n"],), generator=generator)
    head = _network("\n".join(lines[:-1]), tuple(params), ("X", "I", "M", "T"))
    values = head.forward({k: inputs[k] for k in params}, {k: inputs[k] for k in ("X", "I", "M", "T")})
    for weight, (_, name) in ((k, v) for k, v in data.items() if k.startswith("R")):
        inputs[weight] = torch.randn(values[name].shape, generator=generator, dtype=torch.float64)
    return inputs


def _constant_column(network: Network, inputs: dict) -> bool:
    """A forward value with a column of one value, under a std that reads it: autograd's std of 0 passes that
    term's gradient as 0, the closed form divides 0 by 0 (a masked_fill of whole columns, drawn now and then)."""
    if not any(".std(" in step.code or ".var(" in step.code for step in network.steps):
        return False
    values, _ = _forward(network, inputs)
    return any(isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() == 2 and v.shape[0] > 1
               and bool((v.std(0) == 0).any()) for v in values.values())


def _derived_equal_autograd(drawn):
    lines, params, data = drawn
    network = _network("\n".join(lines), tuple(params), tuple(data))
    configurations = [derive.Configuration(_draw_inputs(lines, params, data, sizes, seed), Sizes(**sizes))
                      for seed, sizes in enumerate(SIZE_VALUES[:2])]
    assume(not any(_constant_column(network, _draw_inputs(lines, params, data, sizes, seed))
                   for seed, sizes in [*enumerate(SIZE_VALUES[:2]), *((10 + k, v) for k, v in enumerate(SIZE_VALUES))]))
    gradients = derive.derive(network, configurations)
    assert _refused(gradients) == [], "\n".join(lines)
    for seed, sizes in enumerate(SIZE_VALUES):
        inputs = _draw_inputs(lines, params, data, sizes, 10 + seed)
        values, true = _forward(network, inputs)
        # A row of ReLUs all off under a standard deviation divides by zero: no gradient to compare.
        assume(all(torch.isfinite(g).all() for g in true.values()))
        namespace = _run_all(gradients, values)
        for gradient in gradients:
            assert torch.allclose(namespace[gradient.name], true[gradient.name], rtol=1e-7, atol=1e-9), \
                ("\n".join(lines), gradient.source)
        for gradient in gradients:
            for slip in gradient.slips():
                # Computed from true upstream gradients, a slip may fail to run (a view of a gradient
                # that is not contiguous): that loses credit too. It never reaches another tensor.
                try:
                    _cell(slip.code, gradient.name, {**values, **true})
                except RuntimeError:
                    continue


_SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=6, derandomize=True, **_SETTINGS)
@given(forward_passes())
def test_random_forward_passes_equal_autograd(drawn):
    """Six forward passes, the same ones every run (the slow tier draws new ones)."""
    _derived_equal_autograd(drawn)


@pytest.mark.slow
@settings(max_examples=150, **_SETTINGS)
@given(forward_passes())
def test_many_random_forward_passes_equal_autograd(drawn):
    """New forward passes every run."""
    _derived_equal_autograd(drawn)


@pytest.mark.parametrize("function", list(ELEMENTWISE.values()), ids=list(ELEMENTWISE))
def test_an_elementwise_function_is_one_entry_every_view_reads(function):
    """Its rule is the rule table's, its words the grammar's, and the derivative the judge reads at other
    tensors (and its factor, where it has one) is autograd's: one entry, no second copy to drift."""
    assert rules.OPERATIONS[function.name].calls == (function.name,)
    assert function.grammar in rules.GRAMMAR[rules.FAMILIES.index(rules.ELEMENTWISE_FAMILY)].split(", ")
    x = torch.linspace(0.1, 3.0, 7, dtype=torch.float64, requires_grad=True)
    y = getattr(torch, function.name, None) or getattr(torch.nn.functional, function.name)
    y = y(x)
    (autograd,) = torch.autograd.grad(y.sum(), x)
    x, y = x.detach(), y.detach()
    assert torch.allclose(function.rule.derivative(x, y), autograd)
    if function.factor is not None:  # written with the input or the output, as its note says
        assert any(torch.allclose(function.factor.fn(at), autograd) for at in (x, y)), function.factor.shown


# ------------------------------------------------------------------------------- what courses write

def test_each_cell_runs_on_autograds_upstream_gradients():
    """nanoGPT's heads, a view then a transpose (twice): the derived backward viewed a gradient the derivation's
    own upstream gradient left transposed in memory, and the grader's, laid out otherwise, refused the view: a
    raw traceback in `exercise check`. Each cell here reads upstream gradients laid out as autograd does and as
    the wire does (contiguous)."""
    text = """
q = X @ Wq
qh = q.view(q.shape[0], q.shape[1], 2, -1).transpose(1, 2)
att = qh @ qh.transpose(-2, -1)
y = att @ qh
yc = y.transpose(1, 2).contiguous().view(q.shape)
yh = yc.view(q.shape[0], q.shape[1], 2, -1).transpose(1, 2)
yt = yh.transpose(1, 2).contiguous().view(q.shape)
loss = (yt @ Wo * R).sum()
"""
    network = Network.parse(text, parameters=("Wq", "Wo"), data=("X", "R"), sizes={"n": "X.shape[0]"})

    def inputs(n, t, c, v, seed):
        generator = torch.Generator().manual_seed(seed)
        return {k: torch.randn(*s, generator=generator, dtype=torch.float64)
                for k, s in {"Wq": (c, c), "Wo": (c, v), "X": (n, t, c), "R": (n, t, v)}.items()}
    gradients = derive.derive(network, [derive.Configuration(inputs(3, 4, 6, 5, 0), Sizes(n=3)),
                                        derive.Configuration(inputs(2, 3, 4, 7, 1), Sizes(n=2))])
    values, true = _forward(network, inputs(4, 5, 8, 3, 2))
    for upstream in (true, {k: v.contiguous() for k, v in true.items()}):  # as autograd and the wire lay them out
        for gradient in gradients:
            assert torch.allclose(_cell(gradient.code, gradient.name, {**values, **upstream}), true[gradient.name],
                                  **TOL), gradient.source


def test_the_explanations_say_something_in_the_sizes_words():
    """A line that only names a tensor was explained with nothing (`# flat = windows: .`); a dimension of two
    sizes multiplied was `?`; a batched transpose was written `.T` and a transpose of a transpose kept both."""
    text = """
windows = X @ W
flat = windows
att = flat @ flat.transpose(-2, -1)
both = torch.cat([att, att, att], 2).view(-1, 3 * n_t * n_t)
col = att.reshape(-1, 1) @ W3
loss = (both * R).sum() + (col * col).sum()
"""
    network = Network.parse(text, parameters=("W", "W3"), data=("X", "R"),
                            sizes={"n_b": "X.shape[0]", "n_t": "X.shape[1]", "c": "W.shape[0]"})

    def inputs(b, t, c, seed):
        generator = torch.Generator().manual_seed(seed)
        return {"W": torch.randn(c, 4, generator=generator, dtype=torch.float64),
                "W3": torch.randn(1, 2, generator=generator, dtype=torch.float64),
                "X": torch.randn(b, t, c, generator=generator, dtype=torch.float64),
                "R": torch.randn(b, 3 * t * t, generator=generator, dtype=torch.float64)}
    gradients = {g.name: g.source for g in derive.derive(
        network, [derive.Configuration(inputs(2, 3, 5, 0), Sizes(n_b=2, n_t=3, c=5)),
                  derive.Configuration(inputs(4, 5, 3, 1), Sizes(n_b=4, n_t=5, c=3))])}
    assert "# flat = windows: a copy passes its gradient unchanged." in gradients["dwindows"]
    assert "(1, n_b*n_t*n_t)" in gradients["dW3"], gradients["dW3"]
    assert "?" not in "".join(gradients.values())
    assert ".T " not in gradients["dflat"] and "flat.transpose(-2, -1)" in gradients["dflat"], gradients["dflat"]
    assert "transpose(-2, -1).transpose(-2, -1)" not in "".join(gradients.values())
    assert "datt = " in gradients["datt"] and ":n_t + n_t" not in gradients["datt"], gradients["datt"]


def test_a_transposed_product_and_a_count_are_written_as_a_teacher_writes_them():
    """A product transposed back was written `(q.transpose(-2, -1) @ g).transpose(1, 2)` and `(x.T @ dz).T`, where
    a teacher writes the transposes' product the other way round; a mean over (n, k) divided by `h.numel()` where
    the sizes' names say it. Each derived cell is proven against autograd by the derivation itself."""
    text = """
q = X @ Wq
k = X @ Wk
scores = q @ k.transpose(1, 2) * c ** -0.5
out = scores @ V
flat = out.view(n, -1) @ P.T
loss = F.mse_loss(torch.tanh(flat), T)
"""
    network = Network.parse(text, parameters=("Wq", "Wk", "P"), data=("X", "V", "T"),
                            sizes={"n": "X.shape[0]", "c": "X.shape[2]", "k_out": "P.shape[0]"})

    def inputs(n, t, c, h, k, seed):
        generator = torch.Generator().manual_seed(seed)
        return {key: torch.randn(*shape, generator=generator, dtype=torch.float64) for key, shape in
                {"Wq": (c, h), "Wk": (c, h), "P": (k, t * h), "X": (n, t, c), "V": (n, t, h), "T": (n, k)}.items()}
    gradients = {g.name: g.code for g in derive.derive(
        network, [derive.Configuration(inputs(2, 3, 4, 5, 6, 0), Sizes(n=2, c=4, k_out=6)),
                  derive.Configuration(inputs(3, 4, 5, 2, 7, 1), Sizes(n=3, c=5, k_out=7))])}
    assert gradients["dk"] == "dk = c ** -0.5 * dscores.transpose(-2, -1) @ q\n", gradients["dk"]
    assert gradients["dP"] == "dP = dflat.T @ out.view(n, -1)\n", gradients["dP"]
    assert gradients["dflat"].endswith(" * (torch.tanh(flat) - T) / (n * k_out)\n"), gradients["dflat"]
    assert ").T" not in "".join(gradients.values()) and ").transpose" not in "".join(gradients.values())


def test_the_mean_of_an_expression_counts_the_tensor_it_has_the_shape_of():
    """`((out - T) ** 2).mean()` was answered `2 * (out - T) / ((out - T) ** 2).numel()`, where a teacher divides by
    out.numel() (an instructor trial's softplus network)."""
    network = Network.parse("out = X @ W\nloss = ((out - T) ** 2).mean()\n", parameters=("W",), data=("X", "T"))

    def inputs(n, a, b, seed):
        generator = torch.Generator().manual_seed(seed)
        return {key: torch.randn(*shape, generator=generator, dtype=torch.float64)
                for key, shape in {"W": (a, b), "X": (n, a), "T": (n, b)}.items()}
    gradients = {g.name: g.code for g in derive.derive(
        network, [derive.Configuration(inputs(5, 3, 4, 0), Sizes()),
                  derive.Configuration(inputs(7, 2, 6, 1), Sizes())])}
    assert gradients["dout"] == "dout = 2 * (out - T) / out.numel()\n", gradients["dout"]


def test_a_normalization_line_is_answered_as_a_teacher_writes_it():
    """F.layer_norm's answer was one line of 300 characters that spelled the normalized value out three times;
    a teacher computes rstd and xhat first, then writes the one expression with them (a name the network has
    is never reused)."""
    text = """
h = X @ W
hhat = F.layer_norm(h, (h.shape[1],), g, b)
z = F.batch_norm(torch.tanh(hhat), None, None, training=True)
loss = (z * R).sum()
"""
    network = Network.parse(text, parameters=("W", "g", "b"), data=("X", "R"))

    def inputs(n, c, k, seed):
        generator = torch.Generator().manual_seed(seed)
        return {key: torch.randn(*shape, generator=generator, dtype=torch.float64) for key, shape in
                {"W": (c, k), "g": (k,), "b": (k,), "X": (n, c), "R": (n, k)}.items()}
    configurations = [derive.Configuration(inputs(5, 3, 4, 0), Sizes()),
                      derive.Configuration(inputs(6, 4, 5, 1), Sizes())]
    gradients = {g.name: g for g in derive.derive(network, configurations)}
    assert gradients["dh"].code == (
        "hrstd = (h.var(1, keepdim=True, correction=0) + 1e-05) ** -0.5\n"
        "hhat_ = (h - h.mean(1, keepdim=True)) * hrstd\n"
        "dh = hrstd * (g * dhhat - (g * dhhat).mean(1, keepdim=True) - hhat_ * (g * dhhat * hhat_).mean(1, "
        "keepdim=True))\n"), gradients["dh"].code
    assert gradients["dg"].code.endswith("\ndg = (hhat_ * dhhat).sum(0)\n"), gradients["dg"].code
    assert "hhat_" not in gradients["dh"].reads and "hrstd" not in gradients["dg"].reads
    assert "xrstd = " in gradients["dhhat"].code  # an input with no name of its own: x
    assert max(len(line) for g in gradients.values() for line in g.code.splitlines()) < 125
    # a slip is written with the same names, and still runs
    slips = {slip.name: slip.code for slip in gradients["dh"].slips()}
    assert "norm-no-mean" in slips and "hhat_ = " in slips["norm-no-mean"]


def test_a_width_written_from_sizes_is_said_in_their_words():
    """A feed-forward's 4 * d and a concatenation's d + e are sizes a teacher writes so: the explanations say
    (n, 4*d) and (n, d+e), not (n, ?)."""
    text = "h = X @ W\nboth = torch.cat([h, X], 1)\nr = both @ V\nloss = (r * r).sum()\n"
    network = Network.parse(text, parameters=("W", "V"), data=("X",),
                            sizes={"n": "X.shape[0]", "d": "X.shape[1]"})

    def inputs(n, d, seed):
        generator = torch.Generator().manual_seed(seed)
        return {"W": torch.randn(d, 4 * d, generator=generator, dtype=torch.float64),
                "V": torch.randn(5 * d, 3, generator=generator, dtype=torch.float64),
                "X": torch.randn(n, d, generator=generator, dtype=torch.float64)}
    gradients = {g.name: g.source for g in derive.derive(
        network, [derive.Configuration(inputs(6, 3, 0), Sizes(n=6, d=3)),
                  derive.Configuration(inputs(4, 5, 1), Sizes(n=4, d=5))])}
    assert "?" not in "".join(gradients.values()), gradients
    assert "(n, 4*d)" in "".join(gradients.values()) and "(n, 5*d)" in "".join(gradients.values()), gradients


def test_a_tensor_times_itself_is_its_square_in_one_line():
    """An L2 penalty `(W * W).sum()` gives one term, 2 * W, as a teacher writes it, not two uses of W."""
    network = _network("h = X @ W\nreg = 0.5 * (W * W).sum()\nloss = h.sum() + reg\n")
    inputs = {"W": torch.randn(3, 4, dtype=torch.float64), "X": torch.randn(5, 3, dtype=torch.float64)}
    gradients = {g.name: g for g in derive.derive(network, [derive.Configuration(inputs, Sizes(n=5))])}
    source = gradients["dW"].source
    assert "used twice" in source and source.count("dW +=") == 1 and "2 * W" in source, source
    assert "missed-factor" in {s.name for s in gradients["dW"].slips()}


def test_a_divisor_that_is_a_product_is_written_in_parentheses():
    """An instructor trial's attention: `scores = q @ kT / (tau * C ** 0.5)` was explained as "local derivative
    1/tau * C ** 0.5", which reads as the square root of C over tau."""
    network = Network.parse("s = X @ W / (2.0 * C ** 0.5)\nloss = (s ** 2).sum()\n", parameters=("W",), data=("X",),
                            sizes={"C": "W.shape[1]"})
    g = torch.Generator().manual_seed(0)
    configurations = [derive.Configuration({"X": torch.randn(3, 2, dtype=torch.float64, generator=g),
                                            "W": torch.randn(2, c, dtype=torch.float64, generator=g)},
                                           Sizes()) for c in (3, 5)]
    [dw] = [g for g in derive.derive(network, configurations) if g.name == "dW"]
    assert "local derivative 1/(2.0 * C ** 0.5)" in dw.source.replace("\n# ", " "), dw.source
