"""One strict comparison of an answer with its expected gradient, shared by the self-check and the
hidden grader, so a student never sees a tensor pass one and fail the other.

Stricter than the lecture's `cmp`: that one broadcast and never looked at shapes, so five wrong-shape
answers passed it. Here the answer must be a plain floating tensor of exactly the expected
shape, finite, and close with both rtol and atol.
"""
from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass, field

import torch

from grader.exercise import ATOMIC, FUNCTION, NAMESPACE, Answer, Exercise, load
from grader.judge.diagnose import diagnose, name
from grader.vocabulary import Match, Status, shape_text


@dataclass(frozen=True)
class Comparison:
    """One answer compared with its expected tensor on one configuration. Not a grade id's verdict
    (grader.vocabulary.Verdict): the judge weighs the comparisons of every configuration and check into
    that."""

    status: Match
    message: str
    maxdiff: float | None = None
    hints: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return self.status.passed


def compare(answer, expected: torch.Tensor, *, rtol: float, atol: float, n: int | None = None) -> Comparison:
    """`n` is accepted and never read: grader 0.1's hidden suite, which existing courses still run,
    passes the batch size, once read by the hint for a factor of n (which now needs every configuration,
    see diagnose.diagnose)."""
    if answer is None:
        return Comparison(Match.BLANK, "not attempted yet")
    if type(answer) is not torch.Tensor:
        if isinstance(answer, torch.Tensor):
            return Comparison(Match.WRONG,
                              f"is a {type(answer).__name__}, a subclass of torch.Tensor: give a plain tensor")
        return Comparison(Match.WRONG, f"is a {type(answer).__name__}, not a torch.Tensor")
    if not answer.dtype.is_floating_point:
        return Comparison(Match.WRONG, f"has dtype {answer.dtype}: a gradient is a floating-point tensor")
    if answer.is_sparse or answer.layout != torch.strided:
        return Comparison(Match.WRONG, "is not a dense tensor")
    got = answer.detach().to(torch.float64)
    want = expected.detach().to(torch.float64)
    if got.shape != want.shape:
        hints = tuple(diagnose(got, want, rtol=rtol, atol=atol))
        message = f"shape {shape_text(got.shape)}, expected {shape_text(want.shape)}"
        if got.numel() == want.numel() and [s for s in got.shape if s != 1] == [s for s in want.shape if s != 1]:
            if torch.isfinite(got).all() and torch.allclose(got.reshape(want.shape), want, rtol=rtol, atol=atol):
                return Comparison(Match.SQUEEZABLE,
                                  message + ": right values, but a size-1 dimension is missing or extra", hints=hints)
        return Comparison(Match.WRONG, message, hints=hints)
    # The right answers first, in as few tensor operations as possible: a class is hundreds of
    # thousands of comparisons. An answer equal or close to a finite expectation is finite.
    if torch.equal(got, want):
        return Comparison(Match.EXACT, "exact", 0.0)
    if torch.allclose(got, want, rtol=rtol, atol=atol):
        return Comparison(Match.APPROXIMATE, "approximately equal", (got - want).abs().max().item())
    if not torch.isfinite(got).all():
        bad = (~torch.isfinite(got)).sum().item()
        kinds = "NaN" if torch.isnan(got).any() else "inf"
        return Comparison(Match.WRONG, f"contains {kinds} ({bad} of {got.numel()} entries are not finite)")
    maxdiff = (got - want).abs().max().item() if got.numel() else 0.0
    hints = tuple(diagnose(got, want, rtol=rtol, atol=atol))
    return Comparison(Match.WRONG, f"wrong values (max abs diff {maxdiff:.3g})", maxdiff, hints)


# --- one answer on every configuration: the judgement the grader and the self-check share -----------

STATUS_TEXT = {status: status.text for status in Status if status.text}


@functools.lru_cache(maxsize=64)
def hidden_sizes(configs: tuple) -> frozenset[int]:
    """Every size of these configurations and every product of them (a `view` error prints n*B*E)."""
    found = set()
    for config in configs:
        dims = tuple(config.sizes.values())
        for count in range(1, len(dims) + 1):
            found.update(math.prod(combo) for combo in itertools.combinations(dims, count))
    return frozenset(found)


def masked(text, hidden: frozenset[int]):
    """`text` with every number that is a hidden size (or a product of them) replaced by "…"."""
    if not isinstance(text, str) or not hidden:
        return text
    return re.sub(r"\b\d+\b", lambda m: "…" if int(m.group()) in hidden else m.group(), text)


def _public(outcome, case, cases, outcomes) -> tuple[dict, frozenset]:
    """What of a failed run's detail a student may see, and the sizes still to mask in it: on a hidden
    configuration, the error of the public lecture-sized run when that run raised the same error (same
    type, same line), else the sizes of every hidden configuration masked."""
    if not case.config.scored:
        return outcome.detail, frozenset()
    probe = next((c for c in cases if not c.config.scored), None)
    public = None if probe is None else outcomes.get(probe.config.name)

    def where(o):
        return o.detail.get("error_type"), o.detail.get("line")

    if (outcome.status == "error" and public is not None and public.status == "error"
            and where(public) == where(outcome)):
        return {**outcome.detail, "error": public.detail["error"]}, frozenset()
    return outcome.detail, hidden_sizes(tuple(c.config for c in cases if c.config.scored))


