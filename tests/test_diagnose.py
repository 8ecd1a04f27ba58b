"""grader.judge.diagnose on synthetic tensors: each hint it claims to give, and no hint that would mislead."""
from __future__ import annotations

import pytest
import torch

from grader.judge.diagnose import diagnose

RTOL, ATOL = 1e-5, 1e-8
N = 6  # the batch size the factor hints refer to; not 2, so that "factor 2" and "n" differ

# Words of a hint that claims a specific mistake; a random wrong answer must get none of them.
CLAIMS = ("factor", "sign", "times", "transpose", "n/(n-1)", "(n-1)/n", "zeros", "keepdim", "summed", "right in")


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def hints(got, want, n=N, rtol=RTOL, atol=ATOL):
    result = diagnose(got, want, rtol=rtol, atol=atol, n=n)
    assert isinstance(result, list) and all(isinstance(h, str) and h for h in result)
    return result


def one(got, want, **kw):
    result = hints(got, want, **kw)
    assert len(result) == 1, result
    return result[0]


# --- shape mistakes -------------------------------------------------------------------------------

def test_transposed_with_the_right_values():
    want = randn(N, 4)
    assert one(want.T.clone(), want) == "looks transposed: its transpose is the expected gradient"


def test_transposed_shape_with_wrong_values():
    want = randn(N, 4)
    hint = one(randn(4, N, seed=1), want)
    assert hint.startswith("looks transposed (the reverse of the expected shape)")
    assert "its transpose is the expected gradient" not in hint


def test_transposed_square_matrix():
    want = randn(5, 5)
    assert one(want.T.clone(), want, n=5) == "looks transposed: its transpose is the expected gradient"


@pytest.mark.parametrize("want_shape, got_shape", [((1, 4), (4,)), ((N, 1), (N,))])
def test_missing_keepdim(want_shape, got_shape):
    want = randn(*want_shape)
    hint = one(want.reshape(got_shape), want)
    assert hint.startswith("missing keepdim=True")
    assert str(want_shape) in hint


@pytest.mark.parametrize("want_shape, got_shape", [((4,), (1, 4)), ((4,), (4, 1)), ((1, 4), (1, 1, 4))])
def test_extra_size_one_dimension(want_shape, got_shape):
    want = randn(*want_shape)
    hint = one(want.reshape(got_shape), want)
    assert hint.startswith("an extra dimension of size 1")
    assert str(want_shape) in hint


@pytest.mark.parametrize("dim", [0, 1])
def test_not_summed_over_a_broadcast_dimension_kept_as_size_one(dim):
    got = randn(N, 4)
    want = got.sum(dim, keepdim=True)  # e.g. dbnbias (1,H) given as dhpreact (n,H)
    hint = one(got, want)
    assert hint.startswith(f"not summed over dimension {dim}")
    assert "(summing it there gives the expected gradient)" in hint


def test_not_summed_with_wrong_values_does_not_claim_the_sum_fixes_it():
    want = randn(1, 4)
    hint = one(randn(N, 4, seed=1), want)
    assert hint.startswith("not summed over dimension 0")
    assert "summing it there gives" not in hint


def test_not_summed_over_a_leading_broadcast_dimension():
    """b2 (V,) is broadcast over the rows of logits (n,V): db2 given as dlogits itself."""
    got = randn(N, 4)
    want = got.sum(0)
    hint = one(got, want)
    assert hint.startswith("not summed over dimension 0")
    assert "(summing it there gives the expected gradient)" in hint


def test_an_unrelated_shape_gets_only_the_expected_shape():
    assert hints(randn(3, 5), randn(N, 4)) == ["a gradient has exactly its tensor's shape, (6, 4)"]


# --- value mistakes -------------------------------------------------------------------------------

@pytest.mark.parametrize("factor", [-1.0, N, 1 / N, N / (N - 1), (N - 1) / N, 2.0, 0.5, 3.7, 1 + 1e-3])
def test_one_configuration_claims_no_factor(factor):
    """One configuration cannot tell n from any other number: the factor is `name`'s, on every one."""
    want = randn(N, 4)
    for h in hints(want * factor, want):
        assert not any(word in h for word in ("factor", "times", "sign", "n/(n-1)", "(n-1)/n")), h


def test_all_zeros():
    want = randn(N, 4)
    assert hints(torch.zeros_like(want), want) == ["all zeros"]


@pytest.mark.parametrize("wrong, rows", [(1, "0 (1 of 6)"), (3, "0 (1 of 6)"), (12, "0, 1, 2 (3 of 6)")])
def test_wrong_only_in_some_rows(wrong, rows):
    want = randn(N, 4)
    got = want.clone()
    got.view(-1)[:wrong] += 1.0
    assert hints(got, want) == [f"wrong only in rows {rows}, right in the others"]


def test_wrong_only_in_some_columns():
    want = randn(N, 4)
    got = want.clone()
    got[:, 2] += 1.0
    assert hints(got, want) == ["wrong only in columns 2 (1 of 4), right in the others"]


def test_wrong_entries_in_every_row_and_column_are_counted():
    want = randn(N, 4)
    got = want.clone()
    got[range(N), [0, 1, 2, 3, 0, 1]] += 1.0  # every row and every column has one
    assert hints(got, want) == ["right in 18 of 24 entries, wrong in 6"]


def test_size_one_dimension_moved_is_not_called_transposed_or_a_wrong_sum():
    """The issue's "looks transposed" plus "summed over the wrong dimension" for (1, n) against (n, 1)."""
    want = randn(N, 1)
    for got, right in ((want.reshape(1, N), True), (randn(1, N, seed=2), False)):
        (hint,) = hints(got, want)
        assert hint.startswith("has its size-1 dimension in the wrong place: shape (1, 6)"
                               " where the gradient has (6, 1)")
        assert ("reshaped, its values are right" in hint) == right
        assert "transpose" not in hint and "wrong dimension" not in hint


@pytest.mark.parametrize("seed", range(1, 9))
@pytest.mark.parametrize("shape", [(N, 4), (5, 5), (1, 7), (7,)])
def test_a_random_wrong_answer_gets_no_misleading_hint(seed, shape):
    want = randn(*shape)
    got = randn(*shape, seed=seed)
    for h in hints(got, want):
        assert not any(word in h for word in CLAIMS), h


def test_a_shifted_answer_is_not_called_a_factor():
    want = randn(N, 4)
    for h in hints(want + 0.3, want):
        assert not any(word in h for word in CLAIMS), h


def test_an_answer_that_only_broadcasts_to_the_gradient_says_its_values_are_right():
    """1/(n-1) * dbnvar, (1, H), for dbndiff2, (n, H): right values, not yet the tensor's shape."""
    row = randn(1, 4)
    assert hints(row, row.expand(N, 4).clone()) == [
        "broadcast to (6, 4) its values are right: a gradient has its tensor's full shape, "
        "not one that broadcasts to it"]
    assert not any("values are right" in h for h in hints(randn(1, 4, seed=3), row.expand(N, 4).clone()))
