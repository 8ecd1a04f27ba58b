"""The page a student gets with a grade: the total, a row per tensor (status, points, feedback) and,
under each tensor that lost points, heatmaps of their answer, the expected gradient and the difference;
then the integrity flags.

Safe to hand to a student. Every picture is drawn here, in the trusted process, from the student's own
answer tensor and the oracle's gradient on the unscored lecture-sized probe, whose seed is public
(grader.judge.configs.PROBE_SEED): the page shows no hidden configuration beyond what the feedback lines
already say, and no reference code. Every string that comes from a notebook is escaped. One file:
inline CSS and base64 PNGs, no script, no external URL, and a Content-Security-Policy that lets nothing else
load or run (grader.safe_text.PAGE_POLICY).

The heatmaps are one pixel block per entry, coloured by matplotlib's colormaps; titles and colour
scales are HTML text, which stays sharp on a phone and costs nothing to draw (a figure with axes costs
~0.1 s, so a page with 20 wrong tensors would take seconds).
"""
from __future__ import annotations

import base64
import hashlib
import io
import math
import re
from dataclasses import dataclass
from html import unescape as escape_back
from pathlib import Path

import numpy as np
import torch

from grader import safe_text
from grader.exercise import Exercise
from grader.exercise import load as load_exercise
from grader.extract import unreadable
from grader.judge.compare import compare
from grader.judge.exam import CHAIN, Case, checks
from grader.judge.scoring import Result
from grader.outputs import results
from grader.outputs.files import atomic_write
from grader.safe_text import POLICY_META
from grader.safe_text import html as escape
from grader.sandbox.parent import Attempt
from grader.vocabulary import Status, Verdict, flag_groups, shape_text

DRAWN, NO_TENSOR, MATCHES = "drawn", "no tensor", "matches"
# A heatmap fits in this box (pixels) at a whole number of pixels per entry, and neither side is
# thinner than MIN_SIDE; a tensor with a side longer than MAX_SIDE entries is not drawn at all.
BOX_WIDTH, BOX_HEIGHT, MIN_SIDE, MAX_SIDE = 320, 256, 48, 512
VALUES, DIFFERENCE = "RdBu_r", "PuOr_r"  # diverging, white at zero
NOT_FINITE = "#8c8c8c"
STAMP = "backprop-ninja-result"


@dataclass(frozen=True)
class Evidence:
    """What the page shows for one tensor that lost points, taken from the attempt on the probe:
    DRAWN with the student's tensor and the expected one of the first check that fails there,
    NO_TENSOR when the cell gave no tensor, MATCHES when it is right there (and wrong elsewhere)."""

    kind: str
    check: str = CHAIN
    yours: torch.Tensor | None = None
    expected: torch.Tensor | None = None


def gather(result: Result, attempt: Attempt, cases: list[Case], tolerance) -> dict[str, Evidence]:
    """The evidence for each tensor of `result` that lost points (and was attempted), read from the
    attempt before it is dropped. Only the probe's outcomes are read, and compared as the suite does."""
    if not attempt.outcomes:
        return {}
    probe = next(c for c in cases if not c.config.scored)
    found = {}
    for test in result.tests:
        answer = probe.exercise.by_grade_id.get(test.name)
        if answer is not None and test.score < test.max_score and test.verdict != Verdict.NOT_ATTEMPTED:
            found[test.name] = _on_probe(answer, attempt, probe, tolerance)
    return found


def _on_probe(answer, attempt: Attempt, probe: Case, tol) -> Evidence:
    for check in checks(answer):
        outcome = attempt.outcomes.get((answer.grade_id, check, probe.config.name))
        if outcome is None or outcome.status != Status.TENSOR:
            return Evidence(NO_TENSOR, check)
        expected = probe.expected(answer, check)
        if not compare(outcome.tensor, expected, rtol=tol.rtol, atol=tol.atol).passed:
            return Evidence(DRAWN, check, outcome.tensor, expected)
    return Evidence(MATCHES)


# ---------------------------------------------------------------------------------------------
# Heatmaps


