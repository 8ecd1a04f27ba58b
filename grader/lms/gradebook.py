"""The fast route into nbgrader: a whole batch's scores written into a course's gradebook, with the
autograded notebooks formgrader and generate_feedback need, and none of nbgrader's per-notebook start-up.

Each submitted notebook goes through the same nbgrader preprocessors `nbgrader autograde` runs around
the grader (sanitizing first, then grader.lms.nbgrader.RecordGrades, nbgrader's own SaveAutoGrades and
AssignLatePenalties in one transaction), so both routes record identical scores by construction, and a
submission is on record whole or not at all.
"""
from __future__ import annotations

import os
import shutil
import stat
import warnings
from pathlib import Path

from grader import extract, safe_text
from grader.extract import Submission
from grader.judge.scoring import Result
from grader.outputs import final
from grader.outputs.files import atomic_write, private_dir, private_mode


class GradebookError(Exception):
    """A submission or gradebook that does not fit the nbgrader course; the message says which."""


def _write_notebook(nb, path: Path) -> None:
    import nbformat

    # Read-only, as nbgrader leaves autograded notebooks; the staff's alone, as everything the grader writes.
    atomic_write(path, nbformat.writes(nb), mode=private_mode(private_dir(path.parent)) & 0o444)


class Recorder:
    """Records a batch's results in a gradebook one at a time, as they are graded: each autograded
    notebook opens with its student's feedback page, pictures included, before the result drops them.

    Submissions are laid out as nbgrader's submitted/<student>/<assignment>/<notebook>.ipynb; the course
    directory is the gradebook's folder."""

    def __init__(self, gradebook: Path, log=print):
        from nbgrader.coursedir import CourseDirectory

        gradebook = Path(gradebook).resolve()
        if not gradebook.is_file():
            raise GradebookError(f"{gradebook}: no such gradebook (run nbgrader generate_assignment first)")
        mode = gradebook.stat().st_mode
        if mode & 0o007 and gradebook.stat().st_uid == os.geteuid():  # nbgrader made it as the umask said
            os.chmod(gradebook, stat.S_IMODE(mode) & ~0o007)
        from grader.lms.nbgrader import GradingBusy, grading_lock

        try:
            self.lock = grading_lock(gradebook.parent)  # until close(): see grading_lock
        except GradingBusy as exc:
            raise GradebookError(str(exc)) from None
        self.settings = final.course_settings(gradebook.parent)
        self.coursedir = CourseDirectory(parent=self.settings, root=str(gradebook.parent))
        # nbgrader's own Gradebook (update_or_create_submission, a notebook's grade cells) trips SQLAlchemy's
        # autoflush warnings. Filtered for the whole process, before grading starts: a catch_warnings() around
        # each record raced with the judge's thread, whose pytest session saves and restores the same global
        # filters, and let them through to the instructor's terminal now and then.
        from sqlalchemy.exc import SAWarning

        warnings.filterwarnings("ignore", category=SAWarning, module=r"nbgrader\.")
        self.gradebook = gradebook
        self.db_url = f"sqlite:///{gradebook}"
        self.log = log
        self.recorded = 0

    def __call__(self, submission: Submission, result: Result, kept: bool = False) -> None:
        """`kept`: a result read back from an earlier run (--resume), whose feedback, if any, is of this same
        grading and stays."""
        try:
            self.recorded += _record(submission, result, self.db_url, self.coursedir, self.log, self.settings,
                                     graded_again=not kept)
        except Exception as exc:  # one submission nbgrader cannot take must not stop the others
            self.log(f"could not record {submission.id}: {type(exc).__name__}: "
                     f"{' '.join(str(exc).split())[:300]}")


    def close(self) -> None:
        """The course's grading lock released: the batch is on record."""
        self.lock.release()

    def settle(self, out: Path, results: list[Result]) -> list[Result]:
        """`results` with the scores the gradebook now holds for them (a TA's score, a late penalty: what report
        and export say), their files in `out` written again where those differ, so that the table, grades.csv
        and each student's file and page say the final score the moment grading ends, not the grader's own.
        A result the gradebook does not hold as graded stays as it is (report and export say why).

        The settings are those read before the batch began: reading them again makes a traitlets application,
        whose logging.config.dictConfig, run here while the judge's thread closed its pytest session's log
        handlers, deadlocked the two threads on logging's locks (a `grade --gradebook` that never exited)."""
        adjusted, _ = final.from_gradebook(results, self.gradebook, self.settings)
        for line in final.written(out, adjusted):
            self.log(f"warning: {line}")
        by_id = {result.submission: result for result in adjusted}
        return [by_id.get(result.submission, result) for result in results]


