"""Courses from the wheel alone: the package built and installed into a fresh virtual environment, then, as a
normal unix user in a folder of their home, `exercise check` and `course init --exercise` on a network that
is in no gallery, and the solved notebook that course init wrote graded full; and `course init --variant`,
whose notebooks the package composes and whose answers the rule table derives (no checkout, no extra): its
solved notebook runs clean (Run All) and grades full, its stub 0.

`exercise check` runs here as an instructor runs it, every route and the self-check's kernels included, with an
nbgrader whose autograde dies as it once did on a batch size not named `n`: the check exits 1 naming that route
alone, and its table says what the other routes and the self-check found."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from grader.course import load
from helpers.variant_courses import DATA_STRIDE
from helpers.wheels import TIMEOUT

pytestmark = pytest.mark.slow

# A two-layer network with a sigmoid and a log-softmax loss written out: no gallery has it. Its manual_backward
# is the generated notebook's part an instructor trial found Run All stopped in (the locked cell that calls it).
MINE = textwrap.dedent('''\
    from grader.authoring.define import exercise

    EXERCISE = exercise(
        name="sigmoid-mlp", title="Two layers, a sigmoid and a log-softmax",
        sizes={"n": (12, (5, 25)), "d_in": (6, (2, 11)), "hidden": (9, (3, 17)), "classes": (4, (2, 8))},
        parameters="""
            W1 = randn(d_in, hidden) / d_in ** 0.5
            b1 = randn(hidden) * 0.1
            W2 = randn(hidden, classes) * 0.1
        """,
        data="""
            X = randn(n, d_in)
            Y = randint(classes, (n,))
        """,
        forward="""
            h = torch.sigmoid(X @ W1 + b1)
            logits = h @ W2
            logp = F.log_softmax(logits, dim=1)
            loss = -logp[range(n), Y].mean()
        """,
        backward=True,
    )
''')


@pytest.fixture(scope="module")
def installed(tmp_path_factory, unix_user, wheels):
    """run(folder, *args): the run's wheel (built once, tests/helpers/wheels.py) installed in a fresh
    environment in the user's home, running a command as the user in `folder` (made for it) and giving
    its stdout."""
    user = unix_user.user
    tmp = tmp_path_factory.mktemp("wheel")
    home = user.home / tmp.name  # the user may be the session's: a folder of its own for this module
    home.mkdir()
    venv = home / "wheel-venv"
    (wheel,) = wheels.glob("backprop_ninja-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                   capture_output=True, timeout=TIMEOUT)
    subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=TIMEOUT)
    user.give(venv)
    env = user.env(PATH=f"{venv / 'bin'}:{Path(sys.base_prefix) / 'bin'}:/usr/bin:/bin", MPLBACKEND="Agg",
                   JUPYTER_PATH=str(Path(sys.base_prefix) / "share" / "jupyter"))

    def run(folder: str, *args, exit_status: int = 0, **extra_env: str) -> subprocess.CompletedProcess:
        work = home / folder
        work.mkdir(exist_ok=True)
        unix_user.keep_root_traversable()
        user.give(work)
        done = user.run([*args], cwd=work, env={**env, **extra_env}, capture_output=True, text=True,
                        timeout=TIMEOUT)
        assert done.returncode == exit_status, (args, done.stdout[-2000:], done.stderr[-2000:])
        return done

    where = run("where", "python", "-c", "import grader; print(grader.__file__)").stdout
    assert Path(where.strip()).is_relative_to(venv), where
    run.home, run.path = home, env["PATH"]
    return run


def _results(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}


FAILING_NBGRADER = """#!/bin/sh
# nbgrader, but autograde dies as it did on a batch size not named n (judge/exam.py read config.sizes.n)
if [ "$1" = autograde ]; then echo "AttributeError: n" >&2; exit 1; fi
exec python -m nbgrader "$@"
"""


def test_exercise_check_and_course_init_from_the_wheel_outside_a_checkout(installed):
    def run(*args, **kwargs):
        return installed("own", *args, **kwargs).stdout

    work = installed.home / "own"
    work.mkdir()
    (work / "mine.py").write_text(MINE, encoding="utf-8")
    fake = work / "bin"
    fake.mkdir()
    (fake / "nbgrader").write_text(FAILING_NBGRADER, encoding="utf-8")
    (fake / "nbgrader").chmod(0o755)
    config = work / "jupyter-config"  # the instructor's own Jupyter configuration: their formgrader's course
    config.mkdir()
    (config / "nbgrader_config.py").write_text("c.CourseDirectory.root = '/home/me/ml101'\n", encoding="utf-8")
    done = installed("own", "backprop-ninja", "exercise", "check", "mine.py", exit_status=1,
                     PATH=f"{fake}:{installed.path}", JUPYTER_CONFIG_DIR=str(config))
    assert "sigmoid-mlp" in done.stdout and "dW1" in done.stdout and "mutants" in done.stdout
    problems = [line for line in done.stderr.splitlines() if not line.startswith(("grading ", "running "))]
    assert problems == ["nbgrader autograde failed (exit 1): AttributeError: n"], done.stderr
    assert "Traceback" not in done.stderr
    table = done.stdout.split("\n\n")[-1].splitlines()
    assert [line.split()[0] for line in table[:5]] == ["answers", "slips", "routes", "self-check", "time"], table
    assert all(line.startswith("warning: the slip ") for line in table[5:]), table
    slips = re.fullmatch(r"slips      \d+ in (\d+) notebooks \(one slip per answer in each\)", table[1])
    assert slips, table
    notebooks = int(slips.group(1)) + 3  # and the solved notebook, the stub and the one whose every answer raises
    assert table[2] == (f"routes     grade --html --gradebook, Gradescope (run_autograder on 2 of {notebooks} "
                        "notebooks, the others from grade's results), nbgrader autograde FAILED"), table
    # each notebook Run All in a kernel: every check line says what grade gave
    agreed = re.fullmatch(r"self-check agrees with grade --html --gradebook on (\d+) of (\d+) answers in "
                          rf"{notebooks} notebooks", table[3])
    assert agreed and agreed.group(1) == agreed.group(2), table
    # the temporary course is neither recorded as the instructor's nor made their formgrader's course
    assert not (config / "backprop_ninja_courses.txt").exists(), sorted(p.name for p in config.iterdir())
    assert (config / "nbgrader_config.py").read_text(encoding="utf-8") == "c.CourseDirectory.root = '/home/me/ml101'\n"

    run("backprop-ninja", "course", "init", "course", "--exercise", "mine.py")
    course = load(work / "course" / "course.yml")
    assert course.exercise.name == "sigmoid-mlp" and (work / "course" / "mine.py").is_file()
    solved = work / "course" / "source" / course.assignment / course.notebook
    assert (solved.parent / "mine.py").is_file()
    run("backprop-ninja", "grade", str(solved), "--out", "results", "--course", "course/course.yml")
    (result,) = _results(work / "results").values()
    assert result["score"] == result["max_score"] == sum(course.points.values()), result["output"]


def test_course_init_variant_from_the_wheel_outside_a_checkout(installed):
    def run(*args):
        return installed("variant", *args).stdout

    work = installed.home / "variant"
    work.mkdir()
    run("backprop-ninja", "course", "init", "course", "--variant", "gelu-layernorm-residual")
    course = load(work / "course" / "course.yml")
    assert course.exercise.name == "makemore-mlp/gelu-layernorm-residual"
    folder = work / "course" / "source" / course.assignment
    notebooks = work / "notebooks"
    notebooks.mkdir()
    released = ("from grader.lms import notebooks; import nbformat; "
                f"solved = nbformat.read({str(folder / course.notebook)!r}, as_version=4); "
                f"nbformat.write(solved, {str(notebooks / 'solved.ipynb')!r}); "
                f"nbformat.write(notebooks.release(solved), {str(notebooks / 'stub.ipynb')!r})")
    run("python", "-c", released)
    run("backprop-ninja", "grade", str(notebooks), "--out", "results", "--course", "course/course.yml")
    results = _results(work / "results")
    assert results["solved"]["score"] == results["solved"]["max_score"] == course.max_score, results["solved"]["output"]
    assert results["stub"]["score"] == 0
    # Run All on the solved notebook beside the course's data (every eighth word, as the variant courses' tests
    # read it: the code is the same for any list of words), as a student runs it.
    words = (folder / course.data).read_text(encoding="utf-8").splitlines()[::DATA_STRIDE]
    (notebooks / course.data).write_text("\n".join(words) + "\n", encoding="utf-8")
    run("python", "-m", "jupyter", "execute", "--inplace", f"--timeout={TIMEOUT}", str(notebooks / "solved.ipynb"))
    ran = nbformat.read(notebooks / "solved.ipynb", as_version=4)
    outputs = [o for c in ran.cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    checks = [c for c in ran.cells if c.id.startswith("check_")]
    assert checks and all("WRONG" not in o.get("text", "") and "not attempted" not in o.get("text", "")
                          for c in checks for o in c.get("outputs", []))
    # A variant drawn from the course's fresh salt, from the wheel too.
    run("backprop-ninja", "course", "init", "drawn", "--variant", "from-salt")
    drawn = load(work / "drawn" / "course.yml")
    assert drawn.exercise.name.startswith("makemore-mlp/")
    assert (work / "drawn" / "source" / drawn.assignment / drawn.notebook).is_file()
