"""`backprop-ninja gradescope build`, and the zip it writes run as Gradescope runs it.

The zip is built with the command, unpacked into a temporary root laid out as Gradescope's /autograder
(source/, submission/, results/), and its run_autograder is executed there once per submission, as
Gradescope does after copying it to /autograder/run_autograder. setup.sh is not run (it installs
Python and PyTorch from the network); its install step is checked offline: pip resolves the pinned
torch and the bundled wheel against this environment without an index, and the wheel installs.
The submissions are graded side by side in one fixture, and the tests only read what was written.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement
from packaging.version import Version

import grader
from grader.cli import main
from grader.course import load
from grader.vocabulary import flag_text
from helpers import refuse
from helpers.notebooks import reference_sources, submission, write
from helpers.paths import COURSE, COURSE_FILE, ROOT, STUB

SCRIPTS = ("setup.sh", "run_autograder")
# What Gradescope's results.json specification names, at the top level and in each test.
TOP_KEYS = {"score", "execution_time", "output", "output_format", "visibility", "stdout_visibility", "extra_data",
            "tests", "leaderboard"}
TEST_KEYS = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format", "tags",
             "visibility", "extra_data"}
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}

REFUSED = "import os\n" + reference_sources()["dcounts"]   # refused by the static check: 0 and a flag
CHAIN_ONLY = "db1 = torch.zeros_like(b1)\n"                # right only on the chain: chain_only_credit


def unpack(archive: Path, target: Path) -> None:
    """As Gradescope unpacks the zip: with the file modes it records."""
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            z.extract(info, target)
            os.chmod(target / info.filename, (info.external_attr >> 16) & 0o777)


def build(tmp: Path, course: Path = COURSE_FILE, out: Path | None = None):
    out = out or tmp / "autograder.zip"
    return CliRunner().invoke(main, ["gradescope", "build", "--course", str(course), "--out", str(out)]), out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    result, archive = build(tmp_path_factory.mktemp("build"))
    assert result.exit_code == 0, (result.output, result.exception)
    return result, archive


@pytest.fixture(scope="module")
def source(built, tmp_path_factory):
    target = tmp_path_factory.mktemp("unpacked")
    unpack(built[1], target)
    return target


# Each submission folder, as the student uploaded it.
SUBMISSIONS = {
    "solved_and_scratch": {COURSE.notebook: submission(), "scratch.ipynb": STUB},
    "partial": {"homework (1).ipynb": submission(replace={"dcounts": REFUSED, "db1": CHAIN_ONLY})},
    "broken": {COURSE.notebook: b"this is not a notebook\n"},
    "empty": {},
    "no_notebook": {"notes.txt": "my answers are in my head\n", "__MACOSX/._backprop_ninja.ipynb": b"\0\5\26\7"},
    "several": {"a.ipynb": STUB, "b/c.ipynb": STUB},
    "broken_course": {COURSE.notebook: submission()},
    "no_grader": {COURSE.notebook: submission()},
    "no_landlock": {COURSE.notebook: submission()},
}
SCRIPTED = ("solved_and_scratch", "partial", "broken", "no_grader", "no_landlock")


def _lay_out(root: Path, archive: Path, files: dict) -> None:
    """/autograder as Gradescope leaves it before run_autograder: the unpacked zip in source/, the
    script copied beside it, the student's files in submission/."""
    unpack(archive, root / "source")
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    for name, content in files.items():
        path = root / "submission" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy(content, path)
        elif isinstance(content, (bytes, str)):
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
        else:
            write(path, content)


