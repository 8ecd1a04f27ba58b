"""The notebook's self-check gives the grader's verdicts: every wrong cell of the corpora prints WRONG
(or "wrong shape") with the name the grader gives it, every correct alternative passes, and a cell
that is right with a wrong upstream answer says which upstream answer is wrong instead of failing.

The notebook here is its state after the forward and loss.backward() cells (autograd's gradients
retained, as the notebook's setup cell does) and IPython's `In`, the history the self-check reads the
cells' code from; the answer cells run in that namespace as Run All would run them. A slow test runs
the real notebook in a kernel and grades the same notebook, for the disagreements the issue found.
"""
from __future__ import annotations

import collections
import os
import re
import shutil
import warnings
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
import torch
import torch.nn.functional as F
import yaml

from grader.exercises.makemore_mlp import EXERCISE
from grader.lms import notebooks
from grader.pipeline.batch import grade
from grader.student.check import SelfCheck
from grader.vocabulary import Flag, Verdict
from helpers.paths import COURSE, ROOT, STUB
from solutions import make_notebooks, reference
from solutions.reference import forward


def said(line: str) -> tuple[Verdict, str | None]:
    """What a check line says the grader gives, as (verdict, flag): the README's rule (WRONG exactly where
    a point is lost), the share a WRONG line names ("half its points", "0.25 of its points"; none named:
    nothing), and the static check's refusal, which the grader flags."""
    flag = Flag.STATIC_CHECK.value if "the grader refuses" in line else None
    if "not attempted yet" in line:
        return Verdict.NOT_ATTEMPTED, flag
    if "WRONG" not in line:
        return Verdict.CORRECT, flag
    share = re.search(r"the grader gives (nothing|half its points|[0-9.]+ of its points)", line)
    return (Verdict.PARTIAL if share and share.group(1) != "nothing" else Verdict.INCORRECT), flag


LECTURE = EXERCISE.lecture

EX4 = EXERCISE.functions[0]

CORPUS = Path(__file__).with_name("corpus")
UNSEEN = yaml.safe_load((CORPUS / "unseen_mistakes.yml").read_text())
WRONG = yaml.safe_load((CORPUS / "wrong_answers.yml").read_text())
ALTERNATIVES = yaml.safe_load((CORPUS / "correct_alternatives.yml").read_text())
CELLS = reference.cells()
ORDER = (*EXERCISE.atomic, "ex2_dlogits", "ex3_dhprebn")


@pytest.fixture(scope="module")
def state():
    """The notebook's globals after its setup, forward and backward cells."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(2147483647)
    params = {k: v.requires_grad_() for k, v in EXERCISE.init(LECTURE, g).items()}
    Xb = torch.randint(0, LECTURE.vocab, (LECTURE.n, LECTURE.block_size), generator=g)
    Yb = torch.randint(0, LECTURE.vocab, (LECTURE.n,), generator=g)
    values = forward(params, Xb, Yb)
    for v in values.values():
        if v.requires_grad and not v.is_leaf:
            v.retain_grad()
    values["loss"].backward()
    # The notebook's other globals, which an answer cell can read there but not in the grader.
    sizes = {"vocab_size": LECTURE.vocab, "block_size": LECTURE.block_size, "n_embd": LECTURE.n_embd,
             "n_hidden": LECTURE.n_hidden, "batch_size": LECTURE.n}
    return {**values, **sizes, "n": LECTURE.n, "torch": torch, "F": F}


class Notebook:
    """Run All in the notebook's namespace: each answer cell is executed and recorded in `In`."""

    def __init__(self, state):
        self.ns = {**state, "In": [""]}
        self.ns["check"] = SelfCheck(n=state["n"], namespace=self.ns, course=notebooks.public_settings(COURSE))

    def execute(self, source: str):
        self.ns["In"].append(source)
        try:
            exec(source, self.ns)
        except Exception:  # the notebook shows the error; the check cell still runs
            pass

    def check(self, grade_id: str, capfd) -> str:
        a = EXERCISE.by_grade_id[grade_id]
        label = a.variable if a.part == 1 else grade_id
        self.ns["In"].append(f'check("{label}", {a.variable}, {a.source})')
        capfd.readouterr()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.ns["check"](label, self.ns.get(a.variable), self.ns[a.source])
        out, err = capfd.readouterr()
        assert err == "" and out.count("\n") == 1, (out, err)
        return out.strip()

    def run_to(self, grade_id: str, cells: dict[str, str], capfd) -> str:
        """Every answer cell up to `grade_id` (reference unless replaced), then its check's line."""
        for g in ORDER:
            if g == "ex3_dhprebn":
                self.execute("dhpreact = hpreact.grad.clone()")  # the notebook's exercise-3 setup cell
            self.execute(cells.get(g, CELLS[g]))
            if g == grade_id:
                return self.check(g, capfd)
        raise AssertionError(grade_id)


