"""The short form of an exercise (grader/authoring/define.py): what it derives from the instructor's few lines."""
from __future__ import annotations

import pytest
import torch

from grader import derive
from grader import exercise as ex
from grader.authoring.define import DefinitionError, exercise
from grader.judge import oracle
from helpers.paths import ROOT

FORWARD = """
e = E[X]
h = e @ W + b
a = torch.relu(h)
z = a + h
loss = ((z - Y) ** 2).sum() / n
"""
PARAMETERS = """
E = randn(vocab, dim)
W = randn(dim, hidden) / dim ** 0.5
b = randn(hidden) * 0.1
"""
DATA = """
X = randint(vocab, (n,))
Y = randn(n, hidden)
"""
SIZES = {"n": (8, (6, 30)), "vocab": (5, (2, 12)), "dim": 3, "hidden": (4, (2, 10))}


def tiny(**changes):
    return exercise(**{"name": "tiny", "title": "tiny", "sizes": SIZES, "parameters": PARAMETERS, "data": DATA,
                       "forward": FORWARD, **changes})


def test_the_answers_come_in_the_order_a_student_backpropagates():
    value = tiny(fused={"dh": "z"}, backward=True)
    assert value.atomic == ("dz", "da", "dh", "de", "dW", "db", "dE")
    assert [a.grade_id for a in value.answers if a.kind == ex.FUSED] == ["ex2_dh"]
    assert value.by_grade_id["ex2_dh"].upstream == ("dz",) and value.by_grade_id["ex2_dh"].sink == "z"
    assert value.training.grade_id == "ex3_training"
    assert [a.grade_id for a in value.answers if a.kind == ex.FUNCTION] == ["ex3_dE", "ex3_dW", "ex3_db"]
    assert value.parts[3] == "Exercise 3: manual_backward and training"


def test_sizes_draws_and_the_lookup_repeat_an_index():
    value = tiny()
    assert dict(value.ranges) == {"n": (6, 30), "vocab": (2, 12), "hidden": (2, 10)}
    assert value.network.sizes == {"n": "X.shape[0]"}
    generator = torch.Generator().manual_seed(3)
    sizes = ex.Sizes(n=4, vocab=50, dim=3, hidden=2)
    data = value.batch(sizes, generator)
    assert data["X"].unique().numel() < 4, "an index repeats, so an overwriting lookup gradient fails"
    params = value.init(sizes, generator, torch.float64)
    assert value.sizes_of({**params, **data}) == sizes
    assert params["W"].dtype == torch.float64 and params["W"].shape == (3, 2)



def test_two_sizes_alike_at_the_lecture_are_each_read_from_their_own_dimension():
    """The instructor trial's transformer: a batch of 4 and heads of 4, their ranges from 2: both trial draws
    had them equal, and head_size was read from the batch's dimension, so every hidden configuration graded
    right answers wrong."""
    value = tiny(sizes={**SIZES, "n": (4, (2, 30)), "hidden": (4, (2, 10))},
                 forward=FORWARD.replace("sum() / n", "sum() / (n * hidden)"))
    assert value.network.sizes == {"n": "X.shape[0]", "hidden": "Y.shape[1]"}
    sizes = ex.Sizes(n=7, vocab=5, dim=3, hidden=2)
    generator = torch.Generator().manual_seed(0)
    assert value.sizes_of({**value.init(sizes, generator, torch.float64), **value.batch(sizes, generator)}) == sizes

def test_every_derived_answer_equals_autograd():
    value = tiny()
    config = derive.configurations(value)[1]
    params = {k: v.clone().requires_grad_() for k, v in config.inputs.items() if k in value.network.parameters}
    data = {k: v for k, v in config.inputs.items() if k in value.network.data}
    values = value.network.forward(params, data)
    for v in values.values():
        if isinstance(v, torch.Tensor) and v.requires_grad:
            v.retain_grad()
    values["loss"].backward()
    namespace = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in values.items()}
    namespace.update(torch=torch, F=torch.nn.functional)
    for gradient in derive.for_exercise(value):
        exec(gradient.code, namespace)  # noqa: S102 - the derived reference, in the test
        assert torch.allclose(namespace[gradient.name], values[gradient.name[1:]].grad), gradient.name


