"""`ast.parse` behind one lock per process.

CPython 3.11's AST constructor keeps its recursion depth in one place for every thread: when two threads
build ASTs at once (the grader's submissions side by side, each cell read and checked in its thread, the
judge deriving its neighbourhood in another), one of them can fail with `SystemError: AST constructor
recursion depth mismatch`, a fault of the grader that would be reported against a student's cell, or stop
a whole batch. Parsing is a small part of the work, so the trusted process parses one source at a time:
its own parses through `parse`, and, once it grades (`everywhere`), every other caller's of `ast.parse`
too: pytest parses a failing hidden test's source for its report, in the judge's thread, beside the
submissions' static checks (a batch of an instructor's own exercise stopped on it).
"""
from __future__ import annotations

import ast
import threading

_UNLOCKED = ast.parse
_ONE_AT_A_TIME = threading.RLock()


def parse(source, filename="<unknown>", mode="exec", **kwargs) -> ast.AST:
    with _ONE_AT_A_TIME:
        return _UNLOCKED(source, filename, mode, **kwargs)


def everywhere() -> None:
    """`ast.parse` is `parse` for the rest of the process, whoever calls it (pytest, inspect, a library)."""
    ast.parse = parse


def names_read(code: str) -> tuple[str, ...] | None:
    """The names a cell's code loads, in order, each once; None when it does not parse."""
    try:
        tree = parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return tuple(dict.fromkeys(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)))
