"""The exercise API: an exercise is a value, and the engine grades any value of this shape.

The engine (extract, static check, sandbox, hidden suite, scoring, outputs) works from what an
`Exercise` declares and never names a network, a tensor or an exercise number:

- its **network**, written once as the notebook writes its forward cell: one named intermediate per
  line (`hprebn = embcat @ W1 + b1`). Each line is a `Step` that states its inputs and output, as a
  micrograd operation does, and compiles to the function the oracle differentiates; the notebook's
  forward cell, the oracle and any fused forward are this one text;
- its **parameters** and **data** (what a batch holds), how a seed draws them (`init`, `batch`), and
  the **sizes** they take: the lecture's, and the ranges hidden configurations are drawn from;
- its **answers**: atomic cells (one gradient per cell, reading the upstream gradients given to it),
  fused cells (a whole block's backward in one cell) and functions (one cell defining a function whose
  returned dict is graded key by key), each saying which gradients it may read and how it is checked;
- its **whole-run check** (training with the student's function against autograd), if it has one;
- its students' classic **mistakes** the network alone does not show (`Mistakes`, optional), so that
  feedback names them;
- its notebook's names and its own course.yml settings.

Grading order is derived, not declared: function answers read no gradient and run first; atomic and
fused answers run in the notebook's order, each true upstream gradient revealed only once every
configuration has answered the cell that computes it (`Exercise.chain_schedule`).

An exercise package registers itself under a name (`makemore-mlp`); course.yml's `exercise:` names it,
or gives `module:attribute` for one outside this package. `load` resolves either.
"""
from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import importlib
import importlib.util
import keyword
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from grader import syntax

if TYPE_CHECKING:
    import torch

# Kinds of answer: how its cell is run and what it is compared with.
ATOMIC = "atomic"  # assigns one gradient from the upstream gradients it is given: checked on the chain
#                    (true upstream) and locally (random upstream, one step's vector-Jacobian product)
FUSED = "fused"  # assigns one gradient through a whole block: from the loss, or from `sink`'s gradient
FUNCTION = "function"  # a key of the dict a function defined by the cell returns

# The two ways an answer is run and checked: CHAIN with every upstream gradient it reads at its true
# value, LOCAL with random ones (see `Answer.local_upstream`). A leaf's words, since the sandbox sends
# them to the child and the judge keys its comparisons on them.
CHAIN, LOCAL = "chain", "local"

# What a step's code and every answer cell may call besides their inputs, by name.
_CALL_NAMES = ("torch", "F")


@functools.cache
def calls() -> dict:
    """torch and torch.nn.functional as a step's code and every answer cell call them, imported here, on first
    use, not with this module: a command that imports it and computes nothing (`course check`, a canvas export
    reading results) starts without torch's second of imports."""
    import torch
    import torch.nn.functional as F

    return {"torch": torch, "F": F}


class _Namespace(Mapping):
    """What a step's code may call besides its inputs, by name; its values are `calls()`'s, imported when
    first read (a line run, a cell's namespace made), while its names are known without importing anything."""

    def __getitem__(self, key: str):
        if key not in _CALL_NAMES:
            raise KeyError(key)
        return calls()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(_CALL_NAMES)

    def __len__(self) -> int:
        return len(_CALL_NAMES)


# What a step's code may call besides its inputs; the same names every answer cell is given.
NAMESPACE = _Namespace()

def _display(*objs, **options) -> None:
    print(*objs)


def cell_builtins() -> dict:
    """The builtins an answer cell runs with, in the grader's sandbox and in the self-check's runs alike: Python's,
    and Jupyter's `display`, with which students show a shape as with print. It prints (its options only shape a
    front end's output), so it is silenced where print is: IPython's own, under the self-check, showed every one of
    the check's batches' shapes, and the grader, without one, ran the cell into a NameError."""
    return {**vars(builtins), "display": _display}


# The names a notebook built from an exercise binds for itself (grader/lms/skeleton.py) besides the
# exercise's functions and each one's `check_ex<part>`: a tensor of one of these names would be
# overwritten there, so none may be an exercise's. `math` and the builtins are the static check's.
NOTEBOOK_NAMES = frozenset({*NAMESPACE, "math", "SelfCheck", "load", "COURSE", "EXERCISE", "generator", "params",
                            "batch", "batches", "start", "leaves", "values", "cache", "grads", "check"})


@dataclass(frozen=True)
class Step:
    """One line of the forward pass: `name = code`, reading `inputs` (parameters, data, sizes or earlier
    steps) and nothing else."""

    name: str
    inputs: tuple[str, ...]
    code: str
    fn: Callable[..., torch.Tensor] = field(compare=False, repr=False)

    def with_code(self, code: str) -> Step:
        """The same step computed another way (a forward with another eps, say): the diagnosis's wrong
        answers are the right computation of a slightly different network."""
        return _step(self.name, code, self.inputs)


# numpy's spellings torch also accepts, which a forward line must not use: the rule table (and a student reading
# the notebook) read torch's.
NUMPY_SPELLINGS = {"axis": "dim", "keepdims": "keepdim"}


