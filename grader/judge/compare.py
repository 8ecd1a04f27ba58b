"""One strict comparison of an answer with its expected gradient, shared by the self-check and the
hidden grader, so a student never sees a tensor pass one and fail the other.

Stricter than the lecture's `cmp`: that one broadcast and never looked at shapes, so five wrong-shape
answers passed it. Here the answer must be a plain floating tensor of exactly the expected
shape, finite, and close with both rtol and atol.
"""
from __future__ import annotations

import ast
import builtins
import functools
import itertools
import math
import re
from dataclasses import dataclass, field

import torch

from grader import syntax
from grader.exercise import ATOMIC, FUNCTION, FUSED, NAMESPACE, Answer, Exercise, load
from grader.judge.diagnose import NEAR_SAID, diagnose, every_row_picked, name
from grader.sandbox.protocol import as_answer
from grader.vocabulary import Broadcast, Match, Status, Transpose, dtype_note, in_place, shape_text


@dataclass(frozen=True)
class Comparison:
    """One answer compared with its expected tensor on one configuration. Not a grade id's verdict
    (grader.vocabulary.Verdict): the judge weighs the comparisons of every configuration and check into
    that."""

    status: Match
    message: str
    maxdiff: float | None = None
    hints: tuple[str, ...] = field(default_factory=tuple)
    # What failed ("type", "dtype", "layout", "shape", "finite", "values"): two comparisons that fail
    # in one aspect get the same feedback, whichever configuration showed it (see `_shown`).
    aspect: str = ""

    @property
    def passed(self) -> bool:
        return self.status.passed


# An answer of a lower precision than its gradient's (float32 from torch.zeros(shape) or .float(), where the
# forward pass is float64) is judged at its own precision: its rounding, which sums over a batch make larger
# than a float64 tolerance, passed or failed that tolerance by the data (a right dC accumulated in float32 was
# WRONG on one batch and right on the next), so a student's grade was a draw. Right to single precision is
# right; a slip moves a gradient far more than this.
LOW_PRECISION_RTOL = 1e-3


# F.one_hot given no number of classes makes as many columns as the largest index it is given, plus one: a
# batch that misses the last class gets a narrower tensor, so the cell fails on some batches and not on
# others (right on 2 of the 3 batches), which by itself points nowhere.
ONE_HOT_WIDTH = ("F.one_hot(...) given no number of classes is only as wide as the largest index in its batch, "
                 "so a batch without the last class gets too few columns: pass num_classes= (the number of classes)")


def _tree(code: str | None) -> ast.AST | None:
    """The cell's code parsed, None where it cannot be: a syntax error, and a hostile cell's chain too deep for
    the parser (the red team's input batch, where an uncaught RecursionError here failed the hidden suite)."""
    try:
        return syntax.parse(code or "")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _written(code: str | None) -> set[int] | None:
    """The integers the cell writes, None where its code cannot be read."""
    tree = _tree(code)
    return None if tree is None else {n.value for n in ast.walk(tree)
                                      if isinstance(n, ast.Constant) and type(n.value) is int}


def one_hot_unsized(code: str | None) -> bool:
    """Whether the cell calls one_hot with its indices alone."""
    tree = _tree(code)
    return tree is not None and any(
        isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "one_hot"
        and len(node.args) < 2 and not any(k.arg == "num_classes" for k in node.keywords) for node in ast.walk(tree))