def _and(words, last: str = "and") -> str:
    words = list(words)
    return ", ".join(words[:-1]) + f" {last} " + words[-1] if len(words) > 1 else "".join(words)


def _allowed(exercise: Exercise) -> str:
    """What an answer cell may read, for a cell that read something else."""
    net = exercise.network
    names = ["the parameters", *net.data, *net.sizes, "the forward intermediates by their lecture names", *NAMESPACE]
    parts = sorted({str(a.part) for a in exercise.answers if a.kind == ATOMIC})
    if parts:
        names.append(f"variables assigned by earlier answer cells of exercise {_and(parts)}")
    return "answer cells may use only " + _and(names)


def _function_hint(exercise: Exercise, answer: Answer, error_type: str) -> str | None:
    """What a function's cell may read, for one that read something else: its arguments, and exactly
    what each dict argument holds beyond the parameters (which the notebook names everywhere)."""
    function = exercise.function_of(answer)
    if function is None:
        return None
    if error_type == "NameError":
        return f"{function.name} may use only its arguments, {_and(NAMESPACE)}"
    dicts = [argument for argument in function.arguments if not isinstance(argument, str)]
    held = [f"the {label} holds exactly: {', '.join(names)}" for label, names in dicts
            if tuple(names) != exercise.network.parameters]
    return "; ".join(held) if error_type == "KeyError" and held else None


@dataclass(frozen=True)
class Failure:
    kind: str  # the comparison's Match (wrong, squeezable, blank) or the outcome's Status (error, timeout, ...)
    feedback: str
    mistake: str = ""  # the named mistake, or the hints, for the class report


def outcome_text(outcome, answer: Answer, catalogue=None, hints: str = "named", *, exercise: Exercise | None = None,
                 shown: dict | None = None, hidden: frozenset[int] = frozenset()) -> Failure:
    """The failure of an outcome that is not a tensor. `catalogue(error=...)` may name the mistake that
    raises this very error. `shown`: the detail the student may see (see _public), with the sizes in
    `hidden` masked. `exercise`: the answer's; the hidden suites of grader 0.1 give none, and graded
    the default one."""
    exercise = exercise or load()
    shown = {k: masked(v, hidden) for k, v in (outcome.detail if shown is None else shown).items()}
    if outcome.status == "error":
        where = f" on line {outcome.detail['line']}" if outcome.detail.get("line") else ""
        text = f"{outcome.detail['error_type']}{where}: {shown['error']}"
        named = catalogue(error=(outcome.detail["error_type"], outcome.detail["error"])) if catalogue else None
        mistake = named or ""
        reads = _function_hint(exercise, answer, outcome.detail["error_type"]) if answer.kind == FUNCTION else None
        if named and hints != "none":
            text += f"; {named}"
        elif reads:
            text += f" ({reads})"
        elif outcome.detail["error_type"] == "NameError":
            text += f" (uses a variable the answer cells do not have: {_allowed(exercise)})"
        elif "cannot be multiplied" in outcome.detail["error"]:
            mistake = "the shapes of a matrix product do not fit (a transpose is probably missing or misplaced)"
            if hints != "none":
                text += (f"; the shapes of a matrix product do not fit: write the product whose shape is "
                         f"{answer.variable}'s (a transpose is probably missing or misplaced)")
        if outcome.detail.get("limit") == "memory":
            return Failure("memory", text + "; the cell ran into the sandbox's memory limit (no gradient here "
                                            "needs more than a few megabytes)", mistake)
        return Failure("error", text, mistake)
    template = STATUS_TEXT.get(outcome.status, "unexpected result ({status})")
    detail = {k: "; ".join(masked(x, hidden) for x in v) if isinstance(v, list) else v for k, v in shown.items()}
    function = exercise.function_of(answer)
    return Failure(outcome.status, template.format(variable=answer.variable, status=outcome.status,
                                                   function=function.name if function else "the function", **detail))


def _compared(outcome, case, answer, check, tol) -> Comparison | None:
    if outcome is None or outcome.status != "tensor":
        return None
    return compare(outcome.tensor, case.expected(answer, check), rtol=tol.rtol, atol=tol.atol)


def _configurations(cases, wrong_on) -> str:
    """What is certain about where the answer fails, when that is not everywhere."""
    scored = [c for c in cases if c.config.scored]
    if len(wrong_on) == len(scored) or not wrong_on:
        return ""
    unusual = wrong_on[0].exercise.mistakes.unusual
    if unusual and all(c.config.options for c in wrong_on):
        return f"; right on every configuration except the one {unusual}"
    # The hidden configurations' sizes are not shown: only that they differ.
    return (f"; right on {len(scored) - len(wrong_on)} of the {len(scored)} hidden configurations"
            " and wrong on the others")