def failed(line: str) -> bool:
    """The README's rule: a line with WRONG loses points there, a line without it loses none."""
    return "WRONG" in line


def cells_of(entry: dict) -> dict[str, str]:
    return {**entry.get("with", {}), entry["grade_id"]: entry["code"]}


@pytest.mark.parametrize("entry", UNSEEN, ids=[f"{e['grade_id']}-{i}" for i, e in enumerate(UNSEEN)])
def test_an_unseen_mistake_fails_the_self_check_with_its_name(state, capfd, entry):
    line = Notebook(state).run_to(entry["grade_id"], cells_of(entry), capfd)
    assert failed(line), line
    if entry.get("names"):  # a wording, or a list of wordings of the same mistake
        names = [entry["names"]] if isinstance(entry["names"], str) else entry["names"]
        assert any(n.lower() in line.lower() for n in names), line


CELL_WRONG = [e for e in WRONG if e["grade_id"] in ORDER]


@pytest.mark.parametrize("entry", CELL_WRONG, ids=[f"{e['grade_id']}-{i}" for i, e in enumerate(CELL_WRONG)])
def test_every_wrong_answer_of_the_corpus_fails_the_self_check(state, capfd, entry):
    """The grader docks each of these (tests/test_corpus.py): the notebook says WRONG too."""
    line = Notebook(state).run_to(entry["grade_id"], cells_of(entry), capfd)
    assert failed(line), line


CELL_ALTERNATIVES = [e for e in ALTERNATIVES if e["grade_id"] in ORDER]


@pytest.mark.parametrize("entry", CELL_ALTERNATIVES,
                         ids=[f"{e['grade_id']}-{i}" for i, e in enumerate(CELL_ALTERNATIVES)])
def test_a_correct_alternative_passes_the_self_check(state, capfd, entry):
    line = Notebook(state).run_to(entry["grade_id"], cells_of(entry), capfd)
    assert not failed(line) and "approximate: True" in line, line



# A slice or a loop cut at a lecture size, as the twenty-second student trial wrote them: right on a smaller batch,
# wrong on a larger one, where a line blamed batch norm's eps (the one larger batch had a tiny activation variance).
CUT_SHORT = [("db2", "db2 = dlogits[:32].sum(0)", "32 (n)"),
             ("dembcat", "dembcat = (dhprebn @ W1.T)[:32]", "32 (n)"),
             ("dlogit_maxes", "dlogit_maxes = (-dnorm_logits[:32]).sum(1, keepdim=True)", "32 (n)"),
             ("db1", "db1 = dhprebn[:, :64].sum(0)", "64 (n_hidden)"),
             ("db2", "db2 = dlogits.sum(0)[:27]", "27 (vocab_size)"),
             ("dbnbias", "dbnbias = dhpreact.sum(0, keepdim=True)[:, :64]", "64 (n_hidden)"),
             # inside a product: the larger batch's error is no missing transpose (the twenty-third trial's)
             ("dW2", "dW2 = h.T @ dlogits[:32]", "32 (n)")]


@pytest.mark.parametrize(("grade_id", "code", "size"), CUT_SHORT, ids=[c for _, c, _ in CUT_SHORT])
def test_a_slice_cut_at_a_lecture_size_is_named_as_one(state, capfd, grade_id, code, size):
    line = Notebook(state).run_to(grade_id, {grade_id: code}, capfd)
    assert failed(line) and f"your cell writes {size} as a number, which cuts a larger one short" in line, line
    assert line.count("your cell writes") == 1, line
    assert "eps" not in line and "right on" not in line and "transpose" not in line, line



