"""The self-check students call after each answer cell: the grader's own verdict, reached without the
hidden tests or the solutions, one line each.

It compares the answer with autograd's on the notebook's own batch, then runs the answer cell's code
the way the grader does (grader.judge.compare.judge: the same comparison, tolerances, static check and
diagnosis): with the true upstream gradients and with random ones (so a missing branch or a constant
fails here too), on the notebook's batch and on three batches of other sizes it draws itself, one of
each kind the grader's hidden configurations hold (all targets distinct, plain, a tiny activation
variance); a function answer runs in a clean namespace at those sizes (so reading the notebook's
globals fails here too), and so does a training-run answer. The cell's code comes from the
notebook's own history (IPython's), so nothing needs to be passed in. A line contains WRONG exactly
when the grader takes a point there (a shape that differs only by a size-1 dimension too, unless the
course gives it full credit), and a line that loses part of the points says how much. When the cell
is right but an upstream answer is wrong, the line names the first wrong answer of the chain; when
the notebook's value is stale (an input changed since the cell ran, or a later cell changed it in
place, or another cell reassigned its name, all recorded after each cell through IPython's events), it
says what to re-run, and never calls a right cell wrong; nor does autograd's gradient changed by a
(refused) backward() call, checked against the gradient computed here from the notebook's batch.

Everything it knows of the network, the answers and their cells comes from the exercise value
(grader.exercise), so it checks any exercise's notebook. It prints to stdout only, never stderr
(nbgrader zeroes a cell that writes to stderr), and a blank answer is "not attempted yet" so Run All
still reaches the end of the notebook.
"""
from __future__ import annotations

import ast
import builtins
import collections.abc
import contextlib
import copy
import difflib
import dis
import functools
import importlib.util
import io
import json
import re
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import NamedTuple

import torch

from grader import syntax
from grader.course import LECTURE_NOTEBOOK, Policy, Tolerance
from grader.exercise import ATOMIC, DEFAULT, FUNCTION, FUSED, NAMESPACE, Answer, Exercise, cell_builtins
from grader.exercise import load as load_exercise
from grader.judge import neighbourhood
from grader.judge.compare import (
    NOTEBOOK,
    ONE_HOT_WIDTH,
    SIZES_MISTAKE,
    compare,
    judge,
    one_hot_unsized,
    written_sizes,
)
from grader.judge.configs import Config, generate, training_config
from grader.judge.diagnose import NEAR_SAID
from grader.judge.diagnose import name as name_mistake
from grader.judge.exam import (
    CHAIN,
    LOCAL,
    TrainingNotFinite,
    autograd_steps,
    case_of,
    checks,
    not_finite,
    prepare,
    prepare_training,
    steps_of,
    trajectory_atol,
)
from grader.limits import Limits
from grader.sandbox import protocol, static_check
from grader.vocabulary import SETUP_FIRST as SETUP
from grader.vocabulary import Broadcast, Chain, Match, Status, dtype_note, grade_cell_id

# A check asks for the exercise hundreds of times, and loading one validates it again each time (a fifth of
# a check's time); within a kernel the exercise's module is imported once anyway.
load = functools.lru_cache(maxsize=8)(load_exercise)

# Float64 rounding is ~1e-16, so these only absorb a different order of operations; float32 noise on
# gradients that are zero in exact arithmetic (a softmax's shift, a bias before a batch norm) reaches ~1e-8,
# hence its looser atol. Float64 answers use the course's tolerance (the grader's); these are the defaults.
TOLERANCES = {torch.float64: (1e-5, 1e-8), torch.float32: (1e-4, 1e-6)}
# The self-check's own batches: public, unlike the grader's, and drawn like them (sizes unlike the
# lecture's, each configuration as the exercise's hidden ones are).
SALT = "backprop-ninja self-check"

# exercise spec -> its self-check cases, built once per notebook (several SelfChecks share them).
_CASES: dict[str, tuple] = {}


def choose_rule_table() -> None:
    """The self-check names slips with the rule table where grader.derive is installed (a checkout, the full
    package), and by the fingerprints beside the notebook in backprop-ninja-student, which leaves it out.
    Imported by name: an import statement would put it in that wheel."""
    found = importlib.util.find_spec("grader.derive") is not None
    neighbourhood.use_rule_table(importlib.import_module("grader.derive") if found else None)


def own_cases(spec: str) -> tuple:
    """One batch of each kind the grader's hidden configurations hold (the exercise's `hidden` gives the
    first and the last their own, the middle ones none), so no kind the grader scores goes unchecked."""
    return tuple(case for case in _all_cases(spec) if case.config.scored)


def own_probe(spec: str):
    """The unscored batch at the lecture's sizes the grader runs beside its own: an answer right there
    and wrong at every other size hard-codes a lecture size, which the grader says."""
    return next(case for case in _all_cases(spec) if not case.config.scored)


def _all_cases(spec: str) -> tuple:
    if spec not in _CASES:
        torch.set_num_threads(1)
        _CASES[spec] = tuple(prepare(config) for config in generate(spec, SALT, 3))
    return _CASES[spec]


def _credit(fraction: float) -> str:
    """The partial credit the grader gives, said where the line says WRONG, so that no half point is a surprise."""
    share = "nothing" if fraction <= 0 else "half its points" if fraction == 0.5 else f"{fraction:g} of its points"
    return f"the grader gives {share}"


def share_said(text: str) -> float | None:
    """The share of an answer's points a check line's text (after its label) says the grader gives, as
    `_credit` words it: what `exercise check` holds the grader's own share to. None: a line that says
    neither right nor wrong, such as "not checked: ..."."""
    if "WRONG as saved" in text:  # the file's verdict, whatever the kernel's run got
        saved = text.partition("WRONG as saved")[2]
        return 0.5 if "the grader gives half its points" in saved else 0.0
    if text.startswith(("exact:", "right values, wrong shape")) or re.match(r"\d+ steps match autograd", text) or (
            not text.startswith("WRONG") and re.search(r"this cell (itself )?is right", text)):
        return 1.0
    if text == "not attempted yet" or text.startswith("not attempted yet:"):
        return 0.0
    if not text.startswith("WRONG"):
        return None
    share = re.search(r"the grader gives (nothing|half its points|[0-9.]+ of its points)", text)
    if share is None or share.group(1) == "nothing":
        return 0.0
    return 0.5 if share.group(1) == "half its points" else float(share.group(1).split()[0])


class _Ran:
    """What a cell produced on one case: the fields of the sandbox's Outcome that judge reads."""

    def __init__(self, status: str, tensor=None, **detail):
        self.status, self.tensor, self.detail, self.extra = status, tensor, detail, {}


class _Slow(BaseException):
    """A cell past the grader's time limit for one run (a BaseException: a cell's `except Exception` lets it by)."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """The grader's time limit for one run of a cell: without it a slow cell made each check as slow as its runs on
    every batch, where the grader stops it and gives it nothing. Only in the main thread, where the kernel runs
    cells (a signal's handler is set nowhere else), and where no other timer runs; elsewhere, none."""
    def stop(*_):
        raise _Slow

    try:  # (a timer someone else set, a test runner's, is left alone; Windows has no SIGALRM: no limit there)
        previous = signal.signal(signal.SIGALRM, stop) if not signal.getitimer(signal.ITIMER_REAL)[0] else None
    except (ValueError, AttributeError):
        previous = None
    if previous is not None:
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        if previous is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _error(exc: BaseException, filename: str) -> _Ran:
    line = next((f.lineno for f in reversed(traceback.extract_tb(exc.__traceback__)) if f.filename == filename), None)
    return _Ran("error", error_type=type(exc).__name__, error=str(exc)[:500], line=line)


def _globals_read(function) -> str:
    """The notebook's values a function reads besides its arguments (a parameter an earlier exercise left
    in the notebook, say): the check and the grader give it none, and the notebook's are of other sizes."""
    code, found = getattr(function, "__code__", None), getattr(function, "__globals__", {})
    # The names it loads as globals, not every name of co_names, which holds attributes too: `W2.T` is no read of
    # a notebook's `T` (an instructor trial's function, which set its own T, was told it read the notebook's)
    loaded = [] if code is None else list(dict.fromkeys(
        i.argval for c in _codes(code) for i in dis.get_instructions(c) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")))
    read = [n for n in loaded if n not in NAMESPACE and isinstance(found.get(n), torch.Tensor | int | float)]
    return "" if not read else f" (it reads {', '.join(read[:4])} from the notebook, not from its arguments)"


def _codes(code) -> collections.abc.Iterator:
    """A code object and those nested in it (a comprehension's, a lambda's), whose globals are the function's."""
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            yield from _codes(const)


def _step(params: dict, grads: dict, lr: float) -> dict:
    """One SGD step with the student's gradients, in the parameters' dtype."""
    return {k: params[k] - lr * grads[k].detach().to(params[k].dtype) for k in params}


def _copied(carry: dict) -> dict | None:
    """`carry` with its tensors copied, views of one tensor still views of one copy (one deepcopy memo); the other
    values as they are. None where a tensor will not copy (a non-leaf of autograd's): such a carry is not kept."""
    memo: dict = {}
    try:
        return {k: copy.deepcopy(v, memo) if isinstance(v, torch.Tensor) else v for k, v in carry.items()}
    except (RuntimeError, TypeError):
        return None


def _result(value, like) -> _Ran:
    """What the sandbox replies for `value`, an answer of the gradient of `like` (its tensor)."""
    value = protocol.as_answer(value, isinstance(like, torch.Tensor) and like.dim() == 0)
    if value is None:
        return _Ran("blank")
    if type(value) is not torch.Tensor:
        return _Ran("subclass" if isinstance(value, torch.Tensor) else "not-tensor", type=type(value).__name__)
    return _Ran("tensor", value.detach())


def _executed(tree: ast.AST):
    """ast.walk, but not into the bodies of the functions, lambdas and classes the code defines: what
    running the cell binds and reads. A function's locals bind nothing in the notebook: a function that
    assigns every answer's name inside (a whole backward pass) was taken for each answer's cell."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo.extend(reversed([*ast.iter_child_nodes(node), *_exec_code(node)]))


def _shape(value) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def _exec_code(node: ast.AST) -> list[ast.Module]:
    """The code an `exec("...")` call runs, written out: it binds what it assigns (the grader refuses the call;
    an exec cell that stopped on its own typo was "not run yet" in the sixteenth trial's classic Notebook)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "exec" and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return []
    try:
        return [ast.parse(node.args[0].value)]
    except SyntaxError:
        return []


def _assigned_in(namespace: dict, exercise, name: str) -> tuple[int | None, str]:
    """The kernel's last cell that assigned `name` (its execution count, None if none is known) and how a line
    names it: an answer cell by its answer, another by its In[n] (a student trial: "a cell assigned W2" of
    the cell right above the check)."""
    history = namespace.get("In") or []
    count = next((i for i in range(len(history) - 1, 0, -1)
                  if isinstance(history[i], str) and _assigns(history[i], frozenset({name}))), None)
    if count is None:
        return None, "a cell"
    if _IDS.get(count) in {a.cell_id for a in exercise.answers}:
        return count, f"{_IDS[count]}'s cell (In[{count}])"
    return count, f"the cell you ran as In[{count}]"


@functools.lru_cache(maxsize=1024)
def _assigns(source: str, names: frozenset[str]) -> bool:
    """Whether the cell binds one of `names`; a cell that does not parse (a student's syntax error, which
    the grader refuses) is read line by line, so that its answer cell is still found and judged."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return any(re.search(rf"(?m)^\s*(def\s+)?{re.escape(n)}\s*([-+*/@]?=[^=]|\()", source) for n in names)
    bound = {n.id for n in _executed(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    bound |= {n.name for n in _executed(tree) if isinstance(n, ast.FunctionDef)}
    return bool(bound & names)


@functools.lru_cache(maxsize=1024)
def _given(source: str, sinks: frozenset[str]) -> bool:
    """A read-only cell that hands a fused answer autograd's gradient of its sink (`dX = X.grad.clone()`,
    so that a fused exercise does not depend on the atomic one): not an answer cell. Only
    that exact form, so a student's answer that reads .grad is still found (and refused, as the grader
    refuses it)."""
    try:
        statements = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(statements) and all(
        isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
        and s.targets[0].id[1:] in sinks and ast.unparse(s.value) == f"{s.targets[0].id[1:]}.grad.clone()"
        for s in statements)


@functools.lru_cache(maxsize=1024)
def _quiet():
    """The answer cells' own prints, which a check replays on each of its batches (the fifteenth trial's 8 to 80
    debug lines before a verdict, with sizes the student never used), are not the check's to show."""
    return contextlib.redirect_stdout(io.StringIO())


@contextlib.contextmanager
def _as_the_grader():
    """torch's global state as the grader's sandbox has it, for the check's run of the student's cells: a scratch
    cell's torch.set_default_dtype(torch.float64) made `torch.zeros(C.shape)` float64 in the check alone, and the
    check said ok of a cell the grader gave 0 (a student trial). Yields what the kernel's state would change."""
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.enable_grad():  # the check's own autograd runs (the training check's reference)
            yield {"dtype": dtype if dtype != torch.float32 else None, "grad": grad}
    finally:
        torch.set_default_dtype(dtype)


GRAD_OFF = ("torch's grad mode is off in this kernel (a cell called torch.set_grad_enabled(False)), so the forward "
            "pass's cell cannot record autograd's gradients to check against: run torch.set_grad_enabled(True) or "
            "restart the kernel, then the setup and your cells again")


# A call that makes a tensor of torch's default dtype (the `*_like` ones take their input's)
_DEFAULT_DTYPE = re.compile(r"\btorch\.(zeros|ones|empty|full|tensor|as_tensor|arange|linspace|logspace|eye|rand|randn|"
                            r"randint)\(|\.new_tensor\(")


def _kernel_note(said: str, kernel: dict, code: str | None = None) -> str:
    """The kernel's own state, where it may be why a line is not ok: the check then says what the grader does. The
    default dtype only where the answer's cell (`code`, when known) makes a tensor of it: a student trial's
    set_default_dtype(torch.float64) in a scratch cell was named on every WRONG line, a keepdim slip's too."""
    if "WRONG" not in said and "not checked" not in said and "no autograd" not in said:
        return said
    if kernel["dtype"] is not None and (code is None or _DEFAULT_DTYPE.search(code)):
        said += (f" (torch's default dtype is {str(kernel['dtype']).removeprefix('torch.')} in this kernel, which a "
                 "cell set with torch.set_default_dtype: the grader, and this check, run your cells with torch's "
                 "own, float32; take that call out and restart the kernel)")
    if not kernel["grad"] and "no autograd gradient" in said:  # not the cell it names: the mode
        head, _, _ = said.partition("| ")
        said = f"{head}| not checked: {GRAD_OFF}"
    elif not kernel["grad"]:
        said += f" ({GRAD_OFF})"
    return said


def _assigned_values(source: str, name: str) -> list[str]:
    """The code of each value the cell assigns to `name` (`W2 = W2.T`: `W2.T`)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [ast.unparse(n.value) for n in _executed(tree) if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]


def _reads(source: str) -> frozenset[str]:
    try:
        return frozenset(n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name))
    except SyntaxError:
        return frozenset()


@functools.lru_cache(maxsize=256)
def _compiled(source: str, filename: str):
    """A check runs the same few cells on every case and every earlier answer's check: compiled once."""
    return compile(source, filename, "exec")


@functools.lru_cache(maxsize=1024)
def _first_uses(source: str, augmented: bool = True) -> tuple[frozenset[str], frozenset[str]] | None:
    """(the names the code binds, those it reads before binding them), statement by statement (a value
    is read before its target is bound, and `x += ...` reads x unless not `augmented`); None for code that
    does not parse."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    bound: set[str] = set()
    early: set[str] = set()
    for unit in (part for statement in body for part in _in_order(statement)):
        nodes = list(_executed(unit))
        targets = [n.target for n in nodes if isinstance(n, ast.AugAssign)] if augmented else []
        early |= {n.id for n in [*nodes, *targets] if isinstance(n, ast.Name)
                  and (isinstance(n.ctx, ast.Load) or n in targets)} - bound
        bound |= {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        bound |= {n.name for n in nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    return frozenset(bound), frozenset(early)


_BODIES = ("body", "handlers", "orelse", "finalbody")


def _in_order(statement: ast.AST) -> collections.abc.Iterator[ast.AST]:
    """A statement's parts in the order they run: a compound statement's own expressions (a with's context,
    a loop's iterable and target, an if's test), then each statement of its bodies, each in turn. Taken whole,
    `with torch.no_grad():` around `dx = torch.zeros_like(x)` and `dx[i] = ...` read dx before binding it, and
    the answer cell was taken for the cell of the step that reads dx (an outside trial)."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda) or \
            not any(isinstance(getattr(statement, field, None), list) for field in _BODIES):
        yield statement
        return
    for field, value in ast.iter_fields(statement):
        if field not in _BODIES:
            yield from (v for v in (value if isinstance(value, list) else [value]) if isinstance(v, ast.AST))
    if isinstance(statement, ast.ExceptHandler) and statement.name:  # `except E as e:` binds e
        yield ast.Name(statement.name, ast.Store())
    for field in _BODIES:
        for child in getattr(statement, field, None) or ():
            yield from _in_order(child)


@functools.lru_cache(maxsize=4096)
def _cells_by_code(spec: str, source: str, bound_name: str | None = None) -> tuple[str, ...]:
    """The answer cells (their ids) the code can be, from the code alone, for the front ends that send
    no cell ids (nbclient, the classic Notebook). A cell binding an answer's variable is that answer's,
    unless it reads the variable before binding it (a typo: `dy = ... * dy` is the cell of the step that
    reads dy); of the answers sharing a variable (a fused exercise's and an
    atomic one's), those whose one step's gradients it reads most, none of them reading a gradient the
    answer may not. `bound_name`: the answer's name the code was seen binding (through exec or globals(),
    which no statement shows). Empty: no answer's cell."""
    exercise = load(spec)
    gradients = [a for a in exercise.answers if a.kind != FUNCTION]
    uses = _first_uses(source)
    if uses is None:  # a syntax error: the names it assigns, line by line; nothing known of what it reads
        uses = (frozenset(n for n in _names_of(spec) if _assigns(source, frozenset({n}))), frozenset())
    bound, early = uses
    if bound_name is not None and not bound & _names_of(spec):
        bound = frozenset({bound_name})
    cells: list[str] = []
    read = early & {a.variable for a in gradients}
    changed_only = _augmented_only(source) & {a.variable for a in gradients}
    for variable in sorted(bound & {a.variable for a in gradients}):
        if variable in changed_only and bound - changed_only:
            # `dy = ... dx ...` then `dx *= 2`: dy's cell changing dx in place, not dx's cell (without ids, the
            # twelfth trial's right dx was judged as this cell and told WRONG, and the change went unseen)
            continue
        candidates = [a for a in gradients if variable in a.local_upstream] if variable in early else []
        if variable not in (_first_uses(source, augmented=False) or (bound, early))[1]:
            # `dx += ...` alone is dx's cell completing its gradient (begun in an earlier cell); with the variable of
            # an answer that reads dx bound too (`dx *= ...; dy = dx`), that answer's cell changing dx in place
            candidates = [a for a in candidates if a.variable in bound]
        elif len(candidates) > 1:
            # `dx = ... dx` is a typo in the cell of the one step that reads dx; where several read it (a fused
            # exercise's `dx = dx` reads its atomic namesake), no step is told: the cell is dx's answers'
            candidates = []
        candidates = candidates or [a for a in gradients if a.variable == variable]
        candidates = [a for a in candidates if read - {variable} <= set(a.upstream)] or candidates
        best = max(len(read & set(a.local_upstream)) for a in candidates)
        cells += [a.cell_id for a in candidates if len(read & set(a.local_upstream)) == best]
    cells += [f.cell for f in exercise.functions if f.name in bound]
    return tuple(dict.fromkeys(cells))


def _deletes(source: str) -> frozenset[str]:
    """The names the code deletes (`del x`)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    return frozenset(t.id for n in ast.walk(tree) if isinstance(n, ast.Delete) for t in n.targets
                     if isinstance(t, ast.Name))


def _augmented_only(source: str) -> frozenset[str]:
    """The names the code binds by augmented assignment alone (`x *= 2`, no `x = ...`)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    augmented = {n.target.id for n in ast.walk(tree) if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
    targets = {id(n.target) for n in ast.walk(tree) if isinstance(n, ast.AugAssign)}
    plain = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
             and id(n) not in targets}
    return frozenset(augmented - plain)


# cell id -> the code it last ran, and execution count -> the id of the cell that ran. The notebook's cells
# have their grade ids as ids, and JupyterLab and Notebook 7 send the id with each execution; nbclient and
# the classic Notebook do not, hence the history as a fallback, each cell of it told by its code
# (_cells_by_code), and the cells seen binding an answer's name.
_CELLS: dict[str, str] = {}
_IDS: dict[int, str] = {}
# The id of the cell running now, where the front end sends one: a check cell edited to check another answer.
_RUNNING: dict[str, str | None] = {"cell": None}
# Name (an answer's variable or function) -> (execution count, code, cell id or None) of the last cell that
# bound it, by any means (`exec("dx = ...")`, `globals()["dx"] = ...` name nothing the history shows), and
# what each such name held before the running cell. The id tells a later cell that reassigned an answer's
# name (a fused exercise's answer reusing an atomic one's name, a typo naming an earlier answer) from the
# answer's own.
_BOUND: dict[str, tuple[int, str, str | None]] = {}
_BEFORE: dict[str, object] = {}
# Execution count -> the answer names that cell's run bound: two answers in one run (`%run answers.py` in one
# answer's cell), where the code shows neither.
_BOUND_AT: dict[int, set[str]] = {}


class _Change(NamedTuple):
    """How a cell changed an earlier answer or a forward value in place: the cell in words, the answer it
    assigned, the statement that changed it (None: a change through another name, `dx = dy; dx += ...`),
    the answer cells it can be (a fused exercise's cell and an atomic one share a variable), the forward
    value's tensor, and whether that cell has run again since without changing it: then it is fixed, and
    only what it left behind is still to re-run."""

    where: str
    by: str | None
    how: str | None
    cells: tuple[str, ...]
    tensor: torch.Tensor | None = None
    fixed: bool = False
    count: int | None = None  # the execution count of the run that made the change

    def of(self, answer: Answer) -> bool:
        return answer.cell_id in self.cells if self.cells else self.by == answer.variable


# Forward value -> (its tensor, torch's count of in-place changes) before the running cell, and forward value ->
# how a cell changed it in place: `x.mul_(dy)` in a parameter's cell leaves every later answer that reads x
# computed from a wrong value.
_FORWARD_BEFORE: dict[str, tuple[torch.Tensor, int]] = {}
_FORWARD_CHANGED: dict[str, _Change] = {}


# The batch the forward pass read: data name -> (its tensor, torch's count of in-place changes), as the last cell
# that called backward() left them. A scratch cell's `Yb = Yb.float()` or `Xb = Xb[:5]` after it stops or resizes
# every answer that reads it, however right its code.
_BATCH: dict[str, tuple[torch.Tensor, int]] = {}


# The execution counts of the cells stopped by Kernel > Interrupt: a cell that slow fails the grader's time limit.
_INTERRUPTED: set[int] = set()
# A cell's id (or else its execution count) -> the error its last run stopped with: a cell that binds its answer
# on its first line and stops on a later one leaves a value half made, which its code as the grader runs it is not.
_RAISED: dict[str | int, str] = {}


def _remember_batch(namespace: dict, source: str) -> None:
    settings = namespace.get("COURSE")
    if ".backward(" not in source or not isinstance(settings, dict):
        return
    data = load(settings.get("exercise", DEFAULT)).network.data
    if all(type(namespace.get(name)) is torch.Tensor for name in data):
        _BATCH.clear()
        _BATCH.update({name: (namespace[name], namespace[name]._version) for name in data})


def _record(info) -> None:
    try:
        from IPython import get_ipython
        namespace = get_ipython().user_ns
        _pasted(namespace)
    except Exception:  # noqa: BLE001 - bookkeeping for better lines must never get in the student's way
        namespace = {}
    cell_id = _grade_id_of(namespace, getattr(info, "cell_id", None))
    _RUNNING["cell"] = cell_id
    if cell_id:
        _CELLS[cell_id] = info.raw_cell
    try:
        _BEFORE.clear()
        _BEFORE.update({name: namespace.get(name) for name in _answer_names(namespace)})
        _VERSIONS.clear()
        _VERSIONS.update({variable: ran[1]._version for variable, ran in _RAN.items()})
        settings = namespace.get("COURSE")
        _FORWARD_BEFORE.clear()
        if isinstance(settings, dict):
            _FORWARD_BEFORE.update({name: (t, t._version) for name in load(settings.get("exercise", DEFAULT))
                                    .network.intermediates if type(t := namespace.get(name)) is torch.Tensor})
    except Exception:  # noqa: S110 - bookkeeping for better lines must never get in the student's way
        pass


def _answer_names(namespace: dict) -> frozenset[str]:
    """The names the notebook's answer cells bind: each gradient's variable and each function's name."""
    settings = namespace.get("COURSE")
    return _names_of(settings.get("exercise", DEFAULT)) if isinstance(settings, dict) else frozenset()


def _answer_grade_ids(namespace: dict) -> frozenset[str]:
    settings = namespace.get("COURSE")
    return frozenset(load(settings.get("exercise", DEFAULT)).by_grade_id) if isinstance(settings, dict) \
        else frozenset()


@functools.lru_cache(maxsize=8)
def _names_of(spec: str) -> frozenset[str]:
    exercise = load(spec)
    return frozenset({a.variable for a in exercise.answers if a.kind != FUNCTION}
                     | {f.name for f in exercise.functions})


def _bound(namespace: dict, source: str, count, cell_id: str | None) -> None:
    """After each cell: the answer names it bound anew, whatever the cell looks like (a check cell, or a
    read-only cell handing a fused answer autograd's gradient, is no answer cell)."""
    names = _answer_names(namespace)
    if not names or "check(" in source or not isinstance(count, int) \
            or _given(source, frozenset(name[1:] for name in names if name.startswith("d"))):
        return
    for name in names:
        if name in namespace and namespace[name] is not _BEFORE.get(name):
            _BOUND[name] = (count, source, cell_id)
            _BOUND_AT.setdefault(count, set()).add(name)


# What the answer cells left, for the lines on stale state: variable -> the gradients its cell read, as
# they were then, and the tensor it assigned with that tensor's version (torch counts in-place changes);
# and variable -> how a later cell changed it in place.
_RAN: dict[str, tuple[dict[str, torch.Tensor], torch.Tensor, int]] = {}
_CHANGED: dict[str, _Change] = {}
# Each assigned answer's tensor's version before the running cell: whether that cell changed it.
_VERSIONS: dict[str, int] = {}
# The cell that last called backward() outside the forward pass's: autograd's .grad then holds a sum.
_BACKWARD: list[str] = []


def _remember(namespace: dict, source: str, count, cell_id: str | None = None) -> None:
    """After each cell: which answer variables it assigned (and from what), and which earlier answers it
    changed in place: through another name (`dx = dy; dx += ...` changes dy) or its own (`dy *= ...` in
    dx's cell, which binds dy anew only in name)."""
    settings = namespace.get("COURSE")
    if not isinstance(settings, dict):
        return
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    exercise = load(settings.get("exercise", DEFAULT))
    gradients = {a.variable for a in exercise.answers if a.kind != FUNCTION}
    network = exercise.network  # a forward value run again with other values makes an answer stale too
    inputs = gradients | {*network.intermediates, *network.parameters, *network.data}
    augmented = {id(n.target): n for n in _executed(tree) if isinstance(n, ast.AugAssign)}
    names = [n for n in _executed(tree) if isinstance(n, ast.Name)]
    # A read-only cell handing a fused answer autograd's gradient (`dx = x.grad.clone()`) is no answer's cell,
    # though its code binds an answer's name: run, it fixes no answer cell's in-place change.
    sinks = frozenset(a.sink for a in exercise.answers if a.sink)
    cells = (cell_id,) if cell_id else () if _given(source, sinks) else \
        _cells_by_code(settings.get("exercise", DEFAULT), source)
    own = {a.variable for a in exercise.answers if a.cell_id in cells}
    stored = {n.id for n in names if isinstance(n.ctx, ast.Store)} & gradients
    rebound = ({n.id for n in names if isinstance(n.ctx, ast.Store) and id(n) not in augmented} | own) & gradients
    read = {n.id for n in names if isinstance(n.ctx, ast.Load)} & inputs
    assigned = sorted(v for v in rebound if type(namespace.get(v)) is torch.Tensor)
    by = assigned[0] if assigned else None
    # A variable two answers share (an atomic cell and a fused one of the same tensor) is told by its cell id.
    shared = sum(a.variable == by for a in exercise.answers) > 1 and len(cells) == 1
    where = f"{cells[0] if shared else by}'s cell" if by else f"the cell you ran as In[{count}]"
    now: set[str] = set()
    for variable, (_, tensor, version) in list(_RAN.items()):
        if variable not in rebound and namespace.get(variable) is tensor and tensor._version != version:
            # the statement that changed it, where it names it: `dx *= 2`, or a method `dx.mul_(2)` (else an alias did)
            how = next((ast.unparse(a) for a in augmented.values() if isinstance(a.target, ast.Name)
                        and a.target.id == variable), None) if variable in stored else None
            how = how or next((ast.unparse(n) for n in _executed(tree) if isinstance(n, ast.Call)
                               and isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_")
                               and isinstance(n.func.value, ast.Name) and n.func.value.id == variable), None)
            # or an entry of it by its name (`dx[i] += ...`, a loop finishing the answer): not through an alias
            how = how or next((ast.unparse(n) for n in _executed(tree) if isinstance(n, (ast.AugAssign, ast.Assign))
                               and any(isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                                       and t.value.id == variable
                                       for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))), None)
            if tensor._version != _VERSIONS.get(variable, version):
                now.add(variable)
            if variable in now and (variable not in _CHANGED or _CHANGED[variable].fixed):
                _CHANGED[variable] = _Change(where, by, how, tuple(cells), count=count)
    for variable in assigned:
        tensor = namespace[variable]
        _RAN[variable] = ({g: namespace[g].detach().clone() for g in read - {variable}
                           if type(namespace.get(g)) is torch.Tensor}, tensor, tensor._version)
        _CHANGED.pop(variable, None)
    for name, (tensor, version) in _FORWARD_BEFORE.items():
        if namespace.get(name) is tensor and tensor._version != version:
            now.add(f"forward {name}")
            _FORWARD_CHANGED[name] = _Change(where, by, None, tuple(cells), tensor, count=count)
    for key, table in (("", _CHANGED), ("forward ", _FORWARD_CHANGED)):
        for name, change in table.items():
            if f"{key}{name}" not in now and set(change.cells) & set(cells):
                table[name] = change._replace(fixed=True)
    if any(isinstance(n, ast.Attribute) and n.attr == "backward" for n in ast.walk(tree)):
        # An answer cell's call adds to autograd's gradients (the grader refuses it); any other cell's is
        # taken for the forward pass's, run anew.
        _BACKWARD[:] = [where] if assigned else []


