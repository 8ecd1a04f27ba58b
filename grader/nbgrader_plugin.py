"""backprop-ninja inside nbgrader: a preprocessor that takes the place of Execute in `nbgrader
autograde`, and an exporter with one column per grade id.

No kernel ever runs the student's notebook. The preprocessor grades its answer cells with the hidden
suite, in the sandbox, and writes into each grade cell (one per grade id) what nbgrader's own
SaveAutoGrades reads: the feedback as printed text and the score as the cell's result. So whatever a
student's notebook does (monkeypatching, writing to stderr, printing numbers, editing or deleting the
grade cells, which OverwriteCells restores) it never runs, and cannot change a score.
"""
from __future__ import annotations

import csv
from pathlib import Path

import nbformat
from nbgrader.plugins import ExportPlugin
from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells
from traitlets import Bool, Unicode

from grader import safe_text
from grader.exercise import GRADE_CELL_PREFIX, grade_cell_id


def fill_grade_cells(nb, result, page: bool = True) -> None:
    """Each grade cell gets its grade id's feedback (stdout) and score (the result nbgrader reads as
    partial credit). A grade cell the grader has no test for gets 0 and says so, never full points.
    With `page`, the notebook also opens with the student's feedback page (add_feedback_page), whichever
    route graded it: nbgrader's autograde, or the fast route (whose results carry no pictures)."""
    tests = {grade_cell_id(t.name): t for t in result.tests}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        test = tests.get(meta.get("grade_id"))
        if test is None:
            text, score = f"{meta.get('grade_id')}: not a grade id backprop-ninja grades; 0 points\n", 0
        else:
            text, score = f"{test.name}: {test.score:g} / {test.max_score:g} ({test.verdict}). {test.output}\n", test.score
        cell.outputs = [
            nbformat.v4.new_output("stream", name="stdout", text=text),
            nbformat.v4.new_output("execute_result", data={"text/plain": f"{score:g}"}, execution_count=None),
        ]
        cell.execution_count = None
    if page:
        add_feedback_page(nb, result)


def add_feedback_page(nb, result) -> None:
    """The student's feedback page (grader.feedback_page) as the HTML output of a cell of its own at the
    top: nbgrader's generate_feedback keeps an HTML output as it is, and nbconvert shows no input for a
    cell whose source is marked removed. A cell without nbgrader metadata is neither graded nor checked."""
    from grader.feedback_page import fragment

    output = nbformat.v4.new_output("display_data", data={"text/html": fragment(result)})
    nb.cells.insert(0, nbformat.v4.new_code_cell("", metadata={"transient": {"remove_source": True}},
                                                 outputs=[output]))


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
        from grader.grade import Grader, weaker_course

        info = resources["nbgrader"]
        course = load(self.course)
        if self.allow_weaker_sandbox:
            course = weaker_course(course)
        submission = extract.from_notebook(f"{info['student']}/{info['assignment']}/{info['notebook']}",
                                           Path(info["notebook"]), nb)
        grader = Grader(course, hidden=[Path.cwd()], evidence=self.feedback_page)
        # Log lines go to the instructor's terminal and name the submission or quote its errors.
        [result] = grader.run([submission], progress=lambda line: self.log.info(safe_text.terminal(line)))
        if result.error:
            self.log.warning(safe_text.terminal(f"{submission.id}: {result.error}"))
        for flag in result.flags:
            self.log.warning(safe_text.terminal(f"{submission.id}: integrity flag {flag['kind']}: {flag['evidence']}"))
        if self.results:
            from grader import feedback_page, results

            results.write_result(Path(self.results), result)
            feedback_page.write(Path(self.results), result)
        fill_grade_cells(nb, result, page=self.feedback_page)
        return nb, resources


class PerGradeIdExport(ExportPlugin):
    """`nbgrader export --exporter=grader.nbgrader_plugin.PerGradeIdExport`: one row per student and
    assignment, one column per grade id (nbgrader's own CSV has only totals)."""

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
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["assignment", "student_id", "score", "max_score", *columns])
            for row in rows:
                writer.writerow([row["assignment"], row["student_id"], f"{row['score']:g}", f"{row['max_score']:g}",
                                 *(f"{row[g]:g}" if g in row else "" for g in grade_ids)])
        self.log.info("wrote %s", path)
