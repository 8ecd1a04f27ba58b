"""How the hidden suite judges one answer on every configuration and turns a failure into feedback.

Never released to students. The grader's plugin supplies the fixtures `each` (judges every submission
of the batch with a function of one graded submission: its answer cells and what they produced in the
sandbox), `cases` (the configurations with their oracle values), `training` and `course`.
"""
from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from grader.compare import compare, hidden_sizes, outcome_text
from grader.compare import judge as judge_answer
from grader.exam import CHAIN, Case
from grader.exercise import BY_GRADE_ID, EX4_CELL, EX4_TRAINING, Answer
from grader.model import PARAMETERS, forward
from grader.suite import Note, Wrong

KNOWN_MISTAKES = yaml.safe_load((Path(__file__).parent / "known_mistakes.yml").read_text())

def _namespace(case: Case, answer: Answer, check: str) -> dict:
    return {**case.student_view(), **case.upstream(answer, check), "n": case.n, "torch": torch, "F": F}


def _known_mistake(case: Case, answer: Answer, check: str, tol, *, tensor=None, error=None,
                   returned: dict[str, torch.Tensor] | None = None) -> dict | None:
    """The catalogue's name for this wrong answer: the mistake whose formula gives the same tensor or,
    for a cell that failed, raises the same error. `returned`: for exercise 4, every parameter gradient
    manual_backward returned on this case.

    The formulas are ours and run here, in the trusted process, on the very inputs the cell saw.
    """
    if answer.exercise == 4:
        named = _fused_mistake_upstream(case, answer, tol, returned) if tensor is not None and returned else None
        if named:
            return named
        # A parameter's gradient in manual_backward makes the same mistakes as exercise 1's: name them
        # with exercise 1's catalogue, on the true upstream gradients.
        answer, check = BY_GRADE_ID["d" + answer.source], CHAIN
    for mistake in KNOWN_MISTAKES.get(answer.grade_id, []):
        ns = _namespace(case, answer, check)
        try:
            exec(compile(mistake["code"], f"<known mistake {answer.grade_id}>", "exec"), ns)
        except Exception as exc:
            if error is not None and (type(exc).__name__, str(exc)[:500]) == error:
                return mistake
            continue
        if tensor is not None and compare(tensor, ns[answer.variable], rtol=tol.rtol, atol=tol.atol, n=case.n).passed:
            return mistake
    return None


# Where each fused step's gradient enters manual_backward, what it is called, and the parameters whose
# gradients reach the loss only through it: a mistake made in that step (its exercise's catalogue)
# shows in these, and is named there.
FUSED_STEPS = {
    "ex2_dlogits": ("logits", "the cross-entropy step", PARAMETERS),
    "ex3_dhprebn": ("hprebn", "the batch-norm step", ("W1", "b1", "C")),
}


@functools.lru_cache(maxsize=256)
def _propagated(case: Case, fused_id: str, index: int) -> dict[str, torch.Tensor] | None:
    """Every parameter's gradient when the catalogue's mistake `index` of a fused step is made inside
    manual_backward and the rest is right: autograd carries the wrong gradient back, here."""
    fused = BY_GRADE_ID[fused_id]
    ns = _namespace(case, fused, CHAIN)
    try:
        exec(compile(KNOWN_MISTAKES[fused_id][index]["code"], f"<known mistake {fused_id}>", "exec"), ns)
        wrong = ns[fused.variable]
        at, _, reached = FUSED_STEPS[fused_id]
        params = {p: case.values[p].detach().clone().requires_grad_() for p in PARAMETERS}
        values = forward(params, case.values["Xb"], case.values["Yb"])
        grads = torch.autograd.grad(values[at], [params[p] for p in reached], grad_outputs=wrong.to(values[at].dtype))
    except Exception:  # a catalogue formula that does not fit this configuration names nothing
        return None
    return dict(zip(reached, grads))


def _fused_mistake_upstream(case: Case, answer: Answer, tol, returned: dict[str, torch.Tensor]) -> dict | None:
    """A fused step's named mistake (exercises 2 and 3) that, made inside manual_backward, gives this
    parameter's tensor and every other one that step reaches: a db2 n times too large with every other
    gradient right is a mistake in db2, not a cross-entropy step without /n."""
    for fused_id, (_, step, reached) in FUSED_STEPS.items():
        if answer.source not in reached or not all(p in returned for p in reached):
            continue
        for index, mistake in enumerate(KNOWN_MISTAKES.get(fused_id, [])):
            wrong = _propagated(case, fused_id, index)
            if wrong is not None and all(compare(returned[p], wrong[p], rtol=tol.rtol, atol=tol.atol, n=case.n).passed
                                         for p in reached):
                return {**mistake, "feedback": f"{step} of manual_backward: {mistake['feedback']}"}
    return None


