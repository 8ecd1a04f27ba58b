"""The students' self-check on a real forward/backward: one stdout line per call, never stderr, and a
specific hint for each classic mistake (including those the lecture's broadcasting `cmp` let through)."""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch

from grader.exercise import ATOMIC, Sizes
from grader.exercises.makemore_mlp import EXERCISE
from grader.student.selfcheck import SelfCheck
from solutions import reference

# H != V (a transposed dW2 has another shape), n*block_size > vocab (repeated indices), n not 2.
SIZES = Sizes(n=6, vocab=7, block_size=2, n_embd=3, n_hidden=5)


class Notebook:
    """The notebook's state after its forward and loss.backward() cells, and the reference answers."""

    def __init__(self, make_batch, autograd_pass, dtype):
        params, self.Xb, self.Yb = make_batch(SIZES, dtype, seed=3)
        self.t = autograd_pass(params, self.Xb, self.Yb)  # tensors with .grad, as `check` receives them
        detached = {k: v.detach() for k, v in self.t.items()}
        self.a = reference.atomic_gradients(detached)  # correct answers, computed without autograd
        self.a["ex2_dlogits"] = reference.fused("ex2_dlogits", detached)
        self.a["ex3_dhprebn"] = reference.fused("ex3_dhprebn", detached, dhpreact=self.a["dhpreact"])
        # The notebook's globals, without a history of cells: the check compares values only.
        self.check = SelfCheck(n=SIZES.n, namespace={**self.t, "Xb": self.Xb, "Yb": self.Yb})


@pytest.fixture(scope="module", params=[torch.float64, torch.float32], ids=["float64", "float32"])
def nb(request, make_batch, autograd_pass):
    return Notebook(make_batch, autograd_pass, request.param)


@pytest.fixture(scope="module")
def nb64(make_batch, autograd_pass):
    return Notebook(make_batch, autograd_pass, torch.float64)


@pytest.fixture
def run(capfd):
    """Call the check like a notebook cell; the one line it printed. Nothing may reach stderr."""
    def call(check, name, manual, tensor):
        capfd.readouterr()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # a warning is printed to stderr in a notebook
            result = check(name, manual, tensor)
        out, err = capfd.readouterr()
        assert result is None
        assert err == ""
        assert [f"{w.category.__name__}: {w.message}" for w in caught] == []
        assert out.endswith("\n") and out.count("\n") == 1, repr(out)
        line = out[:-1]
        assert line.startswith(f"{name:<15s}|"), line
        return line
    return call


def passed(line, shape):
    return "approximate: True" in line and f"shape {shape} ok" in line and "WRONG" not in line


def source_of(name):
    return name[1:] if name in EXERCISE.atomic else {"ex2_dlogits": "logits", "ex3_dhprebn": "hprebn"}[name]


# --- right answers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", EXERCISE.atomic + ("ex2_dlogits", "ex3_dhprebn"))
def test_a_right_answer_prints_a_match_line(nb, run, name):
    tensor = nb.t[source_of(name)]
    line = run(nb.check, name, nb.a[name], tensor)
    assert passed(line, tuple(tensor.shape)), line


def test_an_exact_answer_says_so(nb64, run):
    line = run(nb64.check, "dh", nb64.t["h"].grad.clone(), nb64.t["h"])
    assert "exact: True " in line and "maxdiff: 0" in line


@pytest.mark.parametrize("name", ["dlogit_maxes", "db1"])
def test_gradients_zero_in_exact_arithmetic_pass_in_float32(make_batch, autograd_pass, run, name):
    """Autograd's float32 value is ~1e-8 noise, and so is the reference's: both are right."""
    nb = Notebook(make_batch, autograd_pass, torch.float32)
    tensor = nb.t[name[1:]]
    assert tensor.grad.dtype == torch.float32
    assert torch.allclose(tensor.grad, torch.zeros_like(tensor.grad), atol=1e-6)
    line = run(nb.check, name, nb.a[name], tensor)
    assert passed(line, tuple(tensor.shape)), line


# --- wrong answers -----------------------------------------------------------------------------------

def wrong(line):
    return "WRONG" in line or "wrong shape" in line


