"""One score per student everywhere (grader.outputs.final): a TA's manual score and a late penalty in
nbgrader's gradebook reach `report`, `export --format grade-ids` and the Canvas CSV alike, from a
gradebook beside results/ as `course init` lays a course out. The whole term, with real nbgrader and
its feedback, is tests/test_package.py."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.judge.scoring import Result
from grader.judge.scoring import TestScore as Score
from grader.outputs import feedback_page, final
from grader.outputs.report import RESUBMITTED
from grader.outputs.results import load_result, write_result
from grader.vocabulary import Verdict

ASSIGNMENT, NOTEBOOK = "backprop_ninja", "backprop_ninja"
POINTS = {"dcounts": 1.0, "dprobs": 2.0}
# ann: dcounts wrong, which a TA sets to full marks; bob: right, and late (a 0.5 penalty); cam: only
# graded, never recorded in the gradebook (kept as graded); dan: graded, but the gradebook holds his
# submission with no score (as a grading that failed after nbgrader made the submission left it); eve:
# graded, but the gradebook holds other scores (a regrade whose recording failed); fay: graded and on
# record, then resubmitted, a truncated file whose regrade failed (her result and scores are of the old one);
# gus: a blank notebook on record (0), then a truncated one the fast route graded and, as autograde, did not
# record (its result is the file's error, its zeros equal to the gradebook's earlier ones).
UNREADABLE = "not a notebook: the file is not valid JSON"
GRADED = {"ann": {"dcounts": 0.0, "dprobs": 2.0}, "bob": {"dcounts": 1.0, "dprobs": 2.0},
          "cam": {"dcounts": 1.0, "dprobs": 0.0}, "dan": {"dcounts": 1.0, "dprobs": 2.0},
          "eve": {"dcounts": 1.0, "dprobs": 2.0}, "fay": {"dcounts": 1.0, "dprobs": 2.0},
          "gus": {"dcounts": 0.0, "dprobs": 0.0}}
MANUAL, PENALTY = ("ann", "dcounts", 1.0), ("bob", 0.5)
FINAL = {"ann": 3.0, "bob": 2.5, "cam": 1.0}
NOT_GRADED = {"dan": final.NOT_RECORDED, "eve": final.STALE, "fay": RESUBMITTED, "gus": UNREADABLE}
SUBMITTED = {"ann": b'{"cells": []}', "fay": b'{"cells": [], "nbformat": 4, "meta'}  # as in submitted/ now


def _result(student: str) -> Result:
    result = Result(f"{student}/{ASSIGNMENT}/{NOTEBOOK}", f"submitted/{student}/{ASSIGNMENT}/{NOTEBOOK}.ipynb",
                    notebook_sha256=hashlib.sha256(b'{"cells": []}').hexdigest())
    for name, score in GRADED[student].items():
        verdict = Verdict.CORRECT if score == POINTS[name] else Verdict.INCORRECT
        result.tests.append(Score(name, score, POINTS[name], verdict, UNREADABLE if student == "gus" else "as graded"))
    result.error = UNREADABLE if student == "gus" else None
    return result


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """results/ and gradebook.db side by side, as autograde leaves them, then a TA's manual score and a
    late penalty set in the gradebook."""
    from nbgrader.api import Gradebook

    root = tmp_path_factory.mktemp("course")
    for student in GRADED:
        write_result(root / "results", _result(student))
        feedback_page.write(root / "results", _result(student))
    for student, content in SUBMITTED.items():
        (root / "submitted" / student / ASSIGNMENT).mkdir(parents=True)
        (root / "submitted" / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb").write_bytes(content)
    with warnings.catch_warnings(), Gradebook(f"sqlite:///{root / final.GRADEBOOK}") as gb:
        warnings.simplefilter("ignore")  # nbgrader's own add_submission trips SQLAlchemy's autoflush warnings
        gb.add_assignment(ASSIGNMENT)
        gb.add_notebook(NOTEBOOK, ASSIGNMENT)
        for name, points in POINTS.items():
            gb.add_grade_cell(f"check_{name}", NOTEBOOK, ASSIGNMENT, max_score=points, cell_type="code")
        for student in ("ann", "bob", "dan", "eve", "fay", "gus"):
            gb.add_student(student)
            gb.add_submission(ASSIGNMENT, student)
            for name, score in GRADED[student].items() if student != "dan" else ():
                gb.find_grade(f"check_{name}", NOTEBOOK, ASSIGNMENT, student).auto_score = score
        gb.find_grade("check_dcounts", NOTEBOOK, ASSIGNMENT, "eve").auto_score = 0.0
        student, name, score = MANUAL
        gb.find_grade(f"check_{name}", NOTEBOOK, ASSIGNMENT, student).manual_score = score
        gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, PENALTY[0]).late_submission_penalty = PENALTY[1]
        gb.db.commit()
    return root


def run(*args: str):
    done = CliRunner().invoke(main, list(args))
    assert done.exit_code == 0, done.output
    return done


def test_report_takes_the_gradebooks_scores(course):
    done = run("report", str(course / "results"), "--json")
    report = json.loads(done.stdout)
    assert {s["submission"].split("/")[0]: s["score"] for s in report["submissions"]} == FINAL
    assert (report["overridden"], report["late_penalties"]) == (1, 1)
    assert f"scores from the gradebook {course / final.GRADEBOOK}" in done.stderr
    not_graded = {f"{s}/{ASSIGNMENT}/{NOTEBOOK}": why for s, why in NOT_GRADED.items()}
    assert report["not_graded"] == sorted(not_graded) and report["not_graded_why"] == not_graded
    assert all(f"not graded: {sid} ({why})" in done.stderr for sid, why in not_graded.items())
    page = run("report", str(course / "results")).stdout
    assert "class report" in page
    html = (course / "results" / "report.html").read_text(encoding="utf-8")
    assert "1 set by hand, 1 late penalty." in html
    assert all(sid in html for sid in not_graded) and "the gradebook holds no score of it" in html


def test_grade_ids_take_the_tas_score(course):
    run("export", str(course / "results"), "--format", "grade-ids")
    rows = list(csv.DictReader(io.StringIO((course / "results" / "grade_ids.csv").read_text(encoding="utf-8"))))
    ann = next(r for r in rows if r["submission"].startswith("ann/") and r["grade_id"] == "dcounts")
    assert (float(ann["score"]), ann["status"]) == (1.0, "correct")
    assert ann["feedback"].startswith("your instructor set this score: 1 / 1 (the grader gave 0)")
    assert sum("your instructor" in r["feedback"] for r in rows) == 1
    for student, why in NOT_GRADED.items():
        (row,) = [r for r in rows if r["submission"].startswith(f"{student}/")]
        assert (row["score"], row["status"], row["feedback"]) == ("", "not graded", why)


def test_grade_ids_rows_add_up_to_the_total_late_penalty_included(course):
    """The TA trial: bob's rows added up to his score before the late penalty, which the export showed nowhere."""
    run("export", str(course / "results"), "--format", "grade-ids")
    rows = list(csv.DictReader(io.StringIO((course / "results" / "grade_ids.csv").read_text(encoding="utf-8"))))
    for student, total in FINAL.items():
        assert sum(float(r["score"]) for r in rows if r["submission"].startswith(f"{student}/")) == total, student
    (late,) = [r for r in rows if r["grade_id"] == "late penalty"]
    assert late["submission"].startswith("bob/") and float(late["score"]) == -PENALTY[1]