def test_a_size_one_off_written_as_a_number_is_named(state, capfd):
    """The twenty-third trial's `1.0 / 31` (n - 1): "right for the notebook's sizes" named no number, as it names 32."""
    code = "dbndiff2 = (1.0 / 31) * torch.ones_like(bndiff2) * dbnvar"
    line = Notebook(state).run_to("dbndiff2", {"dbndiff2": code}, capfd)
    assert failed(line) and "your cell writes 31 (n - 1) as a number" in line, line


def test_a_right_cell_below_a_wrong_upstream_answer_says_which(state, capfd):
    nb = Notebook(state)
    line = nb.run_to("dcounts_sum_inv", {"dprobs": "dprobs = probs * dlogprobs"}, capfd)
    assert line.startswith("dcounts_sum_inv|") and not failed(line), line
    assert "dprobs above is wrong; with the true dprobs this cell is right" in line


def test_the_cells_above_a_check_run_once_for_every_check_below_until_one_changes(state, capfd, monkeypatch):
    """A student trial: one answer cell of 4 s made every check below it take 40-60 s, silent, each running that
    cell again for every case and check. Now each earlier cell runs once per case and check for all the checks
    below it; a cell changed since runs again, and what it assigns reaches the cells below (names carry over)."""
    from grader.student import selfcheck

    runs: collections.Counter = collections.Counter()
    run_cell = selfcheck.SelfCheck._run_cell

    def counted(self, answer, *args):
        runs[answer.grade_id] += 1
        return run_cell(self, answer, *args)

    monkeypatch.setattr(selfcheck.SelfCheck, "_run_cell", counted)
    nb = Notebook(state)
    first, *below = EXERCISE.atomic[:8]
    nb.execute(CELLS[first] + "half = 0.5\n")  # a name of its own, which the cells below may read
    assert not failed(nb.check(first, capfd))
    ran = []  # how often the first cell had run, after each check below it
    for grade_id in below:
        nb.execute(CELLS[grade_id].replace("dprobs = 1 /", "dprobs = 2 * half /"))
        line = nb.check(grade_id, capfd)
        assert not failed(line), line
        ran.append(runs[first])
    assert len(set(ran)) == 1, ran  # by the first check below it, once per case and check; never again
    nb.execute(CELLS[first] + "half = 1.0\n")  # changed: run again, and dprobs's check sees its new `half`
    line = nb.check("dprobs", capfd)
    assert runs[first] > ran[-1] and failed(line), (runs[first], ran, line)


def test_a_wrong_cell_below_a_wrong_upstream_answer_is_still_wrong(state, capfd):
    nb = Notebook(state)
    line = nb.run_to("dcounts_sum_inv", {"dprobs": "dprobs = probs * dlogprobs",
                                         "dcounts_sum_inv": "dcounts_sum_inv = (probs * dprobs).sum(1, keepdim=True)"},
                     capfd)
    assert "WRONG" in line and "uses probs where the derivative through probs needs counts" in line, line


def test_a_cell_right_only_on_the_true_chain_below_a_wrong_upstream_says_the_graders_half(state, capfd):
    """dprobs read from dlogprobs only where it is nonzero: right with the true dlogprobs, not as one backward
    step (the grader's half); below a wrong dlogprobs the line said WRONG with no share, a 0 where the
    grader gives half (exercise check's self-check route found it)."""

    line = Notebook(state).run_to("dprobs", {
        "dlogprobs": "dlogprobs = torch.full_like(logprobs, -1.0 / n)",
        "dprobs": "dprobs = torch.where(dlogprobs != 0, -1.0 / n, 0.0) / probs"}, capfd)
    assert "dlogprobs above is wrong; with the true dlogprobs its value is right" in line, line
    assert said(line) == (Verdict.PARTIAL, None) and "the grader gives half its points" in line, line


