"""grader.judge.diagnose on synthetic tensors: each hint it claims to give, and no hint that would mislead;
and the search of the neighbourhood on the tests' tiny exercise (tests/exercises/tiny_relu.py), which the
engine was never written for."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from exercises.tiny_relu import EXERCISE

from grader.exercise import Exercise, Mistakes, Rule, Sizes, load
from grader.judge import compare
from grader.judge.compare import judge, outcome_text
from grader.judge.diagnose import diagnose, name
from grader.judge.exam import CHAIN, Case
from grader.judge.oracle import chain_gradients, local_vjp
from grader.vocabulary import Status

RTOL, ATOL = 1e-5, 1e-8
N = 6  # the batch size the factor hints refer to; not 2, so that "factor 2" and "n" differ

# Words of a hint that claims a specific mistake; a random wrong answer must get none of them.
CLAIMS = ("factor", "sign", "times", "transpose", "n/(n-1)", "(n-1)/n", "zeros", "keepdim", "summed", "right in")


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def hints(got, want, rtol=RTOL, atol=ATOL):
    result = diagnose(got, want, rtol=rtol, atol=atol)
    assert isinstance(result, list) and all(isinstance(h, str) and h for h in result)
    return result


def one(got, want, **kw):
    result = hints(got, want, **kw)
    assert len(result) == 1, result
    return result[0]


# --- shape mistakes -------------------------------------------------------------------------------

def test_transposed_with_the_right_values():
    want = randn(N, 4)
    assert one(want.T.clone(), want) == "looks transposed: its transpose is the expected gradient"


def test_transposed_shape_with_wrong_values():
    want = randn(N, 4)
    hint = one(randn(4, N, seed=1), want)
    assert hint.startswith("looks transposed (the reverse of the expected shape)")
    assert "its transpose is the expected gradient" not in hint


def test_transposed_square_matrix():
    want = randn(5, 5)
    assert one(want.T.clone(), want) == "looks transposed: its transpose is the expected gradient"


@pytest.mark.parametrize("want_shape, got_shape", [((1, 4), (4,)), ((N, 1), (N,))])
def test_missing_keepdim(want_shape, got_shape):
    want = randn(*want_shape)
    hint = one(want.reshape(got_shape), want)
    assert hint.startswith("missing keepdim=True")
    assert str(want_shape) in hint


@pytest.mark.parametrize("want_shape", [(1,), (1, 1)])
def test_a_number_with_no_dimension_is_told_to_sum_over_the_broadcast_dimensions_not_keepdim(want_shape):
    """An instructor trial: `dblv = dlogvar.sum()` for a (1,) bias was told "missing keepdim=True", which .sum() of
    everything cannot take; the fix is .sum(0)."""
    want = randn(*want_shape)
    hint = one(want.reshape(()), want)
    assert hint.startswith("a number with no dimension") and "keepdim" not in hint and str(want_shape) in hint


@pytest.mark.parametrize("want_shape, got_shape", [((4,), (1, 4)), ((4,), (4, 1)), ((1, 4), (1, 1, 4))])
def test_extra_size_one_dimension(want_shape, got_shape):
    want = randn(*want_shape)
    hint = one(want.reshape(got_shape), want)
    assert hint.startswith("an extra dimension of size 1")
    assert str(want_shape) in hint


@pytest.mark.parametrize("dim", [0, 1])
def test_not_summed_over_a_broadcast_dimension_kept_as_size_one(dim):
    got = randn(N, 4)
    want = got.sum(dim, keepdim=True)  # e.g. dbnbias (1,H) given as dhpreact (n,H)
    hint = one(got, want)
    assert hint.startswith(f"not summed over dimension {dim}")
    assert "(summing it there gives the expected gradient)" in hint


def test_not_summed_with_wrong_values_does_not_claim_a_sum_is_the_mistake():
    """Issue 35: "not summed over dimension 0" was said of a matrix product where an elementwise one was
    meant, and "not summed over dimension 1" of another gradient read: where the sum does not give the
    gradient, the hint says what the shape and the values show, and claims no cause."""
    want = randn(1, 4)
    hint = one(randn(N, 4, seed=1), want)
    assert hint == ("has more than one entry along dimension 0, where the gradient has one; summed over it, its "
                    "values are still wrong: more than a missing sum is amiss")


@pytest.mark.parametrize("want_shape, got_shape, dims", [((2, 3, 5), (2, 5, 3), (1, 2)), ((4, 2, 3, 5), (4, 5, 3, 2),
                                                                                         (1, 3))])
def test_a_tensor_of_any_rank_with_two_dimensions_swapped_looks_transposed(want_shape, got_shape, dims):
    """Issue 35: a 3-D gradient with its last two dimensions swapped got only its shape, where a 2-D one got
    "looks transposed"."""
    want = randn(*want_shape)
    assert one(want.transpose(*dims).clone(), want) == (
        f"looks transposed in dimensions {dims[0]} and {dims[1]}: its .transpose({dims[0]}, {dims[1]}) is the "
        f"expected gradient")
    # A view in the wrong order has the same shape: the values decide, and without them no transpose is said.
    assert "transpose" not in one(randn(*got_shape, seed=1), want)


def test_not_summed_over_a_leading_broadcast_dimension():
    """b2 (V,) is broadcast over the rows of logits (n,V): db2 given as dlogits itself."""
    got = randn(N, 4)
    want = got.sum(0)
    hint = one(got, want)
    assert hint.startswith("not summed over dimension 0")
    assert "(summing it there gives the expected gradient)" in hint


def test_an_unrelated_shape_gets_only_the_expected_shape():
    assert hints(randn(3, 5), randn(N, 4)) == ["a gradient has exactly its tensor's shape, (6, 4)"]


# --- value mistakes -------------------------------------------------------------------------------

@pytest.mark.parametrize("factor", [-1.0, N, 1 / N, N / (N - 1), (N - 1) / N, 2.0, 0.5, 3.7, 1 + 1e-3])
def test_one_configuration_claims_no_factor(factor):
    """One configuration cannot tell n from any other number: the factor is `name`'s, on every one."""
    want = randn(N, 4)
    for h in hints(want * factor, want):
        assert not any(word in h for word in ("factor", "times", "sign", "n/(n-1)", "(n-1)/n")), h


