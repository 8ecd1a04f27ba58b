"""The derivation: every line of a forward pass, differentiated backwards with the rule table, into the
gradient cells a student writes, and the slips of each.

Shapes are decided on concrete configurations, not guessed: every sub-expression of a line, and every
gradient expression built for it, is evaluated on each configuration given (the lecture's sizes and
another with different sizes), so a sum over a broadcast dimension is written where a dimension is 1 on
every configuration and larger in the gradient, and a size is written by its name (`n`) where it equals
that size on every configuration. Upstream gradients are random tensors of the right shapes there.
"""
from __future__ import annotations

import ast
import io
import itertools
import math
import textwrap
import tokenize
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import torch

from grader import syntax
from grader.derive import rules
from grader.derive.algebra import Product, call, code, name, number, parse, subscript
from grader.exercise import NAMESPACE, Network
from grader.vocabulary import Broadcast, Chain, Precedence, Sign, missed_branch, missed_factor

# Where a derived gradient counts as unchanged by a slip: what the grader accepts (course.yml's default).
TOLERANCE = dict(rtol=1e-5, atol=1e-8)
WIDTH = 110
# Reading these from a tensor gives no gradient (a shape, the argmax, a detached copy, ...).
_CONSTANT_ATTRIBUTES = {"shape", "indices", "dtype", "device", "ndim"}
_CONSTANT_CALLS = {"argmax", "argmin", "detach", "size", "numel", "dim", "one_hot", "zeros_like", "ones_like",
                   "long", "int", "bool", "sign", "randn_like", "rand_like", "tril", "triu", "ones", "zeros"}
_VIEWS = {"view", "reshape", "transpose", "permute", "squeeze", "unsqueeze", "flatten", "expand", "narrow", "select"}
_ORDINALS = ("First", "Second", "Third", "Fourth", "Fifth", "Sixth")
_TIMES = {2: "twice", 3: "three times", 4: "four times"}


class DeriveError(ValueError):
    """A forward line the rules cannot differentiate; the message names the line and what to change."""


@dataclass(frozen=True)
class Configuration:
    """One concrete forward pass to decide shapes on: the parameters and the data, and what the sizes
    are called (an exercise's `Sizes`), for the comments' shapes."""

    inputs: Mapping[str, torch.Tensor]
    sizes: Mapping[str, int]


@dataclass(frozen=True)
class Contribution:
    """What one line that reads the tensor adds to its gradient: `value`, or, when `index` is set, the
    value of `tensor[index]` only (the rest of the tensor receives nothing from this line)."""

    consumer: str
    line: str
    why: str
    value: str
    index: str | None = None
    # Values the statement is written with, each computed on a line of its own before it (name, code): a
    # normalization's xhat, which its closed form reads twice. `value` holds them spelled out.
    named: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Slip:
    """A classic mistake in one gradient: its stable `name` (`tanh-input`), a `sentence` that continues
    "your dX ...", the line whose contribution it changes, and the whole cell written with it."""

    gradient: str
    name: str
    sentence: str
    consumer: str
    code: str


@dataclass(frozen=True)
class Gradient:
    """The gradient of one tensor (`name` is `d` + `tensor`), as the cell a student writes: one
    contribution per line that reads the tensor (the first assigns, later ones add), each under a
    comment that explains it."""

    name: str
    tensor: str
    contributions: tuple[Contribution, ...]
    reads: tuple[str, ...]
    _slips: tuple[Slip, ...] = ()
    # Slips whose values are the right answer's on every derivation configuration: no mistake to grade
    # there, said by `exercise check` so that an instructor sees what the rule table could not tell apart.
    right_anyway: tuple[Slip, ...] = ()
    # Slips whose values are an earlier slip's on every derivation configuration, saying another mistake: not
    # graded apart (a notebook of each would hold the same values), but searched beside it, so that feedback
    # says either (`dp = Y * dp_t` for `p_t = Y * p + (1 - Y) * (1 - p)` leaves out the first read's local
    # derivative, or the second read).
    alike: tuple[Slip, ...] = ()

    @property
    def source(self) -> str:
        """The cell: every statement under the comment that explains it."""
        return render(self.name, self.tensor, self.contributions, comments=True)

    @property
    def code(self) -> str:
        """The cell without its comments."""
        return render(self.name, self.tensor, self.contributions, comments=False)

    def slips(self) -> tuple[Slip, ...]:
        """Every classic mistake in this gradient that changes its value or shape on some configuration,
        each made once and alone."""
        return self._slips


def _is_view_of_name(node: ast.expr) -> bool:
    """Whether `node` shares the memory of a tensor that has a name (an upstream gradient, a forward
    value): a += into it would change that tensor."""
    while True:
        if isinstance(node, ast.Name):
            return True
        if isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _VIEWS:
            node = node.func.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return False


def _comment(text: str) -> list[str]:
    return ["# " + line for line in textwrap.wrap(text, WIDTH - 2, break_long_words=False, break_on_hyphens=False)]


