"""The self-check as students really run it: one real kernel (jupyter_client, the cells sent with their ids
as JupyterLab sends them) driven through scripted sessions: check cells before the setup, a restart
mid-way, skipped cells, cells out of order, syntax errors, forbidden calls, meta tensors, values that
raise. No check cell may raise or write to stderr, and each line must say what is true of the notebook.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from grader.student.selfcheck import share_said
from helpers.kernel import Kernel
from helpers.paths import ROOT
from helpers.variant_courses import DATA_STRIDE

pytestmark = pytest.mark.slow
SOLVED = nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4)
CELLS = {c.id: c.source for c in SOLVED.cells if c.cell_type == "code"}
SETUP = ("setup_imports", "setup_data", "setup_params", "setup_forward")


def data(folder: Path | str) -> None:
    """Every eighth word of names.txt in `folder`, where the notebook reads its data: the self-check's lines are
    the same for any list of words, and loading all of it was an eighth of these sessions' time (a kernel
    restarts some 45 times)."""
    words = (ROOT / "solutions" / "names.txt").read_text(encoding="utf-8").splitlines()[::DATA_STRIDE]
    (Path(folder) / "names.txt").write_text("\n".join(words) + "\n", encoding="utf-8")


def written(cell: str) -> str:
    """An answer cell's code as a student writes it: the reference alone, no `= None` blank above it and none of
    the markers nbgrader's source notebook has (a saved notebook holding them is an instructor's)."""
    return CELLS[cell].split("### BEGIN SOLUTION\n")[1].split("### END SOLUTION")[0]


def setup(kernel, *, full: bool = False, send_id: bool = True):
    """The setup cells: all of them after a restart, else the parameters and the forward pass again (a
    fresh batch and autograd's gradients, with the data already loaded)."""
    for cell in SETUP if full else SETUP[2:]:
        out, err, error = kernel.run(cell, send_id=send_id)
        assert error is None, (cell, out, err)


def answered(kernel, cells):
    """A fresh forward pass, then the answer cells `cells` as the solution has them."""
    setup(kernel)
    for cell in cells:
        kernel.run(cell)


def right(line: str) -> bool:
    return "approximate: True" in line and "WRONG" not in line


def wrong_as_saved(line: str, cell: str, credit: str = "") -> bool:
    """The kernel's run right, and the cell as saved not: the run's verdict first, then the file's (the seventeenth
    student trial could not tell whether a fix, run and not yet saved, worked)."""
    return line.startswith(f"{cell:<15s}| exact: ") and "approximate: True" in line and \
        f"— but WRONG as saved{credit}: {cell}'s cell as your saved notebook holds it, which is what the grader " \
        "grades: " in line


def right_unsaved(line: str) -> bool:
    """Right, in a kernel whose notebook was never saved beside the folder's blank one: the kernel's verdict, and
    the file's said as the condition it is."""
    return "approximate: True" in line and ("WRONG" not in line or "ok — but WRONG as saved, if backprop_ninja.ipynb "
                                            "in this folder is your notebook: " in line)


def share(line: str) -> float | None:
    """The share of the answer's points a check line says the grader gives (exercise check reads it so)."""
    return share_said(line.partition("|")[2].strip())


def check_cells_before_the_setup_and_after_a_restart_say_what_to_run(kernel):
    for grade_id in ("dlogprobs", "ex2_dlogits", "ex4_dC", "training"):
        assert "not checked: run the notebook's setup cells first" in kernel.check(grade_id) \
            if grade_id != "training" else "run the notebook's setup cells first" in kernel.run("check_ex4_training")[0]
    # Those lines need nothing heavy: the check cells imported no torch (6-13 s on a loaded machine, the trial's
    # longest wait). Once the setup imports it, the self-check records every cell (the sessions below need it).
    assert kernel.run("scratch", "import sys\nprint('torch' in sys.modules)\n")[0] == "False\n"
    setup(kernel, full=True)
    # Skipped answer cells: never assigned since the kernel started. The cell run just before (the setup's
    # forward pass) is no misspelt answer cell.
    unrun = ("not run yet: {0} has not been assigned since the kernel started: run its answer cell above (after a "
             "restart the kernel holds none of your answers: run the setup and your cells from the top, Run > Run All "
             "Above Selected Cell)")
    line = kernel.check("dprobs")
    assert line == f"dprobs         | {unrun.format('dprobs')}", line
    kernel.run("dlogprobs")
    assert right(kernel.check("dlogprobs"))
    kernel.restart()
    assert "run the notebook's setup cells first" in kernel.check("dlogprobs")
    # The trial's s05: after a restart the answers are lost, not "not attempted yet".
    setup(kernel, full=True)
    line = kernel.check("dlogprobs")
    assert line == f"dlogprobs      | {unrun.format('dlogprobs')}", line
    # Trial 3's t34: the answer run from a second notebook on this kernel was ok; the saved cell, blank, gets 0.
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "backprop_ninja.ipynb"
        released = nbformat.from_dict(SOLVED)
        next(c for c in released.cells if c.get("id") == "dlogprobs").source = "dlogprobs = None  # TODO\n"
        nbformat.write(released, path)
        kernel.run("scratch", f"__session__ = {str(path)!r}\n")
        kernel.run("other-notebook", CELLS["dlogprobs"])
        line = kernel.check("dlogprobs")
        # The eighth trial: that line had no WRONG, and a line without WRONG is one the grader accepts
        assert line.startswith("dlogprobs      | exact: True") and line.endswith(
            " — but WRONG as saved: dlogprobs's cell in your saved notebook is still blank (dlogprobs = None), and the "
            "grader grades the saved notebook: put your answer in that cell and save it"), line
        kernel.run("scratch", "del __session__, dlogprobs\n")


def a_syntax_error_is_the_graders_refusal_and_later_checks_still_run(kernel):
    setup(kernel)
    out, _, error = kernel.run("dlogprobs", "dlogprobs = torch.zeros_like(logprobs\n")
    assert error == "SyntaxError"
    line = kernel.check("dlogprobs")
    assert "WRONG: the grader refuses this cell" in line and "syntax error" in line, line
    # A later answer reading it: its cell raised, it is right with the true upstream gradient.
    _, _, error = kernel.run("dprobs")
    assert error == "NameError"
    line = kernel.check("dprobs")
    assert "dlogprobs above is not assigned (its cell never ran, or stopped with an error); with the true " \
           "dlogprobs this cell is right" in line, line


def without_cell_ids_the_cell_that_bound_the_answer_is_judged_however_it_bound_it(kernel):
    """nbclient and the classic Notebook send no cell ids: the history shows no `dh = ...` in a cell that
    binds dh through exec or globals(), so the check judged an older cell, or the value alone ("exact:
    True"); the cell seen binding it is the one the grader would run, and refuses."""
    setup(kernel)
    for cell in ("dlogprobs", "dprobs", "dcounts_sum_inv", "dcounts_sum", "dcounts", "dnorm_logits",
                 "dlogit_maxes", "dlogits"):
        kernel.run(cell, send_id=False)
    kernel.run("dh", 'exec("dh = dlogits @ W2.T")\n', send_id=False)
    line = kernel.check("dh", send_id=False)
    assert "WRONG: the grader refuses this cell" in line and "exec" in line, line
    kernel.run("dh", "dh = None  # TODO\n", send_id=False)  # the released cell, run first
    kernel.run("dh", 'globals()["dh"] = h.grad.clone()\n', send_id=False)
    line = kernel.check("dh", send_id=False)
    assert "WRONG: the grader refuses this cell" in line and "globals" in line, line
    # A later cell that stops with an error binds nothing: the newest cell that assigns dh is judged.
    _, _, error = kernel.run("dh", "dh = dlogits @ W2.T +\n", send_id=False)
    assert error == "SyntaxError"
    line = kernel.check("dh", send_id=False)
    assert "WRONG: the grader refuses this cell" in line and "syntax error" in line, line
    kernel.run("dh", send_id=False)
    assert right(kernel.check("dh", send_id=False))


def a_forbidden_answer_is_refused_as_the_grader_refuses_it(kernel):
    setup(kernel)
    for cell in ("dlogprobs", "dprobs", "dcounts_sum_inv", "dcounts_sum", "dcounts", "dnorm_logits",
                 "dlogit_maxes", "dlogits"):
        kernel.run(cell)
    # Without cell ids (nbclient, the classic Notebook) the cell is found in the history, and refused too.
    for send_id in (False, True):
        kernel.run("dh", "dh = h.grad.clone()\n", send_id=send_id)
        line = kernel.check("dh", send_id=send_id)
        assert "exact: True" not in line and "WRONG: the grader refuses this cell" in line and ".grad" in line, line
    # The trial's s51: autograd refused for what it is, not for a keyword argument ("pass it by position").
    kernel.run("dh", "dh = torch.autograd.grad(loss, h, retain_graph=True)[0]\n")
    line = kernel.check("dh")
    assert "torch.autograd.grad is not tensor math this exercise allows" in line and "by position" not in line, line
    kernel.run("dh")
    # Exercise 3's read-only cell hands dhpreact autograd's value: it is not an answer cell.
    kernel.run("dhpreact")
    kernel.run("setup_ex3_dhpreact")
    assert right(kernel.check("dhpreact"))


def cells_out_of_order_odd_values_and_the_old_call_form(kernel):
    setup(kernel)
    kernel.run("scratch", "del dlogits, dh\n")
    kernel.run("dh")  # before dlogits: a NameError in the notebook, right as the grader runs it
    assert re.search(r"dlogits above is not assigned \(the cell you ran as In\[\d+\] deleted it, `del dlogits`\); "
                     "with the true dlogits this cell is right", kernel.check("dh"))
    kernel.run("dh", "dh = torch.empty(32, 64, device='meta', dtype=torch.float64)\n")
    line = kernel.check("dh")
    assert "WRONG" in line and "meta tensor" in line, line
    kernel.run("scratch", "class Odd(torch.Tensor):\n"
                          "    @classmethod\n"
                          "    def __torch_function__(cls, *args, **kwargs):\n"
                          "        raise RuntimeError('no')\n"
                          "odd = torch.zeros(32, 64, dtype=torch.float64).as_subclass(Odd)\n")
    kernel.run("dh", "dh = odd\n")
    line = kernel.check("dh")
    assert "WRONG" in line or "not checked" in line, line
    # Notebooks already released build a SelfCheck and pass the values.
    kernel.run("dlogprobs")
    out, err, error = kernel.run("old", "from grader.student.check import SelfCheck\n"
                                        "old = SelfCheck(n=n, namespace=globals(), course=COURSE)\n"
                                        "old('dlogprobs', dlogprobs, logprobs)\n")
    assert error is None and err == "" and out.startswith("dlogprobs") and right(out), (out, err)


def exercise_4_checks_never_raise(kernel):
    setup(kernel)
    kernel.run("setup_ex4_forward")
    kernel.run("ex4_backward", "def manual_backward(params, cache, Yb:\n    return {}\n")
    out, _, error = kernel.run("setup_ex4_check")
    # manual_backward never defined: the read-only cell says so, and Run All goes on
    assert error is None and "manual_backward raised NameError" in out, out
    line = kernel.check("ex4_dC")
    assert "WRONG" in line and "syntax error" in line, line
    out, err, error = kernel.run("check_ex4_training")
    assert error is None and err == "" and out.count("\n") == 1, out
    assert out.startswith("training       | WRONG: the grader refuses manual_backward's cell, line 1: syntax "
                          "error"), out
    # A hard-coded batch size: the grader's diagnosis (the lecture's sizes only), not just "wrong values".
    hard_coded = CELLS["ex4_backward"].replace("n = Xb.shape[0]", "n = 32")
    assert hard_coded != CELLS["ex4_backward"]
    kernel.run("ex4_backward", hard_coded)
    kernel.run("setup_ex4_check")
    line = kernel.check("ex4_dC")
    # The exercise's sizes, not the notebook's: exercise 4 trains a network of its own, 200 hidden units wide (the
    # twenty-second trial's `torch.zeros(64)` was "right for the notebook's sizes (n_hidden=64)", and failed there).
    said = ("right for the exercise's sizes but wrong for every other size: something in the cell depends on the "
            "sizes: your cell writes 32 (n) as a number")
    assert "WRONG" in line and said in line and line.count("your cell writes") == 1, line
    # The student trial's other sizes: the line names what the cell writes, not only the usual 32, 27, 64.
    for written, said in (("num_classes=logits.shape[1]", "num_classes=27"), ("emb.shape", "(n, 3, 10)")):
        kernel.run("ex4_backward", CELLS["ex4_backward"].replace(written, said))
        kernel.run("setup_ex4_check")
        line = kernel.check("ex4_dC")
        assert "WRONG" in line and ("your cell writes 27 (vocab_size) as a number" if "27" in said else
                                    "your cell writes 3 (block_size) and 10 (n_embd) as numbers") in line, line
    # The mistake is said of the gradient, dC, as exercise 1's check says it (not of C, the key it is returned under).
    overwrite = CELLS["ex4_backward"].replace(
        "dC = torch.zeros_like(C).index_add(0, Xb.view(-1), demb.view(-1, C.shape[1]))",
        "dC = torch.zeros_like(C)\n    dC[Xb] += demb")
    assert overwrite != CELLS["ex4_backward"]
    kernel.run("ex4_backward", overwrite)
    kernel.run("setup_ex4_check")
    line = kernel.check("ex4_dC")
    assert "WRONG" in line and "your dC keeps one use of each index repeated in Xb" in line, line
    # The trial's s18: the training line said only where the losses part; it names the gradients behind it.
    kernel.run("ex4_backward", CELLS["ex4_backward"].replace("n / (n - 1) * bnraw", "bnraw"))
    kernel.run("setup_ex4_check")
    out, _, _ = kernel.run("check_ex4_training")
    assert out.startswith("training       | WRONG: diverges from autograd at step") and \
        "; the gradients behind it: your dC and dW1 from manual_backward are not autograd's at step 1 (their " \
        "lines above say how)" in out, out
    kernel.run("ex4_backward")
    kernel.run("setup_ex4_check")
    assert right(kernel.check("ex4_dC"))
    out, err, error = kernel.run("check_ex4_training")
    assert error is None and err == "" and re.fullmatch(r"training {7}\| 50 steps match autograd: loss "
                                                        r"\d\.\d{4} -> \d\.\d{4}\n", out), out


def sizes_say_which_batch_and_partial_credit_is_announced(kernel):
    setup(kernel)
    for cell in EX1[:2]:
        kernel.run(cell)
    kernel.run("dcounts_sum_inv", "dcounts_sum_inv = (counts * dprobs).sum(1)\n")
    line = kernel.check("dcounts_sum_inv")
    assert line.startswith("dcounts_sum_inv| WRONG (right values, wrong shape; the grader gives half its points): "
                           "dcounts_sum_inv: shape ("), line
    # The trial: every WRONG line carried all five sizes of two batches; only the size the line quotes is said.
    assert re.search(r"shape \((\d+),\), expected \(\1, 1\): right values, but a size-1 dimension is missing or "
                     r"extra \(on the self-check's own batch, where n=\1; yours: n=32\); missing keepdim=True",
                     line), line
    kernel.run("dcounts_sum_inv", "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True) * 2\n")
    line = kernel.check("dcounts_sum_inv")
    assert re.search(r"wrong values \(max abs diff [\d.e-]+\) \(on the self-check's own batch\); your "
                     r"dcounts_sum_inv ", line), line
    kernel.run("dcounts_sum_inv")
    for cell in EX1[2:6]:
        kernel.run(cell)
    kernel.run("dlogit_maxes", "dlogit_maxes = torch.zeros_like(logit_maxes)\n")
    line = kernel.check("dlogit_maxes")
    assert line.startswith("dlogit_maxes   | WRONG (the grader gives half its points: right with the upstream "
                           "gradients given, not as one backward step)"), line


EX1 = ("dlogprobs", "dprobs", "dcounts_sum_inv", "dcounts_sum", "dcounts", "dnorm_logits", "dlogit_maxes", "dlogits",
       "dh", "dW2", "db2", "dhpreact", "dbngain", "dbnbias", "dbnraw", "dbnvar_inv", "dbnvar", "dbndiff2", "dbndiff",
       "dbnmeani", "dhprebn")


def trial_a_cell_edited_and_saved_but_not_run_is_named(kernel):
    """The trial's s08: the cell fixed in the editor (autosaved), not run: the check said again what was
    wrong with the code the kernel ran. jupyter_server names the notebook's file to the kernel
    (JPY_SESSION_NAME, which ipykernel sets as `__session__`); the file is saved as JupyterLab saves it."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "backprop_ninja.ipynb"
        kernel.run("scratch", f"__session__ = {str(path)!r}\n")
        setup(kernel)
        wrong = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = 1.0 / n\n"

        def save(code: str):
            nb = nbformat.from_dict(SOLVED)
            next(c for c in nb.cells if c.get("id") == "dlogprobs").source = code
            nbformat.write(nb, path)

        save(wrong)  # saved before it ran: what ran is what the file holds
        kernel.run("dlogprobs", wrong)
        assert "WRONG" in kernel.check("dlogprobs")
        time.sleep(0.05)
        save("# fixed, with a comment\n" + CELLS["dlogprobs"].replace("-1 / n", "- 1/n"))  # edited, not run
        assert kernel.check("dlogprobs") == (
            "dlogprobs      | not checked: dlogprobs's cell was edited after it last ran (your saved notebook holds "
            "other code than the kernel ran, which is what this check would judge): run it, then this check")
        kernel.run("dlogprobs")  # the same code, but for a comment and layout
        assert right(kernel.check("dlogprobs"))
        # The seventh trial: a right cell edited to a wrong one, saved, not run, was "not checked" with no
        # WRONG where the grader, which grades the file, gives nothing: the saved code is judged.
        time.sleep(0.05)
        save(wrong)
        line = kernel.check("dlogprobs")
        assert line.startswith("dlogprobs      | WRONG: dlogprobs's cell as your saved notebook holds it (edited after "
                               "it last ran), which is what the grader grades: "), line
        assert line.endswith("; run it, then this check"), line
        save(CELLS["dlogprobs"])
        # A file saved before the cell last ran holds older code, which says nothing of an edit.
        kernel.run("dlogprobs", wrong)
        assert "WRONG" in kernel.check("dlogprobs")

        # The fifth trial: exercise 4's function edited and saved, not run: its per-tensor lines said so, but the
        # training line (the most points) judged the kernel's code, and said it matched autograd.
        save(CELLS["dlogprobs"])
        kernel.run("dlogprobs")
        for cell in ("setup_ex4_forward", "ex4_backward", "setup_ex4_check"):
            kernel.run(cell)
        time.sleep(0.05)
        nb = nbformat.from_dict(SOLVED)
        edited = CELLS["ex4_backward"].replace("    dW2 = h.T @ dlogits\n", "    dW2 = h.T @ dlogits * 2\n")
        assert edited != CELLS["ex4_backward"]
        next(c for c in nb.cells if c.get("id") == "ex4_backward").source = edited
        nbformat.write(nb, path)
        kernel.run("setup_ex4_check")
        out = kernel.run("check_ex4_training")[0]
        assert out.startswith("training       | not checked: ex4_backward's cell was edited after it last ran"), out
        # Its return line lost: every line said "not attempted yet", of a function written out in full.
        no_return = CELLS["ex4_backward"].rsplit("    return ", 1)[0]
        assert "def manual_backward" in no_return and "return" not in no_return.split("def manual_backward")[1]
        next(c for c in nb.cells if c.get("id") == "ex4_backward").source = no_return
        nbformat.write(nb, path)
        kernel.run("ex4_backward", no_return)
        kernel.run("setup_ex4_check")
        said = "WRONG: manual_backward returns nothing: its cell has no `return` line"
        assert kernel.check("ex4_dC").startswith(f"ex4_dC         | {said}"), kernel.check("ex4_dC")
        out = kernel.run("check_ex4_training")[0]
        assert out.startswith(f"training       | {said}"), out

        kernel.run("scratch", "del __session__\n")


def stale_values_and_a_cascade_are_named(kernel):
    setup(kernel)
    kernel.run("dlogprobs")
    kernel.run("dprobs", "dprobs = 2 * (1.0 / probs) * dlogprobs\n")
    kernel.run("dcounts_sum_inv")
    kernel.run("dcounts_sum")
    kernel.run("dprobs")  # fixed, and only the checks of the next cells re-run
    line = kernel.check("dcounts_sum_inv")
    assert line == "dcounts_sum_inv| re-run dcounts_sum_inv's cell: dprobs changed since it ran", line
    # Two levels down the value is only out of date too, not wrong: the chain to re-run is named.
    line = kernel.check("dcounts_sum")
    assert line == ("dcounts_sum    | dcounts_sum_inv above is out of date (dprobs changed since it ran): re-run the "
                    "cells from dcounts_sum_inv's down to this one; this cell itself is right"), line
    kernel.run("dcounts_sum_inv")
    assert right(kernel.check("dcounts_sum_inv"))
    # A wrong dlogprobs: the cells after it are right, and the first wrong one is named.
    kernel.run("dlogprobs", "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0\n")
    kernel.run("dprobs")
    kernel.run("dcounts_sum_inv")
    line = kernel.check("dcounts_sum_inv")
    # The reference's pointer belongs under a line that finds the cell wrong, not under this one.
    assert line == ("dcounts_sum_inv| dlogprobs above is wrong (dprobs, computed from it, is wrong too); with the "
                    "true dprobs this cell is right"), line
    line = kernel.check("dlogprobs")
    assert "WRONG" in line and "stuck? backprop-ninja solution dlogprobs" in line, line


def an_answer_changed_in_place_by_a_later_cell_is_named_there(kernel):
    setup(kernel)
    for cell in EX1[:-1]:
        kernel.run(cell)
    assert right(kernel.check("dbndiff"))
    kernel.run("dhprebn", "dhprebn = dbndiff\ndhprebn += -dbnmeani / n\n")
    line = kernel.check("dbndiff")
    assert line.startswith("dbndiff        | your dbndiff is not what its cell computed: dhprebn's cell changed it in "
                           "place afterwards"), line
    # The trial's s30: the cell run twice computes from the dbndiff it changed: it is the one to fix, not only
    # the cells above to re-run (which brings the same line back once it runs again).
    kernel.run("dbndiff")
    for _ in range(2):
        kernel.run("dhprebn", "dhprebn = dbndiff\ndhprebn += 1.0 / n * torch.ones_like(hprebn) * dbnmeani\n")
    line = kernel.check("dhprebn")
    assert line == ("dhprebn        | dbndiff above was changed in place by this cell when it last ran (after `x = "
                    "dbndiff`, `x += ...` changes dbndiff too: write `x = dbndiff.clone()`): this cell itself is right "
                    "as the grader runs it, but while it changes dbndiff the cells above cannot mend it: fix this "
                    "cell, then re-run the cells from dbndiff's down to this one"), line
    kernel.run("dhprebn")
    kernel.run("dbndiff")
    assert right(kernel.check("dbndiff"))


def an_augmented_assignment_on_an_earlier_answer_is_named_where_it_happens(kernel):
    """The student trial's dhpreact cell, `dh *= 1.0 - h**2; dhpreact = dh`: dhpreact's check said ok and
    dh's (right) cell was blamed for going "one step too far"."""
    setup(kernel)
    for cell in EX1[:11]:
        kernel.run(cell)
    kernel.run("dhpreact", "dh *= 1.0 - h**2\ndhpreact = dh\n")
    line = kernel.check("dhpreact")
    assert right(line) and "but this cell changes dh in place" in line, line
    line = kernel.check("dh")
    assert line.startswith("dh             | your dh is not what its cell computed: dhpreact's cell changed it in "
                           "place afterwards (`dh *= 1.0 - h ** 2` there changes dh itself"), line
    kernel.run("dh")
    kernel.run("dhpreact")
    assert right(kernel.check("dhpreact")) and right(kernel.check("dh"))


def a_later_cell_that_reassigns_an_answers_name_is_named(kernel):
    """Exercise 2's cell assigns exercise 1's dlogits: the right cell of exercise 1 was said WRONG, and the
    check after it blamed the cell above."""
    setup(kernel)
    for cell in EX1[:11]:
        kernel.run(cell)
    kernel.run("ex2_dlogits", "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\n")  # forgot / n
    line = kernel.check("dlogits")
    assert "WRONG" not in line and "ex2_dlogits's cell (exercise 2) assigned dlogits after it ran; re-run this " \
           "cell" in line, line
    kernel.run("dW2")
    line = kernel.check("dW2")
    assert "WRONG" not in line and "dlogits above is not its cell's value: ex2_dlogits's cell (exercise 2) " \
           "assigned dlogits" in line, line
    kernel.run("dlogits")
    kernel.run("dW2")
    assert right(kernel.check("dlogits")) and right(kernel.check("dW2"))


def a_typo_assigning_an_earlier_answers_name_is_named(kernel):
    """dbnvar's cell assigning `dbnvar_inv = ...`: dbnvar_inv's right cell was said to go one step too far."""
    setup(kernel)
    for cell in EX1[:16]:
        kernel.run(cell)
    kernel.run("dbnvar", "dbnvar_inv = -0.5 * (bnvar + 1e-5) ** -1.5 * dbnvar_inv\n")
    line = kernel.check("dbnvar_inv")
    assert "WRONG" not in line and "dbnvar's cell (a typo for dbnvar?) assigned dbnvar_inv after it ran" in line, line
    kernel.run("dbnvar_inv")
    assert right(kernel.check("dbnvar_inv"))
    # A student trial's stray line in a later answer's cell, checked below both: re-running the cells from the
    # answer it reassigns down runs that cell again, so its line comes out first
    for cell in (*EX1[EX1.index("dbnvar"):], "dembcat", "dW1"):
        kernel.run(cell)
    kernel.run("db1", CELLS["db1"].replace("### END SOLUTION", "dembcat = dembcat * 2\n"))
    kernel.run("demb")
    line = kernel.check("demb")
    assert "WRONG" not in line and "db1's cell (a typo for db1?) assigned dembcat after it ran; take the line that " \
           "assigns dembcat out of it, then re-run dembcat's cell" in line, line
    for cell in ("db1", "dembcat", "dW1", "db1", "demb"):
        kernel.run(cell)
    assert right(kernel.check("demb"))


def a_refused_backward_call_is_named_not_blamed_on_right_answers(kernel):
    """A forbidden loss.backward() in an answer cell adds to W2.grad: dW2's right cell was said WRONG."""
    setup(kernel)
    for cell in EX1[:10]:
        kernel.run(cell)
    kernel.run("db2", "F.cross_entropy(h @ W2 + b2, Yb).backward()\ndb2 = b2.grad.clone()\n")
    line = kernel.check("db2")
    assert "WRONG: the grader refuses this cell" in line and "backward" in line, line
    line = kernel.check("dW2")
    assert "WRONG" not in line and "autograd's gradient on W2 is not your forward pass's any more (db2's cell " \
           "called backward() again" in line, line
    setup(kernel)
    for cell in EX1[:10]:
        kernel.run(cell)
    assert right(kernel.check("dW2"))


EX4_KEYS = re.sub(r'"(C|W1|b1|W2|b2|bngain|bnbias)": ', r'"d\1": ', CELLS["ex4_backward"])
EX3_BNRAW = ("dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) - n / (n - 1) * bnraw * (dhpreact * "
             "bnraw).sum(0))\n")
FUSED_EX2 = "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= n\n"


def trial_a_forward_value_changed_in_place_is_named_not_blamed_on_a_right_cell(kernel):
    """The blind trial's s48: `bnraw.mul_(dhpreact)` in dbngain's cell passed silently, and exercise 3's right
    cell, which reads bnraw, was said WRONG with a made-up cause (a missing branch)."""
    answered(kernel, EX1[:12])
    kernel.run("dbngain", "dbngain = bnraw.mul_(dhpreact).sum(0, keepdim=True)\n")
    line = kernel.check("dbngain")
    assert right(line) and "but this cell changes bnraw, a value of the forward pass, in place" in line, line
    for cell in ("dbnbias", "dbnraw", "setup_ex3_dhpreact"):
        kernel.run(cell)
    kernel.run("ex3_dhprebn", EX3_BNRAW)
    line = kernel.check("ex3_dhprebn")
    assert line == ("ex3_dhprebn    | not checked: this cell is right as the grader runs it, but bnraw, which it "
                    "reads, is not your forward pass's value any more (dbngain's cell changed it in place): re-run the "
                    "forward pass's cell (the one that calls backward()) and the answer cells from there, then this "
                    "check"), line
    setup(kernel)
    kernel.run("setup_ex3_dhpreact")
    kernel.run("ex3_dhprebn", EX3_BNRAW)
    assert right(kernel.check("ex3_dhprebn"))
    # The trial's s36: exercise 3's cell reading exercise 1's dbndiff was told exercise 1's variables are allowed.
    kernel.run("ex3_dhprebn", "dhprebn = dbndiff + 1.0 / n * torch.ones_like(hprebn) * dbnmeani\n")
    line = kernel.check("ex3_dhprebn")
    assert "WRONG: NameError" in line and "exercise 3's cell may use only the parameters, Xb, Yb, n, the forward " \
           "pass's intermediates, torch, F and dhpreact, not the answers of exercise 1)" in line, line


def trial_exercise_4_wrong_keys_and_stale_gradients(kernel):
    """The trial's s26 (gradients returned under "dC", "dW1", ...: "not attempted yet") and s24 (a fixed
    manual_backward, its gradients not computed again: the old shape error repeated as WRONG)."""
    setup(kernel)
    kernel.run("setup_ex4_forward")
    kernel.run("ex4_backward", EX4_KEYS)
    kernel.run("setup_ex4_check")
    line = kernel.check("ex4_dC")
    assert line.startswith("ex4_dC         | WRONG: manual_backward returns no 'C' (its keys: 'dC', 'dW1', "), line
    out, _, _ = kernel.run("check_ex4_training")
    assert "(it returns no 'C'; its keys: 'dC', 'dW1'" in out, out
    kernel.run("ex4_backward", CELLS["ex4_backward"].replace("db2 = dlogits.sum(0)", "db2 = dlogits.sum(1)"))
    kernel.run("setup_ex4_check")
    assert "WRONG" in kernel.check("ex4_db2")
    kernel.run("ex4_backward")  # fixed, and the cell that calls it not run again
    line = kernel.check("ex4_db2")
    assert line == ("ex4_db2        | not checked: manual_backward is right as the grader runs it, but the gradients "
                    "checked here are not what it returns now (they were computed before its cell last ran, or "
                    "changed since): re-run the cell after manual_backward's, which calls it, then this check"), line
    kernel.run("setup_ex4_check")
    assert right(kernel.check("ex4_db2"))
    # The trial's s37: the cell that calls it stopped for want of a cell above it, which running it again
    # alone does not fix.
    kernel.run("scratch", "del fused_forward, grads\n")
    _, _, error = kernel.run("setup_ex4_check")
    assert error == "NameError"
    line = kernel.check("ex4_dW1")  # (and the sixteenth trial's V1: which cell, where one above was skipped)
    assert line == ("ex4_dW1        | not checked: grads is not set: the cell that calls manual_backward stopped, as "
                    "fused_forward is not defined: run the cell above that defines it, then the cell that calls "
                    "manual_backward, then this check"), line
    kernel.run("setup_ex4_forward")
    kernel.run("setup_ex4_check")
    # Trial 3's t04: a function that also steps the parameters it is given passed; the notebook's own training
    # loop then steps W2 and b2 twice.
    ex4 = CELLS["ex4_backward"]
    cases = (
        (ex4.replace("    return {", "    for k, d in [('W2', dW2), ('b2', db2)]:\n        params[k] -= 0.1 * d\n"
                                   "    return {"),
         "50 steps match autograd: loss ", " — but manual_backward changes W2 and b2, which it is given, in place: a "
         "training loop then also steps them by that change; return the gradients and change nothing it is given"),
        # t02: a float/double error, unexplained (its dC was kept between calls in a dict, which the static
        # check now refuses, as the grader does: below; a float32 tensor made with a fixed dtype raises the same)
        (ex4.replace("dC = torch.zeros_like(C).index_add(", "dC = torch.zeros(C.shape).index_add("),
         "WRONG: manual_backward raised RuntimeError at training step 1: ",
         " (manual_backward is called with float64 tensors here and by the grader: a tensor it makes with a fixed "
         "dtype (torch.zeros(shape) is float32; torch.zeros_like(x) follows x) or keeps from an earlier call does not "
         "match them)"),
        # t10: the notebook's bngain read: a size mismatch, with no word of where it came from; since a third
        # instructor trial, the NameError the grader meets, running the function's cell on its own
        (ex4.replace('C, W1, W2, bngain = (params[k] for k in ("C", "W1", "W2", "bngain"))',
                     'C, W1, W2 = (params[k] for k in ("C", "W1", "W2"))'),
         "WRONG: manual_backward raised NameError at training step 1: name 'bngain' is not defined",
         " (it reads bngain from the notebook, not from its arguments)"),
        # t11: a tuple returned: "no tensor of the right shape for C"
        (ex4.replace('return {"C": dC, "W1": dW1, "b1": db1, "W2": dW2, "b2": db2, "bngain": dbngain, "bnbias": '
                     'dbnbias}', "return dC, dW1, db1, dW2, db2, dbngain, dbnbias"),
         "WRONG: at training step 1, manual_backward gave no tensor of the right shape for C (it returns a tuple, "
         "not a dict of gradients by parameter name)", ""),
        # Trial 6's E09: autograd in a branch that never runs matched autograd here, and the grader, whose static
        # check refuses the cell, gave the training check 0 (the seven gradient lines said so; this one did not)
        (ex4.replace("dC = torch.zeros_like(C).index_add(",
                     "dC = torch.autograd.grad(emb.sum(), C)[0] if False else torch.zeros_like(C).index_add("),
         "WRONG: the grader refuses manual_backward's cell, line ",
         ": torch.autograd.grad is not tensor math this exercise allows: dC = torch.autograd.grad(emb.sum(), C)[0] if "
         "False else torch.zeros_like(C).index_add(0, Xb.view(-1), demb.view(-1, C.shape[1]))"))
    for code, starts, ends in cases:
        assert code != ex4
        kernel.run("ex4_backward", code)
        kernel.run("setup_ex4_check")
        out, _, _ = kernel.run("check_ex4_training")
        assert out.startswith(f"training       | {starts}") and out.endswith(f"{ends}\n"), out
    # t42: torch.zeros(C.shape) is float32: each of the seven lines quoted a float/double error only.
    kernel.run("ex4_backward", CELLS["ex4_backward"].replace("torch.zeros_like(C)", "torch.zeros(C.shape)"))
    kernel.run("setup_ex4_check")
    line = kernel.check("ex4_dW2")
    assert line.startswith("ex4_dW2        | WRONG: ") and "RuntimeError" in line and "is called with float64 " \
        "tensors here and by the grader" in line, line
    # once (a student trial's line said it twice, the judge's words and the self-check's)
    assert line.count("is called with float64 tensors") == 1, line
    kernel.run("ex4_backward")
    kernel.run("setup_ex4_check")


def trial3_a_blank_answer_above_and_a_forward_name_reassigned_are_named(kernel):
    """Trial 3: Run All with dbnvar left blank made every later check say "its answer cell stopped with an error
    ...: run the cells above it" (V2); `h = dlogits @ W2.T` (a typo for dh) made dh's check ask to run the
    forward and backward cells, which had run (V7)."""
    answered(kernel, EX1[:16])
    kernel.run("dbnvar", "dbnvar = None  # TODO\n")
    kernel.run("scratch", "del dbndiff2\n")
    _, _, error = kernel.run("dbndiff2", "dbndiff2 = 1.0 / (n - 1) * torch.ones_like(bndiff2) * dbnvar\n")
    assert error == "TypeError"
    line = kernel.check("dbndiff2")
    # and, since the eighth trial, the cell is judged as the grader judges it, on the true gradients above it
    assert line == ("dbndiff2       | dbndiff2 is not assigned here, but this cell itself is right (as the grader runs "
                    "it, on the true gradients above it): its answer cell stopped with an error when it last ran, "
                    "reading dbnvar above, which is not attempted yet: answer dbnvar, then run the cells from "
                    "dbnvar's down to this one"), line
    assert share(line) == 1.0
    kernel.run("dh", "h = dlogits @ W2.T\n")
    kernel.run("dh")
    line = kernel.check("dh")
    assert re.match(r"dh             \| not checked: no autograd gradient on h: dh's cell assigned h when it ran as "
                    r"In\[\d+\], so "
                    r"it is not the forward pass's tensor any more: re-run the forward pass's cell", line), line
    answered(kernel, EX1[:18])


def trial_without_cell_ids_after_a_restart(kernel):
    """The blind trial's sessions, as its kernel ran them: no cell ids. After a restart manual_backward's
    check said WRONG: KeyError (s52); a typo `dprob = ...` was "not attempted yet: run its answer cell"
    (s10); exercises 1 and 2 (and 3) assigning the same name made exercise 1's right cells WRONG, half
    credit, or exercise 2's a NameError from exercise 1's code (s16, s44, s58, s59); `dlogit_maxes *= 1`
    in dlogits's cell made dlogit_maxes's check a NameError (s55)."""
    kernel.restart()
    for cell in SETUP[:2]:
        kernel.run(cell, send_id=False)
    # The trial's s45: the forward pass's cell would stop too (no parameters): the setup cells are what to run.
    assert kernel.check("dh", send_id=False) == ("dh             | not checked: run the notebook's setup cells first "
                                                 "(from the top: Run > Run All Above Selected Cell)")
    for cell in (*SETUP[2:], "setup_ex4_forward"):
        kernel.run(cell, send_id=False)
    out, _, error = kernel.run("setup_ex4_check", send_id=False)
    assert error is None and "manual_backward raised NameError" in out, out
    line = kernel.check("ex4_dW2", send_id=False)
    assert line == ("ex4_dW2        | not checked: manual_backward is not defined since the kernel started: run its "
                    "cell above, then the cell after it, which calls it"), line
    kernel.run("dlogprobs", send_id=False)
    # Trial 3's t44: the cell run before the check, another answer's, is no misspelt dprobs cell.
    line = kernel.check("dprobs", send_id=False)
    assert "assigns" not in line and "run its answer cell above (after a restart" in line, line
    kernel.run("dprobs", "dprob = (1.0 / probs) * dlogprobs\n", send_id=False)
    for _ in range(2):  # the fourteenth trial's F2: run twice, the second said to run the cell just run
        line = kernel.check("dprobs", send_id=False)
        assert "run its answer cell" not in line and "assigns dprob: if that is dprobs's answer cell, it must assign " \
               "dprobs" in line, line
    # s16: exercise 2 before exercise 1, whose dlogits cell never ran.
    kernel.run("ex2_dlogits", FUSED_EX2, send_id=False)
    assert right(kernel.check("ex2_dlogits", send_id=False))
    for cell in EX1[1:7]:
        kernel.run(cell, send_id=False)
    line = kernel.check("dlogits", send_id=False)
    assert line == ("dlogits        | not run yet: this cell has not run since the kernel started; your dlogits "
                    "is the value ex2_dlogits's cell (exercise 2) assigned: run this cell, then this check"), line
    kernel.run("dlogits", "dlogits = dnorm_logits.clone()\n", send_id=False)
    line = kernel.check("dlogits", send_id=False)  # the pointer names this answer's reference alone
    # and names the kernel's notebook where the folder holds it (the placeholder where it does not)
    assert "WRONG" in line and re.search(r"— stuck\? backprop-ninja solution dlogits --notebook "
                                         r"(backprop_ninja\.ipynb|YOUR_NOTEBOOK\.ipynb)$", line), line
    kernel.run("dh", send_id=False)
    line = kernel.check("ex2_dlogits", send_id=False)  # judged on its own cell: right (dlogit_maxes is ~0)
    assert right(line) and "NameError" not in line, line
    kernel.run("dlogits", "dlogits = 2 * dnorm_logits\n", send_id=False)
    line = kernel.check("ex2_dlogits", send_id=False)
    assert "WRONG" not in line and "dlogits's cell (exercise 1) assigned dlogits after it ran; re-run this cell" \
        in line, line
    # s59 and s44: exercise 1 done, then exercise 2's cell (right, then wrong), then exercise 1's check again.
    kernel.run("dlogits", send_id=False)
    kernel.run("ex2_dlogits", FUSED_EX2, send_id=False)
    assert right(kernel.check("ex2_dlogits", send_id=False))
    assert right(kernel.check("dlogits", send_id=False))
    kernel.run("ex2_dlogits", FUSED_EX2.replace("dlogits /= n\n", ""), send_id=False)
    assert "WRONG" in kernel.check("ex2_dlogits", send_id=False)
    assert right(kernel.check("dh", send_id=False))
    line = kernel.check("dlogits", send_id=False)
    assert "WRONG" not in line and "ex2_dlogits's cell (exercise 2) assigned dlogits after it ran; re-run this " \
           "cell" in line, line
    # s58: exercise 3's cell, then exercise 1's dhprebn check again.
    kernel.run("dlogits", send_id=False)
    for cell in EX1[8:]:
        kernel.run(cell, send_id=False)
    assert right(kernel.check("dhprebn", send_id=False))
    kernel.run("setup_ex3_dhpreact", send_id=False)
    kernel.run("ex3_dhprebn", send_id=False)
    assert right(kernel.check("ex3_dhprebn", send_id=False))
    assert right(kernel.check("dhprebn", send_id=False))
    # s55: an augmented assignment to an earlier answer in dlogits's cell is not dlogit_maxes's cell.
    kernel.run("dlogits", "dlogit_maxes *= 1\n" + CELLS["dlogits"], send_id=False)
    assert right(kernel.check("dlogits", send_id=False))
    line = kernel.check("dlogit_maxes", send_id=False)
    assert right(line) and "NameError" not in line, line
    # Trial 3's t47: a scratch cell `dprobs = dprobs * 2` was judged as dprobs's cell (a NameError it does not
    # hold), and the next check called the right dprobs cell wrong. The ninth trial's T27C: still WRONG, with a
    # note. The answer's own cell is the earlier run that does not compute dprobs from itself; the scratch cell
    # reassigned its value.
    for cell in EX1[1:3]:
        kernel.run(cell, send_id=False)
    kernel.run("scratch", "dprobs = dprobs * 2  # experiment\n", send_id=False)
    line = kernel.check("dprobs", send_id=False)
    assert re.fullmatch(r"dprobs         \| not checked: this cell is right as the grader runs it, but your dprobs is "
                        r"not its value: the cell you ran as In\[\d+\] \(it computes dprobs from itself: a scratch "
                        r"cell\?\) assigned dprobs after it ran; re-run this cell, then this check", line), line
    kernel.run("dcounts_sum_inv", send_id=False)
    line = kernel.check("dcounts_sum_inv", send_id=False)
    assert re.fullmatch(r"dcounts_sum_inv\| dprobs above is not its cell's value: the cell you ran as In\[\d+\] "
                        r"\(it computes dprobs from itself: a scratch cell\?\) assigned dprobs after it ran; re-run "
                        r"dprobs's cell, then the cells from it down to this one; this cell itself is right",
                        line), line


EX4_LOGITS_IN_PLACE = ("dlogits = logits\n    dlogits -= logits.max(1, keepdim=True).values\n    dlogits.exp_()\n"
                       "    dlogits /= dlogits.sum(1, keepdim=True)\n    dlogits[range(n), Yb] -= 1\n    dlogits /= n")


def trial4_what_a_cell_did_is_told_as_it_happened(kernel):
    """The fourth blind student trial's misleading lines: a typo assigning h in dh's cell was "stopped with an
    error" (M2); exercise 2's in-place change of probs was blamed on exercise 1's dlogits cell, and on exercise
    2's cell after its fix (M3); a cell fixed with .clone() was still told to "fix this cell" (M4); exercise 4
    quoted the notebook's n_hidden=64 as the student's for a network of 200 (M5); a cache entry changed in
    place was said to be stepped by the training loop (M6); batch norm's eps left out was blamed on sizes
    the cell never writes (M1); without cell ids, a scratch cell was judged as the answer with no word (M7)."""
    answered(kernel, EX1[:8])
    kernel.run("scratch", "globals().pop('dh', None)\n")
    kernel.run("dh", "h = dlogits @ W2.T\n")
    line = kernel.check("dh")
    assert line.startswith("dh             | WRONG: dh is not assigned: its answer cell assigns h, a value "
                           "of the forward pass, and never dh: write `dh = ...`, then re-run the forward pass's "
                           "cell"), line

    # The instructor trial's transformer: a right cell that raised on a wrong shape above it keeps its credit.
    kernel.run("dh", "dh = (dlogits @ W2.T).T\n")
    kernel.run("scratch", "globals().pop('dhpreact', None)\n")
    _, _, error = kernel.run("dhpreact", "dhpreact = (1 - h**2) * dh\n")
    assert error == "RuntimeError"
    line = kernel.check("dhpreact")
    assert line == "dhpreact       | dh above is wrong; with the true dh this cell is right", line
    # dh fixed, dhpreact's cell not run again: what stopped it is gone, and the grader finds the cell right (the
    # instructor trial's dry run, where exercise check said the two disagreed).
    kernel.run("dh")
    line = kernel.check("dhpreact")
    assert line == ("dhpreact       | not checked: dhpreact is not assigned: its answer cell stopped with an error "
                    "when it last ran, on the values above it then; as the grader runs it (with the true upstream "
                    "gradients) this cell itself is right: what it reads is right now: run it again"), line
    assert share(line) == 1.0

    answered(kernel, EX1[:8])
    kernel.run("ex2_dlogits", "dlogits = probs.detach()\ndlogits[range(n), Yb] -= 1\ndlogits /= n\n")
    assert "but this cell changes probs, a value of the forward pass, in place" in kernel.check("ex2_dlogits")
    line = kernel.check("dlogits")
    assert "changes probs" not in line, line
    kernel.run("ex2_dlogits", "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= n\n")
    line = kernel.check("ex2_dlogits")
    assert right(line) and line.endswith(
        " — but an earlier run of this cell changed probs, a value of the forward pass, in place (it no longer "
        "does): re-run the forward pass's cell, then the answers after it that read probs"), line
    kernel.run("dlogits")
    assert "changes probs" not in kernel.check("dlogits")

    answered(kernel, EX1[:-1])
    kernel.run("dhprebn", "dhprebn = dbndiff\ndhprebn += 1.0 / n * dbnmeani\n")
    kernel.run("dhprebn", "dhprebn = dbndiff.clone()\ndhprebn += 1.0 / n * dbnmeani\n")
    line = kernel.check("dhprebn")
    assert line == ("dhprebn        | dbndiff above was changed in place by an earlier run of this cell, which no "
                    "longer does: re-run the cells from dbndiff's down to this one"), line
    line = kernel.check("dbndiff")
    assert line.startswith("dbndiff        | your dbndiff is not what its cell computed: dhprebn's cell changed "
                           "it in place when it ran before (it no longer does): run dbndiff's cell and that one "
                           "again"), line
    kernel.run("dbnvar", "dbnvar = -0.5 * bnvar**-1.5 * dbnvar_inv\n")  # eps left out
    line = kernel.check("dbnvar")
    assert "WRONG" in line and "depends on the sizes" not in line and "never 32" not in line, line

    setup(kernel)
    kernel.run("setup_ex4_forward")
    kernel.run("ex4_backward", CELLS["ex4_backward"].replace("dbngain = (bnraw * dhpreact).sum(0, keepdim=True)",
                                                             "dbngain = (bnraw * dhpreact).sum(0)"))
    kernel.run("setup_ex4_check")
    line = kernel.check("ex4_dbngain")
    # exercise 4's network is not the lecture's 64 hidden neurons: no size of the lecture's is quoted for it
    assert "on the self-check's own batch, where n_hidden=" in line and "n_hidden=64" not in line, line
    assert "yours: " not in line and "the lecture's" not in line, line
    written = "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, num_classes=logits.shape[1])) / n"
    assert written in CELLS["ex4_backward"]
    kernel.run("ex4_backward", CELLS["ex4_backward"].replace(written, EX4_LOGITS_IN_PLACE))
    kernel.run("setup_ex4_check")
    out = kernel.run("check_ex4_training")[0]
    assert "manual_backward changes logits, which it is given, in place: anything else that reads them then " \
           "reads the changed values" in out and "steps" not in out.split("— but")[1], out

    kernel.restart()  # a front end that sends no cell ids, from the start
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "backprop_ninja.ipynb"
        nbformat.write(SOLVED, path)
        kernel.run("scratch", f"__session__ = {str(path)!r}\n", send_id=False)
        for cell in (*SETUP, *EX1[:9]):
            kernel.run(cell, send_id=False)
        kernel.run("scratch", "dh = dlogits @ W2.T * 2\n", send_id=False)
        line = kernel.check("dh", send_id=False)
        # The saved cell is right: the twelfth trial's F6, where the run's WRONG was not the grader's verdict
        assert "WRONG" not in line and "your dh is twice the right value" in line and "but its code is not dh's " \
            "cell in your saved notebook, which is right as the grader runs it: if In[" in line, line
        kernel.run("scratch", "del __session__\n", send_id=False)
    setup(kernel)


def test_without_cell_ids_a_cell_reassigning_an_answers_name_is_told_by_its_code(tmp_path):
    """nbclient (as nbgrader runs a notebook) and the classic Notebook send no cell ids: exercise 2's cell
    assigning exercise 1's dlogits, and dbnvar's cell assigning dbnvar_inv (a typo), were taken for the
    newest cell assigning the name, so the right cells of exercise 1 were said WRONG. Each cell is told
    by its code; where its code fits two cells alike and its check does not follow it, the line says
    which run it judged."""
    from nbclient import NotebookClient

    typo = "dbnvar_inv = -0.5 * (bnvar + 1e-5) ** -1.5 * dbnvar_inv\n"
    fused = "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\n"  # forgot / n
    # dC's right cell run before demb's: it binds dC to zeros, then stops
    stopped = "dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.view(-1), demb.view(-1, emb.shape[2]))\n"
    script = [*SETUP, *EX1[:16], ("dbnvar", typo), "check_dbnvar", "check_dbnvar_inv", "dbnvar_inv", "dbnvar",
              *EX1[17:], "dembcat", "dW1", "db1", "demb", "dC", ("del", "del demb\n"), ("dC", stopped), "demb",
              "check_dC", "dC", ("ex2_dlogits", fused), "check_ex2_dlogits",
              "check_dlogits", "dW2", "check_dW2", "dlogits", "check_dlogits", "dW2", "check_dW2",
              ("ex2_dlogits", fused), "check_dlogits", "dlogits", "dh",
              ("dhpreact", "dhpreact = dh\ndhpreact *= 1.0 - h**2\n"), "setup_ex3_dhpreact", "check_dh"]
    steps = [(s, CELLS[s]) if isinstance(s, str) else s for s in script]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code) for _, code in steps])
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}"}
    # A folder of its own: the solved notebook beside names.txt would be taken for this one's saved file.
    data(tmp_path)
    NotebookClient(nb, kernel_name="python3", timeout=600, allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    lines = []
    for (label, _), cell in zip(steps, nb.cells, strict=True):
        if label.startswith("check_"):
            assert {(o.output_type, o.get("name")) for o in cell.outputs} == {("stream", "stdout")}, cell.outputs
            lines.append("".join(o.text for o in cell.outputs).rstrip("\n"))
    dbnvar, dbnvar_inv, dC, ex2, dlogits, dW2, dlogits_fixed, dW2_fixed, dlogits_after, dh_changed = lines
    # The thirty-sixth student trial's: "WRONG ... your dC is all zeros", where the grader gives the cell full marks
    assert dC == ("dC             | not checked: this cell is right as the grader runs it, but it stopped with an "
                  "error when it last ran (NameError: name 'demb' is not defined), after it assigned dC: your dC is "
                  "what it left half made; run it again, then this check"), dC
    assert "WRONG" in dbnvar, dbnvar
    assert "WRONG" not in dbnvar_inv and "dbnvar's cell (a typo for dbnvar?) assigned dbnvar_inv after it ran; " \
           "re-run this cell" in dbnvar_inv, dbnvar_inv
    assert "WRONG" in ex2 and "judged on" not in ex2, ex2
    assert "WRONG" not in dlogits and "ex2_dlogits's cell (exercise 2) assigned dlogits after it ran; re-run this " \
           "cell" in dlogits, dlogits
    assert "WRONG" not in dW2 and "dlogits above is not its cell's value: ex2_dlogits's cell (exercise 2) " \
           "assigned dlogits" in dW2, dW2
    assert right(dlogits_fixed) and right(dW2_fixed), (dlogits_fixed, dW2_fixed)
    # Exercise 2's cell, then exercise 1's check at once: its code fits both cells by name, and reads none of
    # exercise 1's step's gradients, which exercise 1's own run did: exercise 2's, said as told by its code (the
    # fifteenth trial found the WRONG this test once asked for false: exercise 1's cell was right)
    assert dlogits_after.startswith("dlogits        | not checked: this cell is right as the grader runs it") and \
        "by its code ex2_dlogits's (exercise 2) assigned dlogits after it ran" in dlogits_after, dlogits_after
    # The ninth trial's T09C: exercise 3's read-only cell binding dhpreact was taken for dhpreact's cell run again
    # without the change, so the line said it "no longer does" change dh, which it still did
    assert "dhpreact's cell changed it in place afterwards" in dh_changed and "no longer" not in dh_changed, \
        dh_changed


def test_a_fix_not_saved_and_exercise_2_reading_exercise_1_are_told_as_the_grader_grades_them(tmp_path):
    """The ninth student trial's T07L (JupyterLab, cell ids sent): a wrong dprobs saved, then fixed and run, never
    saved again; the check said a plain ok, and the notebook handed in was graded 0 there: WRONG as saved, as a
    cell still blank in the file is, with the kernel's verdict beside it."""
    wrong = "dprobs = 1.0 / probs\n"
    nb = nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4)
    for cell in nb.cells:
        cell.source = wrong if cell.id == "dprobs" else "dcounts_sum_inv = None  # TODO\n" \
            if cell.id == "dcounts_sum_inv" else cell.source
    nbformat.write(nb, tmp_path / "mine.ipynb")
    data(tmp_path)
    kernel = Kernel(tmp_path, CELLS)
    try:
        setup(kernel, full=True)
        kernel.run("dlogprobs")
        kernel.run("dprobs", wrong)
        assert "WRONG" in kernel.check("dprobs")
        kernel.run("dprobs")
        line = kernel.check("dprobs")
        assert line == ("dprobs         | exact: True  | approximate: True  | maxdiff: 0 | shape (32, 27) ok — "
                        "but WRONG as saved: dprobs's cell in your saved notebook still holds an earlier attempt, "
                        "which the grader finds wrong, and the grader grades the saved notebook: save it, then run "
                        "this check again"), line
        kernel.run("dcounts_sum_inv")
        line = kernel.check("dcounts_sum_inv")
        assert line.startswith("dcounts_sum_inv| exact: ") and line.endswith(
            " — but WRONG as saved: dcounts_sum_inv's cell in your saved notebook is still blank, and the grader "
            "grades the saved notebook: save it, then run this check again"), line
        # The trial's T25: another cell reassigning the answer, the file still blank there: not "this cell is
        # right as the grader runs it" alone
        kernel.run("scratch", "dcounts_sum_inv = 2 * dcounts_sum_inv\n")
        line = kernel.check("dcounts_sum_inv")
        assert line.startswith("dcounts_sum_inv| not checked: this cell is right as the grader runs it, but your "
                               "dcounts_sum_inv is not its value: the cell you ran as In[") and line.endswith(
            " — but WRONG as saved: dcounts_sum_inv's cell in your saved notebook is still blank, and the grader "
            "grades the saved notebook: save it, then run this check again"), line
        kernel.run("dcounts_sum_inv")
        nbformat.write(nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4),
                       tmp_path / "mine.ipynb")  # saved
        assert right(kernel.check("dprobs")) and right(kernel.check("dcounts_sum_inv"))
        # The trial's T24C: an answer cell deleted from a file the front end does not name is said, as where it does
        nb = nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4)
        nb.cells = [c for c in nb.cells if c.get("id") != "dcounts_sum_inv"]
        nbformat.write(nb, tmp_path / "mine.ipynb")
        assert kernel.check("dcounts_sum_inv").startswith("dcounts_sum_inv| WRONG: your saved notebook has no "
                                                          "dcounts_sum_inv answer cell (deleted?)")
        nbformat.write(nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4),
                       tmp_path / "mine.ipynb")
        # The trial's T61: manual_backward edited to a wrong one and saved, not run: WRONG with the saved function's
        # verdict, as an atomic cell edited and saved is (it was "not checked")
        for cell in ("setup_ex4_forward", "ex4_backward", "setup_ex4_check"):
            kernel.run(cell)
        assert right(kernel.check("ex4_dC"))
        time.sleep(0.05)
        nb = nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4)
        backward = next(c for c in nb.cells if c.get("id") == "ex4_backward")
        mean = "num_classes=logits.shape[1])) / n\n"
        assert mean in backward.source
        backward.source = backward.source.replace(mean, "num_classes=logits.shape[1]))\n")
        nbformat.write(nb, tmp_path / "mine.ipynb")
        line = kernel.check("ex4_dC")
        assert line.startswith("ex4_dC         | WRONG: ex4_backward's cell as your saved notebook holds it (edited "
                               "after it last ran), which is what the grader grades: "), line
        # The trial's E206, without cell ids: exercise 2's cell reading exercise 1's dnorm_logits fits only exercise
        # 1's cell by its code, and its check ran right after it, exercise 2's cell never run otherwise: it is
        # exercise 2's, refused as the grader refuses it (the line said 'not run yet' after it ran).
        for cell in EX1[3:8]:
            kernel.run(cell, send_id=False)
        kernel.run("ex2_dlogits", "dlogits = dnorm_logits.clone()\n", send_id=False)
        line = kernel.check("ex2_dlogits", send_id=False)
        assert line.startswith("ex2_dlogits    | WRONG: NameError on line 1: name 'dnorm_logits' is not defined") \
            and "(judged on the cell you ran as In[" in line, line
        # The trial's T27C: a scratch cell computing an answer from itself (`dcounts = dcounts * 2`) after the right
        # answer cell was judged as that cell (WRONG: NameError, where the grader gives full marks)
        kernel.run("scratch", "dcounts = dcounts * 2\n", send_id=False)
        line = kernel.check("dcounts", send_id=False)
        assert line == ("dcounts        | not checked: this cell is right as the grader runs it, but your dcounts is "
                        "not its value: dnorm_logits's cell (a typo for dnorm_logits?) assigned dcounts after it ran; "
                        "re-run this cell, then this check"), line
        # The thirty-sixth trial's, without cell ids: dC started in a scratch cell, its saved cell the loop alone;
        # the scratch cell was judged as dC's ("all zeros ... move that code into dC's cell", where it was)
        loop = "for i in range(Xb.shape[0]):\n    for j in range(Xb.shape[1]):\n        dC[Xb[i, j]] += demb[i, j]\n"
        nb = nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4)
        next(c for c in nb.cells if c.get("id") == "dC").source = loop
        nbformat.write(nb, tmp_path / "mine.ipynb")
        for cell in EX1[:25]:
            kernel.run(cell, send_id=False)
        kernel.run("scratch", "dC = torch.zeros_like(C)\n", send_id=False)
        kernel.run("dC", loop, send_id=False)
        line = kernel.check("dC", send_id=False)
        assert line.startswith("dC             | WRONG: NameError on line 3: name 'dC' is not defined") and \
            "move that code" not in line, line
        # and its dcounts cell blanked after it ran as saved: re-running it, the line's only advice, set None again
        kernel.run("dcounts", send_id=False)
        kernel.run("dcounts", "dcounts = None  # TODO\n", send_id=False)
        line = kernel.check("dcounts", send_id=False)
        assert line.startswith("dcounts        | not checked: this cell is right as the grader runs it (you ran it as "
                               "saved as In[") and "set it to None after that: if that was dcounts's cell, blanked, " \
            "put its answer back before the notebook saves (the saved notebook still holds it) and run it; else " \
            "re-run dcounts's cell; then this check" in line, line
        # an edit not saved that changes a forward value in place: one "but" a line (a student trial read two)
        kernel.run("dbngain", "dbngain = (bnraw * dhpreact).sum(0, keepdim=True)\nbnraw.mul_(1.0)\n", send_id=False)
        line = kernel.check("dbngain", send_id=False)
        assert " — but this cell changes bnraw" in line and "; and your saved notebook's dbngain cell holds other " \
            "code" in line and line.count("but") == 1, line
        # exercise 2's cell changing probs in place, saved: exercise 1's dlogits line, right, was blamed for it
        inplace = "dlogits = probs\ndlogits[range(n), Yb] -= 1\ndlogits /= n\n"
        nb = nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4)
        next(c for c in nb.cells if c.get("id") == "ex2_dlogits").source = inplace
        nbformat.write(nb, tmp_path / "mine.ipynb")
        setup(kernel, send_id=False)
        for cell in EX1[:8]:
            kernel.run(cell, send_id=False)
        kernel.run("ex2_dlogits", inplace, send_id=False)
        assert "but this cell changes probs" in kernel.check("ex2_dlogits", send_id=False)
        line = kernel.check("dlogits", send_id=False)
        assert "changes probs" not in line and "WRONG" not in line, line
    finally:
        kernel.close()