def compare(answer, expected: torch.Tensor, *, rtol: float, atol: float, n: int | None = None) -> Comparison:
    """`n` is accepted and never read: grader 0.1's hidden suite, which existing courses still run,
    passes the batch size, once read by the hint for a factor of n (which now needs every configuration,
    see diagnose.diagnose)."""
    if answer is None:
        return Comparison(Match.BLANK, "not attempted yet")
    answer = as_answer(answer, expected.dim() == 0)
    if type(answer) is not torch.Tensor:
        if isinstance(answer, torch.Tensor):
            return Comparison(Match.WRONG,
                              f"is a {type(answer).__name__}, a subclass of torch.Tensor: give a plain tensor",
                              aspect="type")
        return Comparison(Match.WRONG, f"is a {type(answer).__name__}, not a torch.Tensor: the gradient is a tensor of "
                                       f"shape {shape_text(expected.shape)}", aspect="type")
    if not answer.dtype.is_floating_point:
        return Comparison(Match.WRONG, f"has dtype {answer.dtype}: a gradient is a floating-point tensor",
                          aspect="dtype")
    if answer.is_sparse or answer.layout != torch.strided:
        return Comparison(Match.WRONG, "is not a dense tensor", aspect="layout")
    if answer.is_meta:  # a shape without values: no comparison can read it
        return Comparison(Match.WRONG, "is a meta tensor: it has a shape but no values", aspect="layout")
    got = answer.detach().to(torch.float64)
    want = expected.detach().to(torch.float64)
    if got.shape != want.shape:
        hints = tuple(diagnose(got, want, rtol=rtol, atol=atol))
        message = f"shape {shape_text(got.shape)}, expected {shape_text(want.shape)}"
        if got.numel() == want.numel() and [s for s in got.shape if s != 1] == [s for s in want.shape if s != 1]:
            if torch.isfinite(got).all() and torch.allclose(got.reshape(want.shape), want, rtol=rtol, atol=atol):
                return Comparison(Match.SQUEEZABLE,
                                  message + ": right values, but a size-1 dimension is missing or extra", hints=hints,
                                  aspect="shape")
        return Comparison(Match.WRONG, message, hints=hints, aspect="shape")
    # The right answers first, in as few tensor operations as possible: a class is hundreds of
    # thousands of comparisons. An answer equal or close to a finite expectation is finite.
    if torch.equal(got, want):
        return Comparison(Match.EXACT, "exact", 0.0)
    scale = want.abs().max().item() if want.numel() else 0.0
    if torch.allclose(got, want, rtol=rtol, atol=atol) or answer.dtype.itemsize < expected.dtype.itemsize and \
            torch.allclose(got, want, rtol=LOW_PRECISION_RTOL, atol=LOW_PRECISION_RTOL * scale + atol):
        return Comparison(Match.APPROXIMATE, "approximately equal", (got - want).abs().max().item())
    if not torch.isfinite(got).all():
        bad = (~torch.isfinite(got)).sum().item()
        kinds = "NaN" if torch.isnan(got).any() else "inf"
        return Comparison(Match.WRONG, f"contains {kinds} ({bad} of {got.numel()} entries are not finite)",
                          aspect="finite")
    maxdiff = (got - want).abs().max().item() if got.numel() else 0.0
    hints = tuple(diagnose(got, want, rtol=rtol, atol=atol))
    return Comparison(Match.WRONG, f"wrong values (max abs diff {maxdiff:.3g})", maxdiff, hints, "values")


# --- one answer on every configuration: the judgement the grader and the self-check share -----------

STATUS_TEXT = {status: status.text for status in Status if status.text}

# An exception's type is shown from a hidden configuration only when it is one of Python's own: the
# cell names its own classes (`type(f"E{n}", (Exception,), {})` names one after a hidden size).
ERROR_TYPES = frozenset(name for name, value in vars(builtins).items()
                        if isinstance(value, type) and issubclass(value, BaseException))
ON_HIDDEN = "on a hidden configuration"
ON_PUBLIC = "on the notebook-sized configuration"
# What is said of a failure seen on hidden configurations only, in place of what the student's code
# would put in its text there (its error's message, its type's name, what the audit hook saw).
# Details of an outcome the parent writes from its own fixed vocabulary, safe to show for any configuration:
# the crash's fixed text (grader.sandbox.parent.CRASHES; a child cannot report Status.CRASHED).
PARENT_WORDS = ("crash",)
HIDDEN_STATUS_TEXT = {
    Status.NOT_TENSOR: "{variable} is not a torch.Tensor " + ON_HIDDEN,
    Status.SUBCLASS: "{variable} is a subclass of torch.Tensor " + ON_HIDDEN + ": give a plain tensor",
    Status.UNSENDABLE: "{variable} could not be read back " + ON_HIDDEN + " (far too large, or not a plain tensor)",
    Status.AUTOGRAD: "autograd was used at run time, which an answer must not do (seen " + ON_HIDDEN + ")",
    Status.FORBIDDEN_CALL: "the cell did what no answer needs and the grader forbids (seen " + ON_HIDDEN + ")",
    Status.BAD_STEP: "at a training step, {function} gave no tensor of the right shape for every parameter",
}


@functools.lru_cache(maxsize=64)
def hidden_sizes(configs: tuple) -> frozenset[int]:
    """Every size of these configurations and every product of them. Kept for the hidden suites of
    grader 0.1, which pass it to `outcome_text` to say that an outcome comes from a hidden configuration."""
    found = set()
    for config in configs:
        dims = tuple(config.sizes.values())
        for count in range(1, len(dims) + 1):
            found.update(math.prod(combo) for combo in itertools.combinations(dims, count))
    return frozenset(found)


def _signature(outcome) -> tuple:
    """What kind of failure an outcome that is not a tensor is: an error of one type on one line, or
    its status. Two outcomes of one kind get the same feedback, whichever configuration gave it."""
    if outcome.status == "error":
        return outcome.status, outcome.detail.get("error_type"), outcome.detail.get("line")
    return (outcome.status,)


def _public_outcome(outcome, case, cases, outcomes):
    """The outcome whose detail a student may see for `outcome` on `case`: itself on a public
    configuration; on a hidden one, the public lecture-sized run's when it failed the same way; else None
    (only a fixed description of the kind of failure may be shown). The lecture-sized run is made before
    the child holds anything of a hidden configuration (see grader.sandbox.parent.run), so nothing
    in its text can come from one."""
    if not case.config.scored:
        return outcome
    probe = next((c for c in cases if not c.config.scored), None)
    public = None if probe is None else outcomes.get(probe.config.name)
    return public if public is not None and _signature(public) == _signature(outcome) else None


