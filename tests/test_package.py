"""From a built wheel to a graded class, as a school runs it.

The wheel is built from the sources and installed into a fresh virtual environment, which takes torch,
nbgrader and the other dependencies from this Python's site-packages but backprop-ninja only from the
wheel (the test checks where `grader` is imported from). Three unix users, created here, share one
nbgrader exchange: the instructor runs `backprop-ninja course init` in their home, outside any checkout,
then generate, release; two students fetch, answer and submit; the instructor collects, adds a Canvas
and a Moodle download through zip_collect, autogrades, releases feedback, which the students fetch,
overrides one score by hand as a TA would in formgrader, and exports to Canvas with a roster. Last, a
changed course.yml (points, and one exercise dropped) is applied with `course init --update` and the
class is autograded again. Every command runs as its user, with that user's HOME.

Needs root (useradd, runuser) and traverse permission on the folders holding this Python (/root here,
mode 700: opened with o+x for the module and restored after).
"""
from __future__ import annotations

import csv
import io
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
import yaml

from grader.course import load
from helpers.nbgrader_course import Command, set_answers
from helpers.paths import COURSE, ROOT
from solutions import reference

ASSIGNMENT, NOTEBOOK = COURSE.assignment, COURSE.notebook
COURSE_ID = "ml101-fall"
INSTRUCTOR, STUDENTS = "bpninst", ("bpnstud1", "bpnstud2")
REFERENCE = reference.cells()
MISTAKE = {"dcounts": "dcounts = counts_sum_inv * dprobs\n"}
# A Canvas bulk download: carol submitted twice after the due date (Canvas numbers the second file -1);
# her Canvas login differs from the roster's SIS login, so only her Canvas user id (5001) can place her.
CANVAS = {"carolking_late_5001_900001_backprop_ninja.ipynb": {},
          "carolking_late_5001_900002_backprop_ninja-1.ipynb": REFERENCE}
MOODLE = {"Dan Brown_7002_assignsubmission_file_/backprop_ninja.ipynb": REFERENCE}
CANVAS_COLUMN = f"{ASSIGNMENT} (31337)"
ROSTER = [
    ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", CANVAS_COLUMN],
    ["    Points Possible", "", "", "", "", "50.00"],
    ["One, Student", "4001", "S4001", STUDENTS[0], "A", ""],
    ["Two, Student", "4002", "S4002", STUDENTS[1], "A", ""],
    ["King, Carol", "5001", "S5001", "cking", "B", ""],
    ["Student, Test", "9999", "", "", "", ""],
]
OVERRIDE = ("check_dcounts", 0.5)  # the TA's manual score for student 2's dcounts
TIMEOUT = 900

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"),
                                 reason="needs root, useradd and runuser to create the instructor and students")]


@dataclass
class World:
    base: Path
    venv: Path
    wheel: Path
    exchange: Path
    commands: list[Command] = field(default_factory=list)
    outputs: dict[str, Command] = field(default_factory=dict)

    def home(self, user: str) -> Path:
        return Path(pwd.getpwnam(user).pw_dir)

    @property
    def course(self) -> Path:
        return self.home(INSTRUCTOR) / "course"

    def run(self, user: str, args: list[str], cwd: Path | None = None, name: str | None = None) -> Command:
        """`args` as `user`, with their HOME, in `cwd` (default: their home), the venv first on PATH."""
        home = self.home(user)
        # The venv first; then the base Python's scripts, which nbgrader calls (alembic) as the system
        # site-packages it takes its dependencies from are theirs.
        path = f"{self.venv / 'bin'}:{Path(sys.base_prefix) / 'bin'}:/usr/bin:/bin"
        env = {"HOME": str(home), "USER": user, "PATH": path,
               "LANG": "C.UTF-8", "MPLBACKEND": "Agg",
               # nbconvert's templates: a --system-site-packages venv has them only in the base prefix
               "JUPYTER_PATH": str(Path(sys.base_prefix) / "share" / "jupyter")}
        full = ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), *args]
        os.chmod("/root", os.stat("/root").st_mode | 0o001)  # again: another test may have restored it meanwhile
        done = subprocess.run(full, cwd=cwd or home, capture_output=True, text=True, timeout=TIMEOUT)
        command = Command([user, *args], Path(cwd or home), done.returncode, done.stdout, done.stderr)
        self.commands.append(command)
        if name:
            self.outputs[name] = command
        return command

    def must(self, user: str, args: list[str], cwd: Path | None = None, name: str | None = None) -> Command:
        command = self.run(user, args, cwd, name)
        if command.returncode != 0:
            raise AssertionError(f"a step every later one needs failed:\n{command}")
        return command

    def nbgrader(self, user: str, *args: str, cwd: Path | None = None, name: str | None = None) -> Command:
        return self.must(user, ["python", "-m", "nbgrader", *args], cwd, name)

    def student(self, user: str, command: str) -> Command:
        """A student's nbgrader command, with the course id and exchange their own config would hold."""
        return self.nbgrader(user, command, ASSIGNMENT, f"--course={COURSE_ID}", f"--Exchange.root={self.exchange}")


