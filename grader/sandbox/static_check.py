"""Answer cells are read (never run) before they reach the sandbox: anything a gradient does not need
is refused, with the offending line quoted.

Default-deny all the way down. A cell is accepted only when every node of its syntax tree has one of
the types below, every attribute name, keyword name, builtin and `torch` / `F` / `math` name it uses is
on an allowlist, and no identifier, attribute or string holds a dunder. A Python construct this module
does not name is refused, including any a later Python adds. A course adds NAMES in course.yml
(`allow.torch`, `allow.functional`, `allow.builtins`), never node types.

Accepted node types (anything else is refused), and why each is safe:
- Module, Expr, Pass, Break, Continue: a cell's frame; an expression statement runs only what the
  expression itself may run.
- Assign, AugAssign, Delete, NamedExpr: bind, update or unbind a plain name or a subscript (del takes
  names only); never an attribute, never `torch`, `F`, `math`, `dict` or a builtin the cell may not
  use, so no later line or cell runs something else under a trusted name. (An annotated assignment is
  refused: at the top of a cell it writes to the namespace's `__annotations__`.)
- If, IfExp, For, While, Assert: control flow over checked expressions. A loop that never ends is the
  sandbox's per-cell time limit's business; `assert` only raises.
- FunctionDef, Lambda, Return, arguments, arg: helpers, and a cell whose answer is a function. No
  decorators (a decorator calls anything on the function), no annotations or defaults that are not
  checked expressions, no parameter named like a module or a builtin.
- With, withitem: exactly `with torch.no_grad():`, with no `as`; it switches autograd off, never on.
- Import, ImportFrom, alias: only re-imports of what the notebook has (`import torch`,
  `import torch.nn.functional as F`, `from torch.nn import functional as F`) and `import math`.
- Name, Load, Store, Del: any identifier without a dunder; a builtin only from the builtins
  allowlist; `torch`, `F` and `math` only as the root of `torch.<name>`, never as values.
- Attribute: `torch.<name>`, `torch.nn.functional.<name>`, `F.<name>` and `math.<name>` from their
  allowlists, and after that (or on any other value) only a name from ATTRIBUTES: tensor math
  (`.sum`, `.T`, `.view`, ...), shapes, dtypes and the plain methods of dicts and lists. Nothing that
  reaches autograd, storage, files, frames or code, and never assigned or deleted.
- Call, keyword, Starred: a call of any accepted expression; every keyword name from KEYWORDS (`dim`,
  `keepdim`, ...), or any plain name for `dict(...)` (which builds a dict and nothing else, and whose
  name no cell may bind). `**mapping` in a call is refused: its keys would be keyword names no one
  read. `*sequence` passes positional values only.
- Subscript, Slice, Tuple, List, Set, Dict: indexing and displays; `{**d}` in a dict display merges
  dicts, it names no keyword.
- ListComp, SetComp, DictComp, GeneratorExp, comprehension: loops written as expressions; a generator's
  frame is reachable only through attributes (`gi_frame`) no allowlist holds; no `async for`.
- BinOp, UnaryOp, BoolOp, Compare and their operators (Add, Sub, Mult, MatMult, Div, FloorDiv, Mod,
  Pow, LShift, RShift, BitOr, BitXor, BitAnd, UAdd, USub, Not, Invert, And, Or, Eq, NotEq, Lt, LtE,
  Gt, GtE, Is, IsNot, In, NotIn): arithmetic, dispatched to the operands' own types.
- Constant: real numbers, booleans, None, Ellipsis, and strings without a dunder; bytes and complex numbers
  are refused.
- JoinedStr, FormattedValue: f-strings for printing. Their fields are expressions checked like any
  other, and a format spec may hold text only, no nested field; unlike `str.format` and `format_map`
  (refused), whose templates read attributes by name (`'{0.__class__}'`), an f-string reads nothing it
  does not spell out.

Refused, among everything else: match (a class pattern reads attributes by name), class, global,
nonlocal, try (it could swallow the time limit), raise, async, await, yield, annotated assignments,
decorators, every other import, `**` in a call, `str.format`.
"""
from __future__ import annotations

import ast
import builtins
import functools
import re
from dataclasses import dataclass

from grader import syntax
from grader.limits import Budget