def _and(words, last: str = "and") -> str:
    words = list(words)
    return ", ".join(words[:-1]) + f" {last} " + words[-1] if len(words) > 1 else "".join(words)


def _unbound_size(exercise: Exercise, error: str) -> str:
    """For a size the notebook binds no name for (no forward line reads it), how its tensors say it: an instructor
    trial's `2 * (pred - target) / N` beside `F.mse_loss` was told N is not among the names, which listed N; another's
    `n` of a loss that is a `.mean()`, where no line reads any size, was told only the names it may use."""
    found = re.fullmatch(r"name '(\w+)' is not defined", error)
    size = found.group(1) if found else None
    shown = exercise.mistakes.show(size) if size else size
    return "" if shown == size else f"the notebook binds no name {size}: write {shown} for it"


def _allowed(exercise: Exercise, answer: Answer | None = None) -> str:
    """What an answer cell may read, for a cell that read something else: a fused cell runs on its own, so
    the names the atomic cells assign are not among them (a fused cell reading an atomic cell's gradient was
    told that the variables earlier answer cells of the atomic exercise assign are allowed)."""
    net = exercise.network
    sizes = [size for size in net.sizes if exercise.mistakes.show(size) == size]  # the names the notebook binds
    names = ["the parameters", *net.data, *sizes, "the forward pass's intermediates", *NAMESPACE]
    parts = sorted({str(a.part) for a in exercise.answers if a.kind == ATOMIC})
    if answer is not None and answer.kind == FUSED:
        names.extend(answer.upstream)
        others = f", not the answers of exercise {_and(parts)}" if parts and str(answer.part) not in parts else ""
        return f"exercise {answer.part}'s cell may use only {_and(names)}{others}"
    if parts:
        names.append(f"variables assigned by earlier answer cells of exercise {_and(parts)}")
    return "answer cells may use only " + _and(names)


def _swapped_operand(error: str, shape: tuple[int, ...] | None) -> tuple[int, int, int] | None:
    """(the dimension, the size one operand has there, the gradient's) where torch's elementwise error ("The size of
    tensor a (16) must match the size of tensor b (5) at non-singleton dimension 1") quotes the two sizes of a 2-D
    gradient's shape across the dimension: an operand with the gradient's shape reversed."""
    found = re.search(r"tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)",
                      error)
    if found is None or shape is None or len(shape) != 2 or shape[0] == shape[1]:
        return None
    a, b, d = map(int, found.groups())
    if d not in (0, 1) or {a, b} != set(shape):
        return None
    return d, (a if a != shape[d] else b), shape[d]


def _size_one_inner(error: str) -> int | None:
    """The size a matrix product needs where one factor torch's error quotes ("(30x32 and 1x64)") has a dimension of
    size 1 and the other does not, between them: a sum or a mean taken too early, which no transpose fits."""
    found = re.search(r"\((\d+)x(\d+) and (\d+)x(\d+)\)", error)
    if found is None:
        return None
    rows_a, inner_a, inner_b, columns_b = map(int, found.groups())
    if (inner_a == 1) == (inner_b == 1) or 1 in (rows_a, columns_b):
        return None
    return max(inner_a, inner_b)


def _broadcast(error: str, shape: torch.Size | None) -> bool:
    """Whether the two shapes torch's matrix-product error quotes ("(32x27 and 32x1)") would broadcast, as
    for an elementwise product, to `shape` (the answer's, where the product is the cell's own): two sizes
    that happen to be equal make a forgotten transpose's shapes broadcast too (an upstream gradient times a
    weight, with as many examples as hidden units), and * is then no account of it."""
    found = re.search(r"\((\d+(?:x\d+)*) and (\d+(?:x\d+)*)\)", error)
    if found is None:
        return False
    a, b = (tuple(int(size) for size in shape.split("x")) for shape in found.groups())
    try:
        product = torch.broadcast_shapes(a, b)
    except RuntimeError:
        return False
    return shape is None or product == shape


def _function_hint(exercise: Exercise, answer: Answer, error_type: str, error: str) -> str | None:
    """What a function's cell may read, for one that read something else: its arguments, and exactly
    what each dict argument holds beyond the parameters (which the notebook names everywhere); or, for one
    that mixed dtypes, why (an instructor trial's float32 `torch.zeros(v.shape)` was a bare RuntimeError)."""
    function = exercise.function_of(answer)
    if function is None:
        return None
    if error_type == "RuntimeError" and (mixed := dtype_note(error, function.name)):
        return mixed.strip()[1:-1]
    if error_type == "NameError":
        named = re.fullmatch(r"name '(\w+)' is not defined", error)
        code = exercise.network.sizes.get(named.group(1)) if named else None
        # a hyperparameter (a number no tensor's shape says): the notebook's prose says to write its value in
        written = f"; {named.group(1)} is a number of the network, the same everywhere: write its value ({code}) in " \
            "the function" if code is not None and ".shape[" not in code else ""
        return f"{function.name} may use only its arguments, {_and(NAMESPACE)}{written}"
    dicts = [argument for argument in function.arguments if not isinstance(argument, str)]
    held = [f"the {label} holds exactly: {', '.join(names)}" for label, names in dicts
            if tuple(names) != exercise.network.parameters]
    return "; ".join(held) if error_type == "KeyError" and held else None


