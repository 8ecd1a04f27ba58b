"""Scores -> files and the terminal: a Gradescope results.json per submission, grades.csv for the
class, and a table a TA can read.

Every file is written whole or not at all (grader.outputs.files.atomic_write).
"""
from __future__ import annotations

import json
from pathlib import Path

from grader import __version__, safe_text
from grader.exercise import DEFAULT
from grader.extract import unreadable
from grader.judge.scoring import Result, TestScore
from grader.outputs.files import atomic_write, csv_text
from grader.vocabulary import Status, Verdict


def gradescope(result: Result) -> dict:
    """The Gradescope results.json schema, plus the integrity flags, each test's verdict (its named
    mistake in its extra_data) and where the result came from."""
    return {
        **({} if result.superseded or unreadable(result.error) else {"score": round(result.score, 6)}),
        "max_score": result.max_score,
        "output": _summary(result),
        "execution_time": round(result.seconds, 3),
        "tests": [_test_json(t) for t in result.tests],
        "flags": result.flags,
        "extra_data": {"submission": result.submission, "path": result.path, "exercise": result.exercise,
                       **({"outline": [[g, part] for g, part in result.outline.items()]} if result.outline else {}),
                       "grader_version": __version__,
                       "input_digest": result.digest, "isolation": result.isolation,
                       **({"notebook_sha256": result.notebook_sha256} if result.notebook_sha256 else {}),
                       **({"late_penalty": result.late_penalty} if result.late_penalty else {}),
                       **({"superseded": result.superseded} if result.superseded else {})},
    }


# A result whose notebook was handed in again and not graded since (Result.superseded), or of a file no notebook
# reader takes (recorded by neither route), has no score at the top of its file, where a tool would take it for the
# student's: its output says why (then, superseded, what the earlier one had).
EARLIER = ". The earlier notebook's: "


def _summary(result: Result) -> str:
    summary = result.error or f"{result.score:g} / {result.max_score:g}"
    return f"Not counted: {result.superseded}{EARLIER}{summary}" if result.superseded else summary


def _test_json(test: TestScore) -> dict:
    """One test as Gradescope's schema has it, with its verdict beside its status, and its named mistake
    in its extra_data with the measurements."""
    extra = {**test.extra, **({"mistake": test.mistake} if test.mistake else {})}
    return {"name": test.name, "score": test.score, "max_score": test.max_score, "status": test.status,
            "output": test.output, "verdict": test.verdict, **({"extra_data": extra} if extra else {})}


def _test(test: dict) -> TestScore:
    """One test read back (see _test_json)."""
    extra = dict(test.get("extra_data", {}))
    mistake = extra.pop("mistake", "")
    return TestScore(test["name"], test["score"], test["max_score"], _verdict(test), test["output"], extra,
                     mistake if isinstance(mistake, str) else "")


def _verdict(test: dict) -> Verdict:
    """The test's stored verdict. A file written before verdicts were stored gets the one its grader
    decided, from its score and the blank answer's fixed feedback."""
    if "verdict" in test:
        return Verdict(test["verdict"])
    if test["score"] >= test["max_score"]:
        return Verdict.CORRECT
    if test["output"] == Status.BLANK.text:
        return Verdict.NOT_ATTEMPTED
    return Verdict.PARTIAL if test["score"] > 0 else Verdict.INCORRECT


def valid(result: Result) -> Result:
    """`result` with every string in it made valid Unicode (safe_text.data), in place: what each result
    is made into as it enters the trusted process, graded or read back, so that no file, page, CSV or
    gradebook written from it can fail on a string a submission put there."""
    result.submission, result.path = safe_text.visible(result.submission), safe_text.visible(str(result.path))
    result.error = None if result.error is None else safe_text.visible(result.error)
    result.superseded = safe_text.visible(result.superseded)
    result.flags, result.isolation = safe_text.data(result.flags), safe_text.data(result.isolation)
    for test in result.tests:
        test.name, test.output, test.extra = safe_text.visible(test.name), safe_text.visible(test.output), \
            safe_text.data(test.extra)
        test.mistake = safe_text.visible(test.mistake)
    return result


def result_from_json(data: dict) -> Result:
    """A result from gradescope()'s JSON (KeyError, TypeError or ValueError when it is not that). One
    written before strings were made valid may hold a lone surrogate (JSON can spell one): it is made
    valid here as well."""
    extra = data["extra_data"]
    result = Result(extra["submission"], extra["path"], flags=data["flags"], seconds=data["execution_time"],
                    isolation=extra["isolation"], digest=extra["input_digest"],
                    exercise=extra.get("exercise", DEFAULT),  # grader 0.1 graded one exercise, the default
                    notebook_sha256=str(extra.get("notebook_sha256", "")))
    result.tests = [_test(t) for t in data["tests"]]
    result.outline = _outline(extra.get("outline", {}))
    result.late_penalty = float(extra.get("late_penalty", 0.0))
    result.superseded = str(extra.get("superseded", ""))
    summary = data["output"].partition(EARLIER)[2] if result.superseded else data["output"]
    if summary != f"{result.score:g} / {result.max_score:g}":
        result.error = summary
    return valid(result)


