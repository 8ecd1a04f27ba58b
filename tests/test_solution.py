"""`backprop-ninja solution`: the reference of one gradient, explained line by line, only for a notebook
that holds an attempt at it; every other case is one line of error, never a traceback."""
from __future__ import annotations

import ast
import dataclasses
import shutil
import textwrap

import click
import nbformat
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from grader.cli import main
from grader.course import material
from grader.exercise import Sizes, load
from grader.student import solution
from helpers.notebooks import submission, write
from helpers.paths import COURSE, COURSE_FILE, ROOT, SOLVED, STUB
from solutions import make_notebooks, reference
from solutions.reference import forward

EXERCISE = load("makemore-mlp")
NETWORK, EX4 = EXERCISE.network, EXERCISE.functions[0]
EX4_STUB = next(c.source for c in nbformat.read(STUB, as_version=4).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == EX4.cell)
WRONG_DPROBS = "dprobs = 1.0 / probs\n"


@pytest.fixture(autouse=True)
def _outside_any_course(tmp_path, monkeypatch):
    """`solution` run where no course.yml is: in the checkout's top folder it says, rightly, that the
    checkout's course.yml is no course the caller made or named, a line these tests do not expect."""
    monkeypatch.chdir(tmp_path)


def run(*args, color=False):
    return CliRunner().invoke(main, ["solution", *map(str, args)], color=color)


def one_line_error(result, *fragments):
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # a ClickException, not a crash
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def reference_lines(grade_id):
    """The reference cell for `grade_id`, comments included, as the command prints it (indented)."""
    return [f"    {line}" for line in reference.cells()[grade_id].splitlines() if line.strip()]


def in_order(lines, output):
    printed = output.splitlines()
    positions = [printed.index(line) for line in lines]
    return positions == sorted(positions)


def notebook_with(tmp_path, name, cells):
    return write(tmp_path / f"{name}.ipynb", submission(replace=cells))


# ---------------------------------------------------------------------------------------------
# The gate


def test_a_blank_answer_cell_is_refused():
    result = run("dprobs", "--notebook", STUB)
    line = one_line_error(result, "try it first", str(STUB), "dprobs", "--force shows it anyway")
    assert "(1.0 / probs)" not in result.output and "1/probs" not in line


def test_a_wrong_attempt_opens_the_reference_with_every_explanation(tmp_path):
    nb = notebook_with(tmp_path, "wrong", {"dprobs": WRONG_DPROBS})
    result = run("dprobs", "--notebook", nb)
    assert result.exit_code == 0, result.output
    lines = reference_lines("dprobs")
    assert any(line.strip().startswith("# ") for line in lines)
    assert in_order(lines, result.output)
    assert "dprobs (exercise 1)" in result.output and str(SOLVED) in result.output


def test_force_opens_a_blank_cell_and_needs_no_notebook():
    for args in (("dcounts", "--notebook", STUB, "--force"), ("dcounts", "--force")):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert in_order(reference_lines("dcounts"), result.output)


def test_without_notebook_or_force_it_is_a_usage_error():
    result = run("dprobs")
    assert result.exit_code == 2 and "--notebook is required" in result.output


def test_only_the_asked_cell_counts(tmp_path):
    """dprobs blank, everything else answered: dprobs is refused, dcounts opens."""
    nb = notebook_with(tmp_path, "partial", {"dprobs": "dprobs = None  # TODO\n"})
    one_line_error(run("dprobs", "--notebook", nb), "try it first", "gives dprobs no value but None")
    assert run("dcounts", "--notebook", nb).exit_code == 0


def test_a_missing_answer_cell_is_refused(tmp_path):
    nb = write(tmp_path / "dropped.ipynb", submission(drop=("dbnvar",)))
    one_line_error(run("dbnvar", "--notebook", nb), "try it first", "no answer cell with grade id 'dbnvar'",
                   "--force")


def test_exercise2_has_its_own_cell_and_reference(tmp_path):
    nb = notebook_with(tmp_path, "ex2", {"ex2_dlogits": "dlogits = None  # TODO\n"})
    one_line_error(run("ex2_dlogits", "--notebook", nb), "try it first")
    result = run("dlogits", "--notebook", nb)  # exercise 1's dlogits is answered
    assert result.exit_code == 0 and in_order(reference_lines("dlogits"), result.output)
    assert "F.softmax" not in result.output


# ---------------------------------------------------------------------------------------------
# Exercise 4: one function, a gradient per parameter


def ex4_notebook(tmp_path, name, source):
    return notebook_with(tmp_path, name, {EX4.cell: source})


