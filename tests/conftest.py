"""Shared by the foundation tests: a seeded batch with the lecture's init, and the notebook's own
autograd pass (micrograd style: every intermediate retains its gradient), independent of
grader/judge/oracle.py so that the oracle itself can be tested against it."""
from __future__ import annotations

import pytest
import torch

from grader.exercises.makemore_mlp.model import INTERMEDIATES, forward, init_params

# Tiny tensors: intra-op threads only cost time here (NOTES §1, ~25x slower with 2 threads).
torch.set_num_threads(1)


def _make_batch(sizes, dtype=torch.float64, seed=0):
    """Lecture init from a seeded generator, and a batch (Xb, Yb) drawn from the same generator."""
    generator = torch.Generator().manual_seed(seed)
    params = init_params(sizes, generator, dtype=dtype)
    Xb = torch.randint(0, sizes.vocab, (sizes.n, sizes.block_size), generator=generator)
    Yb = torch.randint(0, sizes.vocab, (sizes.n,), generator=generator)
    return params, Xb, Yb


def _autograd_pass(params, Xb, Yb):
    """Forward with parameters requiring grad, .retain_grad() on every intermediate, loss.backward().

    Returns the forward values (still attached to the graph); `.grad` of each is its true gradient.
    """
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    values = forward(leaves, Xb, Yb)
    for name in INTERMEDIATES:
        values[name].retain_grad()
    values["loss"].backward()
    return values


@pytest.fixture(scope="session")
def make_batch():
    return _make_batch


@pytest.fixture(scope="session")
def autograd_pass():
    return _autograd_pass


@pytest.fixture(scope="session")
def unix_user():
    """A normal unix user for the session (tests/helpers/users.py: the Session, its `.user`), made and
    removed here: the grader as most instructors run it. Needs root, as CI has."""
    import os

    if os.getuid() != 0:
        pytest.skip("creating a user needs root")
    from helpers import users

    with users.Session() as session:
        yield session
