"""The notebook of an exercise that has no prose of its own: a prose source (in the percent format
grader/lms/notebooks.py builds from) made from the exercise itself, and its reference answers derived
from the forward lines (grader/derive), so that a forward pass alone becomes a course.

The notebook draws the parameters and a batch from the exercise at its lecture sizes with one seeded
generator, runs the forward lines (the network's own steps, filled in by the builder), keeps autograd's
gradients for the self-check, then asks for every answer in the exercise's order, each under the forward
line it backpropagates through. Its self-check loads the exercise by the spec the course gives it
(`COURSE["exercise"]`): a course's own exercise file is released beside the notebook, which it may be,
since it holds no answer.
"""
from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from grader import derive, syntax
from grader.derive import simplify
from grader.exercise import ATOMIC, FUNCTION, FUSED, Exercise, Function, Network

SEED = 2147483647


def _markdown(text: str) -> str:
    return "# %% [markdown]\n" + "\n".join(f"# {line}".rstrip() for line in text.strip("\n").splitlines()) + "\n"


def _code(text: str, **metadata: str) -> str:
    marker = " ".join(f'{k}="{v}"' for k, v in metadata.items())
    return f"# %% {marker}".rstrip() + "\n" + text.strip("\n") + "\n"


def _names(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _listed(names) -> str:
    quoted = [f"`{n}`" for n in names]
    return " and ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)


def _sized(exercise) -> str:
    """Where a cell takes a size from: a name above if the notebook binds one, else a tensor's shape, an example of
    one said (an instructor trial's word2vec, whose loss is a mean, was told "a size above" where none is)."""
    bound = [k for k, v in exercise.network.sizes.items() if ".shape[" in v]
    shape = next((v for v in exercise.mistakes.shown.values() if ".shape[" in v), "X.shape[0]")
    return "a size above or from a tensor's shape" if bound else f"a tensor's shape (`{shape}`)"


def _sizes(net) -> str:
    """The sizes (read off a tensor's shape) and the hyperparameters (a number of the network's: `reg`,
    `margin`), each called what it is: an instructor trial's notebook said "the sizes `reg`"."""
    sizes = [k for k, v in net.sizes.items() if ".shape[" in v]
    numbers = [k for k in net.sizes if k not in sizes]
    said = [f"the size{'s' if len(sizes) > 1 else ''} {_names(sizes)}" if sizes else "",
            f"the hyperparameter{'s' if len(numbers) > 1 else ''} {_names(numbers)}" if numbers else ""]
    return ", ".join(filter(None, said)) or "no sizes"


def prose(exercise: Exercise) -> str:
    """The percent-format source of the exercise's notebook."""
    net = exercise.network
    comma = "," if len(net.data) == 1 else ""  # a tuple of one
    # autograd's gradient of every atomic answer's tensor, and of each fused block's given upstream
    retained = set(exercise.atomic) | {g for a in exercise.answers if a.kind == FUSED for g in a.upstream}
    lecture = ", ".join(f"{exercise.mistakes.show(k)} = {v}" for k, v in exercise.lecture.items())
    cells = [_markdown(f"""# {exercise.title}

Write the backward pass of this network by hand, one gradient at a time, and check each against
PyTorch's autograd. Each answer cell starts as `{exercise.answers[0].variable} = None  # TODO`: replace `None` by
your expression (as many lines as you like). The read-only cell after it prints one line: a match, or `WRONG` and
what is wrong; an answer still `None` is "not attempted yet", so *Run All* works at any time.

**Rules** (the grader enforces them: it runs your answer cells again, on networks of other sizes)

- An answer cell may read the parameters and data ({_names((*net.parameters, *net.data))}), {_sizes(net)},
  the forward pass's intermediates by their names below, `torch` and `F`, and the gradients assigned by
  earlier answer cells of the same exercise.
- No autograd in answer cells: no `.backward()`, `torch.autograd`, `requires_grad` or `.grad`.
- No hard-coded sizes: take them from {_sized(exercise)}."""),
             _code("", locked="setup_install", generated="install"),
             _code("""import torch
import torch.nn.functional as F

from grader.student.check import check  # what each check cell calls (it imports it again, for a restarted kernel)
from grader.exercise import load

torch.set_num_threads(1)  # the tensors here are tiny: one thread is many times faster than several
# The course's tolerances, allowlist, hints and exercise: the self-check gives the grader's verdicts
COURSE = ...
EXERCISE = load(COURSE["exercise"])""", locked="setup_imports"),
             _markdown(f"""## The parameters and a batch

Drawn at the notebook's sizes ({lecture}) from one
seeded generator, in double precision, so that rounding can never be mistaken for a mistake."""),
             _code(f"""generator = torch.Generator().manual_seed({SEED})
params = {{k: p.requires_grad_() for k, p in EXERCISE.init(EXERCISE.lecture, generator, torch.float64).items()}}
batch = EXERCISE.batch(EXERCISE.lecture, generator)
{", ".join(net.parameters)} = ({", ".join(f'params["{p}"]' for p in net.parameters)})
{", ".join(net.data)}{comma} = ({", ".join(f'batch["{d}"]' for d in net.data)}{comma})
{"".join(f"{k} = {v}" + chr(10) for k, v in net.sizes.items())}""", locked="setup_params"),
             _markdown("""## The forward pass

One named intermediate per line: each has a gradient for you to compute. `retain_grad()` keeps
autograd's gradient of every intermediate, so that the self-check can compare yours with it."""),
             _code("\n".join(f"{s.name} = ..." for s in net.steps) + f"""

# Autograd's gradients, to check yours against
{"".join(f"{s.name}.retain_grad(){chr(10)}" for s in net.steps if "d" + s.name in retained)}{net.loss}.backward()
print(f"loss {{{net.loss}.item():.4f}}")""", locked="setup_forward")]
    steps = net.step
    for part, title in sorted(exercise.parts.items()):
        answers = [a for a in exercise.answers if a.part == part]
        cells.append(_markdown(f"## {title}"))
        function = next((f for f in exercise.functions if f.part == part), None)
        if function is not None:
            cells += _function_cells(exercise, function)
            continue
        for answer in answers:
            if answer.kind == ATOMIC:
                readers = [steps[c] for c in net.consumers(answer.source)]
                lines = "\n".join(f"    {s.name} = {s.code}" for s in readers)
                cells.append(_markdown(f"`{answer.variable}`: `{answer.source}` is read by\n\n{lines}"))
            elif answer.kind == FUSED:
                start = f"`d{answer.sink}`" if answer.sink else f"the loss `{net.loss}`"
                block = simplify.live(net, answer.source, answer.sink)
                given = "".join(
                    f" `{g[1:]}` reads {' and '.join(f'`{t}`' for t in steps[g[1:]].inputs if t in block)} outside "
                    f"the block, and a gradient sums every use: `{g}` is given too."
                    for g in answer.upstream if g != f"d{answer.sink}")
                if answer.upstream:
                    given += (f" The read-only cell below sets {_listed(answer.upstream)} to autograd's values, so "
                              "that an earlier exercise cannot spoil this one.")
                cells.append(_markdown(f"`{answer.variable}` in one cell, from {start} back to `{answer.source}`, "
                                       f"without the atomic steps in between.{given}"))
                if answer.upstream:
                    cells.append(_code("".join(f"{g} = {g[1:]}.grad.clone()  # autograd's\n" for g in answer.upstream),
                                       locked=f"setup_{answer.cell_id}"))
            cells.append(_code("", answer=answer.cell_id))
    return "\n".join(cells)


def _function_cells(exercise: Exercise, function: Function) -> list[str]:
    cache = dict(a for a in function.arguments if not isinstance(a, str))["cache"]
    arguments = ", ".join(a if isinstance(a, str) else a[0] for a in function.arguments)
    # The call gives what the signature takes: a data tensor the cache holds is no argument of its own.
    given = {"params": "{k: p.detach() for k, p in leaves.items()}", "cache": "cache"}
    call = ", ".join(a if isinstance(a, str) else given[a[0]] for a in function.arguments)
    part = function.part
    trains = exercise.training is not None and exercise.training.function == function
    # The whole-run check's start and batches: 50 SGD steps with the student's gradients and autograd's.
    training = f"""generator = torch.Generator().manual_seed({SEED} + 1)
start = EXERCISE.init(EXERCISE.lecture, generator, torch.float64)
batches = [tuple(EXERCISE.batch(EXERCISE.lecture, generator).values()) for _ in range(50)]
""" if trains else ""
    # A hyperparameter (a number no tensor's shape says) is the same on every network, and no argument.
    constants = {k: v for k, v in exercise.network.sizes.items() if ".shape[" not in v}
    written = "" if not constants else (
        " A number of the network that is no tensor's size (" + ", ".join(f"`{k} = {v}`" for k, v in constants.items())
        + ") is the same on every network and is no argument: write its value in the function.")
    cells = [_markdown(f"""Write `{function.name}({arguments})`: it returns the gradient of the loss with
respect to every parameter, as a dict keyed by the parameter's name. `params` and `cache` are dicts of
the parameters and of the forward pass's intermediates; it may use only its arguments, `torch` and `F`
(the grader calls it with networks of other sizes), and no autograd.{written}"""),
             _code("", answer=function.cell),
             _code(f"""leaves = {{k: p.detach().clone().requires_grad_() for k, p in params.items()}}
values = EXERCISE.network.forward(leaves, batch)
values[EXERCISE.network.loss].backward()  # autograd's gradients, only to check yours
cache = {{k: values[k].detach() for k in {tuple(cache)!r}}}
{training}grads = None  # until {function.name} returns: never an earlier run's
with torch.no_grad():
    try:
        grads = {function.name}({call}) or {{}}
    except Exception as error:  # Run All goes on: the checks below run it again and say what is wrong
        print(f"{function.name} raised {{type(error).__name__}}: {{error}} (the checks below say more)")""",
                   locked=f"setup_ex{part}_check")]
    for name in function.returns:
        cells.append(_code(f'check("{function.prefix}{name}", answers="grads", gradients_of="leaves")',
                           graded=f"{function.prefix}{name}"))
    if trains:
        cells.append(_code('check.training(start="start", batches="batches", lr=0.1)',
                           graded=exercise.training.grade_id))
    return cells


@dataclass(frozen=True)
class Derived:
    """What the rule table derives of an exercise: every gradient, in the order a student computes them;
    each fused cell's closed form, where grader.derive.simplify found one and proved it against autograd;
    the closed forms that are one operation's gradient (a cross-entropy), whose slips are that cell's
    mistakes; and, for each fused cell that keeps its chain of atomic steps, why (for `exercise check`)."""

    gradients: tuple[derive.Gradient, ...]
    fused: Mapping[str, derive.Gradient]
    closed: Mapping[str, simplify.Closed] = field(default_factory=dict)
    chained: Mapping[str, str] = field(default_factory=dict)


def derived(exercise: Exercise) -> Derived:
    gradients = derive.for_exercise(exercise)
    forms = derive.closed_forms(exercise)
    closed = {cell: form for cell, form in forms.items() if not isinstance(form, str)}
    fused = {cell: form.gradient for cell, form in closed.items() if form.gradient is not None}
    chained = {cell: form for cell, form in forms.items() if isinstance(form, str)}
    return Derived(gradients, fused, closed, chained)


def _split(network: Network, inputs: Mapping[str, torch.Tensor]) -> tuple[dict, dict]:
    return {k: inputs[k] for k in network.parameters}, {k: inputs[k] for k in network.data}


def references(exercise: Exercise, found: Derived | None = None,
               written: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each answer cell's reference, derived: an atomic cell's explained gradient; a fused cell's, its closed
    form where it has one (`Derived.closed`), else the gradients from its start back to its own that lie on
    the block (a regulariser's or a parameter's are dead there), in order; a function's, all of them inside
    its body (each statement under its explanation, as `backprop-ninja solution` shows them), each fused
    block with a closed form written so. `written` (gradient name -> its cell) puts other text in place of
    a derived gradient's everywhere the chain of atomic steps has it: a slip's."""
    found = derived(exercise) if found is None else found
    source = {g.name: g.source for g in found.gradients} | dict(written or {})
    order = [g.name for g in found.gradients]
    cells = {a.cell_id: source[a.variable] for a in exercise.answers if a.kind == ATOMIC}
    for answer in (a for a in exercise.answers if a.kind == FUSED):
        start = order.index(f"d{answer.sink}") + 1 if answer.sink else 0
        block = simplify.live(exercise.network, answer.source, answer.sink)
        chain = [n for n in order[start:order.index(answer.variable) + 1] if n[1:] in block]
        closed = found.closed.get(answer.cell_id)
        cells[answer.cell_id] = closed.cell if closed is not None and not set(written or {}) & set(chain) else \
            "".join(source[n] for n in chain)
    for function in exercise.functions:
        statements = _statements(exercise, found, source, set(written or {}))
        cells[function.cell] = _function_reference(exercise, function, statements)
    assert not {a.cell_id for a in exercise.answers if a.kind == FUNCTION} - set(cells)
    return cells


@dataclass(frozen=True)
class Mutant:
    """One slip of the rule table made in one answer cell: `cells` are every answer cell's reference with
    `cell` written with the slip, and `grade_ids` what the grader must take credit from (nothing else; a
    function's mistake may also fail the training run it drives)."""

    slip: derive.Slip
    cell: str
    grade_ids: tuple[str, ...]
    cells: Mapping[str, str]


def mutants(exercise: Exercise) -> tuple[Mutant, ...]:
    """The exercise's mutant corpus, in the notebook's order, from the rule table alone: every slip of an
    atomic gradient in its own cell; in a fused cell or a function, every slip of the gradient that the
    cell answers (a function: a parameter's) that changes it when every other gradient is right (a slip
    that only a random upstream shows, as in a gradient that is zero for every batch, is no mistake there)."""
    found = derived(exercise)
    by_name = {g.name: g for g in found.gradients}
    reference = references(exercise, found)
    on_chain = _on_chain(exercise, found)
    mutated = []
    for answer in exercise.answers:
        one = found.fused.get(answer.cell_id) if answer.kind == FUSED else None
        gradient = one or by_name[answer.variable if answer.kind != FUNCTION else f"d{answer.variable}"]
        for slip in gradient.slips():
            if answer.kind == ATOMIC or one is not None and slip in on_chain:
                cell = slip.code
            elif slip in on_chain:
                cell = references(exercise, found, {slip.gradient: slip.code})[answer.cell_id]
            else:
                continue
            mutated.append(Mutant(slip, answer.cell_id, (answer.grade_id,), {**reference, answer.cell_id: cell}))
    return tuple(mutated)


def _on_chain(exercise: Exercise, found: Derived) -> set[derive.Slip]:
    """The slips that change their gradient, beyond the grader's default tolerance, on one of the derivation's
    configurations with every other gradient right."""
    net = exercise.network
    changed = set()
    for configuration in derive.configurations(exercise):
        right = {**net.forward(*_split(net, configuration.inputs)), "torch": torch, "F": F}
        for gradient in found.gradients:
            exec(compile(gradient.code, f"<derived {gradient.name}>", "exec"), right)  # noqa: S102
        for gradient in (*found.gradients, *found.fused.values()):
            for slip in gradient.slips():
                trial = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in right.items()}
                try:
                    exec(compile(slip.code, f"<slip {slip.name}>", "exec"), trial)  # noqa: S102
                    got, want = trial[gradient.name], right[gradient.name]
                    same = got.shape == want.shape and torch.allclose(got, want, **derive.TOLERANCE)
                except Exception:  # noqa: BLE001 - a slip that fails to run is a mistake the grader sees
                    same = False
                if not same:
                    changed.add(slip)
    return changed


def _statements(exercise: Exercise, found: Derived, source: Mapping[str, str], written: set[str]) -> list[str]:
    """Every gradient's statements in order, for the whole backward: a fused block's chain replaced by its
    closed form where the block is closed (nothing outside it reads its tensors, and no other gradient reads
    a gradient inside it), so that the function computes what exercises 2 and 3 ask, from what its cache
    holds. A block where `written` puts a slip keeps its chain, which the slip is written in."""
    net = exercise.network
    statements = {g.name: source[g.name] for g in found.gradients}
    for answer in (a for a in exercise.answers if a.kind == FUSED and a.cell_id in found.closed):
        block = simplify.live(net, answer.source, answer.sink)
        inside = {"d" + t for t in block} - {answer.variable}
        outside_readers = {c for t in block for c in net.consumers(t)} - block - {answer.sink}
        others = [g for g in found.gradients if g.name not in inside and g.name != answer.variable]
        if outside_readers or written & {*inside, answer.variable} or any(inside & set(g.reads) for g in others):
            continue
        statements = {n: (found.closed[answer.cell_id].cell if n == answer.variable else v)
                      for n, v in statements.items() if n not in inside}
    return list(statements.values())


def _function_reference(exercise: Exercise, function: Function, sources: list[str]) -> str:
    """The function's body: what it reads of its parameters and cache unpacked, the sizes it reads, the
    forward values the gradients read that its cache leaves out (computed again from the forward lines: a
    cache may hold a step's input and not the values computed from it), then every gradient in order."""
    net = exercise.network
    cache = dict(a for a in function.arguments if not isinstance(a, str))["cache"]
    arguments = ", ".join(a if isinstance(a, str) else a[0] for a in function.arguments)
    code = [line for source in sources for line in source.rstrip("\n").splitlines()]
    known = {*net.parameters, *cache, *(a for a in function.arguments if isinstance(a, str)), *net.sizes}
    needed = _read("\n".join(code))
    needed |= net.ancestors(*needed, held=known)
    recomputed = [f"{step.name} = {step.code}" for step in net.steps if step.name in needed and step.name not in known]
    sizes = {}
    while len(sizes) < len(wanted := {k: v for k, v in net.sizes.items() if k in needed}):
        sizes = wanted  # a size computed from others (`C = nh * hs`) needs those too
        needed |= _read("\n".join(sizes.values()))
    body = []
    unpacked = (([p for p in net.parameters if p in needed], "params", "The parameters that the gradients below read"),
                ([c for c in cache if c in needed], "cache", "The forward values they read, from the cache"))
    for names, source, why in unpacked:
        if names:
            one = "," if len(names) == 1 else ""
            keys = ", ".join(f'"{k}"' for k in names) + one
            body += [f"# {why}", f"{', '.join(names)}{one} = ({source}[k] for k in ({keys}))"]
    if sizes:
        body += ["# The sizes, read from the tensors: the grader calls this with sizes of its own",
                 *(f"{k} = {v}" for k, v in sizes.items())]
    if recomputed:
        body += ["# The forward values the cache leaves out, computed again from the forward pass's lines", *recomputed]
    returned = ", ".join(f'"{r}": d{r}' for r in function.returns)
    lines = [f"def {function.name}({arguments}):",
             '    """The gradient of the loss with respect to every parameter."""',
             *(f"    {line}" for line in body + code), f"    return {{{returned}}}"]
    return "\n".join(lines) + "\n"


def _read(source: str) -> set[str]:
    return {n.id for n in ast.walk(syntax.parse(source)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
