"""Each makemore variant's reference answers, composed from the lecture's cells (solutions/answers.py)
and the variants' own pieces (solutions/variant_pieces.py), and run the way the notebook and the grader
run answer cells. Never released to students.

A piece the variant shares with the lecture (the cross-entropy, the output and first layers, the
embedding, tanh, batch norm) is the lecture's own text, renamed where the variant names a tensor
differently (`hres` for what the output layer reads, `hpreact` for the first layer's output when
nothing normalizes it); the residual branch reuses the activation's cells renamed `h` -> `r`. So
`tanh-batchnorm` composes to exactly solutions/answers.py, and every other variant explains its own
derivatives in the lecture's words wherever they are the same derivatives.
"""
from __future__ import annotations

import ast
import functools
import textwrap
from pathlib import Path

import torch
import torch.nn.functional as F

from grader.exercise import load
from grader.exercises.makemore_mlp.answers import ATOMIC, EX4_CELL, EX4_FUNCTION
from grader.exercises.makemore_mlp.variants import RESIDUAL, Variant, parse, rename
from solutions import reference

PIECES_FILE = Path(__file__).with_name("variant_pieces.py")
# The lecture's own pieces: their cells are solutions/answers.py's.
LECTURE_PIECES = ("tanh", "batchnorm")
# Longest line a composed manual_backward writes on one line before it wraps (the lecture's fit).
LINE = 110
INDENT = "    "


@functools.cache
def pieces() -> dict[str, str]:
    """`piece:key` -> the source of that cell of variant_pieces.py."""
    parts = reference._MARKER.split(PIECES_FILE.read_text())
    return {key: body.strip() + "\n" for key, body in zip(parts[1::2], parts[2::2], strict=True)}


def _piece(piece: str, key: str) -> str:
    return reference.cells()[key] if piece in LECTURE_PIECES else pieces()[f"{piece}:{key}"]


# ---------------------------------------------------------------------------------------------
# manual_backward, from the lecture's parts and the variant's

def _units(body: str) -> list[tuple[str, str]]:
    """`body` (unindented statements under their comments) as (first name written, text) units: a unit
    starts at a comment that follows code."""
    units: list[list[str]] = []
    previous_code = True
    for line in body.splitlines():
        if line.startswith("#") and previous_code:
            units.append([])
        units[-1].append(line)
        previous_code = not line.startswith("#")
    keyed = []
    for unit in units:
        text = "\n".join(unit) + "\n"
        first = ast.parse(text).body[0]
        target = first.targets[0] if isinstance(first, ast.Assign) else first
        keyed.append((next(n.id for n in ast.walk(target) if isinstance(n, ast.Name)), text))
    return keyed


@functools.cache
def _lecture_backward() -> tuple[str, list[tuple[str, str]]]:
    """The lecture's manual_backward as its header (def line and docstring) and body units, the return
    statement left out (it is generated from the variant's parameters)."""
    cell = reference.cells()[EX4_CELL]
    function = ast.parse(cell).body[0]
    lines = cell.splitlines()
    header = "\n".join(lines[: function.body[0].end_lineno]) + "\n"
    body = textwrap.dedent("\n".join(lines[function.body[0].end_lineno: function.body[-1].lineno - 1]))
    return header, _units(body)


def _lecture_units(*keys: str) -> str:
    units = _lecture_backward()[1]
    return "".join(text for key in keys for k, text in units if k == key)


def _assign(names: list[str], values: list[str]) -> str:
    """`a, b = x["a"], x["b"]`, wrapped in parentheses when one line would be longer than LINE."""
    line = f"{', '.join(names)} = {', '.join(values)}"
    if len(INDENT + line) <= LINE:
        return line + "\n"
    wrapped = textwrap.fill(", ".join(values), LINE - 2 * len(INDENT))
    return f"{', '.join(names)} = (\n{textwrap.indent(wrapped, INDENT)}\n)\n"


def _comment(key: str) -> str:
    """The comment line of the lecture's unit `key` (the parameters' and the cache's reads)."""
    return next(text for k, text in _lecture_backward()[1] if k == key).splitlines()[0] + "\n"


