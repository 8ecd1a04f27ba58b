"""The pictures under a tensor that lost points on the feedback page (grader.outputs.feedback_page): the
student's answer, the expected gradient and their difference as heatmaps, drawn while grading, in the trusted
process, from the answer tensor and the oracle's gradient on the unscored lecture-sized probe.

The heatmaps are one pixel block per entry, coloured by matplotlib's colormaps; titles and colour
scales are HTML text, which stays sharp on a phone and costs nothing to draw (a figure with axes costs
~0.1 s, so a page with 20 wrong tensors would take seconds). Apart from the page because they need torch,
which a page made again from a result (nbgrader's generate_feedback, report) does not.
"""
from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass

import numpy as np
import torch

from grader.judge.compare import compare
from grader.judge.exam import CHAIN, Case, checks
from grader.judge.scoring import Result
from grader.safe_text import html as escape
from grader.sandbox.parent import Attempt
from grader.vocabulary import Status, Verdict, shape_text

DRAWN, NO_TENSOR, MATCHES = "drawn", "no tensor", "matches"
# A heatmap fits in this box (pixels) at a whole number of pixels per entry, and neither side is
# thinner than MIN_SIDE; a tensor with a side longer than MAX_SIDE entries is not drawn at all.
BOX_WIDTH, BOX_HEIGHT, MIN_SIDE, MAX_SIDE = 320, 256, 48, 512
VALUES, DIFFERENCE = "RdBu_r", "PuOr_r"  # diverging, white at zero
NOT_FINITE = "#8c8c8c"


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


def pictures(evidence: Evidence) -> str:
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
