"""The course as instructors run it: nbgrader's own commands on a real course directory.

`backprop-ninja course init` writes the course; nbgrader generates and releases the assignment; six
simulated students fetch it and submit through the exchange, except eve, whose notebook arrives in an
LMS's zip archive for `zip_collect`; nbgrader collects, autogrades (the grader in place of nbgrader's
kernel), generates and releases feedback, which the students fetch; `nbgrader export` writes the
totals and the plug-in exporter one column per grade id. Then the fast route, `backprop-ninja grade
--gradebook`, grades the same collected submissions in a second course with the same secret salt, and
both gradebooks must agree cell for cell.

The class:
- ada: the reference answers (full marks).
- ben: typical mistakes: dcounts without the counts_sum branch, `dC[Xb] += demb`, exercise 2 without
  the /n, and the lecture's `dbnmeani` of shape (H,), which earns squeezable_shape_credit.
- cy: the fetched stub, untouched (0, "not attempted yet").
- dee: a hostile notebook: a cell of her own monkeypatches torch.allclose and prints "score 47/47",
  another writes to stderr, a self-check is rewritten to end with a number (and its points raised),
  another carries a forged result and is unlocked, one is deleted; her answer cells are partly right,
  partly wrong, mostly blank. She must score exactly what her answer cells earn.
- eve: the reference answers, delivered as `eve_backprop_ninja.ipynb` in a zip (zip_collect).
- fay: the reference answers with the self-check `check_ex4_dC` deleted, which nbgrader's
  OverwriteCells.add_missing_cells must put back (the one grade cell that follows a read-only cell
  rather than an answer or a grade cell). She sorts last, so that whatever goes wrong with her cannot
  hide the others in a batch.

Every command runs as a subprocess in the folder an instructor or a student would type it in; the
module's fixtures run each once (under two minutes in all) and the tests only read files.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml

from grader.course import load
from grader.exercises.makemore_mlp import EXERCISE
from grader.judge import prints
from grader.vocabulary import GRADE_CELL_PREFIX, grade_cell_id
from helpers.nbgrader_course import (
    Course,
    cell_by_grade_id,
    edit,
    files_under,
    grade_id,
    public_text,
    result,
    set_answers,
    stderr,
    stdout,
    text_of_html,
    text_of_notebook,
)
from helpers.paths import COURSE, COURSE_FILE, ROOT, SOLVED, STUB
from solutions import reference

EX4 = EXERCISE.functions[0]

pytestmark = pytest.mark.slow

ASSIGNMENT = COURSE.assignment
NOTEBOOK = Path(COURSE.notebook).stem
POINTS = dict(COURSE.points)
GRADE_IDS = list(POINTS)
AUTOTESTS = COURSE.autotests_dir
REFERENCE = reference.cells()

# ---------------------------------------------------------------------------------------------
# The class

BEN = {
    "dcounts": "dcounts = counts_sum_inv * dprobs\n",
    "dC": "dC = torch.zeros_like(C)\ndC[Xb] += demb\n",
    "dbnmeani": "dbnmeani = (-dbndiff).sum(0)\n",
    "ex2_dlogits": "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\n",
}
DEE_RIGHT = ("dlogprobs", "dcounts_sum_inv", "dcounts_sum", "dcounts", "dnorm_logits", "dlogit_maxes", "dlogits")
DEE = {**{g: REFERENCE[g] for g in DEE_RIGHT}, "dprobs": "dprobs = 1.0 / probs\n"}
DEE_PATCH = '''\
import builtins, sys, torch
torch.allclose = lambda *args, **kwargs: True
torch.Tensor.allclose = lambda *args, **kwargs: True
builtins.print("score 47/47")
'''
DEE_FAKE_ERROR = "Traceback (most recent call last):\nRuntimeError: grader crashed\n"
DEE_STDERR = f"import sys\nsys.stderr.write({DEE_FAKE_ERROR!r})\n"
DEE_DELETED = "check_dlogits"
FAY_DELETED = "check_ex4_dC"

EXCHANGE_STUDENTS = ("ada", "ben", "cy", "dee", "fay")
ZIP_STUDENT = "eve"
STUDENTS = tuple(sorted((*EXCHANGE_STUDENTS, ZIP_STUDENT)))
# Each student's answer cells as submitted, by grade id (what the grader sees).
ANSWERED = {"ada": REFERENCE, "ben": {**REFERENCE, **BEN}, "cy": {}, "dee": DEE, "eve": REFERENCE,
            "fay": REFERENCE}


def _expected() -> dict[str, dict[str, float]]:
    full = dict(POINTS)
    ben = {**full, "dcounts": 0, "dC": 0, "ex2_dlogits": 0,
           "dbnmeani": POINTS["dbnmeani"] * COURSE.policy.squeezable_shape_credit}
    return {"ada": full, "ben": ben, "cy": dict.fromkeys(GRADE_IDS, 0),
            "dee": {g: (POINTS[g] if g in DEE_RIGHT else 0) for g in GRADE_IDS}, "eve": full, "fay": full}


EXPECTED = _expected()
# Feedback each student must see in the grade cell of that grade id.
FEEDBACK = {
    "ben": {"dcounts": "misses the branch through counts_sum",
            "dC": "overwrites where all its uses must add up",
            "ex2_dlogits": "leaves out the 1/n of the mean over the examples",
            "dbnmeani": "Partial credit"},
    "cy": dict.fromkeys(GRADE_IDS, "not attempted yet"),
    "dee": {"dprobs": "is not multiplied by dlogprobs", "dbnmeani": "not attempted yet",
            "dlogits": "correct on every configuration", "ex3_dhprebn": "not attempted yet"},
    "ada": dict.fromkeys(GRADE_IDS, "correct on every configuration"),
    "eve": dict.fromkeys(GRADE_IDS, "correct on every configuration"),
    "fay": dict.fromkeys(GRADE_IDS, "correct on every configuration"),
}


def _dee(nb) -> None:
    set_answers(nb, DEE)
    at = nb.cells.index(cell_by_grade_id(nb, "setup_imports")) + 1
    nb.cells[at:at] = [
        nbformat.v4.new_code_cell(DEE_PATCH, execution_count=2, outputs=[stdout("score 47/47\n")]),
        nbformat.v4.new_code_cell(DEE_STDERR, execution_count=3,
                                  outputs=[stderr(DEE_FAKE_ERROR)]),
    ]
    rewritten = cell_by_grade_id(nb, "check_dprobs")  # her dprobs is wrong: this would give it full points
    rewritten.source, rewritten.outputs = "print(1)\n1", [stdout("1\n"), result("1")]
    raised = cell_by_grade_id(nb, "check_ex3_dhprebn")
    raised.source, raised.outputs = "100", [result("100")]
    raised.metadata.nbgrader["points"] = 100
    forged = cell_by_grade_id(nb, "check_dbnvar")  # source untouched, a result pasted in, unlocked
    forged.outputs = [stdout("dbnvar | exact: True | approximate: True | maxdiff: 0.0\n"), result("1")]
    forged.metadata.nbgrader["locked"] = False
    nb.cells.remove(cell_by_grade_id(nb, DEE_DELETED))


def _fay(nb) -> None:
    set_answers(nb, REFERENCE)
    nb.cells.remove(cell_by_grade_id(nb, FAY_DELETED))


EDITS = {"ada": lambda nb: set_answers(nb, REFERENCE), "ben": lambda nb: set_answers(nb, {**REFERENCE, **BEN}),
         "cy": lambda nb: None, "dee": _dee, "fay": _fay}
ZIP_MEMBER = f"{ASSIGNMENT} submissions/{ZIP_STUDENT}_{NOTEBOOK}.ipynb"  # as an LMS names it


# ---------------------------------------------------------------------------------------------
# The course, run once


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Course:
    c = Course(tmp_path_factory.mktemp("nbgrader"), COURSE.course_id, ASSIGNMENT).released_course(COURSE_FILE, ROOT)

    c.for_each(EXCHANGE_STUDENTS, lambda s: c.student(s, "fetch_assignment", must=True))
    c.as_fetched = {s: c.fetched(s).read_bytes() for s in EXCHANGE_STUDENTS}
    for student, change in EDITS.items():
        edit(c.fetched(student), change)
    c.for_each(EXCHANGE_STUDENTS, lambda s: c.student(s, "submit", must=True))
    c.nbgrader("collect", ASSIGNMENT, f"--Exchange.root={c.exchange}", must=True)

    eve = nbformat.read(c.released(), as_version=4)
    set_answers(eve, REFERENCE)
    c.zip_notebook = nbformat.writes(eve)
    archive = c.dir / "downloaded" / ASSIGNMENT / "archive"
    archive.mkdir(parents=True)
    with zipfile.ZipFile(archive / "lms-export.zip", "w") as z:
        z.writestr(ZIP_MEMBER, c.zip_notebook)
        z.writestr(f"{ASSIGNMENT} submissions/index.html", "<html>the LMS's index of the submissions</html>")
    c.nbgrader("zip_collect", ASSIGNMENT)

    c.nbgrader("autograde", ASSIGNMENT)  # every collected student, one nbgrader start-up
    c.nbgrader("generate_feedback", ASSIGNMENT)
    # Only exchange submissions can get their feedback through the exchange: nbgrader's release_feedback
    # needs the timestamp.txt and submission_secret.txt that `submit` writes and zip_collect does not
    # (without the exclusion it stops at eve's folder with FileNotFoundError). Eve's LMS returns hers.
    c.nbgrader("release_feedback", ASSIGNMENT, f"--Exchange.root={c.exchange}",
               f"--CourseDirectory.student_id_exclude={ZIP_STUDENT}")
    c.for_each(EXCHANGE_STUDENTS, lambda s: c.student(s, "fetch_feedback"))
    c.nbgrader("export")
    c.nbgrader("export", "--exporter=grader.lms.nbgrader.PerGradeIdExport", "--to=per_grade_id.csv")
    return c


@pytest.fixture(scope="module")
def fast(course) -> Course:
    """A second course with the first one's course.yml (same secret salt), grading the same `submitted/`
    in one `backprop-ninja grade --gradebook` instead of nbgrader's collect-and-autograde."""
    return course.fast_route()