@pytest.fixture(scope="module")
def runs(built, tmp_path_factory):
    """case -> (results.json, what was printed, which Gradescope keeps as results/stdout for the staff).

    The cases that grade a notebook, and the one without a grader, run the zip's run_autograder as
    Gradescope does; the others never reach the grader and run its `gradescope run` command in this
    process, meanwhile."""
    assert (Path(sys.prefix) / "bin" / "backprop-ninja").is_file(), "backprop-ninja is not installed (pip install -e .)"
    base = tmp_path_factory.mktemp("gradescope")
    started, done = {}, {}
    for case in SCRIPTED:
        root = base / case
        _lay_out(root, built[1], SUBMISSIONS[case])
        env = {**os.environ, "AUTOGRADER_ROOT": str(root), "BACKPROP_NINJA_PREFIX": sys.prefix}
        if case == "no_grader":  # the grader is not installed at all: the script itself must answer
            env.update(PATH="/usr/bin:/bin", BACKPROP_NINJA_PREFIX=str(base / "nothing-installed"))
        command = [str(root / "run_autograder")]
        if case == "no_landlock":  # an image whose kernel or seccomp profile has no Landlock
            command = [sys.executable, refuse.__file__, "landlock_create_ruleset:ENOSYS", "--", *command]
        log = (root / "stdout").open("w")
        started[case] = root, log, subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    for case in set(SUBMISSIONS) - set(SCRIPTED):
        root = base / case
        _lay_out(root, built[1], SUBMISSIONS[case])
        if case == "broken_course":
            (root / "source" / "course.yml").write_text("secret_salt: [not, a, course]\n", encoding="utf-8")
        result = CliRunner().invoke(main, ["gradescope", "run", "--root", str(root)])
        assert result.exit_code == 0, (result.output, result.exception)
        done[case] = result.output
    for case, (root, log, process) in started.items():
        process.wait(timeout=600)
        log.close()
        done[case] = (root / "stdout").read_text(encoding="utf-8")
    return {case: (json.loads((base / case / "results" / "results.json").read_text(encoding="utf-8")), printed)
            for case, printed in done.items()}


# ---------------------------------------------------------------------------------------------
# The zip


def test_the_zip_holds_the_scripts_course_suite_and_grader_at_its_root(built):
    with zipfile.ZipFile(built[1]) as z:
        names = z.namelist()
    wheels = [n for n in names if n.endswith(".whl")]
    assert wheels == [f"backprop_ninja-{grader.__version__}-py3-none-any.whl"]
    suite = sorted(f"autotests/{p.relative_to(COURSE.autotests_dir).as_posix()}"
                   for p in COURSE.autotests_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and ".pytest_cache" not in p.parts)
    assert sorted(names) == sorted([*SCRIPTS, "course.yml", *wheels, *suite])
    assert "autotests/test_answers.py" in suite