TORCH = frozenset("""
    abs absolute add addbmm addcdiv addcmul addmm addmv addr all allclose amax amin any arange argmax argmin argsort
    asinh atanh baddbmm bincount bmm bool broadcast_tensors broadcast_to cat chunk clamp clamp_max clamp_min clip clone
    concat concatenate cos cosh cumprod cumsum diag diag_embed diagonal diff div divide dot dsplit
    einsum empty empty_like eq equal erf erfc exp expand_copy expm1 eye flatten flip float16 float32 float64 full
    full_like gather ge ger greater gt heaviside hsplit hstack index_add index_copy index_put index_select inner int16
    int32 int64 int8 isclose isfinite isinf isnan kron le linspace log log10 log1p log2 log_softmax
    logical_and logical_not logical_or logsumexp long lt masked_fill masked_select matmul max maximum
    mean min minimum mm movedim mul multiply mv narrow ne neg negative nonzero norm numel ones
    ones_like outer permute pi pow prod rand rand_like randn randn_like reciprocal repeat_interleave
    relu reshape rsqrt scatter scatter_add scatter_reduce select sigmoid sign sin sinh softmax split sqrt
    square squeeze stack std sub subtract sum swapaxes swapdims t take take_along_dim tanh tensor tensordot
    tile topk transpose tril triu true_divide unbind unique unsqueeze var vsplit vstack where
    zeros zeros_like Tensor Size float double int half dtype no_grad
""".split())

FUNCTIONAL = frozenset("""
    one_hot softmax log_softmax tanh pad normalize relu sigmoid gelu cross_entropy linear embedding nll_loss
    mse_loss silu softplus layer_norm batch_norm
""".split())

MATH = frozenset("pi e inf nan sqrt exp log log2 log10 log1p tanh isclose prod fsum ceil floor".split())

BUILTINS = frozenset("""
    abs all any bool dict divmod enumerate filter float int isinstance len list map max min pow
    print display range reversed round set slice sorted str sum tuple zip True False None
""".split())

# Attribute names a value other than a module may be asked for: the math of tensors (methods, their
# in-place forms, shapes and dtypes), torch.Size and max/min's (values, indices) pairs, and the plain
# methods of dicts and lists. No name here reaches autograd (`backward`, `grad`, `requires_grad_`,
# `register_hook`, `data`), storage or files (`numpy`, `untyped_storage`, `data_ptr`), frames or code
# (`gi_frame`, `f_globals`), or attributes by name (`format`, `format_map`).
ATTRIBUTES = frozenset("""
    T mT shape dtype device ndim values indices
    size dim numel nelement item tolist float double long int bool half to type type_as
    view view_as reshape reshape_as expand expand_as broadcast_to repeat repeat_interleave tile contiguous clone
    detach squeeze unsqueeze flatten unflatten permute transpose t movedim swapaxes swapdims narrow select
    chunk split unbind flip roll tril triu diag diagonal diag_embed
    sum mean max min amax amin argmax argmin std var prod cumsum cumprod logsumexp norm
    exp expm1 log log1p log2 log10 sqrt rsqrt pow abs neg negative reciprocal square sign tanh sigmoid erf erfc
    asinh atanh
    softmax log_softmax relu clamp clip clamp_min clamp_max
    add sub mul div true_divide floor_divide remainder matmul mm bmm mv dot outer inner ger addcmul addcdiv addmm
    addmv addr addbmm baddbmm bincount
    masked_fill masked_select gather scatter scatter_add scatter_reduce index_add index_select
    index_copy index_fill index_put where eq ne lt le gt ge all any allclose isclose equal
    isnan isinf isfinite topk sort argsort unique nonzero count_nonzero heaviside
    new_zeros new_ones new_full new_empty new_tensor
    zero_ fill_ copy_ add_ sub_ mul_ div_ pow_ exp_ log_ neg_ clamp_ masked_fill_ index_add_
    index_copy_ index_fill_ index_put_ scatter_ scatter_add_ unsqueeze_ squeeze_ t_ transpose_
    reciprocal_ square_ sqrt_ rsqrt_ abs_ sign_ tanh_ sigmoid_ relu_ clamp_min_ clamp_max_ clip_ log1p_
    log2_ log10_ negative_ true_divide_ floor_divide_ remainder_ addcmul_ addcdiv_ addmm_ addmv_ addr_ addbmm_
    baddbmm_ scatter_reduce_ ceil_ floor_
    is_floating_point itemsize
    keys items get append extend copy update count index
    ceil floor
""".split())

