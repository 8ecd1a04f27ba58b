"""Answer cells are read (never run) before they reach the sandbox: anything a gradient does not need
is refused, with the offending line quoted.

An allowlist, not a denylist: `torch.<name>` and `F.<name>` must be tensor math the exercise can
use, builtins must be plain helpers, and nothing may import, reach a dunder or a private attribute,
open files, or touch autograd. A course adds names in course.yml (`allow.torch`, `allow.functional`,
`allow.builtins`) rather than editing this file.
"""
from __future__ import annotations

import ast
import functools
import re
import types
from dataclasses import dataclass

TORCH = frozenset("""
    abs absolute add addmm all allclose amax amin any arange argmax argmin argsort as_strided
    baddbmm bmm bool broadcast_tensors broadcast_to cat chunk clamp clamp_max clamp_min clip clone
    concat concatenate cos cosh cumprod cumsum diag diag_embed diagonal diff div divide dot dsplit
    einsum empty empty_like eq equal exp expand_copy eye flatten flip float16 float32 float64 full
    full_like gather ge gt hsplit hstack index_add index_copy index_put index_select int16 int32
    int64 int8 isclose isfinite isinf isnan kron le linspace log log10 log1p log2 log_softmax
    logical_and logical_not logical_or logsumexp long lt masked_fill masked_select matmul max maximum
    mean min minimum mm movedim mul multiply mv narrow ne neg negative nonzero norm numel ones
    ones_like outer permute pow prod rand rand_like randn randn_like reciprocal repeat_interleave
    reshape rsqrt scatter scatter_add scatter_reduce select sigmoid sign sin sinh softmax split sqrt
    square squeeze stack std sub subtract sum swapaxes t take take_along_dim tanh tensor tensordot
    tile topk transpose tril triu true_divide unbind unique unsqueeze var vsplit vstack where
    zeros zeros_like linalg special Tensor Size float double int half dtype no_grad inference_mode
""".split())

FUNCTIONAL = frozenset("one_hot softmax log_softmax tanh pad normalize relu sigmoid cross_entropy".split())

BUILTINS = frozenset("""
    abs all any bool dict divmod enumerate filter float int isinstance len list map max min pow
    print range reversed round set slice sorted str sum tuple zip True False None
""".split())

# Tensor attributes that reach autograd, storage, files or other processes. Every other public
# attribute of a tensor is tensor math.
TENSOR_DENIED = frozenset("""
    backward grad grad_fn requires_grad requires_grad_ retain_grad retains_grad register_hook
    register_post_accumulate_grad_hook is_leaf untyped_storage storage storage_offset data_ptr
    share_memory_ pin_memory numpy data set_ from_file save load cuda to_sparse
    apply_ map_ map2_ record_stream
    gi_frame gi_code cr_frame ag_frame tb_frame tb_next f_globals f_locals f_back f_builtins f_code
    co_code func_globals
""".split())

MAX_CELL_CHARS = 20_000

# Names a cell must not rebind: the grader's own module handles.
PROTECTED = frozenset({"torch", "F"})

# Re-importing what the notebook already imported is harmless; every other import is refused.
IMPORTS = {("torch", None), ("torch", "torch"), ("torch.nn.functional", "F"), ("math", None), ("math", "math")}
IMPORTS_FROM = {("torch.nn", "functional", "F"), ("torch.nn.functional", "*", None)}
# The only context managers a gradient may use: they switch autograd off, never on.
CONTEXTS = {"no_grad", "inference_mode"}

FORBIDDEN_STATEMENTS = {
    ast.Global: "global", ast.Nonlocal: "nonlocal",
    ast.ClassDef: "class definitions", ast.Try: "try/except (it could swallow the time limit)",
    ast.AsyncFunctionDef: "async code", ast.Await: "async code",
    ast.AsyncFor: "async code", ast.AsyncWith: "async code", ast.Yield: "generators", ast.YieldFrom: "generators",
}
if hasattr(ast, "TryStar"):
    FORBIDDEN_STATEMENTS[ast.TryStar] = "try/except (it could swallow the time limit)"


@dataclass(frozen=True)
class Allow:
    torch: frozenset = TORCH
    functional: frozenset = FUNCTIONAL
    builtins: frozenset = BUILTINS

    def extended(self, torch=(), functional=(), builtins=()) -> "Allow":
        return Allow(self.torch | set(torch), self.functional | set(functional), self.builtins | set(builtins))


@dataclass(frozen=True)
class Refusal:
    line: int
    code: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}: {self.code.strip()}"


