"""A course of an exercise of the instructor's own, end to end as an instructor makes it: `course init
--exercise FILE` from a short-form file, then one `backprop-ninja grade` batch of the solved notebook, the
stub nbgrader would release from it and one submission per slip of the rule table (grader/derive), and Run
All on the solved notebook and the stub."""
from __future__ import annotations

import json
import os

import nbformat
import pytest

from grader import course as course_config
from grader import derive
from grader.authoring import skeleton
from grader.exercise import ATOMIC
from grader.lms import notebooks
from helpers.paths import ROOT
from helpers.variant_courses import CLI, _run, _run_all, _submission

pytestmark = pytest.mark.slow

GALLERY = ROOT / "grader" / "exercises" / "gallery"
FILES = {"wavenet": GALLERY / "wavenet.py", "attention": GALLERY / "attention.py", "rnn": GALLERY / "rnn.py"}


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_course_of_ones_own_exercise(name, tmp_path):
    env = dict(os.environ)
    target = tmp_path / "course"
    _run([*CLI, "course", "init", str(target), "--exercise", str(FILES[name])], "course init", tmp_path, env)
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
    atomic = {a.variable: a.grade_id for a in course.exercise.answers if a.kind == ATOMIC}
    references = skeleton.references(course.exercise)
    slips = {}
    for gradient in derive.for_exercise(course.exercise):
        for index, slip in enumerate(gradient.slips()):
            if slip.name in course.exercise.accepted.get(gradient.name, ()):
                continue  # the exercise accepts it (WaveNet's eps-dropped: lost on some draws, not on others)
            stem = f"{gradient.name}-{index}-{slip.name}"
            slips[stem] = atomic[gradient.name]
            _submission(student, {**references, atomic[gradient.name]: slip.code}, submissions / f"{stem}.ipynb")
    assert slips, "the rule table makes mistakes of every exercise"
    results_dir = tmp_path / "results"
    _run([*CLI, "grade", str(submissions), "--out", str(results_dir), "--course", str(target / "course.yml")],
         "backprop-ninja grade", target, env)
    results = {p.stem: json.loads(p.read_text()) for p in results_dir.glob("*.json")}
    assert results["solved"]["score"] == results["solved"]["max_score"] == sum(course.points.values())
    assert results["stub"]["score"] == 0
    for stem, grade_id in slips.items():
        lost = {t["name"] for t in results[stem]["tests"] if t["score"] < t["max_score"]}
        assert lost == {grade_id}, (stem, lost)
    ran = _run_all({"solved": solved, "stub": student}, course, folder, tmp_path, env)
    for kind, nb in ran.items():
        lines = [o.get("text", "") for c in nb.cells for o in c.get("outputs", [])]
        errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, (kind, errors)
        checks = [line for text in lines for line in text.splitlines() if "|" in line]
        assert checks and all(("ok" in line or "match autograd" in line) if kind == "solved"
                              else "not attempted yet" in line for line in checks), (kind, checks)
