"""The score a student ends with, the same on every page and in every file: the grader's result with what
nbgrader's gradebook holds over it, a TA's manual score for a tensor (set in formgrader, and kept by
nbgrader through a regrade) and a late penalty.

The gradebook is the one source where a course has one: the feedback page nbgrader's generate_feedback
shows (grader.lms.nbgrader.GradebookFeedback), `report`, every export and the Canvas CSV all pass the
results through here, so none of them can show a total the others do not.
"""
from __future__ import annotations

from pathlib import Path

from grader.exercise import GRADE_CELL_PREFIX
from grader.judge.scoring import Result
from grader.vocabulary import Verdict

GRADEBOOK = "gradebook.db"  # nbgrader's, in the course directory beside results/


def beside(folder: Path) -> Path | None:
    """nbgrader's gradebook beside a course's results/ folder, where course init's autograde writes them."""
    found = Path(folder).resolve().parent / GRADEBOOK
    return found if found.is_file() else None


def overridden(test) -> bool:
    return "autograded_score" in test.extra


def adjust(result: Result, grades: dict[str, float], late_penalty: float = 0.0) -> Result:
    """`result` (changed in place) with each test scored as `grades` says (grade id or grade cell id ->
    score): a score other than the grader's is a TA's, said first in that test's feedback, with the grader's
    kept in its extra_data; and the late penalty taken off the total."""
    grades = {name.removeprefix(GRADE_CELL_PREFIX): score for name, score in grades.items()}
    for test in result.tests:
        score = grades.get(test.name)
        if score is None or abs(score - test.score) < 1e-9:
            continue
        graded = test.extra.get("autograded_score", test.score)
        test.extra = {**test.extra, "autograded_score": graded}
        test.output = f"your instructor set this score: {score:g} / {test.max_score:g} (the grader gave {graded:g}); " \
                      + test.output
        test.score = score
        test.verdict = (Verdict.CORRECT if score >= test.max_score else Verdict.PARTIAL if score > 0
                        else test.verdict if test.verdict == Verdict.NOT_ATTEMPTED else Verdict.INCORRECT)
    result.late_penalty = late_penalty or 0.0
    return result


def from_gradebook(results: list[Result], gradebook: Path | None) -> list[Result]:
    """`results` as the gradebook scores them (see adjust); a result the gradebook has no submission for (one
    graded outside the course) stays as graded. A submission id is <student>/<assignment>/<notebook>, as
    both nbgrader routes name them."""
    if gradebook is None:
        return results
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{Path(gradebook).resolve()}") as gb:
        for result in results:
            parts = result.submission.split("/")
            if len(parts) != 3:
                continue
            student, assignment, notebook = parts
            try:
                entry = gb.find_submission_notebook(notebook, assignment, student)
            except MissingEntry:
                continue
            adjust(result, {g.name: g.score for g in entry.grades}, entry.late_submission_penalty or 0.0)
    return results
