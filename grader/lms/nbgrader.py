"""backprop-ninja inside nbgrader: a preprocessor that takes the place of Execute in `nbgrader
autograde`, an exporter with one column per grade id, and a zip_collect collector for LMS downloads.

No kernel ever runs the student's notebook. The preprocessor grades its answer cells with the hidden
suite, in the sandbox, and writes into each grade cell (one per grade id) what nbgrader's own
SaveAutoGrades reads: the feedback as printed text and the score as the cell's result. So whatever a
student's notebook does (monkeypatching, writing to stderr, printing numbers, editing or deleting the
grade cells, which OverwriteCells restores) it never runs, and cannot change a score.
"""
from __future__ import annotations

import datetime
import glob
import hashlib
import json
import math
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

import nbformat
from nbconvert.exporters import NotebookExporter
from nbconvert.preprocessors import Preprocessor
from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.plugins import ExportPlugin, FileNameCollectorPlugin, LateSubmissionPlugin
from nbgrader.preprocessors import DeduplicateIds, NbGraderPreprocessor, OverwriteCells
from traitlets import Bool, Float, List, Unicode

from grader import safe_text
from grader.lms.student_html import unsafe_name
from grader.outputs import final
from grader.outputs.files import atomic_write, csv_text, private_mode
from grader.vocabulary import GRADE_CELL_PREFIX, Flag, grade_cell_id


class _Preprocessor(NbGraderPreprocessor):
    """nbconvert configures every preprocessor's display_data_priority (NbConvertBase's, which nbgrader's base
    class declares again as no setting): accepted here, unused, so that each generate_feedback and autograde
    does not warn that a setting nobody wrote is not recognised."""

    display_data_priority = List(config=True, help="nbconvert's; not used by this preprocessor")


# The mark of a notebook in autograded/ whose grading has not finished. nbgrader writes the sanitized notebook
# there before it grades and, when autograde is killed (a culled server, an OOM kill, a closed ssh session),
# leaves it; the next autograde passes over a folder that exists, and generate_feedback made the student a page
# of the earlier grades for the new notebook (a TA trial). The mark makes that copy known as ungraded.
UNFINISHED = "backprop_ninja_grading_unfinished"


def unfinished(coursedir, student: str, assignment: str) -> str:
    """Why the student's notebook in autograded/ is not a graded one ("" when it is, or there is none)."""
    import json

    folder = Path(coursedir.format_path(coursedir.autograded_directory, student, assignment))
    for path in sorted(folder.glob("*.ipynb")) if folder.is_dir() else ():
        try:
            marked = UNFINISHED in json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
        except (OSError, ValueError, AttributeError):
            marked = True
        if marked:
            return unfinished_why(student, assignment)
    return ""


def unfinished_why(student: str, assignment: str) -> str:
    return (f"its grading did not finish (autograde was stopped while grading it): run nbgrader autograde "
            f"{assignment} --student {student} --force (without --force nbgrader passes over it), then nbgrader "
            f"generate_feedback")


def fill_grade_cells(nb, result, page: bool = True, title: str | None = None) -> None:
    """Each grade cell gets its grade id's feedback (stdout) and score (the result nbgrader reads as
    partial credit). A grade cell the grader has no test for gets 0 and says so, never full points.
    With `page`, the notebook also opens with the student's feedback page (add_feedback_page), whichever
    route graded it: nbgrader's autograde, or the fast route (whose results carry no pictures); `title`,
    what its heading names (add_feedback_page).

    First, whatever the student wrote is neutralised (grader.lms.student_html): this notebook is the one
    nbgrader stores, formgrader renders logged in as the TA, and generate_feedback renders for the student.
    Done here, both routes do it, and so does a course whose nbgrader_config.py an older version wrote."""
    from grader.lms.student_html import neutralise

    neutralise(nb)  # drops UNFINISHED's mark with every other notebook metadata of the sanitized copy
    tests = {grade_cell_id(t.name): t for t in result.tests}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        test = tests.get(meta.get("grade_id"))
        if test is None:
            text, score = f"{meta.get('grade_id')}: not a grade id backprop-ninja grades; 0 points\n", 0
        else:
            text, score = _grade_cell_text(test), test.score
        # nbgrader reads the score from the result's text/plain; a page shows its HTML instead, which says
        # what the number is (a bare "0" under every grade cell read as stray output in formgrader).
        points = meta.get("points", test.max_score if test is not None else 0)
        cell.outputs = [
            nbformat.v4.new_output("stream", name="stdout", text=text),
            nbformat.v4.new_output("execute_result", data=_score_outputs(score, points), execution_count=None),
        ]
        cell.execution_count = None
    if page:
        add_feedback_page(nb, result, title)


def _grade_cell_text(test) -> str:
    return f"{test.name}: {test.score:g} / {test.max_score:g} ({test.verdict}). {test.output}\n"


def _score_outputs(score: float, points: float) -> dict:
    """A grade cell's result: nbgrader reads the plain text; a page shows the HTML, which says what it is."""
    return {"text/plain": f"{score:g}",
            "text/html": f'<span class="bpn-score">autograded: {score:g} of {float(points):g} point(s)</span>'}


PAGE_KEY = "backprop_ninja_result"  # the feedback page cell's metadata: the result it was made from


def add_feedback_page(nb, result, title: str | None = None) -> None:
    """The student's feedback page (grader.outputs.feedback_page) as the HTML output of a cell of its own at the
    top: nbgrader's generate_feedback keeps an HTML output as it is, and nbconvert shows no input for a
    cell whose source is marked removed. A cell without nbgrader metadata is neither graded nor checked.
    The result rides in the cell's metadata, so that generate_feedback can make the page again with the
    gradebook's scores (GradebookFeedback).

    Both nbgrader routes title it with the assignment and notebook, not the student: formgrader shows
    this notebook to a TA grading blind (its list says "Submission #2", never a name), and the student
    knows who they are."""
    from grader.outputs.feedback_page import fragment
    from grader.outputs.results import gradescope

    output = nbformat.v4.new_output("display_data", data={"text/html": fragment(result, title)})
    metadata = {"transient": {"remove_source": True}, PAGE_KEY: gradescope(result)}
    nb.cells.insert(0, nbformat.v4.new_code_cell("", metadata=metadata, outputs=[output]))


