"""A graded class -> one page an instructor reads: how the class scored, the tensor where it falls
off, the mistakes it made most, what to review (integrity flags, unreadable notebooks) and how long
grading took. The same content goes out as JSON for tools.

The page is one self-contained file (inline CSS, charts as embedded PNG, no script, no external URL)
so it can be mailed or put on a course drive as it is. Submission ids and feedback come from the
students' notebooks: every one of them is escaped before it reaches the page.
"""
from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import json
import statistics
from collections import defaultdict
from pathlib import Path

from grader import safe_text
from grader.exercise import load as load_exercise
from grader.judge.scoring import Result, outline
from grader.outputs import final
from grader.outputs.files import atomic_write, csv_text
from grader.outputs.results import grade_ids_of, grades_csv_rows, in_folder, submissions_file
from grader.vocabulary import Verdict

REPORT = "report.html"
VERDICTS = tuple(Verdict)
COLOURS = {Verdict.CORRECT: "#2a9d8f", Verdict.PARTIAL: "#e9c46a", Verdict.INCORRECT: "#e76f51",
           Verdict.NOT_ATTEMPTED: "#b8b8b8"}
SLOWEST = 5


class ReportError(Exception):
    """A results folder that cannot be reported on; the message says why, in one line."""


def load(folder: Path, skip=()) -> list[Result]:
    """Every result under `folder` (results.in_folder), sorted by submission id; none is an error here."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportError(f"{folder}: no such folder")
    found = in_folder(folder, skip)
    if not found:
        raise ReportError(f"{folder}: no results in it (the <submission>.json files that backprop-ninja grade "
                          "--out writes)")
    return [found[sid] for sid in sorted(found)]


def _outline(results: list[Result]) -> dict[str, int | None]:
    """The grade ids of the exercise a class's results are of (a folder holds one course's), in the notebook's
    order, each with its part: as the results say it, or, in files written before they said it, the exercise's."""
    if results and results[0].outline:
        return results[0].outline
    return outline(load_exercise(results[0].exercise) if results else load_exercise())


def grade_ids(results: list[Result]) -> list[str]:
    """The grade ids in the results, in the order the notebook asks for them (unknown ones last)."""
    rank = {g: i for i, g in enumerate(_outline(results))}
    seen = dict.fromkeys(t.name for r in results for t in r.tests)
    return sorted(seen, key=lambda g: rank.get(g, len(rank)))


def _percent(part: float, whole: float) -> float:
    return round(100 * part / whole, 1) if whole else 0.0


def _distribution(results: list[Result]) -> list[dict]:
    """Ten bins of the score as a share of the maximum; a full score falls in the last one."""
    bins = [{"from_percent": 10 * i, "to_percent": 10 * (i + 1), "count": 0, "submissions": []} for i in range(10)]
    for r in results:
        share = r.score / r.max_score if r.max_score else 0.0
        entry = bins[min(int(share * 10), 9)]
        entry["count"] += 1
        entry["submissions"].append(r.submission)
    return bins


def _per_grade_id(results: list[Result], ids: list[str]) -> list[dict]:
    parts = _outline(results)
    rows = []
    for grade_id in ids:
        tests = [t for r in results for t in r.tests if t.name == grade_id]
        counts = {v: sum(t.verdict == v for t in tests) for v in VERDICTS}
        rows.append({
            "grade_id": grade_id,
            "exercise": parts.get(grade_id),
            "max_score": max(t.max_score for t in tests),
            "mean_score": round(statistics.fmean(t.score for t in tests), 4),
            "graded": len(tests),
            **{v.text.replace(" ", "_"): counts[v] for v in VERDICTS},
            **{f"percent_{v.text.replace(' ', '_')}": _percent(counts[v], len(tests)) for v in VERDICTS},
        })
    return rows