def _saved_code(namespace: dict, cell_id: str) -> tuple[str, float] | None:
    """(the cell's code in the notebook's file, when the file was saved), where the front end names the
    file: jupyter_server's kernels have it as `__session__`, VS Code's as `__vsc_ipynb_file__`."""
    found = _saved_notebook(namespace)
    if found is None:
        return None
    cells, saved = found
    return next(((code, saved) for found, code in cells if found == cell_id), None)


def _saved_notebook(namespace: dict) -> tuple[tuple[tuple[str, str], ...], float] | None:
    """(the notebook file's code cells, when it was saved), where the front end names the file, or else the
    kernel's folder holds one notebook of the exercise, and it reads as a notebook (a file a `git pull` left
    with conflict markers says nothing of the answers)."""
    path = _kernel_notebook(namespace)
    if path is None:
        return None
    try:
        saved = path.stat().st_mtime
        return _saved_cells(str(path), saved), saved
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def _kernel_notebook(namespace: dict) -> Path | None:
    """The kernel's notebook file: the one the front end names, or where it names none, or one that is gone
    (JupyterLab's File > Rename keeps the kernel, and the name it started with: the fourteenth trial's lines kept
    naming a copy renamed to the course's name), the one `_only_notebook` infers; None where the file named is no
    notebook of the exercise."""
    path = _named_notebook(namespace)
    if path is not None:  # a second notebook's (`_second_notebook`) holds no answer's cell: none is known
        return None if _second_notebook(namespace) is not None else path
    return _only_notebook(namespace)


# When this kernel first imported the self-check (its setup ran): a notebook saved since is this session's.
_IMPORTED = time.time()
_STARTED = Path.cwd()


def _folders(namespace: dict) -> tuple[Path, ...]:
    """Where the notebook may be: the folder the kernel started in, where Jupyter starts it beside the notebook
    (IPython's `_dh[0]`, else the folder at the self-check's import), then the kernel's folder now. A scratch
    cell's `%cd ..` (to reach a data folder) left the check looking for the saved notebook in the new folder only,
    and an unsaved or unrun answer a plain ok (a student trial)."""
    started = namespace.get("_dh")
    started = Path(started[0]) if isinstance(started, list) and started and isinstance(started[0], str | Path) \
        else _STARTED
    return tuple(dict.fromkeys((started, Path.cwd())))


def _only_notebook(namespace: dict) -> Path | None:
    """The notebook in the kernel's folder that is this kernel's, for the front ends that name no file (the
    classic Notebook, nbclient): without it, a scratch cell run after a wrong answer cell was judged as the
    answer (the grader grades the saved cell). Of the folder's notebooks holding the exercise's answer cells
    (`_notebooks`), those holding an answer cell this kernel ran as saved, and of those the one saved last (an
    older copy may hold a cell deleted since): a copy beside it (File > Make a Copy, a snapshot) left the
    thirteenth student trial's classic Notebook with no file at all, and every unsaved answer a plain ok."""
    # This kernel's notebook only if it ran one of the file's answer cells as saved: a notebook run from
    # elsewhere in the folder of another (the solved one beside the released blank) is not its file. A
    # blank cell run as released is in every copy of the notebook: it tells no file (a never-saved
    # notebook with one blank run was judged against the blank file, 26 right cells WRONG as saved, and
    # without the blank run every line was right).
    try:
        spec, paths, history = namespace["COURSE"].get("exercise", DEFAULT), _notebooks(namespace), namespace.get("In")
        # A check asks hundreds of times, while neither the folder's notebooks nor the kernel's history change
        state = (spec, tuple((path, path.stat().st_mtime) for path in paths), id(history), len(history or ()))
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return None
    if _INFERRED.get("state") != state:
        _INFERRED.update(state=state, path=_inferred(spec, paths, history or []))
    return _INFERRED["path"]


_INFERRED: dict = {}  # the last `_only_notebook` and the state it was inferred in


def _inferred(spec: str, paths: list[Path], history: list) -> Path | None:
    """`_only_notebook`'s answer, from the exercise's notebooks in the folder and the kernel's history."""
    try:
        wanted = {a.cell_id for a in load(spec).answers}
        ran = {code.strip() for code in history if isinstance(code, str)}
        scored = []
        for path in paths:
            saved = _saved_cells(str(path), path.stat().st_mtime)
            matched = frozenset(cell for cell, code in saved
                                if cell in wanted and not _blank(code) and code.strip() in ran)
            # or saved since the self-check was imported (the setup ran): saved from this session, though none
            # of its answer cells has run as saved (the fourteenth trial's only answer edited and saved, unrun).
            # A copy of a notebook beside it (an older download, ` (1)`) not saved this session tells nothing by
            # its cells: the nineteenth trial's right answer in it, run in the never-saved notebook, made that
            # download the kernel's ("rename this one to that name", over the student's own notebook).
            session = path.stat().st_mtime > _IMPORTED
            scored.append((bool(matched and (session or _original_of(path) is None)) or session,
                           path.stat().st_mtime, path, matched))
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return None
    # A copy (`-Copy1`, ` (1)`: a downloaded older version) only where the notebook it copies holds none of it
    # (saved last, a download beside the notebook was taken for it: the fourteenth trial's right cell WRONG), or
    # holds only some of what the copy holds of this kernel's runs: File > Make a Copy, then an answer run and
    # saved in the copy, was judged against the original, "save the notebook" after every save (a student trial)
    ran_in = {found[2]: found for found in scored if found[0]}
    originals = [found for found in ran_in.values()
                 if (original := ran_in.get(_original_of(found[2]))) is None or found[3] > original[3]]
    best = max(originals or ran_in.values(), default=None, key=lambda found: found[1])
    return best[2] if best is not None else None


def _original_of(path: Path) -> Path | None:
    """The notebook a copy's name says it copies (`x-Copy1.ipynb`, as JupyterLab names a copy; `x (1).ipynb`, as a
    browser names a second download of x), where that notebook is in the same folder."""
    copied = re.fullmatch(r"(.+?)(-Copy\d+| \(\d+\))\.ipynb", path.name)
    original = path.with_name(f"{copied.group(1)}.ipynb") if copied else None
    return original if original is not None and original.is_file() else None


def _notebooks(namespace: dict, paths: list[Path] | None = None) -> list[Path]:
    """The notebooks of the first of `_folders` that holds any, or of `paths`, holding most of the exercise's
    answer cells (one deleted is what the check must say)."""
    settings = namespace.get("COURSE")
    if not isinstance(settings, dict):
        return []
    try:
        wanted = {a.cell_id for a in load(settings.get("exercise", DEFAULT)).answers}
        groups = [paths] if paths is not None else (sorted(f.glob("*.ipynb"))[:20] for f in _folders(namespace))
        for group in groups:  # the first folder that holds one
            found = [p for p in group
                     if 2 * len(wanted & {cell for cell, _ in _saved_cells(str(p), p.stat().st_mtime)}) > len(wanted)]
            if found:
                return found
        return []
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return []


def _named_notebook(namespace: dict) -> Path | None:
    """The notebook file the front end names as the kernel's (jupyter_server's `__session__`, VS Code's), where
    it is there."""
    named = namespace.get("__session__") or namespace.get("__vsc_ipynb_file__")
    if isinstance(named, str) and named.endswith(".ipynb"):
        return next((p for p in (Path(named), *(f / Path(named).name for f in _folders(namespace))) if p.is_file()),
                    None)
    return None


def _second_notebook(namespace: dict) -> tuple[str, Path | None] | None:
    """Where the front end names the kernel's file and it is no notebook of the exercise (a scratch notebook that
    `%run` the course's, or pasted its cells): its name, and the notebook the course collects where the folder
    holds it. Its file says nothing of the answers' cells (the twenty-second trial's lines called every answer
    deleted from it, and a wrong value of the scratch notebook's WRONG where the collected notebook's was right)."""
    path = _named_notebook(namespace)
    settings = namespace.get("COURSE")
    if path is None or not isinstance(settings, dict) or _notebooks(namespace, [path]):
        return None
    collected = path.parent / settings.get("notebook", LECTURE_NOTEBOOK)
    if path.name == collected.name:  # the course's own notebook, its answer cells deleted: its check says so
        return None
    try:
        _saved_cells(str(path), path.stat().st_mtime)
    except (OSError, ValueError, AttributeError, TypeError):  # no notebook (a `git pull`'s conflict): not known
        return None
    return path.name, collected if collected.is_file() else None


def _unconfirmed_saved(namespace: dict, found: SelfCheck, answer: Answer, whole: bool, share: float) -> str:
    """Where no front end names the notebook's file and no notebook in the folder is known to be this kernel's (no
    cell the kernel ran is in it as it ran, the state of a notebook never saved), a note of what the notebook the
    course collects holds of the answer where the grader gives that less than the line says, said as the condition
    it is (the tenth student trial's classic Notebook, never saved: `ok` lines over a file the grader gave 0; the
    nineteenth's: an older download beside it holding the answer wrong, and a plain ok). Without the collected
    notebook in the folder, each of the exercise's notebooks there where each holds the answer's cell blank."""
    if _kernel_notebook(namespace) is not None:
        return ""
    paths = _notebooks(namespace)  # a copy beside it too (the sixteenth trial's plain ok lines): it may be either
    settings = namespace.get("COURSE")
    collected = settings.get("notebook", LECTURE_NOTEBOOK) if isinstance(settings, dict) else LECTURE_NOTEBOOK
    try:
        held = {path: max((found._saved_share(answer, code, whole) for cell, code in
                           _saved_cells(str(path), path.stat().st_mtime) if cell == answer.cell_id), default=None)
                for path in paths}
    except (OSError, ValueError):
        return ""
    ours = next((path for path in paths if path.name == collected), None)
    if ours is None and (not paths or any(got is None or got >= 0 for got in held.values())):
        return ""
    if ours is not None and (held[ours] is None or held[ours] >= share):
        return ""
    found_run = found.located(answer)
    run = f" the run judged here (In[{found_run[1]}]) is {answer.cell_id}'s own cell," \
        if found_run is not None and found_run[1] is not None else ""
    if ours is None:
        which = f"if {paths[0].name} in this folder is your notebook: it holds" if len(paths) == 1 else \
            f"if your notebook is {' or '.join(p.name for p in paths)} in this folder: each holds"
        state = "blank"
    else:
        which, state = f"if {collected} in this folder is your notebook: it holds", _held_as(held[ours])
    others = [p.name for p in paths if p != ours] if ours is not None else []
    elsewhere = f"; if your notebook is {' or '.join(others)}, the course still collects {collected}: put your " \
        "answers there" if others else ""
    return (f"{which} {answer.cell_id}'s cell {state} and none of the cells you ran; make "
            f"sure{run or ' your answer is in its own cell'} then save it (the grader grades that cell as saved)"
            f"{elsewhere}")


def _merged_check(source: str) -> str:
    """Where a refused answer cell holds a check cell's code (Merge Cells with the check below it: the twentieth
    trial's refusal of its try/except alone), which part to take out."""
    if "check(" not in source or "grader.student.check import check" not in source:
        return ""
    return " (this cell holds its check cell's code too, merged into it: split that part off, leaving the answer " \
        "alone in its cell)"


def _below_its_check(namespace: dict, answer: Answer) -> bool:
    """Whether the saved notebook holds the answer's cell below its check cell."""
    return _saved_below(namespace, answer.cell_id, grade_cell_id(answer.grade_id))


# The read-only cell of every generated notebook that runs the forward pass the answers read.
FORWARD_CELL = "setup_forward"


def _saved_below(namespace: dict, cell: str, other: str) -> bool:
    """Whether the saved notebook holds cell `cell` below cell `other`."""
    saved = _saved_notebook(namespace)
    cells = [found for found, _ in saved[0]] if saved is not None else []
    return cell in cells and other in cells and cells.index(cell) > cells.index(other)


def _through(behind: tuple[str, ...], shaped: str) -> str:
    """Which wrong answer up the chain (`behind`, nearest first) made the nearest one stop a cell: the one of the
    wrong shape, named the first wrong answer only where it is (the twentieth trial's line named a later one)."""
    if shaped == behind[0]:
        return ""
    first = ", the first wrong answer above it" if shaped == behind[-1] else ""
    return f" (computed from {shaped}{first})"


def _misshapen(value, truth: torch.Tensor) -> str:
    """Why a wrong answer above stops the cells that read it, where it does: a shape not its gradient's (a missing
    keepdim's), or no tensor at all (a numpy array: the nineteenth trial's "the error is ...'s cell's own", of a
    right cell); "" for one that holds nothing (its own line says so) or only wrong values."""
    if value is None:
        return ""
    if type(value) is not torch.Tensor:
        return f"it is a {type(value).__module__}.{type(value).__name__}, not a torch tensor"
    return "its shape is not its gradient's" if value.shape != truth.shape else ""


def _kept(namespace: dict, code: str) -> bool:
    """Whether the saved notebook holds a cell of this code, which Run All runs again."""
    saved = _saved_notebook(namespace)
    return saved is not None and any(_same_code(held, code) for _, held in saved[0])


def _deleted_by(at: int, kept: bool, name: str, variable: str, then: bool = True) -> str:
    """Which cell deleted an answer (`SelfCheck.deleted`), and to delete that cell first where the saved notebook
    keeps it: the words before what to run (`then`), or a clause of their own."""
    told = f"the cell you ran as In[{at}] deleted {name} (`del {variable}`)"
    if kept:
        return told + ", a cell your saved notebook keeps (Run All runs it again): delete that cell" + \
            (", then" if then else "")
    return told + (":" if then else "")


def _held_as(share: float) -> str:
    """How a saved cell the grader gives `share` of its points (`_saved_share`) is told."""
    if share < 0:
        return "blank"
    return "with code the grader finds wrong" if share == 0 else f"with code the grader gives {share:g} of its points"


def _layout(error: str, reads: list[str], namespace: dict) -> str:
    """Why right values stop a cell the grader runs: a `.view` of a tensor not contiguous in memory (a transpose,
    or a view of one), where the grader's tensors are laid out anew."""
    strided = [g for g in reads if isinstance(namespace.get(g), torch.Tensor) and not namespace[g].is_contiguous()]
    if "view" not in error or not strided:
        return ": fix the line the error names"
    return (f": your {strided[0]} is not contiguous in memory (made by a transpose or a view of one), and .view needs "
            f"it to be: use .reshape in this cell, or make {strided[0]} with .contiguous()")


def _not_collected(namespace: dict) -> tuple[str, Path | None]:
    """On a right line: where the notebook (the kernel's, `_kernel_notebook`) is not the one the course collects
    and grades, a copy of it beside it (`backprop_ninja-Copy1.ipynb`) or a notebook renamed (`mywork.ipynb`), which
    one it is and how to get the answers there, and the collected one where the folder holds it (the twelfth and
    fourteenth student trials worked in a copy, and in a renamed notebook, every line right, the collected notebook
    blank or gone). Only a released notebook (its read-only cells carry nbgrader's checksums) is a student's: an
    instructor's solved notebook is not renamed."""
    path = _kernel_notebook(namespace)
    if path is None:
        return "", None
    original = _original_of(path)
    if original is not None:
        return (f"this notebook is {path.name}, a copy: the course collects and grades {original.name} beside it, so "
                "put your answers there (or close it and rename this one to that name)"), original
    settings = namespace.get("COURSE")
    collected = settings.get("notebook", LECTURE_NOTEBOOK) if isinstance(settings, dict) else LECTURE_NOTEBOOK
    try:
        if path.name == collected or not _released(str(path), path.stat().st_mtime):
            return "", None
    except (OSError, ValueError, AttributeError):  # gone, or not a notebook since it was found
        return "", None
    if (path.parent / collected).is_file():
        return (f"this notebook is {path.name}: the course collects and grades {collected} beside it, so put your "
                "answers there (or close this one, delete that one, and rename this one to that name)"), \
            path.parent / collected
    return (f"this notebook is {path.name}, and the course collects and grades {collected}, which this folder does "
            f"not hold: rename this one to {collected}"), None


def _in_second(found: SelfCheck, answer: Answer, label: str, text: str, share: float,
               second: tuple[str, Path | None], whole: bool) -> str:
    """A line checked in a second notebook on the kernel (`_second_notebook`): what the kernel's value got beside
    what the notebook the course collects holds, which is what the grader grades. Where that one gets more, the
    kernel's verdict is no verdict of the grade ("not checked"); where less, it is WRONG as saved there."""
    name, collected = second
    if collected is None:
        settings = found.namespace.get("COURSE") if found.namespace is not None else None
        wanted = settings.get("notebook", LECTURE_NOTEBOOK) if isinstance(settings, dict) else LECTURE_NOTEBOOK
        return (f"{label}| {text}{_but(text)} WRONG as saved in the notebook the course collects: this notebook is "
                f"{name}, not one of the exercise's, and the course collects and grades {wanted}, which this folder "
                "does not hold")
    held = _collected_share(found, answer, collected, whole)
    got = max(held, 0.0)  # blank: nothing, as a line's "not attempted yet"
    ran = re.search(r"%run\s+(?:-\S+\s+)*['\"]?([^'\"\n]+?\.ipynb)", text) if "the grader refuses" in text else None
    if ran is not None and Path(ran.group(1)).name == collected.name:  # its value is that notebook's own cell's
        gets = "finds right" if got >= 1 else f"gives {got:g} of its points" if got > 0 else "gives nothing"
        verdict = "" if got >= 1 else "WRONG as saved in the notebook the course collects: "
        return (f"{label}| {verdict}this kernel's {answer.variable} came from a `%run` of {collected.name}, the "
                f"notebook the course collects and grades (this notebook is {name}, not one of the exercise's): its "
                f"{answer.cell_id} cell as saved, which the grader {gets}"
                + ("" if got >= 1 else f" ({_held_as(held)}): answer it there and save it"))
    where = (f"this notebook is {name}, not one of the exercise's: the course collects and grades {collected.name} "
             "beside it")
    if got < share:
        return (f"{label}| {text}{_but(text)} WRONG as saved in the notebook the course collects: {where}, which holds "
                f"{answer.cell_id}'s cell {_held_as(held)}: put your answer there and save it")
    if got > share:
        gets = "finds right" if got >= 1 else f"gives {got:g} of its points"
        return (f"{label}| not checked: this kernel's {answer.variable} is not what the course grades: {where}, whose "
                f"{answer.cell_id} cell the grader {gets}; in this kernel: {text}")
    return f"{label}| {text}; {where}, whose {answer.cell_id} cell gets the same"