def test_the_course_allowlist_reaches_the_self_check(state, capfd):
    """torch.chain_matmul is refused by default, as the grader refuses it; a course that allows it passes it."""
    code = "dh = torch.chain_matmul(dlogits, W2.T)"
    line = Notebook(state).run_to("dh", {"dh": code}, capfd)
    assert "WRONG" in line and "torch.chain_matmul is not tensor math this exercise allows" in line, line
    nb = Notebook(state)
    settings = notebooks.public_settings(COURSE)
    nb.ns["check"] = SelfCheck(n=state["n"], namespace=nb.ns,
                               course={**settings, "allow": {**settings["allow"], "torch": ["chain_matmul"]}})
    line = nb.run_to("dh", {"dh": code}, capfd)
    assert not failed(line), line


def test_feedback_hints_none_names_nothing(state, capfd):
    nb = Notebook(state)
    nb.ns["check"] = SelfCheck(n=state["n"], namespace=nb.ns, course={"hints": "none"})
    line = nb.run_to("dhpreact", {"dhpreact": "dhpreact = (1.0 - hpreact**2) * dh"}, capfd)
    assert "WRONG" in line and "hpreact where" not in line and "hint" not in line, line


def test_the_lectures_shape_slip_says_wrong_as_it_loses_points(state, capfd):
    """dbnmeani of shape (H,), the lecture's own: the grader gives squeezable_shape_credit (half)."""
    line = Notebook(state).run_to("dbnmeani", {"dbnmeani": "dbnmeani = (-dbndiff).sum(0)"}, capfd)
    assert "WRONG" in line and "right values, wrong shape" in line, line


# Right values in a squeezable shape on the true chain: the grader's half credit only where the check of
# the one backward step finds nothing but the shape wrong either (a zero is right on the chain alone).
SHAPE_SLIPS = {"dlogit_maxes = (-dnorm_logits).sum(1)": Verdict.PARTIAL,
               "dlogit_maxes = torch.zeros(n, dtype=torch.float64)": Verdict.INCORRECT}


@pytest.mark.parametrize("code", SHAPE_SLIPS)
def test_a_shape_slip_gets_half_credit_only_where_the_backward_step_is_right(state, capfd, code):

    line = Notebook(state).run_to("dlogit_maxes", {"dlogit_maxes": code}, capfd)
    assert said(line) == (SHAPE_SLIPS[code], None), line


@pytest.mark.slow
def test_the_grader_gives_the_shape_slips_what_the_self_check_says(tmp_path):
    solved = nbformat.read(ROOT / make_notebooks.SOLVED, as_version=4)
    folder = tmp_path / "submissions"
    folder.mkdir()
    for index, code in enumerate(SHAPE_SLIPS):
        nbformat.write(_with_answers(solved, {"dlogit_maxes": code}), folder / f"slip-{index}.ipynb")
    graded = {s.id: r for s, r in grade([folder], COURSE, tmp_path / "results", jobs=1)}
    for index, verdict in enumerate(SHAPE_SLIPS.values()):
        assert {t.name: t.verdict for t in graded[f"slip-{index}"].tests}["dlogit_maxes"] == verdict


def test_a_course_that_gives_a_shape_slip_full_credit_accepts_it(state, capfd):
    nb = Notebook(state)
    settings = notebooks.public_settings(COURSE)
    nb.ns["check"] = SelfCheck(n=state["n"], namespace=nb.ns,
                               course={**settings, "policy": {"squeezable_shape_credit": 1.0}})
    line = nb.run_to("dbnmeani", {"dbnmeani": "dbnmeani = (-dbndiff).sum(0)"}, capfd)
    assert not failed(line) and "right values, wrong shape" in line, line


# Exercise 4's manual_backward, each slip the issue found: the grader takes every training point.
EX4_SLIPS = {
    "keepdim-dropped": ("    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)\n",
                        "    dbngain = (bnraw * dhpreact).sum(0)\n"),
    "n-hard-coded": ("    n = Xb.shape[0]\n", "    n = 32\n"),
    "db1-raises-in-training": ("    db1 = dhprebn.sum(0)\n", "    db1 = dhprebn.sum(0, keepdim=True).T\n"),
    # right on any batch of 32 rows or fewer: the grader trained on its first configuration's (11), the self-check on
    # its own three (one of 37), and only the self-check's training line said WRONG (the twenty-third trial's)
    "db2-cut-at-32": ("    db2 = dlogits.sum(0)\n", "    db2 = dlogits[:32].sum(0)\n"),
}


