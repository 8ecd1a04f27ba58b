"""Exercise 4 as a whole: the student's manual_backward drives K SGD steps from a seeded init; the
losses and the final parameters must follow the same steps driven by autograd, and the feedback names
the first step where they part."""
import pytest

from grader.exercise import EX4_TRAINING


@pytest.mark.parametrize("grade_id", [EX4_TRAINING])
def test_chain(grade_id, judge_training):
    judge_training()