def test_every_kind_of_line_says_what_the_saved_notebook_gets(tmp_path):
    """The tenth student trial (JupyterLab, cell ids sent): lines that promised what the file does not get.
    A half-credit line over a cell still blank in the file (D), a right run over a saved half-credit attempt
    (H), "this cell itself is right" under a wrong answer above, the cell blank in the file (B), and exercise 4's
    gradients and training run right in the kernel over the saved template of manual_backward (A: 86 lines of 16
    scenarios said ok where the grader gave 0). Each is WRONG as saved, with the kernel's line beside it."""
    released = nbformat.read(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", as_version=4)
    template = next(c.source for c in released.cells if c.get("id") == "ex4_backward")
    nb = nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4)
    for cell in nb.cells:
        cell.source = {"db1": "db1 = None  # TODO\n", "dcounts_sum_inv": "dcounts_sum_inv = None  # TODO\n",
                       "ex4_backward": template}.get(cell.get("id"), cell.source)
    nbformat.write(nb, tmp_path / "mine.ipynb")
    data(tmp_path)
    kernel = Kernel(tmp_path, CELLS)
    try:
        setup(kernel, full=True)
        for cell in EX1:
            kernel.run(cell)
        # exercise 4's blank, saved and never run, as the grader says of it (a student trial: "not checked:
        # manual_backward is not defined", where the grader and the README say "not attempted yet")
        assert kernel.check("ex4_dW2") == "ex4_dW2        | not attempted yet"
        half = "db1 = torch.zeros_like(b1)\n"
        kernel.run("db1", half)
        line = kernel.check("db1")
        assert line.startswith("db1            | WRONG (the grader gives half its points") and line.endswith(
            " — but WRONG as saved: db1's cell in your saved notebook is still blank, and the grader grades the saved "
            "notebook: save it, then run this check again"), line
        assert share(line) == 0
        next(c for c in nb.cells if c.get("id") == "db1").source = half
        nbformat.write(nb, tmp_path / "mine.ipynb")  # saved: the half is now the file's
        assert share(kernel.check("db1")) == 0.5
        kernel.run("db1")
        line = kernel.check("db1")
        assert line.startswith("db1            | exact: ") and " — but WRONG as saved: db1's cell in your saved " \
            "notebook still holds an earlier attempt, for which the grader gives half its points, and the grader " \
            "grades the saved notebook: save it" in line, line
        assert share(line) == 0.5
        kernel.run("dprobs", "dprobs = 1.0 / probs\n")
        kernel.run("dcounts_sum_inv")
        line = kernel.check("dcounts_sum_inv")
        assert line.startswith("dcounts_sum_inv| dprobs above is wrong; with the true dprobs this cell is right — "
                               "but WRONG as saved: dcounts_sum_inv's cell in your saved notebook is still blank"), line
        kernel.run("dprobs")
        # A right cell that changes an answer above in place, blank in the file: one dash, then "; and" (a student
        # trial read two "— but" in a row)
        kernel.run("dcounts_sum_inv", "x = dprobs\nx *= 1.0\n"
                                      "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\n")
        line = kernel.check("dcounts_sum_inv")
        assert line.count(" — but ") == 1 and " — but this cell changes dprobs in place" in line \
            and "; and WRONG as saved: dcounts_sum_inv's cell in your saved notebook is still blank" in line, line
        kernel.run("dprobs")
        # The eleventh trial's F3: a scratch cell setting a right answer to None was "not attempted yet"
        kernel.run("scratch", "dprobs = None\n")
        line = kernel.check("dprobs")
        assert line.startswith("dprobs         | not checked: this cell is right as the grader runs it, but your "
                               "dprobs is None: the cell you ran as In["), line
        kernel.run("dprobs")
        # F8: a float32 dlogits, accepted, stops dh's product; dh's line sent the student round the answers above
        kernel.run("dlogits", CELLS["dlogits"].replace("### END SOLUTION", "dlogits = dlogits.float()\n"))
        kernel.run("scratch", "del dh\n")
        assert kernel.run("dh", "dh = dlogits @ W2.T\n")[2] == "RuntimeError"
        line = kernel.check("dh")
        assert "dlogits above is torch.float32, where logits is torch.float64" in line, line
        # A third instructor trial's: the float32 made a step earlier (dnorm_logits), carried down by a right
        # dlogits (its clone): dh's line names where it was made, and that answer's own line says what it will stop
        kernel.run("dnorm_logits", CELLS["dnorm_logits"].replace("### END SOLUTION",
                                                                 "dnorm_logits = dnorm_logits.float()\n"))
        kernel.run("dlogits")
        line = kernel.check("dnorm_logits")
        assert "ok; but it is torch.float32, where norm_logits is torch.float64: right to its precision, yet a cell " \
               "below" in line and "WRONG" not in line, line
        assert kernel.run("dh", "dh = dlogits @ W2.T\n")[2] == "RuntimeError"
        line = kernel.check("dh")
        assert "dnorm_logits above is torch.float32 (dlogits, computed from it, too)" in line, line
        kernel.run("dnorm_logits")
        kernel.run("dlogits")
        line = kernel.check("dh")  # fixed above, dh's cell not run again
        assert "what it reads is right now: run it again" in line, line
        kernel.run("dh")
        for cell in ("setup_ex4_forward", "ex4_backward", "setup_ex4_check"):
            kernel.run(cell)
        for grade_id in ("ex4_dC", "ex4_db1", "ex4_dbnbias"):
            line = kernel.check(grade_id)
            assert line.startswith(f"{grade_id:<15s}| exact: ") and " — but WRONG as saved: ex4_backward's cell in " \
                "your saved notebook is still blank, and the grader grades the saved notebook: save it" in line, line
        out, _, _ = kernel.run("check_ex4_training")
        assert out.startswith("training       | 50 steps match autograd") and " — but WRONG as saved: ex4_backward's " \
            "cell in your saved notebook is still blank" in out, out
        nbformat.write(nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4),
                       tmp_path / "mine.ipynb")  # saved: every line is the kernel's again
        assert right(kernel.check("ex4_db1")) and right(kernel.check("db1"))
        assert kernel.run("check_ex4_training")[0].startswith("training       | 50 steps match autograd"), out
    finally:
        kernel.close()


