"""Where the course material is: the assignment, the solved notebook, the hidden suite, course.yml and
the lecture's names.txt.

A checkout holds them at its top level. A wheel carries a copy in grader/course_data/ (setup.py puts it
there), so that `pip install backprop-ninja` is enough to set up a course. That folder holds no Python
module: nothing imports it, so a sandboxed child that may read only the modules it imports never sees
the references or the hidden suite; only `course init`, `solution` and `data` read it, in the trusted
process.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from grader import __version__

PACKAGED = Path(__file__).resolve().parents[1] / "course_data"
ASSIGNMENT = Path("assignments") / "backprop_ninja"
SOLVED = Path("solutions") / "backprop_ninja_solved.ipynb"
NAMES = ASSIGNMENT / "names.txt"


def root() -> Path:
    """The wheel's copy when there is one, else the checkout this package sits in."""
    return PACKAGED if PACKAGED.is_dir() else PACKAGED.parent.parent


# What a student's notebook needs installed, by course.yml's `solutions`: the whole package (its
# `solution` command, the solved notebook) for self-learners, or only the self-check for a graded course.
STUDENT_PACKAGE = {"gated": "backprop-ninja", "off": "backprop-ninja-student"}


def install_cell(solutions: str) -> str:
    """The notebook's first code cell: installs what it imports where it is missing (Colab, a JupyterHub
    image without it), and nothing where it is there. The package is pinned to the grader that made the
    notebook, so a student's self-check never runs other rules than the grader that will mark it;
    matplotlib (for the notebook's plots) is installed apart, only where missing, so the student package
    stays a few hundred kB beside torch."""
    package = f"{STUDENT_PACKAGE[solutions]}=={__version__}"
    return (f"# Installs the course's self-check where it is missing (Colab, a JupyterHub image): {package}\n"
            "import importlib.util, subprocess, sys\n"
            f"needed = {{'grader': {package!r}, 'matplotlib': 'matplotlib'}}\n"
            "missing = [package for module, package in needed.items() if importlib.util.find_spec(module) is None]\n"
            "if missing:\n"
            "    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', *missing], check=True)")


# The notebook's line holding course.yml's public settings (the self-check reads them): one dict literal.
SETTINGS_LINE = re.compile(r"(?m)^COURSE = (\{.*\})[ \t]*$")


def notebook_settings(source: str) -> dict | None:
    """The course settings a notebook cell's `COURSE = {...}` line holds; None where it holds none."""
    found = SETTINGS_LINE.search(source)
    if not found:
        return None
    try:
        settings = ast.literal_eval(found.group(1))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return settings if isinstance(settings, dict) else None


def with_solutions(source: str, solutions: str) -> str:
    """A cell's `COURSE = {...}` line saying course.yml's `solutions` (written only when `off`, so a
    gated course's notebook stays as committed): the self-check and `backprop-ninja solution` read it."""
    settings = notebook_settings(source)
    if settings is None:
        return source
    settings.pop("solutions", None)
    if solutions != "gated":
        settings["solutions"] = solutions
    return SETTINGS_LINE.sub(lambda _: f"COURSE = {settings!r}", source, count=1)
