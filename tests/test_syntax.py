"""Threads that parse at once: CPython 3.11's AST constructor keeps its recursion depth in one place for
every thread, so a parse that lets another thread run mid-way (a garbage collection calling back into
Python, a finalizer) fails with `SystemError: AST constructor recursion depth mismatch`. It broke a CI
run (pytest's own parse failed while a test thread derived a variant's answers), and the grader parses
each submission in its own thread; grader.syntax parses one source at a time."""
from __future__ import annotations

import ast
import gc
import threading
import time

from grader import syntax

BIG = "\n".join(f"x{i} = [(a, b) for a in range({i}) for b in range(3)]" for i in range(1500))


def _failures(parse) -> list[SystemError]:
    """SystemErrors of a big parse, five times, while another thread parses a small source in a loop and
    every collection sleeps (releasing the GIL, as a finalizer that waits would)."""
    stop, failed = threading.Event(), []

    def other():
        while not stop.is_set():
            try:
                parse("y = [i * 2 for i in range(3)]\n")
            except SystemError as exc:
                failed.append(exc)

    def pause(phase, info):
        time.sleep(0.0005)

    gc.callbacks.append(pause)
    thread = threading.Thread(target=other)
    thread.start()
    try:
        for _ in range(5):
            try:
                parse(BIG)
            except SystemError as exc:
                failed.append(exc)
    finally:
        gc.callbacks.remove(pause)
        stop.set()
        thread.join()
    return failed


def test_threads_parsing_at_once_never_fail():
    assert not _failures(syntax.parse)


def test_once_grading_starts_every_caller_of_ast_parse_parses_one_at_a_time(monkeypatch):
    """pytest parses a failing hidden test's source (`ast.parse(source, "source", "exec")`) in the judge's thread
    while the submissions' static checks parse in theirs: an instructor's batch stopped on the race. A Grader
    makes every ast.parse of the process wait its turn (grader.pipeline.grading)."""
    monkeypatch.setattr(ast, "parse", ast.parse)  # as it was, after the test
    syntax.everywhere()
    assert ast.parse is syntax.parse
    assert not _failures(lambda source: ast.parse(source, "source", "exec"))


def test_the_race_is_real_where_the_interpreter_has_it():
    """The control: ast.parse itself fails here on an interpreter with the shared depth (3.11), so the test
    above can fail; an interpreter without it passes both."""
    import sys

    failed = _failures(syntax._UNLOCKED)  # ast.parse itself, as before a grader in this process replaced it
    if sys.version_info[:2] == (3, 11):
        assert failed and "recursion depth mismatch" in str(failed[0])