@dataclass(frozen=True)
class Failure:
    kind: str  # the comparison's Match (wrong, squeezable, blank) or the outcome's Status (error, timeout, ...)
    feedback: str
    mistake: str = ""  # the named mistake, or the hints, for the class report
    named: bool = False  # `mistake` names a mistake (not only hints: "right in 11 of 256 entries")


def outcome_text(outcome, answer: Answer, catalogue=None, hints: str = "named", *, exercise: Exercise | None = None,
                 public: bool = True, hidden: frozenset[int] = frozenset(), probe=None, sized: bool = False,
                 shape: tuple[int, ...] | None = None) -> Failure:
    """The failure of an outcome that is not a tensor. `catalogue(error=...)` may name the mistake that
    raises this very error. `public`: the outcome comes from a configuration whose every value a student
    may see; otherwise (and whenever `hidden`, grader 0.1's way of saying so, is given) nothing its code
    wrote is shown, only the kind of failure in fixed words. `probe`: the lecture-sized case, where the
    outcome is its own, shown for a hidden one's. `exercise`: the answer's; the hidden
    suites of grader 0.1 give none, and graded the default one. `sized`: the cell is right at the probe's
    sizes, so a product that does not fit elsewhere is a size it writes, not a missing transpose. `shape`: the
    gradient's on the configuration shown, said to an answer that is no tensor (a trial's `dnll = 1.0 / n`)."""
    exercise = exercise or load()
    public = public and not hidden
    function = exercise.function_of(answer)
    fields = {"variable": answer.variable, "status": outcome.status,
              "function": function.name if function else "the function"}
    if outcome.status == "error":
        error_type = outcome.detail["error_type"]
        if public:
            where = f" on line {outcome.detail['line']}" if outcome.detail.get("line") else ""
            where += _on_public(probe, answer, outcome.detail["error"]) if probe is not None else ""
            text = f"{error_type}{where}: {outcome.detail['error']}"
        else:
            shown_type = error_type if error_type in ERROR_TYPES else "an exception of the cell's own class"
            text = f"{shown_type} {ON_HIDDEN} (its message is not shown, since it would show that configuration)"
        named = catalogue(error=(error_type, outcome.detail["error"])) if catalogue else None
        mistake = named or ""
        reads = _function_hint(exercise, answer, error_type, outcome.detail["error"]) \
            if answer.kind == FUNCTION else None
        if named and hints != "none":
            text += f"; {named}"
        elif reads:
            text += f" ({reads})"
        elif error_type == "NameError" and (unbound := _unbound_size(exercise, outcome.detail["error"])):
            text += f" ({unbound})"
        elif error_type == "NameError":
            text += f" (uses a variable the answer cells do not have: {_allowed(exercise, answer)})"
        elif "cannot be multiplied" in outcome.detail["error"] and public and not sized:
            # Said only where the lecture-sized run raised it too: a product that fits there and not on the
            # hidden sizes is a hard-coded size, which `judge` says instead.
            mistake = Transpose.PRODUCT_SHAPES
            truth = probe.truth.get(f"d{answer.source}") if probe is not None and answer.kind != FUNCTION else None
            needed = _size_one_inner(outcome.detail["error"])
            if hints != "none" and _broadcast(outcome.detail["error"], None if truth is None else truth.shape):
                text += f"; {Transpose.PRODUCT_OR_ELEMENTWISE}"
            elif needed is not None:  # no transpose fits (a student trial's sum, keepdim=True, as a factor)
                mistake = Transpose.SIZE_ONE_FACTOR
                text += f"; {Transpose.size_one_factor(needed)}" if hints != "none" else ""
            elif hints != "none":
                whose = ("the gradient that line computes" if answer.kind == FUNCTION  # not the parameter's
                         else f"{answer.variable}'s")
                text += f"; {Transpose.product_shapes(whose)}"
        elif "must match the size of tensor" in outcome.detail["error"] and public and not sized and hints != "none":
            truth = probe.truth.get(f"d{answer.source}") if probe is not None and answer.kind != FUNCTION else None
            swapped = _swapped_operand(outcome.detail["error"], None if truth is None else tuple(truth.shape))
            # two matrices of the gradient's shape, one of them the transpose of it (a trial's `dscores.T @ a1 + reg
            # * W2`, told to give a vector a column axis)
            text += f"; {Transpose.swapped_operand(*swapped)}" if swapped else f"; {Broadcast.ELEMENTWISE_SHAPES}"
        if outcome.detail.get("limit") == "memory":
            return Failure("memory", text + "; the cell ran into the sandbox's memory limit (no gradient here "
                                            "needs more than a few megabytes)", mistake)
        return Failure("error", text, mistake)
    if not public:
        if outcome.status not in STATUS_TEXT:  # a status no child of ours sends: its word is the cell's
            return Failure(Status.BROKEN, f"unexpected result {ON_HIDDEN}")
        template = HIDDEN_STATUS_TEXT.get(outcome.status, STATUS_TEXT[outcome.status])
        # The words the sandbox itself chose (which fixed crash text): never the cell's
        said = {k: outcome.detail[k] for k in PARENT_WORDS if k in outcome.detail}
        return Failure(outcome.status, template.format(**{**said, **fields}))
    template = STATUS_TEXT.get(outcome.status, "unexpected result ({status})")
    detail = {k: "; ".join(v) if isinstance(v, list) else v for k, v in outcome.detail.items()}
    text = template.format(**{**detail, **fields})
    if outcome.status == Status.NOT_TENSOR and shape is not None:
        text += f": the gradient is a tensor of shape {shape_text(shape)}"
    return Failure(outcome.status, text)


