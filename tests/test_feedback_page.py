"""The feedback page a student gets: `backprop-ninja grade --html` (one page beside each result) and the
same page heading nbgrader's feedback.

One batch is graded twice with CliRunner, with and without --html: the pages are read back with an
HTML parser, the results files must not change, and `--resume` must keep a page made from the same
result and remake any other one without pictures. A one-student nbgrader course (its own fresh secret
salt) must show the page, with exactly the pictures `grade --html` drew: the pictures depend on nothing
secret. The pages are also opened in headless Chromium at a laptop's and a phone's width
(tests/helpers/browser.py; skipped where no browser is installed).

The class:
- ben: one answer per case the page must handle: wrong values (dcounts), a lecture-shaped (H,) dbnmeani
  (only his tensor drawn, with both shapes), a hard-coded 32 and 27 (right at the lecture's sizes, so
  nothing to draw), `db1 = 0` (right on the chain: the pictures are the local check's), a 3-D demb and a
  1-D db2 (laid out as 2-D and said so), NaN in dprobs, a list for dh (no tensor), a cell the static check
  refuses whose comment holds markup (escaped), and a wrong db2 inside manual_backward (exercise 4).
- noisy: every gradient of exercises 1-3 random: the largest page a student can get.
- dee: the released stub (nothing attempted: no pictures at all).
"""
from __future__ import annotations

import base64
import io
import json
import shutil
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from grader.cli import main
from grader.course import load
from grader.exercises.makemore_mlp import EXERCISE
from grader.judge import scoring
from grader.judge.configs import generate
from grader.judge.exam import prepare
from grader.judge.scoring import Result
from grader.outputs import feedback_page, pictures
from grader.vocabulary import Verdict
from helpers.browser import PHONE_WIDTH, assert_readable
from helpers.nbgrader_course import Course, set_answers
from helpers.notebooks import submission, write
from helpers.paths import COURSE, COURSE_FILE, STUB
from solutions import reference

ASSIGNMENT = COURSE.assignment
PROBE = prepare(next(c for c in generate("makemore-mlp", "any salt: the probe is public", 4) if not c.scored))
MARKUP = "<script>alert('ben')</script>"

BEN = {
    "dcounts": "dcounts = counts_sum_inv * dprobs\n",
    "dbnmeani": "dbnmeani = (-dbndiff).sum(0)\n",
    "dlogprobs": "dlogprobs = torch.zeros(32, 27, dtype=logprobs.dtype)\ndlogprobs[range(32), Yb] = -1.0 / 32\n",
    "db1": "db1 = torch.zeros_like(b1)\n",
    "demb": "demb = 2 * dembcat.view(emb.shape)\n",
    "db2": "db2 = 2 * dlogits.sum(0)\n",
    "dprobs": "dprobs = dlogprobs / (probs - probs)\n",
    "dh": "dh = [0.0]\n",
    "dC": f"import os  # {MARKUP}\ndC = torch.zeros_like(C)\n",
    "ex4_backward": reference.cells()["ex4_backward"].replace("db2 = dlogits.sum(0)", "db2 = 3 * dlogits.sum(0)"),
}
EXERCISES_1_TO_3 = [a for a in EXERCISE.answers if a.part in (1, 2, 3)]
NOISY = {a.cell_id: f"{a.variable} = torch.randn_like({a.source})\n" for a in EXERCISES_1_TO_3}
IDS = ["ben/backprop_ninja", "dee/backprop_ninja", "noisy/backprop_ninja"]
FIGURES = ["yours", "expected", "yours − expected"]


# ---------------------------------------------------------------------------------------------
# Reading a page back


@dataclass
class Row:
    grade_id: str
    status: str = ""
    points: str = ""
    feedback: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)          # captions
    images: list[bytes] = field(default_factory=list)         # PNG bytes, one per figure
    scales: list[list[str]] = field(default_factory=list)     # each figure's tick labels


VOID = {"img", "meta", "br", "hr", "input", "link", "col", "area", "base", "wbr", "source"}