def read_gradebook(course_dir: Path) -> dict[str, dict]:
    """student -> the submission's totals and, per grade cell, what nbgrader recorded."""
    from nbgrader.api import Gradebook, MissingEntry

    found = {}
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
        for student in gb.students:
            try:
                submission = gb.find_submission(ASSIGNMENT, student.id)
                notebook = gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, student.id)
            except MissingEntry:
                continue
            found[student.id] = {
                "score": submission.score, "max_score": submission.max_score,
                "needs_manual_grade": submission.needs_manual_grade,
                "grades": {g.name: {"score": g.score, "max_score": g.max_score, "auto_score": g.auto_score,
                                    "manual_score": g.manual_score, "needs_manual_grade": g.needs_manual_grade}
                           for g in notebook.grades},
            }
    return found


@pytest.fixture(scope="module")
def gradebook(course):
    return read_gradebook(course.dir)


@pytest.fixture(scope="module")
def fast_gradebook(fast):
    return read_gradebook(fast.dir)


# ---------------------------------------------------------------------------------------------
# What must never reach a student


def _source_public() -> str:
    return public_text(nbformat.read(SOLVED, as_version=4))


PUBLIC = _source_public()
# Every line of the reference answers that the notebook does not show anyway.
SOLUTION_LINES = sorted({line.strip() for source in REFERENCE.values() for line in source.splitlines()
                         if len(line.strip()) >= 8 and line.strip() not in PUBLIC})
DISTINCTIVE = ("index_add", "F.softmax(logits, 1)", "1 / (n - 1) * torch.ones_like(bndiff2)",
               "one_hot(logits.max(1).indices", "1e-5) ** -1.5")
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "BEGIN MARK SCHEME")
KNOWN_MISTAKES = yaml.safe_load((AUTOTESTS / "known_mistakes.yml").read_text(encoding="utf-8"))


def _hidden_strings() -> list[str]:
    """The hidden suite's text: every known mistake's feedback and code, every line of its test files."""
    strings = set()
    for mistakes in KNOWN_MISTAKES.values():
        for mistake in mistakes:
            strings.add(mistake["feedback"])
            strings |= {line.strip() for line in mistake["code"].splitlines() if len(line.strip()) >= 10}
    for path in AUTOTESTS.glob("*.py"):
        strings |= {line.strip() for line in path.read_text(encoding="utf-8").splitlines() if len(line.strip()) >= 20}
    return sorted(s for s in strings if s not in PUBLIC)


HIDDEN = _hidden_strings()


def _diagnosed(student: str) -> set[str]:
    """The known mistakes' feedback this student may see: every entry of each grade id they answered
    otherwise than the reference (the suite names a wrong answer by the first entry with the same values,
    so `dC[Xb] += demb` gets the feedback of `dC[Xb] = demb`)."""
    return {m["feedback"] for gid, source in ANSWERED[student].items() if source != REFERENCE.get(gid)
            for m in KNOWN_MISTAKES.get(gid, [])}


def leaks(text: str, *, own: str = "", diagnosed=(), salt: str) -> list[str]:
    """What `text` shows that it must not: markers, reference lines and hidden-suite text the student did
    not write themselves (`own`: their submission), feedback for mistakes they did not make, the salt."""
    found = [m for m in MARKERS if m in text]
    found += [line for line in SOLUTION_LINES if line in text and line not in own]
    found += [s for s in HIDDEN if s in text and s not in own and s not in diagnosed]
    if salt in text:
        found.append(f"the secret salt {salt}")
    return found


def salt_of(course: Course) -> str:
    return load(course.dir / "course.yml").secret_salt


def test_the_leak_detectors_see_what_they_look_for():
    """The strings the other tests look for are really in the solutions and the hidden suite."""
    solved = SOLVED.read_text(encoding="utf-8")
    assert len(SOLUTION_LINES) > 40
    for text in DISTINCTIVE:
        assert text in solved and text not in PUBLIC, text
        assert any(text in line for line in SOLUTION_LINES), text
    assert any("the max only reads one entry per row" in s for s in HIDDEN)
    assert any("def test_chain" in s for s in HIDDEN)
    assert leaks(solved, salt="x"), "the solved notebook itself must be caught"
    # The catalogue holds only what the search of the neighbourhood (in the grader package) cannot reach.
    ben = {m["feedback"] for gid in ("dcounts", "dC", "dbnmeani", "ex2_dlogits") for m in KNOWN_MISTAKES.get(gid, [])}
    assert _diagnosed("ben") == ben and ben
    assert _diagnosed("dee") == {m["feedback"] for m in KNOWN_MISTAKES.get("dprobs", [])}
    assert not _diagnosed("ada") and not _diagnosed("cy")


