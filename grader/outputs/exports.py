"""A graded class -> files other systems import: one row per submission and grade id (for a
spreadsheet or a script), and a Canvas gradebook import.

Canvas's gradebook import reads the columns of its own gradebook export: Student, ID, SIS User ID,
SIS Login ID and Section identify the student, every further column is an assignment (a new name
creates one), and the second row of an export, "Points Possible", gives each assignment's points.
Canvas finds a student by ID or SIS ID, never by name, so a row it cannot place is worth no more
than a line on stderr: with a roster exported from the course's gradebook, rows carry the roster's
own identity columns; without one, a student collected from a Canvas download is placed by the Canvas
user id its file name carried (the ID column), anyone else by their student id as the SIS Login ID.
Totals come from nbgrader's gradebook when the course has one (a TA's manual scores and late penalties
count, grader.outputs.final), else from results/.

Importing this module is light, since the command line lists FORMATS in its help: reading results (which,
for results written before they carried their outline, loads the exercise and torch with it) is imported where
it is done.
"""
from __future__ import annotations

import csv
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grader.outputs.files import csv_text

if TYPE_CHECKING:
    from grader.judge.scoring import Result

LATE = "late penalty"  # the grade-ids export's row for it
DEFAULT_NAMES = {"grade-ids": "grade_ids.csv", "canvas": "canvas.csv"}  # each format's file in the folder
FORMATS = tuple(DEFAULT_NAMES)
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


NOT_GRADED = "not graded"


def grade_id_rows(results: list[Result], left_out: dict[str, str] | None = None) -> list[list[str]]:
    """submission, grade_id, score, max_score, status, mistake, feedback: by submission, then grade
    id in the exercise's order, then a late penalty's row (its score negative). status is the verdict:
    correct, partial, incorrect or not attempted; a submission `left_out` (grader.outputs.final) has one
    row, "not graded", with a blank score and why."""
    from grader.outputs.report import grade_ids

    order = {g: i for i, g in enumerate(grade_ids(results))}
    rows = [["submission", "grade_id", "score", "max_score", "status", "mistake", "feedback"]]
    by_id = {r.submission: r for r in results} | dict.fromkeys(left_out or {})
    for sid in sorted(by_id):
        r = by_id[sid]
        if r is None:
            rows.append([sid, "", "", "", NOT_GRADED, "", left_out[sid]])
            continue
        for t in sorted(r.tests, key=lambda t: order[t.name]):
            rows.append([r.submission, t.name, f"{t.score:g}", f"{t.max_score:g}", t.verdict, t.mistake,
                         t.output])
        if r.late_penalty:  # so that a submission's rows add up to its total, as every other view has it
            rows.append([r.submission, LATE, f"{-r.late_penalty:g}", "", LATE, "",
                         f"the gradebook's late penalty, {r.late_penalty:g} points off the total"])
    return rows


@dataclass(frozen=True)
class Grade:
    """One student's total for the Canvas import, from a result or from nbgrader's gradebook."""

    student: str
    source: str  # what a warning names: the submission id, or the gradebook's student
    score: float | None  # None: not graded (a submission the gradebook holds without its scores), left blank
    max_score: float
    canvas_id: str | None = None  # Canvas's user id (its gradebook's ID column), as zip_collect recorded it
    name: str = ""  # the student's name as the gradebook has it
    why: str = "the gradebook holds no score of it"  # why a score is None


def from_results(results: list[Result]) -> list[Grade]:
    return [Grade(student_id(r.submission), r.submission, r.score, r.max_score) for r in results]