def test_nbgraders_per_grade_id_export_takes_the_late_penalty_off(course, tmp_path):
    """`nbgrader export --exporter=grader.lms.nbgrader.PerGradeIdExport` (its plugin, on the same gradebook):
    score is what the student ends with, as nbgrader's own CSV has it, beside raw_score and the penalty."""
    from nbgrader.api import Gradebook
    from traitlets.config import Config

    from grader.lms.nbgrader import PerGradeIdExport

    out = tmp_path / "per_grade_id.csv"
    config = Config()  # as course init's nbgrader_config.py sets it, in the course's folder
    config.GradeInSandbox.results = "results"
    config.CourseDirectory.root = str(course)
    with warnings.catch_warnings(), Gradebook(f"sqlite:///{course / final.GRADEBOOK}") as gb:
        warnings.simplefilter("ignore")
        PerGradeIdExport(to=str(out), config=config).export(gb)
    rows = {r["student_id"]: r for r in csv.DictReader(io.StringIO(out.read_text(encoding="utf-8")))}
    bob = rows["bob"]
    assert (bob["raw_score"], bob["late_submission_penalty"], bob["score"]) == ("3", "0.5", "2.5")
    assert (rows["ann"]["score"], rows["dan"]["score"], rows["dan"]["raw_score"]) == ("3", "", "")
    # The TA trial: fay's resubmission failed to grade; the gradebook still holds her earlier scores, which
    # this export gave as hers where every other view says not graded.
    fay = rows["fay"]
    assert (fay["raw_score"], fay["score"], fay["dcounts"], fay["dprobs"]) == ("", "", "", ""), fay


