"""Exercise 4 graded for real: the solved function gets full credit; a function with one wrong parameter
gradient loses exactly that parameter's credit and fails the training check, which names the step
where training with it parts from training with autograd."""
import re

import pytest

from grader.exercises.makemore_mlp import EXERCISE
from grader.pipeline.batch import grade
from grader.vocabulary import Verdict
from helpers.notebooks import reference_sources, submission, write
from helpers.paths import COURSE

EX4 = EXERCISE.functions[0]

REFERENCE = reference_sources()

# name -> (the reference line to replace, its wrong version, the grade id that must lose its credit)
VARIANTS = {
    "wrong-dW2": ("    dW2 = h.T @ dlogits\n", "    dW2 = 2 * h.T @ dlogits\n", "ex4_dW2"),
    "missing-n": ("    db2 = dlogits.sum(0)\n", "    db2 = dlogits.sum(0) * n\n", "ex4_db2"),
    "no-softmax-n": ("    dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, num_classes=logits.shape[1])) / n\n",
                     "    dlogits = F.softmax(logits, 1) - F.one_hot(Yb, num_classes=logits.shape[1])\n", "ex4_dW2"),
    "product": ("    dh = dlogits @ W2.T\n", "    dh = dlogits @ W2\n", "ex4_dW1"),
    "overwrite": ("    dC = torch.zeros_like(C).index_add(0, Xb.view(-1), demb.view(-1, C.shape[1]))\n",
                  "    dC = torch.zeros_like(C)\n    dC[Xb] = demb\n", "ex4_dC"),
}
# dC returned under its gradient's name, not its parameter's
WRONG_KEY = ('    return {"C": dC,', '    return {"dC": dC,')


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("ex4")
    write(root / "subs" / "solved.ipynb", submission())
    for name, (right, wrong, _) in VARIANTS.items():
        assert right in REFERENCE[EX4.cell], name
        write(root / "subs" / f"{name}.ipynb",
              submission(replace={EX4.cell: REFERENCE[EX4.cell].replace(right, wrong)}))
    assert WRONG_KEY[0] in REFERENCE[EX4.cell]
    write(root / "subs" / "wrong-key.ipynb", submission(replace={EX4.cell: REFERENCE[EX4.cell].replace(*WRONG_KEY)}))
    pairs = grade([root / "subs"], COURSE, root / "out", jobs=2)
    return {r.submission: {t.name: t for t in r.tests} for _, r in pairs}


def test_the_solved_function_gets_full_credit_and_a_timing_on_record(results):
    tests = results["solved"]
    assert all(t.score == t.max_score for t in tests.values()), [t for t in tests.values() if t.score < t.max_score]
    assert "training steps match autograd" in tests[EXERCISE.training.grade_id].output
    assert tests[EXERCISE.training.grade_id].extra["manual_backward_ms_per_step"] > 0


# The cross-entropy step without its 1/n: every parameter's gradient n times too large (db1's is 0 either way).
UPSTREAM = {"no-softmax-n": {"ex4_dC", "ex4_dW1", "ex4_dW2", "ex4_db2", "ex4_dbngain", "ex4_dbnbias"},
            "product": {f"ex4_d{p}" for p in ("C", "W1", "b1", "W2", "b2", "bngain", "bnbias")}}


@pytest.mark.parametrize("name", [v for v in VARIANTS if v not in UPSTREAM])
def test_a_wrong_parameter_loses_its_credit_and_the_training_names_the_step(results, name):
    tests = results[name]
    own = VARIANTS[name][2]
    lost = {g for g in EXERCISE.grade_ids if tests[g].score < tests[g].max_score}
    assert lost == {own, EXERCISE.training.grade_id}, {g: tests[g].output for g in lost}
    assert tests[own].score == 0
    # On a hidden configuration: the verdict alone, no loss and no step the student's code parted at.
    training = tests[EXERCISE.training.grade_id].output
    assert training.startswith("training diverges from autograd"), training
    assert not re.search(r"\d\.\d|step \d", training), training


