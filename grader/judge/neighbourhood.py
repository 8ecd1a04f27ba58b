"""The wrong answers next to the right one, generated from the exercise's forward pass, so that a
mistake nobody wrote down still gets its name.

For one answer on one configuration and check, each candidate is the value a slightly wrong cell
would produce: a branch of a tensor used twice dropped or scaled, another forward tensor of the same
shape where the derivative needs an operand, the local derivative or the upstream gradient left out,
a slip in an elementwise step's derivative (the exercise's `Mistakes.rules`), a constant factor (a
size, a size minus one, 2, -1), a sum or mean over the wrong dimension, a transpose, repeated indices
overwritten. Every candidate is computed here, in the trusted process, by autograd on the forward
pass with that one change (oracle.local_vjp), never from a hand-written wrong formula. A student's
answer is named when it equals the same candidate on every configuration
(grader.judge.diagnose.name); each sentence describes the student's code and never shows the right
expression.
"""
from __future__ import annotations

import ast
import collections
import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from types import ModuleType

import torch
import torch.nn.functional as F

from grader import syntax
from grader.exercise import ATOMIC, ELEMENTWISE, FUSED, Answer, Exercise, Factor
from grader.judge import prints
from grader.judge.exam import CHAIN, Case
from grader.judge.oracle import block_jvp, block_vjp, local_vjp
from grader.vocabulary import Broadcast, Chain, Loops, Transpose, Zeros, factors, missed_branch, only_branch


@dataclass(frozen=True)
class Candidate:
    key: str  # the same mistake has the same key on every configuration
    sentence: str  # what the student's code does, in words, without the right formula
    tensor: torch.Tensor | None  # None: a slip known by its fingerprint alone (grader.judge.prints)
    fingerprint: dict | None = None
    # The sentence has a subject of its own ("the part flowing back through h ..."); else it says what the
    # answer does and continues "your dX ..." (as every rule-table slip, and so every fingerprint, does).
    whole: bool = False
    family: str = ""  # which of PREFERENCE's families it is
    opened: dict = field(default_factory=dict, compare=False)  # a fingerprint's sentence, once an answer opens it

    def fits(self, got: torch.Tensor, rtol: float, atol: float) -> bool | None:
        """Whether the answer `got` is this candidate here; None when that is unknown here (a slip with
        no fingerprint on this case). A fingerprint fits only an answer that also opens its sentence."""
        if self.tensor is None:
            if self.fingerprint is None:
                return None
            if not prints.matches(self.fingerprint, got, rtol, atol):
                return False
            sentence = prints.unseal(self.fingerprint["s"], got)
            if sentence is None:
                return False
            self.opened.setdefault("sentence", sentence)
            if "r" in self.fingerprint:  # the names its code reads, sealed alike
                self.opened.setdefault("reads", prints.unseal(self.fingerprint["r"], got))
            return True
        return self.tensor.shape == got.shape and bool(torch.allclose(got, self.tensor, rtol=rtol, atol=atol))

    def said(self) -> str | None:
        """The sentence: a fingerprint's once an answer has opened it."""
        return self.sentence if self.tensor is not None or self.sentence else self.opened.get("sentence")


def _tensors(exercise: Exercise) -> tuple[str, ...]:
    """The forward tensors an answer cell may read: parameters and intermediates, not the loss."""
    net = exercise.network
    return (*net.parameters, *(name for name in net.intermediates if name != net.loss))


def _upstream(case: Case, answer: Answer, check: str) -> dict[str, torch.Tensor]:
    """What each consumer of the answer's tensor passes back on this check (step name -> gradient)."""
    net = case.exercise.network
    source = case.truth if check == CHAIN else case.random_upstream
    names = [c for c in net.consumers(answer.source) if c != net.loss]
    if check != CHAIN:
        names = [c for c in names if "d" + c in answer.local_upstream]
    return {c: source["d" + c] for c in names}


def _same_shape(case: Case, name: str) -> list[str]:
    shape = case.values[name].shape
    return [t for t in _tensors(case.exercise) if t != name and case.values[t].shape == shape]


def _branch(case: Case, answer: Answer, up: dict, step: str, values=None) -> torch.Tensor:
    return local_vjp(case.exercise.network, values or case.values, answer.source, {step: up[step]})


def _per_branch(case: Case, answer: Answer, check: str):
    """(want, {step: its branch}, upstream): the right answer as the sum of its branches."""
    up = _upstream(case, answer, check)
    branches = {step: _branch(case, answer, up, step) for step in up}
    return case.expected(answer, check), branches, up


def _sizes(case: Case) -> dict[str, int]:
    """Every named size of the configuration (the hidden layer's width, the context's length), not only
    those the network's steps read: a cell may divide by any of them, through a tensor's shape."""
    return {**dict(getattr(case.config, "sizes", None) or {}), **case.exercise.network.size_values(case.values)}


def _twice_used(case: Case, answer: Answer, check: str, want, branches) -> list[Candidate]:
    if len(branches) < 2:
        return []
    out = []
    for step, part in branches.items():
        out.append(Candidate(f"drop:{step}", missed_branch(answer.source, list(branches), step), want - part))
        for key, factor, does in factors(_sizes(case), case.exercise.mistakes.words, case.exercise.mistakes.shown):
            if key == "2":  # twice a branch's part: counted twice, or its 1/2 left out (an instructor trial's
                # whole-backward function, told the first, had no second use; the values cannot say which)
                does = (f"is twice its value: counted twice ({answer.source} reaches {step} once), or a factor 1/2 "
                        "left out")
            out.append(Candidate(f"branch:{step}:{key}", f"the part flowing back through {step} {does}",
                                 want + (factor - 1) * part, whole=True))
        picked = _picked(case, answer, step)
        if picked is not None:
            out.append(Candidate(f"assigned:{step}", f"assigns the part flowing back through {step} to the entries of "
                                                     f"{answer.source} that {step} picks (=), which replaces what the "
                                                     f"other uses of {answer.source} put there: add it (+=)",
                                 torch.where(picked, part, want - part)))
    if len(branches) > 2:
        out += [Candidate(f"only:{step}", only_branch(answer.source, list(branches), step), part)
                for step, part in branches.items()]
    for (first, a), (second, b) in itertools.combinations(branches.items(), 2):
        if not bool((a * b).any()):  # parts that never overlap: their product is both left out, no product
            continue
        out.append(Candidate(f"branch-product:{first}:{second}",
                             f"multiplies the parts flowing back through {first} and {second}, where the gradients "
                             f"of the uses of {answer.source} add up", want - a - b + a * b))
    return out


def _reads(code: str, source: str) -> list[ast.Subscript]:
    """The slices of `source` a step's code reads (`cum_pad[:, 1:] - cum_pad[:, :-1]`: two)."""
    return _reads_in(syntax.parse(code, mode="eval"), source)


