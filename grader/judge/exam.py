"""Everything the trusted process knows about one configuration before any student code runs: the
forward pass, the true gradients, random upstream gradients and the local answers they imply.

CHAIN runs an answer cell with every upstream gradient replaced by its true value (teacher forcing),
so one wrong gradient costs nothing further down. LOCAL runs it with random upstream gradients, which
exposes what the true chain hides: a branch whose true gradient is almost zero left out, a gradient
that is zero only for the true upstream, or an answer recomputed with autograd.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from grader.exercise import ATOMIC, CHAIN, FUSED, LOCAL, Answer, Exercise, load
from grader.judge.configs import Config
from grader.judge.oracle import chain_gradients, fused_vjp, local_vjp


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
    # grade id -> the gradients of its tensor's siblings as its LOCAL check gives them (see _siblings)
    siblings: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """The size named `n`: hidden suites written for grader 0.1 read it (new code reads `sizes`)."""
        return self.config.sizes.n

    @property
    def sizes(self) -> dict[str, int]:
        """The plain numbers an answer cell may read beside the tensors (the batch's size, say)."""
        network = self.exercise.network
        return network.size_values(self.values)

    def student_view(self) -> dict[str, torch.Tensor]:
        """The forward pass as an answer cell sees it: no loss, no gradients."""
        return {k: self.values[k] for k in self.exercise.given if k not in self.exercise.network.sizes}

    def upstream(self, answer: Answer, check: str) -> dict[str, torch.Tensor]:
        source = self.truth if check == CHAIN else {**self.random_upstream, **self.siblings.get(answer.grade_id, {})}
        return {g: source[g] for g in answer.upstream}

    def expected(self, answer: Answer, check: str) -> torch.Tensor:
        return self.truth["d" + answer.source] if check == CHAIN else self.local[answer.grade_id]


def prepare(config: Config) -> Case:
    exercise = load(config.exercise)
    g = torch.Generator().manual_seed(config.seed)
    params = exercise.init(config.sizes, g, torch.float64, **config.init_options)
    return case_of(config, params, exercise.batch(config.sizes, g), g)


def case_of(config: Config, params: dict[str, torch.Tensor], data: dict[str, torch.Tensor],
            g: torch.Generator) -> Case:
    """The case of given parameters and data: the notebook's self-check builds one from its own."""
    exercise = load(config.exercise)
    network = exercise.network
    values = {k: v for k, v in network.forward(params, data).items() if k not in network.sizes}
    truth = chain_gradients(network, params, data)
    # Drawn in the notebook's order of the atomic answers, from the configuration's generator: the same
    # random upstream gradients for every submission.
    random_upstream = {
        gradient: torch.randn(truth[gradient].shape, generator=g, dtype=torch.float64)
        for gradient in ("d" + a.source for a in exercise.answers if a.kind == ATOMIC)
    }
    # A gradient that is a fixed number (a term of the loss's weighted sum) stays that number: an answer may write
    # it, or leave a 1 out.
    constant = network.constant_gradients
    random_upstream.update({f"d{name}": truth[f"d{name}"] for name in constant if f"d{name}" in random_upstream})
    _pass_on_copies(network, values, random_upstream)
    local = {}
    for answer in exercise.answers:
        if answer.kind == ATOMIC and answer.local_upstream:
            upstream = {c: torch.full_like(values[c], constant[c]) for c in network.consumers(answer.source)
                        if c in constant}
            upstream.update({name[1:]: random_upstream[name] for name in answer.local_upstream})
            local[answer.grade_id] = local_vjp(network, values, answer.source, upstream)
        elif answer.kind == FUSED and answer.sink is not None:
            upstream = {name: random_upstream.get(f"d{name}", torch.ones_like(values[name]))  # the loss: 1
                        for name in (answer.sink, *network.outside_readers(answer.source, answer.sink))}
            local[answer.grade_id] = fused_vjp(network, values, answer.source, answer.sink, upstream)
    values = {k: v.detach() for k, v in values.items()}
    return Case(config, values, truth, random_upstream, local, exercise, _siblings(exercise, values, random_upstream))


def _siblings(exercise: Exercise, values: dict[str, torch.Tensor],
              random_upstream: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """For each answer, the gradient of every other input of the steps its tensor feeds (an earlier answer it may
    read) as that step passes it back from the answer's own random upstream. An instructor trial's
    `e = torch.tanh(proj + query.unsqueeze(1))`: `dquery = dproj.sum(1)` is the textbook's (proj and query share
    the step's gradient), and with dproj drawn apart from de it lost half its points as a skipped step. Only this
    answer's cell sees these: a later cell that skips a step still meets values drawn apart."""
    network = exercise.network
    constant = network.constant_gradients
    out = {}
    for answer in exercise.answers:
        if answer.kind != ATOMIC or not answer.local_upstream:
            continue
        steps = {name[1:] for name in answer.local_upstream}
        found = {}
        for step in steps:
            for other in network.step[step].inputs:
                gradient = f"d{other}"
                # an input that is also one of the answer's upstream steps (xc's var, read by xhat = xc / var.sqrt())
                # keeps its draw: the answer's expected value is computed from it
                if other == answer.source or gradient not in answer.upstream or gradient in answer.local_upstream \
                        or gradient not in random_upstream or gradient in found or other in constant:
                    continue
                readers = network.consumers(other)
                upstream = {c: torch.full_like(values[c], constant[c]) if c in constant
                            else random_upstream[f"d{c}"] for c in readers
                            if c in constant or f"d{c}" in random_upstream}
                if len(upstream) == len(readers):
                    found[gradient] = local_vjp(network, values, other, upstream)
        if found:
            out[answer.grade_id] = found
    return out


def _pass_on_copies(network, values: dict[str, torch.Tensor], random_upstream: dict[str, torch.Tensor]) -> None:
    """A tensor whose one reader only moves, negates or reshapes it (`x = s_pos - s_neg`, a view) gets the
    gradient that step passes back from its reader's random one, not a draw of its own. Drawn apart, the textbook's
    BPR `dhu = (hp - hn) * dx[:, None]` (with `ds_pos = dx` and `ds_neg = -dx` exact in every network) lost half
    its points as a skipped step, and a triplet loss's `dneg_d = -dpos_d` too: a step that changes no value is no
    step a student must write. A step that scales or mixes (a weight, a mask, a sum) is still drawn apart, so a
    closed form that skips it still shows."""
    constant = network.constant_gradients
    for step in reversed(network.steps):  # a reader's gradient is settled before its inputs'
        name = step.name
        readers = network.consumers(name)
        if name in constant or f"d{name}" not in random_upstream or len(readers) != 1:
            continue
        upstream = random_upstream.get(f"d{readers[0]}")
        if upstream is None:
            continue
        passed = local_vjp(network, values, name, {readers[0]: upstream})
        if passed.numel() == upstream.numel() and torch.equal(passed.abs().flatten().sort().values,
                                                             upstream.abs().flatten().sort().values):
            random_upstream[f"d{name}"] = passed


@dataclass(eq=False)
class Training:
    """The whole-run check: K SGD steps from one seeded init on K seeded batches, driven by autograd
    here; the child drives the same steps with the student's function. `data` holds each of the
    network's data tensors for every step, stacked along a first dimension of K."""

    config: Config
    params: dict[str, torch.Tensor]
    data: dict[str, torch.Tensor]
    lr: float
    losses: torch.Tensor
    final: dict[str, torch.Tensor]
    seconds_per_step: float


def trajectory_atol(atol: float, lr: float, steps: int) -> float:
    """A parameter's absolute tolerance after `steps` SGD steps: each step may move it by lr times a gradient
    error the per-gradient check accepts (up to atol), and those add up. With the gradients' own atol, a
    float32 one-hot in a float64 exercise (every gradient right to ~3e-9) failed the final parameters on
    one hidden configuration in five, so its grade hung on the course's salt."""
    return max(atol, steps * lr * atol)


def sgd(params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], lr: float) -> dict[str, torch.Tensor]:
    return {name: params[name] - lr * grads[name] for name in params}


def _training_data(exercise: Exercise, sizes, g: torch.Generator, steps: int) -> dict[str, torch.Tensor]:
    if exercise.training.batches is not None:
        return exercise.training.batches(sizes, g, steps)
    drawn = [exercise.batch(sizes, g) for _ in range(steps)]
    return {k: torch.stack([batch[k] for batch in drawn]) for k in exercise.network.data}


class TrainingNotFinite(RuntimeError):
    """The training check's own run, with autograd's gradients, is not finite: no student's run can match it, so
    the exercise is at fault (a batch whose loss is NaN, a rate that diverges), never a student."""


def not_finite(losses: torch.Tensor, final: dict[str, torch.Tensor], lr: float) -> str | None:
    """Why autograd's own training run cannot be a reference, in words for the instructor; None when it can."""
    bad = (~torch.isfinite(losses)).nonzero().flatten().tolist()
    stuck = [name for name, value in final.items() if not bool(torch.isfinite(value).all())]
    if not bad and not stuck:
        return None
    where = f"its loss is {losses[bad[0]].item()} at step {bad[0] + 1}" if bad else \
        f"the final {', '.join(stuck)} holds NaN or inf"
    return (f"the training check's own run, with autograd's gradients at learning rate {lr:g}, is not finite "
            f"({where}): make every training batch's loss finite (a row masked whole with -inf gives NaN, a log of 0 "
            "gives inf), or lower the learning rate (the exercise's learning_rate=, course.yml's "
            "training.learning_rate)")


def prepare_training(config: Config, steps: int, lr: float) -> Training | None:
    """None for an exercise with no whole-run check; TrainingNotFinite where autograd's own run is no reference
    (every student would lose the check, the self-check would call right gradients "nan times autograd's")."""
    exercise = load(config.exercise)
    if exercise.training is None:
        return None
    network = exercise.network
    g = torch.Generator().manual_seed(config.seed + 1)
    params = exercise.init(config.sizes, g, torch.float64, **config.init_options)
    data = _training_data(exercise, config.sizes, g, steps)
    losses, current, seconds = autograd_steps(network, params, steps_of(data), lr)
    why = not_finite(losses, current, lr)
    if why is not None:
        raise TrainingNotFinite(f"{why} (on the configuration {config.sizes})")
    return Training(config, params, data, lr, losses, current, seconds)


def steps_of(data: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """A Training's data (each tensor stacked over the steps) as one batch per step."""
    return [{k: v[step] for k, v in data.items()} for step in range(len(next(iter(data.values()))))]


def autograd_steps(network, params: dict[str, torch.Tensor], batches: list[dict[str, torch.Tensor]],
                   lr: float) -> tuple[torch.Tensor, dict[str, torch.Tensor], float]:
    """SGD driven by autograd from `params`, one step per batch: the losses, the final parameters and
    the seconds autograd's backward takes per step (the grader's reference run, and the self-check's)."""
    current, losses, seconds = dict(params), [], 0.0
    for batch in batches:
        leaves = {k: v.clone().requires_grad_(True) for k, v in current.items()}
        loss = network.forward(leaves, batch)[network.loss]
        started = time.perf_counter()
        grads = torch.autograd.grad(loss, [leaves[k] for k in network.parameters])
        seconds += time.perf_counter() - started
        losses.append(loss.detach())
        current = sgd(current, {k: g.detach() for k, g in zip(network.parameters, grads, strict=True)}, lr)
    return torch.stack(losses), current, seconds / max(1, len(batches))
