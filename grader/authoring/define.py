"""An exercise in one short file: the instructor writes what only they know, everything else is derived.

    from grader.authoring.define import exercise

    EXERCISE = exercise(
        name="tiny", title="A lookup, a linear layer and a ReLU",
        sizes={"n": (8, (6, 30)), "vocab": (5, (2, 12)), "dim": 3, "hidden": (4, (2, 10))},
        parameters='''
            E = randn(vocab, dim)
            W = randn(dim, hidden) / dim**0.5
            b = randn(hidden) * 0.1
        ''',
        data='''
            X = randint(vocab, (n,))
            Y = randn(n, hidden)
        ''',
        forward='''
            e = E[X]
            h = e @ W + b
            a = torch.relu(h)
            loss = ((a - Y) ** 2).sum() / n
        ''',
    )

`sizes`: each name's lecture value and the range hidden configurations draw it from, `(low, high)` with
high excluded; a bare number is a structural constant (a context of 8 halved three times), kept in every
configuration. `parameters` and `data`: one `name = expression` a line, in the sizes, with `randn`,
`rand`, `randint(high, shape)`, `randperm(k)`, `ones`, `zeros` drawing from the configuration's own generator (so a seed
reproduces it), `torch`, `F` and `math`. `forward`: one named intermediate a line, as the notebook writes
it; the last is the loss.

Derived: the answer cells (a gradient for every parameter and intermediate the loss depends on, in the
order a student backpropagates: a tensor once every step that reads it is done), their grade ids
(`d<name>`), one point each, what each may read, `sizes_of` (from the tensors' shapes), the sizes a cell
may read as numbers (those the forward lines use, each read from a tensor's shape), and a batch whose index
data repeats an index (so a lookup's gradient that overwrites instead of accumulating fails). Optional:
`fused` blocks ({"dlogits": "loss"}: one cell from the loss back to logits; {"dhprebn": "hpreact"}: from
dhpreact back to hprebn; a (sink, title) pair names the block in feedback: "the batch-norm step"),
`backward` (a whole-backward function `manual_backward(params, cache, *data)` graded per parameter, with a
training check; True gives it every forward value, a string of names only those, and data named there
is not passed on its own), `training` (the training check's data, lines drawing every step's at once,
`steps` their number; default: the batch, drawn per step), `backward_part` (its exercise number, when
grade ids released before must keep theirs), `order` (exercise 1's gradients in another order a student
can compute them in, for a notebook that asks them so), `hidden` ({"first": "n <= vocab"}: a condition on
the sizes the first hidden configuration must meet, such as every target distinct; {"last": {"W1":
3e-3}}: parameters the last one scales, such as a variance made comparable to an eps), `points`, `parts`
(titles), `mistakes`, `demo`, `accept` ({"dxhat": "mul-local"}: rule-table slips, by their names, that the
instructor accepts as right answers; `exercise check` refuses an exercise where any other slip scores full
on every hidden configuration).
"""
from __future__ import annotations

import ast
import dataclasses
import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F

from grader import exercise as ex
from grader import syntax
from grader.vocabulary import SLIPS

# The standard deviation of the noise a constant parameter gets in a hidden configuration: far above any
# tolerance, small beside the parameter's own scale.
CONSTANT_NOISE = 0.1
# What a parameter's or a data tensor's expression may call besides the sizes.
DRAWS = ("randn", "rand", "randint", "randperm", "ones", "zeros")
# The globals an instructor's line is evaluated in: no builtins to read, but torch's own imports still work (a
# tensor compared with a float imports a module of torch's, through the builtins of the frame that compares:
# without `__import__` there, `rand(n, m) < 0.5` failed with KeyError: '__import__').
_GLOBALS = {"__builtins__": {"__import__": __import__}}


class DefinitionError(ValueError):
    """The short form does not make an exercise; the message names the line and the fix."""


def _lines(text: str, what: str) -> list[tuple[str, str]]:
    try:
        pairs = ex.assignments(text)
    except ValueError as exc:
        raise DefinitionError(f"{what}: {exc}") from None
    if not pairs:
        raise DefinitionError(f"{what}: no `name = expression` line")
    return pairs