def _fall_off(rows: list[dict]) -> dict | None:
    """Where the class falls off: the steepest drop in full credit from one tensor to the next (the
    first in the notebook's order; `also` names every other tensor the class drops at as steeply, so a
    tie is never reported as one place), and the first tensor fewer than half the class got fully right."""
    steepest = None
    for before, after in itertools.pairwise(rows):
        drop = round(before["percent_full_credit"] - after["percent_full_credit"], 1)
        if drop > 0 and steepest is not None and drop == steepest["drop"]:
            steepest["also"].append(after["grade_id"])
        elif drop > 0 and (steepest is None or drop > steepest["drop"]):
            steepest = {"grade_id": after["grade_id"], "after": before["grade_id"], "drop": drop,
                        "from_percent": before["percent_full_credit"], "to_percent": after["percent_full_credit"],
                        "also": []}
    below = next((r["grade_id"] for r in rows if r["percent_full_credit"] < 50), None)
    if steepest is None and below is None:
        return None
    return {"steepest_drop": steepest, "first_below_half": below}


def _mistakes(results: list[Result], ids: list[str]) -> list[dict]:
    who: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in results:
        for t in r.tests:
            if t.mistake.strip():
                who[(t.name, t.mistake.strip())].append(r.submission)
    rank = {g: i for i, g in enumerate(ids)}
    order = sorted(who, key=lambda key: (-len(who[key]), rank[key[0]], key[1]))
    return [{"grade_id": g, "mistake": m, "count": len(who[(g, m)]), "submissions": sorted(who[(g, m)])}
            for g, m in order]


def _flags(results: list[Result]) -> list[dict]:
    """The integrity flags, to review; error flags are among the errors."""
    return [{"submission": r.submission, "kind": f.get("kind", ""),
             "where": f.get("grade_id") or f.get("cell") or "", "evidence": f.get("evidence", "")}
            for r in results for f in r.integrity_flags]


def _errors(results: list[Result]) -> list[dict]:
    """Each submission's error, then its error flags (a syntax error, a time limit) not already said, each
    once per place (a cell past its time limit is flagged by each check that ran it), then the answer cells
    that raised at run time."""
    found = []
    for r in results:
        said = [r.error] if r.error else []
        places = set()
        for f in r.error_flags:
            where = f.get("grade_id") or f.get("cell") or "submission"
            if f.get("evidence") != r.error and (f.get("kind"), where) not in places:
                places.add((f.get("kind"), where))
                said.append(f"{f.get('kind', '')} ({where}): {f.get('evidence', '')}")
        said += [f"raised ({t.name}): {t.output}" for t in r.tests if t.extra.get("raised")]
        found += [{"submission": r.submission, "error": text} for text in said]
    return found


def not_graded(results: list[Result], submitted: Path | None, left_out: dict[str, str] | None = None) -> list[str]:
    """The notebooks in `submitted` (nbgrader's submitted/, or any folder given to grade) that have no
    result: a batch stopped midway, a student autograde skipped or failed on, a late arrival; and those
    `left_out` (submission id -> why: grader.outputs.final), wherever they are."""
    left_out = left_out or {}
    found = []
    if submitted is not None and Path(submitted).is_dir():
        from grader.extract import discover

        graded = {r.submission for r in results}
        found = [sid for sid, _ in discover([Path(submitted)]) if sid not in graded]
    return sorted(set(found) | set(left_out))


def beside(folder: Path) -> Path | None:
    """nbgrader's submitted/ beside a course's results/, where autograde and `grade` leave them."""
    submitted = Path(folder).resolve().parent / "submitted"
    return submitted if submitted.is_dir() else None


