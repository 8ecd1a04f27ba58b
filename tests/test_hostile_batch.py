"""One submission cannot break the batch or the instructor's tools: a class holding every hostile name,
file and string a student can hand in is graded by the installed `backprop-ninja` command (a real
process, stdout and stderr piped, so printing is as strict as it gets), then reported on and exported.

The hostile ones: a lone surrogate and ANSI sequences in an error message and in a notebook's source, a
folder named with ANSI escapes and a bidirectional override, a notebook file name that is not UTF-8
(and a literal name that escapes to the same text), a folder name a spreadsheet runs as a formula, a
symbolic link to another student's 0600 file, a folder that is a symbolic link, a FIFO, a device, a
hard link to another user's file, and a notebook over the size cap. A correct notebook sorted after all
of them must still get full marks.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import secrets
import shutil
import stat
import string
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.extract import MAX_NOTEBOOK_BYTES
from grader.lms import nbgrader as nbgrader_plugin
from grader.outputs import results
from grader.sandbox import static_check
from helpers.notebooks import submission, write
from helpers.paths import COURSE, COURSE_FILE, outside_tmp

NOTEBOOK = COURSE.notebook
STEM = NOTEBOOK.removesuffix(".ipynb")
AS_ROOT = os.getuid() == 0

ANSI = "\x1b[2J\x1b[31m\x1b]0;pwned\x07"
RAW = "\udc80" + ANSI + "\u202e\x9b"  # what a notebook's JSON can put in a string: a lone surrogate, controls
# A cell that raises, at run time, an error whose message holds a lone surrogate and ANSI escapes; and a
# cell the static check refuses, whose source (quoted in the refusal) holds them as raw characters.
SURROGATE_CELLS = {"dlogprobs": "assert False, '\\udc80 \\x1b[2J\\x1b[31mred'\n",
                   "dprobs": f"import os  # {RAW}\n"}
ANSI_FOLDER = "\x1b[31mred\x1b[0m\u202e"
FORMULA_FOLDER = "=1+2"
# What a terminal acts on, besides plain text: C0 controls but tab and newline, DEL, C1 controls,
# bidirectional overrides and invisible format characters, lone surrogates.
TERMINAL_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")

REFUSED = {  # id -> what its line on stderr and its error say
    "eve/" + STEM: "symbolic link",
    "mal": "symbolic link to a folder",
    "fifo/" + STEM: "FIFO",
    "big/" + STEM: "over the",
    **({"dev/" + STEM: "character device", "hardlink/" + STEM: "hard link"} if AS_ROOT else {}),
}
GRADED = {  # id -> full marks
    "ada/" + STEM: True,
    "sur/" + STEM: False,
    ANSI_FOLDER.replace("\x1b", "\\x1b").replace("\u202e", "\\u202e") + "/" + STEM: True,
    "bytes/\\xff\\xfe": True,
    "bytes/\\xff\\xfe~2": True,  # the bytes and the literal name escape alike: each has an id, and a result
    FORMULA_FOLDER + "/" + STEM: True,
    "zoe/" + STEM: True,
}


def _canary() -> str:
    return "CANARY" + "".join(secrets.choice(string.ascii_uppercase) for _ in range(16))


def _notebook_json(nb) -> str:
    """nbformat cannot write a lone surrogate; JSON can spell one, and a hostile notebook does."""
    return json.dumps(nb, ensure_ascii=True)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    root, elsewhere = base / "submitted", base / "elsewhere"
    correct = submission()
    for folder in ("ada", ANSI_FOLDER, FORMULA_FOLDER, "zoe"):
        write(root / folder / NOTEBOOK, correct)
    (root / "sur").mkdir(parents=True)
    (root / "sur" / NOTEBOOK).write_text(_notebook_json(submission(replace=SURROGATE_CELLS)), encoding="utf-8")
    (root / "bytes").mkdir()
    shutil.copy(root / "ada" / NOTEBOOK, os.fsencode(root / "bytes") + b"/\xff\xfe.ipynb")
    shutil.copy(root / "ada" / NOTEBOOK, root / "bytes" / "\\xff\\xfe.ipynb")

    # Another student's correct notebook, readable only by its owner: linked, it must not be graded as eve's.
    secret = elsewhere / "bob" / NOTEBOOK
    write(secret, correct)
    secret.chmod(0o600)
    (root / "eve").mkdir()
    (root / "eve" / NOTEBOOK).symlink_to(secret)
    (root / "mal").symlink_to(secret.parent, target_is_directory=True)
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / NOTEBOOK)
    (root / "big").mkdir()
    with open(root / "big" / NOTEBOOK, "wb") as f:  # sparse: no disk used
        f.truncate(MAX_NOTEBOOK_BYTES + 1)
    if AS_ROOT:
        (root / "dev").mkdir()
        os.mknod(root / "dev" / NOTEBOOK, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero: reads forever
        (root / "hardlink").mkdir()
        os.chown(root / "hardlink", 4242, 4242)  # the student's folder
        os.chown(secret, 4343, 4343)  # another student's file
        os.link(secret, root / "hardlink" / NOTEBOOK)
    return {"root": root, "base": base}


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    exe = shutil.which("backprop-ninja")
    assert exe, "the backprop-ninja command is not installed (pip install -e .)"
    # Bytes: whatever the command prints is checked as bytes, not decoded leniently on the way.
    return subprocess.run([exe, *args], capture_output=True, timeout=timeout,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"})


@pytest.fixture(scope="module")
def graded(batch):
    out = batch["base"] / "results"
    done = _run("grade", str(batch["root"]), "--out", str(out), "--course", str(COURSE_FILE), "--html", "--jobs", "2")
    return done, out


def _strict_text(data: bytes) -> str:
    text = data.decode("utf-8")  # strict
    assert not re.search("[\ud800-\udfff]", text)
    return text


def _terminal_safe(data: bytes, where: str) -> str:
    text = _strict_text(data)
    found = TERMINAL_CONTROL.findall(text)
    assert not found, f"{where} holds control characters {found!r}: {text[-2000:]}"
    return text


def _strict_json(path_or_text) -> object:
    """JSON as a strict parser reads it: UTF-8, and no string with a lone surrogate (Python's json
    accepts one spelled as an escape; most parsers do not)."""
    text = path_or_text if isinstance(path_or_text, str) else _strict_text(Path(path_or_text).read_bytes())

    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for k, v in value.items():
                yield k
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)

    data = json.loads(text)
    for s in strings(data):
        s.encode("utf-8")
    return data


@pytest.mark.slow
def test_the_batch_finishes_and_every_submission_has_a_result(graded):
    done, out = graded
    assert done.returncode == 0, done.stderr[-3000:]
    assert b"Traceback" not in done.stderr
    for sid in [*GRADED, *REFUSED]:
        assert (out / f"{sid}.json").is_file(), sid
        assert (out / f"{sid}.html").is_file(), sid


@pytest.mark.slow
def test_correct_notebooks_after_the_hostile_ones_get_full_marks(graded):
    _, out = graded
    for sid, full in GRADED.items():
        result = _strict_json(out / f"{sid}.json")
        assert (result["score"] == COURSE.max_score) is full, (sid, result["output"])


@pytest.mark.slow
def test_nothing_printed_acts_on_the_terminal(graded):
    done, _ = graded
    stdout = _terminal_safe(done.stdout, "stdout")
    _terminal_safe(done.stderr, "stderr")
    assert "\\x1b[31mred\\x1b[0m\\u202e/" + STEM in stdout  # escaped visibly, not dropped
    assert "bytes/\\xff\\xfe " in stdout and "bytes/\\xff\\xfe~2 " in stdout


@pytest.mark.slow
def test_each_refused_path_gets_a_line_and_a_not_graded_result(graded, batch):
    done, out = graded
    stderr = done.stderr.decode("utf-8")
    for sid, why in REFUSED.items():
        lines = [line for line in stderr.splitlines() if line.startswith(f"not graded {sid}: ")]
        assert len(lines) == 1 and why in lines[0], (sid, stderr[-2000:])
        result = _strict_json(out / f"{sid}.json")
        assert result["score"] == 0 and why in result["output"], (sid, result["output"])
    assert batch["root"].joinpath("fifo", NOTEBOOK).is_fifo()


@pytest.mark.slow
def test_every_file_written_is_strict_utf8_json_or_escaped_html(graded):
    _, out = graded
    for path in out.rglob("*.json"):
        _strict_json(path)
        assert path.read_bytes().isascii(), path  # written with ensure_ascii: nothing raw a terminal acts on
    for path in out.rglob("*.html"):
        page = _strict_text(path.read_bytes())
        assert "<script" not in page and "\x1b" not in page and "\x9b" not in page, path
    page = _strict_text((out / "sur" / f"{STEM}.html").read_bytes())
    assert "\\x80 \\x1b[2J\\x1b[31mred" in page  # the surrogate and the escapes are shown, escaped


@pytest.mark.slow
def test_grades_csv_is_strict_utf8_and_quotes_a_formula(graded):
    _, out = graded
    rows = list(csv.reader(io.StringIO(_strict_text((out / "grades.csv").read_bytes()))))
    ids = [row[0] for row in rows[1:]]
    assert f"'{FORMULA_FOLDER}/{STEM}" in ids
    assert len(ids) == len(set(ids)) == len(GRADED) + len(REFUSED)


@pytest.mark.slow
def test_regrading_gives_the_same_ids(graded, batch, tmp_path):
    """An id is stable: resume finds every result of the first run again, none is graded twice."""
    _, out = graded
    again = tmp_path / "again"
    shutil.copytree(out, again)
    done = _run("grade", str(batch["root"]), "--out", str(again), "--course", str(COURSE_FILE), "--resume")
    assert done.returncode == 0, done.stderr[-3000:]
    stderr = _terminal_safe(done.stderr, "stderr")
    assert "ran " not in stderr and "not graded" not in stderr
    assert stderr.count("kept ") == len(GRADED) + len(REFUSED)  # a refused path too, until it changes


@pytest.fixture(scope="module")
def with_an_old_result(graded, tmp_path_factory):
    """The results, plus one written by a grader from before strings were made valid: its JSON spells a
    lone surrogate as an escape, which report and export read back."""
    _, out = graded
    folder = tmp_path_factory.mktemp("old") / "results"
    shutil.copytree(out, folder)
    path = folder / "old" / f"{STEM}.json"
    path.parent.mkdir()
    text = (out / "ada" / f"{STEM}.json").read_text().replace('"ada/', '"old\\ud800\\u001b[31m/')
    path.write_text(text.replace('"output": "', '"output": "\\udcff\\u001b[2J', 1))
    return folder


@pytest.mark.slow
def test_report_reads_every_result_and_writes_strict_files(with_an_old_result):
    done = _run("report", str(with_an_old_result))
    assert done.returncode == 0, done.stderr
    _terminal_safe(done.stdout + done.stderr, "report's output")
    page = _strict_text((with_an_old_result / "report.html").read_bytes())
    assert "old\\ud800" in page
    done = _run("report", str(with_an_old_result), "--json")
    assert done.returncode == 0, done.stderr
    report = _strict_json(_strict_text(done.stdout))
    assert report["count"] == len(GRADED) + len(REFUSED) + 1


@pytest.mark.parametrize("fmt", ["grade-ids", "canvas"])
@pytest.mark.slow
def test_export_reads_every_result_and_writes_strict_csv(with_an_old_result, fmt, tmp_path):
    target = tmp_path / f"{fmt}.csv"
    done = _run("export", str(with_an_old_result), "--format", fmt, "--out", str(target))
    assert done.returncode == 0, done.stderr
    _terminal_safe(done.stdout + done.stderr, "export's output")
    rows = list(csv.reader(io.StringIO(_strict_text(target.read_bytes()))))
    assert any(row[0].startswith("old\\ud800") for row in rows)
    if fmt == "canvas":  # the bytes student has two submissions: said on stderr, escaped
        assert "bytes: several submissions" in done.stderr.decode()


@pytest.mark.slow
def test_the_nbgrader_feedback_page_of_a_hostile_result_can_be_written(with_an_old_result):
    """nbgrader writes the autograded notebook, feedback page inside, as UTF-8: every string must be valid."""
    import nbformat

    for sid, shown in (("old/" + STEM, "old\\ud800"), ("sur/" + STEM, "\\x80 \\x1b[2J")):
        nb = submission()
        nbgrader_plugin.fill_grade_cells(nb, results.load_result(with_an_old_result / f"{sid}.json"))
        nbformat.writes(nb).encode("utf-8")
        assert shown in nb.cells[0].outputs[0].data["text/html"], sid


# ---------------------------------------------------------------------------------------------
# Grading one file exposes nothing beside it


def test_a_notebook_graded_on_its_own_cannot_read_the_notebooks_beside_it(tmp_path, monkeypatch, request):
    """The children of `grade one.ipynb` must not read its classmates in the same folder. The static
    check is switched off here, as if it had a hole (every Python-level check is assumed bypassable).
    The folder of a notebook named on its own is hidden from the child (grader.pipeline.batch.hidden) and the
    child's Landlock rules make every path outside the Python install unreadable; the audit hook also
    keeps whatever the probe saw out of its feedback. test_walls proves the read itself fails.
    """
    # World-traversable, so that no permission keeps the probe out either.
    folder = outside_tmp(request, "bpn-beside-") / "submitted"
    folder.mkdir(mode=0o755)
    canary = _canary()
    classmate = folder / "classmate.ipynb"
    classmate.write_text(canary + "\n")
    classmate.chmod(0o644)
    probe = (f"try:\n    seen = open({str(classmate)!r}).read()\nexcept OSError as exc:\n"
             "    seen = type(exc).__name__\nassert False, 'probe ran; saw ' + seen[:60]\n")
    # The child's audit hook reports the open() before it happens: its feedback names the file, which
    # proves the probe ran; what the probe then read (its error message) is never written anywhere.
    write(folder / "mine.ipynb", submission(replace={"dlogprobs": probe}))
    monkeypatch.setattr(static_check, "screen", lambda cells, allow, budget: static_check.Screened(dict(cells), {}, {}))
    out = tmp_path / "out"
    done = CliRunner().invoke(main, ["grade", str(folder / "mine.ipynb"), "--out", str(out),
                                     "--course", str(COURSE_FILE), "--jobs", "1"])
    assert done.exit_code == 0, done.output
    written = "".join(p.read_text(encoding="utf-8") for p in out.rglob("*") if p.is_file())
    assert f"open({str(classmate)!r}" in written  # the probe itself ran and reported
    assert canary not in written + done.output
    assert classmate.read_text() == canary + "\n"


def test_ids_are_stable_and_distinct_for_names_that_escape_alike(tmp_path):
    """Two different names never become one id, and the same tree always gives the same ids."""
    from grader.extract import discover

    (tmp_path / "a").mkdir()
    for name in (b"\xff.ipynb", b"\\xff.ipynb", b"\x1b.ipynb", b"\\x1b.ipynb"):
        (tmp_path / "a" / os.fsdecode(name)).write_text("{}")
    first, second = discover([tmp_path]), discover([tmp_path])
    assert first == second
    ids = [sid for sid, _ in first]
    assert len(set(ids)) == 4 and all(TERMINAL_CONTROL.search(sid) is None for sid in ids)
    assert len({path for _, path in first}) == 4


# ---------------------------------------------------------------------------------------------
# The gradebook route


@pytest.mark.slow
def test_the_gradebook_records_a_linked_submission_under_its_linker_and_a_fifo_stops_nothing(
        tmp_path, generated_course):
    """`grade --gradebook` in a real nbgrader course: eve's notebook is a link to ada's, and ada's folder
    holds a FIFO where nbgrader keeps its timestamp.txt. Eve is on record, not graded, under her own name;
    ada keeps her full score; the FIFO is never opened."""
    import nbformat
    from nbgrader.api import Gradebook

    from helpers.nbgrader_course import Course, set_answers
    from solutions import reference

    course = Course(tmp_path, COURSE.course_id, COURSE.assignment).copied(generated_course)
    nb = nbformat.read(course.dir / "source" / COURSE.assignment / NOTEBOOK, as_version=4)
    set_answers(nb, reference.cells())
    ada = course.dir / "submitted" / "ada" / COURSE.assignment
    write(ada / NOTEBOOK, nb)
    os.mkfifo(ada / "timestamp.txt")
    eve = course.dir / "submitted" / "eve" / COURSE.assignment
    eve.mkdir(parents=True)
    (eve / NOTEBOOK).symlink_to(ada / NOTEBOOK)
    done = course.run(["backprop-ninja", "grade", "submitted", "--out", "results", "--course", "course.yml",
                       "--gradebook", "gradebook.db"], course.dir)
    assert done.returncode == 0, str(done)
    assert f"not graded eve/{COURSE.assignment}/{STEM}: refused: a symbolic link" in done.stderr, str(done)
    with Gradebook(f"sqlite:///{course.dir / 'gradebook.db'}") as gb:
        scores = {s.id: gb.find_submission(COURSE.assignment, s.id).score for s in gb.students}
    assert scores == {"ada": COURSE.max_score, "eve": 0}


def test_a_timestamp_nbgrader_cannot_read_is_said_and_stops_no_one_else(tmp_path, generated_course):
    """An instructor trial's timestamp.txt, "2026-12-07 20:38:11.%f UTC" (a date format gone wrong): `grade
    --gradebook` said "could not record ...: AttributeError: 'CourseDirectory' object has no attribute 'fail'"
    (nbgrader's own refusal, broken). The file is named, with its fix; the others are on record; exit 1."""
    import nbformat
    from nbgrader.api import Gradebook

    from helpers.nbgrader_course import Course, set_answers
    from solutions import reference

    course = Course(tmp_path, COURSE.course_id, COURSE.assignment).copied(generated_course)
    nb = nbformat.read(course.dir / "source" / COURSE.assignment / NOTEBOOK, as_version=4)
    set_answers(nb, reference.cells())
    for student, stamp in (("ada", "2026-12-07 20:38:11.000000 UTC"), ("cy", "2026-12-07 20:38:11.%f UTC")):
        folder = course.dir / "submitted" / student / COURSE.assignment
        write(folder / NOTEBOOK, nb)
        (folder / "timestamp.txt").write_text(stamp, encoding="utf-8")
    done = course.run(["backprop-ninja", "grade", "submitted", "--out", "results", "--course", "course.yml",
                       "--gradebook", "gradebook.db"], course.dir)
    assert done.returncode == 1, str(done)
    assert f"skipped cy/{COURSE.assignment}/{STEM}: its timestamp.txt holds no time nbgrader reads ('2026-12-07 " \
           "20:38:11.%f UTC'; nbgrader's collect writes one such as" in done.stderr, str(done)
    assert "AttributeError" not in done.stderr + done.stdout and "Traceback" not in done.stderr, str(done)
    with Gradebook(f"sqlite:///{course.dir / 'gradebook.db'}") as gb:
        assert [s.id for s in gb.students] == ["ada"]
        assert gb.find_submission(COURSE.assignment, "ada").score == COURSE.max_score


@pytest.mark.slow
def test_the_gradebook_route_takes_the_courses_late_penalty_as_autograde_does(tmp_path, generated_course):
    """The TA trial: `grade --gradebook` read no nbgrader_config.py, so a late submission got no penalty and
    one already on record was set back to none. The course's policy is nbgrader's own setting."""
    from datetime import datetime, timedelta

    import nbformat
    from nbgrader.api import Gradebook

    from helpers.nbgrader_course import Course, set_answers
    from solutions import reference

    course = Course(tmp_path, COURSE.course_id, COURSE.assignment).copied(generated_course)
    config = course.dir / "nbgrader_config.py"
    config.write_text(config.read_text(encoding="utf-8") + '\nc.LateSubmissionPlugin.penalty_method = "zero"\n',
                      encoding="utf-8")
    due = datetime(2026, 12, 1, 12, 0)
    with Gradebook(f"sqlite:///{course.dir / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(COURSE.assignment, duedate=due)
    nb = nbformat.read(course.dir / "source" / COURSE.assignment / NOTEBOOK, as_version=4)
    set_answers(nb, reference.cells())
    for student, when in (("ada", due - timedelta(hours=1)), ("bea", due + timedelta(hours=3))):
        folder = course.dir / "submitted" / student / COURSE.assignment
        write(folder / NOTEBOOK, nb)
        (folder / "timestamp.txt").write_text(when.strftime("%Y-%m-%d %H:%M:%S.%f"), encoding="utf-8")
    done = course.run(["backprop-ninja", "grade", "submitted", "--out", "results", "--course", "course.yml",
                       "--gradebook", "gradebook.db"], course.dir)
    assert done.returncode == 0, str(done)
    with Gradebook(f"sqlite:///{course.dir / 'gradebook.db'}") as gb:
        penalties = {s: gb.find_submission_notebook(STEM, COURSE.assignment, s).late_submission_penalty
                     for s in ("ada", "bea")}
    assert penalties == {"ada": None, "bea": COURSE.max_score}
