"""The trusted process reads a submission's text in time linear in it, under one CPU budget per
submission (course.yml limits.analysis_cpu_seconds): adversarial syntax at the parser's limits of depth,
width and length costs no more per byte than an honest cell, a notebook of a million small JSON values
costs what parsing it costs, and a submission that still runs over the budget is not graded, with one
line, while the rest of its batch is.

Times are the measuring thread's CPU time (time.thread_time), never wall time, against a linear bound
with a large constant: a loaded machine makes a step wait, not cost more. The quadratic forged-output
scan this replaced took 150-200 microseconds per byte on a 20,000-character cell (3-4 s); the linear
one takes under 10.
"""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time

import nbformat
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader import extract
from grader.limits import Budget, OverBudget
from grader.sandbox import static_check
from grader.sandbox.static_check import MAX_CELL_CHARS, Allow
from helpers.notebooks import dead_branch, nested, nested_prints, notebook, reference_sources, submission, wide, write
from helpers.paths import COURSE, ROOT

# Generous: ten times what the slowest adversarial cell costs here, a tenth of what the old scan cost.
SECONDS_PER_BYTE = 50e-6
SECONDS_AT_LEAST = 0.05
ANSWERS = COURSE.exercise.answer_cells


def cpu(function, *args) -> float:
    start = time.thread_time()
    function(*args)
    return time.thread_time() - start


def analysis_cpu(source: str) -> float:
    """The static check and the forged-output scan of one cell, past their caches."""
    return cpu(static_check.check.__wrapped__, source, Allow()) + cpu(static_check.forged_output.__wrapped__, source)


def assert_linear(source: str) -> None:
    spent = analysis_cpu(source)
    bound = SECONDS_AT_LEAST + SECONDS_PER_BYTE * len(source)
    assert spent <= bound, f"{spent:.3f} s of CPU for {len(source)} characters (bound {bound:.3f} s): {source[:200]!r}"


# ---------------------------------------------------------------------------------------------
# The worst cells known, at the largest size a cell may have


WORST = {
    "nested prints around a wide list": nested_prints(),
    "nested prints around names": nested_prints(item="a"),
    "nested prints around subscripts": nested_prints(item="a[0]"),
    "nested prints, one quoting a grade": dead_branch(nested("print(", ")", 190, wide("'a'", 18_000) + ",'score'")),
    "nested calls of every kind": dead_branch(nested("print(abs(", "))", 95, wide("-a", 18_000))),
    "nested f-strings": dead_branch(nested("print(f'{", "}')", 60, wide("a", 18_000))),
    "a long comparison": "x = " + "<".join(["a"] * 9_900),
    "nested lambdas": "x = " + "lambda:" * 2_800 + "1",
    "nested conditionals": "x = " + "a if a else " * 1_600 + "1",
    "a wide tuple": "x = " + "a," * 9_900,
    "many lines": "a\n" * 9_900,
    "many prints": "print('a')\n" * 1_800,
    "many attributes": "x = " + "+".join(["a.T.sum(0)"] * 1_800),
    "a long string in a print": "print('" + "x" * 19_900 + "')",
}


@pytest.mark.parametrize("name", list(WORST))
def test_the_worst_cells_known_cost_linear_time(name):
    source = WORST[name]
    assert len(source) <= MAX_CELL_CHARS
    assert_linear(source)


def test_the_issues_nested_prints_are_accepted_and_not_flagged():
    """The cell the issue measured is an honest-looking cell (a right answer, code that never runs): it
    is still accepted, now in linear time."""
    source = nested_prints()
    assert static_check.check(source) is None
    assert static_check.forged_output(source) is None


def test_a_forged_score_deep_in_nested_prints_is_still_found_at_its_outermost_print():
    source = "x = 1\n" + nested("print(", ")", 150, "'score: 51/51'") + "\nprint('fine')\n"
    found = static_check.forged_output(source)
    assert found is not None and found.line == 2 and found.code.startswith("print(print(")