def _step(name: str, code: str, known: tuple[str, ...] | set[str]) -> Step:
    tree = syntax.parse(code, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in NUMPY_SPELLINGS:
            raise ValueError(f"line `{name} = {code}`: {node.arg}= is numpy's spelling: write "
                             f"{NUMPY_SPELLINGS[node.arg]}=")
    read = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in NAMESPACE]
    inputs = tuple(dict.fromkeys(n for n in read if n in known))
    unknown = sorted(n for n in set(read) - set(known) if not hasattr(builtins, n))
    if unknown:
        # `math.log(2 * math.pi)` in an instructor trial's Gaussian: parameter lines may use math, forward lines not
        hint = ": write the number it gives (or a float size, `\"c\": 1.8379`), as answer cells read no math" \
            if "math" in unknown else ""
        raise ValueError(f"step {name} reads {', '.join(unknown)}, which nothing before it defines{hint}")
    return Step(name, inputs, code, _bind(name, code, inputs))


def _bind(name: str, code: str, inputs: tuple[str, ...]) -> Callable[..., torch.Tensor]:
    """A plain function made once, when the exercise is defined: calling it runs no exec or eval, which
    the sandboxed child's audit hook would report against the cell that happened to be running."""
    namespace = _Globals()
    exec(compile(f"def {name}({', '.join(inputs)}):\n    return {code}\n", f"<step {name}>", "exec"), namespace)  # noqa: S102
    return namespace[name]


class _Globals(dict):
    """A bound line's globals: torch and F are put in on the line's first run (see `calls`)."""

    def __missing__(self, key: str):
        if key not in _CALL_NAMES:
            raise KeyError(key)
        self.update(calls())
        return self[key]


# What a line written in numpy's habits needs in torch, by the call that fails.
_FIXES = {"maximum(": "torch.maximum takes two tensors: write x.clamp(min=0) for a ReLU",
          "minimum(": "torch.minimum takes two tensors: write x.clamp(max=0)"}


def assignments(text: str) -> list[tuple[str, str]]:
    """(name, expression) for each non-blank line `name = expression` of `text`; comments are allowed."""
    pairs = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, code = (part.strip() for part in line.partition("="))
        if not name.isidentifier() or not code:
            raise ValueError(f"not a step (name = expression): {line!r}")
        pairs.append((name, code))
    return pairs


