"""The solved notebook and the students' notebook: generated, consistent with the grader's contract,
free of solutions where they must be, and runnable top to bottom.

The executing tests run each notebook once per module (a kernel start and `import torch` cost
seconds) in a temporary copy of the assignment folder, as a student's Run All would.
"""
from __future__ import annotations

import inspect
import math
import re
import shutil
import subprocess
import sys

import nbformat
import pytest
import torch
import torch.nn.functional as F

from grader import course as course_config
from grader.exercises.makemore_mlp import EXERCISE as MAKEMORE
from grader.lms import notebooks
from grader.vocabulary import grade_cell_id
from helpers.notebooks import execute
from solutions import make_notebooks, reference

LECTURE = MAKEMORE.lecture

NETWORK = MAKEMORE.network

EX4 = MAKEMORE.functions[0]

ROOT = make_notebooks.ROOT
SOLVED_PATH = make_notebooks.SOLVED
STUB_PATH = notebooks.release_path(course_config.load(ROOT / "course.yml"))
SOLVED = nbformat.read(ROOT / SOLVED_PATH, as_version=4)
STUB = nbformat.read(ROOT / STUB_PATH, as_version=4)

# What the self-check cells print, in order: exercise 1, exercises 2 and 3, exercise 4 per parameter.
CHECK_LABELS = (*MAKEMORE.atomic, "ex2_dlogits", "ex3_dhprebn", *(f"ex4_d{p}" for p in NETWORK.parameters), "training")
SKIP_TRAINING = "exercise 4 not attempted yet: skipping training"


def nbgrader_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def cell(nb, grade_id: str):
    (found,) = [c for c in nb.cells if nbgrader_id(c) == grade_id]
    return found


def answer_cells(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]


# ---------------------------------------------------------------------------------------------
# The files as committed


def test_committed_notebooks_are_what_the_builder_makes(tmp_path):
    for path in make_notebooks.write(tmp_path):
        relative = path.relative_to(tmp_path)
        fresh = nbformat.read(path, as_version=4)
        committed = nbformat.read(ROOT / relative, as_version=4)
        hint = f"{relative} differs from its builder: run `python -m solutions.make_notebooks`"
        assert committed.metadata == fresh.metadata, hint
        assert [c.id for c in committed.cells] == [c.id for c in fresh.cells], hint
        for old, new in zip(committed.cells, fresh.cells):
            assert (old.cell_type, old.source, old.metadata) == (new.cell_type, new.source, new.metadata), \
                f"{hint} (cell {new.id})"


@pytest.mark.parametrize("nb", [SOLVED, STUB], ids=["solved", "stub"])
def test_committed_notebooks_have_no_outputs_and_a_python3_kernel(nb):
    assert nb.metadata.kernelspec.name == "python3"
    for c in nb.cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, c.id


@pytest.mark.parametrize("nb", [SOLVED, STUB], ids=["solved", "stub"])
def test_answer_cells_have_the_grade_ids_in_order(nb):
    answers = answer_cells(nb)
    assert [nbgrader_id(c) for c in answers] == list(MAKEMORE.answer_cells)
    assert MAKEMORE.answer_cells == (*MAKEMORE.atomic, "ex2_dlogits", "ex3_dhprebn", EX4.cell)
    for c in answers:
        meta = c.metadata.nbgrader
        assert {k: meta[k] for k in ("grade", "solution", "locked", "grade_id", "schema_version")} == {
            "grade": False, "solution": True, "locked": False, "grade_id": nbgrader_id(c), "schema_version": 3}