def _overlapping_reads(case: Case, answer: Answer, want, up) -> list[Candidate]:
    """A step that reads its input through slices that overlap, each slice's part written with = (a second
    instructor trial's `dcum_pad[:, 1:] = dq` then `dcum_pad[:, :-1] = -dq` for `q = cum_pad[:, 1:] -
    cum_pad[:, :-1]`): the part written last replaces the others where they overlap. One candidate for each order
    the parts may be written in."""
    net, source = case.exercise.network, answer.source
    out = []
    for step in up:
        reads = _reads(net.step[step].code, source)
        if not 2 <= len(reads) <= 3:
            continue
        parts, touched = [], []
        for index in range(len(reads)):
            tree = syntax.parse(net.step[step].code, mode="eval")
            for other, node in enumerate(_reads_in(tree, source)):
                if other != index:  # every other read held at its forward value: this read's part alone
                    node.value = ast.Call(ast.Attribute(ast.Name(source, ast.Load()), "detach", ast.Load()), [], [])
            fn = net.step[step].with_code(ast.unparse(tree)).fn
            parts.append(local_vjp(net, case.values, source, {step: up[step]}, fns={step: fn}))
            touched.append(_touched(case, step, source, reads[index]))
        if not any(bool((a & b).any()) for a, b in itertools.combinations(touched, 2)):
            continue
        said = " and ".join(ast.unparse(read) for read in reads)
        for order in itertools.permutations(range(len(reads))):
            written = torch.zeros_like(want)
            for index in order:
                written = torch.where(touched[index], parts[index], written)
            last = ast.unparse(reads[order[-1]])
            out.append(Candidate(f"overwritten:{step}:{''.join(map(str, order))}",
                                 f"writes the parts flowing back through {said} with = where those slices of {source} "
                                 f"overlap, so the one written last ({last}) replaces "
                                 f"{'the other' if len(reads) == 2 else 'the others'} there: add them (+=)",
                                 written))
    return out


def _reads_in(tree: ast.AST, source: str) -> list[ast.Subscript]:
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == source]


def _touched(case: Case, step: str, source: str, read: ast.Subscript) -> torch.Tensor:
    """Which entries of `source` the slice `read` reads: the slice of the entries' own positions."""
    net = case.exercise.network
    positions = torch.arange(case.values[source].numel()).view(case.values[source].shape)
    held = {**{k: v.detach() for k, v in case.values.items() if isinstance(v, torch.Tensor)},
            **net.size_values(case.values), source: positions}
    fn = net.step[step].with_code(ast.unparse(read)).fn
    picked = fn(*(held[i] for i in net.step[step].inputs))
    mask = torch.zeros(positions.numel(), dtype=torch.bool)
    mask[picked.flatten()] = True
    return mask.view(positions.shape)


def _operands(case: Case, answer: Answer, want, branches, up) -> list[Candidate]:
    """Another forward tensor of the same shape in place of an operand the derivative reads."""
    out = []
    steps, tensors = case.exercise.network.step, _tensors(case.exercise)
    for step, part in branches.items():
        for operand in steps[step].inputs:
            if operand == answer.source or operand not in tensors:
                continue
            for other in _same_shape(case, operand):
                swapped = _branch(case, answer, up, step, values={**case.values, operand: case.values[other]})
                if _indistinct(swapped, part):
                    # A normalization reads its input up to scale and shift: batch norm of hbn is batch norm of
                    # hpre but for eps, so that swap fitted eps left out (an instructor trial's student, told
                    # "uses hbn" of a cell that never read it). A swap that changes nothing is no slip to name.
                    continue
                out.append(Candidate(f"operand:{step}:{operand}:{other}",
                                     f"uses {other} where the derivative through {step} needs {operand}",
                                     want - part + swapped))
    return out


def _indistinct(candidate: torch.Tensor, right: torch.Tensor) -> bool:
    """Equal to the right value but for a part in a thousand: not a mistake the values can tell."""
    return bool((candidate - right).abs().max() <= 1e-3 * right.abs().max())


def _substitutions(case: Case, answer: Answer, check: str, want, branches, up) -> list[Candidate]:
    """Another gradient the cell can read in place of the one a step passes back (a neighbour's, a step
    too early or too late), or that one summed over a dimension before it is used."""
    # The latest gradients first: of two that are equal here (an addition passes its gradient on
    # unchanged), the one the notebook computed last is the likelier slip.
    readable = list(case.upstream(answer, check).items())[::-1]
    out = []
    for step, part in branches.items():
        own = up[step]
        told: set[str] = set()
        for gradient, value in readable:
            if gradient == "d" + step or value.shape != own.shape or gradient in told:
                continue
            # Gradients equal on this check (an addition passes one on unchanged) are named together:
            # the values cannot tell which of them the cell read.
            same = [g for g, v in readable if g not in (gradient, "d" + step) and v.shape == value.shape
                    and torch.equal(v, value)]
            told.update(same)
            which = gradient + "".join(f" (or {g}, equal to it here)" for g in same)
            out.append(Candidate(f"gradient:{step}:{gradient}",
                                 f"uses {which} where the derivative through {step} needs d{step}, the gradient "
                                 f"flowing back from {step}", want - part + _branch(case, answer, {step: value}, step)))
        for dim in range(own.dim()):
            if own.shape[dim] > 1 and own.dim() > 1:
                summed = own.sum(dim, keepdim=True).expand_as(own)
                out.append(Candidate(f"gradient-summed:{step}:{dim}", Broadcast.upstream_summed(step, dim),
                                     want - part + _branch(case, answer, {step: summed}, step)))
    return out


def _neighbour_steps(case: Case, answer: Answer, want, branches, up) -> list[Candidate]:
    """The derivative of a neighbouring step in place of the answer's own: the step that computes the
    answer's tensor applied one step too early, the derivative with respect to the step's other input,
    and the step's own operation applied to the gradient instead of its derivative."""
    net, out = case.exercise.network, []
    tensors = set(_tensors(case.exercise))
    source = answer.source
    if source in net.step:
        for before in net.step[source].inputs:
            if before in tensors and case.values[before].shape == want.shape:
                out.append(Candidate(f"too-early:{before}", Chain.too_early(source, before),
                                     local_vjp(net, case.values, before, {source: want})))
    for step, part in branches.items():
        inputs = net.step[step].inputs
        for other in inputs:
            if other != source and other in tensors and case.values[other].shape == case.values[source].shape:
                out.append(Candidate(f"other-input:{step}:{other}",
                                     f"takes the derivative of {step} with respect to {other}, where the one with "
                                     f"respect to {source} is needed",
                                     want - part + local_vjp(net, case.values, other, {step: up[step]})))
        ties = _max_ties(case.values[source], case.values[step], up[step])
        if ties is not None:
            out.append(Candidate(f"max-ties:{step}", f"hands the max's gradient to every entry that ties for the "
                                                     f"max in {step} (a slice all zeros after a ReLU, say), where it "
                                                     "goes to one of them, the first: a mask of the entries equal to "
                                                     "the max counts each tie; give it to the argmax alone "
                                                     "(.max(dim).indices)", want - part + ties))
        if [i for i in inputs if i in tensors] == [source] and up[step].shape == want.shape:
            held = {**case.values, **_sizes(case), source: up[step]}
            try:
                applied = net.step[step].fn(*(held[i] for i in inputs))
            except (RuntimeError, KeyError):
                continue
            if applied.shape == want.shape:
                out.append(Candidate(f"forward-applied:{step}", Chain.forward_applied(step),
                                     want - part + applied.detach()))
    return out