@dataclass(frozen=True)
class Network:
    """The forward pass as steps, parsed from the notebook's own lines.

    `sizes` are the names a step (and an answer cell) may read as plain numbers, each computed from the
    shape of a data tensor or a parameter (`n` from the batch); `loss` is the step whose gradient is 1.
    """

    parameters: tuple[str, ...]
    data: tuple[str, ...]
    sizes: Mapping[str, str]
    steps: tuple[Step, ...]
    loss: str = "loss"

    @classmethod
    def parse(cls, text: str, *, parameters: tuple[str, ...], data: tuple[str, ...],
              sizes: Mapping[str, str] | None = None, loss: str = "loss") -> Network:
        """Each non-blank line of `text` is `name = expression`; comments are allowed."""
        sizes = dict(sizes or {})
        known = {*parameters, *data, *sizes}
        steps = []
        for name, code in assignments(text):
            if name in known:  # each gradient is of one value: a second assignment would hide the first's
                what = "a parameter" if name in parameters else "data" if name in data else \
                    "a size" if name in sizes else "an earlier line's intermediate"
                raise ValueError(f"line `{name} = {code}`: {name} is already {what}; each line names a new "
                                 f"intermediate (write, e.g., `{name}2 = {code}` and read {name}2 below)")
            steps.append(_step(name, code, known))
            known.add(name)
        size_steps, readable = {}, {*parameters, *data}
        for k, v in sizes.items():  # a size may be read from a shape, or computed from sizes before it
            size_steps[k] = _step(k, v, readable)
            readable.add(k)
        network = cls(tuple(parameters), tuple(data), sizes, tuple(steps), loss)
        object.__setattr__(network, "_size_steps", size_steps)
        return network

    @property
    def intermediates(self) -> tuple[str, ...]:
        return tuple(step.name for step in self.steps)

    @property
    def step(self) -> dict[str, Step]:
        return {s.name: s for s in self.steps}

    def source(self) -> str:
        """The forward pass as the notebook's cell writes it."""
        return "".join(f"{s.name} = {s.code}\n" for s in self.steps)

    def consumers(self, name: str) -> tuple[str, ...]:
        """The steps that read `name` directly: the upstream gradients its one-step backward combines."""
        return tuple(step.name for step in self.steps if name in step.inputs)

    def size_values(self, values: Mapping[str, torch.Tensor]) -> dict[str, int]:
        """The sizes, read from the shapes of the parameters and data in `values` (more may be there), or
        computed from the sizes before them; a hyperparameter (`reg = 1e-3`) stays a float."""
        found: dict[str, int | float] = {}
        for k, s in self._size_steps.items():
            value = s.fn(*({**values, **found}[i] for i in s.inputs))
            found[k] = value if isinstance(value, float) else int(value)
        return found

    def failing_line(self, params: Mapping[str, torch.Tensor], data: Mapping[str, torch.Tensor]) -> str:
        """Where a forward pass that raised fails, in one sentence: the line, the error, and the fix where one is
        known (`torch.maximum(x, 0)`, numpy's spelling, takes two tensors in torch)."""
        values = {**params, **data}
        try:
            values.update(self.size_values(values))
        except Exception as exc:  # noqa: BLE001 - the instructor's code, named
            return f"a size fails: {type(exc).__name__}: {exc}"
        for step in self.steps:
            try:
                values[step.name] = step.fn(*(values[i] for i in step.inputs))
            except Exception as exc:  # noqa: BLE001 - the instructor's code, named
                fix = next((f for call, f in _FIXES.items() if call in step.code and "Tensor" in str(exc)), "")
                single = [k for k in (*params, *data) if str(getattr(values[k], "dtype", "")) == "torch.float32"]
                if not fix and single and "Float" in str(exc) and "Double" in str(exc):
                    # `randint(2, (n, 1)) * 1.0` takes torch's default float32 beside the float64 parameters
                    fix = (f"{', '.join(single)} {'is' if len(single) == 1 else 'are'} float32 where the rest is "
                           f"float64: write .double() on {'its' if len(single) == 1 else 'their'} line")
                return f"line `{step.name} = {step.code}` fails: {type(exc).__name__}: {exc}" + \
                    (f"; {fix}" if fix else "")
        return ""

    def forward(self, params: Mapping[str, torch.Tensor], data: Mapping[str, torch.Tensor],
                replace: Mapping[str, Step] | None = None) -> dict[str, torch.Tensor]:
        """Every value of the forward pass (parameters, data, sizes, intermediates) by name; `replace`
        swaps some steps for others of the same name."""
        values = {**params, **data}
        values.update(self.size_values(values))
        for step in self.steps:
            step = (replace or {}).get(step.name, step)
            values[step.name] = step.fn(*(values[i] for i in step.inputs))
        return values

    @property
    def unit_gradients(self) -> frozenset[str]:
        """The steps whose gradient is identically 1: the loss, and each term of a sum a step with that
        gradient is (`loss = data_loss + reg_loss`) when nothing else reads the term."""
        return frozenset(k for k, v in self.constant_gradients.items() if v == 1)

    @property
    def constant_gradients(self) -> dict[str, float]:
        """The steps whose gradient is a number fixed by the forward lines alone: the loss (1), and each term of
        a weighted sum a step with such a gradient is, when nothing else reads the term (`loss = 0.5 * (ab +
        ba)` gives each 0.5). Never randomised: a textbook answer writes the number, or leaves a 1 out
        (`dW2 = h1.T @ dscores + reg * W2`; an instructor trial's `0.5 * (softmax - one_hot) / n`)."""
        constant = {self.loss: 1.0}
        for step in reversed(self.steps):
            if step.name not in constant:
                continue
            terms = _linear_terms(syntax.parse(step.code, mode="eval").body)
            for term, weight in terms.items():
                if term in self.step and self.consumers(term) == (step.name,):
                    constant[term] = constant[step.name] * weight
        return constant

    def descendants(self, *names: str) -> tuple[str, ...]:
        """The steps that read any of `names`, directly or through other steps, in the forward's order:
        what a change to them moves."""
        reached = set(names)
        for step in self.steps:
            if reached.intersection(step.inputs):
                reached.add(step.name)
        return tuple(s.name for s in self.steps if s.name in reached and s.name not in names)

    def outside_readers(self, source: str, sink: str) -> tuple[str, ...]:
        """The steps outside the block from `sink` back to `source` that read `source` or a tensor between
        them (a residual's `h1 = h0 + a` beside a normalization of h0 that ends at `sink`): the gradient
        reaching `source` sums their uses too, so a cell of the block is given their gradients beside
        `sink`'s."""
        inner = {source, *(set(self.descendants(source)) & self.ancestors(sink))}
        return tuple(s.name for s in self.steps if s.name != sink and s.name not in inner and inner & set(s.inputs))

    def ancestors(self, *names: str, held: Collection[str] = ()) -> frozenset[str]:
        """Everything `names` read, directly or through other steps (parameters, data, sizes and steps):
        what computing them needs. A name in `held` is read as given, not computed from its own inputs."""
        steps, found, frontier = self.step, set(), list(names)
        while frontier:
            current = frontier.pop()
            if current in steps and current not in held:
                inputs = [i for i in steps[current].inputs if i not in found]
                found.update(inputs)
                frontier += inputs
        return frozenset(found)

    def upstream_of(self, name: str) -> tuple[str, ...]:
        """The parameters whose gradients reach the loss only through `name` or through steps that
        `name` depends on (what a mistake in `name`'s gradient spoils)."""
        needed = self.ancestors(name) | {name}
        return tuple(p for p in self.parameters if p in needed)


@dataclass(frozen=True)
class Answer:
    """One graded answer: its grade id, the variable its cell assigns (or the key its function
    returns), the forward tensor whose gradient it is, and what its cell may read and is checked with.

    `upstream`: gradients the cell may read, teacher-forced by the grader. `local_upstream`: those its
    LOCAL check randomises (empty: CHAIN only). `sink`: for a fused answer that starts from an
    intermediate's gradient rather than the loss, that intermediate. `cell`: the notebook cell holding
    it, when several answers share one (a function's). `part`: the notebook's exercise it belongs to,
    for people to read (the engine never branches on it). `title`: for a fused answer, what feedback
    calls its block when a function's answer makes one of its mistakes ("the cross-entropy step").
    """

    grade_id: str
    variable: str
    source: str
    kind: str
    part: int
    upstream: tuple[str, ...] = ()
    local_upstream: tuple[str, ...] = ()
    sink: str | None = None
    cell: str = ""
    title: str = ""

    @property
    def cell_id(self) -> str:
        return self.cell or self.grade_id