def test_exercise4_opens_only_the_gradients_written(tmp_path):
    written = EX4_STUB.replace("    dW1 = None  # TODO\n", "    dW1 = 2 * embcat.T\n")
    assert written != EX4_STUB
    nb = ex4_notebook(tmp_path, "ex4-dW1", written)
    result = run("ex4_dW1", "--notebook", nb)
    assert result.exit_code == 0, result.output
    assert "    dW1 = embcat.T @ dhprebn" in result.output.splitlines()
    assert "index_add_" not in result.output and "dW2 = " not in result.output  # other gradients' lines
    for other in ("ex4_dC", "ex4_db2"):
        one_line_error(run(other, "--notebook", nb), "try it first", "manual_backward", "(as released)")


def test_the_released_exercise4_stub_opens_nothing(tmp_path):
    nb = ex4_notebook(tmp_path, "ex4-stub", EX4_STUB)
    for param in NETWORK.parameters:
        one_line_error(run(f"ex4_d{param}", "--notebook", nb), "try it first", f"d{param}")


@pytest.mark.parametrize("source, attempted", [
    (EX4_STUB, False),
    (EX4_STUB.replace('"W1": dW1', '"W1": embcat.T'), True),  # an expression returned directly
    (EX4_STUB.replace('"W1": dW1', '"W1": None'), False),
    (EX4_STUB.replace("    dW1 = None  # TODO\n", "    dW1 = None\n    dW1 = 0 * params['W1']\n"), True),
    (EX4_STUB.replace("    dW1 = None  # TODO\n", "    dW1 = (\n"), True),  # does not parse: still an attempt
    ('def manual_backward(params, cache, Yb):\n    """Mine."""\n    grads = {}\n'
     '    grads["W1"] = params["W1"] * 0\n    return grads\n', True),  # no dict literal: any work counts
    ('def manual_backward(params, cache, Yb):\n    """Mine."""\n    return {}\n', False),
    ("x = 1\n", False),  # no manual_backward at all
], ids=["stub", "expression", "returns-None", "reassigned", "syntax-error", "restructured", "empty",
        "no-function"])
def test_what_counts_as_an_attempt_in_exercise4(source, attempted):
    assert (solution.blank_reason(EXERCISE, EXERCISE.by_grade_id["ex4_dW1"], source) is None) == attempted


@pytest.mark.parametrize("source, attempted", [
    ("dC = None  # TODO\n", False),
    ("\n# thinking...\n", False),
    ("dC = None  # TODO\ndC = torch.zeros_like(C)\n", True),
    ("dC = None  # TODO\nfor i in range(n):\n    dC[Xb[i]] += demb[i]\n", True),
    ("dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.view(-1), demb.view(-1, C.shape[1]))\n", True),
    ("dC = 0 +\n", True),
    ("dC, other = None, None\n", False),
], ids=["stub", "comment-only", "assigned", "into-a-blank", "in-place", "syntax-error", "tuple-of-None"])
def test_what_counts_as_an_attempt_in_exercise1(source, attempted):
    assert (solution.blank_reason(EXERCISE, EXERCISE.by_grade_id["dC"], source) is None) == attempted


@pytest.mark.parametrize("param", NETWORK.parameters)
def test_exercise4_lines_shown_compute_the_gradient_on_their_own(param, make_batch):
    """The statements shown for one parameter, run alone, give the reference function's gradient."""
    ref = solution.reference(EXERCISE, EXERCISE.by_grade_id[f"ex4_d{param}"], SOLVED)
    body = "\n".join(line for step in ref.steps for line in step.code)
    namespace = {"torch": torch, "F": F}
    exec(f"def part(params, cache, Yb):\n{textwrap.indent(body, '    ')}\n    return d{param}\n", namespace)
    params, Xb, Yb = make_batch(Sizes(n=7, vocab=6, block_size=3, n_embd=2, n_hidden=5), seed=1)
    values = forward(params, Xb, Yb)
    expected = reference.manual_backward(params, values, Yb)[param]
    assert torch.allclose(namespace["part"](params, values, Yb), expected, rtol=1e-12, atol=1e-14)
    assert sum(len(s.statements) for s in ref.steps) < ref.total or param == "C"


# ---------------------------------------------------------------------------------------------
# Every line of every reference is explained, in the solved notebook and nowhere in the stub


def full_reference(answer):
    if answer.cell_id != EX4.cell:
        return solution.reference(EXERCISE, answer, SOLVED).steps
    shown = [solution.reference(EXERCISE, a, SOLVED) for a in EXERCISE.answers if a.cell_id == EX4.cell]
    steps = list({step.code: step for ref in shown for step in ref.steps}.values())  # each parse is new
    assert sum(len(s.statements) for s in steps) == shown[0].total, "a statement of manual_backward never shown"
    return steps


