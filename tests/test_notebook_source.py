"""The notebook's one source: its forward cell is the exercise's network, its hand-written fused forward and
init compute what the exercise's do, and the builder refuses a prose source that does not fit its exercise.

The builder runs in memory on the repository's prose source (tests/test_notebooks.py proves the committed
notebooks are what it writes); the failure cases build from a copy of that source with one thing changed.
"""
from __future__ import annotations

import ast
import re

import nbformat
import pytest
import torch
import torch.nn.functional as F

from grader import course as course_config
from grader.exercise import Sizes
from grader.exercises.makemore_mlp import EXERCISE
from grader.lms import notebooks
from grader.vocabulary import grade_cell_id
from solutions import make_notebooks, reference

NETWORK = EXERCISE.network
COURSE = course_config.load(make_notebooks.ROOT / "course.yml")
PROSE = make_notebooks.PROSE.read_text()
# The lecture's sizes, and small ones with a tiny activation variance (where batch norm's eps shows).
CONFIGURATIONS = [(EXERCISE.lecture, {}),
                  (Sizes(n=5, vocab=11, block_size=2, n_embd=4, n_hidden=12), {"W1": 3e-3})]


@pytest.fixture(scope="module")
def solved():
    return notebooks.solved_notebook(EXERCISE, make_notebooks.PROSE, reference.cells(), COURSE)


def code(nb, cell_id: str) -> str:
    (source,) = [c.source for c in nb.cells if c.id == cell_id]
    return source


def without_comment(line: str) -> str:
    return line.split("#", 1)[0].rstrip()


def test_the_forward_cell_is_the_networks_source_and_the_prose_writes_none_of_it(solved):
    assigned = [without_comment(line) for line in code(solved, "setup_forward").splitlines()
                if line.split(" = ")[0] in NETWORK.intermediates]
    assert "\n".join(assigned) + "\n" == NETWORK.source()
    prose_forward = PROSE.split('# %% locked="setup_forward"\n', 1)[1].split("\n# %%", 1)[0]
    written = [line.split(" = ")[0] for line in prose_forward.splitlines() if re.match(r"\w+ = \.\.\.(  #|$)", line)]
    assert written == list(NETWORK.intermediates)


def _run(source: str, **namespace) -> dict:
    namespace = {"torch": torch, "F": F, **namespace}
    exec(compile(source, "<notebook cell>", "exec"), namespace)  # noqa: S102
    return namespace


@pytest.mark.parametrize(("sizes", "options"), CONFIGURATIONS, ids=["lecture", "small-variance"])
def test_the_fused_forward_computes_the_networks_values(solved, sizes, options):
    """Exercise 4 trains with the notebook's fused_forward and the grader with the network: the same
    numbers, up to the rounding of `var` against the network's explicit sum (float64)."""
    fused_forward = _run(code(solved, "setup_ex4_forward"))["fused_forward"]
    generator = torch.Generator().manual_seed(1)
    params = EXERCISE.init(sizes, generator, torch.float64, **options)
    data = EXERCISE.batch(sizes, generator)
    values = NETWORK.forward(params, data)
    loss, cache = fused_forward(params, data["Xb"], data["Yb"])
    torch.testing.assert_close(loss, values["loss"], rtol=1e-12, atol=0)
    for name, tensor in cache.items():
        torch.testing.assert_close(tensor, values[name], rtol=1e-12, atol=1e-15, msg=lambda m, n=name: f"{n}: {m}")
    stats = (cache["bnmeani"], cache["bnvar"])
    assert torch.equal(fused_forward(params, data["Xb"], data["Yb"], stats)[0], loss)
    assert fused_forward(params, data["Xb"], bnstats=stats)[0] is None


def test_the_notebooks_init_draws_the_exercises_parameters(solved):
    """The notebook's init_params and the exercise's, from one seed, give the same tensors bit for bit,
    so the notebook's network is the one the grader and the self-check draw."""
    sizes = EXERCISE.lecture
    (definition,) = [node for node in ast.parse(code(solved, "setup_params")).body
                     if isinstance(node, ast.FunctionDef) and node.name == "init_params"]
    init_params = _run(ast.unparse(definition), n_embd=sizes.n_embd, block_size=sizes.block_size,
                       vocab_size=sizes.vocab)["init_params"]
    for dtype in (torch.float64, torch.float32):
        mine = init_params(sizes.n_hidden, dtype, torch.Generator().manual_seed(7))
        theirs = EXERCISE.init(sizes, torch.Generator().manual_seed(7), dtype)
        assert list(mine) == list(theirs) == list(NETWORK.parameters)
        for name in theirs:
            assert torch.equal(mine[name], theirs[name]), name