def _sources(into: Path) -> None:
    """What the wheel is built from: the files MANIFEST.in names and the package itself."""
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "course.yml"):
        shutil.copy(ROOT / name, into / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "course_data")
    for folder in ("grader", "assignments", "autotests"):
        shutil.copytree(ROOT / folder, into / folder, ignore=ignore)
    (into / "solutions").mkdir()
    shutil.copy(ROOT / "solutions" / "backprop_ninja_solved.ipynb", into / "solutions")


def _user(name: str) -> None:
    subprocess.run(["userdel", "-r", name], capture_output=True)
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True, capture_output=True)


def _answered(source: Path, answers: dict[str, str]) -> str:
    nb = nbformat.read(source, as_version=4)
    set_answers(nb, answers)
    return nbformat.writes(nb)


def _as_user(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chown(p, entry.pw_uid, entry.pw_gid)


@pytest.fixture(scope="module")
def world():
    base = Path(tempfile.mkdtemp(prefix="bpn-package-", dir="/tmp"))
    base.chmod(0o755)
    root_mode = stat.S_IMODE(os.stat("/root").st_mode)
    os.chmod("/root", root_mode | 0o001)  # the students' and instructor's Python lives under /root/.pyenv
    try:
        src, dist = base / "src", base / "dist"
        src.mkdir()
        _sources(src)
        subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                        "--no-index", "-q", "-w", str(dist)], check=True, capture_output=True, timeout=TIMEOUT)
        (wheel,) = dist.glob("backprop_ninja-*.whl")
        venv = base / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                       capture_output=True, timeout=TIMEOUT)
        subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                       check=True, capture_output=True, timeout=TIMEOUT)
        shutil.rmtree(src)
        for user in (INSTRUCTOR, *STUDENTS):
            _user(user)
        exchange = base / "exchange"  # as an administrator makes it: every user may write, sticky
        exchange.mkdir()
        exchange.chmod(0o1777)
        w = World(base, venv, wheel, exchange)
        yield w
    finally:
        os.chmod("/root", root_mode)
        for user in (INSTRUCTOR, *STUDENTS):
            subprocess.run(["userdel", "-r", user], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def taught(world):
    """The term, run once: every command as its user."""
    w, course = world, world.course
    w.must(INSTRUCTOR, ["python", "-c", "import grader; print(grader.__file__)"], name="import")
    w.must(INSTRUCTOR, ["backprop-ninja", "course", "init", "course", "--course-id", COURSE_ID,
                        "--exchange", str(w.exchange)], name="init")
    w.nbgrader(INSTRUCTOR, "generate_assignment", ASSIGNMENT, cwd=course)
    w.nbgrader(INSTRUCTOR, "release_assignment", ASSIGNMENT, cwd=course)
    for student, answers in zip(STUDENTS, (REFERENCE, {**REFERENCE, **MISTAKE})):
        w.student(student, "fetch_assignment")
        fetched = w.home(student) / ASSIGNMENT / NOTEBOOK
        fetched.write_text(_answered(fetched, answers), encoding="utf-8")  # the student's own file, edited
        w.student(student, "submit")
    w.nbgrader(INSTRUCTOR, "collect", ASSIGNMENT, cwd=course)

    archive = course / "downloaded" / ASSIGNMENT / "archive"
    archive.mkdir(parents=True)
    released = course / "release" / ASSIGNMENT / NOTEBOOK
    with zipfile.ZipFile(archive / "canvas-submissions.zip", "w") as z:
        for name, answers in CANVAS.items():
            z.writestr(name, _answered(released, answers))
    with zipfile.ZipFile(archive / "moodle-submissions.zip", "w") as z:
        for name, answers in MOODLE.items():
            z.writestr(name, _answered(released, answers))
    _as_user(course / "downloaded", INSTRUCTOR)
    w.nbgrader(INSTRUCTOR, "zip_collect", ASSIGNMENT, cwd=course, name="zip_collect")

    w.nbgrader(INSTRUCTOR, "autograde", ASSIGNMENT, cwd=course, name="autograde")
    w.nbgrader(INSTRUCTOR, "generate_feedback", ASSIGNMENT, cwd=course)
    w.nbgrader(INSTRUCTOR, "release_feedback", ASSIGNMENT, "--CourseDirectory.student_id_exclude=carolking,moodle-7002",
               cwd=course)
    for student in STUDENTS:
        w.student(student, "fetch_feedback")

    cell, score = OVERRIDE
    w.must(INSTRUCTOR, ["python", "-c", (
        "from nbgrader.api import Gradebook\n"
        "with Gradebook('sqlite:///gradebook.db') as gb:\n"
        f"    g = gb.find_grade({cell!r}, {Path(NOTEBOOK).stem!r}, {ASSIGNMENT!r}, {STUDENTS[1]!r})\n"
        f"    g.manual_score = {score}\n"
        "    gb.db.commit()\n")], cwd=course)
    roster = course / "canvas_gradebook.csv"
    with open(roster, "w", newline="", encoding="utf-8-sig") as f:
        csv.writer(f).writerows(ROSTER)
    _as_user(roster, INSTRUCTOR)
    w.must(INSTRUCTOR, ["backprop-ninja", "export", "results", "--format", "canvas", "--roster", roster.name,
                        "--course", "course.yml"], cwd=course, name="export")
    w.must(INSTRUCTOR, ["backprop-ninja", "report", "results"], cwd=course, name="report")
    w.must(INSTRUCTOR, ["backprop-ninja", "sandbox", "check"], cwd=course, name="sandbox check")

    # The instructor changes course.yml after the class was graded: dprobs is worth 3, ex4_training is dropped.
    raw = yaml.safe_load((course / "course.yml").read_text(encoding="utf-8"))
    raw["points"]["dprobs"] = 3
    del raw["points"]["ex4_training"]
    (course / "course.yml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    w.run(INSTRUCTOR, ["python", "-m", "nbgrader", "autograde", ASSIGNMENT, "--force"], cwd=course,
          name="stale autograde")
    w.must(INSTRUCTOR, ["backprop-ninja", "course", "init", "--update", "."], cwd=course, name="update")
    w.nbgrader(INSTRUCTOR, "autograde", ASSIGNMENT, "--force", cwd=course, name="regrade")
    return w


def gradebook(course: Path) -> dict[str, dict]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student.id: {"score": s.score, "max_score": s.max_score, "lms_user_id": s.student.lms_user_id,
                               "first_name": s.student.first_name}
                for s in gb.assignment_submissions(ASSIGNMENT)}


