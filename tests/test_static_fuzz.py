"""grader.sandbox.static_check, fuzzed: whatever the check accepts, when run, never touches a forbidden attribute
and never calls a forbidden function.

A generator of programs (Hypothesis strategies over every Python 3.11 statement and expression node
type, match patterns, f-strings, walrus, lambdas, comprehensions, star-args, decorators, with, try and
async included) writes cells from names an answer cell meets (tensors, torch, F, the allowlists) and
names an attacker reaches for (dunders, getattr, format, grad, gi_frame, ...). The check reads each;
every cell it accepts is run in a worker process (this file run as a script) with a notebook-like
namespace, where three witnesses that do not share the check's code watch it:
- an audit hook (sys.addaudithook), armed for the cell only: any event but builtins.id is a violation
  (import, open, exec or compile of anything but the cell itself, os.*, subprocess, socket, ctypes,
  and object.__getattr__, which CPython raises for frame and code attributes such as gi_frame);
- a tracer on the cell's own frames, opcode by opcode: an attribute or global read, write or import of
  a name with a leading underscore, an import other than the notebook's, a match, class or yield
  opcode, or a C function called by a name that reads attributes or code (getattr, format, vars, ...);
- the namespace afterwards: a tensor that requires grad or has a grad_fn means autograd ran.
The worker runs each cell under a short timer and an address-space limit; a cell that crashes or
hangs it is not a violation (that is the sandbox's business), but more than a few fail the test: the
run would have watched too little.
"""
from __future__ import annotations

import ast
import functools
import json
import select
import subprocess
import sys
import warnings
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, assume, given, settings

from grader.sandbox import static_check

# Names that read attributes or code by name, or reach the interpreter: a cell calling one of them
# directly is a violation whatever the check said.
FORBIDDEN_CALLS = frozenset("""
    getattr setattr delattr hasattr vars dir type globals locals eval exec compile open __import__
    breakpoint input help format format_map __getattribute__ __getattr__ __reduce__ __reduce_ex__
    register_hook backward requires_grad_ retain_grad grad vjp jvp
""".split())
# Opcodes of constructs the check refuses: executing one means a refused construct ran.
# (YIELD_VALUE too, outside a generator expression's own code.)
FORBIDDEN_OPCODES = frozenset({"MATCH_CLASS", "MATCH_MAPPING", "MATCH_SEQUENCE", "MATCH_KEYS", "LOAD_BUILD_CLASS",
                               "SETUP_ANNOTATIONS", "GET_AWAITABLE", "IMPORT_STAR", "STORE_GLOBAL", "DELETE_GLOBAL",
                               "STORE_ATTR", "DELETE_ATTR"})
NAMED_OPCODES = frozenset({"LOAD_ATTR", "LOAD_METHOD", "LOAD_GLOBAL", "LOAD_NAME", "STORE_NAME", "DELETE_NAME",
                           "IMPORT_NAME", "IMPORT_FROM", "LOAD_FROM_DICT_OR_GLOBALS"})
# Audit events that reveal nothing: a tensor's hash is its id().
HARMLESS_EVENTS = frozenset({"builtins.id"})
NOTEBOOK_IMPORTS = frozenset({"torch", "torch.nn", "torch.nn.functional", "math", "nn", "functional"})
CELL = "<fuzzed cell>"


# ---------------------------------------------------------------------------------------------
# The generator: syntax trees over every statement and expression node type, then unparsed

# What a cell meets: the notebook's tensors and sizes, names of its own, the allowlists' names (a
# sample, so that cells the check accepts are common) -- and what an attacker reaches for.
VALUES = ["probs", "logits", "dlogprobs", "counts", "h", "W2", "C", "Xb", "Yb", "n", "x", "y", "i", "_"]
BUILTINS = ["print", "len", "range", "sum", "dict", "zip", "enumerate", "sorted", "max", "abs", "list", "min"]
HOSTILE_NAMES = ["exec", "eval", "getattr", "type", "vars", "dir", "open", "object", "format", "iter", "globals",
                 "__builtins__", "__import__", "torch", "F", "math", "classmethod", "super"]
