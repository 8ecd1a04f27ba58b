"""backprop-ninja inside nbgrader: a preprocessor that takes the place of Execute in `nbgrader
autograde`, an exporter with one column per grade id, and a zip_collect collector for LMS downloads.

No kernel ever runs the student's notebook. The preprocessor grades its answer cells with the hidden
suite, in the sandbox, and writes into each grade cell (one per grade id) what nbgrader's own
SaveAutoGrades reads: the feedback as printed text and the score as the cell's result. So whatever a
student's notebook does (monkeypatching, writing to stderr, printing numbers, editing or deleting the
grade cells, which OverwriteCells restores) it never runs, and cannot change a score.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
from nbgrader.plugins import ExportPlugin, FileNameCollectorPlugin
from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells
from traitlets import Bool, Unicode

from grader import safe_text
from grader.exercise import GRADE_CELL_PREFIX, grade_cell_id
from grader.files import atomic_write, csv_text
from grader.lms.student_html import unsafe_name


def fill_grade_cells(nb, result, page: bool = True) -> None:
    """Each grade cell gets its grade id's feedback (stdout) and score (the result nbgrader reads as
    partial credit). A grade cell the grader has no test for gets 0 and says so, never full points.
    With `page`, the notebook also opens with the student's feedback page (add_feedback_page), whichever
    route graded it: nbgrader's autograde, or the fast route (whose results carry no pictures).

    First, whatever the student wrote is neutralised (grader.lms.student_html): this notebook is the one
    nbgrader stores, formgrader renders logged in as the TA, and generate_feedback renders for the student.
    Done here, both routes do it, and so does a course whose nbgrader_config.py an older version wrote."""
    from grader.lms.student_html import neutralise

    neutralise(nb)
    tests = {grade_cell_id(t.name): t for t in result.tests}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        test = tests.get(meta.get("grade_id"))
        if test is None:
            text, score = f"{meta.get('grade_id')}: not a grade id backprop-ninja grades; 0 points\n", 0
        else:
            text = f"{test.name}: {test.score:g} / {test.max_score:g} ({test.verdict}). {test.output}\n"
            score = test.score
        cell.outputs = [
            nbformat.v4.new_output("stream", name="stdout", text=text),
            nbformat.v4.new_output("execute_result", data={"text/plain": f"{score:g}"}, execution_count=None),
        ]
        cell.execution_count = None
    if page:
        add_feedback_page(nb, result)


def add_feedback_page(nb, result) -> None:
    """The student's feedback page (grader.outputs.feedback_page) as the HTML output of a cell of its own at the
    top: nbgrader's generate_feedback keeps an HTML output as it is, and nbconvert shows no input for a
    cell whose source is marked removed. A cell without nbgrader metadata is neither graded nor checked."""
    from grader.outputs.feedback_page import fragment

    output = nbformat.v4.new_output("display_data", data={"text/html": fragment(result)})
    nb.cells.insert(0, nbformat.v4.new_code_cell("", metadata={"transient": {"remove_source": True}},
                                                 outputs=[output]))


class NeutraliseHtml(NbGraderPreprocessor):
    """The last of autograde's sanitize steps: nbgrader writes the notebook to autograded/ before it grades,
    and leaves it there when grading fails, so it is neutralised already then (fill_grade_cells does it
    again after grading, for courses whose nbgrader_config.py predates this step)."""

    def preprocess(self, nb, resources):
        from grader.lms.student_html import neutralise

        neutralise(nb)
        return nb, resources


class RestoreCells(OverwriteCells):
    """nbgrader's OverwriteCells, restoring every deleted grade cell.

    nbgrader 0.9.6 puts a missing grade cell back after the source cell that preceded it, and fails
    (KeyError, and the student gets no grade) when that cell is gone too or is a read-only cell. This
    puts it after the nearest earlier cell that is still there, so a deleted grade cell always comes
    back worth its points.
    """

    add_missing_cells = Bool(True).tag(config=True)

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


def set_flagged(db_url: str, notebook: str, assignment: str, student: str) -> None:
    """formgrader's "Flagged?" for a submission with integrity flags, so a TA sees it in the submission
    list. Only ever set: a flag a TA set by hand is theirs to clear."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        gb.find_submission_notebook(notebook, assignment, student).flagged = True
        gb.db.commit()


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