def _ex4(slip: str | None) -> str:
    if slip is None:
        return CELLS[EX4.cell]
    old, new = EX4_SLIPS[slip]
    assert old in CELLS[EX4.cell]
    return CELLS[EX4.cell].replace(old, new)


def _training_line(state, capfd, source: str) -> str:
    nb = Notebook(state)
    nb.execute(source)
    g = torch.Generator().manual_seed(7)
    params = EXERCISE.init(LECTURE, g)
    batches = [(torch.randint(0, LECTURE.vocab, (LECTURE.n, LECTURE.block_size), generator=g),
                torch.randint(0, LECTURE.vocab, (LECTURE.n,), generator=g)) for _ in range(50)]
    check = SelfCheck(n=state["n"], exercise=4, namespace=nb.ns, course=notebooks.public_settings(COURSE))
    capfd.readouterr()
    check.training(nb.ns["manual_backward"], params, batches, lr=0.1)  # never raises
    out, err = capfd.readouterr()
    assert err == "" and out.count("\n") == 1, (out, err)
    return out.strip()


def test_exercise_4s_training_check_passes_the_reference(state, capfd):
    line = _training_line(state, capfd, _ex4(None))
    assert "50 steps match autograd" in line and not failed(line), line


@pytest.mark.parametrize("slip", EX4_SLIPS)
def test_exercise_4s_training_check_says_wrong_where_the_grader_docks_and_never_raises(state, capfd, slip):
    line = _training_line(state, capfd, _ex4(slip))
    assert line.startswith("training") and failed(line) and "match autograd" not in line, line


def test_a_training_run_off_by_a_size_says_the_factor_on_its_own_batches(state, capfd):
    """The eighth student trial: `n = 32` written in manual_backward and the mean's 1/n left out. Its own
    lines stop on the self-check's batches (an IndexError there), so "their lines above say how" pointed
    nowhere; on the run's own batches the gradients are n times autograd's, which is said."""
    source = _ex4("n-hard-coded").replace(
        "    dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, num_classes=logits.shape[1])) / n\n",
        "    dlogits = F.softmax(logits, 1) - F.one_hot(Yb, num_classes=logits.shape[1])\n")
    assert source != _ex4("n-hard-coded")
    line = _training_line(state, capfd, source)
    assert failed(line) and f"times autograd's: n is {LECTURE.n}" in line and "lines above say how" not in line, line


# --- the real notebook and the real grader, on the disagreements the issue found ----------------------

# Wrong answer cells that the old self-check passed and the grader docked: both now fail them.
WRONG_BUT_PASSED = {
    "dlogits": "dlogits = dnorm_logits.clone()",  # forgets the max branch
    "dlogit_maxes": "dlogit_maxes = dnorm_logits.sum(1, keepdim=True)",  # sign flipped
    "ex2_dlogits": "dlogits = dlogits",  # exercise 1's answer
    "demb": "demb = dembcat.view(32, 3, 10)",
    # manual_backward reading the notebook's global n: the reference without its own n
    EX4.cell: CELLS[EX4.cell].replace("    n = Xb.shape[0]\n", ""),
}
# Right answer cells that the old self-check passed and the grader's static check refused: the default
# allowlist now holds F.linear, torch.addcmul and torch.ger, so both pass them.
RIGHT_BUT_REFUSED = {
    "dh": "dh = F.linear(dlogits, W2)",
    "dcounts": "dcounts = torch.addcmul(torch.ones_like(counts) * dcounts_sum, counts_sum_inv, dprobs)",
    "dW1": "dW1 = sum(torch.ger(embcat[i], dhprebn[i]) for i in range(n))",
}
# Slices hard-coded to a lecture size, right wherever the drawn size is on the other side of it: the self-check's
# batches all had n <= 32 and passed the first, the grader's all had n_hidden <= 64 and passed the second. Every
# size is now drawn on both sides of the lecture's, by both.
HARD_CODED_SLICES = {"db2": "db2 = dlogits[:32].sum(0)", "db1": "db1 = dhprebn[:, :64].sum(0)"}
DISAGREEMENTS = {**WRONG_BUT_PASSED, **RIGHT_BUT_REFUSED, **HARD_CODED_SLICES}