ATTRIBUTES = ["sum", "T", "shape", "view", "exp", "log", "mean", "max", "values", "indices", "softmax", "clone",
              "index_add", "zero_", "tolist", "item", "dtype", "keys", "items", "append", "reshape", "size"]
HOSTILE_ATTRIBUTES = ["__class__", "__dict__", "__globals__", "__code__", "__subclasses__", "__reduce__", "__init__",
                      "_version", "_C", "grad", "backward", "requires_grad_", "register_hook", "data", "gi_frame",
                      "gi_code", "f_globals", "f_back", "tb_frame", "format", "format_map", "mro", "as_subclass",
                      "apply_", "numpy", "untyped_storage", "autograd", "func", "torch", "nn", "functional",
                      "linalg", "special", "os", "sys", "modules", "enable_grad", "inference_mode", "load"]
TORCH = ["zeros_like", "ones_like", "softmax", "exp", "log", "sum", "matmul", "einsum", "cat", "where", "tensor",
         "no_grad", "Tensor", "float64", "arange", "outer"]
# (the first seven of each of these two are friendly)
KEYWORDS = ["dim", "keepdim", "dtype", "num_classes", "alpha", "sep", "key", "requires_grad", "file", "pin_memory",
            "scale", "__class__"]
STRINGS = ["", "x", "ij,jk->ik", "{}", "{:.3f}", "{0}", "{name}", "{0.grad}", "{0.__class__}", "{0[x]}", "{0:{1}}",
           "__class__", "_", "grad", "os", "nbv,nbe->ve"]
OPERATORS = [ast.Add, ast.Sub, ast.Mult, ast.MatMult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift,
             ast.RShift, ast.BitOr, ast.BitXor, ast.BitAnd]
COMPARISONS = [ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot, ast.In, ast.NotIn]


# A program is drawn in one of two moods: "friendly" uses only names and statements an answer may
# (to explore what the check accepts, where a hole would be), "mixed" adds what an attacker reaches for.
MOOD = st.shared(st.sampled_from(["friendly", "mixed"]), key="mood")
# Statements a friendly program is made of: those the check accepts.
FRIENDLY_STATEMENTS = ["Assign", "AugAssign", "Expr", "For", "While", "If", "FunctionDef", "With", "Assert", "Delete",
                       "Return", "Break", "Continue", "Pass", "Import"]


def _pool(friendly: list, hostile: list) -> st.SearchStrategy[str]:
    mixed = st.one_of(st.sampled_from(friendly), st.sampled_from(friendly), st.sampled_from(friendly),
                      st.sampled_from(hostile))
    return MOOD.flatmap(lambda mood: st.sampled_from(friendly) if mood == "friendly" else mixed)


NAME = _pool(VALUES + BUILTINS, HOSTILE_NAMES)
STORED = _pool(["x", "y", "i", "_", "dprobs", "helper"], HOSTILE_NAMES + ["dict", "print"])
ATTRIBUTE = _pool(ATTRIBUTES, HOSTILE_ATTRIBUTES)
KEYWORD = _pool(KEYWORDS[:7], KEYWORDS[7:])
STRING = _pool(STRINGS[:7], STRINGS[7:])
CONSTANT = st.one_of(st.integers(-2, 4), st.sampled_from([0.5, 1e-5, -1.0, True, False, None, ...]), STRING,
                     MOOD.flatmap(lambda mood: st.just("x" if mood == "friendly" else b"x")))


def _name(name: str, ctx=ast.Load) -> ast.Name:
    return ast.Name(name, ctx())


def _kinds(kinds: dict) -> st.SearchStrategy:
    return st.one_of(*kinds.values())