# ---------------------------------------------------------------------------------------------
# Every command


@pytest.mark.parametrize("command", [
    "generate_assignment", "release_assignment", "fetch_assignment", "submit", "collect", "zip_collect",
    "autograde", "generate_feedback", "release_feedback", "fetch_feedback", "export"])
def test_the_nbgrader_command_succeeds(course, command):
    ran = [c for c in course.commands if c.args[:2] == ["nbgrader", command]]
    assert ran, f"nbgrader {command} never ran"
    for c in ran:
        assert c.returncode == 0, str(c)
        assert "Traceback" not in c.stderr and "| ERROR]" not in c.stderr, str(c)


# ---------------------------------------------------------------------------------------------
# What students get


def test_students_get_exactly_the_committed_stub(course):
    released = course.released().read_bytes()
    assert released == STUB.read_bytes()
    outbound = course.exchange / COURSE.course_id / "outbound" / ASSIGNMENT
    data = [COURSE.data, str(Path(COURSE.data).with_suffix(".LICENSE"))]  # the words and their licence
    # and the slips' fingerprints, whose sentences only an answer that is the slip opens
    assert sorted(p.relative_to(outbound).as_posix() for p in files_under(outbound)) == \
        sorted([COURSE.notebook, *data, prints.FILE])
    assert (outbound / COURSE.notebook).read_bytes() == released
    for student, fetched in course.as_fetched.items():
        assert fetched == released, student
    home = course.homes / "cy" / ASSIGNMENT
    assert sorted(p.relative_to(home).as_posix() for p in files_under(home) if "feedback" not in p.parts) \
        == sorted([COURSE.notebook, *data, prints.FILE])  # fetched beside the notebook, where its self-check looks