def _max_ties(x: torch.Tensor, out: torch.Tensor, g: torch.Tensor) -> torch.Tensor | None:
    """Where `out` is the max of `x` along a dimension and some slices tie for it: the gradient the textbook's mask
    `(x == out) * g` gives, every tied entry the whole of it (a third instructor trial's global max-pool over a
    ReLU channel that was zero at every position); None where `out` is no max of `x`."""
    if not (x.is_floating_point() and out.is_floating_point()):
        return None
    for d in range(x.dim()):
        kept = out if out.dim() == x.dim() else out.unsqueeze(d) if out.dim() == x.dim() - 1 else None
        top = x.max(d, keepdim=True).values if x.shape[d] > 1 else None
        if kept is None or top is None or kept.shape != top.shape or not torch.equal(kept, top):
            continue
        # Where nothing ties it is the right gradient: a candidate all the same, as the search holds an answer to
        # one on every configuration, and the configurations without a tie are where the answer was right
        return (x == kept) * (g if g.dim() == x.dim() else g.unsqueeze(d))
    return None


def _named_slips(case: Case, answer: Answer, want, branches, up) -> list[Candidate]:
    """The exercise's own named slips in the derivative of an elementwise step (its `mistakes`: the
    instructor's words, so they go before the rule table's); `{x}` and `{y}` in a sentence are the step's
    input and output."""
    return [Candidate(f"{RULE}{step}:{key}", sentence.replace("{x}", answer.source).replace("{y}", step),
                      want - part + fn(x, y) * up[step])
            for step, part, rule, x, y in _ruled(case, answer, branches) for key, sentence, fn in rule.slips]


def _ruled(case: Case, answer: Answer, branches):
    """(step, its branch's part, its rule, the step's input, its output) for each step with a rule."""
    for step, part in branches.items():
        rule = case.exercise.mistakes.rules.get(step)
        if rule is not None:
            yield step, part, rule, case.values[answer.source], case.values[step]


def _elementwise(case: Case, answer: Answer, want, branches, up) -> list[Candidate]:
    """The derivative of an elementwise step the exercise has a rule for, read at another tensor of the
    same shape in place of its input or output."""
    out = []
    for step, part, rule, x, y in _ruled(case, answer, branches):
        needed = answer.source if rule.uses == "x" else step
        role = f"{needed}, its output" if rule.uses == "y" else needed
        for other in _same_shape(case, needed):
            value = case.values[other]
            local = rule.derivative(value, y) if rule.uses == "x" else rule.derivative(x, value)
            out.append(Candidate(f"rule:{step}:uses:{other}", Chain.read_at(other, rule.what, role),
                                 want - part + local * up[step]))
    return out


def _chain_rule(case: Case, answer: Answer, check: str, want, branches, up) -> list[Candidate]:
    out = []
    if check != CHAIN:  # some of its upstream gradients read, the others' parts the loss's own values (a closed
        # form for one use: an instructor trial's VAE `dmu = dz + mu / n`, which reads dz, was told it skipped dz)
        for count in range(1, len(branches)):
            for skipped in itertools.combinations(branches, count):
                fixed = sum(_branch(case, answer, {step: case.truth[f"d{step}"]}, step) - branches[step]
                            for step in skipped)
                read = " and ".join(f"d{step}" for step in branches if step not in skipped)
                said = Chain.skips_some(" and ".join(f"d{s}" for s in skipped), read, " and ".join(skipped))
                out.append(Candidate(f"skips:{'+'.join(skipped)}", said, want + fixed))
    for step, part in branches.items():
        alone = _branch(case, answer, {step: torch.ones_like(up[step])}, step)
        out.append(Candidate(f"local-only:{step}", Chain.local_only(step), want - part + alone, whole=True))
        if up[step].shape == want.shape:
            out.append(Candidate(f"upstream-only:{step}", Chain.upstream_only(step, len(branches) == 1),
                                 want - part + up[step]))
            out.append(Candidate(f"upstream-negated:{step}", Chain.upstream_negated(step), want - part - up[step]))
    return out


def _picked(case: Case, answer: Answer, step: str) -> torch.Tensor | None:
    """Where `step` reads the answer's tensor, when it picks some of its entries (`scores[range(N), y]`, a row's
    max, the last time step): what `dx[picked] = dstep` writes over, where the other uses' gradient is to be
    added to. None for a step that reads every entry."""
    if case.values[step].numel() >= case.values[answer.source].numel():
        return None
    ones = torch.ones_like(case.values[step])
    reached = local_vjp(case.exercise.network, case.values, answer.source, {step: ones}).ne(0)
    return reached if not bool(reached.all()) else None


def _index_of(case: Case, answer: Answer, step: str) -> str | None:
    """The data tensor `step` indexes the answer's tensor with, when the step is `source[index]`."""
    net = case.exercise.network
    tree = syntax.parse(net.step[step].code, mode="eval").body
    if isinstance(tree, ast.Subscript) and isinstance(tree.value, ast.Name) and tree.value.id == answer.source \
            and isinstance(tree.slice, ast.Name) and tree.slice.id in net.data:
        return tree.slice.id
    return None