@dataclass(frozen=True)
class Function:
    """A cell that defines a function answering several grade ids at once.

    It is called as `name(*arguments)`, each argument built from one configuration's forward values: a
    name gives that value, a (label, names) pair a dict of those values. It returns a dict whose key
    `p` answers grade id `prefix + p` for each `p` in `returns`.
    """

    cell: str
    name: str
    arguments: tuple[str | tuple[str, tuple[str, ...]], ...]
    returns: tuple[str, ...]
    prefix: str
    part: int

    def call_arguments(self, values: Mapping[str, torch.Tensor]) -> list:
        """Fresh copies, so one call cannot change what the next one is given."""
        built = []
        for argument in self.arguments:
            if isinstance(argument, str):
                built.append(values[argument].clone())
            else:
                built.append({k: values[k].clone() for k in argument[1]})
        return built

    def reads(self) -> tuple[str, ...]:
        """Every forward value the function is given."""
        names = [a if isinstance(a, str) else n for a in self.arguments for n in ((a,) if isinstance(a, str) else a[1])]
        return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Training:
    """A whole-run check: SGD steps from one seeded init, with the gradients `function` returns, against
    the same steps driven by autograd. Its steps and learning rate are course.yml settings."""

    grade_id: str
    function: Function
    # The data of `steps` steps, each tensor stacked along a first dimension of `steps`, drawn from the
    # generator; None: the exercise's `batch`, once per step.
    batches: Callable[[Sizes, torch.Generator, int], dict[str, torch.Tensor]] | None = None


@dataclass(frozen=True)
class Rule:
    """An elementwise step's local derivative, written with its input x or its output y as students
    write it; `slips` are the classic ways to get it wrong: (key, what the slip does, its derivative),
    where `{x}` and `{y}` in what it does name the step's input and output. Feedback prefers them to the
    rule table's slips (grader.derive) of the same value: the exercise's words come first."""

    what: str  # "the derivative of tanh": what feedback calls it
    uses: str  # "x" or "y": which tensor the derivative is written with
    derivative: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    slips: tuple[tuple[str, str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]], ...] = ()


@dataclass(frozen=True)
class Factor:
    """A simple function of a tensor the search of a wrong answer's neighbourhood tries as a factor one
    step's derivative has or lacks: how feedback writes it (`{}` the tensor), its code on the tensor `_t`,
    whether a gradient may lack it (a 0/1 mask or a sign cannot be divided out; None: a reciprocal, whose
    factor too many or too few is the tensor's own, the other way), and whose derivative it is."""

    shown: str
    code: str
    divides: bool | None = True
    whose: str = ""

    def __post_init__(self):  # bound once, as a step is (see _bind)
        object.__setattr__(self, "fn", _bind("factor", self.code, ("_t",)))


@dataclass(frozen=True)
class Elementwise:
    """One elementwise function of the forward grammar, `y = f(x)` (`torch.f(x)`, `x.f()`), whole: the
    rule table (grader.derive) differentiates a line with `local` and derives its classic `slips`; the
    judge, where no rule table is installed too, reads its `rule` (the derivative at any tensor, with
    feedback's name for it) and its `factor`. Code is written on `_x` (the input) and `_y` (the output), and
    a slip's sentence may name {x} and {y}. A new function is one entry of ELEMENTWISE."""

    name: str  # the torch function and tensor method
    grammar: str  # how the grammar's prose lists it
    called: str  # feedback's name for it: "the derivative of {called}"
    local: str
    why: str  # the rule table's comment on the derived line
    slips: tuple[tuple[str, str, str], ...] = ()
    factor: Factor | None = None

    def __post_init__(self):
        local = _bind(self.name, self.local, ("_x", "_y"))
        object.__setattr__(self, "rule", Rule(f"the derivative of {self.called}", "y" if "_y" in self.local else "x",
                                              lambda x, y: local(x, y).to(x.dtype)))


