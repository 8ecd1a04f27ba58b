"""The page a student gets with a grade: the total, a row per tensor (status, points, feedback) and,
under each tensor that lost points, heatmaps of their answer, the expected gradient and the difference
(grader.outputs.pictures); then the integrity flags.

Safe to hand to a student. The pictures come from the lecture-sized probe, whose seed is public
(grader.judge.configs.PROBE_SEED): the page shows no hidden configuration beyond what the feedback lines
already say, and no reference code. Every string that comes from a notebook is escaped. One file:
inline CSS and base64 PNGs, no script, no external URL, and a Content-Security-Policy that lets nothing else
load or run (grader.safe_text.PAGE_POLICY).

A page is made again, with other scores, from its result and the page made while grading (`drawn_on`): its
pictures, the exercise's part titles and how to read the pictures are taken from that page, and the order
from the result's outline, so that generate_feedback, report and export make pages without loading the
exercise (whose definition imports torch) or drawing anything.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from html import unescape as escape_back
from pathlib import Path

from grader import safe_text
from grader.exercise import Exercise
from grader.exercise import load as load_exercise
from grader.extract import unreadable
from grader.judge.scoring import Result
from grader.outputs import results
from grader.outputs.files import atomic_write
from grader.safe_text import POLICY_META
from grader.safe_text import html as escape
from grader.vocabulary import Verdict, flag_groups

STAMP = "backprop-ninja-result"


# ---------------------------------------------------------------------------------------------
# The page

CSS = """
#bpn-feedback{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#1f2328;
  max-width:1120px;margin:0 auto;padding:12px;text-align:left;overflow-wrap:anywhere;box-sizing:border-box}
#bpn-feedback *{box-sizing:border-box}
#bpn-feedback h1{font-size:22px;line-height:1.25;margin:0 0 4px;font-weight:600}
#bpn-feedback h2{font-size:18px;line-height:1.25;margin:22px 0 8px;font-weight:600}
#bpn-feedback p{margin:6px 0}
#bpn-feedback .bpn-total{font-size:20px;font-weight:600}
#bpn-feedback .bpn-howto,#bpn-feedback .bpn-error,#bpn-feedback .bpn-missing{padding:8px 12px;margin:10px 0;
  border-left:4px solid #8c959f;background:#f6f8fa}
#bpn-feedback .bpn-error{border-color:#cf222e;background:#fff1f0}
#bpn-feedback table{border-collapse:collapse;width:100%;margin:0;table-layout:auto;font-size:15px;color:inherit;
  background:none;border:0}
#bpn-feedback th,#bpn-feedback td{border:0;border-top:1px solid #d0d7de;padding:6px 8px;text-align:left;
  vertical-align:top;background:none;line-height:1.45;white-space:normal}
#bpn-feedback tr,#bpn-feedback tr:hover{background:none}
#bpn-feedback thead th{border-top:0;font-weight:600;white-space:nowrap}
#bpn-feedback td.bpn-tensor,#bpn-feedback td.bpn-tensor code{white-space:nowrap;overflow-wrap:normal}
#bpn-feedback tr.bpn-exercise th{background:#f6f8fa;font-weight:600}
#bpn-feedback tr.bpn-pictures td{border-top:0;padding-top:0}
#bpn-feedback .bpn-status{white-space:nowrap;font-weight:600}
#bpn-feedback .bpn-points{white-space:nowrap}
#bpn-feedback .correct{color:#1a7f37}#bpn-feedback .partial{color:#9a6700}
#bpn-feedback .incorrect{color:#cf222e}#bpn-feedback .not-attempted{color:#57606a}
#bpn-feedback ul{margin:0;padding-left:18px;list-style:disc}
#bpn-feedback li{margin:0}
#bpn-feedback code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:14px;
  white-space:pre-wrap;background:#f6f8fa;padding:0 3px;border:0;color:inherit}
#bpn-feedback .bpn-note{color:#424a53;margin:4px 0}
#bpn-feedback .bpn-figs{display:flex;flex-wrap:wrap;gap:14px;margin:8px 0 4px}
#bpn-feedback figure{margin:0;max-width:100%}
#bpn-feedback figcaption{font-size:14px;font-weight:600;margin:0 0 3px}
#bpn-feedback figure img{display:block;width:100%;height:auto;margin:0;image-rendering:pixelated;
  border:1px solid #d0d7de}