@pytest.mark.parametrize("content, said", [(b"", "not an nbgrader gradebook (an empty file)"),
                                           (b"points: {}\n", "not an nbgrader gradebook (not an SQLite database)"),
                                           (None, "an SQLite database, but not an nbgrader gradebook")])
def test_a_gradebook_that_is_none_is_one_line_and_left_as_it_was(course, tmp_path, content, said):
    """The TA trial: an empty file given as --gradebook was given nbgrader's tables and read as holding no
    scores; any other file was an SQL traceback."""
    import sqlite3

    path = tmp_path / "gradebook.db"
    if content is None:
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE notes (text)")
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    for command in (["report", str(course / "results")], ["export", str(course / "results"), "--format", "canvas"]):
        done = CliRunner().invoke(main, [*command, "--gradebook", str(path)])
        assert done.exit_code == 1 and done.output.startswith(f"Error: {path}: {said}"), done.output
        assert done.output.count("\n") == 1, done.output
    assert path.read_bytes() == before
    done = CliRunner().invoke(main, ["report", str(tmp_path / "nowhere")])
    assert done.exit_code == 1 and "no such results folder" in done.output, done.output


def test_canvas_takes_the_same_totals(course):
    run("export", str(course / "results"), "--format", "canvas")
    header, _, *rows = list(csv.reader(io.StringIO((course / "results" / "canvas.csv").read_text(encoding="utf-8"))))
    assert {row[3]: row[-1] for row in rows} == {"ann": "3", "bob": "2.5", "dan": "", "eve": "", "fay": "", "gus": ""}


def test_an_explicit_gradebook_and_none(course, tmp_path):
    """--gradebook names one anywhere; results with no gradebook beside them keep the grader's scores."""
    import shutil

    alone = tmp_path / "results"
    shutil.copytree(course / "results", alone)
    done = run("report", str(alone), "--json")
    assert json.loads(done.stdout)["submissions"][0]["score"] == 3.0  # ann's file, written back with the TA's score
    done = run("report", str(alone), "--json", "--gradebook", str(course / final.GRADEBOOK))
    scores = {s["submission"].split("/")[0]: s["score"] for s in json.loads(done.stdout)["submissions"]}
    assert scores == {**FINAL, "fay": 3.0}  # no submitted/ beside these results to tell fay's notebook changed


def _own(course: Path, student: str) -> tuple[dict, str]:
    """The student's own result file and page in results/, as read."""
    folder = course / "results" / student / ASSIGNMENT
    return (json.loads((folder / f"{NOTEBOOK}.json").read_text(encoding="utf-8")),
            (folder / f"{NOTEBOOK}.html").read_text(encoding="utf-8"))


def test_each_students_own_file_and_page_show_the_final_score(course):
    """A TA's score and a late penalty set after grading reach the student's own result file and page once
    report or export read the gradebook; a TA's score taken back again gives the grader's back."""
    from nbgrader.api import Gradebook

    run("report", str(course / "results"))
    ann, page = _own(course, "ann")
    assert ann["score"] == FINAL["ann"] and 'class="bpn-total">Total: 3 / 3<' in page
    assert [t["output"].startswith("your instructor set this score: 1 / 1 (the grader gave 0)")
            for t in ann["tests"]] == [True, False]
    bob, page = _own(course, "bob")
    assert bob["score"] == FINAL["bob"] and "Total: 2.5 / 3 (after a late penalty of 0.5)" in page
    run("report", str(course / "results"))  # read again: nothing said twice
    assert _own(course, "ann")[0] == ann
    student, name, score = MANUAL
    with Gradebook(f"sqlite:///{course / final.GRADEBOOK}") as gb:
        gb.find_grade(f"check_{name}", NOTEBOOK, ASSIGNMENT, student).manual_score = None
        gb.db.commit()
    try:
        run("export", str(course / "results"), "--format", "grade-ids")
        ann, page = _own(course, "ann")
        assert ann["score"] == 2.0 and "your instructor" not in json.dumps(ann) and "Total: 2 / 3" in page
        assert ann["tests"][0]["verdict"] == "incorrect" and ann["tests"][0]["output"] == "as graded"
    finally:
        with Gradebook(f"sqlite:///{course / final.GRADEBOOK}") as gb:
            gb.find_grade(f"check_{name}", NOTEBOOK, ASSIGNMENT, student).manual_score = score
            gb.db.commit()


