"""Everything the trusted process knows about one configuration before any student code runs: the
forward pass, the true gradients, random upstream gradients and the local answers they imply.

CHAIN runs an answer cell with every upstream gradient replaced by its true value (teacher forcing),
so a wrong `dprobs` costs nothing further down. LOCAL runs it with random upstream gradients, which
exposes what the true chain hides: a missing max branch (dlogit_maxes is ~0), `db1 = 0`, or an answer
recomputed with autograd.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from grader.exercise import Exercise, load
from grader.judge.configs import Config
from grader.exercises.makemore_mlp.answers import ANSWERS, ATOMIC, FORWARD_NAMES, Answer
from grader.exercises.makemore_mlp.model import NETWORK, PARAMETERS, forward, init_params
from grader.judge.oracle import block_vjp, chain_gradients, local_vjp

CHAIN, LOCAL = "chain", "local"


def checks(answer: Answer) -> tuple[str, ...]:
    """An answer whose only consumer is the loss has no upstream to randomise: CHAIN is its check."""
    return (CHAIN, LOCAL) if answer.local_upstream else (CHAIN,)


@dataclass(eq=False)  # compared by identity: the sandbox caches each case's encoded messages by it
class Case:
    config: Config
    values: dict[str, torch.Tensor]
    truth: dict[str, torch.Tensor]
    random_upstream: dict[str, torch.Tensor]
    local: dict[str, torch.Tensor]
    exercise: Exercise = field(default_factory=load)

    @property
    def n(self) -> int:
        return self.config.sizes.n

    def student_view(self) -> dict[str, torch.Tensor]:
        """The forward pass as an answer cell sees it: no loss, no gradients."""
        return {k: self.values[k] for k in FORWARD_NAMES if k != "n"}

    def upstream(self, answer: Answer, check: str) -> dict[str, torch.Tensor]:
        source = self.truth if check == CHAIN else self.random_upstream
        return {g: source[g] for g in answer.upstream}

    def expected(self, answer: Answer, check: str) -> torch.Tensor:
        return self.truth["d" + answer.source] if check == CHAIN else self.local[answer.grade_id]


def prepare(config: Config) -> Case:
    g = torch.Generator().manual_seed(config.seed)
    params = init_params(config.sizes, g, torch.float64, config.w1_scale)
    Xb, Yb = config.batch(g)
    return case_of(config, params, Xb, Yb, g)


def case_of(config: Config, params: dict[str, torch.Tensor], Xb: torch.Tensor, Yb: torch.Tensor,
            g: torch.Generator) -> Case:
    """The case of given parameters and batch: the notebook's self-check builds one from its own."""
    values = forward(params, Xb, Yb)
    truth = chain_gradients(NETWORK, params, {"Xb": Xb, "Yb": Yb})
    random_upstream = {
        name: torch.randn(truth[name].shape, generator=g, dtype=torch.float64) for name in ATOMIC
    }
    local = {}
    for answer in ANSWERS:
        if answer.exercise == 1 and answer.local_upstream:
            upstream = {name[1:]: random_upstream[name] for name in answer.local_upstream}
            local[answer.grade_id] = local_vjp(NETWORK, values, answer.source, upstream)
    local["ex3_dhprebn"] = block_vjp(NETWORK, values, "hprebn", "hpreact", random_upstream["dhpreact"])
    values = {k: v.detach() for k, v in values.items()}
    return Case(config, values, truth, random_upstream, local)


@dataclass(eq=False)
class Training:
    """Exercise 4's check: K SGD steps from one seeded init on K seeded batches, driven by autograd
    here; the child drives the same steps with the student's manual_backward."""

    config: Config
    params: dict[str, torch.Tensor]
    Xs: torch.Tensor
    Ys: torch.Tensor
    lr: float
    losses: torch.Tensor
    final: dict[str, torch.Tensor]
    seconds_per_step: float


def sgd(params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], lr: float) -> dict[str, torch.Tensor]:
    return {name: params[name] - lr * grads[name] for name in PARAMETERS}


def prepare_training(config: Config, steps: int, lr: float) -> Training:
    g = torch.Generator().manual_seed(config.seed + 1)
    s = config.sizes
    params = init_params(s, g, torch.float64, config.w1_scale)
    Xs = torch.randint(0, s.vocab, (steps, s.n, s.block_size), generator=g)
    Ys = torch.randint(0, s.vocab, (steps, s.n), generator=g)
    current, losses, seconds = dict(params), [], 0.0
    for Xb, Yb in zip(Xs, Ys):
        leaves = {k: v.clone().requires_grad_(True) for k, v in current.items()}
        loss = forward(leaves, Xb, Yb)["loss"]
        started = time.perf_counter()
        grads = torch.autograd.grad(loss, [leaves[k] for k in PARAMETERS])
        seconds += time.perf_counter() - started
        losses.append(loss.detach())
        current = sgd(current, {k: g.detach() for k, g in zip(PARAMETERS, grads)}, lr)
    return Training(config, params, Xs, Ys, lr, torch.stack(losses), current, seconds / steps)
