"""A fused block's closed form: what a teacher writes for a whole normalization or cross-entropy, derived
from the block's lines and proven against autograd before it is used.

The chain of atomic steps through a block is right but long (the lecture's batch norm is eleven lines);
the closed form is one expression. Nothing here reads the lines' text for a known spelling: the block's
values are read on the derivation's configurations, and what they *are* decides.

- A cross-entropy or a log-softmax: a sub-expression of a block line (a whole line, or a term inside a
  sum with other terms such as an L2 penalty) whose value is `F.cross_entropy(source, target)` (averaged
  or summed) for a target among the data, or `F.log_softmax(source, dim)`, on every configuration, is that
  call. The network with it written so, and the lines left dead dropped, is derived again by the rule
  table, whose rules for those calls are the closed forms (softmax minus the target's one-hot, over n for
  a mean). What reaches `source` from the loss is then kept, each gradient read once folded into its
  reader.
- A normalization: a tensor of the block that is `(x - mean) * (var + eps) ** -0.5` of the block's source
  x, over some dims, with or without Bessel's correction, for one constant eps >= 0, is its normalized
  value xhat; a value of the block that is that `(var + eps) ** -0.5` (or its inverse, the std) is its
  scale. The paths through the mean and the variance collected give
  `dx = scale / N * (N * g - g.sum(dims) - N / (N - c) * xhat * (g * xhat).sum(dims))` with `g` the
  gradient reaching xhat (its factors constant along the reduced dims, such as a batch norm's gain, taken
  out in front), as the lecture writes it.

Either closed form is then run on every configuration, with the block's true upstream gradient and with a
random one, and compared with autograd's; where it differs, or none is found, the block keeps its chain
and `why_not` says so.
"""
from __future__ import annotations

import ast
import itertools
import math
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import torch

from grader.derive.algebra import call, clone, code, name, number, parse
from grader.derive.engine import (
    WIDTH,
    Configuration,
    Derivation,
    DeriveError,
    Gradient,
    Slip,
    derive,
    regroupings,
)
from grader.exercise import Network

# How close a value must be to a candidate on every configuration (float64) to be taken for it.
_SAME = dict(rtol=1e-9, atol=1e-12)
# How close the closed form must be to autograd: the derivation's own check.
_PROVEN = dict(rtol=1e-6, atol=1e-9)


@dataclass(frozen=True)
class Closed:
    """A fused block's closed form: the cell (statements under comments), the gradient whose slips feedback
    may name (a cross-entropy's: the rewritten network's; a normalization's: the slips of its one expression),
    and what it is, for `exercise check` ("a cross-entropy", "a normalization over dim 0")."""

    cell: str
    what: str
    gradient: Gradient | None = None


def fuse(network: Network, source: str, sink: str | None, configurations: Sequence[Configuration],
         chain: Sequence[Gradient]) -> Closed | str:
    """The closed form of the block from `sink`'s gradient (the loss's when None) back to `source`'s, or
    why there is none (one sentence). `chain` is the network's derived gradients, in order."""
    d = Derivation(network, configurations)
    block = block_lines(network, source, sink)
    tried = []
    for found in (_cross_entropy(network, d, source, sink, block, configurations),
                  _binary_cross_entropy(network, d, source, sink, block, configurations),
                  _normalization(network, d, source, sink, block, chain, configurations)):
        if found is None:
            continue
        if _proven(network, d, configurations, source, sink, found.cell):
            return found
        tried.append(found.what)
    if tried:
        return f"its closed form as {tried[0]} differs from autograd's, so the chain of atomic steps stays"
    return "no closed form found (neither a cross-entropy, a binary one of a sigmoid, nor a normalization " \
           "written out), so the chain of atomic steps stays"


def live(network: Network, source: str, sink: str | None) -> frozenset[str]:
    """The tensors whose gradients the block from `sink` (the loss when None) back to `source` needs:
    `source` and what lies between; a gradient of anything else (a regulariser's, a parameter's) is dead
    there."""
    end = sink or network.loss
    between = set(network.descendants(source)) & (set(network.ancestors(end)) | {end})
    return frozenset({source, *(between - {sink})})


def block_lines(network: Network, source: str, sink: str | None) -> list[str]:
    """The block's lines, in order: those between `source` and `sink`, and the sink's own (the loss's)."""
    return [s for s in network.intermediates if s in live(network, source, sink) - {source} or s == sink]


# ------------------------------------------------------------------------------------------ proof