class GradebookFeedback(_Preprocessor):
    """In `nbgrader generate_feedback`, after nbgrader's GetGrades: the feedback page and each grade cell's
    line made again from the gradebook, so that a TA's manual score and a late penalty show on the
    per-tensor page as in nbgrader's own header, one total (grader.outputs.final). The page made at
    autograde time had the grader's scores only; its pictures are kept as they were drawn.

    The late penalty is counted on the score the notebook has now and stored so (nbgrader's own views read
    the stored one), and the page carries the scores it shows, which release_feedback holds against the
    gradebook's when it releases (ReleaseFeedback)."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        if UNFINISHED in nb.metadata:  # release_feedback holds its page back (stale_feedback)
            self.log.warning(safe_text.terminal(f"{info['student']}: feedback not to release: "
                                                f"{unfinished_why(info['student'], info['assignment'])}"))
        penalty = self._settle_penalty(info)
        info["score"] = info["score"] + (info.get("late_penalty") or 0.0) - penalty
        info["late_penalty"] = penalty
        grades = {c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader["score"] for c in nb.cells
                  if c.metadata.get("nbgrader", {}).get("grade") and c.metadata.nbgrader.get("score") is not None}
        info[SCORES_SHOWN] = scores_shown(grades, penalty)
        remake_page(nb, grades, penalty, f"{info['assignment']}/{info['notebook']}")
        return nb, resources

    def _settle_penalty(self, info) -> float:
        """The notebook's late penalty on its score now (final.penalty_of), stored where it has moved."""
        from nbgrader.api import Gradebook
        from sqlalchemy.exc import SQLAlchemyError

        with Gradebook(info["db_url"]) as gb:
            entry = gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"])
            penalty = final.penalty_of(entry, self)
            if abs(penalty - (entry.late_submission_penalty or 0.0)) > 1e-9:
                self.log.warning(safe_text.terminal(
                    f"{info['student']}: late penalty {penalty:g}, counted on the score now "
                    f"(it was {entry.late_submission_penalty or 0:g}, of the score before a TA's change)"))
                entry.late_submission_penalty = penalty or None
                try:
                    gb.db.commit()
                except SQLAlchemyError:  # a gradebook this user may only read: every view counts it anyway
                    gb.db.rollback()
        return penalty


# The scores a feedback page shows (nbgrader's resources, written into the page by the course's template):
# release_feedback holds a page back whose scores are no longer the gradebook's.
SCORES_SHOWN = "backprop_ninja_scores"
SCORES_META = "backprop-ninja-scores"  # the page's <meta name> for them (the course's feedback template)


def scores_shown(grades: dict[str, float], penalty: float) -> str:
    """`grades` (grade id -> score) and the late penalty as one line, the same for the same scores."""
    shown = ";".join(f"{name}={score:.6g}" for name, score in sorted(grades.items()))
    return f"{shown};late penalty={penalty:.6g}"


def remake_page(nb, grades: dict[str, float], late_penalty: float, title: str) -> None:
    """The feedback page at the top of an autograded notebook, and the grade cells' lines, with `grades` (grade
    id -> score) and `late_penalty` over the grader's (grader.outputs.final.adjust); a notebook autograded
    before the page carried its result is left as it was."""
    from grader.outputs import feedback_page
    from grader.outputs.results import result_from_json

    page = next((c for c in nb.cells if PAGE_KEY in c.metadata), None)
    if page is None:
        return
    result = final.adjust(result_from_json(page.metadata[PAGE_KEY]), grades, late_penalty)
    old = "".join(o.get("data", {}).get("text/html", "") for o in page.outputs)
    page.outputs = [nbformat.v4.new_output("display_data", data={
        "text/html": feedback_page.fragment(result, title, drawn=feedback_page.drawn_on(old))})]
    tests = {grade_cell_id(t.name): t for t in result.tests if final.overridden(t)}
    for cell in nb.cells:
        test = tests.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
        for output in cell.outputs if test is not None else []:
            if output.get("name") == "stdout":
                output.text = _grade_cell_text(test)
            elif output.get("output_type") == "execute_result":
                output.data = _score_outputs(test.score, test.max_score)


class FormgraderScores(Preprocessor):
    """In formgrader's view of an autograded notebook (course init's nbgrader_config.py adds it to the
    HTMLExporter formgrader renders with): the page at its top says the score the gradebook holds now, a
    TA's manual scores and the late penalty included, as every other place does, not the grader's from
    autograde time. Anything else the exporter renders (no formgrader submission in its resources) is left
    as it is."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook, MissingEntry
        from nbgrader.coursedir import CourseDirectory

        if "submission_id" not in resources or "nbgrader" in resources:
            return nb, resources
        assignment, notebook = resources["assignment_id"], resources["notebook_id"]
        with Gradebook(CourseDirectory(config=self.config).db_url) as gb:
            try:
                entry = gb.find_submission_notebook(notebook, assignment, resources["student"])
            except MissingEntry:
                return nb, resources
            grades, penalty = final.by_hand(entry.grades), final.penalty_of(entry, self)
        remake_page(nb, grades, penalty, f"{assignment}/{notebook}")
        return nb, resources


# Two gradings of one course at once (a TA's fast route beside an instructor's autograde, two autogrades) remove
# and write each other's autograded notebooks: tracebacks, and every student's left deleted (a TA trial).
GRADING_LOCK = ".backprop-ninja-grading.lock"


class GradingBusy(Exception):
    """Another grading holds the course; the message says which and what to do."""


class GradingLock:
    """The course's grading lock (grading_lock), held until `release` (or its process ends)."""

    def __init__(self, key: str):
        self.key, self.held = key, True

    def release(self) -> None:
        if self.held:
            self.held = False
            handle, count = _HELD[self.key]
            if count == 1:
                del _HELD[self.key]
                handle.close()
            else:
                _HELD[self.key] = (handle, count - 1)

    __del__ = release


_HELD: dict[str, tuple] = {}  # course folder -> (the locked file, how many of this process's holders share it)


def grading_lock(course_root: Path) -> GradingLock:
    """The course's grading lock, for whichever route grades: an advisory lock on a file in the course folder,
    which every grader of a group-shared course may open. Raises GradingBusy, naming the holder's command,
    user and pid, when another process holds it; within one process (formgrader's server, a demo) the holders
    share it, since one process's gradings run one after the other."""
    import fcntl

    path = Path(course_root).resolve() / GRADING_LOCK
    key = str(path)
    if key in _HELD:
        handle, count = _HELD[key]
        _HELD[key] = (handle, count + 1)
        return GradingLock(key)
    try:
        # held by the caller, for as long as it grades
        handle = open(os.open(path, os.O_RDWR | os.O_CREAT, private_mode(path.parent)), "r+b")
    except PermissionError:
        handle = open(path, "rb")  # a lock needs only an open file: another grader created it
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(path)
        handle.close()
        raise GradingBusy(f"another grading of this course is running ({holder}): run this again when it has "
                          "finished; two at once remove each other's autograded notebooks") from None
    _HELD[key] = (handle, 1)
    return GradingLock(key)


def _lock_holder(path: Path) -> str:
    """Who holds the flock on `path`, from the kernel's own table (/proc/locks), as "COMMAND by USER, pid N"."""
    import pwd

    inode = path.stat().st_ino
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return "its process is not known"
    for line in table.splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            pid = fields[4]
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                owner = pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
            except (OSError, KeyError):
                return f"pid {pid}"
            words = [Path(w.decode(errors="replace")).name for w in argv[:3] if w]
            command = " ".join(w for w in words if not w.startswith("python"))
            return safe_text.terminal(f"{command or 'a process'} by {owner}, pid {pid}")
    return "its process is not known"