def _namespace(sizes: Mapping[str, int], generator: torch.Generator, dtype: torch.dtype) -> dict:
    def shape(args):
        return args[0] if len(args) == 1 and isinstance(args[0], tuple | list) else args

    return {
        **sizes, "torch": torch, "F": F, "math": math,
        "randn": lambda *s: torch.randn(*shape(s), generator=generator, dtype=dtype),
        "rand": lambda *s: torch.rand(*shape(s), generator=generator, dtype=dtype),
        "randint": lambda high, s: torch.randint(0, high, tuple(s), generator=generator),
        "randperm": lambda k: torch.randperm(k, generator=generator),
        "ones": lambda *s: torch.ones(*shape(s), dtype=dtype),
        "zeros": lambda *s: torch.zeros(*shape(s), dtype=dtype),
    }


def _evaluate(pairs, sizes, generator, dtype, what: str, scale: Mapping[str, float] | None = None
              ) -> dict[str, torch.Tensor]:
    """Each line's value in order; `scale` multiplies a named value once it is drawn (a hidden
    configuration's tiny variance)."""
    values: dict[str, torch.Tensor] = {}
    for name, code in pairs:
        try:
            values[name] = eval(compile(code, f"<{what} {name}>", "eval"),  # noqa: S307 - the instructor's file
                                _GLOBALS, {**_namespace(sizes, generator, dtype), **values})
        except Exception as exc:  # noqa: BLE001 - any fault of the instructor's line, named
            raise DefinitionError(f"{what}: `{name} = {code}` fails at {dict(sizes)}: {type(exc).__name__}: {exc}") \
                from None
        if not isinstance(values[name], torch.Tensor):
            raise DefinitionError(f"{what}: `{name} = {code}` is a {type(values[name]).__name__}, not a tensor: a "
                                  f"number the forward lines read is a size (sizes={{\"{name}\": ...}}, a float for "
                                  "a hyperparameter such as reg)")
        if values[name].is_floating_point() and values[name].dtype != dtype:
            # `(rand(n, 1) < 0.5) * 1.0` is torch's default float32, whatever the draws' dtype: a float32 tensor
            # beside float64 ones stopped the derivation's checks with "Float did not match Double" (a trial's labels)
            values[name] = values[name].to(dtype)
        if scale and name in scale:
            values[name] = values[name] * scale[name]
    return values


def _order(network: ex.Network) -> tuple[str, ...]:
    """Gradients in the order a student backpropagates: walking the lines from the loss back, a tensor's
    gradient comes once the last step that reads it (in that walk) has its own, in the order the line
    reads its inputs: dlogprobs, dprobs, dcounts_sum_inv, dcounts_sum, dcounts, ... as the lecture asks. A
    line that reads no parameter, even through earlier lines (a causal mask), is a constant: no gradient."""
    steps = network.steps
    live = {*network.parameters, *network.descendants(*network.parameters)}
    done, order = {network.loss}, []
    for step in reversed(steps):
        if step.name not in done:
            continue
        read = sorted((n for n in ast.walk(syntax.parse(step.code, mode="eval")) if isinstance(n, ast.Name)),
                      key=lambda n: n.col_offset)
        for name in dict.fromkeys(n.id for n in read):
            if name in done or name not in live:
                continue
            if all(c in done for c in network.consumers(name)):
                done.add(name)
                order.append("d" + name)
    return tuple(order)


def _apart(lecture: Mapping[str, int], ranges: Mapping[str, tuple[int, int]]) -> dict[str, int]:
    """The second trial draw's sizes: each drawn size another value of its range, none equal to another size
    of this draw where the ranges allow, and none a lecture value where they allow that too. Two sizes equal
    in both draws would leave a dimension's size a guess (a batch of 4 and heads of 4 read one for the
    other, on every configuration after)."""
    taken = {v for k, v in lecture.items() if k not in ranges}
    other = dict(lecture)
    for key, (low, high) in ranges.items():
        values = [v for v in range(low, high) if v != lecture[key]]
        values = [v for v in values if v not in taken] or values
        other[key] = next((v for v in values if v not in lecture.values()), values[0] if values else lecture[key])
        taken.add(other[key])
    return other


