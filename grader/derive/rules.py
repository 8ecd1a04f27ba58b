"""The vector-Jacobian rules, one per operation the forward grammar accepts, each with its classic slips.

A rule receives a `Site`: one operation of a forward line (`node`), what names its output (`out`: the
line's own name when the operation is the whole line, so that tanh's derivative is written with `h`),
the gradient reaching that output (`g`) and the derivation's `ctx` (shapes, sizes, words). It returns
an `Edge` per operand: the gradient that operand receives, why in the lecture's words, and the slips a
student makes there, each as a stable name, a sentence that continues "your dX ..." and the wrong
gradient. Sums over broadcast dimensions are not the rules' business: the derivation adds them after
every edge, from the shapes.

Each operation is one entry of OPERATIONS, registered by `@operation` where its rule is written (an
elementwise function by its entry in grader.exercise.ELEMENTWISE): `classify`, the rule a line is
differentiated with and the grammar's prose (GRAMMAR) are read from there.
"""
from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from grader import syntax
from grader.derive.algebra import Product, call, clone, code, name, number, subscript, template
from grader.exercise import ELEMENTWISE, Elementwise
from grader.vocabulary import Chain, Transpose, missed_factor

# The derivation the rules ask about shapes, sizes and words (engine.Derivation, which imports this
# module: named here only in words, so the package has no import cycle).
Derivation = Any

@dataclass(frozen=True)
class Site:
    node: ast.expr
    out: ast.expr
    g: Product
    ctx: Any

    @property
    def y(self) -> str:
        return code(self.out)


@dataclass(frozen=True)
class Edge:
    """`child` receives `g`. `index`: `child` (a name) receives `g` only at `child[index]` (the
    statement form `dx[range(n), Yb] = ...`), the rest of it nothing."""

    child: ast.expr
    g: Product
    why: str
    slips: tuple[tuple[str, str, Product], ...] = ()
    index: ast.expr | None = None
    # The slips written as whole statements (an index written with = where repeats must add up).
    index_slips: tuple[tuple[str, str, Product, ast.expr], ...] = field(default=())
    # Values `g` spells out that the cell computes on lines of their own first, by these names (xhat).
    named: tuple[tuple[str, ast.expr], ...] = ()


# ------------------------------------------------------------------------------------------ matching

@dataclass(frozen=True)
class Op:
    """One operation: its rule's name, the operand(s) and the other arguments."""

    kind: str
    operands: tuple[ast.expr, ...]
    args: tuple[ast.expr, ...] = ()
    kwargs: dict = field(default_factory=dict)


_MODULES = ("torch", "F")


@dataclass(frozen=True)
class Operation:
    """One entry of the grammar: how a forward line writes the operation (a Python operator, an attribute,
    the torch functions and tensor methods that name it, or its own `parse` of such a call), its
    vector-Jacobian product with the explanation and the classic slips it returns, and how the grammar's
    prose lists it (`family` is its line there; `grammar` empty where another entry's words cover it).
    Every other view of the operation (classify, the prose, the rule a line is differentiated with) is
    read from here."""

    kind: str
    vjp: Callable[[Site, Op], list[Edge]]
    family: str
    grammar: str = ""
    calls: tuple[str, ...] = ()
    operator: type[ast.operator] | type[ast.unaryop] | None = None
    attribute: str | None = None
    parse: Callable[[ast.Call, bool], Op | None] | None = None


OPERATIONS: dict[str, Operation] = {}


def operation(kind: str, family: str, grammar: str = "", **how) -> Callable:
    """Registers the decorated vector-Jacobian product as the rule of `kind` (see `Operation`)."""
    def register(vjp: Callable[[Site, Op], list[Edge]]) -> Callable[[Site, Op], list[Edge]]:
        OPERATIONS[kind] = Operation(kind, vjp, family, grammar, **how)
        return vjp
    return register


def classify(node: ast.expr) -> Op | None:
    """The operation `node` is, or None when no rule has it."""
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        entry = _by("operator").get(type(node.op))
        if entry is None:
            return None
        return Op(entry.kind, (node.left, node.right) if isinstance(node, ast.BinOp) else (node.operand,))
    if isinstance(node, ast.Attribute):
        if node.attr in _by("attribute"):
            return Op(node.attr, (node.value,))
        if node.attr == "values" and _is_max(node.value):
            return _max(node.value)
        return None
    if isinstance(node, ast.Subscript):
        if _is_max(node.value) and isinstance(node.slice, ast.Constant) and node.slice.value == 0:
            return _max(node.value)
        return Op("index", (node.value,), (node.slice,))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        entry = _by_call().get(node.func.attr)
        if entry is None:
            return None
        module = _is_module(node.func.value)
        if not module and _dotted(node.func.value).startswith("torch."):  # torch.linalg.norm: no tensor's method
            return None
        if entry.parse is not None:
            return entry.parse(node, module)
        args, kwargs = tuple(node.args), {k.arg: k.value for k in node.keywords}
        if module:
            return Op(entry.kind, (args[0],), args[1:], kwargs) if args else None
        return Op(entry.kind, (node.func.value,), args, kwargs)
    return None


def _dotted(node: ast.expr) -> str:
    """`a.b.c` for a chain of names alone, else ""."""
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return node.id if isinstance(node, ast.Name) else ""


def _is_module(node: ast.expr) -> bool:
    """`torch`, `F`, or functional spelt out: what a call's receiver is when the call is no tensor's method."""
    return _dotted(node) in (*_MODULES, "torch.nn.functional")


def _by(how: str) -> dict:
    return {getattr(entry, how): entry for entry in OPERATIONS.values() if getattr(entry, how) is not None}


def _by_call() -> dict[str, Operation]:
    return {call: entry for entry in OPERATIONS.values() for call in entry.calls}


def _pieces(node: ast.Call) -> tuple[tuple[ast.expr, ...], dict]:
    return tuple(node.args), {k.arg: k.value for k in node.keywords}


def _parse_max(node: ast.Call, module: bool) -> Op | None:
    """x.max() / torch.max(x): the largest entry of the whole tensor (with a dim, .values or [0] says which
    output, so classify reads it there)."""
    args, kwargs = _pieces(node)
    if args[1:] or (module and len(args) > 1) or "dim" in kwargs:
        return None
    return Op("max", (args[0] if module else node.func.value,))


def _parse_joined(node: ast.Call, module: bool) -> Op | None:
    """torch.cat / torch.stack of a list of tensors: each is an operand."""
    args, kwargs = _pieces(node)
    if not module or not args or not isinstance(args[0], (ast.List, ast.Tuple)):
        return None
    return Op(node.func.attr, tuple(args[0].elts), args[1:], kwargs)


def _parse_where(node: ast.Call, module: bool) -> Op | None:
    args, kwargs = _pieces(node)
    return Op("where", (args[1], args[2]), (args[0],), kwargs) if module and len(args) == 3 else None


def _parse_cross_entropy(node: ast.Call, module: bool) -> Op | None:
    args, kwargs = _pieces(node)
    return Op("cross_entropy", (args[0],), args[1:], kwargs) if module else None


def _parse_matmul(node: ast.Call, module: bool) -> Op | None:
    args, _ = _pieces(node)
    return Op("matmul", (args[0], args[1])) if module and len(args) == 2 else None


def _parse_pair(node: ast.Call, module: bool) -> Op | None:
    """torch.maximum(a, b), torch.minimum(a, b), F.mse_loss(a, b): two tensors, each an operand."""
    args, kwargs = _pieces(node)
    return Op(node.func.attr, (args[0], args[1]), (), kwargs) if module and len(args) == 2 else None


def _parse_einsum(node: ast.Call, module: bool) -> Op | None:
    """torch.einsum('ij,jk->ik', a, b): the subscripts an argument, the two tensors the operands."""
    args, _ = _pieces(node)
    if not module or len(args) != 3 or not isinstance(args[0], ast.Constant) or not isinstance(args[0].value, str):
        return None
    return Op("einsum", (args[1], args[2]), (args[0],))


def _parse_norm(node: ast.Call, module: bool) -> Op | None:
    """F.layer_norm(x, shape, weight, bias, eps) and F.batch_norm(x, running_mean, running_var, weight, bias,
    training, momentum, eps): x, and the weight and bias where given, are the operands; the rest by name."""
    if not module:
        return None
    names = ("input", "normalized_shape", "weight", "bias", "eps") if node.func.attr == "layer_norm" else \
        ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
    args, kwargs = _pieces(node)
    given = {**dict(zip(names, args, strict=False)), **kwargs}
    if "input" not in given:
        return None
    affine = tuple(given[k] for k in ("weight", "bias")
                   if k in given and not (isinstance(given[k], ast.Constant) and given[k].value is None))
    return Op(node.func.attr, (given["input"], *affine), (), given)


