"""Where the course material is: the assignment, the solved notebook, the hidden suite, course.yml and
the lecture's names.txt.

A checkout holds them at its top level. A wheel carries a copy in grader/course_data/ (setup.py puts it
there), so that `pip install backprop-ninja` is enough to set up a course. That folder holds no Python
module: nothing imports it, so a sandboxed child that may read only the modules it imports never sees
the references or the hidden suite; only `course init`, `solution` and `data` read it, in the trusted
process.
"""
from __future__ import annotations

from pathlib import Path

PACKAGED = Path(__file__).resolve().parent / "course_data"
ASSIGNMENT = Path("assignments") / "backprop_ninja"
SOLVED = Path("solutions") / "backprop_ninja_solved.ipynb"
NAMES = ASSIGNMENT / "names.txt"


def root() -> Path:
    """The wheel's copy when there is one, else the checkout this package sits in."""
    return PACKAGED if PACKAGED.is_dir() else PACKAGED.parent.parent