def _with_answers(nb, replace: dict[str, str]):
    """The solved notebook with some answer cells' solutions replaced."""
    nb = nbformat.from_dict(nb)
    for c in nb.cells:
        grade_id = c.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in replace:
            c.source = replace[grade_id]
    return nb


# Each notebook Run All runs, then the grader grades: the disagreements above with the lecture's shape slip,
# and each of exercise 4's slips (one manual_backward per notebook).
NOTEBOOKS = {"cells": {**DISAGREEMENTS, "dbnmeani": "dbnmeani = (-dbndiff).sum(0)"},
             # `n = 32` is a size the cell writes as db2's `[:32]` is, which the grader once trained past: that one
             # runs here (a Run All and a grade each), `n = 32` in the kernel sessions' exercise 4
             **{f"ex4-{slip}": {EX4.cell: _ex4(slip)} for slip in EX4_SLIPS if slip != "n-hard-coded"},
             # An outside trial's right cells in a block, each reading its answer after binding it: the check took
             # dlogprobs's for the cell of the step that reads dlogprobs, "not run yet" where the grader gave full
             "blocks": {"dlogprobs": "with torch.no_grad():\n    dlogprobs = torch.zeros_like(logprobs)\n"
                                     "    dlogprobs[range(n), Yb] = -1 / n\n",
                        "dC": "if True:\n    dC = torch.zeros_like(C)\n    for k in range(Xb.shape[0]):\n"
                              "        for j in range(Xb.shape[1]):\n            dC[Xb[k, j]] += demb[k, j]\n"}}


@pytest.mark.slow
@pytest.mark.parametrize("which", NOTEBOOKS)
def test_every_check_line_says_wrong_exactly_where_the_grader_takes_a_point(tmp_path, which):
    """Run All in a kernel, then the grader on the same notebook: every check line (exercise 4's training
    check too) contains WRONG exactly when the grader docks its grade id, and no check cell raises."""
    from nbclient import NotebookClient

    solved = nbformat.read(ROOT / make_notebooks.SOLVED, as_version=4)
    nb = _with_answers(solved, NOTEBOOKS[which])
    workdir = tmp_path / "assignment"
    shutil.copytree(ROOT / notebooks.release_path(COURSE).parent, workdir)
    nbformat.write(nb, workdir / notebooks.release_path(COURSE).name)  # the student's own notebook, saved there
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    NotebookClient(nb, kernel_name="python3", timeout=600, allow_errors=True,
                   resources={"metadata": {"path": str(workdir)}}).execute(env={**os.environ, "PYTHONPATH": path})
    lines = {}
    for c in nb.cells:
        grade_id = c.metadata.get("nbgrader", {}).get("grade_id", "")
        if grade_id.startswith("check_"):
            assert not [o for o in c.outputs if o.output_type == "error"], (grade_id, c.outputs)
            lines[grade_id.removeprefix("check_")] = "".join(
                o.get("text", "") for o in c.outputs if o.output_type == "stream")
    submission = tmp_path / "submissions" / "student.ipynb"
    submission.parent.mkdir()
    nbformat.write(nb, submission)
    ((_, result),) = grade([submission.parent], COURSE, tmp_path / "results", jobs=1)
    scores = {t.name: t for t in result.tests}
    docked = {g for g, t in scores.items() if t.score < t.max_score}
    if which == "cells":
        expected = ({g for g in (*WRONG_BUT_PASSED, *HARD_CODED_SLICES) if g != EX4.cell}
                    | {f"ex4_d{p}" for p in ("C", "W1", "b1", "W2", "b2", "bngain", "bnbias")} | {"dbnmeani"})
        assert expected <= docked, {g: scores[g].output for g in expected - docked}
        assert not docked & set(RIGHT_BUT_REFUSED), {g: scores[g].output for g in docked & set(RIGHT_BUT_REFUSED)}
        for grade_id in HARD_CODED_SLICES:  # named as what they are, by both
            assert "cuts a larger one short" in scores[grade_id].output, scores[grade_id].output
            assert "cuts a larger one short" in lines[grade_id], lines[grade_id]
    elif which == "blocks":
        assert not docked, {g: scores[g].output for g in docked}
        for grade_id in NOTEBOOKS[which]:  # right, and said so: "not run yet" has no WRONG in it
            assert "approximate: True" in lines[grade_id] and "not run" not in lines[grade_id], lines[grade_id]
    else:
        assert "ex4_training" in docked, scores["ex4_training"].output
    assert set(lines) >= set(scores), set(scores) - set(lines)
    for grade_id, line in lines.items():
        assert failed(line) == (grade_id in docked), (grade_id, line, scores[grade_id].output)