def _proven(network: Network, d: Derivation, configurations, source: str, sink: str | None, cell: str) -> bool:
    """Whether `cell` gives autograd's gradient of `source` through the block on every configuration, with
    the block's true upstream gradient and (from an intermediate) a random one."""
    compiled = compile(cell, "<closed form>", "exec")
    generator = torch.Generator().manual_seed(1)
    readers = [c for c in network.outside_readers(source, sink) if c != network.loss] if sink else []
    for configuration, namespace in zip(configurations, d.namespaces, strict=True):
        params = {k: v.detach().clone().requires_grad_(v.is_floating_point())
                  for k, v in configuration.inputs.items() if k in network.parameters}
        data = {k: configuration.inputs[k] for k in network.data}
        with torch.enable_grad():
            values = network.forward(params, data)
            end = values[sink or network.loss]
            true = torch.autograd.grad(values[network.loss], [end, *(values[c] for c in readers)], retain_graph=True)
            upstreams = [torch.ones_like(end)] if sink is None else \
                [true[0], torch.randn(end.shape, generator=generator, dtype=end.dtype)]
            # The uses outside the block (a residual's sum) pass back their true gradients, given to the cell.
            besides = 0
            if readers:
                (full,) = torch.autograd.grad(values[network.loss], values[source], retain_graph=True)
                besides = full - torch.autograd.grad((end * true[0]).sum(), values[source], retain_graph=True)[0]
            for upstream in upstreams:
                # (end * upstream).sum() rather than grad_outputs, which makes torch import sympy (seconds)
                (expected,) = torch.autograd.grad((end * upstream).sum(), values[source], retain_graph=True)
                expected = expected + besides
                ns = {**namespace, **({"d" + sink: upstream} if sink else {}),
                      **{"d" + c: t.detach() for c, t in zip(readers, true[1:], strict=True)}}
                try:
                    exec(compiled, ns)  # noqa: S102 - derived code, run on the derivation's own tensors
                except Exception:  # noqa: BLE001 - a closed form that does not run is not proven
                    return False
                got = ns.get("d" + source)
                if not isinstance(got, torch.Tensor) or got.shape != expected.shape \
                        or not torch.allclose(got, expected, **_PROVEN):
                    return False
    return True


def _same(d: Derivation, node: ast.expr, expected: Sequence[torch.Tensor]) -> bool:
    try:
        values = d.values(node)
    except Exception:  # noqa: BLE001 - a candidate that does not run is not the value
        return False
    return all(isinstance(v, torch.Tensor) and v.shape == e.shape and v.dtype.is_floating_point
               and torch.allclose(v, e.to(v.dtype), **_SAME) for v, e in zip(values, expected, strict=True))


def _subexpressions(network: Network, block: Sequence[str]) -> Iterator[tuple[str, ast.expr, ast.expr]]:
    """(line name, the line's tree, a node of it) for every line of the block, the loss's end first, each
    line's nodes from the whole line down (the largest match wins)."""
    for line in reversed(block):
        tree = parse(network.step[line].code)
        for node in ast.walk(tree):
            if isinstance(node, (ast.expr_context, ast.operator, ast.unaryop, ast.keyword, ast.Slice)):
                continue
            yield line, tree, node


# ------------------------------------------------------------------------------------------ cross-entropy

def _cross_entropy(network: Network, d: Derivation, source: str, sink: str | None, block: Sequence[str],
                   configurations) -> Closed | None:
    """The block with its cross-entropy (or, failing one, its log-softmax) of `source` written as the call,
    derived again: the gradients from the block's end back to `source`, a loss term's 1 folded in."""
    x = name(source)
    shapes = d.shapes(x)
    targets = [t for t in network.data if all(v.dtype in (torch.int64, torch.int32) and v.shape == s[:1]
                                                for v, s in zip(d.values(name(t)), shapes, strict=True))]
    candidates = []
    if all(len(s) == 2 for s in shapes):
        # Label smoothing first (its loss holds a plain cross-entropy term), by the fractions the block's lines
        # write (0.1 and 0.9 for a smoothing of 0.1); then the mean: a mean's line holds the sum it divides
        # (`-lp[range(n), y].sum() / n`)
        for smoothing in _fractions(network, d, block):
            candidates += [(call(name("F"), "cross_entropy", x, name(t), label_smoothing=smoothing),
                            "a cross-entropy with label smoothing") for t in targets]
            candidates += [(call(name("F"), "cross_entropy", x, name(t), reduction=ast.Constant("sum"),
                                 label_smoothing=smoothing), "a summed cross-entropy with label smoothing")
                           for t in targets]
        candidates += [(call(name("F"), "cross_entropy", x, name(t)), "a cross-entropy") for t in targets]
        candidates += [(call(name("F"), "cross_entropy", x, name(t), reduction=ast.Constant("sum")),
                        "a summed cross-entropy") for t in targets]
        # each example's own, which a weighted or masked mean reads (an instructor trial's graph convolution)
        candidates += [(call(name("F"), "cross_entropy", x, name(t), reduction=ast.Constant("none")),
                        "a cross-entropy of each example") for t in targets]
    candidates += [(call(name("F"), "log_softmax", x, number(dim)), "a log-softmax") for dim in range(len(shapes[0]))]
    for candidate, what in candidates:
        try:
            expected = d.values(candidate)
        except (RuntimeError, IndexError):  # a target out of the classes' range: no class index of this source
            continue
        for line, tree, node in _subexpressions(network, block):
            # a line read by others besides: written out in one of them, it would be computed again there
            # (`smooth = -F.log_softmax(logits, 1).mean(1)` in the answer, where the forward reads logp twice)
            shared = isinstance(node, ast.Name) and len(network.consumers(node.id)) > 1
            if not shared and node is not x and _same(d, node, expected):
                rewritten = _rewrite(network, line, tree, node, candidate)
                if rewritten is None:
                    continue
                try:
                    gradients = derive(rewritten, configurations)
                except DeriveError:
                    continue
                return _folded(rewritten, gradients, source, sink, what, network)
    return None