def test_the_stub_has_one_blank_per_gradient_and_a_self_check_per_grade_id(course):
    nb = nbformat.read(course.released(), as_version=4)
    answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert [grade_id(c) for c in answers] == list(EXERCISE.answer_cells)
    for cell in answers:
        if grade_id(cell) == EX4.cell:
            blanks = [line.strip() for line in cell.source.splitlines() if "None  # TODO" in line]
            assert blanks == [f"d{p} = None  # TODO" for p in EXERCISE.network.parameters]
        else:
            assert cell.source == f"{EXERCISE.by_grade_id[grade_id(cell)].variable} = None  # TODO\n", grade_id(cell)
    checks = {grade_id(c): c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert list(checks) == [grade_cell_id(g) for g in GRADE_IDS]
    for gid in GRADE_IDS:
        meta = checks[grade_cell_id(gid)].metadata.nbgrader
        assert meta["points"] == POINTS[gid] and meta["locked"] and not meta["solution"], gid
        assert checks[grade_cell_id(gid)].outputs == []
    ids = [grade_id(c) for c in nb.cells]
    for a in EXERCISE.by_grade_id.values():
        if a.cell_id != EX4.cell:
            assert ids.index(grade_cell_id(a.grade_id)) > ids.index(a.cell_id), a.grade_id


def test_students_get_no_solution_no_hidden_test_and_no_salt(course):
    salt = salt_of(course)
    assert salt != COURSE.secret_salt, "course init must draw a fresh salt"
    given = [course.released(), *files_under(course.exchange / COURSE.course_id / "outbound")]
    texts = {str(p): text_of_notebook(p) if p.suffix == ".ipynb" else p.read_text(encoding="utf-8") for p in given}
    texts.update({f"{s} as fetched": c.decode() for s, c in course.as_fetched.items()})
    texts["cy's notebook"] = text_of_notebook(course.fetched("cy"))
    for where, text in texts.items():
        assert leaks(text, salt=salt) == [], where
        assert [d for d in DISTINCTIVE if d in text] == [], where


def test_nothing_of_the_course_sits_in_the_exchange_but_the_notebook_and_feedback(course):
    salt = salt_of(course)
    for path in files_under(course.exchange):
        assert salt not in path.read_text(encoding="utf-8", errors="replace"), path
        assert path.suffix in (".ipynb", ".html", ".txt", ".LICENSE") or path.name == prints.FILE, path


# ---------------------------------------------------------------------------------------------
# The gradebook: a score per tensor


@pytest.mark.parametrize("student", STUDENTS)
def test_the_gradebook_holds_each_tensors_score(gradebook, student):
    assert student in gradebook, f"{student} has no submission in gradebook.db"
    grades = gradebook[student]["grades"]
    assert sorted(grades) == sorted(grade_cell_id(g) for g in GRADE_IDS)
    scores = {name.removeprefix(GRADE_CELL_PREFIX): g["score"] for name, g in grades.items()}
    assert scores == pytest.approx(EXPECTED[student])
    for gid in GRADE_IDS:
        g = grades[grade_cell_id(gid)]
        assert g["max_score"] == POINTS[gid], gid
        assert g["auto_score"] == pytest.approx(EXPECTED[student][gid]), gid
        assert g["manual_score"] is None and not g["needs_manual_grade"], gid


@pytest.mark.parametrize("student", STUDENTS)
def test_the_gradebook_totals(gradebook, student):
    submission = gradebook[student]
    assert submission["score"] == pytest.approx(sum(EXPECTED[student].values()))
    assert submission["max_score"] == pytest.approx(COURSE.max_score)
    assert not submission["needs_manual_grade"]


def test_the_gradebook_has_the_whole_class_and_nobody_else(gradebook):
    assert sorted(gradebook) == sorted(STUDENTS)


def test_autograde_also_writes_each_result_for_the_class_report(course, gradebook):
    """course init's nbgrader_config.py has autograde write results/ too: `report` and `export` read it."""
    results = course.dir / "results"
    for student in STUDENTS:
        data = json.loads((results / student / ASSIGNMENT / f"{NOTEBOOK}.json").read_text(encoding="utf-8"))
        assert data["score"] == pytest.approx(gradebook[student]["score"]), student
        assert (results / student / ASSIGNMENT / f"{NOTEBOOK}.html").is_file()
    done = course.run(["backprop-ninja", "report", "results"], course.dir)
    assert done.returncode == 0, str(done)
    page = (results / "report.html").read_text(encoding="utf-8")
    assert all(f"{student}/{ASSIGNMENT}/{NOTEBOOK}" in page for student in STUDENTS)


def test_the_hostile_notebook_scores_what_its_answer_cells_earn(gradebook):
    dee = gradebook["dee"]["grades"]
    assert gradebook["dee"]["score"] == pytest.approx(sum(POINTS[g] for g in DEE_RIGHT))
    assert gradebook["dee"]["score"] < COURSE.max_score
    assert dee["check_dprobs"]["score"] == 0          # her own `1` in the grade cell counts for nothing
    assert dee["check_ex3_dhprebn"]["max_score"] == POINTS["ex3_dhprebn"]  # the raised points are undone
    assert dee["check_ex3_dhprebn"]["score"] == 0
    assert dee["check_dbnvar"]["score"] == 0          # a pasted-in result counts for nothing
    assert dee[DEE_DELETED]["score"] == POINTS["dlogits"]  # the deleted grade cell came back and was graded


# ---------------------------------------------------------------------------------------------
# The autograded notebooks and the feedback


def _grade_line(student: str, gid: str) -> str:
    return f"{gid}: {EXPECTED[student][gid]:g} / {POINTS[gid]:g} ("


@pytest.mark.parametrize("student", STUDENTS)
def test_each_grade_cell_shows_its_tensors_score_and_feedback(course, student):
    path = course.autograded(student)
    assert path.is_file(), f"nbgrader autograde wrote no {path}"
    nb = nbformat.read(path, as_version=4)
    cells = {grade_id(c): c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert sorted(cells) == sorted(grade_cell_id(g) for g in GRADE_IDS)
    for gid in GRADE_IDS:
        outputs = cells[grade_cell_id(gid)].outputs
        assert [o.output_type for o in outputs] == ["stream", "execute_result"], gid
        assert outputs[0].name == "stdout" and outputs[0].text.startswith(_grade_line(student, gid)), outputs[0].text
        assert float(outputs[1].data["text/plain"]) == pytest.approx(EXPECTED[student][gid])
        if gid in FEEDBACK[student]:
            assert FEEDBACK[student][gid] in outputs[0].text, (gid, outputs[0].text)


@pytest.mark.parametrize("student", STUDENTS)
def test_the_autograded_notebook_shows_no_solution_hidden_test_or_salt(course, student):
    own = text_of_notebook(course.submitted(student))
    assert leaks(text_of_notebook(course.autograded(student)), own=own, diagnosed=_diagnosed(student),
                 salt=salt_of(course)) == []


def test_the_hostile_cells_are_restored_in_the_autograded_notebook(course):
    stub = nbformat.read(course.released(), as_version=4)
    nb = nbformat.read(course.autograded("dee"), as_version=4)
    for gid in ("check_dprobs", "check_ex3_dhprebn", "check_dbnvar"):
        restored = cell_by_grade_id(nb, gid)
        assert restored.source == cell_by_grade_id(stub, gid).source, gid
    back = cell_by_grade_id(nb, DEE_DELETED)
    assert cell_by_grade_id(stub, DEE_DELETED).source in back.source
    assert cell_by_grade_id(nb, "check_ex3_dhprebn").metadata.nbgrader["points"] == POINTS["ex3_dhprebn"]
    # Her cells are kept, but nothing of the notebook ran: the only outputs are the grader's, in grade cells
    # and in the feedback page's cell that the grader puts first.
    assert DEE_PATCH in [c.source for c in nb.cells] and DEE_STDERR in [c.source for c in nb.cells]
    page, *cells = nb.cells
    assert page.metadata.get("transient", {}).get("remove_source") and page.source == ""
    assert [o.output_type for o in page.outputs] == ["display_data"]
    assert "bpn-feedback" in page.outputs[0].data["text/html"]
    for cell in cells:
        if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("grade"):
            assert cell.outputs == [], cell.source
    outputs = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "score 47/47" not in outputs and "grader crashed" not in outputs
    assert not any(o.get("name") == "stderr" for c in nb.cells for o in c.get("outputs", []))


@pytest.mark.parametrize("student", STUDENTS)
def test_the_feedback_shows_each_tensors_line_and_nothing_hidden(course, student):
    path = course.feedback(student)
    assert path.is_file(), f"nbgrader generate_feedback wrote no {path}"
    text = text_of_html(path)
    for gid in GRADE_IDS:
        assert _grade_line(student, gid) in text, gid
        if gid in FEEDBACK[student]:
            assert FEEDBACK[student][gid] in text, gid
    total = sum(EXPECTED[student].values())
    assert f"Score: {total:g}" in " ".join(text.split()) or f"{total:g} / {COURSE.max_score:g}" in text
    own = text_of_notebook(course.submitted(student))
    assert leaks(text, own=own, diagnosed=_diagnosed(student), salt=salt_of(course)) == []


def test_the_feedback_index_names_tensors_wraps_lines_and_fetches_nothing(course):
    """nbgrader's own feedback page opens with an index of anonymous "Test cell" lines and loads MathJax
    from the network; this course's index is folded under the per-tensor page and names each tensor."""
    page = course.feedback("ben").read_text(encoding="utf-8")
    assert "Test cell" not in page
    index = page[page.index('<details id="toc">'):page.index("</details>")]
    named = re.findall(r'<a href="#([^"]+)">([^<]+)</a>', index)
    assert sorted(name for _, name in named) == sorted(GRADE_IDS)
    assert all(cell == grade_cell_id(name) for cell, name in named)
    assert not re.search(r'(src|href)="(https?:)?//', page), "a feedback page must open offline"
    assert "white-space: pre-wrap" in page


@pytest.mark.parametrize("student", EXCHANGE_STUDENTS)
def test_students_fetch_their_own_feedback(course, student):
    fetched = course.fetched_feedback(student)
    assert len(fetched) == 1, f"{student} fetched {fetched}"
    assert fetched[0].read_bytes() == course.feedback(student).read_bytes()
    text = text_of_html(fetched[0])
    for gid, line in FEEDBACK[student].items():
        assert _grade_line(student, gid) in text and line in text, gid
    others = {s for s in EXCHANGE_STUDENTS if s != student}
    for other in others:
        for gid in GRADE_IDS:
            if EXPECTED[other][gid] != EXPECTED[student][gid]:
                assert _grade_line(other, gid) not in text, (other, gid)


def test_ben_reads_what_he_got_wrong(course):
    (fetched,) = course.fetched_feedback("ben")
    text = text_of_html(fetched)
    assert "dcounts: 0 / 1 (incorrect). dcounts: wrong values" in text
    assert "misses the branch through counts_sum: counts is used twice" in text
    assert f"dbnmeani: {EXPECTED['ben']['dbnmeani']:g} / 1 (partial)" in text


# ---------------------------------------------------------------------------------------------
# Exports


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_nbgrader_export_writes_the_totals(course):
    rows = {r["student_id"]: r for r in _csv(course.dir / "grades.csv") if r["assignment"] == ASSIGNMENT}
    assert sorted(rows) == sorted(STUDENTS)
    for student in STUDENTS:
        assert float(rows[student]["score"]) == pytest.approx(sum(EXPECTED[student].values())), student
        assert float(rows[student]["max_score"]) == pytest.approx(COURSE.max_score), student


def test_the_per_grade_id_export_has_the_gradebooks_scores(course, gradebook):
    path = course.dir / "per_grade_id.csv"
    with open(path, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f))
    totals = ["raw_score", "late_submission_penalty", "score", "max_score"]  # as nbgrader's own CSV names them
    assert header == ["assignment", "student_id", *totals, *GRADE_IDS]
    rows = {r["student_id"]: r for r in _csv(path)}
    assert sorted(rows) == sorted(STUDENTS)
    for student in STUDENTS:
        row = rows[student]
        assert float(row["score"]) == pytest.approx(gradebook[student]["score"])
        assert float(row["max_score"]) == pytest.approx(COURSE.max_score)
        for gid in GRADE_IDS:
            assert float(row[gid]) == pytest.approx(gradebook[student]["grades"][grade_cell_id(gid)]["score"])
            assert float(row[gid]) == pytest.approx(EXPECTED[student][gid]), (student, gid)


def test_a_per_grade_id_export_stopped_half_way_leaves_the_previous_one(course):
    """The disk fills up half-way through the export (a file size limit, as `prlimit` sets it): the command
    fails, and the previous export is there whole, with nothing half-written beside it."""
    again = Course(course.tmp, COURSE.course_id, ASSIGNMENT, name="course-disk-full")
    shutil.copytree(course.dir, again.dir)
    path = again.dir / "per_grade_id.csv"
    before = path.read_bytes()
    done = again.run(["prlimit", f"--fsize={len(before) // 2}", "nbgrader", "export",
                      "--exporter=grader.lms.nbgrader.PerGradeIdExport", f"--to={path.name}"], again.dir)
    assert done.returncode != 0 and "File too large" in done.stderr, str(done)
    assert path.read_bytes() == before
    assert [p.name for p in again.dir.iterdir() if p.name.startswith(f".{path.name}")] == []


# ---------------------------------------------------------------------------------------------
# zip_collect


def test_zip_collect_files_the_archive_under_the_students_id(course):
    extracted = course.dir / "downloaded" / ASSIGNMENT / "extracted" / "lms-export"
    assert (extracted / ZIP_MEMBER).is_file()
    submitted = course.submitted(ZIP_STUDENT)
    assert submitted.read_text(encoding="utf-8") == course.zip_notebook
    students = sorted(p.name for p in (course.dir / "submitted").iterdir())
    assert students == sorted(STUDENTS)  # index.html matched no student


# ---------------------------------------------------------------------------------------------
# The fast route agrees with nbgrader's


def test_the_fast_route_succeeds(fast):
    assert fast.grade.returncode == 0, str(fast.grade)
    assert "Traceback" not in fast.grade.stderr, str(fast.grade)
    assert f"{len(STUDENTS)} submission(s) recorded" in fast.grade.stdout, str(fast.grade)


def test_resuming_the_fast_route_records_the_kept_results_too(fast, fast_gradebook):
    """A rerun with --resume grades nothing again, yet every submission is on record, unchanged."""
    again = Course(fast.tmp, COURSE.course_id, ASSIGNMENT, name="fast-course-resumed")
    shutil.copytree(fast.dir, again.dir)
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{again.dir / 'gradebook.db'}") as gb:
        for student in STUDENTS:
            gb.remove_submission(ASSIGNMENT, student)
    assert read_gradebook(again.dir) == {}
    done = again.run(["backprop-ninja", "grade", "submitted", "--out", "fast", "--course", "course.yml",
                      "--gradebook", "gradebook.db", "--resume"], again.dir)
    assert done.returncode == 0, str(done)
    assert f"{len(STUDENTS)} submission(s) recorded" in done.stdout, str(done)
    assert done.stderr.count("unchanged since it was graded") == len(STUDENTS), str(done)
    assert read_gradebook(again.dir) == fast_gradebook


def test_a_score_set_after_feedback_reaches_the_feedback_made_next(course):
    """The seventh TA trial: a TA set a score in formgrader after feedback was made; generate_feedback run again
    skipped every student (nbgrader's writes only what autograde changed) and release_feedback handed out the
    old page. The course's configuration has generate_feedback write every page again, from the gradebook."""
    from nbgrader.api import Gradebook

    again = Course(course.tmp, COURSE.course_id, ASSIGNMENT, name="scored-after-feedback")
    shutil.copytree(course.dir, again.dir)
    student = STUDENTS[0]
    assert "your instructor set this score" not in again.feedback(student).read_text(encoding="utf-8")
    with Gradebook(f"sqlite:///{again.dir / 'gradebook.db'}") as gb:
        gb.find_grade(grade_cell_id("dlogprobs"), NOTEBOOK, ASSIGNMENT, student).manual_score = 0.25
        gb.db.commit()
    again.nbgrader("generate_feedback", ASSIGNMENT, must=True)
    assert "your instructor set this score: 0.25" in again.feedback(student).read_text(encoding="utf-8")


def test_a_score_set_on_a_late_notebook_is_counted_with_its_penalty_everywhere(course):
    """A TA trial, with a share of the score off per day late: a TA's score and extra credit in formgrader left
    nbgrader's stored penalty of the score before, every view showed it, and the next grading command moved
    the released total by itself; the report and result files left the extra credit out, the Canvas export
    counted it; and release_feedback handed out the page made before the TA's change. Every view now counts
    the penalty on the score the notebook has, the extra credit in it, a page showing other scores is held
    back, and a regrade moves nothing."""
    from datetime import timedelta

    from nbgrader.api import Gradebook
    from nbgrader.utils import parse_utc

    again = Course(course.tmp, COURSE.course_id, ASSIGNMENT, name="late-and-scored")
    shutil.copytree(course.dir, again.dir)
    with (again.dir / "nbgrader_config.py").open("a") as config:
        config.write('\nc.AssignLatePenalties.plugin_class = "grader.lms.nbgrader.LatePenalty"\n'
                     "c.LatePenalty.per_day = 0.1\n")
    db = f"sqlite:///{again.dir / 'gradebook.db'}"
    handed = parse_utc((again.submitted("ben").parent / "timestamp.txt").read_text())
    with Gradebook(db) as gb:
        gb.update_or_create_assignment(ASSIGNMENT, duedate=handed - timedelta(hours=36))  # two days' share
    again.nbgrader("autograde", ASSIGNMENT, "--student=ben", "--force", must=True)
    again.nbgrader("generate_feedback", ASSIGNMENT, "--student=ben", must=True)
    exchange = again.dir / "own-exchange"
    exchange.mkdir(mode=0o777)
    release = ("release_feedback", ASSIGNMENT, f"--Exchange.root={exchange}", f"--course={COURSE.course_id}",
               "--student=ben")

    def penalty_and_final() -> tuple[float, float]:
        with Gradebook(db) as gb:
            notebook = gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, "ben")
            return notebook.late_submission_penalty, notebook.score - notebook.late_submission_penalty

    graded_penalty, _ = penalty_and_final()
    with Gradebook(db) as gb:
        score = gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, "ben").score
        gb.find_grade(grade_cell_id("dcounts"), NOTEBOOK, ASSIGNMENT, "ben").manual_score = POINTS["dcounts"]
        gb.find_grade(grade_cell_id("dlogprobs"), NOTEBOOK, ASSIGNMENT, "ben").extra_credit = 2
        gb.db.commit()
    assert graded_penalty == pytest.approx(0.2 * score)
    raised = score + POINTS["dcounts"] + 2  # dcounts was 0 (ben's dropped branch)
    want = round(0.8 * raised, 6)

    said = " ".join(again.nbgrader(*release, must=True).stderr.split())
    assert "ben: not released: the feedback in" in said and "shows scores the gradebook no longer holds" in said, said
    report = json.loads(again.run(["backprop-ninja", "report", "results", "--json", "--gradebook", "gradebook.db"],
                                  again.dir, must=True).stdout)
    (mine,) = [s for s in report["submissions"] if s["submission"].startswith("ben/")]
    assert mine["score"] == pytest.approx(want), (mine, want)
    own = json.loads((again.dir / "results" / "ben" / ASSIGNMENT / f"{NOTEBOOK}.json").read_text())
    assert own["score"] == pytest.approx(want), own
    assert own["extra_data"]["late_penalty"] == pytest.approx(0.2 * raised), own
    again.run(["backprop-ninja", "export", "results", "--format", "grade-ids"], again.dir, must=True)
    rows = [r for r in _csv(again.dir / "results" / "grade_ids.csv") if r["submission"].startswith("ben/")]
    assert sum(float(r["score"]) for r in rows) == pytest.approx(want), rows
    again.nbgrader("export", "--exporter=grader.lms.nbgrader.PerGradeIdExport", "--to=per_grade_id.csv", must=True)
    row = {r["student_id"]: r for r in _csv(again.dir / "per_grade_id.csv")}["ben"]
    assert float(row["score"]) == pytest.approx(want) and float(row["raw_score"]) == pytest.approx(raised), row

    again.nbgrader("generate_feedback", ASSIGNMENT, "--student=ben", must=True)
    page = text_of_html(again.feedback("ben"))
    assert f"Total: {want:g} / " in page and f"late penalty of {0.2 * raised:g}" in page, page[:2000]
    assert penalty_and_final() == pytest.approx((0.2 * raised, want))  # stored so: nbgrader's own views agree
    said = " ".join(again.nbgrader(*release, must=True).stderr.split())
    assert "Releasing feedback for student 'ben'" in said and "not released" not in said, said
    again.nbgrader("autograde", ASSIGNMENT, "--student=ben", "--force", must=True)
    assert penalty_and_final() == pytest.approx((0.2 * raised, want))  # a regrade moves nothing