class _Naming(ast.NodeTransformer):
    """Every sub-expression printed as `text` written as the name `label`."""

    def __init__(self, label: str, text: str):
        self.label, self.text = label, text

    def visit(self, node):
        if isinstance(node, ast.expr) and code(node) == self.text:
            return name(self.label)
        return super().visit(node)


def _named(value: str, named: Sequence[tuple[str, str]]) -> str:
    """`value` with each named value (the later, larger ones first) written by its name."""
    tree = parse(value)
    for label, text in reversed(named):
        tree = _Naming(label, text).visit(tree)
    return code(tree)


def _helpers(c: Contribution, done: set[tuple[str, str]]) -> list[str]:
    """The lines that compute the named values `c`'s statement reads (each once per cell)."""
    read = {n.id for n in ast.walk(parse(_named(c.value, c.named))) if isinstance(n, ast.Name)}
    lines = []
    for k in range(len(c.named) - 1, -1, -1):  # a value a later one is written with is read too
        label, text = c.named[k]
        if label in read:
            read |= {n.id for n in ast.walk(parse(_named(text, c.named[:k]))) if isinstance(n, ast.Name)}
    for k, (label, text) in enumerate(c.named):
        if label in read and (label, text) not in done:
            done.add((label, text))
            lines.append(f"{label} = {_named(text, c.named[:k])}")
    return lines


def render(name_: str, tensor: str, contributions: Sequence[Contribution], *, comments: bool,
           overwrite: bool = False) -> str:
    """The statements of a gradient cell; `overwrite` writes every contribution with = (a slip)."""
    lines = []
    uses = len(contributions)
    done: set[tuple[str, str]] = set()
    for i, c in enumerate(contributions):
        first = i == 0 or overwrite
        value = _named(c.value, c.named) if c.named else c.value
        # A first use that is the upstream gradient itself (or a view of it, or of any named tensor) is
        # copied, so that the += below cannot change that tensor through it.
        copied = c.index is None and i == 0 and uses > 1 and not overwrite and \
            _is_view_of_name(syntax.parse(value, mode="eval").body)
        if copied:
            value = f"{value}.clone()"
        if comments:
            text = f"{c.line}: {c.why}" + (" (a copy, for the += below)." if copied else ".")
            if uses > 1:
                ordinal = _ORDINALS[i] if i < len(_ORDINALS) else f"Use {i + 1}"
                text = (f"{tensor} is used {_TIMES.get(uses, f'{uses} times')}. " if i == 0 else "") + \
                    f"{ordinal} use, {text}"
            lines += _comment(text)
        lines += _helpers(c, done)
        if c.index is None:
            lines.append(f"{name_} = {value}" if first else f"{name_} += {value}")
        elif first:
            lines += [f"{name_} = torch.zeros_like({tensor})", f"{name_}[{c.index}] = {value}"]
        else:
            lines.append(f"{name_}[{c.index}] += {value}")
    return "\n".join(lines) + "\n"


@dataclass
class _Found:
    tensor: str
    g: Product
    why: tuple[str, ...]
    slips: list[tuple[str, str, Product, ast.expr | None]]
    index: ast.expr | None
    named: tuple[tuple[str, ast.expr], ...] = ()