def _outline(found: object) -> dict[str, int | None]:
    """Result.outline read back from its pairs (a list: the order is the point, and a tool that rewrites JSON may
    sort an object's keys): a grade id (valid text) and an int or None each; anything else is no outline (the
    report then reads the exercise's), never a result lost."""
    pairs = found if isinstance(found, list) else []
    if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and (p[1] is None or type(p[1]) is int)
               for p in pairs):
        return {}
    return {safe_text.visible(grade_id): part for grade_id, part in pairs}


def load_result(path: Path) -> Result | None:
    """A result written by write_result, read back (None when it is missing or not one of ours)."""
    try:
        return result_from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def result_path(out: Path, submission: str) -> Path:
    """`<out>/<submission>.json`, under the name safe_text.output_stem gives it."""
    return out / f"{safe_text.output_stem(submission)}.json"


def submissions_file(path: Path) -> bool:
    """Whether `path` is a submission's result, or the feedback page beside one: what a class-wide file
    (a report, an export) written where the instructor says must never replace."""
    path = Path(path)
    return load_result(path.with_suffix(".json") if path.suffix == ".html" else path) is not None


def write_result(out: Path, result: Result) -> Path:
    path = result_path(out, result.submission)
    atomic_write(path, json.dumps(gradescope(result), indent=2) + "\n")
    return path


def in_folder(folder: Path, skip=()) -> dict[str, Result]:
    """Every result under `folder`, one per submission. Submission ids are paths, so results sit in subfolders;
    any other JSON there (a report written with --json, a tool's own file) is not a result and is left out, as
    are the files in `skip`."""
    skipped = {Path(p).resolve() for p in skip}
    found: dict[str, Result] = {}
    for path in sorted(folder.rglob("*.json")):
        if path.resolve() in skipped or any(part.startswith(".") for part in path.relative_to(folder).parts):
            continue
        result = load_result(path)
        # A copy of a result elsewhere in the folder must not stand in for the one grade wrote.
        if result is not None and (result.submission not in found or path == result_path(folder, result.submission)):
            found[result.submission] = result
    return found


def write_grades_csv(out: Path, results: list[Result], grade_ids: list[str], name: str = "grades.csv",
                     left_out: dict[str, str] | None = None) -> Path:
    path = out / name
    atomic_write(path, csv_text(grades_csv_rows(results, grade_ids, left_out)))
    return path


def grades_csv_rows(results: list[Result], grade_ids: list[str], left_out: dict[str, str] | None = None) -> list:
    """A file no notebook reader takes (extract.unreadable) has no scores here, only its error: neither nbgrader
    route records one for it, and a spreadsheet would read a 0 as one. Nor has a submission `left_out`
    (submission id -> why it is not graded now: report.scored), whose scores on file are no longer its own."""
    rows = []
    for r in results:
        by_id = {t.name: t.score for t in r.tests}
        blank = unreadable(r.error)
        rows.append([r.submission, "" if blank else f"{r.score:g}", f"{r.max_score:g}",
                     *("" if blank else f"{by_id.get(g, 0):g}" for g in grade_ids), len(r.flags), r.error or ""])
    most = f"{results[0].max_score:g}" if results else ""
    rows += [[sid, "", most, *("" for _ in grade_ids), 0, why] for sid, why in (left_out or {}).items()]
    return [["submission", "score", "max_score", *grade_ids, "flags", "error"], *sorted(rows, key=lambda r: r[0])]


def grade_ids_of(path: Path) -> list[str] | None:
    """The grade id columns of a grades.csv written by write_grades_csv, or None for a file that is not one."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8") as file:
            header = next(csv.reader(file), [])
    except (OSError, UnicodeDecodeError):
        return None
    if header[:3] != ["submission", "score", "max_score"] or header[-2:] != ["flags", "error"]:
        return None
    return header[3:-2]


def table(results: list[Result]) -> str:
    """One line per submission: score, tensors right / partial / wrong / not attempted, and its error or
    flags; a submission none of whose answers ran has no counts and says "not graded" (a file no notebook
    reader takes, no score either). Submission ids
    and errors are printed with safe_text.terminal: a student's text never moves the cursor or changes
    the colours of the instructor's terminal."""
    names = [safe_text.terminal(r.submission) for r in results]
    width = max([len(name) for name in names] + [10])
    lines = [f"{'submission':<{width}}  {'score':>13}  right partial wrong blank  notes"]
    for name, r in zip(names, results, strict=True):
        counts = {v: sum(t.verdict == v for t in r.tests) if r.graded else "-" for v in Verdict}
        notes = [("" if r.graded else "not graded: ") + safe_text.terminal(r.error)] if r.error else []
        notes += [f"{len(found)} {what}" for found, what in ((r.integrity_flags, "integrity flag(s)"),
                                                             (r.error_flags, "error(s) to fix")) if found]
        score = "-" if unreadable(r.error) else f"{r.score:g}"
        lines.append(f"{name:<{width}}  {score:>6} / {r.max_score:<4g}  {counts[Verdict.CORRECT]:>5} "
                     f"{counts[Verdict.PARTIAL]:>7} {counts[Verdict.INCORRECT]:>5} {counts[Verdict.NOT_ATTEMPTED]:>5}  "
                     f"{'; '.join(notes)}")
    return "\n".join(lines)
