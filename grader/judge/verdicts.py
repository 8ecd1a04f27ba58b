"""The hidden suite's judging: one answer on every configuration, or the whole training run, turned into a
verdict and the student's feedback. A course's autotests/conftest.py only calls it, with the catalogue of
named mistakes its own folder holds (known_mistakes.yml), so a fix here reaches every course, old ones
included, without copying a line into them.
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch
import yaml

from grader.exercise import FUNCTION, FUSED, NAMESPACE, Answer, Exercise
from grader.judge.compare import ONE_HOT_WIDTH, compare, one_hot_unsized, outcome_text
from grader.judge.compare import judge as judge_answer
from grader.judge.diagnose import counterpart
from grader.judge.exam import CHAIN, Case, trajectory_atol
from grader.judge.oracle import against
from grader.judge.suite import Note, Wrong


class Catalogue:
    """A course's hand-written named mistakes (grade id -> entries with code, feedback and formula), with
    what a fused step's mistake does to the gradients it reaches, computed once per case."""

    def __init__(self, mistakes: dict):
        self.mistakes = mistakes
        self.propagated = functools.lru_cache(maxsize=256)(functools.partial(_propagated, self))

    @classmethod
    def read(cls, path: Path) -> Catalogue:
        return cls(yaml.safe_load(path.read_text()) or {})


def _namespace(case: Case, answer: Answer, check: str) -> dict:
    sizes = case.exercise.network.size_values(case.values)
    return {**case.student_view(), **case.upstream(answer, check), **sizes, **NAMESPACE}


def _function_answers(exercise: Exercise, cell: str) -> list[Answer]:
    return [a for a in exercise.answers if a.cell_id == cell]


def _known_mistake(known: Catalogue, case: Case, answer: Answer, check: str, tol, *, tensor=None, error=None,
                   returned: dict[str, torch.Tensor] | None = None) -> dict | None:
    """The catalogue's name for this wrong answer: the mistake whose formula gives the same tensor or,
    for a cell that failed, raises the same error. `returned`: for a function's answer, every gradient
    the function returned on this case, by tensor.

    The formulas are ours and run here, in the trusted process, on the very inputs the cell saw.
    """
    if answer.kind == FUNCTION:
        named = _fused_mistake_upstream(known, case, answer, tol, returned) if tensor is not None and returned else None
        if named:
            return named
        answer, check = counterpart(case.exercise, answer) or (answer, check)
    for mistake in known.mistakes.get(answer.grade_id, []):
        ns = _namespace(case, answer, check)
        try:
            exec(compile(mistake["code"], f"<known mistake {answer.grade_id}>", "exec"), ns)
        except Exception as exc:
            if error is not None and (type(exc).__name__, str(exc)[:500]) == error:
                return mistake
            continue
        if tensor is not None and compare(tensor, ns[answer.variable], rtol=tol.rtol, atol=tol.atol).passed:
            return mistake
    return None


def _propagated(known: Catalogue, case: Case, fused_id: str, index: int) -> dict[str, torch.Tensor] | None:
    """The gradient of every parameter the fused step reaches when the catalogue's mistake `index` of
    that step is made inside a function and the rest is right: autograd carries the wrong gradient of
    the step's tensor back, here."""
    network = case.exercise.network
    fused = case.exercise.by_grade_id[fused_id]
    reached = network.upstream_of(fused.source)
    ns = _namespace(case, fused, CHAIN)
    try:
        exec(compile(known.mistakes[fused_id][index]["code"], f"<known mistake {fused_id}>", "exec"), ns)
        wrong = ns[fused.variable]
        params = {p: case.values[p].detach().clone().requires_grad_() for p in network.parameters}
        at = network.forward(params, {k: case.values[k] for k in network.data})[fused.source]
        grads = torch.autograd.grad(against([at], [wrong.to(at.dtype)]), [params[p] for p in reached])
    except Exception:  # a catalogue formula that does not fit this configuration names nothing
        return None
    return dict(zip(reached, grads, strict=True))


def _fused_mistake_upstream(known: Catalogue, case: Case, answer: Answer, tol,
                           returned: dict[str, torch.Tensor]) -> dict | None:
    """A fused answer's named mistake that, made inside the function, gives this gradient and every
    other one that step reaches (the parameters its tensor is computed from): a bias gradient n times
    too large with every other gradient right is a mistake in that gradient, not a fused step without /n."""
    exercise = case.exercise
    for fused in (a for a in exercise.answers if a.kind == FUSED):
        reached = exercise.network.upstream_of(fused.source)
        if answer.source not in reached or not all(p in returned for p in reached):
            continue
        for index, mistake in enumerate(known.mistakes.get(fused.grade_id, [])):
            wrong = known.propagated(case, fused.grade_id, index)
            if wrong is not None and all(compare(returned[p], wrong[p], rtol=tol.rtol, atol=tol.atol).passed
                                         for p in reached):
                step = fused.title or f"the fused step of {fused.variable}"
                function = exercise.function_of(answer).name
                return {**mistake, "feedback": f"{step} of {function}: {mistake['feedback']}"}
    return None