def _compared(outcome, case, answer, check, tol) -> Comparison | None:
    if outcome is None or outcome.status != "tensor":
        return None
    return compare(outcome.tensor, case.expected(answer, check), rtol=tol.rtol, atol=tol.atol)


def _configurations(cases, wrong_on, public: bool = False) -> str:
    """What is certain about where the answer fails, when that is not everywhere."""
    scored = [c for c in cases if c.config.scored]
    if len(wrong_on) == len(scored) or not wrong_on:
        return ""
    unusual = wrong_on[0].exercise.mistakes.unusual
    if unusual and all(c.config.options for c in wrong_on):
        return f"; right on every configuration except the one {unusual}"
    # The hidden configurations' sizes are not shown: only that they differ.
    return (f"; right on {len(scored) - len(wrong_on)} of the {len(scored)} "
            f"{'batches of the self-check' if public else 'hidden configurations'} and wrong on the others")


# The name of the self-check's case built from the notebook's own forward pass.
NOTEBOOK = "your notebook's batch"


# Numbers a line quotes that are no size: a line number, the positions of wrong rows or columns, how many
# entries are wrong or right, how many batches ("wrong only in rows 6, 16 (2 of 36)" quotes the rows' count, 36).
_NOT_SIZES = re.compile(r"\bline \d+|\b(?:rows|columns) \d+(?:, \d+)*(?:, \.\.\.)?|\b(?:right|wrong) (?:in|on) \d+"
                        r"|\b\d+ of\b|\b\d+ (?:batch|hidden configuration)")


# A whole number a line quotes: not a digit of a name ("mat2" in torch's "mat1 and mat2 shapes cannot be
# multiplied" made a line name block_size=2), of a decimal or of a longer number; a shape's "32x27" is two.
_NUMBER = re.compile(r"(?:(?<=\dx)|(?<![\w.]))\d+(?![\d.])")


def _numbers(text: str) -> set[int]:
    """The whole numbers `text` quotes that may be sizes."""
    return {int(n) for n in _NUMBER.findall(_NOT_SIZES.sub("", text))}


def _quoted(case, text: str) -> list[str]:
    """The names of `case`'s sizes whose values `text` quotes as a shape, a total or a factor."""
    quoted = _numbers(text)
    return [k for k, v in case.config.sizes.items() if v in quoted]


def _sizes(case, names) -> str:
    show = case.exercise.mistakes.show
    return ", ".join(f"{show(k)}={v}" for k, v in case.config.sizes.items() if k in names)


def _on_public(probe, answer: Answer, text: str) -> str:
    """Where a detail shown for a hidden configuration comes from. A function's answer runs on a network the
    notebook may build at sizes of its own (a bigger one to train): the lecture-sized sizes `text` quotes are
    named, where a student would otherwise look for (1, 64) in a network of 200."""
    sizes = _sizes(probe, _quoted(probe, text)) if answer.kind == FUNCTION else ""
    return f", {ON_PUBLIC}" + (f" (where {sizes})" if sizes else "")


def _batch(case, probe, text: str) -> str:
    """Which batch a public failure comes from: one of the self-check's own, with the sizes `text` quotes
    (and the student's, beside them), or the student's."""
    if not case.config.scored:
        where = NOTEBOOK if case.config.name == NOTEBOOK else "the self-check's batch at the notebook's sizes"
        return f" (on {where}: {_sizes(case, case.config.sizes)})"
    shown = _quoted(case, text)
    if not shown:
        return " (on the self-check's own batch)"
    # The student's own sizes beside them where the self-check has their forward pass; a function's answer
    # runs on a network the notebook may build at sizes of its own (a bigger one to train), which the
    # lecture's would misquote: there the batch is said to be the self-check's alone.
    also = f"; yours: {_sizes(probe, shown)}" if probe is not None and probe.config.name == NOTEBOOK else ""
    return f" (on the self-check's own batch, where {_sizes(case, shown)}{also})"


