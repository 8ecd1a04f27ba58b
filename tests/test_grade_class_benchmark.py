"""benchmarks/grade_class.py runs end to end on a tiny class (its numbers are in benchmarks/README.md)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from helpers.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "grade_class.py"
NUMBER = r"\d+\.\d+"


@pytest.mark.slow
def test_grade_class_prints_every_figure(tmp_path):
    # From another folder, with a work folder of its own: three submissions for this grader, one for nbgrader.
    work = tmp_path / "work"
    run = subprocess.run([sys.executable, str(SCRIPT), "--n", "3", "--nbgrader-n", "1", "--workdir", str(work),
                          "--memory", "1,2"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-4000:]
    out = run.stdout
    assert re.search(r"^class: 3 submissions .*: 1 correct, 1 with mistakes, 1 partly done$", out, re.M), out
    assert re.search(r"^\(a\) this grader, 3 submissions", out, re.M), out
    for jobs in (1, 2):
        assert re.search(rf"^  jobs={jobs}: {NUMBER} s/submission, {NUMBER} submissions/s; wall {NUMBER} s, first "
                         rf"result after {NUMBER} s; peak RSS \d+ MB \(process tree\), \d+ MB \(largest process\)$",
                         out, re.M), out
    assert re.search(r"^  isolation of one result: process: .*; network: .*; filesystem: .*; limits: .*$", out, re.M)
    assert re.search(r"^  isolation: (all on|NOT all on: .+)$", out, re.M), out
    assert re.search(r"^  jobs=1, 2(, \d+)?: scores identical: yes$", out, re.M), out
    assert re.search(r"^\(b\) nbgrader \S+ autograde, stock .*first 1 submission, one command", out, re.M), out
    assert re.search(rf"^  {NUMBER} s/submission, {NUMBER} submissions/s; wall {NUMBER} s .*peak RSS \d+ MB "
                     rf"\(process tree\), \d+ MB \(largest process\); exit 0, 0 not graded$", out, re.M), out
    assert re.search(rf"^ratio \(b\) / \(a, jobs=2\): {NUMBER}x seconds per submission", out, re.M), out
    # The one submission both graded is correct: full marks from both.
    assert re.search(r"^  correct +1 +100\.0 +1 +100\.0 +100\.0$", out, re.M), out
    assert re.search(rf"^memory, peak RSS of the process tree \(largest process\): 1 submissions \d+ MB \(\d+ MB\), "
                     rf"2 submissions \d+ MB \(\d+ MB\): 2x the submissions, {NUMBER}x the memory; 2 took {NUMBER} s, "
                     rf"{NUMBER} s/submission$", out, re.M), out
    assert not work.exists(), "the work folder is removed without --keep"
