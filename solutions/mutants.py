"""A mutation corpus for every makemore variant: each mutant is the variant's reference answers with one
classic mistake put into one answer cell, so a test (or, end to end, the grader) can prove that every
such mistake loses credit on the tensor it was made in.

The mistakes are the ones students make (named in the grader's feedback): a flipped sign, a dropped term
of a `+=` accumulation, a sum over the wrong dimension, a missing transpose, a dropped 1/n, 1/n for
Bessel's 1/(n-1), a dropped eps (which only the hidden configuration with a tiny variance shows), and
an operand replaced by another forward tensor of the same shape. Each is applied to every place in the
cell it fits, one place per mutant.
"""
from __future__ import annotations

import ast
import copy
import functools
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from grader.exercise import load
from grader.exercises.makemore_mlp.answers import EX4_CELL
from grader.exercises.makemore_mlp.model import EPS
from grader.exercises.makemore_mlp.variants import parse
from solutions.variants import cells

SIGN, DROP_TERM, WRONG_DIM, TRANSPOSE, DROP_N, BESSEL, DROP_EPS, OPERAND = (
    "sign", "drop-term", "wrong-dim", "transpose", "drop-n", "bessel", "drop-eps", "operand")


@dataclass(frozen=True)
class Mutant:
    """One mistake: `cell` is the answer cell's id, `line` the reference line it changes (for people to
    read), `source` the whole mutated cell."""

    variant: str
    cell: str
    kind: str
    line: str
    source: str


def structural_zeros(name: str) -> frozenset[str]:
    """Gradients that are exactly zero in exact arithmetic, whatever the batch: softmax ignores a shift of
    its row (dlogit_maxes), and batch norm removes b1 with each column's mean (db1). A flipped sign leaves
    them ~0, so where no random upstream checks the cell (manual_backward) that mutant is no mistake."""
    return frozenset({"dlogit_maxes", *(("db1",) if parse(name).norm.name == "batchnorm" else ())})


@functools.cache
def _shapes(name: str) -> dict[str, tuple[int, ...]]:
    """Every forward tensor's shape at the lecture's sizes, in forward order."""
    exercise = load(f"makemore-mlp/{name}")
    g = torch.Generator().manual_seed(0)
    values = exercise.network.forward(exercise.init(exercise.lecture, g), exercise.batch(exercise.lecture, g))
    names = (*exercise.network.parameters, *exercise.network.intermediates)
    return {k: tuple(values[k].shape) for k in names if k != exercise.network.loss}


def _written(statement: ast.stmt) -> str | None:
    target = statement.targets[0] if isinstance(statement, ast.Assign) else getattr(statement, "target", None)
    while isinstance(target, ast.Subscript):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _is_size(node: ast.expr) -> bool:
    """n, n - 1 or a tensor's .shape[i]: what a mean or a variance divides by."""
    if isinstance(node, ast.Name):
        return node.id == "n"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
        return isinstance(node.left, ast.Name) and node.left.id == "n"
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"