SHAPES = "the tensors' shapes"


def _may_write_sizes(code: str | None, exercise) -> bool:
    """Whether the cell may hard-code a lecture size: it writes one as a number, or its code is not known. A
    slip whose effect the lecture's batch hides (batch norm's eps left out, where no variance there is
    tiny) is right at the lecture's sizes too: without a size in the code, that is no sign of one."""
    written = None if code is None else _written(code)
    if written is None:
        return True
    sizes = {v for v in exercise.lecture.values() if type(v) is int}
    return bool(written & (sizes | {v for v in size_forms(exercise) if v > 2}))


def size_forms(exercise) -> dict[int, list[str]]:
    """Each number a cell may write for a lecture size, with the sizes it may stand for: a size, one off it (n - 1
    as 31) or two multiplied (block_size * n_embd as 30). An instructor trial's `dkeys[:, 5]`, the last of T = 6
    positions, was told it wrote the 5 classes."""
    show = exercise.mistakes.show
    sizes = {show(k): v for k, v in exercise.lecture.items() if type(v) is int}
    forms: dict[int, list[str]] = {}
    for k, v in sizes.items():
        forms.setdefault(v, []).append(k)
    for k, v in sizes.items():
        for value, form in ((v - 1, f"{k} - 1"), (v + 1, f"{k} + 1")):
            forms.setdefault(value, []).append(form)
    for a, (ka, va) in enumerate(sizes.items()):
        for kb, vb in list(sizes.items())[a + 1:]:
            forms.setdefault(va * vb, []).append(f"{ka} * {kb}")
    return forms


def written_sizes(exercise, written: set[int]) -> list[str]:
    """The numbers (above 2, which any formula writes) of `written` that may stand for a lecture size, each with the
    sizes it may be: "5 (Wo.shape[1] or Xb.shape[1] - 1)"."""
    forms = size_forms(exercise)
    return [f"{value} ({' or '.join(forms[value])})" for value in sorted(written & set(forms)) if value > 2]


def _written_and_quoted(code: str | None, message: str) -> str:
    """The numbers (above 2) a cell writes that its error's message quotes as a size: `.view(1, 200)` on a
    network of 54 hidden units raises "shape '[1, 200]' is invalid", which says nothing of where 200 came
    from (the notebook's own network has 200). Empty where there are none."""
    written = {v for v in _written(code) or () if v > 2}
    both = sorted(written & _numbers(message))
    return "" if not both else " and ".join(map(str, both)) + (" as numbers" if len(both) > 1 else " as a number")


# The class report's name for an answer right at the exercise's own sizes alone (a course of one's own has no lecture)
SIZES_MISTAKE = "depends on the exercise's sizes"


def _whose(answer: Answer) -> str:
    """Whose the probe's sizes are: the notebook's, except for a function's answer, which the notebook may
    call on a network of its own, wider than the lecture's (a trial's hidden width written as the lecture's fails
    there: "right for the notebook's sizes" sent the student to the wrong network)."""
    return "the exercise's" if answer.kind == FUNCTION else "the notebook's"


def _lecture_only(probe, answer: Answer, zero: bool, code: str | None = None) -> str:
    """For an answer right on the lecture-sized probe alone: it hard-codes a lecture size. Where the gradient
    is all zeros there (b1 before batch norm), matching it says nothing of the answer's values (a student's
    `torch.zeros(64)` was told it was right for the lecture's sizes). The sizes named are those the cell
    writes, where it writes any (a student trial's `.view(1, 64)` was told "(n=32)")."""
    exercise = probe.exercise
    sizes = exercise.network.size_values(probe.values)  # what a cell may read
    named = written_sizes(exercise, _written(code) or set())
    show = exercise.mistakes.show
    whole = {k: v for k, v in sizes.items() if type(v) is int}
    shown = "" if named or not whole else f" ({', '.join(f'{show(k)}={v}' for k, v in whole.items())})"
    cause = "something in the cell depends on the sizes" + (
        f": your cell writes {' and '.join(named)} as {'numbers' if len(named) > 1 else 'a number'}" if named else "")
    whose = _whose(answer)
    where = (f"; it matches only at {whose} sizes{shown}, where this gradient is all zeros, which says nothing "
             "of its values" if zero else f"; right for {whose} sizes{shown} but wrong for every other size")
    return f"{where}: {cause}; {_use_sizes(exercise, sizes, len(named))}"


def _use_sizes(exercise, sizes, written: int = 0) -> str:
    """The sizes to read instead of a number: the whole ones (an instructor trial's flow was told to use log2pi, a
    constant of its loss, among them). Where the cell `written` numbers said with what they stand for, those are
    what to write (an instructor trial's 8, said to be E.shape[1], was told "use H", a size it is not)."""
    sizes = [k for k, v in sizes.items() if type(v) is int]
    named = exercise.mistakes.hardcoded
    numbers = dict.fromkeys(str(exercise.lecture[k]) for k in (exercise.ranges if named is None else named))
    use = f"use {_and([*sizes, SHAPES])}" if not written else \
        f"write {'each' if written > 1 else 'it'} as the size it stands for, from {_and([*sizes, SHAPES])}"
    return f"{use}, never {_and(numbers, 'or')}"