@functools.cache
def expression_kinds(depth: int, context: frozenset = frozenset()) -> dict[str, st.SearchStrategy[ast.expr]]:
    """An expression of each kind, of at most `depth` levels; `context` holds "function" or "async"
    where yield or await may stand."""
    name = NAME.map(_name)
    constant = CONSTANT.map(ast.Constant)
    member = st.tuples(st.sampled_from(["torch", "torch", "F", "math"]), _pool(TORCH, HOSTILE_ATTRIBUTES)).map(
        lambda p: ast.Attribute(_name(p[0]), p[1], ast.Load()))
    if depth == 0:
        return {"Name": name, "Constant": constant, "Attribute": member}
    sub = expression(depth - 1, context)
    starred = st.one_of(sub, sub.map(lambda e: ast.Starred(e, ast.Load())))
    spec = st.lists(st.one_of(st.sampled_from([".3f", ">8"]).map(ast.Constant),
                              st.builds(ast.FormattedValue, sub, st.just(-1), st.none())), min_size=1, max_size=1)
    field = st.builds(ast.FormattedValue, sub, st.sampled_from([-1, -1, ord("r"), ord("s"), ord("a")]),
                      st.none() | spec.map(ast.JoinedStr))
    index = st.one_of(sub, st.builds(ast.Slice, st.none() | sub, st.none() | sub, st.none()),
                      st.lists(sub, min_size=2, max_size=2).map(lambda e: ast.Tuple(e, ast.Load())))
    kinds = {
        "Name": name,
        "Constant": constant,
        "Attribute": st.one_of(member, st.builds(ast.Attribute, st.one_of(name, sub), ATTRIBUTE, st.just(ast.Load()))),
        "BoolOp": st.builds(ast.BoolOp, st.sampled_from([ast.And(), ast.Or()]), st.lists(sub, min_size=2, max_size=2)),
        "NamedExpr": st.builds(ast.NamedExpr, STORED.map(lambda n: _name(n, ast.Store)), sub),
        "BinOp": st.builds(ast.BinOp, sub, st.sampled_from(OPERATORS).map(lambda op: op()), sub),
        "UnaryOp": st.builds(ast.UnaryOp, st.sampled_from([ast.UAdd(), ast.USub(), ast.Not(), ast.Invert()]), sub),
        "Lambda": st.builds(ast.Lambda, arguments(depth - 1), sub),
        "IfExp": st.builds(ast.IfExp, sub, sub, sub),
        "Dict": st.lists(st.tuples(st.none() | sub, sub), max_size=2).map(
            lambda kv: ast.Dict([k for k, _ in kv], [v for _, v in kv])),
        "Set": st.builds(ast.Set, st.lists(sub, min_size=1, max_size=2)),
        "ListComp": st.builds(ast.ListComp, sub, comprehensions(depth - 1, context)),
        "SetComp": st.builds(ast.SetComp, sub, comprehensions(depth - 1, context)),
        "DictComp": st.builds(ast.DictComp, sub, sub, comprehensions(depth - 1, context)),
        "GeneratorExp": st.builds(ast.GeneratorExp, sub, comprehensions(depth - 1, context)),
        "Compare": st.builds(lambda a, op, b: ast.Compare(a, [op()], [b]), sub, st.sampled_from(COMPARISONS), sub),
        "Call": st.builds(ast.Call, st.one_of(member, name, sub, format_method()), st.lists(starred, max_size=2),
                          st.lists(st.builds(ast.keyword, st.one_of(KEYWORD, KEYWORD, st.none()), sub), max_size=2)),
        "JoinedStr": st.lists(st.one_of(STRING.map(ast.Constant), field), min_size=1,
                              max_size=2).map(ast.JoinedStr),
        "FormattedValue": st.lists(field, min_size=1, max_size=1).map(ast.JoinedStr),
        "Subscript": st.builds(ast.Subscript, sub, index, st.just(ast.Load())),
        "Slice": st.builds(ast.Subscript, sub, st.builds(ast.Slice, st.none() | sub, st.none() | sub, st.none() | sub),
                           st.just(ast.Load())),
        "List": st.builds(ast.List, st.lists(starred, max_size=2), st.just(ast.Load())),
        "Tuple": st.builds(ast.Tuple, st.lists(starred, min_size=1, max_size=2), st.just(ast.Load())),
        "Starred": st.builds(ast.Call, name, st.lists(sub.map(lambda e: ast.Starred(e, ast.Load())), min_size=1,
                                                      max_size=1), st.just([])),
    }
    if "function" in context:
        kinds["Yield"] = st.builds(ast.Yield, st.none() | sub)
        kinds["YieldFrom"] = st.builds(ast.YieldFrom, sub)
    if "async" in context:
        kinds["Await"] = st.builds(ast.Await, sub)
    return kinds


