"""A course of an exercise of the instructor's own, end to end as an instructor makes it: `course init
--exercise FILE` from a short-form file, then one `backprop-ninja grade` batch of the solved notebook, the
stub nbgrader would release from it and the rule table's slips (grader/derive, one per answer in each notebook,
as `exercise check` lays them out), and Run All on the solved notebook and the stub."""
from __future__ import annotations

import json
import os

import nbformat
import pytest

from grader import course as course_config
from grader.lms import dry_run, notebooks
from helpers.paths import ROOT
from helpers.variant_courses import _cli, _run_all, _submission

pytestmark = pytest.mark.slow

GALLERY = ROOT / "grader" / "exercises" / "gallery"
FILES = {"wavenet": GALLERY / "wavenet.py", "attention": GALLERY / "attention.py", "rnn": GALLERY / "rnn.py"}


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_course_of_ones_own_exercise(name, tmp_path):
    env = dict(os.environ)
    target = tmp_path / "course"
    _cli(["course", "init", str(target), "--exercise", str(FILES[name])], "course init", tmp_path)
    course = course_config.load(target / "course.yml")
    assert (target / FILES[name].name).is_file() and course.exercise.name == name
    folder = target / "source" / course.assignment
    assert (folder / FILES[name].name).is_file(), "released beside the notebook, for the self-check"
    solved = nbformat.read(folder / course.notebook, as_version=4)
    student = notebooks.release(solved)
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    nbformat.write(solved, submissions / "solved.ipynb")
    nbformat.write(student, submissions / "stub.ipynb")
    # Every slip but those the exercise accepts (WaveNet's eps-dropped: lost on some draws, not on others),
    # one per answer in each notebook, as exercise check lays them out
    made = dry_run.submissions(course.exercise)
    slips = [one for one in made if one.mutants]
    assert slips, "the rule table makes mistakes of every exercise"
    for one in [*slips, next(one for one in made if one.stem == dry_run.RAISING)]:
        _submission(student, one.cells, submissions / f"{one.stem}.ipynb")
    results_dir = tmp_path / "results"
    _cli(["grade", str(submissions), "--out", str(results_dir), "--course", str(target / "course.yml")],
         "backprop-ninja grade", target)
    results = {p.stem: json.loads(p.read_text()) for p in results_dir.glob("*.json")}
    assert results["solved"]["score"] == results["solved"]["max_score"] == sum(course.points.values())
    assert results["stub"]["score"] == results[dry_run.RAISING]["score"] == 0
    training = {course.exercise.training.grade_id} if course.exercise.training else set()
    for one in slips:
        lost = {t["name"] for t in results[one.stem]["tests"] if t["score"] < t["max_score"]}
        assert one.own <= lost <= one.own | (training if one.training else set()), (one.stem, one.mutants, lost)
    ran = _run_all({"solved": solved, "stub": student}, course, folder, tmp_path, env)
    for kind, nb in ran.items():
        lines = [o.get("text", "") for c in nb.cells for o in c.get("outputs", [])]
        errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, (kind, errors)
        checks = [line for text in lines for line in text.splitlines() if "|" in line]
        assert checks and all(("ok" in line or "match autograd" in line) if kind == "solved"
                              else "not attempted yet" in line for line in checks), (kind, checks)


def test_a_right_cell_that_calls_one_hot_without_its_width_is_told_so_beside_full_marks(tmp_path):
    """An instructor trial's fused cell wrote `F.one_hot(Y)` with no num_classes: full marks and no word from the
    grader or the self-check, every hidden batch happening to hold the last class, though a batch without it
    breaks the cell (the same call in a cell that fails somewhere was told so)."""
    spec = ROOT / "tests" / "exercises" / "every_class.py"
    target = tmp_path / "course"
    _cli(["course", "init", str(target), "--exercise", str(spec)], "course init", tmp_path)
    course = course_config.load(target / "course.yml")
    folder = target / "source" / course.assignment
    solved = nbformat.read(folder / course.notebook, as_version=4)
    cell = next(c for c in solved.cells if c.get("id") == "dlogits")
    cell.source = "dlogits = (F.softmax(logits, 1) - F.one_hot(Y)) / X.shape[0]\n"
    submitted = tmp_path / "submitted"
    submitted.mkdir()
    nbformat.write(solved, submitted / "ada.ipynb")
    _cli(["grade", str(submitted), "--out", str(tmp_path / "results"), "--course", str(target / "course.yml")],
         "backprop-ninja grade", target)
    result = json.loads((tmp_path / "results" / "ada.json").read_text())
    test = next(t for t in result["tests"] if t["name"] == "dlogits")
    assert test["score"] == test["max_score"], test
    assert test["output"].startswith("correct on every configuration; but F.one_hot(...) given no number of "
                                     "classes"), test["output"]
    ran = _run_all({"ada": solved}, course, folder, tmp_path, dict(os.environ))["ada"]
    line = next(line for c in ran.cells for o in c.get("outputs", []) for line in o.get("text", "").splitlines()
                if line.startswith("dlogits "))
    assert "WRONG" not in line and "; but F.one_hot(...) given no number of classes" in line, line