def test_all_zeros():
    want = randn(N, 4)
    assert hints(torch.zeros_like(want), want) == ["all zeros"]


@pytest.mark.parametrize("wrong, rows", [(1, "0 (1 of 6)"), (3, "0 (1 of 6)"), (12, "0, 1, 2 (3 of 6)")])
def test_wrong_only_in_some_rows(wrong, rows):
    want = randn(N, 4)
    got = want.clone()
    got.view(-1)[:wrong] += 1.0
    assert hints(got, want) == [f"wrong only in rows {rows}, right in the others"]


def test_right_only_where_the_gradient_is_zero_names_no_place():
    """Trial 3's t46: a batch-norm slip made dC wrong in every row the batch picks; the rows no index picks
    (zero either way) made it "wrong only in rows ..., right in the others", which points at the indexing."""
    want = randn(N, 4)
    want[[1, 4]] = 0.0
    got = want * 1.01
    assert hints(got, want) == []


def test_wrong_only_in_some_columns():
    want = randn(N, 4)
    got = want.clone()
    got[:, 2] += 1.0
    assert hints(got, want) == ["wrong only in columns 2 (1 of 4), right in the others"]


def test_wrong_entries_in_every_row_and_column_are_counted():
    want = randn(N, 4)
    got = want.clone()
    got[range(N), [0, 1, 2, 3, 0, 1]] += 1.0  # every row and every column has one
    assert hints(got, want) == ["right in 18 of 24 entries, wrong in 6"]


def test_size_one_dimension_moved_is_not_called_transposed_or_a_wrong_sum():
    """The issue's "looks transposed" plus "summed over the wrong dimension" for (1, n) against (n, 1)."""
    want = randn(N, 1)
    for got, right in ((want.reshape(1, N), True), (randn(1, N, seed=2), False)):
        (hint,) = hints(got, want)
        assert hint.startswith("has its size-1 dimension in the wrong place: shape (1, 6)"
                               " where the gradient has (6, 1)")
        assert ("reshaped, its values are right" in hint) == right
        assert ("its values are still wrong, so moving the dimension alone will not put it right" in hint) != right
        assert "transpose" not in hint and "wrong dimension" not in hint


@pytest.mark.parametrize("seed", range(1, 9))
@pytest.mark.parametrize("shape", [(N, 4), (5, 5), (1, 7), (7,)])
def test_a_random_wrong_answer_gets_no_misleading_hint(seed, shape):
    want = randn(*shape)
    got = randn(*shape, seed=seed)
    for h in hints(got, want):
        assert not any(word in h for word in CLAIMS), h


def test_a_shifted_answer_is_not_called_a_factor():
    want = randn(N, 4)
    for h in hints(want + 0.3, want):
        assert not any(word in h for word in CLAIMS), h


def test_an_answer_that_only_broadcasts_to_the_gradient_says_its_values_are_right():
    """1/(n-1) * dbnvar, (1, H), for dbndiff2, (n, H): right values, not yet the tensor's shape."""
    row = randn(1, 4)
    assert hints(row, row.expand(N, 4).clone()) == [
        "broadcast to (6, 4) its values are right: a gradient has its tensor's full shape, "
        "not one that broadcasts to it"]
    assert not any("values are right" in h for h in hints(randn(1, 4, seed=3), row.expand(N, 4).clone()))