@pytest.mark.parametrize(("changes", "says"), [
    ({"forward": FORWARD.replace("a + h", "a + q")}, "reads q, which nothing before it defines"),
    ({"parameters": PARAMETERS.replace("randn(hidden)", "randn(hiden)")}, "`b = randn(hiden) * 0.1` fails"),
    ({"sizes": {**SIZES, "extra": (7, (2, 9))}}, "extra is no dimension of any parameter or data tensor"),
    # a second instructor trial's ordinal thresholds, one fewer than the classes: the way out said
    ({"sizes": {**SIZES, "K": (5, (3, 9))}, "data": DATA + "T = randn(n, K - 1)\n",
      "forward": FORWARD.replace("z = a + h", "z = a + h + T.sum()")},
     'T\'s dimension 1 is K-1 on every draw: give it a size of its own and compute K from it ("n_T": (4, (2, 8)), '
     '"K": "n_T + 1")'),
    ({"fused": {"dq": "z"}}, "fused: dq is no gradient of the exercise"),
    ({"points": {"dQ": 2}}, "points: dQ is no grade id"),
    ({"data": "X randint(vocab, (n,))"}, "data: not a step (name = expression)"),
    ({"forward": FORWARD.replace("z = a + h", "z = a + h\nh = h * 2")},
     "line `h = h * 2`: h is already an earlier line's intermediate; each line names a new intermediate"),
    ({"parameters": PARAMETERS + "unused = randn(hidden)\n"},
     "parameter 'unused' is read by no forward line, so its gradient is zero: use it or remove it"),
    ({"order": "dz da dh de dW db"}, "order: dE is missing (the gradients, in an order a student can compute them"),
    ({"order": "dz da dh de dW db dE dQ"}, "order: dQ is no gradient of the exercise"),
    ({"order": "dz da dh de dW dE dE"}, "db is missing; dE is named twice"),
    ({"order": "da dz dh de dW db dE"}, "da comes before dz, which it needs"),
    ({"hidden": {"first": "n <= vocbulary"}}, "hidden: first = 'n <= vocbulary' is no condition on the sizes"),
    ({"hidden": {"last": {"Q": 1e-3}}}, "hidden: last scales Q: give parameters (E, W, b)"),
    ({"hidden": {"middle": 1}}, "hidden: middle is no option"),
    ({"backward": "e h Q"}, "backward: Q is no data tensor or forward line"),
    ({"training": "X = randint(vocab, (steps, n))\nY = randn(steps, n, hidden)\n"}, "training: only a `backward`"),
    ({"backward": True, "training": "X = randint(vocab, (steps, n))\n"}, "training: draw exactly the data (X, Y)"),
    ({"backward": True, "training": "X = randint(vocab, (steps, n))\nY = randn(steps, m)\n"},
     "training: `Y = randn(steps, m)` fails"),
    ({"learning_rate": 0.01}, "learning_rate: only a `backward` function trains"),
    ({"backward": True, "learning_rate": 0}, "learning_rate: 0 is no learning rate (a number from 1e-6 to 10)"),
    ({"fused": {"dz": "h"}}, "fused: dz's block ends at 'h', which no line from z reaches: end it at a line computed "
                             "from z (loss) or at the loss (loss)"),
    ({"forward": FORWARD.replace("/ n", "/ n + math.log(2 * math.pi)")},
     "reads math, which nothing before it defines: write the number it gives (or a float size"),
    ({"parts": {5: "five"}}, "parts: 5 is no exercise of this one"),
    ({"backward_part": 4}, "backward_part: 4 numbers a manual_backward there is none of"),
    ({"mistakes": ex.Mistakes(rules={"hh": ex.Rule("the derivative of relu", "x", lambda x, y: (x > 0) * 1.0)})},
     "mistakes: a rule for 'hh', which is no forward line"),
    *(({"sizes": {**SIZES, "hidden": bad}}, f"sizes: hidden = {bad!r}: give a whole number of at least 1")
      for bad in ((4, (0, 2)), (4, (2.5, 12)), (4, (-3, 2)), (4, 2, 12), 0, (4, (9, 3)), (4, (2,)))),
    # A float is a hyperparameter (`reg`): in a shape it is the draw that fails, named with its line.
    ({"sizes": {**SIZES, "hidden": 2.5}}, "parameters: `W = randn(dim, hidden) / dim ** 0.5` fails at"),
    # Names the forward lines and answer cells use for torch.nn.functional and the draws.
    ({"sizes": {**SIZES, "F": 3}}, "sizes: F is a name the forward lines and answer cells use for "
                                   "torch.nn.functional: rename the size"),
    ({"sizes": {**SIZES, "C": "dim * nh"}}, "sizes: C = 'dim * nh' is no formula in the sizes before it: "
                                            "NameError: nh is no size before it"),
    ({"forward": FORWARD.replace("loss = ", "loss = 0 * h.sum(axis=0).sum() + ")},
     "forward: line `loss = 0 * h.sum(axis=0).sum() + "),
    ({"forward": FORWARD.replace("loss = ", "loss = 0 * h.sum(axis=0).sum() + ")}, "axis= is numpy's spelling: "
                                                                                  "write dim="),
    ({"forward": FORWARD.replace("z = a + h", "z = a +* h")}, "forward: line `z = a +* h` is not Python"),
    # An instructor's trial wrote CS231n's `reg` as a data line: "'float' object has no attribute 'dim'"
    ({"data": "X = randint(vocab, (n,))\nreg = 0.05\n"}, "data: `reg = 0.05` is a float, not a tensor: a number the "
                                                           "forward lines read is a size"),
    ({"forward": FORWARD.replace("z = a + h", "z = a + h\nw = z * 2")},
     "forward: line `w = z * 2`: no later line reads w, so it never reaches the loss (the last line, loss)"),
    ({"forward": FORWARD + "extra = loss * 2\n", "order": "dz da dh de dW db dE"},
     "order: dloss is missing (the gradients, in an order a student can compute them: dloss dz"),
    ({"backward": True, "fused": {"dh": "z"}, "backward_part": 2}, "backward_part: 2 is taken: exercise 1 and the"),
])
def test_a_slip_is_one_clear_error(changes, says):
    with pytest.raises(DefinitionError, match=None) as caught:
        tiny(**changes)
    assert says in str(caught.value), caught.value