def test_the_class_csv_is_written_again_with_what_every_other_view_says(course, tmp_path):
    """A TA trial: after a regrade through nbgrader, the results/grades.csv the fast route had written (the first
    file a TA opens) still said 0 for a student every other view gave 45.9. `report` and `export` write it
    again with the final scores, a submission not graded now blank with why; one already right is left alone."""
    import shutil

    from grader.outputs.results import write_grades_csv

    copy = tmp_path / "course"
    shutil.copytree(course, copy)
    write_grades_csv(copy / "results", [_result(s) for s in GRADED], list(POINTS))
    run("report", str(copy / "results"), "--json")
    path = copy / "results" / "grades.csv"
    rows = {r["submission"].split("/")[0]: r for r in csv.DictReader(io.StringIO(path.read_text(encoding="utf-8")))}
    assert {s: float(rows[s]["score"]) for s in FINAL} == FINAL
    assert float(rows["ann"]["dcounts"]) == MANUAL[2]
    assert {s: (rows[s]["score"], rows[s]["dcounts"], rows[s]["error"]) for s in NOT_GRADED} == \
        {s: ("", "", why) for s, why in NOT_GRADED.items()}
    written = path.stat().st_mtime_ns
    run("export", str(copy / "results"), "--format", "grade-ids")
    assert path.stat().st_mtime_ns == written


def test_a_replaced_notebooks_own_file_and_page_say_their_scores_are_not_counted(course):
    """The TA trial: after fay's truncated resubmission failed to grade, her own result file and page still
    showed her earlier total as hers, where the report and every export said not graded. They say so too, with
    the earlier scores kept, and say nothing of it once the notebook graded is her latest again."""
    run("report", str(course / "results"))
    fay, page = _own(course, "fay")
    assert fay["extra_data"]["superseded"] == RESUBMITTED and sum(t["score"] for t in fay["tests"]) == 3.0  # kept
    # No score at the top, where a tool reading the schema would take the earlier one for hers (a TA trial).
    assert "score" not in fay and fay["output"] == f"Not counted: {RESUBMITTED}. The earlier notebook's: 3 / 3"
    assert load_result(course / "results" / "fay" / ASSIGNMENT / f"{NOTEBOOK}.json").error is None
    assert feedback_page.SUPERSEDED in page and "Total of the earlier notebook, not counted: 3 / 3" in page
    assert 'class="bpn-total">Total:' not in page
    assert "superseded" not in _own(course, "ann")[0]["extra_data"]
    mine = course / "submitted" / "fay" / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    mine.write_bytes(b'{"cells": []}')  # the notebook her result is of, handed in again
    try:
        run("export", str(course / "results"), "--format", "canvas")
        fay, page = _own(course, "fay")
        assert "superseded" not in fay["extra_data"] and 'class="bpn-total">Total: 3 / 3<' in page
        assert fay["score"] == 3.0 and fay["output"] == "3 / 3"
        assert feedback_page.SUPERSEDED not in page
    finally:
        mine.write_bytes(SUBMITTED["fay"])