def _indexing(case: Case, answer: Answer, want, up) -> list[Candidate]:
    """A lookup `source[index]` reads some rows several times: an assignment keeps only one of their
    gradients."""
    out = []
    for step, grad in up.items():
        index = _index_of(case, answer, step)
        if index is None:
            continue
        table, rows = case.values[answer.source], case.values[index]
        kept = torch.zeros_like(table).index_put((rows.reshape(-1),), grad.reshape(-1, *table.shape[1:]))
        entry = case.exercise.mistakes.words.get(index, "an index")
        out.append(Candidate("overwrite", f"{entry} that occurs several times in {index} keeps the gradient of "
                                          f"only one of its uses (an assignment overwrites; the uses must add up)",
                             kept, whole=True))
        if rows.dim() == 2 and min(rows.shape) > 1:
            # Two blind answer sets' embedding gradients: the index flattened column by column against the gradient
            # flattened row by row; and a loop over the examples, `dW[idx[i]] += dout[i]`, whose indexed += keeps one
            # use of an entry repeated within a row
            crossed = torch.zeros_like(table).index_add(0, rows.transpose(0, 1).reshape(-1),
                                                        grad.reshape(-1, *table.shape[1:]))
            out.append(Candidate("index-order", f"adds each use's gradient into the row of another entry of {index}: "
                                                f"{index} flattened in one order ({index}.T, column by column) and "
                                                f"the gradient in the other; flatten both the same way "
                                                f"({index}.view(-1) with the gradient's .view(-1, ...))", crossed))
            shaped = grad.reshape(*rows.shape, *table.shape[1:])
            looped = torch.zeros_like(table)
            for example, gradient in zip(rows, shaped, strict=True):
                looped[example] += gradient
            out.append(Candidate("row-overwrite", f"{entry} that occurs twice in one row of {index} keeps the "
                                                  f"gradient of only one of those uses: an indexed += with a row of "
                                                  f"indices ({answer.variable}[{index}[i]] += ...) overwrites a "
                                                  f"repeated one; add one index at a time, or use index_add",
                                 looped, whole=True))
            # Two more sets' (one each): the gradient scattered back from the first position of each row alone, or
            # from the last (the one a loss reads): every position was looked up, so each adds its own back
            for position, which in ((0, "first"), (-1, "last")):
                alone = torch.zeros_like(table).index_add(0, rows[:, position], shaped[:, position])
                out.append(Candidate(f"one-position:{which}", f"adds back the gradients of the {which} position of "
                                                              f"each row of {index} alone ({index}[:, {position}]): "
                                                              f"every position of {index} was looked up, so each "
                                                              "adds its own back", alone))
        # An index off by one (`{index} - 1`): every use's gradient lands one row before or after its own
        for shift, where in ((-1, "before"), (1, "after")):
            moved = torch.zeros_like(table).index_add(0, (rows.reshape(-1) + shift) % table.shape[0],
                                                      grad.reshape(-1, *table.shape[1:]))
            out.append(Candidate(f"shifted{shift:+d}", f"adds each use's gradient to the row {where} its own (an "
                                                       f"index shifted by one: index with {index} itself)", moved))
    return out


def _batch_size(case: Case) -> int | None:
    """The batch's size, by the data tensors' shared first dimension, whatever the exercise names it (CS231n
    writes N; an exercise may name no size at all)."""
    firsts = {case.values[name].shape[0] for name in case.exercise.network.data if case.values[name].dim()}
    return firsts.pop() if len(firsts) == 1 else None


def _last_example(case: Case, answer: Answer, up) -> list[Candidate]:
    """A gradient summed over the batch (a weight's, a bias's) kept for the last example alone: what a loop
    over the examples that assigns with = leaves. Only where an upstream gradient runs over the batch and
    the answer's tensor does not; a use that does not run over it (a penalty on the weight) is kept whole."""
    n = _batch_size(case)
    value = case.values[answer.source]
    batched = [step for step, grad in up.items() if grad.dim() and grad.shape[0] == n]
    if not batched or n is None or n < 2 or (value.dim() and value.shape[0] == n):
        return []
    last = {step: torch.zeros_like(grad).index_copy(0, torch.tensor([n - 1]), grad[-1:]) if step in batched else grad
            for step, grad in up.items()}
    kept = local_vjp(case.exercise.network, case.values, answer.source, last)
    return [Candidate("last-example", Loops.LAST_EXAMPLE, kept)]


def _reductions(case: Case, answer: Answer, want, up) -> list[Candidate]:
    """A tensor broadcast in the forward pass sums its gradient back: the sums over the wrong dimension,
    with and without keepdim (no sum at all is the shape hints' to name, with the dimension)."""
    out = []
    for step, grad in up.items():
        value = case.values[answer.source]
        if value.shape == grad.shape or value.dim() > grad.dim():
            continue
        try:
            spread = local_vjp(case.exercise.network, {**case.values, answer.source: value.expand(grad.shape)},
                               answer.source, {step: grad})
        except RuntimeError:  # not an elementwise broadcast (a matrix product): nothing to sum back
            continue
        lead = grad.dim() - value.dim()
        dims = [d for d in range(grad.dim()) if d < lead or (value.shape[d - lead] == 1 and grad.shape[d] != 1)]
        averaged = spread.mean(dims, keepdim=True).reshape(want.shape)
        out.append(Candidate(f"mean:{step}", Broadcast.averaged(answer.source), averaged))
        for dim in range(spread.dim()):
            if spread.shape[dim] == 1:  # a sum over a dimension of one is no sum: the gradient itself, unsummed
                continue  # (an instructor trial's `db = dpred` of a (N, 1) output was "sums over dimension 1")
            for keep in (True, False):
                summed = spread.sum(dim, keepdim=keep)
                if summed.shape == want.shape or summed.numel() == want.numel():
                    continue  # the right sum, or a harmless keepdim slip (the shape check names it)
                said = Broadcast.partial_sum(dim, answer.source, *dims) if dim in dims else \
                    Broadcast.wrong_dim(dim, answer.source)
                out.append(Candidate(f"sum:{step}:{dim}:{keep}", said, summed))
    return out


def _orders(want: torch.Tensor) -> list[Candidate]:
    """The right entries in another order: a view or reshape where the dimensions needed reordering (a
    view keeps the memory order), or a permute where a view was meant. Two dimensions of one size swapped
    are a transpose (`_transposes`), whichever way it came about."""
    out = []
    shape = tuple(want.shape)
    for order in itertools.permutations(range(want.dim())):
        if list(order) == sorted(order) or _swapped(order) and want.permute(order).shape == want.shape:
            continue
        inverse = tuple(sorted(range(len(order)), key=order.__getitem__))
        read = want.reshape([shape[d] for d in order]).permute(inverse)
        moved = want.permute(order).reshape(shape)
        for key, value in ((f"view-order:{order}", read), (f"permute-order:{order}", moved)):
            if value.shape == want.shape:
                out.append(Candidate(key, Transpose.REORDERED, value))
    return out


def _swapped(order: tuple[int, ...]) -> tuple[int, int] | None:
    """The two dimensions a permutation swaps, when it swaps exactly two."""
    moved = [d for d, o in enumerate(order) if d != o]
    return (moved[0], moved[1]) if len(moved) == 2 else None


def _transposes(want: torch.Tensor) -> list[Candidate]:
    """Two dimensions of the same size swapped: a transpose too many or one left out (in a batch of square
    matrices, `att.transpose(-2, -1)` where none was due). Told as a transpose, not as a view's order."""
    square = want.dim() == 2 and want.shape[0] == want.shape[1]
    if want.dim() == 2:
        return [Candidate("transpose", Transpose.OF_RIGHT, want.T)] if square else []
    return [Candidate(f"transpose:{a}:{b}", Transpose.swapped(a, b), want.transpose(a, b))
            for a, b in itertools.combinations(range(want.dim()), 2) if want.shape[a] == want.shape[b]]