PARSER_LIMITS = {
    "parentheses past the parser's 200": nested("(", ")", 201, "1"),
    "brackets past the parser's 200": nested("[", "]", 201, ""),
    "prints past the parser's 200": nested("print(", ")", 201, ""),
    "unary minus, 19,990 deep": "x = " + "-" * 19_990 + "1",
    "powers, 6,000 deep": "x = " + "**".join(["a"] * 6_000),
    "attributes, 9,990 deep": "x = a" + ".T" * 9_990,
    "calls, 9,990 deep": "x = a" + "()" * 9_990,
    "not, 4,990 deep": "x = " + "not " * 4_990 + "1",
    "a sum of 9,990 terms": "x = " + "+".join(["a"] * 9_990),
    "indentation past the parser's 100": "".join(" " * i + "if a:\n" for i in range(101)) + " " * 101 + "pass\n",
    "a NUL byte": "x = 1\0",
    "a lone surrogate": "x = '\udc80'",
    "one character over the limit": "x" * (MAX_CELL_CHARS + 1),
}


@pytest.mark.parametrize("name", list(PARSER_LIMITS))
def test_what_the_parser_cannot_take_is_the_students_error_in_linear_time(name):
    """Python's parser stops deep nesting with a SyntaxError, a RecursionError or a MemoryError: each is
    a refusal that quotes a line, never an exception in the grader; the scan for forged output, which
    runs on accepted cells only, takes it too. At Python's default recursion limit, as the grader's own
    process runs (a library an earlier test in this worker imported may have raised it)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        _parser_limit(PARSER_LIMITS[name], name)
    finally:
        sys.setrecursionlimit(limit)


def _parser_limit(source: str, name: str) -> None:
    refusal = static_check.check(source)
    assert refusal is not None, name
    assert "\n" not in str(refusal).strip() or len(str(refusal)) < 400
    assert static_check.forged_output(source) is None
    assert_linear(source)


# ---------------------------------------------------------------------------------------------
# Fuzzed: adversarial syntax at the parser's limits of depth, width and length

WRAPPERS = [("print(", ")"), ("(", ")"), ("[", "]"), ("{", "}"), ("-", ""), ("not ", ""), ("abs(", ")"),
            ("f'{", "}'"), ("lambda:", ""), ("a if ", " else b"), ("a[", "]"), ("print(print(", ",'a'))"),
            ("(y:=", ")"), ("[a for a in ", "]"), ("{'k':", "}"), ("a.T.sum(", ")")]
ITEMS = ["1", "a", "-a", "'a'", "'score'", "a[0]", "a.T", "a+b", "()", "[]", "f'{a}'", "*a", "x:=1", "lambda:0"]


@st.composite
def adversarial(draw) -> str:
    layers = draw(st.lists(st.tuples(st.sampled_from(WRAPPERS), st.integers(1, 250)), min_size=1, max_size=3))
    item = draw(st.sampled_from(ITEMS))
    width = draw(st.integers(1, 6_000))
    inner = "[" + ",".join([item] * width) + "]"
    for (opening, closing), depth in layers:
        inner = nested(opening, closing, depth, inner)
    lines = draw(st.integers(1, 4))
    source = "\n".join([draw(st.sampled_from(["x = " + inner, inner, dead_branch(inner)]))] * lines)
    return source[:draw(st.sampled_from([MAX_CELL_CHARS, MAX_CELL_CHARS + 1, 2 * MAX_CELL_CHARS]))]


@pytest.mark.slow
@settings(max_examples=120, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(adversarial())
def test_fuzzed_adversarial_syntax_costs_linear_time_and_never_raises(source):
    assert_linear(source)  # neither the check nor the scan raises, whatever the parser does with it


# ---------------------------------------------------------------------------------------------
# Extraction: what parsing the file costs, no more


def test_a_notebook_of_a_million_small_values_costs_what_parsing_it_costs(tmp_path):
    """Outputs and cells that are not answers are never read, and no longer validated value by value
    (which cost five times the parse: 17 s of CPU for a notebook at the size limit)."""
    nb = json.loads(nbformat.writes(submission()))
    nb["cells"] += [{"cell_type": "code", "id": f"n{i}", "metadata": {}, "source": "x", "execution_count": None,
                     "outputs": []} for i in range(20_000)]
    nb["cells"][-1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["a", "b"]}] * 100_000
    path = tmp_path / "big.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    content = path.read_bytes()
    parse = min(cpu(json.loads, content) for _ in range(2))
    s = extract.read("big", path, ANSWERS)
    assert s.error is None and s.cells == reference_sources()
    assert 0 < s.analysis_seconds <= 3 * parse + 0.2, (s.analysis_seconds, parse, len(content))


def test_answer_cells_are_still_validated(tmp_path):
    nb = json.loads(json.dumps(submission()))
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "dprobs")
    cell["execution_count"] = "twice"
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    s = extract.read("nb", path, ANSWERS)
    assert s.error is not None and s.error.startswith("not a readable notebook") and "twice" in s.error


def test_a_cell_that_is_not_a_mapping_is_still_refused(tmp_path):
    nb = json.loads(json.dumps(notebook([])))
    nb["cells"] = [{"cell_type": "markdown", "metadata": {}, "source": "", "id": "a"}, "cell"]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    s = extract.read("nb", path, ANSWERS)
    assert s.error == "not a readable notebook: cell 1 is str, not a mapping"


def test_many_submissions_with_one_id_are_told_apart_in_linear_time(tmp_path):
    """The same notebook name in 2,000 folders named on the command line: each id is tried once or
    twice, not against every id before it."""
    paths = []
    for i in range(2_000):
        (tmp_path / str(i)).mkdir()
        paths.append(tmp_path / str(i) / "nb.ipynb")
        paths[-1].write_text("{}")
    found = []
    spent = cpu(lambda: found.extend(extract.discover(paths)))
    assert len({sid for sid, _ in found}) == 2_000
    assert spent < 2.0, spent


# ---------------------------------------------------------------------------------------------
# The budget


def test_the_budget_counts_this_threads_cpu_and_says_why_in_one_line():
    budget = Budget(0.05)
    budget.check("reading")  # nothing spent yet
    time.sleep(0.1)  # waiting is no work
    budget.check("reading")
    end = time.thread_time() + 0.1
    while time.thread_time() < end:
        pass
    with pytest.raises(OverBudget) as raised:
        budget.check("checking the answer cells")
    message = str(raised.value)
    assert "\n" not in message and message.startswith("refused: checking the answer cells took over 0.05 s")
    assert "limits.analysis_cpu_seconds" in message


def test_screening_stops_between_cells_once_over_budget():
    cells = {grade_id: nested_prints() for grade_id in ANSWERS[:6]}
    static_check.check.cache_clear()
    static_check.forged_output.cache_clear()
    start = time.thread_time()
    with pytest.raises(OverBudget):
        static_check.screen(cells, Allow(), Budget(0.01))
    assert time.thread_time() - start < 0.5 + 2 * analysis_cpu(nested_prints())


def test_extraction_is_charged_to_the_same_budget(tmp_path):
    path = write(tmp_path / "nb.ipynb", submission())
    s = extract.read("nb", path, ANSWERS, cpu=1e-9)
    assert s.cells == {} and s.error.startswith("refused: reading the notebook took over")
    honest = extract.read("nb", path, ANSWERS)
    assert honest.error is None and 0 < honest.analysis_seconds < 1


def test_a_course_sets_the_budget(tmp_path):
    from grader.course import CourseError, parse

    raw = yaml.safe_load((ROOT / "course.yml").read_text())
    assert parse(raw, ROOT / "course.yml").limits.analysis_cpu == 10.0
    raw["limits"]["analysis_cpu_seconds"] = 2.5
    assert parse(raw, ROOT / "course.yml").limits.analysis_cpu == 2.5
    raw["limits"]["analysis_cpu_seconds"] = 0
    with pytest.raises(CourseError, match="analysis_cpu_seconds"):
        parse(raw, ROOT / "course.yml")


@pytest.mark.slow
def test_a_batch_refuses_the_submission_over_budget_and_grades_the_rest(tmp_path):
    """A real `backprop-ninja grade` with a tight budget: the nested-print notebook is not graded, with
    one line that says why, in the table, grades.csv and its result; the honest one is graded in full."""
    raw = yaml.safe_load((ROOT / "course.yml").read_text())
    raw["limits"]["analysis_cpu_seconds"] = 0.5
    raw["autotests"] = str(ROOT / "autotests")
    course = tmp_path / "course.yml"
    course.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    reference = reference_sources()
    write(tmp_path / "in" / "honest.ipynb", submission())
    write(tmp_path / "in" / "nested.ipynb",
          submission(replace={g: nested_prints(length=MAX_CELL_CHARS - 200 - len(reference[g]))
                              .replace("x = 1\n", reference[g]) for g in ANSWERS}))
    out = tmp_path / "out"
    started = time.monotonic()
    done = subprocess.run([shutil.which("backprop-ninja"), "grade", str(tmp_path / "in"), "--out", str(out),
                           "--course", str(course), "--jobs", "2"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    rows = {row["submission"]: row for row in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))}
    assert float(rows["honest"]["score"]) == COURSE.max_score, (rows, done.stdout)
    assert float(rows["nested"]["score"]) == 0
    reason = rows["nested"]["error"]
    assert reason.startswith("refused: checking the answer cells took over 0.5 s") and "\n" not in reason
    assert reason in done.stdout + done.stderr
    result = json.loads((out / "nested.json").read_text(encoding="utf-8"))
    assert result["output"] == reason
    # 29 cells of nested prints used to cost 100 s of CPU here; the budget stops them within a cell or two.
    assert time.monotonic() - started < 300


def test_what_a_child_reports_is_cut_before_the_trusted_process_works_on_it():
    """A child whose own cut was bypassed sends a megabyte of error text: the parent keeps a bounded part."""
    from grader.sandbox import parent

    detail = parent._detail({"status": "error", "error": "x" * 2**20, "error_type": "E" * 2**20, "line": 3,
                             "unknown": "y" * 2**20})
    assert detail == {"error": "x" * parent.DETAIL_CHARS, "error_type": "E" * parent.DETAIL_CHARS, "line": 3}


@pytest.mark.slow
def test_nbgrader_autograde_refuses_what_is_over_the_courses_budget_and_grades_the_rest(tmp_path, generated_course):
    """The same budget through `nbgrader autograde`, in a course `course init` made: a notebook whose answer
    cells cost too much to check, and one that costs too much to read (over a megabyte of small JSON values in its
    metadata), each score 0 with their one line, in the log and in every grade cell; the honest one is graded
    in full, and autograde exits 0. Autograde once read every notebook under the grader's default budget
    (10 s), not the course's: the second notebook was read in full and then refused for a step it never took
    ("checking the answer cells")."""
    from nbgrader.api import Gradebook

    from helpers.nbgrader_course import Course, set_answers

    course = Course(tmp_path, COURSE.course_id, COURSE.assignment).copied(generated_course)
    raw = yaml.safe_load((course.dir / "course.yml").read_text())
    raw["limits"]["analysis_cpu_seconds"] = 0.2
    (course.dir / "course.yml").write_text(yaml.safe_dump(raw, sort_keys=False))
    released = nbformat.read(course.released(), as_version=4)
    reference = reference_sources()
    answers = {
        "honest": reference,
        "nested": {g: nested_prints(answer=reference[g], length=MAX_CELL_CHARS - 200) for g in ANSWERS},
        "bulky": reference,
    }
    for student, sources in answers.items():
        nb = nbformat.from_dict(json.loads(nbformat.writes(released)))
        set_answers(nb, sources)
        if student == "bulky":
            nb.metadata["x"] = [[0, 1]] * 200_000
        write(course.submitted(student), nb)
    done = course.nbgrader("autograde", COURSE.assignment)
    assert done.returncode == 0 and "Traceback" not in done.stderr, str(done)
    why = {"nested": "refused: checking the answer cells took over 0.2 s",
           "bulky": "refused: reading the notebook took over 0.2 s"}
    with Gradebook(f"sqlite:///{course.dir / 'gradebook.db'}") as gb:
        scores = {s: gb.find_submission(COURSE.assignment, s).score for s in answers}
    assert scores == {"honest": COURSE.max_score, "nested": 0, "bulky": 0}, (scores, done.stderr[-3000:])
    for student, reason in why.items():
        lines = [line for line in done.stderr.splitlines() if reason in line]  # the log's note, and its warning
        assert lines and all(f"{student}/" in line and "analysis_cpu_seconds" in line for line in lines), \
            (reason, done.stderr[-3000:])
        graded = nbformat.read(course.autograded(student), as_version=4)
        outputs = [o.get("text", "") for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade")
                   for o in c.outputs]
        assert outputs and all(reason in text for text in outputs if text), (student, outputs[:3])
