"""How long a student waits on a check cell: every slip of the rule table written into its answer cell of
the solved notebook, in a real kernel, and each check cell of that cell timed as JupyterLab runs it.

    python benchmarks/self_check_speed.py                      # the lecture's notebook
    python benchmarks/self_check_speed.py --variant relu-layernorm
    python benchmarks/self_check_speed.py --limit 20           # the first 20 slips only (a quick look)
    python benchmarks/self_check_speed.py --student            # as a graded course's students have it

`--student` runs the kernel as backprop-ninja-student leaves it: importing grader.derive (the rule
table) fails there, and the slips are known from the fingerprints `course init` writes beside the
notebook (written here too).

The notebook's setup cells and every reference answer run first, as Run All leaves them (the training
run aside); then, one slip at a time, the slipped cell, what calls its function (exercise 4), its
check cells, and the reference cell again. The first check cell run is timed apart: it builds the
self-check's own batches and, where the package carries the rule table, its slips. It prints the
slowest checks, then the median and worst of all the others. The answers, sizes and seeds are fixed, so
two runs time the same work; the machine's load is what varies (benchmarks/README.md has the figures).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from grader.authoring import skeleton  # noqa: E402
from grader.course import load as load_course  # noqa: E402
from grader.exercises.makemore_mlp import variants  # noqa: E402
from grader.lms import course_init, notebooks, slip_prints  # noqa: E402
from helpers.kernel import CourseNotebook, Session  # noqa: E402

# The first cell of a --student kernel: the student package carries no rule table.
NO_RULE_TABLE = "import sys\nsys.modules['grader.derive'] = None\n"


def course_notebook(variant: str | None, folder: Path, student: bool) -> CourseNotebook:
    """The checkout's course and solved notebook, or a variant's as `course init --variant` writes it; for
    `student`, in a folder of its own with the fingerprints beside it."""
    course = load_course(ROOT / "course.yml")
    if variant is None:
        solved = ROOT / "solutions" / "backprop_ninja_solved.ipynb"
        where = solved.parent
        if student:
            where = folder / "notebook"
            shutil.copytree(solved.parent, where, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
            slip_prints.write(where, course.exercise_spec, notebooks.notebook_spec(course.exercise_spec))
        return CourseNotebook(course, nbformat.read(solved, as_version=4), where)
    course_init.init(course, folder / "course", variant=variant)  # writes the fingerprints too
    course = load_course(folder / "course" / "course.yml")
    where = folder / "course" / "source" / course.assignment
    return CourseNotebook(course, nbformat.read(where / course.notebook, as_version=4), where)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", help="a variant's name (backprop-ninja variants lists them)")
    parser.add_argument("--limit", type=int, help="time only the first LIMIT slips")
    parser.add_argument("--student", action="store_true",
                        help="without the rule table, the fingerprints beside the notebook (backprop-ninja-student)")
    parser.add_argument("--slowest", type=int, default=10, help="how many of the slowest checks to list")
    args = parser.parse_args(argv)
    if args.variant is not None:
        try:
            variants.parse(args.variant.removeprefix("makemore-mlp/"))
        except ValueError as exc:
            parser.error(str(exc))
    with tempfile.TemporaryDirectory() as folder:
        notebook = course_notebook(args.variant, Path(folder), args.student)
        exercise = notebook.course.exercise
        mutants = skeleton.mutants(exercise)[: args.limit]
        reference = {cell: notebook.cells[cell] for cell in notebook.answer_cells}
        started = time.perf_counter()
        session = Session(notebook, reference, first=NO_RULE_TABLE if args.student else None)
        print(f"{exercise.name}: {len(mutants)} slips; kernel and Run All took {time.perf_counter() - started:.1f} s")
        try:
            names = []
            for mutant in mutants:
                session.lines(mutant.cell, mutant.cells[mutant.cell])
                session.restore(mutant.cell)
                names += [mutant.slip.name] * (len(session.seconds) - len(names))
        finally:
            session.close()
    (first, *timed) = [(seconds, f"{grade_id} ({name})") for (seconds, _, grade_id), name
                       in zip(session.seconds, names, strict=True)]
    print(f"first check cell (builds the self-check's batches): {first[0]:.2f} s, {first[1]}")
    print(f"slowest {args.slowest} of the other {len(timed)} check cells:")
    for seconds, what in sorted(timed, reverse=True)[: args.slowest]:
        print(f"  {seconds:6.2f} s  {what}")
    values = [seconds for seconds, _ in timed]
    print(f"median {statistics.median(values):.2f} s, worst {max(values):.2f} s, total {sum(values):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