# Simple functions of a tensor the cell may read, as a factor one step's derivative has or lacks: these, then
# the derivative of each elementwise function of the grammar.
_FACTORS = (
    Factor("{}", "_t"),
    Factor("1/{}", "torch.reciprocal(_t)", None),
    Factor("{}²", "torch.square(_t)"),
    Factor("-1/{}²", "-1 / (_t * _t)", True, " (-1/x² is the derivative of 1/x)"),
    Factor("2{}", "2 * _t", True, " (2x is the derivative of x²)"),
    Factor("sign({})", "torch.sign(_t)", False),
    *(f.factor for f in ELEMENTWISE.values() if f.factor is not None),
)


def tensor_factors(case: Case, answer: Answer, check: str):
    """(key, sentence, whole, make) for an answer off by a factor that is a tensor the cell may read, or a
    simple function of one, per element, row or column: too many to keep, so each is made only when
    every configuration before it fitted (grader.judge.diagnose.name)."""
    want = case.expected(answer, check)
    net = case.exercise.network
    parts: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    if answer.kind == ATOMIC and any(c != net.loss for c in net.consumers(answer.source)):
        _, branches, up = _per_branch(case, answer, check)
        parts = {step: (branches[step], up[step]) for step in branches}
    tensors = [t for t in _tensors(case.exercise) if case.values[t].dim() == want.dim() and all(
        v in (1, w) for v, w in zip(case.values[t].shape, want.shape, strict=True))]
    # The simplest functions first: a tensor itself before a function of another that equals it.
    functions = [(f.shown.format(t), functools.partial(f.fn, case.values[t]), f.divides, f.whose)
                 for f in _FACTORS for t in tensors]
    # By family, the most specific first: a derivative replaced by another is what a cell pasted from
    # another activation does, and it may also read as a factor too many of the whole answer.
    for step, (part, up) in parts.items():
        if up.shape == want.shape:
            for expr, f, _, whose in functions:
                yield (f"local:{step}:{expr}", f"multiplies d{step} by {expr} where it needs the derivative of the "
                                               f"step that computes {step}{whose}",
                       False, lambda f=f, part=part, up=up: want - part + up * f())
    for expr, f, divides, _ in functions:
        if divides is not None:
            yield (f"extra:{expr}", f"is multiplied by {expr}, a factor the right gradient does not have",
                   False, lambda f=f: want * f())
    # Divided by a tensor: a factor of the right formula left out, or its reciprocal put in; only the
    # cell's code tells which, so the sentence says both.
    for expr, f, divides, _ in functions:
        if divides:
            yield (f"missing:{expr}", f"is the right gradient divided by {expr}: a factor {expr} left out, or a "
                                      f"1/{expr} too many", False, lambda f=f: want / f())
    for step, (part, _) in parts.items() if len(parts) > 1 else ():
        for expr, f, divides, _ in functions:
            if divides is not None:
                yield (f"branch-extra:{step}:{expr}", f"the part flowing back through {step} is multiplied by "
                                                      f"{expr}, a factor it does not have", True,
                       lambda f=f, part=part: want - part + part * f())
            if divides:
                yield (f"branch-missing:{step}:{expr}", f"the part flowing back through {step} is divided by "
                                                        f"{expr}: a factor {expr} left out, or a 1/{expr} too many",
                       True, lambda f=f, part=part: want - part + part / f())


def _generic(case: Case, want: torch.Tensor) -> list[Candidate]:
    out = [Candidate(f"factor:{key}", does, factor * want)
           for key, factor, does in factors(_sizes(case), case.exercise.mistakes.words, case.exercise.mistakes.shown)]
    out.extend(_transposes(want))
    out.extend(_orders(want))
    return out


def _zeros(want: torch.Tensor) -> list[Candidate]:
    """First: an answer that is all zeros is told so. A cause whose values are zero too (a branch that
    is zero on the true chain, a sum that cancels) cannot be told from a cell that wrote zeros."""
    return [Candidate("zeros", Zeros.CANDIDATE, torch.zeros_like(want))]


def _steps(case: Case, source: str, sink: str) -> list[str]:
    """The tensors whose one-step gradients a block from `sink` back to `source` computes: `source` itself
    (the block's last line, whose own slips need no carrying), then those on a path to `sink` (not
    included), nearest `source` first: a slip told where it enters the backward pass last, in the most
    specific words (a chain's factor fits at every tensor of a single path; the branch it belongs to
    shows only at the last)."""
    net = case.exercise.network
    before = net.ancestors(sink)
    return [source, *(step for step in net.descendants(source) if step in before)]


def inside(case: Case, answer: Answer, check: str, keep: set[str] | None, got: torch.Tensor):
    """Candidates for an answer that runs a whole block (a fused cell, a function's gradient): one
    step's mistake inside it (a candidate of that step's own one-step cell) carried to the answer's tensor
    by the rest of the backward pass, which is linear in that step's gradient. Only the true chain's
    inner gradients are the one-step cells' (CHAIN); `keep`: the keys still to try (None: all). Each
    is first tested against `got` along one random direction, which costs a dot product, so that only
    the few that pass are carried back in full."""
    net = case.exercise.network
    sink = answer.sink or net.loss
    if check != CHAIN:
        return
    cells = {a.source: a for a in case.exercise.answers if a.kind == ATOMIC}
    # Without the rule table, its slips carried to this answer are known by their fingerprints alone.
    table = prints.table(case.config.exercise) if _derived(case.exercise) is None else None
    printed = table.slips(case, answer, CHAIN) if table is not None else []
    for tensor in _steps(case, answer.source, sink):
        if tensor not in cells:
            continue
        # In PREFERENCE's order, the fingerprints' slips among the step's own candidates.
        slips = [Candidate(key, "", None, print_, family="slips") for key, print_ in printed
                 if key.startswith(f"inside:{tensor}:") and (keep is None or key in keep)]
        inner, errors, along = _along(case, answer.source, tensor, cells[tensor])
        kept = [i for i, c in enumerate(inner) if keep is None or f"inside:{tensor}:{c.key}" in keep]
        if not kept:
            yield from slips
            continue
        want = case.expected(answer, check)
        if got.shape != want.shape:
            return
        direction = _direction(case, answer.source, tensor)[0]
        seen = float(((got - want) * direction).sum())
        # Ten times the comparison's relative tolerance, on Cauchy-Schwarz's scale: any answer close
        # enough to a candidate to fit it passes; a random one rarely.
        slack = 1e-4 * float((got.norm() + want.norm()) * direction.norm()) + 1e-12
        near = ((along[kept] - seen).abs() <= slack).tolist()
        passed = [i for i, ok in zip(kept, near, strict=True) if ok]
        tried = [inner[i] for i in passed]
        carried = _carried(case, answer.source, tensor, errors[passed]) if passed else []
        said = [_inside_said(answer, tensor, c.sentence, c.whole) for c in tried]
        made = [Candidate(f"inside:{tensor}:{c.key}", sentence, want + extra, whole=whole, family=c.family)
                for c, (sentence, whole), extra in zip(tried, said, carried, strict=True)]
        yield from sorted([*made, *slips], key=lambda c: PREFERENCE.index(c.family))