# --- any exercise: the search works from a network it was never written for ------------------------

RELU = Rule("the derivative of relu", "x", lambda x, y: (x > 0).to(x.dtype), (
    ("output", "uses relu's output where its derivative needs a step", lambda x, y: y),))


def tiny(mistakes: Mistakes | None = None) -> Exercise:
    """The tiny exercise, knowing of its students' mistakes only `mistakes`."""
    return dataclasses.replace(EXERCISE, mistakes=mistakes or Mistakes())


@dataclass(frozen=True)
class Conf:
    name: str
    sizes: Sizes
    scored: bool = True


def tiny_case(exercise: Exercise, n: int, scored: bool = True) -> Case:
    """A configuration of the tiny exercise at the lecture's sizes but `n` rows, with its random upstream
    gradients and the one-step answers they imply (what the LOCAL check compares with)."""
    g = torch.Generator().manual_seed(n)
    sizes = Sizes(**{**exercise.lecture, "n": n})
    network = exercise.network
    params, data = exercise.init(sizes, g), exercise.batch(sizes, g)
    values = {k: v.detach() for k, v in network.forward(params, data).items() if k not in network.sizes}
    truth = chain_gradients(network, params, data)
    random = {k: torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in truth.items()}
    local = {a.grade_id: local_vjp(network, values, a.source, {u[1:]: random[u] for u in a.local_upstream})
             for a in exercise.answers if a.local_upstream}
    return Case(Conf(f"n{n}", sizes, scored), values, truth, random, local, exercise)


def tiny_cases(exercise: Exercise) -> list[Case]:
    """Two configurations with more rows than the vocabulary (so that an index repeats), as the hidden
    ones have, and the unscored lecture-sized probe."""
    return [tiny_case(exercise, 9), tiny_case(exercise, 11), tiny_case(exercise, exercise.lecture.n, scored=False)]


def named(exercise: Exercise, grade_id: str, wrong) -> str | None:
    """The name `name` gives the answer `wrong(values, truth, n)` on two configurations."""
    answer = exercise.by_grade_id[grade_id]
    tensors = [(case, wrong(case.values, case.truth, case.values["X"].shape[0]))
               for case in tiny_cases(exercise) if case.config.scored]
    return name(tensors, answer, CHAIN, RTOL, ATOL)


def test_a_branch_left_out_is_named_in_any_network():
    # Without the cell's code, the first use's branch left out and each use assigned with = (the last one kept)
    # are the same values: both are said. The code tells them apart (test_exercise_check's L2 term).
    assert named(tiny(), "dh", lambda v, t, n: (v["h"] > 0) * t["da"]) == (
        "your dh misses the branch through z: h is used twice (in a and in z), so its gradient is the sum of both, or "
        "assigns each use's gradient with = where they must add up (+=): only the last one is left: either gives these "
        "values")


def test_a_factor_of_a_size_is_named_with_the_exercise_s_words_for_it():
    def times_n(v, t, n):
        return n * t["db"]

    assert named(tiny(), "db", times_n) == "your db is n times too large"
    assert named(tiny(Mistakes(words={"n": "the number of rows"})), "db", times_n) == \
        "your db is n times too large (n is the number of rows)"


def test_an_overwriting_lookup_gradient_is_named_from_the_step_s_code():
    def overwrites(v, t, n):
        return torch.zeros_like(v["E"]).index_put((v["X"],), t["de"])

    # The rule table's slip of the lookup says it; the search's own sentence (in the exercise's words for
    # the index) is for an exercise the rule table cannot derive.
    assert named(tiny(), "dE", overwrites) == \
        "your dE keeps one use of each index repeated in X: an indexed assignment (=, or += with a whole tensor of " \
        "indices) overwrites where all its uses must add up (+= one index at a time, or index_add)"


def test_an_elementwise_slip_is_named_by_the_exercise_s_rule_else_by_the_rule_table():
    def output_slope(v, t, n):
        return v["a"] * t["da"] + t["dz"]

    assert named(tiny(Mistakes(rules={"a": RELU})), "dh", output_slope) == \
        "your dh uses relu's output where its derivative needs a step"
    assert named(tiny(), "dh", output_slope) == \
        "your dh multiplies by ReLU's output a where its derivative is a 0/1 mask"