def _collected_share(found: SelfCheck, answer: Answer, collected: Path | None, whole: bool) -> float:
    """The share the answer's cell gets in the notebook the course collects (`_not_collected`'s): -1 where it is
    blank, not there, or no such notebook is in the folder."""
    try:
        saved = [code for cell, code in _saved_cells(str(collected), collected.stat().st_mtime)
                 if cell == answer.cell_id] if collected is not None else []
    except (OSError, ValueError, AttributeError):
        return -1.0
    return max((found._saved_share(answer, code, whole) for code in saved), default=-1.0)


def _saved_answers(namespace: dict, cell_id: str) -> list[str] | None:
    """The code of every cell of the saved notebook that is answer cell `cell_id` (a copied cell keeps its
    grade id), none where it was deleted; None where no saved notebook is known."""
    found = _saved_notebook(namespace)
    return None if found is None else [code for found_id, code in found[0] if found_id == cell_id]


@functools.lru_cache(maxsize=32)
def _saved_cells(path: str, _saved: float) -> tuple[tuple[str, str], ...]:
    """The notebook file's code cells as (their id, or their nbgrader grade id, and code); read once per save."""
    with open(path, encoding="utf-8") as file:
        cells = json.load(file).get("cells", [])
    return tuple((c.get("metadata", {}).get("nbgrader", {}).get("grade_id") or c.get("id"),
                  "".join(c.get("source", ""))) for c in cells if c.get("cell_type") == "code")


@functools.lru_cache(maxsize=32)
def _new_ids(path: str, _saved: float) -> dict[str, str]:
    """The notebook file's cells whose id is not their nbgrader grade id, id -> grade id: JupyterLab gives a
    cell cut and pasted back a new id, and keeps its metadata."""
    with open(path, encoding="utf-8") as file:
        cells = json.load(file).get("cells", [])
    return {c["id"]: grade_id for c in cells if isinstance(c.get("id"), str)
            and (grade_id := c.get("metadata", {}).get("nbgrader", {}).get("grade_id")) and grade_id != c["id"]}


def _grade_id_of(namespace: dict, cell_id: str | None) -> str | None:
    """The cell id a run is recorded under: the cell's grade id where the saved notebook gives its cell
    another id (an answer cell cut and pasted back in JupyterLab: its runs taken for no answer's, the
    sixteenth trial's check said "edited after it last ran ... run it" however often it ran)."""
    return _renamed(namespace).get(cell_id, cell_id) if cell_id else cell_id


def _renamed(namespace: dict) -> dict[str, str]:
    path = _kernel_notebook(namespace)
    try:
        return _new_ids(str(path), path.stat().st_mtime) if path is not None else {}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def _pasted(namespace: dict) -> None:
    """The runs recorded under a new cell's id, moved to its grade id once the saved notebook gives it one
    (a cell pasted, run, then saved)."""
    renamed = _renamed(namespace)
    for old in {*_IDS.values(), *_CELLS} & renamed.keys():
        new = renamed[old]
        runs = [count for count, cell in _IDS.items() if cell == old]
        if old in _CELLS and max(runs, default=0) >= max((c for c, cell in _IDS.items() if cell == new), default=0):
            _CELLS[new] = _CELLS[old]
        _CELLS.pop(old, None)
        _IDS.update(dict.fromkeys(runs, new))
        if old in _RAN_AT:
            _RAN_AT[new] = max(_RAN_AT.get(new, 0.0), _RAN_AT.pop(old))
        _BOUND.update({name: (count, code, new) for name, (count, code, cell) in _BOUND.items() if cell == old})


@functools.lru_cache(maxsize=8)
def _released(path: str, _saved: float) -> bool:
    """Whether the notebook file is one nbgrader released (checksums on its read-only cells), not its source."""
    with open(path, encoding="utf-8") as file:
        cells = json.load(file).get("cells", [])
    return any("checksum" in c.get("metadata", {}).get("nbgrader", {}) for c in cells)


@functools.lru_cache(maxsize=4096)
def _blank(code: str) -> bool:
    """Whether a cell's code is a released blank: only `dx = None` lines (and comments)."""
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return False
    return bool(body) and all(isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant) and s.value.value is None
                              for s in body)