def _record(submission: Submission, result: Result, db_url: str, coursedir, log, settings=None,
            graded_again: bool = True) -> bool:
    """One submission on record, whole or not at all: every step that can fail on what the student wrote
    runs on the notebook first, then the student, the submission, its grades, late penalty and flag are
    written in one transaction (grader.lms.nbgrader.transaction) with the autograded notebook."""
    import nbformat
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, LimitOutput, OverwriteKernelspec

    from grader.lms.nbgrader import (
        TAKEN_BACK,
        Deduplicate,
        RestoreCells,
        drop_feedback,
        fill_grade_cells,
        record,
        settle_flag,
        transaction,
    )
    from grader.lms.student_html import unsafe_name

    # Made absolute, never resolved: a student's notebook linked to a classmate's must be recorded (as
    # not graded) under the student whose folder holds the link, not under the classmate.
    path = Path(os.path.abspath(submission.path))
    student, assignment, notebook_id = path.parent.parent.name, path.parent.name, path.stem
    why = unsafe_name(student)
    if why:
        log(f"skipped {submission.id}: the student id {why}")
        return False
    with Gradebook(db_url) as gb:
        try:
            gb.find_notebook(notebook_id, assignment)
        except MissingEntry:
            log(f"skipped {submission.id}: the gradebook has no notebook {notebook_id} in an assignment "
                f"{assignment} (expected submitted/<student>/<assignment>/<notebook>.ipynb)")
            return False
    # nbgrader opens timestamp.txt as it finds it: a FIFO there would stop the batch, a link read another file.
    stamp = path.parent / "timestamp.txt"
    try:
        timestamp = coursedir.get_existing_timestamp(str(path.parent)) if extract.plain_file(stamp) else None
    except (ValueError, AttributeError):  # nbgrader's own refusal is an AttributeError (its CourseDirectory has no
        # fail()): said as what it is, the student not recorded, as nbgrader's autograde does not grade them either
        log(f"skipped {submission.id}: its timestamp.txt holds no time nbgrader reads "
            f"({safe_text.terminal(_head(stamp))!r}; nbgrader's collect "
            "writes one such as 2026-01-31 23:59:00.000000 UTC): write the submission's time there (or delete the "
            "file, where the time is unknown), then grade again")
        return False
    autograded = Path(coursedir.format_path(coursedir.autograded_directory, student, assignment))
    if submission.unreadable:
        # As nbgrader's autograde leaves a notebook it cannot read (a truncated upload): the submission's row
        # and time, no score (every view then says not graded, never 0), the earlier grades kept, and no
        # autograded notebook that formgrader would list as this submission's.
        with transaction(db_url) as gb:
            gb.update_or_create_student(student)
            gb.update_or_create_submission(assignment, student, **({"timestamp": timestamp} if timestamp else {}))
        if autograded.is_dir() and not autograded.is_symlink():
            shutil.rmtree(autograded)
        log(f"not recorded: {submission.id} ({result.error}); the gradebook keeps any earlier scores of it, "
            "which no view counts: grade a readable notebook again")
        return False
    if submission.error:
        # A notebook refused (a link, over a limit) gets its zeros on record, as nbgrader's route gives them, in
        # the notebook students were given (never the source: feedback shows this notebook to the student).
        released = Path(coursedir.format_path(coursedir.release_directory, ".", assignment)) / path.name
        nb = nbformat.read(released, as_version=4)
    else:
        nb = nbformat.reads(extract.notebook_bytes(path).decode("utf-8"), as_version=4)  # as it was graded
    resources = {"nbgrader": {"notebook": notebook_id, "assignment": assignment, "student": student,
                              "db_url": db_url}}
    for preprocessor in (ClearOutput(), Deduplicate(), OverwriteKernelspec(), RestoreCells(), CheckCellMetadata()):
        nb, resources = preprocessor.preprocess(nb, resources)
    fill_grade_cells(nb, result, title=f"{assignment}/{notebook_id}")
    for preprocessor in (LimitOutput(), CheckCellMetadata()):
        nb, resources = preprocessor.preprocess(nb, resources)
    with transaction(db_url) as gb:
        gb.update_or_create_student(student)
        gb.update_or_create_submission(assignment, student, **({"timestamp": timestamp} if timestamp else {}))
        nb, resources = record(gb, nb, resources, parent=settings)
        flag = settle_flag(gb, notebook_id, assignment, student, result)
        _write_notebook(nb, autograded / path.name)
        _copy_stamps(path.parent, autograded)
    said = drop_feedback(coursedir, student, assignment) if graded_again else ""
    for line in (*resources.get(TAKEN_BACK, ()), flag, said):
        if line:
            log(line)
    return True


# What nbgrader's autograde copies from a submission's folder that its later steps read: the time autograde
# compares to tell a newer submission (else it skips it as graded), and the secret release_feedback hashes
# the feedback's name with (else the student is taken for one collected from an LMS download).
def _head(path: Path) -> str:
    """A file's first line, at most 60 characters: what a student's file says, quoted, never read whole."""
    with path.open("rb") as file:
        return file.read(240).decode("utf-8", errors="replace").strip().split("\n")[0][:60]


STAMPS = ("timestamp.txt", "submission_secret.txt")


def _copy_stamps(submitted: Path, autograded: Path) -> None:
    for name in STAMPS:
        source = submitted / name
        if extract.plain_file(source) and source.stat().st_size <= 4096:  # a student's own folder: no link, no FIFO
            atomic_write(autograded / name, source.read_bytes())
        else:
            (autograded / name).unlink(missing_ok=True)
