"""`backprop-ninja exercise check`: what an instructor runs on an exercise file before making a course of
it. Everything a class would otherwise find at grading time is tried here, once: the declaration
(`exercise.load` refuses one that names a tensor the network lacks or orders answers so a cell would need a
gradient not yet computed), the hidden draws (four configurations from a throw-away salt, so ranges that
admit none are said now), the forward pass at every drawn size, and the reference answers derived from
the forward lines (an operation without a rule is named with its line), each shown as the solved notebook
will hold it (the fused blocks' and the functions' cells after the atomic ones), with how many wrong
variants of them the rule table makes, each of which must lose credit on some hidden configuration (graded
here on the trial configurations, CHAIN and LOCAL, as the hidden suite grades it) unless the exercise
accepts it; and every answer cell of the solved notebook passes the static check's default allowlist.
Slips the rule table made but could not tell from the right answer on the derivation's configurations
are said, not graded. All of that runs in this process; the course itself is built and graded after
it, through every route, by grader/lms/dry_run.py.
"""
from __future__ import annotations

from collections.abc import Iterator

import torch

from grader import derive
from grader import exercise as ex
from grader.authoring import skeleton
from grader.course import Tolerance, TrainingCheck
from grader.judge import configs, exam
from grader.judge.compare import compare
from grader.sandbox import static_check

# Enough configurations to find ranges that admit too few sizes, as a course's default count would.
TRIAL_CONFIGURATIONS = 4


class CheckError(ValueError):
    """The exercise cannot become a course; the message names the line or the setting and the fix."""


def _single_line_blocks(exercise: ex.Exercise) -> Iterator[str]:
    """A note for each fused block that spans one forward line: it is graded, but its answer is that
    line's atomic one, so the exercise asks the same thing twice (an instructor most likely meant a block
    ending further down). One that ends at an intermediate whose gradient it reads (not a loss term's 1, which
    its closed form leaves out) is a problem: its cell is the atomic cell's code again, reading the same name,
    so a notebook run without cell ids cannot tell the two apart (an instructor trial's check failed on 27
    self-check lines, none naming the block)."""
    net = exercise.network
    for answer in (a for a in exercise.answers if a.kind == ex.FUSED):
        sink = answer.sink or net.loss
        reached, todo = set(), [answer.source]
        while todo:
            for consumer in net.consumers(todo.pop()):
                if consumer not in reached:
                    reached.add(consumer)
                    todo.append(consumer)
        before, todo = {sink}, [sink]
        while todo:
            for name in net.step[todo.pop()].inputs:
                if name in net.step and name not in before:
                    before.add(name)
                    todo.append(name)
        if reached & before == {sink} and answer.sink is not None and answer.sink not in net.unit_gradients:
            raise CheckError(f"{answer.grade_id} spans one forward line ({sink} = {net.step[sink].code}), so its cell "
                             f"is d{answer.source}'s atomic cell again, the same code reading d{sink}, and a notebook "
                             "run without cell ids (the classic Notebook, nbgrader's own run) cannot tell the two "
                             "apart: end the block at a later tensor or at the loss, or drop it")
        if reached & before == {sink}:
            yield (f"note: {answer.grade_id} spans one forward line ({sink} = {net.step[sink].code}), so its answer "
                   f"is d{answer.source}'s atomic one again: end the block at a later tensor, or drop it")


def _hidden_slips(exercise: ex.Exercise, gradients, scored: list[configs.Config]) -> Iterator[str]:
    """A line for each rule-table slip that scores full on every hidden configuration (a gain of exactly
    ones everywhere would hide `dxhat = dln1`), unless the exercise accepts it: each slip's cell runs here,
    in this process, as the suite would grade it (CHAIN and LOCAL)."""
    cases = [exam.prepare(config) for config in scored]
    atomic = {a.variable: a for a in exercise.answers if a.kind == ex.ATOMIC}
    tolerance = Tolerance()
    for gradient in gradients:
        answer = atomic.get(gradient.name)
        accepted = exercise.accepted.get(gradient.name, ())
        for slip in (s for s in gradient.slips() if answer is not None and s.name not in accepted):
            if all(_passes(slip.code, answer, case, check, tolerance)
                   for case in cases for check in exam.checks(answer)):
                yield (f"{answer.grade_id}: the slip {slip.name} (your {gradient.name} {slip.sentence}) scores full on "
                       f"every hidden configuration: draw what it reads at random (not ones or zeros "
                       f"alone), or accept it: accept={{\"{gradient.name}\": \"{slip.name}\"}}")
                break


