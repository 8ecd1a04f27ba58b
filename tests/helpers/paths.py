"""The checkout's course, as every test finds it: the repository's top level, its course.yml (loaded
once: tests that need another course write their own), the released stub and the solved notebook."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from grader.course import load

ROOT = Path(__file__).resolve().parents[2]
COURSE_FILE = ROOT / "course.yml"
COURSE = load(COURSE_FILE)
STUB = ROOT / "assignments" / COURSE.assignment / COURSE.notebook
SOLVED = ROOT / "solutions" / "backprop_ninja_solved.ipynb"


def outside_tmp(request: pytest.FixtureRequest, prefix: str) -> Path:
    """A fresh world-traversable folder where a course keeps its files: not under /tmp or a home folder,
    which the sandboxed child never sees (so a test of what it may read there would prove nothing), and
    removed after the test. Skips the test where there is none to write in."""
    where = next((d for d in ("/srv", "/mnt", "/opt") if os.access(d, os.W_OK | os.X_OK)), None)
    if where is None:
        pytest.skip("no folder outside /tmp and home to write in")
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    request.addfinalizer(lambda: shutil.rmtree(folder))
    folder.chmod(0o755)
    return folder