def test_a_size_the_notebook_binds_no_name_for_is_told_as_its_tensors_say_it():
    """An instructor trial: `dpred = 2 * (pred - target) / N` beside F.mse_loss (no line reads N, so the notebook
    binds none) was told N is not among the names answer cells may use, a list that named N."""
    exercise = tiny(Mistakes(shown={"n": "X.shape[0]"}))
    outcome = SimpleNamespace(status="error", detail={"error_type": "NameError", "error": "name 'n' is not defined",
                                                      "line": 1})
    failure = outcome_text(outcome, exercise.answers[0], exercise=exercise)
    assert failure.feedback == ("NameError on line 1: name 'n' is not defined (the notebook binds no name n: write "
                                "X.shape[0] for it)")
    outcome.detail["error"] = "name 'V' is not defined"
    assert ", n," not in outcome_text(outcome, exercise.answers[0], exercise=exercise).feedback
    # A loss that is a .mean() (an instructor trial's word2vec): no line reads any size, and the size was told
    # only as a name the cell may not use
    regression = load("tests/exercises/linear_regression.py:EXERCISE")
    assert not regression.network.sizes
    outcome.detail["error"] = "name 'N' is not defined"
    assert "(the notebook binds no name N: write X.shape[0] for it)" in \
        outcome_text(outcome, regression.answers[0], exercise=regression).feedback


def test_what_an_answer_cell_may_read_comes_from_the_network():
    outcome = SimpleNamespace(status="error", detail={"error_type": "NameError", "error": "name 'V' is not defined",
                                                      "line": 1})
    failure = outcome_text(outcome, tiny().answers[0], exercise=tiny())
    assert failure.feedback == (
        "NameError on line 1: name 'V' is not defined (uses a variable the answer cells do not have: answer cells "
        "may use only the parameters, X, Y, n, the forward pass's intermediates, torch, F and "
        "variables assigned by earlier answer cells of exercise 1)")


def test_an_answer_right_on_the_lecture_s_sizes_alone_is_told_the_lecture_s_numbers():
    exercise = tiny()
    cases = tiny_cases(exercise)
    answer = exercise.by_grade_id["db"]
    outcomes = {c.config.name: SimpleNamespace(status="tensor", tensor=c.truth["db"] * c.values["X"].shape[0] / 8,
                                               detail={}) for c in cases}
    failure = judge(outcomes, cases, answer, CHAIN, SimpleNamespace(rtol=RTOL, atol=ATOL))
    assert failure.feedback.endswith(
        "; right for the notebook's sizes (n=8) but wrong for every other size: something in the cell depends on "
        "the sizes; use n and the tensors' shapes, never 8, 5, 3 or 4")
    # The sizes named are those the cell writes (a student trial's `.view(1, 64)` was told "(n=32)")
    failure = judge(outcomes, cases, answer, CHAIN, SimpleNamespace(rtol=RTOL, atol=ATOL), code="db = x.view(1, 4)\n")
    assert "; right for the notebook's sizes but wrong for every other size: something in the cell depends on the " \
        "sizes: your cell writes 4 (hidden" in failure.feedback, failure.feedback
    # what to write is the size the number stands for, not any size the notebook names (an instructor trial's 8,
    # said to be E.shape[1], was told "use H")
    assert failure.feedback.endswith("as a number; write it as the size it stands for, from n and the tensors' "
                                     "shapes, never 8, 5, 3 or 4"), failure.feedback


def test_a_function_s_answer_is_named_with_its_tensor_s_one_step_cell():
    """As that cell's: the gradient db, not the key b the function returns it under."""
    assert named(tiny(), "fit_db", lambda v, t, n: n * t["db"]) == "your db is n times too large"


@pytest.mark.parametrize("error_type, error, hint", [
    ("NameError", "name 'n' is not defined", "backward may use only its arguments, torch and F"),
    ("KeyError", "'a'", "the cache holds exactly: e, h")])
def test_what_a_function_may_read_comes_from_its_declared_arguments(error_type, error, hint):
    outcome = SimpleNamespace(status="error", detail={"error_type": error_type, "error": error, "line": 2})
    failure = outcome_text(outcome, tiny().by_grade_id["fit_dW"], exercise=tiny())
    assert failure.feedback == f"{error_type} on line 2: {error} ({hint})"


@pytest.mark.parametrize("public", [True, False])
def test_a_function_that_mixes_dtypes_is_told_why_even_where_its_message_is_hidden(public):
    """An instructor trial's `torch.zeros(v.shape)` accumulator (float32) in a float64 run: the self-check said why,
    the grader gave a bare RuntimeError, its message withheld on a hidden configuration."""
    error = "index_add_(): self (Float) and source (Double) must have the same scalar type"
    outcome = SimpleNamespace(status="error", detail={"error_type": "RuntimeError", "error": error, "line": 3})
    failure = outcome_text(outcome, tiny().by_grade_id["fit_dW"], exercise=tiny(), public=public)
    assert "backward is called with float64 tensors here and by the grader" in failure.feedback, failure.feedback
    assert "torch.zeros_like(x) follows x" in failure.feedback
    assert (error in failure.feedback) is public


