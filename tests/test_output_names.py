"""Outputs never collide, whatever submissions are named: a submission's `<id>.json` and `.html` never take
the name of a class-wide file (grades.csv, report.html, grade_ids.csv, canvas.csv, a shard's grades) or of
another submission's files, on file systems that ignore case too, and never a name a tool skips (hidden)
or a file system refuses (over 255 bytes). Ordinary names keep the file they always had, so results a
course already has are found by report, export and --resume as before.
"""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader import extract, safe_text
from grader.outputs import feedback_page, results
from grader.outputs.report import ReportError, write_html
from grader.safe_text import CLASS_FILES, EXTENSIONS, output_stem, same_file
from helpers.notebooks import submission, write
from helpers.paths import COURSE, COURSE_FILE

# What atomic_write's temporary name adds to a file's (grader.outputs.files): the longest name must still fit 255 bytes.
TEMPORARY = len(".") + len(".") + 8 + len(".tmp")


def assert_safe(sid: str) -> None:
    stem = output_stem(sid)
    parts = stem.split("/")
    assert len(parts) == len(sid.split("/")), (sid, stem)
    for position, part in enumerate(parts):
        last = position == len(parts) - 1
        assert part and not part.startswith("."), (sid, stem)
        assert len(part.encode("utf-8", "surrogatepass")) + len(".json") + TEMPORARY <= 255, (sid, stem)
        if not last:
            assert not same_file(part).endswith(EXTENSIONS), (sid, stem)
    top = [parts[0] + ext for ext in EXTENSIONS] if len(parts) == 1 else [parts[0]]
    assert not any(CLASS_FILES.fullmatch(same_file(name)) for name in top), (sid, stem)


ORDINARY = ["reference", "wrong-00", "ada/backprop_ninja", "alice~2", "Alice Smith", "a_b", "a/b", "grades",
            "grades.csv", "report/backprop_ninja", "x.json", "élève", "2024-01-01 12.00"]


@pytest.mark.parametrize("sid", ORDINARY)
def test_an_ordinary_name_keeps_its_file(sid):
    """The files every course graded so far has (the golden results' names among them)."""
    assert output_stem(sid) == sid
    assert results.result_path(Path("out"), sid) == Path("out") / f"{sid}.json"
    assert feedback_page.page_path(Path("out"), sid) == Path("out") / f"{sid}.html"


CLASHING = {
    "report": "its page would be the class report.html",
    "REPORT": "the same, where case is ignored",
    "Report": "the same",
    "grades.csv/ada": "a folder named like grades.csv",
    "Canvas.CSV/ada": "a folder named like canvas.csv, in another case",
    "grade_ids.csv/x": "grade_ids.csv",
    "grades.shard-1-of-2.csv/x": "a shard's grades",
    "report.html/x": "report.html as a folder",
    ".ipynb": "a notebook named .ipynb: a hidden result, which report and export would skip",
    ".hidden": "a hidden result",
    "ada/.hidden": "a hidden result in a folder",
    "": "an empty name",
    "x" * 250: "a name that with .json is over 255 bytes",
    "é" * 120: "the same in two-byte characters",
    "ada.json/x": "a folder named like another submission's result",
    "ada.HTML/x": "a folder named like another submission's page",
    "x~0123456789abcdef": "a name that looks renamed",
}


@pytest.mark.parametrize("sid", list(CLASHING))
def test_a_name_that_would_clash_is_renamed_and_safe(sid):
    assert output_stem(sid) != sid, CLASHING[sid]
    assert_safe(sid)


def test_renamed_names_stay_readable_and_apart():
    assert output_stem("report").startswith("report~")
    assert output_stem(".ipynb").startswith("ipynb~")
    assert output_stem("report") != output_stem("Report")
    assert len({output_stem(sid) for sid in CLASHING}) == len(CLASHING)


IDS = st.lists(st.one_of(st.sampled_from(["report", "grades.csv", "canvas.csv", ".", "..", ".x", "~0123456789abcdef",
                                          "a.json", "A.HTML", "", "x" * 240, "é" * 130, "~2"]),
                         st.text(alphabet=st.sampled_from("aAé.~_- 0f\\"), max_size=12)),
               min_size=1, max_size=4).map("/".join)


@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(IDS, IDS)
def test_fuzzed_names_are_safe_and_never_share_a_file(one, other):
    assert_safe(one)
    assert_safe(other)
    if one != other:
        assert output_stem(one) != output_stem(other)


def test_discover_tells_apart_names_one_file_system_would_merge(tmp_path):
    """`Alice.ipynb` and `alice.ipynb` are two files here and one on a laptop's file system: each is graded
    with a suffix, as a duplicate is, and neither as the plain name, which an LMS would take for the login
    of either (a red team: `Bob.ipynb` beside bob's `bob.ipynb` took bob's Canvas grade)."""
    for name in ["Alice.ipynb", "alice.ipynb", "a_b.ipynb", "report.ipynb", ".ipynb", "\u00e9.ipynb",
                 "e\u0301.ipynb"]:
        write(tmp_path / name, submission())
    write(tmp_path / "a" / "b.ipynb", submission())
    ids = [sid for sid, _ in extract.discover([tmp_path])]
    assert set(ids) == {"Alice~2", "alice~3", "a_b", "a/b", "report", ".ipynb", "e\u0301~2", "\u00e9~3"}
    assert len({same_file(output_stem(sid)) for sid in ids}) == len(ids)


