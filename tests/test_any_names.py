"""Nothing depends on a name the instructor chose: an exercise whose sizes, parameters, data and
intermediates all have names drawn at random grades on every route (`grade --html`, `grade
--gradebook`, `nbgrader autograde` + `generate_feedback`), and a name the notebook or the static check
keeps for itself is refused at load, in one line."""
from __future__ import annotations

import builtins
import json
import keyword
import os
import random
import shutil
import string
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader import course as course_config
from grader import derive
from grader import exercise as ex
from grader.authoring.define import DefinitionError
from grader.exercise import ATOMIC
from grader.lms import notebooks

CLI = [sys.executable, "-c", "from grader.cli import main; main()"]

# CS231n's two-layer net with a layer norm, the batch size used by a forward line and the loss a sum
# of two terms; every name a slot.
TEMPLATE = '''from grader.authoring.define import exercise

EXERCISE = exercise(
    name="drawn",
    title="A two-layer net, every name drawn at random",
    sizes={{"{N}": (8, (6, 30)), "{D}": (5, (2, 12)), "{H}": (6, (3, 12)), "{C}": (4, (2, 10))}},
    parameters="""
        {W1} = randn({D}, {H}) / {D} ** 0.5
        {b1} = randn({H}) * 0.1
        {gamma} = ones({H})
        {beta} = zeros({H})
        {W2} = randn({H}, {C}) * 0.1
        {b2} = randn({C}) * 0.1
    """,
    data="""
        {X} = randn({N}, {D})
        {y} = randint({C}, ({N},))
    """,
    forward="""
        {a1} = {X} @ {W1} + {b1}
        {mu} = {a1}.mean(1, keepdim=True)
        {xc} = {a1} - {mu}
        {var} = ({xc} ** 2).mean(1, keepdim=True)
        {xhat} = {xc} / ({var} + 1e-5).sqrt()
        {ln1} = {gamma} * {xhat} + {beta}
        {h1} = torch.relu({ln1})
        {scores} = {h1} @ {W2} + {b2}
        {logp} = F.log_softmax({scores}, 1)
        {data_loss} = -{logp}[range({N}), {y}].sum() / {N}
        {reg_loss} = 0.05 * (({W1} * {W1}).sum() + ({W2} * {W2}).sum())
        {loss} = {data_loss} + {reg_loss}
    """,
    fused={{"d{scores}": "{data_loss}"}},
    backward=True,
)
'''
SLOTS = "N D H C W1 b1 gamma beta W2 b2 X y a1 mu xc var xhat ln1 h1 scores logp data_loss reg_loss loss".split()
# Names other exercises and the lecture use for something else, drawn often: a clash is likeliest there.
FAMILIAR = ("n", "N", "g", "t", "p", "k", "loss", "logits", "probs", "Xb", "Yb", "x", "out", "result", "np", "sys",
            "os", "self", "ex", "case", "sizes", "answer", "expected", "d", "L", "_", "_x", "exercise")
# What the engine keeps (checked below to be refused at load) and what the short form's lines call.
KEPT = {*vars(builtins), *ex.NOTEBOOK_NAMES, "manual_backward", "check_ex3",
        "randn", "rand", "randint", "randperm", "ones", "zeros"}


def drawn_names(seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    chosen: dict[str, str] = {}
    for slot in SLOTS:
        while True:
            name = rng.choice(FAMILIAR) if rng.random() < 0.4 else rng.choice(string.ascii_letters) + "".join(
                rng.choice(string.ascii_letters + string.digits + "_") for _ in range(rng.randrange(6)))
            if not (keyword.iskeyword(name) or keyword.iskeyword("d" + name) or "__" in name or name in KEPT
                    or any(name in (v, "d" + v) or v == "d" + name for v in chosen.values())):
                chosen[slot] = name
                break
    return chosen


@pytest.mark.parametrize("seed", range(12))
def test_drawn_names_load_and_derive(seed):
    """Cheap, so many draws: the exercise loads and every answer derives (what `course init` needs)."""
    namespace: dict = {}
    exec(TEMPLATE.format(**drawn_names(seed)), namespace)  # noqa: S102 - the test's own template
    assert derive.for_exercise(namespace["EXERCISE"])


@pytest.mark.parametrize("name, why", [("input", "builtin"), ("COURSE", "notebook uses"), ("check", "notebook uses"),
                                       ("a__b", "double underscore"), ("manual_backward", "notebook uses"),
                                       ("ef", "keyword"), ("d{xc}", "same name as a tensor")])
def test_a_name_the_engine_keeps_is_refused_at_load(name, why):
    names = drawn_names(0)
    names["xhat"] = name = name.format(**names)
    with pytest.raises(DefinitionError) as refused:
        exec(TEMPLATE.format(**names), {})  # noqa: S102 - the test's own template
    message = str(refused.value)
    assert "\n" not in message and name in message and why in message and "rename it" in message


def _run(args: list[str], cwd: Path) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=dict(os.environ), timeout=600)
    assert done.returncode == 0, f"{' '.join(args[:3])}: {done.stderr[-3000:]}"
    return done.stdout + done.stderr


@pytest.mark.slow
def test_drawn_names_grade_on_every_route(tmp_path):
    """A solved notebook, the stub and a rule-table slip of one answer through `grade --html --gradebook`
    (the fast route), then `nbgrader autograde` and `generate_feedback`. Each route died with
    `AttributeError: n` on a wrong answer when the batch size was not named `n`."""
    seed = 0
    (tmp_path / "drawn.py").write_text(TEMPLATE.format(**drawn_names(seed)), encoding="utf-8")
    target = tmp_path / "course"
    _run([*CLI, "course", "init", str(target), "--exercise", str(tmp_path / "drawn.py")], tmp_path)
    course = course_config.load(target / "course.yml")
    _run([shutil.which("nbgrader") or "nbgrader", "generate_assignment", course.assignment], target)
    solved = nbformat.read(target / "source" / course.assignment / course.notebook, as_version=4)
    gradient = derive.for_exercise(course.exercise)[5]
    grade_id = next(a.grade_id for a in course.exercise.answers if a.kind == ATOMIC and a.variable == gradient.name)
    wrong = nbformat.from_dict(json.loads(json.dumps(solved)))
    next(c for c in wrong.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id).source = \
        gradient.slips()[0].code
    for student, nb in {"solved": solved, "stub": notebooks.release(solved), "wrong": wrong}.items():
        folder = target / "submitted" / student / course.assignment
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / course.notebook)
    _run([*CLI, "grade", "submitted", "--out", "fast", "--course", "course.yml", "--html",
          "--gradebook", "gradebook.db"], target)
    results = {p.parent.parent.name if p.stem == course.assignment else p.stem: json.loads(p.read_text())
               for p in (target / "fast").rglob("*.json")}
    total = sum(course.points.values())
    assert {k: r["score"] for k, r in results.items()} == {"solved": total, "stub": 0, "wrong": total - 1}, results
    assert len(list((target / "fast").rglob("*.html"))) >= 3
    _run([shutil.which("nbgrader") or "nbgrader", "autograde", course.assignment, "--force"], target)
    _run([shutil.which("nbgrader") or "nbgrader", "generate_feedback", course.assignment, "--force"], target)
    page = target / "feedback" / "wrong" / course.assignment / course.notebook.replace(".ipynb", ".html")
    assert grade_id in page.read_text(encoding="utf-8")