def _blank_function(code: str) -> bool:
    """Whether a function's cell is its released blank: one def whose statements are `dx = None` lines and a return."""
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return False
    if len(body) != 1 or not isinstance(body[0], ast.FunctionDef):
        return False
    statements = [s for s in body[0].body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return any(isinstance(s, ast.Assign) for s in statements) and all(
        isinstance(s, ast.Return) or isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
        and s.value.value is None for s in statements)


def _same_code(a: str, b: str) -> bool:
    """Whether two versions of a cell are the same code (its comments and layout aside)."""
    return _code_of(a) == _code_of(b)


@functools.lru_cache(maxsize=4096)
def _code_of(source: str) -> str:
    """A cell's code, its comments and layout aside (a check compares each cell with its saved versions
    thousands of times)."""
    try:
        return ast.dump(ast.parse(source))
    except SyntaxError:
        return source.strip()


def _in_place_fix(variable: str, how: str | None, there: str = "") -> str:
    """How a cell that changed an earlier answer in place is fixed: `how` is the statement that changed it
    by its own name, None for a change through another name."""
    if how is None:
        return f"after `x = {variable}`, `x += ...` changes {variable} too: write `x = {variable}.clone()`"
    return f"`{how}`{there} changes {variable} itself: compute the new gradient into a new tensor instead"


# A cell's id (or else its execution count) -> when it last ran: a cell whose saved code differs from what
# ran, saved after that, was edited since, and its check judges the old code.
_RAN_AT: dict[str | int, float] = {}


def _after(result) -> None:
    try:
        from IPython import get_ipython
        cell_id = _grade_id_of(get_ipython().user_ns, getattr(result.info, "cell_id", None))
        if cell_id and isinstance(result.execution_count, int):
            _IDS[result.execution_count] = cell_id
        _RAN_AT[cell_id or result.execution_count] = time.time()
        if isinstance(result.error_in_exec, KeyboardInterrupt) and isinstance(result.execution_count, int):
            _INTERRUPTED.add(result.execution_count)
        error = result.error_in_exec
        if error is None:
            _RAISED.pop(cell_id or result.execution_count, None)
        elif not isinstance(error, KeyboardInterrupt):
            _RAISED[cell_id or result.execution_count] = f"{type(error).__name__}: {str(error)[:120]}"
        _bound(get_ipython().user_ns, result.info.raw_cell, result.execution_count, cell_id)
        _remember(get_ipython().user_ns, result.info.raw_cell, result.execution_count, cell_id)
        _remember_batch(get_ipython().user_ns, result.info.raw_cell)
    except Exception:  # noqa: S110 - bookkeeping for better lines must never get in the student's way
        pass


def _listen() -> None:
    """Only in a kernel, which has imported IPython before any cell runs: elsewhere (course init, the
    grader's own processes) importing IPython for nothing would cost each process 0.4 s."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None and _record not in shell.events.callbacks["pre_run_cell"]:
        shell.events.register("pre_run_cell", _record)
        shell.events.register("post_run_cell", _after)


class SelfCheck:
    """The check itself. Notebooks made now call it through `check("dx")` (NotebookCheck, below), which
    builds one from the notebook's COURSE; notebooks already released build it themselves,
    `check = SelfCheck(n=n, namespace=globals(), course=COURSE)` once, then
    `check("dx", dx, x)` after each answer, which still works; the checks of a part whose answers share a
    gradient's name with another part's (a function's, say) are `SelfCheck(..., part=4)`. `course` holds
    course.yml's public settings (tolerance, allow, hints, `exercise`, and `solutions` when off), which the notebook's
    generator writes into the notebook. The exercise is named as course.yml names it (a registered name
    or module:attribute, see grader.exercise.load), by `exercise` or else by the settings' `exercise`
    (default: grader.exercise.DEFAULT): a name, not a value, because the grader's configurations, which
    the self-check builds too, carry their exercise by name. grader 0.1's notebooks pass the part as
    `exercise=4`, which still works. `n`, the batch size every notebook passes, is accepted and not
    needed: the sizes are read from the tensors."""

    # What the earlier answer cells left, kept for the checks that follow (_carried): a few points in the chain
    # for each of the newest cases and checks (a few kilobytes each at the notebook's sizes).
    KEPT_CARRIES, KEPT_CASES = 4, 16

    def __init__(self, n: int | None = None, exercise: str | int | None = None, namespace: dict | None = None,
                 course: dict | None = None, *, part: int | None = None, by_grade_id: bool = False):
        course = course or {}
        if isinstance(exercise, int):
            exercise, part = None, exercise
        choose_rule_table()
        self.spec = exercise or course.get("exercise", DEFAULT)
        self.exercise = load(self.spec)
        self.part = part
        self.by_grade_id = by_grade_id  # each check names its grade id (NotebookCheck), not a variable
        self.namespace = namespace
        self.tolerance = Tolerance(*course.get("tolerance", TOLERANCES[torch.float64]))
        extra = course.get("allow", {})
        self.allow = static_check.Allow().extended(extra.get("torch", ()), extra.get("functional", ()),
                                                   extra.get("builtins", ()))
        self.hints = course.get("hints", "named")
        # What the grader gives for right values in a squeezable shape, and for an answer right only on
        # the true upstream gradients: a line says WRONG exactly when the grader takes a point.
        self.policy = Policy(**course.get("policy", {}))
        self.solutions = course.get("solutions", "gated")
        self.cell_timeout = float(course.get("cell_timeout", Limits.cell_timeout))  # the grader's, for one run
        self._slow: set[tuple[str, str]] = set()  # (cell, code) that ran past it
        self._kept_carries: dict[tuple[int, str], list] = {}  # (case, check) -> newest first (cells run, carry left)
        self._function_ran: tuple | None = None  # a function's checks (one per key it returns) share one run
        self._changes_given: set[str] = set()  # what the trained function changed of the arguments it was given
        self._case: tuple | None = None  # the notebook's forward pass as a case, and the tensors it was built from
        _listen()

    def __call__(self, name: str, manual, tensor: torch.Tensor) -> None:
        with _quiet():
            line = self.line(name, manual, tensor)
        print(line)

    # --- which answer a check is about -------------------------------------------------------------

    def grade_ids(self, name: str) -> tuple[str, ...]:
        """The grade ids a check of `name` may be about. The notebook passes the variable's name, which
        answers of several parts share (a fused answer assigns the variable of an atomic one); a
        check made for one part looks for the answer there whose gradient is `name`."""
        answers = self.exercise.answers
        if self.part is not None:
            return tuple(a.grade_id for a in answers if a.part == self.part and "d" + a.source == name)
        by_variable = tuple(a.grade_id for a in answers if a.kind != FUNCTION and a.variable == name)
        return by_variable or ((name,) if name in self.exercise.by_grade_id else ())

    def pointer(self, name: str) -> str:
        """Where a student stuck on `name` finds the reference, explained (empty for a name of their own). A
        check by grade id (NotebookCheck's) is that answer's alone: the other exercises' answers of its
        variable (an unexplained "(exercise N: its grade id)" on an atomic answer's line) are for the checks of
        released notebooks, which name the variable that exercises share."""
        ids = (name,) if self.by_grade_id and name in self.exercise.by_grade_id else self.grade_ids(name)
        if not ids or self.solutions == "off" or importlib.util.find_spec("grader.student.solution") is None:
            return ""  # a graded course, or backprop-ninja-student: no references, and no command to show them
        answers = self.exercise.by_grade_id
        others = "".join(f" (exercise {answers[g].part}: {g})" for g in ids[1:])
        # the kernel's own notebook where it is known (a student trial: a placeholder on every WRONG line)
        path = _kernel_notebook(self.namespace) if self.namespace is not None else None
        notebook = shlex.quote(path.name) if path is not None else "YOUR_NOTEBOOK.ipynb"
        return f" — stuck? backprop-ninja solution {ids[0]} --notebook {notebook}{others}"

    # --- where the cell's code and the notebook's values come from ---------------------------------

    def source(self, answer: Answer) -> str | None:
        """The answer cell's code as last run (see `located`)."""
        found = self.located(answer)
        return None if found is None else found[0]

    def _own_error(self, answer: Answer, source: str | None) -> str | None:
        """The error the answer's cell raises on the true values of the gradients it reads (the notebook's batch),
        where it raises one: an error of its own (a missing transpose), which no fix above it mends."""
        case = self.notebook_case()
        if source is None or case is None or self.namespace is None:
            return None
        reads = {g: case.truth[g] for g in answer.upstream if g in _reads(source) and g in case.truth}
        return NotebookCheck._stops_now(source, {**self.namespace, **reads})

    def deleted(self, answer: Answer) -> tuple[int, bool] | None:
        """Where a cell deleted the answer's name (`del dx`) after the answer's cell last ran: (its execution
        count, whether the saved notebook keeps it, which Run All runs again: the nineteenth trial's lines below
        it said dx's cell "never ran, or stopped", and to run the cells from it down, that cell among them)."""
        located = self.located(answer)
        history = (self.namespace or {}).get("In") or []
        ran = located[1] if located is not None and located[1] is not None else \
            max((count for count, cell in _IDS.items() if cell == answer.cell_id), default=0)
        at = next((at for at in range(len(history) - 1, ran, -1)
                   if isinstance(history[at], str) and answer.variable in _deletes(history[at])), None)
        if at is None:
            return None
        return at, _kept(self.namespace or {}, history[at])

    def located(self, answer: Answer) -> tuple[str, int | None, bool] | None:
        """(the answer cell's code as last run, its execution count, whether the cell is a guess): by the
        cell's id where the notebook's front end sends it, else the newest cell of the notebook's
        history, or seen binding an answer's name (through exec, say), that is this answer's cell by its
        code (`cells_at`), other than the read-only cells that set answers up. One that stopped with an
        error bound nothing, and is the one the grader runs."""
        if answer.cell_id in _CELLS:
            return _CELLS[answer.cell_id], None, False
        history = (self.namespace or {}).get("In") or []
        names = _names_of(self.spec)
        sinks = frozenset(a.sink for a in self.exercise.answers if a.sink)
        seen = {count: (code, name) for name, (count, code, _) in _BOUND.items()} if "In" in (self.namespace or {}) \
            else {}
        computed_from_itself = scratch_run = continuation = None
        scratch = self._saved_scratch()
        saved = _saved_code(self.namespace, answer.cell_id) if self.namespace is not None else None

        def own_saved(code: str) -> bool:
            """The answer's own cell as saved, binding no answer's name: `dC[...] += ...` there, its start in a
            scratch cell not saved, is the cell the grader runs (a student trial's line judged the scratch cell and
            said to move the loop where it was)."""
            return saved is not None and not _assigns(code, names) and _same_code(saved[0], code)

        for count in range(len(history) - 2, 0, -1):
            code, name = seen.get(count, (history[count], None))
            if not isinstance(code, str) or "check(" in code or name is None and not _assigns(code, names) \
                    and not own_saved(code) or _given(code, sinks):
                continue
            cells, guess = self.cells_at(count, code, name)
            if answer.cell_id not in cells and own_saved(code):  # binds no name (`dC[i] += ...` only): its code
                cells, guess = (answer.cell_id,), False
            if answer.cell_id not in cells:
                continue
            if count not in _IDS and self._saved_holder(answer, count) is not None:
                continue  # another answer's saved cell, with a typo naming this one (the sixteenth trial's Run All)
            if code.strip() in scratch:
                # A cell of the saved notebook that is no answer's (a scratch cell, the second half of a split
                # answer): not the answer's cell, whatever its code binds (the thirteenth trial's `dx += ...`
                # below dx's cell judged as dx's, its NameError the reason given); the one run, if none other is
                scratch_run = scratch_run or (code, count, guess)
                continue
            if count not in _IDS and answer.variable in _augmented_only(code) and not own_saved(code) and any(
                    isinstance(earlier, str) and "check(" not in earlier and answer.variable not in
                    _augmented_only(earlier) and set((_first_uses(earlier) or ((),))[0]) & names == {answer.variable}
                    for earlier in history[1:count]):
                # `dx += ...` alone, after a cell that assigns dx and no other answer: its continuation (Split Cell),
                # not its cell, which the grader runs alone (the eighteenth trial's classic Notebook judged the
                # continuation: NameError). After another answer's cell that assigns dx too, it is dx's cell.
                continuation = continuation or (code, count, guess)
                continue
            uses = _first_uses(code, augmented=False)
            if guess and uses is not None and answer.variable in uses[1]:
                # `dx = dx * 2` computes the answer from itself: a scratch cell after the answer's own, which an
                # earlier run that does not is (the ninth student trial's right answer judged as the scratch's
                # NameError); the line of the value it left says that a cell reassigned the answer.
                computed_from_itself = computed_from_itself or (code, count, guess)
                continue
            if guess:
                saved = self._saved_run(answer, code, count, history)
                if saved is not None:
                    return saved
            return code, count, guess
        return computed_from_itself or scratch_run or continuation

    def _saved_scratch(self) -> frozenset[str]:
        """The code of the saved notebook's cells that are no answer's and assign an answer's name (stripped),
        other than code an answer cell holds too; none where no saved notebook is known."""
        found = _saved_notebook(self.namespace) if self.namespace is not None else None
        if found is None:
            return frozenset()
        answer_cells = {a.cell_id for a in self.exercise.answers} | {f.cell for f in self.exercise.functions}
        held = {code.strip() for cell, code in found[0] if cell in answer_cells}
        names = _names_of(self.spec)
        return frozenset(code.strip() for cell, code in found[0]
                         if cell not in answer_cells and code.strip() not in held and _assigns(code, names))

    def _saved_run(self, answer: Answer, code: str, count: int, history: list) -> tuple[str, int, bool] | None:
        """Of a run the answer's cell shares with another's by its code (a guess), an earlier run of the answer's
        cell exactly as the saved notebook holds it, where that other cell has run since as the saved notebook
        holds it: the guessed run was an older version of that cell. In the twelfth student trial a fused
        exercise's cell, edited, run and saved, left its earlier run taken for the atomic answer's right, saved
        cell: WRONG."""
        saved = None if self.namespace is None else _saved_code(self.namespace, answer.cell_id)
        if saved is None or _same_code(saved[0], code):
            return None
        others = set(_cells_by_code(self.spec, code)) - {answer.cell_id}
        if not any(isinstance(later, str) and (cells := self.cells_at(at, later))[0] and not cells[1]
                   and set(cells[0]) & others for at, later in enumerate(history[count + 1:], count + 1)):
            return None
        return next(((ran, at, False) for at in range(count - 1, 0, -1)
                     if isinstance(ran := history[at], str) and "check(" not in ran and _same_code(ran, saved[0])),
                    None)

    def cells_at(self, count: int, code: str, name: str | None = None) -> tuple[tuple[str, ...], bool]:
        """(the answer cells that ran as In[count], whether that is a guess): its id where the front end
        sent one; else told by its code, and of the cells sharing a variable that its code fits alike,
        the one the saved notebook holds that code in, else the one whose check ran next (a cell's check
        follows it in the notebook), else the fused exercise's (a cell that reads none of its step's
        gradients), a guess."""
        if count in _IDS:
            return tuple(a.cell_id for a in self.exercise.answers if a.cell_id == _IDS[count])[:1], False
        cells = _cells_by_code(self.spec, code, name)
        history = (self.namespace or {}).get("In") or []
        following = history[count + 1] if count + 1 < len(history) else ""
        checked = re.search(r"check\(\s*[\"']([^\"']+)[\"']", following if isinstance(following, str) else "")
        answer = self.exercise.by_grade_id.get(checked.group(1)) if checked else None
        if len(cells) == 1 and answer is not None and answer.cell_id not in cells and answer.kind != FUNCTION \
                and self._variable_of(cells[0]) == answer.variable and not any(
                    answer.cell_id in _cells_by_code(self.spec, other) for i, other in enumerate(history)
                    if i != count and isinstance(other, str) and "check(" not in other):
            # A cell of another answer by the same name, told by reading a gradient the checked one may not read
            # (a fused exercise's `dy = dx.clone()`, dx an atomic step's gradient), whose check ran right after it,
            # where no run of the checked answer's own cell is known: that cell with a mistake, as Run All shows
            # it; a guess, said as one.
            return (answer.cell_id,), True
        if len(cells) < 2 or len({self._variable_of(c) for c in cells}) > 1:
            # `dx = dx * 2` computes the answer from itself: a scratch cell more likely than the answer's own.
            uses = _first_uses(code, augmented=False)
            return cells, uses is not None and any(self._variable_of(c) in uses[1] for c in cells)
        # The saved notebook tells, where the front end names it: the cell whose saved code this run's is
        saved = [c for c in cells if self.namespace is not None
                 and (found := _saved_code(self.namespace, c)) is not None and _same_code(found[0], code)]
        if len(saved) == 1:
            return (saved[0],), False
        fewest = min(cells, key=lambda c: len(self._answer_of_cell(c).upstream))
        reads = _reads(code)
        # A run that reads its step's gradients is that step's cell: the fused exercise's reads none
        reading = [c for c in cells if set(self._answer_of_cell(c).local_upstream) & reads]
        if len(reading) == 1:
            return (reading[0],), True
        if answer is not None and answer.cell_id in cells:
            # A blank (`dx = None  # TODO`, the same in both cells) tells nothing of its cell but the check after it
            # (the twenty-third trial's answer written in the cell above, its own blank cell run, then its check: the
            # blank taken for the fused exercise's, every line below blamed on it)
            if answer.cell_id != fewest and not _blank(code) and any(
                    i != count and isinstance(other, str) and "check(" not in other
                    and answer.cell_id in _cells_by_code(self.spec, other)
                    and set(answer.local_upstream) & _reads(other) for i, other in enumerate(history)):
                # The checked cell ran elsewhere, reading its step's gradients: this run, reading none, is the
                # other cell's, its check scrolled back to (the fifteenth trial's classic Notebook: a fused cell
                # run, then the atomic answer's check, WRONG on a right cell)
                return (fewest,), True
            # Still a guess where the check is of the answer whose one step's gradients the code never reads.
            return (answer.cell_id,), answer.cell_id != fewest
        return (fewest,), True

    def _atomic(self, variable: str) -> Answer | None:
        return next((a for a in self.exercise.answers if a.kind == ATOMIC and a.variable == variable), None)

    def _answer_of_cell(self, cell_id: str) -> Answer:
        return next(a for a in self.exercise.answers if a.cell_id == cell_id)

    def _variable_of(self, cell_id: str) -> str:
        answer = self._answer_of_cell(cell_id)
        function = self.exercise.function_of(answer)
        return function.name if function else answer.variable

    def _sources_before(self, answer: Answer) -> list[tuple[str, str]]:
        """The earlier atomic answer cells, as the grader runs them first (their names carry over)."""
        if answer.kind != ATOMIC:
            return []
        atomic, found = self.exercise.atomic, []
        for grade_id in atomic[: atomic.index(answer.grade_id)]:
            source = self.source(self.exercise.by_grade_id[grade_id])
            # a cell the grader refuses is not run there, nor here (the fourteenth trial's answer cell merged with
            # its check cell printed the check's lines inside a later check, one per batch)
            if source is not None and self._refusal(source) is None:
                found.append((grade_id, source))
        return found

    def notebook_case(self):
        """The notebook's own forward pass as a case of the grader's (unscored, like its probe)."""
        ns = self.namespace or {}
        network = self.exercise.network
        if not all(isinstance(ns.get(k), torch.Tensor) for k in (*network.parameters, *network.data)):
            return None
        # Built once per forward pass (a line asks for it twice): the same tensors, unchanged in place.
        key = [(ns[k], ns[k]._version) for k in (*network.parameters, *network.data)]
        if self._case is not None and all(t is u and v == w for (t, v), (u, w) in zip(self._case[0], key, strict=True)):
            return self._case[1]
        params = {p: ns[p].detach().to(torch.float64) for p in network.parameters}
        data = {k: ns[k] for k in network.data}
        config = Config(self.spec, NOTEBOOK, self.exercise.sizes_of({**params, **data}), 0,
                        scored=False)
        self._case = (key, case_of(config, params, data, torch.Generator().manual_seed(0)))
        return self._case[1]

    # --- running the cell the way the grader's sandbox does -----------------------------------------

    def _run_cell(self, answer: Answer, source: str, case, check: str, carry: dict) -> _Ran:
        filename = f"<answer cell {answer.grade_id}>"
        ns = {"__builtins__": cell_builtins(), **NAMESPACE, **self.exercise.network.size_values(case.values)}
        if answer.kind == ATOMIC:
            ns.update(carry)
        originals = {**case.student_view(), **case.upstream(answer, check)}
        copies = {k: v.clone() for k, v in originals.items()}
        ns.update(copies)
        if (answer.cell_id, source) in self._slow:  # as the grader, which never runs it again
            return _Ran("timeout", seconds=self.cell_timeout)
        try:
            with _time_limit(self.cell_timeout):
                exec(_compiled(source, filename), ns)
        except _Slow:
            self._slow.add((answer.cell_id, source))
            return _Ran("timeout", seconds=self.cell_timeout)
        except Exception as exc:
            return _error(exc, filename)
        if answer.kind == ATOMIC:
            reserved = {*self.exercise.given, *NAMESPACE, "__builtins__"}
            carry.clear()
            carry.update({k: v for k, v in ns.items() if k not in reserved})
        if answer.variable not in ns:
            return _Ran("unassigned")
        ran = _result(ns[answer.variable], case.values.get(answer.source))
        # as the sandbox tells the inputs the cell changed in place (grader.sandbox.child)
        reads = _reads(source)
        changed = sorted(k for k, copy in copies.items()
                         if k in reads and protocol.changed_in_place(copy, originals[k]))
        if changed and ran.status == "tensor":
            ran.detail["changed"] = changed
        return ran

    def _outcomes(self, answer: Answer, source: str, cases, check: str) -> dict:
        earlier = tuple(self._sources_before(answer))
        return {case.config.name: self._run_cell(answer, source, case, check, self._carried(earlier, case, check))
                for case in cases}

    def _carried(self, earlier: tuple[tuple[str, str], ...], case, check: str) -> dict:
        """What the earlier atomic cells that ran assigned, on `case`: the names that carry over to the next cell,
        as in the sandbox. Kept for the checks below, which run the same cells first: a student trial's answer
        cell of 4 s made every later check run it once per case and check, a silent minute each."""
        key = (id(case), check)
        kept = self._kept_carries.pop(key, [])
        self._kept_carries[key] = kept  # the newest last: a forward pass run again makes a new notebook case
        while len(self._kept_carries) > self.KEPT_CASES:
            del self._kept_carries[next(iter(self._kept_carries))]
        start, carry = 0, {}
        for ran, its_case, left in kept:
            if its_case is case and start < len(ran) <= len(earlier) and earlier[:len(ran)] == ran:
                start, carry = len(ran), _copied(left)
        for grade_id, code in earlier[start:]:
            self._run_cell(self.exercise.by_grade_id[grade_id], code, case, check, carry)
        left = _copied(carry)  # the cell checked next changes `carry`, and may change its tensors in place
        if left is not None:
            kept.insert(0, (earlier, case, left))  # the case itself kept: its id names no other case meanwhile
            del kept[self.KEPT_CARRIES:]
        return carry

    def _function_outcomes(self, answer: Answer, source: str | None) -> dict:
        """The answer's function's returned values on each of the self-check's cases, run as the grader
        runs it: its cell's code in a namespace of its own, holding only torch and F."""
        function = self.exercise.function_of(answer)
        if self._function_ran and self._function_ran[0] == (function.cell, source):
            return self._function_ran[1]
        filename = f"<answer cell {function.cell}>"
        outcomes: dict = {}
        ns = {"__builtins__": cell_builtins(), **NAMESPACE}
        defined = (self.namespace or {}).get(function.name)
        for case in (*own_cases(self.spec), own_probe(self.spec)):
            try:
                if (function.cell, source) in self._slow:
                    raise _Slow
                with _time_limit(self.cell_timeout):
                    if source is not None:
                        exec(compile(source, filename, "exec"), ns)
                    elif callable(defined):  # no history: the same code, cut off from the notebook's globals
                        ns[function.name] = type(defined)(defined.__code__, ns, defined.__name__,
                                                          defined.__defaults__, defined.__closure__)
                    returned = ns[function.name](*function.call_arguments(case.values))
                if returned is not None and not isinstance(returned, dict):
                    raise TypeError(f"{function.name} returned a {type(returned).__name__}, not a dict")
            except _Slow:
                self._slow.add((function.cell, source))
                outcomes[case.config.name] = dict.fromkeys(function.returns, _Ran("timeout", seconds=self.cell_timeout))
                continue
            except Exception as exc:
                failed = _error(exc, filename)
                outcomes[case.config.name] = dict.fromkeys(function.returns, failed)
                continue
            outcomes[case.config.name] = {key: _Ran("unreturned") if returned and key not in returned else
                                          _result(None if returned is None else returned.get(key),
                                                  case.values.get(key)) for key in function.returns}
        self._function_ran = ((function.cell, source), outcomes)
        return outcomes

    # --- the line ------------------------------------------------------------------------------------

    def line(self, name: str, manual, tensor: torch.Tensor) -> str:
        label = f"{name:<15s}|"
        ids = self.grade_ids(name)
        answer = self.exercise.by_grade_id[ids[0]] if ids else None
        # Reading .grad of a non-leaf that never called retain_grad() makes torch warn on stderr.
        expected = tensor.grad if tensor.is_leaf or tensor.retains_grad else None
        if expected is None:
            said = f"no autograd gradient on {self._gradient_lost(name, answer)}"
            # an answer not assigned is told by the caller, which says why (a typo binding the forward value)
            return self._without_gradient(label, answer, said) if manual is not None else f"{label} not checked: {said}"
        rtol, atol = (self.tolerance.rtol, self.tolerance.atol) if expected.dtype == torch.float64 else \
            TOLERANCES.get(expected.dtype, TOLERANCES[torch.float32])
        comparison = compare(manual, expected, rtol=rtol, atol=atol)
        # A blank whose cell holds more than the blank (an attempt that raised here) is judged as the
        # grader judges it: by running the cell.
        wrong = self._as_graded(answer, comparison) if answer is not None else None
        if comparison.status == Match.BLANK and (wrong is None or wrong.endswith(": not attempted yet")):
            source = self.source(answer) if wrong is None and answer is not None and answer.kind != FUNCTION else None
            other = self._reassigned(answer) if source is not None and not _blank(source) else None
            if other:  # a right cell whose name a later cell set to None (`dx = None` in a scratch cell)
                return (f"{label} not checked: this cell is right as the grader runs it, but your {answer.variable} is "
                        f"None: {other} assigned {answer.variable} after it ran; re-run this cell, then this check")
            if source is not None and not _blank(source):  # its `dx = None  # TODO` line ran, then it stopped
                why = NotebookCheck._unassigned(self, answer)
                return f"{label} not checked: {answer.variable} is not assigned: {why}"
            atomic = answer is not None and answer.kind != FUNCTION
            reset = self._reset_after_saved(answer) if atomic else None
            if reset:
                return f"{label} not checked: {reset}"
            shared = self._written_with_another(answer) if atomic else None
            if shared:
                return f"{label} not attempted yet: {shared}"
            reset = self._reset_unsaved(answer) if atomic else None
            return f"{label} not checked: {reset}" if reset else f"{label} not attempted yet"
        unrun = self._not_run(answer) if answer is not None and answer.kind != FUNCTION else None
        if unrun:
            return f"{label} {unrun}"
        elsewhere = self._in_other_answer(answer) if answer is not None else None
        if elsewhere:
            return f"{label} {elsewhere}"
        if wrong:
            # The reference is offered under a line that finds this cell wrong, not one that says it is right.
            if not wrong.startswith(("WRONG", "right values, wrong shape")):
                return f"{label} {wrong}"
            other = self._saved_other(answer)
            if other is not None and self._saved_share(answer, other[0]) == 1.0:
                # A scratch cell's run (its code is another cell of the saved notebook), judged wrong, where the
                # saved cell the grader grades is right.
                cell = answer.cell_id
                if other[2]:
                    return (f"{label} not checked: the run judged here (In[{other[1]}], taken by its code for this "
                            f"one) is not {cell}'s cell in your saved notebook, which is right as the grader runs "
                            f"it: re-run {cell}'s cell, then this check (a scratch cell your saved notebook keeps "
                            "runs again in every Run All: delete it)")
                # Code in no saved cell: a scratch cell not saved, or this cell edited and not saved yet, which the
                # next save makes the graded one (the twelfth trial's WRONG over a right saved cell, either way).
                verdict, _, why = wrong.partition(": ")
                verdict = verdict.replace("WRONG", "wrong", 1).replace("the grader gives", "it would get")
                said = f"{label} not checked: the run judged here (In[{other[1]}]) is {verdict}: {why}; but its code"
                saved = _saved_code(self.namespace, cell)
                if saved is not None and saved[1] > _RAN_AT.get(other[1], saved[1]):
                    # saved since that run: the cell edited after it (the thirteenth trial's fix saved, not run),
                    # or that run was another cell; either way the saved cell is the one to run
                    return (f"{said} is not {cell}'s cell in your notebook as saved since, which is right as the "
                            f"grader runs it: run {cell}'s cell, then this check")
                return (f"{said} is not {cell}'s cell in your saved notebook, which is right as the grader runs it: "
                        f"if In[{other[1]}] was {cell}'s cell, edited and not saved yet, fix it before the notebook "
                        f"saves it; else re-run {cell}'s cell, then this check")
            change = _CHANGED.get(answer.variable) if answer.kind != FUNCTION else None
            judged = self.located(answer) if change is not None else None
            if judged is not None and change.where == f"the cell you ran as In[{judged[1]}]":
                change = None  # the run judged made the change: the answer's own cell (`dC[i] += ...`, no ids)
            # Through another name (`dy = dx; dy *= ...` in the next answer's cell) the change is a slip of that
            # cell's, not the rest of this answer: moving it here would make this one worse (the twentieth trial's)
            move = f"the grader runs {answer.cell_id}'s cell alone: move that code into {answer.cell_id}'s cell" \
                if change is not None and change.how is not None else \
                f"the grader runs {answer.cell_id}'s cell alone, as written ({_in_place_fix(answer.variable, None)})"
            if comparison.passed and change is not None and not change.fixed and not change.of(answer):
                # The answer finished by another cell (a loop below it, JupyterLab's Split Cell): right here, wrong
                # as the grader runs its own cell (the twelfth trial: "your dC is all zeros" over a right dC)
                return (f"{label} {wrong} — your {answer.variable} here is right only because {change.where} changed "
                        f"it in place after {answer.cell_id}'s cell ran; {move}")
            if change is not None and not change.fixed and not change.of(answer):
                # Wrong both ways: the split cell run twice (the fifteenth trial's "all zeros", no word of the cell
                # that made the kernel's value otherwise)
                return (f"{label} {wrong} — and {change.where} changed your {answer.variable} in place after "
                        f"{answer.cell_id}'s cell ran (run again, it changes it again); {move}")
            elsewhere = self._answered_elsewhere(answer, wrong)
            if elsewhere:
                return f"{label} {elsewhere}"
            bound = _BOUND.get(answer.variable) if comparison.passed and answer.kind != FUNCTION else None
            ran = max((c for c, cell in _IDS.items() if cell == answer.cell_id), default=None)
            if bound is not None and bound[2] != answer.cell_id and ran is not None and bound[0] > ran:
                # finished by a cell that rebinds it (`dx = dx * dy` in a scratch cell below, its own run told by
                # its id): right here, wrong as the grader runs the cell alone; the note the docs promise was
                # missing (a student trial)
                return (f"{label} {wrong} — your {answer.variable} here is right only because the cell you ran as "
                        f"In[{bound[0]}] assigned it after {answer.cell_id}'s cell ran; the grader runs "
                        f"{answer.cell_id}'s cell alone: move that code into {answer.cell_id}'s cell")
            function = self.exercise.function_of(answer)
            note = dtype_note(wrong, function.name) if function is not None and "Error" in wrong else ""
            # once: the judge's line for a function's error holds it already (a student trial's, printed twice)
            note = "" if note and note.strip()[1:-1] in wrong else note
            return f"{label} {wrong}{note}{self._guessed(answer)}{self.pointer(name)}"
        changed = self._autograd_changed(answer, expected, rtol, atol) if answer is not None else None
        if changed:
            return f"{label} {changed}"
        if comparison.passed:
            exact = comparison.status == Match.EXACT
            right = (f"exact: {str(exact):5s} | approximate: True  | maxdiff: {comparison.maxdiff:.3g} | shape "
                     f"{tuple(expected.shape)} ok")
            # A line without WRONG is one the grader accepts: a right value the saved cell does not hold is not
            blank = self._saved_blank(answer)
            if blank:
                return f"{label} {right}{blank.replace(' — but', ' — but WRONG as saved:', 1)}"
            other = self._saved_other(answer)
            saved_wrong = self._code_verdict(answer, other[0]) if other is not None else None
            share = self._saved_share(answer, other[0]) if other is not None and saved_wrong is None else 1.0
            if saved_wrong is not None or share < 1:  # a chain-only half is no CHAIN failure: its share says it
                verdict, _, why = (saved_wrong or f"WRONG ({_credit(share)}): right with the upstream gradients "
                                                  "given, not as one backward step").partition(": ")
                cell, history = answer.cell_id, self.namespace.get("In") or []
                since = next((at for at in range(len(history) - 1, other[1], -1) if isinstance(history[at], str)
                              and _same_code(history[at], other[0])), None)
                if since is not None:
                    # The saved cell ran after the run judged (the twelfth trial's `dprob = ...` typo, run and
                    # saved, was told "else save the notebook", the name it binds unsaid)
                    return (f"{label} {verdict}: {cell}'s cell as your saved notebook holds it (you ran it as "
                            f"In[{since}]), which is what the grader grades: {why}; your {answer.variable} "
                            f"is still the value of an earlier run (In[{other[1]}])")
                fix = f"the run judged right here (In[{other[1]}]) is another cell of your saved notebook: put " \
                      f"its code in {cell}'s cell and save it" if other[2] else self._other_run_fix(answer, other[1])
                # The run's verdict first: a fix run and not yet saved is right (the seventeenth trial's V4: only
                # the file's verdict was said, and the student could not tell whether the fix worked)
                return (f"{label} {right} — but WRONG as saved{verdict.removeprefix('WRONG')}: {cell}'s cell as your "
                        f"saved notebook holds it, which is what the grader grades: {why}; {fix}")
            changes, guessed = self._changes_others(answer), self._guessed(answer, right=True)
            if changes and guessed.startswith("; but "):  # one "but" a line (a student trial read two in a row)
                guessed = "; and " + guessed.removeprefix("; but ")
            line = f"{label} {right}{changes}{guessed}"
            if answer is not None and answer.kind != FUNCTION and one_hot_unsized(self.source(answer)):
                line += f"{'; and' if ' but ' in line else '; but'} {ONE_HOT_WIDTH} (the grader says so too)"
            typed = self._other_dtype(answer, manual)
            if typed:
                line += f"{'; and' if ' but ' in line else '; but'} {typed}"
            return line
        other = self._reassigned(answer) if answer is not None and answer.kind != FUNCTION else None
        if other:
            return (f"{label} not checked: this cell is right as the grader runs it, but your {answer.variable} is not "
                    f"its value: {other} assigned {answer.variable} after it ran; re-run this cell, then this check")
        stale = self._stale(answer) if answer is not None and answer.kind != FUNCTION else None
        if stale:
            return f"{label} {stale}"
        stale = self._stale_returned(answer) if answer is not None and answer.kind == FUNCTION else \
            self._forward_changed(answer) if answer is not None else None
        if stale:
            return f"{label} {stale}"
        stopped = self._stopped_half_way(answer) if answer is not None and answer.kind != FUNCTION else None
        if stopped:
            return f"{label} {stopped}"
        status = self._shape_slip() if comparison.status == Match.SQUEEZABLE else "WRONG"
        named = None
        case = self.notebook_case() if answer is not None and answer.kind != FUNCTION else None
        if case is not None and comparison.maxdiff is not None and self.hints != "none":
            named = name_mistake([(case, manual)], answer, CHAIN, rtol, atol)
        hints = "" if self.hints == "none" else \
            "".join(f" — hint: {h}" for h in ([named] if named else comparison.hints))
        where = " (your notebook's batch)" if comparison.aspect == "shape" else ""
        return f"{label} {status}: {comparison.message}{where}{hints}{self.pointer(name)}"

    def _bound_by_other(self, answer: Answer) -> Answer | None:
        """The other answer whose cell bound this answer's name, where its own cell has not run since the kernel
        started."""
        if "In" not in (self.namespace or {}) or self.located(answer) is not None:
            return None
        bound = _BOUND.get(answer.variable)
        if bound is None:
            return None
        cells = (bound[2],) if bound[2] else self.cells_at(bound[0], bound[1], answer.variable)[0]
        return next((a for a in self.exercise.answers if a.cell_id in cells and a.cell_id != answer.cell_id
                     and a.kind != FUNCTION), None)

    def _not_run(self, answer: Answer) -> str | None:
        """An answer whose own cell has not run since the kernel started, its name bound by another answer's
        cell (a fused exercise's cell assigns an atomic answer's name too): the grader judges this cell, not
        that value."""
        other = self._bound_by_other(answer)
        if other is None:
            return None
        if other.variable != answer.variable:
            # two answers in one cell (JupyterLab's Merge Cells, or written so): the grader reads each from its own
            return (f"not run yet: this cell has not run since the kernel started; your {answer.variable} is the "
                    f"value {other.grade_id}'s cell assigned, and the grader grades {answer.variable} by its own "
                    f"cell alone: write it there (not in {other.grade_id}'s cell), run it, then this check")
        return (f"not run yet: this cell has not run since the kernel started; your {answer.variable} is the "
                f"value {other.grade_id}'s cell (exercise {other.part}) assigned: run this cell, then this check")

    def _stopped_half_way(self, answer: Answer) -> str | None:
        """A cell right as the grader runs it whose last run stopped with an error after binding the answer
        (`dx = torch.zeros_like(x)`, then a line reading an answer whose cell has not run): the value is what it
        left half made (a student trial's "WRONG ... all zeros" over a cell the grader gives full marks)."""
        if self.source(answer) is None:
            return None
        located = self.located(answer)
        key = answer.cell_id if answer.cell_id in _CELLS else located[1] if located is not None else None
        error = _RAISED.get(key) if key is not None else None
        if error is None:
            return None
        return (f"not checked: this cell is right as the grader runs it, but it stopped with an error when it last ran "
                f"({error}), after it assigned {answer.variable}: your {answer.variable} is what it left half made; "
                "run it again, then this check")

    def _stale_returned(self, answer: Answer) -> str | None:
        """A function right as the grader runs it whose gradients here are not right: they were returned by
        an earlier definition (its cell was fixed and run, the cell that calls it not), or changed since."""
        function = self.exercise.function_of(answer)
        if self.source(answer) is None and not callable((self.namespace or {}).get(function.name)):
            return None  # nothing judged
        return (f"not checked: {function.name} is right as the grader runs it, but the gradients checked here are not "
                f"what it returns now (they were computed before its cell last ran, or changed since): re-run the "
                f"cell after {function.name}'s, which calls it, then this check")

    def _forward_changed(self, answer: Answer) -> str | None:
        """A cell right as the grader runs it, whose value here is wrong because a forward value it reads is not
        the forward pass's any more: a cell changed it in place (`x.mul_(...)`)."""
        source, case = self.source(answer), self.notebook_case()
        if source is None or case is None:
            return None
        changed = [name for name in self.exercise.network.intermediates if name in _reads(source)
                   and name in case.values and type(now := self.namespace.get(name)) is torch.Tensor
                   and not compare(now.detach().to(torch.float64), case.values[name].to(torch.float64),
                                   rtol=1e-4, atol=1e-6).passed]
        if not changed:
            return None
        by = _FORWARD_CHANGED.get(changed[0])
        who = f"{by.where} changed it in place{' when it ran before' if by.fixed else ''}" \
            if by is not None and by.tensor is self.namespace.get(changed[0]) else \
            "a cell changed it in place, or assigned it"
        return (f"not checked: this cell is right as the grader runs it, but {changed[0]}, which it reads, is not your "
                f"forward pass's value any more ({who}): re-run the forward pass's cell (the one that calls "
                "backward()) and the answer cells from there, then this check")

    def edited(self, answer: Answer) -> str | None:
        """An answer cell edited and saved after it last ran: its check would judge the code the kernel
        ran, which the student no longer sees (the notebook's file tells, where the front end names it)."""
        found = self.located(answer)
        if found is None or found[2] or self.namespace is None:
            return None
        cell = answer.cell_id
        saved = _saved_code(self.namespace, cell)
        ran_at = _RAN_AT.get(cell if found[1] is None else found[1])
        if saved is None or ran_at is None or saved[1] <= ran_at or _same_code(saved[0], found[0]):
            return None
        if found[1] is not None and found[1] not in _IDS and (any(
                isinstance(code, str) and _same_code(code, saved[0]) for code in (self.namespace.get("In") or []))
                or (other := self._saved_other(answer)) is not None and other[2]):
            # Told by its code alone, and the saved code ran too, or the saved notebook holds the run's code in
            # another cell: not an edit, but another cell (a scratch cell taken for this one) (the eleventh and
            # twelfth trials' "edited after it last ran ... run it", where running it could not help)
            return None
        if _blank(saved[0]) and not _blank(found[0]):
            # Blank again, as released: rarely an edit (the sixteenth trial's release downloaded again over saved
            # work, the answers still on screen, was "edited after it last ran ... run it", which fixes nothing)
            return (f"WRONG: {cell}'s cell in your saved notebook is the released blank ({answer.variable} = None), "
                    f"and the grader grades the file, though the kernel ran your answer there: if your notebook shows "
                    f"that answer, the file changed on disk (a fresh download over it?): save the notebook (File > "
                    f"Save, overwriting it); if it shows the blank, write your answer again and run it")
        after = " and the cell after it, which calls it" if answer.kind == FUNCTION else ""
        wrong = self._code_verdict(answer, saved[0])
        if wrong is not None:
            verdict, _, why = wrong.partition(": ")
            return (f"{verdict}: {cell}'s cell as your saved notebook holds it (edited after it last ran), which is "
                    f"what the grader grades: {why}; run it{after}, then this check")
        return (f"not checked: {cell}'s cell was edited after it last ran (your saved notebook holds other code "
                f"than the kernel ran, which is what this check would judge): run it{after}, then this check")

    def _saved_blank(self, answer: Answer | None) -> str:
        """On a right line whose value no run of the answer's own cell made (a cell of another notebook on
        this kernel did): the answer's cell as the notebook's file holds it is still the released blank,
        and the grader grades the file. (After the answer's own cell ran, a blank file is only not saved yet.)"""
        saved = None if answer is None or answer.kind == FUNCTION or self.namespace is None \
            or self.located(answer) is not None else _saved_code(self.namespace, answer.cell_id)
        if saved is None or not _blank(saved[0]):
            return ""
        return (f" — but {answer.cell_id}'s cell in your saved notebook is still blank ({answer.variable} = None), and "
                "the grader grades the saved notebook: put your answer in that cell and save it")

    def _unsaved(self, answer: Answer | None, share: float = 1.0, whole: bool = False) -> str:
        """Where the answer's cell ran (told by its id, or by its code alone where the notebook's file is known)
        and the file holds that cell blank, or an attempt the grader gives less than `share`, the share the
        line says of the run: the grader grades the file, so the line is WRONG as saved. The ninth student
        trial's fix, run and checked, never saved, was graded 0; the tenth's function fixed and not
        saved, a half-credit line over a blank cell and "this cell itself is right" under a wrong answer above
        each promised what the file does not get. `whole`: the line is the function's whole training run."""
        found = self.located(answer) if answer is not None else None
        if found is None or found[2] or self.namespace is None:
            return ""
        saved = _saved_code(self.namespace, answer.cell_id)
        if saved is None or _same_code(saved[0], found[0]):
            return ""
        got = self._saved_share(answer, saved[0], whole)
        if got >= share:
            return ""
        held = "is still blank" if got < 0 else \
            "still holds an earlier attempt, which the grader finds wrong" if got == 0 else \
            f"still holds an earlier attempt, for which {_credit(got)}"
        fix = "save it, then run this check again" if found[1] is None else self._other_run_fix(answer, found[1])
        return f"{answer.cell_id}'s cell in your saved notebook {held}, and the grader grades the saved notebook: {fix}"

    def _other_run_fix(self, answer: Answer, count: int) -> str:
        """What to do where the run judged (told by its code alone) is not the answer's cell as saved: save it,
        if it was that cell; but a notebook saved after that run holds the cell edited since (the twelfth trial's
        "save the notebook" for an edit saved and not run), or holds the run in another cell."""
        cell = answer.cell_id
        saved = _saved_code(self.namespace, cell) if self.namespace is not None else None
        if saved is None or saved[1] <= _RAN_AT.get(count, saved[1]):
            return (f"if the run judged here (In[{count}]) was that cell, save the notebook; else put that run's "
                    f"code in {cell}'s cell, then run this check again")
        after = " and the cell after it, which calls it" if answer.kind == FUNCTION else ""
        return (f"if the run judged here (In[{count}]) was {cell}'s cell, you edited it since: run it{after}, then "
                f"this check; else put that run's code in {cell}'s cell and save it")

    def _written_with_another(self, answer: Answer) -> str | None:
        """Where the answer's own cell is blank and a cell run before it wrote the answer beside another answer
        (two answers in one cell, under Run All): that cell, since the grader grades each answer's own cell (the
        eighteenth trial's Run All said only "not attempted yet"; the nineteenth's `%run answers.py` in one answer's
        cell, told by what its run bound, as its code shows nothing)."""
        history = (self.namespace or {}).get("In") or []
        others = {a.variable for a in self.exercise.answers if a.kind == ATOMIC and a.variable != answer.variable}
        for at in range(len(history) - 1, 0, -1):
            code = history[at]
            bound = ((_first_uses(code) or ((),))[0] or _BOUND_AT.get(at, ())) \
                if isinstance(code, str) and "check(" not in code else ()
            with_it = sorted(others & set(bound))
            if answer.variable in bound and with_it and not _blank(code):
                return (f"the cell you ran as In[{at}] assigns {answer.variable} beside {with_it[0]}, and the grader "
                        f"grades {answer.variable} by its own cell alone, which is blank: write it there")
        return None

    def _reset_after_saved(self, answer: Answer) -> str | None:
        """Told by its code alone, the newest run binding the answer is a `dx = None` (a scratch cell), after a run of
        the answer's cell as saved, which the grader finds right: that cell is not blank, and the grader gives it full
        marks (the eighteenth trial's classic Notebook said "not attempted yet")."""
        found = self.located(answer)
        saved = _saved_code(self.namespace, answer.cell_id) if self.namespace is not None else None
        if found is None or found[1] is None or saved is None or _blank(saved[0]):
            return None
        history = self.namespace.get("In") or []
        ran = next((at for at in range(found[1] - 1, 0, -1) if isinstance(history[at], str)
                    and _same_code(history[at], saved[0])), None)
        if ran is None or self._saved_share(answer, saved[0]) < 1:
            return None
        # Without ids the run that set None may be the answer's own cell, blanked since (a student trial moved the
        # answer into another cell): re-running it, as the line said alone, sets None again, and the next save
        # keeps the blank
        return (f"this cell is right as the grader runs it (you ran it as saved as In[{ran}]), but your "
                f"{answer.variable} is None: the cell you ran as In[{found[1]}] set it to None after that: if that "
                f"was {answer.cell_id}'s cell, blanked, put its answer back before the notebook saves (the saved "
                f"notebook still holds it) and run it; else re-run {answer.cell_id}'s cell; then this check")

    def _reset_unsaved(self, answer: Answer) -> str | None:
        """`_reset_after_saved` where no saved notebook is known (the classic Notebook before its first save): the
        newest run binding the answer is a `dx = None`, after a run that computed it (the twenty-first trial's
        "not attempted yet", the cell that reset it unnamed)."""
        found = self.located(answer)
        if found is None or found[1] is None or self.namespace is None or _saved_notebook(self.namespace) is not None:
            return None
        history = self.namespace.get("In") or []
        if not _blank(found[0]):
            return None
        computed = next((at for at in range(found[1] - 1, 0, -1) if isinstance(history[at], str)
                         and "check(" not in history[at] and not _blank(history[at])
                         and answer.variable in (_first_uses(history[at]) or ((),))[0]), None)
        if computed is None:
            return None
        return (f"your {answer.variable} is None: the cell you ran as In[{found[1]}] set it to None after the cell you "
                f"ran as In[{computed}] computed it; if that was {answer.cell_id}'s answer cell, re-run it, then this "
                "check (and save the notebook)")

    def _saved_better(self, answer: Answer, share: float, whole: bool = False) -> str:
        """On a WRONG line about the cell as run (told by its id; a function's cell by its code too, which no
        other cell holds): where the saved notebook still holds a version the grader gives more, say so: until
        the next save that is what it grades (the twelfth trial's WRONG over a right saved cell, true of the code
        on screen and not of the file; the eighteenth trial's function lines, plain WRONG over a right file)."""
        found = self.located(answer)
        function = answer.kind == FUNCTION
        if found is None or found[2] or found[1] is not None and not function or self.namespace is None:
            return ""
        saved = _saved_code(self.namespace, answer.cell_id)
        if saved is None or _same_code(saved[0], found[0]) or self._saved_share(answer, saved[0], whole) <= share:
            return ""
        return (f" (your saved notebook still holds {answer.cell_id}'s earlier code, which the grader finds right: "
                "this code replaces it at the next save)")

    def _saved_share(self, answer: Answer, saved: str, whole: bool = False) -> float:
        """The share of the answer's points the grader gives the cell as saved: -1 where it answers nothing
        (the released blank, or a function's template), for the words that say so. A function's `whole`
        training run gets nothing where any gradient it returns is wrong."""
        if _blank(saved):
            return -1.0
        if answer.kind != FUNCTION:  # both checks, as the grader scores them: a chain-only answer gets its share
            if self._refusal(saved) is not None:
                return 0.0
            failures = self._failures(answer, saved, self.notebook_case())
            if failures[CHAIN] is not None:
                return share_said(self._failed(failures[CHAIN], failures.get(LOCAL))) or 0.0
            return self.policy.chain_only_credit if failures.get(LOCAL) is not None else 1.0
        answers = [a for a in self.exercise.answers if a.cell_id == answer.cell_id] if whole else [answer]
        verdicts = [self._code_verdict(a, saved) for a in answers]
        if all(v is not None and v.endswith("not attempted yet") for v in verdicts):
            return -1.0
        return min(1.0 if v is None else share_said(v) or 0.0 for v in verdicts)

    def _answered_elsewhere(self, answer: Answer, wrong: str) -> str | None:
        """An answer's own cell blank as the grader grades it, and its value bound by a cell that is no answer's (a
        new cell inserted below it, which students use to keep the given cell intact): the twenty-third trial's
        "not attempted yet — stuck? backprop-ninja solution", whose command then said "try it first"."""
        bound = _BOUND.get(answer.variable) if answer.kind == ATOMIC else None
        answer_cells = {a.cell_id for a in self.exercise.answers}
        if not wrong.endswith("not attempted yet") or bound is None or bound[2] in answer_cells:
            return None
        if bound[2] is None and answer.cell_id in self.cells_at(bound[0], bound[1])[0]:
            return None  # no cell ids: the cell that bound it may be the answer's own
        return (f"{wrong}: {answer.cell_id}'s own cell is blank, and the grader grades {answer.variable} by that cell "
                f"alone; your {answer.variable} here comes from the cell you ran as In[{bound[0]}]: move that code "
                f"into {answer.cell_id}'s cell, save, then run this check again")

    def _in_other_answer(self, answer: Answer) -> str | None:
        """Where the run judged (told by its code alone) is another answer's cell as the saved notebook holds it,
        and the answer's own saved cell gets less than full points: the grader grades each answer by its own
        cell (the twelfth trial's two answers in one cell: half credit announced where the grader gave 0)."""
        other = self._saved_other(answer)
        if other is None or not other[2]:
            return None
        cells = (_saved_notebook(self.namespace) or ((), 0))[0]
        ran = self.located(answer)[0]
        answer_cells = {a.cell_id for a in self.exercise.answers} - {answer.cell_id}
        home = next((i for i, code in cells if i in answer_cells and _same_code(code, ran)), None)
        share = self._saved_share(answer, other[0]) if home is not None else 1.0
        if share >= 1:
            return None
        cell = answer.cell_id
        held = "is still blank" if share < 0 else "gets nothing" if share == 0 else \
            "computes nothing itself (its value is left by an earlier cell)"
        verdict = "WRONG" if share <= 0 else f"WRONG ({_credit(share)})"
        return (f"{verdict}: {cell}'s cell in your saved notebook {held}: the run judged here (In[{other[1]}]) is "
                f"{home}'s cell, which assigns {answer.variable} too, and the grader grades {answer.variable} by its "
                f"own cell alone: move that code into {cell}'s cell, save, then run this check again")

    def _saved_other(self, answer: Answer | None) -> tuple[str, int, bool] | None:
        """(the saved cell's code, the run judged, whether that run's code is another cell of the saved
        notebook) where the run was told by its code alone (no cell ids) and the saved notebook's cell holds
        other code: a scratch cell assigning the answer's name fits too."""
        found = self.located(answer) if answer is not None and answer.kind != FUNCTION else None
        if found is None or found[2] or found[1] is None or found[1] in _IDS or self.namespace is None:
            return None
        saved = _saved_code(self.namespace, answer.cell_id)
        if saved is None or _same_code(saved[0], found[0]):
            return None
        cells = (_saved_notebook(self.namespace) or ((), 0))[0]
        return saved[0], found[1], any(i != answer.cell_id and _same_code(code, found[0]) for i, code in cells)

    def _saved_holder(self, answer: Answer, count: int) -> Answer | None:
        """The other atomic answer whose saved cell holds the code run as In[count] and never assigns its own
        variable: a typo naming `answer`'s variable in that answer's cell."""
        history = (self.namespace or {}).get("In") or []
        code = history[count] if count < len(history) else None
        cells = (_saved_notebook(self.namespace) or ((), 0))[0] if self.namespace is not None else ()
        if not isinstance(code, str):
            return None
        return next((a for a in self.exercise.answers for cell, saved in cells
                     if a.kind == ATOMIC and a.cell_id == cell and a is not answer and _same_code(saved, code)
                     and not _assigns(saved, frozenset({a.variable}))), None)

    def _guessed(self, answer: Answer, right: bool = False) -> str:
        """Where the cell judged was told from another by its code alone, a guess: which one was judged. On a
        `right` line, only where the saved notebook shows it was another cell's run: the grader grades the
        saved cell, and a right line over a wrong saved cell would promise points it does not give."""
        found = self.located(answer) if answer is not None and answer.kind != FUNCTION else None
        if found is None:
            return ""
        if not found[2]:
            # Told by its code where the front end sends no cell ids: a scratch cell assigning the answer's
            # name fits too, which the saved notebook's cell, holding other code, shows.
            saved = None if found[1] is None or found[1] in _IDS or self.namespace is None else \
                _saved_code(self.namespace, answer.cell_id)
            if saved is None and not right and found[1] is not None and self._ran_otherwise(answer, found):
                # No file to tell by, and an earlier run with other code fits the cell too (the tenth trial's
                # right answer cell, then a scratch cell assigning its name: the scratch's WRONG, said of no run)
                return (f" (judged on the cell you ran as In[{found[1]}], the newest run that assigns "
                        f"{answer.variable}; if that was another cell, re-run this cell, then this check)")
            if saved is None or _same_code(saved[0], found[0]):
                return ""
            if right:
                return (f"; but your saved notebook's {answer.cell_id} cell holds other code than the run judged here "
                        f"(In[{found[1]}]), and the grader grades the saved cell: if that run was another cell, put "
                        f"its code in {answer.cell_id}'s cell; else save the notebook")
            return (f" (judged on the cell you ran as In[{found[1]}], whose code is not {answer.cell_id}'s cell in "
                    "your saved notebook, which is what the grader grades: if that was another cell, re-run this "
                    "cell, then this check)")
        return "" if right else (f" (judged on the cell you ran as In[{found[1]}], taken by its code for this one; "
                                 "if that was another cell assigning the same name, re-run this cell, then this check)")

    def _ran_otherwise(self, answer: Answer, found: tuple[str, int | None, bool]) -> bool:
        """Whether the kernel's history holds an earlier run, with other code, that fits the answer's cell too."""
        history = (self.namespace or {}).get("In") or []
        names = _names_of(self.spec)
        return any(isinstance(code, str) and "check(" not in code and _assigns(code, names)
                   and not _same_code(code, found[0]) and answer.cell_id in self.cells_at(count, code)[0]
                   for count, code in enumerate(history[:found[1]]) if count)

    def _autograd_changed(self, answer: Answer, expected: torch.Tensor, rtol: float, atol: float) -> str | None:
        """Autograd's gradient is not the notebook's forward pass's when a cell called backward() again
        (each call adds to .grad: a refused answer that did leaves the right answers looking wrong), or
        the batch or parameters changed since the forward cell ran: checked against the gradient the
        self-check computes itself from the notebook's parameters and batch."""
        case = self.notebook_case() if answer.kind != FUNCTION else None
        if case is None or answer.variable not in case.truth or \
                compare(expected.detach().to(torch.float64), case.truth[answer.variable], rtol=rtol, atol=atol).passed:
            return None
        who = f"{_BACKWARD[0]} called backward() again, which adds to .grad" if _BACKWARD else \
            "a cell called backward() again (which adds to .grad), or the batch or parameters changed"
        return (f"not checked: autograd's gradient on {answer.source} is not your forward pass's any more ({who}): "
                "re-run the forward and loss.backward() cell, then this check")

    def _made_by(self, change: _Change, answer: Answer) -> bool:
        """Whether the answer's own cell made the change: by its id, else by its code, which two cells of one
        variable share by name (an atomic answer and a fused one of the same tensor), so the run judged as this
        answer's must be the one that made it (a student trial's atomic line, right, blamed for the fused cell's
        change of a forward value in place)."""
        if not change.of(answer):
            return False
        if len(change.cells) <= 1 or change.count is None:
            return True
        judged = self.located(answer)
        return judged is None or judged[1] is None or judged[1] == change.count

    def _changes_others(self, answer: Answer | None) -> str:
        """On a right line: the earlier answers this cell changed in place, which their checks will show."""
        changed = [v for v, change in _CHANGED.items() if answer is not None and self._made_by(change, answer)]
        forward = [v for v, change in _FORWARD_CHANGED.items() if answer is not None
                   and self._made_by(change, answer) and (self.namespace or {}).get(v) is change.tensor]
        if forward and all(_FORWARD_CHANGED[v].fixed for v in forward):
            return (f" — but an earlier run of this cell changed {' and '.join(forward)}, a value of the forward "
                    f"pass, in place (it no longer does): re-run the forward pass's cell, then the answers after it "
                    f"that read {forward[0]}")
        if changed and all(_CHANGED[v].fixed for v in changed):
            return (f" — but an earlier run of this cell changed {' and '.join(changed)} in place (it no longer "
                    f"does): re-run {changed[0]}'s cell")
        forward = [v for v in forward if not _FORWARD_CHANGED[v].fixed]
        changed = [v for v in changed if not _CHANGED[v].fixed]
        if forward:
            return (f" — but this cell changes {' and '.join(forward)}, a value of the forward pass, in place, so "
                    f"every answer after it that reads {forward[0]} is computed from a wrong value: compute "
                    f"{answer.variable} without changing {forward[0]} (`{forward[0]} * ...`, not "
                    f"`{forward[0]}.mul_(...)`), then re-run the forward pass's cell")
        return "" if not changed else \
            (f" — but this cell changes {' and '.join(changed)} in place, so your {changed[0]} is no longer what "
             f"its cell computed: compute {answer.variable} into a new tensor instead")

    def _gradient_lost(self, name: str, answer: Answer | None) -> str:
        """Why the forward tensor an answer's check compares with has no autograd gradient, and what to do."""
        source = answer.source if answer is not None else name
        code = self.source(answer) if answer is not None and answer.kind != FUNCTION else None
        uses = _first_uses(code) if code else None
        again = ("re-run the forward pass's cell (the one that calls backward()) and the answer cells from there, "
                 "then this check")
        if uses is not None and source in uses[0]:
            # The answer's own cell reassigns the forward value (the twelfth trial's `x = x.detach()` in
            # dx's cell): re-running the forward pass and then this cell repeats it
            return (f"{source}: {answer.cell_id}'s own cell assigns {source}, so it is not the forward pass's tensor "
                    f"any more: take that line out of the cell, {again}")
        history = (self.namespace or {}).get("In") or []
        # Told by no cell id: the last cell that bound it, not the forward pass's (the fourteenth trial's typo
        # `x = ...` for `dx = ...`, run in the classic Notebook, which the line left in the cell to be saved)
        at = next((count for count in range(len(history) - 1, 0, -1) if isinstance(history[count], str)
                   and "backward(" not in history[count] and "check(" not in history[count]
                   and source in ((_first_uses(history[count]) or ((),))[0])), None)
        judged = self.located(answer) if at is not None and answer is not None else None
        since = max([judged[1] if judged is not None and judged[1] is not None else 0,
                     *(count for count, cell in _IDS.items() if answer is not None and cell == answer.cell_id)])
        if at is not None and since < at:  # the answer's own cell not run since (with its id, or by its code)
            variable = answer.variable if answer is not None else name
            return (f"{source}: the cell you ran as In[{at}] assigns {source}, so it is not the forward pass's tensor "
                    f"any more: if that is {name}'s answer cell, write `{variable} = ...` there; then {again}")
        if at is not None and answer is not None and _IDS.get(at) == answer.cell_id:  # an earlier version's
            return (f"{source}: {answer.cell_id}'s cell assigned {source} when it ran as In[{at}], so it is not the "
                    f"forward pass's tensor any more: {again}")
        if at is not None:  # a scratch cell's, run again by every Run All (the seventeenth trial's R28)
            return (f"{source}: the cell you ran as In[{at}] assigned {source}, so it is not the forward pass's "
                    f"tensor any more: take that line out (a cell may read {source}, never assign it), {again}")
        return (f"{source}: {source} is not the forward pass's tensor (a cell assigned it since, or the forward and "
                "loss.backward() cells have not run): run them, then this check")

    def _without_gradient(self, label: str, answer: Answer | None, said: str) -> str:
        """A line with no autograd gradient to compare against, `said` why, still gives the grader's verdict on the
        cell's code: a student trial's scratch cell transposing a forward tensor left the line of the gradient read
        through it saying only that it was reassigned, the same words for a right and a wrong answer, and a line
        without WRONG reads as accepted (the grader gave 0)."""
        source = self.source(answer) if answer is not None and answer.kind != FUNCTION else None
        verdict = self._code_verdict(answer, source) if source is not None and not _blank(source) else None
        return f"{label} {verdict}; besides, {said}" if verdict else f"{label} not checked: {said}"

    def _as_graded(self, answer: Answer, comparison) -> str | None:
        """The grader's verdict on the cell's code, or None when it agrees with the value check alone
        (no code found, or the code is right on every batch and check). For a cell that is right with
        the true upstream gradients but not with the student's, says which upstream answer is wrong."""
        function = answer.kind == FUNCTION
        source = None if function and self.namespace is None else self.source(answer)
        refusal = self._refusal(source) or self._saved_refusal(answer, source)
        if refusal is not None:
            return refusal
        if not function and source is None:
            return None
        if function:
            if source is None and not callable((self.namespace or {}).get(self.exercise.function_of(answer).name)):
                return None  # never defined since the kernel started: the notebook check says which cell to run
            return self._function_verdict(answer, source)
        notebook = self.notebook_case()
        failures = self._failures(answer, source, notebook)
        if failures[CHAIN] is not None:
            return self._failed_cell(answer, failures[CHAIN], source, failures.get(LOCAL))
        if not comparison.passed and notebook is not None:
            chain = self._wrong_upstream(answer, source, notebook)
            drifted = () if chain or failures.get(LOCAL) is not None else self._drifted(answer, source, notebook)
            if drifted:
                upstream, first = drifted[0], drifted[-1]
                state = (self._not_assigned(first) if first not in self.namespace else
                         "is not attempted yet" if self.namespace[first] is None else "is wrong")
                reaches = (f"its error reaches this cell through {upstream}, within the tolerance in every answer "
                           "between (so their lines are right), larger here")
                if len(drifted) == 1:
                    reaches = f"its error, within the tolerance in your {first}, is larger here"
                said = f"{first} above {state}: {reaches}"
                if len(drifted) == 1 and state == "is wrong":  # not "wrong" (a student trial), where its line is right
                    said = f"{first} above carries an error within the tolerance there (its line is right), larger here"
                return self._blocked(first, answer) or f"{said}; with the true {upstream} this cell is right"
            if chain and answer.kind == FUSED:  # its upstream is the read-only cell's, never an earlier exercise's
                state = "is not assigned" if chain[0] not in self.namespace else "is not autograd's"
                return (f"{chain[0]} {state}: the read-only cell just above this answer sets it (autograd's value, so "
                        f"that an earlier exercise cannot spoil this one): run that cell, then this answer cell; with "
                        f"the true {chain[0]} this cell is right")
            if chain:
                upstream, first = chain[0], chain[-1]
                blocked = self._blocked(first, answer) or self._read_changed_forward(first, upstream)
                if blocked:
                    return blocked
                state = (self._not_assigned(first) if first not in self.namespace else
                         "is not attempted yet" if self.namespace[first] is None else "is wrong")
                unassigned = all(self.namespace.get(g) is None for g in chain)
                below = ", ".join(reversed(chain[:-1])) if len(chain) <= 4 else \
                    f"{upstream} and the {len(chain) - 2} answers between"
                between = "" if len(chain) == 1 else \
                    f" ({below}, below it, {'is' if len(chain) == 2 else 'are'} not assigned either)" if unassigned \
                    else f" ({below}, computed from it, {'is' if len(chain) == 2 else 'are'} wrong too)"
                note = f"{first} above {state}{between}; with the true {upstream} this cell is right"
                judged = self.located(self._atomic(first)) if self._atomic(first) is not None else None
                if judged is not None and judged[2] and state == "is wrong":
                    note += (f" (your {first} is what the cell you ran as In[{judged[1]}] left: if that was not "
                             f"{first}'s answer cell, re-run {first}'s cell, then this check)")
                local = failures.get(LOCAL)
                if local is None or self.policy.chain_only_credit >= 1:
                    return note
                # its value, not the cell, is right there: "this cell is right" inside a WRONG line (a student trial)
                note = note.replace("this cell is right", "its value is right")
                return f"WRONG ({_credit(self.policy.chain_only_credit)}): {note}, but {local.feedback}"
        local = failures.get(LOCAL)
        if local is not None and self.policy.chain_only_credit < 1:
            # what it skips, as the grader says it, where no mistake of the step is named (the seventeenth trial's
            # closed form pasted into an atomic cell: the grader named what it skips, the line did not)
            read = bool(answer.local_upstream) and set(answer.local_upstream) <= set(syntax.names_read(source) or ())
            why = local.feedback if local.named else \
                f"{Chain.skips(' and '.join(answer.local_upstream) or 'its upstream gradients', read)} {local.feedback}"
            both = sorted(set(answer.local_upstream) & set((_first_uses(source) or ((),))[0]))
            if both:  # two answers in one cell (Merge Cells): the grader gives this one its own cell's, with the true
                # gradient above (the eighteenth trial's "compute it from" the gradient the cell computes)
                why = (f"the cell judged here assigns {', '.join(both)} too, which {answer.variable} reads: the grader "
                       f"runs {answer.cell_id}'s own cell, with the true {both[0]}; put each answer in its own cell")
            if NEAR_SAID in why:  # a hair off, on this batch: the grader's batches may not show it (an instructor
                # trial's dd2 with eps left out got full marks there, where this line had said half)
                return (f"WRONG ({_credit(self.policy.chain_only_credit)} where its own batches show this too: right "
                        f"with the upstream gradients given, a hair off with others): {why}")
            return (f"WRONG ({_credit(self.policy.chain_only_credit)}: right with the upstream gradients given, "
                    f"not as one backward step): {why}")
        return None

    def _refusal(self, source: str | None) -> str | None:
        refusal = None if source is None else static_check.check(source, self.allow)
        return None if refusal is None else f"WRONG: the grader refuses this cell, {refusal}{_merged_check(source)}"

    def _saved_refusal(self, answer: Answer, source: str | None) -> str | None:
        """The static check's refusal of the cell as the saved notebook holds it, where that is other code than
        the run judged, or no run was told for the cell: without cell ids, an answer cell written as a fused
        exercise's read-only cell (`dx = x.grad.clone()`) is that cell by its code, and was judged right."""
        saved = None if self.namespace is None else _saved_code(self.namespace, answer.cell_id)
        if saved is None or source is not None and _same_code(saved[0], source):
            return None
        refusal = static_check.check(saved[0], self.allow)
        return None if refusal is None else \
            f"WRONG: the grader refuses this cell as your saved notebook holds it, {refusal}{_merged_check(saved[0])}"

    def _failures(self, answer: Answer, source: str, notebook) -> dict:
        """The grader's judgement of a gradient's cell by check, as the sandbox runs it on each case."""
        cases = (*own_cases(self.spec), *([notebook] if notebook is not None else []))
        # Every batch here is public (the self-check's own, and the notebook's): all of it may be shown.
        return {check: judge(self._outcomes(answer, source, cases, check), cases, answer, check,
                             self.tolerance, hints=self.hints, public=True, code=source)
                for check in checks(answer)}

    def _code_verdict(self, answer: Answer, saved: str) -> str | None:
        """The grader's verdict on the cell as the saved notebook holds it, where it loses points: what the
        grader grades, whatever the kernel ran."""
        refusal = self._refusal(saved)
        if refusal is not None:
            return refusal
        if answer.kind == FUNCTION:
            return self._function_verdict(answer, saved)
        failure = self._failures(answer, saved, self.notebook_case())[CHAIN]
        return None if failure is None else self._failed_cell(answer, failure, saved)

    def _failed_cell(self, answer: Answer, failure, source: str, local=None) -> str:
        """The verdict on the cell's code (`_failed`), with the sizes it writes that the error quotes, and what it
        binds where it binds no answer (the twelfth trial's `x = ...` typo for `dx = ...`: "the cell never assigns dx",
        the forward value it overwrote unnamed)."""
        instead = NotebookCheck._assigns_instead(self, answer, source) if failure.kind == Status.UNASSIGNED else None
        if instead:
            return f"WRONG: {instead}"
        return self._failed(failure, local) + self._written_sizes(failure, source) + self._fitted(answer, failure)

    def _other_dtype(self, answer: Answer | None, got) -> str:
        """For a right answer in another dtype than its tensor's (`-F.one_hot(y, k) / n` is float32): the grader
        accepts it, right to its precision, but a cell below that multiplies it with its float64 tensors stops (a
        third instructor trial's dlogp said only "exact: True", and the cell that stopped blamed an answer computed
        from it). Only a product (@) or a write into a float64 tensor stops, elementwise arithmetic promotes; a 0-d
        answer meets neither (an instructor trial's `drec = torch.tensor(1.0)` was told a cell below stops)."""
        forward = (self.namespace or {}).get(answer.source) if answer is not None and answer.kind == ATOMIC else None
        if not (isinstance(got, torch.Tensor) and isinstance(forward, torch.Tensor) and got.dtype != forward.dtype
                and got.is_floating_point() and got.dim() > 0):
            return ""
        return (f"it is {got.dtype}, where {answer.source} is {forward.dtype}: right to its precision, yet a cell "
                f"below that takes a product (@) of it and a {forward.dtype} tensor, or writes it into one "
                f"(index_add_, [...] =), stops; make it in {answer.source}'s dtype (torch.zeros_like, or "
                ".to(" + answer.source + ".dtype) on a one_hot)")

    def _fitted(self, answer: Answer, failure) -> str:
        """Where the cell raised on the right upstream gradient and the student's own is that gradient a size-1
        dimension off: the cell was fitted to theirs (Broadcast.fitted_to)."""
        if failure.kind != Status.ERROR or self.namespace is None:
            return ""
        for gradient in answer.local_upstream:
            mine, forward = self.namespace.get(gradient), self.namespace.get(gradient[1:])
            if isinstance(mine, torch.Tensor) and isinstance(forward, torch.Tensor) and mine.shape != forward.shape \
                    and [d for d in mine.shape if d != 1] == [d for d in forward.shape if d != 1]:
                return Broadcast.fitted_to(gradient, f", of shape {tuple(forward.shape)} (yours: {tuple(mine.shape)})")
        return ""

    def _function_verdict(self, answer: Answer, source: str | None) -> str | None:
        """The grader's verdict on a function's gradient, the function defined by `source` (None: the
        notebook's), run on the self-check's batches in a namespace of its own."""
        ran = self._function_outcomes(answer, source)
        outcomes = {case: per[answer.variable] for case, per in ran.items()}
        failure = judge(outcomes, (*own_cases(self.spec), own_probe(self.spec)), answer, CHAIN, self.tolerance,
                        hints=self.hints, public=True, code=source)
        return None if failure is None else self._failed(failure) + self._written_sizes(failure, source)

    def _read_changed_forward(self, first: str, upstream: str) -> str | None:
        """Where the first wrong answer above is right as its cell computes it, but its cell read a forward value
        that is not the forward pass's any more (a scratch cell's `x = x * 2`, or `x *= 2`): that value, not the
        answer, is what to fix (the seventeenth trial's right lines below said that answer was wrong)."""
        answer = self._atomic(first)
        code = self.source(answer) if answer is not None else None
        sources = {a.source for a in self.exercise.answers}
        for name in sorted(_reads(code) & sources if code else ()):
            why = self._not_forward(name)
            if why:
                return (f"{first} above read {name}, which is not your forward pass's value any more ({why}), so "
                        f"{first} is not what its cell gives: take out the line that changed {name}, re-run the "
                        f"forward pass's cell (the one that calls backward()) and the answer cells from there; with "
                        f"the true {upstream} this cell is right")
        return None

    def _not_forward(self, name: str) -> str:
        """How the notebook's forward value `name` stopped being the forward pass's, or "": a cell assigned it (a
        computed tensor keeps no gradient), or changed it in place."""
        value = (self.namespace or {}).get(name)
        if not isinstance(value, torch.Tensor):
            return ""
        if not (value.is_leaf or value.retains_grad) or value.grad is None:  # (`x.detach() * 2` is a leaf)
            history = (self.namespace or {}).get("In") or []
            at = next((count for count in range(len(history) - 1, 0, -1) if isinstance(history[count], str)
                       and "backward(" not in history[count] and "check(" not in history[count]
                       and name in ((_first_uses(history[count]) or ((),))[0])), None)
            return f"the cell you ran as In[{at}] assigned it" if at is not None else "a cell assigned it"
        change = _FORWARD_CHANGED.get(name)
        return f"{change.where} changed it in place" if change is not None and change.tensor is value \
            and not change.fixed else ""

    def _not_assigned(self, variable: str) -> str:
        """Why an answer above is not assigned: its cell never ran, stopped with an error, or ran and bound
        another name (the twelfth trial's `dy_inv = ...` typo in dy's cell, said to have stopped)."""
        answer = self._atomic(variable)
        source = self.source(answer) if answer is not None else None
        # Not found as run (no cell id, and the run bound no answer): the saved cell, where the file is known (the
        # fourteenth trial's `x = ...` typo in dx's cell, Run All: "its cell never ran" below it)
        saved = _saved_code(self.namespace or {}, answer.cell_id) if answer is not None and source is None else None
        code = source or (saved[0] if saved else None)
        uses = _first_uses(code) if code else None
        deleted = self.deleted(answer) if answer is not None else None
        if deleted:
            at, kept = deleted
            return (f"is not assigned (the cell you ran as In[{at}] deleted it, `del {variable}`" +
                    ("; your saved notebook keeps that cell, which Run All runs again: delete it)" if kept else ")"))
        case = self.notebook_case() if source is not None and not _blank(source) else None
        behind = self._wrong_upstream(answer, source, case) if case is not None else ()
        own = self._own_error(answer, source) if behind else None
        if own:
            return f"is not assigned (its cell stops on an error of its own, with the true values above it too: {own})"
        shaped = [g for g in behind if _misshapen(self.namespace.get(g), case.truth[g])]
        if shaped:  # it ran and stopped on a wrong answer above it, which running it again cannot mend
            return (f"is not assigned (its cell stopped on {behind[0]}, which is wrong{_through(behind, shaped[-1])}: "
                    f"fix {shaped[-1]} first, {_misshapen(self.namespace[shaped[-1]], case.truth[shaped[-1]])})")
        if uses is not None and uses[0] and variable not in uses[0] and not _blank(code):
            bound = ", ".join(sorted(uses[0])[:4])
            return (f"is not assigned ({answer.cell_id}'s cell ran, and assigns {bound} instead)" if source else
                    f"is not assigned ({answer.cell_id}'s cell in your saved notebook assigns {bound} instead)")
        return "is not assigned (its cell never ran, or stopped with an error)"

    def _blocked(self, first: str, checked: Answer) -> str | None:
        """When the first wrong answer upstream is not wrong but out of date (another cell reassigned it,
        or its own inputs changed since it ran): which cells to re-run, from it down to this one. Where
        the checked cell itself changed it in place when it last ran (`dx = dy; dx += ...` run twice), that
        cell is to fix first: re-running the others alone comes back here."""
        answer = next((a for a in self.exercise.answers if a.kind == ATOMIC and a.variable == first), None)
        if answer is None or first not in self.namespace:
            return None
        changed = _CHANGED.get(first)
        if changed is not None and changed.of(checked) and self._stale_reason(answer) is not None:
            if changed.fixed:
                return (f"{first} above was changed in place by an earlier run of this cell, which no longer does: "
                        f"re-run the cells from {first}'s down to this one")
            # its own verdict first (a student trial read "fix this cell" as a lost point; the grader gave it full)
            return (f"{first} above was changed in place by this cell when it last ran "
                    f"({_in_place_fix(first, changed.how)}): this cell itself is right as the grader runs it, but "
                    f"while it changes {first} the cells above cannot mend it: fix this cell, then re-run the cells "
                    f"from {first}'s down to this one")
        other = self._reassigned(answer)
        if other is not None:
            # another answer's cell between them runs again in the re-run, and assigns it again (a student trial's
            # stray line doubling one answer in a later answer's cell, told to re-run round and round): out first
            out = f"take the line that assigns {first} out of it, then " if "(a typo for" in other else ""
            return (f"{first} above is not its cell's value: {other} assigned {first} after it ran; {out}re-run "
                    f"{first}'s cell, then the cells from it down to this one; this cell itself is right")
        binder = self._bound_by_other(answer)
        if binder is not None:  # its own cell never ran (the twentieth trial's "... above is wrong", of a right cell)
            part = f" (exercise {binder.part})" if binder.variable == first else ""
            return (f"{first} above is not its cell's value: {first}'s cell has not run since the kernel started, and "
                    f"{first} is the value {binder.grade_id}'s cell{part} assigned; run {first}'s cell, then the cells "
                    "from it down to this one; this cell itself is right")
        scratch = self._saved_other(answer)
        if scratch is not None and scratch[2] and self._code_verdict(answer, scratch[0]) is None:
            # Told by code alone, the run is another cell of the saved notebook, and the answer's own saved cell is
            # right (the eleventh trial's wrong scratch cell saved under a right answer, blamed on the answer)
            return (f"{first} above is not its cell's value: the cell you ran as In[{scratch[1]}], another cell of "
                    f"your saved notebook, assigned {first} after it; re-run {first}'s cell, then the cells from it "
                    "down to this one; this cell itself is right")
        reason = self._stale_reason(answer)
        source = self.source(answer) if reason is not None else None
        if reason is not None and (source is None or self._code_verdict(answer, source) is None):
            return (f"{first} above is out of date ({reason}): re-run the cells from {first}'s down to this one; "
                    "this cell itself is right")
        return None  # wrong by its own code too (the twentieth trial's "out of date" over a wrong cell): said so

    def _written_sizes(self, failure, source: str | None) -> str:
        """For an answer right at the lecture's sizes only: the numbers its cell writes that are a lecture
        size, by name (the grader's line lists the usual ones, 32, 27 and 64, whatever the cell wrote)."""
        if (SIZES_MISTAKE not in (failure.mistake or "") or source is None
                or "your cell writes" in failure.feedback):  # the grader's line names them (a slice cut at one)
            return ""
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return ""
        written = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is int}
        named = written_sizes(self.exercise, written)
        if not named:
            return ""
        return f" — your cell writes {' and '.join(named)} as {'numbers' if len(named) > 1 else 'a number'}"

    def _failed(self, failure, local=None) -> str:
        """The line's verdict on a failed run of the cell: right values in a squeezable shape get the
        grader's partial credit (a function's returned gradient as much as a cell's), unless the check of
        the one backward step (`local`) finds more wrong than the shape, where the grader gives nothing."""
        squeezable = failure.kind == Match.SQUEEZABLE and (local is None or local.kind == Match.SQUEEZABLE)
        if failure.kind == Status.TIMEOUT:  # where, and what the grader does then
            return (f"WRONG: {failure.feedback} ({self.cell_timeout:g} s, on one of the self-check's batches, which "
                    "the grader's are like: it stops the cell there and gives it nothing; a Python loop over every "
                    "entry is the usual cause: write it with tensor operations)")
        return f"{self._shape_slip() if squeezable else 'WRONG'}: {failure.feedback}"

    def _shape_slip(self) -> str:
        """Right values in a shape that differs only by size-1 dimensions: WRONG unless the course gives
        such an answer full credit."""
        if self.policy.squeezable_shape_credit >= 1:
            return "right values, wrong shape"
        return f"WRONG (right values, wrong shape; {_credit(self.policy.squeezable_shape_credit)})"

    def _stale(self, answer: Answer) -> str | None:
        """Why the notebook's value is not what the answer's (right) cell computes from today's values:
        a gradient it read changed since it ran, or a later cell changed it in place."""
        variable = answer.variable
        reason = self._stale_reason(answer)
        if reason is None or variable not in _CHANGED:
            return None if reason is None else f"re-run {variable}'s cell: {reason}"
        change = _CHANGED[variable]
        if change.fixed:
            return (f"your {variable} is not what its cell computed: {change.where} changed it in place when it "
                    f"ran before (it no longer does): run {variable}'s cell and that one again")
        return (f"your {variable} is not what its cell computed: {change.where} changed it in place afterwards "
                f"({_in_place_fix(variable, change.how, ' there')}); "
                f"fix that cell, then run {variable}'s cell and that one again")

    def _stale_reason(self, answer: Answer) -> str | None:
        variable = answer.variable
        ran = _RAN.get(variable)
        if ran is None or self.namespace is None or self.namespace.get(variable) is not ran[1]:
            return None
        if variable in _CHANGED:
            return f"{_CHANGED[variable].where} changed it in place afterwards"
        changed = [g for g, then in ran[0].items()
                   if not (type(now := self.namespace.get(g)) is torch.Tensor and now.shape == then.shape
                           and torch.equal(now, then))]
        if not changed:
            return None
        # Another cell's value under an answer's name (a fused exercise's cell assigns an atomic one's): named
        above = self._atomic(changed[0])
        other = self._reassigned(above) if above is not None and len(changed) == 1 else None
        handed = self._handed(changed[0], ran[0][changed[0]]) if other is None and len(changed) == 1 else None
        return f"{', '.join(changed)} changed since it ran" + (f" ({other} assigned it)" if other else
                                                               f" ({handed})" if handed else "")

    def _handed(self, variable: str, then: torch.Tensor) -> str | None:
        """Where the last cell run that bound `variable` is the read-only cell handing a fused answer autograd's
        gradient (`dx = x.grad.clone()`): that cell, by the answer it is for (the fourteenth trial's fused
        exercise's set-up, run between an answer and the one below it, told only as "changed since it ran")."""
        history = (self.namespace or {}).get("In") or []
        last = next((code for code in reversed(history[:-1]) if isinstance(code, str)
                     and variable in ((_first_uses(code) or ((),))[0])), None)
        fused = next((a for a in self.exercise.answers if a.kind == FUSED and variable in a.local_upstream), None)
        if last is None or fused is None or not _given(last, frozenset({variable[1:]})):
            return None
        now = self.namespace[variable]
        same = isinstance(now, torch.Tensor) and now.shape == then.shape and torch.allclose(
            now.double(), then.double(), rtol=self.tolerance.rtol, atol=self.tolerance.atol)
        return (f"the read-only cell above {fused.grade_id}'s (exercise {fused.part}) set it to autograd's "
                f"{variable}, " + ("equal to yours to round-off" if same else
                                   f"not what your {variable}'s cell gave: its own line says why"))

    def _reassigned(self, answer: Answer) -> str | None:
        """The other cell that bound the answer's name after its own cell ran (a fused exercise's answer
        assigns an atomic one's name; a typo assigns an earlier answer's name), told by its id or else by
        its code; None when the value is its own cell's."""
        bound = _BOUND.get(answer.variable)
        if bound is None:
            return None
        if bound[2] is not None:
            if bound[2] == answer.cell_id or answer.cell_id not in _CELLS:
                return None
            cells, guess = (bound[2],), False
        else:
            holder = self._saved_holder(answer, bound[0])
            if holder is not None:
                return f"{holder.cell_id}'s cell (a typo for {holder.variable}? fix that cell first)"
            own = self.located(answer)
            if own is not None and own[1] is not None and own[1] < bound[0] \
                    and bound[1].strip() in self._saved_scratch():
                uses = _first_uses(bound[1], augmented=False)
                if uses is not None and answer.variable in uses[1]:  # `dx = dx * 2`, kept
                    return (f"the cell you ran as In[{bound[0]}] (it computes {answer.variable} from itself: a "
                            "scratch cell your saved notebook keeps, which every Run All runs again: delete it)")
                return (f"the cell you ran as In[{bound[0]}], another cell your saved notebook keeps (every Run All "
                        "runs it again: delete it),")
            cells, guess = self.cells_at(bound[0], bound[1], answer.variable)
            uses = _first_uses(bound[1], augmented=False)
            itself = uses is not None and answer.variable in uses[1]  # `dx = dx * 2`: no answer's own cell
            if answer.cell_id in cells and not itself or own is None or own[1] is None or own[1] >= bound[0]:
                return None
            if itself and answer.cell_id in cells:
                kept = self.namespace is not None and any(
                    cell != answer.cell_id and _same_code(code, bound[1])
                    for cell, code in (_saved_notebook(self.namespace) or ((), 0))[0])
                # A scratch cell the saved notebook keeps runs again in every Run All (the twelfth trial's 23 lines
                # that said only to re-run the answers)
                return (f"the cell you ran as In[{bound[0]}] (it computes {answer.variable} from itself: "
                        + ("a scratch cell your saved notebook keeps, which every Run All runs again: delete it)"
                           if kept else "a scratch cell?)"))
        others = [a for a in self.exercise.answers if a.cell_id in cells and a.kind != FUNCTION]
        if not others:
            kept = bound[1].strip() in self._saved_scratch()  # runs again in every Run All (the fourteenth trial)
            return f"the cell you ran as In[{bound[0]}]" + (", another cell your saved notebook keeps (every Run All "
                                                            "runs it again: delete it)," if kept else "")
        if len(others) > 1:  # a typo in the cell of one of the steps that read the answer
            return f"the cell you ran as In[{bound[0]}] (a typo in {' or '.join(a.grade_id for a in others)}'s cell?)"
        other = others[0]
        which = f"the cell you ran as In[{bound[0]}], by its code {other.grade_id}'s" if guess else \
            f"{other.grade_id}'s cell"
        if other.variable == answer.variable:
            return f"{which} (exercise {other.part})"
        return f"{which} (a typo for {other.variable}?)"

    def _wrong_upstream(self, answer: Answer, source: str, case) -> tuple[str, ...]:
        """The chain of wrong upstream gradients behind the cell's value: the nearest one the cell reads
        whose notebook value is not autograd's, then the one that one's cell read, and so on up to the
        first wrong answer (whose own inputs are right). Empty when every gradient it reads is right."""
        chain: list[str] = []
        while True:
            wrong = next((g for g in reversed(answer.upstream) if g in _reads(source) and g not in chain
                          and not compare(self.namespace.get(g), case.truth[g], rtol=self.tolerance.rtol,
                                          atol=self.tolerance.atol).passed), None)
            if wrong is None:
                return tuple(chain)
            chain.append(wrong)
            answer = next((a for a in self.exercise.answers if a.kind == ATOMIC and a.variable == wrong), None)
            if answer is not None and self.namespace.get(wrong) is None:
                # Not assigned: where its cell ran and stopped, for want of what it reads, up to the first answer
                # that holds nothing (Run All past a syntax error three cells up named the nearest answer, on the
                # line of a cell that assigned its own before it stopped); a cell that never ran (after a restart)
                # is the one to run; only what that cell reads (the sixteenth trial's line named an answer off its path)
                while (code := self.source(answer)) is not None and (blank := next(
                        (g for g in reversed(answer.upstream) if g not in chain and g in _reads(code)
                         and self.namespace.get(g) is None and self._atomic(g) is not None), None)):
                    chain.append(blank)
                    answer = self._atomic(blank)
                return tuple(chain)
            # A value another cell bound (a fused exercise's cell reusing the name) is not what its own cell read.
            source = None if answer is None or self._reassigned(answer) is not None else self.source(answer)
            if source is None:
                return tuple(chain)

    def _drifted(self, answer: Answer, source: str, case) -> tuple[str, ...]:
        """Where every gradient the cell reads is within the tolerance of autograd's and its value is not: the
        path from what it reads, through values off by less than the tolerance, to the first answer above that
        is wrong (its value, or its code as the grader runs it), whose small error the cell's own arithmetic
        made larger: a product summing over the batch (a normalization's eps left out of its variance's gradient
        is within the tolerance on the notebook's batch, and down to the layer's input, and not in its weights').
        Empty where none is."""
        seen: set[str] = set()

        def walk(answer: Answer, source: str) -> tuple[str, ...]:
            for read in (g for g in reversed(answer.upstream) if g in _reads(source) and g not in seen):
                seen.add(read)
                compared = compare(self.namespace.get(read), case.truth[read], rtol=self.tolerance.rtol,
                                   atol=self.tolerance.atol)
                if not compared.passed:
                    return (read,)
                above = next((a for a in self.exercise.answers if a.kind == ATOMIC and a.variable == read), None)
                code = None if compared.status == Match.EXACT or above is None or self._reassigned(above) \
                    else self.source(above)
                if code is None:
                    continue
                if self._failures(above, code, case)[CHAIN] is not None:
                    return (read,)
                found = walk(above, code)
                if found:
                    return (read, *found)
            return ()

        return walk(answer, source)

    def training(self, *args, lr: float) -> None:
        """The exercise's whole-run check, `training(function, params, batches, lr=...)`: the same SGD
        steps driven by the student's function and by autograd, from the same parameters and batches
        (each a tuple of the network's data), every loss computed by the exercise's own network; then
        as the grader runs it: the function's cell run on its own (torch and F only), on the
        self-check's batches of other sizes, a gradient of any other shape than its parameter's
        refused at its step. One line, naming the first step where the two part; it never raises, so
        Run All reaches the end. grader 0.1's notebooks pass their own forward first, which the
        exercise's network has replaced."""
        with _quiet():
            line = self.training_line(*args, lr=lr)
        print(line)

    def training_line(self, *args, lr: float) -> str:
        if len(args) == 4:
            args = args[1:]
        try:
            line = self._training(*args, lr=lr)
        except Exception as exc:  # a check cell never raises, whatever the notebook handed it
            line = f"WRONG: the training check could not run: {type(exc).__name__}: {str(exc)[:300]}"
        return f"{'training':<15s}| {line}"

    def _training(self, function, params, batches, *, lr: float) -> str:
        network = self.exercise.network
        start = {k: v.detach().clone() for k, v in params.items()}
        self._changes_given = set()
        steps = [dict(zip(network.data, batch, strict=True)) for batch in batches]
        # As the grader runs it first: a function that reads the notebook's globals (its gradients, say) stops there
        # on a NameError, whatever those globals held (a third instructor trial's line said "no tensor of the right
        # shape", or "not autograd's at step 1", where the grader and the function's own lines said NameError)
        alone = self._alone()
        said = self._steps(alone, start, steps, lr) if alone is not None else None
        if isinstance(said, str) and "NameError" in said:
            return said + _globals_read(function)
        self._changes_given = set()
        ran = self._steps(function, start, steps, lr)
        if isinstance(ran, str):
            return ran
        mine, final = ran
        changes = sorted(self._changes_given)
        losses, expected, _ = autograd_steps(network, start, steps, lr)
        broken = not_finite(losses, expected, lr)
        if broken:  # no run can match it: the exercise's fault, not the student's (an instructor trial's -inf mask)
            return f"not checked: {broken}; tell your instructor"
        differs = self._differs(mine, final, losses, expected, lr)
        if differs:
            return f"WRONG: {differs}{self._first_wrong_gradient(function, start, steps, lr)}"
        alone = self._training_alone(lr, len(steps))
        if alone:
            return f"WRONG: right on your notebook's batches, but {alone}"
        first, last = losses[0].item(), losses[-1].item()
        # No timing: one run's ratio to autograd's varied 0.3x-3.1x between identical runs of a notebook.
        line = f"{len(steps)} steps match autograd: loss {first:.4f} -> {last:.4f}"
        if last >= first:  # instructor trials read a rise as failure: what is checked is each step's update
            line += " (each step a fresh batch at a fixed rate: over so few the loss may rise; the steps are right)"
        if changes:  # the check hands it copies; the notebook's own training loop hands it its parameters
            stepped = [c for c in changes if c in network.parameters]
            then = ("a training loop then also steps them by that change" if stepped == changes else
                    f"a training loop then also steps {' and '.join(stepped)} by that change" if stepped else
                    "anything else that reads them then reads the changed values")
            line += (f" — but {self.exercise.training.function.name} changes {' and '.join(changes)}, which it is "
                     f"given, in place: {then}; return the gradients and change nothing it is given")
        return line

    def _steps(self, function, params: dict, steps: list[dict], lr: float):
        """The student's SGD steps as the grader's sandbox drives them: (losses, final parameters), or the
        line that says why they stopped."""
        network, declared = self.exercise.network, self.exercise.training.function
        losses = []
        for step, data in enumerate(steps, start=1):
            with torch.no_grad():
                values = network.forward(params, data)
                given = declared.call_arguments(values)
                try:
                    grads = function(*given)
                except Exception as exc:
                    return (f"WRONG: {declared.name} raised {type(exc).__name__} at training step {step}: "
                            f"{str(exc)[:300]}{dtype_note(str(exc), declared.name)}{_globals_read(function)}")
                self._changes_given |= {k for argument in given if isinstance(argument, dict)
                                        for k, v in argument.items() if not torch.equal(v, values[k])}
            if grads is None or (isinstance(grads, dict) and all(v is None for v in grads.values())
                                 and all(grads.get(k) is None for k in params)):
                return "not attempted yet"
            bad = [k for k in params if not isinstance(grads, dict) or type(grads.get(k)) is not torch.Tensor
                   or grads[k].shape != params[k].shape]
            if bad:
                return "WRONG: " + Status.BAD_STEP.text.format(step=step, function=declared.name, parameter=bad[0]) \
                    + (f" (its shape is {tuple(grads[bad[0]].shape)}, {bad[0]}'s is {tuple(params[bad[0]].shape)})"
                       if isinstance(grads, dict) and isinstance(grads.get(bad[0]), torch.Tensor) else
                       f" (it returns no {bad[0]!r}; its keys: {', '.join(repr(k) for k in list(grads)[:8])})"
                       if isinstance(grads, dict) and bad[0] not in grads else
                       f" (it returns a {type(grads).__name__}, not a dict of gradients by parameter name)"
                       if not isinstance(grads, dict) else "")
            losses.append(values[network.loss])
            params = _step(params, grads, lr)
        return torch.stack(losses), params

    def _first_wrong_gradient(self, function, params: dict, steps: list[dict], lr: float) -> str:
        """Which gradients made the run part from autograd's: those the function returns that are not
        autograd's at the same parameters, at the first step of the student's own run where any is not
        (a loss parts some steps after the gradient that moved it, and names none)."""
        network, declared = self.exercise.network, self.exercise.training.function
        tol = self.tolerance
        for step, data in enumerate(steps, start=1):
            with torch.no_grad():
                grads = function(*declared.call_arguments(network.forward(params, data)))
            leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
            truth = torch.autograd.grad(network.forward(leaves, data)[network.loss],
                                        [leaves[k] for k in network.parameters])
            wrong = [(key, expected) for key, expected in zip(network.parameters, truth, strict=True)
                     if not compare(grads[key].detach().to(expected.dtype), expected, rtol=tol.rtol,
                                    atol=tol.atol).passed]
            if wrong:
                names = [f"d{key}" for key, _ in wrong]
                named = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
                return (f"; the gradients behind it: your {named} from {declared.name} "
                        f"{'is' if len(names) == 1 else 'are'} not autograd's at step {step} "
                        f"({self._off_by(*wrong[0], grads, {**params, **data})})")
            params = _step(params, grads, lr)
        return ""

    def _off_by(self, key: str, expected: torch.Tensor, grads: dict, values: dict) -> str:
        """How a gradient of the run differs from autograd's, where a factor says it (a size written into
        the function, `n = 32`, and the mean's 1/n left out: its own lines above stop on the self-check's
        batches and say nothing of this one); else the lines above."""
        got = grads[key].detach().to(expected.dtype)
        scale = float((expected * expected).sum())
        factor = float((got * expected).sum()) / scale if scale else 0.0
        if not factor or abs(factor - 1) < 1e-4 or \
                float((got - factor * expected).abs().max()) > 1e-6 * max(float(got.abs().max()), 1e-12):
            return "their lines above say how"
        try:
            sizes = self.exercise.sizes_of(values)
        except Exception:  # noqa: BLE001 - sizes that do not read off these tensors: the factor alone
            sizes = {}
        size = next((f": {k} is {v}" for k, v in sizes.items()
                     if v > 1 and min(abs(factor - v), abs(1 / factor - v)) < 1e-6 * v), "")
        return f"on this run's batches, your d{key} is {factor:.4g} times autograd's{size}"

    def _differs(self, mine: torch.Tensor, final: dict, losses: torch.Tensor, expected: dict,
                 lr: float) -> str | None:
        """Where the student's run parts from autograd's, judged as the grader judges it."""
        tol = self.tolerance
        atol = trajectory_atol(tol.atol, lr, len(losses))
        for step, (a, b) in enumerate(zip(mine.tolist(), losses.tolist(), strict=True), start=1):
            if abs(a - b) > tol.atol + tol.rtol * abs(b):
                return (f"diverges from autograd at step {step}: loss {a:.6f} with your gradients, {b:.6f} with "
                        "autograd's")
        for name, value in expected.items():
            comparison = compare(final[name], value, rtol=tol.rtol, atol=atol)
            if not comparison.passed:
                return (f"after {len(losses)} steps the losses agree but {name} differs from autograd's: "
                        f"{comparison.message}")
        return None

    def _alone(self):
        """The training function as the grader runs it: its cell on its own, with only torch and F (None where
        neither the cell nor the function is known)."""
        function = self.exercise.training.function
        answer = next(a for a in self.exercise.answers if self.exercise.function_of(a) is function)
        source = self.source(answer)
        defined = (self.namespace or {}).get(function.name)
        ns = {"__builtins__": cell_builtins(), **NAMESPACE}
        if source is not None:
            exec(compile(source, f"<answer cell {function.cell}>", "exec"), ns)
        elif callable(defined):  # no history: the same code, cut off from the notebook's globals
            ns[function.name] = type(defined)(defined.__code__, ns, defined.__name__, defined.__defaults__,
                                              defined.__closure__)
        return ns.get(function.name) if callable(ns.get(function.name)) else None

    def _training_alone(self, lr: float, steps: int) -> str | None:
        """The run the grader makes: the function's cell on its own, on batches of other sizes."""
        function = self.exercise.training.function
        alone = self._alone()
        if alone is None:
            return None
        # Trained on a configuration drawn as the grader draws its own (every size above the lecture's), so that the
        # two agree on a size hard-coded in the function
        try:
            training = prepare_training(training_config(self.spec, SALT), steps, lr)
        except TrainingNotFinite:  # the grader stops on it, as the instructor's to mend: no student's verdict
            return None
        ran = self._steps(alone, dict(training.params), steps_of(training.data), lr)
        failed = ran.removeprefix("WRONG: ") if isinstance(ran, str) else \
            self._differs(ran[0], ran[1], training.losses, training.final, lr)
        if not failed:
            return None
        show = self.exercise.mistakes.show
        sizes = ", ".join(f"{show(k)}={v}" for k, v in training.config.sizes.items())
        return (f"run on its own ({function.name}'s cell with only torch and F) on a batch of other sizes "
                f"({sizes}), as the grader runs it: {failed} (a size or a name read from the notebook?)")


# The notebook's SelfCheck, by the id of its namespace: built by the first check cell from the notebook's COURSE.
_NOTEBOOKS: dict[int, tuple[str, SelfCheck]] = {}


class NotebookCheck:
    """What a check cell's `check("dx")` runs (grader.student.check, which the cell imports, hands it the
    notebook's namespace once the setup has run).

    It takes the answer and autograd's tensor by name from the notebook's namespace (the caller's
    globals), so the cell itself evaluates nothing of the student's: a name never assigned, a kernel
    restarted before the setup ran, a skipped cell, a value that raises when read each give one line
    saying what to run or fix, never a traceback (a raising check cell is a failed test to nbgrader,
    and after a syntax error in one answer cell every later check cell raised). A function's answers are
    read from the dict `answers` names, autograd's from the dict of leaves `gradients_of` names.
    Notebooks of grader 0.1 and 0.2 call a SelfCheck they build, with the values: that still works."""

    def line(self, grade_id: str, namespace: dict, answers: str | None = None,
             gradients_of: str | None = None) -> str:
        with _quiet(), _as_the_grader() as kernel:
            said = _kernel_note(self._as_saved(self._line(grade_id, namespace, answers, gradients_of), grade_id,
                                               namespace), kernel, _answer_code(namespace, grade_id))
        # The fifteenth trial's check cell of one answer edited to check the answer above it: that one's line, and
        # nothing said of the answer left unchecked
        running = _RUNNING["cell"] or ""
        other = running.removeprefix("check_")
        if running.startswith("check_") and other != grade_id and other in _answer_grade_ids(namespace) \
                and f'restore `check("{other}")`' not in said:  # said once (the twentieth trial's line said it twice)
            said += (f"; but this is {other}'s check cell, edited to check {grade_id}: {other} is not checked here "
                     f"(restore `check(\"{other}\")`)")
        return said

    @staticmethod
    def _as_saved(said: str, grade_id: str, namespace: dict, whole: bool = False) -> str:
        """The line, WRONG as saved where the notebook's file holds the answer's cell blank, or an attempt
        the grader gives less than the line says of the kernel's run: whatever the line found (right, half,
        right under a wrong answer above), the grader grades the file. `whole`: the training run's line,
        `grade_id` one of its function's answers."""
        label, bar, text = said.partition("|")
        text = text.strip()
        share = share_said(text)
        if share is None and not text.startswith(("not checked", "not run yet")):
            # No verdict of its own (a stale value to re-run) and no "not checked": read as a line the grader accepts
            # (README), so the file's verdict is said where it is less (the fifteenth trial's stale lines over cells
            # the saved notebook held blank)
            share = 1.0
        if not bar or share is None or "WRONG as saved" in text or "as your saved notebook holds it" in text or \
                text.startswith("WRONG: your saved notebook"):  # its copies, or none (`_copies`)
            return said  # a line whose verdict is the file's already
        second = _second_notebook(namespace)
        if second is not None:
            try:
                found = _notebook_check(namespace)
                answer = None if isinstance(found, str) else found.exercise.by_grade_id.get(grade_id)
                return said if answer is None else _in_second(found, answer, label, text, share, second, whole)
            except Exception:  # noqa: BLE001 - a check cell never raises: the line as found
                return said
        if share < 1:
            try:
                found = _notebook_check(namespace)
                answer = None if isinstance(found, str) else found.exercise.by_grade_id.get(grade_id)
                kept = "" if answer is None else found._saved_better(answer, share, whole)
            except Exception:  # noqa: BLE001 - a check cell never raises: the line as found
                return said
            if kept or not share:  # in a copy, which one the course grades (the twenty-second trial's WRONG in a copy)
                note = _not_collected(namespace)[0] if not kept and text.startswith("WRONG") else ""
                return said + kept + (f"; and {note}" if note else "")
        try:
            found = _notebook_check(namespace)
            answer = None if isinstance(found, str) else found.exercise.by_grade_id.get(grade_id)
            unsaved = "" if answer is None else found._unsaved(answer, share, whole)
        except Exception:  # noqa: BLE001 - a check cell never raises: the line as found
            return said
        if unsaved:
            # The kernel's verdict first (a mistake in this cell, or right work), the file's after it: the two
            # student trials read "WRONG as saved" first, over a right answer, as noise until autosave, and found a
            # real mistake buried behind "save it"
            return f"{label}| {text}{_but(text)} WRONG as saved: {unsaved}"
        if answer is None:
            return said
        blank = _unconfirmed_saved(namespace, found, answer, whole, share)
        if blank:  # a line without WRONG is one the grader accepts, and this file's cell gets nothing
            return f"{label}| {text}{_but(text)} WRONG as saved, {blank}"
        note, collected = _not_collected(namespace)
        if not note:
            return said
        if _collected_share(found, answer, collected, whole) < share:  # what the course grades gets less
            return f"{label}| {text}{_but(text)} WRONG as saved in the notebook the course collects: {note}"
        return f"{said}; but {note}"

    def _line(self, grade_id: str, namespace: dict, answers: str | None = None,
              gradients_of: str | None = None) -> str:
        label = f"{grade_id:<15s}|"
        try:
            found = _notebook_check(namespace)
            if isinstance(found, str):
                return f"{label} not checked: {found}"
            answer = found.exercise.by_grade_id.get(grade_id)
            if answer is None:  # a check cell edited (the fifteenth trial's `check('dprob')`)
                near = difflib.get_close_matches(grade_id, list(found.exercise.by_grade_id), n=1)
                meant = f": this check cell was edited; restore `check(\"{near[0]}\")`" if near else ""
                return f"{label} not checked: {grade_id} is not an answer of exercise {found.exercise.name}{meant}"
            # Copies first: whichever copy ran or was edited, the grader gives nothing (the tenth trial's copy run,
            # saved, was told to be run again, which changes nothing)
            copies = self._copies(answer, namespace)
            if copies:
                return f"{label} WRONG: {copies}"
            edited = found.edited(answer)
            if edited:
                return f"{label} {edited}"
            if answer.kind == FUNCTION:  # run in a namespace of its own, at sizes of its own: no size of the notebook's
                # but called by the notebook's cell, with the notebook's torch and F (the sixteenth trial's F = 9.81)
                given = self._rebound_given(found, namespace, batch=False)
                return f"{label} not checked: {given}" if given else \
                    self._function_line(found, answer, namespace, answers, gradients_of)
            # A blank answer is not attempted, whatever else a cell changed (the fifteenth trial's "your n is 3" on
            # every blank cell below the slip)
            rebound = "" if answer.variable in namespace and namespace[answer.variable] is None else \
                self._rebound_given(found, namespace) or self._rebound_size(found, namespace, answer) or \
                self._rebound_parameter(found, answer, namespace)
            if rebound:
                return f"{label} not checked: {rebound}"
            tensor = namespace.get(answer.source)
            if any(not isinstance(namespace.get(p), torch.Tensor) for p in found.exercise.network.parameters):
                return f"{label} not checked: {SETUP}"  # the forward pass's cell would stop too
            if not isinstance(tensor, torch.Tensor):
                return (f"{label} not checked: {answer.source} is not defined: run the forward pass's cell (the one "
                        "that calls backward()) first")
            located = found.located(answer)
            ran = located[1] if located is not None and located[1] is not None else \
                max((count for count, cell in _IDS.items() if cell == answer.cell_id), default=0)
            refused = found._refusal(located[0]) if ran in _INTERRUPTED and located is not None else None
            if refused:  # refused before it runs, however fast (the seventeenth trial's `import time` in it)
                return f"{label} {refused}"
            if ran in _INTERRUPTED:  # its code is not run here (the fifteenth trial's), nor its partial value judged
                held = "is not assigned" if answer.variable not in namespace else "holds what it had then"
                # (not run again here: it was slow enough to interrupt; the eighteenth trial's "run it to the end"
                # would have taken minutes, and then been past the grader's limit)
                return (f"{label} not checked: {answer.cell_id}'s cell was interrupted (Kernel > Interrupt) when it "
                        f"last ran, so {answer.variable} {held}: run it to the end, then this check, if it ends within "
                        f"the grader's time limit ({found.cell_timeout:g} s a run); a cell slower than that the grader "
                        "stops and gives nothing: make it faster (a Python loop over every entry is the usual cause: "
                        "write it with tensor operations)")
            if answer.variable in namespace:
                return found.line(grade_id, namespace[answer.variable], tensor)
            if found.source(answer) is None:
                refused = found._saved_refusal(answer, None)
                if refused:  # its run stopped before it assigned (an instructor trial's `%time dsim = ...` that raised
                    # was told to run its cell again): what the grader says of the cell the file holds
                    return f"{label} {refused}"
                misnamed = self._misnamed(found.exercise, answer, namespace)
                saved = _saved_code(namespace, answer.cell_id)
                instead = self._assigns_instead(found, answer, saved[0]) if saved is not None else None
                if instead:  # the file's cell binds another name: the grader finds no answer there
                    return (f"{label} WRONG: {answer.cell_id}'s cell as your saved notebook holds it "
                            f"{instead.removeprefix('its answer cell ')}")
                if misnamed.startswith(": run its answer cell") and saved is not None and _blank(saved[0]):
                    return f"{label} not attempted yet"  # the released blank, saved: nothing to run
                if misnamed.startswith(": run its answer cell") and _below_its_check(namespace, answer):
                    # moved below its check (the twentieth trial's "run its answer cell above", where none is)
                    misnamed = (": its answer cell is below this check in your saved notebook (Run All runs this "
                                "check first): move it back above this check, run it, then this check")
                return (f"{label} not run yet: {answer.variable} has not been assigned since the kernel started"
                        f"{misnamed}")
            verdict = found.line(grade_id, None, tensor)
            if "WRONG" in verdict:
                return verdict
            if answer.kind == FUSED:
                given = next((g for g in answer.local_upstream if namespace.get(g) is None), None)
                if given is not None:  # a fused cell's upstream comes from the read-only cell above it
                    return (f"{label} not checked: {answer.variable} is not assigned: its answer cell stopped with an "
                            f"error when it last ran, reading {given}, which the read-only cell just above it sets "
                            f"(autograd's value, so that an earlier exercise cannot spoil this one): run that cell, "
                            "then the answer cell again")
            upstream = self._blank_upstream(found.exercise, answer, namespace)
            if upstream is not None:
                why = self._deleted_and_blank(found, answer, *upstream) or self._stopped_at(found, namespace, *upstream)
                source = found.source(answer)
                # The grader runs each cell on the true gradients above it: a cell that stopped only for want of
                # one is judged on its own code, as the grader judges it
                if source is not None and not _blank(source) and found._code_verdict(answer, source) is None:
                    return (f"{label} {answer.variable} is not assigned here, but this cell itself is right (as the "
                            f"grader runs it, on the true gradients above it): {why}")
                return f"{label} not checked: {answer.variable} is not assigned: {why}"
            elsewhere = self._assigns_instead(found, answer)
            if elsewhere:
                # The cell its front end named: what the grader grades there, which finds no answer in it
                told = found.located(answer)
                verdict = "WRONG" if told is not None and told[1] is None and not told[2] else "not checked"
                return f"{label} {verdict}: {answer.variable} is not assigned: {elsewhere}"
            if not verdict.endswith("| not attempted yet"):  # a note on the code as the grader runs it
                return verdict
            return f"{label} not checked: {answer.variable} is not assigned: {self._unassigned(found, answer)}"
        except Exception as exc:  # a check cell never raises, whatever the notebook holds
            return f"{label} not checked: reading your answer raised {type(exc).__name__}: {str(exc)[:200]}"

    @staticmethod
    def _rebound_given(found: SelfCheck, namespace: dict, *, batch: bool = True) -> str:
        """A name every answer cell is given that a cell has since bound to something else: a module (`F = 9.81`)
        or the batch the forward pass read (`Yb = Yb.float()`, `Xb = Xb[:5]`). Each answer reading it then stops or
        is computed from another batch, however right its code, and the grader, which gives each cell its own,
        grades that code right: the fifteenth trial's lines said "run it again", "reading your answer raised
        IndexError", or blamed n. `batch`: the batch too (a function's answers run on batches of their own)."""
        history = namespace.get("In") or []

        def where(name: str) -> str:
            count = next((i for i in range(len(history) - 1, 0, -1) if isinstance(history[i], str)
                          and _assigns(history[i], frozenset({name}))), None)
            return "a cell" if count is None else f"the cell you ran as In[{count}]"

        for name in NAMESPACE:
            if name in namespace and namespace[name] is not NAMESPACE[name]:
                module = getattr(NAMESPACE[name], "__name__", name)
                return (f"your {name} is not {module} any more: {where(name)} assigned {name} since (give that value "
                        f"another name): run `import {module} as {name}`" if module != name else
                        f"your {name} is not the module {name} any more: {where(name)} assigned {name} since (give "
                        f"that value another name): run `import {name}`") + \
                    ", then the answer cells that stopped and this check"
        for name, (tensor, version) in _BATCH.items() if batch else ():
            now = namespace.get(name)
            if now is not tensor or now._version != version:
                did = "assigned" if now is not tensor else "changed"
                return (f"your {name} is not the batch the forward pass read any more: {where(name)} {did} {name} "
                        "since (give that value another name): re-run the setup cells from the one that draws the "
                        "batch down, then the answer cells and this check")
        return ""

    @staticmethod
    def _rebound_size(found: SelfCheck, namespace: dict, answer: Answer | None = None) -> str:
        """A size the notebook's forward pass defines from a tensor's shape (a batch size) that a cell has since
        assigned another value: every answer reading it is then computed at the wrong size, however right its
        code, and the grader, which sets the sizes itself, grades that code right. Not `answer`'s own cell where
        it binds the size before it reads it (a student trial's dC looping `for n in range(...)`, left unjudged):
        the grader's run binds it the same way, so its value here is the grader's."""
        exercise = found.exercise
        for size, code in exercise.network.sizes.items():
            value = namespace.get(size)
            if not isinstance(value, int) or isinstance(value, bool):
                continue
            try:
                expected = eval(compile(code, "<size>", "eval"), {"__builtins__": {}}, dict(namespace))  # noqa: S307
            except Exception:  # noqa: BLE001 - the forward pass not run yet: the other lines say what to run
                continue
            if isinstance(expected, int) and expected != value:
                history = namespace.get("In") or []
                count, cell = _assigned_in(namespace, exercise, size)
                own = found.located(answer) if answer is not None and count is not None else None
                if own is not None and count in (own[1], max((c for c, i in _IDS.items() if i == answer.cell_id),
                                                             default=None)) \
                        and size not in ((_first_uses(own[0]) or ((), (size,)))[1]):
                    continue
                answer_cells = {a.cell_id for a in exercise.answers}
                # An answer cell runs again with the answers: the line comes out first (the fourteenth trial's
                # `n = 3` in an answer cell, set back and set again by the re-run the line asked for)
                answer = count is not None and (_IDS.get(count) in answer_cells or count not in _IDS and bool(
                    _cells_by_code(found.spec, history[count])))
                kept = count is not None and _kept(namespace, history[count])
                out = f"take the line that assigns {size} out of that answer cell, " if answer else \
                    (f"delete that cell or name its value otherwise than {size} (your saved notebook keeps it, and Run "
                     "All runs it again), ") if kept else ""
                return (f"your {size} is {value}, but the forward pass's is {expected} ({size} = {code}): {cell} "
                        f"assigned {size} since (a loop variable or a slip); {out}set it back (run `{size} = {code}`), "
                        "then re-run the answer cells that read it and this check")
        return ""

    @staticmethod
    def _rebound_parameter(found: SelfCheck, answer: Answer, namespace: dict) -> str:
        """A parameter is a leaf the forward pass read; `W2 = W2.T` in an answer cell leaves a computed tensor, and
        every answer whose gradient it changes is judged against the wrong one. One whose gradient it leaves as
        autograd's is judged (the thirteenth trial's `w = w * 1.0` withheld every later verdict, a fused
        exercise's too)."""
        rebound = [p for p in found.exercise.network.parameters
                   if isinstance(namespace.get(p), torch.Tensor) and not namespace[p].is_leaf]
        if not rebound:
            return ""
        try:  # the forward pass run on the parameters as they are now (a transposed one stops it)
            case = found.notebook_case()
        except Exception:  # noqa: BLE001 - then every answer is judged against the wrong gradient
            case = None
        tensor, truth = namespace.get(answer.source), None if case is None else case.truth.get(f"d{answer.source}")
        grad = tensor.grad if isinstance(tensor, torch.Tensor) and (tensor.is_leaf or tensor.retains_grad) else None
        if grad is not None and truth is not None and grad.shape == truth.shape and compare(
                grad.detach().to(torch.float64), truth.to(torch.float64), rtol=1e-6, atol=1e-9).passed:
            return ""
        name = rebound[0]
        # `w = w.T` then `dx = dy @ w`: taking the line out leaves a shape error; the expression goes where
        # the parameter is read (the fifteenth trial's, which the grader grades right)
        history = namespace.get("In") or []
        value = next((v for code in reversed(history) if isinstance(code, str) and _assigns(code, frozenset({name}))
                      for v in _assigned_values(code, name)), None)
        fix = f"write `{value}` where that cell reads {name}, not `{name} = {value}`" if value is not None and \
            name in _reads(value) else "take that line out"
        return (f"your {name} is not the parameter the forward pass read any more: "
                f"{_assigned_in(namespace, found.exercise, name)[1]} assigned {name} = ... (an "
                f"answer cell may read a parameter, never assign it): {fix}, re-run the setup cells from the "
                "parameters' down, then the answer cells and this check")

    @staticmethod
    def _copies(answer: Answer, namespace: dict) -> str:
        """What the grader finds of the answer's cell in the saved notebook, where that is not one answer: the
        cell deleted, or copied (the copy keeps its grade id) with other code in a copy. Copies of the same
        code, or emptied to comments, are one answer, as the grader takes them. "" where it is one answer or
        no saved notebook is known: the kernel's value is then what there is to judge."""
        saved = _saved_answers(namespace, answer.cell_id)
        if saved is None:
            return ""
        if not saved:
            return (f"your saved notebook has no {answer.cell_id} answer cell (deleted?), so the grader finds no "
                    f"answer for it and gives nothing, whatever the kernel holds: restore the cell (Edit > Undo "
                    "Cell Operation, or copy it from the released notebook) and save")

        def meant(code: str) -> bool:
            try:
                return bool(ast.parse(code).body)
            except SyntaxError:
                return True
        kept = [code for code in saved if meant(code)]
        if any(not _same_code(code, kept[0]) for code in kept[1:]):
            return (f"your saved notebook holds {len(saved)} copies of the {answer.cell_id} answer cell (a copied "
                    "cell keeps its grade id) with different code: the grader cannot tell which is your answer and "
                    "gives nothing for it: delete the copies you do not mean, keeping one, and save")
        return ""

    @staticmethod
    def _assigns_instead(found: SelfCheck, answer: Answer, source: str | None = None) -> str | None:
        """Where the answer's cell (as it ran, or `source`) binds other names than its answer: a forward value
        for its gradient (a typo, `x = ...` for `dx = ...`, which also leaves that value no longer the forward
        pass's), or any other."""
        uses = _first_uses(source or found.source(answer) or "")
        if uses is None or answer.variable in uses[0] or not uses[0]:
            return None
        network = found.exercise.network
        forward = sorted(uses[0] & {*network.intermediates, *network.parameters, *network.data})
        if forward:
            return (f"its answer cell assigns {', '.join(forward)}, a value of the forward pass, and never "
                    f"{answer.variable}: write `{answer.variable} = ...`, then re-run the forward pass's cell "
                    f"({forward[0]} is not the forward pass's any more) and the answer cells from there")
        return (f"its answer cell assigns {', '.join(sorted(uses[0])[:4])} and never {answer.variable}: the grader "
                f"finds no {answer.variable} there, and gives nothing")

    @staticmethod
    def _unassigned(found: SelfCheck, answer: Answer) -> str:
        """Why a cell that last ran, and assigns its answer, left none: it stopped with an error, or a later
        cell deleted the name (the twelfth trial's `del dx`, told as a cell that stopped)."""
        deleted = found.deleted(answer)
        if deleted:
            return f"{_deleted_by(*deleted, 'it', answer.variable)} run {answer.cell_id}'s cell again, then this check"
        source = found.source(answer) or ""
        uses = _first_uses(source)
        if uses is not None and answer.variable in uses[0] and not _blank(source):
            # The line found nothing wrong with it: run as the grader runs it, it is right, and what stopped it
            # was a value above it then (a shape a wrong answer gave), which a note names while still wrong.
            said = ("its answer cell stopped with an error when it last ran, on the values above it then; as the "
                    "grader runs it (with the true upstream gradients) this cell itself is right: ")
            reads = [g for g in answer.upstream if g in _reads(source)]
            namespace, case = found.namespace or {}, found.notebook_case()
            # An answer above in another dtype than its tensor's, right to its own precision (accepted), stops a
            # product with a float64 tensor here, and every line above it is right (the eleventh trial's circle)
            def typed(g: str) -> bool:
                return isinstance(namespace.get(g), torch.Tensor) and isinstance(namespace.get(g[1:]), torch.Tensor) \
                    and namespace[g].dtype != namespace[g[1:]].dtype

            other = next((g for g in reads if typed(g)), None)
            if other is not None:
                # back to the answer the dtype came from: dlse = dlogp.clone() is float32 because dlogp is
                carried = [other]
                while (up := next((g for a in found.exercise.answers if a.kind == ATOMIC and a.variable == carried[-1]
                                   for g in a.local_upstream if typed(g)), None)) is not None and up not in carried:
                    carried.append(up)
                first, via = carried[-1], carried[:-1][::-1]
                through = f" ({', '.join(via)}, computed from it, too)" if via else ""
                return (f"{said}{first} above is {namespace[first].dtype}{through}, where {first[1:]} is "
                        f"{namespace[first[1:]].dtype}, and a product of the two stops (its line accepts it, right "
                        f"to its precision): make {first} in {first[1:]}'s dtype (no .float(); torch.zeros_like), "
                        f"then run the cells from {first}'s down to this one")
            if case is not None and reads and all(
                    g in case.truth and compare(namespace.get(g), case.truth[g], rtol=found.tolerance.rtol,
                                                atol=found.tolerance.atol).passed for g in reads):
                error = NotebookCheck._stops_now(source, namespace)
                if error is None and _saved_below(namespace, FORWARD_CELL, answer.cell_id):
                    return (f"{said}your saved notebook holds it above the setup cells, so Run All runs it before the "
                            "forward pass it reads: move it back below them, run it, then this check")
                if error is None:
                    return f"{said}what it reads is right now: run it again"
                return (f"its answer cell stops with an error on what it reads now too ({error}), though every value "
                        "it reads is right; as the grader runs it (with the true upstream gradients) this cell itself "
                        f"is right{_layout(error, reads, namespace)}")
            if not reads:  # no answer above it to wait for: what it read was not there yet (the twenty-second trial's)
                if _saved_below(namespace, FORWARD_CELL, answer.cell_id):
                    return (f"{said}your saved notebook holds it above the setup cells, so Run All runs it before the "
                            "forward pass it reads: move it back below them, run it, then this check")
                if NotebookCheck._stops_now(source, namespace) is None:  # its place unknown: both fixes said
                    return (f"{said}it ran before what it reads was there: if its cell is above the setup cells, move "
                            "it back below them (Run All runs the cells in the notebook's order), then run it again")
            return f"{said}run it again once the answers above it are right"
        return "its answer cell stopped with an error when it last ran; run the cells above it, then it"

    @staticmethod
    def _deleted_and_blank(found: SelfCheck, answer: Answer, read: str, first: str) -> str:
        """Where a cell deleted the answer after its cell ran, and an answer above it holds nothing now: both, each
        by the cell that did it (the twenty-second trial's line took the deleted answer for a cell that stopped on the
        blank one, and said to answer that one, answered and set to None since)."""
        deleted = found.deleted(answer)
        if not deleted:
            return ""
        above = next(a for a in found.exercise.answers if a.kind == ATOMIC and a.variable == first)
        other = found._reassigned(above) if first in (found.namespace or {}) else None
        if other is None and first in (found.namespace or {}):  # told by its code: the newest run, a `dx = None`
            ran = found.located(above)
            other = f"the cell you ran as In[{ran[1]}]" if ran is not None and ran[1] is not None and _blank(ran[0]) \
                else None
        which = read if read == first else f"{read} (and the answers above it up to {first})"
        if other is not None:
            blank = f"{other} set {first} to None after its cell ran, so {which} above holds nothing: re-run {first}'s"
        else:
            blank = f"{which} above holds nothing: answer {first}, or run its"
        return (f"{_deleted_by(*deleted, 'it', answer.variable, then=False)}; and {blank} cell, then the cells from "
                f"{first}'s down to this one")

    @staticmethod
    def _stops_now(source: str, namespace: dict) -> str | None:
        """The error the cell's code raises when run now on copies of what it reads (strides kept), or None:
        right values can still stop it (`.view` of a transpose's view), and "run it again" would stop again (the
        fourteenth trial's F7)."""
        ns = {"__builtins__": cell_builtins(), **NAMESPACE}
        ns.update({k: v.clone() if isinstance(v, torch.Tensor) else v
                   for k, v in namespace.items() if k in _reads(source) and k not in NAMESPACE})
        try:
            with _time_limit(Limits.cell_timeout):
                exec(_compiled(source, "<answer cell>"), ns)
        except _Slow:
            return f"it runs past the grader's time limit, {Limits.cell_timeout:g} s"
        except Exception as exc:  # noqa: BLE001 - the student's code: any error is what to say
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}".rstrip(": ")
        return None

    @staticmethod
    def _blank_upstream(exercise: Exercise, answer: Answer, namespace: dict) -> tuple[str, str] | None:
        """(the answer the cell reads that holds nothing, the first such one up the chain from it): why a
        cell that reads it stopped, and every cell below it (Run All with one answer left blank)."""
        read = first = None
        while True:
            blank = next((g for g in answer.local_upstream if namespace.get(g) is None), None)
            answer = next((a for a in exercise.answers if a.kind == ATOMIC and a.variable == blank), None)
            if answer is None:
                return None if first is None else (read, first)
            read, first = read or blank, blank

    @staticmethod
    def _stopped_at(found: SelfCheck, namespace: dict, read: str, first: str) -> str:
        """Why the cell stopped, reading `read`, empty as the answers above it are up to `first`: to answer
        where `first`'s cell is still blank (or not known), to run where it holds an answer the kernel has not
        run (after a restart)."""
        answer = next(a for a in found.exercise.answers if a.kind == ATOMIC and a.variable == first)
        other = found._reassigned(answer) if first in namespace else None
        if other is not None:  # attempted: another cell (a fused exercise's blank) set it to None after it ran
            which = f"{read} above, which is None" if read == first else \
                f"{read} above, which is not assigned, nor are the answers above it up to {first}, which is None"
            return (f"its answer cell stopped with an error when it last ran, reading {which}: {other} assigned "
                    f"{first} after its own cell ran; re-run {first}'s cell, then the cells from it down to this one")
        saved = _saved_code(namespace, answer.cell_id)
        do = "answer" if first in namespace or saved is None or _blank(saved[0]) else "run the cell of"
        state = "is not attempted yet" if first in namespace else "is not assigned either"
        above = f"{read} above, which {state}" if read == first else \
            f"{read} above, which is not assigned either, nor are the answers above it up to {first}"
        source, case = found.source(answer), found.notebook_case()
        behind = found._wrong_upstream(answer, source, case) if first not in namespace and source is not None \
            and case is not None else ()
        # Its cell ran and stopped on a value above it of a wrong shape (a missing keepdim's): run again, it stops
        # again; the answer to fix is the first of the wrong shape. Wrong values alone stop no cell: the error is
        # the cell's own, and a wrong answer above is said beside it.
        own = found._own_error(answer, source) if behind else None
        if own:  # it stops on the true values too: its own error, whatever is wrong above it (the twentieth trial's)
            return (f"its answer cell stopped with an error when it last ran, reading {above}: {first}'s cell stops on "
                    f"an error of its own, with the true values above it too ({own}): fix that cell, then run the "
                    f"cells from {first}'s down to this one ({behind[-1]} above it is wrong too)")
        shaped = [g for g in behind if _misshapen(namespace.get(g), case.truth[g])]
        if shaped:
            also = f" ({behind[-1]} above it is wrong too)" if behind[-1] != shaped[-1] else ""
            return (f"its answer cell stopped with an error when it last ran, reading {above}, whose cell stopped "
                    f"on {behind[0]}, which is wrong{_through(behind, shaped[-1])}: fix "
                    f"{shaped[-1]} ({_misshapen(namespace[shaped[-1]], case.truth[shaped[-1]])}), then run the cells "
                    f"from {shaped[-1]}'s down to this one{also}")
        # (where the saved notebook has the answer's cell: a cell deleted from it is what to restore first)
        deleted = found.deleted(answer) if first not in namespace and (
            saved is not None or _saved_notebook(namespace) is None) else None
        if deleted:
            return (f"its answer cell stopped with an error when it last ran, reading {above}: "
                    f"{_deleted_by(*deleted, first, first)} run {first}'s cell and the cells from it down to this one")
        written = source or (saved[0] if saved is not None and not _blank(saved[0]) else None)
        instead = NotebookCheck._assigns_instead(found, answer, written) if first not in namespace and written else None
        if instead:  # it ran, and bound another name (the twelfth trial's typo, said to be an error of its own)
            return (f"its answer cell stopped with an error when it last ran, reading {above}: {first}'s "
                    f"{instead.removeprefix('its ')}; fix it, then run the cells from {first}'s down to this one")
        if behind:
            return (f"its answer cell stopped with an error when it last ran, reading {above}: the error is "
                    f"{first}'s cell's own (what it reads has the right shapes): fix the line the error names, then "
                    f"run the cells from {first}'s down to this one ({behind[-1]} above it is wrong too)")
        stopped = NotebookCheck._broken(found, answer, source, namespace) if first not in namespace else None
        if stopped:  # its cell ran and stops: running it again cannot help (the seventeenth trial's 58 lines)
            return (f"its answer cell stopped with an error when it last ran, reading {above}: {stopped}, then run "
                    f"the cells from {first}'s down to this one")
        if first not in namespace and saved is None and _saved_notebook(namespace) is not None:
            return (f"its answer cell stopped with an error when it last ran, reading {above}: your saved notebook has "
                    f"no {first} answer cell (deleted? its check says how to restore it): restore it and answer it, "
                    f"then run the cells from {first}'s down to this one")
        if first not in namespace and saved is None:  # not known whether the cell is answered: either is said
            do = "run the cell of"
            first_said = f"{first} (answer it first if it is still blank)"
        else:
            first_said = first
        return (f"its answer cell stopped with an error when it last ran, reading {above}: {do} {first_said}, then "
                f"run the cells from {first}'s down to this one")

    @staticmethod
    def _broken(found: SelfCheck, answer: Answer, source: str | None, namespace: dict) -> str:
        """Where the answer's cell ran, binding nothing, and would stop again: what to fix in it (the grader's
        refusal, or the error it raises on what it reads now), else ""."""
        if source is None:
            return ""
        refusal = static_check.check(source, found.allow)
        if refusal is not None:
            return f"{answer.cell_id}'s cell, which the grader refuses ({refusal}), stopped: fix it"
        error = NotebookCheck._stops_now(source, namespace)
        if error is None:
            return ""
        return f"{answer.cell_id}'s cell stops with an error ({error}): fix it"

    @staticmethod
    def _misnamed(found: Exercise, answer: Answer, namespace: dict) -> str:
        """Where the cell run just before this check assigned other names (`dprob = ...`, a typo): what it
        assigned, since "run its answer cell" would send the student back to a cell just run."""
        history = namespace.get("In") or []
        # the newest cell run before this check other than a check (the fourteenth trial's check run twice said
        # the second time to run the cell just run)
        at = next((i for i in range(len(history) - 2, 0, -1) if isinstance(history[i], str)
                   and "check(" not in history[i]), None)
        previous = history[at] if at is not None else ""
        uses = _first_uses(previous)
        # A gradient's name misspelt (`dprob`), not the names the setup's forward pass, run just before, assigns.
        # Nor another answer's cell (its own names), run before this check after a restart.
        known = {*found.network.intermediates, *found.network.parameters, *found.network.data,
                 *(a.variable for a in found.answers)}
        assigned = sorted(n for n in uses[0] if n not in known and (n.startswith("d") or difflib.get_close_matches(
            n, [answer.variable]))) if uses else []
        # A forward value assigned from gradients (`y = dz @ W.T` for `dy = ...`): a typo, not the forward
        # pass's cell, which reads no answer
        forward = sorted(uses[0] & {*found.network.intermediates, *found.network.parameters}) if uses else []
        gradients = {a.variable for a in found.answers}
        if forward and not assigned and len(uses[0]) <= 2 and gradients & set(_reads(previous)):
            return (f"; the cell you ran before this check (In[{at}]) assigns {', '.join(forward)}, a "
                    f"value of the forward pass, from gradients: if that is {answer.variable}'s answer cell, write "
                    f"`{answer.variable} = ...` there, then re-run the forward pass's cell ({forward[0]} is not the "
                    f"forward pass's any more) and the answer cells from there")
        # Another answer's name, of this answer's shape and not its own (`dx = ...` in dW's cell): a typo (the
        # sixteenth trial's classic Notebook, never saved: "not run yet", just after that cell ran)
        typo = next((a for a in found.answers if uses and a.variable in uses[0] and a is not answer
                     and _shape(namespace.get(a.variable)) not in {None, _shape(namespace.get(a.source))}
                     and _shape(namespace.get(a.variable)) == _shape(namespace.get(answer.source))), None)
        if typo is not None and not assigned:
            return (f"; the cell you ran before this check (In[{at}]) assigns {typo.variable}, of {answer.source}'s "
                    f"shape and not {typo.source}'s: if that is {answer.variable}'s answer cell, write "
                    f"`{answer.variable} = ...` there (the grader finds no {answer.variable} there, and gives nothing)")
        if not assigned:
            return (": run its answer cell above (after a restart the kernel holds none of your answers: run the setup "
                    "and your cells from the top, Run > Run All Above Selected Cell)")
        return (f"; the cell you ran before this check (In[{at}]) assigns {', '.join(assigned[:4])}: if "
                f"that is {answer.variable}'s answer cell, it must assign {answer.variable} (the grader finds no "
                f"{answer.variable} there, and gives nothing)")

    @staticmethod
    def _function_line(found: SelfCheck, answer: Answer, namespace: dict, answers: str | None,
                       gradients_of: str | None) -> str:
        label = f"{answer.grade_id:<15s}|"
        function = found.exercise.function_of(answer)
        if not callable(namespace.get(function.name)):
            return f"{label} {NotebookCheck._missing(found, function, function.name, namespace)}"
        returned = namespace.get(answers or "")
        if isinstance(returned, dict) and returned and answer.variable not in returned:
            keys = ", ".join(repr(k) for k in list(returned)[:8])
            return (f"{label} WRONG: {function.name} returns no {answer.variable!r} (its keys: {keys}): the grader "
                    f"reads each gradient under its parameter's name, so it finds none for {answer.variable} and gives "
                    f"nothing{found.pointer(answer.grade_id)}")
        leaves = namespace.get(gradients_of or "")
        if not isinstance(leaves, dict) or not isinstance(leaves.get(answer.source), torch.Tensor):
            return f"{label} not checked: run the cell after {function.name}'s, which calls it, first"
        returned = namespace.get(answers or "")
        if returned == {}:
            unreturned = NotebookCheck._returns_nothing(found, function, answer)
            if unreturned:
                return f"{label} WRONG: {unreturned}"
        verdict = found.line(answer.grade_id, returned.get(answer.variable) if isinstance(returned, dict) else None,
                             leaves[answer.source])
        if returned is None and "WRONG" not in verdict:
            # Running it again alone fails again where a cell above it has not run (the trial's s37).
            undefined = _undefined_in(namespace, rf"\b{re.escape(function.name)}\s*\(")
            if undefined:  # a read-only cell above it skipped (the sixteenth trial's forward function)
                return (f"{label} not checked: {answers} is not set: the cell that calls {function.name} stopped, as "
                        f"{undefined} is not defined: run the cell above that defines it, then the cell that calls "
                        f"{function.name}, then this check")
            return (f"{label} not checked: {answers} is not set: the cell that calls {function.name} stopped with an "
                    "error (its output names it): run the cells above it that it needs, then it again")
        return verdict

    @staticmethod
    def _refused(found: SelfCheck, function) -> str:
        """The function's cell refused as the grader's static check refuses it, or "": the grader then runs no
        training step, and the whole-run check scores 0 (a trial's function matched autograd here, and got 0)."""
        answer = next(a for a in found.exercise.answers if found.exercise.function_of(a) is function)
        source = found.source(answer)
        refusal = None if source is None else static_check.check(source, found.allow)
        return "" if refusal is None else f"WRONG: the grader refuses {function.name}'s cell, {refusal}"

    @staticmethod
    def _returns_nothing(found: SelfCheck, function, answer: Answer) -> str:
        """A function written out but without its `return` line (the notebook's call then hands the checks
        no gradient, as the grader finds none): what to say, or "" where the function returns something, is
        still the template's blank, or its code is not known."""
        located = found.located(answer)
        try:
            tree = ast.parse(located[0]) if located else None
        except SyntaxError:
            return ""
        defined = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                   and node.name == function.name] if tree else []
        if not defined:
            return ""
        body = defined[-1].body
        if any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(defined[-1])) or \
                not any(isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)) for statement in body):
            return ""
        return (f"{function.name} returns nothing: its cell has no `return` line, so neither this check nor the "
                "grader finds any gradient from it; end it by returning the gradients, as the template did")

    def training(self, namespace: dict, *, start: str, batches: str, lr: float) -> None:
        """The whole-run check, SelfCheck.training, with the exercise's function, the start and the
        batches taken by name from the notebook."""
        found = _notebook_check(namespace)
        if isinstance(found, str):
            print(f"{'training':<15s}| not checked: {found}")
            return
        function = found.exercise.training.function
        missing = [n for n in (function.name, start, batches) if n not in namespace]
        if missing:
            print(f"{'training':<15s}| {self._missing(found, function, missing[0], namespace)}")
            return
        # The run would be of the code the kernel holds, which the grader never sees once the cell is edited
        answer = next(a for a in found.exercise.answers if found.exercise.function_of(a) is function)
        edited = found.edited(answer)
        unreturned = self._returns_nothing(found, function, answer)
        said = edited or (f"WRONG: {unreturned}" if unreturned else self._refused(found, function))
        if said:
            print(f"{'training':<15s}| {said}")
            return
        with _quiet(), _as_the_grader() as kernel:
            line = self._as_saved(found.training_line(namespace[function.name], namespace[start], namespace[batches],
                                                      lr=lr), answer.grade_id, namespace, whole=True)
        print(_kernel_note(line, kernel))

    @staticmethod
    def _missing(found: SelfCheck, function, name: str, namespace: dict) -> str:
        """Why the whole-run check cannot start: the function's cell refused as the grader refuses it
        (a syntax error leaves the function undefined), or the cell to run."""
        if name == function.name:
            refused = NotebookCheck._refused(found, function)
            if refused:
                return refused
            saved = _saved_code(namespace, function.cell)
            if saved is not None and _blank_function(saved[0]):  # as the grader says of it (a student trial)
                return "not attempted yet"
            return (f"not checked: {function.name} is not defined since the kernel started: run its cell above, then "
                    "the cell after it, which calls it")
        undefined = _undefined_in(namespace, rf"(?m)^\s*{re.escape(name)}\s*=")
        if undefined:  # the cell that sets it stopped: a read-only cell above it skipped
            return (f"not checked: {name} is not defined: the cell that sets it stopped, as {undefined} is not "
                    f"defined: run the cell above that defines it, then the cell that sets {name}, then this check")
        return f"not checked: {name} is not defined: run the cells above this one first"


