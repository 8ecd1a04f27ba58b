"""The course's hidden suite (autotests/) grades an exercise it was never written for: the tests' tiny
exercise without its whole-run check, whose answers are made here by hand (no sandbox), judged by the
real suite through the grader's plugin, with its grade ids taken from the course's exercise when the
suite is collected."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from exercises.tiny_relu import UNTRAINED
from test_diagnose import tiny_cases

from grader.course import Feedback, Tolerance
from grader.extract import Submission
from grader.judge import suite
from grader.judge.exam import CHAIN, checks
from grader.sandbox.parent import Attempt, Outcome

AUTOTESTS = Path(__file__).resolve().parents[1] / "autotests"


def _graded(name: str, cases, answer_of, cells: dict[str, str] | None = None) -> suite.Graded:
    """A submission whose every answer, on every case and check, is `answer_of(answer, case, check)`; `cells`:
    the source of some of its answer cells, as the grader extracts them."""
    outcomes = {(a.grade_id, check, case.config.name): Outcome("tensor", tensor=answer_of(a, case, check))
                for a in cases[0].exercise.answers for check in checks(a) for case in cases}
    return suite.Graded(Submission(name, Path(f"{name}.ipynb"), cells=cells or {}), Attempt(outcomes))


def test_the_hidden_suite_grades_any_exercise():
    exercise = UNTRAINED
    cases = tiny_cases(exercise)

    def right(answer, case, check):
        return case.expected(answer, check)

    def wrong(answer, case, check):
        n = case.values["X"].shape[0]
        if answer.grade_id == "fit_db":
            return n * right(answer, case, check)
        if answer.grade_id == "dh" and check == CHAIN:
            return (case.values["h"] > 0) * case.truth["da"]
        if answer.grade_id == "dW" and check == CHAIN:  # the cell below: h read where e is needed
            return case.values["h"].T @ case.truth["dh"]
        return right(answer, case, check)

    course = SimpleNamespace(exercise=exercise, tolerance=Tolerance(), feedback=Feedback())
    cells = {exercise.by_grade_id["dW"].cell_id: "dW = h.T @ dh\n"}
    results = suite.run({"right": _graded("right", cases, right), "wrong": _graded("wrong", cases, wrong, cells)},
                        cases, None, course, AUTOTESTS)
    expected = {(a.grade_id, check) for a in exercise.answers for check in checks(a)}
    assert set(results["right"]) == expected, "one result per answer and check, and no training check"
    assert {r.status for r in results["right"].values()} == {suite.PASSED}
    failed = {key: r for key, r in results["wrong"].items() if r.status != suite.PASSED}
    assert sorted(failed) == [("dW", CHAIN), ("dh", CHAIN), ("fit_db", CHAIN)]
    # The cell's code says which tensor it reads in place of e; its values confirm it (another shape, so no
    # search of the values alone names it).
    assert failed[("dW", CHAIN)].mistake == "your dW reads h where the derivative needs e"
    assert failed[("fit_db", CHAIN)].feedback.startswith("b: wrong values")
    assert failed[("fit_db", CHAIN)].mistake == "your db is n times too large"
    assert failed[("dh", CHAIN)].mistake.startswith("your dh misses the branch through z")


def test_the_course_conftest_only_calls_the_judge():
    """Every course copies autotests/ (course init): judging kept in grader.judge reaches old courses too,
    so the course's conftest holds the pytest hook and fixtures that call it, nothing more."""
    import ast

    source = (Path(__file__).resolve().parents[1] / "autotests" / "conftest.py").read_text()
    functions = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
    assert len(source.splitlines()) <= 60
    assert all(f.name == "pytest_generate_tests" or any(ast.unparse(d).startswith("pytest.fixture")
                                                        for d in f.decorator_list) for f in functions)
