"""Every exercise the package ships passes `backprop-ninja exercise check --quick`, run as an instructor runs
it: its course built, its solved notebook, stub and every slip of the rule table graded by `grade` and the
Gradescope zip, and every notebook's Run All in a kernel saying what `grade` gave.

The whole family (the lecture, 23 variants, the gallery: 27 exercises of 60-110 s of a worker each) is far more
than the 25 minutes a change's CI may take, and each one more than the tests it replaced, so each run checks one
in turn: the commit's place in the history picks it, so 27 consecutive changes walk the whole family and
rerunning a commit checks the same one. Every run grades each variant's slips and runs the covering set's
notebooks (tests/test_variant_courses.py); `.ci/nightly` checks all 27 every night, nbgrader's route included."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from grader.exercises.makemore_mlp import variants

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
LECTURE = "makemore-mlp"
SHIPPED = (LECTURE, *(f"{LECTURE}/{name}" for name in variants.NAMES if name != variants.LECTURE_VARIANT),
           *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "grader/exercises/gallery").glob("[a-z]*.py")))


def _position() -> int:
    """How many commits lead to this one; in a shallow clone, which knows one commit, its hash read as a number
    (still the same on a rerun, and each exercise's turn comes round, if not within 27); 0 outside a checkout."""
    def git(*args: str) -> str:
        run = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        return run.stdout.strip() if run.returncode == 0 else ""

    try:
        if git("rev-parse", "--is-shallow-repository") == "true":
            return int(git("rev-parse", "HEAD") or "0", 16)
        return int(git("rev-list", "--count", "HEAD") or "0")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


def in_turn(position: int) -> str:
    return SHIPPED[position % len(SHIPPED)]


def test_consecutive_changes_walk_the_whole_family():
    assert len(SHIPPED) == 27 and all(Path(ROOT, s).is_file() for s in SHIPPED if s.endswith(".py"))
    assert {in_turn(position) for position in range(100, 127)} == set(SHIPPED)


@pytest.mark.parametrize("spec", [in_turn(_position())])
def test_a_shipped_exercise_passes_exercise_check(spec, tmp_path):
    run = subprocess.run([sys.executable, "-c", "from grader.cli import main; main()", "exercise", "check",
                          "--quick", spec], cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    problems = "\n".join(line for line in run.stderr.splitlines() if not line.startswith(("grading ", "running ")))
    assert run.returncode == 0, problems[-4000:]
    agreed = re.search(r"agrees with .* on (\d+) of (\d+) answers", run.stdout)
    assert agreed and agreed[1] == agreed[2] != "0", run.stdout[-2000:]