def trial5_a_stopped_cell_names_what_it_read_and_what_to_do(kernel):
    """The fifth trial: exercise 3's answer run before the read-only cell that sets its dhpreact was sent back
    to exercise 1 (F); after a restart, a cell reading dh was told it read dlogprobs, and to answer it, though
    the saved notebook held every answer (K)."""
    kernel.restart()
    setup(kernel, full=True)
    _, _, error = kernel.run("ex3_dhprebn")
    assert error == "NameError"
    line = kernel.check("ex3_dhprebn")
    assert line == ("ex3_dhprebn    | dhpreact is not assigned: the read-only cell just above this answer sets it "
                    "(autograd's value, so that an earlier exercise cannot spoil this one): run that cell, then this "
                    "answer cell; with the true dhpreact this cell is right"), line
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "backprop_ninja.ipynb"
        nbformat.write(nbformat.from_dict(SOLVED), path)  # every answer saved, none run since the restart
        kernel.run("scratch", f"__session__ = {str(path)!r}\n")
        _, _, error = kernel.run("dhpreact")
        assert error == "NameError"
        line = kernel.check("dhpreact")
        assert line == ("dhpreact       | dh above is not assigned (its cell never ran, or stopped with an error); "
                        "with the true dh this cell is right"), line
        # Run All with dlogprobs left blank: a cell two answers down reads an empty dprobs, not dlogprobs
        kernel.run("dlogprobs", "dlogprobs = None  # TODO\n")
        for cell in ("dprobs", "dcounts_sum_inv"):
            kernel.run("scratch", f"globals().pop({cell!r}, None)\n")
            assert kernel.run(cell)[2] is not None, cell
        line = kernel.check("dcounts_sum_inv")
        assert line == ("dcounts_sum_inv| dlogprobs above is not attempted yet (dprobs, below it, is not assigned "
                        "either); with the true dprobs this cell is right"), line
        # The saved notebook as the grader will read it: a deleted answer cell, a copy with other code, a copy
        # of the same code, and a file a `git pull` left unreadable (C, D and L of the trial).
        answered(kernel, EX1[:10])
        assert right(kernel.check("dW2"))
        nb = nbformat.from_dict(SOLVED)
        index = next(i for i, c in enumerate(nb.cells) if c.get("id") == "dW2")
        saved = nb.cells[index]
        del nb.cells[index]
        nbformat.write(nb, path)
        assert kernel.check("dW2").startswith("dW2            | WRONG: your saved notebook has no dW2 answer cell "
                                              "(deleted?), so the grader finds no answer"), kernel.check("dW2")
        copy = nbformat.from_dict({**saved, "id": "copied-cell", "source": "dW2 = h.T @ dlogits * 1.0\n"})
        nb.cells[index:index] = [saved, copy]
        nbformat.write(nb, path)
        assert "holds 2 copies of the dW2 answer cell (a copied cell keeps its grade id) with different code" in \
            kernel.check("dW2")
        nb.cells[index + 1] = nbformat.from_dict({**saved, "id": "copied-cell"})
        nbformat.write(nb, path)
        assert right(kernel.check("dW2"))
        path.write_text("<<<<<<< HEAD\n" + path.read_text())
        assert right(kernel.check("dW2"))
        # An earlier run of a cell left n at 3 (G): a right cell was called WRONG, "all zeros", with no word of n.
        kernel.run("scratch", "n = Xb.shape[1]\n")
        kernel.run("dlogprobs")
        line = kernel.check("dlogprobs")
        assert re.fullmatch(
            r"dlogprobs      \| not checked: your n is 3, but the forward pass's is 32 \(n = Xb.shape\[0\]\): the cell "
            r"you ran as In\[\d+\] assigned n since \(a loop variable or a slip\); set it back \(run `n = "
            r"Xb.shape\[0\]`\), then re-run the answer cells that read it and this check", line), line
        kernel.run("scratch", "n = Xb.shape[0]\n")
        kernel.run("dlogprobs")
        assert right(kernel.check("dlogprobs"))
        # The ninth trial's T18: a loop variable n in an answer cell, named; exercise 4's checks never read the
        # notebook's n
        kernel.run("dlogprobs", CELLS["dlogprobs"] + "\nfor n in range(3):\n    pass\n")
        line = kernel.check("dprobs")
        assert re.search(r"your n is 2, .*: dlogprobs's cell \(In\[\d+\]\) assigned n since", line), line
        # the fourteenth trial's V1: re-running the answer cells sets it again: the line comes out first
        assert "take the line that assigns n out of that answer cell, set it back" in line, line
        assert "your n is" not in kernel.check("ex4_dC"), kernel.check("ex4_dC")
        kernel.run("scratch", "n = Xb.shape[0]\n")
        kernel.run("dlogprobs")
        # A parameter rebound in an answer cell (H): the check raised on the kernel's transposed W2.
        kernel.run("dh", "W2 = W2.T\ndh = dlogits @ W2\n")
        # the student trial's typo: the cell that assigned it is named (it was "a cell assigned W2")
        line = kernel.check("dh")
        assert re.match(r"dh +\| not checked: your W2 is not the parameter the forward pass read any more: dh's "
                        r"cell \(In\[\d+\]\) assigned W2 = \.\.\.", line), line
        setup(kernel)
        # The thirteenth trial's R15: `bngain = bngain * 1.0` changes no gradient: no verdict is withheld for it
        for cell in EX1:
            kernel.run(cell)
        kernel.run("dbnraw", CELLS["dbnraw"] + "\nbngain = bngain * 1.0\n")
        kernel.run("ex2_dlogits")
        assert right(kernel.check("ex2_dlogits")) and right(kernel.check("dbnraw"))
        assert "your bngain is not the parameter" in kernel.check("dbngain")
        setup(kernel)
        # No cell ids (A): the saved dW2 cell wrong, a scratch cell then assigning the right dW2: the line was
        # right with no word that the grader grades the saved cell.
        kernel.restart()  # a front end that sends no cell ids, from the start
        kernel.run("scratch", f"__session__ = {str(path)!r}\n", send_id=False)
        for cell in (*SETUP, *EX1[:9]):
            kernel.run(cell, send_id=False)
        wrong = "dW2 = dlogits.T @ h\n"
        kernel.run("dW2", wrong, send_id=False)
        time.sleep(0.05)
        nb = nbformat.from_dict(SOLVED)
        next(c for c in nb.cells if c.get("id") == "dW2").source = wrong
        nbformat.write(nb, path)  # saved after it ran, as the trial's notebook was
        time.sleep(0.05)
        kernel.run("scratch", "dW2 = h.T @ dlogits\n", send_id=False)
        line = kernel.check("dW2", send_id=False)
        # and, since the eighth trial, WRONG: a line without WRONG is one the grader accepts, and it grades the
        # saved cell
        assert wrong_as_saved(line, "dW2") and "looks transposed" in line and \
            "if the run judged here (In[" in line, line
        # B: exercise 2's cell, then exercise 1's check: the run was told for exercise 1's by the check after it,
        # and exercise 1's right cell was called WRONG; the saved notebook holds that code in exercise 2's cell.
        kernel.run("ex2_dlogits", send_id=False)
        line = kernel.check("dlogits", send_id=False)
        assert right(line) and "judged on" not in line, line
        assert right(kernel.check("ex2_dlogits", send_id=False)), kernel.check("ex2_dlogits", send_id=False)
        kernel.run("scratch", "del __session__\n")


