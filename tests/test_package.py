"""A whole term, from a built wheel to a graded class, as a TA runs it.

The wheel (built once per run, tests/helpers/wheels.py) is installed into a fresh virtual environment,
which takes torch, nbgrader and the other dependencies from this Python's site-packages but backprop-ninja only from the
wheel (the test checks where `grader` is imported from). Four unix users, created here, share one
nbgrader exchange: the instructor runs `backprop-ninja course init` in their home, outside any checkout,
then generate, release; three students fetch, answer and submit; the instructor collects, adds a Canvas
download (two students of the same name, one of whom resubmitted late) and a Moodle one through
zip_collect, autogrades, takes a second Canvas download (a resubmission) with zip_collect and autograde
again, with no --force, sets one score by hand in the gradebook as a TA does in formgrader, generates
and releases feedback to every student, which the students fetch, exports to Canvas with and without a
roster, writes the report and the per-grade-id export. Last, a changed course.yml (points, and one
exercise dropped) is applied with `course init --update` and the class is autograded again. Every
command runs as its user, with that user's HOME.

The `taught` fixture plays the term once and keeps every command (`outputs` by name) and the
gradebook as it stood before the last change (`book`); each test reads one thing of it, so an assert
for another part of the term is one more test.

Needs root (useradd, runuser) and traverse permission on the folders holding this Python (/root here,
mode 700: opened with o+x for the module and restored after).
"""
from __future__ import annotations

import csv
import io
import json
import os
import pwd
import re
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
from grader.judge import prints
from helpers.nbgrader_course import Command, set_answers
from helpers.paths import COURSE
from solutions import reference

ASSIGNMENT, NOTEBOOK = COURSE.assignment, COURSE.notebook
COURSE_ID = "ml101-fall"
INSTRUCTOR, STUDENTS = "bpninst", ("bpnstud1", "bpnstud2", "bpnstud3")
REFERENCE = reference.cells()
MISTAKE = {"dcounts": "dcounts = counts_sum_inv * dprobs\n"}
ANSWERS = (REFERENCE, {**REFERENCE, **MISTAKE}, {})  # each student's: right, one mistake, nothing typed
# A Canvas bulk download. Two Carol Kings (Canvas's first field is the run-together name): 5001 submitted
# twice after the due date (Canvas numbers the second file -1), 5002 once, with a mistake. Neither Canvas
# name is a login, so only the Canvas user id can place them.
CANVAS = {"kingcarol_late_5001_900001_backprop_ninja.ipynb": {},
          "kingcarol_late_5001_900002_backprop_ninja-1.ipynb": REFERENCE,
          "kingcarol_5002_900003_backprop_ninja.ipynb": MISTAKE}
# The second download, days later: 5002 resubmitted, right this time; 5001's file is there again.
CANVAS_AGAIN = {"kingcarol_late_5001_900002_backprop_ninja-1.ipynb": REFERENCE,
                "kingcarol_5002_900107_backprop_ninja.ipynb": REFERENCE}
MOODLE = {"Dan Brown_7002_assignsubmission_file_/backprop_ninja.ipynb": REFERENCE}
LMS_STUDENTS = ("canvas-5001", "canvas-5002", "moodle-7002")
CANVAS_COLUMN = "Backprop Ninja (31337)"  # as Canvas names the assignment; course.yml says backprop_ninja
ROSTER = [
    ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", CANVAS_COLUMN],
    ["    Points Possible", "", "", "", "", "50.00"],
    ["One, Student", "4001", "S4001", STUDENTS[0], "A", ""],
    ["Two, Student", "4002", "S4002", STUDENTS[1], "A", ""],
    ["Three, Student", "4003", "S4003", STUDENTS[2], "A", ""],
    ["King, Carol", "5001", "S5001", "cking", "B", ""],
    ["King, Carol", "5002", "S5002", "cking2", "B", ""],
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
    book: dict[str, dict] = field(default_factory=dict)  # the gradebook once feedback and exports were made
    handed_back: dict[str, str] = field(default_factory=dict)  # an LMS student's feedback page as released

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


def _user(name: str) -> None:
    subprocess.run(["userdel", "-r", name], capture_output=True)
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True, capture_output=True)


def _answered(source: Path, answers: dict[str, str]) -> str:
    nb = nbformat.read(source, as_version=4)
    set_answers(nb, answers)
    return nbformat.writes(nb)


def _download(path: Path, released: Path, files: dict[str, dict[str, str]]) -> None:
    """An LMS's bulk download, its files answered as `files` says, as the instructor saved it."""
    with zipfile.ZipFile(path, "w") as z:
        for name, answers in files.items():
            z.writestr(name, _answered(released, answers))
    _as_user(path.parent.parent, INSTRUCTOR)