def test_the_lecture_options_order_hidden_configurations_training_data_and_a_cache():
    """What the lecture's own file says beyond the forward pass (grader/exercises/makemore_mlp/lecture.py)."""
    value = tiny(order="dz da dh de db dW dE", fused={"dh": ("z", "the skip step")}, backward="X e h",
                 backward_part=4, hidden={"first": "n <= vocab", "last": {"W": 1e-3}},
                 training="X = randint(vocab, (steps, n))\nY = randn(steps, n, hidden)\n",
                 data="X = randint(vocab, (n,))\nY = randn(n, hidden) + randperm(n)[:, None]\n")
    assert value.atomic == ("dz", "da", "dh", "de", "db", "dW", "dE")
    assert value.by_grade_id["ex2_dh"].title == "the skip step"
    assert value.parts[2] == "Exercise 2: dh through the skip step in one step"  # its heading, not feedback's alone
    (function,) = value.functions
    assert function.cell == "ex4_backward" and function.arguments[1:] == (("cache", ("X", "e", "h")), "Y")
    assert value.training.grade_id == "ex4_training" and set(value.parts) == {1, 2, 4}
    small, large = ex.Sizes(n=6, vocab=9, dim=3, hidden=2), ex.Sizes(n=12, vocab=9, dim=3, hidden=2)
    assert value.hidden(0, 3, large) is None and value.hidden(0, 3, small) == {} == value.hidden(1, 3, large)
    assert value.hidden(2, 3, large) == {"W": 1e-3}
    plain, scaled = (value.init(small, torch.Generator().manual_seed(1), torch.float64, **options)
                     for options in ({}, {"W": 1e-3}))
    assert torch.equal(plain["W"] * 1e-3, scaled["W"]) and torch.equal(plain["E"], scaled["E"])
    steps = value.training.batches(small, torch.Generator().manual_seed(1), 5)
    assert steps["X"].shape == (5, 6) and steps["Y"].shape == (5, 6, 2)


