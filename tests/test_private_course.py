"""A course on a shared server, with real unix users: an instructor and two students, home folders 0755
as Debian makes them, one nbgrader exchange every user may write.

The instructor runs `course init --solutions off` in their home, generates and releases; a student
fetches, answers and submits; the instructor collects, autogrades, grades the fast route into results/,
builds the Gradescope zip, generates and releases feedback, which the student fetches. The other
student, a classmate, then tries to read everything staff hold: the solved notebook, course.yml's salt,
the gradebook, the results, the zip, a classmate's submission. Nothing opens; the exchange still works;
`course init` leaves exactly the README's checklist; `course check` says so, and warns once a file is
opened to others. The student's own machine has the full package (a hub image shared with the
graders), and `backprop-ninja solution --force` still refuses in this course.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader.course import material
from helpers import users
from helpers.nbgrader_course import set_answers
from helpers.paths import COURSE, COURSE_FILE
from solutions import reference

ASSIGNMENT, NOTEBOOK = COURSE.assignment, COURSE.notebook
COURSE_ID = "ml101-private"
TIMEOUT = 900

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                 reason="needs root and useradd to create the instructor and students")]


class Term:
    def __init__(self, exchange: Path):
        self.exchange = exchange
        self.sessions = [users.Session("bpnpriv") for _ in range(3)]
        self.instructor, self.student, self.classmate = (s.__enter__().user for s in self.sessions)
        self.log: list[str] = []
        for user in (self.instructor, self.student, self.classmate):
            user.home.chmod(0o755)  # Debian's useradd with its default UMASK 022
            user.venv()  # the full package, as on a hub image shared with the graders

    def close(self):
        for session in reversed(self.sessions):
            session.__exit__(None, None, None)

    @property
    def course(self) -> Path:
        return self.instructor.home / "course"

    def run(self, user, *args: str, cwd: Path | None = None, must: bool = True) -> subprocess.CompletedProcess:
        self.sessions[0].keep_root_traversable()
        path = f"{user.home / 'venv' / 'bin'}:{Path(sys.base_prefix) / 'bin'}:/usr/bin:/bin"
        env = user.env(PATH=path, MPLBACKEND="Agg", JUPYTER_PATH=str(Path(sys.base_prefix) / "share" / "jupyter"))
        done = user.run(list(args), cwd=cwd or user.home, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        self.log.append(f"$ {user.name}: {' '.join(args)} -> {done.returncode}\n"
                        f"{done.stderr[-3000:]}{done.stdout[-1500:]}")
        if must and done.returncode != 0:
            raise AssertionError(self.log[-1])
        return done

    def nbgrader(self, user, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return self.run(user, "python", "-m", "nbgrader", *args, cwd=cwd)

    def exchange_args(self) -> list[str]:
        return [f"--course={COURSE_ID}", f"--Exchange.root={self.exchange}"]


def _modes(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix() or ".": stat.S_IMODE(os.lstat(p).st_mode)
            for p in [root, *root.rglob("*")]}


@pytest.fixture(scope="module")
def term():
    exchange = Path(tempfile.mkdtemp(prefix="bpn-exchange-"))
    exchange.chmod(0o1777)  # as an administrator makes it
    t = Term(exchange)
    try:
        i, s = t.instructor, t.student
        t.init = t.run(i, "backprop-ninja", "course", "init", "course", "--course-id", COURSE_ID,
                       "--exchange", str(exchange), "--solutions", "off", "--course", str(COURSE_FILE))
        t.after_init = _modes(t.course)
        t.nbgrader(i, "generate_assignment", ASSIGNMENT, cwd=t.course)
        t.nbgrader(i, "release_assignment", ASSIGNMENT, *t.exchange_args(), cwd=t.course)
        t.nbgrader(s, "fetch_assignment", ASSIGNMENT, *t.exchange_args())
        fetched = s.home / ASSIGNMENT / NOTEBOOK
        t.released_text = fetched.read_text(encoding="utf-8")
        nb = nbformat.read(fetched, as_version=4)
        set_answers(nb, {**reference.cells(), "dprobs": "dprobs = 1.0 / probs\n"})
        nbformat.write(nb, fetched)
        t.refused = t.run(s, "backprop-ninja", "solution", "dprobs", "--force", must=False)
        t.nbgrader(s, "submit", ASSIGNMENT, *t.exchange_args())
        t.nbgrader(i, "collect", ASSIGNMENT, f"--Exchange.root={exchange}", cwd=t.course)
        t.nbgrader(i, "autograde", ASSIGNMENT, cwd=t.course)
        t.run(i, "backprop-ninja", "grade", "submitted", "--out", "fast", "--course", "course.yml", cwd=t.course)
        t.run(i, "backprop-ninja", "gradescope", "build", "--course", "course/course.yml", "--out", "autograder.zip")
        t.nbgrader(i, "generate_feedback", ASSIGNMENT, cwd=t.course)
        t.nbgrader(i, "release_feedback", ASSIGNMENT, f"--Exchange.root={exchange}", cwd=t.course)
        t.nbgrader(s, "fetch_feedback", ASSIGNMENT, *t.exchange_args())
        t.checked = t.run(i, "backprop-ninja", "course", "check", "course", must=False)
        yield t
    finally:
        t.close()
        shutil.rmtree(exchange, ignore_errors=True)


def test_course_init_gives_exactly_the_readmes_checklist(term):
    """The course folder 0700, every folder in it 0700, every file 0600: nothing for a group or others
    until the instructor grants a TAs' group as the README says."""
    modes = term.after_init
    assert modes.pop(".") == 0o700
    assert modes and {name: oct(m) for name, m in modes.items()
                      if m != (0o700 if (term.course / name).is_dir() else 0o600)} == {}
    assert "source/" + ASSIGNMENT + "/" + NOTEBOOK in modes and "course.yml" in modes