def _binary_cross_entropy(network: Network, d: Derivation, source: str, sink: str | None, block: Sequence[str],
                          configurations) -> Closed | None:
    """`(torch.sigmoid(z) - t) / N`: a binary cross-entropy of the sigmoid of `source` written out (its logs and
    their weights on a line or several), against a data tensor or parameter of z's shape, averaged over the
    examples, over every entry or summed. Each target and count is tried as a cell and kept only where it
    equals autograd's gradient on every configuration (the proof decides, not the spelling)."""
    z = name(source)
    shapes = d.shapes(z)
    values = d.values(z)
    if not all(isinstance(v, torch.Tensor) and v.dtype.is_floating_point for v in values):
        return None
    sigmoid = [torch.sigmoid(v) for v in values]
    p = next((name(line) for line in block if line != sink and _same(d, name(line), sigmoid)),
             ast.Call(ast.Attribute(name("torch"), "sigmoid", ast.Load()), [z], []))
    # Integer labels too (`randint(2, (n, 1))`): p - y is a float, and the proof decides as for any target.
    targets = [t for t in (*network.data, *network.parameters)
               if all(isinstance(v, torch.Tensor) and v.dtype != torch.bool and not v.dtype.is_complex
                      and v.shape == s for v, s in zip(d.values(name(t)), shapes, strict=True))]
    upstream = f" * d{sink}" if sink is not None else ""
    counts = [(d.count(z, (0,)), "averaged over the examples"), (call(z, "numel"), "averaged over every entry"),
              (None, "summed")]
    for t in targets:
        for count, how in counts:
            over = f" / {code(count)}" if count is not None else ""

            def cell(value: str, over=over) -> str:
                return f"d{source} = {value}{upstream}{over}\n"
            right = cell(f"({code(p)} - {t})")
            if not _proven(network, d, configurations, source, sink, right):
                continue
            what = f"a binary cross-entropy of {code(p)} = sigmoid({source}) against {t}"
            comment = _comment(f"{sink or network.loss} is {what}, {how}: the sigmoid's derivative p * (1 - p) "
                               f"cancels the cross-entropy's 1 / (p * (1 - p)), leaving p - {t} at the logits.")
            slips = [("bce-sign", f"has its sign flipped: the gradient at the logits is {code(p)} - {t}",
                      cell(f"({t} - {code(p)})")),
                     ("bce-logits", f"uses the logits {source} where the probabilities {code(p)} belong",
                      cell(f"({source} - {t})")),
                     ("bce-sigmoid-twice", f"multiplies by the sigmoid's derivative {code(p)} * (1 - {code(p)}), "
                                           "which the cross-entropy's own derivative already cancels",
                      cell(f"({code(p)} - {t}) * {code(p)} * (1 - {code(p)})"))]
            if count is not None:
                slips.append(("bce-mean", f"leaves out the 1/{code(count)} of the mean",
                              f"d{source} = ({code(p)} - {t}){upstream}\n"))
            gradient = Gradient(f"d{source}", source, (), (),
                                tuple(Slip(f"d{source}", key, sentence, "", text) for key, sentence, text in slips))
            return Closed("\n".join(comment) + "\n" + right, what, gradient)
    return None


def _fractions(network: Network, d: Derivation, block: Sequence[str]) -> list[ast.expr]:
    """The constants strictly between 0 and 1 the block's lines write, and one minus each, and the sizes they read
    whose value is one (`eps` of `(1 - eps) * nll + eps * smooth`, kept as its name): a label smoothing's weights
    (the rest of its loss's value decides which, if any, it is)."""
    read = [node for line in block for node in ast.walk(parse(network.step[line].code))]
    found = {node.value for node in read
             if isinstance(node, ast.Constant) and isinstance(node.value, float) and 0 < node.value < 1}
    sizes = sorted({node.id for node in read if isinstance(node, ast.Name) and node.id in network.sizes})
    named = [name(size) for size in sizes
             if len({*(values := d.values(name(size)))}) == 1 and isinstance(values[0], float) and 0 < values[0] < 1]
    return named + [number(v) for v in sorted({round(v, 12) for f in found for v in (f, 1 - f)})]