def test_lectures_dbnmeani_without_keepdim(nb, run):
    """(H,) for a (1,H) tensor: the lecture's own answer, which its broadcasting cmp accepted."""
    t, a = nb.t, nb.a
    manual = (-a["dbndiff"]).sum(0)
    assert manual.shape == (SIZES.n_hidden,)
    line = run(nb.check, "dbnmeani", manual, t["bnmeani"])
    assert wrong(line) and "approximate: True" not in line, line
    assert f"shape ({SIZES.n_hidden},), expected (1, {SIZES.n_hidden})" in line
    assert "missing keepdim=True" in line


def test_transposed_dW2(nb, run):
    t, a = nb.t, nb.a
    manual = a["dlogits"].T @ t["h"].detach()
    line = run(nb.check, "dW2", manual, t["W2"])
    assert "WRONG" in line, line
    assert "looks transposed: its transpose is the expected gradient" in line


def test_nan_in_an_answer(nb, run):
    manual = nb.a["dh"].clone()
    manual[1, 2] = float("nan")
    line = run(nb.check, "dh", manual, nb.t["h"])
    assert "WRONG" in line and "NaN" in line and "1 of" in line, line


def test_inf_in_an_answer(nb, run):
    manual = nb.a["dh"].clone()
    manual[0, 0] = float("inf")
    line = run(nb.check, "dh", manual, nb.t["h"])
    assert "WRONG" in line and "inf" in line, line


def test_missing_division_by_n(nb, run):
    t = nb.t
    manual = torch.zeros_like(t["logprobs"].detach())
    manual[range(SIZES.n), nb.Yb] = -1.0  # the lecture's dlogprobs without /n
    line = run(nb.check, "dlogprobs", manual, t["logprobs"])
    assert "WRONG" in line and "your dlogprobs leaves out the mean's 1/n" in line, line


def test_sign_flipped(nb, run):
    line = run(nb.check, "dhpreact", -nb.a["dhpreact"], nb.t["hpreact"])
    assert "WRONG" in line and "has its sign flipped" in line, line


def test_dbnbias_not_summed_over_the_batch(nb, run):
    line = run(nb.check, "dbnbias", nb.a["dhpreact"], nb.t["bnbias"])
    assert "WRONG" in line, line
    assert "not summed over dimension 0" in line and "summing it there gives the expected gradient" in line


def test_db2_given_as_dlogits_itself(nb, run):
    """b2 (V,) was broadcast over the batch: dlogits (n,V) must be summed over dimension 0."""
    line = run(nb.check, "db2", nb.a["dlogits"], nb.t["b2"])
    assert "WRONG" in line, line
    assert "not summed over dimension 0" in line and "summing it there gives the expected gradient" in line


# --- not a gradient at all -----------------------------------------------------------------------

def test_none_is_not_attempted_yet(nb, run):
    line = run(nb.check, "dC", None, nb.t["C"])
    assert line.endswith("| not attempted yet"), line


def test_an_integer_tensor_is_rejected(nb, run):
    line = run(nb.check, "dlogprobs", torch.zeros(nb.t["logprobs"].shape, dtype=torch.int64), nb.t["logprobs"])
    assert "WRONG" in line and "torch.int64" in line and "floating-point" in line, line


def test_a_python_list_is_rejected(nb, run):
    line = run(nb.check, "dh", nb.a["dh"].tolist(), nb.t["h"])
    assert "WRONG" in line and "is a list, not a torch.Tensor" in line, line


def test_a_number_is_a_gradient_only_where_the_gradient_has_no_dimensions():
    """`dreg_loss = 1.0`, as a teacher writes the gradient of a loss's part, is that number; `dh = 0` is
    no gradient of h's shape."""
    from grader.judge.compare import compare

    assert compare(1.0, torch.tensor(1.0, dtype=torch.float64), rtol=1e-5, atol=1e-8).passed
    assert compare(1, torch.tensor(1.0, dtype=torch.float64), rtol=1e-5, atol=1e-8).passed
    assert not compare(True, torch.tensor(1.0, dtype=torch.float64), rtol=1e-5, atol=1e-8).passed
    wrong = compare(0, torch.zeros(3, 2, dtype=torch.float64), rtol=1e-5, atol=1e-8)
    assert not wrong.passed and wrong.message == \
        "is a int, not a torch.Tensor: the gradient is a tensor of shape (3, 2)"


