"""One test per grade id and check, for every submission of the batch.

CHAIN: the answer, with every upstream gradient its true value, equals the gradient of the loss on
every configuration. LOCAL: with random upstream gradients it equals the oracle's vector-Jacobian
product of that one step (for exercise 3, of the whole batch-norm block).
"""
import pytest

from grader.exam import CHAIN, LOCAL, checks
from grader.exercise import ANSWERS

WITH_LOCAL = [a.grade_id for a in ANSWERS if LOCAL in checks(a)]


@pytest.mark.parametrize("grade_id", [a.grade_id for a in ANSWERS])
def test_chain(grade_id, judge):
    judge(grade_id, CHAIN)


@pytest.mark.parametrize("grade_id", WITH_LOCAL)
def test_local(grade_id, judge):
    judge(grade_id, LOCAL)