class Derivation:
    """The rules' view of one network on its configurations (see rules.Site)."""

    def __init__(self, network: Network, configurations: Sequence[Configuration]):
        if not configurations:
            raise ValueError("derive needs at least one configuration to decide shapes on")
        self.network = network
        self.line = self.consumer = ""  # the step whose line is being differentiated
        # Each configuration's forward values, and each gradient once derived (so that a choice such as
        # view or reshape is made on the layout the derived cells really give); `noise`: random upstream
        # gradients, on which a slip must show too (a sign slip in a gradient that is ~0, say).
        self.namespaces = []
        self.noise = []
        self.true = []  # autograd's gradients, which every derived one must equal
        self.words = []
        generator = torch.Generator().manual_seed(0)
        for configuration in configurations:
            params = {k: v.detach().clone().requires_grad_(v.is_floating_point())
                      for k, v in configuration.inputs.items() if k in network.parameters}
            data = {k: configuration.inputs[k] for k in network.data}
            with torch.enable_grad():
                values = network.forward(params, data)
            if not self.namespaces:
                self.diff = {k for k, v in values.items() if isinstance(v, torch.Tensor) and v.requires_grad
                             and k != network.loss}
            names = sorted(self.diff)
            grads = torch.autograd.grad(values[network.loss], [values[k] for k in names], allow_unused=True)
            self.true.append({"d" + k: g for k, g in zip(names, grads, strict=True)})
            namespace = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in values.items()}
            namespace.update(NAMESPACE)
            self.namespaces.append(namespace)
            self.noise.append({"d" + k: torch.randn(values[k].shape, generator=generator, dtype=values[k].dtype)
                               for k in self.diff})
            self.words.append({**configuration.sizes, **network.size_values(values)})
        self.sizes = tuple(network.sizes)
        self.inputs = (*network.data, *network.parameters)  # what every answer cell may read
        self._values: dict[str, list] = {}

    # ------------------------------------------------------------------ what the rules ask
    def values(self, node: ast.expr) -> list:
        text = code(node)
        if text not in self._values:
            compiled = compile(text, "<derive>", "eval")
            self._values[text] = [eval(compiled, dict(ns)) for ns in self.namespaces]  # noqa: S307
        return self._values[text]

    def shapes(self, node: ast.expr) -> list[tuple[int, ...]]:
        return [tuple(v.shape) if isinstance(v, torch.Tensor) else () for v in self.values(node)]

    def runs(self, node: ast.expr) -> bool:
        """Whether `node` runs on the derived gradients, on autograd's and on contiguous ones (the random
        upstream gradients, laid out as the grader's arrive over the wire): a view that a derived gradient left
        transposed in memory allows, a contiguous one refuses."""
        try:
            self.values(node)
            compiled = compile(code(node), "<derive>", "eval")
            for namespace, true, noise in zip(self.namespaces, self.true, self.noise, strict=True):
                for upstream in ({k: v for k, v in true.items() if v is not None}, noise):
                    eval(compiled, {**namespace, **upstream})  # noqa: S307
        except Exception:  # noqa: BLE001 - any failure means this spelling does not run
            return False
        return True

    def constant(self, node: ast.expr):
        return self.values(node)[0]

    def is_scalar(self, node: ast.expr) -> bool:
        return not self.is_diff(node) and all(isinstance(v, (int, float)) for v in self.values(node))

    def same_shape(self, a: ast.expr, b: ast.expr) -> bool:
        return self.shapes(a) == self.shapes(b)

    def is_diff(self, node: ast.expr) -> bool:
        """Whether a gradient flows into `node` from the loss: it reads a differentiable tensor other than
        through a shape, an argmax, a comparison or a detached copy."""
        if isinstance(node, ast.Name):
            return node.id in self.diff
        if isinstance(node, ast.Compare) or (isinstance(node, ast.Attribute) and node.attr in _CONSTANT_ATTRIBUTES):
            return False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CONSTANT_CALLS:
            return False
        return any(self.is_diff(child) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr))

    def is_index_tensor(self, node: ast.expr) -> bool:
        value = self.values(node)[0]
        return isinstance(value, torch.Tensor) and not value.is_floating_point() and value.ndim > 0

    def full(self, g: Product, site: rules.Site) -> Product:
        """`g` as a tensor of the operation's output shape (a rule that reshapes, indexes or multiplies
        matrices needs every entry)."""
        if self.shapes(g.node()) == self.shapes(site.node):
            return g
        return self.full_like(g, site.out)

    def full_like(self, g: Product, x: ast.expr) -> Product:
        return Product.of(call(name("torch"), "ones_like", x)) * g

    def count(self, x: ast.expr, dims: tuple[int, ...]) -> ast.expr:
        """How many entries of `x` lie along `dims`, as code: a size's name where it is one on every
        configuration, else the product of the sizes' names along them (`n * k`), else read from x's shape
        (`x.numel()` for all of them)."""
        shapes = self.shapes(x)
        if not dims:
            return number(1)
        whole = self._size([math.prod(shape[d] for d in dims) for shape in shapes])
        if whole is not None:
            return whole
        named = [self._size([shape[d] for shape in shapes]) for d in dims]
        if len(dims) == len(shapes[0]) and len(dims) > 1 and None in named:
            return call(self._of_its_shape(x), "numel")
        node = None
        for d, size in zip(dims, named, strict=True):
            part = size or (None if isinstance(x, ast.Name) else self._within(x, d)
                            or self._dimension([shape[d] for shape in shapes])) \
                or ast.Subscript(ast.Attribute(x, "shape", ast.Load()), number(d), ast.Load())
            node = part if node is None else ast.BinOp(node, ast.Mult(), part)
        return node

    def _of_its_shape(self, x: ast.expr, single: bool = False) -> ast.expr:
        """The tensor an expression has the shape of (h for `h.square()`, `(h - t) ** 2`), else the expression: the
        count is of it, as a teacher writes it (`h.numel()`, `h.shape[1]`, not `((h - t) ** 2).numel()`), before any
        other tensor that happens to be as long (a dropout mask). `single`: only a tensor that is the one such."""
        shapes = self.shapes(x)
        tensors = (*self.inputs, *self.network.intermediates)
        found = dict.fromkeys(node.id for node in ast.walk(x) if isinstance(node, ast.Name) and node.id in tensors
                              and self.shapes(node) == shapes)
        # Of several, the one tensor with a gradient (log_rate in `log_rate.exp() - y * log_rate`, not the data y); of
        # two with gradients (`logpz + logdet`), neither: a dimension of the data says the count (X.shape[0]), not the
        # other term's shape in the gradient of one (an instructor trial's dlogdet divided by logpz.shape[0])
        learnt = [k for k in found if k not in self.network.data]
        owner = learnt if learnt else list(found)
        return name(owner[0]) if len(owner) == 1 or owner and not single else x

    def _within(self, x: ast.expr, d: int) -> ast.expr | None:
        of = self._of_its_shape(x, single=True)
        return None if of is x else ast.Subscript(ast.Attribute(of, "shape", ast.Load()), number(d), ast.Load())

    def _dimension(self, counts: list[int]) -> ast.expr | None:
        """A dimension of the data or a parameter as long as `counts` on every configuration (`X.shape[0]`), as a
        teacher reads a size the forward lines never name: the mean of an expression written inline was divided
        by that whole expression's `.shape[0]` (an instructor trial's VAE)."""
        for tensor in self.inputs:
            shapes = self.shapes(name(tensor))
            for k in range(len(shapes[0])):
                if all(shape[k] == c for shape, c in zip(shapes, counts, strict=True)):
                    return ast.Subscript(ast.Attribute(name(tensor), "shape", ast.Load()), number(k), ast.Load())
        return None

    def _size(self, counts: list[int]) -> ast.Name | None:
        """The readable size equal to `counts` (one per configuration) on every configuration."""
        for size in self.sizes:
            if all(words[size] == c for words, c in zip(self.words, counts, strict=True)):
                return name(size)
        return None

    def shape_of_code(self, x: ast.expr) -> ast.expr:
        return ast.Attribute(x, "shape", ast.Load())

    def shape_words(self, node: ast.expr, transposed: bool = False) -> str:
        """`node`'s shape in the sizes' names: (n, n_hidden)."""
        shapes = self.shapes(node)
        dims = [self._dim_words([s[d] for s in shapes]) for d in range(len(shapes[0]))]
        if transposed and len(dims) >= 2:
            dims[-2], dims[-1] = dims[-1], dims[-2]
        return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"

    def _dim_words(self, values: list[int]) -> str:
        for size in self.words[0]:  # a size, never a float hyperparameter that equals one (an instructor trial's
            # Huber delta of 1.0 named every dimension of one: "b_out (delta,)")
            if isinstance(self.words[0][size], int) and \
                    all(words[size] == v for words, v in zip(self.words, values, strict=True)):
                return size
        whole = [k for k, v in self.words[0].items() if isinstance(v, int) and v > 1]
        pairs = [(k, [w[k] for w in self.words]) for k in whole]

        def product(names) -> bool:
            return all(math.prod(w[k] for k in names) == v for w, v in zip(self.words, values, strict=True))

        # Two different sizes multiplied (n*k), then a multiple of a size (4*n_embd, a feed-forward's width), before
        # a size squared or three multiplied: an instructor trial's LSTM gates, 4*nh wide with T = 2 steps, were
        # written T*T*nh
        for names in itertools.combinations(whole, 2):
            if product(names):
                return "*".join(names)
        for k, sizes in pairs:
            ratios = {v / s for v, s in zip(values, sizes, strict=True)}
            if len(set(sizes)) > 1 and len(ratios) == 1 and (ratio := ratios.pop()).is_integer() and ratio > 1:
                return f"{int(ratio)}*{k}"
        for count in (2, 3):
            for names in itertools.combinations_with_replacement(whole, count):
                if product(names):
                    return "*".join(names)
        if len(set(values)) == 1:
            return str(values[0])
        # Two sizes side by side (n_a+n_b, a concatenation), or a size off by a constant (L-K+1 windows with K
        # fixed, n-1)
        for (a, first), (b, second) in itertools.combinations_with_replacement(pairs, 2):
            if all(v == x + y for v, x, y in zip(values, first, second, strict=True)):
                return f"{a}+{b}"
        for k, sizes in pairs:
            offsets = {v - s for v, s in zip(values, sizes, strict=True)}
            if len(offsets) == 1 and (offset := offsets.pop()):
                return f"{k}{offset:+d}"
        return "?"

    def no_rule(self, node: ast.expr, what: str = "") -> DeriveError:
        detail = f" ({what})" if what else ""
        # `x.chunk(2, 1)[0]`: the call under the index is what needs writing otherwise
        call = node.value if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) else node
        called = call.func.attr if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) else \
            call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else ""
        instead = f"; write it as {rules.write_instead(called, call)}" if called in rules.WRITE_INSTEAD else ""
        if instead and call is not node:  # naming the call on a line of its own would not help
            detail = ""
        return DeriveError(f"line `{self.line}`: no backward rule for `{code(node)}`{detail}{instead}; the grammar "
                           "is " + "; ".join(rules.GRAMMAR))

    # ------------------------------------------------------------------ the walk
    def unbroadcast(self, g: Product, child: ast.expr) -> tuple[Product, str, list[tuple[str, str, Product]]]:
        """`g` summed over the dimensions `child` was broadcast along, why, and the slips of that sum."""
        gs, cs = self.shapes(g.node()), self.shapes(child)
        if gs == cs:
            return g, "", []
        lead = {len(a) - len(b) for a, b in zip(gs, cs, strict=True)}
        if len(lead) != 1:
            return g, "", []
        (lead,) = lead
        if lead < 0:
            return g, "", []
        keep = tuple(d for d in range(len(cs[0]))
                     if all(c[d] == 1 for c in cs) and any(s[lead + d] != 1 for s in gs))
        if not lead and not keep:
            return g, "", []
        node = g.node()
        what = code(child)
        shape = self.shape_words(child)
        slips = [("broadcast-no-sum", Broadcast.no_sum(what, shape),
                  g)]
        whys = []
        if lead:
            dims = tuple(range(lead))
            node = call(node, "sum", rules._dims_code(dims))
            whys.append(f"{what} {shape} was broadcast over {rules._dims_words(dims)} of the gradient: sum over it")
            if not keep and len(gs[0]) == 2:
                slips.append(("broadcast-wrong-dim", Broadcast.sums_over("dim 1", what, "dim 0"),
                              Product.of(call(g.node(), "sum", number(1)))))
        if keep:
            summed = node
            node = call(summed, "sum", rules._dims_code(keep), keepdim=ast.Constant(True))
            whys.append(f"{what} {shape} was broadcast over {rules._dims_words(keep)}: sum over it, keepdim=True "
                        f"keeps its shape")
            slips.append(("broadcast-keepdim", Broadcast.lost_keepdim(what, shape),
                          Product.of(call(summed, "sum", rules._dims_code(keep)))))
            others = tuple(d for d in range(len(cs[0])) if d not in keep and any(s[lead + d] != 1 for s in gs))
            if others:
                slips.append(("broadcast-wrong-dim", Broadcast.sums_over(rules._dims_words(others), what,
                                                                         rules._dims_words(keep)),
                              Product.of(call(summed, "sum", rules._dims_code(others), keepdim=ast.Constant(True)))))
        return Product.of(node), "; ".join(whys), slips

    def walk(self, node: ast.expr, out: ast.expr, g: Product, why: tuple[str, ...],
             slips: list, index: ast.expr | None = None, named: tuple = ()) -> Iterator[_Found]:
        if isinstance(node, ast.Name):
            if node.id in self.diff:
                yield _Found(node.id, g, why, slips, index, named)
            return
        if not self.is_diff(node):
            return
        op = rules.classify(node)
        if op is None:
            raise self.no_rule(node)
        rule = rules.OPERATIONS[op.kind].vjp
        edges = rule(rules.Site(node, out, g, self), op)
        for k, edge in enumerate(edges):
            if not self.is_diff(edge.child):
                continue
            child_g, child_why, sum_slips = self.unbroadcast(edge.g, edge.child)
            carried = []
            for key, sentence, alt, _ in slips:
                try:
                    alt_edge = rule(rules.Site(node, out, alt, self), op)[k]
                    carried.append((key, sentence, self.unbroadcast(alt_edge.g, edge.child)[0], alt_edge.index))
                except Exception:  # noqa: BLE001,S112 - a slip that cannot be carried down is no slip here
                    continue
            for key, sentence, alt in edge.slips:
                try:
                    carried.append((key, sentence, self.unbroadcast(alt, edge.child)[0], edge.index))
                except Exception:  # noqa: BLE001,S112
                    continue
            carried += [(key, sentence, alt, edge.index) for key, sentence, alt in sum_slips]
            carried += list(edge.index_slips)
            whys = (*why, edge.why, *((child_why,) if child_why else ()))
            yield from self.walk(edge.child, edge.child, child_g, whys, carried, edge.index, (*named, *edge.named))

    def finish(self, g: Product, tensor: str, index: ast.expr | None, slip: bool = False) -> ast.expr:
        """The contribution's value as code: a gradient broadcast smaller than the tensor (a sum's) spelled
        out at the tensor's shape, so that later lines can add to it. A slip keeps a wrong shape of as many
        entries (a lost keepdim is its mistake)."""
        node = g.node()
        if index is not None:
            return node
        x = name(tensor)
        values, targets = self.values(node), self.values(x)
        # of the tensor's dtype too: a 0/1 mask over a number (a mean's hinge, `(x >= 0) / n`) is float32
        if all(isinstance(v, torch.Tensor) and v.is_floating_point() and v.dtype == t.dtype
               and (v.shape == t.shape or (slip and v.numel() >= t.numel()))
               for v, t in zip(values, targets, strict=True)):
            return node
        full = self.full_like(g, x).node()
        if self.runs(full) and self.shapes(full) == self.shapes(x):
            return full
        return node

    def contributions(self, step) -> list[tuple[_Found, Contribution]]:
        self.line, self.consumer = f"{step.name} = {step.code}", step.name
        root = parse(step.code)
        upstream = Product(1) if step.name == self.network.loss else Product.of(name("d" + step.name))
        found = []
        for f in self.walk(root, name(step.name), upstream, (), []):
            value = self.finish(f.g, f.tensor, f.index)
            if f.index is None and self.shapes(value) != self.shapes(name(f.tensor)):
                raise DeriveError(f"line `{self.line}`: the gradient of {f.tensor} comes out with shape "
                                  f"{self.shapes(value)[0]}, not {self.shapes(name(f.tensor))[0]}")
            said = _merge_locals([w for w in f.why if w and w not in rules.PASS_THROUGH])
            # A line that only names another tensor (`flat = windows`) has no operation to explain: it copies.
            why = "; ".join(said or [w for w in f.why if w][:1]) or rules.COPIED
            named = tuple((label, code(parse(code(node)))) for label, node in f.named)
            found.append((f, Contribution(step.name, self.line, why, code(value),
                                          None if f.index is None else subscript(f.index), named)))
        return found


