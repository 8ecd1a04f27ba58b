"""The score a student ends with, the same on every page and in every file: the grader's result with what
nbgrader's gradebook holds over it, a TA's manual score for a tensor (set in formgrader, and kept by
nbgrader through a regrade) and a late penalty.

The gradebook is the one source where a course has one: the feedback page nbgrader's generate_feedback
shows (grader.lms.nbgrader.GradebookFeedback), `report`, every export and the Canvas CSV all pass the
results through here, so none of them can show a total the others do not.
"""
from __future__ import annotations

from pathlib import Path

from grader.extract import unreadable
from grader.judge.scoring import Result
from grader.vocabulary import GRADE_CELL_PREFIX, Verdict

GRADEBOOK = "gradebook.db"  # nbgrader's, in the course directory beside results/


def beside(folder: Path) -> Path | None:
    """nbgrader's gradebook beside a course's results/ folder, where course init's autograde writes them."""
    found = Path(folder).resolve().parent / GRADEBOOK
    return found if found.is_file() else None


def not_a_gradebook(path: Path) -> str | None:
    """Why `path` is no nbgrader gradebook, or None: opened as one, an empty file or another database would
    be given nbgrader's tables and read as holding no scores (and any other file is a raw SQL error)."""
    import sqlite3

    try:
        with open(path, "rb") as file:
            header = file.read(16)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if header != b"SQLite format 3\x00":
        return f"{path}: not an nbgrader gradebook ({'an empty file' if not header else 'not an SQLite database'})"
    try:
        with sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error as exc:
        return f"{path}: not a readable gradebook ({exc})"
    if not {"submitted_notebook", "grade", "assignment"} <= tables:
        return f"{path}: an SQLite database, but not an nbgrader gradebook (it has no submissions or grades)"
    return None


def overridden(test) -> bool:
    return "autograded_score" in test.extra


def _as_graded(test) -> None:
    """`test` as the grader scored it, before any score a TA set (a result file written back by `written`
    holds the TA's)."""
    if not overridden(test):
        return
    extra = dict(test.extra)
    test.score = extra.pop("autograded_score")
    test.verdict = Verdict(extra.pop("autograded_verdict", test.verdict))
    test.output = test.output.split("; ", 1)[-1] if test.output.startswith(SET_BY_HAND) else test.output
    test.extra = extra


SET_BY_HAND = "your instructor set this score: "


def as_graded(result: Result) -> Result:
    """`result` (changed in place) as the grader scored it, no TA's score and no late penalty: what a result file
    that `written` wrote back with the gradebook's scores was graded as. `grade --resume` records a kept result
    again; recorded with the TA's score as the grader's, a TA's 0.25 became the autograded score, which no later
    regrade could tell from the grader's own (a TA trial)."""
    for test in result.tests:
        _as_graded(test)
    result.late_penalty = 0.0
    return result


def adjust(result: Result, grades: dict[str, float], late_penalty: float = 0.0) -> Result:
    """`result` (changed in place) with each test scored as `grades` says (grade id or grade cell id ->
    score): a score other than the grader's is a TA's, said first in that test's feedback, with the grader's
    kept in its extra_data; and the late penalty taken off the total. A result adjusted before starts again
    from the grader's scores, so a score a TA has since changed back is the grader's again."""
    grades = {name.removeprefix(GRADE_CELL_PREFIX): score for name, score in grades.items()}
    as_graded(result)
    for test in result.tests:
        score = grades.get(test.name)
        if score is None or abs(score - test.score) < 1e-9:
            continue
        graded = test.score
        test.extra = {**test.extra, "autograded_score": graded, "autograded_verdict": test.verdict.value}
        test.output = f"{SET_BY_HAND}{score:g} / {test.max_score:g} (the grader gave {graded:g}); " + test.output
        test.score = score
        test.verdict = (Verdict.CORRECT if score >= test.max_score else Verdict.PARTIAL if score > 0
                        else test.verdict if test.verdict == Verdict.NOT_ATTEMPTED else Verdict.INCORRECT)
    result.late_penalty = late_penalty or 0.0
    return result


# How to grade a submission again by either route: nbgrader's autograde passes over a notebook whose grading
# was stopped (its folder in autograded/ exists) unless forced.
AGAIN = "grade it again (nbgrader autograde with --student and --force, or backprop-ninja grade)"
NOT_RECORDED = f"graded, but the gradebook holds no score of it (its grading failed, or was stopped): {AGAIN}"
STALE = ("the gradebook's scores are not those of its result (a grading that failed after its result was written, "
         f"or a result from elsewhere): {AGAIN}")


def course_settings(root: Path):
    """nbgrader's configuration as `nbgrader autograde` run in the course folder `root` reads it (the user's and
    the system's Jupyter configuration, then the course's nbgrader_config.py): the late-penalty policy set there
    is the one every route grades with and every view counts with."""
    from jupyter_core.application import JupyterApp
    from traitlets.config.application import Application

    class Settings(JupyterApp):  # nbgrader's apps are this with its name: importing them costs seconds
        name, config_file_name = "nbgrader", "nbgrader_config"

    app = Settings()
    app.load_config_file()
    Application.load_config_file(app, app.config_file_name, path=str(root))
    return app


