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
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grader import syntax
from grader.derive.algebra import Product, call, code, number, subscript, template
from grader.exercise import ELEMENTWISE, Elementwise
from grader.vocabulary import Chain, Transpose

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
        module = isinstance(node.func.value, ast.Name) and node.func.value.id in _MODULES
        if entry.parse is not None:
            return entry.parse(node, module)
        args, kwargs = tuple(node.args), {k.arg: k.value for k in node.keywords}
        if module:
            return Op(entry.kind, (args[0],), args[1:], kwargs) if args else None
        return Op(entry.kind, (node.func.value,), args, kwargs)
    return None


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


def _is_max(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "max"


def _max(node: ast.Call) -> Op:
    module = isinstance(node.func.value, ast.Name) and node.func.value.id in _MODULES
    args = tuple(node.args[1:] if module else node.args)
    operand = node.args[0] if module else node.func.value
    return Op("max", (operand,), args, {k.arg: k.value for k in node.keywords})


# ------------------------------------------------------------------------------------------ helpers

def _t(ctx: Derivation, node: ast.expr) -> ast.expr:
    """The transpose of a matrix (`W.T`) or of a batch of them."""
    if all(len(s) == 2 for s in ctx.shapes(node)):
        return ast.Attribute(node, "T", ast.Load())
    return call(node, "transpose", number(-2), number(-1))


def _local(node: ast.expr, ctx: Derivation) -> Product:
    return Product.of(node, scalar=ctx.is_scalar(node))


def _words(node: ast.expr) -> str:
    return code(node)


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
    node = g.node()
    for d in dims:
        node = call(node, "unsqueeze", number(d))
    return Product.of(node)


def _dims_code(dims: tuple[int, ...]) -> ast.expr:
    return number(dims[0]) if len(dims) == 1 else ast.Tuple([number(d) for d in dims], ast.Load())


def _dims_words(dims: tuple[int, ...]) -> str:
    return f"dim {dims[0]}" if len(dims) == 1 else "dims " + ", ".join(map(str, dims))


# ------------------------------------------------------------------------------------------ the rules

# Explanations left out of a comment that has anything else to say.
ADDITION, COPY = "an addition hands its gradient unchanged to each term", "local derivative 1"
PASS_THROUGH = (ADDITION, COPY)
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
    return [Edge(op.operands[0], site.g, "a copy passes its gradient unchanged")]


@operation("mul", ARITHMETIC, "a * b", operator=ast.Mult)
def mul(site: Site, op: Op) -> list[Edge]:
    ctx, g = site.ctx, site.g
    edges = []
    for x, other in (op.operands, op.operands[::-1]):
        slips = [("mul-local", f"leaves out the local derivative {_words(other)} of the product", g)]
        if not ctx.is_scalar(x) and ctx.same_shape(x, other):
            slips.append(("mul-operand", f"multiplies by {_words(x)} where the product's derivative is the other "
                                         f"factor, {_words(other)}", _local(x, ctx) * g))
        bessel = _bessel(other, ctx)
        if bessel is not None:
            slips.append(("bessel", f"divides by {code(bessel[1])} where the unbiased variance divides by "
                                    f"{code(bessel[1])} - 1 (Bessel's correction)", _local(bessel[0], ctx) * g))
        edges.append(Edge(x, _local(other, ctx) * g, LOCAL + _words(other), tuple(slips)))
    return edges


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

    rewritten = Drop().visit(copy.deepcopy(factor))
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
        Edge(a, to_a, f"local derivative 1/{_words(b)}",
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
    if any(len(s) < 2 for s in (*ctx.shapes(a), *ctx.shapes(b))):
        raise ctx.no_rule(site.node, "a matrix product with a 1-D operand (write it with a 2-D one)")
    g = ctx.full(site.g, site)
    gn = g.node()
    shape = ctx.shape_words
    upstream = code(gn) if isinstance(gn, ast.Name) else "the gradient"
    to_a = Product.of(ast.BinOp(gn, ast.MatMult(), _t(ctx, b)))
    to_b = Product.of(ast.BinOp(_t(ctx, a), ast.MatMult(), gn))
    return [
        Edge(a, to_a, f"the product of {upstream} {shape(site.node)} and {_words(b)}.T {shape(b, True)} that has "
                      f"{_words(a)}'s shape {shape(a)}",
             (("matmul-transpose", Transpose.needs(_words(b)),
               Product.of(ast.BinOp(gn, ast.MatMult(), b))),
              ("matmul-order", Transpose.ORDER,
               Product.of(ast.BinOp(b, ast.MatMult(), _t(ctx, gn)))))),
        Edge(b, to_b, f"{_words(a)}.T {shape(a, True)} @ {upstream} {shape(site.node)} has {_words(b)}'s shape "
                      f"{shape(b)}: the product sums over the rows that shared {_words(b)}",
             (("matmul-transpose", Transpose.needs(_words(a)),
               Product.of(ast.BinOp(a, ast.MatMult(), gn))),
              ("matmul-order", Transpose.ORDER,
               Product.of(ast.BinOp(_t(ctx, gn), ast.MatMult(), a))),
              *((("outer-of-sums", Transpose.outer_of_sums(_words(a)),
                  Product.of(template("_a.flatten(0, -2).sum(0, keepdim=True).T @ _g.flatten(0, -2).sum(0, "
                                      "keepdim=True)", a=a, g=gn))),)
                if all(len(s) == 2 for s in ctx.shapes(b)) else ()))),
    ]


def _elementwise(function: Elementwise) -> None:
    """The entry of an elementwise function (grader.exercise.ELEMENTWISE) as a rule: its derivative times the
    gradient, and each slip's."""
    def rule(site: Site, op: Op) -> list[Edge]:
        x = op.operands[0]
        ctx = site.ctx

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
                   Product.of(template("_y * (1 - _y)", y=y)) * g)))]


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
                 (("mean-count", f"leaves out the mean's 1/{code(count)}", g),))]


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
    x = op.operands[0]
    dims = _reduced(ctx, op, x)
    keepdim = _keepdim(ctx, op)
    g = _expand(ctx, site, dims, keepdim)
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
        y = site.out if keepdim else _expand(ctx, Site(site.node, site.out, Product.of(site.out), ctx), dims,
                                              False).node()

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
    right = call(g, method, shape)
    if not ctx.runs(right):
        right = call(g, "reshape", shape)
    return [Edge(x, Product.of(right), f"{_method(site.node)} only relabels the same numbers: view the gradient "
                                        f"back to {_words(x)}'s shape")]


