"""grader.judge.suite: one pytest session judges a whole batch, with a constant number of pytest items.

A toy suite stands in for autotests/ here, so that what is tested is the plugin's contract: results per
submission, grade id and check; `Wrong` as feedback; any other exception as a suite error for that one
submission; a test that fails by itself as an error for every submission.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from grader import extract
from grader.judge import suite
from grader.sandbox import parent as sandbox

TOY_CONFTEST = '''
def pytest_collection_finish(session):
    with open(session.config.rootpath / "items.txt", "a") as f:
        f.write(f"{len(session.items)}\\n")
'''
TOY_SUITE = '''
import pytest
from grader.judge.suite import Note, Wrong

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


def _toy(tmp_path: Path) -> Path:
    autotests = tmp_path / "autotests"
    autotests.mkdir(parents=True)
    (autotests / "conftest.py").write_text(TOY_CONFTEST)
    (autotests / "test_toy.py").write_text(TOY_SUITE)
    (autotests / "pytest.ini").write_text("[pytest]\n")
    return autotests


def _batch(names: list[str]) -> dict[str, suite.Graded]:
    return {n: suite.Graded(extract.Submission(n, Path(f"{n}.ipynb")), sandbox.Attempt()) for n in names}


def _run(tmp_path: Path, names: list[str]):
    autotests = _toy(tmp_path)
    results = suite.run(_batch(names), cases=[], training=None, course=None, autotests=autotests)
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


def test_one_session_collects_once_and_judges_batch_after_batch(tmp_path):
    autotests = _toy(tmp_path)
    batches = [_batch(["right", "wrong-1"]), _batch(["noted"]), _batch(["wrong-2", "crash", "right-2"])]
    seen = []
    suite.run_batches(iter(batches), [], None, None, autotests,
                      lambda batch, results: seen.append((list(batch), sorted(results))))
    assert seen == [(["right", "wrong-1"], ["right", "wrong-1"]), (["noted"], ["noted"]),
                    (["wrong-2", "crash", "right-2"], ["crash", "right-2", "wrong-2"])]
    assert (autotests / "items.txt").read_text() == "3\n", "the suite was collected more than once"


def test_the_session_puts_no_handler_on_the_process_loggers(tmp_path):
    """The judge's thread runs pytest beside the grader's own thread, which records a batch through nbgrader and
    configures logging as it does. pytest's logging plugin put its handlers on the root logger and closed them as
    the session ended: that close and a logging.config.dictConfig in the other thread took logging's two locks
    in opposite orders, and `grade --gradebook` hung for good (found by a full CI run, then 1 in 40 in a loop)."""
    import logging

    autotests = _toy(tmp_path)
    before = list(logging.getLogger().handlers)
    during = []
    suite.run_batches(iter([_batch(["right"])]), [], None, None, autotests,
                      lambda batch, results: during.append(list(logging.getLogger().handlers)))
    assert during == [before], during


SHARED_CONFTEST = '''
import pytest

def _log(request, line):
    with open(request.config.rootpath / "fixtures.log", "a") as f:
        f.write(line + "\\n")

@pytest.fixture(scope="session")
def table(request):
    _log(request, "session built")
    yield []
    _log(request, "session torn down")

@pytest.fixture(scope="module")
def per_module(request):
    _log(request, "module built " + request.module.__name__.rsplit(".", 1)[-1])
    yield
    _log(request, "module torn down " + request.module.__name__.rsplit(".", 1)[-1])
'''
SHARED_SUITE = '''
import pytest

@pytest.mark.parametrize("grade_id", ["dprobs", "dcounts", "dh"])
def test_chain(grade_id, each, table, per_module):
    table.append(grade_id)
    each(lambda graded: None)
'''


def test_session_and_module_fixtures_of_the_suite_are_built_once_for_the_whole_stream(tmp_path):
    """A hidden suite may hold costly shared state (a catalogue, reference tensors) in a session-scoped
    fixture: it is built once for every item of every batch, and torn down once, when the session ends."""
    autotests = tmp_path / "autotests"
    autotests.mkdir()
    (autotests / "conftest.py").write_text(SHARED_CONFTEST)
    (autotests / "test_shared.py").write_text(SHARED_SUITE)
    (autotests / "pytest.ini").write_text("[pytest]\n")
    seen = []
    suite.run_batches(iter([_batch(["a", "b"]), _batch(["c"]), _batch(["d"])]), [], None, None, autotests,
                      lambda batch, results: seen.append(sorted(results)))
    assert seen == [["a", "b"], ["c"], ["d"]]
    assert all(len(r) == 3 for r in suite.run(_batch(["e"]), [], None, None, autotests).values())
    log = (autotests / "fixtures.log").read_text().splitlines()
    once = ["session built", "module built test_shared", "module torn down test_shared", "session torn down"]
    assert log == once + once, log  # two sessions: run_batches', then run's


def test_what_stops_the_stream_is_raised_once_pytest_is_done(tmp_path):
    autotests = _toy(tmp_path)

    def batches():
        yield _batch(["right"])
        raise KeyboardInterrupt

    kept = []
    with pytest.raises(KeyboardInterrupt):
        suite.run_batches(batches(), [], None, None, autotests, lambda batch, results: kept.append(results))
    assert [sorted(r) for r in kept] == [["right"]], "the batch finished before Ctrl-C must be handed on"


def test_a_suite_that_cannot_be_collected_is_an_error_not_an_empty_result(tmp_path):
    autotests = _toy(tmp_path)
    (autotests / "test_broken.py").write_text("def test_x(:\n")
    with pytest.raises(RuntimeError, match="could not be collected"):
        suite.run(_batch(["right"]), [], None, None, autotests)


def test_a_suite_reads_the_course_when_it_is_collected(tmp_path):
    """A suite parametrizes its tests by the course's grade ids before any fixture exists: the plugin
    puts the course in the config's stash (suite.COURSE) when pytest is configured."""
    autotests = _toy(tmp_path)
    (autotests / "conftest.py").write_text(
        "from grader.judge.suite import COURSE\n\n"
        "def pytest_generate_tests(metafunc):\n"
        "    metafunc.parametrize('grade_id', metafunc.config.stash[COURSE].grade_ids)\n")
    (autotests / "test_toy.py").unlink()
    # Its own module name: pytest's importlib mode reuses a module of the same name an earlier session
    # of this process imported.
    (autotests / "test_by_course.py").write_text("def test_chain(grade_id, each):\n    each(lambda graded: None)\n")

    class Course:
        grade_ids = ("dW", "db")

    results = suite.run(_batch(["right"]), [], None, Course(), autotests)
    assert sorted(results["right"]) == [("dW", "chain"), ("db", "chain")]