def _as_user(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chown(p, entry.pw_uid, entry.pw_gid)


@pytest.fixture(scope="module")
def world(wheels):
    base = Path(tempfile.mkdtemp(prefix="bpn-package-", dir="/tmp"))
    base.chmod(0o755)
    root_mode = stat.S_IMODE(os.stat("/root").st_mode)
    os.chmod("/root", root_mode | 0o001)  # the students' and instructor's Python lives under /root/.pyenv
    try:
        (wheel,) = wheels.glob("backprop_ninja-*.whl")
        venv = base / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                       capture_output=True, timeout=TIMEOUT)
        subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                       check=True, capture_output=True, timeout=TIMEOUT)
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
    for student, answers in zip(STUDENTS, ANSWERS):
        w.student(student, "fetch_assignment")
        fetched = w.home(student) / ASSIGNMENT / NOTEBOOK
        fetched.write_text(_answered(fetched, answers), encoding="utf-8")  # the student's own file, edited
        w.student(student, "submit")
    # The red team's hand-in as a classmate: the blank notebook, in the first student's name, after theirs
    w.nbgrader(STUDENTS[2], "submit", ASSIGNMENT, f"--course={COURSE_ID}", f"--Exchange.root={w.exchange}",
               f"--student={STUDENTS[0]}")
    w.nbgrader(INSTRUCTOR, "collect", ASSIGNMENT, cwd=course, name="collect")

    archive = course / "downloaded" / ASSIGNMENT / "archive"
    archive.mkdir(parents=True)
    released = course / "release" / ASSIGNMENT / NOTEBOOK
    _download(archive / "canvas-submissions.zip", released, CANVAS)
    _download(archive / "moodle-submissions.zip", released, MOODLE)
    w.nbgrader(INSTRUCTOR, "zip_collect", ASSIGNMENT, cwd=course, name="zip_collect")
    w.nbgrader(INSTRUCTOR, "autograde", ASSIGNMENT, cwd=course, name="autograde")
    _download(archive / "canvas-submissions-2.zip", released, CANVAS_AGAIN)  # kept beside the first
    w.nbgrader(INSTRUCTOR, "zip_collect", ASSIGNMENT, cwd=course, name="zip_collect again")
    w.nbgrader(INSTRUCTOR, "autograde", ASSIGNMENT, cwd=course, name="autograde again")

    cell, score = OVERRIDE  # as a TA sets it in formgrader: the manual score of one grade cell
    w.must(INSTRUCTOR, ["python", "-c", (
        "from nbgrader.api import Gradebook\n"
        "with Gradebook('sqlite:///gradebook.db') as gb:\n"
        f"    g = gb.find_grade({cell!r}, {Path(NOTEBOOK).stem!r}, {ASSIGNMENT!r}, {STUDENTS[1]!r})\n"
        f"    g.manual_score = {score}\n"
        "    gb.db.commit()\n")], cwd=course)
    w.nbgrader(INSTRUCTOR, "generate_feedback", ASSIGNMENT, cwd=course, name="generate_feedback")
    w.nbgrader(INSTRUCTOR, "release_feedback", ASSIGNMENT, cwd=course, name="release_feedback")
    # What the instructor hands back through the LMS, as released (the regrade below makes it again)
    w.handed_back = {student: (course / "feedback" / student / ASSIGNMENT / f"{Path(NOTEBOOK).stem}.html").read_text(
        encoding="utf-8") for student in LMS_STUDENTS}
    for student in STUDENTS:
        w.student(student, "fetch_feedback")

    roster = course / "canvas_gradebook.csv"
    with open(roster, "w", newline="", encoding="utf-8-sig") as f:
        csv.writer(f).writerows(ROSTER)
    _as_user(roster, INSTRUCTOR)
    w.must(INSTRUCTOR, ["backprop-ninja", "export", "results", "--format", "canvas", "--roster", roster.name,
                        "--course", "course.yml"], cwd=course, name="export")
    w.must(INSTRUCTOR, ["backprop-ninja", "export", "results", "--format", "canvas", "--out", "no_roster.csv",
                        "--course", "course.yml"], cwd=course, name="export without roster")
    w.must(INSTRUCTOR, ["backprop-ninja", "export", "results", "--format", "grade-ids"], cwd=course,
           name="grade-ids")
    w.must(INSTRUCTOR, ["backprop-ninja", "report", "results"], cwd=course, name="report")
    w.must(INSTRUCTOR, ["backprop-ninja", "report", "results", "--json"], cwd=course, name="report json")
    w.book = gradebook(course)
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
    # The regrade removed each student's feedback of the earlier grading: made again, as the README says
    w.nbgrader(INSTRUCTOR, "generate_feedback", ASSIGNMENT, cwd=course, name="feedback again")
    return w