# --- what of a hidden configuration feedback may show ----------------------------------------------

TOL = SimpleNamespace(rtol=RTOL, atol=ATOL)


def _judged(on_hidden, on_probe=None, grade_id: str = "dz", public: bool = False, code: str | None = None):
    """The judgement of outcomes `on_hidden(case)` on the tiny exercise's hidden configurations and
    `on_probe(case)` (else the right answer) on its lecture-sized one, with the digits of every hidden
    configuration's sizes that no public one has."""
    exercise = tiny()
    cases = tiny_cases(exercise)
    answer = exercise.by_grade_id[grade_id]
    right = lambda c: SimpleNamespace(status="tensor", tensor=c.truth["d" + answer.source], detail={})  # noqa: E731
    outcomes = {c.config.name: (on_hidden if c.config.scored else on_probe or right)(c) for c in cases}
    return judge(outcomes, cases, answer, CHAIN, TOL, public=public, code=code)


def _error(error_type: str, error: str, line: int = 1):
    return lambda c: SimpleNamespace(status="error", detail={"error_type": error_type, "error": error, "line": line})


def test_an_error_on_hidden_configurations_alone_shows_its_builtin_type_and_no_message():
    failure = _judged(_error("KeyError", "'n9v5h4'", line=3))
    assert failure.feedback.startswith("KeyError on a hidden configuration (its message is not shown"), failure.feedback
    assert "n9v5" not in failure.feedback and "line" not in failure.feedback


def test_an_exception_class_the_cell_named_is_not_shown():
    failure = _judged(_error("E9x5", "boom"))
    assert failure.feedback.startswith("an exception of the cell's own class on a hidden configuration")
    assert "E9" not in failure.feedback and "boom" not in failure.feedback


def test_an_error_the_lecture_sized_run_raises_too_is_shown_from_there():
    def raised(c):
        return _error("IndexError", f"index {c.values['X'].shape[0] * 1000 + 7} is out of bounds", line=2)(c)

    failure = _judged(raised, raised)
    assert failure.feedback.startswith(
        "IndexError on line 2, on the notebook-sized configuration: index 8007 is out of bounds"), failure.feedback
    assert "9007" not in failure.feedback and "11007" not in failure.feedback


def test_the_self_check_s_public_batches_show_their_own_details():
    failure = _judged(_error("KeyError", "'n9v5h4'", line=3), public=True)
    assert failure.feedback.startswith("KeyError on line 3: 'n9v5h4'"), failure.feedback
    # Its line number is no size, although the tiny exercise's dim is 3 (a student trial's "NameError on line
    # 6 ... (where n_embd=6)").
    assert "dim=3" not in failure.feedback, failure.feedback


def test_a_number_the_cell_writes_that_its_error_quotes_is_said():
    """The tenth student trial's exercise 4: `.view(1, 200)` on the self-check's network of 54 hidden units raised
    "shape '[1, 200]' is invalid for input of size 54", and nothing said that 200 was the cell's own number."""
    raised = _error("RuntimeError", "shape '[1, 200]' is invalid for input of size 54", line=2)
    failure = _judged(raised, public=True, code="dz = dy * 1.0\ndz = dz.view(1, 200)\n")
    assert "your cell writes 200 as a number, which the error quotes: use the tensors' shapes" in failure.feedback, \
        failure.feedback
    # Not a number of the error's own, nor its line number, nor on a hidden configuration, whose message is not shown
    assert "writes" not in _judged(raised, public=True, code="dz = dy.view(1, -1)\n").feedback
    line_200 = _error("RuntimeError", "bad", line=200)
    assert "writes" not in _judged(line_200, public=True, code="dz = dy[200:]\n").feedback
    assert "writes" not in _judged(raised, code="dz = dz.view(1, 200)\n").feedback


@pytest.mark.parametrize("code", ["dz = dy" + " + dy" * 200_000 + "\n", "dz = " + "-" * 200_000 + "dy\n"])
def test_a_cell_the_parser_cannot_read_is_judged_without_its_code(code):
    """The red team's input batch: code too deep for the parser made the code's hints raise RecursionError or
    MemoryError, and the hidden suite failed for the whole batch."""
    raised = _error("RuntimeError", "shape '[1, 200]' is invalid for input of size 54", line=1)
    assert _judged(raised, raised, public=True, code=code).feedback.startswith("RuntimeError on line 1")
    assert _judged(lambda c: SimpleNamespace(status="tensor", tensor=c.truth["dz"] * 2, detail={}), code=code)


