"""The hidden pytest suite, run in the trusted process: one pytest session for a whole batch.

The suite (the course's `autotests/` folder) decides what is checked and how a mistake is named; this
plugin hands it the batch (configurations with their oracle values, and what each submission's cells
produced in the sandbox) and records one result per submission, grade id and check.

Tests are parametrized by grade id only, and each one judges every submission of the batch through
the `each` fixture, so the number of pytest items (and pytest's cost per item) does not grow with the
class. A judging function signals a wrong answer by raising `Wrong`, whose text is the student's
feedback; anything else it raises is a bug in the suite, recorded for that submission alone.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader import derive
from grader.extract import Submission
from grader.judge import neighbourhood
from grader.judge.exam import Case, Training
from grader.judge.scoring import ERROR, PASSED, WRONG, ItemResult
from grader.sandbox.parent import Attempt
from grader.vocabulary import Match

# The course, in the pytest config's stash while the suite is collected: a suite parametrizes its tests
# by the grade ids of the exercise the course grades (`config.stash[COURSE].exercise`).
COURSE = pytest.StashKey()


class Wrong(Exception):
    """A wrong answer. `kind` is the comparison's Match (wrong, squeezable) or why the cell gave no tensor
    to compare (its Status, "memory", "not-run"); `mistake` names the mistake when the suite recognised it
    (for the class report)."""

    def __init__(self, feedback: str, kind: str = Match.WRONG, mistake: str = "", named: bool | None = None):
        super().__init__(feedback)
        self.feedback = feedback
        self.kind = kind
        self.mistake = mistake
        # Whether `mistake` names one, or is only hints ("right in 11 of 256 entries"): a suite written for an
        # earlier grader gives none, and its mistakes were names
        self.named = bool(mistake) if named is None else named


@dataclass(frozen=True)
class Note:
    """What a judging function may return for a right answer: a line for the student, and measurements
    for the record (kept out of the feedback, since they differ from run to run)."""

    text: str = ""
    extra: dict = field(default_factory=dict)


@dataclass
class Graded:
    submission: Submission
    attempt: Attempt


ItemResults = dict[str, dict[tuple[str, str], ItemResult]]  # {submission id: {(grade_id, check): result}}


class _Plugin:
    def __init__(self, batches: Iterable[dict[str, Graded]], cases: list[Case], training: Training, course,
                 on_results: Callable[[dict[str, Graded], ItemResults], None]):
        self._batches = batches
        self._cases = cases
        self._training = training
        self._course = course
        self._on_results = on_results
        self._graded: dict[str, Graded] = {}
        self.results: ItemResults = {}
        self.raised: BaseException | None = None

    def pytest_configure(self, config):
        config.stash[COURSE] = self._course

    def pytest_runtestloop(self, session):
        """Collect once, then run every test on each batch as it arrives, handing its results on before
        the next batch is asked for: one session however large the class, and memory for one batch.
        Each item runs with the item that follows it as pytest's `nextitem`, the last of a batch with the
        first (of the next batch), so session- and module-scoped fixtures of the suite are built once,
        not once per item; whatever is still set up when the stream ends is torn down by pytest as the
        session finishes (knowing which batch is the last would hold each batch's results back until
        the next one is ready). Whatever stops the loop (Ctrl-C, a full disk) is kept and raised again
        once pytest has finished, rather than being reported by pytest as its own failure."""
        try:
            if session.testsfailed:
                raise RuntimeError(f"the hidden suite could not be collected ({session.testsfailed} error(s))")
            items = session.items
            # A lone item followed by itself would keep its own function-scoped fixtures.
            following = [*items[1:], items[0]] if len(items) > 1 else [None] * len(items)
            for graded in self._batches:
                self._graded, self.results = graded, {}
                for item, nextitem in zip(items, following, strict=True):
                    item.ihook.pytest_runtest_protocol(item=item, nextitem=nextitem)
                self._on_results(graded, self.results)
        except BaseException as exc:  # noqa: B036 - re-raised by run_batches, once pytest is done
            self.raised = exc
        return True

    @staticmethod
    def _key(item) -> tuple[str, str] | None:
        params = getattr(item, "callspec", None)
        if params is None or "grade_id" not in params.params:
            return None
        return params.params["grade_id"], item.originalname.removeprefix("test_")

    @pytest.fixture
    def each(self, request):
        """`each(judge)` calls judge(graded) for every submission of the batch and records the result
        under this test's grade id and check."""

        def run(judge) -> None:
            key = self._key(request.node)
            if key is None:
                raise TypeError(f"{request.node.nodeid}: a test using `each` must be parametrized by grade_id")
            for graded_id, graded in self._graded.items():
                try:
                    note = judge(graded) or Note()
                except Wrong as wrong:
                    result = ItemResult(WRONG, wrong.kind, wrong.feedback, mistake=wrong.mistake, named=wrong.named)
                except Exception as exc:
                    result = ItemResult(ERROR, "", f"internal grader error in {request.node.nodeid}: "
                                                   f"{type(exc).__name__}: {exc}")
                else:
                    result = ItemResult(PASSED, feedback=note.text, extra=note.extra)
                self.results.setdefault(graded_id, {})[key] = result

        return run

    @pytest.fixture(scope="session")
    def cases(self):
        return self._cases

    @pytest.fixture(scope="session")
    def training(self):
        return self._training

    @pytest.fixture(scope="session")
    def course(self):
        return self._course

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        """A test that failed by itself (a broken fixture, an assertion of its own) is a suite error for
        every submission it was meant to judge."""
        outcome = yield
        report = outcome.get_result()
        key = self._key(item)
        if not report.failed or key is None:
            return
        result = ItemResult(ERROR, "", f"internal grader error in {item.nodeid}: {call.excinfo.exconly()}")
        for graded_id in self._graded:
            self.results.setdefault(graded_id, {})[key] = result