def _rewrite(network: Network, line: str, tree: ast.expr, node: ast.expr, replacement: ast.expr) -> Network | None:
    """The network with `node` of `line` written as `replacement`, and the lines nothing reads any more
    dropped."""
    lines = {s.name: s.code for s in network.steps}
    lines[line] = code(replacement if node is tree else _Replace(code(node), replacement).visit(clone(tree)))
    needed = {network.loss}
    for step in reversed(network.steps):
        if step.name in needed:
            needed |= _names(lines[step.name])
    text = "".join(f"{k} = {v}\n" for k, v in lines.items() if k in needed)
    try:
        return Network.parse(text, parameters=network.parameters, data=network.data, sizes=network.sizes,
                             loss=network.loss)
    except ValueError:
        return None


class _Replace(ast.NodeTransformer):
    """The first node printed as `text` replaced by `replacement` (a line's sub-expression, found by value)."""

    def __init__(self, text: str, replacement: ast.expr):
        self.text, self.replacement, self.done = text, replacement, False

    def generic_visit(self, node):
        if not self.done and isinstance(node, ast.expr) and code(node) == self.text:
            self.done = True
            return clone(self.replacement)
        return super().generic_visit(node)


def _names(text: str) -> set[str]:
    return {n.id for n in ast.walk(parse(text)) if isinstance(n, ast.Name)}


def _folded(network: Network, gradients: Sequence[Gradient], source: str, sink: str | None, what: str,
            written: Network) -> Closed:
    """The gradients from the loss back to `source` (the live ones only), a loss term's gradient of 1 folded
    into the statements that read it: `dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, ...)) / n`, not a
    line for `dnll = 1` and another that multiplies by it. `written`: the network as the forward pass wrote
    it, whose lines `network` writes otherwise are said to be written out."""
    needed = live(network, source, sink)
    kept = [g for g in gradients if g.tensor in needed and g.tensor != network.loss]
    single = {g.name for g in kept if len(g.contributions) == 1 and g.contributions[0].index is None}
    units = {g.name: number(1) for g in kept
             if g.tensor in network.unit_gradients and g.tensor != source and g.name in single
             and all(r.name in single for r in kept if g.name in r.reads)}
    lines = []
    for g in kept:
        if g.name in units:
            continue
        if g.name in single:
            c = g.contributions[0]
            value = _substitute(parse(c.value), units)
            lines += _comment(f"{_as_written(c.line, network, written)}: {c.why}.") + [f"{g.name} = {code(value)}"]
        else:
            lines += _requoted(g.source, network, written)
    one = kept[-1] if len(kept) == 1 and not units else None
    return Closed("\n".join(lines) + "\n", what, one)


def _as_written(line: str, network: Network, written: Network) -> str:
    """A line of the rewritten network as a comment quotes it: as the forward pass wrote it, with the lines of
    it that the rewrite folded in (a symmetric InfoNCE's `loss = 0.5 * (loss_ab + loss_ba), where loss_ab =
    F.cross_entropy(sim, labels)`), or the rewritten line, its call standing for the lines written out."""
    step = line.split(" = ", 1)[0]
    if step not in written.step:
        return f"{line} (its lines written out)"
    original = f"{step} = {written.step[step].code}"
    folded = [s for s in written.steps if s.name not in network.step and s.name in _names(written.step[step].code)]
    if original == line:
        return line
    if folded and all(s.code in line for s in folded):
        return original + ", where " + " and ".join(f"{s.name} = {s.code}" for s in folded)
    return f"{line} (its lines written out)"


def _requoted(source: str, network: Network, written: Network) -> list[str]:
    """A derived cell's lines, each comment quoting the rewritten network's lines as _as_written does."""
    out, comment = [], []
    for line in source.rstrip("\n").splitlines():
        if line.startswith("# "):
            comment.append(line[2:])
            continue
        if comment:
            text = " ".join(comment)
            for step in network.steps:
                quoted = f"{step.name} = {step.code}"
                if quoted in text:
                    text = text.replace(quoted, _as_written(quoted, network, written))
            out += _comment(text)
            comment = []
        out.append(line)
    return out


def _substitute(tree: ast.expr, folded: dict[str, ast.expr]) -> ast.expr:
    class Fold(ast.NodeTransformer):
        def visit_BinOp(self, node):
            self.generic_visit(node)
            for side, other in (("left", node.right), ("right", node.left)):
                value = getattr(node, side)
                if isinstance(node.op, ast.Mult) and isinstance(value, ast.Constant) and value.value == 1:
                    return other
            return node

        def visit_Name(self, node):
            return clone(folded[node.id]) if node.id in folded else node

    return Fold().visit(clone(tree))