class OneGraderAtATime(NotebookExporter):
    """nbgrader autograde's exporter (`c.Autograde.exporter_class`, course init's nbgrader_config.py): autograde
    makes it before it removes or writes any student's autograded folder, so the course's grading lock taken
    here stops a second grading before it touches the first one's work. Held until the converter has gone
    through every submission: the command's whole run, or one autograde from formgrader."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        converter = self.parent
        try:
            lock = grading_lock(converter.coursedir.root)
        except GradingBusy as exc:
            from nbgrader.converters.base import NbGraderException

            self.log.error(str(exc))
            raise NbGraderException(str(exc)) from None
        convert = converter.convert_notebooks  # what the converter's start runs next: released when it ends

        def convert_then_release():
            try:
                return convert()
            except KeyboardInterrupt:  # nbgrader removed the notebook it was grading and said "Canceled"
                from nbgrader.converters.base import NbGraderException

                said = (f"interrupted: run nbgrader autograde {converter.coursedir.assignment_id} again: it grades "
                        "the notebook it was grading and those not graded yet")
                self.log.error(said)  # one line, where nbgrader's own ended in a traceback (a TA trial)
                raise NbGraderException(said) from None
            finally:
                lock.release()

        converter.convert_notebooks = convert_then_release


class NeutraliseHtml(_Preprocessor):
    """The last of autograde's sanitize steps: nbgrader writes the notebook to autograded/ before it grades,
    and leaves it there when grading fails, so it is neutralised already then (fill_grade_cells does it
    again after grading, for courses whose nbgrader_config.py predates this step)."""

    def preprocess(self, nb, resources):
        from grader.lms.student_html import neutralise

        neutralise(nb)
        nb.metadata[UNFINISHED] = True  # until fill_grade_cells: see UNFINISHED
        return nb, resources


class Deduplicate(DeduplicateIds):
    """nbgrader's DeduplicateIds, which fails the whole notebook (KeyError 'grade_id') on a cell a student marked
    as nbgrader's graded, solution or read-only cell without a grade id: such a cell becomes a plain cell, worth
    nothing, and the rest of the notebook is graded."""

    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader")
        if isinstance(meta, dict) and any(meta.get(k) for k in ("grade", "solution", "locked")) \
                and not isinstance(meta.get("grade_id"), str):
            self.log.warning("Cell %d is marked as nbgrader's but has no grade id: made a plain cell", index)
            del cell.metadata["nbgrader"]
            return cell, resources
        return super().preprocess_cell(cell, resources, index)


class RestoreCells(OverwriteCells):
    """nbgrader's OverwriteCells, restoring every deleted grade cell, and never failing on a copied one.

    nbgrader 0.9.6 puts a missing grade cell back after the source cell that preceded it, and fails
    (KeyError, and the student gets no grade) when that cell is gone too or is a read-only cell. This
    puts it after the nearest earlier cell that is still there, so a deleted grade cell always comes
    back worth its points. DeduplicateIds, before it, empties the nbgrader metadata of every earlier
    copy of a cell (a copied cell keeps its grade id), which nbgrader's own restore of task cells then
    reads as a grade id and fails on for the whole notebook: such a copy becomes a plain cell here.
    """

    add_missing_cells = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            if cell.metadata.get("nbgrader") == {}:
                del cell.metadata["nbgrader"]
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader")
        cell, resources = super().preprocess_cell(cell, resources, index)
        if isinstance(meta, dict) and "grade_id" not in meta:
            # A cell the student marked as nbgrader's, with a grade id the assignment does not have (nbgrader
            # then drops the id and keeps the mark) or none: nbgrader fails on it further on (KeyError), and
            # the student would get no grade. Their own cell is worth nothing; it stays as a plain cell.
            self.log.warning("Cell %d is marked as nbgrader's but is none of the assignment's: made a plain cell",
                             index)
            del cell.metadata["nbgrader"]
        return cell, resources

    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        names = [cell.name for cell in source_nb.source_cells]
        solutions = {cell.name for cell in source_nb.solution_cells}
        for grade_cell in source_nb.grade_cells:
            present = {cell.metadata["nbgrader"].get("grade_id"): i for i, cell in enumerate(nb.cells)
                       if "nbgrader" in cell.metadata}
            if grade_cell.name in present:
                continue
            self.log.warning("Missing grade cell %s encountered, adding to notebook", grade_cell.name)
            index = names.index(grade_cell.name)
            cell = self.missing_cell_transform(source_nb.source_cells[index], grade_cell.max_score,
                                               is_solution=grade_cell.name in solutions)
            earlier = [present[name] for name in names[:index] if name in present]
            nb.cells.insert(max(earlier) + 1 if earlier else 0, cell)
        return nb, resources


def feedback_templates() -> dict[str, list[str]]:
    """HTMLExporter's settings for generate_feedback (nbgrader_config.py applies them): template folders
    with backprop-ninja's own, which extends nbgrader's feedback template by its path under nbgrader's
    templates, and nbgrader's bootstrap CSS, which that template inlines."""
    import nbgrader

    formgrader = Path(nbgrader.__file__).resolve().parent / "server_extensions" / "formgrader"
    return {"extra_template_basedirs": [str(Path(__file__).resolve().parent / "nbgrader_templates"),
                                        str(formgrader / "templates")],
            "extra_template_paths": [str(formgrader / "templates"),
                                     str(formgrader / "static" / "node_modules" / "bootstrap" / "dist" / "css")]}