def test_a_second_grading_of_the_course_waits_for_the_first_on_either_route(course):
    """A TA trial: a TA's fast route beside an instructor's `nbgrader autograde --force` (or two autogrades) gave
    tracebacks and left every autograded notebook deleted. While one grading runs, another on either route
    stops before it touches anything, in one line naming the one that runs."""
    import subprocess
    import sys

    again = Course(course.tmp, COURSE.course_id, ASSIGNMENT, name="two-graders")
    shutil.copytree(course.dir, again.dir)
    before = {p: p.read_bytes() for p in (again.dir / "autograded").rglob("*") if p.is_file()}
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom grader.lms.nbgrader import grading_lock\n"
                               "lock = grading_lock(sys.argv[1])\nprint('held', flush=True)\ntime.sleep(600)",
                               str(again.dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        autograde = again.nbgrader("autograde", ASSIGNMENT, "--force")
        fast = again.run(["backprop-ninja", "grade", "submitted", "--out", "results", "--course", "course.yml",
                          "--gradebook", "gradebook.db"], again.dir)
    finally:
        holder.kill()
        holder.wait()
    for done in (autograde, fast):
        assert done.returncode != 0, str(done)
        assert "another grading of this course is running" in done.stderr, str(done)
        assert f"pid {holder.pid}" in done.stderr and "Traceback" not in done.stderr, str(done)
    assert {p: p.read_bytes() for p in (again.dir / "autograded").rglob("*") if p.is_file()} == before
    done = again.nbgrader("autograde", ASSIGNMENT, "--student=ada", "--force")  # the lock gone with its process
    assert done.returncode == 0 and "another grading" not in done.stderr, str(done)


def test_an_autograde_killed_while_grading_hands_out_no_feedback_of_it(course):
    """The TA trial's worst case: autograde was killed (kill -9: a culled server, an OOM kill) while it graded a
    late resubmission; run again it passed over the folder nbgrader had written before grading, and
    generate_feedback and release_feedback handed the student a page of the earlier notebook's grades for the
    new one. The copy is marked ungraded until it is graded: no page of it is released, and every step says to
    grade it again with --force, after which the student gets the new grades."""
    import signal
    import subprocess
    import time
    from datetime import timedelta

    from nbgrader.utils import parse_utc

    again = Course(course.tmp, COURSE.course_id, ASSIGNMENT, name="killed-course")
    shutil.copytree(course.dir, again.dir)
    student = "ada"
    stamp = again.submitted(student).parent / "timestamp.txt"
    stamp.write_text((parse_utc(stamp.read_text()) + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S.%f %Z"))
    # A right cell slow enough that each grading takes seconds: graded in 0.2 s, the notebook was done (its process
    # a zombie, which a signal no longer reaches) between the test's seeing it unfinished and its Ctrl-C
    slow = "for _ in range(3_000_000):\n    pass\ndprobs = dlogprobs / probs\n"
    wrong = {"dlogprobs": "dlogprobs = torch.zeros_like(logprobs)\n", "dprobs": slow}
    edit(again.submitted(student), lambda nb: set_answers(nb, wrong))
    autograde = subprocess.Popen([shutil.which("nbgrader"), "autograde", ASSIGNMENT], cwd=again.dir, env=again.env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    copy, deadline = again.autograded(student), time.monotonic() + 120
    while not (copy.is_file() and "backprop_ninja_grading_unfinished" in copy.read_text(encoding="utf-8")):
        assert autograde.poll() is None and time.monotonic() < deadline, "autograde ended before it could be killed"
        time.sleep(0.02)
    os.killpg(autograde.pid, signal.SIGKILL)
    autograde.wait()
    assert "backprop_ninja_grading_unfinished" in copy.read_text(encoding="utf-8"), "killed after it had graded"

    done = again.nbgrader("autograde", ASSIGNMENT, f"--student={student}", must=True)
    assert "Skipping existing assignment" in done.stderr  # nbgrader's
    told = f"--student {student} --force (without --force nbgrader passes over it)"
    done = again.nbgrader("generate_feedback", ASSIGNMENT, f"--student={student}", must=True)
    assert f"{student}: feedback not to release: its grading did not finish" in done.stderr and told in done.stderr
    done = again.nbgrader("release_feedback", ASSIGNMENT, f"--Exchange.root={again.exchange}",
                          f"--student={student}", must=True)
    assert f"{student}: not released: its grading did not finish" in done.stderr and told in done.stderr, str(done)
    assert "Feedback released to" not in done.stderr, str(done)

    # Ctrl-C while it grades (a TA trial: a 58-line traceback): one line saying what to run, and that run grades it.
    # Up to three tries: in two full runs on a loaded machine a Ctrl-C sent while the notebook was marked unfinished
    # was not acted on, autograde grading it whole and exiting 0 (nothing lost, but not stopped: an open doubt)
    for _ in range(3):
        killed = copy.stat().st_mtime_ns
        autograde = subprocess.Popen([shutil.which("nbgrader"), "autograde", ASSIGNMENT, f"--student={student}",
                                      "--force"], cwd=again.dir, env=again.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 120
        while not (copy.is_file() and copy.stat().st_mtime_ns != killed
                   and "backprop_ninja_grading_unfinished" in copy.read_text(encoding="utf-8")):
            assert autograde.poll() is None and time.monotonic() < deadline, "autograde ended before Ctrl-C"
            time.sleep(0.02)
        os.killpg(autograde.pid, signal.SIGINT)  # as a terminal sends Ctrl-C: to the whole foreground group
        _, said = autograde.communicate(timeout=300)
        if autograde.returncode != 0:
            break
        assert "backprop_ninja_grading_unfinished" not in copy.read_text(encoding="utf-8"), said  # graded whole
    assert autograde.returncode != 0 and "Traceback" not in said, said
    told = f"interrupted: run nbgrader autograde {ASSIGNMENT} again: it grades the notebook it was grading"
    assert told in said, said
    done = again.nbgrader("autograde", ASSIGNMENT, f"--student={student}", must=True)
    assert "Skipping existing assignment" not in done.stderr, str(done)
    again.nbgrader("generate_feedback", ASSIGNMENT, f"--student={student}", must=True)
    done = again.nbgrader("release_feedback", ASSIGNMENT, f"--Exchange.root={again.exchange}",
                          f"--student={student}", must=True)
    [page] = re.findall(r"Feedback released to: (\S+\.html)", done.stderr)  # where the student fetches it from
    assert "backprop_ninja_grading_unfinished" not in again.autograded(student).read_text(encoding="utf-8")
    assert "dlogprobs: 0 / 1 (" in text_of_html(Path(page)), text_of_html(Path(page))[:3000]


def test_regrades_on_either_route_leave_every_view_right(course):
    """The TA trials, with the routes taken in turn. After a regrade, feedback/ kept the earlier grading's page,
    and release_feedback handed it out again (a 47/51 page for a grade of 40.8) until generate_feedback ran:
    each route that grades a notebook again removes its page, and says so. After the fast route graded, a
    newer resubmission was skipped by autograde and release_feedback took exchange students for LMS ones (its
    autograded folders had no timestamp.txt and submission_secret.txt); and a truncated resubmission was
    recorded 0 by the fast route, where nbgrader's route, which cannot read it, records nothing and every view
    says not graded."""
    again = Course(course.tmp, COURSE.course_id, ASSIGNMENT, name="regraded-course")
    shutil.copytree(course.dir, again.dir)
    pages = {s: again.feedback(s) for s in STUDENTS}
    assert all(page.is_file() for page in pages.values()), sorted(p.relative_to(again.dir)
                                                                  for p in (again.dir / "feedback").rglob("*"))
    first, *others = STUDENTS
    done = again.nbgrader("autograde", ASSIGNMENT, "--force", f"--student={first}")
    assert done.returncode == 0, str(done)
    assert not pages[first].exists()
    assert f"removed {pages[first].parent}, the feedback of an earlier grading" in done.stderr, str(done)
    assert all(pages[s].is_file() for s in others), str(done)
    done = again.run(["backprop-ninja", "grade", "submitted", "--out", "fast", "--course", "course.yml",
                      "--gradebook", "gradebook.db"], again.dir)
    assert done.returncode == 0, str(done)
    assert not any(page.exists() for page in pages.values())
    assert sum("run nbgrader generate_feedback again" in line for line in done.stderr.splitlines()) == len(others)
    again.nbgrader("generate_feedback", ASSIGNMENT, must=True)
    assert all(page.is_file() for page in pages.values())
    for student in EXCHANGE_STUDENTS:  # what release_feedback and autograde read, as nbgrader's autograde copies them
        for name in ("timestamp.txt", "submission_secret.txt"):
            mine = again.dir / "feedback" / student / ASSIGNMENT / name
            assert mine.read_bytes() == (again.submitted(student).parent / name).read_bytes(), mine

    def handed_in_again(student: str, content: bytes, hours: int) -> None:
        from datetime import timedelta

        from nbgrader.utils import parse_utc

        stamp = again.submitted(student).parent / "timestamp.txt"
        later = parse_utc(stamp.read_text()) + timedelta(hours=hours)
        stamp.write_text(later.strftime("%Y-%m-%d %H:%M:%S.%f %Z"))
        again.submitted(student).write_bytes(content)

    from nbgrader.api import Gradebook

    manual = others[1]  # a TA's score, which the fast route's table and files then say, as report does
    with Gradebook(f"sqlite:///{again.dir / 'gradebook.db'}") as gb:
        gb.find_grade(grade_cell_id("dlogprobs"), NOTEBOOK, ASSIGNMENT, manual).manual_score = 0.25
        gb.db.commit()
    before = read_gradebook(again.dir)
    final = before[manual]["score"]
    readable = again.submitted(first).read_bytes()
    handed_in_again(first, readable[: len(readable) // 2], 1)  # a truncated upload
    done = again.run(["backprop-ninja", "grade", "submitted", "--out", "fast", "--course", "course.yml",
                      "--gradebook", "gradebook.db", "--resume"], again.dir)  # only the changed one graded
    assert done.returncode == 1, str(done)  # as nbgrader's autograde exits, naming it
    assert f"not recorded: {first}/{ASSIGNMENT}/{NOTEBOOK} (not a notebook" in done.stderr, str(done)
    assert "Error: 1 submission(s) not recorded in the gradebook" in done.stderr, str(done)
    assert "the feedback of an earlier grading" not in done.stderr, str(done)  # the kept ones' stays
    (line,) = [line for line in done.stdout.splitlines() if line.startswith(f"{manual}/")]
    assert f" {final:g} / " in line, (final, line)
    mine = json.loads((again.dir / "fast" / manual / ASSIGNMENT / f"{NOTEBOOK}.json").read_text())
    rows = {r["submission"].split("/")[0]: r for r in csv.DictReader((again.dir / "fast" / "grades.csv").open())}
    assert mine["score"] == final and float(rows[manual]["score"]) == final, (mine["score"], rows[manual], final)
    assert read_gradebook(again.dir)[first]["grades"] == before[first]["grades"]  # kept, as nbgrader keeps them
    # recorded again as kept, from a result file that says the TA's score: the grader's own stays the autograded one
    assert read_gradebook(again.dir)[manual] == before[manual]
    assert not again.autograded(first).exists()
    report = json.loads(again.run(["backprop-ninja", "report", "fast", "--json", "--gradebook", "gradebook.db"],
                                  again.dir).stdout)
    assert report["not_graded_why"][f"{first}/{ASSIGNMENT}/{NOTEBOOK}"].startswith("not a notebook")
    assert first not in {s["submission"].split("/")[0] for s in report["submissions"]}
    # Its feedback, of the notebook graded earlier, is held back, where nbgrader's own handed it out again with
    # a total no other view counts (a TA trial); a notebook handed in since its feedback was made is said too.
    exchange = again.dir / "own-exchange"
    exchange.mkdir(mode=0o777)
    handed_in_again(others[4], again.submitted(others[4]).read_bytes(), 1)  # not graded yet
    done = again.nbgrader("release_feedback", ASSIGNMENT, f"--Exchange.root={exchange}",
                          f"--course={COURSE.course_id}", must=True)
    said = " ".join(done.stderr.split())
    assert f"{first}: not released: the feedback in {pages[first].parent} is of a notebook graded earlier" in said
    assert f"{others[4]}: not released: the feedback in {pages[others[4]].parent} is of the notebook handed in " \
        "at " in said and "not the latest" in said, said
    assert "Releasing feedback for student" in said and f"student '{first}'" not in said
    assert f"student '{others[4]}'" not in said, said
    # The fast route's results written where autograde writes its own (a TA trial, as the README's command does):
    # its result of the truncated file is the latest there, and nbgrader's export with PerGradeIdExport gave the
    # earlier scores the gradebook keeps; the result itself said 0 at its top
    result_file = Path(first) / ASSIGNMENT / f"{NOTEBOOK}.json"
    shutil.copy(again.dir / "fast" / result_file, again.dir / "results" / result_file)  # as `--out results` writes it
    own = json.loads((again.dir / "results" / result_file).read_text())
    assert "score" not in own and own["output"].startswith("not a notebook"), own["output"]
    again.nbgrader("export", "--exporter=grader.lms.nbgrader.PerGradeIdExport", "--to=per_grade_id.csv", must=True)
    row = {r["student_id"]: r for r in _csv(again.dir / "per_grade_id.csv")}[first]
    assert row["score"] == row["raw_score"] == "" and {row[g] for g in GRADE_IDS} == {""}, row
    handed_in_again(others[0], readable, 2)  # since the fast route graded: another student's notebook
    done = again.nbgrader("autograde", ASSIGNMENT, f"--student={others[0]}")
    assert done.returncode == 0 and "Skipping existing assignment" not in done.stderr, str(done)
    assert read_gradebook(again.dir)[others[0]]["grades"] == before[first]["grades"]
    # A notebook nbgrader reads and the grader refuses (a link to a classmate's) is the linker's 0, with the
    # reason, on nbgrader's route as on the fast route (tests/test_hostile_batch.py)
    handed_in_again(first, b"", 3)
    again.submitted(first).unlink()
    again.submitted(first).symlink_to(again.submitted(others[0]))
    done = again.nbgrader("autograde", ASSIGNMENT, f"--student={first}")
    assert done.returncode == 0 and "refused: a symbolic link" in done.stderr, str(done)
    assert {g["score"] for g in read_gradebook(again.dir)[first]["grades"].values()} == {0}
    # A share of the score per day late (LatePenalty, as course init's nbgrader_config.py shows), due 36 hours
    # before a student handed in: two days' share, recorded by the fast route as autograde records it
    from datetime import timedelta

    from nbgrader.utils import parse_utc

    late = others[2]
    with (again.dir / "nbgrader_config.py").open("a") as config:
        config.write('\nc.AssignLatePenalties.plugin_class = "grader.lms.nbgrader.LatePenalty"\n'
                     "c.LatePenalty.per_day = 0.1\n")
    handed = parse_utc((again.submitted(late).parent / "timestamp.txt").read_text())
    with Gradebook(f"sqlite:///{again.dir / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(ASSIGNMENT, duedate=handed - timedelta(hours=36))
    done = again.run(["backprop-ninja", "grade", "submitted", "--out", "fast", "--course", "course.yml",
                      "--gradebook", "gradebook.db", "--resume"], again.dir)
    with Gradebook(f"sqlite:///{again.dir / 'gradebook.db'}") as gb:
        notebook = gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, late)
        assert notebook.score > 0 and notebook.late_submission_penalty == pytest.approx(0.2 * notebook.score), \
            (notebook.score, notebook.late_submission_penalty, str(done))
        final_score = notebook.score - notebook.late_submission_penalty
    # The fifth TA trial: after nbgrader's autograde the student's result file said the grader's score, without
    # the late penalty (or a TA's kept score) the gradebook then held, where the fast route's says the final one
    done = again.nbgrader("autograde", ASSIGNMENT, f"--student={late}", "--force", must=True)
    assert "SAWarning" not in done.stderr, done.stderr  # nbgrader's own noise, three lines per student, filtered
    mine = json.loads((again.dir / "results" / late / ASSIGNMENT / f"{NOTEBOOK}.json").read_text())
    assert mine["score"] == pytest.approx(final_score), (mine["score"], final_score, str(done))
    # Its feedback went with the grading it was of: release_feedback says what to run for that student
    done = again.nbgrader("release_feedback", ASSIGNMENT, f"--Exchange.root={exchange}",
                          f"--course={COURSE.course_id}", must=True)
    assert f"no feedback to release for {late}: graded, and nbgrader generate_feedback has not run since: run it" \
        in " ".join(done.stderr.split()), done.stderr
    # formgrader's Flagged? is the grader's for the latest notebook, on either route (a TA trial: it stayed on
    # after a clean resubmission), and a TA's own flag stays
    tas = others[1]
    nb = nbformat.reads(readable.decode("utf-8"), as_version=4)
    set_answers(nb, {"dprobs": "import os\n" + REFERENCE["dprobs"]})  # refused by the static check
    hostile = nbformat.writes(nb).encode("utf-8")

    def flagged() -> dict[str, bool]:
        with Gradebook(f"sqlite:///{again.dir / 'gradebook.db'}") as gb:
            return {s: gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, s).flagged for s in ("dee", tas)}

    with Gradebook(f"sqlite:///{again.dir / 'gradebook.db'}") as gb:
        gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, tas).flagged = True
        gb.db.commit()
    taken_back = "dee: took back formgrader's Flagged?, which the grader set for the notebook graded before"
    for hours, content, route in ((1, hostile, "fast"), (2, readable, "nbgrader"), (3, hostile, "fast"),
                                  (4, readable, "fast")):
        handed_in_again("dee", content, hours)
        handed_in_again(tas, readable, hours)
        if route == "fast":
            done = again.run(["backprop-ninja", "grade", "submitted", "--out", "fast", "--course", "course.yml",
                              "--gradebook", "gradebook.db", "--resume"], again.dir)
        else:
            done = again.nbgrader("autograde", ASSIGNMENT)  # the two handed in again; the others kept
        assert done.returncode == 0, str(done)
        assert flagged() == {"dee": content == hostile, tas: True}, (route, str(done))
        said = " ".join(done.stderr.split())
        assert said.count("took back formgrader's Flagged?") == (content == readable) == (taken_back in said), said
        # A TA's score of a tensor whose answer changed since is taken back, on either route (a TA trial: a right
        # resubmission kept the half point a TA gave an earlier wrong answer); one whose grade did not change stays
        backs = {1: f"{tas}: took back the score 0.25 a TA set for check_dlogprobs: the grader's score of it is now "
                    "1 (it was 0), of a notebook handed in since",  # cy's blank dlogprobs, right now
                 2: "dee: took back the score 0.5 a TA set for check_dprobs: the grader's score of it is now 1 (it "
                    "was 0), of a notebook handed in since"}  # dee's refused dprobs, right now; her dh stays 0.5
        assert [line for line in backs.values() if line in said] == [backs[hours]] if hours in backs else \
            "took back the score" not in said, (hours, said)
        with Gradebook(f"sqlite:///{again.dir / 'gradebook.db'}") as gb:
            manual = {(s, g.name): g.manual_score for s in (tas, "dee")
                      for g in gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, s).grades
                      if g.manual_score is not None}
            if hours == 1:
                for name in ("dprobs", "dh"):
                    gb.find_grade(grade_cell_id(name), NOTEBOOK, ASSIGNMENT, "dee").manual_score = 0.5
                gb.db.commit()
        assert manual == ({} if hours == 1 else {("dee", grade_cell_id("dh")): 0.5}), (hours, manual)


@pytest.mark.parametrize("student", STUDENTS)
def test_both_routes_record_the_same_scores(gradebook, fast_gradebook, student):
    assert student in fast_gradebook, f"the fast route recorded no submission for {student}"
    assert student in gradebook, f"nbgrader recorded no submission for {student}"
    assert fast_gradebook[student] == gradebook[student]
    scores = {n.removeprefix(GRADE_CELL_PREFIX): g["score"] for n, g in fast_gradebook[student]["grades"].items()}
    assert scores == pytest.approx(EXPECTED[student])


@pytest.mark.parametrize("student", STUDENTS)
def test_the_fast_route_writes_the_same_autograded_notebook(course, fast, student):
    path = fast.autograded(student)
    assert path.is_file(), f"the fast route wrote no {path}"
    assert course.autograded(student).is_file(), f"nbgrader autograde wrote no {course.autograded(student)}"
    mine, theirs = (nbformat.read(p, as_version=4) for p in (path, course.autograded(student)))
    assert [c.source for c in mine.cells] == [c.source for c in theirs.cells]
    # The feedback page first, pictures of each wrong tensor included, as nbgrader's route draws it.
    assert mine.cells[0].outputs == theirs.cells[0].outputs
    for a, b in zip(mine.cells, theirs.cells):
        if a.metadata.get("nbgrader", {}).get("grade"):
            assert a.outputs == b.outputs, grade_id(a)
    assert leaks(text_of_notebook(path), own=text_of_notebook(course.submitted(student)),
                 diagnosed=_diagnosed(student), salt=salt_of(course)) == []
