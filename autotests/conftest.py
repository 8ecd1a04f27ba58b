"""How the hidden suite judges one answer on every configuration and turns a failure into feedback.

Never released to students. The grader's plugin supplies the fixtures `each` (judges every submission
of the batch with a function of one graded submission: its answer cells and what they produced in the
sandbox), `cases` (the configurations with their oracle values), `training` and `course`.
"""
from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import astuple
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from grader.compare import BLANK, SQUEEZABLE, WRONG, compare
from grader.exam import CHAIN, Case
from grader.exercise import BY_GRADE_ID, EX4_CACHE, EX4_CELL, EX4_TRAINING, Answer
from grader.model import PARAMETERS, forward
from grader.suite import Note, Wrong

KNOWN_MISTAKES = yaml.safe_load((Path(__file__).parent / "known_mistakes.yml").read_text())

ALLOWED_NAMES = ("answer cells may use only the parameters, Xb, Yb, n, the forward intermediates by their "
                 "lecture names, torch, F and variables assigned by earlier answer cells of exercise 1")

STATUS_TEXT = {
    "blank": "not attempted yet",
    "missing": "no answer cell",
    "timeout": "the cell ran past its time limit",
    "unassigned": "the cell never assigns {variable}",
    "not-tensor": "{variable} is a {type}, not a torch.Tensor",
    "subclass": "{variable} is a {type}, a subclass of torch.Tensor: give a plain tensor",
    "unsendable": "{variable} could not be read back: {error}",
    "broken": "the grading process sent a malformed answer",
    "autograd": "autograd was used at run time, which an answer must not do: {evidence}",
    "forbidden-call": "the cell did what no answer needs and the grader forbids: {evidence}",
    "bad-step": "at training step {step}, manual_backward gave no tensor of the right shape for {parameter}",
}


def _namespace(case: Case, answer: Answer, check: str) -> dict:
    return {**case.student_view(), **case.upstream(answer, check), "n": case.n, "torch": torch, "F": F}


def _known_mistake(case: Case, answer: Answer, check: str, tol, *, tensor=None, error=None,
                   returned: dict[str, torch.Tensor] | None = None) -> str | None:
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
                return mistake["feedback"]
            continue
        if tensor is not None and compare(tensor, ns[answer.variable], rtol=tol.rtol, atol=tol.atol, n=case.n).passed:
            return mistake["feedback"]
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


def _fused_mistake_upstream(case: Case, answer: Answer, tol, returned: dict[str, torch.Tensor]) -> str | None:
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
                return f"{step} of manual_backward: {mistake['feedback']}"
    return None


@functools.lru_cache(maxsize=64)
def _hidden_sizes(configs: tuple) -> frozenset[int]:
    """Every size of these configurations and every product of them (a `view` error prints n*B*E)."""
    found = set()
    for config in configs:
        dims = astuple(config.sizes)
        for count in range(1, len(dims) + 1):
            found.update(math.prod(combo) for combo in itertools.combinations(dims, count))
    return frozenset(found)


def _masked(text, hidden: frozenset[int]):
    """`text` with every number that is a hidden size (or a product of them) replaced by "…"."""
    if not isinstance(text, str) or not hidden:
        return text
    return re.sub(r"\b\d+\b", lambda m: "…" if int(m.group()) in hidden else m.group(), text)


def _public(submission, case: Case, cases: list[Case], answer: Answer, check: str, outcome) -> tuple[dict, frozenset]:
    """What of a failed run's detail a student may see, and the sizes still to mask in it: on a hidden
    configuration, the error of the public lecture-sized run when that run raised the same error (same
    type, same line), else the sizes of every hidden configuration masked."""
    if not case.config.scored:
        return outcome.detail, frozenset()
    probe = next((c for c in cases if not c.config.scored), None)
    public = None if probe is None else submission.attempt.outcomes.get((answer.grade_id, check, probe.config.name))

    def where(o):
        return o.detail.get("error_type"), o.detail.get("line")

    if outcome.status == "error" and public is not None and public.status == "error" and where(public) == where(outcome):
        return {**outcome.detail, "error": public.detail["error"]}, frozenset()
    return outcome.detail, _hidden_sizes(tuple(c.config for c in cases if c.config.scored))