def expression(depth: int, context: frozenset = frozenset()) -> st.SearchStrategy[ast.expr]:
    return _kinds(expression_kinds(depth, context))


@functools.cache
def format_method() -> st.SearchStrategy[ast.expr]:
    """`'<template>'.format`, the way str.format reads attributes by their names in a template."""
    return st.tuples(STRING, st.sampled_from(["format", "format", "format_map"])).map(
        lambda p: ast.Attribute(ast.Constant(p[0]), p[1], ast.Load()))


@functools.cache
def comprehensions(depth: int, context: frozenset) -> st.SearchStrategy[list]:
    sub = expression(depth, context)
    return st.lists(st.builds(ast.comprehension, target(), sub, st.lists(sub, max_size=1),
                              st.sampled_from([0, 1] if "async" in context else [0])), min_size=1, max_size=1)


@functools.cache
def arguments(depth: int) -> st.SearchStrategy[ast.arguments]:
    sub = expression(depth)
    arg = st.builds(ast.arg, STORED, st.none() | sub)
    return st.builds(lambda posonly, args, vararg, kwonly, kwarg, defaults: ast.arguments(
        posonly, args, vararg, kwonly, [None] * len(kwonly), kwarg, defaults[:len(posonly) + len(args)]),
        st.lists(arg, max_size=1), st.lists(arg, max_size=2), st.none() | arg, st.lists(arg, max_size=1),
        st.none() | arg, st.lists(sub, max_size=1))


@functools.cache
def target(unpacking: bool = True) -> st.SearchStrategy[ast.expr]:
    """What an assignment, a loop or a comprehension may bind; `unpacking` adds tuples (not for +=)."""
    stored = STORED.map(lambda n: _name(n, ast.Store))
    loaded = NAME.map(_name)
    targets = [stored, stored, st.builds(ast.Subscript, loaded, expression(0), st.just(ast.Store())),
               st.builds(ast.Attribute, loaded, ATTRIBUTE, st.just(ast.Store()))]
    if unpacking:
        targets += [st.lists(stored, min_size=2, max_size=2).map(lambda e: ast.Tuple(e, ast.Store())),
                    stored.map(lambda t: ast.Tuple([_name("x", ast.Store), ast.Starred(t, ast.Store())], ast.Store()))]
    return st.one_of(*targets)


@functools.cache
def pattern_kinds(depth: int) -> dict[str, st.SearchStrategy[ast.pattern]]:
    alternatives = {
        "MatchValue": st.integers(0, 2).map(lambda v: ast.MatchValue(ast.Constant(v))),
        "MatchSingleton": st.sampled_from([None, True]).map(ast.MatchSingleton),
    }
    kinds = {**alternatives, "MatchAs": st.builds(ast.MatchAs, st.none(), st.none() | STORED)}
    if depth == 0:
        return kinds
    sub = _kinds(pattern_kinds(depth - 1))
    cls = st.sampled_from(["object", "int", "torch.Tensor", "dict"]).map(lambda c: ast.parse(c, mode="eval").body)
    sequence = st.builds(lambda ps, rest: ast.MatchSequence(ps + [ast.MatchStar(rest)]), st.lists(sub, max_size=2),
                         st.none() | STORED)
    return {
        **kinds,
        "MatchClass": st.builds(lambda c, ps, kws: ast.MatchClass(c, ps, [k for k, _ in kws], [p for _, p in kws]),
                                cls, st.lists(sub, max_size=1),
                                st.lists(st.tuples(ATTRIBUTE, sub), max_size=2, unique_by=lambda kv: kv[0])),
        "MatchSequence": sequence,
        "MatchStar": sequence,
        "MatchMapping": st.builds(lambda keys, ps: ast.MatchMapping([ast.Constant(k) for k in keys], ps[:len(keys)]),
                                  st.lists(st.sampled_from(["x", "grad", "__class__"]), max_size=2, unique=True),
                                  st.lists(sub, min_size=2, max_size=2)),
        "MatchOr": st.builds(ast.MatchOr, st.lists(_kinds(alternatives), min_size=2, max_size=2)),
    }