def _merge_locals(whys: list[str]) -> list[str]:
    """Consecutive "local derivative a", "local derivative b" (products nested in one line) said once, as
    the product the student writes: "local derivative b * a"."""
    merged: list[str] = []
    for why in whys:
        if why.startswith(rules.LOCAL) and merged and merged[-1].startswith(rules.LOCAL):
            parts = [p for p in (why[len(rules.LOCAL):], merged[-1][len(rules.LOCAL):]) if p != "-1"]
            sign = "-" if len(parts) == 1 else ""
            merged[-1] = rules.LOCAL + sign + " * ".join(f"({p})" if _loose(p) or sign else p for p in parts)
        else:
            merged.append(why)
    return merged


def _loose(text: str) -> bool:
    """Whether `text` needs parentheses as a factor."""
    try:
        node = syntax.parse(text, mode="eval").body
    except SyntaxError:
        return False
    return isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub))


def _refuse_outside_the_grammar(d: Derivation, network: Network) -> None:
    """The first line, in the forward pass's order, that calls what the grammar spells otherwise (WRITE_INSTEAD):
    the walk goes from the loss back and met an instructor trial's third `.norm(...)` line before its first."""
    grammar = rules.grammar_calls()
    for step in network.steps:
        for node in ast.walk(parse(step.code)):
            func = node.func if isinstance(node, ast.Call) else None
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in rules.WRITE_INSTEAD and called not in grammar:
                d.line = f"{step.name} = {step.code}"
                raise d.no_rule(node)


