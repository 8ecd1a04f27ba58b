"""This repository's notebooks, the makemore MLP's solved notebook and its students' notebook, built by
the package's notebook builder (grader/lms/notebooks.py, whose docstring describes the prose source) from
the lecture's prose source and the reference answers the rule table derives from its forward lines.

Run `python -m solutions.make_notebooks` after changing the prose source, the network, the rule table,
course.yml's `data`, `points`, `tolerance`, `allow` or `feedback`: tests/test_notebooks.py fails while the
committed notebooks differ from what this produces.
"""
from __future__ import annotations

from pathlib import Path

import nbformat

from grader import course as course_config
from grader.course import material
from grader.exercises.makemore_mlp import EXERCISE
from grader.lms.notebooks import build, release_path
from solutions import reference

ROOT = Path(__file__).resolve().parents[1]
SOLVED = material.SOLVED
PROSE = ROOT / "grader" / "exercises" / "makemore_mlp" / "notebook" / "backprop_ninja.py"


def repository(root: Path = ROOT) -> dict:
    """This repository's notebooks, the makemore MLP's, by their path relative to `root`."""
    course = course_config.load(root / "course.yml")
    solved, student = build(EXERCISE, PROSE, reference.cells(), course)
    return {SOLVED: solved, release_path(course): student}


def write(out: Path, root: Path = ROOT) -> list[Path]:
    written = []
    for relative, nb in repository(root).items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
        written.append(path)
    return written


def main() -> None:
    for path in write(ROOT):
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
