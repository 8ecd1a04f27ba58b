"""Test results -> points, verdict, feedback and named mistake per grade id, with the course's
partial-credit policy, and the integrity flags an instructor reviews.

The nouns of the data path, in the order a submission's answers pass through them:
- Outcome (grader.sandbox.parent): what one answer cell produced on one configuration, a Status.
- Attempt (grader.sandbox.parent): every Outcome of one submission's sandboxed run, with its error.
- Graded (grader.judge.suite): a submission beside its Attempt, as the hidden suite receives it.
- Comparison (grader.judge.compare): one tensor compared with the expected one on one configuration.
- ItemResult (here): one test's judgement (grade id and check) of one submission.
- TestScore and Result (here): a grade id's points and vocabulary.Verdict, then a submission's
  TestScores and Flags: what results files, pages, reports and gradebooks are written from.

Policy (course.yml `policy`):
- CHAIN and LOCAL both pass: full points.
- CHAIN passes but LOCAL fails: `chain_only_credit` of the points. The value is right for this loss but
  the cell does not compute this step of the chain rule from its own upstream gradients: a hard-coded
  zero (`db1 = torch.zeros_like(b1)`, right only because batch norm removes b1's effect), a path that
  skips an intermediate gradient, or an answer recomputed with autograd. The feedback names the gradients
  it skipped and guesses at no cause (most are honest slips). An upstream gradient that is a fixed number (the
  loss's 1, a term's weight in its final sum) is never randomised, so writing it in or leaving a 1 out loses
  nothing.
- Right values in a shape that differs only by size-1 dimensions (the lecture's own batch-norm mean gradient of
  shape (H,) for a (1, H) tensor): `squeezable_shape_credit` of the points, since broadcasting would
  turn it into a wrong-shaped gradient one step later.
- Anything else: 0, with the feedback of the first configuration that failed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from grader import syntax
from grader.exercise import ATOMIC, CHAIN, DEFAULT, LOCAL
from grader.vocabulary import Broadcast, Chain, Flag, Match, Status, Verdict

# What the hidden suite (grader.judge.suite) found of one test of one submission, the first thing this module
# reads: kept here, beside what it becomes, so that what reads results (report, exports) imports no suite.
PASSED, WRONG, ERROR = "passed", "wrong", "error"


@dataclass(frozen=True)
class ItemResult:
    status: str  # PASSED, WRONG or ERROR (a bug in the suite itself, never the student's fault)
    kind: str = ""
    feedback: str = ""
    extra: dict = field(default_factory=dict)  # measurements for the record, kept out of the feedback
    mistake: str = ""
    named: bool = False  # `mistake` names a mistake, not only where the values are wrong


# What a judged answer did that its result records as a flag, whatever it scored (Flag says which of
# them are integrity flags and which errors the student fixes).
FLAGGED = (Flag.AUTOGRAD, Flag.FORBIDDEN_CALL, Flag.TIMEOUT, Flag.MEMORY, Flag.CRASHED)


@dataclass
class TestScore:
    """One grade id of a submission. `verdict` and `mistake` are decided here and stored as they are, so
    that what reads a result (report, exports, pages) never re-derives them from the feedback's wording;
    `mistake` is the hidden suite's name for what is wrong ("" when it named none, or the answer is right)."""

    name: str
    score: float
    max_score: float
    verdict: Verdict
    output: str
    extra: dict = field(default_factory=dict)  # measurements for the record
    mistake: str = ""

    @property
    def status(self) -> str:
        """Gradescope's status: only full credit is "passed"."""
        return "passed" if self.score >= self.max_score else "failed"


@dataclass
class Result:
    submission: str
    path: str
    tests: list[TestScore] = field(default_factory=list)
    flags: list[dict] = field(default_factory=list)  # {"kind": a Flag, "evidence": ..., where it was seen}
    error: str | None = None
    seconds: float = 0.0
    isolation: dict = field(default_factory=dict)
    digest: str = ""  # of everything the result depends on: see grade.input_digest
    exercise: str = DEFAULT  # what was graded, as course.yml names it: pages and reports order and head by it
    # The exercise's grade ids in the notebook's order, each with its part: what a report or an export orders and
    # groups by without loading the exercise, whose definition imports torch (seconds a command) and whose file,
    # for a course's own exercise, may not be where the report runs. Empty: read from a file written before.
    outline: dict[str, int | None] = field(default_factory=dict)
    # What the feedback page draws (grader.outputs.pictures.gather), taken from the answers while they are
    # in memory; never written to a results file. None: not gathered (not asked for, or a kept result).
    evidence: dict | None = field(default=None, repr=False, compare=False)
    # Taken off the total, as nbgrader's gradebook holds it for a late submission (grader.outputs.final);
    # the grader itself never sets one.
    late_penalty: float = 0.0
    notebook_sha256: str = ""  # of the notebook's bytes as graded (extract.Submission.sha256)
    # Why these scores are no longer the student's (grader.outputs.report.resubmitted: a notebook handed in since
    # and not graded), as the report finds it and marks the result's own files; "" while they are.
    superseded: str = ""

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tests) - self.late_penalty

    @property
    def graded(self) -> bool:
        """False for a submission none of whose answers ran (not a notebook, unreadable, a sandbox that
        never ran it): every test then says only the submission's error, and no count of wrong tensors
        describes it."""
        return self.error is None or any(t.output != self.error for t in self.tests)

    @property
    def integrity_flags(self) -> list[dict]:
        """The flags for review (Flag.integrity); the others are errors the student fixes."""
        return [f for f in self.flags if Flag.is_integrity(str(f.get("kind", "")))]

    @property
    def error_flags(self) -> list[dict]:
        return [f for f in self.flags if not Flag.is_integrity(str(f.get("kind", "")))]

    @property
    def max_score(self) -> float:
        return sum(t.max_score for t in self.tests)