def _method(node: ast.expr) -> str:
    return node.func.attr if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else ""


@operation("transpose", SHAPES, ".transpose", calls=("transpose",))
@operation("mT", SHAPES, attribute="mT")
@operation("T", SHAPES, ".T", attribute="T")
def transpose(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    x = op.operands[0]
    g = ctx.full(site.g, site).node()
    if op.kind == "T":
        right, why = ast.Attribute(g, "T", ast.Load()), "a transpose's gradient is the gradient transposed back"
    elif op.kind == "mT":
        right, why = ast.Attribute(g, "mT", ast.Load()), "a transpose's gradient is the gradient transposed back"
    else:
        right = call(g, "transpose", *op.args)
        why = f"swapping dims {code(op.args[0])} and {code(op.args[1])} back gives the gradient {_words(x)}'s layout"
    missing = ("transpose-missing", Transpose.MISSING, Product.of(g))
    return [Edge(x, Product.of(right), why, (missing,))]


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
    edges, start = [], None
    for piece in op.operands:
        width = ctx.count(piece, (d,))
        stop = width if start is None else ast.BinOp(start, ast.Add(), width)
        part = ast.Slice(start, stop, None)
        index = ast.Tuple([*(ast.Slice() for _ in range(d)), part], ast.Load()) if d else part
        edges.append(Edge(piece, Product.of(ast.Subscript(g, index, ast.Load())),
                          f"torch.cat put {_words(piece)} at positions {code(part)} of dim {d}: its gradient is that "
                          "slice of the gradient"))
        start = stop
    return edges


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


@operation("cross_entropy", LOSSES, "F.cross_entropy(logits, targets)", calls=("cross_entropy",),
           parse=_parse_cross_entropy)
def cross_entropy(site: Site, op: Op) -> list[Edge]:
    ctx = site.ctx
    logits = op.operands[0]
    target = op.args[0] if op.args else op.kwargs["target"]
    if any(len(s) != 2 for s in ctx.shapes(logits)) or "reduction" in op.kwargs or len(op.args) > 1:
        raise ctx.no_rule(site.node, "cross_entropy other than the mean over (n, classes) logits")
    rows = ctx.count(logits, (0,))
    probs = template("F.softmax(_x, 1)", x=logits)
    one_hot = template("F.one_hot(_t, num_classes=_x.shape[1])", t=target, x=logits)
    right = Product.of(ast.BinOp(probs, ast.Sub(), one_hot)).divided(rows) * site.g
    return [Edge(logits, right, f"the mean of -log softmax(logits)[target]: (softmax - one_hot(target)) / "
                                f"{code(rows)}, the examples averaged",
                 (("ce-mean", f"leaves out the 1/{code(rows)} of the mean over the examples",
                   Product.of(ast.BinOp(probs, ast.Sub(), one_hot)) * site.g),
                  ("ce-one-hot", "leaves out the -1 at each row's target",
                   Product.of(probs).divided(rows) * site.g),
                  ("ce-softmax-dim", "takes the softmax over dimension 0, the examples, where cross_entropy's runs "
                                     "over each row's classes (dimension 1)",
                   Product.of(ast.BinOp(template("F.softmax(_x, 0)", x=logits), ast.Sub(), one_hot)).divided(rows)
                   * site.g)))]


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
        rows = call(g, "view", number(-1), *trailing)
        if not ctx.runs(rows):
            rows = call(g, "reshape", number(-1), *trailing)
        right = template("torch.zeros_like(_x).index_add(0, _i, _g)", x=x, i=flat_index, g=rows)
        return [Edge(x, Product.of(right),
                     f"the lookup copies a row of {_words(x)} for every entry of {code(idx)}: add each gradient "
                     "back into its row (index_add), so a repeated index sums all its uses", (),
                     index_slips=(("index-overwrite", f"keeps one use of each index repeated in {code(idx)}: an "
                                                      "indexed assignment (= or +=) overwrites where all its uses "
                                                      "must add up (index_add)", site.g, selector),))]
    if not isinstance(x, ast.Name):
        raise ctx.no_rule(site.node, "indexing an expression (name it on a line of its own)")
    unique = not tensors or (
        len(tensors) == 1 and any(_is_range(p) for p in parts))
    if unique:
        return [Edge(x, site.g, f"only the entries {code(x)}[{subscript(selector)}] were read: they get the "
                                "gradient, every other entry nothing", index=selector)]
    right = template("torch.zeros_like(_x).index_put(_i, _g, accumulate=True)", x=x,
                     i=ast.Tuple(list(parts), ast.Load()), g=ctx.full(site.g, site))
    return [Edge(x, Product.of(right), f"the entries {code(x)}[{subscript(selector)}] were read, a repeated one "
                                       "once per use: index_put with accumulate=True adds them up")]


def _is_range(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and code(node.func) in ("range", "torch.arange")


# What `exercise check` and the README list as the grammar: a line per family, in the order of the entries.
GRAMMAR = tuple(", ".join(e.grammar for e in OPERATIONS.values() if e.family == family and e.grammar)
                for family in FAMILIES)
