"""A cell that stops its sandboxed child (a C-level operation past its time limit, which no in-child timer
interrupts, or a crash) costs that cell alone, through `backprop-ninja grade`: the cell scores 0 with
feedback that says why in fixed words, every other answer keeps its credit, and a submission whose every
cell hangs costs its whole-submission time limit once, not once per cell.

The crashes need calls the static check refuses, so they are graded through the red team's floor
(tests/helpers/nostatic.py), as a cell that found a hole in the check would be.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from grader.cli import main
from grader.exercises.makemore_mlp import EXERCISE
from helpers import nostatic
from helpers.notebooks import submission, write
from helpers.paths import COURSE_FILE, ROOT

pytestmark = pytest.mark.slow  # matrix products that run past their limit, several times over

LIMITS = {"timeout_seconds": 40, "cell_timeout_seconds": 1, "memory_mb": 2048, "file_size_mb": 16, "processes": 32}
GRACE = 5  # grader.sandbox.parent.GRACE_SECONDS: how long past its limit the parent waits for a cell
# One matrix product, in C from start to end: the cell's timer fires only when it returns (minutes later).
SLOW = "dbnvar = (torch.ones(8000, 8000) @ torch.ones(8000, 8000)).sum()\n"
MIDDLE, LAST = "dbnvar", "dC"
EXIT_STATUS = 173  # a number a cell could choose to spell a hidden size: it must reach no feedback


def _course(folder: Path) -> Path:
    raw = dict(yaml.safe_load(COURSE_FILE.read_text()), limits=LIMITS, autotests=str(ROOT / "autotests"))
    path = folder / "course.yml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _slow(grade_id: str) -> str:
    return SLOW.replace("dbnvar", grade_id)


def _graded(out: Path, name: str) -> dict:
    return json.loads((out / f"{name}/backprop_ninja.json").read_text(encoding="utf-8"))


def _tests(result: dict) -> dict[str, dict]:
    return {t["name"]: t for t in result["tests"]}


def _only_these_lost(result: dict, lost: set[str]) -> None:
    tests = _tests(result)
    assert {name for name, t in tests.items() if t["score"] < t["max_score"]} == lost, \
        {name: t["output"][:200] for name, t in tests.items() if t["score"] < t["max_score"]}
    assert result.get("output", "").find("Not graded") < 0 and not any(f["kind"] == "sandbox" for f in result["flags"])


@pytest.fixture(scope="module")
def slow_batch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stopped")
    course = _course(folder)
    subs = folder / "submitted"
    write(subs / "middle" / "backprop_ninja.ipynb", submission(replace={MIDDLE: _slow(MIDDLE)}))
    write(subs / "middle-and-last" / "backprop_ninja.ipynb",
          submission(replace={MIDDLE: _slow(MIDDLE), LAST: _slow(LAST)}))
    write(subs / "every-cell" / "backprop_ninja.ipynb",
          submission(replace={cell: _slow(cell) for cell in EXERCISE.answer_cells}))
    out = folder / "results"
    started = time.monotonic()
    done = CliRunner().invoke(main, ["grade", str(subs), "--out", str(out), "--course", str(course), "--jobs", "2"])
    return done, out, time.monotonic() - started


def test_a_slow_cell_in_the_middle_costs_that_cell_alone(slow_batch):
    done, out, _ = slow_batch
    assert done.exit_code == 0, done.output
    result = _graded(out, "middle")
    _only_these_lost(result, {MIDDLE})
    assert "ran past its time limit" in _tests(result)[MIDDLE]["output"]
    assert {f["kind"] for f in result["flags"]} == {"timeout"}


def test_a_slow_last_cell_costs_that_cell_alone_too(slow_batch):
    done, out, _ = slow_batch
    result = _graded(out, "middle-and-last")
    _only_these_lost(result, {MIDDLE, LAST})
    assert all("ran past its time limit" in _tests(result)[g]["output"] for g in (MIDDLE, LAST))


def test_cells_that_all_hang_cost_the_submission_time_limit_once(slow_batch):
    """Some thirty cells that each hang would cost thirty limits and graces; the submission's own limit
    stops them all, and the result says so."""
    done, out, seconds = slow_batch
    result = _graded(out, "every-cell")
    assert result["score"] == 0
    assert result["execution_time"] <= LIMITS["timeout_seconds"] + GRACE, result["execution_time"]
    assert f"time limit of {LIMITS['timeout_seconds']} s for a whole submission" in result["output"]
    # The three submissions ran two at a time: the batch took about one submission's limit more than that.
    assert seconds < 2 * LIMITS["timeout_seconds"] + 30, seconds


CRASHES = {
    "dlogprobs": f"import os\nos._exit({EXIT_STATUS})\n",
    MIDDLE: "import ctypes\nctypes.string_at(0)\n",  # a segmentation fault
    # Junk written over the protocol (the child lives on; pid 1 of its namespace ignores its own SIGKILL).
    LAST: "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'\\xff' * 64)\n"
          "    except OSError:\n        pass\n",
}


@pytest.fixture(scope="module")
def crash_batch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("crashed")
    course = _course(folder)
    subs = folder / "submitted"
    write(subs / "crashes" / "backprop_ninja.ipynb", submission(replace=CRASHES))
    out = folder / "results"
    done = subprocess.run([sys.executable, nostatic.__file__, "--", "grade", str(subs), "--out", str(out),
                           "--course", str(course), "--html"], capture_output=True, text=True, timeout=600)
    return done, out


def test_a_crashing_cell_costs_that_cell_alone_and_says_how_in_fixed_words(crash_batch):
    done, out = crash_batch
    assert done.returncode == 0, done.stderr[-3000:]
    result = _graded(out, "crashes")
    _only_these_lost(result, set(CRASHES))
    tests = _tests(result)
    words = {"dlogprobs": "it ended the process", MIDDLE: "it crashed",
             LAST: "it broke the grading process's connection"}
    for grade_id, said in words.items():
        assert "stopped the grading process" in tests[grade_id]["output"] and said in tests[grade_id]["output"]
    assert "crashed" in {f["kind"] for f in result["flags"]}
    page = (out / "crashes" / "backprop_ninja.html").read_text(encoding="utf-8")
    for text in (json.dumps(result), page, done.stdout, done.stderr):
        # (a number among letters is no number: a sha256 in hex may hold these digits; nor is the test's own
        # folder, which pytest numbers, /tmp/pytest-of-root/pytest-173/...)
        text = text.replace(str(out.parent), "")
        assert not re.search(rf"(?<![\w.]){EXIT_STATUS}(?![\w.])", text)