def trial7_without_cell_ids_a_function_and_a_scratch_cell(kernel):
    """The seventh trial, the classic Notebook (no cell ids, no file name): after Run All, every check run
    again said "the cell never assigns dhpreact (judged on the cell you ran as In[65] ...)" of right answers:
    exercise 4's `def manual_backward`, whose locals bear every answer's name, was taken for each answer's
    cell. And a wrong answer cell with a right scratch cell run after it got a plain ok the grader, which
    grades the saved cell, gives nothing for: the wrong run is said, as the answer's cell it may be."""
    kernel.restart()  # a kernel that has never been sent a cell id
    for cell in SETUP:
        kernel.run(cell, send_id=False)
    for cell in SOLVED.cells:  # Run All: the setup cells of each exercise, its answers, exercise 4's function
        if cell.cell_type == "code" and not cell.id.startswith(("check_", "train", "plot", "cell-", "setup_install")) \
                and cell.id not in SETUP:
            kernel.run(cell.id, send_id=False)
    for grade_id in ("dhpreact", "dW1", "dC", "dbnmeani", "ex2_dlogits", "ex3_dhprebn", "dbngain"):
        line = kernel.check(grade_id, send_id=False)
        assert right(line) and "never assigns" not in line and "judged on" not in line, line
    # B: the student's folder holds their notebook, its dbnmeani cell wrong; a scratch cell run after it is right.
    wrong = "dbnmeani = dbndiff.sum(0, keepdim=True)\n"
    with tempfile.TemporaryDirectory() as folder:
        nb = nbformat.from_dict(SOLVED)
        next(c for c in nb.cells if c.get("id") == "dbnmeani").source = wrong
        nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")
        here = kernel.run("scratch", "import os\nprint(os.getcwd())\n")[0].strip()
        kernel.run("scratch", f"os.chdir({folder!r})\n")
        try:
            kernel.run("dbnmeani", wrong, send_id=False)
            assert "WRONG" in kernel.check("dbnmeani", send_id=False)
            kernel.run("scratch", "dbnmeani = -dbndiff.sum(0, keepdim=True)\n", send_id=False)
            line = kernel.check("dbnmeani", send_id=False)
            assert wrong_as_saved(line, "dbnmeani") and "keeps the plus sign" in line, line
            # The fifth TA trial: an answer cell written as exercise 3's read-only cell is that cell by its code
            # alone (nbconvert --execute sends no ids), and was `exact: True`; the saved cell is what is refused.
            cheat = "dhpreact = hpreact.grad.clone()\n"
            next(c for c in nb.cells if c.get("id") == "dhpreact").source = cheat
            nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")
            kernel.run("dhpreact", cheat, send_id=False)
            line = kernel.check("dhpreact", send_id=False)
            assert line.startswith("dhpreact       | WRONG: ") and "the grader refuses this cell" in line, line
            # The eighth trial: a scratch cell run after the (right, saved) dprobs cell, taken by its code for it:
            # WRONG, where the grader grades the saved cell and gives it full marks.
            kernel.run("dprobs", send_id=False)
            scratch = "dprobs = dlogprobs * probs\n"
            nb.cells.append(nbformat.v4.new_code_cell(scratch))  # the student's notebook, saved with it
            nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")
            kernel.run("scratch", scratch, send_id=False)
            line = kernel.check("dprobs", send_id=False)
            assert line.startswith("dprobs         | not checked: this cell is right as the grader runs it, but your "
                                   "dprobs is not its value: the cell you ran as In[") and "WRONG" not in line \
                and ", another cell your saved notebook keeps (every Run All runs it again: delete it), assigned " \
                    "dprobs after it ran" in line, line
            kernel.run("dprobs", send_id=False)
            assert right(kernel.check("dprobs", send_id=False))
            # A copy of the notebook beside it, alike: the one saved last is taken for the kernel's, and says the same
            nbformat.write(nb, Path(folder) / "backprop_ninja-Copy1.ipynb")
            line = kernel.check("dbnmeani", send_id=False)
            assert wrong_as_saved(line, "dbnmeani"), line
            # The ninth trial's T13C: never saved, the folder holding the released blank, one blank answer cell run
            # as released: the blank is in every copy and tells no file, so the lines are those of the same
            # notebook without the blank run (right), where 26 said "WRONG: ...'s cell as your saved notebook holds it".
            os.remove(Path(folder) / "backprop_ninja-Copy1.ipynb")
            # (copy2: the released file's time, from before the session, as in a student's folder)
            shutil.copy2(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", Path(folder))
            for cell in ("dbnmeani", "dhpreact", "dprobs"):
                kernel.run(cell, send_id=False)
            blank = next(c.source for c in nbformat.read(Path(folder) / "backprop_ninja.ipynb", as_version=4).cells
                         if c.get("id") == "dC")
            kernel.run("dC", blank, send_id=False)
            for grade_id in ("dprobs", "dW1", "dbnmeani"):  # (the file never saved: its blank said as a condition)
                line = kernel.check(grade_id, send_id=False)
                assert right_unsaved(line) and "saved notebook" not in line, line
            kernel.run("dC", send_id=False)
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\n")
            kernel.run("dbnmeani", send_id=False)
            kernel.run("dhpreact", send_id=False)

    # C: dcounts_sum_inv without keepdim: dcounts' (right) cell stops on its shape, and so does every cell
    # below; the lines below said to run dcounts's cell again, which stops again: the wrong answer is named.
    setup(kernel)
    kernel.run("scratch", f"for _name in {list(EX1)!r}:\n    globals().pop(_name, None)\n")  # a fresh kernel's
    kernel.run("dlogprobs")
    kernel.run("dprobs")
    kernel.run("dcounts_sum_inv", "dcounts_sum_inv = (dprobs * counts).sum(1)\n")
    for cell in EX1[EX1.index("dcounts_sum"):EX1.index("dh") + 1]:  # as the trial wrote them: no `= None` first
        kernel.run(cell, "dcounts = counts_sum_inv * dprobs + torch.ones_like(counts) * dcounts_sum\n"
                   if cell == "dcounts" else written(cell))
    line = kernel.check("dh")
    assert "fix dcounts_sum_inv (its shape is not its gradient's), then run the cells from dcounts_sum_inv's down " \
        "to this one" in line, line
    # The eighth trial: dprobs wrong too, above it: the line sent the student to fix dprobs, after which dcounts
    # stopped again on the shape. The shape is what stops the cells: its answer is the one to fix.
    kernel.run("dprobs", "dprobs = dlogprobs * probs\n")
    kernel.run("dcounts_sum_inv", "dcounts_sum_inv = (dprobs * counts).sum(1)\n")
    for cell in EX1[EX1.index("dcounts_sum"):EX1.index("dh") + 1]:
        kernel.run(cell, "dcounts = counts_sum_inv * dprobs + torch.ones_like(counts) * dcounts_sum\n"
                   if cell == "dcounts" else written(cell))
    line = kernel.check("dh")
    assert "fix dcounts_sum_inv (its shape is not its gradient's)" in line and \
        "(dprobs above it is wrong too)" in line and "fix dprobs" not in line, line
    kernel.run("dprobs")
    kernel.run("dcounts_sum_inv")
    for cell in EX1[EX1.index("dcounts_sum"):]:
        kernel.run(cell)
    # The eighth trial: a wrong value above (dcounts_sum without its upstream gradient) and dh's own shape error
    # (W2 not transposed): the lines below said to fix dcounts_sum, and dh's cell still stopped.
    kernel.run("scratch", f"for _name in {EX1[EX1.index('dcounts_sum'):]!r}:\n    globals().pop(_name, None)\n")
    kernel.run("dcounts_sum", "dcounts_sum = -counts_sum**-2\n")
    for cell in EX1[EX1.index("dcounts"):EX1.index("dhpreact") + 1]:
        kernel.run(cell, "dh = dlogits @ W2\n" if cell == "dh" else
                   written(cell))
    line = kernel.check("dhpreact")
    assert "dh's cell stops on an error of its own, with the true values above it too" in line and \
        "(dcounts_sum above it is wrong too)" in line, line
    for cell in EX1[EX1.index("dcounts_sum"):]:
        kernel.run(cell)
    # The eighth trial, the classic Notebook: dh's cell assigning h by a typo was "not run yet: ... run its answer
    # cell above", the same line again after running it; with cell ids it is named.
    kernel.restart()  # the trial's kernel: no run of a right dh cell in its history
    for cell in (*SETUP, *EX1[:EX1.index("dh")]):
        kernel.run(cell, send_id=False)
    kernel.run("dh", "h = dlogits @ W2.T\n", send_id=False)
    line = kernel.check("dh", send_id=False)
    assert "assigns h, a value of the forward pass, from gradients: if that is dh's answer cell, write `dh = ...` " \
        "there" in line and "run its answer cell above" not in line, line
    answered(kernel, EX1)


def trial9_a_small_error_that_grows_below_names_the_answer_it_comes_from(kernel):
    """The ninth student trial's M24: eps left out of dbnvar is within the tolerance on the notebook's batch, and
    in every answer down to dhprebn, and not in dW1 and dC, whose cells the grader gives full marks: both lines
    were WRONG ('wrong values (max abs diff 1.04e-07)'), with the pointer to the reference."""
    answered(kernel, EX1[:EX1.index("dbnvar")])
    kernel.run("dbnvar", "dbnvar = -0.5 * bnvar**-1.5 * dbnvar_inv\n")
    for cell in (*EX1[EX1.index("dbnvar") + 1:], "dembcat", "dW1", "db1", "demb", "dC"):
        kernel.run(cell)
    assert "WRONG" in kernel.check("dbnvar")
    assert right(kernel.check("dhprebn"))
    line = kernel.check("dW1")
    assert line == ("dW1            | dbnvar above is wrong: its error reaches this cell through dhprebn, within the "
                    "tolerance in every answer between (so their lines are right), larger here; with the true "
                    "dhprebn this cell is right"), line
    line = kernel.check("dC")
    assert "WRONG" not in line and line.startswith("dC             | dbnvar above is wrong: its error reaches this "
                                                   "cell through demb"), line
    kernel.run("dbnvar")
    # The trial's T46: dh computed from a wrong dlogprobs's chain, dlogprobs fixed, then exercise 2's cell, which
    # assigns dlogits too: the stale line names that cell
    kernel.run("dlogprobs", "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0\n")
    for cell in EX1[1:9]:
        kernel.run(cell)
    kernel.run("dlogprobs")
    kernel.run("ex2_dlogits")
    line = kernel.check("dh")
    assert line == ("dh             | re-run dh's cell: dlogits changed since it ran (ex2_dlogits's cell (exercise 2) "
                    "assigned it)"), line
    for cell in EX1[:9]:
        kernel.run(cell)


def trial10_without_cell_ids_a_notebook_never_saved(kernel):
    """The tenth student trial, the classic Notebook (no cell ids, no file name), the notebook never saved: the
    folder's file is the released blank, which the grader gives 0, and right lines said a plain ok (F); a right
    answer cell, then a scratch cell assigning its name, was WRONG with no word of which run it judged (E); a
    copy of an answer cell, run and saved, was "edited after it last ran: run it" (G). With cell ids and the
    file named, a cell never written was "not run yet ... after a restart" (no restart had happened)."""
    released = ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb"
    kernel.restart()  # a kernel that has never been sent a cell id
    here = kernel.run("scratch", "import os\nprint(os.getcwd())\n", send_id=False)[0].strip()
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(released, folder)
        data(folder)
        kernel.run("scratch", f"os.chdir({folder!r})\n", send_id=False)
        try:
            for cell in (*SETUP, *EX1[:EX1.index("dh") + 1]):
                kernel.run(cell, send_id=False)
            line = kernel.check("dh", send_id=False)
            note = (r"ok — but WRONG as saved, if backprop_ninja.ipynb in this folder is your notebook: it holds dh's "
                    r"cell blank and none of the cells you ran; make sure the run judged here \(In\[\d+\]\) is dh's "
                    r"own cell, then save it \(the grader grades that cell as saved\)$")
            assert right_unsaved(line) and re.search(note, line), line
            kernel.run("scratch", "dcounts = counts_sum_inv * dprobs\n", send_id=False)
            line = kernel.check("dcounts", send_id=False)
            judged = r"\(judged on the cell you ran as In\[\d+\], the newest run that assigns dcounts; if that was"
            assert "WRONG" in line and re.search(judged, line), line
            kernel.run("dcounts", send_id=False)
            assert right_unsaved(kernel.check("dcounts", send_id=False))
            # Saved, with a copy of dprobs's cell holding another attempt, which ran
            nb = nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4)
            at = next(i for i, c in enumerate(nb.cells) if c.get("id") == "dprobs")
            copy = nbformat.from_dict(json.loads(json.dumps(nb.cells[at])))
            copy.source, copy.id = "dprobs = 1.0 / probs\n", "dprobs-copy"
            nb.cells.insert(at + 1, copy)
            kernel.run("dprobs", copy.source, send_id=False)
            time.sleep(0.05)
            nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")
            line = kernel.check("dprobs", send_id=False)
            assert line.startswith("dprobs         | WRONG: your saved notebook holds 2 copies of the dprobs answer "
                                   "cell"), line
            kernel.run("dprobs", send_id=False)
            # The eleventh trial, the file saved and known: F2, a wrong dprobs cell saved, a right scratch cell run
            # after it, was "edited after it last ran"; F4, a saved half-credit dlogits fixed and run, not saved, was
            # a plain ok with a note; F5, db2's cell saved blank, a half-credit run, announced half (the file: 0)
            nb = nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4)
            half = "dlogits = dnorm_logits.clone()\n"
            for c in nb.cells:
                c.source = {"dprobs": "dprobs = 1.0 / probs\n", "dlogits": half,
                            "db2": "db2 = None  # TODO\n"}.get(c.get("id"), c.source)
            kernel.run("dprobs", "dprobs = 1.0 / probs\n", send_id=False)
            kernel.run("scratch", "dprobs = (1.0 / probs) * dlogprobs\n", send_id=False)
            kernel.run("dlogits", half, send_id=False)
            time.sleep(0.05)
            nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")
            line = kernel.check("dprobs", send_id=False)
            assert wrong_as_saved(line, "dprobs") and "edited after it last ran" not in line, line
            kernel.run("dlogits", send_id=False)
            line = kernel.check("dlogits", send_id=False)
            assert wrong_as_saved(line, "dlogits", " (the grader gives half its points)"), line
            kernel.run("db2", "db2 = dlogits.sum(0, keepdim=True)\n", send_id=False)
            line = kernel.check("db2", send_id=False)
            assert line.startswith("db2            | WRONG (right values, wrong shape; the grader gives half") and \
                " — but WRONG as saved: db2's cell in your saved notebook is still blank" in line, line
            for cell in ("dprobs", "db2"):
                kernel.run(cell, send_id=False)
            # F6: a wrong scratch cell saved under a right dprobs cell, run after it: the next answer's line said
            # "dprobs above is wrong", where the grader gives dprobs full marks
            nb = nbformat.read(ROOT / "solutions" / "backprop_ninja_solved.ipynb", as_version=4)
            at = next(i for i, c in enumerate(nb.cells) if c.get("id") == "dprobs")
            nb.cells.insert(at + 1, nbformat.v4.new_code_cell("dprobs = 1.0 / probs\n"))
            kernel.run("scratch", "dprobs = 1.0 / probs\n", send_id=False)
            kernel.run("dcounts_sum_inv", send_id=False)
            time.sleep(0.05)
            nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")
            line = kernel.check("dcounts_sum_inv", send_id=False)
            assert re.search(r"dprobs above is not its cell's value: the cell you ran as In\[\d+\], another cell "
                             r"your saved notebook keeps \(every Run All runs it again: delete it\), assigned dprobs "
                             r"after it", line), line
            for cell in ("dprobs", "dcounts_sum_inv"):
                kernel.run(cell, send_id=False)
            # The twelfth trial's F1: dbnbias's cell changing dhpreact in place (`dhpreact *= 2`) was taken for
            # dhpreact's own cell: the right dhpreact was WRONG "block_size-1 times too large", the change unseen
            kernel.run("dhpreact", send_id=False)
            kernel.run("dbnbias", "dbnbias = dhpreact.sum(0, keepdim=True)\ndhpreact *= 2\n", send_id=False)
            line = kernel.check("dhpreact", send_id=False)
            assert "WRONG" not in line and "dbnbias's cell changed it in place" in line, line
            for cell in ("dhpreact", "dbnbias"):
                kernel.run(cell, send_id=False)
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\n", send_id=False)
    # JupyterLab's kernel, the file named and still the released blank: a cell never written, never run, is not
    # attempted yet, not "not run yet ... (after a restart ...)"
    kernel.restart()
    setup(kernel, full=True)
    kernel.run("scratch", f"__session__ = {str(released)!r}\n")
    assert kernel.check("dprobs") == "dprobs         | not attempted yet"
    kernel.run("scratch", "del __session__\n")
    answered(kernel, EX1)


