"""One test per grade id and check, for every submission of the batch; the grade ids are the course
exercise's answers (conftest's pytest_generate_tests).

CHAIN: the answer, with every upstream gradient its true value, equals the gradient of the loss on
every configuration. LOCAL: with random upstream gradients it equals the oracle's vector-Jacobian
product of that one step (for a fused answer, of its whole block).
"""
import pytest

from grader.judge.exam import CHAIN, LOCAL


@pytest.mark.answers(CHAIN)
def test_chain(grade_id, judge):
    judge(grade_id, CHAIN)


@pytest.mark.answers(LOCAL)
def test_local(grade_id, judge):
    judge(grade_id, LOCAL)