def test_the_scripts_are_executable_bash_and_the_rest_is_not(built, source):
    with zipfile.ZipFile(built[1]) as z:
        modes = {info.filename: (info.external_attr >> 16) & 0o777 for info in z.infolist()}
    for name, mode in modes.items():
        assert mode == (0o755 if name in SCRIPTS else 0o644), (name, oct(mode))
    for name in SCRIPTS:
        assert (source / name).read_text(encoding="utf-8").startswith("#!/usr/bin/env bash\n")
        done = subprocess.run(["bash", "-n", str(source / name)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_building_again_gives_the_same_bytes(built, tmp_path):
    result, again = build(tmp_path)
    assert result.exit_code == 0, result.output
    assert again.read_bytes() == built[1].read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["autograder.zip"]  # no partial file left


def test_the_command_says_the_zip_holds_the_secret_salt(built):
    output = built[0].output
    assert "autograder.zip" in output and "secret salt" in output and "course staff only" in output


def test_the_bundled_course_is_this_course_with_its_suite_beside_it(source):
    bundled = load(source / "course.yml")
    assert bundled.secret_salt == COURSE.secret_salt and bundled.points == COURSE.points
    assert bundled.limits == COURSE.limits and bundled.policy == COURSE.policy
    assert bundled.autotests_dir == source / "autotests"
    for path in COURSE.autotests_dir.glob("*.py"):
        assert (source / "autotests" / path.name).read_bytes() == path.read_bytes()


def test_setup_installs_cpu_torch_within_the_package_range_then_the_bundled_wheel(source):
    setup = (source / "setup.sh").read_text(encoding="utf-8")
    assert not re.search(r"@[A-Z]+@", setup)  # every placeholder filled
    torch = re.search(r'pip install "(torch==[^"]+)" --index-url https://download.pytorch.org/whl/cpu', setup)
    assert torch, setup
    pinned = Requirement(torch.group(1))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    allowed = next(Requirement(r) for r in project["dependencies"] if Requirement(r).name == "torch")
    installed = Version(importlib.metadata.version("torch"))  # the torch the tests here run with
    assert pinned.specifier.contains(installed) and allowed.specifier.contains(installed), (pinned, allowed)
    wheel = next(source.glob("*.whl"))
    assert f'pip install "$source_dir/{wheel.name}"' in setup
    assert setup.index(torch.group(0)) < setup.index(wheel.name)  # CPU torch first: the wheel's range keeps it


def test_the_install_step_resolves_offline_against_this_environment(source):
    """setup.sh's two installs in one offline dry run: the pin and every dependency of the wheel agree."""
    torch = re.search(r'"(torch==[^"]+)"', (source / "setup.sh").read_text(encoding="utf-8")).group(1)
    wheel = next(source.glob("*.whl"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", torch, str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Would install backprop-ninja-{grader.__version__}" in done.stdout


def test_the_wheel_installs_offline_and_holds_the_package_that_runs_here(source, tmp_path):
    wheel = next(source.glob("*.whl"))
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target",
                           str(target), str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    def package(folder: Path) -> dict[str, bytes]:
        return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
                and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(folder).parts)}

    installed = package(target / "grader")
    assert installed == package(Path(grader.__file__).parent)
    assert "lms/gradescope_files/run_autograder" in installed
    script = (target / "bin" / "backprop-ninja").read_text(encoding="utf-8")
    assert "from grader.cli import main" in script
    info = target / f"backprop_ninja-{grader.__version__}.dist-info"
    requires = [line.split(": ", 1)[1] for line in (info / "METADATA").read_text().splitlines()
                if line.startswith("Requires-Dist: ")]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert requires == project["dependencies"]
    done = subprocess.run([sys.executable, "-c", "import grader.lms.gradescope, grader; print(grader.__file__)"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(target)}, cwd=tmp_path,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == str(target / "grader" / "__init__.py"), done.stderr


def test_a_course_without_its_hidden_suite_is_a_one_line_error(tmp_path):
    course = tmp_path / "course.yml"
    course.write_text(COURSE_FILE.read_text(encoding="utf-8") + "autotests: no-such-suite\n", encoding="utf-8")
    result, out = build(tmp_path, course)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.output.startswith("Error: ") and "no-such-suite" in result.output and "hidden suite" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


def test_an_out_that_is_a_folder_is_a_one_line_error(tmp_path):
    result, _ = build(tmp_path, out=tmp_path)
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit)
    assert "Error:" in result.output and "Traceback" not in result.output


# ---------------------------------------------------------------------------------------------
# run_autograder, once per submission


@pytest.mark.slow
def test_every_case_writes_results_in_gradescope_s_schema(runs):
    assert set(runs) == set(SUBMISSIONS)
    for case, (results, _) in runs.items():
        assert set(results) <= TOP_KEYS, (case, set(results) - TOP_KEYS)
        assert isinstance(results["score"], float) and results["score"] >= 0, case
        assert isinstance(results["output"], str) and results["output"].strip(), case
        assert results["visibility"] in VISIBILITIES and results["stdout_visibility"] == "hidden", case
        for test in results["tests"]:
            assert set(test) <= TEST_KEYS, (case, set(test) - TEST_KEYS)
            assert test["status"] in ("passed", "failed") and 0 <= test["score"] <= test["max_score"]


@pytest.mark.slow
def test_the_solved_notebook_gets_full_marks_and_a_scratch_notebook_is_ignored(runs):
    results, log = runs["solved_and_scratch"]
    assert results["score"] == COURSE.max_score
    assert [t["name"] for t in results["tests"]] == list(COURSE.points)
    assert all(t["status"] == "passed" for t in results["tests"])
    assert results["extra_data"]["submission"] == Path(COURSE.notebook).stem
    assert results["extra_data"]["flags"] == [] and results["extra_data"]["max_score"] == COURSE.max_score
    assert f"grading {COURSE.notebook}" in log


@pytest.mark.slow
def test_a_notebook_of_any_name_gets_its_partial_score(runs):
    results, log = runs["partial"]
    scores = {t["name"]: t["score"] for t in results["tests"]}
    assert scores["dcounts"] == 0
    assert scores["db1"] == COURSE.points["db1"] * COURSE.policy.chain_only_credit
    assert {g: s for g, s in scores.items() if g not in ("dcounts", "db1")} == \
        {g: p for g, p in COURSE.points.items() if g not in ("dcounts", "db1")}
    assert results["score"] == pytest.approx(sum(scores.values()))
    assert 0 < results["score"] < COURSE.max_score
    assert "grading homework (1).ipynb" in log


@pytest.mark.slow
def test_flags_reach_the_staff_and_the_student_as_on_every_other_route(runs):
    results, log = runs["partial"]
    assert "flags" not in results  # not a key Gradescope knows: the flags are in the output's words
    flags = results["extra_data"]["flags"]
    assert [(f["kind"], f["cell"]) for f in flags] == [("static-check", "dcounts")]
    assert f"integrity flag (static-check): {flags[0]['evidence']}" in log  # stdout: staff only
    assert results["stdout_visibility"] == "hidden"
    assert flag_text(flags) in results["output"]  # the feedback page's and nbgrader's list, as text


@pytest.mark.slow
def test_a_broken_notebook_scores_0_and_says_why(runs):
    results, _ = runs["broken"]
    assert results["score"] == 0
    assert "not a notebook" in results["output"]


@pytest.mark.parametrize("case, says", [
    ("empty", f"No notebook (.ipynb) in your submission (it is empty): upload {COURSE.notebook}."),
    ("no_notebook", f"No notebook (.ipynb) in your submission (it holds notes.txt): upload {COURSE.notebook}."),
    ("several", f"Your submission holds 2 notebooks (a.ipynb, b/c.ipynb): upload only {COURSE.notebook}."),
])
@pytest.mark.slow
def test_a_submission_without_one_notebook_to_grade_scores_0_with_a_message(runs, case, says):
    results, _ = runs[case]
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"] == says


@pytest.mark.slow
def test_a_grader_that_fails_still_gives_a_result_and_the_staff_a_traceback(runs):
    results, log = runs["broken_course"]
    assert results["score"] == 0 and results["tests"] == []
    assert "not graded" in results["output"] and "course staff" in results["output"]
    assert "Traceback" not in results["output"]
    assert "Traceback" in log and "course.yml" in log


@pytest.mark.slow
def test_without_the_grader_installed_the_script_still_writes_a_result(runs):
    results, log = runs["no_grader"]
    assert results["score"] == 0 and results["tests"] == []
    assert "could not start" in results["output"]
    assert "wrote no results.json" in log


@pytest.mark.slow
def test_a_sandbox_without_a_required_wall_is_the_graders_failure_not_the_students(runs):
    results, log = runs["no_landlock"]
    assert results["tests"] == [] and "not graded" in results["output"] and "course staff" in results["output"]
    assert "landlock wall is required" in log and "landlock" not in results["output"]


@pytest.mark.slow
def test_a_course_of_its_own_exercise_ships_the_exercise_file_and_grades_on_gradescope(tmp_path):
    """The zip carries the exercise file course.yml names, and course.yml names it beside itself: without
    it every student got 0 and "The autograder failed"."""
    exercise = ROOT / "grader" / "exercises" / "gallery" / "rnn.py"
    target = tmp_path / "course"
    made = CliRunner().invoke(main, ["course", "init", str(target), "--exercise", str(exercise)])
    assert made.exit_code == 0, (made.output, made.exception)
    course = load(target / "course.yml")
    result, archive = build(tmp_path, target / "course.yml")
    assert result.exit_code == 0, (result.output, result.exception)
    with zipfile.ZipFile(archive) as z:
        assert "rnn.py" in z.namelist()
        assert "exercise: rnn.py:EXERCISE" in z.read("course.yml").decode()
    root = tmp_path / "autograder"
    solved = target / "source" / course.assignment / course.notebook
    _lay_out(root, archive, {course.notebook: solved})
    ran = CliRunner().invoke(main, ["gradescope", "run", "--root", str(root)])
    assert ran.exit_code == 0, (ran.output, ran.exception)
    data = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    assert data["tests"] and data["score"] == sum(course.points.values()), (data["output"], ran.output)