def _function(name: str, body: list, asynchronous: bool = False) -> ast.stmt:
    kind = ast.AsyncFunctionDef if asynchronous else ast.FunctionDef
    return kind(name, ast.arguments([], [], None, [], [], None, []), body, [], None)


@functools.cache
def statement_kinds(depth: int, context: frozenset = frozenset()) -> dict[str, st.SearchStrategy[ast.stmt]]:
    """A statement of each kind that may stand in `context` ("function", "async", "loop")."""
    sub = expression(min(depth, 2), context)
    inner = frozenset(context - {"loop"})

    def block(where: frozenset, last: ast.stmt) -> st.SearchStrategy[list]:
        return st.lists(statement(depth - 1, where), min_size=1, max_size=2) if depth else st.just([last])

    body = block(context, ast.Pass())
    loop_body = block(context | {"loop"}, ast.Break())
    function_body = block(inner | {"function"}, ast.Return(None))
    async_body = block(inner | {"function", "async"}, ast.Pass())
    tail = st.lists(statement(depth - 1, context), max_size=1) if depth else st.just([])
    decorators = st.lists(sub, max_size=1)
    kinds = {
        "FunctionDef": st.builds(ast.FunctionDef, STORED, arguments(1), function_body, decorators, st.none() | sub),
        "AsyncFunctionDef": st.builds(ast.AsyncFunctionDef, STORED, arguments(1), async_body, decorators),
        "ClassDef": st.builds(lambda n, bases, b, d: ast.ClassDef(n, bases, [], b, d), STORED,
                              st.lists(sub, max_size=1), body, decorators),
        "Delete": st.builds(lambda t: ast.Delete([t]), st.one_of(
            STORED.map(lambda n: _name(n, ast.Del)),
            st.builds(ast.Subscript, NAME.map(_name), expression(0), st.just(ast.Del())),
            st.builds(ast.Attribute, NAME.map(_name), ATTRIBUTE, st.just(ast.Del())))),
        "Assign": st.builds(lambda t, v: ast.Assign([t], v), target(), sub),
        "AugAssign": st.builds(ast.AugAssign, target(unpacking=False), st.sampled_from(OPERATORS).map(lambda op: op()),
                               sub),
        "AnnAssign": st.builds(lambda n, a, v: ast.AnnAssign(_name(n, ast.Store), a, v, 1), STORED, sub,
                               st.none() | sub),
        "For": st.builds(ast.For, target(), sub, loop_body, tail),
        "While": st.builds(ast.While, sub, loop_body, tail),
        "If": st.builds(ast.If, sub, body, tail),
        "With": st.builds(ast.With, st.lists(st.builds(
            ast.withitem, st.one_of(st.just(ast.parse("torch.no_grad()", mode="eval").body), sub),
            st.none() | STORED.map(lambda n: _name(n, ast.Store))), min_size=1, max_size=1), body),
        "Match": st.builds(ast.Match, sub, st.lists(st.builds(ast.match_case, _kinds(pattern_kinds(2)),
                                                              st.none() | sub, body), min_size=1, max_size=2)),
        "Raise": st.builds(ast.Raise, st.none() | sub, st.none()),
        "Try": st.builds(lambda b, h, f: ast.Try(b, h, [], f if f or h else [ast.Pass()]), body, st.lists(st.builds(
            ast.ExceptHandler, st.none() | sub, st.none() | STORED, body), max_size=1), tail),
        "TryStar": st.builds(lambda b, h: ast.TryStar(b, [h], [], []), body,
                             st.builds(ast.ExceptHandler, sub, st.none() | STORED, body)),
        "Assert": st.builds(ast.Assert, sub, st.none() | sub),
        "Import": st.lists(st.builds(ast.alias, st.sampled_from(["torch", "torch.nn.functional", "math", "os", "sys",
                                                                 "torch.autograd"]),
                                     st.none() | st.sampled_from(["F", "m", "torch"])), min_size=1, max_size=2).map(
            ast.Import),
        "ImportFrom": st.builds(lambda m, n, a, level: ast.ImportFrom(m, [ast.alias(n, a)], level),
                                st.sampled_from(["torch.nn", "torch", "torch.nn.functional", "os"]),
                                st.sampled_from(["functional", "autograd", "*", "system"]),
                                st.none() | st.sampled_from(["F", "f"]), st.sampled_from([0, 0, 1])),
        "Global": st.builds(ast.Global, st.lists(STORED, min_size=1, max_size=2, unique=True)),
        # nonlocal needs a binding in an enclosing function
        "Nonlocal": STORED.map(lambda n: _function("outer", [ast.Assign([_name(n, ast.Store)], ast.Constant(1)),
                                                            _function("inner", [ast.Nonlocal([n])])])),
        "Expr": st.builds(ast.Expr, sub),
        "Pass": st.just(ast.Pass()),
    }
    if "function" in context:
        kinds["Return"] = st.builds(ast.Return, st.none() | sub)
    if "loop" in context:
        kinds["Break"] = st.just(ast.Break())
        kinds["Continue"] = st.just(ast.Continue())
    if "async" in context:
        kinds["AsyncFor"] = st.builds(ast.AsyncFor, target(), sub, loop_body, st.just([]))
        kinds["AsyncWith"] = st.builds(lambda item, b: ast.AsyncWith([ast.withitem(item, None)], b), sub, body)
    return kinds