def test_the_staffs_files_stay_private_after_a_whole_term(term):
    """What nbgrader and the grader wrote since (gradebook, autograded, feedback, results): none of it is
    reachable, and what the grader wrote itself is its owner's alone."""
    assert stat.S_IMODE(term.course.stat().st_mode) == 0o700
    for path in [*(term.course / "fast").rglob("*"), *(term.course / "results").rglob("*")]:
        assert stat.S_IMODE(path.stat().st_mode) == (0o700 if path.is_dir() else 0o600), path
    assert stat.S_IMODE((term.instructor.home / "autograder.zip").stat().st_mode) == 0o600


@pytest.mark.parametrize("what", ["course", f"course/source/{ASSIGNMENT}/{NOTEBOOK}", "course/course.yml",
                                  "course/gradebook.db", "course/results", "course/fast/grades.csv",
                                  f"course/submitted/STUDENT/{ASSIGNMENT}/{NOTEBOOK}",
                                  f"course/feedback/STUDENT/{ASSIGNMENT}/{ASSIGNMENT}.html",
                                  "course/autotests/known_mistakes.yml", "autograder.zip"])
def test_a_classmate_reads_nothing_of_the_course(term, what):
    path = term.instructor.home / what.replace("STUDENT", term.student.name)
    assert path.exists(), path  # as root: the thing is there to be read
    reader = "ls" if path.is_dir() else "cat"
    done = term.run(term.classmate, reader, str(path), must=False)
    assert done.returncode != 0 and "Permission denied" in done.stderr, (what, done.stdout[:200])


def test_the_exchange_still_works_for_students(term):
    fetched = sorted((term.student.home / ASSIGNMENT / "feedback").glob(f"*/{ASSIGNMENT}.html"))
    assert fetched, "\n".join(term.log)
    assert "dprobs" in fetched[0].read_text(encoding="utf-8")


def test_course_check_finds_nothing_then_warns_about_an_opened_file(term):
    assert term.checked.returncode == 0, term.checked.stderr
    assert "nothing in it is readable by other users" in term.checked.stdout
    gradebook = term.course / "gradebook.db"
    before = {p: stat.S_IMODE(p.stat().st_mode) for p in (term.course, gradebook)}
    try:
        gradebook.chmod(0o644)  # readable by its mode, behind the closed course folder: said, not a failure
        closed = term.run(term.instructor, "backprop-ninja", "course", "check", "course", must=False)
        term.course.chmod(0o755)
        done = term.run(term.instructor, "backprop-ninja", "course", "check", "course", must=False)
    finally:
        for path, mode in before.items():
            path.chmod(mode)
    assert done.returncode == 1, done.stdout
    assert f"{gradebook}: other users may read it (every student's scores" in done.stderr, done.stderr
    assert "other users may enter it" in done.stderr and "Traceback" not in done.stderr
    assert closed.returncode == 0, closed.stderr
    assert re.search(rf"note: {re.escape(str(term.course))}: closed to other users \(mode \d+\), which keeps out "
                     r"[1-9]\d* thing\(s\) in it their modes would let them read", closed.stdout), closed.stdout


def test_solutions_off_holds_where_the_full_package_is_installed(term):
    assert term.refused.returncode == 1, term.refused.stdout
    assert "solutions: off" in term.refused.stderr and "Traceback" not in term.refused.stderr
    assert "BEGIN SOLUTION" not in term.refused.stdout and "1.0 / probs" not in term.refused.stdout
    settings = [material.notebook_settings(c.source) for c in nbformat.reads(term.released_text, 4).cells
                if c.cell_type == "code"]
    assert {"solutions": "off"}.items() <= next(s for s in settings if s).items()
    assert material.STUDENT_PACKAGE["off"] in term.released_text
    assert "solutions: off" in term.init.stdout