def _is_zeros(node: ast.expr) -> bool:
    """torch.zeros_like(x) and the like: minus zero is zero, no mistake."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.startswith("zeros")


def _sites(tree: ast.Module, available: dict[str, tuple[int, ...]], zeros: frozenset[str]) -> Iterator[tuple]:
    """(kind, node, the other tensor's name for OPERAND) for every place a mistake fits. Parents are
    tracked so that an operand is only a direct operand of arithmetic (never a `*_like` argument or a
    `.shape` read, whose value does not matter)."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign)) and (_written(node) or "").startswith("d") \
                and _written(node) not in zeros and not _is_zeros(node.value):
            yield SIGN, node, None
        if isinstance(node, ast.AugAssign) and len(parents[node].body) > 1:
            yield DROP_TERM, node, None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("sum", "mean") \
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in (0, 1):
            yield WRONG_DIM, node, None
        if isinstance(node, ast.Attribute) and node.attr == "T":
            yield TRANSPOSE, node, None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _is_size(node.right):
            yield DROP_N, node, None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and _is_size(node) \
                and isinstance(node.right, ast.Constant):
            yield BESSEL, node, None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and isinstance(node.right, ast.Constant) \
                and node.right.value == EPS:
            yield DROP_EPS, node, None
        if isinstance(node, ast.Name) and node.id in available and isinstance(node.ctx, ast.Load):
            parent = parents[node]
            if isinstance(parent, ast.Attribute) and parent.attr == "T":
                parent = parents[parent]
            if isinstance(parent, ast.BinOp):
                other = next((k for k, s in available.items() if s == available[node.id] and k != node.id), None)
                if other:
                    yield OPERAND, node, other


def _replace(tree: ast.AST, node: ast.AST, by: ast.AST | None) -> None:
    """Puts `by` where `node` is in `tree` (removes the statement when `by` is None)."""
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is node:
                setattr(parent, field, by)
            elif isinstance(value, list) and any(v is node for v in value):
                setattr(parent, field, [by if v is node else v for v in value if v is not node or by is not None])


def _apply(tree: ast.Module, kind: str, node: ast.AST, other: str | None) -> None:
    """Makes the mistake at `node`, a node of `tree` (a copy of the cell's)."""
    if kind == SIGN:
        node.value = ast.UnaryOp(ast.USub(), node.value)
    elif kind == WRONG_DIM:
        node.args[0] = ast.Constant(1 - node.args[0].value)
    elif kind == OPERAND:
        node.id = other
    elif kind == DROP_TERM:
        _replace(tree, node, None)
    elif kind == TRANSPOSE:
        _replace(tree, node, node.value)
    else:  # DROP_N, BESSEL, DROP_EPS: the left operand alone (x / n -> x, n - 1 -> n, var + eps -> var)
        _replace(tree, node, node.left)


def cell_mutants(name: str, cell: str) -> list[Mutant]:
    """Every mutant of one answer cell of variant `name`."""
    source = cells(name)[cell]
    tree = ast.parse(source)
    shapes = _shapes(name)
    if cell == EX4_CELL:
        # manual_backward sees only what it reads from params and cache: another tensor must be one of those.
        bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        available = {k: s for k, s in shapes.items() if k in bound}
        zeros = structural_zeros(name)
    else:
        available, zeros = shapes, frozenset()
    found, seen = [], {ast.unparse(tree)}
    for index, (kind, node, other) in enumerate(_sites(tree, available, zeros)):
        mutated = copy.deepcopy(tree)
        twin = list(_sites(mutated, available, zeros))[index][1]
        _apply(mutated, kind, twin, other)
        text = ast.unparse(mutated)
        if text in seen:
            continue
        seen.add(text)
        line = source.splitlines()[getattr(node, "lineno", 1) - 1].strip()
        found.append(Mutant(name, cell, kind, line, text + "\n"))
    return found


@functools.cache
def mutants(name: str) -> tuple[Mutant, ...]:
    """The whole corpus of variant `name`: every answer cell's mutants, in the notebook's order."""
    return tuple(m for cell in cells(name) for m in cell_mutants(name, cell))


def submissions(name: str) -> dict[str, dict[str, str]]:
    """One submission per mutant of variant `name`, by a file stem naming its mistake
    (`dlnvar_inv-wrong-dim-1`): each maps every answer cell id to its source, as a notebook holds them."""
    stems: dict[str, int] = {}
    found = {}
    for mutant in mutants(name):
        key = f"{mutant.cell}-{mutant.kind}"
        stems[key] = stems.get(key, 0) + 1
        found[f"{key}-{stems[key]}"] = submission(mutant)
    return found


def submission(mutant: Mutant) -> dict[str, str]:
    """The answer cells of a notebook holding the mutant: the reference everywhere but its one cell. Every
    graded answer but the mutated cell's (and, for manual_backward, the gradients that its mistake
    reaches) must keep full credit."""
    return {**cells(mutant.variant), mutant.cell: mutant.source}


def graded_in(mutant: Mutant) -> tuple[str, ...]:
    """The grade ids the mutant's cell answers (a function cell answers one per parameter)."""
    exercise = load(f"makemore-mlp/{mutant.variant}")
    return tuple(a.grade_id for a in exercise.answers if a.cell_id == mutant.cell)