class GradeInSandbox(NbGraderPreprocessor):
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

    def preprocess(self, nb, resources):
        from grader import extract
        from grader.course import load
        from grader.pipeline.batch import weaker_course
        from grader.pipeline.grading import Grader

        info = resources["nbgrader"]
        why = unsafe_name(info["student"])
        if why:  # nbgrader then records no grade, and formgrader has no page of it to show
            raise ValueError(f"not graded: the student id {why}")
        course = load(self.course)
        if self.allow_weaker_sandbox:
            course = weaker_course(course)
        if info.get("db_url"):
            same_points(course, info)
        submission = extract.from_notebook(f"{info['student']}/{info['assignment']}/{info['notebook']}",
                                           Path(info["notebook"]), nb, course.exercise.answer_cells)
        grader = Grader(course, hidden=[Path.cwd()], evidence=self.feedback_page)
        # Log lines go to the instructor's terminal and name the submission or quote its errors.
        [result] = grader.run([submission], progress=lambda line: self.log.info(safe_text.terminal(line)))
        if result.error:
            self.log.warning(safe_text.terminal(f"{submission.id}: {result.error}"))
        for flag in result.flags:
            self.log.warning(safe_text.terminal(f"{submission.id}: integrity flag {flag['kind']}: {flag['evidence']}"))
        if result.flags and info.get("db_url"):
            set_flagged(info["db_url"], info["notebook"], info["assignment"], info["student"])
        if self.results:
            from grader.outputs import feedback_page, results

            results.write_result(Path(self.results), result)
            feedback_page.write(Path(self.results), result)
        fill_grade_cells(nb, result, page=self.feedback_page)
        return nb, resources


class PerGradeIdExport(ExportPlugin):
    """`nbgrader export --exporter=grader.lms.nbgrader.PerGradeIdExport`: one row per student and
    assignment, one column per grade id (nbgrader's own CSV has only totals). Written as the grader's
    grades.csv is, whole or not at all: an export stopped half-way leaves the previous one to upload."""

    def export(self, gradebook) -> None:
        path = self.to or "grades_per_grade_id.csv"
        rows, grade_ids = [], []
        for assignment in gradebook.assignments:
            for notebook in assignment.notebooks:
                for cell in notebook.grade_cells:
                    if cell.name not in grade_ids:
                        grade_ids.append(cell.name)
            for student in gradebook.students:
                row = {"assignment": assignment.name, "student_id": student.id, "score": 0.0, "max_score": 0.0}
                try:
                    submission = gradebook.find_submission(assignment.name, student.id)
                except Exception:  # nbgrader's MissingEntry: no submission, an empty row
                    rows.append(row)
                    continue
                row["score"], row["max_score"] = submission.score, submission.max_score
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        row[grade.name] = grade.score
                rows.append(row)
        columns = [g.removeprefix(GRADE_CELL_PREFIX) for g in grade_ids]
        table = [["assignment", "student_id", "score", "max_score", *columns]]
        table += [[row["assignment"], row["student_id"], f"{row['score']:g}", f"{row['max_score']:g}",
                   *(f"{row[g]:g}" if g in row else "" for g in grade_ids)] for row in rows]
        atomic_write(Path(path), csv_text(table))
        self.log.info("wrote %s", path)