def penalty_of(notebook, settings) -> float:
    """The late penalty of `notebook` (nbgrader's SubmittedNotebook) on the score it has now, by the policy in
    `settings` (nbgrader's configuration, or a configurable under it). nbgrader stores a penalty when it grades,
    and formgrader changes a score (or gives extra credit) without it: a TA's score on a late notebook kept the
    penalty of the score before, and the next grading command moved a released total (a TA trial). Every view
    counts it afresh, as the next grading would store it. Where this configuration has no policy (nbgrader's
    default, none) the gradebook's is kept: one set in the grading user's own configuration, which another
    user's command does not read."""
    from nbgrader.plugins import LateSubmissionPlugin
    from traitlets.utils.importstring import import_item

    # The policy as nbgrader's AssignLatePenalties chooses it, without making one: as a configurable under
    # generate_feedback's preprocessors it warned of the setting nbconvert gives every preprocessor.
    config = settings.config
    chosen = config.get("AssignLatePenalties", {}).get("plugin_class", LateSubmissionPlugin)
    policy = (import_item(chosen) if isinstance(chosen, str) else chosen)(config=config)
    if type(policy) is LateSubmissionPlugin and policy.penalty_method == "none":
        return notebook.late_submission_penalty or 0.0
    seconds = notebook.assignment.total_seconds_late
    penalty = policy.late_submission_penalty(notebook.student.id, notebook.score, seconds) if seconds > 0 else None
    return 0.0 if penalty is None else min(max(float(penalty), 0.0), notebook.score)


def by_hand(grades) -> dict[str, float]:
    """Each of nbgrader's `grades` a TA scored or gave extra credit in formgrader, with the score it counts
    (nbgrader's Grade.score: the manual score, or the grader's, plus the extra credit)."""
    return {g.name: g.score for g in grades if g.manual_score is not None or g.extra_credit}


def recorded(grades) -> bool:
    """Whether a submitted notebook's grades (nbgrader's) all have a score on record: nbgrader creates a
    submission's grades empty before it grades, reads an empty one as 0, and keeps them so when grading fails."""
    return all(g.auto_score is not None or g.manual_score is not None for g in grades)


def _same(gradebook_score: float, graded: float) -> bool:
    """The gradebook's score is the one the grade cell printed, to its 6 significant digits."""
    return abs(gradebook_score - graded) <= 1e-5 * max(1.0, abs(graded))


def from_gradebook(results: list[Result], gradebook: Path | None, settings=None) -> tuple[list[Result], dict[str, str]]:
    """`results` as the gradebook scores them (see adjust), and the submissions left out with why: a
    submission the gradebook holds without a score, or with other scores than its result's, is not graded
    (never 0, and never a TA's decision). A result the gradebook has no submission for (one graded outside
    the course) stays as graded. A file no notebook reader takes is not graded with or without a gradebook:
    neither route records a score of it, and any on record are earlier ones. A submission id is
    <student>/<assignment>/<notebook>, as both nbgrader routes name them. `settings`: course_settings of the
    gradebook's folder, read once before a batch starts (reading them configures the process's logging: see
    grader.lms.gradebook.Recorder.settle)."""
    left_out = {r.submission: r.error for r in results if unreadable(r.error)}
    results = [r for r in results if r.submission not in left_out]
    if gradebook is None:
        return results, left_out
    from nbgrader.api import Gradebook, MissingEntry

    kept = []
    settings = settings or course_settings(Path(gradebook).resolve().parent)
    with Gradebook(f"sqlite:///{Path(gradebook).resolve()}") as gb:
        for result in results:
            parts = result.submission.split("/")
            entry = None
            if len(parts) == 3:
                student, assignment, notebook = parts
                try:
                    entry = gb.find_submission_notebook(notebook, assignment, student)
                except MissingEntry:
                    pass
            if entry is None:
                kept.append(result)
                continue
            graded = {t.name: t.extra.get("autograded_score", t.score) for t in result.tests}
            auto = {g.name.removeprefix(GRADE_CELL_PREFIX): g.auto_score for g in entry.grades}
            if not recorded(entry.grades):
                left_out[result.submission] = NOT_RECORDED
            elif any(a is not None and name in graded and not _same(a, graded[name]) for name, a in auto.items()):
                left_out[result.submission] = STALE
            else:
                kept.append(adjust(result, by_hand(entry.grades), penalty_of(entry, settings)))
    return kept, left_out


def written(folder: Path, results: list[Result]) -> list[str]:
    """Each result's own file in the results `folder`, and the page beside it, made again where its final
    score (from_gradebook) or whether it still counts (Result.superseded) is not what they say: a TA's score
    or a late penalty set after grading shows in the student's result file and page too, not only in the
    class-wide ones, and so does a notebook handed in since. The pictures are kept. Returns
    the files left with an old score, with why: a TA who may read the results but not write them still gets
    the class report (from the gradebook's scores), told which files someone who may write them must refresh."""
    import json

    from grader.outputs import results as result_files

    stale = []
    for result in results:
        path = result_files.result_path(Path(folder), result.submission)
        wanted = json.dumps(result_files.gradescope(result), indent=2) + "\n"
        try:
            if path.read_text(encoding="utf-8") == wanted:
                continue
        except OSError:  # a result read from a copy elsewhere in the folder: its own file is not there
            continue
        from grader.outputs import feedback_page

        page = feedback_page.page_path(Path(folder), result.submission)
        try:
            old = page.read_text(encoding="utf-8") if page.is_file() else None
            result_files.write_result(Path(folder), result)
            if old is not None:
                feedback_page.write(Path(folder), result, feedback_page.drawn_on(old))
        except PermissionError as exc:
            said = "is of a notebook since replaced" if result.superseded else "the score before the gradebook's"
            stale.append(f"{path.parent}: still says {said} ({exc.strerror})")
    return stale
