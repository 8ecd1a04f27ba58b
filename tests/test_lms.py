"""zip_collect's collector: the file names Canvas, Moodle and Blackboard give a bulk download, as those
systems write them, read into nbgrader's student id and the LMS's own id (grader.lms.nbgrader); then
nbgrader's own zip_collect and release_feedback with the course's configuration, on downloads as they
come: same-name students, resubmissions, late files, a second download."""
from __future__ import annotations

import datetime
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.lms.course_init import CONFIG
from grader.lms.nbgrader import lms_name


def test_the_course_config_imports_no_torch():
    """Every nbgrader command of a course (generate, release, collect, feedback: about 300 in this suite)
    loads the nbgrader_config.py `course init` writes, which imports grader.lms.nbgrader; only autograde
    grades, and only it may pay torch's seconds of start-up."""
    code = "import grader.lms.nbgrader, sys; assert 'torch' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("path, expected", [
    # Canvas's first field is the surname and first name run together: the Canvas user id is the student.
    ("submissions/smithjohn_1234_5678901_backprop_ninja.ipynb",
     {"lms": "Canvas", "student_id": "canvas-1234", "lms_user_id": "1234", "resubmission": 0, "late": False,
      "lms_name": "smithjohn"}),
    ("smithjohn_late_1234_5678902_backprop_ninja-1.ipynb",
     {"lms": "Canvas", "student_id": "canvas-1234", "lms_user_id": "1234", "resubmission": 1, "late": True,
      "order": ("", 5678902, 1)}),
    ("smithjohn_LATE_1235_5678903_backprop_ninja.ipynb",
     {"lms": "Canvas", "student_id": "canvas-1235", "lms_user_id": "1235", "late": True}),
    ("doejane_77_88_Copy of backprop_ninja (2).ipynb",
     {"lms": "Canvas", "student_id": "canvas-77", "lms_user_id": "77", "resubmission": 0, "late": False}),
    ("Backprop ninja-Ada Lovelace/Ada Lovelace_4321_assignsubmission_file_/backprop_ninja.ipynb",
     {"lms": "Moodle", "student_id": "moodle-4321", "lms_user_id": "4321", "full_name": "Ada Lovelace"}),
    ("Ada Lovelace_4321_assignsubmission_file_backprop_ninja.ipynb",
     {"lms": "Moodle", "student_id": "moodle-4321", "lms_user_id": "4321", "full_name": "Ada Lovelace"}),
    ("Backprop Ninja_bitdiddle_attempt_2026-11-30-15-04-05_backprop_ninja.ipynb",
     {"lms": "Blackboard", "student_id": "bitdiddle", "lms_user_id": None, "timestamp": "2026-11-30 15:04:05"}),
    ("backprop_ninja submissions/eve_backprop_ninja.ipynb",
     {"lms": "", "student_id": "eve", "lms_user_id": None}),
])
def test_download_names_give_the_student_and_the_lms_id(path, expected):
    info = lms_name(path)
    assert info is not None
    assert {k: info[k] for k in expected} == expected


@pytest.mark.parametrize("path, student, stamp", [
    # A red team's names: the part after the LMS's own is the file name the student uploaded, and held
    # another LMS's pattern, or their own LMS's with a classmate's id and a time in 2099.
    ("backprop_ninja_mallory_attempt_2024-05-01-11-00-00_x_bob_attempt_2099-12-31-23-59-59_backprop_ninja.ipynb",
     "mallory", "2024-05-01 11:00:00"),
    ("backprop_ninja_mallory_attempt_2026-12-31-23-00-00_x_mallory_attempt_2020-01-01-00-00-00_backprop_ninja.ipynb",
     "mallory", "2026-12-31 23:00:00"),
    ("Mallory Smith_77_assignsubmission_file_/x_moodle-123_attempt_2099-12-31-23-59-59_backprop_ninja.ipynb",
     "moodle-77", None),
    ("Mallory Smith_77_assignsubmission_file_x_bob_attempt_2099-12-31-23-59-59_backprop_ninja.ipynb",
     "moodle-77", None),
    ("smithmallory_77_88_x_bob_attempt_2099-12-31-23-59-59_backprop_ninja.ipynb", "canvas-77", None),
    ("Backprop Ninja_mallory_attempt_2026-11-30-15-04-05_doejane_12_34_backprop_ninja.ipynb", "mallory",
     "2026-11-30 15:04:05"),
    ("Backprop Ninja_mallory_attempt_2026-11-30-15-04-05_Bob_9_assignsubmission_file_backprop_ninja.ipynb",
     "mallory", "2026-11-30 15:04:05"),
])
def test_the_students_own_file_name_never_names_the_student_or_the_time(path, student, stamp):
    info = lms_name(path)
    assert (info["student_id"], info["timestamp"]) == (student, stamp)


