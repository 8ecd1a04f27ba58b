"""The hidden pytest suite, run in the trusted process: one pytest session for a whole batch.

The suite (the course's `autotests/` folder) decides what is checked and how a mistake is named; this
plugin hands it the batch (configurations with their oracle values, and what each submission's
cells produced in the sandbox) and records one result per test, keyed by submission, grade id and
check. Tests signal a wrong answer by raising `Wrong`, whose text is the student's feedback.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader.exam import Case, Training
from grader.extract import Submission
from grader.sandbox import Attempt

PASSED, WRONG, ERROR = "passed", "wrong", "error"


class Wrong(Exception):
    """A wrong answer. `kind` is the comparison's status (e.g. "wrong", "squeezable", "blank")."""

    def __init__(self, feedback: str, kind: str = WRONG):
        super().__init__(feedback)
        self.feedback = feedback
        self.kind = kind


@dataclass
class Graded:
    submission: Submission
    attempt: Attempt


@dataclass(frozen=True)
class ItemResult:
    status: str  # PASSED, WRONG or ERROR (a bug in the suite itself, never the student's fault)
    kind: str = ""
    feedback: str = ""
    extra: dict = field(default_factory=dict)  # measurements for the record, kept out of the feedback


class _Plugin:
    def __init__(self, graded: dict[str, Graded], cases: list[Case], training: Training, course):
        self._graded = graded
        self._cases = cases
        self._training = training
        self._course = course
        self.results: dict[str, dict[tuple[str, str], ItemResult]] = {}

    def pytest_generate_tests(self, metafunc):
        if "submission" in metafunc.fixturenames:
            ids = list(self._graded)
            metafunc.parametrize("submission", [self._graded[i] for i in ids], ids=ids)

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
        outcome = yield
        report = outcome.get_result()
        if report.when != "call" and not report.failed:
            return
        params = getattr(item, "callspec", None)
        if params is None or "submission" not in params.params:
            return
        key = (params.params["grade_id"], item.originalname.removeprefix("test_"))
        graded_id = params.params["submission"].submission.id
        if call.excinfo is None:
            # A passing test may leave a note for the student, and measurements, with pytest's
            # record_property("note", ...) and record_property("extra", {...}).
            properties = dict(item.user_properties)
            result = ItemResult(PASSED, feedback=properties.get("note", ""), extra=properties.get("extra", {}))
        elif isinstance(call.excinfo.value, Wrong):
            result = ItemResult(WRONG, call.excinfo.value.kind, call.excinfo.value.feedback)
        else:
            result = ItemResult(ERROR, "", f"internal grader error in {item.nodeid}: {call.excinfo.exconly()}")
        self.results.setdefault(graded_id, {})[key] = result


def run(graded: dict[str, Graded], cases: list[Case], training: Training, course,
        autotests: Path) -> dict[str, dict[tuple[str, str], ItemResult]]:
    """Results of every test for every submission: {submission id: {(grade_id, check): result}}."""
    plugin = _Plugin(graded, cases, training, course)
    args = [str(autotests), "-c", str(autotests / "pytest.ini"), "--rootdir", str(autotests),
            "-p", "no:cacheprovider", "-p", "no:terminal", "--capture=no", "--import-mode=importlib"]
    code = pytest.main(args, plugins=[plugin])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        raise RuntimeError(f"the hidden suite in {autotests} did not run (pytest exit code {int(code)})")
    return plugin.results
