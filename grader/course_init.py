"""`backprop-ninja course init DIR`: an nbgrader course directory wired to this grader.

The assignment's nbgrader source is the solved notebook (nbgrader releases it with its solutions
cleared, exactly as assignments/ holds it); its grade cells take the course's points; the hidden suite
and course.yml (with a fresh secret salt) sit beside nbgrader_config.py, which puts the sandboxed grader
in place of nbgrader's kernel.
"""
from __future__ import annotations

import re
import secrets
import shutil
from pathlib import Path

from grader.exercise import grade_cell_id

SOLVED = Path("solutions") / "backprop_ninja_solved.ipynb"

CONFIG = '''\
# Written by `backprop-ninja course init`. nbgrader runs this course; backprop-ninja grades it.
c = get_config()  # noqa: F821 (nbgrader provides it)

c.CourseDirectory.course_id = {course_id!r}

# The release keeps each answer cell's blank (`dlogprobs = None  # TODO`) so that Run All works:
# nbgrader's default stub, `raise NotImplementedError()`, would stop at the first unanswered cell.
c.ClearSolutions.code_stub = {{"python": ""}}

# Autograde runs no kernel: backprop-ninja grades the answer cells in its sandbox and writes each grade
# cell's score and feedback, which nbgrader's SaveAutoGrades then records per tensor.
c.Autograde.autograde_preprocessors = [
    "grader.nbgrader_plugin.GradeInSandbox",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.GradeInSandbox.course = {course_file!r}  # relative to the course directory, where nbgrader runs
# Each result as a file too, for `backprop-ninja report results/` and `backprop-ninja export results/`.
c.GradeInSandbox.results = "results"
# Grade cells come back from the gradebook, a deleted one too (nbgrader's own restore can fail on it).
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "grader.nbgrader_plugin.RestoreCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# zip_collect: files named <student>_<notebook>.ipynb in the archives an LMS hands out.
c.ZipCollectApp.collector_plugin = "nbgrader.plugins.FileNameCollectorPlugin"
c.FileNameCollectorPlugin.named_regexp = r".*/(?P<student_id>[^/_]+)_(?P<file_id>[^/]+\\.ipynb)$"
'''


class InitError(Exception):
    """The course directory cannot be written; the message says why."""


def _source_notebook(solved: Path, points: dict[str, float]):
    """The solved notebook with every grade cell worth this course's points (none: not graded)."""
    import nbformat

    nb = nbformat.read(solved, as_version=4)
    by_cell = {grade_cell_id(g): p for g, p in points.items()}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if not meta or not (meta.get("grade") or meta.get("grade_id") in by_cell):
            continue
        if meta["grade_id"] in by_cell:
            meta.update(grade=True, points=by_cell[meta["grade_id"]])
        else:
            meta["grade"] = False
            meta.pop("points", None)
    return nb


def init(course, target: Path) -> list[Path]:
    """Write the course directory; refuse to touch one that already has files (nothing is overwritten)."""
    import nbformat

    target = Path(target)
    if target.exists() and any(target.iterdir()):
        raise InitError(f"{target} is not empty: choose a new folder (nothing there is overwritten)")
    solved = course.root / SOLVED
    if not solved.is_file():
        raise InitError(f"{solved}: the solved notebook is missing (run this from a checkout of backprop-ninja)")
    if not course.autotests_dir.is_dir():
        raise InitError(f"{course.autotests_dir}: the hidden suite is missing")
    source = target / "source" / course.assignment
    source.mkdir(parents=True)
    nbformat.write(_source_notebook(solved, course.points), source / course.notebook)
    if course.data:
        data = course.root / "assignments" / course.assignment / course.data
        if not data.is_file():
            raise InitError(f"{data}: the data file named in course.yml is missing")
        shutil.copy(data, source / course.data)
    shutil.copytree(course.autotests_dir, target / "autotests",
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    text = course.path.read_text(encoding="utf-8")
    text = re.sub(r"(?m)^secret_salt:.*$", f"secret_salt: {secrets.token_hex(16)}", text)
    text = re.sub(r"(?m)^autotests:.*\n", "", text) + "autotests: autotests\n"
    (target / "course.yml").write_text(text, encoding="utf-8")
    (target / "nbgrader_config.py").write_text(
        CONFIG.format(course_id=course.course_id, course_file="course.yml"),
        encoding="utf-8")
    return sorted(p for p in target.rglob("*") if p.is_file())