def test_the_lecture_is_a_short_exercise_file():
    path = ROOT / "grader" / "exercises" / "makemore_mlp" / "lecture.py"
    text = path.read_text()
    assert "exercise(" in text and "Answer(" not in text and "def " not in text
    from grader.exercises.makemore_mlp import lecture

    assert ex.load("makemore-mlp") is lecture.EXERCISE


def test_the_gallery_wavenet_is_one_short_file_with_no_reference_answer():
    path = ROOT / "grader" / "exercises" / "gallery" / "wavenet.py"
    assert len(path.read_text().splitlines()) <= 60
    value = ex.load("wavenet")
    assert value.lecture["block"] == 8 and "block" not in value.ranges
    assert len(value.atomic) == len(value.network.parameters) + len(value.network.intermediates) - 1
    assert ex.problems(value) == []


@pytest.mark.parametrize("name", ["attention", "rnn"])
def test_the_gallery_attention_head_and_rnn_are_short_files_graded_from_derived_answers(name):
    path = ROOT / "grader" / "exercises" / "gallery" / f"{name}.py"
    assert len(path.read_text().splitlines()) <= 60
    value = ex.load(name)
    assert ex.problems(value) == []
    sources = {g.name: g.source for g in derive.for_exercise(value)}
    if name == "attention":
        assert "masked_fill" in sources["dscores"] and "dtril" not in sources
        generator = torch.Generator().manual_seed(0)
        truth = oracle.chain_gradients(value.network, value.init(value.lecture, generator),
                                       value.batch(value.lecture, generator))
        assert set(truth) == set(value.atomic), "the mask is a constant: autograd gives it no gradient"
        assert sources["demb"].count("demb +=") == 2, "emb feeds the query, the key and the value"
    else:
        assert sources["dWx"].count("dWx +=") == 2 and sources["dWh"].count("dWh +=") == 1, "sums over time"
        assert "dh1" in sources and "dh1" in sources["dWh"] + sources["dWx"]


def test_a_line_that_reads_no_parameter_is_a_constant_with_no_answer():
    value = tiny(forward="""
        e = E[X]
        keep = torch.ones(n, hidden)
        h = (e @ W + b) * keep
        loss = ((h - Y) ** 2).sum() / n
    """)
    assert "dkeep" not in value.grade_ids and {"dh", "de", "dW", "db", "dE"} <= set(value.grade_ids)


HEADS = dict(
    name="heads", title="nanoGPT's heads",
    sizes={"n": (3, (2, 9)), "T": (4, (2, 9)), "nh": 2, "hs": (3, (2, 8)), "C": "nh * hs", "V": (5, (3, 12)),
           "reg": 1e-3, "k": 3},
    parameters="""
        Wq = randn(C, C) / C**0.5
        Wc = randn(k * C, C) / k
        Wo = randn(C, V)
    """,
    data="""
        X = randn(n, T, C)
        Y = randint(V, (n, T))
        M = rand(n, T, 1) < 0.5
    """,
    forward="""
        q = X @ Wq
        qh = q.view(n, T, nh, hs).transpose(1, 2)
        att = qh @ qh.transpose(-2, -1) * hs**-0.5
        y = att @ qh
        yc = y.transpose(1, 2).contiguous().view(n, T, C)
        w = torch.cat([yc, yc, yc], 2) @ Wc
        m = w.masked_fill(M, 0.0)
        logits = m @ Wo
        data_loss = F.cross_entropy(logits.view(-1, V), Y.view(-1))
        loss = data_loss + reg * (Wq * Wq).sum()
    """)