def test_every_command_succeeds_as_its_user(taught):
    for command in taught.commands:
        if command is taught.outputs["stale autograde"]:  # refused on purpose: see the last test
            continue
        assert command.returncode == 0, str(command)
        assert "Traceback" not in command.stderr, str(command)


def test_the_package_is_the_wheels_not_the_checkout(taught):
    imported = Path(taught.outputs["import"].stdout.strip())
    assert taught.venv in imported.parents, imported
    names = zipfile.ZipFile(taught.wheel).namelist()
    material = "grader/course_data/"
    for needed in ("course.yml", f"assignments/{ASSIGNMENT}/{NOTEBOOK}", f"assignments/{ASSIGNMENT}/names.txt",
                   f"assignments/{ASSIGNMENT}/names.LICENSE", "solutions/backprop_ninja_solved.ipynb",
                   "autotests/conftest.py", "autotests/known_mistakes.yml"):
        assert material + needed in names, needed
    assert not [n for n in names if n.startswith(material) and n.endswith("__init__.py")], "material is no package"


def test_course_init_writes_a_course_for_a_normal_user(taught):
    course = taught.course
    config = (course / "nbgrader_config.py").read_text(encoding="utf-8")
    assert f"c.CourseDirectory.course_id = {COURSE_ID!r}" in config
    assert f"c.Exchange.root = {str(taught.exchange)!r}" in config
    assert load(course / "course.yml").course_id == COURSE_ID
    assert stat.S_IMODE((course / "course.yml").stat().st_mode) == 0o600  # it holds the salt
    assert (course / "course.yml").stat().st_uid == pwd.getpwnam(INSTRUCTOR).pw_uid
    released = sorted(p.name for p in (taught.exchange / COURSE_ID / "outbound" / ASSIGNMENT).iterdir())
    assert released == sorted([NOTEBOOK, "names.txt", "names.LICENSE"])