@pytest.mark.parametrize("path", ["notes.ipynb", "submissions/index.html"])
def test_a_file_no_lms_names_so_is_skipped(path):
    assert lms_name(path) is None


# ---------------------------------------------------------------------------------------------
# nbgrader's zip_collect and release_feedback, with course init's configuration

ASSIGNMENT, NOTEBOOK, COURSE_ID = "a1", "backprop_ninja.ipynb", "lmscourse"


def _notebook(mark: str) -> str:
    """A notebook that is the same bytes each time, as the same file in two downloads is."""
    return nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"# {mark}", id="c1")]))


def _zip(path: Path, files: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, mark in files.items():
            z.writestr(name, _notebook(mark))


def _mark(path: Path) -> str:
    return nbformat.read(path, as_version=4).cells[0].source[2:]


def _nbgrader(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[1]),
                                                                      os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def lms_course(tmp_path):
    """A course directory as course init writes its nbgrader_config.py, with a released notebook."""
    root = tmp_path / "course"
    (root / "release" / ASSIGNMENT).mkdir(parents=True)
    (root / "release" / ASSIGNMENT / NOTEBOOK).write_text(_notebook("released"), encoding="utf-8")
    (root / "nbgrader_config.py").write_text(CONFIG.format(
        course_id=COURSE_ID, course_file="course.yml", exchange=str(tmp_path / "exchange"), notebook=NOTEBOOK,
        shared=""),
        encoding="utf-8")
    (tmp_path / "exchange").mkdir()
    return root


@pytest.mark.slow
def test_zip_collect_takes_downloads_as_they_come(lms_course):
    root, archive = lms_course, lms_course / "downloaded" / ASSIGNMENT / "archive"
    submitted = root / "submitted"
    # An exchange submission: a zip's file for the same student never replaces it.
    exchange = submitted / "eve" / ASSIGNMENT
    exchange.mkdir(parents=True)
    (exchange / NOTEBOOK).write_text(_notebook("eve, through the exchange"), encoding="utf-8")
    (exchange / "submission_secret.txt").write_text("secret", encoding="utf-8")
    # Two John Smiths, one of whom resubmitted late; a Moodle participant with two notebooks.
    _zip(archive / "canvas-1.zip", {
        "smithjohn_101_5001_backprop_ninja.ipynb": "john 101, first",
        "smithjohn_late_101_5007_backprop_ninja-1.ipynb": "john 101, resubmitted",
        "smithjohn_102_5003_backprop_ninja.ipynb": "john 102, first",
        "eve_backprop_ninja.ipynb": "eve, in a zip"})
    _zip(archive / "moodle.zip", {
        "Ada Lovelace_4321_assignsubmission_file_/backprop_ninja.ipynb": "ada",
        "Ada Lovelace_4321_assignsubmission_file_/notes.ipynb": "ada's notes"})
    # A Blackboard user with two attempts: the later one, with its time for nbgrader's late penalties.
    _zip(archive / "blackboard.zip", {
        "A1_bitdiddle_attempt_2026-11-30-15-04-05_backprop_ninja.ipynb": "ben, second attempt",
        "A1_bitdiddle_attempt_2026-11-29-09-00-00_backprop_ninja.ipynb": "ben, first attempt"})
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:  # the due date, as formgrader or `nbgrader db` set it
        gb.update_or_create_assignment(ASSIGNMENT, duedate=datetime.datetime(2026, 11, 15, 23, 59))
    first = _nbgrader(root, "zip_collect", ASSIGNMENT)
    assert first.returncode == 0 and "Traceback" not in first.stderr, first.stderr
    # Canvas names no time: its LATE file counts as submitted past the due date, so the late penalty applies.
    assert (submitted / "canvas-101" / ASSIGNMENT / "timestamp.txt").read_text().startswith("2026-11-15 23:59:01")
    assert not (submitted / "canvas-102" / ASSIGNMENT / "timestamp.txt").exists()
    assert _mark(submitted / "canvas-101" / ASSIGNMENT / NOTEBOOK) == "john 101, resubmitted"
    assert _mark(submitted / "canvas-102" / ASSIGNMENT / NOTEBOOK) == "john 102, first"
    assert _mark(submitted / "moodle-4321" / ASSIGNMENT / NOTEBOOK) == "ada"
    assert _mark(submitted / "bitdiddle" / ASSIGNMENT / NOTEBOOK) == "ben, second attempt"
    assert (submitted / "bitdiddle" / ASSIGNMENT / "timestamp.txt").read_text().startswith("2026-11-30 15:04:05")
    assert _mark(exchange / NOTEBOOK) == "eve, through the exchange"
    assert "eve submitted through nbgrader's exchange" in first.stderr
    assert "Canvas marks canvas-101's submission late" in first.stderr
    assert "moodle-4321: several files with nothing to tell which is newer (notes.ipynb)" in first.stderr
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        johns = {s.id: (s.lms_user_id, s.last_name) for s in gb.students if s.id.startswith("canvas-")}
    assert johns == {"canvas-101": ("101", "smithjohn"), "canvas-102": ("102", "smithjohn")}

    # Both Johns were graded; then a second download: John 102 resubmitted, the rest is as before.
    for student in ("canvas-101", "canvas-102"):
        graded = root / "autograded" / student / ASSIGNMENT
        graded.mkdir(parents=True)
        (graded / NOTEBOOK).write_text(_notebook("graded"), encoding="utf-8")
    kept = (submitted / "canvas-101" / ASSIGNMENT / NOTEBOOK).stat()
    _zip(archive / "canvas-2.zip", {
        "smithjohn_late_101_5007_backprop_ninja-1.ipynb": "john 101, resubmitted",
        "smithjohn_102_5009_backprop_ninja.ipynb": "john 102, second"})
    second = _nbgrader(root, "zip_collect", ASSIGNMENT)
    assert second.returncode == 0 and "Traceback" not in second.stderr, second.stderr
    assert _mark(submitted / "canvas-102" / ASSIGNMENT / NOTEBOOK) == "john 102, second"
    assert not (root / "autograded" / "canvas-102" / ASSIGNMENT / NOTEBOOK).exists(), "graded again"
    assert (submitted / "canvas-101" / ASSIGNMENT / NOTEBOOK).stat().st_ino == kept.st_ino, "not collected again"
    assert (root / "autograded" / "canvas-101" / ASSIGNMENT / NOTEBOOK).exists(), second.stderr
    assert _mark(exchange / NOTEBOOK) == "eve, through the exchange"

    # A third download holding only John 102's older file: what was collected stays.
    (archive / "canvas-2.zip").unlink()
    _zip(archive / "canvas-3.zip", {"smithjohn_102_5003_backprop_ninja.ipynb": "john 102, first"})
    third = _nbgrader(root, "zip_collect", ASSIGNMENT)
    assert third.returncode == 0, third.stderr
    assert _mark(submitted / "canvas-102" / ASSIGNMENT / NOTEBOOK) == "john 102, second"
    assert "older than smithjohn_102_5009_backprop_ninja.ipynb" in third.stderr


@pytest.mark.slow
def test_release_feedback_releases_to_exchange_students_and_lists_the_others(lms_course):
    root = lms_course
    for student, exchange in (("eve", True), ("canvas-101", False)):
        folder = root / "feedback" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / "backprop_ninja.html").write_text(f"<p>{student}</p>", encoding="utf-8")
        # its graded notebook, which generate_feedback made the page from (without it, the page is of a grading
        # since failed, and held back)
        (root / "autograded" / student / ASSIGNMENT).mkdir(parents=True, exist_ok=True)
        if exchange:
            (folder / "timestamp.txt").write_text("2026-11-30 12:00:00.000000 UTC", encoding="utf-8")
            (folder / "submission_secret.txt").write_text("secret", encoding="utf-8")
    done = _nbgrader(root, "release_feedback", ASSIGNMENT)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "Releasing feedback for student 'eve'" in done.stderr
    assert ("canvas-101 was collected from an LMS download, not the exchange: hand back "
            f"{root / 'feedback' / 'canvas-101' / ASSIGNMENT / 'backprop_ninja.html'} through the LMS") in done.stderr
    assert len(list((root.parent / "exchange" / COURSE_ID / "feedback").glob("*.html"))) == 1