#bpn-feedback .bpn-bar{height:8px;margin-top:4px;border:1px solid #d0d7de}
#bpn-feedback .bpn-ticks{display:flex;justify-content:space-between;font-size:13px;color:#424a53}
@media (max-width:640px){
  #bpn-feedback thead{display:none}
  #bpn-feedback tr,#bpn-feedback td,#bpn-feedback th{display:block}
  #bpn-feedback tr{border-top:1px solid #d0d7de;padding:6px 0}
  #bpn-feedback td,#bpn-feedback th{border:0;padding:2px 4px}
  #bpn-feedback td.bpn-status,#bpn-feedback td.bpn-points{display:inline-block}
  #bpn-feedback tr.bpn-pictures{border-top:0;padding-top:0}
}
"""

def _howto(exercise: Exercise) -> str:
    sizes = ", ".join(f"{exercise.mistakes.show(k)}={v}" for k, v in exercise.lecture.items())
    return ("How to read the pictures: each one is a tensor seen from above, one square per entry (rows top to "
            f"bottom, columns left to right). They come from one batch at the notebook's sizes ({sizes}) drawn "
            "from a fixed public seed: the shapes of your notebook, other numbers. Red is positive, blue negative, "
            "white zero, grey NaN or inf. Yours and the expected gradient share one colour scale; the difference "
            "(yours − expected, purple to orange) has its own, so that even a small difference shows.")


@dataclass(frozen=True)
class Drawn:
    """What a page made while grading shows that comes from the answers or the exercise, to make it again
    with other scores once the answers are gone: each tensor's pictures (grade id -> what its row shows
    below), the title of the part each grade id's row is under, and how to read the pictures."""

    pictures: dict[str, str] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    howto: str | None = None


def _parts(result: Result, drawn: Drawn | None) -> dict[str, tuple[int | None, str]]:
    """grade id -> (its part, the part's title), in the notebook's order: the result's outline and the titles
    of the page made again where they hold every row, else the exercise's."""
    named = {t.name for t in result.tests if t.name in result.outline}
    if result.outline and drawn is not None and named <= set(drawn.titles):
        return {g: (part, drawn.titles.get(g, f"Part {part}")) for g, part in result.outline.items()}
    exercise = load_exercise(result.exercise)
    return {g: (exercise.part_of(g), exercise.parts.get(exercise.part_of(g), f"Part {exercise.part_of(g)}"))
            for g in exercise.grade_ids}


def _rows(result: Result, drawn: Drawn | None = None) -> str:
    parts = _parts(result, drawn)
    order = {g: i for i, g in enumerate(parts)}
    tests = sorted(result.tests, key=lambda t: order.get(t.name, len(order)))
    rows, part = [], None
    for test in tests:
        if test.name in parts and parts[test.name][0] != part:
            part, title = parts[test.name]
            rows.append(f'<tr class="bpn-exercise"><th colspan="4">{escape(title)}</th></tr>')
        lines = "".join(f"<li>{escape(line)}</li>" for line in test.output.split("; "))
        status = test.verdict.css
        rows.append(f'<tr id="bpn-{escape(test.name)}"><td class="bpn-tensor"><code>{escape(test.name)}</code></td>'
                    f'<td class="bpn-status {status}">{escape(test.verdict)}</td>'
                    f'<td class="bpn-points">{test.score:g} / {test.max_score:g}</td><td><ul>{lines}</ul></td></tr>')
        shown = _shown(result, test, drawn)
        if shown:
            rows.append(f'<tr class="bpn-pictures" data-grade-id="{escape(test.name)}"><td colspan="4">{shown}'
                        "</td></tr>")
    head = "<thead><tr><th>tensor</th><th>status</th><th>points</th><th>feedback</th></tr></thead>"
    return f'<table>{head}<tbody>{"".join(rows)}</tbody></table>'


def _shown(result: Result, test, drawn: Drawn | None = None) -> str:
    """What goes under a row: its pictures, or why there are none, for a tensor that lost points; from
    `drawn` when the page is made again."""
    if test.score >= test.max_score or test.verdict == Verdict.NOT_ATTEMPTED:
        return ""
    if drawn is not None:
        return drawn.pictures.get(test.name, "")
    if result.evidence is None:
        return ""
    exercise = load_exercise(result.exercise)
    if exercise.training is not None and test.name == exercise.training.grade_id and result.evidence:
        return ('<p class="bpn-note">No picture: the training check runs on one of the grader\'s hidden '
                "configurations, which this page does not show. A wrong gradient among the rows of the function "
                "it trains with is the usual cause.</p>")
    evidence = result.evidence.get(test.name)
    if evidence is None:
        return ""
    from grader.outputs.pictures import pictures  # drawn while grading, where torch is loaded anyway

    return pictures(evidence)


def _flags(result: Result) -> str:
    return "".join(f"<h2>{escape(heading)}</h2><ul class=\"bpn-flags\">"
                   + "".join(f"<li><b>{escape(kind)}</b>{' (' + escape(where) + ')' if where else ''}: "
                             f"{escape(text)}. <code>{escape(evidence)}</code></li>"
                             for kind, where, text, evidence in items) + "</ul>"
                   for heading, items in flag_groups(result.flags))