def build(results: list[Result], folder: Path, submitted: Path | None = None, gradebook: Path | None = None,
          left_out: dict[str, str] | None = None) -> dict:
    """Everything the report shows, as plain data (the --json output, and what the page is drawn from);
    `gradebook` is where the scores were taken from (grader.outputs.final), if any, and `left_out` the
    submissions with a result but no score to count (submission id -> why)."""
    ids = grade_ids(results)
    scores = [r.score for r in results]
    seconds = [r.seconds for r in results]
    slowest = sorted(results, key=lambda r: (-r.seconds, r.submission))[:SLOWEST]
    per_grade_id = _per_grade_id(results, ids)
    return {
        "results_dir": safe_text.visible(str(folder)),
        "gradebook": str(gradebook) if gradebook is not None else None,
        "overridden": sum(final.overridden(t) for r in results for t in r.tests),
        "late_penalties": sum(bool(r.late_penalty) for r in results),
        "count": len(results),
        "max_score": statistics.mode(r.max_score for r in results),
        "score": {"mean": round(statistics.fmean(scores), 4), "median": statistics.median(scores),
                  "min": min(scores), "max": max(scores)},
        "distribution": _distribution(results),
        "per_grade_id": per_grade_id,
        "fall_off": _fall_off(per_grade_id),
        "mistakes": _mistakes(results, ids),
        "flags": _flags(results),
        "errors": _errors(results),
        "submitted_dir": str(submitted) if submitted is not None else None,
        "not_graded": not_graded(results, submitted, left_out),
        "not_graded_why": dict(sorted((left_out or {}).items())),
        "times": {"mean": round(statistics.fmean(seconds), 3), "max": max(seconds), "total": round(sum(seconds), 3),
                  "slowest": [{"submission": r.submission, "seconds": r.seconds} for r in slowest]},
        "submissions": [{"submission": r.submission, "score": r.score, "max_score": r.max_score,
                         **{v.text.replace(" ", "_"): sum(t.verdict == v for t in r.tests) for v in VERDICTS},
                         "flags": len(r.integrity_flags), "error": r.error or ""} for r in results],
    }


def _png(figure) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _histogram(report: dict) -> str:
    from matplotlib.figure import Figure

    bins = report["distribution"]
    figure = Figure(figsize=(8, 3), dpi=100)
    ax = figure.add_subplot()
    ax.bar([b["from_percent"] for b in bins], [b["count"] for b in bins], width=10, align="edge",
           color=COLOURS[Verdict.CORRECT], edgecolor="white")
    ax.set_xlim(0, 100)
    ax.set_xticks(range(0, 101, 10))
    ax.set_xlabel(f"score, % of {report['max_score']:g} points")
    ax.set_ylabel("submissions")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.spines[["top", "right"]].set_visible(False)
    return _png(figure)


