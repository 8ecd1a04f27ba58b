"""Gradient expressions as Python syntax trees, kept in the form a student writes them.

A gradient is built by multiplying local derivatives into an upstream gradient; written naively that
gives `1 * (-1 * (1 / n * dloss))`. `Product` keeps a numeric coefficient, the factors and the divisors
apart, so that the printed code folds constants (`-1 / n`), puts scalar factors first and the upstream
gradient last (`1 / (n - 1) * torch.ones_like(bndiff2) * dbnvar`), and never multiplies by 1.
`ast.unparse` does the parenthesising, so the printed code always means what the tree means.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from grader import syntax


class Literal(float):
    """A float constant printed as the forward pass wrote it (`1e-5`, not `1e-05`), so that a derived
    answer quotes the forward's constants verbatim."""

    def __new__(cls, value: float, text: str):
        self = super().__new__(cls, value)
        self.text = text
        return self

    def __repr__(self) -> str:
        return self.text

    def __reduce__(self):
        return Literal, (float(self), self.text)


def parse(code: str) -> ast.expr:
    """One forward expression, its float constants kept as written."""
    tree = syntax.parse(code, mode="eval").body
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) is float:
            node.value = Literal(node.value, ast.get_source_segment(code, node) or repr(node.value))

    class Negative(ast.NodeTransformer):
        """-1.5 as one constant, as it was written (ast.unparse would write the unary minus as (-1.5))."""

        def visit_UnaryOp(self, node):
            self.generic_visit(node)
            if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                    and isinstance(node.operand.value, Literal):
                return ast.Constant(Literal(-node.operand.value, "-" + node.operand.value.text))
            return node

    return Negative().visit(tree)


def number(value: float) -> ast.expr:
    """A numeric constant as a student writes it: 2 rather than 2.0."""
    if isinstance(value, float) and not isinstance(value, Literal) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return ast.Constant(value)


def clone(node):
    """A copy of a syntax tree (a node, a list of them, or a leaf value), by its fields alone. copy.deepcopy
    follows every attribute: after any traceback in a Jupyter kernel, IPython's `executing` has set `.parent` on
    the parser's shared ctx and operator nodes (ast.Load(), ast.Add()), so each deepcopy of a tree copied the
    notebook's whole parsed source with it, and a check cell deriving a GRU's slips ran seven minutes (an
    instructor trial). Those nodes have no fields and are shared here, as the parser shares them."""
    if isinstance(node, list):
        return [clone(item) for item in node]
    if not isinstance(node, ast.AST) or not node._fields:
        return node
    copied = type(node)(**{f: clone(getattr(node, f)) for f in node._fields if hasattr(node, f)})
    for attribute in node._attributes:
        if hasattr(node, attribute):
            setattr(copied, attribute, getattr(node, attribute))
    return copied


def name(identifier: str) -> ast.Name:
    return ast.Name(identifier, ast.Load())


def call(obj: ast.expr, method: str, *args: ast.expr, **kwargs: ast.expr) -> ast.Call:
    return ast.Call(ast.Attribute(obj, method, ast.Load()), list(args),
                    [ast.keyword(k, v) for k, v in kwargs.items()])


def template(text: str, **nodes: ast.expr | Product) -> ast.expr:
    """`text` parsed, each `_name` in it replaced by `nodes["_name"[1:]]` (placeholders start with an
    underscore, which no tensor of a forward pass is expected to)."""
    tree = syntax.parse(text, mode="eval").body

    class Substitute(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id.startswith("_") and node.id[1:] in nodes:
                value = nodes[node.id[1:]]
                return value.node() if isinstance(value, Product) else value
            return node

    return Substitute().visit(tree)


def code(node: ast.expr) -> str:
    return ast.unparse(node)


def subscript(node: ast.expr) -> str:
    """An index as it is written between brackets: `range(n), Yb`, not `(range(n), Yb)`."""
    if isinstance(node, ast.Tuple) and node.elts:
        return ", ".join(code(e) for e in node.elts)
    return code(node)


def _boolean(node: ast.expr) -> bool:
    """A 0/1 mask (a comparison, or masks joined by & | ^ ~): torch refuses `-` of one, so a minus goes on another
    factor (a clamp of `W - V` sends `-(W - V >= 0) * da` to V: no rule derived an SVM's hinge)."""
    if isinstance(node, ast.Compare):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return _boolean(node.left) and _boolean(node.right)
    return isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert) and _boolean(node.operand)