@pytest.mark.parametrize("grade_id", list(dict.fromkeys(a.cell_id for a in EXERCISE.answers)))
def test_every_reference_statement_has_its_explanation(grade_id):
    answer = EXERCISE.by_grade_id.get(grade_id) or next(a for a in EXERCISE.answers if a.cell_id == grade_id)
    steps = full_reference(answer)
    assert steps
    stub_lines, solved_lines = ({line.strip() for c in nbformat.read(path, as_version=4).cells
                                 for line in c.source.splitlines()} for path in (STUB, SOLVED))
    for step in steps:
        assert 1 <= len(step.explanation) <= 3, (grade_id, step.code)
        assert len(" ".join(step.explanation).split()) >= 6, (grade_id, step.explanation)
        # A function's reference computes again, under one comment, the forward lines its cache leaves out.
        recomputed = {f"{s.name} = {s.code}" for s in NETWORK.steps}
        assert len(step.statements) <= 2 or set(step.code) <= recomputed, (grade_id, step.code)
        for line in step.explanation:
            assert f"# {line}" in solved_lines and f"# {line}" not in stub_lines
    # Every code line of the reference cell is in some step: nothing is shown unexplained or left out.
    code_lines = [line.strip() for step in steps for line in step.code]
    cell = reference.cells()[grade_id]
    statements = ast.parse(cell).body
    if grade_id == EX4.cell:
        statements = statements[0].body[1:-1]  # the docstring and return statement stay in the stub
    expected = [line.strip() for s in statements for line in ast.get_source_segment(cell, s).splitlines()]
    assert sorted(code_lines) == sorted(expected)


# ---------------------------------------------------------------------------------------------
# Bad input: one line each


def test_an_unknown_grade_id_lists_close_matches():
    one_line_error(run("dprob", "--force"), "unknown grade id 'dprob'", "did you mean", "dprobs")
    one_line_error(run("zzzz", "--force"), "unknown grade id 'zzzz'", "dlogprobs", "ex4_dbnbias")


def test_exercise4_cell_and_training_check_name_the_gradients():
    for grade_id in (EX4.cell, "ex4_training"):
        one_line_error(run(grade_id, "--force"), "no reference of its own", "ex4_dC", "ex4_dbnbias")


def test_a_missing_notebook_is_a_usage_error(tmp_path):
    missing = tmp_path / "nope.ipynb"
    result = run("dprobs", "--notebook", missing)
    assert result.exit_code == 2 and "does not exist" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b"{ this is not json", "not valid JSON"),
    (b'{"cells": 3, "nbformat": 4}', "not a readable notebook"),
], ids=["binary", "not-json", "not-a-notebook"])
def test_an_unreadable_notebook_is_one_line(tmp_path, content, message):
    nb = tmp_path / "broken.ipynb"
    nb.write_bytes(content)
    one_line_error(run("dprobs", "--notebook", nb), str(nb), message)


def test_a_missing_solved_notebook_is_one_line(tmp_path):
    nb = notebook_with(tmp_path, "wrong", {"dprobs": WRONG_DPROBS})
    missing = tmp_path / "no-solved.ipynb"
    one_line_error(run("dprobs", "--notebook", nb, "--solved", missing), str(missing), "no such file")


def test_without_a_checkout_or_course_it_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setattr(material, "root", lambda: tmp_path / "an-install-without-material")
    nb = notebook_with(tmp_path, "wrong", {"dprobs": WRONG_DPROBS})
    monkeypatch.chdir(tmp_path)
    one_line_error(run("dprobs", "--notebook", nb), "no solved notebook found", "pass --solved")
    shutil.copy(ROOT / "course.yml", tmp_path / "course.yml")  # a course.yml, but no solved notebook by it
    one_line_error(run("dprobs", "--notebook", nb, "--course", "course.yml"), "no solved notebook found",
                   str(tmp_path / make_notebooks.SOLVED), "pass --solved")


def test_a_course_directory_source_notebook_is_the_reference(tmp_path, monkeypatch):
    """`course init` writes the solved notebook as nbgrader's source: found beside its course.yml."""
    monkeypatch.setattr(material, "root", lambda: tmp_path / "an-install-without-material")
    course = tmp_path / "course"
    source = course / "source" / "backprop_ninja" / "backprop_ninja.ipynb"
    source.parent.mkdir(parents=True)
    shutil.copy(SOLVED, source)
    shutil.copy(ROOT / "course.yml", course / "course.yml")
    result = run("db2", "--force", "--course", course / "course.yml")
    assert result.exit_code == 0, result.output
    assert str(source) in result.output and in_order(reference_lines("db2"), result.output)


