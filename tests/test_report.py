"""`backprop-ninja report`, on a class graded for real: a correct notebook, two with typical mistakes
(one of them shared), the released stub, a hostile student and a file that is not a notebook.

The page is read back with html.parser, as a browser would see its structure; every number on it is
checked against the results files themselves.
"""
from __future__ import annotations

import base64
import json
import shutil
import statistics
import subprocess
import sys
import warnings
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.exercises.makemore_mlp import EXERCISE
from grader.vocabulary import grade_cell_id
from helpers.browser import assert_readable
from helpers.notebooks import submission, write
from helpers.paths import COURSE, COURSE_FILE, STUB

MISSES_A_BRANCH = "dcounts = counts_sum_inv * dprobs\n"
HOSTILE = "<script>alert(1)"
CLASS = {
    "ada": {},
    "ben": {"dcounts": MISSES_A_BRANCH, "dh": "dh = dlogits @ W2\n", "db1": "db1 = torch.zeros_like(b1)\n"},
    "cy": {"dcounts": MISSES_A_BRANCH, "dbnmeani": "dbnmeani = (-dbndiff).sum(0)\n"},
    HOSTILE: {"dlogprobs": "import os  # <script>alert('flag')</script>\n",
              "dprobs": "dprobs = {}['x; <script>alert(2)</script>']\n"},
}
SUBMISSIONS = sorted([*(f"{name}/{COURSE.notebook.removesuffix('.ipynb')}" for name in [*CLASS, "dee", "junk"])])
JUNK = "junk/backprop_ninja"  # a file no reader takes: not graded (never 0), listed so, counted nowhere else
GRADED = [sid for sid in SUBMISSIONS if sid != JUNK]


def grade_class(root: Path) -> Path:
    """The class above, graded by `backprop-ninja grade` into root/results (about a second a notebook)."""
    submitted = root / "submitted"
    for name, answers in CLASS.items():
        write(submitted / name / COURSE.notebook, submission(replace=answers))
    (submitted / "dee").mkdir(parents=True)
    shutil.copy(STUB, submitted / "dee" / COURSE.notebook)
    (submitted / "junk").mkdir()
    (submitted / "junk" / COURSE.notebook).write_text("not a notebook\n")
    out = root / "results"
    done = CliRunner().invoke(main, ["grade", str(submitted), "--out", str(out), "--course", str(COURSE_FILE),
                                     "--jobs", "2"])
    assert done.exit_code == 0, done.output
    return out


def results(out: Path) -> dict[str, dict]:
    """The results the report counts: every one but the file no reader takes (not graded, never 0)."""
    return {sid: json.loads((out / f"{sid}.json").read_text(encoding="utf-8")) for sid in GRADED}


LABELS = {"correct": "full credit", "partial": "partial", "incorrect": "wrong", "not attempted": "blank"}


def verdict(test: dict) -> str:
    """The report's word for a test's stored verdict, which must agree with its score."""
    full, some = test["score"] >= test["max_score"], test["score"] > 0
    assert (test["verdict"] == "correct") == full and (test["verdict"] == "partial") == (some and not full), test
    assert test["verdict"] != "not attempted" or test["output"] == "not attempted yet", test
    return LABELS[test["verdict"]]