@functools.cache
def statement(depth: int, context: frozenset = frozenset()) -> st.SearchStrategy[ast.stmt]:
    kinds = statement_kinds(depth, context)
    friendly = st.one_of(*(kinds[k] for k in FRIENDLY_STATEMENTS if k in kinds))
    mixed = st.one_of(*kinds.values())
    return MOOD.flatmap(lambda mood: friendly if mood == "friendly" else mixed)


def _featured() -> dict[str, st.SearchStrategy[ast.stmt]]:
    """For every node type, statements that hold one: so that each appears in a run of a few hundred
    programs whatever the rest of the draw does."""
    assign = functools.partial(st.builds, lambda e: ast.Assign([_name("x", ast.Store)], e))
    featured = {kind: assign(strategy) for kind, strategy in expression_kinds(2).items()}
    featured.update({kind: st.builds(ast.Match, expression(1), st.lists(st.builds(
        ast.match_case, strategy, st.none(), st.just([ast.Pass()])), min_size=1, max_size=1))
        for kind, strategy in pattern_kinds(2).items()})
    featured.update(statement_kinds(2))
    for where, wrap in ((frozenset({"function"}), lambda s: _function("f", [s])),
                        (frozenset({"function", "async"}), lambda s: _function("f", [s], asynchronous=True)),
                        (frozenset({"loop"}), lambda s: ast.While(_name("x"), [s], []))):
        for kind, strategy in statement_kinds(1, where).items():
            featured.setdefault(kind, strategy.map(wrap))
        for kind, strategy in expression_kinds(1, where).items():
            featured.setdefault(kind, strategy.map(lambda e, wrap=wrap: wrap(ast.Expr(e))))
    return featured


FEATURED = _featured()


def program(kind: str | None = None) -> st.SearchStrategy[ast.Module]:
    """A cell built around a statement that holds a node of type `kind` (of any type when None)."""
    main = FEATURED[kind] if kind else st.sampled_from(sorted(FEATURED)).flatmap(FEATURED.get)
    return st.builds(lambda before, main, after: ast.Module(before + [main] + after, []),
                     st.lists(statement(2), max_size=2), main, st.lists(statement(2), max_size=2))