ELEMENTWISE = {f.name: f for f in (
    Elementwise("tanh", "torch.tanh", "tanh", "1 - _y**2", "d tanh(x)/dx = 1 - tanh(x)**2, written with the output {y}",
                (("tanh-input", "uses {x} where the derivative of tanh needs {y}, its output", "1 - _x**2"),
                 ("tanh-square", "squares (1 - {y}) in the derivative of tanh: the square belongs to {y} alone",
                  "(1 - _y)**2"),
                 ("tanh-no-square", "uses {y} where the derivative of tanh needs its square", "1 - _y"),
                 ("tanh-plus", "adds the square of {y} in the derivative of tanh instead of subtracting it",
                  "1 + _y**2"),
                 ("tanh-sigmoid", "uses the sigmoid's derivative {y} * (1 - {y}) where tanh's is needed",
                  "_y * (1 - _y)"),
                 ("tanh-twice", "applies tanh again to its output {y}: the derivative of tanh is 1 - {y}**2, with "
                                "no tanh left in it", "1 - torch.tanh(_y)**2")),
                Factor("1 - {}²", "1 - _t * _t", True, " (1 - y² is tanh's derivative, y its output)")),
    Elementwise("sigmoid", "torch.sigmoid", "the sigmoid", "_y * (1 - _y)",
                "d sigmoid(x)/dx = sigmoid(x) * (1 - sigmoid(x)), written with the output {y}",
                (("sigmoid-input", "uses {x} where the derivative of the sigmoid needs {y}, its output",
                  "_x * (1 - _x)"),
                 ("sigmoid-half", "keeps only one factor of the sigmoid's derivative {y} * (1 - {y})", "_y"),
                 ("sigmoid-tanh", "uses tanh's derivative (1 - {y}**2) where the sigmoid's is needed", "1 - _y**2"),
                 ("sigmoid-twice", "applies the sigmoid again to its output {y}: the derivative of the sigmoid is "
                                   "{y} * (1 - {y}), with no sigmoid left in it",
                  "torch.sigmoid(_y) * (1 - torch.sigmoid(_y))")),
                Factor("{0}·(1 - {0})", "_t * (1 - _t)", True,
                       " (y·(1 - y) is the sigmoid's derivative, y its output)")),
    Elementwise("relu", "torch.relu", "ReLU", "(_x > 0)",
                "ReLU passes the gradient where its input {x} is positive and stops it elsewhere",
                (("relu-output", "multiplies by ReLU's output {y} where its derivative is a 0/1 mask", "_y"),
                 ("relu-input", "multiplies by ReLU's input where its derivative is a 0/1 mask (where the input is "
                                "positive)", "_x"),
                 ("relu-inverted", "masks the wrong side: ReLU passes the gradient where its input is positive",
                  "(_x <= 0)")),
                Factor("({} > 0)", "(_t > 0).to(_t.dtype)", False, " ((x > 0) is ReLU's derivative, x its input)")),
    Elementwise("exp", ".exp()", "exp", "_y", "d exp(x)/dx = exp(x), which is the output {y} itself",
                (("exp-input", "uses {x} where the derivative of exp is exp itself, {y}", "_x"),),
                Factor("exp({})", "torch.exp(_t)", True, " (exp(x) is the derivative of exp)")),
    Elementwise("log", ".log()", "log", "1 / _x", "d log(x)/dx = 1/x, with x = {x}",
                (("log-multiplies", "multiplies by {x} where the derivative of log divides by it", "_x"),
                 ("log-output", "divides by {y}, the output, where the derivative of log divides by its input {x}",
                  "1 / _y"))),
    Elementwise("sqrt", ".sqrt()", "sqrt", "0.5 / _y", "d sqrt(x)/dx = 0.5 / sqrt(x), written with the output {y}",
                (("sqrt-input", "divides by {x} where the derivative of sqrt divides by its output {y}", "0.5 / _x"),
                 ("sqrt-factor", "leaves out the factor 0.5 of the derivative of sqrt", "1 / _y"))),
    Elementwise("square", ".square()", "the square", "2 * _x", "d x**2/dx = 2 * x, with x = {x}",
                (("square-factor", "leaves out the factor 2 of the derivative of the square", "_x"),
                 ("square-output", "uses the output {y} where the derivative of the square is 2 * {x}", "2 * _y")),
                Factor("2·{}", "2 * _t", True, " (2x is the derivative of x²)")),
    Elementwise("abs", ".abs()", "abs", "torch.sign(_x)",
                "d |x|/dx = sign(x), +1 where {x} is positive and -1 where it is negative",
                (("abs-sign", "passes the gradient unchanged where the derivative of |x| is -1 at negative {x}",
                  "torch.ones_like(_x)"),),
                Factor("sign({})", "torch.sign(_t)", False, " (sign(x) is the derivative of |x|)")),
    Elementwise("rsqrt", ".rsqrt()", "rsqrt", "-0.5 * _y**3",
                "d x**-0.5/dx = -0.5 * x**-1.5, written with the output {y} as -0.5 * {y}**3",
                (("rsqrt-sign", "drops the minus sign of the derivative of x**-0.5", "0.5 * _y**3"),
                 ("rsqrt-power", "keeps the exponent -0.5 in the derivative of x**-0.5: it lowers to -1.5",
                  "-0.5 * _y"))),
    Elementwise("silu", "F.silu", "SiLU", "torch.sigmoid(_x) * (1 + _x * (1 - torch.sigmoid(_x)))",
                "SiLU is x * sigmoid(x): its derivative is sigmoid(x) + x * sigmoid(x) * (1 - sigmoid(x)), with "
                "x = {x}",
                (("silu-one-term", "keeps only sigmoid(x), the first term of the product rule of x * sigmoid(x)",
                  "torch.sigmoid(_x)"),)),
    Elementwise("softplus", "F.softplus", "softplus", "torch.sigmoid(_x)",
                "softplus is log(1 + exp(x)): its derivative is exp(x) / (1 + exp(x)), the sigmoid of x = {x}",
                (("softplus-exp", "uses exp({x}) where the derivative of softplus is exp(x) / (1 + exp(x)), the "
                                  "sigmoid of {x}", "torch.exp(_x)"),
                 ("softplus-output", "takes the sigmoid of the output {y} where the derivative of softplus is the "
                                     "sigmoid of its input {x}", "torch.sigmoid(_y)"))),
)}