def _chain(node: ast.Attribute) -> tuple[str | None, list[str]]:
    """(root name, attribute names) of `a.b.c`, root None when it is not a plain name."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), attrs[::-1]


def _descends(root: str, attrs: list[str]) -> bool:
    """Whether every module met along `torch.a.b.c` lies inside the one before it, as torch.nn.functional
    lies inside torch.nn (`torch.special.torch.autograd` climbs back out through a module's own import),
    and the chain ends in something that is not a module (an alias `s = torch.special` would escape the
    chain's check)."""
    import importlib
    import warnings

    obj = importlib.import_module("torch" if root == "torch" else "torch.nn.functional")
    current = obj.__name__
    for name in attrs:
        with warnings.catch_warnings():  # a lazily imported torch module may warn about itself
            warnings.simplefilter("ignore")
            obj = getattr(obj, name, None)
        if obj is None:
            return True  # not an attribute at all: the cell will fail with its own AttributeError
        if isinstance(obj, types.ModuleType):
            if not obj.__name__.startswith(current + "."):
                return False
            current = obj.__name__
    return not isinstance(obj, types.ModuleType)


def _problem(node: ast.AST, allow: Allow, builtin_names: frozenset, assigned: set[str], inner: set[int]) -> str | None:
    """Why `node` is refused, or None. `inner` holds the ids of nodes that are the `.value` of an
    attribute: a module name may appear only there, and a chain is judged once, at its outermost node."""
    for kind, what in FORBIDDEN_STATEMENTS.items():
        if isinstance(node, kind):
            return f"{what} are not allowed in an answer cell"
    if isinstance(node, ast.Import):
        if any((a.name, a.asname) not in IMPORTS for a in node.names):
            return "imports are not allowed in an answer cell (torch and F are already there)"
    if isinstance(node, ast.ImportFrom):
        if any((node.module, a.name, a.asname) not in IMPORTS_FROM for a in node.names) or node.level:
            return "imports are not allowed in an answer cell (torch and F are already there)"
    if isinstance(node, ast.With):
        for item in node.items:
            call = item.context_expr
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and _chain(call.func) == ("torch", [call.func.attr]) and call.func.attr in CONTEXTS
                    and item.optional_vars is None):
                return "with blocks are not allowed in an answer cell, except `with torch.no_grad():`"
    if isinstance(node, ast.Name):
        if node.id.startswith("__"):
            return f"the name {node.id} is not allowed"
        if isinstance(node.ctx, (ast.Store, ast.Del)) and node.id in PROTECTED:
            return f"{node.id} must not be reassigned"
        if node.id in builtin_names and node.id not in allow.builtins:
            # Loaded or bound: `exec = exec` would smuggle the builtin in under its own name.
            return f"the builtin name {node.id} is not allowed in an answer cell"
        if isinstance(node.ctx, ast.Load) and node.id in PROTECTED and id(node) not in inner:
            return f"{node.id} may only be used as {node.id}.<function> (no aliases of the module)"
    if isinstance(node, ast.Attribute):
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            return f"assigning to an attribute (.{node.attr}) is not allowed: change tensors, not objects"
        if node.attr.startswith("_"):
            return f"the private attribute .{node.attr} is not allowed"
        root, attrs = _chain(node)
        if root in PROTECTED:
            if id(node) in inner:
                return None
            if root == "torch":
                allowed = attrs[0] in allow.torch or (attrs[:2] == ["nn", "functional"] and
                                                      (len(attrs) == 2 or attrs[2] in allow.functional))
            else:
                allowed = attrs[0] in allow.functional
            denied = [a for a in attrs if a in TENSOR_DENIED]
            if not allowed or denied or not _descends(root, attrs):
                return f"{root}.{'.'.join(attrs)} is not tensor math this exercise allows"
            return None
        if node.attr in TENSOR_DENIED:
            return f".{node.attr} reaches autograd, storage or files, which an answer cell must not use"
    if isinstance(node, ast.keyword) and node.arg in TENSOR_DENIED:
        return f"the keyword argument {node.arg}= reaches autograd, which an answer cell must not use"
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__" in node.value:
        return "strings naming dunder attributes are not allowed"
    return None


@functools.lru_cache(maxsize=2048)  # a class writes many identical cells (Allow and Refusal are immutable)
def check(source: str, allow: Allow = Allow()) -> Refusal | None:
    """The first refused construct of a cell, or None when the cell may run."""
    import builtins

    builtin_names = frozenset(dir(builtins))
    if len(source) > MAX_CELL_CHARS:
        return Refusal(0, "", f"the cell has {len(source)} characters, more than the {MAX_CELL_CHARS} an answer needs")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        line = (exc.text or "").rstrip("\n")
        return Refusal(exc.lineno or 0, line, f"syntax error ({exc.msg})")
    except (RecursionError, MemoryError, ValueError) as exc:  # nesting too deep for the parser, NUL bytes
        return Refusal(0, "", f"the cell could not be parsed ({type(exc).__name__})")
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    assigned |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assigned |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments)
                 for a in (*n.posonlyargs, *n.args, *n.kwonlyargs, n.vararg, n.kwarg) if a is not None}
    assigned -= PROTECTED
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    lines = source.splitlines()
    try:
        problems = [(getattr(node, "lineno", 0), getattr(node, "col_offset", 0), reason) for node in ast.walk(tree)
                    if (reason := _problem(node, allow, builtin_names, assigned, inner))]
    except RecursionError:
        return Refusal(0, "", "the cell is nested too deeply to be checked")
    if not problems:
        return None
    lineno, _, reason = min(problems)
    return Refusal(lineno, lines[lineno - 1] if 0 < lineno <= len(lines) else "", reason)


# Words a grader prints: "score: 47/47", "max_score", "10 points", "All tests passed", "Grade: A".
GRADE_LIKE = re.compile(r"\b(max_)?score\b|\bpoints?\b|\bpts\b|\bgrade\b|\btests? passed\b|\ball tests\b",
                        re.IGNORECASE)


@functools.lru_cache(maxsize=2048)
def forged_output(source: str) -> Refusal | None:
    """The first print() of text that looks like a grading result. It changes no score (only the
    sandbox's answers are read), but a cell that tries it is worth an instructor's look."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return None
    lines = source.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            for text in ast.walk(node):
                if isinstance(text, ast.Constant) and isinstance(text.value, str) and GRADE_LIKE.search(text.value):
                    code = lines[node.lineno - 1] if 0 < node.lineno <= len(lines) else ""
                    return Refusal(node.lineno, code, "prints what looks like a grading result, which changes "
                                                      "nothing: only the grader's own comparisons score")
    return None


def screen(cells: dict[str, str], allow: Allow) -> tuple[dict[str, str], dict[str, Refusal]]:
    """Split a submission's answer cells into those that may run and those refused, with why."""
    refused = {cell: r for cell, source in cells.items() if (r := check(source, allow)) is not None}
    return {c: s for c, s in cells.items() if c not in refused}, refused