def test_answer_and_check_cells_come_from_the_exercise(solved):
    points = COURSE.points
    for answer in EXERCISE.answers:
        check = code(solved, grade_cell_id(answer.grade_id))
        if answer.kind != "function":
            assert check == notebooks.check_cell(f'check("{answer.grade_id}")')
        meta = next(c for c in solved.cells if c.id == grade_cell_id(answer.grade_id)).metadata.nbgrader
        assert meta["points"] == points[answer.grade_id]


def test_no_raw_cell_and_no_unfilled_line_reaches_the_notebook(solved):
    assert {c.cell_type for c in solved.cells} == {"markdown", "code"}
    for c in solved.cells:
        assert not re.search(r"^\s*\w+ = \.\.\.", c.source, re.M), c.id
    assert "The prose source of" not in "".join(c.source for c in solved.cells)


# ---------------------------------------------------------------------------------------------
# A prose source that does not fit its exercise


def build_from(tmp_path, prose: str):
    path = tmp_path / "notebook.py"
    path.write_text(prose)
    return notebooks.solved_notebook(EXERCISE, path, reference.cells(), COURSE)


def replaced(old: str, new: str) -> str:
    assert PROSE.count(old) == 1, old
    return PROSE.replace(old, new)


@pytest.mark.parametrize(("prose", "message"), [
    (replaced('# %% answer="dprobs"\n', ""), r"answer cells: expected \['dlogprobs', 'dprobs'"),
    (replaced('# %% answer="dW2"\n\n# %% answer="db2"\n', '# %% answer="db2"\n\n# %% answer="dW2"\n'),
     r"answer cells: expected .* in this order"),
    (replaced('# %% answer="ex4_backward"\n', '# %% answer="ex4_dC"\n'), r"ex4_dC: not an answer cell"),
    (replaced('# %% graded="ex4_dW1"\n', '# %%\n'), r"self-checks: one per grade id: missing \['ex4_dW1'\]"),
    (replaced('# %% graded="ex4_dW1"\n', '# %% graded="ex4_dC"\n'),
     r"missing \['ex4_dW1'\], unknown or repeated \['ex4_dC'\]"),
    (replaced("bnvar = ...  #", "bnvar = 1/(n-1)*bndiff2.sum(0, keepdim=True)  #"),
     r"network: expected `name = \.\.\.`"),
    (replaced("bndiff = ...\nbndiff2 = ...\n", "bndiff2 = ...\nbndiff = ...\n"),
     r"network: .* found \[.*'bndiff2', 'bndiff'"),
    (replaced("COURSE = ...", "SETTINGS = ..."), r"setup_imports: nothing fills `SETTINGS = \.\.\.`"),
    (replaced('# %% answer="dh"\n', '# %% answer="dh"\ndh = None\n'), r"dh: an answer cell is written empty"),
    (replaced('# %% locked="setup_data"\n', '# %% locked="setup_data" answer="dh"\n'),
     r"one role per cell, not locked and answer"),
    (replaced('generated="install"\n', 'generated="imports"\n'), r'setup_install: the only generated cell'),
    (replaced('# %% locked="setup_install" generated="install"\n', '# %% generated="install"\n'),
     r"only a locked cell is generated"),
    (replaced('# %% locked="setup_data"\n', '# %% lockd="setup_data"\n'), r"unknown cell metadata \['lockd'\]"),
    (replaced('# %% graded="ex4_dW1"\n', '# %% graded="ex4_dW1"\nfrom grader.student.check import check\n'),
     r"ex4_dW1: a graded cell is written as its check call alone"),
], ids=["answer-missing", "answers-swapped", "function-key-as-cell", "self-check-missing", "self-check-twice",
        "step-written-out", "steps-swapped", "unknown-fill", "answer-written", "two-roles", "unknown-generated",
        "generated-editable", "misspelt-role", "check-imported"])
def test_a_prose_source_that_does_not_fit_the_exercise_is_refused(tmp_path, prose, message):
    with pytest.raises(notebooks.ProseError, match=message):
        build_from(tmp_path, prose)


def test_the_prose_source_alone_changes_the_notebook(tmp_path):
    """What the prose says reaches both notebooks unchanged: a changed sentence is the only change."""
    sentence = "Finally we draw one batch of `n = 32` examples."
    nb = build_from(tmp_path, replaced(sentence, "Finally we draw a batch."))
    fresh = notebooks.solved_notebook(EXERCISE, make_notebooks.PROSE, reference.cells(), COURSE)
    changed = [new.id for old, new in zip(fresh.cells, nb.cells) if old != new]
    assert len(nb.cells) == len(fresh.cells) and changed == ["cell-6"]
    assert nb.cells[6].source.endswith("Finally we draw a batch.")
    nbformat.validate(notebooks.release(nb))