@pytest.mark.parametrize("nb", [SOLVED, STUB], ids=["solved", "stub"])
def test_grade_ids_are_unique_and_each_tensor_has_its_grade_cell_with_the_course_points(nb):
    ids = [nbgrader_id(c) for c in nb.cells if nbgrader_id(c)]
    assert len(ids) == len(set(ids))
    points = course_config.load(ROOT / "course.yml").points
    grade_cells = {nbgrader_id(c): c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert set(grade_cells) == {grade_cell_id(g) for g in points}
    for grade_id, value in points.items():
        meta = grade_cells[grade_cell_id(grade_id)].metadata.nbgrader
        assert meta["points"] == value and meta["locked"] and not meta["solution"], grade_id
    others = set(ids) - set(MAKEMORE.answer_cells)
    assert not others & set(MAKEMORE.by_grade_id), "a read-only cell uses a grade id of the grader"
    for c in nb.cells:
        if nbgrader_id(c) in others:
            assert c.metadata.nbgrader["locked"] and not c.metadata.nbgrader["solution"], c.id


def test_solved_answer_cells_hold_the_reference_answers():
    cells = reference.cells()
    for c in answer_cells(SOLVED):
        lines = c.source.splitlines()
        stripped = [line.strip() for line in lines]
        assert stripped.count("### BEGIN SOLUTION") == stripped.count("### END SOLUTION") == 1, nbgrader_id(c)
        for line in cells[nbgrader_id(c)].splitlines():
            assert line in lines, f"{nbgrader_id(c)}: {line!r} of its reference is missing"


def test_stub_answer_cells_hold_only_their_blank():
    for c in answer_cells(STUB):
        grade_id = nbgrader_id(c)
        if grade_id != EX4.cell:
            assert c.source.rstrip("\n") == f"{MAKEMORE.by_grade_id[grade_id].variable} = None  # TODO", grade_id


def test_stub_exercise4_keeps_the_contract_with_every_gradient_blank():
    namespace = {"torch": torch, "F": F}
    exec(cell(STUB, EX4.cell).source, namespace)
    manual_backward = namespace[EX4.name]
    assert list(inspect.signature(manual_backward).parameters) == ["params", "cache", "Yb"]
    assert inspect.getdoc(manual_backward)
    assert manual_backward({}, {}, None) == dict.fromkeys(NETWORK.parameters)


def test_stub_shows_no_solution():
    stub_lines = {line.strip() for c in STUB.cells for line in c.source.splitlines()}
    assert not any("BEGIN SOLUTION" in line or "END SOLUTION" in line for line in stub_lines)
    reference_lines = {line.strip() for source in reference.cells().values() for line in source.splitlines()}
    # Exercise 4's signature, docstring and return statement are the contract students keep; the forward
    # lines its reference computes again are the notebook's own forward cell.
    contract = {line.strip() for line in cell(STUB, EX4.cell).source.splitlines()
                if line.strip().startswith(("def ", '"""', "return "))}
    forward = {f"{step.name} = {step.code}" for step in NETWORK.steps}
    assert (stub_lines & reference_lines) - contract - forward - {""} == set()


def test_exercise4_cache_holds_what_the_grader_passes():
    namespace = {"torch": torch, "F": F}
    exec(cell(SOLVED, "setup_ex4_forward").source, namespace)
    params = MAKEMORE.init(LECTURE, torch.Generator().manual_seed(0), dtype=torch.float32)
    Xb = torch.randint(0, LECTURE.vocab, (LECTURE.n, LECTURE.block_size))
    Yb = torch.randint(0, LECTURE.vocab, (LECTURE.n,))
    loss, cache = namespace["fused_forward"](params, Xb, Yb)
    assert tuple(cache) == dict(a for a in EX4.arguments if isinstance(a, tuple))["cache"]
    assert torch.isfinite(loss)


@pytest.mark.slow
def test_nbgrader_releases_exactly_the_stub(tmp_path):
    """The builder's ClearSolutions settings, given to nbgrader itself, release the committed stub."""
    source = tmp_path / "source" / STUB_PATH.parent.name / STUB_PATH.name
    source.parent.mkdir(parents=True)
    shutil.copy(ROOT / SOLVED_PATH, source)
    settings = "".join(f"c.ClearSolutions.{k} = {v!r}\n" for k, v in notebooks.CLEAR_SOLUTIONS.items())
    (tmp_path / "nbgrader_config.py").write_text(f'c = get_config()\nc.CourseDirectory.root = "."\n{settings}')
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", STUB_PATH.parent.name, "--no-db"],
                   cwd=tmp_path, check=True, capture_output=True)
    released = tmp_path / "release" / STUB_PATH.parent.name / STUB_PATH.name
    assert released.read_bytes() == (ROOT / STUB_PATH).read_bytes()