# The names each LMS gives a submitted file in its bulk download (the file part is the student's own file
# name, which the LMS may have changed). Each gives nbgrader's student id and, where the LMS has one, its
# own id of the student, which the Canvas export matches the roster's ID column on.
LMS_NAMES = (
    # Canvas: <login>_[late_]<user id>_<submission id>_<file>[-N].ipynb; -N when the student's file name
    # was already taken (a resubmission), LATE when submitted after the due date.
    ("Canvas", re.compile(r"(?P<student_id>[^_/]+)_(?P<late>late_)?(?P<lms_user_id>\d+)_(?P<submission_id>\d+)_"
                          r"(?P<file>.+?)(?:-(?P<resubmission>\d+))?\.ipynb")),
    # Blackboard: <assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file>.ipynb
    ("Blackboard", re.compile(r".*_(?P<student_id>[^_/]+)_attempt_(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)"
                              r"_(?P<file>.+)\.ipynb")),
    # Moodle: "<full name>_<participant id>_assignsubmission_file_" then the file (in a folder of that name,
    # or after it in one file name); the participant id is the grading worksheet's "Participant N".
    ("Moodle", re.compile(r"(?P<full_name>[^/]+?)_(?P<lms_user_id>\d+)"
                          r"_assignsubmission_file_/?(?P<file>[^/]+)\.ipynb")),
    # Anything else: <student>_<file>.ipynb
    ("", re.compile(r"(?P<student_id>[^_/]+)_(?P<file>[^/]+)\.ipynb")),
)


def lms_name(path: str) -> dict | None:
    """What a downloaded file's path says (its name, or its folder's and its own for Moodle): student_id,
    lms, the LMS's user id (or None), resubmission number, late marker, timestamp; None when no LMS names
    files so."""
    parts = path.replace(os.sep, "/").split("/")
    for lms, pattern in LMS_NAMES:
        found = pattern.fullmatch(parts[-1]) or (len(parts) > 1 and pattern.fullmatch("/".join(parts[-2:])))
        if not found:
            continue
        info = found.groupdict()
        student = info.get("student_id") or f"{lms.lower()}-{info['lms_user_id']}"
        stamp = info.get("timestamp")
        if stamp:
            day, clock = stamp[:10], stamp[11:].replace("-", ":")
            stamp = f"{day} {clock}"
        return {"lms": lms, "student_id": student, "lms_user_id": info.get("lms_user_id"),
                "resubmission": int(info.get("resubmission") or 0), "late": bool(info.get("late")),
                "timestamp": stamp, "full_name": info.get("full_name")}
    return None


class LmsCollector(FileNameCollectorPlugin):
    """`nbgrader zip_collect`'s collector for Canvas, Moodle and Blackboard downloads (see LMS_NAMES).

    Every notebook is filed as the assignment's notebook, whatever the student's file was called. Of a
    student's several Canvas files the highest resubmission wins (Canvas numbers them, with no time). The
    LMS's user id is recorded with the student in the gradebook (nbgrader's lms_user_id), so the Canvas
    export can find the student in the roster even where the login differs."""

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
        newer = [p for p in Path(submitted_file).parent.glob("*.ipynb")
                 if (other := lms_name(p.name)) and other["lms"] == info["lms"]
                 and other["student_id"] == info["student_id"] and other["resubmission"] > info["resubmission"]]
        if newer:
            self.log.warning("Skipped %s: %s resubmitted it as %s", submitted_file, info["student_id"], newer[0].name)
            return None
        if info["late"]:
            self.log.warning("%s: Canvas marks %s's submission late", submitted_file, info["student_id"])
        self._record(info)
        found = {"student_id": info["student_id"], "file_id": self.notebook or Path(submitted_file).name}
        if info["timestamp"]:
            found["timestamp"] = info["timestamp"]
        return found

    def _record(self, info: dict) -> None:
        """The LMS's id (and Moodle's full name) with the student, in the gradebook generate_assignment made."""
        if not info["lms_user_id"] and not info["full_name"]:
            return
        from nbgrader.api import Gradebook

        names = {}
        if info["full_name"]:
            first, _, last = info["full_name"].rpartition(" ")
            names = {"first_name": first or last, "last_name": last if first else None}
        with Gradebook(self.parent.coursedir.db_url) as gb:
            gb.update_or_create_student(info["student_id"], lms_user_id=info["lms_user_id"], **names)