def _derived_values(exercise: ex.Exercise, gradients) -> list[dict]:
    """Each derivation configuration's data, forward values and the rule table's gradients on them."""
    net = exercise.network
    found = []
    for configuration in derive.configurations(exercise):
        inputs = configuration.inputs
        values = {**net.forward({k: inputs[k] for k in net.parameters}, {k: inputs[k] for k in net.data}),
                  **ex.NAMESPACE}
        for gradient in gradients:
            exec(compile(gradient.code, f"<derived {gradient.name}>", "exec"), values)  # noqa: S102 - the rule table's
        found.append(values)
    return found


def _zero_gradients(gradients, drawn: list[dict]) -> list[str]:
    """The gradients that are zero on every derivation configuration: the loss does not move with those tensors
    there (an instructor trial's triplet loss, whose margin no triplet of its data violated, was 0 with every
    gradient zero), so no slip of theirs or of what they reach can change anything, and a notebook run on such
    data checks zeros against zeros."""
    # zero to round-off: a term that cancels (a bias added to both sides of a difference) leaves 1e-17s
    return [g.name for g in gradients
            if all(isinstance(v.get(g.name), torch.Tensor) and bool((v[g.name].abs() <= 1e-12).all()) for v in drawn)]


def _symmetric(exercise: ex.Exercise, drawn: list[dict]) -> list[str]:
    """The square matrices (data, forward values, gradients) symmetric on every derivation configuration, whose
    sizes differ: symmetric by the data's construction (a trial's InfoNCE with its positives at torch.arange(N)
    made dlogp symmetric, so a sum over the wrong dimension, transposed, got the chain-only share; another's
    normalized adjacency), where a transpose or the other dimension's sum is no mistake any check sees."""
    def symmetric(value) -> bool:
        return isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() == 2 \
            and value.shape[0] == value.shape[1] > 1 and bool(value.any()) and \
            bool(torch.allclose(value, value.T, **derive.TOLERANCE))

    names = [k for k in drawn[0] if k not in ex.NAMESPACE and k not in exercise.network.parameters]
    return [k for k in names if all(symmetric(v.get(k)) for v in drawn)]


def _hidden_by_zeros(exercise: ex.Exercise, gradients) -> dict[str, int]:
    """For each input the exercise draws as zeros in every derivation configuration (a GRU's `h0 = zeros(N, H)`),
    how many of the slips equal to the right answer there differ from it once that input alone is drawn at
    random: what the instructor can change to grade them."""
    net = exercise.network
    drawn = derive.configurations(exercise)
    zeros = [k for k, v in drawn[0].inputs.items()
             if v.is_floating_point() and all(not c.inputs[k].any() for c in drawn)]
    hidden = {}
    for name in zeros:
        inputs = {**drawn[0].inputs, name: torch.randn(drawn[0].inputs[name].shape, dtype=torch.float64,
                                                       generator=torch.Generator().manual_seed(0))}
        right = {**net.forward({k: inputs[k] for k in net.parameters}, {k: inputs[k] for k in net.data}),
                 **ex.NAMESPACE}
        for gradient in gradients:
            exec(compile(gradient.code, f"<derived {gradient.name}>", "exec"), right)  # noqa: S102 - the rule table's
        count = len({f"{gradient.name} {slip.name}" for gradient in gradients for slip in gradient.right_anyway
                     if _differs(slip.code, gradient.name, right)})  # each named once, as the note names them
        if count:
            hidden[name] = count
    return hidden


def _differs(code: str, name: str, right: dict) -> bool:
    trial = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in right.items()}
    try:
        exec(compile(code, f"<slip of {name}>", "exec"), trial)  # noqa: S102 - the rule table's code
        got, want = trial[name], right[name]
        return got.shape != want.shape or not torch.allclose(got, want, **derive.TOLERANCE)
    except Exception:  # noqa: BLE001 - a slip that fails to run differs
        return True


def _passes(source: str, answer: ex.Answer, case, check: str, tolerance: Tolerance) -> bool:
    namespace = {**case.student_view(), **case.sizes, **case.upstream(answer, check), **ex.NAMESPACE}
    try:
        exec(compile(source, f"<{answer.grade_id}>", "exec"), namespace)  # noqa: S102 - the rule table's code
    except Exception:  # noqa: BLE001 - a slip that fails to run loses credit
        return False
    return compare(namespace.get(answer.variable), case.expected(answer, check), rtol=tolerance.rtol,
                   atol=tolerance.atol).passed