@functools.lru_cache(maxsize=4096)  # Case hashes by identity: every wrong answer of a class shares these
def _direction(case: Case, source: str, tensor: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed random direction in the gradient of `source` and where it moves `tensor`'s gradient: what
    `inside` tests each candidate along before it carries any back in full."""
    want = case.truth["d" + source]
    direction = torch.randn(want.shape, generator=torch.Generator().manual_seed(0), dtype=want.dtype)
    return direction, block_jvp(case.exercise.network, case.values, source, tensor, direction)


@functools.lru_cache(maxsize=4096)
def _along(case: Case, source: str, tensor: str, cell: Answer) -> tuple[list[Candidate], torch.Tensor, torch.Tensor]:
    """The step's candidates of the gradient's shape, their errors, and how far each moves the answer
    along `_direction`: the same for every answer of a class that runs this block."""
    truth = case.truth["d" + tensor]
    inner = [c for c in candidates(case, cell, CHAIN) if c.tensor is not None and c.tensor.shape == truth.shape]
    if not inner:
        return inner, torch.empty(0), torch.empty(0)
    errors = torch.stack([c.tensor - truth for c in inner])
    return inner, errors, (errors * _direction(case, source, tensor)[1]).reshape(len(inner), -1).sum(1)


def _inside_said(answer: Answer, tensor: str, sentence: str, whole: bool) -> tuple[str, bool]:
    """(what is said, whether it has its own subject) of a step's slip inside a block: at the block's own
    tensor, the slip as that tensor's one-step cell would be told it; further in, where it goes wrong."""
    if tensor == answer.source:
        return sentence, whole
    return (f"goes wrong at {tensor}: {sentence}" if whole else f"forms a gradient for {tensor} that {sentence}"), False


def carried_slips(case: Case, answer: Answer) -> list[tuple[str, str, torch.Tensor]]:
    """(key, sentence, tensor) of each rule-table slip of a step inside a fused answer's block, carried to
    the answer's tensor on the true chain, as `inside` makes them: what the fingerprints of a fused
    answer hold."""
    net = case.exercise.network
    cells = {a.source: a for a in case.exercise.answers if a.kind == ATOMIC}
    want, found = case.expected(answer, CHAIN), []
    for tensor in _steps(case, answer.source, answer.sink or net.loss):
        values = slip_values(case, cells[tensor], CHAIN) if tensor in cells else None
        truth = case.truth["d" + tensor]
        values = [(key, sentence, t) for key, sentence, t in values or () if t.shape == truth.shape]
        if not values:
            continue
        carried = _carried(case, answer.source, tensor, torch.stack([t - truth for _, _, t in values]))
        found += [(f"inside:{tensor}:{key}", _inside_said(answer, tensor, sentence, False)[0], want + extra)
                  for (key, sentence, _), extra in zip(values, carried, strict=True)]
    return found


def _carried(case: Case, source: str, tensor: str, errors: torch.Tensor) -> torch.Tensor:
    """Each error of `tensor`'s gradient carried back to `source`."""
    return block_vjp(case.exercise.network, case.values, source, tensor, errors, batched=True)


# The rule table this process names slips with (the grader.derive module), chosen once by what starts the
# process (`use_rule_table`): the grader's hidden suite and `course init`'s fingerprints choose it, the
# self-check chooses it where grader.derive is installed. Never imported here: backprop-ninja-student ships
# the modules the self-check imports, and the rule table writes every reference answer, so it stays out of
# that wheel (whose self-check knows the slips by their fingerprints). None: no rule table.
_RULE_TABLE: list[ModuleType | None] = [None]
# What it derives, once per exercise a process grades: the gradients by name; the closed forms by cell id.
_DERIVED: dict[int, tuple[Exercise, dict]] = {}
_CLOSED: dict[int, tuple[Exercise, dict]] = {}


def use_rule_table(table: ModuleType | None) -> None:
    """Name slips with `table` (grader.derive: its `for_exercise` and `closed_forms`), or, with None, by the
    fingerprints alone."""
    if _RULE_TABLE[0] is not table:
        _RULE_TABLE[0] = table
        _DERIVED.clear()
        _CLOSED.clear()


def _derived(exercise: Exercise) -> dict | None:
    """The rule table's gradients of `exercise` by name; None without a rule table."""
    table = _RULE_TABLE[0]
    if table is None:
        return None
    if id(exercise) not in _DERIVED:
        try:
            gradients = {g.name: g for g in table.for_exercise(exercise)}
        except ValueError:  # derive.DeriveError: an operation the rule table has no rule for
            gradients = {}
        _DERIVED[id(exercise)] = (exercise, gradients)
    return _DERIVED[id(exercise)][1]


def _closed(exercise: Exercise) -> dict:
    """Each fused cell's closed form (grader.derive.simplify.Closed), by cell id: the cell a student's is
    read against, and, where it is one operation's gradient (a cross-entropy's), the slips of the cell's
    own formula, which no step of the chain makes. Derived only when a fused answer is wrong (the closed
    forms cost more than the gradients)."""
    gradients = _derived(exercise)
    if not gradients:
        return {}
    if id(exercise) not in _CLOSED:
        forms = _RULE_TABLE[0].closed_forms(exercise)
        _CLOSED[id(exercise)] = (exercise, {cell: form for cell, form in forms.items() if not isinstance(form, str)})
    return _CLOSED[id(exercise)][1]


RULE = "rule:"  # the keys of the exercise's own named slips of a step
SLIP = "slip:"  # the keys of the rule table's slips of a step (and of their fingerprints)


def slip_values(case: Case, answer: Answer, check: str) -> list[tuple[str, str, torch.Tensor]] | None:
    """(key, sentence, tensor) of each slip the rule table knows for this gradient's own step, run here on
    this case: the upstream gradients of this check, the forward values; None without the rule table.
    Their code is derived from the exercise's forward lines, never a student's, so running it in the
    trusted process is running the grader's own. An exercise the rule table cannot derive has none."""
    gradients = _derived(case.exercise)
    if gradients is None:
        return None
    gradient = getattr(_closed(case.exercise).get(answer.cell_id), "gradient", None) if answer.kind == FUSED else \
        gradients.get(answer.variable)
    if gradient is None:
        return []
    found, shape = [], case.expected(answer, check).shape
    for key, slip in _keyed(gradient):
        value = _run_derived(case, answer, check, slip.code)
        # A slip that changes the shape is told more exactly by the shape hints (which dimension, keepdim).
        if value is not None and value.shape == shape:
            found.append((key, slip.sentence, value))
    return found


def _keyed(gradient) -> Iterator[tuple[str, object]]:
    """Each slip of the gradient by its key. A slip's name recurs across a step's uses (missed-branch in
    each) and a product's factors (mul-local): its key names the use, and counts the rest, the same on every
    case. Those that give a graded slip's values and say another mistake come last, searched as any other."""
    seen: collections.Counter = collections.Counter()
    for slip in (*gradient.slips(), *gradient.alike):
        key = f"{SLIP}{slip.name}:{slip.consumer}" if slip.consumer else f"{SLIP}{slip.name}"
        seen[key] += 1
        yield key + (f"#{seen[key]}" if seen[key] > 1 else ""), slip


def unwritten(case: Case, answer: Answer, check: str, key: str, code: str | None) -> bool:
    """Whether the rule-table slip `key` reads a value the answer's code reads nowhere: its values may equal
    the answer's, but the code says the student wrote something else (`-y**-2` for y = x**-1, the derivative
    taken at the output, equals the slip `-x**2`, a positive exponent), which a reading of the code
    (`read_swaps`) tells better where it fits."""
    written = syntax.names_read(code) if code and answer.kind == ATOMIC else None
    if not written:
        return False
    # Each use's gradient assigned with = is a slip of two assignments or more anew, a branch left out one: the
    # same values where the first use is the one left out, told apart by the code.
    slip = key[len(SLIP):].split(":")[0].split("#")[0] if key.startswith(SLIP) else ""
    anew = _assigned_anew(code, answer.variable)
    if (slip == "overwrite" and anew < 2) or (slip == "missed-branch" and anew > 1):
        return True
    if key.startswith(SLIP) and _RULE_TABLE[0] is not None:
        reads = slip_reads(case, answer).get(key, ())
    elif key.startswith(SLIP):  # known by its fingerprint: what it reads, opened by an answer that is the slip
        opened = next((c.opened.get("reads") for c in candidates(case, answer, check) if c.key == key), None)
        reads = opened.split(",") if opened else ()
    elif key.startswith(RULE):
        reads = _rule_reads(case, answer, *key[len(RULE):].split(":", 1))
    else:
        return False
    readable = _readable(case, answer, check)
    return any(name in readable and name not in written for name in reads or ())


def slip_reads(case: Case, answer: Answer) -> dict[str, tuple[str, ...]]:
    """The names the code of each of the rule table's slips of this atomic answer reads, by key."""
    gradient = (_derived(case.exercise) or {}).get(answer.variable)
    return {key: _values_read(slip.code) for key, slip in _keyed(gradient)} if gradient is not None else {}


def _values_read(code: str) -> tuple[str, ...]:
    """The names whose values the code reads: not those it reads only for a shape (`torch.ones_like(x)`,
    `h.shape[1]`), which a student who writes the same gradient by broadcasting never spells."""
    try:
        tree = syntax.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    shaped = {id(node.args[0]) for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args
              and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_like")}
    shaped |= {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)
               and node.attr in ("shape", "ndim", "dtype", "device")}
    return tuple(dict.fromkeys(n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                               and isinstance(n.ctx, ast.Load) and id(n) not in shaped))


def _rule_reads(case: Case, answer: Answer, step: str, name: str) -> tuple[str, ...]:
    """The tensors an exercise's named slip of `step` reads: its input (the answer's tensor) where its value
    moves with it, its output where it moves with that (a slip is a function of the two)."""
    rule = case.exercise.mistakes.rules.get(step)
    fn = next((fn for key, _, fn in rule.slips if key == name), None) if rule is not None else None
    if fn is None:
        return ()
    x, y = case.values[answer.source], case.values[step]
    base = fn(x, y)
    return tuple(tensor for tensor, moved in ((answer.source, fn(x * 1.5 + 0.25, y)), (step, fn(x, y * 1.5 + 0.25)))
                 if not torch.allclose(moved, base))


def _readable(case: Case, answer: Answer, check: str) -> dict:
    """What a cell of this answer may read on this case and check: forward values, the upstream gradients
    given to it, the sizes."""
    return {**case.values, **case.upstream(answer, check), **case.sizes}


@functools.lru_cache(maxsize=4096)  # a class's answers that read the same swapped names share one run
def _run_derived(case: Case, answer: Answer, check: str, code: str) -> torch.Tensor | None:
    """The answer's variable after `code`, derived by the rule table from the exercise's forward lines (never a
    student's), run here on this case; None where it cannot run."""
    namespace = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in _readable(case, answer, check).items()}
    namespace.update(torch=torch, F=F)
    try:
        exec(compile(code, f"<derived {answer.variable}>", "exec"), namespace)  # noqa: S102 - derived, not a student's
    except Exception:  # noqa: BLE001 - a variant that cannot run on this case is no candidate here
        return None
    value = namespace.get(answer.variable)
    return value.detach().to(torch.float64) if isinstance(value, torch.Tensor) else None