def _grid(t: torch.Tensor):
    """(rows x columns as float64 numpy, how the tensor was laid out; "" when as it is), or (None, why
    it cannot be drawn)."""
    shape = tuple(t.shape)
    if t.is_complex():
        return None, "complex values cannot be drawn"
    if t.numel() == 0:
        return None, f"shape {shape_text(shape)} has no entries to draw"
    try:
        values = t.detach().to(torch.float64)
    except (RuntimeError, TypeError):
        return None, f"values of type {t.dtype} cannot be drawn"
    if values.dim() == 0:
        grid, how = values.reshape(1, 1), "a single number"
    elif values.dim() == 1:
        grid, how = values.reshape(1, -1), f"shape {shape_text(shape)}, drawn as one row"
    elif values.dim() == 2:
        grid, how = values, ""
    else:
        grid = values.reshape(shape[0], -1)
        blocks = " blocks of ".join(map(str, shape[1:]))
        how = f"shape {shape_text(shape)}, drawn as {shape[0]} rows of {blocks} side by side"
    if max(grid.shape) > MAX_SIDE:
        return None, f"{grid.shape[0]} × {grid.shape[1]} entries are too many to draw"
    return grid.numpy(), how


def _scale(*grids) -> float:
    """Half the width of a colour scale centred at zero: the largest finite magnitude."""
    top = max((float(np.abs(g[np.isfinite(g)]).max(initial=0.0)) for g in grids), default=0.0)
    return top if top > 0 else 1.0