@pytest.mark.parametrize("text, sizes", [
    ("wrong only in rows 6, 16, 24, 28 (4 of 36), right in the others", ["n"]),
    ("wrong only in columns 0, 4, 6, ... (29 of 36), right in the others", ["n"]),
    ("right in 4 of 1134 entries, wrong in 6", []),
    ("right on 2 of the 4 batches of the self-check and wrong on the others", []),
    ("shape (36, 27), expected (27, 36): looks transposed", ["n", "vocab"]),
    ("27 times too large", ["vocab"]),
    # torch's names hold digits (mat2, x_2, a 2.5): none is a size; a shape's 36x27 is two numbers
    ("mat1 and mat2 shapes cannot be multiplied (36x27 and 4x6)", ["n", "block_size", "n_embd", "vocab"]),
    ("mat1 and mat2 shapes cannot be multiplied (36x27 and 27x36)", ["n", "vocab"]),
    ("x_4 is 2.5 times too large", [])])
def test_a_line_names_the_sizes_it_quotes_as_shapes_totals_and_factors_not_positions_or_counts(text, sizes):
    """A student trial's dC line quoted 'where block_size=4, n_embd=6' of 'rows 6, ... (4 of 36)'; another's named
    block_size=2 of torch's 'mat2'."""
    case = SimpleNamespace(config=SimpleNamespace(sizes={"n": 36, "block_size": 4, "n_embd": 6, "vocab": 27,
                                                         "two": 2}))
    assert compare._quoted(case, text) == sizes


@pytest.mark.parametrize("status, detail", [
    ("not-tensor", {"type": "V9x5"}), ("subclass", {"type": "T9"}),
    ("unsendable", {"error": "9007 elements, where the gradient has 72"}),
    ("forbidden-call", {"evidence": ["os.listdir('/n9v5')"]}), ("autograd", {"evidence": ["n9v5"]}),
    ("n9v5", {})])
def test_what_a_cell_chose_beside_a_tensor_is_not_shown_from_a_hidden_configuration(status, detail):
    failure = _judged(lambda c: SimpleNamespace(status=status, detail=detail))
    assert "9" not in failure.feedback, failure.feedback
    assert "hidden configuration" in failure.feedback, failure.feedback


def test_wrong_values_on_hidden_configurations_alone_show_no_difference_count_or_position():
    def slipped(c):
        wrong = c.truth["dz"].clone()
        wrong[0] += c.values["X"].shape[0] + 0.5
        return SimpleNamespace(status="tensor", tensor=wrong, detail={})

    failure = _judged(slipped)
    assert failure.feedback.startswith("dz: wrong values on a hidden configuration; right for the notebook's sizes"), \
        failure.feedback
    assert not any(x in failure.feedback for x in ("9.5", "11.5", "rows", " of ")), failure.feedback


def test_wrong_values_on_every_configuration_show_the_lecture_sized_one():
    def slipped(c):
        wrong = c.truth["dz"].clone()
        wrong[0] += c.values["X"].shape[0] + 0.5
        return SimpleNamespace(status="tensor", tensor=wrong, detail={})

    failure = _judged(slipped, slipped)
    assert failure.feedback.startswith("dz: wrong values (max abs diff 8.5), on the notebook-sized configuration; "
                                       "wrong only in rows 0 (1 of 8)"), failure.feedback


def test_a_wrong_shape_on_hidden_configurations_alone_shows_no_shape():
    failure = _judged(lambda c: SimpleNamespace(status="tensor", detail={},
                                                tensor=torch.zeros(c.values["X"].shape[0] * 1000 + 7)))
    feedback = failure.feedback
    assert feedback.startswith("dz: its shape is not the gradient's on a hidden configuration"), feedback
    assert not any(d in feedback.split("right for the notebook")[0] for d in "0123456789"), feedback


def test_a_function_s_shape_shown_from_the_notebook_sized_run_names_the_sizes_it_quotes():
    """A function's answer runs on a network the notebook may build at sizes of its own (the lecture trains 200
    hidden units in exercise 4, where its sizes are 64): '(1, 4)' alone sends a student looking for a 4 in theirs."""
    failure = _judged(*[lambda c: SimpleNamespace(status="tensor", tensor=c.truth["db"].unsqueeze(0), detail={})] * 2,
                      grade_id="fit_db")
    assert "shape (1, 4), expected (4,): right values, but a size-1 dimension is missing or extra, on the " \
           "notebook-sized configuration (where hidden=4)" in failure.feedback, failure.feedback
    one_step = _judged(*[lambda c: SimpleNamespace(status="tensor", tensor=c.truth["db"].unsqueeze(0), detail={})] * 2,
                       grade_id="db")
    assert "on the notebook-sized configuration;" in one_step.feedback, one_step.feedback