@dataclass(frozen=True)
class Mistakes:
    """What an exercise knows of its students' mistakes beyond what the network shows, so that feedback
    can name them; without it the engine's search of the network still names most wrong answers.

    `rules`: the elementwise steps' derivatives and their classic slips, by step name. `words`: what a
    size is ({"n": "the batch size"}) or what one entry of a data tensor is ({"Xb": "a character"}), in
    feedback's words. `hardcoded`: the sizes whose lecture values feedback warns against writing as
    numbers (None: every lecture size). `unusual`: what sets apart the hidden configurations drawn with
    init options (`Exercise.hidden`), for feedback on an answer wrong on those alone. `shown`: how the
    notebook's tensors say a size it binds no name for ({"N": "X.shape[0]"}), so feedback never names a size
    the student cannot find.
    """

    rules: Mapping[str, Rule] = field(default_factory=dict)
    words: Mapping[str, str] = field(default_factory=dict)
    hardcoded: tuple[str, ...] | None = None
    unusual: str = ""
    shown: Mapping[str, str] = field(default_factory=dict)

    def show(self, size: str) -> str:
        return self.shown.get(size, size)


class Sizes(Mapping):
    """Named sizes of one configuration (`sizes.n`, `sizes["n"]`), in the exercise's order; immutable
    and hashable, so a configuration can key a cache."""

    __slots__ = ("_values",)

    def __init__(self, /, **values: int):  # a size may be named `self`
        object.__setattr__(self, "_values", tuple(values.items()))

    def __getitem__(self, key: str) -> int:
        return dict(self._values)[key]

    def __getattr__(self, key: str) -> int:
        try:
            return dict(object.__getattribute__(self, "_values"))[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key, value):
        raise AttributeError("Sizes are immutable")

    def __iter__(self) -> Iterator[str]:
        return iter(k for k, _ in self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __hash__(self) -> int:
        return hash(self._values)

    def __eq__(self, other) -> bool:
        return isinstance(other, Sizes) and self._values == other._values

    def __reduce__(self):
        return _sizes, (self._values,)

    def __repr__(self) -> str:
        return "Sizes(" + ", ".join(f"{k}={v}" for k, v in self._values) + ")"


def _sizes(values: tuple[tuple[str, int], ...]) -> Sizes:
    return Sizes(**dict(values))


@dataclass(frozen=True)
class Exercise:
    """One exercise, everything the engine needs (see the module docstring).

    `init(sizes, generator, dtype, **options)` and `batch(sizes, generator)` draw parameters and data from
    an explicit generator, so a seed reproduces them; `hidden` says, for configuration `index` of
    `count`, which drawn sizes it accepts and which init options it uses (a configuration with a tiny
    activation variance, say); `given`: every name an answer cell may read besides gradients;
    `mistakes`: what the exercise knows of its students' mistakes, for naming them in feedback.
    `demo`: where the class `backprop-ninja demo` simulates is, as `module:attribute` (empty: the
    exercise has none): student -> "solved" (the reference answers), None (the released stubs) or
    {grade id: answer cell} (the reference answers elsewhere). Named, not held, so that its answer
    cells, some close to the references, are imported by the demo alone, never by the sandboxed child
    or the student package.
    """

    name: str
    title: str
    network: Network
    answers: tuple[Answer, ...]
    functions: tuple[Function, ...]
    training: Training | None
    lecture: Sizes
    ranges: Mapping[str, tuple[int, int]]
    init: Callable[..., dict[str, torch.Tensor]]
    batch: Callable[[Sizes, torch.Generator], dict[str, torch.Tensor]]
    sizes_of: Callable[[Mapping[str, torch.Tensor]], Sizes]
    hidden: Callable[[int, int, Sizes], dict | None]
    assignment: str
    notebook: str
    settings: Mapping[str, object] = field(default_factory=dict)
    mistakes: Mistakes = field(default_factory=Mistakes)
    demo: str = ""
    # The notebook's parts by number, as feedback pages and reports head them ("Exercise 1: ...").
    parts: Mapping[int, str] = field(default_factory=dict)
    # Rule-table slips the instructor accepts as right, by gradient ("dxhat" -> ("mul-local",)): `exercise
    # check` refuses an exercise where any other slip scores full on every hidden configuration.
    accepted: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    # ----------------------------------------------------------------------- derived
    @property
    def by_grade_id(self) -> dict[str, Answer]:
        return {a.grade_id: a for a in self.answers}

    @property
    def grade_ids(self) -> tuple[str, ...]:
        """Every graded test's id, in the notebook's order: answers, then the whole-run check."""
        return (*self.by_grade_id, *((self.training.grade_id,) if self.training else ()))

    @property
    def answer_cells(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a.cell_id for a in self.answers))

    @property
    def atomic(self) -> tuple[str, ...]:
        return tuple(a.grade_id for a in self.answers if a.kind == ATOMIC)

    @property
    def given(self) -> tuple[str, ...]:
        net = self.network
        return (*net.parameters, *(s for s in net.intermediates if s != net.loss), *net.data, *net.sizes)

    def part_of(self, grade_id: str) -> int | None:
        """The notebook part a grade id belongs to (a whole-run check, its function's), None if unknown."""
        if self.training is not None and grade_id == self.training.grade_id:
            return self.training.function.part
        answer = self.by_grade_id.get(grade_id)
        return answer.part if answer else None

    def function_of(self, answer: Answer) -> Function | None:
        return next((f for f in self.functions if f.cell == answer.cell_id), None)

    def chain_schedule(self) -> list[str]:
        """Function answers first (they read no gradient), then atomic answers in order, each fused
        answer placed just before the gradient it computes is revealed."""
        fused = {"d" + a.source: a.grade_id for a in self.answers if a.kind == FUSED}
        order = [a.grade_id for a in self.answers if a.kind == FUNCTION]
        for grade_id in self.atomic:
            if grade_id in fused:
                order.append(fused.pop(grade_id))
            order.append(grade_id)
        return order + list(fused.values())

    def local_schedule(self) -> list[str]:
        """Every atomic cell (even one with no LOCAL check: later cells may use its helper variables)
        and every other answer with a LOCAL check."""
        return [a.grade_id for a in self.answers if a.kind == ATOMIC or a.local_upstream]