# Keyword argument names: those of the tensor functions above and of the allowed builtins.
KEYWORDS = frozenset("""
    dim keepdim axis keepdims dtype device num_classes accumulate alpha value beta reduction ignore_index
    label_smoothing weight bias input other out index src reduce include_self min max exponent
    descending stable sorted largest k diagonal dims dim0 dim1 start_dim end_dim size fill_value
    start end step steps pad mode p eps rtol atol equal_nan unbiased correction mask source
    return_inverse return_counts sizes shifts chunks split_size_or_sections sections indices_or_sections
    bins weights minlength sep flush key reverse default strict ndigits approximate
    training normalized_shape running_mean running_var momentum
""".split())

MAX_CELL_CHARS = 20_000

# Module roots: the only names that may stand for a module, each with the names it allows.
PROTECTED = frozenset({"torch", "F", "math"})
FUNCTIONAL_PATH = ["nn", "functional"]

# Re-importing what the notebook already imported is harmless; every other import is refused.
IMPORTS = {("torch", None), ("torch", "torch"), ("torch.nn.functional", "F"), ("math", None), ("math", "math")}
IMPORTS_FROM = {("torch.nn", "functional", "F")}

OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.MatMult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift,
             ast.RShift, ast.BitOr, ast.BitXor, ast.BitAnd, ast.UAdd, ast.USub, ast.Not, ast.Invert, ast.And,
             ast.Or, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot, ast.In, ast.NotIn)

# Every node type a cell may hold (the module docstring says why each is safe). Those with a rule of
# their own are judged in _problem; the rest are safe by their type alone.
ACCEPTED = frozenset({
    ast.Module, ast.Expr, ast.Pass, ast.Break, ast.Continue,
    ast.Assign, ast.AugAssign, ast.Delete, ast.NamedExpr,
    ast.If, ast.IfExp, ast.For, ast.While, ast.Assert,
    ast.FunctionDef, ast.Lambda, ast.Return, ast.arguments, ast.arg,
    ast.With, ast.withitem, ast.Import, ast.ImportFrom, ast.alias,
    ast.Name, ast.Load, ast.Store, ast.Del, ast.Attribute, ast.Call, ast.keyword, ast.Starred,
    ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.Set, ast.Dict,
    ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.comprehension,
    ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, *OPERATORS,
    ast.Constant, ast.JoinedStr, ast.FormattedValue,
})

# What a refused node type is called in its refusal; the type's own name otherwise.
TRY = "try/except statements (they could swallow the time limit)"
REFUSED_NAMES = {
    ast.Global: "global statements", ast.Nonlocal: "nonlocal statements", ast.ClassDef: "class definitions",
    ast.Try: TRY, ast.TryStar: TRY, ast.Raise: "raise statements",
    ast.AsyncFunctionDef: "async code", ast.Await: "async code", ast.AsyncFor: "async code",
    ast.AsyncWith: "async code", ast.Yield: "generators (yield)", ast.YieldFrom: "generators (yield)",
    ast.Match: "match statements (a class pattern reads attributes by name)",
    ast.AnnAssign: "annotated assignments (write `x = ...`)",
}

# The same in every process: a Jupyter kernel adds IPython's names to builtins while a cell runs, so the self-check
# in a student's kernel refused `display(dW2)` as a builtin where the grader, without them, ran it into a NameError.
BUILTIN_NAMES = frozenset(dir(builtins)) | {"display", "get_ipython"}


@dataclass(frozen=True)
class Allow:
    torch: frozenset = TORCH
    functional: frozenset = FUNCTIONAL
    builtins: frozenset = BUILTINS

    def extended(self, torch=(), functional=(), builtins=()) -> Allow:
        return Allow(self.torch | set(torch), self.functional | set(functional), self.builtins | set(builtins))


@dataclass(frozen=True)
class Refusal:
    """`unreadable`: Python cannot parse the cell, an error any student makes, not a construct refused."""

    line: int
    code: str
    reason: str
    unreadable: bool = False
    honest: bool = False  # every construct refused is one an honest student writes (_honest): no integrity flag

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}: {self.code.strip()}"


