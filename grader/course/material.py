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


TORCH = "torch>=2.2,<3"  # as both packages require it
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def install_cell(solutions: str) -> str:
    """The notebook's first code cell: installs what it imports where it is missing or another version
    (Colab, a JupyterHub image, an install from an earlier course), and nothing where it is there. The
    package is pinned to the grader that made the notebook, so a student's self-check never runs other
    rules than the grader that will mark it: whichever package provides `grader` (the whole one or the
    student one) must be that version. Where pip cannot install it, the cell stops with the command to
    run; where it replaced a version this kernel already imported, it says to restart the kernel.
    matplotlib (for the notebook's plots) is installed apart, only where missing, so the student package
    stays a few hundred kB beside torch. Where torch is missing it comes first, from PyTorch's CPU index:
    the package's own requirement would fetch PyPI's torch, a CUDA build of several GB on Linux."""
    package = f"{STUDENT_PACKAGE[solutions]}=={__version__}"
    return (f"# Installs the course's self-check, {package} (the grader's version), where it is missing or\n"
            "# another version (Colab, a JupyterHub image, an earlier course's install)\n"
            "import importlib.metadata, importlib.util, subprocess, sys\n"
            "pip = [sys.executable, '-m', 'pip', 'install', '-q']\n"
            "if importlib.util.find_spec('torch') is None:  # the CPU build: PyPI's is a CUDA build of several GB\n"
            f"    subprocess.run([*pip, {TORCH!r}, '--index-url', {CPU_INDEX!r}], check=True)\n"
            f"pinned, version = {package!r}, {__version__!r}\n"
            "found = sorted({importlib.metadata.version(d) for d in importlib.metadata.packages_distributions().get("
            "'grader', []) if importlib.util.find_spec('grader')})\n"
            "needed = [] if found == [version] else [pinned]\n"
            "needed += ['matplotlib'] if importlib.util.find_spec('matplotlib') is None else []\n"
            "if needed and subprocess.run([*pip, *needed]).returncode:\n"
            "    raise SystemExit(f\"could not install {' '.join(needed)}: run  pip install {' '.join(needed)}  \"\n"
            "                     \"in a terminal, then restart the kernel (Kernel > Restart)\")\n"
            "if pinned in needed and 'grader' in sys.modules:\n"
            "    print(f\"installed {pinned} in place of version {', '.join(found)}: restart the kernel \"\n"
            "          \"(Kernel > Restart) and run the notebook from the top\")\n"
            "elif pinned in needed and found:\n"
            "    print(f\"installed {pinned} in place of version {', '.join(found)}\")")


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