def test_what_courses_write_defines_and_derives():
    """A float hyperparameter (`reg`), a size computed from others (`C = nh * hs`, and `hs` read back from it), a
    constant used only in products (`k`), a comparison in a data line (which failed with KeyError: '__import__'),
    a view then a transpose: the exercise loads, its sizes read back from its tensors, and every derived answer
    equals autograd's with autograd's upstream gradients, as the grader hands them."""
    value = exercise(**HEADS)
    assert value.network.sizes == {"n": "X.shape[0]", "T": "X.shape[1]", "C": "X.shape[2]", "V": "Wo.shape[1]",
                                   "nh": "2", "reg": "0.001", "hs": "C // nh"}
    for configuration in derive.configurations(value, 3):
        assert value.sizes_of(configuration.inputs) == configuration.sizes
        params = {k: v.clone().requires_grad_() for k, v in configuration.inputs.items()
                  if k in value.network.parameters}
        data = {k: v for k, v in configuration.inputs.items() if k in value.network.data}
        values = value.network.forward(params, data)
        names = [k for k in value.network.intermediates if k != "loss"] + list(params)
        true = dict(zip(names, torch.autograd.grad(values["loss"], [values[k] for k in names]), strict=True))
        given = {**{k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in values.items()},
                 **{"d" + k: g for k, g in true.items()}, "torch": torch, "F": torch.nn.functional}
        for gradient in derive.for_exercise(value):
            namespace = dict(given)
            exec(gradient.code, namespace)  # noqa: S102 - the derived reference, in the test
            assert torch.allclose(namespace[gradient.name], true[gradient.name[1:]]), gradient.name


def test_a_forward_line_torch_refuses_is_named_with_its_fix():
    """CS231n's ReLU, np.maximum(0, x), written torch.maximum(h, 0): torch wants two tensors. `exercise check`
    said only the TypeError; it names the line and the fix."""
    value = tiny(forward=FORWARD.replace("torch.relu(h)", "torch.maximum(h, 0)"))
    config = derive.configurations(value)[0]
    params = {k: v for k, v in config.inputs.items() if k in value.network.parameters}
    data = {k: v for k, v in config.inputs.items() if k in value.network.data}
    said = value.network.failing_line(params, data)
    assert said.startswith("line `a = torch.maximum(h, 0)` fails: TypeError: ")
    assert said.endswith("; torch.maximum takes two tensors: write x.clamp(min=0) for a ReLU")


def test_float32_data_is_drawn_in_float64_so_no_forward_line_meets_both():
    """An instructor trial's targets `randint(2, (n, 1)) * 1.0` (torch's default float32) met float64 in
    F.binary_cross_entropy, and the error named neither the data nor the fix: they are now float64, as every
    float the exercise draws is."""
    value = tiny(data=DATA.replace("Y = randn(n, hidden)", "Y = randint(2, (n, hidden)) * 1.0"),
                 forward=FORWARD.replace("loss = ((z - Y) ** 2).sum() / n",
                                         "p = torch.sigmoid(z)\nloss = F.binary_cross_entropy(p, Y)"))
    generator = torch.Generator().manual_seed(0)
    params = value.init(value.lecture, generator, torch.float64)
    batch = value.batch(value.lecture, generator)
    assert batch["Y"].dtype == torch.float64 and value.network.failing_line(params, batch) == ""


def test_a_data_line_may_compare_a_tensor_with_a_number():
    """`M = rand(n, m) < 0.5` failed with KeyError: '__import__' (torch imports a module of its own there)."""
    value = tiny(data=DATA + "M = rand(n, hidden) < 0.5\n", forward=FORWARD.replace("z = a + h", "z = a + h * M"))
    assert value.batch(value.lecture, torch.Generator().manual_seed(0))["M"].dtype == torch.bool


def test_a_float32_data_line_is_drawn_in_float64_and_its_fused_block_derives():
    """An instructor trial's labels, `(rand(n, 1) < 0.5) * 1.0`, are torch's default float32: a fused block over
    them stopped exercise check and course init with "Float did not match Double"."""
    bce = "p = torch.sigmoid(z)\nloss = -(Y * p.log() + (1 - Y) * (1 - p).log()).mean()"
    value = tiny(data="X = randint(vocab, (n,))\nY = (rand(n, hidden) < 0.5) * 1.0\n",
                 forward=FORWARD.replace("loss = ((z - Y) ** 2).sum() / n", bce), fused={"dz": "loss"})
    assert value.batch(value.lecture, torch.Generator().manual_seed(0))["Y"].dtype == torch.float64
    closed = derive.closed_forms(value)["ex2_dz"]
    assert not isinstance(closed, str) and "binary cross-entropy" in closed.what, closed