def _comment(text: str) -> list[str]:
    return ["# " + line for line in textwrap.wrap(text, WIDTH - 2, break_long_words=False, break_on_hyphens=False)]


# ------------------------------------------------------------------------------------------ normalization

def _normalization(network: Network, d: Derivation, source: str, sink: str | None, block: Sequence[str],
                   chain: Sequence[Gradient], configurations=None) -> Closed | None:
    x = name(source)
    values = d.values(x)
    if not all(isinstance(v, torch.Tensor) and v.dtype.is_floating_point for v in values):
        return None
    rank = values[0].ndim
    # Centred (batch or layer norm), then by the root mean square alone (RMSNorm: no mean subtracted).
    for centred, dims, correction in itertools.product((True, False), _dim_sets(rank), (1, 0)):
        moments = [_moments(v, dims, correction, centred) for v in values]
        if any(m is None for m in moments):
            continue
        found = _normalized(network, d, block, moments, dims)
        if found is None:
            if configurations is not None and sink is not None:
                named = _name_xhat(network, d, source, sink, block, moments, dims, correction, configurations)
                if named is not None:
                    return named
            continue
        xhat, scale = found
        if sink is None:
            continue
        return _closed_norm(network, d, x, xhat, scale, sink, dims, correction, chain, centred)
    return None


def _name_xhat(network: Network, d: Derivation, source: str, sink: str, block: Sequence[str], moments, dims,
               correction: int, configurations) -> Closed | None:
    """The closed form where no line is the normalized value: a part of a line that is (`(x - mu) /
    torch.sqrt(var + eps)` inside `... * g + b`, or `xc * istd` among the factors of `g * xc * istd`) named on a
    line of its own, the network derived again, and the cell computing it first."""
    expected = [centred * var**-0.5 for centred, var in moments]  # the shape and dtype, for a first sieve
    taken = {*network.parameters, *network.data, *network.sizes, *network.intermediates}
    taken |= {"d" + t for t in taken}
    label = next(f"{source}hat{'_' * k}" for k in range(len(taken) + 1) if f"{source}hat{'_' * k}" not in taken)
    for line, node, replacement in _parts(network, block):
        if not _same_shape(d, node, expected) or _normalized_values(d, node, moments, dims) is None:
            continue
        lines = {s.name: s.code for s in network.steps}
        order = list(lines)
        lines[line] = code(replacement(name(label)))
        text = "".join(f"{k} = {code(node)}\n" if k == label else f"{k} = {lines[k]}\n"
                       for k in (*order[:order.index(line)], label, *order[order.index(line):]))
        try:
            rewritten = Network.parse(text, parameters=network.parameters, data=network.data, sizes=network.sizes,
                                      loss=network.loss)
            chain = derive(rewritten, configurations)
        except (ValueError, DeriveError):
            continue
        found = _normalization(rewritten, Derivation(rewritten, configurations), source, sink,
                               block_lines(rewritten, source, sink), chain)
        if found is not None:
            said = _comment(f"{label}: the normalized value, a part of `{line} = {network.step[line].code}`, on a line "
                            "of its own.")
            first = "\n".join([*said, f"{label} = {code(node)}"]) + "\n"
            gradient = found.gradient and replace(
                found.gradient, _slips=tuple(replace(slip, code=first + slip.code) for slip in found.gradient.slips()),
                alike=tuple(replace(slip, code=first + slip.code) for slip in found.gradient.alike))
            return Closed(first + found.cell, found.what, gradient)
    return None


def _same_shape(d: Derivation, node: ast.expr, expected: Sequence[torch.Tensor]) -> bool:
    try:
        return [tuple(v.shape) if isinstance(v, torch.Tensor) else None for v in d.values(node)] == \
            [tuple(e.shape) for e in expected]
    except Exception:  # noqa: BLE001 - a part of a line that does not run alone
        return False


def _parts(network: Network, block: Sequence[str]) -> Iterator[tuple[str, ast.expr, object]]:
    """(line, a part of it, how the line reads with that part replaced by a node): every
    sub-expression, and every product of some of the factors of a chain of * and / (`xc * istd` of
    `g * xc * istd`)."""
    for line, tree, node in _subexpressions(network, block):
        if node is tree:
            continue
        yield line, node, lambda new, tree=tree, node=node: _Replace(code(node), new).visit(clone(tree))
        if not isinstance(node, ast.BinOp) or not isinstance(node.op, (ast.Mult, ast.Div)):
            continue
        factors = _signed_factors(node)
        if not 2 < len(factors) <= 6:
            continue
        for size in range(2, len(factors)):
            for chosen in itertools.combinations(range(len(factors)), size):
                part = _signed_product([factors[k] for k in chosen])
                rest = [factors[k] for k in range(len(factors)) if k not in chosen]
                if part is None:
                    continue
                yield line, part, lambda new, tree=tree, node=node, rest=rest: _Replace(
                    code(node), _signed_product([(new, False), *rest])).visit(clone(tree))