def _cut_short(cases, wrong_on, probe, answer: Answer, code: str | None) -> str:
    """For an answer right on the probe and wrong exactly where a size it writes as a number is larger than
    the probe's: a slice or a loop cut at that size (`x[:32]`, `[:, :64]`, `range(32)`) is right on any
    smaller batch and cuts a larger one short. A trial's `[:32]`, wrong on the one configuration of four with
    a larger batch, which was also the one with a tiny activation variance, was told eps was the cause."""
    written = _written(code)
    if not written:
        return ""
    scored = [c for c in cases if c.config.scored]
    failing = {c.config.name for c in wrong_on}
    for key, value in probe.config.sizes.items():
        larger = {c.config.name for c in scored if c.config.sizes[key] > value}
        if value in written and value > 2 and larger == failing and len(larger) < len(scored):
            sizes, key = probe.exercise.network.size_values(probe.values), probe.exercise.mistakes.show(key)
            return (f"; right where {key} is at most {_whose(answer)} {key}={value} and wrong where it is larger: "
                    f"your cell writes {value} ({key}) as a number, which cuts a larger one short; "
                    f"{_use_sizes(probe.exercise, sizes, 1)}")
    return ""


# What is said of a comparison that fails in one aspect on hidden configurations only: the hidden
# configuration's shapes, counts and differences are its secret.
HIDDEN_ASPECT_TEXT = {
    "type": "is not a plain torch.Tensor " + ON_HIDDEN,
    "dtype": "is not a floating-point tensor " + ON_HIDDEN + ": a gradient is one",
    "layout": "is not a dense tensor " + ON_HIDDEN,
    "shape": "its shape is not the gradient's " + ON_HIDDEN,
    "finite": "contains NaN or inf " + ON_HIDDEN,
    "values": "wrong values " + ON_HIDDEN,
}


def _shown(comparison: Comparison, case, cases, outcomes, answer, check: str, tol, public: bool) -> Comparison:
    """What a student may see of a comparison: all of it on a public configuration; on a hidden one,
    the public lecture-sized run's comparison when it fails in the same aspect, else a fixed sentence
    for the aspect with only the hints that hold no number (the hidden sizes, counts and positions of
    wrong entries are in the others)."""
    if public or not case.config.scored:
        return comparison
    probe = next((c for c in cases if not c.config.scored), None)
    seen = _compared(outcomes.get(probe.config.name), probe, answer, check, tol) if probe else None
    if seen is not None and seen.status == comparison.status and seen.aspect == comparison.aspect:
        return Comparison(seen.status, seen.message + _on_public(probe, answer, seen.message), seen.maxdiff,
                          seen.hints, seen.aspect)
    message = HIDDEN_ASPECT_TEXT.get(comparison.aspect, "wrong " + ON_HIDDEN)
    if comparison.status == Match.SQUEEZABLE:
        message = f"right values {ON_HIDDEN}, but a size-1 dimension is missing or extra"
    return Comparison(comparison.status, message, None,
                      tuple(h for h in comparison.hints if not any(c.isdigit() for c in h)), comparison.aspect)