def _numeric(node: ast.BinOp) -> bool:
    """A product or quotient one of whose factors is a number; not a divisor (`x / 2` stays as written), nor a
    reciprocal's 1 (`1 / (n - 1) * ...` is how the lecture writes it)."""
    if isinstance(node.op, ast.Div) and isinstance(node.left, ast.Constant) and node.left.value == 1:
        return False
    sides = (node.left,) if isinstance(node.op, ast.Div) else (node.left, node.right)
    return any(isinstance(side, ast.Constant) and isinstance(side.value, (int, float))
               and not isinstance(side.value, bool)
               or isinstance(side, ast.BinOp) and isinstance(side.op, (ast.Mult, ast.Div)) and _numeric(side)
               for side in sides)


@dataclass(frozen=True)
class Product:
    """coef * factors[0] * factors[1] * ... / divisors[0] / ...; `scalars` marks the factors that are
    plain numbers (sizes, constants), printed first."""

    coef: float = 1
    factors: tuple[ast.expr, ...] = ()
    divisors: tuple[ast.expr, ...] = ()
    scalars: tuple[bool, ...] = ()

    @classmethod
    def of(cls, node: ast.expr, scalar: bool = False) -> Product:
        if isinstance(node, ast.Constant) and isinstance(node.value, Literal):
            return cls(1, (node,), (), (True,))  # the forward's constant, quoted as written, not folded
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return cls(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = cls.of(node.operand, scalar)
            return cls(-inner.coef, inner.factors, inner.divisors, inner.scalars)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)) and _numeric(node):
            # A local derivative with a number in it (`0.5 / y`, `0.5 * lam`) taken apart, so that its number
            # meets the chain's others: `lam * W` where the forward's 0.5 met the square's 2, not 2 * (0.5 * lam).
            left = cls.of(node.left, scalar)
            if isinstance(node.op, ast.Div):
                return left.divided(node.right)
            return left * cls.of(node.right, scalar)
        return cls(1, (node,), (), (scalar,))

    @property
    def constant(self) -> float | None:
        """Its value when it is a plain number (the loss's gradient, 1, times constants)."""
        return self.coef if not self.factors and not self.divisors else None

    def __mul__(self, other: Product) -> Product:
        """`self` (a local derivative) times `other` (an upstream gradient): scalars first, in order."""
        pairs = [*zip(self.factors, self.scalars, strict=True), *zip(other.factors, other.scalars, strict=True)]
        pairs.sort(key=lambda pair: not pair[1])
        coef = self.coef * other.coef
        return Product(coef, tuple(p[0] for p in pairs), self.divisors + other.divisors, tuple(p[1] for p in pairs))

    def __neg__(self) -> Product:
        return Product(-self.coef, self.factors, self.divisors, self.scalars)

    def divided(self, divisor: ast.expr) -> Product:
        return Product(self.coef, self.factors, (*self.divisors, divisor), self.scalars)

    def node(self) -> ast.expr:
        parts = [clone(f) for f in self.factors]
        coef = self.coef
        literal = parts and isinstance(parts[0], ast.Constant) and isinstance(parts[0].value, Literal)
        if literal and coef not in (1, -1) and float(coef * parts[0].value).is_integer():
            coef = int(coef * parts.pop(0).value)  # -2 * -0.5 * mu as mu (an instructor trial's VAE)
        if parts and coef == -1 and isinstance(parts[0], ast.Constant) and isinstance(parts[0].value, Literal) \
                and parts[0].value < 0:  # -(-0.5) as 0.5, not `--0.5` (an instructor trial's VAE)
            text = parts[0].value.text
            flipped = text[1:] if text.startswith("-") else repr(-parts[0].value)
            parts[0] = ast.Constant(Literal(-parts[0].value, flipped))
        elif parts and coef == -1 and not all(map(_boolean, parts)):
            first = next(i for i, part in enumerate(parts) if not _boolean(part))
            parts[first] = ast.UnaryOp(ast.USub(), parts[first])
        elif not parts or coef != 1:
            parts.insert(0, number(coef))
        expr = parts[0]
        for part in parts[1:]:
            expr = ast.BinOp(expr, ast.Mult(), part)
        for divisor in self.divisors:
            expr = ast.BinOp(expr, ast.Div(), clone(divisor))
        return expr

    def code(self) -> str:
        return code(self.node())