def manual_backward_source(variant: Variant) -> str:
    """The variant's ex4_backward cell: the lecture's manual_backward with the variant's pieces in place
    of the lecture's, its reads of params and cache generated from what the formulas read."""
    act, norm = variant.activation.name, variant.norm.name
    feature = {"h": variant.feature}
    body = _lecture_units("dlogits") + rename(_lecture_units("dh", "dW2", "db2"), feature)
    act_unit = _lecture_units("dhpreact") if act in LECTURE_PIECES else pieces()[f"{act}:ex4"]
    if variant.residual:
        body += pieces()["residual:ex4_branch"] + rename(act_unit, variant.branch) + pieces()["residual:ex4_merge"]
    body += act_unit
    if norm in LECTURE_PIECES:
        body += _lecture_units("dbngain", "dbnbias", "dhprebn")
    elif variant.norm.fused:
        body += pieces()[f"{norm}:ex4"]
    body += rename(_lecture_units("dembcat", "dW1"), {"hprebn": variant.norm.pre})
    body += _lecture_units("db1") if norm in LECTURE_PIECES else pieces()[f"{norm}:ex4_db1"]
    body += _lecture_units("demb", "dC")

    norm_reads = ""
    if norm in LECTURE_PIECES:
        norm_reads = _lecture_units("bnraw")
    elif variant.norm.fused:
        norm_reads = pieces()[f"{norm}:ex4_cache"]
    read = {n.id for n in ast.walk(ast.parse(body)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    given = {n.id for n in ast.walk(ast.parse(norm_reads)) if isinstance(n, ast.Name)}
    parameters = [p for p in variant.parameters if p in read]
    cached = [c for c in variant.cache() if c in read and c not in given]
    reads = (_comment("C") + _assign(parameters, [f'params["{p}"]' for p in parameters])
             + _comment("Xb") + _assign(cached, [f'cache["{c}"]' for c in cached]) + norm_reads)
    returned = ", ".join(f'"{p}": d{p}' for p in variant.parameters)
    ret = f"return {{{returned}}}\n"
    if len(INDENT + ret) > LINE:
        ret = "return {\n" + textwrap.indent(textwrap.fill(returned, LINE - 2 * len(INDENT)), INDENT) + "\n}\n"
    header = _lecture_backward()[0] if norm != "none" else pieces()["none:ex4_header"]
    return header + textwrap.indent(reads + _lecture_units("n") + body + ret, INDENT)


# ---------------------------------------------------------------------------------------------
# Every answer cell

@functools.cache
def cells(name: str) -> dict[str, str]:
    """grade id (cell id for manual_backward) -> the source of the variant's reference answer cell, in
    the notebook's order."""
    variant = parse(name)
    lecture = reference.cells()
    act, norm = variant.activation, variant.norm
    feature = {"h": variant.feature}
    out = {rename(g, feature): rename(lecture[g], feature) for g in ATOMIC[: ATOMIC.index("db2") + 1]}
    activation = {g: _piece(act.name, g) for g in act.order("hpreact", "h")}
    if variant.residual:
        out["dr"] = pieces()["residual:dr"]
        out.update({rename(g, variant.branch): rename(text, variant.branch) for g, text in activation.items()})
        out.update({g: pieces()[f"{RESIDUAL}:{g}"] for g in ("dh", "dW3", "db3")})
    out.update(activation)
    out.update({g: _piece(norm.name, g) for g in norm.order})
    out.update({g: rename(lecture[g], {"hprebn": norm.pre}) for g in ("dembcat", "dW1")})
    out["db1"] = _piece(norm.name, "db1")
    out.update({g: lecture[g] for g in ("demb", "dC", "ex2_dlogits")})
    if norm.fused:
        out[norm.fused.grade_id] = _piece(norm.name, norm.fused.grade_id)
    out[EX4_CELL] = manual_backward_source(variant)
    return out


# ---------------------------------------------------------------------------------------------
# Running them, as the notebook and the grader do

def namespace(name: str, values: dict[str, torch.Tensor]) -> dict:
    """What an answer cell may read: the forward pass, the sizes, torch and F."""
    network = load(f"makemore-mlp/{name}").network
    return {**values, **network.size_values(values), "torch": torch, "F": F}


def run(source: str, ns: dict, label: str) -> dict:
    exec(compile(source, f"<answer {label}>", "exec"), ns)  # noqa: S102
    return ns


def atomic_gradients(name: str, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Exercise 1: every atomic gradient, each cell reading the ones before it, as in the notebook."""
    exercise = load(f"makemore-mlp/{name}")
    ns = namespace(name, values)
    for grade_id in exercise.atomic:
        run(cells(name)[grade_id], ns, grade_id)
    return {g: ns[g] for g in exercise.atomic}


def manual_backward(name: str, params, cache, Yb) -> dict[str, torch.Tensor]:
    """Exercise 4: every parameter's gradient, without autograd."""
    return run(cells(name)[EX4_CELL], {"torch": torch, "F": F}, EX4_CELL)[EX4_FUNCTION](params, cache, Yb)