# At most this many names read in place of others at once (a time step shifted in every use reads each of a
# step's tensors at its neighbour), and at most this many swaps tried per answer and case.
_MOST_SWAPPED, _MOST_SWAPS = 4, 160


def read_swaps(case: Case, answer: Answer, check: str, code: str | None, got: torch.Tensor) -> list[Candidate]:
    """What the answer's code reads against what the rule table's cell reads: the derived cell with some of its
    names read as others the code reads. Every name the derived cell reads and the code does not is swapped
    for one, and every name the code reads and the derived cell does not is one swapped in; a name both read
    may be swapped too (a time step shifted in every use: h2 read as h1, h3 as h2). Its sentence comes from
    the code and is said only where the values confirm it (the answer equals the swapped cell on every
    configuration; a shape that differs by size-1 dimensions alone is the comparison's to tell, so the swapped
    cell is compared in the answer's): the code is parsed here, never run. A fused cell is read against its
    closed form."""
    derived = _derived_cell(case, answer)
    if derived is None or not code:
        return []
    derived_code, derived_reads = derived
    written = syntax.names_read(code)
    if written is None:
        return []
    readable = _readable(case, answer, check)
    written = [w for w in written if w in readable and w != answer.variable]
    reads = [r for r in derived_reads if r in readable]
    needed = [r for r in reads if r not in written]
    extra = {w for w in written if w not in reads}
    if not needed and extra and len(written) <= 3 * _MOST_SWAPPED:
        return _use_swaps(case, answer, check, derived_code, readable, extra, got)
    if not needed or len(needed) > _MOST_SWAPPED or len(written) > 3 * _MOST_SWAPPED:
        return []
    shared = [r for r in reads if r in written]

    def fits(old: str, new: str) -> bool:
        """A name is swapped for another of its shape (a neighbour), or, where the derived cell reads the new name
        nowhere, for any (an older upstream gradient of another shape): a name swapped for one the derived cell
        reads elsewhere in another shape is no reading but a shape left out, which the shape hints tell."""
        if old == new:
            return False
        a, b = readable[old], readable[new]
        return new in extra or isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape

    out: list[Candidate] = []
    tried = 0
    for more in range(_MOST_SWAPPED - len(needed) + 1):
        for also in itertools.combinations(shared, more):
            olds = (*needed, *also)
            for news in itertools.permutations(written, len(olds)):
                if not extra <= set(news) or not all(map(fits, olds, news)):
                    continue
                tried += 1
                if tried > _MOST_SWAPS:
                    return out
                pairs = list(zip(olds, news, strict=True))
                value = _run_derived(case, answer, check, _renamed(derived_code, dict(pairs)))
                if value is not None and value.shape != got.shape and _squeezed(value.shape) == _squeezed(got.shape):
                    value = value.reshape(got.shape)
                if value is not None:
                    said = Chain.reads_instead(", ".join(news), ", ".join(olds))
                    out.append(Candidate(f"reads:{pairs}", said, value))
    return out