def from_gradebook(path: Path, assignment: str | None) -> list[Grade]:
    """Each submission's total as nbgrader's gradebook holds it, a TA's manual score in formgrader and a
    late penalty included, with the Canvas user id zip_collect recorded for its student (a Moodle
    participant id, moodle-<id>'s, is no Canvas id)."""
    from nbgrader.api import Gradebook, MissingEntry

    from grader.outputs.final import course_settings, penalty_of, recorded

    settings = course_settings(Path(path).resolve().parent)
    with Gradebook(f"sqlite:///{Path(path).resolve()}") as gb:
        names = [a.name for a in gb.assignments]
        if assignment is None:
            if len(names) != 1:
                raise ExportError(f"{path}: the gradebook holds {len(names)} assignments ({', '.join(names)}): "
                                  "give --course to say which")
            assignment = names[0]
        try:
            submissions = gb.assignment_submissions(assignment)
        except MissingEntry:
            raise ExportError(f"{path}: no assignment {assignment!r} in the gradebook ({', '.join(names)})") from None
        grades = [Grade(s.student.id, f"{s.student.id} (gradebook)",
                        s.score - sum(penalty_of(n, settings) for n in s.notebooks)
                        if all(recorded(n.grades) for n in s.notebooks) else None,
                        s.max_score, None if s.student.id.startswith("moodle-") else s.student.lms_user_id,
                        " ".join(filter(None, (s.student.first_name, s.student.last_name))))
                  for s in submissions]
    if not grades:
        raise ExportError(f"{path}: no submission of {assignment} is graded in the gradebook yet")
    return grades


@dataclass(frozen=True)
class Roster:
    """A Canvas gradebook export: its header, its Points Possible row and its students."""

    header: list[str]
    points: dict[str, str]
    students: list[dict[str, str]]

    def column(self, name: str) -> str | None:
        """The roster's own header for assignment `name`, which an import must spell exactly (any other
        header creates a new assignment): Canvas writes "Name (id)", and `name` may be the id alone, or
        the name in other case or with `_` for spaces (course.yml's `backprop_ninja` for "Backprop Ninja")."""
        def plain(text: str) -> str:
            return " ".join(re.sub(r"[_\-\s]+", " ", text).split()).casefold()

        for header in self.header:
            found = re.fullmatch(r"(.*) \((\d+)\)", header)
            if header == name or (found and (name == found[2] or plain(found[1]) == plain(name))):
                return header
        return next((h for h in self.header if h not in IDENTITY and plain(h) == plain(name)), None)

    def assignments(self) -> list[str]:
        """The roster's assignment columns (Canvas's "Name (id)")."""
        return [h for h in self.header if re.fullmatch(r".* \(\d+\)", h)]


def read_roster(path: Path) -> Roster:
    """A Canvas gradebook export (its Points Possible row, test student and blank rows set apart)."""
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
    points = next((row for row in rows if row.get("Student", "").startswith(POINTS_POSSIBLE)), {})
    students = [row for row in rows if not row.get("Student", "").startswith(POINTS_POSSIBLE)
                and row.get("Student") != TEST_STUDENT and any(row.get(c) for c in MATCH_ON)]
    return Roster(header, points, students)