def _catalogue(known: Catalogue, submission, answer: Answer, check: str, tol, hints: str):
    """The hand-written catalogue, for what the neighbourhood's search cannot reach; under `formula`
    hints an entry's right expression follows its name."""
    def named(case: Case, *, tensor=None, error=None) -> str | None:
        returned = None
        if answer.kind == FUNCTION and tensor is not None:
            outcomes = {a.source: submission.attempt.outcomes.get((a.grade_id, check, case.config.name))
                        for a in _function_answers(case.exercise, answer.cell_id)}
            returned = {p: o.tensor for p, o in outcomes.items() if o is not None and o.tensor is not None}
        mistake = _known_mistake(known, case, answer, check, tol, tensor=tensor, error=error, returned=returned)
        return _with_formula(mistake, hints)

    return named


def _with_formula(mistake: dict | None, hints: str) -> str | None:
    if mistake is None:
        return None
    return f"{mistake['feedback']} ({mistake['formula']})" if hints == "formula" and mistake.get("formula") \
        else mistake["feedback"]


def judge(submission, cases: list[Case], course, answer: Answer, check: str, known: Catalogue) -> Note | None:
    """Raise `Wrong` with the student's feedback unless the answer is right on every scored case. A right cell
    that calls F.one_hot without its number of classes is told so: right only because every batch drawn held
    the last class (an instructor trial's fused cell, full marks and no word, where a smaller batch breaks it)."""
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
                           catalogue=_catalogue(known, submission, answer, check, course.tolerance, hints),
                           not_run=submission.attempt.error or "the cell was not run",
                           code=submission.submission.cells.get(answer.cell_id))
    if failure:
        raise Wrong(failure.feedback, failure.kind, failure.mistake, failure.named)
    if answer.kind != FUNCTION and one_hot_unsized(submission.submission.cells.get(answer.cell_id)):
        return Note(f"but {ONE_HOT_WIDTH}")
    return None


def judge_training(submission, training, course) -> Note:
    """Raise `Wrong` unless the student's training steps follow autograd's; on success, record how the
    speed of their backward compares with autograd's."""
    exercise = course.exercise
    function = exercise.training.function
    if submission.submission.error:
        raise Wrong(submission.submission.error, "unreadable")
    for reason in (submission.submission.problems, submission.submission.refused):
        if function.cell in reason:
            raise Wrong(f"not run: {reason[function.cell]}", "missing")
    outcome = submission.attempt.outcomes.get((exercise.training.grade_id, CHAIN, training.config.name))
    if outcome is None:
        raise Wrong(submission.attempt.error or "the training check did not run", "not-run")
    # The training run is on a hidden configuration and has no public twin: only fixed words reach the
    # student, never a loss, a step the student's code chose to fail at, or what it raised.
    if outcome.status != "tensor":
        failure = outcome_text(outcome, _function_answers(exercise, function.cell)[0], hints=course.feedback.hints,
                               exercise=exercise, public=False)
        raise Wrong(f"training: {failure.feedback}", failure.kind, failure.mistake)
    tol = course.tolerance
    steps = len(training.losses)
    mine, theirs = outcome.tensor, training.losses
    if mine.shape != theirs.shape or not torch.allclose(mine.to(theirs.dtype), theirs, rtol=tol.rtol, atol=tol.atol):
        raise Wrong(f"training diverges from autograd: over {steps} steps from one init, the losses with your "
                    "gradients differ from those with autograd's")
    atol = trajectory_atol(tol.atol, training.lr, steps)
    if not all(compare(outcome.extra[name], training.final[name], rtol=tol.rtol, atol=atol).passed
               for name in exercise.network.parameters):
        raise Wrong(f"after {steps} training steps the losses agree with autograd's but the final parameters "
                    "differ")
    mine = outcome.detail.get("seconds_per_step")
    # Timings differ from run to run: they go on record, not into the feedback, so that grading the same
    # notebook twice gives the same feedback (the notebook's self-check shows them).
    extra = {f"{function.name}_ms_per_step": round(mine * 1e3, 4),
             "autograd_backward_ms_per_step": round(training.seconds_per_step * 1e3, 4)} \
        if isinstance(mine, (int, float)) else {}
    return Note(f"{steps} training steps match autograd", extra)