def derive(network: Network, configurations: Sequence[Configuration]) -> tuple[Gradient, ...]:
    """Every parameter's and intermediate's gradient, in the order a student computes them: backwards
    from the loss, each as soon as every line that reads its tensor has been differentiated."""
    d = Derivation(network, configurations)
    _refuse_outside_the_grammar(d, network)
    readers: dict[str, int] = {}
    for step in network.steps:
        for tensor in step.inputs:
            if tensor in d.diff:
                readers[tensor] = readers.get(tensor, 0) + 1
    gathered: dict[str, list] = {}
    gradients = []
    for step in reversed(network.steps):
        try:
            found = d.contributions(step)
        except DeriveError:
            raise
        except Exception as exc:  # a rule met a line it does not fit: the line named, not a traceback
            raise DeriveError(f"line `{d.line}`: no rule derives it ({type(exc).__name__}: {exc}); write it with "
                              "the grammar's operations, or report it with the forward pass") from exc
        for f, contribution in found:
            gathered.setdefault(f.tensor, []).append((f, contribution))
        for tensor in step.inputs:
            if tensor not in d.diff:
                continue
            readers[tensor] -= 1
            if readers[tensor] == 0 and tensor in gathered:
                gradient = _gradient(d, tensor, gathered[tensor])
                for namespace, true, value in zip(d.namespaces, d.true,
                                                  _run(d.namespaces, gradient.code, gradient.name), strict=True):
                    expected = true[gradient.name]
                    # A configuration where autograd itself has no finite gradient (a std of 0) proves nothing.
                    if expected is None or (torch.isfinite(expected).all()
                                            and not torch.allclose(value, expected, rtol=1e-6, atol=1e-9)):
                        raise DeriveError(f"the derived {gradient.name} differs from autograd's (a rule of the "
                                          f"derivation is wrong: please report it with the forward pass):\n"
                                          f"{gradient.code}")
                    namespace[gradient.name] = value
                gradients.append(gradient)
    return tuple(gradients)


