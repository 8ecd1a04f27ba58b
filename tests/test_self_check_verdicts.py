"""The self-check's verdict is the grader's, tensor by tensor: full, partial or no credit, and the
static check's flag, on every slip of the rule table (grader.authoring.skeleton.mutants: every atomic,
fused and function answer's) in the lecture's course and in two variants' courses, and on every cell of
the red-team corpus the static check refuses.

The self-check runs as students run it: a real kernel, the notebook's own setup cells, each slip
written into its answer cell, then the check cells the notebook gives that cell (a function's cell: the
cell that calls it first, then its checks and the training check), all sent with their ids as
JupyterLab sends them. The grader is the real one, sandboxed (grader.pipeline.batch.grade), on the
released notebook's answer cells: it runs each answer cell with the true upstream gradients, so one
submission carries a slip in every answer cell it can, and a batch holds as many submissions as the
cell with the most slips needs.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from grader.authoring import skeleton
from grader.course import load as load_course
from grader.lms import course_init, notebooks
from grader.pipeline.batch import grade
from grader.vocabulary import Flag, Verdict
from helpers.kernel import CourseNotebook, Session
from helpers.paths import COURSE, SOLVED

pytestmark = pytest.mark.slow

# The lecture's network and two variants that share none of its activation, normalization or shortcut.
SPECS = ("lecture", "relu-layernorm", "sigmoid-none-residual")


def said(line: str) -> tuple[Verdict, str | None]:
    """What a check line says the grader gives, as (verdict, flag): the README's rule (WRONG exactly where
    a point is lost), the share a WRONG line names ("half its points", "0.25 of its points"; none named:
    nothing), and the static check's refusal, which the grader flags."""
    flag = Flag.STATIC_CHECK.value if "the grader refuses" in line else None
    if "not attempted yet" in line:
        return Verdict.NOT_ATTEMPTED, flag
    if "WRONG" not in line:
        return Verdict.CORRECT, flag
    share = re.search(r"the grader gives (nothing|half its points|[0-9.]+ of its points)", line)
    return (Verdict.PARTIAL if share and share.group(1) != "nothing" else Verdict.INCORRECT), flag


def _course(spec: str, tmp_path: Path) -> CourseNotebook:
    """The lecture's checkout course, or a variant's as `course init --variant` writes it."""
    if spec == "lecture":
        return CourseNotebook(COURSE, nbformat.read(SOLVED, as_version=4), SOLVED.parent)
    target = tmp_path / "course"
    course_init.init(COURSE, target, variant=spec)
    course = load_course(target / "course.yml")
    folder = target / "source" / course.assignment
    return CourseNotebook(course, nbformat.read(folder / course.notebook, as_version=4), folder)


def _packed(mutants) -> list[dict[str, skeleton.Mutant]]:
    """The mutants in as few submissions as the grader allows: at most one slip per answer cell."""
    submissions: list[dict[str, skeleton.Mutant]] = []
    for mutant in mutants:
        free = next((s for s in submissions if mutant.cell not in s), None)
        if free is None:
            free = {}
            submissions.append(free)
        free[mutant.cell] = mutant
    return submissions


def _graded(course: CourseNotebook, packed: list[dict[str, skeleton.Mutant]], reference: dict[str, str],
            tmp_path: Path) -> list[dict[str, tuple[Verdict, set[str]]]]:
    """Each submission's verdicts by grade id, with the kinds of the flags the grader raised on its cell."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    released = notebooks.release(course.solved)
    for index, slips in enumerate(packed):
        nb = nbformat.from_dict(released)
        nb.cells = [c for c in nb.cells if c.id in reference]
        for c in nb.cells:
            c.source = slips[c.id].cells[c.id] if c.id in slips else reference[c.id]
        nbformat.write(nb, folder / f"slips-{index:03d}.ipynb")
    graded = {submission.id: result for submission, result in
              grade([folder], course.course, tmp_path / "results", jobs=1)}
    verdicts = []
    for index in range(len(packed)):
        result = graded[f"slips-{index:03d}"]
        assert result.error is None, result.error
        exercise = course.course.exercise
        cell_of = {a.grade_id: a.cell_id for a in exercise.answers}
        if exercise.training is not None:
            cell_of[exercise.training.grade_id] = exercise.training.function.cell
        verdicts.append({t.name: (t.verdict, {f["kind"] for f in result.flags
                                              if f.get("grade_id") == t.name or f.get("cell") == cell_of[t.name]})
                         for t in result.tests})
    return verdicts


@pytest.mark.parametrize("spec", SPECS)
def test_the_self_check_gives_the_graders_verdict_on_every_slip_of_the_rule_table(spec, tmp_path):
    course = _course(spec, tmp_path)
    exercise = course.course.exercise
    mutants = skeleton.mutants(exercise)
    reference = skeleton.references(exercise, skeleton.derived(exercise))
    packed = _packed(mutants)
    graded = _graded(course, packed, reference, tmp_path)
    notebook = Session(course, reference)
    differ = []
    try:
        for slips, verdicts in zip(packed, graded, strict=True):
            for cell, mutant in slips.items():
                for grade_id, line in notebook.lines(cell, mutant.cells[cell]).items():
                    verdict, flags = verdicts[grade_id]
                    grader = (verdict, Flag.STATIC_CHECK.value if Flag.STATIC_CHECK.value in flags else None)
                    if said(line) != grader:
                        differ.append((mutant.slip.name, grade_id, grader, line))
                notebook.restore(cell)
    finally:
        notebook.close()
    assert not differ, "\n".join(map(str, differ))
    # Every slip is judged: the grader docks each mutant's own grade id.
    assert all(graded[i][m.grade_ids[0]][0] != Verdict.CORRECT for i, s in enumerate(packed) for m in s.values())