def gradebook(course: Path) -> dict[str, dict]:
    """Each student's submission as the gradebook holds it: `total` is what the student ends with (nbgrader's
    score less a late penalty), `dcounts` one tensor's score."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student.id: {"total": s.score - s.late_submission_penalty, "score": s.score,
                               "max_score": s.max_score, "lms_user_id": s.student.lms_user_id,
                               "first_name": s.student.first_name, "last_name": s.student.last_name,
                               "dcounts": gb.find_grade(OVERRIDE[0], Path(NOTEBOOK).stem, ASSIGNMENT,
                                                        s.student.id).score}
                for s in gb.assignment_submissions(ASSIGNMENT)}


def _csv(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))


def _feedback(w: World, student: str) -> str:
    """The feedback page the student fetched (an exchange student), or the one the instructor hands back
    through the LMS."""
    if student not in STUDENTS:
        return w.handed_back[student]
    (page,) = (w.home(student) / ASSIGNMENT / "feedback").glob(f"*/{Path(NOTEBOOK).stem}.html")
    return page.read_text(encoding="utf-8")


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
    assert released == sorted([NOTEBOOK, "names.txt", "names.LICENSE", prints.FILE])


def test_each_students_submission_is_their_own_and_graded(taught):
    """Each student's own hand-in is collected and graded; one another student made in their name (nbgrader's
    own collect took it, with a warning: a red team) is refused, in one line."""
    inbound = taught.exchange / COURSE_ID / "inbound"
    for student in STUDENTS:
        folders = [p for p in inbound.iterdir() if p.name.startswith(f"{student}+{ASSIGNMENT}+")]
        owners = sorted(pwd.getpwuid(p.stat().st_uid).pw_name for p in folders)
        assert owners == sorted([student, *([STUDENTS[2]] if student == STUDENTS[0] else [])]), owners
    (forged,) = [p for p in inbound.iterdir() if p.name.startswith(f"{STUDENTS[0]}+") and p.stat().st_uid ==
                 pwd.getpwnam(STUDENTS[2]).pw_uid]
    said = " ".join(taught.outputs["collect"].stderr.split())
    assert f"refused: {forged} claims to be handed in by {STUDENTS[0]} but was handed in by {STUDENTS[2]}: not " \
        "collected" in said, said
    book = taught.book
    assert book[STUDENTS[0]]["score"] == pytest.approx(book[STUDENTS[0]]["max_score"])
    assert book[STUDENTS[1]]["score"] < book[STUDENTS[1]]["max_score"]
    assert book[STUDENTS[2]]["score"] == 0


def test_zip_collect_takes_same_name_students_resubmissions_and_a_second_download(taught):
    book = taught.book
    assert set(book) == {*STUDENTS, *LMS_STUDENTS}
    for student, user_id in (("canvas-5001", "5001"), ("canvas-5002", "5002")):  # both named kingcarol by Canvas
        assert (book[student]["lms_user_id"], book[student]["last_name"]) == (user_id, "kingcarol")
        assert book[student]["score"] == pytest.approx(book[student]["max_score"]), student
    assert (book["moodle-7002"]["lms_user_id"], book["moodle-7002"]["first_name"]) == ("7002", "Dan")
    assert book["moodle-7002"]["score"] == pytest.approx(book["moodle-7002"]["max_score"])
    first = taught.outputs["zip_collect"].stderr
    assert "canvas-5001's newer file is kingcarol_late_5001_900002_backprop_ninja-1.ipynb" in first
    assert "Canvas marks canvas-5001's submission late" in first
    again = taught.outputs["zip_collect again"].stderr
    assert "already collected for canvas-5001" in again and "already collected for moodle-7002" in again
    assert "canvas-5002: a newer file; removed" in again
    regraded = taught.outputs["autograde again"].stderr
    assert "canvas-5002" in regraded and f"Skipping existing assignment: {taught.course}/autograded/canvas-5001" \
        in regraded, "only the new file is graded again"


def test_feedback_is_released_to_every_student(taught):
    for student in STUDENTS:
        pages = list((taught.home(student) / ASSIGNMENT / "feedback").glob(f"*/{Path(NOTEBOOK).stem}.html"))
        assert len(pages) == 1, student
        assert pages[0].stat().st_uid == pwd.getpwnam(student).pw_uid
    log = taught.outputs["release_feedback"].stderr
    for student in LMS_STUDENTS:
        page = taught.course / "feedback" / student / ASSIGNMENT / f"{Path(NOTEBOOK).stem}.html"
        assert f"{student} was collected from an LMS download, not the exchange: hand back {page}" in log
        assert page.is_file() and student in taught.handed_back
    # The TA trial: release_feedback named a temporary file that never exists once it is done, and every
    # autograde and generate_feedback warned of a setting nobody wrote (nbconvert's display_data_priority).
    released = re.findall(r"Feedback released to: (\S+)", log)
    assert released and all(Path(path).is_file() for path in released), released
    for name in ("autograde", "generate_feedback", "release_feedback"):
        assert "not recognized" not in taught.outputs[name].stderr, taught.outputs[name].stderr[-2000:]


def test_one_score_per_student_everywhere(taught):
    """The gradebook's total (the TA's manual score in it) is the one the student's feedback shows, in
    nbgrader's header and on the per-tensor page, and the one report, grade-ids and Canvas export say."""
    book, course = taught.book, taught.course
    report = {s["submission"].split("/")[0]: s["score"] for s in json.loads(taught.outputs["report json"].stdout)
              ["submissions"]}
    grade_ids: dict[str, float] = {}
    for row in _csv(course / "results" / "grade_ids.csv")[1:]:
        grade_ids[row[0].split("/")[0]] = grade_ids.get(row[0].split("/")[0], 0.0) + float(row[2])
    canvas = {row[1]: float(row[-1]) for row in _csv(course / "results" / "canvas.csv")[2:]}
    ids = {STUDENTS[0]: "4001", STUDENTS[1]: "4002", STUDENTS[2]: "4003", "canvas-5001": "5001",
           "canvas-5002": "5002"}
    for student, entry in book.items():
        total, top = entry["total"], entry["max_score"]
        page = _feedback(taught, student)
        assert f"(Score: {total:g} / {top:g})" in page, student  # nbgrader's header
        assert re.findall(r'class="bpn-total">Total: ([\d.]+) / ', page) == [f"{total:g}"], student
        assert report[student] == pytest.approx(total), student
        assert grade_ids[student] == pytest.approx(total), student
        if student in ids:
            assert canvas[ids[student]] == pytest.approx(total), student
    overridden = _feedback(taught, STUDENTS[1])
    assert book[STUDENTS[1]]["dcounts"] == OVERRIDE[1]
    assert f'<td class="bpn-points">{OVERRIDE[1]:g} / {COURSE.points["dcounts"]:g}</td>' in overridden
    assert f"your instructor set this score: {OVERRIDE[1]:g} / {COURSE.points['dcounts']:g}" in overridden
    assert "1 set by hand" in (course / "results" / "report.html").read_text(encoding="utf-8")