# ---------------------------------------------------------------------------------------------
# Run All, as a student would


def _execute(nb, workdir):
    return execute(nb, workdir, ROOT / STUB_PATH.parent, ROOT)


@pytest.fixture(scope="module")
def solved_run(tmp_path_factory):
    return _execute(SOLVED, tmp_path_factory.mktemp("solved") / STUB_PATH.parent.name)


@pytest.fixture(scope="module")
def stub_run(tmp_path_factory):
    return _execute(STUB, tmp_path_factory.mktemp("stub") / STUB_PATH.parent.name)


def stdout(c) -> str:
    return "".join(o.text for o in c.outputs if o.output_type == "stream" and o.name == "stdout")


def self_check_lines(nb) -> list[str]:
    return [line for c in nb.cells if (nbgrader_id(c) or "").startswith("check_")
            for line in stdout(c).splitlines() if line.strip()]


def labels(lines):
    return tuple(line.split("|")[0].strip() for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("run", ["solved_run", "stub_run"])
def test_run_all_raises_nothing_and_writes_nothing_to_stderr(run, request):
    nb = request.getfixturevalue(run)
    for c in nb.cells:
        for output in c.get("outputs", []):
            assert output.output_type != "error", f"{c.id}: {output.get('ename')}: {output.get('evalue')}"
            assert output.get("name") != "stderr", f"{c.id} wrote to stderr: {output.text}"


@pytest.mark.slow
def test_solved_every_self_check_matches(solved_run):
    lines = self_check_lines(solved_run)
    assert labels(lines) == CHECK_LABELS
    *tensors, training = lines
    for line in tensors:
        assert "exact:" in line and "approximate: True" in line, line
    assert "50 steps match autograd" in training, training
    for line in lines:
        assert "WRONG" not in line and "not attempted" not in line, line


@pytest.mark.slow
def test_stub_every_self_check_is_not_attempted(stub_run):
    lines = self_check_lines(stub_run)
    assert labels(lines) == CHECK_LABELS
    for line in lines:
        assert line.endswith("not attempted yet"), line


@pytest.mark.parametrize("returned, said", [
    ("raise IndexError('list index out of range')", "manual_backward raised IndexError: list index out of range"),
    ("return {**params, 'W1': params['W1'].T}", "manual_backward's gradient of W1 is not shaped like W1"),
    ("return tuple(params.values())", "manual_backward returned a tuple, not a dict of gradients"),
    ("return None", "exercise 4 not attempted yet"),
])
def test_training_skips_a_manual_backward_it_cannot_step_with_and_run_all_goes_on(returned, said, capsys):
    """The fifth TA trial: a gradient of the wrong shape made the training cell raise, and the four after it
    (NameError: lossi): Run All stopped short of the end students.md promises."""
    cells = {c.id: c.source for c in STUB.cells}
    params = {"W1": torch.zeros(4, 3), "b1": torch.zeros(3)}
    ns = {"torch": torch, "FULL_RUN": False, "SEED": 0, "batch_size": 2, "Xtr": torch.zeros(5, 2, dtype=torch.long),
          "Ytr": torch.zeros(5, dtype=torch.long), "init_params": lambda *_: dict(params),
          "fused_forward": lambda p, X, Y=None: (torch.tensor(1.0), {})}
    exec(f"def manual_backward(params, cache, Yb):\n    {returned}\n", ns)  # noqa: S102
    for cell in ("train_loop", "train_plot", "train_calibrate", "train_evaluate", "train_sample"):
        exec(cells[cell], ns)  # noqa: S102
    out = capsys.readouterr().out
    assert ns["lossi"] is None and said in out and out.count("exercise 4 has not trained") == 4, out


@pytest.mark.slow
def test_run_all_reaches_every_check_when_answer_cells_raise(tmp_path):
    """The ninth student trial: with dlogits never assigned (a syntax error in dnorm_logits's cell, the cells after
    it that read it raising), its picture cell raised NameError, and with a manual_backward that raises, the cell
    that calls it did: Run All stopped there in JupyterLab, the classic Notebook and nbclient, and 332 check lines
    never printed. Only answer cells raise (they carry raises-exception); every check prints its line."""
    nb = nbformat.from_dict(SOLVED)
    for c in answer_cells(nb):
        if nbgrader_id(c) == "dnorm_logits":
            c.source = "dnorm_logits = (dcounts * counts\n"
        elif nbgrader_id(c) == "dC":  # assigns dC before it stops, reading demb
            c.source = ("dC = torch.zeros_like(C)\nfor i in range(Xb.shape[0]):\n    for j in range(Xb.shape[1]):\n"
                        "        dC[Xb[i, j]] += demb[i, j]\n")
        elif nbgrader_id(c) == "ex4_backward":
            c.source = c.source.replace("    n = Xb.shape[0]\n", "    n = Xb.shape[0]\n    raise IndexError('oops')\n")
    ran = _execute(nb, tmp_path / STUB_PATH.parent.name)
    raised = [nbgrader_id(c) for c in ran.cells if any(o.output_type == "error" for o in c.get("outputs", []))]
    assert raised and all(c in {nbgrader_id(a) for a in answer_cells(ran)} for c in raised), raised
    assert "ex4_backward" not in raised  # defining the function raises nothing; calling it does, in locked cells
    lines = self_check_lines(ran)
    assert labels(lines) == CHECK_LABELS, lines
    assert "manual_backward raised IndexError: oops" in stdout(cell(ran, "setup_ex4_check"))
    # The tenth student trial: every line below the syntax error names its cell, dC's too, whose cell assigned
    # dC before it stopped (it named demb, the nearest answer not assigned)
    by_label = dict(zip(labels(lines), lines, strict=True))
    for label in ("dh", "dW1", "dC"):
        assert "dnorm_logits" in by_label[label] and "WRONG" not in by_label[label], by_label[label]


@pytest.mark.slow
def test_stub_skips_exercise4(stub_run):
    assert SKIP_TRAINING in stdout(cell(stub_run, "train_loop"))
    for c in stub_run.cells:
        assert not any("image/png" in o.get("data", {}) for o in c.get("outputs", [])), c.id


@pytest.mark.slow
def test_solved_trains_with_its_own_gradients(solved_run):
    training = stdout(cell(solved_run, "train_loop"))
    assert SKIP_TRAINING not in training
    initial = float(re.search(r"step\s+0/\d+: loss (\S+)", training).group(1))
    final = float(re.search(r"^train loss (\S+)$", stdout(cell(solved_run, "train_evaluate")), re.M).group(1))
    assert math.isfinite(final) and final < initial
    assert len(stdout(cell(solved_run, "train_sample")).splitlines()) == 20
    for grade_id in ("plot_dlogits", "train_plot"):
        assert any("image/png" in o.get("data", {}) for o in cell(solved_run, grade_id).outputs), grade_id


@pytest.mark.slow  # a kernel
def test_the_solved_notebook_loads_its_data_where_it_lies():
    """In a checkout, solutions/backprop_ninja_solved.ipynb run in its own folder (as opening it in
    Jupyter does) finds the course's word list, as the released notebook does beside names.txt."""
    import os

    from nbclient import NotebookClient

    nb = nbformat.from_dict(SOLVED)
    data = next(i for i, c in enumerate(nb.cells) if "DATA_FILE" in c.source and c.cell_type == "code")
    nb.cells = nb.cells[:data + 1]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    NotebookClient(nb, kernel_name="python3", timeout=300, allow_errors=True,
                   resources={"metadata": {"path": str((ROOT / SOLVED_PATH).parent)}}).execute(
        env={**os.environ, "PYTHONPATH": path})
    errors = [f"{o.ename}: {o.evalue}" for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == [], errors