SHAPES = "the tensors' shapes"


def _lecture_only(probe) -> str:
    """For an answer right on the lecture-sized probe alone: it hard-codes a lecture size."""
    exercise = probe.exercise
    sizes = exercise.network.size_values(probe.values)
    shown = f" ({', '.join(f'{k}={v}' for k, v in sizes.items())})" if sizes else ""
    named = exercise.mistakes.hardcoded
    numbers = dict.fromkeys(str(exercise.lecture[k]) for k in (exercise.ranges if named is None else named))
    return (f"; right for the lecture's sizes{shown} but wrong for every other size: something in the cell depends "
            f"on the sizes; use {_and([*sizes, SHAPES])}, never {_and(numbers, 'or')}")


def _shown(comparison: Comparison, case, cases, outcomes, answer, check: str, tol) -> Comparison:
    """A wrong shape's message and hints name the sizes of the configuration it was seen on: from a
    hidden one, the public lecture-sized run's when its shape is wrong too, else the hidden sizes masked."""
    if not case.config.scored or not comparison.message.startswith("shape "):
        return comparison
    probe = next((c for c in cases if not c.config.scored), None)
    public = _compared(outcomes.get(probe.config.name), probe, answer, check, tol) if probe else None
    if public is not None and public.status == comparison.status and public.message.startswith("shape "):
        return public
    hidden = hidden_sizes(tuple(c.config for c in cases if c.config.scored))
    return Comparison(comparison.status, masked(comparison.message, hidden), comparison.maxdiff,
                      tuple(masked(h, hidden) for h in comparison.hints))


def judge(outcomes: dict, cases, answer, check: str, tol, *, hints: str = "named", catalogue=None,
          not_run: str = "the cell was not run") -> Failure | None:
    """None when the answer is right on every scored case, else why not, for the student.

    `outcomes` maps a case's name to what the cell produced there (status, detail, tensor). Both the
    grader and the notebook's self-check call this, so one cell never passes one and fails the other.
    `catalogue(case, tensor=..., error=...)`, the hidden suite's hand-written mistakes, is consulted
    only where the search of the neighbourhood names nothing.
    """
    failures = []
    for case in cases:
        if not case.config.scored:
            continue
        outcome = outcomes.get(case.config.name)
        if outcome is None:
            failures.append((case, Failure("not-run", not_run)))
            continue
        if outcome.status != "tensor":
            named = (lambda case=case, **kw: catalogue(case, **kw)) if catalogue else None
            shown, hidden = _public(outcome, case, cases, outcomes)
            failures.append((case, outcome_text(outcome, answer, named, hints, exercise=case.exercise, shown=shown,
                                                hidden=hidden)))
            continue
        comparison = _compared(outcome, case, answer, check, tol)
        if not comparison.passed:
            failures.append((case, comparison))
    if not failures:
        return None
    case, first = next(((c, f) for c, f in failures if getattr(f, "status", None) != Match.SQUEEZABLE), failures[0])
    wrong_on = [c for c, _ in failures]
    if isinstance(first, Failure):
        kind, feedback, mistake = first.kind, first.feedback, first.mistake
        named = bool(mistake)
    else:
        kind, mistake = first.status, ""
        if first.status == Match.WRONG and hints != "none":
            tensors = [(c, outcomes[c.config.name].tensor) for c in cases
                       if getattr(outcomes.get(c.config.name), "status", None) == "tensor"]
            # For a function's answer the catalogue names a fused step's mistake on every gradient it
            # reaches: more specific than a factor the search finds on one gradient, so it goes first there.
            first_catalogue = catalogue is not None and answer.kind == FUNCTION
            if first_catalogue:
                mistake = catalogue(case, tensor=outcomes[case.config.name].tensor) or ""
            mistake = mistake or name(tensors, answer, check, tol.rtol, tol.atol) or ""
            if not mistake and catalogue and not first_catalogue:
                mistake = catalogue(case, tensor=outcomes[case.config.name].tensor) or ""
        named = bool(mistake)
        shown = _shown(first, case, cases, outcomes, answer, check, tol)
        hinted = mistake or "; ".join(shown.hints)
        feedback = f"{answer.variable}: {shown.message}" + (f"; {hinted}" if hinted and hints != "none" else "")
        mistake = hinted
    probe = next((c for c in cases if not c.config.scored), None)
    probe_compared = _compared(outcomes.get(probe.config.name), probe, answer, check, tol) if probe else None
    if kind != Match.BLANK and not named and probe_compared is not None and probe_compared.passed and \
            len(wrong_on) == len([c for c in cases if c.config.scored]):
        mistake = "; ".join(filter(None, [mistake, "depends on the lecture's sizes"]))
        feedback += _lecture_only(probe)
    elif kind != Match.BLANK and not named:
        feedback += _configurations(cases, wrong_on)
    if check != "chain":
        feedback = "with random upstream gradients (a check of this one backward step): " + feedback
    return Failure(kind, feedback, mistake)