def _use_swaps(case: Case, answer: Answer, check: str, derived_code: str, readable: dict, extra: set[str],
               got: torch.Tensor) -> list[Candidate]:
    """Where the code reads every name the derived cell reads, and more: the derived cell with one use of a name
    read as one of those others, of its shape (a normalization's closed form reading the centred input where the
    last use of the normalized one belongs, which swapping every use of a name never finds: the fourteenth student
    trial's line said only "wrong values")."""
    tree = syntax.parse(derived_code)
    uses = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    out: list[Candidate] = []
    for at, old in enumerate(uses):
        for new in sorted(extra):
            a, b = readable.get(old), readable.get(new)
            if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape) \
                    or len(out) >= _MOST_SWAPS:
                continue
            value = _run_derived(case, answer, check, _renamed(derived_code, {old: new}, at=at))
            if value is not None and value.shape != got.shape and _squeezed(value.shape) == _squeezed(got.shape):
                value = value.reshape(got.shape)
            if value is not None:
                count = uses.count(old)
                which = "" if count == 1 else f" (in one of its {count} uses: your code reads both)"
                out.append(Candidate(f"reads-at:{at}:{old}:{new}", Chain.reads_instead(new, old) + which, value))
    return out


def _squeezed(shape: torch.Size) -> tuple[int, ...]:
    return tuple(size for size in shape if size != 1)


def _derived_cell(case: Case, answer: Answer) -> tuple[str, tuple[str, ...]] | None:
    """(the rule table's code of the answer's cell, the names it reads): an atomic cell's gradient, a fused
    cell's closed form; None where it has neither."""
    if answer.kind == ATOMIC:
        gradient = (_derived(case.exercise) or {}).get(answer.variable)
        return None if gradient is None else (gradient.code, tuple(gradient.reads))
    form = _closed(case.exercise).get(answer.cell_id) if answer.kind == FUSED else None
    reads = None if form is None else syntax.names_read(form.cell)
    return None if reads is None else (form.cell, tuple(r for r in reads if r != answer.variable))


@functools.lru_cache(maxsize=1024)
def _assigned_anew(code: str, variable: str) -> int:
    """How many of the cell's statements assign `variable` a value that does not read it (`dx = ...`, not
    `dx = dx + ...` nor `dx += ...`)."""
    tree = syntax.parse(code)
    return sum(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == variable for t in node.targets)
               and not any(isinstance(n, ast.Name) and n.id == variable for n in ast.walk(node.value))
               for node in ast.walk(tree))


def _renamed(code: str, names: dict[str, str], at: int | None = None) -> str:
    """The code with the names it reads renamed: every use, or only the `at`-th name it reads (ast.walk's order)."""
    tree = syntax.parse(code)
    loads = [node for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)]
    for index, node in enumerate(loads):
        if node.id in names and at in (None, index):
            node.id = names[node.id]
    return ast.unparse(tree)


def _rule_slips(case: Case, answer: Answer, check: str) -> list[Candidate]:
    """The rule table's slips of this step as candidates: run here, or, in a student's environment without
    the rule table, known by the fingerprints `course init` wrote beside the notebook."""
    values = slip_values(case, answer, check)
    if values is not None:
        return [Candidate(key, sentence, tensor) for key, sentence, tensor in values]
    table = prints.table(case.config.exercise)
    if table is None:
        return []
    # A fused answer's fingerprints also hold its inner steps' slips, which `inside` tries.
    return [Candidate(key, "", None, print_) for key, print_ in table.slips(case, answer, check)
            if not key.startswith("inside:")]


# The one order in which families of candidates are preferred when more than one fits an answer on every
# configuration: all zeros (a fact, where any cause would be one of many); the exercise's own named slips
# (its instructor's words); the rule table's slips of the step itself (each the one edit of the derived
# answer that makes it, told with this exercise's own names); then the search of the neighbourhood for what
# no single slip reaches. A factor of the whole answer goes before a branch's: when both fit, the other
# branches are (nearly) zero on these upstream gradients, and the whole answer's factor is the account that
# holds for any. The chain rule's slips go before the elementwise ones: a local derivative left out is the
# simpler account of an answer that also equals a derivative read at a tensor where it is 1 everywhere.
PREFERENCE = ("zeros", "named", "slips", "indexing", "reductions", "generic", "twice", "chain", "elementwise",
              "operands", "substitutions", "neighbours")
# After every family of `candidates`, each searched only when none before it fits (each costs more to make): the
# names the answer's code reads in place of the derived cell's (`read_swaps`), an answer off by a factor that is
# a tensor (`tensor_factors`), then a step's mistake inside a fused block (`inside`, whose candidates go in
# PREFERENCE's order too).
SEARCHES = ("candidates", "reads", "tensor factors", "inside")


@functools.lru_cache(maxsize=4096)  # Case hashes by identity: a class reuses each case's neighbourhood
def candidates(case: Case, answer: Answer, check: str) -> tuple[Candidate, ...]:
    """Every candidate of this answer on this case and check, in the order they are preferred
    (PREFERENCE). Only an atomic answer is one backward step, whose branches the forward pass shows; any
    other is searched for factors, a transpose and zeros."""
    net = case.exercise.network
    want = case.expected(answer, check)
    found = {"zeros": _zeros(want), "generic": _generic(case, want)}
    if answer.kind in (ATOMIC, FUSED):  # a fused cell's: its closed form's own
        found["slips"] = _rule_slips(case, answer, check)
    if answer.kind == ATOMIC:
        if any(c != net.loss for c in net.consumers(answer.source)):
            want, branches, up = _per_branch(case, answer, check)
            found.update(named=_named_slips(case, answer, want, branches, up),
                         indexing=[*_indexing(case, answer, want, up), *_last_example(case, answer, up)],
                         reductions=_reductions(case, answer, want, up),
                         twice=[*_twice_used(case, answer, check, want, branches),
                                *_overlapping_reads(case, answer, want, up)],
                         chain=_chain_rule(case, answer, check, want, branches, up),
                         elementwise=_elementwise(case, answer, want, branches, up),
                         operands=_operands(case, answer, want, branches, up),
                         substitutions=_substitutions(case, answer, check, want, branches, up),
                         neighbours=_neighbour_steps(case, answer, want, branches, up))
    return tuple(replace(c, family=family) for family in PREFERENCE for c in found.get(family, ()))
