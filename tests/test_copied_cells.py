"""Copied and deleted cells through both nbgrader routes: `nbgrader autograde` and `backprop-ninja grade
--gradebook` must record the same per-tensor scores as the results JSON says, and never fail a notebook.

nbgrader 0.9.6 failed the whole notebook on a copied answer cell (DeduplicateIds empties the earlier
copy's metadata, then OverwriteCells' restore of task cells reads its grade id: KeyError), and the fast
route, running the same preprocessors, recorded nothing. A copy is graded like any other slip: copies
with the same code are one answer, copies with different code score 0 on that grade id alone.

The class (every other answer cell holds the reference answer):
- gus: the dprobs answer cell copied unchanged just below itself (the README's own example).
- hal: the dprobs cell copied, and the copy changed: ambiguous, 0 on dprobs.
- ida: the dcounts answer cell deleted: 0 on dcounts.
- jo: dprobs's self-check (a grade cell) and a read-only cell copied: full marks.
- kim: the dW1 cell copied and the copy emptied but for a comment: one answer, full marks.
- lu: the dlogits cell copied twice, then the original deleted: the copies agree, full marks.
- mo: a markdown cell "```&#10;", on which nbconvert's markdown renderer raises (IndexError): shown as the text
  typed, full marks (both routes once failed the notebook, the fast route leaving its submission on record with
  no score, which every view read as 0).
- fo: a grade cell of her own, with a grade id the assignment does not have, and a cell marked as nbgrader's with
  none (nbgrader failed both routes: KeyError 'grade_id'): plain cells, full marks.
"""
from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import nbformat
import pytest

from grader.vocabulary import GRADE_CELL_PREFIX
from helpers.nbgrader_course import Course, cell_by_grade_id, grade_id, set_answers
from helpers.paths import COURSE
from solutions import reference

pytestmark = pytest.mark.slow

ASSIGNMENT = COURSE.assignment
NOTEBOOK = COURSE.notebook
POINTS = dict(COURSE.points)
REFERENCE = reference.cells()


def _copy_after(nb, gid: str, source: str | None = None, times: int = 1):
    """Jupyter's copy and paste: the same metadata (grade id included), a new cell id."""
    cell = cell_by_grade_id(nb, gid) if isinstance(gid, str) else gid
    for _ in range(times):
        pasted = copy.deepcopy(cell)
        pasted["id"] = uuid.uuid4().hex[:8]
        if source is not None:
            pasted.source = source
        nb.cells.insert(nb.cells.index(cell) + 1, pasted)


def _gus(nb):
    _copy_after(nb, "dprobs")


def _hal(nb):
    _copy_after(nb, "dprobs", "dprobs = 1.0 / probs\n")


def _ida(nb):
    nb.cells.remove(cell_by_grade_id(nb, "dcounts"))


def _jo(nb):
    _copy_after(nb, f"{GRADE_CELL_PREFIX}dprobs")
    locked = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("locked")
                  and not c.metadata["nbgrader"].get("grade"))
    _copy_after(nb, locked)


def _kim(nb):
    _copy_after(nb, "dW1", "# my copy, emptied\n\n")


def _lu(nb):
    original = cell_by_grade_id(nb, "dlogits")
    _copy_after(nb, "dlogits", times=2)
    nb.cells.remove(original)


FENCE = "```&#10;"


def _mo(nb):
    nb.cells.insert(3, nbformat.v4.new_markdown_cell(FENCE))


def _fo(nb):
    forged = {"grade": True, "solution": False, "locked": False, "points": 5, "schema_version": 3}
    nb.cells += [nbformat.v4.new_code_cell("1", metadata={"nbgrader": {**forged, "grade_id": "check_bonus"}}),
                 nbformat.v4.new_code_cell("2", metadata={"nbgrader": forged})]