def _is_max(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "max"


def _max(node: ast.Call) -> Op:
    module = isinstance(node.func.value, ast.Name) and node.func.value.id in _MODULES
    args = tuple(node.args[1:] if module else node.args)
    operand = node.args[0] if module else node.func.value
    return Op("max", (operand,), args, {k.arg: k.value for k in node.keywords})


# ------------------------------------------------------------------------------------------ helpers

def _t(ctx: Derivation, node: ast.expr) -> ast.expr:
    """The transpose of a matrix (`W.T`) or of a batch of them (`.transpose(-2, -1)`), as a teacher writes it:
    of a transpose, what it transposed (never `.T.T`); of a matrix product, the transposes' product the other
    way round (`g.T @ a`, not `(a.T @ g).T`); of a number times a matrix, the number times its transpose."""
    rank = len(ctx.shapes(node)[0])
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "transpose" \
            and len(node.args) == 2 and not node.keywords \
            and {ctx.constant(a) % rank for a in node.args} == {rank - 2, rank - 1}:
        return node.func.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) \
            and all(len(s) >= 2 for side in (node.left, node.right) for s in ctx.shapes(side)):
        return ast.BinOp(_t(ctx, node.right), ast.MatMult(), _t(ctx, node.left))
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)) and ctx.is_scalar(node.right) \
            and not ctx.is_scalar(node.left):
        return ast.BinOp(_t(ctx, node.left), node.op, node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and ctx.is_scalar(node.left) \
            and not ctx.is_scalar(node.right):
        return ast.BinOp(node.left, node.op, _t(ctx, node.right))
    if all(len(s) == 2 for s in ctx.shapes(node)):
        return ast.Attribute(node, "T", ast.Load())
    return call(node, "transpose", number(-2), number(-1))


def _local(node: ast.expr, ctx: Derivation) -> Product:
    return Product.of(node, scalar=ctx.is_scalar(node))


def _words(node: ast.expr) -> str:
    return code(node)


def _factor_words(node: ast.expr) -> str:
    """An operand written after `1/` or `*`: in parentheses where it is itself an operation (an instructor trial's
    `1/tau * C ** 0.5` read as the square root of C over tau)."""
    return f"({code(node)})" if isinstance(node, ast.BinOp | ast.UnaryOp | ast.BoolOp | ast.Compare | ast.IfExp) \
        else code(node)


def _dim_arg(op: Op, position: int = 0, keyword: str = "dim"):
    if len(op.args) > position:
        return op.args[position]
    return op.kwargs.get(keyword)


def _keepdim(ctx: Derivation, op: Op, position: int = 1) -> bool:
    node = op.args[position] if len(op.args) > position else op.kwargs.get("keepdim")
    return bool(ctx.constant(node)) if node is not None else False


def _reduced(ctx: Derivation, op: Op, x: ast.expr) -> tuple[int, ...]:
    """The dimensions a reduction's `dim` argument names, as non-negative numbers (all of them if none)."""
    rank = len(ctx.shapes(x)[0])
    dim = _dim_arg(op)
    if dim is None:
        return tuple(range(rank))
    value = ctx.constant(dim)
    dims = value if isinstance(value, (tuple, list)) else (value,)
    return tuple(sorted(d % rank for d in dims))


def _expand(ctx: Derivation, site: Site, dims: tuple[int, ...], keepdim: bool) -> Product:
    """The gradient of a reduction's output put back where the reduced dimensions were: unsqueezed when
    the forward dropped them (unless they lead, where broadcasting aligns them anyway)."""
    g = site.g
    if keepdim or g.constant is not None:
        return g
    rank = len(ctx.shapes(site.node)[0])
    if len(ctx.shapes(g.node())[0]) < rank or dims == tuple(range(len(dims))):
        return g
    # Its numbers stay outside (`-z * dlogpz.unsqueeze(1)`, not `2 * z * (-0.5 * dlogpz).unsqueeze(1)`: an instructor
    # trial's flow), so they meet the chain's others
    tensors = [(f, s) for f, s in zip(g.factors, g.scalars, strict=True) if not s]
    if not tensors:
        tensors, numbers = list(zip(g.factors, g.scalars, strict=True)), Product(g.coef)
    else:
        kept = [f for f, s in zip(g.factors, g.scalars, strict=True) if s]
        numbers = Product(g.coef, tuple(kept), (), (True,) * len(kept))
    node = Product(1, tuple(f for f, _ in tensors), g.divisors, tuple(s for _, s in tensors)).node()
    for d in dims:
        node = call(node, "unsqueeze", number(d))
    return numbers * Product.of(node)


def _reduction(site: Site, op: Op) -> tuple[ast.expr, tuple[int, ...], bool, Product]:
    """A reduction's input, the dims it reduces, its keepdim, and its gradient put back where those dims were."""
    x = op.operands[0]
    dims = _reduced(site.ctx, op, x)
    keepdim = _keepdim(site.ctx, op)
    return x, dims, keepdim, _expand(site.ctx, site, dims, keepdim)


def _kept_output(site: Site, dims: tuple[int, ...], keepdim: bool) -> ast.expr:
    """A reduction's output with the reduced dims kept, so that it broadcasts against the input."""
    return site.out if keepdim else _expand(site.ctx, Site(site.node, site.out, Product.of(site.out), site.ctx), dims,
                                            False).node()


def _factor_words(node: ast.expr) -> str:
    """A count as a divisor in prose: `(n * k)`, so that "1/(n * k)" is not read as "1/n * k"."""
    return f"({code(node)})" if isinstance(node, ast.BinOp) else code(node)


def _dims_code(dims: tuple[int, ...]) -> ast.expr:
    return number(dims[0]) if len(dims) == 1 else ast.Tuple([number(d) for d in dims], ast.Load())


def _dims_words(dims: tuple[int, ...]) -> str:
    return f"dim {dims[0]}" if len(dims) == 1 else "dims " + ", ".join(map(str, dims))


# ------------------------------------------------------------------------------------------ the rules

# Explanations left out of a comment that has anything else to say.
ADDITION, COPY = "an addition hands its gradient unchanged to each term", "local derivative 1"
PASS_THROUGH = (ADDITION, COPY)
COPIED = "a copy passes its gradient unchanged"
LOCAL = "local derivative "

# The grammar's families, each a line of its prose (GRAMMAR), in this order.
FAMILIES = ARITHMETIC, ELEMENTWISE_FAMILY, SOFTMAX, REDUCTIONS, SHAPES, INDEXING, COMBINING, LOSSES = (
    "arithmetic", "elementwise", "softmax", "reductions", "shapes", "indexing", "combining", "losses")


@operation("add", ARITHMETIC, "a + b", operator=ast.Add)
def add(site: Site, op: Op) -> list[Edge]:
    return [Edge(x, site.g, ADDITION) for x in op.operands]


@operation("sub", ARITHMETIC, "a - b", operator=ast.Sub)
def sub(site: Site, op: Op) -> list[Edge]:
    a, b = op.operands
    return [Edge(a, site.g, COPY),
            Edge(b, -site.g, "local derivative -1",
                 (("sub-sign", "keeps the plus sign where the subtracted term's local derivative is -1", site.g),))]


@operation("neg", ARITHMETIC, "-a", operator=ast.USub)
def neg(site: Site, op: Op) -> list[Edge]:
    return [Edge(op.operands[0], -site.g, "local derivative -1",
                 (("neg-sign", "drops the minus sign of the forward's negation", site.g),))]


@operation("identity", ARITHMETIC, calls=("clone", "contiguous"), operator=ast.UAdd)
def identity(site: Site, op: Op) -> list[Edge]:
    return [Edge(op.operands[0], site.g, COPIED)]


@operation("mul", ARITHMETIC, "a * b", operator=ast.Mult)
def mul(site: Site, op: Op) -> list[Edge]:
    ctx, g = site.ctx, site.g
    a, b = op.operands
    if code(a) == code(b) and ctx.is_diff(a):
        # x * x reads x twice, but a teacher writes its derivative once, 2 * x (an L2 penalty's): one term
        return [Edge(a, Product(2) * _local(a, ctx) * g, f"{code(a)} * {code(a)} is {_words(a)} squared: local "
                                                          f"derivative 2 * {_words(a)}",
                     (("missed-factor", missed_factor(_words(a), ctx.consumer, 2), _local(a, ctx) * g),))]
    edges = []
    for x, other in (op.operands, op.operands[::-1]):
        slips = [("mul-local", f"leaves out the local derivative {_words(other)} of the product", g)]
        slips += [("mul-part", f"leaves out {_words(left_out)} of the product's local derivative {_words(other)}",
                   _local(rest, ctx) * g) for left_out, rest in _one_left_out(other, ctx)]
        if not ctx.is_scalar(x) and ctx.same_shape(x, other):
            slips.append(("mul-operand", f"multiplies by {_words(x)} where the product's derivative is the other "
                                         f"factor, {_words(other)}", _local(x, ctx) * g))
        bessel = _bessel(other, ctx)
        if bessel is not None:
            slips.append(("bessel", f"divides by {code(bessel[1])} where the unbiased variance divides by "
                                    f"{code(bessel[1])} - 1 (Bessel's correction)", _local(bessel[0], ctx) * g))
        edges.append(Edge(x, _local(other, ctx) * g, LOCAL + _words(other), tuple(slips)))
    return edges


def _one_left_out(product: ast.expr, ctx) -> list[tuple[ast.expr, ast.expr]]:
    """(a tensor factor, the product without it) for each tensor factor of a product of two or more
    (`h0 * rrms` as the other side of `h0 * rrms * g`): a factor of the local derivative forgotten, as a
    blind set's `(dhn * h0).sum(0)` for `dg` forgot the normalizing `rrms`."""
    factors: list[ast.expr] = []

    def flatten(node: ast.expr) -> None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            flatten(node.left)
            flatten(node.right)
        else:
            factors.append(node)
    flatten(product)
    tensors = [f for f in factors if not ctx.is_scalar(f)]
    if len(tensors) < 2:
        return []
    out = []
    for left_out in tensors:
        rest = [f for f in factors if f is not left_out]
        node = rest[0]
        for f in rest[1:]:
            node = ast.BinOp(node, ast.Mult(), f)
        out.append((left_out, node))
    return out


def _bessel(factor: ast.expr, ctx) -> tuple[ast.expr, ast.Name] | None:
    """A constant factor such as 1 / (n - 1) rewritten with the size where the forward subtracts one (the
    factor of a biased variance), and that size; None when the factor has no `size - 1`."""
    found = []

    class Drop(ast.NodeTransformer):
        def visit_BinOp(self, node):
            if isinstance(node.op, ast.Sub) and isinstance(node.left, ast.Name) and node.left.id in ctx.sizes \
                    and isinstance(node.right, ast.Constant) and node.right.value == 1:
                found.append(node.left)
                return node.left
            return self.generic_visit(node)

    rewritten = Drop().visit(clone(factor))
    return (rewritten, found[0]) if found else None


@operation("div", ARITHMETIC, "a / b", operator=ast.Div)
def div(site: Site, op: Op) -> list[Edge]:
    ctx, g = site.ctx, site.g
    a, b = op.operands
    to_a = g.divided(b)
    numerator = _local(a, ctx)
    squared = ast.BinOp(b, ast.Pow(), number(2))
    to_b = -(numerator * g).divided(squared)
    return [
        Edge(a, to_a, f"local derivative 1/{_factor_words(b)}",
             (("div-multiplies", f"multiplies by {_words(b)} where the quotient's derivative divides by it",
               _local(b, ctx) * g),)),
        Edge(b, to_b, f"d (a/x)/dx = -a/x**2 with x = {_words(b)}",
             (("div-square", f"divides by {_words(b)} where the derivative of a quotient divides by its square",
               -(numerator * g).divided(b)),)),
    ]


@operation("pow", ARITHMETIC, "a ** p (p a number or a size)", calls=("pow",), operator=ast.Pow)
def power(site: Site, op: Op) -> list[Edge]:
    ctx, g = site.ctx, site.g
    x, exponent = op.operands[0], (op.operands[1] if len(op.operands) > 1 else op.args[0])
    if ctx.is_diff(exponent):
        raise ctx.no_rule(site.node, "a power whose exponent is a tensor")
    p = ctx.constant(exponent)
    if isinstance(p, (int, float)) and not isinstance(p, bool):
        def local(power_of: float, factor: float, base: ast.expr = x) -> Product:
            if power_of == 0:
                return Product(factor)
            raised = base if power_of == 1 else ast.BinOp(base, ast.Pow(), number(power_of))
            return Product(factor) * _local(raised, ctx)

        right = local(_lower(p), p)
        slips = [("power-exponent", f"keeps the exponent {p} in the derivative: the power rule lowers it by one",
                  local(p, p) * g),
                 ("power-raised", f"raises the exponent {p} in the derivative: the power rule lowers it by one",
                  local(p + 1, p) * g)]
        if p not in (1, -1):
            slips.append(("power-factor", f"leaves out the factor {p} that the power rule brings down",
                          local(_lower(p), 1) * g))
        fraction = Fraction(_lower(p)).limit_denominator(16)
        if fraction.denominator > 1 and float(fraction) == _lower(p):  # -1.5 written -3/2: (x ** -3) / 2 in Python
            top, bottom = fraction.numerator, fraction.denominator
            slips.append(("power-fraction", f"writes the exponent {top}/{bottom} without parentheses: Python reads "
                                            f"x ** {top}/{bottom} as (x ** {top}) / {bottom}",
                          local(top, p / bottom) * g))
        if isinstance(x, ast.BinOp) and isinstance(x.op, ast.Add) and isinstance(x.right, ast.Constant):
            slips.append(("eps-dropped", f"leaves the forward's {code(x.right)} out of the derivative of "
                                         f"({code(x)})**{p}", local(_lower(p), p, x.left) * g))
        why = f"the power rule, d x**{p}/dx = {_power_words(p)}" + ("" if isinstance(x, ast.Name) else
                                                                    f" with x = {_words(x)}")
    else:
        right = _local(exponent, ctx) * Product.of(
            ast.BinOp(x, ast.Pow(), ast.BinOp(exponent, ast.Sub(), number(1))))
        slips = []
        why = f"the power rule, d x**p/dx = p * x**(p - 1) with p = {_words(exponent)}"
    return [Edge(x, right * g, why, tuple(slips))]


def _power_words(p: float) -> str:
    lowered = _lower(p)
    power = "" if lowered == 0 else "x" if lowered == 1 else f"x**{lowered}"
    if not power:
        return str(p)
    return power if p == 1 else f"-{power}" if p == -1 else f"{p} * {power}"


def _lower(p: float) -> float:
    lowered = p - 1
    return int(lowered) if float(lowered).is_integer() else lowered


@operation("matmul", ARITHMETIC, "a @ b (2-D or batched)", calls=("matmul",), operator=ast.MatMult,
           parse=_parse_matmul)
def matmul(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    a, b = op.operands
    ranks = {(len(x), len(y)) for x, y in zip(ctx.shapes(a), ctx.shapes(b), strict=True)}
    if ranks <= {(1, 1), (1, 2), (2, 1)} and len(ranks) == 1:
        return _vector_matmul(site, a, b)
    if any(len(s) < 2 for s in (*ctx.shapes(a), *ctx.shapes(b))):
        raise ctx.no_rule(site.node, "a batched matrix product with a 1-D operand (write it with a 2-D one)")
    g = ctx.full(site.g, site)
    gn = g.node()
    shape = ctx.shape_words
    upstream = code(gn) if isinstance(gn, ast.Name) else "the gradient"
    to_a = Product.of(ast.BinOp(gn, ast.MatMult(), _t(ctx, b)))
    to_b = Product.of(ast.BinOp(_t(ctx, a), ast.MatMult(), gn))

    def viewed(x: ast.expr, product: Callable[[ast.expr], ast.expr]) -> tuple:
        """A matrix's transpose written as a view of its sizes swapped: the shapes fit, the entries do not."""
        if any(len(s) != 2 for s in ctx.shapes(x)):
            return ()
        return (("matmul-view", Transpose.viewed(_words(x)),
                 Product.of(product(template("_x.reshape(_x.shape[1], _x.shape[0])", x=x)))),)

    return [
        Edge(a, to_a, f"the product of {upstream} {shape(site.node)} and {code(_t(ctx, b))} {shape(b, True)} that "
                      f"has {_words(a)}'s shape {shape(a)}",
             (("matmul-transpose", Transpose.needs(_words(b)),
               Product.of(ast.BinOp(gn, ast.MatMult(), b))),
              ("matmul-order", Transpose.ORDER,
               Product.of(ast.BinOp(b, ast.MatMult(), _t(ctx, gn)))),
              *viewed(b, lambda v: ast.BinOp(gn, ast.MatMult(), v)))),
        Edge(b, to_b, f"{code(_t(ctx, a))} {shape(a, True)} @ {upstream} {shape(site.node)} has {_words(b)}'s shape "
                      f"{shape(b)}: the product sums over the rows that shared {_words(b)}",
             (("matmul-transpose", Transpose.needs(_words(a)),
               Product.of(ast.BinOp(a, ast.MatMult(), gn))),
              ("matmul-order", Transpose.ORDER,
               Product.of(ast.BinOp(_t(ctx, gn), ast.MatMult(), a))),
              *viewed(a, lambda v: ast.BinOp(v, ast.MatMult(), gn)),
              *((("outer-of-sums", Transpose.outer_of_sums(_words(a)),
                  Product.of(template("_a.flatten(0, -2).sum(0, keepdim=True).T @ _g.flatten(0, -2).sum(0, "
                                      "keepdim=True)", a=a, g=gn))),)
                if all(len(s) == 2 for s in ctx.shapes(b)) else ()))),
    ]


def _vector_matmul(site: Site, a: ast.expr, b: ast.expr) -> list[Edge]:
    """A matrix product with a 1-D operand (`h0 @ Wh`, `W @ v`, `u @ v`): the vector's gradient is a product with
    the matrix, the matrix's an outer product with the vector."""
    ctx = site.ctx
    g = ctx.full(site.g, site).node()
    ranks = len(ctx.shapes(a)[0]), len(ctx.shapes(b)[0])
    if ranks == (1, 1):
        return [Edge(a, Product.of(b) * site.g, f"the dot product's derivative is the other vector, {_words(b)}"),
                Edge(b, Product.of(a) * site.g, f"the dot product's derivative is the other vector, {_words(a)}")]
    outer = "torch.outer(_a, _b)"
    if ranks == (1, 2):
        to_a, to_b = ast.BinOp(g, ast.MatMult(), _t(ctx, b)), template(outer, a=a, b=g)
        wrong_b = template(outer, a=g, b=a)
        vector, matrix = a, b
    else:
        to_a, to_b = template(outer, a=g, b=b), ast.BinOp(_t(ctx, a), ast.MatMult(), g)
        wrong_b = ast.BinOp(a, ast.MatMult(), g)
        vector, matrix = b, a
    words = (f"{_words(vector)} is a vector: the matrix {_words(matrix)} gets the outer product of it and the "
             f"gradient, the vector the gradient times {_words(matrix)}")
    return [Edge(a, Product.of(to_a), words,
                 (("matmul-order", Transpose.ORDER, Product.of(template(outer, a=b, b=g)) if ranks == (2, 1)
                   else Product.of(ast.BinOp(g, ast.MatMult(), b))),)),
            Edge(b, Product.of(to_b), words, (("matmul-order", Transpose.ORDER, Product.of(wrong_b)),))]


@operation("einsum", ARITHMETIC, "torch.einsum of two tensors", calls=("einsum",), parse=_parse_einsum)
def einsum(site: Site, op: Op) -> list[Edge]:
    """Each operand's gradient is the einsum of the gradient with the other operand, back to its subscripts:
    it holds where every subscript of an operand is in the output or the other operand (no trace, no sum of an
    operand alone)."""
    ctx = site.ctx
    spec = ctx.constant(op.args[0]).replace(" ", "")
    inputs, arrow, output = spec.partition("->")
    terms = inputs.split(",")
    if not arrow or len(terms) != 2 or "." in spec or any(len(set(t)) != len(t) for t in (*terms, output)) \
            or any(set(t) - set(output) - set(other) for t, other in (terms, terms[::-1])):
        raise ctx.no_rule(site.node, "an einsum of two tensors with an explicit output (`ij,jk->ik`), no index "
                                     "repeated within a tensor or summed in one tensor alone")
    g = ctx.full(site.g, site).node()
    edges = []
    for (mine, theirs), other, first in ((terms, op.operands[1], True), (terms[::-1], op.operands[0], False)):
        pieces = (f"{output},{theirs}->{mine}", g, other) if first else (f"{theirs},{output}->{mine}", other, g)
        right = call(name("torch"), "einsum", ast.Constant(pieces[0]), pieces[1], pieces[2])
        slips = ()
        if len(mine) > 1:
            flipped = pieces[0][: -len(mine)] + mine[::-1]
            slips = (("einsum-operand", Transpose.OF_RIGHT,
                      Product.of(call(name("torch"), "einsum", ast.Constant(flipped), pieces[1], pieces[2]))),)
        edges.append(Edge(op.operands[0 if first else 1], Product.of(right),
                          f"the einsum of the gradient ({output}) with {_words(other)} ({theirs}) back to the "
                          f"subscripts {mine}: every index summed in the forward is spread back", slips))
    return edges


def _elementwise(function: Elementwise) -> None:
    """The entry of an elementwise function (grader.exercise.ELEMENTWISE) as a rule: its derivative times the
    gradient, and each slip's."""
    def rule(site: Site, op: Op) -> list[Edge]:
        x = op.operands[0]
        ctx = site.ctx
        options = [*map(code, op.args), *(f"{key}=" for key in op.kwargs if key != "inplace")]
        if options:  # F.softplus(x, beta=2) is another function: its derivative was sigmoid(x)'s, autograd's not
            raise ctx.no_rule(site.node, f"{function.grammar} is in the grammar with its input alone, not with "
                                         f"{', '.join(options)}")

        def times_g(text: str) -> Product:
            return _local(template(text, x=x, y=site.out), ctx) * site.g

        words = {"x": _words(x), "y": site.y}
        slips = [(key, sentence.format(**words), times_g(text)) for key, sentence, text in function.slips]
        if not (isinstance(x, ast.Name) and isinstance(site.out, ast.Name)):
            # Inside a line that does more (tanh of a sum of products), the derivative left out is a slip of
            # its own; on a line of its own it is the upstream gradient, which the search names as such.
            slips.append((f"{function.name}-dropped", Chain.dropped(f"the derivative of {function.called}", site.y),
                          site.g))
            if function.name in _EVERYWHERE:
                slips.append((f"{function.name}-applied", Chain.forward_applied(site.y),
                              Product.of(call(ast.Name("torch", ast.Load()), function.name, site.g.node()))))
        if isinstance(x, ast.UnaryOp) and isinstance(x.op, ast.USub) and "_y" not in function.local:
            # softplus(-s) differentiated as softplus(s) (an instructor trial's word2vec: sigmoid(s) * dloss)
            inner = x.operand
            slips.append((f"{function.name}-inner-sign", Chain.inner_sign(function.called, _words(inner)),
                          -(_local(template(function.local, x=inner, y=site.out), ctx) * site.g)))
        slips += [(f"{function.name}-neighbour", Chain.read_at(other, f"the derivative of {function.called}",
                                                               f"{site.y}, its output"),
                   _local(template(function.local, x=x, y=ast.Name(other, ast.Load())), ctx) * site.g)
                  for other in _neighbours(site, function)]
        return [Edge(x, times_g(function.local), function.why.format(**words), tuple(slips))]
    operation(function.name, ELEMENTWISE_FAMILY, function.grammar, calls=(function.name,))(rule)


# The elementwise functions defined on every number: applied to a gradient (a slip), they give one.
_EVERYWHERE = ("tanh", "sigmoid", "relu", "exp")


def _neighbours(site: Site, function: Elementwise) -> list[str]:
    """The nearest line before and the nearest after that apply the same function whole and give a tensor of
    the same shape (the gate beside), and those of the same name at the step before and after (r2, r4 for
    r3): a derivative written with the output read there is copied from the line next to it. Only these:
    each is carried down every line below, and the derivation pays for each on every configuration."""
    if "_y" not in function.local or not isinstance(site.out, ast.Name):
        return []
    ctx = site.ctx
    alike = []
    for step in ctx.network.steps:
        op = classify(syntax.parse(step.code, mode="eval").body) if step.name in ctx.diff else None
        if step.name == site.out.id or (op is not None and op.kind == function.name
                                        and ctx.same_shape(ast.Name(step.name, ast.Load()), site.out)):
            alike.append(step.name)
    # The nearest lines, and the nearest of the same name but its step's number (r2 beside r3, past z3).
    kin = [name for name in alike if name.rstrip("0123456789") == site.out.id.rstrip("0123456789")]
    return list(dict.fromkeys(name for line in (alike, kin) for name in _beside(line, site.out.id)))


def _beside(names: list[str], name: str) -> list[str]:
    here = names.index(name)
    return names[max(here - 1, 0):here] + names[here + 1:here + 2]


_SQRT_2_PI = 0.3989422804014327  # 1 / sqrt(2 pi)
_GELU_C = 0.7978845608028654  # sqrt(2 / pi)
for _function in ELEMENTWISE.values():
    _elementwise(_function)


@operation("gelu", ELEMENTWISE_FAMILY, "F.gelu (exact or approximate='tanh')", calls=("gelu",))
def gelu(site: Site, op: Op) -> list[Edge]:
    x = op.operands[0]
    ctx = site.ctx
    approximate = op.kwargs.get("approximate")
    if approximate is not None and ctx.constant(approximate) == "tanh":
        t = f"torch.tanh({_GELU_C} * (_x + 0.044715 * _x**3))"
        local = f"0.5 * (1 + {t}) + 0.5 * _x * (1 - {t}**2) * {_GELU_C} * (1 + 3 * 0.044715 * _x**2)"
        half = f"0.5 * (1 + {t})"
        why = "the tanh approximation of GELU, 0.5 x (1 + t), differentiated through x and through t"
    else:
        local = f"0.5 * (1 + torch.erf(_x * {2 ** -0.5})) + _x * {_SQRT_2_PI} * torch.exp(-0.5 * _x**2)"
        half = f"0.5 * (1 + torch.erf(_x * {2 ** -0.5}))"
        why = "GELU is x * Phi(x): its derivative is Phi(x) + x * phi(x), the normal CDF and density"
    right = Product.of(template(local, x=x)) * site.g
    one_term = Product.of(template(half, x=x)) * site.g
    return [Edge(x, right, why, (("gelu-one-term", "keeps only the first term of the product rule of GELU, "
                                                   "x times a function of x", one_term),))]


@operation("clamp", ELEMENTWISE_FAMILY, ".clamp(min=0) (and min, max)", calls=("clamp", "clamp_min", "clip"))
def clamp(site: Site, op: Op) -> list[Edge]:
    """Between its bounds clamp copies its input; outside them its output is a bound, a constant: a 0/1 mask,
    ReLU's when the only bound is min=0."""
    ctx = site.ctx
    x = op.operands[0]
    low = op.args[0] if op.args else op.kwargs.get("min")
    high = op.args[1] if len(op.args) > 1 else op.kwargs.get("max")
    bounds = [b for b in (low, high) if b is not None and not (isinstance(b, ast.Constant) and b.value is None)]
    if any(ctx.is_diff(b) for b in bounds):
        raise ctx.no_rule(site.node, "a clamp whose bound is a tensor with a gradient")
    # Bounds included, as torch's clamp passes its gradient there (a clamp of a clamp's output meets them exactly:
    # a strict mask differed from autograd on random forward passes)
    inside = [ast.Compare(x, [ast.GtE()], [low]) if bound is low else ast.Compare(x, [ast.LtE()], [high])
              for bound in bounds]
    outside = [ast.Compare(x, [ast.Lt()], [low]) if bound is low else ast.Compare(x, [ast.Gt()], [high])
               for bound in bounds]
    mask = inside[0] if len(inside) == 1 else ast.BinOp(*inside[:1], ast.BitAnd(), *inside[1:])
    inverted = outside[0] if len(outside) == 1 else ast.BinOp(*outside[:1], ast.BitOr(), *outside[1:])
    where = " and ".join(code(c) for c in inside)
    return [Edge(x, Product.of(mask) * site.g, f"clamp copies {_words(x)} where {where} and writes a constant "
                                                "bound elsewhere: the gradient passes only where it copied",
                 (("clamp-output", f"multiplies by the clamp's output {site.y} where its derivative is a 0/1 mask",
                   Product.of(site.out) * site.g),
                  ("clamp-inverted", "masks the wrong side: the clamp passes the gradient where it copied its input",
                   Product.of(inverted) * site.g)))]


@operation("maximum", ELEMENTWISE_FAMILY, "torch.maximum(a, b), torch.minimum(a, b) of two tensors",
           calls=("maximum", "minimum"), parse=_parse_pair)
@operation("minimum", ELEMENTWISE_FAMILY, calls=(), parse=_parse_pair)
def maximum(site: Site, op: Op) -> list[Edge]:
    """The larger (smaller) operand is the output: it gets the gradient there, the other operand nothing."""
    a, b = op.operands
    chosen = ast.Gt() if op.kind == "maximum" else ast.Lt()
    word = "larger" if op.kind == "maximum" else "smaller"
    edges = []
    for x, other in ((a, b), (b, a)):
        mask = ast.Compare(x, [chosen], [other])
        edges.append(Edge(x, Product.of(mask) * site.g, f"torch.{op.kind} took {_words(x)} where it was the {word}: "
                                                         "the gradient goes there, nothing elsewhere",
                          (("maximum-both", f"hands the gradient to both operands where torch.{op.kind} took only "
                                            f"the {word}", site.g),)))
    return edges


@operation("mse_loss", LOSSES, "F.mse_loss(a, b) (mean or reduction='sum')", calls=("mse_loss",), parse=_parse_pair)
def mse_loss(site: Site, op: Op) -> list[Edge]:
    """The mean (or sum) of (a - b)**2: 2 (a - b), divided by the count the mean averaged."""
    ctx = site.ctx
    a, b = op.operands
    reduction = ctx.constant(op.kwargs["reduction"]) if "reduction" in op.kwargs else "mean"
    if reduction not in ("mean", "sum") or not ctx.same_shape(a, b):
        raise ctx.no_rule(site.node, "mse_loss other than the mean or sum over two tensors of the same shape")
    difference = Product.of(ast.BinOp(a, ast.Sub(), b))
    count = ctx.count(a, tuple(range(len(ctx.shapes(a)[0]))))
    shown = _factor_words(count)
    g = site.g
    right = (Product(2) * difference) * g
    if reduction == "mean":
        right = right.divided(count)
    slips = [("mse-factor", "leaves out the factor 2 the square brings down", difference * g
              if reduction == "sum" else (difference * g).divided(count))]
    if reduction == "mean":
        slips.append(("mse-mean", f"leaves out the mean's 1/{shown}", Product(2) * difference * g))
    why = f"the {reduction} of (a - b)**2: 2 (a - b)" + (f" / {shown}, the count averaged" if reduction == "mean"
                                                          else "")
    return [Edge(a, right, why, tuple(slips)),
            Edge(b, -right, why + ", with the minus sign of -b", tuple((k, w, -alt) for k, w, alt in slips))]


@operation("logsumexp", SOFTMAX, ".logsumexp(dim)", calls=("logsumexp",))
def logsumexp(site: Site, op: Op) -> list[Edge]:
    """The derivative of log(sum(exp(x))) along a dim is softmax(x) along it."""
    x, dims, keepdim, g = _reduction(site, op)
    if len(dims) == 1:
        local = template("F.softmax(_x, _d)", x=x, d=number(dims[0]))
    else:
        local = template("(_x - _y).exp()", x=x, y=_kept_output(site, dims, keepdim))
    return [Edge(x, Product.of(local) * g, f"d logsumexp(x)/dx = softmax(x) over {_dims_words(dims)}: each exp(x) "
                                           "over the sum of them",
                 (("logsumexp-no-softmax", "multiplies by exp(x) without dividing by the sum of the exps",
                   Product.of(call(x, "exp")) * g),))]


def _normalized(ctx: Derivation, op: Op) -> tuple[ast.expr, ast.expr, tuple[int, ...], ast.expr, ast.expr | None]:
    """A normalization line's input, its statistics' dims, eps, and the weight as it multiplies the input."""
    x = op.operands[0]
    rank = len(ctx.shapes(x)[0])
    if op.kind == "layer_norm":
        shape = ctx.constant(op.kwargs["normalized_shape"])
        width = 1 if isinstance(shape, int) else len(shape)
        dims = tuple(range(rank - width, rank))
    else:
        training = op.kwargs.get("training")
        if training is None or not ctx.constant(training) or rank < 2:
            raise ctx.no_rule(op.operands[0], "batch_norm in training mode (training=True): in eval mode it is an "
                                              "affine map of running statistics")
        dims = (0, *range(2, rank))
    eps = op.kwargs.get("eps") or number(1e-5)
    weight = op.kwargs.get("weight")
    if weight is not None and isinstance(weight, ast.Constant) and weight.value is None:
        weight = None
    if weight is not None and op.kind == "batch_norm" and rank > 2:
        weight = call(weight, "view", number(-1), *(number(1) for _ in range(rank - 2)))
    return x, _dims_code(dims), dims, eps, weight


@operation("layer_norm", REDUCTIONS, "F.layer_norm, F.batch_norm(training=True)", calls=("layer_norm",),
           parse=_parse_norm)
@operation("batch_norm", REDUCTIONS, calls=("batch_norm",), parse=_parse_norm)
def normalization(site: Site, op: Op) -> list[Edge]:
    """The closed form of a normalization's backward (a teacher's one expression): with xhat the normalized
    input and dxhat the gradient reaching it, dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), the
    means over the statistics' dims; the weight gets (g * xhat) and the bias g, summed where they broadcast."""
    ctx = site.ctx
    x, dims, dim_list, eps, weight = _normalized(ctx, op)
    g = ctx.full(site.g, site)
    rstd = template("(_x.var(_d, keepdim=True, correction=0) + _e) ** -0.5", x=x, d=dims, e=eps)
    xhat = template("(_x - _x.mean(_d, keepdim=True)) * _r", x=x, d=dims, r=rstd)
    dxhat = g if weight is None else Product.of(weight) * g

    def closed(mean_term: bool, projection: bool, over: ast.expr = dims) -> Product:
        text = "_r * (_g" + (" - _g.mean(_d, keepdim=True)" if mean_term else "") + \
            (" - _h * (_g * _h).mean(_d, keepdim=True)" if projection else "") + ")"
        return Product.of(template(text, r=rstd, g=dxhat.node(), d=over, h=xhat))

    # Two blind answer sets' fused norms took both means over the other dimension (a layer norm's over the batch)
    rank = len(ctx.shapes(x)[0])
    other = tuple(d for d in range(rank) if d not in dim_list)
    wrong_dims = (("norm-dims", f"takes the closed form's means over {_dims_words(other)}, where the "
                                f"normalization's statistics run over {_dims_words(dim_list)}",
                   closed(True, True, _dims_code(other))),) if rank == 2 and other else ()

    named = _norm_names(ctx, x, rstd, xhat)
    (r, _), (h, _) = named
    edges = [Edge(x, closed(True, True), f"the closed form of the normalization's backward over "
                                         f"{_dims_words(dim_list)}: {r} * (dxhat - mean(dxhat) - {h} * mean(dxhat "
                                         f"* {h})), with {r} = 1/sqrt(var + eps) and {h} the normalized input "
                                         "(computed first), dxhat the gradient reaching it",
                  (("norm-no-mean", "leaves out the path through the mean: the term - mean(dxhat)",
                    closed(False, True)),
                   ("norm-no-projection", "leaves out the path through the variance: the term - xhat * mean(dxhat "
                                          "* xhat)", closed(True, False)), *wrong_dims), named=named)]
    summed = (lambda p: Product.of(call(p.node(), "sum", dims))) if op.kind == "batch_norm" else (lambda p: p)
    for operand in op.operands[1:]:
        if operand is op.kwargs.get("weight"):
            edges.append(Edge(operand, summed(Product.of(xhat) * g), f"the weight multiplies the normalized input "
                                                                     f"{h}: its gradient is g * {h}, summed where "
                                                                     "it was shared", named=named))
        else:
            edges.append(Edge(operand, summed(g), "the bias is added: it gets the gradient, summed where it was "
                                                  "shared"))
    return edges


def _norm_names(ctx: Derivation, x: ast.expr, rstd: ast.expr, xhat: ast.expr) -> tuple[tuple[str, ast.expr], ...]:
    """The names a normalization's cells compute rstd and xhat under before the closed form, as a teacher
    writes it (`hrstd`, then `hhat`, then one expression that reads them): the input's name with `rstd` and
    `hat`, never a name the network or a gradient already has."""
    net = ctx.network
    base = x.id if isinstance(x, ast.Name) else "x"
    taken = {*net.parameters, *net.data, *net.sizes, *net.intermediates, *_MODULES}
    taken |= {"d" + t for t in taken}

    def free(label: str) -> str:
        while label in taken:
            label += "_"
        return label
    return (free(f"{base}rstd"), rstd), (free(f"{base}hat"), xhat)


@operation("softmax", SOFTMAX, "F.softmax(x, dim)", calls=("softmax",))
def softmax(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    x = op.operands[0]
    dim = _dim_arg(op)
    g = ctx.full(site.g, site)
    y = site.out
    right = template("_y * (_g - (_y * _g).sum(_d, keepdim=True))", y=y, g=g, d=dim)
    return [Edge(x, Product.of(right), f"softmax's Jacobian: y * (g - (y * g).sum) with y = {site.y}, summed over "
                                        f"dim {code(dim)}: every output of a row depends on every input of it",
                 (("softmax-no-sum", "leaves out softmax's sum term: every output of a row depends on every input",
                   Product.of(y) * g),
                  ("softmax-elementwise", "treats softmax as elementwise, y * (1 - y)",
                   Product.of(template("_y * (1 - _y)", y=y)) * g),
                  *_other_dims("softmax-sum-dim", y, dim, lambda d: Product.of(template(
                      "_y * (_g - (_y * _g).sum(_d, keepdim=True))", y=y, g=g, d=number(d))), ctx,
                      f"sums {code(y)} * {code(g.node())} over dimension {{other}}, where softmax normalizes over "
                      "dimension {dim}")))]


def _other_dims(key: str, x: ast.expr, dim: ast.expr, slip: Callable[[int], Product], ctx: Derivation,
                sentence: str) -> tuple:
    """A reduction over each other dimension of more than one entry (a blind answer set's `.sum(1)` over a
    softmax taken over the last dimension), each a slip with the dimensions in `sentence`."""
    rank = len(ctx.shapes(x)[0])
    own = ctx.constant(dim) % rank
    return tuple((key, sentence.format(other=d, dim=own), slip(d)) for d in range(rank)
                 if d != own and all(s[d] > 1 for s in ctx.shapes(x)))


@operation("log_softmax", SOFTMAX, "F.log_softmax(x, dim)", calls=("log_softmax",))
def log_softmax(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    x = op.operands[0]
    dim = _dim_arg(op)
    g = ctx.full(site.g, site)
    right = template("_g - _y.exp() * _g.sum(_d, keepdim=True)", y=site.out, g=g, d=dim)
    return [Edge(x, Product.of(right), f"log_softmax's Jacobian: g - softmax * (the sum of g over dim {code(dim)})",
                 (("log-softmax-no-sum", "leaves out the softmax term of log_softmax's derivative", g),))]


@operation("sum", REDUCTIONS, ".sum", calls=("sum",))
def reduce_sum(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    x = op.operands[0]
    dims = _reduced(ctx, op, x)
    g = _expand(ctx, site, dims, _keepdim(ctx, op))
    count = ctx.count(x, dims)
    slips = (("sum-mean", f"divides by {code(count)} as for a mean: a sum's local derivative is 1",
              g.divided(count)),) if dims else ()
    return [Edge(x, g, "a sum hands its gradient to every entry it summed (broadcast)", slips)]


@operation("mean", REDUCTIONS, ".mean", calls=("mean",))
def mean(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    x = op.operands[0]
    dims = _reduced(ctx, op, x)
    g = _expand(ctx, site, dims, _keepdim(ctx, op))
    count = ctx.count(x, dims)
    return [Edge(x, g.divided(count), f"a mean hands each entry its gradient divided by {code(count)}, the count "
                                      "averaged",
                 (("mean-count", f"leaves out the mean's 1/{_factor_words(count)}", g),))]


def _correction(ctx: Derivation, op: Op) -> int:
    if "correction" in op.kwargs:
        return int(ctx.constant(op.kwargs["correction"]))
    if "unbiased" in op.kwargs:
        return int(bool(ctx.constant(op.kwargs["unbiased"])))
    return 1


@operation("std", REDUCTIONS, ".std (dims, keepdim, correction)", calls=("std",))
@operation("var", REDUCTIONS, ".var", calls=("var",))
def var_std(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    x, dims, keepdim, g = _reduction(site, op)
    count = ctx.count(x, dims)
    correction = _correction(ctx, op)
    dims_node = _dims_code(dims)
    centred = template("_x - _x.mean(_d, keepdim=True)", x=x, d=dims_node)

    def divisor(c: int) -> ast.expr:
        return count if c == 0 else ast.BinOp(count, ast.Sub(), number(c))

    other = 0 if correction else 1
    if op.kind == "var":
        def local(c: int) -> Product:
            return (Product(2) * Product.of(centred)).divided(divisor(c))
        why = f"the variance's derivative, 2 (x - mean) / ({code(divisor(correction))})"
    else:
        y = _kept_output(site, dims, keepdim)

        def local(c: int) -> Product:
            return Product.of(centred).divided(ast.BinOp(divisor(c), ast.Mult(), y))
        why = f"the standard deviation's derivative, (x - mean) / (({code(divisor(correction))}) * std), " \
              f"written with the output {site.y}"
    bessel = ("divides by {0} where the unbiased variance divides by {0} - 1 (Bessel's correction)" if correction
              else "divides by {0} - 1 where the biased variance divides by {0}").format(code(count))
    return [Edge(x, local(correction) * g, why, (("bessel", bessel, local(other) * g),))]


@operation("max", REDUCTIONS, ".max() and .max(dim, keepdim).values", calls=("max",), parse=_parse_max)
def reduce_max(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    x = op.operands[0]
    if not op.args and "dim" not in op.kwargs:
        return [Edge(x, Product.of(ast.Compare(x, [ast.Eq()], [site.out])) * site.g,
                     "only the largest entry moved the max: it gets the gradient, the others nothing",
                     (("max-everywhere", "hands the max's gradient to every entry where only the largest chose it",
                       ctx.full_like(site.g, x)),))]
    dims = _reduced(ctx, op, x)
    g = _expand(ctx, site, dims, _keepdim(ctx, op))
    (d,) = dims
    rank = len(ctx.shapes(x)[0])
    if d == rank - 1:
        mask = template("F.one_hot(_x.max(_d).indices, num_classes=_x.shape[_d])", x=x, d=number(d))
    else:
        mask = template("torch.zeros_like(_x).scatter(_d, _x.max(_d, keepdim=True).indices, 1.0)", x=x, d=number(d))
    return [Edge(x, Product.of(mask) * g, f"the max of each slice along dim {d} is one of its entries: the argmax "
                                          "gets the gradient, the other entries nothing",
                 (("max-everywhere", f"hands the max's gradient to every entry along dim {d} where only the largest "
                                     "(the argmax) chose it", ctx.full_like(g, x)),))]


@operation("reshape", SHAPES, ".view, .reshape, .flatten, .unsqueeze, .squeeze",
           calls=("view", "reshape", "flatten", "unsqueeze", "squeeze"))
def reshape(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    x = op.operands[0]
    method = "reshape" if op.kind == "reshape" and _method(site.node) == "reshape" else "view"
    shape = ctx.shape_of_code(x)
    g = ctx.full(site.g, site).node()
    dims = (*op.args, *(v for k, v in op.kwargs.items() if k == "dim"))
    if _method(site.node) == "unsqueeze" and len(dims) == 1:
        return [_unsqueezed(ctx, x, g, ctx.constant(dims[0]), "unsqueeze")]
    right = call(g, method, shape)
    if not ctx.runs(right):
        right = call(g, "reshape", shape)
    return [Edge(x, Product.of(right), f"{_method(site.node)} only relabels the same numbers: view the gradient "
                                        f"back to {_words(x)}'s shape")]


def _unsqueezed(ctx, x: ast.expr, g: ast.expr, d: int, how: str) -> Edge:
    """The edge back through a dimension of 1 inserted at `d` (`how`: x.unsqueeze(d), x[:, None]): as a teacher
    writes it, `dq = dpre.sum(1)` for q.unsqueeze(1), not .sum(1, keepdim=True).view(q.shape)."""
    summed = _summed_keeping(g, d, ctx)
    right = summed if summed is not None else call(g, "squeeze", number(d))
    why = (f"{how} only added that dimension of 1, so the sum over dim {d} needs no keepdim=True"
           if summed is not None else f"{how} only adds a dimension of 1: squeeze the gradient's dim {d} back out")
    return Edge(x, Product.of(right), why)


def _summed_keeping(g: ast.expr, d: int, ctx) -> ast.expr | None:
    """`x.sum(d)` for a `g` that is `x.sum(d, keepdim=True)`: squeezing d back out of it."""
    if not (isinstance(g, ast.Call) and _method(g) == "sum" and len(g.args) == 1
            and [k.arg for k in g.keywords] == ["keepdim"] and ctx.constant(g.keywords[0].value) is True):
        return None
    rank = len(ctx.shapes(g)[0])
    if ctx.constant(g.args[0]) % rank != d % rank:
        return None
    return call(g.func.value, "sum", g.args[0])


def _method(node: ast.expr) -> str:
    return node.func.attr if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else ""


def _tensor_factor(ctx: Derivation, node: ast.expr) -> ast.expr:
    """The tensor a product's factor is, without the numbers that scale it (`dscores`, not
    `dscores / (tau * C ** 0.5)`): what a student's sentence names."""
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Div):
        scalar = [not any(shape) for shape in (ctx.shapes(node.left)[0], ctx.shapes(node.right)[0])]
        if scalar == [False, True]:
            node = node.left
        elif scalar == [True, False] and isinstance(node.op, ast.Mult):
            node = node.right
        else:
            break
    return node


@operation("transpose", SHAPES, ".transpose", calls=("transpose",))
@operation("mT", SHAPES, attribute="mT")
@operation("T", SHAPES, ".T", attribute="T")
def transpose(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    x = op.operands[0]
    g = ctx.full(site.g, site).node()
    rank = len(ctx.shapes(x)[0])
    swaps_last = rank >= 2 and (op.kind == "mT" or (op.kind == "T" and rank == 2) or (
        op.kind == "transpose" and {ctx.constant(a) % rank for a in op.args} == {rank - 2, rank - 1}))
    if swaps_last and isinstance(g, ast.BinOp) and isinstance(g.op, (ast.MatMult, ast.Mult, ast.Div)):
        # a product transposed back is written as the transposes' product: dk = dscores.transpose(-2, -1) @ q
        right = _t(ctx, g)
        why = "a transpose's gradient is the gradient transposed back: (a @ b) transposed is b transposed @ a " \
              "transposed"
    elif op.kind in ("T", "mT"):
        right = g.value if isinstance(g, ast.Attribute) and g.attr == op.kind else ast.Attribute(g, op.kind, ast.Load())
        why = "a transpose's gradient is the gradient transposed back"
    else:
        same = isinstance(g, ast.Call) and isinstance(g.func, ast.Attribute) and g.func.attr == "transpose" and \
            [code(a) for a in g.args] == [code(a) for a in op.args]
        right = g.func.value if same else call(g, "transpose", *op.args)
        why = f"swapping dims {code(op.args[0])} and {code(op.args[1])} back gives the gradient {_words(x)}'s layout"
    missing = ("transpose-missing", Transpose.MISSING, Product.of(g))
    # A blind answer set's dk = dscores @ q: the product's factors swapped back, one of them left untransposed,
    # told by the factor a student writes it with (an instructor trial's was told of a transpose it never wrote)
    partial = tuple(("transpose-one-factor", Transpose.needs(_words(_tensor_factor(ctx, plain))),
                     Product.of(ast.BinOp(left, ast.MatMult(), right)))
                    for left, right, plain in ((g.right, _t(ctx, g.left), g.right),
                                               (_t(ctx, g.right), g.left, g.left))) \
        if swaps_last and isinstance(g, ast.BinOp) and isinstance(g.op, ast.MatMult) else ()
    return [Edge(x, Product.of(right), why, (missing, *partial))]


@operation("permute", SHAPES, ".permute", calls=("permute",))
def permute(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    x = op.operands[0]
    order = ctx.constant(op.args[0]) if len(op.args) == 1 else tuple(ctx.constant(a) for a in op.args)
    rank = len(order)
    order = [o % rank for o in order]
    inverse = [order.index(i) for i in range(rank)]
    g = ctx.full(site.g, site).node()
    right = call(g, "permute", *(number(i) for i in inverse))
    return [Edge(x, Product.of(right), f"the inverse permutation {tuple(inverse)} puts the gradient back in "
                                        f"{_words(x)}'s layout",
                 (("permute-same", Transpose.PERMUTE_SAME,
                   Product.of(call(g, "permute", *(number(i) for i in order)))),))]


@operation("cat", COMBINING, "torch.cat", calls=("cat",), parse=_parse_joined)
def cat(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    dim = _dim_arg(op)
    d = ctx.constant(dim) if dim is not None else 0
    g = ctx.full(site.g, site).node()
    rank = len(ctx.shapes(site.node)[0])
    d %= rank
    edges, widths = [], []
    # A width the same on every configuration (a pad of one zero column) is written as its number, and a piece
    # followed by only such pieces ends counted from the end: `[:, 1:-1]`, as a teacher writes it, not an
    # instructor trial's `[:, lo.shape[1]:lo.shape[1] + cum.shape[1]]`
    fixed = [len({shape[d] for shape in ctx.shapes(piece)}) == 1 for piece in op.operands]
    for k, piece in enumerate(op.operands):
        widths.append(number(ctx.shapes(piece)[0][d]) if fixed[k] else ctx.count(piece, (d,)))
        start = _offset(widths[:-1])
        after = sum(ctx.shapes(later)[0][d] for later in op.operands[k + 1:])
        end = None if k == len(op.operands) - 1 else number(-after) if all(fixed[k + 1:]) else _offset(widths)
        part = ast.Slice(start, end, None)
        index = ast.Tuple([*(ast.Slice() for _ in range(d)), part], ast.Load()) if d else part
        edges.append(Edge(piece, Product.of(ast.Subscript(g, index, ast.Load())),
                          f"torch.cat put {_words(piece)} at positions {code(part)} of dim {d}: its gradient is that "
                          "slice of the gradient"))
    return edges


def _offset(widths: list[ast.expr]) -> ast.expr | None:
    """Where a piece of torch.cat starts: the widths before it added, a width repeated k times as `k * width`
    (None at the start)."""
    terms: list[list] = []
    for width in widths:
        if terms and code(terms[-1][1]) == code(width):
            terms[-1][0] += 1
        else:
            terms.append([1, width])
    total = None
    for count, width in terms:
        term = width if count == 1 else (number(count * width.value) if isinstance(width, ast.Constant)
                                         else ast.BinOp(number(count), ast.Mult(), width))
        total = term if total is None else ast.BinOp(total, ast.Add(), term)
    return total


@operation("stack", COMBINING, "torch.stack", calls=("stack",), parse=_parse_joined)
def stack(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    dim = _dim_arg(op)
    d = ctx.constant(dim) % len(ctx.shapes(site.node)[0]) if dim is not None else 0
    g = ctx.full(site.g, site).node()
    edges = []
    for i, piece in enumerate(op.operands):
        index = ast.Tuple([*(ast.Slice() for _ in range(d)), number(i)], ast.Load()) if d else number(i)
        edges.append(Edge(piece, Product.of(ast.Subscript(g, index, ast.Load())),
                          f"torch.stack put {_words(piece)} at index {i} of dim {d}: its gradient is that part of "
                          "the gradient"))
    return edges


@operation("masked_fill", COMBINING, ".masked_fill(mask, value)", calls=("masked_fill",))
def masked_fill(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    x = op.operands[0]
    mask = op.args[0] if op.args else op.kwargs["mask"]
    g = ctx.full(site.g, site)
    right = call(g.node(), "masked_fill", mask, number(0))
    return [Edge(x, Product.of(right), f"the entries masked_fill overwrote are constants: no gradient reaches "
                                        f"{_words(x)} there (masked with {code(mask)})",
                 (("mask-forgotten", f"lets the gradient through where the mask {code(mask)} replaced the entries",
                   g),))]


@operation("where", COMBINING, "torch.where(cond, a, b)", calls=("where",), parse=_parse_where)
def where(site: Site, op: Op) -> list[Edge]:
    a, b = op.operands
    (condition,) = op.args
    g = site.g.node()
    to_a = template("torch.where(_c, _g, 0.0)", c=condition, g=g)
    to_b = template("torch.where(_c, 0.0, _g)", c=condition, g=g)
    return [Edge(a, Product.of(to_a), f"torch.where took {_words(a)} where {code(condition)} holds: the gradient "
                                      "goes there, zero elsewhere",
                 (("where-swapped", "takes the gradient where the condition fails instead of where it holds",
                   Product.of(to_b)),)),
            Edge(b, Product.of(to_b), f"torch.where took {_words(b)} where {code(condition)} fails: the gradient "
                                      "goes there, zero elsewhere",
                 (("where-swapped", "takes the gradient where the condition holds instead of where it fails",
                   Product.of(to_a)),))]


@operation("cross_entropy", LOSSES, "F.cross_entropy(logits, targets) (mean, reduction='sum' or "
           "'none'; label_smoothing a constant)", calls=("cross_entropy",), parse=_parse_cross_entropy)
def cross_entropy(site: Site, op: Op) -> list[Edge]:
    """-log softmax(logits)[target], averaged over the examples (or summed, or each example's own with
    reduction='none'): softmax - one_hot(target), over the count of examples for the mean, times each example's
    upstream gradient for 'none' (a masked mean, `(nll * mask).sum() / mask.sum()`, reads them so). With label
    smoothing e the target is a distribution, (1 - e) on the target's class and e spread evenly over all the
    classes, and the gradient is softmax minus it."""
    ctx = site.ctx
    logits = op.operands[0]
    target = op.args[0] if op.args else op.kwargs["target"]
    reduction = ctx.constant(op.kwargs["reduction"]) if "reduction" in op.kwargs else "mean"
    smoothing = ctx.constant(op.kwargs["label_smoothing"]) if "label_smoothing" in op.kwargs else 0
    # a size named for it (eps) is written by its name, as the forward pass writes it
    spelt = op.kwargs["label_smoothing"].id if isinstance(op.kwargs.get("label_smoothing"), ast.Name) else None
    kept, spread = (f"(1 - {spelt})", spelt) if spelt else (repr(round(1 - smoothing, 12)), repr(smoothing))
    if any(len(s) != 2 for s in ctx.shapes(logits)) or reduction not in ("mean", "sum", "none") or len(op.args) > 1 \
            or set(op.kwargs) - {"target", "reduction", "label_smoothing"} \
            or not isinstance(smoothing, (int, float)) or not 0 <= smoothing <= 1:
        raise ctx.no_rule(site.node, "cross_entropy other than the mean, sum or none over (n, classes) logits, "
                                     "with a constant label_smoothing from 0 to 1")
    # Each example's upstream gradient along its row: a scalar's for the mean and the sum
    g = site.g if reduction != "none" or site.g.constant is not None else \
        Product.of(call(site.g.node(), "unsqueeze", number(1)))
    rows = ctx.count(logits, (0,))
    probs = template("F.softmax(_x, 1)", x=logits)
    one_hot = template("F.one_hot(_t, num_classes=_x.shape[1])", t=target, x=logits)
    # A one-hot times a fraction would be float32 whatever the logits are: it takes their dtype first
    typed = template("_o.to(_x.dtype)", o=one_hot, x=logits)
    smoothed = template(f"{kept} * _o + {spread} / _x.shape[1]", o=typed, x=logits) if smoothing else one_hot
    difference = Product.of(ast.BinOp(probs, ast.Sub(), smoothed))
    wrong_dim = Product.of(ast.BinOp(template("F.softmax(_x, 0)", x=logits), ast.Sub(), smoothed))
    # Two slips blind answer sets wrote: log-probabilities for probabilities, the target's entry set to -1
    logs = Product.of(ast.BinOp(template("F.log_softmax(_x, 1)", x=logits), ast.Sub(), smoothed))
    set_to = Product.of(template("_p * (1 - _o) - _o", p=probs, o=one_hot))
    # And three more: 1 taken from every entry, the exps not normalized, and (below) the -1 not averaged
    everywhere = Product.of(ast.BinOp(probs, ast.Sub(), number(1)))
    unnormalized = Product.of(ast.BinOp(call(logits, "exp"), ast.Sub(), smoothed))
    # And with label smoothing: the plain one-hot's gradient, or the spread part not divided among the classes
    smoothing_slips = () if not smoothing else (
        ("ce-smoothing-dropped", f"leaves out the label smoothing: the target is {kept} on each row's class plus "
                                 f"{spread} spread over the classes, not the one-hot",
         Product.of(ast.BinOp(probs, ast.Sub(), one_hot))),
        ("ce-smoothing-spread", f"adds all of the smoothing's {spread} to every class, where it is spread over them "
                                f"({spread} / the number of classes each)",
         Product.of(ast.BinOp(probs, ast.Sub(), template(f"{kept} * _o + {spread}", o=typed)))))
    target_words = "the smoothed target" if smoothing else "one_hot(target)"
    if reduction == "mean":
        right = difference.divided(rows) * g
        why = f"the mean of -log softmax(logits)[target]: (softmax - {target_words}) / {code(rows)}, the " \
              "examples averaged"
        count = ("ce-mean", f"leaves out the 1/{code(rows)} of the mean over the examples", difference * g)
        probs_only, wrong_dim = Product.of(probs).divided(rows), wrong_dim.divided(rows)
        logs, set_to = logs.divided(rows), set_to.divided(rows)
        everywhere, unnormalized = everywhere.divided(rows), unnormalized.divided(rows)
        averaged = (("ce-target-undivided", f"divides the softmax by {code(rows)} but not the {target_words} taken "
                                            f"from it: the 1/{code(rows)} of the mean divides the whole difference",
                     Product.of(ast.BinOp(Product.of(probs).divided(rows).node(), ast.Sub(), smoothed)) * g),)
        smoothing_slips = tuple((key, words, slip.divided(rows)) for key, words, slip in smoothing_slips)
    else:
        right = difference * g
        why = f"the sum of -log softmax(logits)[target]: softmax - {target_words}, each example's own" \
            if reduction == "sum" else f"-log softmax(logits)[target] of each example: softmax - {target_words}, " \
                                       "times that example's upstream gradient"
        unaveraged = "a summed cross-entropy" if reduction == "sum" else "reduction='none'"
        count = ("ce-mean", f"divides by {code(rows)} as for the mean: {unaveraged} averages nothing",
                 difference.divided(rows) * g)
        probs_only = Product.of(probs)
        averaged = ()
    target_set = () if smoothing else (
        ("ce-target-set", "sets each row's target entry to -1 where 1 is subtracted from its probability",
         set_to * g),)
    return [Edge(logits, right, why,
                 (count,
                  ("ce-one-hot", "leaves out the smoothed target's distribution" if smoothing
                   else "leaves out the -1 at each row's target",
                   probs_only * g),
                  ("ce-softmax-dim", "takes the softmax over dimension 0, the examples, where cross_entropy's runs "
                                     "over each row's classes (dimension 1)", wrong_dim * g),
                  ("ce-log-softmax", "uses the log-probabilities (log_softmax) where the probabilities (softmax) "
                                     "belong", logs * g),
                  *target_set,
                  ("ce-minus-one", f"takes 1 from every entry, where only {target_words} is taken from the softmax "
                                   "(1 at each row's target class)" if not smoothing else
                   f"takes 1 from every entry, where {target_words} is taken from the softmax", everywhere * g),
                  ("ce-unnormalized", "uses exp(logits) without dividing each row by its sum: the softmax's "
                                      "probabilities belong there", unnormalized * g),
                  *averaged,
                  *((key, words, slip * g) for key, words, slip in smoothing_slips)))]


@operation("index", INDEXING, "x[Xb] (an embedding lookup), x[range(n), Yb], x[:, t] and other indexing")
def index(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    x = op.operands[0]
    (selector,) = op.args
    parts = selector.elts if isinstance(selector, ast.Tuple) else [selector]
    tensors = [p for p in parts if not isinstance(p, ast.Slice) and ctx.is_index_tensor(p)]
    if len(parts) == 1 and tensors:
        # An embedding lookup: rows of x copied, a row as often as the index names it.
        idx = parts[0]
        rank = len(ctx.shapes(x)[0])
        flat_index = idx if len(ctx.shapes(idx)[0]) == 1 else call(idx, "view", number(-1))
        g = ctx.full(site.g, site).node()
        trailing = [template("_x.shape[_d]", x=x, d=number(d)) for d in range(1, rank)]
        # a 1-D index already gives the gradient one row per index: no view (a second instructor trial's center
        # loss read `dcy.view(-1, centers.shape[1])`, which changes nothing)
        rows = g if len(ctx.shapes(idx)[0]) == 1 else call(g, "view", number(-1), *trailing)
        if not ctx.runs(rows):
            rows = call(g, "reshape", number(-1), *trailing)
        right = template("torch.zeros_like(_x).index_add(0, _i, _g)", x=x, i=flat_index, g=rows)
        return [Edge(x, Product.of(right),
                     f"the lookup copies a row of {_words(x)} for every entry of {code(idx)}: add each gradient "
                     "back into its row (index_add), so a repeated index sums all its uses", (),
                     index_slips=(("index-overwrite", f"keeps one use of each index repeated in {code(idx)}: an "
                                                      "indexed assignment (=, or += with a whole tensor of indices) "
                                                      "overwrites where all its uses must add up (+= one index at a "
                                                      "time, or index_add)", site.g, selector),))]
    whole = [isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None for p in parts]
    inserted = [d for d, p in enumerate(parts) if isinstance(p, ast.Constant) and p.value is None]
    if len(inserted) == 1 and all(whole[d] or d in inserted for d in range(len(parts))):
        # x[:, None] is x.unsqueeze(1): nothing is picked (an instructor trial's SVM, `correct[:, None]`, derived
        # an assignment into dcorrect[:, None] that no tensor takes)
        return [_unsqueezed(ctx, x, ctx.full(site.g, site).node(), inserted[0], f"[{subscript(selector)}]")]
    if not isinstance(x, ast.Name):
        raise ctx.no_rule(site.node, "indexing an expression (name it on a line of its own)")
    unique = not tensors or (
        len(tensors) == 1 and any(_is_range(p) for p in parts))
    if unique:
        return [Edge(x, site.g, f"only the entries {code(x)}[{subscript(selector)}] were read: they get the "
                                "gradient, every other entry nothing", index=selector,
                     index_slips=_everywhere(site, x, parts, selector))]
    right = template("torch.zeros_like(_x).index_put(_i, _g, accumulate=True)", x=x,
                     i=ast.Tuple(list(parts), ast.Load()), g=ctx.full(site.g, site))
    return [Edge(x, Product.of(right), f"the entries {code(x)}[{subscript(selector)}] were read, a repeated one "
                                       "once per use: index_put with accumulate=True adds them up")]


def _everywhere(site: Site, x: ast.expr, parts: list[ast.expr], selector: ast.expr) -> tuple:
    """A blind answer set's `dout = torch.zeros_like(out) + dlast.unsqueeze(1)` for `last = out[:, -1]`: the
    gradient of the entries read given to every entry along the dimensions the index took away (x[:, t], x[t],
    x[range(n), y]), where only the entries read get it."""
    ctx = site.ctx
    if all(isinstance(p, ast.Slice) or isinstance(ctx.constant(p), int) for p in parts):
        dropped = [d for d, p in enumerate(parts) if not isinstance(p, ast.Slice)]
    elif len(parts) == 2 and _is_range(parts[0]) and len(ctx.shapes(x)[0]) == 2:
        dropped = [1]
    else:
        return ()
    g = ctx.full(site.g, site).node()
    for d in dropped:
        g = call(g, "unsqueeze", number(d))
    return (("index-everywhere", f"gives every entry of {_words(x)} the gradient of the entries {code(x)}["
                                 f"{subscript(selector)}] it read: only those get it, every other entry 0 (start "
                                 f"from zeros and assign at [{subscript(selector)}])", Product.of(g), None),)


def _is_range(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and code(node.func) in ("range", "torch.arange")


# What `exercise check` and the README list as the grammar: a line per family, in the order of the entries.
GRAMMAR = tuple(", ".join(e.grammar for e in OPERATIONS.values() if e.family == family and e.grammar)
                for family in FAMILIES)

# Calls outside the grammar that a forward pass often writes, by name, each with its spelling in the grammar
# (exercise check says it after "write it as").
WRITE_INSTEAD = {
    "unfold": "its windows stacked, torch.stack([x[:, 0:K], x[:, 1:K + 1], ...], dim=1)",
    "conv1d": "a matmul over stacked windows (torch.stack([x[:, 0:K], x[:, 1:K + 1], ...], dim=1), reshaped, @ W)",
    "chunk": "slices, a part on each line: a = x[:, :H] and b = x[:, H:]",
    "split": "slices, a part on each line: a = x[:, :H] and b = x[:, H:]",
    "tensor_split": "slices, a part on each line: a = x[:, :H] and b = x[:, H:]",
    "unbind": "an index on each line: x0 = x[:, 0], x1 = x[:, 1], ...",
    "narrow": "a slice, x[:, start:start + length]",
    "linear": "x @ W.T + b",
    "mm": "a @ b",
    "bmm": "a @ b",
    "embedding": "W[idx]",
    "leaky_relu": "torch.where(x > 0, x, slope * x), with its negative slope written (F.leaky_relu's default: 0.01)",
    "elu": "torch.where(x > 0, x, x.exp() - 1)",
    "normalize": "x / (x ** 2).sum(1, keepdim=True).sqrt()",
    "norm": "(x ** 2).sum({dims}).sqrt()",
    "vector_norm": "(x ** 2).sum({dims}).sqrt()",
    "nll_loss": "-logp[range(n), y].mean()",
    "binary_cross_entropy": "-(y * p.log() + (1 - y) * (1 - p).log()).mean()",
    "binary_cross_entropy_with_logits": "-(y * p.log() + (1 - y) * (1 - p).log()).mean() of p = torch.sigmoid(z)",
    "dropout": "x * mask / (1 - p), the mask drawn among the exercise's data",
    "logsigmoid": "-F.softplus(-x)",
    "kl_div": "(p * (p.log() - logq)).sum(1).mean() for kl_div(logq, p, reduction='batchmean')",
    "softmin": "F.softmax(-x, dim)",
    "amax": "x.max({dims}).values",
    "amin": "x.min({dims}).values",
    "add": "a + b",
    "sub": "a - b",
    "mul": "a * b",
    "div": "a / b",
    "neg": "-a",
}


def write_instead(called: str, call: ast.Call) -> str:
    """WRITE_INSTEAD's spelling for `call`, with the dims it reduces over where it names them: an instructor
    trial's `.norm(dim=1, keepdim=True)` was told to write a whole matrix's norm."""
    named = {k.arg: k.value for k in call.keywords if k.arg in ("dim", "keepdim")}
    if called == "normalize" and "dim" in named:
        return f"x / (x ** 2).sum({code(named['dim'])}, keepdim=True).sqrt()"
    # the dims given by position: a method's first arguments (`h.amax(1, keepdim=True)`), a function's after x
    method = isinstance(call.func, ast.Attribute) and not (isinstance(call.func.value, ast.Name)
                                                           and call.func.value.id in ("torch", "F"))
    given = [code(a) for a in call.args[0 if method else 1:]][:2] if called in ("amax", "amin", "norm") else []
    return WRITE_INSTEAD[called].format(dims=", ".join([*given, *(f"{k}={code(v)}" for k, v in named.items())]))


def grammar_calls() -> frozenset[str]:
    """The calls some rule derives."""
    return frozenset(_by_call())