class Page(HTMLParser):
    """A feedback page as a reader gets it: the rows, the flags, the text, every tag and every URL."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.rows: list[Row] = []
        self.tags: list[str] = []
        self.urls: list[str] = []
        self.flags: list[str] = []
        self._text: list[str] = []
        self._open: list[tuple[str, set[str], list[str]]] = []  # tag, classes, its text so far
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        self.urls += [v for k, v in attrs.items() if k in ("src", "href", "action", "srcset", "poster") and v]
        if tag == "tr" and (attrs.get("id") or "").startswith("bpn-"):
            self.rows.append(Row(attrs["id"].removeprefix("bpn-")))
        elif tag == "img":
            self.rows[-1].images.append(base64.b64decode(attrs["src"].split(",", 1)[1], validate=True))
        elif tag == "figure":
            self.rows[-1].scales.append([])
        if tag not in VOID:
            self._open.append((tag, set((attrs.get("class") or "").split()), []))

    def handle_endtag(self, tag):
        if tag not in [t for t, _, _ in self._open]:
            return
        while True:
            closed, classes, parts = self._open.pop()
            if closed == tag:
                break
        text = " ".join("".join(parts).split())
        inside = {t for t, _, _ in self._open}
        if tag == "td" and "bpn-status" in classes:
            self.rows[-1].status = text
        elif tag == "td" and "bpn-points" in classes:
            self.rows[-1].points = text
        elif tag == "li" and "table" in inside:
            self.rows[-1].feedback.append(text)
        elif tag == "li" and "bpn-flags" in {c for _, cs, _ in self._open for c in cs}:
            self.flags.append(text)
        elif tag == "p" and "bpn-note" in classes:
            self.rows[-1].notes.append(text)
        elif tag == "figcaption":
            self.rows[-1].figures.append(text)
        elif tag == "span" and "bpn-ticks" in {c for _, cs, _ in self._open for c in cs}:
            self.rows[-1].scales[-1].append(text)

    def handle_data(self, data):
        if "style" not in {t for t, _, _ in self._open}:
            self._text.append(data)
            for _, _, parts in self._open:
                parts.append(data)

    @property
    def all_text(self) -> str:
        return " ".join("".join(self._text).split())

    def row(self, grade_id: str) -> Row:
        (found,) = [r for r in self.rows if r.grade_id == grade_id]
        return found


def read_page(path: Path) -> Page:
    return Page(path.read_text(encoding="utf-8"))


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


# ---------------------------------------------------------------------------------------------
# One batch, graded with and without --html


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("submissions")
    write(root / "ben" / "backprop_ninja.ipynb", submission(replace=BEN))
    write(root / "noisy" / "backprop_ninja.ipynb", submission(replace=NOISY))
    (root / "dee").mkdir()
    shutil.copy(STUB, root / "dee" / "backprop_ninja.ipynb")
    return root


def _grade(batch: Path, out: Path, *flags: str):
    result = CliRunner().invoke(main, ["grade", str(batch), "--out", str(out), "--course", str(COURSE_FILE),
                                       "--jobs", "2", *flags])
    assert result.exit_code == 0, (result.output, result.exception)
    return result


@pytest.fixture(scope="module")
def with_pages(batch, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("with-pages")
    assert "and a feedback page (.html) each" in _grade(batch, out, "--html").output
    return out


@pytest.fixture(scope="module")
def without_pages(batch, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("without-pages")
    _grade(batch, out)
    return out


@pytest.fixture(scope="module")
def ben(with_pages) -> Page:
    return read_page(with_pages / "ben" / "backprop_ninja.html")


def _comparable(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.pop("execution_time")
    for test in data["tests"]:
        test.get("extra_data", {}).pop("manual_backward_ms_per_step", None)
        test.get("extra_data", {}).pop("autograd_backward_ms_per_step", None)
    return data


def test_a_page_beside_each_result_and_the_results_files_unchanged(with_pages, without_pages):
    files = sorted(p.relative_to(with_pages).as_posix() for p in with_pages.rglob("*") if p.is_file())
    assert files == sorted(["grades.csv", *(f"{sid}.{ext}" for sid in IDS for ext in ("json", "html"))])
    assert not [p for p in with_pages.rglob("*") if p.name.startswith(".")]  # written atomically
    for sid in IDS:
        assert _comparable(with_pages / f"{sid}.json") == _comparable(without_pages / f"{sid}.json"), sid
    assert (with_pages / "grades.csv").read_bytes() == (without_pages / "grades.csv").read_bytes()


@pytest.mark.parametrize("sid", IDS)
def test_a_page_is_self_contained_and_has_a_row_per_tensor_as_in_the_result(with_pages, sid):
    page = read_page(with_pages / f"{sid}.html")
    assert not {"script", "iframe", "object", "embed", "link", "base", "form"} & set(page.tags)
    assert all(url.startswith("data:image/png;base64,") for url in page.urls)
    result = json.loads((with_pages / f"{sid}.json").read_text(encoding="utf-8"))
    assert f"Feedback for {sid}" in page.all_text
    assert f"Total: {result['score']:g} / {result['max_score']:g}" in page.all_text
    assert [r.grade_id for r in page.rows] == list(EXERCISE.grade_ids)  # exercise order
    tests = {t["name"]: t for t in result["tests"]}
    for row in page.rows:
        test = tests[row.grade_id]
        assert row.points == f"{test['score']:g} / {test['max_score']:g}", row.grade_id
        assert row.feedback == [" ".join(line.split()) for line in test["output"].split("; ")], row.grade_id
        if test["score"] >= test["max_score"]:
            assert row.status == Verdict.CORRECT and not row.figures and not row.notes, row.grade_id
        for png in row.images:
            assert png.startswith(b"\x89PNG\r\n\x1a\n")


def test_a_wrong_tensor_shows_yours_expected_and_their_difference_from_the_public_probe(ben):
    row = ben.row("dcounts")
    assert row.status == Verdict.INCORRECT and row.figures == FIGURES
    assert "the true upstream gradients" in row.notes[0]
    yours, expected, difference = (pixels(png) for png in row.images)
    rows, cols = PROBE.truth["dcounts"].shape
    assert yours.shape == expected.shape == difference.shape
    height, width = yours.shape[:2]
    assert height % rows == 0 and width % cols == 0
    # One block per entry; where the expected picture is clearly red or blue, so is the oracle's gradient
    # on the probe, with the same sign: the picture is of the probe's truth.
    blocks = expected[:: height // rows, :: width // cols]
    red_minus_blue = blocks[..., 0] - blocks[..., 2]
    truth = PROBE.truth["dcounts"].numpy()
    strong = np.abs(red_minus_blue) > 40
    assert strong.sum() >= 10  # the picture is not blank
    assert (np.sign(red_minus_blue[strong]) == np.sign(truth[strong])).all()
    assert not np.array_equal(yours, expected)
    # One scale for yours and the expected gradient, another for the difference.
    assert row.scales[0] == row.scales[1] != row.scales[2]
    assert row.scales[0][1] == "0" and row.scales[0][0] == "−" + row.scales[0][2]


def test_a_wrong_shape_shows_only_yours_and_says_both_shapes(ben):
    row = ben.row("dbnmeani")
    assert row.figures == ["yours"] and len(row.images) == 1
    assert any("Your tensor has shape (64,), the gradient (1, 64)" in note for note in row.notes), row.notes
    assert any("drawn as one row" in note for note in row.notes)
    height, width = pixels(row.images[0]).shape[:2]
    assert width % 64 == 0 and height >= pictures.MIN_SIDE  # a row, thick enough to see


def test_right_at_the_lectures_sizes_draws_nothing_and_says_so(ben):
    row = ben.row("dlogprobs")
    assert row.status == Verdict.INCORRECT and not row.figures
    assert any("Right on the notebook-sized batch" in note for note in row.notes)


def test_right_on_the_chain_only_shows_the_local_check(ben):
    row = ben.row("db1")
    assert row.status == "partial" and row.figures == FIGURES
    assert "random upstream gradients" in row.notes[0]
    yours = pixels(row.images[0])
    assert (np.abs(yours - yours[0, 0]).max() == 0) and (yours[0, 0] >= 240).all()  # zeros: all white


def test_three_and_one_dimensional_tensors_are_laid_out_flat_and_said_so(ben):
    demb = ben.row("demb")
    assert demb.figures == FIGURES
    assert any("(32, 3, 10), drawn as 32 rows of 3 blocks of 10 side by side" in n for n in demb.notes)
    height, width = pixels(demb.images[0]).shape[:2]
    assert width % 30 == 0 and height % 32 == 0
    db2 = ben.row("db2")
    assert db2.figures == FIGURES and any("(27,), drawn as one row" in n for n in db2.notes)


def test_nan_is_drawn_grey(ben):
    row = ben.row("dprobs")
    assert row.figures == FIGURES
    grey = tuple(int(pictures.NOT_FINITE[i:i + 2], 16) for i in (1, 3, 5))
    assert (pixels(row.images[0]) == grey).all()


def test_no_tensor_no_picture(ben):
    for grade_id in ("dh", "dC"):
        row = ben.row(grade_id)
        assert not row.figures and any("gave no tensor" in note for note in row.notes), grade_id


def test_exercise_4_shows_the_parameters_gradient_and_no_hidden_training_run(ben):
    row = ben.row("ex4_db2")
    assert row.figures == FIGURES
    training = ben.row("ex4_training")
    assert training.status == Verdict.INCORRECT and not training.figures
    assert any("hidden configurations" in note for note in training.notes)


def test_student_text_is_escaped_and_the_flags_are_shown(with_pages, ben):
    raw = (with_pages / "ben" / "backprop_ninja.html").read_text(encoding="utf-8")
    assert MARKUP not in raw and "script" not in ben.tags
    assert MARKUP in ben.all_text  # shown as text, in the dC row and in the flags
    assert any(flag.startswith("static-check (cell dC)") and MARKUP in flag for flag in ben.flags), ben.flags


def test_nothing_attempted_nothing_drawn(with_pages):
    page = read_page(with_pages / "dee" / "backprop_ninja.html")
    assert not any(r.figures or r.notes for r in page.rows)
    assert "How to read the pictures" not in page.all_text and "no pictures" not in page.all_text


def test_the_largest_page_stays_small(with_pages):
    path = with_pages / "noisy" / "backprop_ninja.html"
    page = read_page(path)
    drawn = [r for r in page.rows if r.figures == FIGURES]
    assert len(drawn) == len(EXERCISES_1_TO_3)
    assert path.stat().st_size < 3 * 2**20


# ---------------------------------------------------------------------------------------------
# --resume


def test_resume_keeps_a_current_page_and_remakes_any_other_without_pictures(batch, with_pages, without_pages):
    before = {sid: (with_pages / f"{sid}.html").read_bytes() for sid in IDS}
    _grade(batch, with_pages, "--html", "--resume")
    assert {sid: (with_pages / f"{sid}.html").read_bytes() for sid in IDS} == before

    # A page made from another result (one with pictures) is not kept with this result. Not ben's own page
    # graded with pictures: its result file can be byte for byte this one (the same time to the millisecond),
    # and a page made from the same result is current.
    shutil.copy(with_pages / "noisy" / "backprop_ninja.html", without_pages / "ben" / "backprop_ninja.html")
    assert not feedback_page.current(without_pages, "ben/backprop_ninja")
    results = {sid: (without_pages / f"{sid}.json").read_bytes() for sid in IDS}
    output = _grade(batch, without_pages, "--html", "--resume").output
    assert {sid: (without_pages / f"{sid}.json").read_bytes() for sid in IDS} == results
    assert output.count("kept ") == len(IDS)
    for sid in IDS:
        page = read_page(without_pages / f"{sid}.html")
        assert not any(r.images for r in page.rows), sid
        assert "This page has no pictures" in page.all_text
        assert [r.points for r in page.rows] == [r.points for r in read_page(with_pages / f"{sid}.html").rows]


# ---------------------------------------------------------------------------------------------
# Laid out in a browser


@pytest.mark.parametrize("width", [None, PHONE_WIDTH])
@pytest.mark.parametrize("sid", ["ben/backprop_ninja", "noisy/backprop_ninja"])
def test_pages_read_well_on_a_laptop_and_a_phone(check_page, with_pages, sid, width):
    path = with_pages / f"{sid}.html"
    assert_readable(check_page(path) if width is None else check_page(path, width=width))


# ---------------------------------------------------------------------------------------------
# Edge cases of a tensor, drawn directly


def _result(**evidence) -> Result:
    tests = [scoring.TestScore(g, 0.0, 1.0, Verdict.INCORRECT, f"{g}: wrong") for g in evidence]
    return Result("<em>x</em>", "x.ipynb", tests=tests, evidence=evidence)


@pytest.mark.parametrize("yours, note, drawn", [
    (torch.tensor(2.0), "A single number", 1),
    (torch.zeros(0, 27), "has no entries to draw", 0),
    (torch.zeros(32, 27, dtype=torch.complex64), "Complex values cannot be drawn", 0),
    (torch.zeros(2, 3, 4, 5), "(2, 3, 4, 5), drawn as 2 rows of 3 blocks of 4 blocks of 5 side by side", 1),
    (torch.zeros(1, 5000), "1 × 5000 entries are too many to draw", 0),
])
def test_odd_tensors_are_drawn_or_said_why_not(yours, note, drawn):
    evidence = pictures.Evidence(pictures.DRAWN, "chain", yours, PROBE.truth["dcounts"])
    page = Page(feedback_page.page(_result(dcounts=evidence)))
    row = page.row("dcounts")
    assert any(note in n for n in row.notes), row.notes
    assert len(row.images) == drawn
    assert "Feedback for <em>x</em>" in page.all_text and "em" not in page.tags


def test_integer_answers_of_the_right_shape_are_drawn_beside_the_expected_gradient():
    expected = PROBE.truth["db2"]
    evidence = pictures.Evidence(pictures.DRAWN, "chain", torch.ones(expected.shape, dtype=torch.int64),
                                      expected)
    row = Page(feedback_page.page(_result(db2=evidence))).row("db2")
    assert row.figures == FIGURES
    assert float(row.scales[0][2]) == pytest.approx(1.0)  # the scale covers both, here the answer's ones


# ---------------------------------------------------------------------------------------------
# Inside nbgrader's feedback


@pytest.fixture(scope="module")
def nbgrader_feedback(tmp_path_factory, generated_course) -> Path:
    """ben's feedback from a one-student nbgrader course with a fresh secret salt of its own."""
    course = Course(tmp_path_factory.mktemp("nbgrader"), COURSE.course_id, ASSIGNMENT).copied(generated_course)
    assert load(course.dir / "course.yml").secret_salt != COURSE.secret_salt
    nb = nbformat.read(course.released(), as_version=4)
    set_answers(nb, {**reference.cells(), **BEN})
    course.submitted("ben").parent.mkdir(parents=True)
    nbformat.write(nb, course.submitted("ben"))
    course.nbgrader("autograde", ASSIGNMENT, must=True)
    course.nbgrader("generate_feedback", ASSIGNMENT, must=True)
    return course.feedback("ben")