def check(spec: str) -> Iterator[str]:
    """The report's lines, in the order an instructor reads them; CheckError at the first problem."""
    torch.set_num_threads(1)
    try:
        exercise = ex.load(spec)
    except ex.ExerciseError as exc:
        raise CheckError(str(exc)) from None
    net = exercise.network
    yield f"{exercise.name}: {exercise.title}"
    yield (f"network: {len(net.steps)} steps; parameters {', '.join(net.parameters)}; data {', '.join(net.data)}; "
           f"loss {net.loss}")
    yield "sizes: " + ", ".join(
        f"{k}={v} (hidden {exercise.ranges[k][0]}..{exercise.ranges[k][1] - 1})" if k in exercise.ranges
        else f"{k}={v} (constant)" for k, v in exercise.lecture.items())
    kinds = [a.kind for a in exercise.answers]
    training = f", training check {exercise.training.grade_id}" if exercise.training else ""
    yield (f"answers: {kinds.count(ex.ATOMIC)} atomic, {kinds.count(ex.FUSED)} fused, "
           f"{kinds.count(ex.FUNCTION)} from functions{training}")
    for key in configs.never_above(exercise):
        low, high, value = *exercise.ranges[key], exercise.lecture[key]
        yield (f"note: {key} is never drawn above its notebook value {value} (its range is {low}..{high - 1}): an "
               f"answer that slices to {value} ([:{value}]) takes every entry everywhere and is never caught: widen "
               f"the range past {value}")
    shared: dict[object, list[str]] = {}
    for key in exercise.ranges:
        shared.setdefault(exercise.lecture[key], []).append(key)
    for value, keys in shared.items():
        if len(keys) > 1:  # a second instructor trial's n and nh, both 32
            yield (f"note: {' and '.join(keys)} are all {value} at the notebook's sizes, so a product or a sum that "
                   f"mixes them up runs there and fails only on hidden configurations, whose error messages feedback "
                   f"withholds: give them different notebook values")
    yield from _single_line_blocks(exercise)
    try:
        drawn = configs.generate(spec, "exercise check", TRIAL_CONFIGURATIONS)
    except ValueError as exc:
        raise CheckError(f"{exc}: widen the ranges or loosen `hidden`") from None
    for config in drawn:
        generator = torch.Generator().manual_seed(config.seed)
        params, data = {}, {}
        try:
            params = exercise.init(config.sizes, generator, torch.float64, **config.init_options)
            data = exercise.batch(config.sizes, generator)
            values = net.forward(params, data)
        except Exception as exc:  # noqa: BLE001 - the instructor's code, reported in one line
            where = net.failing_line(params, data) if data else ""
            raise CheckError(f"the forward pass fails at {config.sizes}: "
                             + (where or f"{type(exc).__name__}: {exc}")) from None
        if values[net.loss].dim() != 0:
            raise CheckError(f"the loss {net.loss!r} has shape {tuple(values[net.loss].shape)}: it must be a scalar")
        if not bool(torch.isfinite(values[net.loss])):  # no gradient to grade against
            raise CheckError(f"the loss {net.loss!r} is {values[net.loss].item()} at {config.sizes}: make it finite "
                             "for every batch the data lines draw (a row masked whole with -inf gives NaN, a log of 0 "
                             "gives inf)")
    yield "hidden configurations (from a trial salt): " + "; ".join(str(c.sizes) for c in drawn[:-1])
    try:
        found = skeleton.derived(exercise)
    except derive.DeriveError as exc:
        raise CheckError(str(exc)) from None
    hiding = list(_hidden_slips(exercise, found.gradients, [c for c in drawn if c.scored]))
    if hiding:
        raise CheckError("\n".join(hiding))
    slips = sum(len(g.slips()) for g in found.gradients)
    cells = skeleton.references(exercise, found)
    refused = [f"{cell_id}: the static check refuses the derived answer, line {r.line}: {r.reason}: {r.code}"
               for cell_id, source in cells.items() if (r := static_check.check(source)) is not None]
    if refused:  # the rule table emits a call no answer cell may make: the solved notebook itself would lose it
        raise CheckError("\n".join(refused))
    if exercise.training is not None:  # a run autograd itself cannot make finite fails every student's check
        lr = exercise.settings.get("learning_rate", TrainingCheck.learning_rate)
        try:
            exam.prepare_training(configs.training_config(spec, "exercise check"), TrainingCheck.trajectory_steps, lr)
        except exam.TrainingNotFinite as exc:
            raise CheckError(str(exc)) from None
    others = [a for a in exercise.answers if a.kind != ex.ATOMIC and a.cell_id in cells]
    whole = len(dict.fromkeys(a.cell_id for a in others))
    yield (f"derived: {len(found.gradients)} reference answers, {whole} fused or function "
           f"cell{'' if whole == 1 else 's'}, {slips} mutants from the rule table's slips")
    for cell_id, closed in found.closed.items():
        yield f"closed form: {cell_id} is {closed.what} (proven against autograd): its answer is that formula"
    for cell_id, why in found.chained.items():
        yield f"note: {cell_id}: {why}"
    drawn_values = _derived_values(exercise, found.gradients)
    symmetric = _symmetric(exercise, drawn_values)
    if symmetric:
        many = len(symmetric) > 1
        yield (f"note: {', '.join(symmetric[:6])}{' and more' if len(symmetric) > 6 else ''} "
               f"{'are' if many else 'is'} symmetric on every derivation configuration (by the data's construction?): "
               f"a transpose of {'one' if many else 'it'}, or a sum over its other dimension, "
               "changes nothing there, so an answer with that mistake gets this loss's values (where it reads an "
               "upstream gradient, the chain-only share of its points) and no check tells it: draw the data so that "
               f"{'they are' if many else 'it is'} not symmetric, where such a mistake is to be graded")
    # Each slip name once per gradient: `W * W` makes the same slip in both factors.
    right = list(dict.fromkeys(f"{g.name} {s.name}" for g in found.gradients for s in g.right_anyway
                               if s.name not in exercise.accepted.get(g.name, ())))
    zero = _zero_gradients(found.gradients, drawn_values)
    if zero and not right:  # no slip hides there, but zeros are this loss's values (a trial's triplet loss, whose
        # bias cancels: `db = torch.zeros_like(b)` got the chain-only share unwarned)
        one = len(zero) == 1
        yield (f"note: {', '.join(zero)} {'is' if one else 'are'} zero on every derivation configuration (the loss "
               f"does not move with {'it' if one else 'them'}: a term that cancels, a hinge never active on the data "
               f"drawn?): an answer of zeros is this loss's value, right on the chain and wrong as one backward step "
               f"with other upstream gradients, so it gets the chain-only share of its points")
    if right:  # the rule table made them, but no notebook could tell them from the answer: said, not graded
        zeros = _hidden_by_zeros(exercise, found.gradients)
        if zeros:  # zeros on the hidden configurations too: each of them scores full there (item 4's refusal; an
            # instructor trial's GRU, whose h0 = zeros left dr1 zero, graded `dr1 = torch.zeros_like(r1)` full)
            raise CheckError("\n".join(
                f"{count} slips of the rule table score full on every configuration, the course's hidden ones too: "
                f"each changes a term that reads {name}, which is zeros in every configuration (the term vanishes, "
                "the slip with it)"
                + (f", and {', '.join(zero)} {'is' if len(zero) == 1 else 'are'} zero there, so an answer of zeros "
                   "scores full" if zero else "")
                + f": draw {name} at random ({name} = randn(...) * 0.1) to grade them, or accept each in the file "
                  f"(accept={{\"gradient\": \"slip ...\"}}): {', '.join(right)}" for name, count in zeros.items()))
        why = ""
        if zero:
            why += (f"; {', '.join(zero)} {'is' if len(zero) == 1 else 'are'} zero on every derivation configuration "
                    "(the loss does not move with them there: a hinge, a clamp or a ReLU never active on the data "
                    "drawn?), so no slip that reaches them changes anything, and a notebook run on such data checks "
                    "zeros against zeros: draw data that makes them active; where they are zero for any data (a term "
                    "that cancels, a bias before a normalization), those slips are no mistakes to grade")
        fixed = [k for k, v in exercise.lecture.items() if type(v) is int and k not in exercise.ranges]
        square = bool(fixed) and any("transpose" in slip for slip in right)
        if square:
            # an instructor trial's im2col: 9 positions by 9 kernel entries, a square, symmetric matrix on every draw
            them = "it" if len(fixed) == 1 else "them"
            why += (f"; a transpose changes nothing on a square, symmetric matrix, and {', '.join(fixed)} "
                    f"{'is' if len(fixed) == 1 else 'are'} the same in every configuration, the course's hidden ones "
                    f"too: where a matrix is square and symmetric only at {them}, give {them} a range of values "
                    f"(sizes={{{fixed[0]!r}: ({exercise.lecture[fixed[0]]}, (low, high))}}); where it is symmetric by "
                    "construction, accept the slip")
        # A square matrix at fixed sizes is one on the grader's draws too; data that leaves a hinge idle may not be
        maybe = "" if square else " (the course's grader may still, on its own draws)"
        # Each with its sentence: an instructor trial could not tell which of a gradient's slips a bare name meant.
        said = {f"{g.name} {s.name}": f"your {g.name} {s.sentence}" for g in found.gradients for s in g.right_anyway}
        yield (f"note: {len(right)} slips equal the right answer on every derivation configuration, so this check "
               f"cannot grade them{maybe}{why}: {'; '.join(f'{r} ({said[r]})' for r in right)}")
    for gradient in found.gradients:
        yield ""
        yield from gradient.source.rstrip("\n").splitlines()
    for cell_id in dict.fromkeys(a.cell_id for a in others):
        yield ""
        yield f"# ---- {cell_id}: the solved notebook's answer cell"
        yield from cells[cell_id].rstrip("\n").splitlines()