# Heads the page of a result whose notebook was handed in again and not graded since (Result.superseded).
SUPERSEDED = ("This page is of a notebook handed in earlier: the one handed in since has not been graded yet, "
              "so the scores below are not counted. A new page comes with its grading.")


def drawn_on(page: str) -> Drawn:
    """What a page of fragment()'s shows that comes from the answers or the exercise (Drawn), to make the page
    again with other scores (fragment's `drawn`)."""
    pictures = {escape_back(m[1]): m[2] for m in re.finditer(
        r'<tr class="bpn-pictures" data-grade-id="([^"]*)"><td colspan="4">(.*?)</td></tr>', page, re.S)}
    titles, title = {}, None
    for m in re.finditer(r'<tr class="bpn-exercise"><th colspan="4">(.*?)</th></tr>|<tr id="bpn-([^"]*)">', page):
        if m[1] is not None:
            title = escape_back(m[1])
        elif title is not None:
            titles[escape_back(m[2])] = title
    howto = re.search(r'<p class="bpn-howto">(.*?)</p>', page, re.S)
    return Drawn(pictures, titles, escape_back(howto[1]) if howto else None)


def fragment(result: Result, title: str | None = None, drawn: Drawn | None = None) -> str:
    """The page's content with its own styles, all scoped to one element: a page on its own, or an HTML
    output inside nbgrader's feedback, whose styles it neither takes nor changes. `title`: what the
    heading names (default: the submission's id). With `drawn` (see drawn_on), the pictures are those,
    not drawn from the result's evidence."""
    penalty = (f' (after a late penalty of {result.late_penalty:g})' if result.late_penalty else "")
    total = (f"Total of the earlier notebook, not counted: {result.score:g} / {result.max_score:g}"
             if result.superseded else f"Total: {result.score:g} / {result.max_score:g}")
    parts = [f"<style>{CSS}</style>", '<div id="bpn-feedback">',
             f"<h1>Feedback for {escape(title or result.submission)}</h1>"]
    if result.superseded:
        parts.append(f'<p class="bpn-error"><b>{escape(SUPERSEDED)}</b></p>')
    if not unreadable(result.error):  # a file no reader takes is graded by neither route: no total, never 0
        parts.append(f'<p class="bpn-total">{total}{penalty}</p>')
        counts = {v: sum(t.verdict == v for t in result.tests) for v in Verdict}
        parts.append("<p>" + ", ".join(f"{n} {v}" for v, n in counts.items() if n) + "</p>")
    if result.error:
        parts.append(f'<p class="bpn-error"><b>Not graded:</b> {escape(result.error)}</p>')
    pictures = bool(drawn.pictures) if drawn is not None else result.evidence
    if result.evidence is None and drawn is None:
        parts.append('<p class="bpn-missing">This page has no pictures: they can only be drawn while your notebook '
                     "is being graded, and this page was made later, from the stored result. The scores and "
                     "feedback are complete.</p>")
    elif pictures:
        howto = drawn.howto if drawn is not None and drawn.howto else _howto(load_exercise(result.exercise))
        parts.append(f'<p class="bpn-howto">{escape(howto)}</p>')
    parts += ["<h2>Tensors</h2>", _rows(result, drawn), _flags(result), "</div>"]
    return "".join(parts)


def page(result: Result, stamp: str = "", drawn: Drawn | None = None) -> str:
    """A whole HTML document; `stamp` identifies the result file it was made from; `drawn` as fragment's."""
    meta = f'<meta name="{STAMP}" content="{escape(stamp)}">' if stamp else ""
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'{POLICY_META}<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"{meta}<title>Feedback: {escape(result.submission)}</title></head>"
            f'<body style="margin:0;background:#fff">{fragment(result, drawn=drawn)}</body></html>\n')


def page_path(out: Path, submission: str) -> Path:
    """Beside the result file, under the same name (safe_text.output_stem)."""
    return out / f"{safe_text.output_stem(submission)}.html"


def _stamp(out: Path, submission: str) -> str:
    """Of the result file: a page made from it carries it, so a page left from another result is known."""
    return hashlib.sha256(results.result_path(out, submission).read_bytes()).hexdigest()


def write(out: Path, result: Result, drawn: Drawn | None = None) -> Path:
    """`<out>/<submission>.html`, beside the result file already written there; `drawn` as fragment's."""
    path = page_path(out, result.submission)
    atomic_write(path, page(result, _stamp(out, result.submission), drawn))
    return path


def current(out: Path, submission: str) -> bool:
    """Whether the page in `out` was made from the result file now beside it."""
    try:
        text = page_path(out, submission).read_text(encoding="utf-8")
        return f'<meta name="{STAMP}" content="{_stamp(out, submission)}">' in text
    except OSError:
        return False