def _dimensions(named: Mapping[str, tuple[torch.Tensor, ...]], sizes: tuple[Mapping[str, int], ...]):
    """Each size's first (tensor, dimension) whose length is that size in every trial configuration."""
    found = {}
    for size in sizes[0]:
        for tensor, trials in named.items():
            match = next((d for d in range(trials[0].dim())
                          if all(t.shape[d] == s[size] for t, s in zip(trials, sizes, strict=True))), None)
            if match is not None:
                found[size] = (tensor, match)
                break
    return found


def _check_sizes(sizes: Mapping[str, object]) -> None:
    """Each size a positive whole number, (lecture value, (low, high)) with 1 <= low < high, a float (a
    hyperparameter such as `reg` or `eps`) or an expression in the sizes before it (`"nh * hs"`): a size of 0
    or a fraction would only fail later, deep in a draw."""
    def whole(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1

    known: dict[str, object] = {}
    for key, value in sizes.items():
        if key in ex.NAMESPACE or key in DRAWS or key == "math":
            raise DefinitionError(f"sizes: {key} is a name the forward lines and answer cells use for "
                                  f"{'torch.nn.functional' if key == 'F' else 'itself'}: rename the size")
        bounds = value[1] if isinstance(value, tuple) and len(value) == 2 else None
        good = whole(value) or (isinstance(value, float) and math.isfinite(value)) or isinstance(value, str) or (
            isinstance(bounds, tuple | list) and len(bounds) == 2 and whole(value[0]) and all(whole(b) for b in bounds)
            and bounds[0] < bounds[1])
        if not good:
            raise DefinitionError(f"sizes: {key} = {value!r}: give a whole number of at least 1 (a structural "
                                  "constant), (lecture value, (low, high)) with 1 <= low < high, high excluded, a "
                                  "float (a hyperparameter), or a formula in the sizes before it (\"nh * hs\")")
        if isinstance(value, str):
            known[key] = _formula(value, key, {k: v[0] if isinstance(v, tuple) else v for k, v in known.items()})
        else:
            known[key] = value


def _formula(text: str, key: str, sizes: Mapping[str, object]) -> int | float:
    """A size computed from the sizes before it (`C = nh * hs`), at these sizes."""
    try:
        tree = syntax.parse(text, mode="eval")
        unknown = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(sizes))
        if unknown:
            raise NameError(f"{', '.join(unknown)} is no size before it")
        return eval(compile(tree, f"<size {key}>", "eval"), _GLOBALS, dict(sizes))  # noqa: S307
    except Exception as exc:  # noqa: BLE001 - any fault of the instructor's formula, named
        raise DefinitionError(f"sizes: {key} = {text!r} is no formula in the sizes before it: "
                              f"{type(exc).__name__}: {exc}") from None


def _names(text: str) -> list[str]:
    return [n.id for n in ast.walk(syntax.parse(text, mode="eval")) if isinstance(n, ast.Name)]


def _solved(given: Mapping[str, object], dims: Mapping[str, tuple[str, int]], ranges) -> dict[str, tuple]:
    """A drawn size no shape says, read back from a product that one does (`hs` from C = nh * hs, C a tensor's
    dimension): {size: (the product's name, the other factors)}."""
    found = {}
    for key, value in given.items():
        if not isinstance(value, str) or key not in dims:
            continue
        factors = value.replace(" ", "").split("*")
        if not all(f.isidentifier() for f in factors):
            continue
        for factor in factors:
            others = [f for f in factors if f != factor]
            if factor in ranges and factor not in dims and factor not in found and len(others) == len(factors) - 1 \
                    and all(o in dims or not isinstance(given[o], tuple) for o in others):
                found[factor] = (key, tuple(others))
    return found


def _size_code(given: Mapping[str, object], dims: Mapping[str, tuple[str, int]], solved: Mapping[str, tuple],
               read: set[str]) -> dict[str, str]:
    """What each size the forward lines read is, as the notebook writes it, each after those it reads: a tensor's
    shape, a constant's or a hyperparameter's value, a formula in other sizes, or a size read back from a product
    (`hs = C // nh`). A hyperparameter (a float) is bound even where only the data lines read it: the docs promise
    answer cells read it by name (an instructor trial's label smoothing `eps`, read by the textbook answer, was a
    NameError and 0 on every route)."""
    code = {k: f"{dims[k][0]}.shape[{dims[k][1]}]" for k in given if k in dims}
    code |= {k: repr(v) for k, v in given.items() if k not in dims and not isinstance(v, str | tuple)}
    code |= {k: f"{whole} // " + " // ".join(others) for k, (whole, others) in solved.items()}
    code |= {k: v for k, v in given.items() if k not in code and isinstance(v, str)}
    needed, order = set(read) | {k for k, v in given.items() if isinstance(v, float)}, list(code)
    for key in reversed(order):
        if key in needed:
            needed |= set(_names(code[key]))
    return {k: code[k] for k in order if k in needed}