class Page(HTMLParser):
    """The page's structure: each section's title, text and tables (rows of cell texts), images, tags."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.sections: dict[str, dict] = {}
        self._section = self._row = self._cell = self._title = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "section":
            self._section = self.sections.setdefault(attrs["id"], {"title": "", "text": [], "tables": []})
        elif tag == "table":
            self._section["tables"].append([])
        elif tag == "tr":
            self._row = []
            self._section["tables"][-1].append(self._row)
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "h2":
            self._title = []

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "h2":
            self._section["title"] = "".join(self._title)
            self._title = None
        elif tag == "section":
            self._section = None

    def handle_data(self, data):
        for sink in (self._cell, self._title, self._section and self._section["text"]):
            if sink is not None:
                sink.append(data)

    def table(self, section: str, index: int = 0) -> list[dict[str, str]]:
        header, *rows = self.sections[section]["tables"][index]
        return [dict(zip(header, row)) for row in rows]

    def text(self, section: str) -> str:
        return "".join(self.sections[section]["text"])


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_class(tmp_path_factory.mktemp("class"))


@pytest.fixture(scope="module")
def page(graded):
    done = CliRunner().invoke(main, ["report", str(graded)])
    assert done.exit_code == 0, done.output
    # the file no reader takes is named as not graded, never counted 0
    assert done.output.strip().splitlines() == ["not graded: junk/backprop_ninja (not a notebook: the file is not "
                                                "valid JSON)", f"class report: {graded / 'report.html'}"]
    raw = (graded / "report.html").read_text(encoding="utf-8")
    return raw, Page(raw)


@pytest.fixture(scope="module")
def as_json(graded, page):
    done = CliRunner().invoke(main, ["report", str(graded), "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_the_page_has_every_section(page):
    _, parsed = page
    assert list(parsed.sections) == ["summary", "distribution", "tensors", "mistakes", "flags", "not-graded",
                                     "errors", "times", "submissions"]
    assert parsed.sections["tensors"]["title"] == "Success per tensor, in the exercise's order"
    anchors = [a["href"] for tag, a in parsed.tags if tag == "a"]
    assert anchors == [f"#{s}" for s in list(parsed.sections)[1:]]


def test_the_summary_counts_the_class_and_its_scores(graded, page):
    _, parsed = page
    scores = [r["score"] for r in results(graded).values()]
    summary = parsed.text("summary")
    assert f"submissions{len(GRADED)}" in summary and "not graded1" in summary
    assert f"mean score{statistics.fmean(scores):.4g} / {COURSE.max_score:g}" in summary
    assert f"median score{statistics.median(scores):g} / {COURSE.max_score:g}" in summary


def test_the_score_distribution_is_drawn_and_tabulated(graded, page):
    _, parsed = page
    rows = parsed.table("distribution")
    assert [r["score (% of maximum)"] for r in rows] == [f"{10 * i}–{10 * i + 10}%" for i in range(10)]
    shares = [min(int(10 * r["score"] / r["max_score"]), 9) for r in results(graded).values()]
    assert [int(r["submissions"]) for r in rows] == [shares.count(i) for i in range(10)]


def test_every_picture_is_an_embedded_png(page):
    _, parsed = page
    images = [a["src"] for tag, a in parsed.tags if tag == "img"]
    assert len(images) == 2
    for src in images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        assert base64.b64decode(src[len(prefix):], validate=True).startswith(b"\x89PNG\r\n\x1a\n")


def test_the_page_is_self_contained_and_runs_no_script(page):
    raw, parsed = page
    assert not [tag for tag, _ in parsed.tags if tag in ("script", "link", "iframe", "object", "embed")]
    for tag, attrs in parsed.tags:
        for name in ("src", "href"):
            assert not attrs.get(name, "").startswith(("http:", "https:", "//")), (tag, attrs)
    assert "url(" not in raw


def test_success_per_tensor_follows_the_exercise_and_the_results(graded, page):
    _, parsed = page
    rows = parsed.table("tensors")
    assert [r["grade id"] for r in rows] == [g for g in EXERCISE.grade_ids if g in COURSE.points]
    tests = [t for r in results(graded).values() for t in r["tests"]]
    for row in rows:
        verdicts = [verdict(t) for t in tests if t["name"] == row["grade id"]]
        for label in ("full credit", "partial", "wrong", "blank"):
            share = round(100 * verdicts.count(label) / len(verdicts), 1)
            assert row[f"% {label}"] == f"{share:g}%", (row, label)
    dcounts = next(r for r in rows if r["grade id"] == "dcounts")
    assert dcounts["% wrong"] == f"{round(100 * 2 / len(GRADED), 1):g}%"  # ben and cy


def test_where_the_class_falls_off_is_marked(page, as_json):
    _, parsed = page
    steepest = as_json["fall_off"]["steepest_drop"]
    rows = as_json["per_grade_id"]
    drops = [(a["percent_full_credit"] - b["percent_full_credit"], b["grade_id"]) for a, b in zip(rows, rows[1:])]
    assert steepest["grade_id"] == max(drops, key=lambda d: d[0])[1]
    assert f"The class falls off at {steepest['grade_id']}" in parsed.text("tensors")
    marked = [a for tag, a in parsed.tags if tag == "tr" and a.get("class") == "falls-off"]
    assert len(marked) == 1 + len(steepest["also"])


def test_a_tie_for_the_steepest_drop_names_every_tensor_it_happens_at():
    """Two tensors the class drops at equally: the headline names both, never one picked by position alone."""
    from grader.outputs.report import _fall_off

    rows = [{"grade_id": g, "percent_full_credit": p} for g, p in
            (("da", 100.0), ("db", 60.0), ("dc", 60.0), ("dd", 20.0), ("de", 10.0))]
    steepest = _fall_off(rows)["steepest_drop"]
    assert (steepest["grade_id"], steepest["after"], steepest["drop"], steepest["also"]) == ("db", "da", 40.0, ["dd"])
    rows[3]["percent_full_credit"] = 30.0
    assert _fall_off(rows)["steepest_drop"]["also"] == []


def test_a_named_mistake_is_listed_with_the_students_who_made_it(page):
    _, parsed = page
    rows = parsed.table("mistakes")
    branch = next(r for r in rows if r["mistake"].startswith("your dcounts misses the branch through counts_sum"))
    assert branch["grade id"] == "dcounts" and branch["count"] == "2"
    assert branch["submissions"] == "ben/backprop_ninja, cy/backprop_ninja"
    assert rows[0] is branch  # the most common first
    named = {(r["grade id"], r["mistake"]) for r in rows}
    assert ("dh", "the product of dlogits with W2 needs W2 transposed to give h's shape") in named
    assert ("db1", "your db1 is all zeros") in named  # right only on the chain: the local check names it
    assert any(g == "dbnmeani" and m.startswith("missing keepdim=True") for g, m in named)
    assert not any("max abs diff" in m or m.startswith("Partial credit") for _, m in named)


def test_flags_and_errors_are_listed_for_review(page):
    _, parsed = page
    flags = parsed.table("flags")
    assert [(f["submission"], f["kind"], f["where"]) for f in flags] == [
        (f"{HOSTILE}/backprop_ninja", "static-check", "dlogprobs")]
    assert "<script>alert('flag')</script>" in flags[0]["evidence"]
    errors = {e["submission"]: e["error"] for e in parsed.table("errors")}
    assert list(errors) == [f"{HOSTILE}/backprop_ninja", "ben/backprop_ninja"]  # the junk file: not graded
    assert errors["ben/backprop_ninja"].startswith("raised (dh): RuntimeError on line 1")  # cells that raised too


def test_the_errors_list_cells_that_raised_and_a_timeout_once():
    """A cell past its time limit is flagged by both checks that ran it; the error view said it twice. A cell
    that raised at run time (it scores 0, with no flag) was not in it at all."""
    from grader.judge.scoring import Result, TestScore
    from grader.outputs.report import _errors
    from grader.vocabulary import Flag, Verdict

    result = Result("ann/backprop_ninja", "ann.ipynb", flags=[
        {"kind": Flag.TIMEOUT, "grade_id": "dprobs", "check": check, "evidence": "the cell ran past its time limit"}
        for check in ("chain", "local")])
    result.tests = [TestScore("dprobs", 0.0, 1.0, Verdict.INCORRECT, "the cell ran past its time limit"),
                    TestScore("dh", 0.0, 1.0, Verdict.INCORRECT, "RuntimeError on line 1: size mismatch",
                              {"raised": True}),
                    TestScore("dW2", 1.0, 1.0, Verdict.CORRECT, "correct on every configuration")]
    assert [e["error"] for e in _errors([result])] == ["timeout (dprobs): the cell ran past its time limit",
                                                       "raised (dh): RuntimeError on line 1: size mismatch"]


def test_every_submitted_notebook_but_the_unreadable_file_was_graded(graded, page, as_json):
    _, parsed = page
    assert parsed.table("not-graded") == [{f"submission in {graded.parent / 'submitted'}": JUNK,
                                            "why": "not a notebook: the file is not valid JSON"}]
    assert as_json["not_graded"] == [JUNK]


def test_submissions_found_but_not_graded_are_listed(graded, tmp_path):
    """Two notebooks arrive in submitted/ after grading (or autograde skipped them): the report names
    both, on the page, in the JSON and on stderr, instead of saying every notebook was read and run."""
    shutil.copytree(graded, tmp_path / "results")
    shutil.copytree(graded.parent / "submitted", tmp_path / "submitted")
    for late in ("zoe", "yan"):
        (tmp_path / "submitted" / late).mkdir()
        shutil.copy(STUB, tmp_path / "submitted" / late / COURSE.notebook)
    done = CliRunner().invoke(main, ["report", str(tmp_path / "results")])
    assert done.exit_code == 0, done.output
    missing = [f"{s}/{COURSE.notebook.removesuffix('.ipynb')}" for s in ("yan", "zoe")]
    junk = ("junk/backprop_ninja", "not a notebook: the file is not valid JSON")
    assert done.stderr.splitlines() == [f"not graded: {junk[0]} ({junk[1]})",
                                        *(f"not graded: {sid} (in {tmp_path / 'submitted'})" for sid in missing)]
    parsed = Page((tmp_path / "results" / "report.html").read_text(encoding="utf-8"))
    assert [list(row.values()) for row in parsed.table("not-graded")] == \
        [list(junk), *([sid, "no result"] for sid in missing)]
    assert "not graded3" in parsed.text("summary")
    done = CliRunner().invoke(main, ["report", str(tmp_path / "results"), "--json"])
    assert json.loads(done.stdout)["not_graded"] == [JUNK, *missing]


def test_grading_times_add_up(graded, page, as_json):
    _, parsed = page
    seconds = {sid: r["execution_time"] for sid, r in results(graded).items()}
    assert as_json["times"]["total"] == pytest.approx(sum(seconds.values()), abs=1e-3)
    assert as_json["times"]["max"] == max(seconds.values())
    slowest = parsed.table("times")
    assert [float(r["seconds"]) for r in slowest] == sorted(seconds.values(), reverse=True)[:5]
    assert f"total {as_json['times']['total']:g} s" in parsed.text("times")


def test_student_strings_are_escaped(page):
    raw, parsed = page
    assert "<script" not in raw.lower()
    assert "&lt;script&gt;alert(1)" in raw
    submissions = [r["submission"] for r in parsed.table("submissions")]
    assert submissions == GRADED and f"{HOSTILE}/backprop_ninja" in submissions
    # Named mistakes are what the suite recorded, never read out of feedback: a student's own error text
    # that looks like one ("KeyError: 'x; <script>...'") is not listed as a mistake.
    assert not any("alert(2)" in r["mistake"] for r in parsed.table("mistakes"))


def test_long_tables_scroll_in_their_own_box(page):
    raw, parsed = page
    tables = sum(len(s["tables"]) for s in parsed.sections.values())
    boxes = [a for tag, a in parsed.tags if tag == "div" and a.get("class") == "scroll"]
    assert tables == len(boxes) == 8
    assert ".scroll{max-height:24rem;overflow:auto" in raw
    assert "max-width:1240px" in raw


def test_the_page_reads_at_a_laptop_width(graded, page, check_page):
    assert_readable(check_page(graded / "report.html"))


def test_a_very_long_submission_id_scrolls_in_its_box_not_the_page(graded, page, check_page, tmp_path):
    ben = json.loads((graded / "ben" / "backprop_ninja.json").read_text(encoding="utf-8"))
    ben["extra_data"]["submission"] = "x" * 400
    (tmp_path / "long.json").write_text(json.dumps(ben), encoding="utf-8")
    done = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert_readable(check_page(tmp_path / "report.html"))


def _report_of_edited(graded: Path, tmp_path: Path, edit) -> dict:
    """`report --json` of a copy of the class's results, each edited in place by `edit`."""
    old = tmp_path / "results"
    for sid, result in results(graded).items():
        edit(result)
        (old / sid).parent.mkdir(parents=True, exist_ok=True)
        (old / f"{sid}.json").write_text(json.dumps(result), encoding="utf-8")
    done = CliRunner().invoke(main, ["report", str(old), "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_results_written_before_verdicts_were_stored_report_the_same(graded, as_json, tmp_path):
    """A results folder from a grader that stored neither verdicts nor named mistakes: the verdicts are
    the ones its grader decided (from the score, and the blank answer's fixed feedback), and no
    mistake is guessed from the feedback's wording."""
    def older(result):
        for test in result["tests"]:
            del test["verdict"]
            test.get("extra_data", {}).pop("mistake", None)

    report = _report_of_edited(graded, tmp_path, older)
    assert report["per_grade_id"] == as_json["per_grade_id"] and report["submissions"] == as_json["submissions"]
    assert as_json["mistakes"] and report["mistakes"] == []


@pytest.mark.parametrize("outline", [None, {"dC": 1}, [["dC", "one"]]], ids=["none", "an-object", "a-bad-part"])
def test_results_without_a_readable_outline_report_the_same_from_the_exercise(graded, as_json, tmp_path, outline):
    """Written before results held the exercise's outline, or edited since: the report orders and groups by the
    exercise itself, and no result is left out for it."""
    def edited(result):
        if outline is None:
            result["extra_data"].pop("outline")
        else:
            result["extra_data"]["outline"] = outline

    report = _report_of_edited(graded, tmp_path, edited)
    assert report["per_grade_id"] == as_json["per_grade_id"] and report["submissions"] == as_json["submissions"]


def test_report_and_export_read_the_outline_and_never_load_the_exercise(graded, page, tmp_path):
    """The results say the grade ids' order and parts: the class report and the exports run without importing
    the exercise's definition, and torch with it (most of their time: 3.5 s a report became 1.5 s)."""
    probe = ("import sys; from grader.cli import main\n"
             "try:\n    main(sys.argv[1:])\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
             "print('torch' in sys.modules)")
    for args in (["report", str(graded), "--json"], ["export", str(graded), "--format", "grade-ids",
                                                       "--out", str(tmp_path / "ids.csv")]):
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.splitlines()[-1] == "False", (args, done.stdout[-500:])


def test_json_has_the_same_content(graded, page, as_json):
    _, parsed = page
    assert as_json["count"] == len(GRADED)
    assert as_json["max_score"] == COURSE.max_score
    assert [r["grade_id"] for r in as_json["per_grade_id"]] == [r["grade id"] for r in parsed.table("tensors")]
    assert [(m["grade_id"], m["mistake"], m["count"]) for m in as_json["mistakes"]] == [
        (r["grade id"], r["mistake"], int(r["count"])) for r in parsed.table("mistakes")]
    assert [s["submission"] for s in as_json["submissions"]] == GRADED
    assert {s["submission"]: s["score"] for s in as_json["submissions"]} == {
        sid: r["score"] for sid, r in results(graded).items()}


def test_json_and_html_written_into_the_folder_are_not_read_as_results(graded, page, tmp_path):
    target = graded / "report.json"
    done = CliRunner().invoke(main, ["report", str(graded), "--json", "--out", str(target)])
    assert done.exit_code == 0, done.output
    assert json.loads(target.read_text())["count"] == len(GRADED)
    elsewhere = tmp_path / "class.html"
    done = CliRunner().invoke(main, ["report", str(graded), "--out", str(elsewhere)])
    assert done.exit_code == 0, done.output
    assert Page(elsewhere.read_text()).text("summary").count(f"submissions{len(GRADED)}") == 1
    target.unlink()


@pytest.mark.parametrize("make", ["missing", "empty", "foreign"])
def test_a_folder_without_results_is_a_one_line_error(tmp_path, make):
    folder = tmp_path / "results"
    if make != "missing":
        folder.mkdir()
    if make == "foreign":
        (folder / "notes.json").write_text('{"not": "a result"}')
        (folder / "grades.csv").write_text("submission,score\n")
    done = CliRunner().invoke(main, ["report", str(folder)])
    assert done.exit_code != 0
    assert done.output.count("\n") == 1 and done.output.startswith("Error: ")
    assert not (folder / "report.html").exists()


@pytest.mark.slow
def test_the_demo_writes_a_class_report_with_the_gradebook_scores(tmp_path):
    from nbgrader.api import Gradebook

    done = CliRunner().invoke(main, ["demo", "--course", str(COURSE_FILE), "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    line = next(line for line in done.output.splitlines() if "Class report: " in line)
    report = Path(line.split("Class report: ")[1].split(" (")[0])
    assert report == tmp_path / "course" / "results" / "report.html"  # written by autograde itself
    parsed = Page(report.read_text(encoding="utf-8"))
    graded = {r["submission"]: r for r in parsed.table("submissions")}
    assert sorted(graded) == [f"{s}/{COURSE.assignment}/{COURSE.notebook.removesuffix('.ipynb')}"
                              for s in ("ada", "ben", "cy", "dee", "eve")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Gradebook(f"sqlite:///{tmp_path / 'course' / 'gradebook.db'}") as gb:
            for sid in graded:
                student = sid.split("/")[0]
                book = {g.name: g.score for g in gb.find_submission_notebook(
                    COURSE.assignment, COURSE.notebook.removesuffix(".ipynb"), student).grades}
                result = json.loads((report.parent / f"{sid}.json").read_text(encoding="utf-8"))
                assert {grade_cell_id(t["name"]): t["score"] for t in result["tests"]} == pytest.approx(book), sid
                assert float(graded[sid]["score"]) == pytest.approx(sum(book.values()))