def _source(tree: ast.Module) -> str | None:
    """The program's text, or None when the tree is not a program Python compiles."""
    try:
        source = ast.unparse(ast.fix_missing_locations(tree))
        with warnings.catch_warnings():  # "'int' object is not callable": the cell's own business
            warnings.simplefilter("ignore")
            compile(source, CELL, "exec")
    except (SyntaxError, ValueError, TypeError, AttributeError, RecursionError):
        return None
    return source


# ---------------------------------------------------------------------------------------------
# The test


class Worker:
    """This file run as a script, fed one cell at a time. A cell that crashes or hangs it costs a new
    worker, not the test: that is the sandbox's business."""

    def __init__(self):
        self.process = None

    def run(self, source: str) -> dict | None:
        if self.process is None:
            self.process = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True)
        try:
            self.process.stdin.write(json.dumps(source) + "\n")
            self.process.stdin.flush()
            if select.select([self.process.stdout], [], [], 60)[0]:
                line = self.process.stdout.readline()
                if line:
                    return json.loads(line)
        except BrokenPipeError:
            pass
        self.close()
        return None

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process.stdin.close()
            self.process.stdout.close()
            self.process = None


NODE_TYPES = {kind.__name__ for base in (ast.stmt, ast.expr, ast.pattern) for kind in base.__subclasses__()}


def test_the_generator_writes_every_node_type():
    assert set(FEATURED) == NODE_TYPES


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # the strategies' reprs are long
@pytest.mark.slow
def test_whatever_the_check_accepts_touches_nothing_forbidden_when_run():
    """300 programs around node types of every kind, and one around each type (so that every type gets
    its turn, whatever Hypothesis prefers to draw); derandomized, so a run is repeatable."""
    seen: set[str] = set()
    accepted: list[str] = []
    troubled: list[str] = []
    worker = Worker()

    def fuzz(kind: str | None, examples: int) -> None:
        @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(program(kind))
        def run(tree):
            source = _source(tree)
            assume(source is not None)
            seen.update(type(node).__name__ for node in ast.walk(tree))
            if static_check.check(source) is not None:
                return
            accepted.append(source)
            reply = worker.run(source)
            if reply is None:
                troubled.append(source)
                return
            assert not reply["violations"], \
                f"the check accepted this cell, and when run it did {reply['violations']}:\n{source}"

        run()

    try:
        fuzz(None, 300)
        for kind in sorted(FEATURED):
            fuzz(kind, 1)
    finally:
        worker.close()
    assert NODE_TYPES <= seen, f"the generator never wrote {sorted(NODE_TYPES - seen)}"
    assert len(accepted) >= 40, f"only {len(accepted)} accepted cells were run"
    assert len(troubled) <= len(accepted) // 10, troubled


# ---------------------------------------------------------------------------------------------
# The worker: runs accepted cells, one JSON line in, one out


def _namespace(torch, F) -> dict:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 5, generator=g)
    probs = logits.softmax(1)
    return {"torch": torch, "F": F, "n": 4, "logits": logits, "probs": probs, "logprobs": probs.log(),
            "dlogprobs": torch.randn(4, 5, generator=g), "counts": logits.exp(), "h": torch.randn(4, 3, generator=g),
            "W2": torch.randn(3, 5, generator=g), "Yb": torch.tensor([0, 2, 4, 1]),
            "Xb": torch.tensor([[0, 1, 2], [2, 3, 4], [4, 0, 1], [1, 1, 1]]), "C": torch.randn(5, 2, generator=g)}


def _warm_up(torch, F) -> None:
    """Print a tensor and call every allowed torch and F function once, so that what torch imports
    lazily on a first use (a module, its files) happens before any cell is watched."""
    ns = _namespace(torch, F)
    x, index = ns["probs"], ns["Yb"]
    for value in (x, index, x.max(1), x.shape, x.dtype, x.device, x[0, 0]):
        repr(value), str(value), format(value, ""), hash(value)
    for module, names in ((torch, static_check.TORCH), (F, static_check.FUNCTIONAL)):
        for name in sorted(names):
            for args in ((x,), (x, 1), (x, x), (x, 1, index), ([x, x],), (index,), (x, 0, index, x)):
                try:
                    getattr(module, name)(*args)
                except Exception:  # most argument lists fit no function: only the first call matters
                    pass