# A matrix inverse where a transpose belongs is a mistake of the math, not only of the allowlist: said so, as
# the refusal alone reads as "find another way to invert".
_INVERSES = frozenset({"inv", "pinv", "inverse", "pinverse", "solve", "lstsq", "tensorinv", "tensorsolve"})


# Refused spellings of allowed math, with the spelling an answer cell may use (an instructor trial's right
# `torch.special.expit(s)` and `torch.linalg.vector_norm(u, dim=1, keepdim=True)` were told only "not allowed").
SPELT_OTHERWISE = {
    ("special", "expit"): "torch.sigmoid",
    ("special", "softmax"): "F.softmax",
    ("special", "log_softmax"): "F.log_softmax",
    ("special", "logsumexp"): "torch.logsumexp",
    ("linalg", "vector_norm"): "x.norm(dim=..., keepdim=...)",
    ("linalg", "norm"): "x.norm(dim=..., keepdim=...)",
}


def _spelt_otherwise(attrs) -> str:
    allowed = SPELT_OTHERWISE.get(tuple(attrs[:2]))
    return f": write {allowed}" if allowed else ""


def _inverse(attrs) -> str:
    if not _INVERSES & set(attrs):
        return ""
    return ("; and no gradient here needs an inverse: a matrix product's goes back through the other factor "
            "transposed (for out = x @ W, dx = dout @ W.T and dW = x.T @ dout)")