def _catalogue(submission, answer: Answer, check: str, tol, hints: str):
    """The hand-written catalogue, for what the neighbourhood's search cannot reach; under `formula`
    hints an entry's right expression follows its name."""
    def named(case: Case, *, tensor=None, error=None) -> str | None:
        returned = None
        if answer.exercise == 4 and tensor is not None:
            outcomes = {p: submission.attempt.outcomes.get((f"ex4_d{p}", check, case.config.name)) for p in PARAMETERS}
            returned = {p: o.tensor for p, o in outcomes.items() if o is not None and o.tensor is not None}
        mistake = _known_mistake(case, answer, check, tol, tensor=tensor, error=error, returned=returned)
        return _with_formula(mistake, hints)

    return named


def _with_formula(mistake: dict | None, hints: str) -> str | None:
    if mistake is None:
        return None
    return f"{mistake['feedback']} ({mistake['formula']})" if hints == "formula" and mistake.get("formula") \
        else mistake["feedback"]


def _judge(submission, cases: list[Case], course, answer: Answer, check: str) -> None:
    """Raise `Wrong` with the student's feedback unless the answer is right on every scored case."""
    if submission.submission.error:
        raise Wrong(submission.submission.error, "unreadable")
    if answer.cell_id in submission.submission.problems:
        raise Wrong(submission.submission.problems[answer.cell_id], "missing")
    if answer.cell_id in submission.submission.refused:
        raise Wrong(f"not run: the static check refused it, {submission.submission.refused[answer.cell_id]}",
                    "refused")
    outcomes = {case.config.name: submission.attempt.outcomes.get((answer.grade_id, check, case.config.name))
                for case in cases}
    hints = course.feedback.hints
    failure = judge_answer(outcomes, cases, answer, check, course.tolerance, hints=hints,
                           catalogue=_catalogue(submission, answer, check, course.tolerance, hints),
                           not_run=submission.attempt.error or "the cell was not run")
    if failure:
        raise Wrong(failure.feedback, failure.kind, failure.mistake)


@pytest.fixture
def judge(each, cases, course):
    """judge(grade_id, check): judge every submission's answer for that grade id and check."""

    def run(grade_id: str, check: str) -> None:
        each(lambda submission: _judge(submission, cases, course, BY_GRADE_ID[grade_id], check))

    return run


def _judge_training(submission, training, course) -> Note:
    """Raise `Wrong` unless the student's training steps follow autograd's; on success, record how the
    speed of their backward compares with autograd's."""
    if submission.submission.error:
        raise Wrong(submission.submission.error, "unreadable")
    for reason in (submission.submission.problems, submission.submission.refused):
        if EX4_CELL in reason:
            raise Wrong(f"not run: {reason[EX4_CELL]}", "missing")
    outcome = submission.attempt.outcomes.get((EX4_TRAINING, "chain", training.config.name))
    if outcome is None:
        raise Wrong(submission.attempt.error or "the training check did not run", "not-run")
    if outcome.status != "tensor":
        failure = outcome_text(outcome, BY_GRADE_ID["ex4_dC"], hints=course.feedback.hints,
                               hidden=hidden_sizes((training.config,)))
        step = outcome.detail.get("step")
        raise Wrong(f"training: {failure.feedback}" + (f" (at step {step})" if step and "step" not in failure.feedback
                                                       else ""), failure.kind, failure.mistake)
    tol = course.tolerance
    steps = len(training.losses)
    for step, (mine, theirs) in enumerate(zip(outcome.tensor.tolist(), training.losses.tolist()), start=1):
        if abs(mine - theirs) > tol.atol + tol.rtol * abs(theirs):
            raise Wrong(f"training diverges from autograd at step {step} of {steps}: the loss is {mine:.6f} "
                        f"with your gradients, {theirs:.6f} with autograd's (the steps before it agree)")
    for name in PARAMETERS:
        verdict = compare(outcome.extra[name], training.final[name], rtol=tol.rtol, atol=tol.atol)
        if not verdict.passed:
            raise Wrong(f"after {steps} training steps the losses agree but {name} differs from autograd's: "
                        f"{verdict.message}")
    mine = outcome.detail.get("seconds_per_step")
    # Timings differ from run to run: they go on record, not into the feedback, so that grading the same
    # notebook twice gives the same feedback (the notebook's self-check shows them).
    extra = {"manual_backward_ms_per_step": round(mine * 1e3, 4),
             "autograd_backward_ms_per_step": round(training.seconds_per_step * 1e3, 4)} \
        if isinstance(mine, (int, float)) else {}
    return Note(f"{steps} training steps match autograd", extra)


@pytest.fixture
def judge_training(each, training, course):
    """judge_training(): judge every submission's training run."""
    return lambda: each(lambda submission: _judge_training(submission, training, course))