def test_the_notebooks_call_of_a_whole_backward_gives_what_its_signature_takes():
    """A data tensor the cache holds (a variant written out keeps Xb there) is no argument of its own: the
    check cell called manual_backward(params, cache, Yb) with Xb too, a TypeError in every such course's
    notebook (exercise check's Run All found it)."""
    import ast

    from grader.authoring import skeleton
    from grader.course import choice

    namespace: dict = {}
    exec(choice.exercise_file("relu-layernorm"), namespace)  # noqa: S102 - the package's own exercise file
    written = namespace["EXERCISE"]
    function = written.functions[0]
    assert "Xb" in dict(a for a in function.arguments if not isinstance(a, str))["cache"]
    call = next(node for cell in skeleton._function_cells(written, function) if "grads = None" in cell
                for node in ast.walk(ast.parse(cell))
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == function.name)
    assert len(call.args) == len(function.arguments) == 3
    assert ast.unparse(call.args[2]) == "Yb"


def test_a_hyperparameter_is_said_to_be_written_in_the_function():
    """An instructor's trial: manual_backward may use only its arguments, so reading the notebook's `reg` was a
    NameError, and nothing said where its value should come from."""
    from grader.authoring import skeleton

    value = tiny(sizes={**SIZES, "reg": 0.01}, forward=FORWARD.replace("/ n", "/ n + reg * (W * W).sum()"),
                 backward=True)
    assert "(`reg = 0.01`) is the same on every network and is no argument: write its value in the function" in \
        skeleton.prose(value)
    assert "is no argument" not in skeleton.prose(tiny(backward=True))
    # and called a hyperparameter, not a size (an instructor trial's notebook said "the sizes `reg`"), with the
    # exercise's own first answer as the blank cell's example (its `dX = None` read as the data tensor X's)
    prose = " ".join(skeleton.prose(value).replace("\n# ", "\n").split())
    assert "the size `n`, the hyperparameter `reg`, the forward pass's intermediates" in prose, prose
    assert f"Each answer cell starts as `{value.answers[0].variable} = None # TODO`" in prose


def test_a_function_that_reads_a_hyperparameter_is_told_to_write_its_value():
    """A second instructor trial's manual_backward read the notebook's T: the NameError said only what the function
    may use, where the notebook's prose says to write the value in."""
    from types import SimpleNamespace

    from grader.judge.compare import outcome_text

    value = tiny(sizes={**SIZES, "reg": 0.01}, forward=FORWARD.replace("/ n", "/ n + reg * (W * W).sum()"),
                 backward=True)
    answer = next(a for a in value.answers if a.kind == ex.FUNCTION)
    for error, said in (("name 'reg' is not defined", True), ("name 'zz' is not defined", False)):
        outcome = SimpleNamespace(status="error", detail={"error_type": "NameError", "error": error, "line": 2})
        feedback = outcome_text(outcome, answer, exercise=value, public=False).feedback
        assert ("reg is a number of the network, the same everywhere: write its value (0.01) in the function"
                in feedback) is said, feedback


def test_a_size_no_forward_line_reads_is_shown_as_a_shape_the_notebook_has():
    """The notebook binds only the sizes its forward lines read: the others are said as a tensor's shape, in its
    prose and in feedback, and an exercise's own mistakes may name them otherwise (the lecture's setup binds
    `vocab_size`)."""
    from grader.authoring import skeleton
    from grader.exercises.makemore_mlp.mistakes import SHOWN

    value = tiny()
    assert value.mistakes.shown == {"vocab": "E.shape[0]", "dim": "E.shape[1]", "hidden": "Y.shape[1]"}
    prose = " ".join(skeleton.prose(value).split())
    assert "Drawn at the notebook's sizes (n = 8, E.shape[0] = 5, E.shape[1] = 3, Y.shape[1] = 4)" in prose
    assert "take them from a size above or from a tensor's shape" in prose
    # A loss that is a mean binds no size: the rule says where one is (an instructor trial's word2vec)
    unbound = tiny(forward=FORWARD.replace("loss = ((z - Y) ** 2).sum() / n", "loss = ((z - Y) ** 2).mean()"))
    assert not unbound.network.sizes
    assert "take them from a tensor's shape (`" in " ".join(skeleton.prose(unbound).split())
    assert tiny(mistakes=ex.Mistakes(shown=SHOWN)).mistakes.show("vocab") == "vocab_size"


