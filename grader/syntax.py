"""`ast.parse` behind one lock per process.

CPython 3.11's AST constructor keeps its recursion depth in one place for every thread: when two threads
build ASTs at once (the grader's submissions side by side, each cell read and checked in its thread, the
judge deriving its neighbourhood in another), one of them can fail with `SystemError: AST constructor
recursion depth mismatch`, a fault of the grader that would be reported against a student's cell.
Parsing is a small part of the work, so the trusted process parses one source at a time.
"""
from __future__ import annotations

import ast
import threading

_ONE_AT_A_TIME = threading.Lock()


def parse(source: str, mode: str = "exec") -> ast.AST:
    with _ONE_AT_A_TIME:
        return ast.parse(source, mode=mode)
