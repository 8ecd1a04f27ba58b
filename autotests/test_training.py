"""The exercise's whole-run check: the student's function drives K SGD steps from a seeded init; the
losses and the final parameters must follow the same steps driven by autograd, and the feedback names
the first step where they part."""
import pytest


@pytest.mark.training
def test_chain(grade_id, judge_training):
    judge_training()