def _reads(source: str, own: str) -> tuple[str, ...]:
    """What the cell reads from outside it: not its own gradient, nor a value it computes itself (xhat)."""
    tree = syntax.parse(source)
    stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    loaded = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return tuple(dict.fromkeys(n for n in loaded if n != own and n not in stored | NAMESPACE.keys() and n != "range"))


def _gradient(d: Derivation, tensor: str, found: list[tuple[_Found, Contribution]]) -> Gradient:
    gradient_name = "d" + tensor
    contributions = tuple(c for _, c in found)
    plain = render(gradient_name, tensor, contributions, comments=False)
    slips: list[tuple[str, str, str, str]] = []  # (name, sentence, consumer, code)
    # The same slip made in every use (a time step's rule slipped at each step): the first of each name per use.
    every: dict[str, dict[int, tuple[str, Contribution]]] = {}
    for i, (f, c) in enumerate(found):
        for key, sentence, alt, index in f.slips:
            try:
                value = code(d.finish(alt, tensor, index, slip=True))
            except Exception:  # noqa: BLE001,S112 - a slip that does not run is no slip
                continue
            changed = replace(c, value=value, index=None if index is None else subscript(index))
            every.setdefault(key, {}).setdefault(i, (sentence, changed))
            slips.append((key, sentence, c.consumer,
                          render(gradient_name, tensor, (*contributions[:i], changed, *contributions[i + 1:]),
                                 comments=False)))
        if c.consumer != d.network.loss:
            upstream = "d" + c.consumer
            replaced = _rename(c.value, upstream, c.consumer)
            if replaced != c.value:
                changed = replace(c, value=replaced)
                slips.append(("forward-value", Chain.forward_value(c.consumer, upstream), c.consumer,
                              render(gradient_name, tensor, (*contributions[:i], changed, *contributions[i + 1:]),
                                     comments=False)))
        for key, sentence, regrouped in regroupings(c.value):
            changed = replace(c, value=regrouped)
            slips.append((key, sentence, c.consumer,
                          render(gradient_name, tensor, (*contributions[:i], changed, *contributions[i + 1:]),
                                 comments=False)))
    forward = {step.name: i for i, step in enumerate(d.network.steps)}
    for key, per in every.items():
        if len(per) > 1:
            uses = sorted(per, key=lambda i: forward.get(contributions[i].consumer, len(forward)))
            consumers = None if len(per) == len(contributions) else \
                list(dict.fromkeys(contributions[i].consumer for i in uses))
            slips.append((key, Chain.every_use(next(iter(per.values()))[0], tensor, consumers=consumers), "",
                          render(gradient_name, tensor, tuple(per[i][1] if i in per else c
                                                              for i, c in enumerate(contributions)),
                                 comments=False)))
    uses = len(contributions)
    if uses > 1:
        # A branch is a step that reads the tensor: `W * W` reads it twice in one step, and a student who
        # leaves out that step (a forgotten L2 term) leaves out both of its contributions.
        order = {step.name: i for i, step in enumerate(d.network.steps)}
        consumers = sorted(dict.fromkeys(c.consumer for c in contributions), key=lambda c: order.get(c, len(order)))
        for consumer in dict.fromkeys(c.consumer for c in contributions) if len(consumers) > 1 else ():
            kept = tuple(c for c in contributions if c.consumer != consumer)
            slips.append(("missed-branch", missed_branch(tensor, consumers, consumer), consumer,
                          render(gradient_name, tensor, kept, comments=False)))
        reads = Counter(c.consumer for c in contributions)
        for i, c in enumerate(contributions):
            if reads[c.consumer] > 1:  # d(W * W) taken as W, not 2 W: one of the step's reads of the tensor left out
                slips.append(("missed-factor", missed_factor(tensor, c.consumer, reads[c.consumer]), c.consumer,
                              render(gradient_name, tensor, contributions[:i] + contributions[i + 1:], comments=False)))
        slips.append(("overwrite", "assigns each use's gradient with = where they must add up (+=): only the last "
                                   "one is left", "", render(gradient_name, tensor, contributions, comments=False,
                                                             overwrite=True)))
    negated = tuple(replace(c, value=_negated(c.value)) for c in contributions)
    slips.append(("sign", Sign.FLIPPED, "", render(gradient_name, tensor, negated, comments=False)))
    return Gradient(gradient_name, tensor, contributions, _reads(plain, gradient_name),
                    *_kept(d, gradient_name, plain, slips))