def test_a_loss_terms_fixed_weight_is_never_randomised():
    """An instructor trial's symmetric InfoNCE, `loss = 0.5 * (loss_ab + loss_ba)`: `dsim_t = 0.5 * (softmax -
    one_hot) / n`, as textbooks write it, got half credit, its 0.5 checked as a random upstream gradient."""
    value = tiny(forward=FORWARD.replace("loss = ((z - Y) ** 2).sum() / n",
                                         "fit = ((z - Y) ** 2).sum() / n\nsize = (z * z).mean()\n"
                                         "loss = 0.5 * (fit - size / 4)"))
    assert value.network.constant_gradients == {"loss": 1.0, "fit": 0.5, "size": -0.125}
    assert value.network.unit_gradients == {"loss"}
    assert value.by_grade_id["dz"].local_upstream == (), "both of z's readers have fixed gradients"
    assert value.by_grade_id["da"].local_upstream == ("dz",)
    # Another's CS231n SVM, the L2 penalty written in the loss's line (`loss = data_loss + reg * (W * W).sum()`):
    # data_loss's gradient is 1 all the same, and `dmargins = full_like(margins, 1 / N)` got half credit.
    inline = tiny(forward=FORWARD.replace("loss = ((z - Y) ** 2).sum() / n",
                                          "fit = ((z - Y) ** 2).sum() / n\nloss = fit + 0.01 * (W * W).sum()"))
    assert inline.network.constant_gradients == {"loss": 1.0, "fit": 1.0}
    # a term the other terms read too has no fixed weight
    reread = tiny(forward=FORWARD.replace("loss = ((z - Y) ** 2).sum() / n",
                                          "fit = ((z - Y) ** 2).sum() / n\nloss = fit + fit ** 2"))
    assert reread.network.constant_gradients == {"loss": 1.0}


def test_a_float_hyperparameter_equal_to_one_names_no_dimension():
    """An instructor trial's Huber delta of 1.0: the derived comments read `b_out (delta,)` and `(N, delta)`."""
    from grader.authoring import skeleton

    value = tiny(sizes={**SIZES, "delta": 1.0}, parameters=PARAMETERS + "v = randn(hidden, 1)\nc = randn(1)\n",
                 forward=FORWARD.replace("loss = ((z - Y) ** 2).sum() / n",
                                         "out = z @ v + c\nloss = (delta * (out - Y[:, :1]) ** 2).sum() / n"))
    comments = skeleton.references(value)["dc"]
    assert "c (1,)" in comments and "delta," not in comments, comments


def test_a_hyperparameter_only_the_data_lines_read_is_still_bound_for_the_answers():
    """An instructor trial's label smoothing, `T = Y * (1 - eps) + eps / K` in the data lines: the textbook answer's
    eps was a NameError and 0 on every route, where the docs say answer cells read a float by its name."""
    value = tiny(sizes={**SIZES, "eps": 0.1},
                 data=DATA.replace("Y = randn(n, hidden)", "Y = randn(n, hidden) * (1 - eps)"))
    assert value.network.sizes.get("eps") == "0.1"
    assert "eps" not in tiny().network.sizes


def test_fused_blocks_come_in_the_order_a_student_backpropagates():
    """A blind instructor trial's {"dh": ("o", ...), "do": ("loss", ...)}: dh's block was exercise 2, given do by a
    read-only cell, and do's blank answer, exercise 3, set it to None again below; exercise check failed on the stub."""
    value = tiny(fused={"dh": "z", "dz": "loss"})
    assert [a.grade_id for a in value.answers if a.kind == ex.FUSED] == ["ex2_dz", "ex3_dh"]
    assert [a.grade_id for a in tiny(fused={"dz": "loss", "dh": "z"}).answers if a.kind == ex.FUSED] == \
        ["ex2_dz", "ex3_dh"]