def _outcome_text(outcome, case: Case | None, answer: Answer, check: str, tol, *, shown: dict | None = None,
                  hidden: frozenset[int] = frozenset()) -> tuple[str, str, str]:
    """(kind, feedback, mistake) for an outcome that is not a tensor (case None: no catalogue to name it
    from). `shown`: the detail the student may see (see _public), with the sizes in `hidden` masked."""
    shown = {k: _masked(v, hidden) for k, v in (outcome.detail if shown is None else shown).items()}
    if outcome.status == "error":
        where = f" on line {outcome.detail['line']}" if outcome.detail.get("line") else ""
        text = f"{outcome.detail['error_type']}{where}: {shown['error']}"
        named = None if case is None else _known_mistake(
            case, answer, check, tol, error=(outcome.detail["error_type"], outcome.detail["error"]))
        mistake = named or ""
        if named:
            text += f"; {named}"
        elif outcome.detail["error_type"] == "NameError" and answer.exercise == 4:
            text += " (manual_backward may use only its arguments, torch and F)"
        elif outcome.detail["error_type"] == "NameError":
            text += f" (uses a variable the answer cells do not have: {ALLOWED_NAMES})"
        elif outcome.detail["error_type"] == "KeyError" and answer.exercise == 4:
            text += f" (the cache holds exactly: {', '.join(EX4_CACHE)})"
        elif "cannot be multiplied" in outcome.detail["error"]:
            mistake = "the shapes of a matrix product do not fit (a transpose is probably missing or misplaced)"
            text += (f"; the shapes of a matrix product do not fit: write the product whose shape is "
                     f"{answer.variable}'s (a transpose is probably missing or misplaced)")
        if outcome.detail.get("limit") == "memory":
            return "memory", text + "; the cell ran into the sandbox's memory limit (no gradient here needs " \
                                    "more than a few megabytes)", mistake
        return "error", text, mistake
    template = STATUS_TEXT.get(outcome.status, "unexpected result ({status})")
    kind = BLANK if outcome.status == "blank" else outcome.status
    detail = {k: "; ".join(_masked(x, hidden) for x in v) if isinstance(v, list) else v for k, v in shown.items()}
    return kind, template.format(variable=answer.variable, status=outcome.status, **detail), ""


def _assess(submission, case: Case, cases: list[Case], answer: Answer, check: str, course) -> tuple[str, str, str] | None:
    """None when the answer is right on this case, else (kind, feedback, the mistake's name or "")."""
    outcome = submission.attempt.outcomes.get((answer.grade_id, check, case.config.name))
    if outcome is None:
        return "not-run", submission.attempt.error or "the cell was not run", ""
    tol = course.tolerance
    if outcome.status != "tensor":
        shown, hidden = _public(submission, case, cases, answer, check, outcome)
        return _outcome_text(outcome, case, answer, check, tol, shown=shown, hidden=hidden)
    verdict = compare(outcome.tensor, case.expected(answer, check), rtol=tol.rtol, atol=tol.atol, n=case.n)
    if verdict.passed:
        return None
    lines = [f"{answer.variable}: {verdict.message}"]
    returned = None
    if answer.exercise == 4:
        outcomes = {p: submission.attempt.outcomes.get((f"ex4_d{p}", check, case.config.name)) for p in PARAMETERS}
        returned = {p: o.tensor for p, o in outcomes.items() if o is not None and o.tensor is not None}
    named = _known_mistake(case, answer, check, tol, tensor=outcome.tensor, returned=returned) \
        if verdict.status == WRONG else None
    mistake = named or "; ".join(verdict.hints)
    return verdict.status, "; ".join([*lines, mistake] if mistake else lines), mistake


def _judge(submission, cases: list[Case], course, answer: Answer, check: str) -> None:
    """Raise `Wrong` with the student's feedback unless the answer is right on every scored case."""
    if submission.submission.error:
        raise Wrong(submission.submission.error, "unreadable")
    if answer.cell_id in submission.submission.problems:
        raise Wrong(submission.submission.problems[answer.cell_id], "missing")
    if answer.cell_id in submission.submission.refused:
        raise Wrong(f"not run: the static check refused it, {submission.submission.refused[answer.cell_id]}",
                    "refused")
    failures = []
    for case in cases:
        if case.config.scored:
            failure = _assess(submission, case, cases, answer, check, course)
            if failure:
                failures.append((case, *failure))
    if not failures:
        return
    case, kind, feedback, mistake = next((f for f in failures if f[1] != SQUEEZABLE), failures[0])
    probe = next(c for c in cases if not c.config.scored)
    if kind != BLANK and _assess(submission, probe, cases, answer, check, course) is None:
        mistake = mistake or "a hard-coded size"
        feedback += (f"; right for the lecture's sizes (n={probe.n}) but not for n={case.n}: "
                     "a hard-coded size? Use n and the tensors' shapes")
    if check != CHAIN:
        feedback = "with random upstream gradients (a check of this one backward step): " + feedback
    raise Wrong(feedback, kind, mistake)


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
        kind, text, mistake = _outcome_text(outcome, None, BY_GRADE_ID["ex4_dC"], "chain", course.tolerance,
                                            hidden=_hidden_sizes((training.config,)))
        step = outcome.detail.get("step")
        raise Wrong(f"training: {text}" + (f" (at step {step})" if step and "step" not in text else ""), kind, mistake)
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