@contextmanager
def transaction(db_url: str):
    """nbgrader's Gradebook whose writes are one transaction: committed when the block ends, rolled back when it
    raises. nbgrader's own methods and preprocessors commit after each step (SaveAutoGrades after each grade
    cell), so a failure half-way left a submission on record with some scores or none, which every view then
    read as zeros; here their commits only flush."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        session = gb.db

        def flush():
            session.flush()
            session.expire_all()  # what a commit does, so that a total (a column_property) is read again

        session.commit = flush
        try:
            yield gb
        except BaseException:
            session.rollback()
            raise
        finally:
            del session.commit
        session.commit()


class RecordGrades(_Preprocessor):
    """nbgrader's SaveAutoGrades and AssignLatePenalties, in one transaction: a submission's grades are on
    record whole, its late penalty with them, or not at all (see transaction). `nbgrader autograde` runs it in
    their place (course init's nbgrader_config.py), and so does the fast route (grader.lms.gradebook)."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with transaction(info["db_url"]) as gb:
            nb, resources = record(gb, nb, resources, parent=self)
        for line in resources.get(TAKEN_BACK, ()):
            self.log.warning(safe_text.terminal(line))
        written = resources.get(WRITTEN)
        if written is not None:
            # The result file GradeInSandbox wrote has the grader's score; now on record with a TA's kept score
            # and the late penalty, it says the final one, as the fast route's does.
            folder, result = written
            adjusted, _ = final.from_gradebook([result], Path(info["db_url"].removeprefix("sqlite:///")))
            for line in final.written(folder, adjusted):
                self.log.warning(safe_text.terminal(line))
        return nb, resources


TAKEN_BACK = "backprop_ninja_taken_back"  # in a record's resources: the TA's scores it took back, said
WRITTEN = "backprop_ninja_written"  # in autograde's resources: the results folder and the result written there


def record(gb, nb, resources, parent=None):
    """SaveAutoGrades' and AssignLatePenalties' writes, into `gb` (an open transaction). A TA's score of a
    tensor whose grader's score has changed since (the notebook handed in again, its answer changed) is of an
    answer no longer on record: taken back, and said in resources[TAKEN_BACK]. nbgrader's own kept it and only
    marked the cell for review, so a right resubmission kept the TA's half point for an earlier wrong answer (a
    TA trial). Where the grader's score is the same, the TA's stays, reviewed as it was (nbgrader's own marked it
    as needing review again on every regrade)."""
    from nbconvert.preprocessors import Preprocessor
    from nbgrader.api import MissingEntry
    from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades

    info = resources["nbgrader"]
    try:
        before = {g.name: (g.auto_score, g.needs_manual_grade) for g in gb.find_submission_notebook(
            info["notebook"], info["assignment"], info["student"]).grades if g.manual_score is not None}
    except MissingEntry:
        before = {}
    save = SaveAutoGrades(parent=parent)
    save.notebook_id, save.assignment_id, save.student_id = info["notebook"], info["assignment"], info["student"]
    save.gradebook = gb
    nb, resources = Preprocessor.preprocess(save, nb, resources)  # SaveAutoGrades' own, cell by cell
    resources[TAKEN_BACK] = []
    for grade in gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"]).grades:
        if grade.name not in before or grade.manual_score is None:
            continue
        was, reviewed = before[grade.name]
        if grade.auto_score == was:  # the same answer graded again: the TA's review of it stands, not "needs one"
            grade.needs_manual_grade = reviewed
            continue
        resources[TAKEN_BACK].append(
            f"{info['student']}: took back the score {grade.manual_score:g} a TA set for {grade.name}: the grader's "
            f"score of it is now {grade.auto_score:g} (it was {was:g}), of a notebook handed in since")
        grade.manual_score, grade.needs_manual_grade = None, False
    late = AssignLatePenalties(parent=parent)
    late.init_plugin()
    submission = gb.find_submission(info["assignment"], info["student"])
    notebook = gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"])
    notebook.late_submission_penalty = None
    if submission.total_seconds_late > 0:
        penalty = late.plugin_inst.late_submission_penalty(info["student"], notebook.score,
                                                          submission.total_seconds_late)
        if penalty is not None:
            notebook.late_submission_penalty = late._check_late_penalty(notebook, penalty)
    return nb, resources


# The submissions whose "Flagged?" the grader set, and for what, kept in the gradebook itself (a table of our own,
# which nbgrader's own never read), in the same transaction as the flag: whichever route graded last.
GRADER_FLAGS = "backprop_ninja_flags"


def settle_flag(gb, notebook: str, assignment: str, student: str, result) -> str:
    """formgrader's "Flagged?" for the notebook just graded (`result`): set where it has integrity flags (never
    for an error the student fixes, such as a syntax error), so a TA sees it in the submission list; taken back
    where the grader had set it and this notebook has none (it stayed on after a clean resubmission: a TA
    trial). A flag the grader never set is a TA's own, theirs to clear. What to tell the grader, or ""."""
    from sqlalchemy import text

    gb.db.execute(text(f"CREATE TABLE IF NOT EXISTS {GRADER_FLAGS} (assignment TEXT NOT NULL, student TEXT NOT NULL, "
                       "notebook TEXT NOT NULL, kinds TEXT NOT NULL, PRIMARY KEY (assignment, student, notebook))"))
    key = {"assignment": assignment, "student": student, "notebook": notebook}
    where = "assignment = :assignment AND student = :student AND notebook = :notebook"
    ours = gb.db.execute(text(f"SELECT kinds FROM {GRADER_FLAGS} WHERE {where}"), key).scalar()
    entry = gb.find_submission_notebook(notebook, assignment, student)
    if result.integrity_flags:
        entry.flagged = True
        kinds = ", ".join(sorted({str(f["kind"]) for f in result.integrity_flags}))
        gb.db.execute(text(f"INSERT OR REPLACE INTO {GRADER_FLAGS} VALUES (:assignment, :student, :notebook, :kinds)"),
                      {**key, "kinds": kinds})
        return ""
    if ours is None:
        return ""
    gb.db.execute(text(f"DELETE FROM {GRADER_FLAGS} WHERE {where}"), key)
    if not entry.flagged:  # a TA cleared it already
        return ""
    entry.flagged = False
    return (f"{student}: took back formgrader's Flagged?, which the grader set for the notebook graded before "
            f"({ours}); this one has no integrity flag")


class PointsChanged(ValueError):
    """course.yml's points are not the gradebook's: the course needs `course init --update`."""


def same_points(course, info: dict) -> None:
    """Stop before grading when course.yml's points differ from those generate_assignment recorded: nbgrader
    would refuse a score above a cell's recorded maximum only after grading, and delete the notebook."""
    from nbgrader.api import Gradebook

    with Gradebook(info["db_url"]) as gb:
        recorded = {c.name: c.max_score for c in gb.find_notebook(info["notebook"], info["assignment"]).grade_cells
                    if c.max_score}
    wanted = {grade_cell_id(g): p for g, p in course.points.items() if p}
    if recorded != wanted:
        changed = sorted(set(recorded) ^ set(wanted) | {k for k in recorded if recorded[k] != wanted.get(k)})
        raise PointsChanged(f"{course.path}: its points differ from the gradebook's ({', '.join(changed[:5])}"
                            f"{', ...' if len(changed) > 5 else ''}): run `backprop-ninja course init --update .` "
                            "in the course directory, then autograde again")


# nbgrader makes its preprocessors anew for every notebook of an autograde run. The Grader (the hidden
# configurations and their oracle values, a sandbox probed once) is the same for every notebook while the
# course is: made again, it cost each student's notebook seconds before its first answer ran.
_made: dict[tuple, object] = {}


def _grader(course, weaker: bool, evidence: bool, log):
    from grader.pipeline.batch import weaker as weaker_line
    from grader.pipeline.grading import Grader, course_digest

    key = (str(course.path.resolve()), course_digest(course), weaker, evidence, str(Path.cwd()))
    if key not in _made:
        _made.clear()
        _made[key] = Grader(course, hidden=[Path.cwd()], evidence=evidence)
        if _made[key].isolation["missing"]:  # as the fast route's first line (a red team found this route quiet)
            log.warning(weaker_line(_made[key].isolation))
    return _made[key]


class GradeInSandbox(_Preprocessor):
    """Replaces Execute in Autograde.autograde_preprocessors (see `backprop-ninja course init`)."""

    course = Unicode("course.yml", help="The course's backprop-ninja configuration").tag(config=True)
    feedback_page = Bool(True, help="Head each notebook's feedback with the student's feedback page (scores, "
                                    "feedback and pictures of each wrong tensor)").tag(config=True)
    results = Unicode("", help="Also write each result to this folder, as <student>/<assignment>/<notebook>.json "
                               "with its feedback page beside it, for `backprop-ninja report` and `export` "
                               "(empty: none)").tag(config=True)
    allow_weaker_sandbox = Bool(False, help="Grade even where a wall course.yml's sandbox.require lists cannot be "
                                            "raised; each result records the walls that were missing. Without it, "
                                            "autograde fails with one line that names the wall").tag(config=True)

    def submitted(self, info: dict) -> Path:
        """The student's notebook in the course's submitted/ folder, which autograde sanitized."""
        from nbgrader.coursedir import CourseDirectory

        coursedir = CourseDirectory(config=self.config)
        folder = coursedir.format_path(coursedir.submitted_directory, info["student"], info["assignment"])
        return Path(folder) / f"{info['notebook']}.ipynb"

    def preprocess(self, nb, resources):
        from grader import extract
        from grader.course import load
        from grader.pipeline.batch import weaker_course

        info = resources["nbgrader"]
        why = unsafe_name(info["student"])
        if why:  # nbgrader then records no grade, and formgrader has no page of it to show
            raise ValueError(f"not graded: the student id {why}")
        course = load(self.course)
        if self.allow_weaker_sandbox:
            course = weaker_course(course)
        if info.get("db_url"):
            same_points(course, info)
        # The answer cells as submitted, read as the fast route reads them: the notebook handed here went
        # through DeduplicateIds, which keeps the last of several copies of a cell without a word.
        submission = extract.read(f"{info['student']}/{info['assignment']}/{info['notebook']}",
                                  self.submitted(info), course.exercise.answer_cells, course.limits.analysis_cpu)
        grader = _grader(course, self.allow_weaker_sandbox, self.feedback_page, self.log)
        # Log lines go to the instructor's terminal and name the submission or quote its errors.
        [result] = grader.run([submission], progress=lambda line: self.log.info(safe_text.terminal(line)))
        if result.error:
            self.log.warning(safe_text.terminal(f"{submission.id}: {result.error}"))
        for flag in result.flags:
            sort = "integrity flag" if Flag.is_integrity(flag["kind"]) else "error"
            self.log.warning(safe_text.terminal(f"{submission.id}: {sort} {flag['kind']}: {flag['evidence']}"))
        if info.get("db_url"):
            with transaction(info["db_url"]) as gb:
                said = settle_flag(gb, info["notebook"], info["assignment"], info["student"], result)
            if said:
                self.log.warning(safe_text.terminal(said))
        if self.results:
            from grader.outputs import feedback_page, results

            results.write_result(Path(self.results), result)
            feedback_page.write(Path(self.results), result)
            resources[WRITTEN] = (Path(self.results), result)
        # Graded again: the feedback of the earlier grading goes (a refused or failed grading leaves it, with
        # the scores it shows)
        from nbgrader.coursedir import CourseDirectory

        said = drop_feedback(CourseDirectory(config=self.config), info["student"], info["assignment"])
        if said:
            self.log.warning(safe_text.terminal(said))
        fill_grade_cells(nb, result, page=self.feedback_page, title=f"{info['assignment']}/{info['notebook']}")
        return nb, resources


def drop_feedback(coursedir, student: str, assignment: str) -> str:
    """A submission graded again: its feedback of the earlier grading goes, so that release_feedback cannot
    hand the student a page whose scores are no longer theirs, and generate_feedback (which passes over a
    student whose feedback folder exists) makes it again. What to tell the grader, or "" where there was none."""
    folder = Path(coursedir.format_path(coursedir.feedback_directory, student, assignment))
    if not folder.is_dir() or folder.is_symlink():
        return ""
    shutil.rmtree(folder)
    return f"{student}: removed {folder}, the feedback of an earlier grading: run nbgrader generate_feedback again"


class LatePenalty(LateSubmissionPlugin):
    """A share of the score off for each day late, or part of one, up to a cap: the policy most courses state,
    where nbgrader's own offers none or all (`c.AssignLatePenalties.plugin_class`, which both routes record
    with; course init's nbgrader_config.py shows how)."""

    per_day = Float(0.1, min=0.0, help="The share of the score taken off for each day late, or part of one "
                                       "(0.1: 10%)").tag(config=True)
    most = Float(1.0, min=0.0, max=1.0, help="At most this share of the score is taken off").tag(config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float | None:
        if total_seconds_late <= 0:
            return None
        days = math.ceil(total_seconds_late / 86400)
        return round(score * min(self.most, self.per_day * days), 6)


class PerGradeIdExport(ExportPlugin):
    """`nbgrader export --exporter=grader.lms.nbgrader.PerGradeIdExport`: one row per student and
    assignment, one column per grade id (nbgrader's own CSV has only totals), its totals as nbgrader's own
    CSV names them (score is what the student ends with: raw_score less late_submission_penalty). Written
    as the grader's grades.csv is, whole or not at all: an export stopped half-way leaves the previous one
    to upload. A grade with no score on record (a grading that failed) is blank, and so are its totals:
    nbgrader's own reads it as 0. So is a submission whose notebook in submitted/ is no longer the one its
    result (GradeInSandbox.results) was graded from: a resubmission whose autograde failed leaves the
    earlier scores in the gradebook, which are not the student's latest."""

    def export(self, gradebook) -> None:
        from grader.outputs.final import recorded

        path = self.to or "grades_per_grade_id.csv"
        replaced = self._resubmitted()
        rows, grade_ids = [], []
        for assignment in gradebook.assignments:
            for notebook in assignment.notebooks:
                for cell in notebook.grade_cells:
                    if cell.name not in grade_ids:
                        grade_ids.append(cell.name)
            for student in gradebook.students:
                row = {"assignment": assignment.name, "student_id": student.id, "raw_score": 0.0,
                       "late_submission_penalty": 0.0, "score": 0.0, "max_score": 0.0}
                try:
                    submission = gradebook.find_submission(assignment.name, student.id)
                except Exception:  # nbgrader's MissingEntry: no submission, an empty row
                    rows.append(row)
                    continue
                whole = all(recorded(notebook.grades) and f"{student.id}/{assignment.name}/{notebook.name}"
                            not in replaced for notebook in submission.notebooks)
                penalty = sum(final.penalty_of(notebook, self) for notebook in submission.notebooks)
                row.update(raw_score=submission.score if whole else None, max_score=submission.max_score,
                           late_submission_penalty=penalty if whole else None,
                           score=submission.score - penalty if whole else None)
                for notebook in submission.notebooks:
                    latest = f"{student.id}/{assignment.name}/{notebook.name}" not in replaced
                    for grade in notebook.grades:
                        row[grade.name] = grade.score if latest and recorded([grade]) else None
                rows.append(row)
        columns = [g.removeprefix(GRADE_CELL_PREFIX) for g in grade_ids]
        totals = ["raw_score", "late_submission_penalty", "score", "max_score"]
        table = [["assignment", "student_id", *totals, *columns]]
        table += [[row["assignment"], row["student_id"], *(_number(row[t]) for t in totals),
                   *(_number(row.get(g)) for g in grade_ids)] for row in rows]
        atomic_write(Path(path), csv_text(table))
        self.log.info("wrote %s", path)


    def _resubmitted(self) -> set[str]:
        """The submissions (<student>/<assignment>/<notebook>) whose notebook in submitted/ is not the one their
        result was graded from, where autograde writes results (GradeInSandbox.results, as course init sets)."""
        from nbgrader.coursedir import CourseDirectory

        from grader.extract import unreadable
        from grader.outputs.report import load, resubmitted

        folder = self.config.GradeInSandbox.get("results")
        coursedir = CourseDirectory(config=self.config)
        if not isinstance(folder, str) or not folder:
            return set()
        results = Path(coursedir.root) / folder
        if not results.is_dir():
            return set()
        graded = load(results, skip=[])
        # and those whose latest notebook no reader takes (the fast route's result of it, written there): their
        # earlier scores stay in the gradebook (a TA trial's export gave them)
        return set(resubmitted(graded, Path(coursedir.root) / coursedir.submitted_directory)) | \
            {r.submission for r in graded if unreadable(r.error)}


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


# The names each LMS gives a submitted file in its bulk download (the file part is the student's own file
# name, which the LMS may have changed). Each gives nbgrader's student id and, where the LMS has one, its
# own id of the student, which the Canvas export places the student by.
LMS_NAMES = (
    # Canvas: <name>_[LATE_]<user id>_<attachment id>_<file>[-N].ipynb. <name> is the surname and first name
    # run together (two students may share it), so the student is known by the Canvas user id alone. -N
    # when the student's file name was already taken (a resubmission); attachment ids only grow, so the
    # file with the highest is the newest. LATE (Canvas writes it in either case) after the due date.
    ("Canvas", re.compile(r"(?P<lms_name>[^_/]+)_(?:(?P<late>[Ll][Aa][Tt][Ee])_)?(?P<lms_user_id>\d+)_"
                          r"(?P<attachment_id>\d+)_(?P<file>.+?)(?:-(?P<resubmission>\d+))?\.ipynb")),
    # Blackboard: <assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file>.ipynb. The first such run
    # is Blackboard's: the file name after it is the student's, and may hold another.
    ("Blackboard", re.compile(r"[^/]*?_(?P<student_id>[^_/]+)_attempt_(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)"
                              r"_(?P<file>.+)\.ipynb")),
    # Moodle: "<full name>_<participant id>_assignsubmission_file_" then the file (in a folder of that name,
    # or after it in one file name); the participant id is the grading worksheet's "Participant N".
    ("Moodle", re.compile(r"(?P<full_name>[^/]+?)_(?P<lms_user_id>\d+)"
                          r"_assignsubmission_file_/?(?P<file>[^/]+)\.ipynb")),
)
# Anything else: <student>_<file>.ipynb
OTHER = re.compile(r"(?P<student_id>[^_/]+)_(?P<file>[^/]+)\.ipynb")


def _match(path: str) -> tuple[str, re.Match] | None:
    """The LMS whose own part of the name ends first, and its match. Everything after that part is the
    file name the student chose, where a student can write another LMS's pattern, or their own LMS's with a
    classmate's id and any time (a red team filed a blank notebook as a classmate's, dated 2099, so that
    nothing the classmate handed in later was collected): it never names the student."""
    parts = path.replace(os.sep, "/").split("/")
    name = parts[-1]
    found = []
    for lms, pattern in LMS_NAMES:
        for text in ("/".join(parts[-2:]), name) if len(parts) > 1 else (name,):
            match = pattern.fullmatch(text)
            if match:  # where the student's part starts, counted in the file's own name
                found.append((match.start("file") - (len(text) - len(name)), lms, match))
                break
    if found:
        _, lms, match = min(found, key=lambda f: f[0])
        return lms, match
    match = OTHER.fullmatch(name)
    return ("", match) if match else None


def lms_name(path: str) -> dict | None:
    """What a downloaded file's path says (its name, or its folder's and its own for Moodle): student_id,
    lms, the LMS's user id (or None), the name the LMS gives the student (Moodle's full name, Canvas's
    run-together one), resubmission number, late marker, timestamp, and `order`, which sorts a student's
    files oldest first; None when no LMS names files so."""
    matched = _match(path)
    if matched is None:
        return None
    lms, found = matched
    info = found.groupdict()
    student = info.get("student_id") or f"{lms.lower()}-{info['lms_user_id']}"
    stamp = info.get("timestamp")
    if stamp:
        day, clock = stamp[:10], stamp[11:].replace("-", ":")
        stamp = f"{day} {clock}"
    resubmission = int(info.get("resubmission") or 0)
    return {"lms": lms, "student_id": student, "lms_user_id": info.get("lms_user_id"),
            "resubmission": resubmission, "late": bool(info.get("late")), "timestamp": stamp,
            "full_name": info.get("full_name"), "lms_name": info.get("lms_name"),
            "order": (stamp or "", int(info.get("attachment_id") or 0), resubmission)}


LEDGER = "collected.json"  # in downloaded/<assignment>/: which download file each student's notebook came from


class LmsCollector(FileNameCollectorPlugin):
    """`nbgrader zip_collect`'s collector for Canvas, Moodle and Blackboard downloads (see LMS_NAMES), which
    an instructor runs again after each new download, with no --force.

    Every notebook is filed as the assignment's notebook, whatever the student's file was called. Of a
    student's files in all the downloads (archive/ keeps them) only the newest is collected, and only when
    it is not the notebook collected already, so nbgrader never meets two files for one student, and a
    second download collects only what is new. A student whose notebook changed has their autograded and
    feedback folders removed, so the next `nbgrader autograde` grades it without --force (nbgrader's own
    test is timestamps, which Canvas and Moodle names do not carry). A submission made through nbgrader's exchange
    is never replaced by a file of a download. The LMS's user id is recorded with the student in the
    gradebook (nbgrader's lms_user_id), so the Canvas export places the student without a roster.

    course init sets ZipCollectApp.force: nbgrader's own zip_collect refuses to extract into a folder
    extracted before and to file into a student's folder filed before; here the collector alone decides
    what is filed."""

    notebook = Unicode("", help="The assignment's notebook, which every collected notebook is filed as").tag(
        config=True)

    def collect(self, submitted_file: str):
        if os.path.splitext(submitted_file)[1] not in self.valid_ext:
            return None
        info = lms_name(submitted_file)
        if info is None:
            self.log.warning("Skipped %s: not a file name Canvas, Moodle or Blackboard gives", submitted_file)
            return None
        why = unsafe_name(info["student_id"]) or unsafe_name(info["full_name"] or "")
        if why:
            self.log.warning("Skipped %s: the student's id or name %s", safe_text.terminal(submitted_file), why)
            return None
        student = info["student_id"]
        newest = self._newest(submitted_file).get(student, submitted_file)
        if newest != submitted_file:
            self.log.warning("Skipped %s: %s's newer file is %s", submitted_file, student, os.path.basename(newest))
            return None
        target = self._submitted(student) / (self.notebook or Path(submitted_file).name)
        if (target.parent / "submission_secret.txt").exists():
            self.log.warning("Skipped %s: %s submitted through nbgrader's exchange; that submission stays (remove "
                             "%s to take the download's file instead)", submitted_file, student, target.parent)
            return None
        digest = hashlib.sha256(Path(submitted_file).read_bytes()).hexdigest()
        collected = self._ledger().get(student)
        current = _digest(target)
        if current == digest:
            self.log.info("%s: already collected for %s", submitted_file, student)
            return None
        if collected and collected["sha256"] == current and tuple(collected["order"]) > info["order"]:
            self.log.warning("Skipped %s: older than %s, collected for %s before", submitted_file,
                             collected["file"], student)
            return None
        if info["late"]:
            info["timestamp"] = info["timestamp"] or self._late(submitted_file, student)
        if current is not None:
            self._regrade(student)
        self._record(info)
        self._note(student, submitted_file, info["order"], digest)
        found = {"student_id": student, "file_id": self.notebook or Path(submitted_file).name}
        if info["timestamp"]:
            found["timestamp"] = info["timestamp"]
        return found

    def _coursedir(self):
        return self.parent.coursedir

    def _step(self, step: str) -> Path:
        """downloaded/<assignment>/<step> (a folder of zip_collect's, or "" for the folder holding them)."""
        app = self.parent
        return Path(app._format_collect_path(getattr(app, step) if step else ""))

    def _newest(self, submitted_file: str) -> dict[str, str]:
        """student id -> the newest of their files among everything extracted (computed once: zip_collect
        passes the files one by one). Files with nothing to order them (two notebooks in one Moodle
        submission) are taken in name order, the one named as the assignment's notebook last; the others
        are said in the log."""
        if getattr(self, "_plan", None) is None:
            try:
                root = self._step("extracted_directory")
            except AttributeError:  # not inside zip_collect: only this file's folder is known
                root = Path(submitted_file).parent
            by_student: dict[str, list[tuple]] = {}
            for path in sorted(str(p) for p in root.rglob("*.ipynb")):
                info = lms_name(path)
                if info is not None:
                    key = (info["order"], Path(path).name == self.notebook, path)
                    by_student.setdefault(info["student_id"], []).append(key)
            self._plan = {}
            for student, keys in by_student.items():
                keys.sort()
                self._plan[student] = keys[-1][2]
                name = os.path.basename(keys[-1][2])  # the same file in two downloads is no tie
                ties = [k[2] for k in keys[:-1] if k[0] == keys[-1][0] and os.path.basename(k[2]) != name]
                if ties:
                    self.log.warning("%s: several files with nothing to tell which is newer (%s); collected %s",
                                     student, ", ".join(os.path.basename(t) for t in ties),
                                     os.path.basename(keys[-1][2]))
        return self._plan

    def _submitted(self, student: str) -> Path:
        coursedir = self._coursedir()
        return Path(coursedir.format_path(coursedir.submitted_directory, student, coursedir.assignment_id))

    def _ledger(self) -> dict:
        try:
            return json.loads((self._step("") / LEDGER).read_text(encoding="utf-8"))
        except (OSError, ValueError, AttributeError):
            return {}

    def _note(self, student: str, path: str, order: tuple, digest: str) -> None:
        try:
            ledger_path = self._step("") / LEDGER
        except AttributeError:
            return
        ledger = self._ledger()
        ledger[student] = {"file": os.path.basename(path), "order": list(order), "sha256": digest}
        atomic_write(ledger_path, json.dumps(ledger, indent=1, sort_keys=True) + "\n")

    def _regrade(self, student: str) -> None:
        """A new notebook for a student graded before: their autograded and feedback folders go (nbgrader
        redoes a student's assignment only when its folder is missing), so that autograde and
        generate_feedback redo them; the gradebook keeps its entries until autograde replaces them."""
        coursedir = self._coursedir()
        for directory in (coursedir.autograded_directory, coursedir.feedback_directory):
            folder = Path(coursedir.format_path(directory, student, coursedir.assignment_id))
            if folder.is_dir():
                shutil.rmtree(folder)
                self.log.warning("%s: a newer file; removed %s so that it is graded again", student, folder)

    def _late(self, submitted_file: str, student: str) -> str | None:
        """The time a file Canvas marks late is recorded as submitted: Canvas names no time, and nbgrader's late
        penalty (the course's LateSubmissionPlugin) counts only a time past the due date, so the file counts as
        one second past the student's due date (an extension included). None, said, where the gradebook holds
        no due date: then no penalty can apply."""
        from nbgrader.api import Gradebook, MissingEntry

        assignment = self._coursedir().assignment_id
        with Gradebook(self._coursedir().db_url) as gb:
            try:
                due = gb.find_submission(assignment, student).duedate  # graded before: with any extension
            except MissingEntry:
                try:
                    due = gb.find_assignment(assignment).duedate
                except MissingEntry:
                    due = None
        if due is None:
            self.log.warning("%s: Canvas marks %s's submission late, but the gradebook holds no due date for %s, so "
                             "no late penalty applies (set one: nbgrader db assignment add %s --duedate=...)",
                             submitted_file, student, assignment, assignment)
            return None
        late = due + datetime.timedelta(seconds=1)
        self.log.warning("%s: Canvas marks %s's submission late: recorded as submitted at %s UTC, past the due "
                         "date, so the course's late penalty applies", submitted_file, student,
                         f"{late:%Y-%m-%d %H:%M:%S}")
        return f"{late:%Y-%m-%d %H:%M:%S} UTC"

    def _record(self, info: dict) -> None:
        """The LMS's id and the LMS's name of the student, in the gradebook generate_assignment made; a
        name already there (a roster imported with `nbgrader db student import`) is kept."""
        if not info["lms_user_id"] and not info["full_name"]:
            return
        from nbgrader.api import Gradebook, MissingEntry

        names = {}
        with Gradebook(self._coursedir().db_url) as gb:
            try:
                known = gb.find_student(info["student_id"])
                named = bool(known.first_name or known.last_name)
            except MissingEntry:
                named = False
            if not named and info["full_name"]:
                first, _, last = info["full_name"].rpartition(" ")
                names = {"first_name": first or last, "last_name": last if first else None}
            elif not named and info["lms_name"]:
                names = {"last_name": info["lms_name"]}
            gb.update_or_create_student(info["student_id"], lms_user_id=info["lms_user_id"], **names)


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class OwnedCollect(ExchangeCollect):
    """nbgrader's collect, which takes a hand-in as the student its name claims whoever owns it, and only warns
    (`check_owner`): on a shared server's exchange a student handed in as a classmate, after them, and
    replaced their graded notebook, or got them flagged (a red team). Where the claimed student is a unix
    user, a hand-in another user owns is refused, said in one line, and that student's own newest is
    collected. Students who are no unix users of their own (one account for a class) keep nbgrader's warning:
    ownership says nothing there."""

    def _path_to_record(self, path):
        record = super()._path_to_record(path)
        owner = _forged_by(path, record["username"]) if self.check_owner else None
        if owner is not None:
            record["forged"] = owner
            self.log.error(safe_text.terminal(f"refused: {path} claims to be handed in by {record['username']} but "
                                              f"was handed in by {owner}: not collected"))
        return record

    def _sort_by_timestamp(self, records):
        """The student's own hand-ins first, newest first: the one collected is the newest of them."""
        return sorted(super()._sort_by_timestamp(records), key=lambda record: "forged" in record)

    def copy_files(self):
        self.src_records = [record for record in self.src_records if "forged" not in record]
        super().copy_files()


def _forged_by(path: str, student: str) -> str | None:
    """Who handed `path` in as `student` when that is another unix user than the student (None otherwise)."""
    import pwd

    try:
        claimed = pwd.getpwnam(student).pw_uid
    except KeyError:
        return None
    owner = os.stat(path).st_uid
    if owner == claimed:
        return None
    try:
        return pwd.getpwuid(owner).pw_name
    except KeyError:
        return f"uid {owner}"


class ReleaseFeedback(ExchangeReleaseFeedback):
    """nbgrader's release_feedback, which releases to the students who submitted through the exchange and
    names the others: nbgrader's own stops with a traceback at the first student collected from an LMS
    download (such a submission has no timestamp.txt and no submission_secret.txt, and its student could
    not fetch it anyway). Their feedback pages are listed, to hand back through the LMS.

    Feedback of a notebook that is no longer the student's latest is held back, saying why: nbgrader's own
    released a page whose total every other view had stopped counting, after the latest notebook failed to
    grade (a TA trial). A student handed in with no feedback to release is named too."""

    def copy_files(self):
        excluded = set(filter(None, self.coursedir.student_id_exclude.split(",")))
        assignment = self.coursedir.assignment_id
        have = set()
        for folder in sorted(Path(p) for p in glob.glob(self.src_path)):
            student = folder.parent.name
            have.add(student)
            if student in excluded or not any(folder.glob("*.html")):
                continue
            why = unfinished(self.coursedir, student, assignment)
            if why:
                excluded.add(student)
                self.log.warning("%s: not released: %s", safe_text.terminal(student), why)
                continue
            why = stale_feedback(self.coursedir, student, assignment, folder)
            if why:
                excluded.add(student)
                self.log.warning("%s: not released: the feedback in %s %s; grade the latest notebook, then run "
                                 "nbgrader generate_feedback", safe_text.terminal(student), folder, why)
                continue
            why = scores_moved(self.coursedir, student, assignment, folder, self)
            if why:
                excluded.add(student)
                self.log.warning("%s: not released: the feedback in %s %s; run nbgrader generate_feedback, then "
                                 "release it", safe_text.terminal(student), folder, why)
                continue
            if not ((folder / "submission_secret.txt").is_file() and (folder / "timestamp.txt").is_file()):
                excluded.add(student)
                pages = ", ".join(str(p) for p in sorted(folder.glob("*.html")))
                self.log.warning("%s was collected from an LMS download, not the exchange: hand back %s through "
                                 "the LMS", student, pages)
        submitted = self.coursedir.format_path(self.coursedir.submitted_directory, self.coursedir.student_id or "*",
                                               assignment)
        missing = sorted({Path(p).parent.name for p in glob.glob(submitted)} - have - excluded)
        for student in missing:
            autograded = Path(self.coursedir.format_path(self.coursedir.autograded_directory, student, assignment))
            why = (unfinished(self.coursedir, student, assignment) or
                   "graded, and nbgrader generate_feedback has not run since: run it, then this again"
                   if autograded.is_dir() else
                   "its latest notebook is not graded (its grading failed, as autograde's output said, or it has "
                   "not run since it was collected): run nbgrader autograde for it, then nbgrader generate_feedback, "
                   "then this again; a notebook autograde cannot read (a truncated upload) the student hands in again")
            self.log.warning("no feedback to release for %s: %s", safe_text.terminal(student), why)
        self.coursedir.student_id_exclude = ",".join(sorted(excluded))
        self.log.addFilter(_released_to)
        try:
            super().copy_files()
        finally:
            self.log.removeFilter(_released_to)


def stale_feedback(coursedir, student: str, assignment: str, folder: Path) -> str:
    """Why the feedback in `folder` is not of the student's latest notebook ("" when it is): the latest failed
    to grade (autograde, and the fast route, then leave no autograded notebook), or was handed in after it."""
    from grader.extract import plain_file

    autograded = Path(coursedir.format_path(coursedir.autograded_directory, student, assignment))
    if not autograded.is_dir():
        return "is of a notebook graded earlier: the latest has no graded copy (its grading failed)"
    latest = Path(coursedir.format_path(coursedir.submitted_directory, student, assignment)) / "timestamp.txt"
    given = folder / "timestamp.txt"
    if plain_file(latest) and plain_file(given) and _text(latest) != _text(given):
        return f"is of the notebook handed in at {_text(given)}, not the latest ({_text(latest)})"
    return ""


def scores_moved(coursedir, student: str, assignment: str, folder: Path, settings) -> str:
    """Why the feedback pages in `folder` no longer show the gradebook's scores ("" when they do): a TA changed a
    score, gave extra credit or the late penalty moved with them after generate_feedback made them, and
    release_feedback handed out a total every other view had stopped counting (a TA trial). A page made before
    pages carried their scores (GradebookFeedback) cannot tell, and is released as before."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(coursedir.db_url) as gb:
        for page in sorted(folder.glob("*.html")):
            shown = _meta(page.read_text(encoding="utf-8", errors="replace"), SCORES_META)
            try:
                entry = gb.find_submission_notebook(page.stem, assignment, student)
            except MissingEntry:
                continue
            now = scores_shown({g.name: g.score for g in entry.grades}, final.penalty_of(entry, settings))
            if shown and shown != now:
                return (f"shows scores the gradebook no longer holds ({page.name}: a score, extra credit or the late "
                        "penalty changed since it was made)")
    return ""


def _meta(page: str, name: str) -> str | None:
    """The content of the page's <meta name=`name`> (nbconvert writes its attributes in its own order)."""
    from html.parser import HTMLParser

    found = []

    class Meta(HTMLParser):
        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag == "meta" and attrs.get("name") == name and not found:
                found.append(attrs.get("content") or "")

    Meta().feed(page[:page.find("</head>") if "</head>" in page else None])
    return found[0] if found else None


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[:100].strip()


def _released_to(record) -> bool:
    """nbgrader's release_feedback logs the temporary name it copied a page to before moving it into place
    (`<hash>-tmp.html`, a file that never exists once it is done): the log names the page's own."""
    message = record.getMessage()
    if message.startswith("Feedback released to: ") and message.endswith("-tmp.html"):
        record.msg, record.args = message.removesuffix("-tmp.html") + ".html", ()
    return True