_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.MatMult: "@", ast.Pow: "**"}


def regroupings(value: str) -> Iterator[tuple[str, str, str]]:
    """(name, sentence, code) for each way the same symbols of `value` are read otherwise, each made once
    and alone: a pair of parentheses around a looser operation left out (`1 - h**2 * dh`, which Python
    reads as it does), or an elementwise and a matrix product grouped the other way round."""
    yield from _unparenthesized(value)
    count = sum(isinstance(n, ast.BinOp) for n in ast.walk(parse(value)))
    for k in range(count):
        for side in ("left", "right"):
            tree = parse(value)
            node = [n for n in ast.walk(tree) if isinstance(n, ast.BinOp)][k]
            child = getattr(node, side)
            products = {type(node.op), type(getattr(child, "op", None))}
            # Two matrix products (`A.T @ dZ @ W.T`) regrouped are the same product: no slip.
            if not isinstance(child, ast.BinOp) or ast.MatMult not in products or len(products) != 2 or \
                    not products < {ast.MatMult, ast.Mult, ast.Div}:
                continue
            if side == "left":  # (a . b) , c  read as  a . (b , c)
                node.left, node.op, node.right = child.left, child.op, ast.BinOp(child.right, node.op, node.right)
            else:  # a , (b . c)  read as  (a , b) . c
                node.left, node.op, node.right = ast.BinOp(node.left, node.op, child.left), child.op, child.right
            yield "regrouped", Precedence.regrouped(*sorted(_SYMBOLS[t] for t in products)), code(tree)