def _chain(node: ast.Attribute) -> tuple[str | None, list[str]]:
    """(root name, attribute names) of `a.b.c`, root None when it is not a plain name."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), attrs[::-1]


def _module_attrs(root: str, attrs: list[str], allow: Allow) -> int | None:
    """How many leading attributes of `root.a.b...` name a module's allowed member (the rest are
    ordinary attributes of that member), or None when the chain is not allowed. A chain that ends in
    a module (`torch.nn`) is refused: an alias of a module would escape this check."""
    if root == "torch" and attrs[:2] == FUNCTIONAL_PATH:
        return 3 if len(attrs) > 2 and attrs[2] in allow.functional else None
    names = {"torch": allow.torch, "F": allow.functional, "math": MATH}[root]
    return 1 if attrs[0] in names else None


def _binding(name: str, allow: Allow) -> str | None:
    """Why a name may not be bound (assigned, a parameter, a function, a loop variable): a module's
    name, a builtin the cell may not use (`exec = exec` would smuggle it in under its own name), or
    `dict`, whose calls may name any keyword."""
    if name in PROTECTED:
        return f"{name} must not be reassigned"
    if name in BUILTIN_NAMES and (name not in allow.builtins or name == "dict"):
        return f"the builtin name {name} must not be reassigned in an answer cell"
    return None


def _problem(node: ast.AST, allow: Allow, context: dict[int, str]) -> str | None:
    """Why `node` is refused, or None. `context` tells, by node id, the role a node plays in its parent:
    "chain" for the value of an attribute (a module name may appear only there, and a chain is judged
    once, at its outermost node), "decorator" for a decorator (refused where it stands, so the refusal
    quotes its line)."""
    kind = type(node)
    if context.get(id(node)) == "decorator":
        return "decorators are not allowed in an answer cell"
    if kind not in ACCEPTED:
        what = REFUSED_NAMES.get(kind, f"{kind.__name__} nodes")
        return f"{what} are not allowed in an answer cell"
    if isinstance(node, ast.Import):
        if any((a.name, a.asname) not in IMPORTS for a in node.names):
            return "imports are not allowed in an answer cell (torch and F are already there)"
    elif isinstance(node, ast.ImportFrom):
        if any((node.module, a.name, a.asname) not in IMPORTS_FROM for a in node.names) or node.level:
            return "imports are not allowed in an answer cell (torch and F are already there)"
    elif isinstance(node, ast.With):
        for item in node.items:
            call = item.context_expr
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and _chain(call.func) == ("torch", ["no_grad"]) and not call.args and not call.keywords
                    and item.optional_vars is None):
                return "with blocks are not allowed in an answer cell, except `with torch.no_grad():`"
    elif isinstance(node, ast.FunctionDef):
        if "__" in node.name:
            return f"the name {node.name} is not allowed"
        return _binding(node.name, allow)
    elif isinstance(node, ast.arg):
        if "__" in node.arg:
            return f"the name {node.arg} is not allowed"
        return _binding(node.arg, allow)
    elif isinstance(node, ast.Delete):
        if not all(isinstance(t, ast.Name) for t in node.targets):
            return "del may only remove names, never an attribute or an item"
    elif isinstance(node, ast.Name):
        if "__" in node.id:
            return f"the name {node.id} is not allowed"
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            return _binding(node.id, allow)
        if node.id in BUILTIN_NAMES and node.id not in allow.builtins:
            return f"the builtin name {node.id} is not allowed in an answer cell"
        if node.id in PROTECTED and context.get(id(node)) != "chain":
            return f"{node.id} may only be used as {node.id}.<function> (no aliases of the module)"
    elif isinstance(node, ast.Attribute):
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            return f"assigning to an attribute (.{node.attr}) is not allowed: change tensors, not objects"
        if "__" in node.attr or node.attr.startswith("_"):
            return f"the private attribute .{node.attr} is not allowed"
        if context.get(id(node)) == "chain":
            return None  # judged with its whole chain, at the outermost attribute
        root, attrs = _chain(node)
        if root in PROTECTED:
            members = _module_attrs(root, attrs, allow)
            rest = attrs[members:] if members else []
            if members is None or any(a not in ATTRIBUTES for a in rest):
                return (f"{root}.{'.'.join(attrs)} is not tensor math this exercise allows{_spelt_otherwise(attrs)}"
                        f"{_inverse(attrs)}")
            return None
        outside = [a for a in attrs if a not in ATTRIBUTES]
        if outside and outside[0] in ("format", "format_map"):
            return f".{outside[0]} reads the attributes its template names: print with an f-string instead"
        if outside == ["numpy"] and attrs[-1] == "numpy":
            return (".numpy() is not allowed in an answer cell: keep the gradient a torch tensor (torch has the same "
                    "math: .T, @, .sum(0), torch.where)")
        if outside:
            return f".{outside[0]} is not an attribute an answer cell may use (tensor math only){_inverse(outside)}"
    elif isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and _problem(node.func, allow, context):
            return None  # the function itself is refused: that is the reason, not how it is called
        # dict(a=...) and d.update(a=...) name keys, not options: an instructor trial's right backward function ended
        # with `grads.update(Wx=dWx, ...)`, told to "pass it by position"
        call_of_dict = (isinstance(node.func, ast.Name) and node.func.id == "dict"
                        or isinstance(node.func, ast.Attribute) and node.func.attr == "update")
        for keyword in node.keywords:
            if keyword.arg is None:
                return "**keyword unpacking is not allowed in a call: name each keyword argument"
            if "__" in keyword.arg:
                return f"the keyword argument {keyword.arg}= is not allowed"
            if keyword.arg not in KEYWORDS and not call_of_dict:
                return (f"the keyword argument {keyword.arg}= is not one an answer cell may use "
                        f"(pass it by position)")
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, bytes):
            return "bytes are not allowed in an answer cell"
        if isinstance(node.value, complex):  # a red team's complex-step derivative: full marks with no calculus
            return f"complex numbers ({node.value!r}) are not allowed in an answer cell: no gradient here needs one"
        if isinstance(node.value, str) and "__" in node.value:
            return "strings naming dunder attributes are not allowed"
    elif isinstance(node, ast.FormattedValue):
        spec = node.format_spec
        if spec is not None and not all(isinstance(v, ast.Constant) for v in spec.values):
            return "an f-string's format spec may not hold a field of its own"
    return None


# What an honest student writes and the check refuses (math from outside the allowlist, a math library imported,
# Python the check refuses for what it could hide) is an error to fix, not an integrity flag: a right gradient written
# `torch.linalg.matmul(x.T, dout)`, or `import numpy as np` left at the top of a cell, marked its student for a
# cheating review. Only what _honest lists, and only where no name in it reaches what a cheat reaches for.
_HONEST_STATEMENTS = (ast.Global, ast.Nonlocal, ast.AnnAssign)
NUMPY_BRIDGE = frozenset({"numpy", "from_numpy"})
_HONEST_MODULES = frozenset({"numpy", "scipy", "scipy.special", "math", "torch", "torch.nn", "torch.nn.functional",
                             "torch.linalg", "torch.special", "einops"})
_HONEST_BUILTINS = frozenset({"iter", "next", "repr", "hash", "ord", "chr", "frozenset", "callable", "bin", "hex"})
_HONEST_RAISES = frozenset({"ValueError", "AssertionError", "RuntimeError", "TypeError", "Exception",
                            "NotImplementedError", "IndexError", "KeyError"})
# Autograd and its tools, memory and storage, files, code, processes, the interpreter's internals, torch's settings,
# and a module reached again through another (torch.linalg.torch).
_SUSPECT = re.compile(r"grad|backward|jvp|vjp|jacobian|hessian|hook|storage|ptr|numpy|save|load|pickle|file|open|"
                      r"frame|code|compile|jit|script|fx|librar|util|hub|inference|register|overrid|apply|subclass|"
                      r"cuda|share|pin_|buffer|format|module|import|exec|eval|attr|global|local|vars|set_|requires|"
                      r"enable|builtin|system|popen|spawn|fork|signal|thread|process|serializ|"
                      r"^data$|^func$|^os$|^sys$|^ops$|^torch$", re.IGNORECASE)


def _clean(name: str | None) -> bool:
    return name is not None and not name.startswith("_") and not _SUSPECT.search(name)


def _named(node: ast.expr | None) -> str | None:
    """The name an exception or a base is written with: `ValueError`, `ValueError('x')`, `torch.Tensor`."""
    node = node.func if isinstance(node, ast.Call) else node
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _honest(node: ast.AST, called: set[int], context: dict[int, str]) -> bool:
    """Whether a refused node is one an honest student writes; `called` holds the ids of the nodes a call calls
    (math called is math; a module named alone, `f = torch.nn.functional`, is an alias), `context` _problem's."""
    if context.get(id(node)) == "decorator":  # it runs on the function it decorates
        return False
    if isinstance(node, _HONEST_STATEMENTS):
        return True
    if isinstance(node, ast.ClassDef):  # a helper class; one of torch's, subclassed, could lie about its values
        return not (node.bases or node.keywords or node.decorator_list)
    if isinstance(node, (ast.Try, ast.TryStar)):  # its handlers are judged on their own
        return True
    if isinstance(node, ast.ExceptHandler):  # except BaseException, or a bare except, swallows the time limit
        return node.type is not None and _named(node.type) not in ("BaseException", None)
    if isinstance(node, ast.Raise):
        return _named(node.exc) in _HONEST_RAISES
    if isinstance(node, ast.Delete):
        return all(isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) for t in node.targets)
    if isinstance(node, ast.Import):
        return all(a.name in _HONEST_MODULES and (a.asname is None or a.name != "torch") for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return not node.level and node.module in _HONEST_MODULES and all(_clean(a.name) for a in node.names)
    if isinstance(node, ast.Attribute):
        root, attrs = _chain(node)
        if attrs[-1] in NUMPY_BRIDGE and id(node) in called and (root is None or root in PROTECTED or _clean(root)) \
                and all(map(_clean, attrs[:-1])):
            # `dW = dW.numpy()`, `torch.from_numpy(a)`, a student at home in numpy: refused all the same (a write
            # through the memory they share evades torch's version counter), but no cheat gains from a cell never run
            return isinstance(node.ctx, ast.Load) and context.get(id(node)) != "written"
        return (id(node) in called and isinstance(node.ctx, ast.Load) and all(map(_clean, attrs))
                and (root is None or root in PROTECTED or _clean(root)))
    if isinstance(node, ast.Name):
        return node.id in _HONEST_BUILTINS or node.id in _HONEST_RAISES
    if isinstance(node, ast.Call):
        return all(_clean(k.arg) for k in node.keywords)
    return False


def _context(tree: ast.AST) -> dict[int, str]:
    """The role of each node that plays one in its parent (see _problem)."""
    context = {}
    for node in ast.walk(tree):  # a parent before its children: a role given below overrides "written"
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
        context.update((id(inner), "written") for target in targets for inner in ast.walk(target))
        if isinstance(node, ast.Attribute):
            context[id(node.value)] = "chain"
        for decorator in getattr(node, "decorator_list", ()):
            context[id(decorator)] = "decorator"
    return context


def _nodes(tree: ast.AST):
    """Every node with the line it is reported at: its own, or its nearest ancestor's (operators,
    contexts and argument lists have none). Iterative: a deep cell must not exhaust the stack here."""
    stack = [(tree, 0)]
    while stack:
        node, line = stack.pop()
        line = getattr(node, "lineno", line)
        yield node, line
        stack.extend((child, line) for child in ast.iter_child_nodes(node))


@functools.lru_cache(maxsize=2048)  # a class writes many identical cells (Allow and Refusal are immutable)
def check(source: str, allow: Allow = Allow()) -> Refusal | None:
    """The first refused construct of a cell, or None when the cell may run."""
    if len(source) > MAX_CELL_CHARS:
        return Refusal(0, "", f"the cell has {len(source)} characters, more than the {MAX_CELL_CHARS} an answer needs")
    try:
        tree = syntax.parse(source)
    except SyntaxError as exc:
        line = (exc.text or "").rstrip("\n")
        # Jupyter runs `%%time` or `!ls` through IPython; the grader runs the cell as Python, where they are none
        magic = line.lstrip().startswith(("%", "!"))
        why = "an IPython magic or shell command, which is not Python: take it out of the answer cell" if magic \
            else f"syntax error ({exc.msg})"
        return Refusal(exc.lineno or 0, line, why, unreadable=True)
    except (RecursionError, MemoryError, ValueError) as exc:  # nesting too deep for the parser, NUL bytes
        return Refusal(0, "", f"the cell could not be parsed ({type(exc).__name__})", unreadable=True)
    lines = source.splitlines()
    try:
        context = _context(tree)
        problems = [(line, getattr(node, "col_offset", 0), reason, node) for node, line in _nodes(tree)
                    if (reason := _problem(node, allow, context))]
    except RecursionError:
        return Refusal(0, "", "the cell is nested too deeply to be checked")
    if not problems:
        return None
    lineno, _, reason, _ = min(problems, key=lambda problem: problem[:3])
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return Refusal(lineno, lines[lineno - 1] if 0 < lineno <= len(lines) else "", reason,
                   honest=all(_honest(problem[3], called, context) for problem in problems))


# Words a grader prints: "score: 47/47", "max_score", "10 points", "All tests passed", "Grade: A".
GRADE_LIKE = re.compile(r"\b(max_)?score\b|\bpoints?\b|\bpts\b|\bgrade\b|\btests? passed\b|\ball tests\b",
                        re.IGNORECASE)


@functools.lru_cache(maxsize=2048)
def forged_output(source: str) -> Refusal | None:
    """The first print() of text that looks like a grading result. It changes no score (only the
    sandbox's answers are read), but a cell that tries it is worth an instructor's look.

    One walk over the tree, each node visited once with the outermost print() around it: walking the
    subtree of every print() instead cost the square of the nesting (a dead branch of 200 nested
    print( calls took seconds of the trusted process per cell)."""
    try:
        tree = syntax.parse(source)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return None
    first = None
    stack: list[tuple[ast.AST, ast.Call | None]] = [(tree, None)]
    while stack:
        node, printing = stack.pop()
        if printing is None and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "print":
            printing = node
        elif printing is not None and isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and GRADE_LIKE.search(node.value):
            if first is None or (printing.lineno, printing.col_offset) < (first.lineno, first.col_offset):
                first = printing
            continue
        stack.extend((child, printing) for child in ast.iter_child_nodes(node))
    if first is None:
        return None
    lines = source.splitlines()
    code = lines[first.lineno - 1] if 0 < first.lineno <= len(lines) else ""
    return Refusal(first.lineno, code, "prints what looks like a grading result, which changes nothing: only the "
                                       "grader's own comparisons score")


@dataclass
class Screened:
    """A submission's answer cells read: those that may run, those refused (with why), and those of the
    runnable ones that print a fake grading result."""

    runnable: dict[str, str]
    refused: dict[str, Refusal]
    forged: dict[str, Refusal]


def screen(cells: dict[str, str], allow: Allow, budget: Budget | None = None) -> Screened:
    """Each answer cell checked, then scanned for forged output, one at a time under `budget` (a cell's
    cost is linear in its length, which MAX_CELL_CHARS caps): OverBudget when they cost too much."""
    screened = Screened({}, {}, {})
    for cell, source in cells.items():
        if budget is not None:
            budget.check("checking the answer cells")
        refusal = check(source, allow)
        if refusal is not None:
            screened.refused[cell] = refusal
            continue
        screened.runnable[cell] = source
        if (forged := forged_output(source)) is not None:
            screened.forged[cell] = forged
    if budget is not None:
        budget.check("checking the answer cells")
    return screened