def trial12_without_cell_ids_which_run_the_saved_notebook_holds(kernel):
    """The twelfth student trial, the classic Notebook (no cell ids), the folder's notebook saved: exercise 2's
    cell, edited, run and saved, left its earlier run taken for exercise 1's right cell (F2: WRONG, half); a
    blank answer cell with the answer in a scratch cell below it was "edited after it last ran: run it" (F3);
    an edit of manual_backward saved, not run, was "save the notebook" (F4); a misspelt name run and saved was
    "else save the notebook" (F5); an unsaved wrong scratch cell was WRONG over a right saved cell (F6); two
    answers in one cell announced the chain-only half where the grader gives 0 (F8); `del dprobs` was a cell
    that "stopped with an error" (F7)."""
    kernel.restart()
    here = kernel.run("scratch", "import os\nprint(os.getcwd())\n", send_id=False)[0].strip()

    def run(cell, code=None):
        return kernel.run(cell, code, send_id=False)

    def check(grade_id):
        return kernel.check(grade_id, send_id=False)

    with tempfile.TemporaryDirectory() as folder:
        data(folder)

        def save(changes=None, scratch=None):
            nb = nbformat.from_dict(json.loads(json.dumps(SOLVED)))
            for c in nb.cells:
                c.source = (changes or {}).get(c.get("id"), c.source)
            if scratch is not None:  # (the cell it follows, its code)
                at = next(i for i, c in enumerate(nb.cells) if c.get("id") == scratch[0])
                nb.cells.insert(at + 1, nbformat.v4.new_code_cell(scratch[1]))
            time.sleep(0.05)
            nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")

        def fresh():
            kernel.restart()
            run("scratch", f"import os\nos.chdir({folder!r})\n")
            for cell in SETUP:
                run(cell)

        try:
            fresh()
            save()
            for cell in EX1[:EX1.index("dlogits") + 1]:
                run(cell)
            run("ex2_dlogits")
            wrong = "dlogits = (F.one_hot(Yb, logits.shape[1]) - F.softmax(logits, 1)) / n\n"
            run("ex2_dlogits", wrong)
            save({"ex2_dlogits": wrong})
            line = check("dlogits")
            assert line == ("dlogits        | not checked: this cell is right as the grader runs it, but your dlogits "
                            "is not its value: ex2_dlogits's cell (exercise 2) assigned dlogits after it ran; re-run "
                            "this cell, then this check"), line
            # F3: dprobs's cell saved blank, never run; the answer in a scratch cell below it, run, then saved
            fresh()
            blank = {"dprobs": "dprobs = None  # TODO\n"}
            save(blank)
            run("dlogprobs")
            run("scratch", CELLS["dprobs"])
            save(blank, ("dprobs", CELLS["dprobs"]))
            line = check("dprobs")
            assert "edited" not in line and re.search(
                r"not attempted yet; the run judged right here \(In\[\d+\]\) is another cell of your saved notebook: "
                r"put its code in dprobs's cell and save it$", line), line
            # F5: a misspelt name, run and saved over a right run: the name it binds is said, no "save the notebook"
            typo = "dprob = (1.0 / probs) * dlogprobs\n"
            run("dprobs")
            run("dprobs", typo)
            save({"dprobs": typo})
            line = check("dprobs")
            assert "its answer cell assigns dprob and never dprobs" in line and "save the notebook" not in line, line
            # V10: a scratch cell computing dprobs from itself, kept in the saved notebook: Run All runs it again
            save(None, ("dprobs", "dprobs = dprobs * 2\n"))
            run("dprobs")
            run("scratch", "dprobs = dprobs * 2\n")
            line = check("dprobs")
            assert "(it computes dprobs from itself: a scratch cell your saved notebook keeps, which every Run All " \
                "runs again: delete it)" in line, line
            # F6: an unsaved wrong scratch cell under a right saved cell is not WRONG: the saved cell is right
            save()
            run("dprobs")
            run("scratch", "dprobs = 1.0 / probs\n")
            line = check("dprobs")
            assert line.startswith("dprobs         | not checked: the run judged here (In[") and "WRONG" not in line \
                and "not multiplied by dlogprobs" in line and "which is right as the grader runs it" in line, line
            # saved, the scratch cell is the notebook's own: "re-run that cell" read as the scratch (V12)
            save(None, ("dprobs", "dprobs = 1.0 / probs\n"))
            line = check("dprobs")
            assert re.search(r"not checked: this cell is right as the grader runs it, but your dprobs is not its "
                             r"value: the cell you ran as In\[\d+\], another cell your saved notebook keeps \(every "
                             r"Run All runs it again: delete it\)", line), line
            run("dprobs")
            # F7: an answer deleted by a scratch cell did not stop with an error
            run("scratch", "del dprobs\n")
            line = check("dprobs")
            assert re.search(r"\| not checked: dprobs is not assigned: the cell you ran as In\[\d+\] deleted it "
                             r"\(`del dprobs`\): run dprobs's cell again, then this check$", line), line
            # F8: two answers in one cell; the grader grades dcounts_sum_inv by its own cell, blank: 0
            two = CELLS["dprobs"] + "\n" + CELLS["dcounts_sum_inv"]
            save({"dprobs": two, "dcounts_sum_inv": "dcounts_sum_inv = None  # TODO\n"})
            run("dprobs", two)
            line = check("dcounts_sum_inv")
            assert re.search(r"^dcounts_sum_inv\| WRONG: dcounts_sum_inv's cell in your saved notebook is still blank: "
                             r"the run judged here \(In\[\d+\]\) is dprobs's cell, which assigns dcounts_sum_inv too",
                             line), line
            # F4: manual_backward edited back to an attempt run before, saved, not run: "you edited it since"
            fresh()
            save()
            for cell in (*EX1, "setup_ex4_forward"):
                run(cell)
            half = CELLS["ex4_backward"].replace("dW2 = h.T @ dlogits", "dW2 = h.T @ dlogits * 0.5")
            assert half != CELLS["ex4_backward"]
            for code in (half, None):
                run("ex4_backward", code)
                run("setup_ex4_check")
            save({"ex4_backward": half})
            line = check("ex4_dW2")
            assert re.search(r"WRONG as saved: .* if the run judged here \(In\[\d+\]\) was ex4_backward's cell, you "
                             r"edited it since: run it and the cell after it", line) \
                and "save the notebook" not in line, line
        finally:
            run("scratch", f"os.chdir({here!r})\n")
    kernel.restart()
    setup(kernel, full=True)
    answered(kernel, (*EX1, "dembcat", "dW1", "db1", "demb"))
    # V3, with cell ids: dC's answer finished by a loop in a cell below it (JupyterLab's Split Cell): the
    # grader runs dC's cell alone ("your dC is all zeros" said nothing of the loop)
    kernel.run("dC", "dC = torch.zeros_like(C)\n")
    split = "for i in range(Xb.shape[0]):\n    for j in range(Xb.shape[1]):\n        dC[Xb[i, j]] += demb[i, j]\n"
    kernel.run("dC-split", split)
    line = kernel.check("dC")
    assert line.startswith("dC             | WRONG: ") and re.search(
        r"your dC here is right only because the cell you ran as In\[\d+\] changed it in place after dC's cell "
        r"ran; the grader runs dC's cell alone: move that code into dC's cell$", line), line
    # the fifteenth trial: the split cell run twice, "all zeros" alone
    kernel.run("dC-split", split)
    line = kernel.check("dC")
    assert line.startswith("dC             | WRONG: ") and re.search(
        r"— and the cell you ran as In\[\d+\] changed your dC in place after dC's cell ran \(run again, it changes it "
        r"again\); the grader runs dC's cell alone: move that code into dC's cell$", line), line
    kernel.run("dC")
    # V6: an earlier answer changed by a method (`.mul_`) is quoted as the student wrote it, not as an alias
    kernel.run("dcounts", CELLS["dcounts"] + "\ndprobs.mul_(2)\n")
    line = kernel.check("dprobs")
    assert "dcounts's cell changed it in place afterwards (`dprobs.mul_(2)` there changes dprobs itself" in line, line
    # V4: the answer's own cell reassigns its forward value: re-running the forward pass cannot fix it
    kernel.run("dprobs", "probs = probs.detach() * 1.0\n" + CELLS["dprobs"])
    line = kernel.check("dprobs")
    assert "dprobs's own cell assigns probs, so it is not the forward pass's tensor any more: take that line out" \
        in line, line
    answered(kernel, EX1)
    # D2, the file named: a wrong edit run and not saved, over a right saved cell: WRONG (the next save makes it
    # the graded code), and the saved notebook's right cell said
    with tempfile.TemporaryDirectory() as folder:
        nbformat.write(SOLVED, Path(folder) / "backprop_ninja.ipynb")
        kernel.run("scratch", f"__session__ = {str(Path(folder) / 'backprop_ninja.ipynb')!r}\n")
        kernel.run("dprobs", "dprobs = 1.0 / probs\n")
        line = kernel.check("dprobs")
        assert line.startswith("dprobs         | WRONG: ") and line.endswith(
            "(your saved notebook still holds dprobs's earlier code, which the grader finds right: this code replaces "
            "it at the next save)"), line
        # V11: the notebook is JupyterLab's copy of the one the course collects, beside it
        shutil.copy(Path(folder) / "backprop_ninja.ipynb", Path(folder) / "backprop_ninja-Copy1.ipynb")
        kernel.run("scratch", f"__session__ = {str(Path(folder) / 'backprop_ninja-Copy1.ipynb')!r}\n")
        kernel.run("dprobs")
        line = kernel.check("dprobs")
        assert right(line) and line.endswith(
            "; but this notebook is backprop_ninja-Copy1.ipynb, a copy: the course collects and grades "
            "backprop_ninja.ipynb beside it, so put your answers there (or close it and rename this one to that "
            "name)"), line
        # ... and a WRONG line there, saved, says it too (the twenty-second trial's V5: a fix in the copy gets nothing)
        copy = nbformat.from_dict(SOLVED)
        next(c for c in copy.cells if c.get("id") == "dprobs").source = "dprobs = 1.0 / probs\n"
        nbformat.write(copy, Path(folder) / "backprop_ninja-Copy1.ipynb")
        kernel.run("dprobs", "dprobs = 1.0 / probs\n")
        line = kernel.check("dprobs")
        assert line.startswith("dprobs         | WRONG: ") and line.endswith(
            "; and this notebook is backprop_ninja-Copy1.ipynb, a copy: the course collects and grades "
            "backprop_ninja.ipynb beside it, so put your answers there (or close it and rename this one to that "
            "name)"), line
        kernel.run("scratch", "del __session__\n")
    answered(kernel, EX1)
    # JupyterLab's Merge Cells: dcounts_sum_inv's answer in dprobs's cell, its own never run since the restart
    kernel.restart()
    setup(kernel, full=True)
    kernel.run("dlogprobs")
    kernel.run("dprobs", CELLS["dprobs"] + "\n" + CELLS["dcounts_sum_inv"])
    line = kernel.check("dcounts_sum_inv")
    assert line.endswith("your dcounts_sum_inv is the value dprobs's cell assigned, and the grader grades "
                         "dcounts_sum_inv by its own cell alone: write it there (not in dprobs's cell), run it, then "
                         "this check"), line
    answered(kernel, EX1)
    # V5: a typo binding another name in dbnvar's cell: the cell below does not say it stopped with an error
    kernel.run("scratch", "del dbnvar\n")
    kernel.run("dbnvar", "dbnvar_inv = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv\n")
    kernel.run("dbndiff2")
    line = kernel.check("dbndiff2")
    assert "dbnvar above is not assigned (dbnvar's cell ran, and assigns dbnvar_inv instead)" in line, line
    answered(kernel, EX1)