@pytest.mark.parametrize("on_probe", [True, False])
def test_an_answer_right_to_single_precision_is_right_on_every_configuration(on_probe):
    """The ninth student trial: `torch.zeros(shape)` and `.float()` answers passed or failed the float64
    tolerance by the data (a float32 dh passed with the true upstream gradients and failed with random ones:
    half credit), so the same right formula was a draw. Judged at its own precision, it is right everywhere;
    in float64 the same difference is wrong."""
    def single(c):
        return SimpleNamespace(status="tensor", tensor=(c.truth["dz"] * (1 + 1e-4)).to(torch.float32), detail={})

    assert _judged(single, single if on_probe else None) is None

    def double(c):
        return SimpleNamespace(status="tensor", tensor=c.truth["dz"] * (1 + 1e-4), detail={})

    assert _judged(double, double if on_probe else None) is not None


def test_a_constant_factor_seen_on_hidden_configurations_alone_is_named_without_its_value():
    failure = _judged(lambda c: SimpleNamespace(status="tensor", tensor=c.truth["dz"] * 9007.5, detail={}),
                      lambda c: SimpleNamespace(status="error", detail={"error_type": "ValueError", "error": "",
                                                                       "line": 1}))
    assert "a constant multiple of the right value on every configuration" in failure.feedback, failure.feedback
    assert "9007" not in failure.feedback and "9.008e+03" not in failure.feedback


def test_a_constant_factor_near_one_past_the_tolerance_is_named():
    """The twelfth student trial's `dembcat = dhprebn @ W1.T * 1.0001` was told only "right in 9 of 504 entries":
    a factor 1e-4 from 1 fails the tolerance (1e-5) and is as constant as any other."""
    def off(c):
        return SimpleNamespace(status="tensor", tensor=c.truth["dz"] * 1.0001, detail={})

    failure = _judged(off, off)
    assert "your dz is 1.0001 times the right value on every configuration" in failure.feedback, failure.feedback


def test_a_crash_on_a_hidden_configuration_says_which_in_fixed_words():
    """Status.CRASHED is the parent's alone, its {crash} one of a closed set: said for a hidden configuration
    too (a KeyError there made the whole hidden suite fail)."""
    outcome = SimpleNamespace(status=Status.CRASHED, detail={"crash": "it ended the process"})
    failure = outcome_text(outcome, tiny().answers[0], exercise=tiny(), public=False)
    assert failure.feedback == ("the cell stopped the grading process (it ended the process); the other cells "
                                "were graded without it")


def test_a_gradient_summed_over_every_dimension_is_named():
    """`(bnraw * dhpreact).sum()` for a (1, H) gain: a shape () answer said only "exactly its tensor's shape"."""
    hints = diagnose(torch.tensor(3.0, dtype=torch.float64), torch.ones(1, 5, dtype=torch.float64), rtol=1e-5,
                     atol=1e-8)
    assert hints == ["a single number, summed over every dimension: a gradient of shape (1, 5) comes from a sum "
                     "over dimension 0 only (keepdim=True)"]


def test_a_product_that_fits_on_the_lecture_s_sizes_alone_is_told_a_hard_coded_size_not_a_transpose():
    """Issue 35: a hard-coded 32 that makes a matrix product fail on the hidden sizes was told "a transpose
    is probably missing"; the lecture-sized run multiplied fine, so the cell depends on the sizes."""
    failure = _judged(_error("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (9x4 and 8x3)"))
    assert "transpose" not in failure.feedback
    assert "right for the notebook's sizes (n=8) but wrong for every other size" in failure.feedback
    assert failure.mistake == "depends on the exercise's sizes"


def test_a_product_that_fails_on_the_lecture_s_sizes_too_is_told_its_shapes_do_not_fit():
    error = _error("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (8x4 and 8x3)")
    failure = _judged(error, error)
    assert "a transpose is probably missing or misplaced" in failure.feedback


def test_a_product_with_a_factor_summed_too_early_is_not_told_a_transpose():
    """A student trial's `dW1 = embcat.T @ dhprebn.sum(0, keepdim=True)`, (30x32 and 1x64), was told "a transpose is
    probably missing or misplaced": no transpose fits a size-1 dimension against 32."""
    error = _error("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (5x8 and 1x4)")
    failure = _judged(error, error)
    assert "transpose is probably" not in failure.feedback, failure.feedback
    assert "one factor of a matrix product has a dimension of size 1 where the other has 8: a sum or a mean over " \
        "that dimension taken where it does not belong?" in failure.feedback, failure.feedback
    # a column vector times a row vector's transpose is a transpose's business
    column = _error("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (8x1 and 8x1)")
    assert "a transpose is probably missing or misplaced" in _judged(column, column).feedback