def test_a_report_or_export_never_replaces_a_submissions_result(tmp_path):
    from grader.judge.scoring import Result
    from grader.outputs.exports import export

    out = tmp_path / "results"
    results.write_result(out, Result("ada", "ada.ipynb"))
    for target in (out / "ada.json", out / "ada.html"):
        before = (out / "ada.json").read_bytes()
        with pytest.raises(ReportError, match="a submission's result is there"):
            write_html(out, target)
        with pytest.raises(ReportError, match="a submission's result is there"):
            export(out, "grade-ids", target)
        assert (out / "ada.json").read_bytes() == before
        assert not (out / "ada.html").exists()


# ---------------------------------------------------------------------------------------------
# A real batch of clashing names, through every command that reads or writes a results folder

NAMES = ["report.ipynb", "Report.ipynb", "REPORT.ipynb", "grades.csv.ipynb", "canvas.ipynb", ".ipynb",
         "a/b.ipynb", "a_b.ipynb", "grades.csv/x.ipynb", "x.json/y.ipynb", "x.ipynb", "n" * 240 + ".ipynb",
         "grades.shard-1-of-2.csv.ipynb"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([shutil.which("backprop-ninja"), *args], capture_output=True, text=True, timeout=900,
                          cwd=cwd)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    return done


@pytest.mark.slow
def test_a_class_of_clashing_names_keeps_every_output(tmp_path):
    submitted = tmp_path / "submitted"
    for i, name in enumerate(NAMES):
        # each its own score, so that no result can stand in for another's
        write(submitted / name, submission(drop=list(COURSE.exercise.answer_cells)[:i]))
    out = tmp_path / "results"
    course = ["--course", str(COURSE_FILE)]
    cli("grade", str(submitted), "--out", str(out), "--html", "--jobs", "2", *course, cwd=tmp_path)
    ids = [sid for sid, _ in extract.discover([submitted])]
    assert len(ids) == len(NAMES)
    rows = {row["submission"]: row for row in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))}
    assert set(rows) == set(ids)
    scores = {}
    for sid in ids:
        result = json.loads(results.result_path(out, sid).read_text(encoding="utf-8"))
        assert result["extra_data"]["submission"] == sid
        assert feedback_page.current(out, sid), sid
        assert safe_text.html(sid) in feedback_page.page_path(out, sid).read_text(encoding="utf-8")
        scores[sid] = result["score"]
    assert len(set(scores.values())) == len(NAMES)  # every submission's own result, none overwritten
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) == 2 * len(NAMES) + 1  # a .json and a .html each, and grades.csv
    assert len({same_file(p.relative_to(out).as_posix()) for p in files}) == len(files)

    cli("report", str(out), cwd=tmp_path)
    assert "Class report" in (out / "report.html").read_text(encoding="utf-8")
    cli("export", str(out), "--format", "grade-ids", cwd=tmp_path)
    cli("export", str(out), "--format", "canvas", cwd=tmp_path)
    with (out / "grade_ids.csv").open(encoding="utf-8") as f:
        assert {row["submission"] for row in csv.DictReader(f)} == set(ids)
    report = json.loads(cli("report", str(out), "--json", cwd=tmp_path).stdout)
    assert report["count"] == len(NAMES)
    assert {row["submission"] for row in report["submissions"]} == set(ids)
    assert report["not_graded"] == []  # submitted/ beside the results: every notebook found its result
    for sid in ids:  # the class files wrote over nobody's
        assert json.loads(results.result_path(out, sid).read_text(encoding="utf-8"))["score"] == scores[sid]
        assert feedback_page.current(out, sid)

    again = cli("grade", str(submitted), "--out", str(out), "--html", "--resume", "--jobs", "2", *course,
                cwd=tmp_path)
    assert again.stdout.count("kept ") + again.stderr.count("kept ") == len(NAMES), again.stdout + again.stderr


@pytest.mark.slow
def test_one_students_folder_graded_after_anothers_never_replaces_their_result(tmp_path):
    """An outside trial graded `submitted/alice`, then `submitted/bob`, into one --out: both were
    `backprop_ninja/backprop_ninja` below the folder named, and bob's result replaced alice's without a word. Each
    is now named from its student's folder, as `grade submitted` names it; and a result under an id must stay that
    notebook's: another alice's, elsewhere, is refused before anything runs."""
    for folder, student, drop in (("submitted", "alice", list(COURSE.exercise.answer_cells)), ("submitted", "bob", []),
                                  ("elsewhere", "alice", [])):
        write(tmp_path / folder / student / COURSE.assignment / COURSE.notebook, submission(drop=drop))
    out, course = tmp_path / "results", ["--course", str(COURSE_FILE)]
    for student in ("alice", "bob"):
        cli("grade", str(tmp_path / "submitted" / student), "--out", str(out), *course, cwd=tmp_path)
    stem = Path(COURSE.notebook).stem
    alice, bob = (out / student / COURSE.assignment / f"{stem}.json" for student in ("alice", "bob"))
    assert sorted(out.rglob("*.json")) == [alice, bob]
    assert results.load_result(alice).score == 0 and results.load_result(bob).score > 0
    before = alice.read_text(encoding="utf-8")
    done = subprocess.run([shutil.which("backprop-ninja"), "grade", str(tmp_path / "elsewhere" / "alice"), "--out",
                           str(out), *course], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    said = done.stderr.strip()
    assert done.returncode == 1 and len(said.splitlines()) == 1 and "Traceback" not in said, said
    assert f"holds the result of {tmp_path / 'submitted' / 'alice'}" in said, said
    assert alice.read_text(encoding="utf-8") == before
    cli("grade", str(tmp_path / "submitted" / "alice"), "--out", str(out), *course, cwd=tmp_path)  # regraded
