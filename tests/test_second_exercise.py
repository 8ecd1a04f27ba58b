"""The engine grades any exercise: a second one (tests/exercises/tiny_relu.py, a lookup, a linear layer
and a ReLU), kept beside course.yml and named there by its file's path, is graded end to end by the
unchanged grader (the CLI, the sandbox with every wall, the hidden suite, scoring and outputs), and
nothing in the engine's packages names the makemore network.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml
from exercises.tiny_relu_solution import CELLS

from grader.exercise import load
from grader.exercises.makemore_mlp import EXERCISE as MAKEMORE

ROOT = Path(__file__).resolve().parents[1]
TINY_FILE = Path(__file__).with_name("exercises") / "tiny_relu.py"
TINY = load(f"{TINY_FILE}:EXERCISE")
ENGINE = ("sandbox", "judge", "pipeline", "outputs", "lms", "student")


def _notebook(cells: dict[str, str], path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    for grade_id, source in cells.items():
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False, "grade_id": grade_id,
                                     "schema_version": 3}
        notebook.cells.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)


# One wrong answer per atomic cell: each must lose credit on its own test and on no other.
WRONG = {
    "dz": "dz = (z - Y) / n\n",
    "da": "da = -dz\n",
    "dh": "dh = (h > 0).to(h.dtype) * da\n",
    "db": "db = dh.sum(0) / n\n",
    "dW": "dW = e.T @ dh * 2\n",
    "de": "de = dh @ W.T / n\n",
    "dE": "dE = torch.zeros_like(E)\ndE[X] = de\n",
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("tiny-course")
    shutil.copytree(ROOT / "autotests", root / "autotests")
    (root / "autotests" / "known_mistakes.yml").write_text("{}\n")
    shutil.copy(TINY_FILE, root / "tiny_relu.py")
    points = dict.fromkeys(TINY.grade_ids, 1)
    (root / "course.yml").write_text(yaml.safe_dump({
        "course_id": "tiny", "assignment": TINY.assignment, "notebook": TINY.notebook,
        "secret_salt": "a tiny course's salt", "points": points, "exercise": "tiny_relu.py:EXERCISE"}))
    submissions = root / "submissions"
    _notebook(CELLS, submissions / "reference.ipynb")
    blank = {cell: f"{TINY.by_grade_id[cell].variable if cell in TINY.by_grade_id else 'x'} = None\n"
             for cell in TINY.answer_cells}
    blank["fit_backward"] = "def backward(params, cache, X, Y):\n    return {'E': None, 'W': None, 'b': None}\n"
    _notebook(blank, submissions / "blank.ipynb")
    for grade_id, code in WRONG.items():
        _notebook({**CELLS, grade_id: code}, submissions / f"wrong-{grade_id}.ipynb")
    run = subprocess.run([sys.executable, "-c", "from grader.cli import main; main()", "grade", str(submissions),
                          "--out", str(root / "results"), "--course", str(root / "course.yml")],
                         capture_output=True, text=True, cwd=root)
    assert run.returncode == 0, run.stderr[-2000:]
    # Keyed by the notebook each result names: wrong-dE and wrong-de differ only in case, so one result's
    # file takes another name (results must not overwrite each other where case is folded).
    results = [json.loads(p.read_text()) for p in (root / "results").glob("*.json")]
    return {Path(result["extra_data"]["path"]).stem: result for result in results}


def _scores(result: dict) -> dict[str, float]:
    return {t["name"]: t["score"] for t in result["tests"]}


def test_the_reference_scores_full_marks(graded):
    result = graded["reference"]
    assert result["score"] == result["max_score"] == len(TINY.grade_ids), result["tests"]
    assert not result["flags"]


def test_a_blank_notebook_scores_zero(graded):
    assert graded["blank"]["score"] == 0, graded["blank"]["tests"]


@pytest.mark.parametrize("grade_id", sorted(WRONG))
def test_a_wrong_answer_loses_credit_on_its_own_tensor_only(graded, grade_id):
    scores = _scores(graded[f"wrong-{grade_id}"])
    assert scores[grade_id] == 0
    assert {g for g, s in scores.items() if s < 1} == {grade_id}


def _engine_sources():
    for package in ENGINE:
        yield from sorted((ROOT / "grader" / package).rglob("*.py"))


# What would show the engine knows the makemore network: its tensor and parameter names (but the one-
# and two-letter ones, which are loop variables, and those that are ordinary words), its function,
# exercise numbers.
ORDINARY = {"loss", "counts"}
MAKEMORE_WORDS = sorted({*(n for n in (*MAKEMORE.network.parameters, *MAKEMORE.network.intermediates)
                           if len(n) > 2 and n not in ORDINARY),
                         *(f.name for f in MAKEMORE.functions), "makemore"})
PATTERN = re.compile(r"\b(" + "|".join(map(re.escape, MAKEMORE_WORDS)) + r"|d(?:" +
                     "|".join(map(re.escape, MAKEMORE.network.intermediates)) + r")|ex[1-4]_\w*|exercise [1-4])\b")


def test_no_engine_package_names_the_makemore_network():
    found = [f"{path.relative_to(ROOT)}:{number}: {match.group(0)}"
             for path in _engine_sources()
             for number, line in enumerate(path.read_text().splitlines(), start=1)
             for match in PATTERN.finditer(line)]
    assert not found, "\n".join(found[:40])