def test_generate_feedback_makes_the_page_again_with_the_gradebooks_scores(course):
    """GradebookFeedback, given a notebook as autograde left it and the grade cells' scores as nbgrader's
    GetGrades reads them from the gradebook: the page's total and rows are the gradebook's, the late
    penalty is said, the grade cell's line says who set its score, and the pictures stay."""
    import nbformat

    from grader.lms.nbgrader import GradebookFeedback, add_feedback_page, fill_grade_cells
    from grader.outputs import feedback_page

    result = _result("bob")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade": True, "grade_id": f"check_{name}",
                                                             "points": POINTS[name]}}) for name in POINTS])
    fill_grade_cells(nb, result, page=False)
    add_feedback_page(nb, result)
    picture = '<p class="bpn-note">a picture of dcounts</p>'
    page = nb.cells[0].outputs[0]
    page.data["text/html"] = page.data["text/html"].replace(
        "</tbody>", f'<tr class="bpn-pictures" data-grade-id="dcounts"><td colspan="4">{picture}</td></tr></tbody>')
    assert feedback_page.drawn_on(page.data["text/html"]).pictures == {"dcounts": picture}
    for cell in nb.cells[1:]:  # as GetGrades sets them: the TA gave dcounts half its point
        name = cell.metadata.nbgrader["grade_id"].removeprefix("check_")
        cell.metadata.nbgrader["score"] = 0.5 if name == "dcounts" else GRADED["bob"][name]
    resources = {"nbgrader": {"notebook": NOTEBOOK, "assignment": ASSIGNMENT, "student": "bob", "score": 2.0,
                              "late_penalty": PENALTY[1], "db_url": f"sqlite:///{course / final.GRADEBOOK}"}}
    nb, _ = GradebookFeedback().preprocess(nb, resources)
    html = nb.cells[0].outputs[0].data["text/html"]
    assert '<p class="bpn-total">Total: 2 / 3 (after a late penalty of 0.5)</p>' in html
    assert '<td class="bpn-points">0.5 / 1</td>' in html and picture in html
    assert "your instructor set this score: 0.5 / 1 (the grader gave 1)" in html
    dcounts = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "check_dcounts")
    assert dcounts.outputs[0].text.startswith("dcounts: 0.5 / 1 (partial). your instructor set this score")
    assert dcounts.outputs[1].data["text/plain"] == "0.5"


def test_generate_feedback_makes_the_page_again_without_the_exercise_or_torch(tmp_path):
    """generate_feedback runs after every grading, over the whole class: the page made again from its result
    and from the page made while grading (its pictures, part titles, how to read them) loads neither the
    exercise nor torch, two seconds of every run. It says what the page made while grading said, but the
    scores."""
    import subprocess
    import sys

    import nbformat

    from grader.exercise import load
    from grader.judge.scoring import outline
    from grader.lms.nbgrader import add_feedback_page
    from helpers.paths import ROOT

    result = _result("ann")
    result.outline = outline(load())
    nb = nbformat.v4.new_notebook()
    add_feedback_page(nb, result, "a/b")
    made = nb.cells[0].outputs[0].data["text/html"]
    nbformat.write(nb, tmp_path / "autograded.ipynb")
    again = ("import json, sys, nbformat\n"
             "from grader.lms.nbgrader import remake_page\n"
             "nb = nbformat.read(sys.argv[1], as_version=4)\n"
             "remake_page(nb, {'check_dcounts': 1.0, 'check_dprobs': 2.0}, 0.0, 'a/b')\n"
             "print(json.dumps(['torch' in sys.modules, nb.cells[0].outputs[0].data['text/html']]))\n")
    done = subprocess.run([sys.executable, "-c", again, str(tmp_path / "autograded.ipynb")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    torch, page = json.loads(done.stdout)
    assert not torch
    assert "Total: 2 / 3" in made and "Total: 3 / 3" in page

    def laid_out(html: str) -> list[str]:  # the part headings and the rows, in order
        return re.findall(r'<tr class="bpn-exercise"><th colspan="4">[^<]*</th></tr>|<tr id="bpn-[^"]*"', html)
    assert laid_out(page) == laid_out(made) and "bpn-exercise" in page


def test_a_recording_that_fails_half_way_leaves_no_score_on_record(tmp_path):
    """RecordGrades (SaveAutoGrades and AssignLatePenalties in one transaction), which both nbgrader routes
    record with: a grade cell nbgrader cannot record (MissingEntry) after one it can leaves neither on record,
    where SaveAutoGrades had committed the first; and a failure after everything was written (as the fast route's
    autograded notebook) takes back the student and the submission too."""
    import nbformat
    from nbgrader.api import Gradebook, MissingEntry

    from grader.lms.nbgrader import RecordGrades, fill_grade_cells, record, transaction

    db = f"sqlite:///{tmp_path / final.GRADEBOOK}"
    with warnings.catch_warnings(), Gradebook(db) as gb:
        warnings.simplefilter("ignore")
        gb.add_assignment(ASSIGNMENT)
        gb.add_notebook(NOTEBOOK, ASSIGNMENT)
        for name, points in POINTS.items():
            gb.add_grade_cell(f"check_{name}", NOTEBOOK, ASSIGNMENT, max_score=points, cell_type="code")
        gb.add_student("ann")
        gb.add_submission(ASSIGNMENT, "ann")  # as nbgrader's autograde makes it, before it grades
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("", metadata={"nbgrader": {
        "grade": True, "grade_id": f"check_{name}", "points": POINTS.get(name, 1)}}) for name in (*POINTS, "x")])
    fill_grade_cells(nb, _result("bob"), page=False)

    def info(student):
        return {"nbgrader": {"notebook": NOTEBOOK, "assignment": ASSIGNMENT, "student": student, "db_url": db}}

    with pytest.raises(MissingEntry), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        RecordGrades().preprocess(nb, info("ann"))
    nb.cells.pop()
    with pytest.raises(OSError), warnings.catch_warnings(), transaction(db) as gb:
        warnings.simplefilter("ignore")
        gb.update_or_create_student("bob")
        gb.update_or_create_submission(ASSIGNMENT, "bob")
        record(gb, nb, info("bob"))
        raise OSError("the autograded notebook cannot be written")
    with Gradebook(db) as gb:
        assert [g.auto_score for g in gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, "ann").grades] == [None] * 2
        assert [s.id for s in gb.students] == ["ann"]
    with warnings.catch_warnings(), transaction(db) as gb:
        warnings.simplefilter("ignore")
        record(gb, nb, info("ann"))
    with Gradebook(db) as gb:
        assert gb.find_submission(ASSIGNMENT, "ann").score == 3.0


