"""`backprop-ninja export`, on the class test_report.py grades for real: the long per-grade-id CSV and
the Canvas gradebook import, with and without a roster exported from Canvas."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_report import COURSE, COURSE_FILE, HOSTILE, SUBMISSIONS, grade_class, results

from grader.cli import main
from grader.exercises.makemore_mlp import EXERCISE

CANVAS_HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
# A Canvas gradebook export: ada by login (Canvas keeps its own case), ben by SIS User ID, dee by Canvas
# ID; cy is not enrolled, Zed never submitted, and the test student is in every Canvas course.
# The assignment already exists in Canvas, as "backprop-ninja (4420)", worth the course's points.
COLUMN = "backprop-ninja (4420)"
ROSTER = [
    ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Quiz 1 (4410)", COLUMN, "Current Score"],
    ["    Points Possible", "", "", "", "", "10.00", f"{COURSE.max_score:.2f}", "(read only)"],
    ["Lovelace, Ada", "1001", "S-1001", "ADA", "Lab 1", "9.00", "", "90"],
    ["Bennett, Ben", "1002", "ben", "bbennett", "Lab 2", "7.00", "", "70"],
    ["Dee, Dee", "dee", "S-1004", "ddee", "Lab 1", "", "", ""],
    ["Zed, Zed", "1005", "S-1005", "zed", "Lab 2", "8.00", "", "80"],
    ["Student, Test", "1006", "", "", "Lab 1", "", "", ""],
]


def write_roster(path: Path, rows=ROSTER) -> Path:
    with open(path, "w", newline="", encoding="utf-8-sig") as f:  # Canvas writes a byte-order mark
        csv.writer(f).writerows(rows)
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_class(tmp_path_factory.mktemp("class"))


def read(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))


def export(*args: str):
    done = CliRunner().invoke(main, ["export", *args])
    return done


JUNK = "junk/backprop_ninja"


def by_submission(rows: list[list[str]]) -> dict[str, list[list[str]]]:
    found: dict[str, list[list[str]]] = {}
    for row in rows:
        found.setdefault(row[0], []).append(row)
    return found


def test_grade_ids_has_a_row_per_submission_and_grade_id(graded):
    done = export(str(graded), "--format", "grade-ids")
    assert done.exit_code == 0, done.output
    header, *rows = read(graded / "grade_ids.csv")
    assert header == ["submission", "grade_id", "score", "max_score", "status", "mistake", "feedback"]
    order = [g for g in EXERCISE.grade_ids if g in COURSE.points]
    # the file no reader takes is not graded: one row, blank, saying why (never its zeros)
    assert [(r[0], r[1]) for r in rows] == [(sid, g) for sid in SUBMISSIONS for g in (order if sid != JUNK else [""])]
    assert by_submission(rows)[JUNK] == [[JUNK, "", "", "", "not graded", "", "not a notebook: the file is not valid "
                                          "JSON"]]
    for sid, result in ((s, r) for s, r in results(graded).items() if s != JUNK):
        for test, row in zip(result["tests"], (r for r in rows if r[0] == sid)):
            assert row[1] == test["name"] and row[6] == test["output"]
            assert float(row[2]) == test["score"] and float(row[3]) == test["max_score"]
    by_key = {(r[0], r[1]): r for r in rows}
    ben = by_key[("ben/backprop_ninja", "dcounts")]
    assert ben[4] == "incorrect" and ben[5].startswith("your dcounts misses the branch through counts_sum")
    assert by_key[("ben/backprop_ninja", "db1")][4:6] == ["partial", "your db1 is all zeros"]
    assert by_key[("dee/backprop_ninja", "dcounts")][4:6] == ["not attempted", ""]
    assert by_key[("ada/backprop_ninja", "dcounts")][4:6] == ["correct", ""]
    assert "<script>alert(2)</script>" in by_key[(f"{HOSTILE}/backprop_ninja", "dprobs")][6]


def test_grade_ids_is_the_same_file_every_time(graded, tmp_path):
    first, second = tmp_path / "1.csv", tmp_path / "2.csv"
    assert export(str(graded), "--format", "grade-ids", "--out", str(first)).exit_code == 0
    assert export(str(graded), "--format", "grade-ids", "--out", str(second)).exit_code == 0
    assert first.read_bytes() == second.read_bytes()


def test_canvas_without_a_roster_uses_the_student_id_as_login(graded):
    done = export(str(graded), "--format", "canvas")
    assert done.exit_code == 0, done.output
    header, points, *rows = read(graded / "canvas.csv")
    assert header == [*CANVAS_HEADER, "backprop-ninja"]
    assert points == ["    Points Possible", "", "", "", "", f"{COURSE.max_score:g}"]
    scores = {sid.split("/")[0]: r["score"] for sid, r in results(graded).items()}
    assert [r[0] for r in rows] == sorted([*scores, "junk"])
    for student, _, _, login, _, score in rows:  # the file no reader takes: blank, never 0
        assert login == student and (score == "" if student == "junk" else float(score) == scores[student])


@pytest.mark.parametrize("option, column", [([], "backprop-ninja"),
                                            (["--course", str(COURSE_FILE)], COURSE.assignment),
                                            (["--column", "Backprop ninja (4411)"], "Backprop ninja (4411)")])
def test_canvas_column_name(graded, tmp_path, option, column):
    out = tmp_path / "canvas.csv"
    done = export(str(graded), "--format", "canvas", "--out", str(out), *option)
    assert done.exit_code == 0, done.output
    assert read(out)[0][-1] == column


def test_canvas_with_a_roster_copies_identities_and_reports_who_is_missing(graded, tmp_path):
    roster = write_roster(tmp_path / "gradebook.csv")
    out = tmp_path / "canvas.csv"
    done = export(str(graded), "--format", "canvas", "--roster", str(roster), "--out", str(out))
    assert done.exit_code == 0, done.output
    header, points, *rows = read(out)
    assert header == [*CANVAS_HEADER, COLUMN] and points[0].strip() == "Points Possible"
    scores = {sid.split("/")[0]: r["score"] for sid, r in results(graded).items()}
    assert rows == [[*ROSTER[2][:5], f"{scores['ada']:g}"], [*ROSTER[3][:5], f"{scores['ben']:g}"],
                    [*ROSTER[4][:5], f"{scores['dee']:g}"]]
    warnings = done.stderr.splitlines()
    assert len(warnings) == 5, warnings
    assert sum(line.startswith("junk (results): not graded (not a notebook") for line in warnings) == 1, warnings
    for sid in ("cy/backprop_ninja", f"{HOSTILE}/backprop_ninja"):
        assert sum(line.startswith(f"{sid}: no student") for line in warnings) == 1, warnings
    assert warnings.count("Zed, Zed: in the roster, but no submission") == 1
    assert done.stdout.strip() == f"wrote {out}"


def test_canvas_says_when_the_roster_has_other_points_possible_or_no_such_column(graded, tmp_path):
    changed = [row[:] for row in ROSTER]
    changed[1][6] = f"{COURSE.max_score + 9:.2f}"
    out = tmp_path / "canvas.csv"
    done = export(str(graded), "--format", "canvas", "--roster", str(write_roster(tmp_path / "r.csv", changed)),
                  "--out", str(out))
    assert done.exit_code == 0, done.output
    assert (f"{COLUMN}: Canvas says {COURSE.max_score + 9:g} points possible, the course {COURSE.max_score:g}"
            in done.stderr)
    done = export(str(graded), "--format", "canvas", "--roster", str(write_roster(tmp_path / "r.csv")),
                  "--column", "Backprop by hand", "--out", str(out))
    assert ("no column 'Backprop by hand' in the roster (its assignments: Quiz 1 (4410), backprop-ninja (4420)): "
            "Canvas will create a new assignment" in done.stderr)
    assert read(out)[0][-1] == "Backprop by hand"


@pytest.mark.parametrize("option", [["--course", str(COURSE_FILE)], ["--column", "4420"],
                                    ["--column", "Backprop Ninja"]])
def test_canvas_finds_the_rosters_column_however_the_course_spells_it(graded, tmp_path, option):
    """course.yml's `backprop_ninja`, the assignment's Canvas id, or its name in other case all name the
    roster's "backprop-ninja (4420)": an import under any other spelling would create a new assignment."""
    out = tmp_path / "canvas.csv"
    done = export(str(graded), "--format", "canvas", "--roster", str(write_roster(tmp_path / "r.csv")),
                  "--out", str(out), *option)
    assert done.exit_code == 0, done.output
    assert read(out)[0][-1] == COLUMN and "no column" not in done.stderr