def _worker() -> None:
    import dis
    import io
    import resource
    import signal

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # torch's and the compiler's remarks on the cells would only be noise
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    state = {"armed": False, "code": None, "violations": []}

    def violation(text: str) -> None:
        if len(state["violations"]) < 20:
            state["violations"].append(text)

    def audit(event, args):
        if not state["armed"] or event in HARMLESS_EVENTS or (event == "exec" and args and args[0] is state["code"]):
            return
        violation(f"audit event {event} {str(args)[:120]}")

    _warm_up(torch, F)
    sys.addaudithook(audit)
    instructions: dict[object, dict[int, dis.Instruction]] = {}

    def opcode(frame) -> None:
        code = frame.f_code
        if code not in instructions:
            instructions[code] = {i.offset: i for i in dis.get_instructions(code)}
        ins = instructions[code].get(frame.f_lasti)
        if ins is None:
            return
        if ins.opname in FORBIDDEN_OPCODES or ins.opname == "YIELD_VALUE" and code.co_name != "<genexpr>":
            violation(f"opcode {ins.opname} {ins.argval!r}")
        elif ins.opname in NAMED_OPCODES and isinstance(ins.argval, str):
            if ins.opname in ("IMPORT_NAME", "IMPORT_FROM"):
                if ins.argval not in NOTEBOOK_IMPORTS:
                    violation(f"import {ins.argval}")
            elif ins.argval.startswith("_") and ins.opname in ("LOAD_ATTR", "LOAD_METHOD") or "__" in ins.argval:
                violation(f"{ins.opname} {ins.argval}")

    def quiet(watch):
        """The witnesses read frames themselves, which the audit hook must not count against the cell."""
        def watched(frame, event, arg):
            armed, state["armed"] = state["armed"], False
            result = watch(frame, event, arg)  # the cell's timer may interrupt it: then the cell is over
            state["armed"] = armed
            return result
        return watched

    @quiet
    def trace(frame, event, arg):
        if frame.f_code.co_filename != CELL:
            return None
        frame.f_trace_opcodes = True
        if event == "opcode":
            opcode(frame)
        return trace

    @quiet
    def profile(frame, event, arg):
        if event == "c_call" and frame.f_code.co_filename == CELL:
            name = getattr(arg, "__name__", "")
            if name in FORBIDDEN_CALLS or name.startswith("_"):
                violation(f"call of {getattr(arg, '__qualname__', name)}")

    def on_alarm(signum, frame):
        """Raised in the cell's own code only: raised inside the trace or profile function, it makes CPython
        drop that function, itself an audited sys.settrace the hook would blame on the cell."""
        armed, state["armed"] = state["armed"], False  # reading the frame is the harness's, not the cell's
        in_cell = frame is not None and frame.f_code.co_filename == CELL
        state["armed"] = armed
        if not in_cell:
            signal.setitimer(signal.ITIMER_REAL, 0.001)
            return
        raise TimeoutError("cell time limit")

    signal.signal(signal.SIGALRM, on_alarm)
    replies = sys.stdout
    for line in sys.stdin:
        source = json.loads(line)
        ns = _namespace(torch, F)
        state.update(code=compile(source, CELL, "exec"), violations=[])
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        sys.stdout = io.StringIO()  # what the cell prints is not a reply
        sys.settrace(trace)
        sys.setprofile(profile)
        state["armed"] = True
        try:
            exec(state["code"], ns)
        except BaseException:  # the cell's own error is none of the test's business: only what it touched
            pass
        finally:
            state["armed"] = False
            sys.settrace(None)
            sys.setprofile(None)
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.stdout = replies
        for name, value in ns.items():
            if isinstance(value, torch.Tensor) and (value.requires_grad or value.grad_fn is not None):
                violation(f"{name} requires grad: autograd ran")
        print(json.dumps({"violations": state["violations"]}), file=replies, flush=True)


if __name__ == "__main__":
    _worker()