def _tensor_chart(report: dict) -> str:
    from matplotlib.figure import Figure

    rows = report["per_grade_id"]
    figure = Figure(figsize=(13, 4.2), dpi=100)
    ax = figure.add_subplot()
    x = range(len(rows))
    bottom = [0.0] * len(rows)
    for verdict in VERDICTS:
        key = "percent_" + verdict.text.replace(" ", "_")
        heights = [r[key] for r in rows]
        ax.bar(x, heights, bottom=bottom, color=COLOURS[verdict], label=verdict.text, width=0.8)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    steepest = (report["fall_off"] or {}).get("steepest_drop")
    if steepest:
        ids = [r["grade_id"] for r in rows]
        for grade_id in (steepest["grade_id"], *steepest["also"]):
            ax.axvline(ids.index(grade_id) - 0.5, color="black", linestyle="--", linewidth=1)
        ax.annotate(f"falls off: {steepest['from_percent']:.0f}% → {steepest['to_percent']:.0f}%",
                    (ids.index(steepest["grade_id"]) - 0.4, 102), fontsize=9, annotation_clip=False)
    ax.set_xticks(list(x), [r["grade_id"] for r in rows], rotation=70, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylim(0, 100)
    ax.set_ylabel("% of submissions")
    ax.legend(ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.32), frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return _png(figure)


CSS = """
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:0 auto;
     padding:1rem 1.5rem 3rem;max-width:1240px}
h1{font-size:1.6rem;margin:.5rem 0}
h2{font-size:1.2rem;margin:2rem 0 .5rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
nav a{margin-right:1rem}
.stats{display:flex;flex-wrap:wrap;gap:1rem;margin:1rem 0}
.stat{border:1px solid #ddd;border-radius:6px;padding:.5rem 1rem;min-width:9rem}
.stat b{display:block;font-size:1.4rem}
.scroll{max-height:24rem;overflow:auto;border:1px solid #ddd;border-radius:4px}
table{border-collapse:collapse;width:100%}
th,td{padding:.3rem .6rem;text-align:left;vertical-align:top;border-bottom:1px solid #eee;overflow-wrap:break-word}
th{position:sticky;top:0;background:#f4f4f4;z-index:1}
td.n,th.n{text-align:right;white-space:nowrap}
tr.falls-off td{background:#fff3cd}
img{max-width:100%;height:auto;display:block}
code{font-size:.9em}
.none{color:#666;font-style:italic}
"""


def _cell(value, numeric: bool = False) -> str:
    if isinstance(value, float):
        value = f"{value:g}"
    return f'<td{" class=n" if numeric else ""}>{safe_text.html(str(value))}</td>'


def _table(headers: list[str], rows: list[list], numeric: set[int] = frozenset(),
           row_class=lambda index: "") -> str:
    head = "".join(f'<th{" class=n" if i in numeric else ""}>{html.escape(h)}</th>' for i, h in enumerate(headers))
    body = []
    for index, row in enumerate(rows):
        css = row_class(index)
        cells = "".join(_cell(v, i in numeric) for i, v in enumerate(row))
        body.append(f'<tr class="{css}">{cells}</tr>' if css else f"<tr>{cells}</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _section(anchor: str, title: str, *parts: str) -> str:
    return f'<section id="{anchor}"><h2>{html.escape(title)}</h2>{"".join(parts)}</section>'


def _none(text: str) -> str:
    return f'<p class="none">{html.escape(text)}</p>'


def _image(data: str, alt: str) -> str:
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def render(report: dict) -> str:
    """The page, drawn from build()'s data."""
    score, times, rows = report["score"], report["times"], report["per_grade_id"]
    top = report["max_score"]
    stats = "".join(f'<div class="stat">{html.escape(label)}<b>{html.escape(value)}</b></div>' for label, value in (
        ("submissions", str(report["count"])),
        ("mean score", f"{score['mean']:.4g} / {top:g}"),
        ("median score", f"{score['median']:g} / {top:g}"),
        ("lowest / highest", f"{score['min']:g} / {score['max']:g}"),
        ("integrity flags", str(len(report["flags"]))),
        ("errors", str(len(report["errors"]))),
        ("not graded", str(len(report["not_graded"]))),
    ))
    fall = report["fall_off"] or {}
    steepest, below = fall.get("steepest_drop"), fall.get("first_below_half")
    sentences = []
    if steepest:
        sentences.append(f"The class falls off at {steepest['grade_id']}: full credit drops from "
                         f"{steepest['from_percent']:g}% on {steepest['after']} to {steepest['to_percent']:g}%"
                         + (f"; it drops as steeply ({steepest['drop']:g} points) at {', '.join(steepest['also'])}."
                            if steepest["also"] else "."))
    if below:
        sentences.append(f"{below} is the first tensor fewer than half the class got fully right.")
    source = (f"Scores as the gradebook {report['gradebook']} holds them: {report['overridden']} set by hand, "
              f"{report['late_penalties']} late {'penalty' if report['late_penalties'] == 1 else 'penalties'}."
              if report["gradebook"] else
              "Scores as the grader gave them (no nbgrader gradebook beside the results).")
    fall_text = f"<p>{html.escape(' '.join(sentences))}</p>" if sentences else \
        _none("Full credit never drops from one tensor to the next.")
    verdict_keys = [v.text.replace(" ", "_") for v in VERDICTS]
    distribution = _table(
        ["score (% of maximum)", "points", "submissions"],
        [[f"{b['from_percent']}–{b['to_percent']}%",
          f"{top * b['from_percent'] / 100:.4g}–{top * b['to_percent'] / 100:.4g}", b["count"]]
         for b in report["distribution"]], numeric={2})
    tensors = _table(
        ["#", "grade id", "exercise", "points", "mean", *(f"% {v.text}" for v in VERDICTS)],
        [[i + 1, r["grade_id"], r["exercise"] or "", r["max_score"], r["mean_score"],
          *(f"{r['percent_' + k]:g}%" for k in verdict_keys)] for i, r in enumerate(rows)],
        numeric={0, 3, 4, 5, 6, 7, 8},
        row_class=lambda i: "falls-off" if steepest and rows[i]["grade_id"] in (steepest["grade_id"], *steepest["also"])
        else "")
    mistakes = _table(["grade id", "mistake", "count", "submissions"],
                      [[m["grade_id"], m["mistake"], m["count"], ", ".join(m["submissions"])]
                       for m in report["mistakes"]], numeric={2}) if report["mistakes"] else \
        _none("No wrong answer was named by the hidden suite.")
    flags = _table(["submission", "kind", "where", "evidence"],
                   [[f["submission"], f["kind"], f["where"], f["evidence"]] for f in report["flags"]]) \
        if report["flags"] else _none("No integrity flags.")
    errors = _table(["submission", "error"], [[e["submission"], e["error"]] for e in report["errors"]]) \
        if report["errors"] else _none("Every notebook graded was read and run.")
    why = report["not_graded_why"]
    missing = _table(["submission in " + (report["submitted_dir"] or ""), "why"],
                     [[sid, why.get(sid, "no result")] for sid in report["not_graded"]]) \
        if report["not_graded"] else _none(f"Every notebook in {report['submitted_dir']} was graded."
                                           if report["submitted_dir"] else
                                           "No submitted/ folder beside the results to compare with.")
    slowest = _table(["submission", "seconds"], [[s["submission"], s["seconds"]] for s in times["slowest"]],
                     numeric={1})
    submissions = _table(["submission", "score", "max", *(v.text for v in VERDICTS), "flags", "error"],
                         [[s["submission"], s["score"], s["max_score"], *(s[k] for k in verdict_keys), s["flags"],
                           s["error"]] for s in report["submissions"]], numeric={1, 2, 3, 4, 5, 6, 7})
    sections = [
        ("distribution", "Score distribution",
         _image(_histogram(report), "histogram of scores"), distribution),
        ("tensors", "Success per tensor, in the exercise's order",
         fall_text, _image(_tensor_chart(report), "share of full credit, partial, wrong and blank per grade id"),
         tensors),
        ("mistakes", "Most common named mistakes", mistakes),
        ("flags", "Integrity flags to review", flags),
        ("not-graded", "Submitted but not graded", missing),
        ("errors", "Errors", errors),
        ("times", "Grading times",
         f"<p>mean {times['mean']:g} s, max {times['max']:g} s, total {times['total']:g} s. Slowest:</p>", slowest),
        ("submissions", "Submissions", submissions),
    ]
    nav = "".join(f'<a href="#{anchor}">{html.escape(title)}</a>' for anchor, title, *_ in sections)
    body = "".join(_section(*section) for section in sections)
    title = f"Class report: {report['results_dir']}"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{safe_text.POLICY_META}'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
            f'<h1>{html.escape(title)}</h1><nav>{nav}</nav><section id="summary"><p>{html.escape(source)}</p>'
            f'<div class="stats">{stats}</div>'
            f"</section>{body}</body></html>\n")


RESUBMITTED = ("its latest submission was not graded (the notebook in submitted/ is not the one its result is of: "
               f"a resubmission whose grading failed or was stopped, or not run yet): {final.AGAIN}; the earlier score "
               "is not counted")


def resubmitted(results: list[Result], submitted: Path | None) -> dict[str, str]:
    """The submissions whose notebook in `submitted` is no longer the one their result was graded from, with
    why: a regrade that failed (a truncated download nbgrader could not read) leaves the earlier result and
    scores in place, which no view may count as the student's latest."""
    if submitted is None or not Path(submitted).is_dir():
        return {}
    from grader.extract import Refused, discover, notebook_bytes

    graded = {r.submission: r.notebook_sha256 for r in results if r.notebook_sha256}
    found = {}
    for sid, path in discover([Path(submitted)]):
        if sid not in graded:
            continue
        try:
            now = hashlib.sha256(notebook_bytes(path)).hexdigest()
        except (Refused, OSError):
            continue
        if now != graded[sid]:
            found[sid] = RESUBMITTED
    return found


def scored(folder: Path, skip: list, gradebook: Path | None, submitted: Path | None,
           warn=None) -> tuple[list[Result], dict[str, str]]:
    """The results of `folder` with the gradebook's scores, and those left out with why: scores the gradebook
    does not hold (final.from_gradebook), and results of a notebook since replaced in `submitted`. Each
    result's own files are brought up to date with both (its page says when its notebook was replaced);
    those the caller may not write are passed to `warn` (else a ReportError names the first)."""
    results, left_out = final.from_gradebook(load(folder, skip=skip), gradebook)
    replaced = resubmitted(results, submitted)
    moved = []  # without a gradebook, only a result whose notebook was replaced, or is again its latest
    for result in results:
        was, result.superseded = result.superseded, replaced.get(result.submission, "")
        if gradebook is not None or was != result.superseded:
            moved.append(result)
    stale = final.written(folder, moved)
    if stale and warn is None:
        raise ReportError(f"{stale[0]}; run this as a user who may write {folder}")
    for line in stale:
        warn(line)
    left_out |= replaced
    results = [r for r in results if r.submission not in left_out]
    refreshed = _class_csv(folder, results, left_out)
    if refreshed and warn is None:
        raise ReportError(f"{refreshed}; run this as a user who may write {folder}")
    if refreshed:
        warn(refreshed)
    if not results:
        kept = f"has its score in the gradebook {gradebook}" if gradebook is not None else "is of a graded notebook"
        raise ReportError(f"{folder}: none of its {len(left_out)} result(s) {kept} (e.g. {min(left_out)}: "
                          f"{left_out[min(left_out)]})")
    return results, left_out


def _class_csv(folder: Path, results: list[Result], left_out: dict[str, str]) -> str:
    """The class's grades.csv the grader wrote in `folder`, written again with `results` as they now stand and
    the ones `left_out` blank, saying why; "" when done or when there is none, else why it still says old
    scores. A TA trial: after a regrade through nbgrader, the class file a TA opens first still said 0 for a
    student every other view gave 45.9."""
    path = Path(folder) / "grades.csv"
    grade_ids = grade_ids_of(path) if path.is_file() else None
    if grade_ids is None:
        return ""
    try:
        wanted = csv_text(grades_csv_rows(results, grade_ids, left_out))
        if path.read_bytes() != wanted.encode("utf-8"):
            atomic_write(path, wanted)
    except PermissionError as exc:
        return f"{path}: still says the scores as graded ({exc.strerror})"
    return ""


def write_html(folder: Path, out: Path | None = None, submitted: Path | None = None,
               gradebook: Path | None = None) -> Path:
    """The page for a results folder, written to `out` (default: report.html in the folder), with the
    scores `gradebook` holds when given; the submissions are looked for in `submitted` (default: a
    submitted/ folder beside the results)."""
    out = Path(out) if out is not None else Path(folder) / REPORT
    refuse_to_replace(out)
    submitted = submitted or beside(folder)
    results, left_out = scored(folder, [out], gradebook, submitted)
    write_out(out, render(build(results, Path(folder), submitted, gradebook, left_out)))
    return out


def write_out(out: Path, text: str) -> None:
    """A class-wide file (the report, an export) written; where the caller may not write (a TA in a course
    folder of the instructor's), one line saying so and how to write it elsewhere."""
    try:
        atomic_write(out, text)
    except PermissionError as exc:
        raise ReportError(f"{out}: you may not write there ({exc.strerror}); write it elsewhere with --out "
                          "FILE") from None


def run(folder: Path, out: Path | None, as_json: bool, echo, submitted: Path | None = None,
        gradebook: Path | None = None) -> None:
    """`backprop-ninja report`: the page, or with `as_json` the same content as JSON (echoed without `out`),
    with the scores `gradebook` holds when given. Notebooks of `submitted` without a result, and results whose
    own files the caller may not bring up to date, are named on stderr too."""
    submitted = submitted or beside(folder)
    page = None if as_json else Path(out) if out is not None else Path(folder) / REPORT
    target = page or (Path(out) if out is not None else None)
    if target is not None:
        refuse_to_replace(target)
    results, left_out = scored(folder, [target] if target else [], gradebook, submitted,
                               warn=lambda line: echo(f"warning: {line}", err=True))
    for sid in not_graded(results, submitted, left_out):
        echo(f"not graded: {sid} ({left_out[sid] if sid in left_out else f'in {submitted}'})", err=True)
    content = build(results, Path(folder), submitted, gradebook, left_out)
    if target is None:
        echo(json.dumps(content, indent=2) + "\n", nl=False)
        return
    write_out(target, render(content) if page else json.dumps(content, indent=2) + "\n")
    echo(f"class report: {target}" if page else f"class report (JSON): {target}")


def refuse_to_replace(out: Path) -> None:
    """A class-wide file is never written over a submission's result or page (`--out results/ada.json`)."""
    if submissions_file(out):
        raise ReportError(f"{out}: a submission's result is there; write to another file")