def _one(grade_id: str, points: float, chain: ItemResult | None, local: ItemResult | None, policy,
         upstream: tuple[str, ...] = (), code: str | None = None) -> TestScore:
    """`upstream`: the gradients the answer's LOCAL check randomised, which a chain-only answer skips, unless
    its `code` (the cell's source, read, never run) reads them all."""
    def scored(fraction: float, verdict: Verdict, output: str) -> TestScore:
        return TestScore(grade_id, round(points * fraction, 6), points, verdict, output)

    if chain is None:
        return scored(0.0, Verdict.INCORRECT, "not graded: the hidden suite has no test for this grade id")
    if ERROR in (chain.status, local.status if local else None):
        failed = chain if chain.status == ERROR else local
        return scored(0.0, Verdict.INCORRECT, failed.feedback)
    local_ok = local is None or local.status == PASSED
    if chain.status == PASSED and local_ok:
        return scored(1.0, Verdict.CORRECT, "; ".join(filter(None, ["correct on every configuration", chain.feedback])))
    if chain.status == PASSED and local.named:  # what is known of the slip, with no guess in front of it
        return scored(policy.chain_only_credit, Verdict.PARTIAL,
                      f"{local.feedback}. Partial credit: right with this loss's own upstream gradients, where "
                      "the slip does not show")
    if chain.status == PASSED:
        named = " and ".join(upstream) or "its upstream gradients"
        read = bool(upstream) and set(upstream) <= set(syntax.names_read(code or "") or ())
        return scored(policy.chain_only_credit, Verdict.PARTIAL, f"{Chain.skips(named, read)} {local.feedback}")
    if chain.kind == Match.SQUEEZABLE and (local_ok or local.kind == Match.SQUEEZABLE):
        return scored(policy.squeezable_shape_credit, Verdict.PARTIAL,
                      f"{chain.feedback}. {Broadcast.SQUEEZABLE}")
    if chain.kind == Status.BLANK:
        return scored(0.0, Verdict.NOT_ATTEMPTED, Status.BLANK.text)
    return scored(0.0, Verdict.INCORRECT, chain.feedback)


def _squeezable(gradient: str, results: dict, exercise) -> bool:
    """Whether the answer cell of `gradient` gave its right values in a shape a size-1 dimension off."""
    answer = next((a for a in exercise.answers if a.variable == gradient and a.kind == ATOMIC), None)
    item = results.get((answer.grade_id, CHAIN)) if answer else None
    return item is not None and item.kind == Match.SQUEEZABLE


def outline(exercise) -> dict[str, int | None]:
    """Result.outline of a result of `exercise`."""
    return {grade_id: exercise.part_of(grade_id) for grade_id in exercise.grade_ids}


def score(submission, results: dict[tuple[str, str], ItemResult], course) -> Result:
    result = Result(submission.id, str(submission.path), error=submission.error, exercise=course.exercise_spec,
                    notebook_sha256=submission.sha256, outline=outline(course.exercise))
    for cell, refusal in submission.refused.items():
        kind = Flag.SYNTAX_ERROR if refusal.unreadable else Flag.NOT_ALLOWED if refusal.honest else Flag.STATIC_CHECK
        result.flags.append({"kind": kind, "cell": cell, "evidence": str(refusal)})
    for cell, found in submission.forged.items():
        result.flags.append({"kind": Flag.FORGED_OUTPUT, "cell": cell, "evidence": str(found)})
    for grade_id, points in course.points.items():
        chain, local = results.get((grade_id, CHAIN)), results.get((grade_id, LOCAL))
        answer = course.exercise.by_grade_id.get(grade_id)
        test = _one(grade_id, points, chain, local, course.policy, answer.local_upstream if answer else (),
                    submission.cells.get(answer.cell_id) if answer else None)
        result.tests.append(test)
        if chain is not None and chain.extra:
            test.extra = dict(chain.extra)
        if any(item is not None and item.kind == Status.ERROR for item in (chain, local)):
            test.extra["raised"] = True  # the cell raised at run time: an error for the class report to list
            fitted = [g for g in (answer.local_upstream if answer else ()) if _squeezable(g, results, course.exercise)]
            test.output += Broadcast.fitted_to(fitted[0]) if fitted and test.score == 0 else ""
        if test.verdict != Verdict.CORRECT:
            test.mistake = next((item.mistake for item in (chain, local) if item is not None and item.mistake), "")
        for check, item in ((CHAIN, chain), (LOCAL, local)):
            if item is not None and item.status == ERROR:
                result.flags.append({"kind": Flag.GRADER_ERROR, "grade_id": grade_id, "evidence": item.feedback})
            if item is not None and item.kind in FLAGGED:
                result.flags.append({"kind": Flag(item.kind), "grade_id": grade_id, "check": check,
                                     "evidence": item.feedback})
    return result