def _match(grades: list[Grade], roster: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """student id -> roster row: by the Canvas user id zip_collect recorded (the ID column) first, then the
    student id in MATCH_ON's order (case-insensitive, as logins are); a row goes to one student only."""
    matched, taken = {}, set()
    keys = [("ID", lambda g: g.canvas_id)] + [(c, lambda g: g.student) for c in MATCH_ON]
    for column, key in keys:
        index = {}
        for row in roster:
            index.setdefault(row.get(column, "").casefold(), row)
        index.pop("", None)
        for grade in grades:
            row = index.get((key(grade) or "").casefold())
            if grade.student not in matched and row is not None and id(row) not in taken:
                matched[grade.student] = row
                taken.add(id(row))
    return matched


def canvas_rows(grades: list[Grade], column: str, roster: Roster | None, warn=print) -> list[list[str]]:
    """The Canvas import: header, Points Possible, then one row per student.

    A student with several submissions keeps the highest score (said on stderr); with a roster, an
    unmatched submission and a student without one are each said on stderr and left out of the file,
    so the import neither guesses a student nor zeroes a grade. The roster's own column for the
    assignment is used, and a Points Possible other than the course's is said on stderr. Without a
    roster a student from a Canvas download is placed by their Canvas user id (ID), anyone else by their
    student id as the SIS Login ID.
    """
    best: dict[str, Grade] = {}
    for g in sorted(grades, key=lambda g: g.source):
        if g.student in best:
            kept = max(best[g.student], g, key=lambda x: -1.0 if x.score is None else x.score)
            warn(f"{g.student}: several submissions ({best[g.student].source}, {g.source}); "
                 f"kept {kept.source} ({_score(kept)} points)")
            g = kept
        best[g.student] = g
    for g in sorted(best.values(), key=lambda g: g.student):
        if g.score is None:
            warn(f"{g.source}: not graded ({g.why}): its score is left blank, which Canvas leaves as it was")
    max_score = max(g.max_score for g in grades)
    if roster is not None:
        found = roster.column(column)
        if found is None:
            warn(f"no column {column!r} in the roster (its assignments: {', '.join(roster.assignments()) or 'none'})"
                 ": Canvas will create a new assignment (give --column as the roster names it, or its id)")
        else:
            column = found
            possible = roster.points.get(found, "")
            try:
                differs = abs(float(possible) - max_score) > 1e-9
            except ValueError:
                differs = False
            if differs:
                warn(f"{found}: Canvas says {float(possible):g} points possible, the course {max_score:g}: "
                     "change one of them, or Canvas shows these scores out of its own points")
    rows = [[*IDENTITY, column], [f"    {POINTS_POSSIBLE}", "", "", "", "", f"{max_score:g}"]]
    if roster is None:
        warn(f"no --roster: Canvas imports into the assignment named exactly {column!r}, creating it if the "
             "course has none (give --roster to take the course's own column)")
        for student, g in sorted(best.items()):
            login = "" if g.canvas_id else student
            rows.append([g.name or student, g.canvas_id or "", "", login, "", _score(g)])
        return rows
    matched = _match(list(best.values()), roster.students)
    if best and not matched:  # another course's roster, or submissions named other than Canvas names them
        raise ExportError(f"no submission matches a student of the roster (by {', '.join(('LMS user id', *MATCH_ON))}"
                          f"; submissions such as {min(best)!r}): is it this course's gradebook? Nothing written")
    for student, g in sorted(best.items()):
        if student not in matched:
            warn(f"{g.source}: no student {student!r} in the roster (by {', '.join(('LMS user id', *MATCH_ON))}); "
                 "left out")
    by_row = {id(row): student for student, row in matched.items()}
    for row in roster.students:  # in the roster's order, as the course's gradebook shows it
        if id(row) in by_row:
            rows.append([*(row.get(c, "") for c in IDENTITY), _score(best[by_row[id(row)]])])
        else:
            warn(f"{row.get('Student') or row.get('ID')}: in the roster, but no submission")
    return rows


def _score(grade: Grade) -> str:
    return "" if grade.score is None else f"{grade.score:g}"


def export(folder: Path, fmt: str, out: Path | None = None, roster: Path | None = None,
           column: str = "backprop-ninja", warn=print, gradebook: Path | None = None,
           assignment: str | None = None) -> Path:
    """`backprop-ninja export`: write `fmt` for a results folder (default: a CSV in the folder), with the
    scores `gradebook` holds when given (grader.outputs.final)."""
    from grader.outputs.report import beside, refuse_to_replace, scored, write_out

    out = Path(out) if out is not None else Path(folder) / DEFAULT_NAMES[fmt]
    refuse_to_replace(out)
    results, left_out = scored(folder, [out], gradebook, beside(folder), warn=lambda line: warn(f"warning: {line}"))
    if fmt == "grade-ids":
        rows = grade_id_rows(results, left_out)
    else:
        grades = from_gradebook(gradebook, assignment) if gradebook is not None else from_results(results)
        why = {student_id(sid): reason for sid, reason in left_out.items()}
        grades = [dataclasses.replace(g, score=None, why=why[g.student]) if g.student in why else g for g in grades]
        named = {g.student for g in grades}
        grades += [Grade(student, f"{student} (results)", None, 0.0, why=reason)
                   for student, reason in why.items() if student not in named]
        rows = canvas_rows(grades, column, read_roster(roster) if roster is not None else None, warn)
    write_out(out, csv_text(rows))
    return out