def _undefined_in(namespace: dict, pattern: str) -> str:
    """The first name that the newest cell run matching `pattern` (other than a check) reads, and the kernel has
    never had: what stopped it, where a read-only cell above it was skipped (the sixteenth trial's "run the cells
    above it that it needs", where one cell defining the forward function was the one)."""
    history = namespace.get("In") or []
    code = next((h for h in reversed(history[:-1]) if isinstance(h, str) and "check(" not in h
                 and re.search(pattern, h)), None)
    uses = _first_uses(code) if code else None
    if uses is None:
        return ""
    missing = [n for n in uses[1] - uses[0] if n not in namespace and not hasattr(builtins, n)]  # (a loop's own)
    return min(missing, key=code.find, default="")


def cleared(namespace: dict) -> str:
    """Where the setup is gone because a cell cleared the kernel's names (`%reset -f`, pasted from somewhere): that
    cell, which every Run All (Above) runs again (the fifteenth trial's "run the setup cells first", forever)."""
    history = namespace.get("In") or []
    count = next((i for i in range(len(history) - 1, 0, -1) if isinstance(history[i], str)
                  and re.search(r"run_line_magic\(['\"]reset|%reset\b|\breset_selective\b", history[i])), None)
    if count is None:
        return ""
    return (f"the cell you ran as In[{count}] cleared the kernel's names (%reset): delete it (every Run All runs it "
            f"again), then {SETUP}")


