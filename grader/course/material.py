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
import shlex
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


# The notebook's first code cell; @NAME@ marks what install_cell fills in.
INSTALL_CELL = """\
# Installs the course's self-check, @PACKAGE@ (the grader's version), where it is missing or
# another version (Colab, a JupyterHub image, an earlier course's install): from the course's wheels or the
# clone of backprop-ninja the notebook sits in, never from a package index, where anyone may take that name
import importlib.metadata, importlib.util, pathlib, subprocess, sys
pip = [sys.executable, '-m', 'pip', 'install', '-q']
if importlib.util.find_spec('torch') is None:  # the CPU build: PyPI's is a CUDA build of several GB
    subprocess.run([*pip, @TORCH@, '--index-url', @CPU_INDEX@], check=True)
pinned, version, wheels = '@PACKAGE@', '@VERSION@', @WHEELS@  # course.yml's `wheels`
providers = importlib.metadata.packages_distributions().get('grader', [])  # the packages holding `grader`
found = sorted({importlib.metadata.version(d) for d in providers if importlib.util.find_spec('grader')})
checkout = next((p for p in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents]  # a clone of backprop-ninja
                 if (p / 'grader' / 'course' / 'material.py').is_file()), None)
needed = ['matplotlib'] if importlib.util.find_spec('matplotlib') is None else []
if found != [version]:
    own = (['--no-index', '--find-links', wheels, pinned] if wheels else
           @FROM_CHECKOUT@ if checkout else None)
    if own is None or subprocess.run([*pip, '--no-deps', *own]).returncode:
        fix = ' '.join(['pip install', *own]) if checkout and not wheels else \\
            @FROM_WHEELS@ + f'{pinned} && pip install {pinned}'
        raise SystemExit(f"could not install {pinned}, which comes only from the course's wheels or a clone of "
                         f"backprop-ninja (one of that name on a package index is not this course's): run  {fix}  in "
                         "a terminal, then restart the kernel (Kernel > Restart)")
    needed.insert(0, pinned)  # installed now: pip takes only its requirements from the index
if needed and subprocess.run([*pip, *needed]).returncode:
    raise SystemExit(f"could not install {' '.join(needed)}: run  pip install {' '.join(needed)}  in a terminal, "
                     "then restart the kernel (Kernel > Restart)")
if pinned in needed and 'grader' in sys.modules:
    print(f"installed {pinned} in place of version {', '.join(found)}: restart the kernel "
          "(Kernel > Restart) and run the notebook from the top")
elif pinned in needed and found:
    print(f"installed {pinned} in place of version {', '.join(found)}")"""


def install_cell(solutions: str, wheels: str | None = None) -> str:
    """The notebook's first code cell: installs what it imports where it is missing or another version
    (Colab, a JupyterHub image, an install from an earlier course), and nothing where it is there. The
    package is pinned to the grader that made the notebook, so a student's self-check never runs other
    rules than the grader that will mark it: whichever package provides `grader` (the whole one or the
    student one) must be that version. matplotlib (for the notebook's plots) is installed apart, only
    where missing, so the student package stays a few hundred kB beside torch. Where torch is missing it
    comes first, from PyTorch's CPU index: the package's own requirement would fetch PyPI's torch, a CUDA
    build of several GB on Linux.

    The package itself comes only from the course's wheels (course.yml `wheels`, a folder or a web page of
    links) or from the clone of backprop-ninja the notebook sits in (a self-learner's), never from a package
    index: neither name is this project's on PyPI, and whoever uploads one there would run code in every
    student's kernel (a red team's finding: with `--find-links` beside the index, pip took a platform-tagged
    upload of the same version over the course's own wheel). Its requirements come from the index once it is
    installed. Where it cannot be installed, the cell stops with the one command that can. Where it replaced
    a version this kernel already imported, it says to restart the kernel."""
    package = f"{STUDENT_PACKAGE[solutions]}=={__version__}"
    from_checkout = "['-e', str(checkout)]" if solutions == "gated" else "[str(checkout / 'student')]"
    folder = shlex.quote(wheels) if wheels else "FOLDER-OF-YOUR-COURSES-WHEELS"
    from_wheels = repr(f"pip install --no-index --no-deps --find-links {folder} ")
    filled = {"PACKAGE": package, "VERSION": __version__, "TORCH": repr(TORCH), "CPU_INDEX": repr(CPU_INDEX),
              "WHEELS": repr(wheels), "FROM_CHECKOUT": from_checkout, "FROM_WHEELS": from_wheels}
    return re.sub(r"@([A-Z_]+)@", lambda m: filled[m[1]], INSTALL_CELL)


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
