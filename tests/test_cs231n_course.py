"""Courses of networks as instructors write them, graded as a class would answer them. CS231n's two-layer net
(tests/exercises/cs231n_net.py): the textbook answers get full credit, and no slip hides behind a gain
initialised to ones (the lecture-sized configuration keeps the exercise's own init: a notebook's self-check
draws what the student sees). A residual block around an RMSNorm fused into one cell
(tests/exercises/rms_residual.py): the teacher's closed form, which reads the residual's gradient, gets full
credit, as does the derived answer of the solved notebook. A BPR loss (tests/exercises/bpr.py): the textbook's
answers, which read the gradient a subtraction passes on unchanged, get full credit; and additive attention's
(tests/exercises/additive_attention.py), which reads the gradient a sibling input of the same step got."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import nbformat
import pytest

from grader import course as course_config
from grader.lms import dry_run, notebooks
from helpers.paths import ROOT

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-c", "from grader.cli import main; main()"]
# Each submission: the solved notebook with these answer cells rewritten, the share of its points each grade id must
# get (those not named: full), and words some grade ids' feedback must hold.
CS231N = {
    # `loss = data_loss + reg_loss`: dreg_loss and ddata_loss are identically 1, and CS231n leaves them out.
    "textbook": ({"dW2": "dW2 = h1.T @ dscores + 0.1 * W2\n", "dW1": "dW1 = X.T @ da1 + 0.1 * W1\n",
                  "ex2_dscores": "dscores = F.softmax(scores, 1)\ndscores[range(scores.shape[0]), y] -= 1\n"
                                 "dscores /= scores.shape[0]\n"}, {}),
    # A gradient of no dimensions written as the number it is, as the instructor trial's class wrote it.
    "numbers": ({"ddata_loss": "ddata_loss = 1.0\n", "dreg_loss": "dreg_loss = 1\n"}, {}),
    # The gain forgotten: right wherever gamma is exactly ones, as nn.LayerNorm starts it (hidden
    # configurations give it noise).
    "no-gain": ({"dxhat": "dxhat = dln1\n"}, {"dxhat": 0.0}),
}
RMS_RESIDUAL = {
    "solved": ({}, {}),
    "teacher": ({"ex2_dh0": "dxhat = dhn * g\n"
                            "dh0 = dh1 + rrms * (dxhat - h0 * rrms**2 * (dxhat * h0).mean(1, keepdim=True))\n"}, {}),
    "no-residual": ({"ex2_dh0": "dxhat = dhn * g\n"
                                "dh0 = rrms * (dxhat - h0 * rrms**2 * (dxhat * h0).mean(1, keepdim=True))\n"},
                    {"ex2_dh0": 0.0}),
}
BPR = {
    # The textbook's: x = s_pos - s_neg gives ds_pos = dx and ds_neg = -dx exactly, so these read dx. Graded as
    # skipped steps, each lost half its points (an instructor trial's class would have).
    "textbook": ({"dhu": "dhu = (hp - hn) * dx[:, None]\n", "dhp": "dhp = hu * dx.view(-1, 1)\n",
                  "dhn": "dhn = -hu * dx[:, None]\n", "ds_neg": "ds_neg = -ds_pos\n"}, {}),
    # softplus's step scales: a closed form from the loss skips it, and still gets the chain-only half.
    "closed-form": ({"ds_pos": "ds_pos = -torch.sigmoid(-x) / x.shape[0]\n"}, {"ds_pos": 0.5}),
}
ATTENTION = {
    # proj and query are added before one tanh: they share its gradient, so the textbook reads dproj.
    "textbook": ({"dquery": "dquery = dproj.sum(1)\n"}, {}),
    # A cell further down that reads de where its step's upstream is dproj still skips tanh's derivative.
    "skipped": ({"dWk": "dWk = (keys.transpose(1, 2) @ ((1 - e ** 2) * de)).sum(0)\n"}, {"dWk": 0.5}),
    # dalpha kept a dimension of 1 and dscores squeezed it out: it raises on the right dalpha, told why.
    "fitted": ({"dalpha": "dalpha = (dctx[:, None, :] * keys).sum(-1, keepdim=True)\n",
                "dscores": "a = dalpha.squeeze(2)\ndscores = alpha * (a - (alpha * a).sum(1, keepdim=True))\n"},
               {"dalpha": 0.5, "dscores": 0.0}, {"dscores": "a cell fitted to your dalpha fails on it"}),
}
COURSES = {"cs231n": ("cs231n_net.py", CS231N), "rms-residual": ("rms_residual.py", RMS_RESIDUAL),
           "bpr": ("bpr.py", BPR), "attention": ("additive_attention.py", ATTENTION)}


def _run(args: list[str], cwd) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=dict(os.environ), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("exercise", COURSES)
def test_a_class_is_graded_as_its_teachers_answers_deserve(tmp_path, exercise):
    file, submissions = COURSES[exercise]
    target = tmp_path / "course"
    _run([*CLI, "course", "init", str(target), "--exercise", str(ROOT / "tests" / "exercises" / file)], tmp_path)
    course = course_config.load(target / "course.yml")
    solved = nbformat.read(target / "source" / course.assignment / course.notebook, as_version=4)
    tries = tmp_path / "tries"
    tries.mkdir()
    for stem, (cells, *_) in submissions.items():
        nb = nbformat.from_dict(json.loads(json.dumps(solved)))
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in cells:
                cell.source = cells[grade_id]
        nbformat.write(notebooks.release(nb) if stem == "stub" else nb, tries / f"{stem}.ipynb")
    _run([*CLI, "grade", str(tries), "--out", str(tmp_path / "results"), "--course", str(target / "course.yml")],
         target)
    for stem, (_, expected, *said) in submissions.items():
        result = json.loads((tmp_path / "results" / f"{stem}.json").read_text())
        got = {t["name"]: (t["score"], t["output"]) for t in result["tests"]}
        for name, (score, output) in got.items():
            assert score == expected.get(name, 1.0) * course.points[name], (stem, name, output)
        for name, words in (said[0] if said else {}).items():
            assert words in got[name][1], (stem, name, got[name][1])


def test_a_block_fused_from_an_intermediate_is_given_its_upstream_in_the_notebook(tmp_path):
    """The block starts at dhn and h0's other use (the residual) gives dh1: the notebook sets both from autograd
    in a read-only cell above the answer, as its text and the self-check say. An instructor trial's notebook
    said "dh1 is given too" with no cell giving it: Run All stopped on a name exercise 1 never bound (this
    exercise has no exercise 1), though the grader gave the cell full marks."""
    target = tmp_path / "course"
    _run([*CLI, "course", "init", str(target), "--exercise", str(ROOT / "tests" / "exercises" / "rms_residual.py")],
         tmp_path)
    course = course_config.load(target / "course.yml")
    folder = target / "source" / course.assignment
    stub = notebooks.release(nbformat.read(folder / course.notebook, as_version=4))
    (answer,) = [c for c in stub.cells if c.id == "ex2_dh0"]
    answer.source = RMS_RESIDUAL["teacher"][0]["ex2_dh0"]
    path = tmp_path / course.notebook
    nbformat.write(stub, path)
    ran = dry_run.ran_or_why(path, folder)
    assert not isinstance(ran, str), ran
    errors = [(c.id, o.get("evalue")) for c in ran.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    (check,) = [c for c in ran.cells if c.id == "check_ex2_dh0"]
    (line,) = "".join(o.get("text", "") for o in check.outputs).splitlines()
    assert line.startswith("ex2_dh0") and "approximate: True" in line and "WRONG" not in line, line
