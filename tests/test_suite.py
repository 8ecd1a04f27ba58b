"""grader.suite: one pytest session judges a whole batch, with a constant number of pytest items.

A toy suite stands in for autotests/ here, so that what is tested is the plugin's contract: results per
submission, grade id and check; `Wrong` as feedback; any other exception as a suite error for that one
submission; a test that fails by itself as an error for every submission.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from grader import extract, sandbox, suite

TOY_CONFTEST = '''
def pytest_collection_finish(session):
    (session.config.rootpath / "items.txt").write_text(str(len(session.items)))
'''
TOY_SUITE = '''
import pytest
from grader.suite import Note, Wrong

def _judge(graded):
    name = graded.submission.id
    if name.startswith("wrong"):
        raise Wrong(f"{name} is wrong", "wrong", "a named mistake")
    if name == "crash":
        raise ZeroDivisionError("a bug in the suite")
    return Note("fine", {"ms": 1}) if name == "noted" else None

@pytest.mark.parametrize("grade_id", ["dprobs", "dcounts"])
def test_chain(grade_id, each):
    each(_judge)

@pytest.mark.parametrize("grade_id", ["dprobs"])
def test_local(grade_id, each):
    assert False, "this test is broken"
'''


def _run(tmp_path: Path, names: list[str]):
    autotests = tmp_path / "autotests"
    autotests.mkdir(parents=True, exist_ok=True)
    (autotests / "conftest.py").write_text(TOY_CONFTEST)
    (autotests / "test_toy.py").write_text(TOY_SUITE)
    (autotests / "pytest.ini").write_text("[pytest]\n")
    graded = {n: suite.Graded(extract.Submission(n, Path(f"{n}.ipynb")), sandbox.Attempt()) for n in names}
    results = suite.run(graded, cases=[], training=None, course=None, autotests=autotests)
    return results, int((autotests / "items.txt").read_text())


def test_each_submission_gets_its_own_result_per_grade_id_and_check(tmp_path):
    results, _ = _run(tmp_path, ["right", "noted", "wrong-1", "crash"])
    assert results["right"][("dprobs", "chain")] == suite.ItemResult(suite.PASSED)
    assert results["noted"][("dcounts", "chain")] == suite.ItemResult(suite.PASSED, feedback="fine", extra={"ms": 1})
    wrong = results["wrong-1"][("dprobs", "chain")]
    assert (wrong.status, wrong.kind, wrong.feedback, wrong.mistake) == (
        suite.WRONG, "wrong", "wrong-1 is wrong", "a named mistake")
    crash = results["crash"][("dprobs", "chain")]
    assert crash.status == suite.ERROR and "ZeroDivisionError: a bug in the suite" in crash.feedback


def test_a_test_that_fails_by_itself_is_an_error_for_every_submission(tmp_path):
    results, _ = _run(tmp_path, ["right", "wrong-1"])
    for name in ("right", "wrong-1"):
        item = results[name][("dprobs", "local")]
        assert item.status == suite.ERROR and "this test is broken" in item.feedback, item


def test_the_number_of_pytest_items_does_not_grow_with_the_batch(tmp_path):
    _, few = _run(tmp_path / "few", ["right"])
    _, many = _run(tmp_path / "many", [f"wrong-{i}" for i in range(300)])
    assert few == many == 3