def trial13_without_cell_ids_a_copy_beside_the_notebook(kernel):
    """The thirteenth student trial, the classic Notebook: a copy of the notebook beside it (File > Make a Copy,
    a snapshot) left the check with no saved file at all: an answer run and not saved was a plain ok where the
    grader gives 0 (F1), a scratch cell's value was judged as the answer (F4), a scratch cell's `dprobs = None` was
    "not attempted yet" over a right saved cell (F5), a deleted cell was ok (F6). The kernel's notebook is the one
    holding the cells it ran as saved, saved last."""
    kernel.restart()
    here = kernel.run("scratch", "import os\nprint(os.getcwd())\n", send_id=False)[0].strip()
    released = nbformat.read(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", as_version=4)

    def run(cell, code=None):
        if code is not None and cell in cells:
            cells[cell].source = code
        return kernel.run(cell, code if code is not None else cells[cell].source, send_id=False)

    with tempfile.TemporaryDirectory() as folder:
        data(folder)
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        cells = {c.get("id"): c for c in nb.cells if c.cell_type == "code"}
        saves = []

        def save():
            time.sleep(0.05)
            saves.append(Path(folder) / f"snapshot_{len(saves)}.ipynb")
            for path in (Path(folder) / "backprop_ninja.ipynb", saves[-1]):
                nbformat.write(nb, path)

        nbformat.write(nb, Path(folder) / "backprop_ninja-Copy1.ipynb")  # an old copy, never run
        try:
            run("scratch", f"os.chdir({folder!r})\n")
            for cell in SETUP:
                run(cell)
            run("dlogprobs", CELLS["dlogprobs"])
            save()
            run("dprobs", CELLS["dprobs"])
            line = kernel.check("dprobs", send_id=False)
            assert wrong_as_saved(line, "dprobs") and "grades: not attempted yet" in line, line
            save()
            at = nb.cells.index(cells["dprobs"])
            for scratch in ("dprobs = None\n", "dprobs = 1.0 / probs\n"):
                run("dprobs")
                nb.cells.insert(at + 1, nbformat.v4.new_code_cell(scratch))
                kernel.run("scratch", scratch, send_id=False)
                save()
                line = kernel.check("dprobs", send_id=False)
                said = (r"not checked: this cell is right as the grader runs it, but your dprobs is (None|not its "
                        r"value): the cell you ran as In\[\d+\], another cell your saved notebook keeps \(every Run "
                        r"All runs it again: delete it\), assigned dprobs after it ran")
                assert re.search(said, line), line
                del nb.cells[at + 1]
            del nb.cells[at]
            save()
            line = kernel.check("dprobs", send_id=False)
            assert "WRONG: your saved notebook has no dprobs answer cell (deleted?)" in line, line
        finally:
            run("scratch", f"os.chdir({here!r})\n")
    kernel.restart()
    setup(kernel, full=True)
    answered(kernel, EX1)


def trial14_without_cell_ids_which_notebook_is_the_students(kernel):
    """The fourteenth student trial, the classic Notebook: `manual_backward` edited and saved, not run, the only
    answer cell the file holds, was a plain ok (the file, holding no cell the kernel ran as saved, was not taken
    for the kernel's); a download of an older version saved beside the notebook (`backprop_ninja (1).ipynb`) was
    taken for it; work in a copy (`backprop_ninja-Copy1.ipynb`) said nothing of the blank notebook the course
    collects."""
    kernel.restart()
    here = kernel.run("scratch", "import os\nprint(os.getcwd())\n", send_id=False)[0].strip()
    released = nbformat.read(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", as_version=4)

    def notebook(changes):
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        for c in nb.cells:
            c.source = changes.get(c.get("id"), c.source)
        return nb

    with tempfile.TemporaryDirectory() as folder:
        data(folder)
        path = Path(folder) / "backprop_ninja.ipynb"
        nbformat.write(notebook({"ex4_backward": CELLS["ex4_backward"]}), path)
        try:
            kernel.run("scratch", f"os.chdir({folder!r})\n", send_id=False)
            for cell in (*SETUP, "setup_ex4_forward", "ex4_backward", "setup_ex4_check"):
                kernel.run(cell, send_id=False)
            assert right(kernel.check("ex4_dC", send_id=False))
            hard = CELLS["ex4_backward"].replace("n = Xb.shape[0]", "n = 32")
            assert hard != CELLS["ex4_backward"]
            time.sleep(0.05)
            nbformat.write(notebook({"ex4_backward": hard}), path)
            line = kernel.check("ex4_dC", send_id=False)
            assert line.startswith("ex4_dC         | WRONG: ex4_backward's cell as your saved notebook holds it "
                                   "(edited after it last ran)"), line
            nbformat.write(notebook({"ex4_backward": CELLS["ex4_backward"]}), path)
            # exercise 1, right and saved; an older download saved beside it afterwards
            for cell in ("dlogprobs", "dprobs"):
                kernel.run(cell, send_id=False)
            nbformat.write(notebook({c: CELLS[c] for c in ("dlogprobs", "dprobs", "ex4_backward")}), path)
            time.sleep(0.05)
            nbformat.write(notebook({"dlogprobs": CELLS["dlogprobs"], "dprobs": "dprobs = 1.0 / probs\n"}),
                           Path(folder) / "backprop_ninja (1).ipynb")
            assert right(kernel.check("dprobs", send_id=False))
            # A student trial's File > Make a Copy: exercise 2's answer run and saved in the copy alone was judged
            # against the notebook it copies, "save the notebook" after every save. The copy holds every answer
            # this kernel ran as the original holds them, and one more: it is the kernel's notebook
            kept = {c: CELLS[c] for c in ("dlogprobs", "dprobs", "ex4_backward")}
            kernel.run("ex2_dlogits", written("ex2_dlogits"), send_id=False)
            time.sleep(0.05)
            nbformat.write(notebook({**kept, "ex2_dlogits": written("ex2_dlogits")}),
                           Path(folder) / "backprop_ninja-Copy1.ipynb")
            line = kernel.check("ex2_dlogits", send_id=False)
            assert "WRONG as saved in the notebook the course collects: this notebook is backprop_ninja-Copy1.ipynb, " \
                   "a copy" in line and "save the notebook" not in line, line
            Path(folder, "backprop_ninja-Copy1.ipynb").unlink()
            # work in a copy, the course's notebook blank
            path.unlink()
            nbformat.write(notebook({}), path)
            os.utime(path, (time.time() - 3600,) * 2)  # as released, before the session: never saved in it
            nbformat.write(notebook({c: CELLS[c] for c in ("dlogprobs", "dprobs")}),
                           Path(folder) / "backprop_ninja-Copy1.ipynb")
            line = kernel.check("dprobs", send_id=False)  # (the fifteenth trial: no WRONG, where the grader gives 0)
            assert "approximate: True" in line and line.endswith(
                "ok — but WRONG as saved in the notebook the course collects: this notebook is "
                "backprop_ninja-Copy1.ipynb, a copy: the course collects and grades backprop_ninja.ipynb beside it, so "
                "put your answers there (or close it and rename this one to that name)"), line
            Path(folder, "backprop_ninja-Copy1.ipynb").unlink()
            # F3: exercise 2's blank cell, run after exercise 1, sets dlogits to None; dh's cell then stops on it,
            # which is not "not attempted yet" (exercise 1's dlogits is), and is to be re-run, not answered
            kernel.restart()
            kernel.run("scratch", f"import os\nos.chdir({folder!r})\n", send_id=False)
            nbformat.write(notebook({c: written(c) for c in EX1}), path)
            for cell in SETUP:
                kernel.run(cell, send_id=False)
            for cell in EX1[:EX1.index("dlogits") + 1]:
                kernel.run(cell, written(cell), send_id=False)
            blank = next(c.source for c in released.cells if c.get("id") == "ex2_dlogits")
            kernel.run("ex2_dlogits", blank, send_id=False)
            assert kernel.check("ex2_dlogits", send_id=False).endswith("| not attempted yet")
            assert kernel.run("dh", written("dh"), send_id=False)[2] == "TypeError"
            line = kernel.check("dh", send_id=False)
            assert "not attempted" not in line and "ex2_dlogits's cell (exercise 2) assigned dlogits after" in line \
                and "re-run dlogits's cell" in line, line
            # F6: the notebook renamed (mywork.ipynb), the one the course collects gone: every right line was a
            # plain ok, in the classic Notebook and JupyterLab alike
            path.rename(Path(folder) / "mywork.ipynb")
            for cell in ("dlogits", "dh"):
                kernel.run(cell, written(cell), send_id=False)
            renamed = ("ok — but WRONG as saved in the notebook the course collects: this notebook is mywork.ipynb, "
                       "and the course collects and grades backprop_ninja.ipynb, which this folder does not hold: "
                       "rename this one to backprop_ninja.ipynb")
            line = kernel.check("dh", send_id=False)
            assert "approximate: True" in line and line.endswith(renamed), line
            kernel.run("scratch", f"__session__ = {str(Path(folder) / 'mywork.ipynb')!r}\n", send_id=False)
            line = kernel.check("dh", send_id=False)
            assert "approximate: True" in line and line.endswith(renamed), line
            # F9: JupyterLab's File > Rename keeps the kernel and the name it started with: the copy, renamed to
            # the course's name, was still told to be a copy
            kernel.run("scratch", f"__session__ = {str(Path(folder) / 'backprop_ninja-Copy1.ipynb')!r}\n",
                       send_id=False)
            Path(folder, "mywork.ipynb").rename(path)
            assert right(line := kernel.check("dh", send_id=False)) and "but" not in line, line
            kernel.run("scratch", "del __session__\n", send_id=False)
            # V3: dh's cell saved with the typo `h = ...` and the notebook run top to bottom: every line below said
            # to run dh's cell (or that it never ran), which assigns h again
            typo = {**{c: written(c) for c in EX1}, "dh": "h = dlogits @ W2.T\n"}
            nbformat.write(notebook(typo), path)
            kernel.restart()  # Run All in a fresh kernel, as the trial's
            kernel.run("scratch", f"import os\nos.chdir({folder!r})\n", send_id=False)
            for cell in (*SETUP, *EX1):
                kernel.run(cell, typo.get(cell), send_id=False)
            for grade_id in ("dhpreact", "dhprebn"):
                line = kernel.check(grade_id, send_id=False)
                assert "dh's answer cell assigns h" in line and "run the cell of dh" not in line, line
            # V6: the same typo run in the classic Notebook, not saved: the line named no cell, and the typo stayed
            nbformat.write(notebook({c: written(c) for c in EX1}), path)
            for cell in (*SETUP[2:], *EX1[:EX1.index("dh") + 1]):  # dh right first, then the typo
                kernel.run(cell, written(cell) if cell in EX1 else None, send_id=False)
            kernel.run("dh", "h = dlogits @ W2.T\n", send_id=False)
            line = kernel.check("dh", send_id=False)
            assert re.search(r"the cell you ran as In\[\d+\] assigns h, .*write `dh = \.\.\.` there", line), line
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\n", send_id=False)
    kernel.restart()
    setup(kernel, full=True)
    answered(kernel, EX1)
    # F8: an answer cell merged with its check cell (refused: try/except) printed that check's line inside a later
    # check, once per batch: the grader runs no refused cell before the next, nor does the check
    kernel.run("dprobs", "dprobs = 1.0 / probs\n" + CELLS["check_dprobs"])
    kernel.run("dcounts_sum_inv")
    assert kernel.check("dcounts_sum_inv").startswith("dcounts_sum_inv| dprobs above is wrong")  # one line
    answered(kernel, EX1)
    # F7: right values laid out otherwise (demb a view of a transpose) stop dC's `.view`, which the grader's
    # tensors do not: "run it again" stopped again
    kernel.run("dembcat", "dembcat = (W1 @ dhprebn.T).T\n")
    kernel.run("demb", "demb = dembcat.view(emb.shape[0], emb.shape[1], emb.shape[2])\n")
    assert right(kernel.check("demb"))
    scatter = "dC = torch.zeros_like(C).index_add_(0, Xb.view(-1), demb.view(-1, C.shape[1]))\n"
    kernel.run("scratch", "del dC\n")
    assert kernel.run("dC", scatter)[2] == "RuntimeError"
    line = kernel.check("dC")
    assert "run it again" not in line and "view size is not compatible" in line and \
        "your demb is not contiguous in memory" in line and "use .reshape in this cell" in line, line
    answered(kernel, EX1)
    # V4: exercise 1's dhpreact wrong, dbngain computed from it, then exercise 3's read-only cell (autograd's
    # dhpreact) run before dbngain's check: "dhpreact changed since it ran" named neither
    kernel.run("dhpreact", "dhpreact = (1.0 - h) * dh\n")
    kernel.run("dbngain")
    kernel.run("setup_ex3_dhpreact")
    line = kernel.check("dbngain")
    assert "dhpreact changed since it ran (the read-only cell above ex3_dhprebn's (exercise 3) set it to autograd's " \
        "dhpreact, not what your dhpreact's cell gave: its own line says why)" in line, line
    # The thirteenth trial's `[:, Yb]`, named by the grader's catalogue and by no check line
    kernel.run("dlogprobs", "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[:, Yb] = -1.0 / n\n")
    line = kernel.check("dlogprobs")
    assert line.startswith("dlogprobs      | WRONG") and "your dlogprobs[:, Yb] is every row at each of Yb's " \
        "columns" in line, line
    answered(kernel, EX1)


def trial15_a_given_name_rebound_and_a_fused_cell_run_before_the_atomic_check(kernel):
    """The fifteenth student trial: a scratch cell's `F = 9.81` was "run it again" (again and again), `Yb =
    Yb.float()` "reading your answer raised IndexError" on every line, `Xb = Xb[:5]` blamed n; a blank answer below
    a slip was "not checked: your n is 3"; in the classic Notebook, exercise 2's cell run after exercise 1's right
    dlogits, then exercise 1's check, was WRONG on the right cell; a stale line over a cell the saved notebook holds
    blank had no WRONG as saved."""
    kernel.restart()
    setup(kernel, full=True)
    # F1: classic, never saved
    for cell in EX1[:EX1.index("dlogits") + 1]:
        kernel.run(cell, written(cell), send_id=False)
    # the sixteenth trial's F6: two copies of the released notebook beside the kernel, neither saved: plain ok
    here = kernel.run("scratch", "import os\nprint(os.getcwd())\n", send_id=False)[0].strip()
    with tempfile.TemporaryDirectory() as folder:
        for name in ("backprop_ninja.ipynb", "backprop_ninja-Copy1.ipynb"):
            shutil.copy2(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", Path(folder) / name)
        kernel.run("scratch", f"os.chdir({folder!r})\n", send_id=False)
        try:
            line = kernel.check("dprobs", send_id=False)
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\n", send_id=False)
    said = ("ok — but WRONG as saved, if backprop_ninja.ipynb in this folder is your notebook: it holds dprobs's cell "
            "blank")
    there = "if your notebook is backprop_ninja-Copy1.ipynb, the course still collects backprop_ninja.ipynb"
    assert "approximate: True" in line and said in line and there in line, line
    kernel.run("ex2_dlogits", written("ex2_dlogits"), send_id=False)
    assert right(kernel.check("dlogits", send_id=False))  # the same values
    assert right(kernel.check("ex2_dlogits", send_id=False))
    kernel.run("ex2_dlogits", "dlogits = F.softmax(logits, 1) / n\n", send_id=False)
    line = kernel.check("dlogits", send_id=False)
    assert line.startswith("dlogits        | not checked: this cell is right") and \
        "ex2_dlogits's (exercise 2) assigned dlogits after it ran" in line, line
    line = kernel.check("ex2_dlogits", send_id=False)
    assert line.startswith("ex2_dlogits    | WRONG") and "not run yet" not in line, line
    # F3: a module's name rebound by a scratch cell
    answered(kernel, EX1)
    kernel.run("scratch", "F = 9.81  # force\n")
    kernel.run("dlogits", "dlogits = dnorm_logits.clone() + F.one_hot(logits.max(1).indices, "
               "num_classes=logits.shape[1]) * dlogit_maxes\n")
    line = kernel.check("dlogits")
    assert re.search(r"your F is not torch\.nn\.functional any more: the cell you ran as In\[\d+\] assigned F since "
                     r".*run `import torch\.nn\.functional as F`", line), line
    line = kernel.check("ex4_dC")  # the sixteenth trial: exercise 4's lines said "run the cells above"
    assert line.startswith("ex4_dC         | not checked: your F is not torch.nn.functional any more"), line
    kernel.run("scratch", "import torch.nn.functional as F\n")
    kernel.run("dlogits")
    # F4, F7: the batch rebound or cut by a scratch cell
    for scratch in ("Yb = Yb.float()  # for plotting\n", "Xb = Xb[:5]\n"):
        kernel.run("scratch", scratch)
        name = scratch[:2]
        for grade_id in ("dlogprobs", "dC"):
            line = kernel.check(grade_id)
            assert re.search(rf"not checked: your {name} is not the batch the forward pass read any more: the cell "
                             rf"you ran as In\[\d+\] assigned {name} since", line) and "your n is" not in line, line
        answered(kernel, EX1)
    # V5: a blank answer below a slip is not attempted, whatever the slip
    kernel.run("scratch", "n = 3\n")
    kernel.run("dbnmeani", "dbnmeani = None  # TODO\n")
    assert kernel.check("dbnmeani").endswith("| not attempted yet")
    kernel.run("scratch", "n = Xb.shape[0]\n")
    # V1: a check cell edited to another name
    out = kernel.run("scratch", "check('dprob')\n")[0]
    assert out == ("dprob          | not checked: dprob is not an answer of exercise makemore-mlp: this check cell was "
                   "edited; restore `check(\"dprobs\")`\n"), out
    # and to another answer's: dlogprobs's line said nothing of dprobs, unchecked
    kernel.run("dprobs", "dprobs = probs * dlogprobs\n")
    out = kernel.run("check_dprobs", "check('dlogprobs')\n")[0]
    assert out.startswith("dlogprobs      | exact: True") and out.endswith(
        "; but this is dprobs's check cell, edited to check dlogprobs: dprobs is not checked here (restore "
        "`check(\"dprobs\")`)\n"), out
    kernel.run("dprobs")
    # V2: an answer cell's debug print, replayed by every later check on each of its batches (check() asserts one
    # line of output)
    kernel.run("dlogprobs", written("dlogprobs") + "print('debug', dlogprobs.shape)\n")
    assert right(kernel.check("dprobs"))
    # and its display(), Jupyter's print: IPython showed the shape of each of the check's batches under the line, and
    # the grader ran it into a NameError (0) where the check said the grader refuses a builtin
    kernel.run("dlogprobs", written("dlogprobs") + "display(dlogprobs.shape)\n")
    assert kernel.shown == ["torch.Size([32, 27])"], kernel.shown
    assert right(kernel.check("dlogprobs")) and right(kernel.check("dprobs"))
    kernel.run("dlogprobs")
    # F6: `W2 = W2.T` in dh's cell (which the grader grades right): "take that line out" left a shape error
    kernel.run("dh", "W2 = W2.T\ndh = dlogits @ W2\n")
    line = kernel.check("dh")
    assert "write `W2.T` where that cell reads W2, not `W2 = W2.T`" in line and "take that line out" not in line, line
    answered(kernel, EX1)
    # F8: a pasted `%reset -f`: "run the setup cells first", which Run All Above runs again
    kernel.run("scratch", "%reset -f\n")
    line = kernel.check("dprobs")
    assert re.search(r"not checked: the cell you ran as In\[\d+\] cleared the kernel's names \(%reset\): delete it",
                     line), line
    setup(kernel, full=True)
    answered(kernel, EX1)
    # F9: a slow answer cell stopped by Kernel > Interrupt was "as the grader runs it, this cell itself is right"
    # (the grader stops it at its time limit: 0), and the check ran its loop again
    for cell in ("dembcat", "demb"):
        kernel.run(cell)
    kernel.run("scratch", "del dC\n")
    slow = "for _ in range(10**9):\n    pass\n" + written("dC")
    assert kernel.run("dC", slow, interrupt_after=1.0)[2] == "KeyboardInterrupt"
    line = kernel.check("dC")
    assert "dC's cell was interrupted (Kernel > Interrupt) when it last ran, so dC is not assigned" in line and \
        "is right" not in line and "if it ends within the grader's time limit (10 s a run)" in line, line
    # the sixteenth trial: interrupted after it bound dC, its partial value said to be wrong values
    slow = ("dC = torch.zeros_like(C)\nfor k in range(Xb.shape[0]):\n    for j in range(Xb.shape[1]):\n"
            "        dC[Xb[k, j]] += demb[k, j]\n        _ = sum(range(10**6))\n")
    assert kernel.run("dC", slow, interrupt_after=1.0)[2] == "KeyboardInterrupt"
    line = kernel.check("dC")
    assert "dC's cell was interrupted (Kernel > Interrupt) when it last ran, so dC holds what it had then" in line \
        and "WRONG" not in line, line
    kernel.run("dC")
    released = nbformat.read(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", as_version=4)
    # F2 (classic, saved): a typo assigning dprobs in dcounts_sum's cell: dprobs's line said to delete a scratch
    # cell (the answer cell of dcounts_sum), dcounts_sum's "not run yet"
    here = kernel.run("scratch", "import os\nprint(os.getcwd())\n", send_id=False)[0].strip()
    with tempfile.TemporaryDirectory() as folder:
        data(folder)
        typo = "dprobs = -counts_sum**-2 * dcounts_sum_inv\n"
        saved = {**{c: written(c) for c in EX1[:EX1.index("dcounts_sum_inv") + 1]}, "dcounts_sum": typo}
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        for c in nb.cells:
            c.source = saved.get(c.get("id"), c.source)
        kernel.restart()
        kernel.run("scratch", f"import os\nos.chdir({folder!r})\n", send_id=False)
        try:
            for cell in SETUP:
                kernel.run(cell, send_id=False)
            for cell in saved:
                kernel.run(cell, saved[cell], send_id=False)
            nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")
            line = kernel.check("dprobs", send_id=False)  # (and, since the sixteenth trial, the typo's run is
            # not taken for dprobs's own: the chain below names the cell to fix, not dprobs)
            assert "dcounts_sum's cell (a typo for dcounts_sum? fix that cell first) assigned dprobs after it ran" in \
                line and "delete" not in line, line
            line = kernel.check("dcounts_sum", send_id=False)
            assert line.startswith("dcounts_sum    | WRONG: dcounts_sum's cell as your saved notebook holds it assigns "
                                   "dprobs and never dcounts_sum"), line
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\n", send_id=False)
    setup(kernel, full=True)
    answered(kernel, EX1)
    # F5: a stale line over a cell the saved notebook holds blank
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "backprop_ninja.ipynb"
        nbformat.write(released, path)
        kernel.run("scratch", f"__session__ = {str(path)!r}\n")
        try:
            kernel.run("dprobs", "dprobs = probs * dlogprobs\n")
            kernel.run("dcounts_sum_inv")
            kernel.run("dprobs")
            line = kernel.check("dcounts_sum_inv")
            assert "dprobs changed since it ran" in line and "— but WRONG as saved: dcounts_sum_inv's cell in your " \
                "saved notebook is still blank" in line, line
        finally:
            kernel.run("scratch", "del __session__\n")
    answered(kernel, EX1)


def trial16_a_pasted_cell_a_stopped_exec_a_typo_never_saved_and_a_slow_cell(kernel):
    """The sixteenth student trial: in JupyterLab an answer cell cut and pasted back (a new cell id, its grade id
    kept) was "edited after it last ran ... run it" however often it ran (F8); in the classic Notebook an
    `exec(...)` answer cell that stopped was "not run yet" (F1), and, never saved, dW2's cell assigning dh, run
    just before dW2's check, was "not run yet: run its answer cell above" (F4); dC's line named dW1, off its path,
    for the answer above that is not assigned (F2); exercise 4's first cell skipped, the training check said "start
    is not defined: run the cells above" (V2); the release downloaded again over saved answers was "edited after it
    last ran ... run it" (V3). And a cell slow on the check's batches ran on each without the grader's time limit."""
    kernel.restart()
    setup(kernel, full=True)
    released = nbformat.read(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", as_version=4)
    wrong = "dprobs = (1.0 / probs) * dlogprobs * 2\n"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "backprop_ninja.ipynb"

        def save(pasted: str, code: str):
            nb = nbformat.from_dict(json.loads(json.dumps(released)))
            for c in nb.cells:
                if c.get("id") == "dlogprobs":
                    c.source = written("dlogprobs")
                if c.get("id") == "dprobs":
                    c.id, c.source = pasted, code
            time.sleep(0.05)
            nbformat.write(nb, path)

        kernel.run("scratch", f"__session__ = {str(path)!r}\n")
        try:
            save("dprobs", written("dprobs"))
            for cell in ("dlogprobs", "dprobs"):
                kernel.run(cell, written(cell))
            assert right(kernel.check("dprobs"))
            save("3f0c9a1e-paste", written("dprobs"))  # cut and pasted back, saved
            kernel.run("3f0c9a1e-paste", wrong)
            save("3f0c9a1e-paste", wrong)
            for _ in range(2):  # run again, as the line said
                line = kernel.check("dprobs")
                assert line.startswith("dprobs         | WRONG") and "twice the right value" in line and \
                    "edited after it last ran" not in line, line
                kernel.run("3f0c9a1e-paste", wrong)
            kernel.run("3f0c9a1e-paste", written("dprobs"))
            line = kernel.check("dprobs")
            assert "ok — but WRONG as saved" in line and "save" in line and "edited" not in line, line
            save("3f0c9a1e-paste", written("dprobs"))
            assert right(kernel.check("dprobs"))
            # pasted again and run before the notebook was saved with it
            kernel.run("77aa01bc-paste", wrong)
            save("77aa01bc-paste", wrong)
            line = kernel.check("dprobs")
            assert line.startswith("dprobs         | WRONG") and "twice the right value" in line and \
                "edited after it last ran" not in line, line
            # V3: the release downloaded again over the saved notebook, the answers still on screen
            kernel.run("77aa01bc-paste", written("dprobs"))
            time.sleep(0.05)
            nbformat.write(released, path)
            line = kernel.check("dprobs")
            assert "WRONG: dprobs's cell in your saved notebook is the released blank" in line and \
                "save the notebook" in line and "edited after it last ran" not in line, line
        finally:
            kernel.run("scratch", "del __session__\n")
    # F1: the classic Notebook, an `exec(...)` answer cell that stopped on a typo in its string: "not run yet"
    kernel.restart()
    for cell in (*SETUP, *EX1[:EX1.index("dcounts_sum_inv") + 1]):
        kernel.run(cell, None if cell in SETUP else written(cell), send_id=False)
    stopped = "exec('dcounts_sum = (-counts_sum**-2) * dcounts_sum_invv')\n"
    assert kernel.run("dcounts_sum", stopped, send_id=False)[2] == "NameError"
    line = kernel.check("dcounts_sum", send_id=False)
    assert line.startswith("dcounts_sum    | WRONG: the grader refuses this cell") and "exec" in line, line
    # F4: never saved, dW2's cell assigning dh (a typo) run just before dW2's check: "not run yet ... run its answer
    # cell above", the cell just run
    for cell in EX1[EX1.index("dcounts_sum"):EX1.index("dh") + 1]:
        kernel.run(cell, written(cell), send_id=False)
    kernel.run("dW2", "dh = h.T @ dlogits\n", send_id=False)
    line = kernel.check("dW2", send_id=False)
    assert re.search(r"the cell you ran before this check \(In\[\d+\]\) assigns dh, of W2's shape and not h's: if "
                     r"that is dW2's answer cell, write `dW2 = \.\.\.` there", line), line
    # F2 (Run All of the saved notebook): demb's cell stopped (a view of a transposed dembcat), dW1's too: dC's line
    # named dW1, off its path
    slipped = {**{c: written(c) for c in EX1}, "dembcat": "dembcat = (W1 @ dhprebn.T).T.contiguous().T\n",
               "dW1": "dW1 = embcat @ dhprebn.T\n", "db1": "db1 = torch.zeros_like(b1)\n",
               "demb": "demb = dembcat.view(32, 3, 10)\n",
               "dC": "dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.view(-1), demb.view(-1, C.shape[1]))\n"}
    here = kernel.run("scratch", "import os\nprint(os.getcwd())\n", send_id=False)[0].strip()
    with tempfile.TemporaryDirectory() as folder:
        data(folder)
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        for c in nb.cells:
            c.source = slipped.get(c.get("id"), c.source)
        nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")
        kernel.restart()
        kernel.run("scratch", f"import os\nos.chdir({folder!r})\n", send_id=False)
        try:
            for cell in (*SETUP, *slipped):
                kernel.run(cell, slipped.get(cell), send_id=False)
            line = kernel.check("dC", send_id=False)
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\n", send_id=False)
    assert "demb above is not assigned" in line and "dW1" not in line, line
    # a cell slow only on other sizes than the notebook's ran unbounded on each of the check's batches; the grader
    # stops it at its time limit (course.yml's, in the notebook's COURSE where it is not the default) and gives 0
    kernel.run("scratch", "COURSE['cell_timeout'] = 0.5\n", send_id=False)
    kernel.run("db1", "for _ in range(0 if n == 32 else 10**9):\n    pass\n" + written("db1"), send_id=False)
    started = time.monotonic()
    line = kernel.check("db1", send_id=False)
    assert line.startswith("db1            | WRONG") and "time limit" in line, line
    assert time.monotonic() - started < 5, time.monotonic() - started  # stopped once, never run again
    kernel.run("scratch", "del COURSE['cell_timeout']\n", send_id=False)
    kernel.run("db1", written("db1"), send_id=False)
    # V2: exercise 4's first cell skipped, the training check said "start is not defined: run the cells above"
    for cell in ("ex4_backward", "setup_ex4_check"):
        kernel.run(cell, send_id=False)
    line = kernel.run("check_ex4_training", send_id=False)[0]
    assert "start is not defined: the cell that sets it stopped, as fused_forward is not defined" in line, line


def trial17_an_answer_cell_that_stops_and_a_forward_value_reassigned(kernel):
    """The seventeenth student trial: below an answer cell that stops with an error (a syntax error, a refused call,
    a product of the wrong shapes), every right cell said "run the cell of dcounts", which stops again (F1, 58
    lines); below a deleted answer cell, "answer dnorm_logits", which is not there (V1); a forward value reassigned
    by a scratch cell was named on the line of the answer that reads it, and the right lines below said that answer
    was wrong (F2), that line not naming the scratch cell in a Run All (V6); an interrupted cell that the grader
    refuses for its import was "make it faster" (V3); exercise 3's closed form in exercise 1's cell was half credit
    without the grader's reason (V5)."""
    kernel.restart()
    setup(kernel, full=True)
    released = nbformat.read(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", as_version=4)
    upto = EX1[:EX1.index("dcounts_sum") + 1]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "backprop_ninja.ipynb"

        def save(cells: dict[str, str], deleted: str = ""):
            nb = nbformat.from_dict(json.loads(json.dumps(released)))
            nb.cells = [c for c in nb.cells if c.get("id") != deleted]
            for c in nb.cells:
                c.source = cells.get(c.get("id"), c.source)
            time.sleep(0.05)
            nbformat.write(nb, path)

        kernel.run("scratch", f"__session__ = {str(path)!r}\n")
        try:
            cells = {c: written(c) for c in upto}
            for cell in upto:
                kernel.run(cell, cells[cell])
            broken = "dcounts = counts_sum_inv * dprobs +\n"
            kernel.run("dcounts", broken)
            kernel.run("dnorm_logits", written("dnorm_logits"))
            save({**cells, "dcounts": broken, "dnorm_logits": written("dnorm_logits")})
            assert kernel.check("dcounts").startswith("dcounts        | WRONG: the grader refuses this cell")
            for _ in range(2):  # and after running dcounts's cell again, as the line said
                line = kernel.check("dnorm_logits")
                assert "dcounts's cell, which the grader refuses (" in line and "fix it, then run the cells from " \
                    "dcounts's down to this one" in line and "run the cell of" not in line, line
                kernel.run("dcounts", broken)
            # V1: dnorm_logits's cell deleted from the saved notebook
            cells.update(dcounts=written("dcounts"))
            kernel.run("dcounts", cells["dcounts"])
            kernel.run("scratch", "del dnorm_logits\n")
            kernel.run("dlogit_maxes", written("dlogit_maxes"))
            save({**cells, "dlogit_maxes": written("dlogit_maxes")}, deleted="dnorm_logits")
            line = kernel.check("dlogit_maxes")
            assert "your saved notebook has no dnorm_logits answer cell" in line and "answer dnorm_logits," not in \
                line, line
        finally:
            kernel.run("scratch", "del __session__\n")
    # F1 without cell ids or a saved notebook: a product of the wrong shapes
    kernel.restart()
    for cell in (*SETUP, *upto):
        kernel.run(cell, None if cell in SETUP else written(cell), send_id=False)
    kernel.run("dcounts", "dcounts = counts_sum_inv @ dprobs + dcounts_sum\n", send_id=False)
    kernel.run("dnorm_logits", written("dnorm_logits"), send_id=False)
    line = kernel.check("dnorm_logits", send_id=False)
    assert "dcounts's cell stops with an error (RuntimeError" in line and "fix it" in line and \
        "run the cell of" not in line, line
    # V3: an answer cell interrupted, which the grader refuses before it runs: "make it faster"
    slow = "import time\ntime.sleep(30)\n" + written("dcounts")
    assert kernel.run("dcounts", slow, send_id=False, interrupt_after=1.0)[2] == "KeyboardInterrupt"
    line = kernel.check("dcounts", send_id=False)
    assert line.startswith("dcounts        | WRONG: the grader refuses this cell") and "import" in line, line
    kernel.run("dcounts", written("dcounts"), send_id=False)
    # F2: a scratch cell reassigns probs, or changes it in place; the right answers below dprobs's said it was wrong
    for scratch in ("probs = probs * 2  # experimenting\n", "probs *= 2\n"):
        setup(kernel)
        kernel.run("scratch", scratch, send_id=False)
        for cell in upto:
            kernel.run(cell, written(cell), send_id=False)
        if scratch.startswith("probs = "):  # the answer's own line names the scratch cell (was "a cell assigned it")
            line = kernel.check("dprobs", send_id=False)
            assert re.search(r"\| not checked: no autograd gradient on probs: the cell you ran as In\[\d+\] assigned "
                             r"probs, so it is not the forward pass's tensor any more: take that line out", line), line
            # and a wrong answer there is WRONG, as the grader grades it: a student trial's `h = h.T` in a scratch
            # cell left a wrong dh (shaped as the kernel's h) the same words as a right one, read as accepted
            kernel.run("dprobs", "dprobs = dlogprobs * probs\n", send_id=False)
            line = kernel.check("dprobs", send_id=False)
            assert line.startswith("dprobs         | WRONG") and "; besides, no autograd gradient on probs: the cell " \
                "you ran as In[" in line, line
            kernel.run("dprobs", written("dprobs"), send_id=False)
        line = kernel.check("dcounts_sum", send_id=False)
        assert re.search(r"dprobs above read probs, which is not your forward pass's value any more \(the cell you ran "
                         r"as In\[\d+\] (assigned|changed) it( in place)?\)", line) and "is wrong" not in line, line
    # V5: exercise 3's closed form in exercise 1's cell: the half credit's reason, as the grader gives it
    answered(kernel, EX1)
    kernel.run("dhprebn", written("ex3_dhprebn"))
    line = kernel.check("dhprebn")
    assert line.startswith("dhprebn        | WRONG (the grader gives half its points") and \
        re.search(r"it skips dbn\w+ and dbn\w+, so with other values", line), line


def trial18_exercise_4_edited_and_run_over_a_right_saved_cell(kernel):
    """The eighteenth student trial: manual_backward right and saved, then edited wrong and run, not saved: every
    exercise-4 line a plain WRONG, where the grader gives the file full marks (M1), with cell ids and without; in
    the classic Notebook a right answer, saved, set to None by a scratch cell was "not attempted yet" (M2), and two
    answers merged into one cell were told to "compute it from dprobs", which the cell does (M4); under Run All,
    db2 written in dW2's cell over db2's blank cell was "not attempted yet", the cell unnamed (V1), and a Split
    Cell's `dcounts += ...` continuation was judged as dcounts's cell, a NameError told (M3)."""
    released = nbformat.read(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", as_version=4)
    edited = CELLS["ex4_backward"].replace("db2 = dlogits.sum(0)", "db2 = 2 * dlogits.sum(0)")
    assert edited != CELLS["ex4_backward"]
    here = kernel.run("scratch", "import os\nprint(os.getcwd())\n", send_id=False)[0].strip()
    with tempfile.TemporaryDirectory() as folder:
        data(folder)
        path = Path(folder) / "backprop_ninja.ipynb"
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        for c in nb.cells:
            c.source = CELLS[c.id] if c.get("id") == "ex4_backward" else c.source
        nbformat.write(nb, path)
        for send_id in (True, False):
            kernel.restart()
            kernel.run("scratch", f"import os\nos.chdir({folder!r})\n" + (f"__session__ = {str(path)!r}\n"
                                                                           if send_id else ""), send_id=send_id)
            try:
                for cell in (*SETUP, "setup_ex4_forward", "ex4_backward", "setup_ex4_check"):
                    kernel.run(cell, send_id=send_id)
                kernel.run("ex4_backward", edited, send_id=send_id)
                kernel.run("setup_ex4_check", send_id=send_id)
                line = kernel.check("ex4_db2", send_id=send_id)
                kept = ("(your saved notebook still holds ex4_backward's earlier code, which the grader finds right: "
                        "this code replaces it at the next save)")
                assert line.startswith("ex4_db2        | WRONG") and kept in line, line
                line = kernel.run("check_ex4_training", send_id=send_id)[0]
                assert "WRONG" in line and "your saved notebook still holds ex4_backward's earlier code" in line, line
            finally:
                kernel.run("scratch", f"os.chdir({here!r})\n", send_id=send_id)
        # M2, classic: a right answer, saved and run as saved, set to None by a scratch cell: "not attempted yet"
        for c in nb.cells:
            c.source = written(c.id) if c.get("id") in ("dlogprobs", "dprobs") else c.source
        nbformat.write(nb, path)
        kernel.run("scratch", f"os.chdir({folder!r})\n", send_id=False)
        try:
            for cell in ("setup_forward", "dlogprobs", "dprobs"):
                kernel.run(cell, None if cell == "setup_forward" else written(cell), send_id=False)
            kernel.run("scratch", "dprobs = None\n", send_id=False)
            line = kernel.check("dprobs", send_id=False)
            assert re.match(r"dprobs         \| not checked: this cell is right as the grader runs it \(you ran it as "
                            r"saved as In\[\d+\]\), but your dprobs is None: the cell you ran as In\[\d+\] set it",
                            line), line
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\n", send_id=False)
    # M4, classic, never saved: two answers merged into one cell (Merge Cells): "compute it from dprobs", which it does
    kernel.run("dprobs", written("dprobs") + written("dcounts_sum_inv"), send_id=False)
    line = kernel.check("dcounts_sum_inv", send_id=False)
    merged = ("the cell judged here assigns dprobs too, which dcounts_sum_inv reads: the grader runs dcounts_sum_inv's "
              "own cell, with the true dprobs; put each answer in its own cell")
    assert merged in line and "compute it from" not in line, line
    # V1 (Run All): db2 written in dW2's cell, db2's own cell blank below it: "not attempted yet", nothing more
    for cell in EX1[EX1.index("dcounts_sum_inv"):EX1.index("dh") + 1]:
        kernel.run(cell, written(cell), send_id=False)
    kernel.run("dW2", written("dW2") + written("db2"), send_id=False)
    kernel.run("db2", "db2 = None  # TODO\n", send_id=False)
    line = kernel.check("db2", send_id=False)
    assert re.match(r"db2            \| not attempted yet: the cell you ran as In\[\d+\] assigns db2 beside dW2, and "
                    r"the grader grades db2 by its own cell alone, which is blank: write it there", line), line
    # M3 (classic, not saved): a Split Cell's `dcounts += ...` continuation was judged as dcounts's cell: a NameError
    kernel.run("dcounts", "dcounts = counts_sum_inv * dprobs\n", send_id=False)
    kernel.run("scratch", "dcounts += torch.ones_like(counts) * dcounts_sum\n", send_id=False)
    line = kernel.check("dcounts", send_id=False)
    assert "misses the branch through counts_sum" in line and "NameError" not in line, line


def trial19_a_copied_cell_a_deleted_answer_an_old_download_and_a_numpy_answer(kernel):
    """The nineteenth student trial: in JupyterLab an answer cell copied with other code, saved, was WRONG (the
    grader gives it nothing) "(your saved notebook still holds dh's earlier code, which the grader finds right ...)"
    (F1); under Run All, below a saved `del dh` cell, dh's cell "never ran, or stopped", and "run the cells from dh's
    down", the `del` among them (F2); in the classic Notebook never saved, an older download beside it holding dprobs
    wrong left a plain ok where the collected notebook holds it blank, and one holding dprobs right was taken for the
    student's notebook ("rename this one to that name") (F3); a numpy dlogprobs made the lines below it blame dprobs's
    right cell (F4); a saved `n = 3` cell was "set it back", which Run All undoes (V3); an answer stopped on a wrong
    shape above it was "never ran, or stopped" on the lines below it (V1); an answer `%run` in another answer's cell,
    its own left blank, was "not attempted yet", the cell unnamed (V2)."""
    released = nbformat.read(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", as_version=4)
    here = kernel.run("scratch", "import os\nprint(os.getcwd())\n", send_id=False)[0].strip()

    def notebook(cells: dict[str, str], after: dict[str, tuple[str, str, str | None]] = {}):  # noqa: B006
        """The released notebook with `cells` written in and, after a cell, one (id, code, the cell it copies or
        None) of the student's."""
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        for cell in list(nb.cells):
            cell.source = cells.get(cell.get("id"), cell.source)
            if cell.get("id") in after:
                new_id, code, of = after[cell.id]
                added = nbformat.v4.new_code_cell(code, id=new_id) if of is None else nbformat.from_dict(
                    {**json.loads(json.dumps(next(c for c in nb.cells if c.get("id") == of))), "id": new_id})
                added.source = code
                nb.cells.insert(nb.cells.index(cell) + 1, added)
        return nb

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "backprop_ninja.ipynb"
        data(folder)
        upto = EX1[:EX1.index("dW2") + 1]
        # F1, JupyterLab: dh's cell copied below dW2's check with other code, run, saved
        kernel.restart()
        kernel.run("scratch", f"import os\nos.chdir({folder!r})\n__session__ = {str(path)!r}\n")
        try:
            setup(kernel, full=True)
            for cell in upto:
                kernel.run(cell, written(cell))
            pasted = "dh = dlogits @ W2.T\nprint(dh.norm())\n"
            kernel.run("dh-copy", pasted)
            nbformat.write(notebook({c: written(c) for c in upto}, {"check_dW2": ("dh-copy", pasted, "dh")}), path)
            line = kernel.check("dh")
            assert line.startswith("dh             | WRONG: your saved notebook holds 2 copies of the dh answer cell") \
                and "earlier code" not in line, line
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\ndel __session__\n")
        # F2 and V3, Run All of a saved notebook with a `del dh` cell below dh's check: no cell ids, no file named
        kernel.restart()
        every = (*EX1, "dembcat", "dW1", "db1", "demb", "dC")
        # dC's as a loop, which assigns dC before it stops on demb (the trial's)
        cells = {**{c: written(c) for c in every}, "dC": "dC = torch.zeros_like(C)\nfor i in range(Xb.shape[0]):\n"
                 "    for j in range(Xb.shape[1]):\n        dC[Xb[i, j]] += demb[i, j]\n"}
        nbformat.write(notebook(cells, {"check_dh": ("scratch-del", "del dh\n", None)}), path)
        kernel.run("scratch", f"import os\nos.chdir({folder!r})\n", send_id=False)
        try:
            setup(kernel, full=True, send_id=False)
            for cell in every:
                kernel.run(cell, cells[cell], send_id=False)
                if cell == "dh":
                    kernel.check("dh", send_id=False)
                    kernel.run("scratch-del", "del dh\n", send_id=False)
            deleted = (r"the cell you ran as In\[\d+\] deleted dh \(`del dh`\), a cell your saved notebook keeps \(Run "
                       r"All runs it again\): delete that cell, then run dh's cell and the cells from it down to this "
                       "one")
            line = kernel.check("dhpreact", send_id=False)
            assert re.search(deleted, line) and "never ran" not in line, line
            line = kernel.check("dC", send_id=False)
            assert re.search(r"dh above is not assigned \(the cell you ran as In\[\d+\] deleted it, `del dh`; your "
                             r"saved notebook keeps that cell, which Run All runs again: delete it\)", line), line
            # V3: a saved scratch cell `n = 3`, run again by every Run All
            kernel.run("dh", cells["dh"], send_id=False)
            tiny = "n = 3  # trying a tiny batch\n"
            kernel.run("scratch-n", tiny, send_id=False)
            nbformat.write(notebook(cells, {"check_dprobs": ("scratch-n", tiny, None)}), path)
            line = kernel.check("dW2", send_id=False)
            assert "delete that cell or name its value otherwise than n (your saved notebook keeps it, and Run All " \
                "runs it again)" in line, line
            kernel.run("scratch", "n = Xb.shape[0]\n", send_id=False)
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\n", send_id=False)
        path.unlink()
        # F3, the classic Notebook never saved, an older download beside it
        kernel.restart()
        old = time.time() - 3600
        shutil.copy(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", path)
        download = Path(folder) / "backprop_ninja (1).ipynb"
        kernel.run("scratch", f"import os\nos.chdir({folder!r})\n", send_id=False)
        try:
            setup(kernel, full=True, send_id=False)
            for dprobs, said in (("dprobs = 1.0 / probs\n", "wrong"), (written("dprobs"), "right")):
                nbformat.write(notebook({"dprobs": dprobs}), download)
                for file in (path, download):
                    os.utime(file, (old, old))
                for cell in ("dlogprobs", "dprobs"):
                    kernel.run(cell, written(cell), send_id=False)
                line = kernel.check("dprobs", send_id=False)
                blank = ("— but WRONG as saved, if backprop_ninja.ipynb in this folder is your notebook: it holds "
                         "dprobs's cell blank")
                there = ("if your notebook is backprop_ninja (1).ipynb, the course still collects "
                         "backprop_ninja.ipynb: put your answers there")
                assert "approximate: True" in line and blank in line and there in line, (said, line)
                assert "rename" not in line, (said, line)
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\n", send_id=False)
    # F4, Run All: a numpy dlogprobs stops dprobs's (right) cell, and the cells below it
    kernel.restart()
    setup(kernel, full=True, send_id=False)
    kernel.run("dlogprobs", "import numpy as np\ndlogprobs = np.zeros(logprobs.shape)\n"
               "dlogprobs[range(n), Yb.numpy()] = -1.0 / n\n", send_id=False)
    for cell in EX1[1:EX1.index("dcounts_sum") + 1]:
        kernel.run(cell, written(cell), send_id=False)
    line = kernel.check("dcounts_sum", send_id=False)
    assert "fix dlogprobs (it is a numpy.ndarray, not a torch tensor), then run the cells from dlogprobs's down" in \
        line and "dprobs's cell's own" not in line, line
    # V1: dcounts_sum_inv without keepdim stops dcounts's cell on dcounts_sum: dC's line said dcounts's cell "never
    # ran, or stopped with an error"
    for cell in ("dlogprobs", "dprobs"):
        kernel.run(cell, written(cell), send_id=False)
    kernel.run("dcounts_sum_inv", "dcounts_sum_inv = (counts * dprobs).sum(1)\n", send_id=False)
    one_line = {"dcounts": "dcounts = counts_sum_inv * dprobs + torch.ones_like(counts) * dcounts_sum\n"}  # the trial's
    for cell in (*EX1[EX1.index("dcounts_sum"):], "dembcat", "dW1", "db1", "demb"):
        kernel.run(cell, one_line.get(cell, written(cell)), send_id=False)
    kernel.run("dC", "dC = torch.zeros_like(C)\nfor i in range(Xb.shape[0]):\n    for j in range(Xb.shape[1]):\n"
               "        dC[Xb[i, j]] += demb[i, j]\n", send_id=False)
    line = kernel.check("dC", send_id=False)
    assert "dcounts above is not assigned (its cell stopped on dcounts_sum, which is wrong (computed from " \
        "dcounts_sum_inv, the first wrong answer above it): fix dcounts_sum_inv first, its shape is not its " \
        "gradient's)" in line, line
    # V2, JupyterLab: `%run -i answers.py` in dlogprobs's cell assigns dprobs too; dprobs's own cell, blank, run after
    kernel.restart()
    setup(kernel, full=True)
    script = "".join(written(cell) for cell in ("dlogprobs", "dprobs"))
    kernel.run("scratch", f"open('answers.py', 'w').write({script!r})\n")
    kernel.run("dlogprobs", "%run -i answers.py\n")
    kernel.run("dprobs", "dprobs = None  # TODO\n")
    line = kernel.check("dprobs")
    assert re.match(r"dprobs         \| not attempted yet: the cell you ran as In\[\d+\] assigns dprobs beside "
                    r"dlogprobs, and the grader grades dprobs by its own cell alone, which is blank: write it there",
                    line), line


def trial20_a_moved_cell_an_alias_exercise_2_first_and_an_error_of_its_own(kernel):
    """The twentieth student trial: an answer cell moved below its check was "run its answer cell above", where none
    is (F1); a wrong dh that dhpreact's cell (`dhpreact = dh; dhpreact *= ...`) changes in place was told to "move
    that code into dh's cell" (F2), and the lines below it that dh was "out of date", to re-run, which rebuilds it
    (F3); exercise 2's wrong cell run where exercise 1's dlogits never ran made dh's line say "dlogits above is
    wrong" (F4); dembcat's cell stopping on its own missing transpose was said to stop on dhprebn, and dbnvar_inv
    named the first wrong answer, where dbnraw is (F5); an answer cell merged with its check was refused for the
    check's try/except alone (V3), and an edited check cell's line said "restore" twice (V4)."""
    released = nbformat.read(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", as_version=4)
    here = kernel.run("scratch", "import os\nprint(os.getcwd())\n", send_id=False)[0].strip()
    every = (*EX1, "dembcat", "dW1", "db1", "demb", "dC")
    # F1, the classic Notebook: dprobs's answer cell moved below its check, saved
    with tempfile.TemporaryDirectory() as folder:
        data(folder)
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        for cell in nb.cells:
            cell.source = written(cell.id) if cell.get("id") in ("dlogprobs", "dprobs") else cell.source
        moved = next(c for c in nb.cells if c.get("id") == "dprobs")
        nb.cells.remove(moved)
        nb.cells.insert(next(i for i, c in enumerate(nb.cells) if c.get("id") == "check_dprobs") + 1, moved)
        kernel.restart()
        kernel.run("scratch", f"import os\nos.chdir({folder!r})\n", send_id=False)
        try:
            setup(kernel, full=True, send_id=False)
            kernel.run("dlogprobs", written("dlogprobs"), send_id=False)
            nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")  # saved after the setup ran
            line = kernel.check("dprobs", send_id=False)
            assert "its answer cell is below this check in your saved notebook (Run All runs this check first): " \
                "move it back above this check" in line and "above (after a restart" not in line, line
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\n", send_id=False)
    # F5, Run All without a saved notebook: dembcat's cell stops on its own missing transpose, below wrong answers
    slips = {"dbnvar_inv": "dbnvar_inv = bndiff * dbnraw\n", "dhprebn": "dhprebn = dbndiff.clone()\n",
             "dembcat": "dembcat = dhprebn @ W1\n", "dbnraw": "dbnraw = bngain * dh\n"}
    slips["dC"] = "dC = torch.zeros_like(C)\nfor i in range(Xb.shape[0]):\n    for j in range(Xb.shape[1]):\n" \
        "        dC[Xb[i, j]] += demb[i, j]\n"  # assigns dC before it stops, as the trial's
    kernel.restart()
    setup(kernel, full=True, send_id=False)
    for cell in every:
        kernel.run(cell, slips.get(cell, written(cell)), send_id=False)
    line = kernel.check("demb", send_id=False)
    assert "dembcat's cell stops on an error of its own, with the true values above it too (RuntimeError: mat1 " \
        "and mat2 shapes cannot be multiplied" in line and "dbnvar_inv" not in line, line
    line = kernel.check("dC", send_id=False)
    assert "dembcat above is not assigned (its cell stops on an error of its own, with the true values above it too" \
        in line and "dbnvar_inv" not in line, line
    # F4, JupyterLab: exercise 2's (wrong) cell run where exercise 1's dlogits cell never ran, then dh's
    kernel.restart()
    setup(kernel, full=True)
    for cell in EX1[:EX1.index("dlogit_maxes") + 1]:
        kernel.run(cell, written(cell))
    kernel.run("ex2_dlogits", "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= n * 2\n")
    kernel.run("dh", written("dh"))
    line = kernel.check("dh")
    assert "dlogits above is not its cell's value: dlogits's cell has not run since the kernel started, and dlogits " \
        "is the value ex2_dlogits's cell (exercise 2) assigned; run dlogits's cell" in line, line
    # F2 and F3: a wrong dh, which dhpreact's cell changes in place through another name
    kernel.run("dlogits", written("dlogits"))
    kernel.run("dh", "dh = dlogits @ W2.T * 2\n")
    for cell in ("dW2", "db2"):
        kernel.run(cell, written(cell))
    kernel.run("dhpreact", "dhpreact = dh\ndhpreact *= 1.0 - h**2\n")
    kernel.run("dbngain", written("dbngain"))
    line = kernel.check("dh")
    assert line.startswith("dh             | WRONG") and "write `x = dh.clone()`" in line and "move that code" not in \
        line, line
    line = kernel.check("dbngain")
    assert "dh above is wrong" in line and "out of date" not in line, line
    # V3: an answer cell merged with its check cell below it (Merge Cells): the refusal of its try/except alone
    kernel.run("dprobs", written("dprobs") + CELLS["check_dprobs"])
    line = kernel.check("dprobs")
    assert "WRONG: the grader refuses this cell" in line and "this cell holds its check cell's code too" in line, line
    # The twenty-first trial, the classic Notebook never saved: a right answer set to None by a scratch cell was "not
    # attempted yet", the cell unnamed
    kernel.restart()
    setup(kernel, full=True, send_id=False)
    for cell in ("dlogprobs", "dprobs"):
        kernel.run(cell, written(cell), send_id=False)
    kernel.run("scratch", "dprobs = None\n", send_id=False)
    line = kernel.check("dprobs", send_id=False)
    assert re.match(r"dprobs         \| not checked: your dprobs is None: the cell you ran as In\[\d+\] set it to None "
                    r"after the cell you ran as In\[\d+\] computed it", line), line
    kernel.restart()
    setup(kernel, full=True)
    # V4: a check cell edited to check a name that is no answer's: "restore" said once
    out = kernel.run("check_dprobs", 'check("dprob")\n')[0]
    assert out.count('restore `check("dprobs")`') == 1, out



def trial22_a_second_notebook_on_the_kernel_and_a_deletion_beside_a_none(kernel):
    """The twenty-second student trial: in JupyterLab, a second notebook on the kernel (scratch.ipynb, named by
    jupyter_server, beside the course's notebook) was told every answer deleted from "your saved notebook", and a
    wrong value of its own was WRONG where the notebook the course collects held the cell right (F1, the trial's
    disagreements); in the classic Notebook, an answer deleted by a scratch cell while the answer above it was set to
    None by another was a cell that "stopped with an error", and "answer dprobs", answered and saved (F2); an answer
    cell moved above the setup cells, under Run All, was to be run "once the answers above it are right" (V3). Its
    slices cut at a lecture size (F3) are tests/test_self_check_agrees.py's. The twenty-third trial's: a scratch
    notebook that `%run`s the course's was told its value came from a refused cell, and an answer cell moved above
    the setup that reads an answer above it was to be "run again"."""
    released = nbformat.read(ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb", as_version=4)
    here = kernel.run("scratch", "import os\nprint(os.getcwd())\n", send_id=False)[0].strip()

    def save(path: Path, cells):
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        for cell in nb.cells:
            cell.source = written(cell.id) if cell.get("id") in cells else cell.source
        nbformat.write(nb, path)

    with tempfile.TemporaryDirectory() as folder:
        data(folder)
        save(Path(folder) / "backprop_ninja.ipynb", ("dlogprobs", "dprobs"))
        scratch = Path(folder) / "scratch.ipynb"
        nbformat.write(nbformat.v4.new_notebook(), scratch)
        kernel.restart()
        kernel.run("scratch", f"import os\nos.chdir({folder!r})\n__session__ = {str(scratch)!r}\n")
        try:
            setup(kernel, full=True)
            kernel.run("scratch", written("dlogprobs"))
            kernel.run("scratch", "dprobs = 1.0 / probs\n")
            kernel.run("scratch", written("dcounts_sum_inv").replace("dprobs", "(1.0 / probs * dlogprobs)"))
            line = kernel.check("dprobs")
            assert line.startswith(
                "dprobs         | not checked: this kernel's dprobs is not what the course grades: this notebook is "
                "scratch.ipynb, not one of the exercise's: the course collects and grades backprop_ninja.ipynb beside "
                "it, whose dprobs cell the grader finds right; in this kernel: WRONG") and "deleted" not in line, line
            line = kernel.check("dlogprobs")
            assert right(line) and line.endswith("whose dlogprobs cell gets the same") and "deleted" not in line, line
            line = kernel.check("dcounts_sum_inv")
            assert "approximate: True" in line and "— but WRONG as saved in the notebook the course collects: this " \
                "notebook is scratch.ipynb, not one of the exercise's: the course collects and grades " \
                "backprop_ninja.ipynb beside it, which holds dcounts_sum_inv's cell blank: put your answer there and " \
                "save it" in line, line
            # The twenty-third trial's: the scratch notebook `%run`s the course's (here cut after dprobs's check): its
            # value is that notebook's own cell's, not a refused cell of the kernel's
            nb = nbformat.read(Path(folder) / "backprop_ninja.ipynb", as_version=4)
            nb.cells = nb.cells[:next(i for i, c in enumerate(nb.cells) if c.get("id") == "check_dprobs") + 1]
            nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")
            kernel.restart()
            kernel.run("scratch", f"import os\nos.chdir({folder!r})\n__session__ = {str(scratch)!r}\n")
            kernel.run("scratch", "%run backprop_ninja.ipynb\n", send_id=False)
            line = kernel.check("dlogprobs")
            # judged on the value, or told by the refused `%run` that bound it: either way the collected cell's verdict
            assert line in ("dlogprobs      | this kernel's dlogprobs came from a `%run` of backprop_ninja.ipynb, the "
                            "notebook the course collects and grades (this notebook is scratch.ipynb, not one of the "
                            "exercise's): its dlogprobs cell as saved, which the grader finds right",
                            "dlogprobs      | exact: True  | approximate: True  | maxdiff: 0 | shape (32, 27) ok; this "
                            "notebook is scratch.ipynb, not one of the exercise's: the course collects and grades "
                            "backprop_ninja.ipynb beside it, whose dlogprobs cell gets the same"), line
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\ndel __session__\n")
    # F2, the classic Notebook, saved: dprobs set to None by a scratch cell, then dcounts_sum_inv deleted by another
    with tempfile.TemporaryDirectory() as folder:
        data(folder)
        kernel.restart()
        kernel.run("scratch", f"import os\nos.chdir({folder!r})\n", send_id=False)
        try:
            setup(kernel, full=True, send_id=False)
            cells = ("dlogprobs", "dprobs", "dcounts_sum_inv", "dcounts_sum")
            for cell in cells:
                kernel.run(cell, written(cell), send_id=False)
                kernel.check(cell, send_id=False)
            save(Path(folder) / "backprop_ninja.ipynb", cells)
            kernel.run("scratch", "dprobs = None\n", send_id=False)
            kernel.check("dprobs", send_id=False)
            kernel.run("scratch", "del dcounts_sum_inv\n", send_id=False)
            line = kernel.check("dcounts_sum_inv", send_id=False)
            assert re.search(r"the cell you ran as In\[\d+\] deleted it \(`del dcounts_sum_inv`\); and the cell you "
                             r"ran as In\[\d+\] set dprobs to None after its cell ran", line) \
                and "stopped with an error" not in line and "answer dprobs" not in line, line
            # V3, Run All of a notebook saved with dlogprobs's cell moved above the setup cells: "once the answers above
            # it are right", where there are none
            nb = nbformat.read(Path(folder) / "backprop_ninja.ipynb", as_version=4)
            moved = next(c for c in nb.cells if c.get("id") == "dlogprobs")
            nb.cells.remove(moved)
            nb.cells.insert(next(i for i, c in enumerate(nb.cells) if c.get("id") == "setup_imports"), moved)
            nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")
            kernel.restart()
            kernel.run("scratch", f"import os\nos.chdir({folder!r})\n", send_id=False)
            assert kernel.run("dlogprobs", written("dlogprobs"), send_id=False)[2] == "NameError"
            setup(kernel, full=True, send_id=False)
            line = kernel.check("dlogprobs", send_id=False)
            assert "your saved notebook holds it above the setup cells, so Run All runs it before the forward pass " \
                "it reads: move it back below them" in line and "answers above it" not in line, line
            # ... and one that reads an answer above it (the twenty-third trial's dprobs): "run it again" was all
            moved = next(c for c in nb.cells if c.get("id") == "dprobs")
            nb.cells.remove(moved)
            nb.cells.insert(next(i for i, c in enumerate(nb.cells) if c.get("id") == "setup_imports"), moved)
            nbformat.write(nb, Path(folder) / "backprop_ninja.ipynb")
            kernel.run("dprobs", written("dprobs"), send_id=False)
            kernel.run("dlogprobs", written("dlogprobs"), send_id=False)
            line = kernel.check("dprobs", send_id=False)
            assert "your saved notebook holds it above the setup cells, so Run All runs it before the forward pass " \
                "it reads: move it back below them" in line, line
        finally:
            kernel.run("scratch", f"os.chdir({here!r})\n", send_id=False)
    # The twenty-third trial's F1 and F5, the classic Notebook never saved: dlogits written in dlogit_maxes's cell, then
    # its own blank cell run and checked. The blank, the same in exercise 2's cell, was taken for exercise 2's: the
    # check judged the cell above ("half its points", where the grader gives nothing) and every line below blamed it.
    kernel.restart()
    setup(kernel, full=True, send_id=False)
    for cell in EX1[:EX1.index("dlogit_maxes")]:
        kernel.run(cell, written(cell), send_id=False)
    kernel.run("dlogit_maxes", written("dlogit_maxes") + written("dlogits"), send_id=False)
    kernel.check("dlogit_maxes", send_id=False)
    kernel.run("dlogits", "dlogits = None  # TODO\n", send_id=False)
    line = kernel.check("dlogits", send_id=False)
    assert line.startswith("dlogits        | not attempted yet") and "half" not in line, line
    kernel.run("dh", written("dh"), send_id=False)
    line = kernel.check("dh", send_id=False)
    assert "reading dlogits above, which is not attempted yet" in line and "ex2_dlogits" not in line, line


def trial23_torchs_global_state_changed_by_a_scratch_cell(kernel):
    """The twenty-third student trial: a scratch cell's torch.set_default_dtype(torch.float64) made the check say ok of
    a dC that the grader gave 0 (its torch.zeros(C.shape) met float64 gradients in the grader only, as in the check
    run with torch's own default), and with grad mode switched off the lines blamed the setup's locked cells."""
    answered(kernel, (*EX1, "dembcat", "dW1", "db1", "demb"))
    kernel.run("scratch", "torch.set_default_dtype(torch.float64)\n")
    kernel.run("dC", "dC = torch.zeros(C.shape)\ndC.index_add_(0, Xb.view(-1), demb.view(-1, C.shape[1]))\n")
    line = kernel.check("dC")
    assert "WRONG" in line and "torch's default dtype is float64 in this kernel" in line, line
    # and only there: a slip that makes no tensor of the default dtype is not its doing (a student trial: the note on
    # every WRONG line, a keepdim slip's too)
    kernel.run("demb", "demb = dembcat.view(-1)\n")
    line = kernel.check("demb")
    assert "WRONG" in line and "default dtype" not in line, line
    kernel.run("demb")
    assert kernel.run("scratch", "print(torch.get_default_dtype())\n")[0] == "torch.float64\n"  # as it was
    kernel.run("scratch", "torch.set_default_dtype(torch.float32)\ntorch.set_grad_enabled(False)\n")
    assert kernel.run("setup_forward")[2] is not None  # the setup's own forward pass cannot run so
    line = kernel.check("dh")
    assert "not checked: torch's grad mode is off in this kernel" in line and "In[" not in line, line
    kernel.run("scratch", "torch.set_grad_enabled(True)\n")
    answered(kernel, EX1[:9])
    assert right(kernel.check("dh"))


def trial23_a_cd_in_a_scratch_cell_keeps_the_notebooks_folder(kernel):
    """The twenty-third student trial, the classic Notebook (no cell ids, no file named): after a scratch cell's
    `%cd ..` the check looked for the saved notebook in the new folder, found none, and said a plain ok of a right
    answer run and not saved, which the grader gives 0."""
    here = kernel.run("scratch", "print(_dh[0])\n", send_id=False)[0].strip()
    saved = nbformat.from_dict(json.loads(json.dumps(SOLVED)))
    next(c for c in saved.cells if c.get("id") == "ex2_dlogits").source = "dlogits = None  # TODO\n"
    nbformat.write(saved, Path(here) / "backprop_ninja.ipynb")
    try:
        setup(kernel, send_id=False)
        kernel.run("ex2_dlogits", send_id=False)
        before = kernel.check("ex2_dlogits", send_id=False)
        assert "WRONG as saved" in before, before
        kernel.run("scratch", "%cd ..\n", send_id=False)
        after = kernel.check("ex2_dlogits", send_id=False)
        assert after == before, (before, after)
    finally:
        kernel.run("scratch", f"%cd {here}\n", send_id=False)
        (Path(here) / "backprop_ninja.ipynb").unlink()


def trial23_an_answer_in_a_new_cell_below_its_blank_cell(kernel):
    """The twenty-third student trial: the answer typed in a new cell below its own, left blank (to keep the given
    cell intact), was "WRONG: not attempted yet — stuck? backprop-ninja solution dh", a command that then refused."""
    answered(kernel, EX1[:8])
    kernel.run("dh", "dh = None  # TODO\n")
    kernel.run("scratch", "dh = dlogits @ W2.T\n")
    line = kernel.check("dh")
    assert line.startswith("dh             | WRONG: not attempted yet: dh's own cell is blank, and the grader grades "
                           "dh by that cell alone; your dh here comes from the cell you ran as In["), line
    assert "stuck" not in line, line
    kernel.run("dh")
    assert right(kernel.check("dh"))


def trial36_a_cell_that_stopped_after_binding_its_answer_is_not_called_wrong(kernel):
    """The thirty-sixth student trial: dC's right cell run before demb's binds dC to zeros on its first line and
    stops on the second; with demb run, its check said "WRONG ... your dC is all zeros", where the grader gives the
    cell full marks (without cell ids: the nbclient test above)."""
    answered(kernel, EX1[:24])
    kernel.run("scratch", "del demb\n")
    code = "dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.view(-1), demb.view(-1, emb.shape[2]))\n"
    assert kernel.run("dC", code)[2] == "NameError"
    kernel.run("demb")
    line = kernel.check("dC")
    assert line == ("dC             | not checked: this cell is right as the grader runs it, but it stopped with an "
                    "error when it last ran (NameError: name 'demb' is not defined), after it assigned dC: your dC is "
                    "what it left half made; run it again, then this check"), line
    kernel.run("dC", code)
    assert right(kernel.check("dC"))
    # A wrong cell finished by a scratch cell that rebinds it: WRONG, without the note the docs promise
    kernel.run("dcounts_sum", "dcounts_sum = -counts_sum**-2\n")
    kernel.run("scratch", "dcounts_sum = dcounts_sum * dcounts_sum_inv\n", send_id=False)
    line = kernel.check("dcounts_sum")
    assert line.startswith("dcounts_sum    | WRONG: ") and "— your dcounts_sum here is right only because the " \
        "cell you ran as In[" in line and "] assigned it after dcounts_sum's cell ran; the grader runs dcounts_sum's " \
        "cell alone: move that code into dcounts_sum's cell" in line, line
    kernel.run("dcounts_sum")
    assert right(kernel.check("dcounts_sum"))
    # Half its points for a branch missed, with a wrong answer above: "this cell is right" inside a WRONG line
    kernel.run("dlogprobs", "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0\n")
    for cell in EX1[1:7]:
        kernel.run(cell)
    kernel.run("dlogits", "dlogits = dnorm_logits.clone()\n")
    line = kernel.check("dlogits")
    assert line.startswith("dlogits        | WRONG (the grader gives half its points): dlogprobs above is wrong") and \
        "with the true dnorm_logits its value is right, but with random upstream gradients" in line and \
        "this cell is right" not in line, line
    for cell in EX1[:8]:
        kernel.run(cell)


def trial41_a_magic_cell_that_stopped_is_told_as_the_grader_refuses_it(kernel):
    """An instructor trial's fused cell `%time dsim = ...` stopped with a NameError before it assigned, run by nbconvert
    (no cell ids): the check said "not run yet ... run its answer cell above", where the grader refuses the cell for
    its magic; run without the error, the check named the magic. The saved cell's refusal is said either way."""
    kernel.restart()  # no earlier run of the cell, as in a Run All
    setup(kernel, full=True, send_id=False)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "backprop_ninja.ipynb"
        kernel.run("scratch", f"__session__ = {str(path)!r}\n", send_id=False)
        code = "%time dlogits = logits_typo * 0\n"
        nb = nbformat.from_dict(SOLVED)
        next(c for c in nb.cells if c.get("id") == "ex2_dlogits").source = code
        nbformat.write(nb, path)
        assert kernel.run("ex2_dlogits", code, send_id=False)[2] == "NameError"
        line = kernel.check("ex2_dlogits", send_id=False)
        refused = "| WRONG: the grader refuses this cell as your saved notebook holds it, line 1: an IPython magic"
        assert line.startswith("ex2_dlogits") and refused in line, line
        kernel.run("scratch", "del __session__\n", send_id=False)
    kernel.run("ex2_dlogits")
    assert right(kernel.check("ex2_dlogits"))
    # A student trial's dC looping `for n in ...`: its own value is the grader's (the grader's run binds n the same
    # way), and was left unjudged; the answers reading n are not checked, as before, with what to do.
    answered(kernel, (*EX1, "dembcat", "dW1", "db1", "demb"))
    kernel.run("dC", "dC = torch.zeros_like(C)\nfor n in range(Xb.shape[0]):\n    for j in range(Xb.shape[1]):\n"
                     "        dC[Xb[n, j]] += demb[n, j]\n")
    assert right(kernel.check("dC"))
    line = kernel.check("dlogprobs")
    assert "not checked: your n is 31" in line and "take the line that assigns n out of that answer cell" in line, line
    kernel.run("scratch", "n = Xb.shape[0]\n", send_id=False)
    kernel.run("dC")

def test_scripted_student_sessions(tmp_path):
    """One kernel for every session (a kernel and torch take seconds to start), in this order: each
    session starts from what the ones before it left, as a student's notebook does. Its folder holds the
    data and no notebook, as where a notebook is never saved (the sessions about a saved file write one)."""
    data(tmp_path)
    kernel = Kernel(tmp_path, CELLS)
    try:
        for session in (check_cells_before_the_setup_and_after_a_restart_say_what_to_run,
                        a_syntax_error_is_the_graders_refusal_and_later_checks_still_run,
                        without_cell_ids_the_cell_that_bound_the_answer_is_judged_however_it_bound_it,
                        a_forbidden_answer_is_refused_as_the_grader_refuses_it,
                        cells_out_of_order_odd_values_and_the_old_call_form,
                        exercise_4_checks_never_raise,
                        sizes_say_which_batch_and_partial_credit_is_announced,
                        trial_a_cell_edited_and_saved_but_not_run_is_named,
                        stale_values_and_a_cascade_are_named,
                        an_answer_changed_in_place_by_a_later_cell_is_named_there,
                        an_augmented_assignment_on_an_earlier_answer_is_named_where_it_happens,
                        a_later_cell_that_reassigns_an_answers_name_is_named,
                        a_typo_assigning_an_earlier_answers_name_is_named,
                        a_refused_backward_call_is_named_not_blamed_on_right_answers,
                        trial_a_forward_value_changed_in_place_is_named_not_blamed_on_a_right_cell,
                        trial_exercise_4_wrong_keys_and_stale_gradients,
                        trial3_a_blank_answer_above_and_a_forward_name_reassigned_are_named,
                        trial_without_cell_ids_after_a_restart,
                        trial4_what_a_cell_did_is_told_as_it_happened,
                        trial5_a_stopped_cell_names_what_it_read_and_what_to_do,
                        trial7_without_cell_ids_a_function_and_a_scratch_cell,
                        trial9_a_small_error_that_grows_below_names_the_answer_it_comes_from,
                        trial10_without_cell_ids_a_notebook_never_saved,
                        trial12_without_cell_ids_which_run_the_saved_notebook_holds,
                        trial13_without_cell_ids_a_copy_beside_the_notebook,
                        trial14_without_cell_ids_which_notebook_is_the_students,
                        trial15_a_given_name_rebound_and_a_fused_cell_run_before_the_atomic_check,
                        trial16_a_pasted_cell_a_stopped_exec_a_typo_never_saved_and_a_slow_cell,
                        trial17_an_answer_cell_that_stops_and_a_forward_value_reassigned,
                        trial18_exercise_4_edited_and_run_over_a_right_saved_cell,
                        trial19_a_copied_cell_a_deleted_answer_an_old_download_and_a_numpy_answer,
                        trial20_a_moved_cell_an_alias_exercise_2_first_and_an_error_of_its_own,
                        trial22_a_second_notebook_on_the_kernel_and_a_deletion_beside_a_none,
                        trial23_torchs_global_state_changed_by_a_scratch_cell,
                        trial23_a_cd_in_a_scratch_cell_keeps_the_notebooks_folder,
                        trial23_an_answer_in_a_new_cell_below_its_blank_cell,
                        trial36_a_cell_that_stopped_after_binding_its_answer_is_not_called_wrong,
                        trial41_a_magic_cell_that_stopped_is_told_as_the_grader_refuses_it):
            session(kernel)
    finally:
        kernel.close()