def _shown(mistakes: ex.Mistakes, dims: Mapping[str, tuple[str, int]], drawn: Mapping[str, int],
           network: ex.Network) -> ex.Mistakes:
    """The drawn sizes no forward line reads are bound by no name in the notebook: feedback says them as a
    tensor's shape (`X.shape[0]` times too large, not `N`), unless the exercise's own mistakes say otherwise."""
    shown = {k: f"{dims[k][0]}.shape[{dims[k][1]}]" for k in drawn if k in dims and k not in network.sizes}
    return dataclasses.replace(mistakes, shown={**shown, **mistakes.shown})


def _fixed(sizes: Mapping[str, object], drawn: Mapping[str, int]) -> dict[str, int | float]:
    """The sizes no tensor's shape says, at the drawn sizes: the constants and hyperparameters as given, the
    formulas computed."""
    values: dict[str, object] = dict(drawn)
    for key, value in sizes.items():
        if key not in drawn:
            values[key] = _formula(value, key, values) if isinstance(value, str) else value
    return {k: v for k, v in values.items() if k not in drawn}


def _hidden(spec: Mapping[str, object], lecture: Mapping[str, int], parameters: tuple[str, ...]):
    """(the first configuration's condition, compiled or None; the last configuration's scales), checked."""
    unknown = sorted(set(spec) - {"first", "last"})
    if unknown:
        raise DefinitionError(f"hidden: {', '.join(unknown)} is no option (first: a condition on the sizes the first "
                              "hidden configuration must meet; last: parameters the last one scales)")
    first = None
    if spec.get("first"):
        try:
            first = compile(str(spec["first"]), "<hidden first>", "eval")
            eval(first, _GLOBALS, dict(lecture))  # noqa: S307 - the instructor's file
        except Exception as exc:  # noqa: BLE001 - any fault of the instructor's condition, named
            raise DefinitionError(f"hidden: first = {spec['first']!r} is no condition on the sizes "
                                  f"({', '.join(lecture)}): {type(exc).__name__}: {exc}") from None
    scaled = dict(spec.get("last") or {})
    wrong = [p for p, f in scaled.items() if p not in parameters or not isinstance(f, int | float)]
    if wrong:
        raise DefinitionError(f"hidden: last scales {', '.join(wrong)}: give parameters ({', '.join(parameters)}) "
                              "and a number each")
    return first, scaled


def _batches(text: str, data_names: tuple[str, ...], lecture: Mapping[str, int], fixed):
    """The training check's data: lines drawing every step's at once (`steps` is their number), tried at
    the lecture's sizes so that a fault is named at load."""
    lines = _lines(text, "training")
    if sorted(n for n, _ in lines) != sorted(data_names):
        raise DefinitionError(f"training: draw exactly the data ({', '.join(data_names)}), each with a first "
                              "dimension of `steps`")

    def batches(sizes: ex.Sizes, generator: torch.Generator, steps: int) -> dict[str, torch.Tensor]:
        return _evaluate(lines, {**sizes, **fixed(sizes), "steps": steps}, generator, torch.float64, "training")
    batches(lecture, torch.Generator().manual_seed(0), 2)
    return batches


def _off_by(size: str, trials: list[dict], at: list[dict], lecture: Mapping, ranges: Mapping) -> str:
    """The way out where a dimension is the size off by a constant on both trial draws: a second instructor trial's
    ordinal regression, K classes and `theta = torch.linspace(-2.0, 2.0, K - 1)`, was refused with no word of it."""
    for tensor in trials[0]:
        for d in range(trials[0][tensor].dim()):
            offsets = {trial[tensor].shape[d] - sizes[size] for trial, sizes in zip(trials, at, strict=True)
                       if trial[tensor].dim() > d}
            if len(offsets) == 1 and (offset := offsets.pop()) in (-2, -1, 1, 2):
                own = f"n_{tensor}"
                low, high = ranges[size]
                return (f"; {tensor}'s dimension {d} is {size}{offset:+d} on every draw: give it a size of its own and "
                        f"compute {size} from it (\"{own}\": ({lecture[size] + offset}, ({low + offset}, "
                        f"{high + offset})), \"{size}\": \"{own} {'-' if offset > 0 else '+'} {abs(offset)}\")")
    return ""