def _refused_cells() -> list[tuple[str, str, str]]:
    """(attack, answer cell, source) for every red-team cell the grader's static check refuses, as the
    static check's own vehicle submits it; none of them is ever run here (the self-check refuses it first)."""
    import redteam

    from grader.sandbox import static_check

    found = []
    for attack in redteam.attacks():
        for cell in attack.cells:
            source = attack.cell("checked", course="/nonexistent")
            if cell in EXERCISE.by_grade_id and static_check.check(source) is not None:
                found.append((attack.name, cell, source))
    return found


@pytest.mark.parametrize(("attack", "cell", "source"), _refused_cells(), ids=lambda v: v if len(v) < 40 else "")
def test_every_red_team_cell_the_static_check_refuses_is_refused_by_the_self_check(state, capfd, attack, cell,
                                                                                    source):
    from grader.sandbox import static_check
    from grader.student import selfcheck as check

    nb = Notebook(state)
    # As JupyterLab runs it, its id sent with it (it is not run here: the self-check reads it before running
    # anything). The notebook's history alone does not name a cell that assigns its answer by no name.
    check._record(SimpleNamespace(cell_id=cell, raw_cell=source))
    try:
        line = nb.check(cell, capfd)
    finally:
        del check._CELLS[cell]
    assert f"WRONG: the grader refuses this cell, {static_check.check(source)}" in line, (attack, line)


@pytest.mark.slow
def test_on_every_refused_red_team_cell_the_self_check_gives_the_graders_verdict_and_flag(state, capfd, tmp_path):
    """The real grader, sandboxed, on the same cells (each submission holds at most one per answer cell, the
    others as released; nothing refused is run): the verdict and the static check's flag the self-check
    announces are the grader's, and so is the reason it gives."""

    from grader.student import selfcheck as check
    from grader.vocabulary import Flag

    refused = _refused_cells()
    packed: list[dict[str, tuple[str, str]]] = []
    for attack, cell, source in refused:
        free = next((p for p in packed if cell not in p), None)
        if free is None:
            packed.append(free := {})
        free[cell] = (attack, source)
    released = nbformat.read(STUB, as_version=4)
    folder = tmp_path / "submissions"
    folder.mkdir()
    for index, cells in enumerate(packed):
        nb = nbformat.from_dict(released)
        for c in nb.cells:
            if c.id in cells:
                c.source = cells[c.id][1]
        nbformat.write(nb, folder / f"redteam-{index}.ipynb")
    graded = {s.id: r for s, r in grade([folder], COURSE, tmp_path / "results", jobs=1)}
    differ = []
    for index, cells in enumerate(packed):
        result = graded[f"redteam-{index}"]
        verdicts = {t.name: t.verdict for t in result.tests}
        flagged = {f["cell"]: f["evidence"] for f in result.flags if f["kind"] == Flag.STATIC_CHECK.value}
        for cell, (attack, source) in cells.items():
            check._record(SimpleNamespace(cell_id=cell, raw_cell=source))
            try:
                line = Notebook(state).check(cell, capfd)
            finally:
                del check._CELLS[cell]
            grader = (verdicts[cell], Flag.STATIC_CHECK.value if cell in flagged else None)
            if said(line) != grader or f"the grader refuses this cell, {flagged.get(cell)}" not in line:
                differ.append((attack, cell, grader, line))
    assert not differ, "\n".join(map(str, differ))