EDITS = {"gus": _gus, "hal": _hal, "ida": _ida, "jo": _jo, "kim": _kim, "lu": _lu, "mo": _mo, "fo": _fo}
ZERO = {"gus": set(), "hal": {"dprobs"}, "ida": {"dcounts"}, "jo": set(), "kim": set(), "lu": set(), "mo": set(),
        "fo": set()}
MESSAGE = {"hal": ("2 answer cells have grade id 'dprobs', with different code", "dprobs"),
           "ida": ("no answer cell with grade id 'dcounts'", "dcounts")}


@pytest.fixture(scope="module")
def courses(tmp_path_factory, generated_course):
    """nbgrader's course (collect, autograde) and a second one with the same course.yml, grading the same
    submitted/ by the fast route."""
    c = Course(tmp_path_factory.mktemp("copies"), COURSE.course_id, ASSIGNMENT).copied(generated_course)
    for student, change in EDITS.items():
        c.handed_in(student, lambda nb, change=change: (set_answers(nb, REFERENCE), change(nb)))
    c.grade = c.nbgrader("autograde", ASSIGNMENT)
    return c, c.fast_route()


def _scores(course_dir) -> dict[str, dict[str, float]]:
    from nbgrader.api import Gradebook, MissingEntry

    found = {}
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
        for student in EDITS:
            try:
                notebook = gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, student)
            except MissingEntry:
                continue
            found[student] = {g.name.removeprefix(GRADE_CELL_PREFIX): g.score for g in notebook.grades}
    return found


def _results(folder) -> dict[str, dict]:
    return {s: json.loads((folder / s / ASSIGNMENT / f"{ASSIGNMENT}.json").read_text(encoding="utf-8"))
            for s in EDITS if (folder / s / ASSIGNMENT / f"{ASSIGNMENT}.json").is_file()}


def test_both_routes_finish_without_a_failure(courses):
    c, f = courses
    for command in (c.grade, f.grade):
        assert command.returncode == 0, str(command)
        assert "Traceback" not in command.stderr + command.stdout, str(command)
    assert "error processing" not in c.grade.stderr, str(c.grade)
    assert f"{len(EDITS)} submission(s) recorded" in f.grade.stdout, str(f.grade)


@pytest.mark.parametrize("student", sorted(EDITS))
def test_each_copy_or_deletion_costs_its_own_grade_id_alone(courses, student):
    c, f = courses
    expected = {g: (0 if g in ZERO[student] else p) for g, p in POINTS.items()}
    nbgrader, fast = _scores(c.dir), _scores(f.dir)
    assert nbgrader.get(student) == pytest.approx(expected), "nbgrader autograde"
    assert fast.get(student) == pytest.approx(expected), "backprop-ninja grade --gradebook"
    for folder in (c.dir / "results", f.dir / "fast"):
        result = _results(folder)[student]
        assert result["score"] == pytest.approx(sum(expected.values())), folder
        assert {t["name"]: t["score"] for t in result["tests"]} == pytest.approx(expected), folder


@pytest.mark.parametrize("student", sorted(MESSAGE))
def test_the_student_reads_why_in_the_grade_cell(courses, student):
    c, f = courses
    text, gid = MESSAGE[student]
    for autograded in (c.autograded(student), f.autograded(student)):
        nb = nbformat.read(autograded, as_version=4)
        cell = cell_by_grade_id(nb, f"{GRADE_CELL_PREFIX}{gid}")
        printed = "".join(o.get("text", "") for o in cell.outputs)
        assert text in printed, (autograded, printed)
        assert [grade_id(c) for c in nb.cells].count(f"{GRADE_CELL_PREFIX}{gid}") == 1


def test_a_cell_the_markdown_renderer_fails_on_is_kept_as_escaped_text(courses):
    c, f = courses
    for autograded in (c.autograded("mo"), f.autograded("mo")):
        cells = nbformat.read(autograded, as_version=4).cells
        sources = [cell.source for cell in cells if cell.cell_type == "markdown"]
        assert "<div><pre>```&amp;#10;</pre></div>" in sources, autograded