def test_an_elementwise_operation_whose_shapes_do_not_line_up_is_told_how_to_line_them_up():
    """An instructor trial's `dhp = hu * ds_pos`, ds_pos one entry per example: torch's message alone, no fix."""
    error = _error("RuntimeError", "The size of tensor a (3) must match the size of tensor b (8) at non-singleton "
                                   "dimension 1")
    failure = _judged(error, error)
    assert "one entry per row needs a column axis (v[:, None] or v.unsqueeze(1))" in failure.feedback, failure.feedback


def test_an_elementwise_operand_of_the_gradients_shape_reversed_is_told_so():
    """An instructor trial's `dW2 = dscores.T @ a1 + reg * W2`: the product, (C, H) where dW2 is (H, C), was told to
    give a vector a column axis and keepdim=True."""
    error = _error("RuntimeError", "The size of tensor a (4) must match the size of tensor b (8) at non-singleton "
                                   "dimension 0")
    failure = _judged(error, error)
    assert "one operand has 4 entries along dimension 0, the gradient 8 (and 4 along the other): it is the " \
        "gradient's shape reversed" in failure.feedback, failure.feedback
    assert "keepdim" not in failure.feedback, failure.feedback


@pytest.mark.parametrize("shapes, elementwise", [("8x4 and 8x4", False), ("8x3 and 8x1", True)])
def test_a_product_is_told_it_may_be_elementwise_only_where_that_gives_the_answer_s_shape(shapes, elementwise):
    """The instructor trial's GRU: dlogits @ Wy with as many examples as hidden units (32x27 and 32x27) was told
    to write * where @ is, though dlogits * Wy is not dh's shape; a forgotten transpose is all it can be."""
    error = _error("RuntimeError", f"mat1 and mat2 shapes cannot be multiplied ({shapes})")
    failure = _judged(error, error, grade_id="de")  # de: (n, dim), (8, 3) at the lecture's sizes
    assert ("write * where @ is" in failure.feedback) == elementwise, failure.feedback
    assert "transpose" in failure.feedback


def test_a_uniformly_tiny_difference_is_told_as_one_not_as_the_rows_it_crosses_the_tolerance_in():
    """eps left out of batch norm is off by about eps / variance everywhere, crossing the tolerance in some rows:
    "wrong only in rows 0, 1, 2, ..." sent an instructor trial's student looking for a row bug."""
    g = torch.Generator().manual_seed(0)
    want = torch.randn(32, 8, generator=g, dtype=torch.float64)
    got = want * (1 + 2e-5 * torch.rand(32, 8, generator=g, dtype=torch.float64))
    (hint,) = diagnose(got, want, rtol=1e-5, atol=1e-8)
    assert hint.startswith("off by no more than a few times the tolerance") and "eps" in hint, hint
    got = want.clone()
    got[3] += 1.0
    assert diagnose(got, want, rtol=1e-5, atol=1e-8) == ["wrong only in rows 3 (1 of 32), right in the others"]


def test_a_hair_off_everywhere_is_an_account_of_the_values_not_a_skipped_step():
    """An instructor trial's dd2 with eps left out, wrong with random upstream gradients alone, was told it skipped
    the two gradients it read: a difference of a few tolerances everywhere is named as one, on a hidden
    configuration too, so the chain-only half says the slip, not a guess."""
    from grader.judge.diagnose import NEAR_SAID

    def off(case):
        want = case.truth["dz"]
        g = torch.Generator().manual_seed(1)
        return SimpleNamespace(status="tensor", detail={},
                               tensor=want * (1 + 3 * TOL.rtol * torch.rand(want.shape, generator=g, dtype=want.dtype)))

    failure = _judged(off, off)
    assert failure.named and NEAR_SAID in failure.feedback, failure.feedback
    failure = _judged(off)  # right on the notebook-sized configuration: the hidden one's hint has no number
    assert failure.named and NEAR_SAID in failure.feedback, failure.feedback


def test_an_answer_that_is_no_tensor_is_told_the_gradients_shape_where_it_is_shown():
    """An instructor trial's `dnll = 1.0 / n` was told "dnll is a float, not a torch.Tensor", and nothing of the
    shape it should have; on the hidden configurations alone, nothing of theirs is shown."""
    number = lambda c: SimpleNamespace(status="not-tensor", detail={"type": "float"})  # noqa: E731
    failure = _judged(number, number)
    expected = next(tuple(c.truth["dz"].shape) for c in tiny_cases(tiny()) if not c.config.scored)
    assert failure.feedback == f"dz is a float, not a torch.Tensor: the gradient is a tensor of shape {expected}", \
        failure.feedback
    hidden = _judged(number)
    assert "tensor of shape" not in hidden.feedback and "hidden configuration" in hidden.feedback, hidden.feedback