def _unparenthesized(value: str) -> Iterator[tuple[str, str, str]]:
    """The parentheses that group an operation (not a call's, a subscript's or a tuple's) left out one pair
    at a time, where Python then reads another computation."""
    tokens = list(tokenize.generate_tokens(io.StringIO(value).readline))
    opened, pairs = [], []
    for i, token in enumerate(tokens):
        if token.string == "(":
            before = tokens[i - 1] if i else None
            opened.append((i, before is None or before.type == tokenize.OP and before.string not in (")", "]")))
        elif token.string == ")" and opened:
            start, grouping = opened.pop()
            if grouping:
                pairs.append((start, i))
    right = ast.dump(parse(value))
    for start, stop in pairs:
        inner = parse(tokenize.untokenize(tokens[start + 1:stop]).strip())
        if not isinstance(inner, ast.BinOp) or type(inner.op) not in _SYMBOLS:
            continue
        text = value[:tokens[start].start[1]] + value[tokens[start].end[1]:tokens[stop].start[1]] + \
            value[tokens[stop].end[1]:]
        try:
            read = parse(text)
        except SyntaxError:
            continue
        neighbour = tokens[stop + 1] if stop + 1 < len(tokens) and tokens[stop + 1].type == tokenize.OP else \
            tokens[start - 1]
        if ast.dump(read) != right and neighbour.string in _SYMBOLS.values():
            yield "precedence", Precedence.dropped(neighbour.string, _SYMBOLS[type(inner.op)]), code(read)


def _negated(value: str) -> str:
    """`-value`, its constants as written (the tree is parsed keeping them)."""
    return code(ast.UnaryOp(ast.USub(), parse(value)))


def _rename(value: str, old: str, new: str) -> str:
    tree = parse(value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == old:
            node.id = new
    return code(tree)


def _run(namespaces: Sequence[dict], source: str, gradient_name: str) -> list[torch.Tensor]:
    compiled = compile(source, f"<{gradient_name}>", "exec")
    out = []
    for namespace in namespaces:
        # Copies: a slip may write into a tensor it reads (a += into a view of a forward value).
        ns = dict(namespace)
        ns.update({k: namespace[k].clone() for k in compiled.co_names
                   if isinstance(namespace.get(k), torch.Tensor)})
        ns.pop(gradient_name, None)
        exec(compiled, ns)  # noqa: S102 - derived code, run on the derivation's own tensors
        out.append(ns[gradient_name])
    return out


def _kept(d: Derivation, gradient_name: str, plain: str, slips) -> tuple[tuple[Slip, ...], ...]:
    """The slips that change the gradient (its values beyond the grader's tolerance, or its shape) on
    some configuration, each value once; those equal to the right answer on every one; and those equal to
    a kept one on every one."""
    namespaces = [*d.namespaces, *({**ns, **noise} for ns, noise in zip(d.namespaces, d.noise, strict=True))]
    reference = _run(namespaces, plain, gradient_name)
    kept, seen, right, alike = [], [], [], []
    for key, sentence, consumer, source in slips:
        try:
            values = _run(namespaces, source, gradient_name)
        except Exception:  # noqa: BLE001,S112 - a slip that does not run is no slip
            continue
        if not all(isinstance(v, torch.Tensor) for v in values):
            continue
        if all(_same(v, r) for v, r in zip(values, reference, strict=True)):
            # A product regrouped that gives the same values is an identity (a scalar factor commutes with a matrix
            # product: an instructor trial's note said it "does not commute"), no mistake the data hides.
            if key != "regrouped":
                right.append(Slip(gradient_name, key, sentence, consumer, source))
            continue
        if any(all(_same(v, s) for v, s in zip(values, other, strict=True)) for other in seen):
            # A whole sign flipped, equal to a step's own sign slip, says that slip less exactly.
            if key != "sign":
                alike.append(Slip(gradient_name, key, sentence, consumer, source))
            continue
        seen.append(values)
        kept.append(Slip(gradient_name, key, sentence, consumer, source))
    return tuple(kept), tuple(right), tuple(alike)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a.to(b.dtype), b, **TOLERANCE))