def test_each_students_submission_is_their_own_and_graded(taught):
    inbound = taught.exchange / COURSE_ID / "inbound"
    for student in STUDENTS:
        (folder,) = [p for p in inbound.iterdir() if p.name.startswith(f"{student}+{ASSIGNMENT}+")]
        assert (folder / NOTEBOOK).stat().st_uid == pwd.getpwnam(student).pw_uid
    book = gradebook(taught.course)
    assert book[STUDENTS[0]]["score"] == pytest.approx(book[STUDENTS[0]]["max_score"])
    assert book[STUDENTS[1]]["score"] < book[STUDENTS[1]]["max_score"]


def test_zip_collect_files_canvas_and_moodle_downloads_with_their_lms_ids(taught):
    book = gradebook(taught.course)
    assert set(book) == {*STUDENTS, "carolking", "moodle-7002"}
    assert book["carolking"]["lms_user_id"] == "5001"
    assert book["carolking"]["score"] == pytest.approx(book["carolking"]["max_score"]), "the -1 resubmission wins"
    assert (book["moodle-7002"]["lms_user_id"], book["moodle-7002"]["first_name"]) == ("7002", "Dan")
    assert book["moodle-7002"]["score"] == pytest.approx(book["moodle-7002"]["max_score"])
    log = taught.outputs["zip_collect"].stderr
    assert "resubmitted it as carolking_late_5001_900002_backprop_ninja-1.ipynb" in log
    assert "Canvas marks carolking's submission late" in log


def test_students_fetch_their_feedback(taught):
    for student in STUDENTS:
        pages = list((taught.home(student) / ASSIGNMENT / "feedback").glob(f"*/{Path(NOTEBOOK).stem}.html"))
        assert len(pages) == 1, student
        assert pages[0].stat().st_uid == pwd.getpwnam(student).pw_uid


def test_the_canvas_export_takes_the_gradebook_and_the_rosters_column(taught):
    command = taught.outputs["export"]
    rows = list(csv.reader(io.StringIO((taught.course / "results" / "canvas.csv").read_text(encoding="utf-8"))))
    header, points, *students = rows
    assert header[-1] == CANVAS_COLUMN
    by_login = {row[3]: float(row[-1]) for row in students}
    assert set(by_login) == {*STUDENTS, "cking"}, "carol is placed by her Canvas user id, not her login"
    max_score = COURSE.max_score
    assert float(points[-1]) == max_score
    assert by_login[STUDENTS[1]] == pytest.approx(max_score - COURSE.points["dcounts"] + OVERRIDE[1]), \
        "the TA's manual score counts"
    assert by_login["cking"] == pytest.approx(max_score)
    assert f"{CANVAS_COLUMN}: Canvas says 50 points possible, the course {max_score:g}" in command.stderr
    assert "moodle-7002 (gradebook): no student 'moodle-7002' in the roster" in command.stderr


def test_the_report_finds_every_submission_graded(taught):
    command = taught.outputs["report"]
    assert "not graded" not in command.stderr
    page = (taught.course / "results" / "report.html").read_text(encoding="utf-8")
    assert "was graded." in page


def test_sandbox_check_and_every_grade_run_agree_on_the_filesystem_wall(taught):
    """The wheel's grader/course_data lies inside the package the child imports: it must be hidden all
    the same, so no grade run records the wall missing where `sandbox check` says it holds."""
    line = next(row for row in taught.outputs["sandbox check"].stdout.splitlines() if row.startswith("filesystem"))
    found = {path.relative_to(taught.course).as_posix(): json.loads(path.read_text(encoding="utf-8"))
             for path in (taught.course / "results").rglob("*.json")}
    recorded = {name: data["extra_data"]["isolation"]["missing"] for name, data in found.items()
                if isinstance(data, dict) and "isolation" in data.get("extra_data", {})}
    assert recorded and " in force: " in line, (line, recorded)
    assert {name: missing for name, missing in recorded.items() if "filesystem" in missing} == {}


def test_changed_points_are_refused_until_update_then_regraded(taught):
    stale = taught.outputs["stale autograde"]
    assert "its points differ from the gradebook's" in stale.stderr and "course init --update" in stale.stderr
    assert "partial credit cannot be greater" not in stale.stderr
    assert "gradebook.db and release/" in taught.outputs["update"].stdout
    book = gradebook(taught.course)
    new_max = COURSE.max_score - COURSE.points["ex4_training"] - COURSE.points["dprobs"] + 3
    for student, entry in book.items():
        assert entry["max_score"] == pytest.approx(new_max), student
    assert book[STUDENTS[0]]["score"] == pytest.approx(new_max)
    results = json.loads((taught.course / "results" / STUDENTS[0] / ASSIGNMENT / f"{Path(NOTEBOOK).stem}.json")
                         .read_text(encoding="utf-8"))
    assert results["max_score"] == pytest.approx(new_max)