@pytest.mark.slow
@pytest.mark.skipif(os.getuid() != 0, reason="making a unix user needs root")
def test_a_ta_who_may_not_write_the_results_gets_the_report_elsewhere(course):
    """A TA who may read an instructor's results/ but not write there: `report` once stopped on a
    PermissionError (rewriting a student's file with the final score) even with --out elsewhere. Now it writes
    the report where --out says, names the files left with an old score, and without --out says in one line
    to pass it."""
    import shutil
    import subprocess
    import tempfile

    from helpers import users

    place = Path(tempfile.mkdtemp(prefix="bpn-theirs-", dir="/tmp"))
    try:
        shutil.copytree(course, place / "course")
        results = place / "course" / "results"
        write_result(results, _result("ann"))  # as autograde left it: before the TA's score
        subprocess.run(["chmod", "-R", "a+rX,go-w", str(place)], check=True)
        with users.Session("bpnta") as session:
            ta = session.user
            venv = ta.venv()

            def report(*args: str) -> subprocess.CompletedProcess:
                return ta.run([str(venv / "bin" / "backprop-ninja"), "report", str(results), *args],
                              capture_output=True, text=True, timeout=300)

            done = report("--out", str(ta.home / "report.html"))
            assert done.returncode == 0 and (ta.home / "report.html").is_file(), done.stderr
            assert f"warning: {results / 'ann' / ASSIGNMENT}: still says the score before the gradebook's " \
                   "(Permission denied)" in done.stderr
            done = report()
            assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
            assert done.stderr.strip().splitlines()[-1] == (
                f"Error: {results / 'report.html'}: you may not write there (Permission denied); write it "
                "elsewhere with --out FILE")
            place.chmod(0o700)  # a course folder the TA may not even enter
            done = report("--out", str(ta.home / "report.html"))
            assert done.returncode == 1 and done.stderr.strip().splitlines() == [
                f"Error: {place / 'course' / 'gradebook.db'}: Permission denied"], done.stderr
    finally:
        shutil.rmtree(place, ignore_errors=True)


def test_a_batch_reads_the_courses_nbgrader_settings_once_before_it_starts(tmp_path, monkeypatch):
    """Reading them makes a traitlets application, which configures the process's logging: done as each result
    was settled, while the judge's thread ended its pytest session, the two threads deadlocked on logging's locks
    and `grade --gradebook` never exited (1 in 40 in a loop; tests/test_suite.py has the other half)."""
    from nbgrader.api import Gradebook

    from grader.lms.gradebook import Recorder

    gradebook = tmp_path / "gradebook.db"
    Gradebook(f"sqlite:///{gradebook}").close()
    record = Recorder(gradebook, log=lambda line: None)
    try:
        def again(root):
            raise AssertionError(f"the settings of {root} read again mid-batch")

        monkeypatch.setattr(final, "course_settings", again)
        settled = record.settle(tmp_path / "results", [Result(submission="ada/a1/nb", path="nb.ipynb")])
        assert [r.submission for r in settled] == ["ada/a1/nb"]
    finally:
        record.close()