def test_a_roster_that_is_not_a_canvas_export_is_a_one_line_error(graded, tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("name,email\nAda,ada@example.org\n")
    out = tmp_path / "canvas.csv"
    done = export(str(graded), "--format", "canvas", "--roster", str(roster), "--out", str(out))
    assert done.exit_code != 0
    assert done.output.count("\n") == 1 and "not a Canvas gradebook export" in done.output
    assert not out.exists()


def test_a_roster_matching_no_submission_is_a_one_line_error(graded, tmp_path):
    """Another course's roster (or submissions named unlike Canvas): an import of no row is not written."""
    other = [row if i < 2 else [f"Other, {i}", str(9000 + i), f"S{i}", f"other{i}", "Section 1", "", ""]
             for i, row in enumerate(ROSTER)]
    out = tmp_path / "canvas.csv"
    done = export(str(graded), "--format", "canvas", "--roster", str(write_roster(tmp_path / "r.csv", other)),
                  "--out", str(out))
    assert done.exit_code == 1 and not out.exists()
    (line,) = [line for line in done.output.splitlines() if line.startswith("Error")]
    assert "no submission matches a student of the roster" in line and "Nothing written" in line


def test_exporting_an_empty_folder_is_a_one_line_error(tmp_path):
    done = export(str(tmp_path), "--format", "grade-ids")
    assert done.exit_code != 0
    assert done.output.count("\n") == 1 and "no results" in done.output


def test_text_a_student_controls_never_reaches_a_spreadsheet_as_a_formula(tmp_path):
    from grader.outputs.files import csv_text

    rows = [["=HYPERLINK(\"http://x\",\"y\")", "+1+1", "-2", "0.5", "@SUM(A1)", "plain", "-cmd|' /C calc'!A0"]]
    parsed = next(csv.reader(io.StringIO(csv_text(rows))))
    assert parsed == ["'=HYPERLINK(\"http://x\",\"y\")", "'+1+1", "-2", "0.5", "'@SUM(A1)", "plain",
                      "'-cmd|' /C calc'!A0"]


@pytest.mark.parametrize("fmt", ["grade-ids", "canvas"])
def test_every_format_the_command_offers_is_written_under_its_default_name(graded, fmt):
    """The command's --format choices are exports.FORMATS: one written without --out lands in the results
    folder under its default name; a name that is not a format is refused before anything is read."""
    from grader.outputs import exports

    assert fmt in exports.FORMATS
    done = CliRunner().invoke(main, ["export", str(graded), "--format", fmt])
    assert done.exit_code == 0, done.output
    assert done.output.strip().endswith(str(graded / exports.DEFAULT_NAMES[fmt]))
    refused = CliRunner().invoke(main, ["export", str(graded), "--format", "moodle"])
    assert refused.exit_code == 2 and "'moodle' is not one of 'grade-ids', 'canvas'" in refused.output


def test_export_and_report_load_neither_the_exercise_nor_torch(graded, tmp_path):
    """Run after every grading, and by the red team, the TA scripts and the LMS routes: export with --course
    read only its assignment, report read the results, and neither imported torch (two seconds each,
    the course's exercise loaded for its name)."""
    import json
    import os
    import subprocess
    import sys

    from helpers.paths import ROOT

    script = ("import json, sys\nfrom grader.cli import main\n"
              "try:\n    main(sys.argv[1:])\nexcept SystemExit as exit:\n    code = exit.code\n"
              "print(json.dumps([code, 'torch' in sys.modules]))\n")
    for args in (["export", str(graded), "--format", "canvas", "--out", str(tmp_path / "c.csv"), "--course",
                  str(COURSE_FILE)], ["report", str(graded), "--json"]):
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300, check=False)
        assert json.loads(done.stdout.splitlines()[-1]) == [0, False], (args, done.stdout[-500:], done.stderr[-1000:])