class Liar(torch.Tensor):
    """A subclass whose torch functions all claim equality, as submissions to real graders have used."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_tensor_subclass_is_rejected(nb, run):
    manual = torch.zeros_like(nb.a["dh"]).as_subclass(Liar)
    line = run(nb.check, "dh", manual, nb.t["h"])
    assert "WRONG" in line and "subclass of torch.Tensor" in line and "Liar" in line, line
    assert "approximate: True" not in line


def test_a_tensor_without_a_gradient_asks_for_backward(nb, run):
    """A forward tensor without .retain_grad(): the check must say so, and write nothing to stderr."""
    leaves = {k: nb.t[k].detach().clone().requires_grad_(True) for k in ("W2", "b2")}
    logits = nb.t["h"].detach() @ leaves["W2"] + leaves["b2"]  # non-leaf, no retain_grad
    logits.sum().backward()
    line = run(nb.check, "dlogits", nb.a["dlogits"], logits)
    assert "no autograd gradient on logits" in line and "loss.backward()" in line, line


def test_a_leaf_without_a_gradient_asks_for_backward(nb, run):
    line = run(nb.check, "dC", nb.a["dC"], nb.t["C"].detach())
    assert "no autograd gradient" in line, line


def test_every_tensor_of_the_notebook_has_its_gradient(nb):
    """The fixture is the notebook's real state: every intermediate retained its gradient."""
    for name in EXERCISE.network.intermediates:
        assert nb.t[name].grad is not None, name


# --- a failed check points to the reference -------------------------------------------------------

POINTER = "backprop-ninja solution {} --notebook YOUR_NOTEBOOK.ipynb"


@pytest.mark.parametrize("name, manual", [
    ("dbnmeani", lambda a: (-a["dbndiff"]).sum(0)),  # right values, wrong shape
    ("dhpreact", lambda a: -a["dhpreact"]),  # WRONG
])
def test_a_failed_check_points_to_the_solution_command(nb64, run, name, manual):
    line = run(nb64.check, name, manual(nb64.a), nb64.t[name[1:]])
    assert line.endswith(" — stuck? " + POINTER.format(name)), line


def test_the_pointer_names_the_kernels_notebook_where_the_front_end_names_it(nb64, run, tmp_path, monkeypatch):
    """A student trial: every WRONG line said `--notebook YOUR_NOTEBOOK.ipynb`, where the kernel knew the file."""
    from grader.student import selfcheck

    path = tmp_path / "my copy.ipynb"
    monkeypatch.setattr(selfcheck, "_kernel_notebook", lambda namespace: path if namespace is nb64.check.namespace
                        else None)
    line = run(nb64.check, "dhpreact", -nb64.a["dhpreact"], nb64.t["hpreact"])
    assert line.endswith(" — stuck? backprop-ninja solution dhpreact --notebook 'my copy.ipynb'"), line


def test_a_passing_or_blank_check_points_nowhere(nb64, run):
    for manual in (nb64.a["dh"], None):
        assert "backprop-ninja solution" not in run(nb64.check, "dh", manual, nb64.t["h"])


def test_a_name_that_two_exercises_share_names_both_grade_ids(nb64, run):
    line = run(nb64.check, "dlogits", -nb64.a["ex2_dlogits"], nb64.t["logits"])
    assert line.endswith(POINTER.format("dlogits") + " (exercise 2: ex2_dlogits)"), line
    line = run(nb64.check, "dhprebn", 2 * nb64.a["ex3_dhprebn"], nb64.t["hprebn"])
    assert line.endswith(POINTER.format("dhprebn") + " (exercise 3: ex3_dhprebn)"), line


def test_exercise4s_check_points_to_its_own_grade_ids(nb64, run):
    check = SelfCheck(n=SIZES.n, exercise=4)
    line = run(check, "dC", 2 * nb64.a["dC"], nb64.t["C"])
    assert line.endswith(" — stuck? " + POINTER.format("ex4_dC")), line


def test_a_graded_courses_check_points_nowhere(nb64, run):
    """The full package may be installed where a graded course's students work (a hub image shared with
    the graders): the notebook's course settings saying `solutions: off` are enough to point nowhere."""
    check = SelfCheck(n=SIZES.n, namespace=nb64.check.namespace, course={"solutions": "off"})
    line = run(check, "dhpreact", -nb64.a["dhpreact"], nb64.t["hpreact"])
    assert "WRONG" in line and "backprop-ninja solution" not in line and "stuck?" not in line, line


def test_a_name_of_the_students_own_gets_no_pointer(nb64, run):
    line = run(nb64.check, "dmine", -nb64.a["dh"], nb64.t["h"])
    assert "WRONG" in line and "backprop-ninja solution" not in line, line


