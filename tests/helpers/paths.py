"""The checkout's course, as every test finds it: the repository's top level, its course.yml (loaded
once: tests that need another course write their own), the released stub and the solved notebook."""
from __future__ import annotations

from pathlib import Path

from grader.course import load

ROOT = Path(__file__).resolve().parents[2]
COURSE_FILE = ROOT / "course.yml"
COURSE = load(COURSE_FILE)
STUB = ROOT / "assignments" / COURSE.assignment / COURSE.notebook
SOLVED = ROOT / "solutions" / "backprop_ninja_solved.ipynb"