# What the hidden suite's pytest reads of the environment, as it runs: no plugin autoloaded, no options or
# plugins named by the grader's own environment (None: unset).
SUITE_ENVIRONMENT = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": None, "PYTEST_PLUGINS": None}


def run_batches(batches: Iterable[dict[str, Graded]], cases: list[Case], training: Training, course,
                autotests: Path, on_results: Callable[[dict[str, Graded], ItemResults], None]) -> None:
    """One pytest session for every batch: `on_results(batch, results)` receives, batch by batch, the
    results of every test for every submission: {submission id: {(grade_id, check): result}}."""
    neighbourhood.use_rule_table(derive)  # the grader names slips with the rule table itself
    plugin = _Plugin(batches, cases, training, course, on_results)
    # No assertion rewriting (the suite reports through Wrong, not assert), no unraisable-exception plugin,
    # whose five gc.collect() calls over the grader's heap cost more than judging a class, and no logging
    # plugin: its handlers sit on the process's root logger, which the grader's own thread (nbgrader, while it
    # records a batch) configures and logs to, and closing them as the session ends deadlocked with that.
    args = [str(autotests), "-c", str(autotests / "pytest.ini"), "--rootdir", str(autotests),
            "-p", "no:cacheprovider", "-p", "no:terminal", "-p", "no:unraisableexception", "-p", "no:logging",
            "--assert=plain",
            "--capture=no", "--import-mode=importlib"]
    # Nor bytecode, nor any plugin the graders' environment happens to hold (pytest-randomly reseeds the random
    # generators, pytest-benchmark makes .benchmarks/): the suite's folder is the course's, which its staff's
    # group shares, and a folder made there with one TA's umask is one no other TA can replace (course check
    # names it); the verdicts are the suite's alone.
    # Nor options from the environment: a TA's PYTEST_ADDOPTS ("-k ...", "-x") would deselect or stop tests, and
    # PYTEST_PLUGINS load plugins, in the suite whose verdicts are the grades.
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    saved = {name: os.environ.get(name) for name in SUITE_ENVIRONMENT}
    for name, value in SUITE_ENVIRONMENT.items():
        os.environ.pop(name, None)
        if value is not None:
            os.environ[name] = value
    try:
        code = pytest.main(args, plugins=[plugin])
    finally:
        sys.dont_write_bytecode = writes
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value
    if plugin.raised is not None:
        raise plugin.raised
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise RuntimeError(f"the hidden suite in {autotests} did not run (pytest exit code {int(code)})")


def run(graded: dict[str, Graded], cases: list[Case], training: Training, course, autotests: Path) -> ItemResults:
    """The results of one batch (see run_batches)."""
    kept: list[ItemResults] = []
    run_batches([graded], cases, training, course, autotests, lambda batch, results: kept.append(results))
    return kept[0]