def _linear_terms(node: ast.expr) -> dict[str, float]:
    """The names a weighted sum adds as plain names, each with its number (`0.5 * (a + b) - c / 4`); a term that is
    any other expression (CS231n's `data_loss + reg * (W * W).sum()`) adds none, and a name it reads, or one the sum
    names twice, has no fixed weight (`a + a ** 2`)."""
    weights: dict[str, float] = {}
    loose: set[str] = set()

    def walk(node: ast.expr, factor: float) -> None:
        if isinstance(node, ast.Name):
            if node.id in weights:
                loose.add(node.id)
            weights[node.id] = factor
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            walk(node.operand, -factor)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
            walk(node.left, factor)
            walk(node.right, factor if isinstance(node.op, ast.Add) else -factor)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Div) and \
                (number := _number(node.right)) is not None and number != 0:
            walk(node.left, factor * number if isinstance(node.op, ast.Mult) else factor / number)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and \
                (number := _number(node.left)) is not None:
            walk(node.right, factor * number)
        else:
            loose.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name))

    walk(node, 1.0)
    return {k: v for k, v in weights.items() if k not in loose}


def _number(node: ast.expr) -> float | None:
    """A literal number (`0.5`, `-2`), else None: a size or a name is no fixed weight."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _number(node.operand)
        return None if value is None else -value
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    return None


def atomic_answers(network: Network, order: tuple[str, ...], part: int) -> tuple[Answer, ...]:
    """Atomic answers in notebook order: each reads every gradient before it, and its LOCAL check
    randomises the gradients of the steps that read its tensor directly, but for those a fixed number."""
    answers = []
    unit = network.constant_gradients
    for index, grade_id in enumerate(order):
        source = grade_id[1:]
        local = tuple("d" + c for c in network.consumers(source) if c not in unit)
        answers.append(Answer(grade_id, grade_id, source, ATOMIC, part, order[:index], local))
    return tuple(answers)


def function_answers(function: Function) -> tuple[Answer, ...]:
    return tuple(Answer(function.prefix + p, p, p, FUNCTION, function.part, cell=function.cell)
                 for p in function.returns)


# Exercises shipped with the package, by the name course.yml uses.
BUILTIN = {"makemore-mlp": "grader.exercises.makemore_mlp:EXERCISE",
           "wavenet": "grader.exercises.gallery.wavenet:EXERCISE",
           "attention": "grader.exercises.gallery.attention:EXERCISE",
           "rnn": "grader.exercises.gallery.rnn:EXERCISE"}
DEFAULT = "makemore-mlp"
# Exercises with variants: `family/variant` is built by the module's `variant(name)`; the module also
# lists its `NAMES` and can draw one `from_salt(salt)` and `describe(name)` it; its `NOTEBOOK_SOURCE` names
# the module whose `source(name)` composes a variant's notebook source (and whose `PROSE` is the lecture's),
# named, not imported, so that only `course init` loads it.
FAMILIES = {"makemore-mlp": "grader.exercises.makemore_mlp.variants"}


class ExerciseError(ValueError):
    """course.yml names an exercise that cannot be loaded; the message says which and why."""


def _module(name: str):
    """A module by dotted name, or by the path of its file (`exercises/tiny.py`): a course can keep its
    own exercise beside its course.yml, where no import path reaches it. A file is imported once, under
    a name made from its absolute path, so every process that loads the same spec gets the same module."""
    if not name.endswith(".py"):
        return importlib.import_module(name)
    path = Path(name).resolve()
    module_name = "backprop_ninja_exercise_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or not path.is_file():
            raise ImportError(f"no exercise file {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    return sys.modules[module_name]


def load(spec: str = DEFAULT) -> Exercise:
    """The exercise a course names: a registered name, `family/variant`, `module:attribute`, or
    `path/to/file.py:attribute` (a relative path is the caller's to resolve: course.yml's are resolved
    against its folder)."""
    family, slash, name = spec.partition("/")
    if slash and family in FAMILIES:
        try:
            return importlib.import_module(FAMILIES[family]).variant(name)
        except ValueError as exc:
            raise ExerciseError(str(exc)) from None
    target = BUILTIN.get(spec, spec)
    module_name, _, attribute = target.rpartition(":")
    if not module_name or not attribute:
        raise ExerciseError(f"unknown exercise {spec!r}: the known ones are {', '.join(BUILTIN)}, "
                            "or give module:attribute or path/to/file.py:attribute")
    try:
        module = _module(module_name)
    except Exception as exc:  # noqa: BLE001 - an exercise file is the instructor's code: any fault, one line
        raise ExerciseError(f"exercise {spec!r} cannot be loaded: {exc}") from None
    if not hasattr(module, attribute):
        defined = [k for k, v in vars(module).items() if isinstance(v, Exercise)]
        fix = (f"give one it defines: {', '.join(f'{module_name}:{d}' for d in defined)}" if defined
               else "assign `EXERCISE = exercise(...)` in it")
        raise ExerciseError(f"exercise {spec!r}: {module_name} has no {attribute}; {fix}")
    value = getattr(module, attribute)
    if not isinstance(value, Exercise):
        raise ExerciseError(f"exercise {spec!r} is a {type(value).__name__}, not a grader.exercise.Exercise")
    found = problems(value)
    if found:
        where = _where(module_name, found[0][1])
        more = f" (and {len(found) - 1} more problem(s): run `backprop-ninja exercise check`)" if len(found) > 1 else ""
        raise ExerciseError(f"exercise {spec!r}{where}: {found[0][0]}{more}")
    return value


def _where(module_name: str, name: str) -> str:
    """`, line N of FILE`: the first line of the exercise's file that spells `name` as a string or a
    name, so that an error about a name points at the line to fix; empty where none does."""
    try:
        path = Path(_module(module_name).__file__)
        lines = path.read_text(encoding="utf-8").splitlines()
    except (ImportError, OSError, TypeError, AttributeError):
        return ""
    spelled = (f'"{name}"', f"'{name}'", f"{name} =")
    line = next((i for i, text in enumerate(lines, 1) if any(s in text for s in spelled)), None)
    return f", line {line} of {path}" if line else ""


def problems(exercise: Exercise) -> list[tuple[str, str]]:
    """What makes an exercise ungradable that its declaration alone shows, as (message with its fix, the
    name the message is about): found when it is loaded, so that a typo in an answer order is a line of
    the exercise's file named at `course init`, never a KeyError half-way through grading a class."""
    import difflib

    net = exercise.network
    tensors = {*net.parameters, *net.intermediates}
    found: list[tuple[str, str]] = []

    def unknown(name: str, what: str, among) -> None:
        if any(name == about for _, about in found):
            return  # a misspelt answer is one problem, not one more for every later cell that reads it
        close = difflib.get_close_matches(name, sorted(among), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        found.append((f"{what} {name!r}: no such {'gradient' if name.startswith('d') else 'name'} in the "
                      f"network{hint}", name))

    taken = NOTEBOOK_NAMES | {f.name for f in exercise.functions} | {f"check_ex{f.part}" for f in exercise.functions}
    names = (*net.parameters, *net.data, *net.sizes, *net.intermediates)
    for name in names:
        why = ("holds a double underscore, which no answer cell may read" if "__" in name else
               "is a Python builtin, which the answer cells' static check refuses to let a cell read"
               if name in vars(builtins) else
               f"is a name the notebook uses for itself (it keeps {', '.join(sorted(taken))})" if name in taken else
               f"has a gradient d{name} that is a Python keyword" if keyword.iskeyword(f"d{name}") else
               f"has a gradient d{name} of the same name as a tensor" if f"d{name}" in names else "")
        if why:
            found.append((f"the name {name!r} {why}: rename it", name))
    if net.loss not in net.intermediates:
        found.append((f"the loss {net.loss!r} is no step of the network: its last line must assign it", net.loss))
    for name in net.parameters:
        if not net.consumers(name):
            found.append((f"parameter {name!r} is read by no forward line, so its gradient is zero: use it or "
                          "remove it", name))
    seen: set[str] = set()
    for answer in exercise.answers:
        if answer.grade_id in seen or (exercise.training and answer.grade_id == exercise.training.grade_id):
            found.append((f"grade id {answer.grade_id!r} is used twice: each answer needs its own", answer.grade_id))
        seen.add(answer.grade_id)
        if answer.source not in tensors:
            unknown(answer.grade_id if answer.kind == ATOMIC else answer.source, "answer", {f"d{t}" for t in tensors}
                    if answer.kind == ATOMIC else tensors)
            continue
        for upstream in answer.upstream:
            if upstream[1:] not in tensors:
                unknown(upstream, f"{answer.grade_id} reads", {f"d{t}" for t in tensors})
    order = {a.source: i for i, a in enumerate(a for a in exercise.answers if a.kind == ATOMIC)}
    for answer in (a for a in exercise.answers if a.kind == ATOMIC and a.source in tensors):
        late = [c for c in net.consumers(answer.source) if c != net.loss and order.get(c, -1) > order[answer.source]]
        if late:
            found.append((f"{answer.grade_id} comes before d{late[0]}, which it needs ({late[0]} reads "
                          f"{answer.source}): put it after d{late[0]} in the answer order", answer.grade_id))
    for function in exercise.functions:
        for name in function.returns:
            if name not in tensors:
                unknown(name, f"{function.name} returns", tensors)
    if exercise.training and exercise.training.function not in exercise.functions:
        found.append((f"the training check's function {exercise.training.function.name!r} is not among the "
                      "exercise's functions", exercise.training.function.name))
    for name in exercise.mistakes.rules:
        if name not in net.step:
            found.append((f"mistakes: a rule for {name!r}, which is no forward line (its slips would never be "
                          "tried): name the line it is about, or drop it", name))
    for key, bounds in exercise.ranges.items():
        if key not in exercise.lecture:
            found.append((f"size {key!r} has a range but no lecture value: give it one in the lecture sizes", key))
        elif (len(bounds) != 2 or not all(isinstance(b, int) for b in bounds) or bounds[0] >= bounds[1]
              or not set(range(*bounds)) - set(exercise.lecture.values())):
            found.append((f"size {key!r}: its range {tuple(bounds)} is (low, high) with high excluded and must "
                          "hold a value unlike every lecture size", key))
    return found