def _signed_factors(node: ast.expr) -> list[tuple[ast.expr, bool]]:
    """The factors of a chain of * and /, each with whether it divides."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
        right = _signed_factors(node.right)
        if isinstance(node.op, ast.Div):
            right = [(f, not inverse) for f, inverse in right]
        return _signed_factors(node.left) + right
    return [(node, False)]


def _signed_product(factors: Sequence[tuple[ast.expr, bool]]) -> ast.expr | None:
    """The product of the factors (None where the first one divides: no factor to divide)."""
    if not factors or factors[0][1]:
        ordered = sorted(factors, key=lambda f: f[1])
        if not ordered or ordered[0][1]:
            return None
        factors = ordered
    tree = clone(factors[0][0])
    for factor, inverse in factors[1:]:
        tree = ast.BinOp(tree, ast.Div() if inverse else ast.Mult(), clone(factor))
    return tree


def _dim_sets(rank: int) -> Iterator[tuple[int, ...]]:
    for size in range(1, rank + 1):
        yield from itertools.combinations(range(rank), size)


def _moments(x: torch.Tensor, dims: tuple[int, ...], correction: int, centred: bool = True):
    """x less its mean over `dims` (as is where not `centred`), and the mean of that squared (with Bessel's
    correction where `correction`)."""
    count = math.prod(x.shape[k] for k in dims)
    if count - correction < 1:
        return None
    shifted = x - x.mean(dims, keepdim=True) if centred else x
    return shifted, (shifted**2).sum(dims, keepdim=True) / (count - correction)


def _normalized(network: Network, d: Derivation, block: Sequence[str], moments, dims):
    """(xhat, scale) when a line of the block is x normalized over `dims` (`moments` its centred values and
    variances), and a value of the block is its scale (`(var + eps) ** -0.5`, as is, or its inverse the
    std, divided by)."""
    for line in block:
        scales = _normalized_values(d, name(line), moments, dims)
        if not scales:
            continue
        spelled = _scale(network, d, block, scales)
        if spelled is not None:
            return name(line), spelled
    return None


def _normalized_values(d: Derivation, node: ast.expr, moments, dims) -> list[torch.Tensor] | None:
    """The scale on each configuration where `node` is the centred values times a scale `(var + eps) **
    -0.5`, one constant eps >= 0 on every one."""
    try:
        found = d.values(node)
    except Exception:  # noqa: BLE001 - a part of a line that does not run alone
        return None
    if not all(isinstance(v, torch.Tensor) and v.shape == centred.shape and v.dtype.is_floating_point
               for v, (centred, _) in zip(found, moments, strict=True)):
        return None
    scales = []
    for v, (centred, var) in zip(found, moments, strict=True):
        scale = (v * centred).sum(dims, keepdim=True) / (centred**2).sum(dims, keepdim=True)
        eps = scale**-2 - var
        if not torch.allclose(v, centred * scale, **_SAME) or (eps < -1e-12).any() \
                or (eps - eps.mean()).abs().max() > 1e-9 * (1 + var.abs().max()):
            return None
        scales.append(scale)
    return scales


def _scale(network: Network, d: Derivation, block: Sequence[str], scales: list[torch.Tensor]):
    """How the block writes the scale: (node, True) for a value equal to it (multiplied by), (node, False)
    for its inverse, the std (divided by); names before sub-expressions."""
    found = []
    for _, _, node in _subexpressions(network, block):
        for inverse in (False, True):
            expected = [1 / s if inverse else s for s in scales]
            try:
                got = d.values(node)
            except Exception:  # noqa: BLE001,S112 - a part of a line that does not run alone
                continue
            if all(isinstance(v, torch.Tensor) and v.dtype.is_floating_point and v.ndim == e.ndim
                   and all(b in (a, 1) for a, b in zip(v.shape, e.shape, strict=True))
                   and torch.allclose(v, torch.broadcast_to(e, v.shape), **_SAME)
                   for v, e in zip(got, expected, strict=True)):
                found.append((not isinstance(node, ast.Name), inverse, node))
    if not found:
        return None
    _, inverse, node = min(found, key=lambda f: (f[0], f[1], len(code(f[2]))))
    return node, not inverse


def _upstream(network: Network, chain: Sequence[Gradient], xhat: ast.Name, sink: str) -> ast.expr | None:
    """The gradient reaching xhat, written with the sink's gradient and forward values only: the chain from
    the sink to xhat folded into one expression (None where a step of it adds up several uses)."""
    if xhat.id == sink:
        return name("d" + sink)
    by_name = {g.name: g for g in chain}
    tree = name("d" + xhat.id)
    for _ in range(len(chain) + 1):
        reads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} & set(by_name) - {"d" + sink}
        if not reads:
            return tree
        for read in reads:
            contributions = by_name[read].contributions
            if len(contributions) != 1 or contributions[0].index is not None:
                return None
            tree = _substitute(tree, {read: parse(contributions[0].value)})
    return None


def _cells_between(network: Network, chain: Sequence[Gradient], starts: set[str], sink: str) -> list[str]:
    """The chain's cells from the sink's gradient back to those of `starts`, in order: what a gradient
    that adds up several uses is computed from."""
    between = set(network.descendants(*starts)) & set(network.ancestors(sink)) | starts
    return [g.source.rstrip("\n") for g in chain if g.tensor in between - {sink}]


def _closed_norm(network: Network, d: Derivation, x: ast.Name, xhat: ast.Name, scale, sink: str,
                 dims: tuple[int, ...], correction: int, chain: Sequence[Gradient], centred: bool = True
                 ) -> Closed | None:
    """`scale / N * (N * g - g.sum(dims) - N / (N - c) * xhat * (g * xhat).sum(dims))`, g's factors that
    are constant along `dims` in front (without `- g.sum(dims)` where no mean was subtracted: an RMSNorm);
    where x is read besides (a residual), that use's term added, and where the gradient reaching xhat adds
    up several uses, the chain's cells that compute it first. A use outside the block (a residual's sum
    beside a block that ends at the normalization) is added with the gradient the cell is given."""
    gradients = {g.name for g in chain}
    source = next((g for g in chain if g.tensor == x.id), None)
    normalizing = set(network.descendants(x.id)) & (set(network.ancestors(xhat.id)) | {xhat.id})
    others = [c for c in (source.contributions if source else ()) if c.consumer not in normalizing]
    if any(c.named for c in others):
        return None
    g = _upstream(network, chain, xhat, sink)
    readers = {c.consumer for c in others} & set(network.ancestors(sink))
    before = _cells_between(network, chain, ({xhat.id} if g is None else set()) | readers, sink) \
        if g is None or readers else []
    if g is None:
        g = name("d" + xhat.id)
    rank = len(d.shapes(x)[0])
    outside, inside = [], []
    for factor in _factors(g):
        if _names(code(factor)) & gradients:
            inside.append(factor)
            continue
        shapes = d.shapes(factor)
        constant = all(len(s) <= rank and all(s[k - (rank - len(s))] == 1 for k in dims if k >= rank - len(s))
                       for s in shapes)
        (outside if constant else inside).append(factor)
    inner = _product(inside) if inside else number(1)
    lines = []
    if len(inside) > 1 or (inside and not isinstance(inside[0], ast.Name)):
        # the gradient reaching xhat named, as a teacher writes it, rather than spelled out three times
        lines = [f"d{xhat.id} = {code(inner)}"]
        inner = name("d" + xhat.id)
    count = d.count(x, dims)
    leading = dims == tuple(range(len(dims)))

    def total(node: ast.expr) -> ast.expr:
        axis = number(dims[0]) if len(dims) == 1 else ast.Tuple([number(k) for k in dims], ast.Load())
        return call(node, "sum", axis) if leading else call(node, "sum", axis, keepdim=ast.Constant(True))

    node, scaled = scale
    front = _product([*outside, node]) if scaled else ast.BinOp(_product(outside) if outside else number(1),
                                                                  ast.Div(), node)
    front = ast.BinOp(front, ast.Div(), count)
    pieces = _NormPieces(front, count, inner, xhat, correction, total, centred, rank)
    value = pieces.value()
    over = f"dim {dims[0]}" if len(dims) == 1 else "dims " + ", ".join(map(str, dims))
    variance = f"the unbiased variance (Bessel's correction, {code(count)} - 1)" if correction else \
        "the biased variance"
    front_words = f"; {', '.join(code(f) for f in outside)}, constant along {over}, in front" if outside else ""
    comment = (f"{xhat.id} is {x.id} normalized over {over}, with {variance} and {code(node)} its "
               f"{'inverse ' if not scaled else ''}scale: the paths through the mean and the variance collected "
               f"into one expression, with {code(g)} the gradient reaching {xhat.id}{front_words}." if centred else
               f"{xhat.id} is {x.id} divided by its root mean square over {over} (no mean subtracted), "
               f"{code(node)} its {'inverse ' if not scaled else ''}scale: the path through the mean square "
               f"collected into one expression, with {code(g)} the gradient reaching {xhat.id}{front_words}.")
    added = []
    for c in others:
        added += _comment(f"{c.line}: {c.why}; {x.id}'s other use, added.")
        added.append(f"d{x.id} += {c.value}" if c.index is None else f"d{x.id}[{c.index}] += {c.value}")

    def cell(node: ast.expr) -> str:
        return "\n".join([*before, *lines, f"d{x.id} = {code(node)}", *added]) + "\n"

    made = [*pieces.slips(over, dims), *((key, said, parse(text)) for key, said, text in regroupings(code(value)))]
    slips = tuple(Slip(f"d{x.id}", key, sentence, "", cell(node)) for key, sentence, node in made)
    return Closed("\n".join([*before, *_comment(comment), *lines, f"d{x.id} = {code(value)}", *added]) + "\n",
                  f"a normalization over {over}", Gradient(f"d{x.id}", x.id, (), (), slips))


@dataclass(frozen=True)
class _NormPieces:
    """The closed form `front * (count * g - total(g) - count / (count - correction) * xhat * total(g * xhat))`
    in its pieces, and the classic slips of that one expression: what a student writing it gets wrong (a blind
    set's answers were told only "wrong values" for each), each made once and alone."""

    front: ast.expr
    count: ast.expr
    inner: ast.expr
    xhat: ast.Name
    correction: int
    total: Callable[[ast.expr], ast.expr]  # the sum over the normalized dims, as the closed form writes it
    centred: bool = True  # the mean subtracted; an RMSNorm's has no path through a mean
    rank: int = 2  # of the normalized tensor

    def value(self, *, scaled=True, mean=None, projection=None, weight=None, summed=None) -> ast.expr:
        """The expression with some pieces written otherwise (None: the right one; False: left out)."""
        count, g = self.count, self.inner
        first = ast.BinOp(count, ast.Mult(), g) if scaled else g
        mean = (self.total(g) if self.centred else False) if mean is None else mean
        if weight is None:
            weight = ast.BinOp(ast.BinOp(count, ast.Div(), ast.BinOp(count, ast.Sub(), number(self.correction))),
                               ast.Mult(), self.xhat) if self.correction else self.xhat
        summed = self.total(ast.BinOp(g, ast.Mult(), self.xhat)) if summed is None else summed
        bracket = first if mean is False else ast.BinOp(first, ast.Sub(), mean)
        if projection is not False:
            bracket = ast.BinOp(bracket, ast.Sub(), ast.BinOp(weight, ast.Mult(), summed))
        return ast.BinOp(self.front, ast.Mult(), bracket)

    def slips(self, over: str, dims: tuple[int, ...]) -> Iterator[tuple[str, str, ast.expr]]:
        count, g, h, c = code(self.count), self.inner, self.xhat, self.correction
        product = ast.BinOp(g, ast.Mult(), h)
        if self.centred:
            yield "norm-no-mean", f"leaves out the path through the mean: the term - {code(self.total(g))}", \
                self.value(mean=False)
        yield "norm-no-projection", f"leaves out the path through the {'variance' if self.centred else 'mean square'}"\
                                    f": the term with {code(self.total(product))}", self.value(projection=False)
        if c:
            inverted = ast.BinOp(ast.BinOp(ast.BinOp(self.count, ast.Sub(), number(c)), ast.Div(), self.count),
                                 ast.Mult(), h)
            yield "norm-bessel-inverted", f"inverts Bessel's factor: the variance's term is multiplied by " \
                                          f"{count} / ({count} - {c}), not ({count} - {c}) / {count}", \
                self.value(weight=inverted)
        yield "norm-product-of-sums", f"multiplies the sums of {code(g)} and {h.id} where the sum of their product " \
                                      f"belongs, {code(self.total(product))}", \
            self.value(summed=ast.BinOp(self.total(g), ast.Mult(), self.total(h)))
        other = tuple(k for k in range(self.rank) if k not in dims)
        if self.rank == 2 and len(other) == 1:  # two blind sets' fused norms: every sum over the other dimension
            def across(node: ast.expr) -> ast.expr:
                return call(node, "sum", number(other[0]), keepdim=ast.Constant(True))
            yield "norm-dims", f"sums over dim {other[0]} where the normalization's statistics run over {over}", \
                self.value(mean=across(g) if self.centred else None, summed=across(product))
        for piece, node in (("mean", g), ("summed", product))[0 if self.centred else 1:]:
            yield "norm-sum-all", f"sums {code(node)} over every dimension, where the sum runs over {over} only", \
                self.value(**{piece: call(node, "sum")})
            if dims == (0,) and piece == "mean":  # the loop a student writes for the first sum
                yield "norm-last-example", f"keeps only the last example's {code(node)} where their sum over the " \
                                           "batch belongs (a loop that assigns with = where += adds up)", \
                    self.value(**{piece: ast.Subscript(node, number(-1), ast.Load())})


def _factors(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _product(factors: Sequence[ast.expr]) -> ast.expr:
    tree = factors[0]
    for factor in factors[1:]:
        tree = ast.BinOp(tree, ast.Mult(), factor)
    return tree