def judge(outcomes: dict, cases, answer, check: str, tol, *, hints: str = "named", catalogue=None,
          not_run: str = "the cell was not run", public: bool = False, code: str | None = None) -> Failure | None:
    """None when the answer is right on every scored case, else why not, for the student.

    `outcomes` maps a case's name to what the cell produced there (status, detail, tensor). Both the
    grader and the notebook's self-check call this, so one cell never passes one and fails the other.
    `catalogue(case, tensor=..., error=...)`, the hidden suite's hand-written mistakes, is consulted
    only where the search of the neighbourhood names nothing.

    Nothing of a hidden configuration reaches the student but the verdict: an error's message, a shape,
    a count or a difference comes from the unscored lecture-sized configuration (whose seed is public)
    when it shows the same failure, else a fixed sentence says what kind of failure it was. `public`:
    every configuration is public (the self-check's own batches), so each one's detail may be shown.
    `code`: the answer cell's source, which the search reads for the names it reads (never runs).
    """
    probe = next((c for c in cases if not c.config.scored), None)
    probe_compared = _compared(outcomes.get(probe.config.name), probe, answer, check, tol) if probe else None
    # Right at the probe's sizes: a product that fails on the self-check's other batches is a size the cell
    # writes (a trial's `h.T @ x[:32]` was told a transpose was missing, where the grader named the 32)
    sized = probe_compared is not None and probe_compared.passed
    failures = []
    for case in cases:
        if not case.config.scored:
            continue
        outcome = outcomes.get(case.config.name)
        if outcome is None:
            failures.append((case, Failure("not-run", not_run)))
            continue
        if outcome.status != "tensor":
            seen = outcome if public else _public_outcome(outcome, case, cases, outcomes)
            # The catalogue compares an error with the one its mistake raises on the configuration shown.
            on = case if seen is None or seen is outcome else probe
            named = (lambda on=on, **kw: catalogue(on, **kw)) if catalogue else None
            shape = tuple(on.expected(answer, check).shape) if seen is not None and \
                seen.status == Status.NOT_TENSOR and answer.kind != FUNCTION else None
            failures.append((case, outcome_text(seen or outcome, answer, named, hints, exercise=case.exercise,
                                                public=seen is not None, probe=probe if on is probe else None,
                                                sized=sized, shape=shape)))
            continue
        comparison = _compared(outcome, case, answer, check, tol)
        if not comparison.passed:
            failures.append((case, comparison))
    if not failures:
        return None
    case, first = next(((c, f) for c, f in failures if getattr(f, "status", None) != Match.SQUEEZABLE), failures[0])
    wrong_on = [c for c, _ in failures]
    # The self-check's batches are public but not the student's: a size quoted from one says so.
    if isinstance(first, Failure):
        kind, feedback, mistake = first.kind, first.feedback, first.mistake
        written = _written_and_quoted(code, feedback) if kind == "error" else ""
        feedback += _batch(case, probe, feedback) if public and kind == "error" else ""
        named = first.named or bool(mistake)
    else:
        kind, mistake, written = first.status, "", ""
        if first.status == Match.WRONG and hints != "none":
            tensors = [(c, outcomes[c.config.name].tensor) for c in cases
                       if getattr(outcomes.get(c.config.name), "status", None) == "tensor"]
            # For a function's answer the catalogue names a fused step's mistake on every gradient it
            # reaches: more specific than a factor the search finds on one gradient, so it goes first there.
            first_catalogue = catalogue is not None and answer.kind == FUNCTION
            if first_catalogue:
                mistake = catalogue(case, tensor=outcomes[case.config.name].tensor) or ""
            # A factor found on hidden configurations alone is the student's code's choice, not shown.
            factor = public or any(c is probe for c, _ in tensors)
            # An input the cell changed in place is the cause its values show (a blind set's `dx = dy` then
            # `dx *= ...` was told a formula's factor): said first, as what happened, not a guess.
            changed = sorted({n for c in cases for n in getattr(outcomes.get(c.config.name), "detail", {})
                              .get("changed", ())})
            mistake = mistake or (in_place(answer.variable, changed) if changed else "")
            mistake = mistake or name(tensors, answer, check, tol.rtol, tol.atol, factor=factor, code=code) or ""
            if not mistake and catalogue and not first_catalogue:
                mistake = catalogue(case, tensor=outcomes[case.config.name].tensor) or ""
            # After the catalogue, whose own sentence for it a course may hold: the self-check has none
            mistake = mistake or every_row_picked(tensors, answer, check, tol.rtol, tol.atol, _tree(code)) or ""
        shown = _shown(first, case, cases, outcomes, answer, check, tol, public)
        # A difference within a few tolerances everywhere is an account of the values too: an instructor trial's
        # dd2 with eps left out, wrong only with random upstream gradients, was told it skipped the two it read.
        named = bool(mistake) or any(hint.startswith(NEAR_SAID) for hint in shown.hints)
        hinted = mistake or "; ".join(shown.hints)
        said = hinted if hints != "none" else ""
        batch = _batch(case, probe, f"{shown.message} {said}") if public else ""
        feedback = f"{answer.variable}: {shown.message}{batch}" + (f"; {said}" if said else "")
        mistake = hinted
    if kind != Match.BLANK and not named and probe_compared is not None and probe_compared.passed and \
            len(wrong_on) == len([c for c in cases if c.config.scored]) and _may_write_sizes(code, probe.exercise):
        mistake = "; ".join(filter(None, [mistake, SIZES_MISTAKE]))
        zero = bool(probe.expected(answer, check).abs().max() <= tol.atol)
        feedback += _lecture_only(probe, answer, zero, code)
    elif kind != Match.BLANK and not named and probe_compared is not None and probe_compared.passed and \
            (cut := _cut_short(cases, wrong_on, probe, answer, code)):
        mistake = "; ".join(filter(None, [mistake, SIZES_MISTAKE]))
        feedback += cut
    elif kind != Match.BLANK and not named and one_hot_unsized(code):
        mistake = ONE_HOT_WIDTH
        feedback += f"; {mistake}"
    elif kind != Match.BLANK and not named and written:
        mistake = f"your cell writes {written}, which the error quotes: use the tensors' shapes"
        feedback += f"; {mistake}" if hints != "none" else ""
    elif kind != Match.BLANK and not named:
        feedback += _configurations(cases, wrong_on, public)
    if check != "chain":
        feedback = "with random upstream gradients (a check of this one backward step): " + feedback
    return Failure(kind, feedback, mistake, named)
