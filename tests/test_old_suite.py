"""A course set up with grader 0.1 keeps the hidden suite course init copied into it, which imports
grader.compare, grader.exam, grader.exercise, grader.model and grader.suite and names the makemore
exercise's tensors and exercise numbers itself: with today's engine it grades the corpus exactly as
the current suite does.

tests/golden/suite-0.1 is that suite, frozen as grader 0.1 shipped it.
"""
from __future__ import annotations

import json

import pytest
import test_golden

from grader.exercises.makemore_mlp.answers import EX4_TRAINING

pytestmark = pytest.mark.slow


def test_a_grader_0_1_suite_grades_the_corpus_as_the_current_one(tmp_path, monkeypatch):
    course = (test_golden.ROOT / "course.yml").read_text() + f"autotests: {test_golden.GOLDEN / 'suite-0.1'}\n"
    (tmp_path / "course.yml").write_text(course)
    monkeypatch.setattr(test_golden, "ROOT", tmp_path)  # where test_golden's grading finds course.yml
    got = test_golden._grade(tmp_path / "results")
    expected = {p.name: p.read_text() for p in sorted(test_golden.EXPECTED.iterdir())}
    assert {k: _own_training_text_aside(v) for k, v in got.items()} == \
        {k: _own_training_text_aside(v) for k, v in expected.items()}


def _own_training_text_aside(text: str) -> str:
    """A results file with the training check's feedback left out: grader 0.1's suite writes that
    sentence itself (with the step and both losses of a hidden configuration, which today's suite no
    longer shows), so only a course whose suite is today's gets today's sentence."""
    if not text.startswith("{"):
        return text
    result = json.loads(text)
    for test in result["tests"]:
        if test["name"] == EX4_TRAINING and test["score"] < test["max_score"]:
            test["output"] = "(the suite's own)"
    return json.dumps(result, indent=1, sort_keys=True)