def _png(grid, half: float, cmap: str) -> tuple[str, int, int]:
    """A heatmap as a base64 PNG, one block of pixels per entry, and its width and height."""
    from matplotlib import colormaps
    from matplotlib.image import imsave

    rows, cols = grid.shape
    side = max(1, min(BOX_WIDTH // cols, BOX_HEIGHT // rows))
    tall, wide = max(side, math.ceil(MIN_SIDE / rows)), max(side, math.ceil(MIN_SIDE / cols))
    with np.errstate(all="ignore"):  # an answer's inf and NaN are masked just below, and drawn grey
        unit = np.where(np.isfinite(grid), grid / (2 * half) + 0.5, np.nan)
    rgba = colormaps[cmap].with_extremes(bad=NOT_FINITE)(np.ma.masked_invalid(unit), bytes=True)
    buffer = io.BytesIO()
    imsave(buffer, np.repeat(np.repeat(rgba, tall, axis=0), wide, axis=1), format="png",
           metadata={"Software": None})
    return base64.b64encode(buffer.getvalue()).decode("ascii"), cols * wide, rows * tall


def _gradient(cmap: str) -> str:
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    stops = ", ".join(to_hex(colormaps[cmap](i / 8)) for i in range(9))
    return f"linear-gradient(to right, {stops})"


def _number(x: float) -> str:
    return f"{x:.3g}".replace("-", "−")


def _figure(title: str, grid, half: float, cmap: str) -> str:
    data, width, height = _png(grid, half, cmap)
    return (f'<figure style="width:{max(width, 160)}px"><figcaption>{escape(title)}</figcaption>'
            f'<img src="data:image/png;base64,{data}" width="{width}" height="{height}" alt="heatmap: {escape(title)}">'
            f'<div class="bpn-bar" style="background:{_gradient(cmap)}"></div>'
            f'<div class="bpn-ticks"><span>{_number(-half)}</span><span>0</span><span>{_number(half)}</span></div>'
            f'</figure>')


def _pictures(evidence: Evidence) -> str:
    if evidence.kind == MATCHES:
        return ('<p class="bpn-note">Right on the notebook-sized batch, so there is no difference to draw: this '
                "answer goes wrong only on the grader's other configurations (the feedback says how).</p>")
    if evidence.kind == NO_TENSOR:
        return '<p class="bpn-note">No picture: this cell gave no tensor on the notebook-sized batch.</p>'
    upstream = ("the true upstream gradients" if evidence.check == CHAIN else
                "random upstream gradients (the check of this one backward step)")
    lines = [f"On the notebook-sized batch, with {upstream}."]
    yours, how = _grid(evidence.yours)
    mine, theirs = tuple(evidence.yours.shape), tuple(evidence.expected.shape)
    figures = []
    if mine != theirs:
        lines.append(f"Your tensor has shape {shape_text(mine)}, the gradient {shape_text(theirs)}:"
                     " only yours is drawn.")
        if yours is not None:
            figures.append(_figure("yours", yours, _scale(yours), VALUES))
    elif yours is not None:
        expected, _ = _grid(evidence.expected)
        half = _scale(yours, expected)
        difference = yours - expected
        figures = [_figure("yours", yours, half, VALUES), _figure("expected", expected, half, VALUES),
                   _figure("yours − expected", difference, _scale(difference), DIFFERENCE)]
    if how:
        lines.append(how[0].upper() + how[1:] + ".")
    text = "".join(f'<p class="bpn-note">{escape(line)}</p>' for line in lines)
    return text + (f'<div class="bpn-figs">{"".join(figures)}</div>' if figures else "")


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
    sizes = ", ".join(f"{k}={v}" for k, v in exercise.lecture.items())
    return ("How to read the pictures: each one is a tensor seen from above, one square per entry (rows top to "
            f"bottom, columns left to right). They come from one batch at the notebook's sizes ({sizes}) drawn "
            "from a fixed public seed: the shapes of your notebook, other numbers. Red is positive, blue negative, "
            "white zero, grey NaN or inf. Yours and the expected gradient share one colour scale; the difference "
            "(yours − expected, purple to orange) has its own, so that even a small difference shows.")


def _rows(result: Result, drawn: dict[str, str] | None = None) -> str:
    exercise = load_exercise(result.exercise)
    order = {g: i for i, g in enumerate(exercise.grade_ids)}
    tests = sorted(result.tests, key=lambda t: order.get(t.name, len(order)))
    rows, part = [], None
    for test in tests:
        if test.name in order and exercise.part_of(test.name) != part:
            part = exercise.part_of(test.name)
            title = exercise.parts.get(part, f"Part {part}")
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


def _shown(result: Result, test, drawn: dict[str, str] | None = None) -> str:
    """What goes under a row: its pictures, or why there are none, for a tensor that lost points; from
    `drawn` (grade id -> what a page made while grading showed there) when the page is made again."""
    if test.score >= test.max_score or test.verdict == Verdict.NOT_ATTEMPTED:
        return ""
    if drawn is not None:
        return drawn.get(test.name, "")
    if result.evidence is None:
        return ""
    exercise = load_exercise(result.exercise)
    if exercise.training is not None and test.name == exercise.training.grade_id and result.evidence:
        return ('<p class="bpn-note">No picture: the training check runs on one of the grader\'s hidden '
                "configurations, which this page does not show. A wrong gradient among the rows of the function "
                "it trains with is the usual cause.</p>")
    evidence = result.evidence.get(test.name)
    return _pictures(evidence) if evidence is not None else ""


def _flags(result: Result) -> str:
    return "".join(f"<h2>{escape(heading)}</h2><ul class=\"bpn-flags\">"
                   + "".join(f"<li><b>{escape(kind)}</b>{' (' + escape(where) + ')' if where else ''}: "
                             f"{escape(text)}. <code>{escape(evidence)}</code></li>"
                             for kind, where, text, evidence in items) + "</ul>"
                   for heading, items in flag_groups(result.flags))


# Heads the page of a result whose notebook was handed in again and not graded since (Result.superseded).
SUPERSEDED = ("This page is of a notebook handed in earlier: the one handed in since has not been graded yet, "
              "so the scores below are not counted. A new page comes with its grading.")


def drawn_on(page: str) -> dict[str, str]:
    """grade id -> what a page of fragment()'s shows under that tensor's row (its pictures), to make the page
    again with other scores (fragment's `drawn`) once the answers that drew them are gone."""
    return {escape_back(m[1]): m[2] for m in re.finditer(
        r'<tr class="bpn-pictures" data-grade-id="([^"]*)"><td colspan="4">(.*?)</td></tr>', page, re.S)}


def fragment(result: Result, title: str | None = None, drawn: dict[str, str] | None = None) -> str:
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
    pictures = bool(drawn) if drawn is not None else result.evidence
    if result.evidence is None and drawn is None:
        parts.append('<p class="bpn-missing">This page has no pictures: they can only be drawn while your notebook '
                     "is being graded, and this page was made later, from the stored result. The scores and "
                     "feedback are complete.</p>")
    elif pictures:
        parts.append(f'<p class="bpn-howto">{escape(_howto(load_exercise(result.exercise)))}</p>')
    parts += ["<h2>Tensors</h2>", _rows(result, drawn), _flags(result), "</div>"]
    return "".join(parts)


def page(result: Result, stamp: str = "", drawn: dict[str, str] | None = None) -> str:
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


def write(out: Path, result: Result, drawn: dict[str, str] | None = None) -> Path:
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