def test_the_canvas_export_takes_the_gradebook_and_the_rosters_column(taught):
    command = taught.outputs["export"]
    header, points, *students = _csv(taught.course / "results" / "canvas.csv")
    assert header[-1] == CANVAS_COLUMN, "course.yml's backprop_ninja names Canvas's Backprop Ninja (31337)"
    by_login = {row[3]: float(row[-1]) for row in students}
    assert set(by_login) == {*STUDENTS, "cking", "cking2"}, "each Carol King is placed by her Canvas user id"
    max_score = COURSE.max_score
    assert float(points[-1]) == max_score
    assert by_login[STUDENTS[1]] == pytest.approx(max_score - COURSE.points["dcounts"] + OVERRIDE[1]), \
        "the TA's manual score counts"
    assert by_login["cking"] == by_login["cking2"] == pytest.approx(max_score)
    assert f"{CANVAS_COLUMN}: Canvas says 50 points possible, the course {max_score:g}" in command.stderr
    assert "moodle-7002 (gradebook): no student 'moodle-7002' in the roster" in command.stderr


def test_the_canvas_export_without_a_roster_places_canvas_students_by_their_user_id(taught):
    header, _, *rows = _csv(taught.course / "no_roster.csv")
    assert header[-1] == ASSIGNMENT
    by_id = {row[1]: row for row in rows if row[1]}
    assert set(by_id) == {"5001", "5002"}
    for row in by_id.values():
        assert (row[0], row[3]) == ("kingcarol", ""), "a run-together Canvas name is no SIS login"
    assert {row[3] for row in rows if not row[1]} == {*STUDENTS, "moodle-7002"}
    assert f"no --roster: Canvas imports into the assignment named exactly {ASSIGNMENT!r}" in \
        taught.outputs["export without roster"].stderr


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


def test_a_regrade_removes_each_earlier_feedback_page_and_says_so(taught):
    """After `autograde --force` with other points, the feedback pages of the earlier grading would show other
    totals than the gradebook: the regrade removes them, one line each, and generate_feedback makes them again."""
    said = taught.outputs["regrade"].stderr
    for student in (*STUDENTS, *LMS_STUDENTS):
        folder = taught.course / "feedback" / student / ASSIGNMENT
        assert f"{student}: removed {folder}, the feedback of an earlier grading" in said, student
        assert (folder / f"{Path(NOTEBOOK).stem}.html").is_file(), student