def test_feedback_names_the_mistake_inside_manual_backward(results):
    assert "n times too large" in results["missing-n"]["ex4_db2"].output
    assert "your dC keeps one use of each index" in results["overwrite"]["ex4_dC"].output  # dC, as exercise 1 says
    assert "twice the right value" in results["wrong-dW2"]["ex4_dW2"].output


def test_a_mistake_of_the_fused_cross_entropy_step_is_named_on_every_parameter_it_reaches(results):
    tests = results["no-softmax-n"]
    lost = {g for g in EXERCISE.grade_ids if tests[g].score < tests[g].max_score}
    assert lost == UPSTREAM["no-softmax-n"] | {EXERCISE.training.grade_id}, lost
    for grade_id in UPSTREAM["no-softmax-n"]:
        assert "the cross-entropy step of manual_backward" in tests[grade_id].output, tests[grade_id].output
        assert "n times too large" in tests[grade_id].output


def test_a_parameter_wrong_on_its_own_is_not_blamed_on_a_fused_step(results):
    """db2 n times too large with every other gradient right: the mistake is db2's own."""
    assert "cross-entropy step" not in results["missing-n"]["ex4_db2"].output


def test_a_product_that_does_not_fit_inside_the_function_names_the_line_not_the_parameter(results):
    """The function stops at `dh = dlogits @ W2`: every parameter loses its credit, and the hint names the
    product's line and the gradient it computes, never a parameter's shape (b1 is 1-D: no product has it)."""
    tests = results["product"]
    lost = {g for g in EXERCISE.grade_ids if tests[g].score < tests[g].max_score}
    assert lost == UPSTREAM["product"] | {EXERCISE.training.grade_id}
    for grade_id in UPSTREAM["product"]:
        output = tests[grade_id].output
        assert "whose shape is the gradient that line computes" in output, output
        assert "b1's" not in output and "W1's" not in output, output


@pytest.mark.parametrize("off, passes", [(3e-8, True), (2e-7, False)])
def test_final_parameters_get_the_tolerance_their_steps_add_up_to(off, passes):
    """Each SGD step may move a parameter by lr times a gradient error the per-gradient check accepts: after
    50 steps at 0.1 those add up to 5 atol. With atol itself, a float32 one-hot (every gradient right to
    ~3e-9) failed the final parameters on one hidden configuration in five (an instructor's trial); an error
    beyond what the steps add up to still fails."""
    from types import SimpleNamespace

    import torch

    from grader.judge.exam import CHAIN
    from grader.judge.suite import Wrong
    from grader.judge.verdicts import judge_training

    network = EXERCISE.network
    training = SimpleNamespace(config=SimpleNamespace(name="t"), losses=torch.linspace(3.0, 2.0, 50), lr=0.1,
                               final={p: torch.zeros(3, dtype=torch.float64) for p in network.parameters})
    outcome = SimpleNamespace(status="tensor", tensor=training.losses.clone(), detail={},
                              extra={p: torch.full((3,), off, dtype=torch.float64) for p in network.parameters})
    graded = SimpleNamespace(submission=SimpleNamespace(error=None, problems={}, refused={}),
                             attempt=SimpleNamespace(error=None, outcomes={
                                 (EXERCISE.training.grade_id, CHAIN, "t"): outcome}))
    if passes:
        assert judge_training(graded, training, COURSE).text == "50 training steps match autograd"
    else:
        with pytest.raises(Wrong, match="the final parameters differ"):
            judge_training(graded, training, COURSE)


def test_a_gradient_returned_under_another_key_is_said_so_not_blank(results):
    """The fifteenth student trial: `{"dC": dC, ...}` was "not attempted yet" in the grader's feedback, where the
    self-check said the function returns no 'C'."""
    test = results["wrong-key"]["ex4_dC"]
    assert test.score == 0 and test.verdict == Verdict.INCORRECT, test.verdict
    assert "manual_backward returns no 'C': the grader reads each gradient under its parameter's name" in \
        test.output, test.output