def test_the_students_notebook_is_no_reference(tmp_path):
    nb = notebook_with(tmp_path, "wrong", {"dprobs": WRONG_DPROBS})
    one_line_error(run("dprobs", "--notebook", nb, "--solved", STUB), str(STUB), "is it the solved notebook")


# ---------------------------------------------------------------------------------------------
# The terminal


def test_color_only_on_a_terminal(tmp_path):
    plain = run("dbnvar", "--force")
    assert plain.exit_code == 0 and "\x1b[" not in plain.output
    colored = run("dbnvar", "--force", color=True)
    assert "\x1b[" in colored.output
    assert click.unstyle(colored.output) == plain.output


# ---------------------------------------------------------------------------------------------
# A graded course (course.yml `solutions: off`): no reference, even where the full package is installed


def graded_notebook(path, answers=None):
    """The released notebook of a course whose course.yml says `solutions: off`, as course init writes it."""
    nb = submission(replace=answers or {"dprobs": WRONG_DPROBS})
    nb.cells.insert(0, nbformat.v4.new_code_cell(material.with_solutions(
        "COURSE = {'tolerance': [1e-05, 1e-08], 'hints': 'named'}\n", "off")))
    return write(path, nb)


def test_a_graded_courses_notebook_opens_no_reference_even_forced(tmp_path):
    nb = graded_notebook(tmp_path / "backprop_ninja.ipynb")
    for args in (("dprobs", "--notebook", nb), ("dprobs", "--notebook", nb, "--force")):
        result = run(*args)
        line = one_line_error(result, "solutions: off", str(nb))
        assert "1.0 / probs" not in result.output and "(1.0 / probs)" not in line


def test_force_without_a_notebook_is_refused_beside_a_graded_courses_notebook(tmp_path, monkeypatch):
    """nbgrader's fetch puts the notebook in a folder of the student's home: --force alone, from the home."""
    (tmp_path / "backprop_ninja").mkdir()
    graded_notebook(tmp_path / "backprop_ninja" / "backprop_ninja.ipynb")
    monkeypatch.chdir(tmp_path)
    result = run("dcounts", "--force")
    line = one_line_error(result, "solutions: off", "backprop_ninja.ipynb")
    # found by looking around, where the student (or an instructor with another course's notebooks there) did not
    # name it: said where it looked, and what to do
    assert "solution looks at the notebooks in this folder and one below it" in line and \
        "run it from a folder of this course's alone" in line, line


def test_a_graded_courses_course_yml_opens_no_reference(tmp_path, monkeypatch):
    course = tmp_path / "course.yml"
    course.write_text(COURSE_FILE.read_text(encoding="utf-8") + "solutions: off\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    one_line_error(run("dcounts", "--force", "--course", "course.yml"), "solutions: off", str(course.resolve()))


def test_a_gated_courses_notebook_still_opens_it(tmp_path, monkeypatch):
    (tmp_path / "backprop_ninja").mkdir()
    write(tmp_path / "backprop_ninja" / "backprop_ninja.ipynb", submission())
    monkeypatch.chdir(tmp_path)
    result = run("dcounts", "--force")
    assert result.exit_code == 0 and in_order(reference_lines("dcounts"), result.output), result.output


def test_the_lectures_solved_notebook_is_never_a_candidate_for_another_exercise():
    """A variant (or an exercise of the course's own) graded from a checkout's course.yml: the checkout's
    solved notebook is the lecture's, so only the course's own source notebook is looked at."""
    variant = dataclasses.replace(COURSE, exercise=load("makemore-mlp/relu-none"))
    assert solution.candidates(variant) == [COURSE.root / "source" / COURSE.assignment / COURSE.notebook]
    assert ROOT / "solutions" / "backprop_ninja_solved.ipynb" in solution.candidates(COURSE)


def test_lines_with_nothing_to_explain_stay_together():
    """Reading the cache has no explanation: those lines are one block, and each explained step a block of
    its own (a blind instructor found every statement of a derived function a blank line apart)."""
    ref = solution.reference(EXERCISE, EXERCISE.by_grade_id["ex4_dW1"], SOLVED)
    plain = [dataclasses.replace(s, explanation=()) for s in ref.steps[:2]]  # as a derived function's cache reads
    shown = click.unstyle(solution.render(dataclasses.replace(ref, steps=(*plain, *plain, ref.steps[-1]))))
    together = "\n".join(f"    {line}" for s in (*plain, *plain) for line in s.code)
    assert plain and together in shown
    assert f"{together}\n\n    # " in shown