@pytest.mark.slow
def test_nbgrader_feedback_opens_with_the_page_whose_pictures_owe_nothing_to_the_salt(nbgrader_feedback, with_pages):
    raw = nbgrader_feedback.read_text(encoding="utf-8")
    assert raw.count('id="bpn-feedback"') == 1 and MARKUP not in raw
    at = raw.index('id="bpn-feedback"')
    # At the top, before the notebook's first cell, in a cell of its own that shows no input.
    assert at < raw.index("Becoming a backprop ninja")
    assert "input_area" not in raw[raw.rindex('<div class="cell', 0, at):at]
    inside = Page(raw)
    cli = read_page(with_pages / "ben" / "backprop_ninja.html")
    assert [(r.grade_id, r.points, r.notes, r.figures, r.images) for r in inside.rows] == \
           [(r.grade_id, r.points, r.notes, r.figures, r.images) for r in cli.rows]
    assert sum(len(r.images) for r in inside.rows) == 6 * 3 + 1  # dbnmeani: his tensor alone
    total = json.loads((with_pages / "ben" / "backprop_ninja.json").read_text(encoding="utf-8"))["score"]
    assert f"Score: {total:g} / {COURSE.max_score:g}" in raw  # nbgrader's own total agrees, as the page writes it


@pytest.mark.slow
def test_nbgrader_feedback_reads_well_with_the_page_in_it(check_page, nbgrader_feedback):
    """The course's feedback template loads no MathJax, so the page fetches nothing at all, like every
    other page a reader opens offline."""
    assert_readable(check_page(nbgrader_feedback))