def _answer_code(namespace: dict, grade_id: str) -> str | None:
    """The code of the cell that answers `grade_id`, as the kernel ran it, or None where it is not known."""
    found = _notebook_check(namespace)
    answer = None if isinstance(found, str) else found.exercise.by_grade_id.get(grade_id)
    try:
        return None if answer is None else found.source(answer)
    except Exception:  # noqa: BLE001 - a note left on, never a check cell that raises
        return None


def _but(text: str) -> str:
    """The joint before the saved file's verdict: a line that has its own " — but" already (a change in place)
    goes on with "; and", not a second dash (a student trial read two in a row)."""
    return "; and" if " — but " in text else " — but"


def _notebook_check(namespace: dict) -> SelfCheck | str:
    """The SelfCheck of the notebook whose globals are `namespace`, built from its COURSE (the course's
    public settings, which its setup cell holds), or why there is none yet."""
    settings = namespace.get("COURSE")
    if not isinstance(settings, dict):
        return cleared(namespace) or SETUP
    key = repr(settings)
    built = _NOTEBOOKS.get(id(namespace))
    if built is None or built[0] != key:
        built = _NOTEBOOKS[id(namespace)] = (key, SelfCheck(namespace=namespace, course=settings, by_grade_id=True))
    return built[1]


check = NotebookCheck()
_listen()