def test_a_part_given_by_keyword_is_the_same_check_as_grader_01s_exercise_keyword(nb64, run):
    """`part=4` is the exercise API's spelling; the released notebook's `exercise=4` must keep its meaning."""
    checks = (SelfCheck(n=SIZES.n, part=4), SelfCheck(n=SIZES.n, exercise=4))
    lines = {run(check, "dC", 2 * nb64.a["dC"], nb64.t["C"]) for check in checks}
    assert len(lines) == 1 and next(iter(lines)).endswith(" — stuck? " + POINTER.format("ex4_dC")), lines


def test_the_exercise_is_the_one_named_or_the_one_the_course_settings_name():
    from grader.exercise import ExerciseError, load

    makemore = load("makemore-mlp")
    named = SelfCheck(exercise="grader.exercises.makemore_mlp:EXERCISE", course={"exercise": "no-such-exercise"})
    assert named.exercise is makemore and named.spec == "grader.exercises.makemore_mlp:EXERCISE"
    assert SelfCheck(course={"exercise": "makemore-mlp"}).exercise is makemore
    assert SelfCheck().exercise is makemore
    with pytest.raises(ExerciseError, match="no-such-exercise"):
        SelfCheck(course={"exercise": "no-such-exercise"})


@pytest.mark.parametrize("call", [lambda c: c(), lambda c: c(3), lambda c: c("dprobs", "dlogprobs"),
                                  lambda c: c("dprobs", answer="grads"), lambda c: c.training(lr=0.1),
                                  lambda c: c.training("start", batches="b", lr=0.1)])
def test_a_check_cell_edited_to_call_check_otherwise_prints_a_line_and_never_raises(capsys, call):
    """A student trial edited a read-only check cell to `check()`: a TypeError, the one check that raised."""
    from grader.student.check import check

    call(check)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "not checked: this check cell calls check otherwise than as released" in out, out


def test_a_cell_runs_under_the_graders_time_limit_and_without_one_where_the_platform_has_no_alarm(monkeypatch):
    """The check stops a run past the grader's limit (SIGALRM in the kernel's main thread); on Windows, which has no
    SIGALRM, it runs the cell with no limit rather than failing every check."""
    import signal
    import time

    from grader.student import selfcheck

    with pytest.raises(selfcheck._Slow), selfcheck._time_limit(0.05):
        time.sleep(5)
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0  # and no timer is left behind
    for name in ("SIGALRM", "setitimer", "getitimer", "ITIMER_REAL"):
        monkeypatch.delattr(signal, name)
    with selfcheck._time_limit(0.05):
        assert sum(range(10)) == 45


def test_a_functions_note_on_what_it_reads_from_the_notebook_counts_globals_not_attributes():
    """An instructor trial's manual_backward set `T = 4.0` itself and read `W2.T`: the self-check said it read T from
    the notebook (co_names holds attribute names too). A global read in a comprehension is still one."""
    from grader.student.selfcheck import _globals_read

    namespace = {"T": 4.0, "W9": torch.ones(2), "torch": torch}
    exec("def own(params):\n    T = 2.0\n    return params['W2'].T * T\n"  # noqa: S102 - the test's own cells
         "def leaked(params):\n    return params['x'] * sum(W9 for _ in range(2))\n", namespace)
    assert _globals_read(namespace["own"]) == ""
    assert _globals_read(namespace["leaked"]) == " (it reads W9 from the notebook, not from its arguments)"


def test_a_float32_answer_is_told_what_it_stops_only_where_something_can():
    """An instructor trial's `drec = torch.tensor(1.0)`: a float32 0-d answer meets no product and no write
    into a float64 tensor below, whose elementwise arithmetic promotes it: it is only right, nothing said."""
    forward = {"rec": torch.zeros((), dtype=torch.float64), "h": torch.zeros(3, 2, dtype=torch.float64)}
    notebook = SimpleNamespace(namespace=forward)
    assert SelfCheck._other_dtype(notebook, SimpleNamespace(kind=ATOMIC, source="rec"), torch.tensor(1.0)) == ""
    said = SelfCheck._other_dtype(notebook, SimpleNamespace(kind=ATOMIC, source="h"), torch.zeros(3, 2))
    assert "a product (@) of it and a torch.float64 tensor, or writes it into one" in said, said
    assert (forward["h"] * torch.tensor(1.0)).dtype == torch.float64  # what a cell below does with the 0-d one