def exercise(*, name: str, title: str, sizes: Mapping[str, int | tuple[int, tuple[int, int]]], parameters: str,
             data: str, forward: str, fused: Mapping[str, str | tuple[str, str]] | None = None,
             backward: bool | str = False, training: str | None = None, backward_part: int | None = None,
             order: str | None = None, hidden: Mapping[str, object] | None = None,
             points: Mapping[str, float] | None = None, parts: Mapping[int, str] | None = None,
             mistakes: ex.Mistakes | None = None, assignment: str | None = None, demo: str | None = None,
             accept: Mapping[str, str] | None = None, learning_rate: float | None = None) -> ex.Exercise:
    _check_sizes(sizes)
    given = sizes
    lecture = {k: v[0] if isinstance(v, tuple) else v for k, v in sizes.items() if isinstance(v, tuple | int)}
    ranges = {k: tuple(v[1]) for k, v in sizes.items() if isinstance(v, tuple)}
    param_lines, data_lines = _lines(parameters, "parameters"), _lines(data, "data")
    param_names, data_names = tuple(n for n, _ in param_lines), tuple(n for n, _ in data_lines)

    # Two trial draws, the lecture's sizes and others, tell which dimension is which size.
    other = _apart(lecture, ranges)
    trials, at = [], []
    for trial in (lecture, other):
        generator = torch.Generator().manual_seed(0)
        trial = {**trial, **_fixed(given, trial)}
        at.append({k: v for k, v in trial.items() if isinstance(v, int)})
        trials.append({**_evaluate(param_lines, trial, generator, torch.float64, "parameters"),
                       **_evaluate(data_lines, trial, generator, torch.float64, "data")})
    dims = _dimensions({n: tuple(t[n] for t in trials) for n in (*data_names, *param_names)}, tuple(at))
    solved = _solved(given, dims, ranges)
    missing = sorted(set(ranges) - set(dims) - set(solved))
    if missing:
        raise DefinitionError(f"sizes: {', '.join(missing)} is no dimension of any parameter or data tensor, so "
                              "a notebook's tensors cannot say it: drop it, use it in a shape, or compute it from "
                              f"sizes that are (\"C\": \"nh * hs\"){_off_by(missing[0], trials, at, lecture, ranges)}")
    # A structural constant no shape says (a kernel width used only in products) is written as its value.
    lecture = {k: v for k, v in lecture.items() if k in dims or k in solved}

    def every(drawn: Mapping[str, int]) -> dict[str, int | float]:
        return {**drawn, **_fixed(given, drawn)}
    forward_names = set()
    for line, code in _lines(forward, "forward"):
        try:
            tree = syntax.parse(code, mode="eval")
        except SyntaxError as exc:
            raise DefinitionError(f"forward: line `{line} = {code}` is not Python: {exc.msg}") from None
        forward_names |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    try:
        network = ex.Network.parse(forward, parameters=param_names, data=data_names,
                                   sizes=_size_code(given, dims, solved, forward_names),
                                   loss=_lines(forward, "forward")[-1][0])
    except (ValueError, SyntaxError) as exc:
        raise DefinitionError(f"forward: {exc}") from None

    dead = [step for step in network.steps if step.name != network.loss and not network.consumers(step.name)]
    if dead:
        raise DefinitionError(f"forward: line `{dead[0].name} = {dead[0].code}`: no later line reads "
                              f"{dead[0].name}, so it never reaches the loss (the last line, {network.loss}): "
                              "use it or remove it")
    lookups = {node.slice.id for step in network.steps for node in ast.walk(syntax.parse(step.code, mode="eval"))
               if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
               and node.value.id in param_names and isinstance(node.slice, ast.Name) and node.slice.id in data_names}

    first, scaled = _hidden(hidden or {}, lecture, param_names)

    def init(sizes: ex.Sizes, generator: torch.Generator, dtype=torch.float64, **scale: float
             ) -> dict[str, torch.Tensor]:
        """Away from the lecture's sizes (every hidden configuration), a parameter drawn the same everywhere
        (`ones`, `zeros`) gets noise: a slip that only a gain of exactly 1 or a bias of exactly 0 hides
        (`dxhat = dln1`, the gain forgotten) shows there."""
        values = _evaluate(param_lines, every(sizes), generator, dtype, "parameters", scale)
        if dict(sizes) != lecture:
            for key, value in values.items():
                if value.numel() and bool((value == value.reshape(-1)[0]).all()):
                    values[key] = value + CONSTANT_NOISE * torch.randn(value.shape, generator=generator, dtype=dtype)
        return values

    def configuration(index: int, count: int, sizes: ex.Sizes) -> dict | None:
        if index == 0 and first and not eval(first, _GLOBALS, dict(sizes)):  # noqa: S307 - checked at load
            return None
        return dict(scaled) if index == count - 1 else {}

    def batch(sizes: ex.Sizes, generator: torch.Generator) -> dict[str, torch.Tensor]:
        values = _evaluate(data_lines, every(sizes), generator, torch.float64, "data")
        for index in lookups:  # a repeated index: a lookup's gradient must accumulate
            flat = values[index].view(-1)
            if flat.numel() > 1 and flat.unique().numel() == flat.numel():
                flat[-1] = flat[0]
        return values

    def sizes_of(values: Mapping[str, torch.Tensor]) -> ex.Sizes:
        read = {k: values[t].shape[d] for k, (t, d) in dims.items()}
        for k, (whole, others) in solved.items():
            read[k] = read[whole] // math.prod(read[o] if o in read else given[o] for o in others)
        return ex.Sizes(**{k: read[k] for k in lecture})

    derived = _order(network)
    atomic = tuple(order.split()) if order else derived
    if set(atomic) != set(derived) or len(atomic) != len(derived):
        extra, missing = [g for g in atomic if g not in derived], [g for g in derived if g not in atomic]
        raise DefinitionError("order: " + "; ".join(
            ([f"{', '.join(extra)} is no gradient of the exercise"] if extra else [])
            + ([f"{', '.join(missing)} is missing"] if missing else [])
            + ([f"{', '.join(sorted({g for g in atomic if atomic.count(g) > 1}))} is named twice"]
               if len(set(atomic)) != len(atomic) else []))
            + f" (the gradients, in an order a student can compute them: {' '.join(derived)}; the loss is the "
              f"last forward line, {network.loss})")
    answers = list(ex.atomic_answers(network, atomic, 1))
    functions, check = (), None
    # In the order a student backpropagates, whatever the dict's: a block a later one reads the gradient of is given
    # that gradient by a read-only cell, which the later block's blank answer would set to None again (a blind
    # instructor trial's {"dh": ("o", ...), "do": ("loss", ...)} failed exercise check on the stub's self-check)
    position = {step.name: i for i, step in enumerate(network.steps)}
    blocks = sorted((fused or {}).items(), key=lambda item: -position.get(item[0][1:], -1))
    for part, (gradient, block_spec) in enumerate(blocks, 2):
        sink, block_title = (block_spec, "") if isinstance(block_spec, str) else block_spec
        if gradient not in atomic:
            raise DefinitionError(f"fused: {gradient} is no gradient of the exercise (they are {', '.join(atomic)})")
        after = network.descendants(gradient[1:])
        if sink != network.loss and sink not in after:
            # an instructor trial's block to `kl`, which x_logits never reaches: it shrank to one step unsaid, and
            # exercise check failed on 27 self-check lines that never named the block
            raise DefinitionError(f"fused: {gradient}'s block ends at {sink!r}, which no line from {gradient[1:]} "
                                  f"reaches: end it at a line computed from {gradient[1:]} ({', '.join(after)}) or at "
                                  f"the loss ({network.loss})")
        block = () if sink == network.loss else \
            (f"d{sink}", *(f"d{c}" for c in network.outside_readers(gradient[1:], sink) if c != network.loss))
        local = tuple(g for g in block if g[1:] not in network.constant_gradients)  # a fixed number: never randomised
        answers.append(ex.Answer(f"ex{part}_{gradient}", gradient, gradient[1:], ex.FUSED, part, block, local,
                                 sink=None if sink == network.loss else sink, title=block_title))
    part = backward_part or len(fused or {}) + 2
    if backward_part is not None and (not backward or backward_part < len(fused or {}) + 2):
        raise DefinitionError(f"backward_part: {backward_part} " + (
            "numbers a manual_backward there is none of: add backward=True or drop it" if not backward else
            f"is taken: exercise 1 and the fused blocks are 1 to {len(fused or {}) + 1}"))
    if backward:
        cache = tuple(backward.split()) if isinstance(backward, str) else \
            tuple(s for s in network.intermediates if s != network.loss)
        unknown = [c for c in cache if c not in (*data_names, *network.intermediates)]
        if unknown:
            raise DefinitionError(f"backward: {', '.join(unknown)} is no data tensor or forward line, so the cache "
                                  "cannot hold it")
        function = ex.Function(f"ex{part}_backward", "manual_backward", (("params", param_names), ("cache", cache),
                               *(d for d in data_names if d not in cache)), param_names, f"ex{part}_d", part)
        functions = (function,)
        check = ex.Training(f"ex{part}_training", function,
                            _batches(training, data_names, lecture, lambda drawn: _fixed(given, drawn))
                            if training else None)
        answers += ex.function_answers(function)
    elif training or learning_rate is not None:
        raise DefinitionError(f"{'training' if training else 'learning_rate'}: only a `backward` function trains; "
                              "add backward=True or drop it")
    if learning_rate is not None and (isinstance(learning_rate, bool) or not isinstance(learning_rate, int | float)
                                      or not 1e-6 <= learning_rate <= 10):
        raise DefinitionError(f"learning_rate: {learning_rate!r} is no learning rate (a number from 1e-6 to 10)")
    # a block's own title (a (sink, title) pair) heads its exercise too, not only its feedback (an instructor trial)
    titles = {1: "one step at a time", **{a.part: f"{a.variable} through {a.title} in one step" if a.title else
                                          f"{a.variable} in one step" for a in answers if a.kind == ex.FUSED}}
    if backward:
        titles[part] = "manual_backward and training"
    grade_ids = [a.grade_id for a in answers] + ([check.grade_id] if check else [])
    if set(parts or {}) - set(titles):
        raise DefinitionError(f"parts: {', '.join(map(str, sorted(set(parts) - set(titles))))} is no exercise of "
                              f"this one (its exercises are {', '.join(map(str, titles))})")
    unknown = sorted(set(points or {}) - set(grade_ids))
    if unknown:
        raise DefinitionError(f"points: {', '.join(unknown)} is no grade id (they are {', '.join(grade_ids)})")
    accepted = {gradient: tuple(str(slips).split()) for gradient, slips in (accept or {}).items()}
    for gradient, slips in accepted.items():
        unknown = [s for s in slips if s not in SLIPS]
        if gradient not in atomic or unknown or not slips:
            raise DefinitionError(f"accept: {gradient}: " + (
                f"no gradient of the exercise (they are {', '.join(atomic)})" if gradient not in atomic else
                f"{', '.join(unknown) or 'nothing'} is no slip of the rule table (`exercise check` names the slips "
                "that score full; they are among " + ", ".join(sorted(SLIPS)) + ")"))
    value = ex.Exercise(
        name=name, title=title, network=network, answers=tuple(answers), functions=functions, training=check,
        lecture=ex.Sizes(**lecture), ranges=ranges, init=init, batch=batch, sizes_of=sizes_of,
        hidden=configuration, assignment=assignment or name.replace("-", "_"), demo=demo or "",
        notebook=f"{assignment or name.replace('-', '_')}.ipynb",
        settings={"points": {g: (points or {}).get(g, 1) for g in grade_ids},
                  **({"learning_rate": float(learning_rate)} if learning_rate is not None else {})},
        mistakes=_shown(mistakes or ex.Mistakes(), dims, lecture, network),
        parts={p: f"Exercise {p}: {t}" for p, t in {**titles, **(parts or {})}.items()},
        accepted=accepted,
    )
    found = ex.problems(value)
    if found:
        raise DefinitionError(found[0][0])
    return value
