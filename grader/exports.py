"""A graded class -> files other systems import: one row per submission and grade id (for a
spreadsheet or a script), and a Canvas gradebook import.

Canvas's gradebook import reads the columns of its own gradebook export: Student, ID, SIS User ID,
SIS Login ID and Section identify the student, every further column is an assignment (a new name
creates one), and the second row of an export, "Points Possible", gives each assignment's points.
Canvas finds a student by ID or SIS ID, never by name, so a row it cannot place is worth no more
than a line on stderr: with a roster exported from the course's gradebook, rows carry the roster's
own identity columns; without one, the submission's student id stands as the SIS Login ID.
"""
from __future__ import annotations

import csv
from pathlib import Path

from grader.report import grade_ids, load, mistake
from grader.results import atomic_write, csv_text
from grader.scoring import Result

FORMATS = ("grade-ids", "canvas")
DEFAULT_NAMES = {"grade-ids": "grade_ids.csv", "canvas": "canvas.csv"}
IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
# Roster columns a submission's student id is looked up in, most specific first.
MATCH_ON = ("SIS Login ID", "SIS User ID", "ID")
POINTS_POSSIBLE = "Points Possible"
TEST_STUDENT = "Student, Test"  # the student view every Canvas course has


class ExportError(Exception):
    """An export that cannot be written (e.g. a roster that is not a Canvas gradebook export)."""


def student_id(submission: str) -> str:
    """nbgrader's student id: the first component of the submission id (submitted/<student>/...)."""
    return submission.split("/", 1)[0]


def grade_id_rows(results: list[Result]) -> list[list[str]]:
    """submission, grade_id, score, max_score, status, mistake, feedback: by submission, then grade
    id in the exercise's order. status is the verdict: correct, partial, incorrect or not attempted."""
    order = {g: i for i, g in enumerate(grade_ids(results))}
    rows = [["submission", "grade_id", "score", "max_score", "status", "mistake", "feedback"]]
    for r in sorted(results, key=lambda r: r.submission):
        for t in sorted(r.tests, key=lambda t: order[t.name]):
            rows.append([r.submission, t.name, f"{t.score:g}", f"{t.max_score:g}", t.verdict, mistake(t) or "",
                         t.output])
    return rows


def read_roster(path: Path) -> list[dict[str, str]]:
    """The students of a Canvas gradebook export (its Points Possible row, test student and blank rows
    left out)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            header = [h.strip() for h in reader.fieldnames or []]
            rows = [{k.strip(): (v or "").strip() for k, v in row.items() if k is not None} for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ExportError(f"{path}: cannot read the roster: {exc}") from None
    if "Student" not in header or not any(column in header for column in MATCH_ON):
        raise ExportError(f"{path}: not a Canvas gradebook export (it needs a Student column and one of "
                          f"{', '.join(MATCH_ON)})")
    return [row for row in rows if not row.get("Student", "").startswith(POINTS_POSSIBLE)
            and row.get("Student") != TEST_STUDENT and any(row.get(c) for c in MATCH_ON)]


def _match(students: list[str], roster: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """student id -> roster row, looked up in MATCH_ON's order (case-insensitive, as logins are); a
    row goes to one student only."""
    matched, taken = {}, set()
    for column in MATCH_ON:
        index = {}
        for row in roster:
            index.setdefault(row.get(column, "").casefold(), row)
        index.pop("", None)
        for student in students:
            row = index.get(student.casefold())
            if student not in matched and row is not None and id(row) not in taken:
                matched[student] = row
                taken.add(id(row))
    return matched


def canvas_rows(results: list[Result], column: str, roster: list[dict[str, str]] | None,
                warn=print) -> list[list[str]]:
    """The Canvas import: header, Points Possible, then one row per student.

    A student with several submissions keeps the highest score (said on stderr); with a roster, an
    unmatched submission and a student without one are each said on stderr and left out of the file,
    so the import neither guesses a student nor zeroes a grade.
    """
    best: dict[str, Result] = {}
    for r in sorted(results, key=lambda r: r.submission):
        student = student_id(r.submission)
        if student in best:
            kept = max(best[student], r, key=lambda x: x.score)
            warn(f"{student}: several submissions ({best[student].submission}, {r.submission}); "
                 f"kept {kept.submission} ({kept.score:g} points)")
            r = kept
        best[student] = r
    max_score = max(r.max_score for r in results)
    rows = [[*IDENTITY, column], [f"    {POINTS_POSSIBLE}", "", "", "", "", f"{max_score:g}"]]
    if roster is None:
        for student, r in sorted(best.items()):
            rows.append([student, "", "", student, "", f"{r.score:g}"])
        return rows
    matched = _match(list(best), roster)
    for student, r in sorted(best.items()):
        if student not in matched:
            warn(f"{r.submission}: no student {student!r} in the roster (by {', '.join(MATCH_ON)}); left out")
    by_row = {id(row): student for student, row in matched.items()}
    for row in roster:  # in the roster's order, as the course's gradebook shows it
        if id(row) in by_row:
            rows.append([*(row.get(c, "") for c in IDENTITY), f"{best[by_row[id(row)]].score:g}"])
        else:
            warn(f"{row.get('Student') or row.get('ID')}: in the roster, but no submission")
    return rows


def export(folder: Path, fmt: str, out: Path | None = None, roster: Path | None = None,
           column: str = "backprop-ninja", warn=print) -> Path:
    """`backprop-ninja export`: write `fmt` for a results folder (default: a CSV in the folder)."""
    out = Path(out) if out is not None else Path(folder) / DEFAULT_NAMES[fmt]
    results = load(folder, skip=[out])
    if fmt == "grade-ids":
        rows = grade_id_rows(results)
    else:
        rows = canvas_rows(results, column, read_roster(roster) if roster is not None else None, warn)
    atomic_write(out, csv_text(rows))
    return out
