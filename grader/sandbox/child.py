"""The only place student code runs: a child process that executes answer cells on request and sends
back what each one assigned.

It holds no reference gradient until its own answer for that gradient has been sent (the parent
reveals true upstream values one by one), it compares nothing and scores nothing, and whatever the
student's code prints goes nowhere: the parent reads only protocol messages.

A second lock that does not rely on the static check: every tensor the child holds is an inference
tensor and every cell runs in inference mode, where no operation records a graph, so setting
requires_grad on anything gains nothing; and an audit hook (see `_audit`) reports to the parent, as it
happens, each step a cell takes outside tensor math: exec, compile, import, open, os, subprocess,
socket, ctypes, frames, the garbage collector's object lists, and autograd's entry points.
"""
from __future__ import annotations

import builtins
import contextlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator

import torch

from grader.exercise import ATOMIC, FUNCTION, NAMESPACE, cell_builtins, load
from grader.sandbox import autograd_watch, protocol


def _protocol_fds() -> tuple[int, int]:
    """Move the protocol off fds 0/1 so the student's print() cannot write into it."""
    rfd, wfd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    return rfd, wfd


def _names(code) -> frozenset:
    """Global names a code object and the functions, lambdas and comprehensions inside it read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return frozenset(names)


class CellTimeout(BaseException):
    """BaseException, so that a student's `except Exception` cannot swallow it."""


def _on_alarm(signum, frame):
    raise CellTimeout()


# How torch's CPU allocator says the address-space limit refused it.
OUT_OF_MEMORY = ("can't allocate memory", "not enough memory")


# What an error's message is made of: an exception's arguments of these types are shown (a cell that
# raises a plain `ValueError("...")`, or torch's RuntimeError, keeps its message); any other is named by
# its type only, since turning it into text would run the student's code.
PLAIN = (str, bytes, int, float, bool, type(None))
MESSAGE_CHARS = 500


def _text(value) -> str:
    """One argument as its repr, as in a tuple's."""
    if type(value) in (str, bytes):
        return repr(value[:MESSAGE_CHARS])
    if type(value) is int and value.bit_length() > 4 * MESSAGE_CHARS:
        return "<a very large int>"  # its decimal text would be slow to make, or refused
    if type(value) in PLAIN:
        return repr(value)
    return f"<{type.__dict__['__name__'].__get__(type(value))} object>"


def _message(exc: BaseException) -> str:
    """The message of the student's exception, made without running any of the student's code: its
    own __str__, its arguments' __str__ or __repr__, a class's `args` property or a metaclass's
    `__name__` would run after the cell's timer has stopped (a message that reads a file then, loops, or
    raises from the child's own loop and ends it). So the message is made the way BaseException makes
    it, from the arguments the exception really holds, each of them plain data or named by its type;
    an exception whose class writes its own message shows BaseException's instead."""
    args = BaseException.args.__get__(exc)
    if len(args) == 1:
        return args[0][:MESSAGE_CHARS] if type(args[0]) is str else _text(args[0])
    return ("(" + ", ".join(_text(a) for a in args[:8]) + ")")[:MESSAGE_CHARS]


def _error(grade_id: str, exc: BaseException, quiet) -> dict:
    """The reply for a cell that raised. The walk over the traceback's frames (itself an audited step)
    is `quiet`; nothing here runs the student's code (see `_message`)."""
    filename = f"<answer cell {grade_id}>"
    line = None
    with quiet():
        for frame, lineno in traceback.walk_tb(BaseException.__traceback__.__get__(exc)):
            if frame.f_code.co_filename == filename:
                line = lineno
    message = _message(exc)
    error = {"status": "error", "error_type": type.__dict__["__name__"].__get__(type(exc)), "error": message,
             "line": line}
    if issubclass(type(exc), MemoryError) or any(m in message for m in OUT_OF_MEMORY):
        error["limit"] = "memory"  # the address-space limit stopped it: an instructor should know
    return error


# Evidence messages a child sends at most per run of a cell (each kind of step once) and in all: a cell
# that opens a million files must not flood the pipe, and the parent keeps a few per outcome anyway.
MAX_EVIDENCE_PER_RUN = 8
MAX_EVIDENCE = 2000


def _brief(args: tuple) -> str:
    """An audit event's first argument, when it is plain data (anything else could run the student's
    code in its __repr__)."""
    if args and type(args[0]) in (str, bytes, int):
        return f"({args[0]!r:.80})"
    return ""


def _audit(wfd: int):
    """Install the audit hook; return `at(grade_id, case, check, code)`, which says what runs next (its
    own `exec` of that compiled cell is not reported), and `quiet()`, a context in which the child's own
    audited steps (compiling a cell, walking a traceback) are not reported.

    From the moment the hook is installed it reports every audit event outside `quiet()`, not only
    those raised inside a cell: an object a cell left behind (an exception's __str__, a patched tensor
    method) runs later, from the child's own code, and is reported then, under the last cell's name.

    Where the record is, and why no cell can reach it: each report is written to the protocol pipe
    before the event's operation proceeds, so it is with the parent before the cell sees any result of
    the step it reports; what stays in the child (whether a step was already reported) lives in this
    closure, referenced only by the hook (Python has no way to list or remove audit hooks) and by the
    child loop's frame. Every route to a frame (sys._getframe, a traceback's or generator's frame, a
    trace or profile function, a signal handler's frame argument) and to arbitrary objects (gc's object
    and referrer lists) is itself an audited step, reported before it returns.

    Not seen: what runs inside `quiet()` (a tensor method a cell replaced, called while a reply is
    encoded), and C-level entry points no Python wrapper covers (a fresh autograd engine, functorch's
    primitives); the static check, inference mode, the kernel walls and the LOCAL check stand there.
    """
    state = {"quiet": 0, "context": ["", "", ""], "own": None}
    reported: set = set()
    per_run: dict = {}

    def report(kind: str, text: str) -> None:
        context = tuple(state["context"])
        if (*context, text) in reported or len(reported) >= MAX_EVIDENCE \
                or per_run.get(context, 0) >= MAX_EVIDENCE_PER_RUN:
            return
        reported.add((*context, text))
        per_run[context] = per_run.get(context, 0) + 1
        grade_id, case, check = state["context"]
        try:
            protocol.write(wfd, {"op": "evidence", "grade_id": grade_id, "case": case, "check": check,
                                 "kind": kind, "evidence": text})
        except OSError:
            pass  # the cell closed the pipe: the parent sees a broken connection, blamed on the notebook

    def hook(event: str, args: tuple) -> None:
        if state["quiet"] or (event == "exec" and args and args[0] is state["own"]):
            return
        if event == autograd_watch.AUTOGRAD_EVENT:
            report("autograd", args[0] if args and type(args[0]) is str else event)
        else:
            report("forbidden-call", event + _brief(args))

    def at(grade_id: str, case: str, check: str, code=None) -> None:
        state["context"] = [grade_id, case, check]
        state["own"] = code

    class quiet:
        def __enter__(self):
            state["quiet"] += 1

        def __exit__(self, *exc):
            state["quiet"] -= 1

    sys.addaudithook(hook)
    return at, quiet, report


# What a cell may import without a report: the torch and F it is given anyway (`import torch` is common in
# correct answers), and math, whose import the static check accepts too (an instructor trial's exact GELU wrote
# `import math` for math.sqrt(2) and math.pi: the self-check said ok, the grader 0 and two integrity flags), as
# (module, names imported from it).
HARMLESS_IMPORTS = {("torch", ()), ("torch", ("nn",)), ("torch.nn", ()), ("torch.nn", ("functional",)),
                    ("torch.nn.functional", ()), ("math", ())}


def _importer(original):
    """`__import__` for the cells: a module torch has already loaded raises no "import" event of its
    own, so this one raises it for any import but the harmless ones."""

    def audited_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level or (name, tuple(fromlist or ())) not in HARMLESS_IMPORTS:
            sys.audit("import", name)
        return original(name, globals, locals, fromlist, level)

    return audited_import


def warm_up() -> None:
    """Run once in the fork server, before any child: what an honest cell may do beside tensor math
    (print a tensor, format a number from one) loads modules lazily the first time, and in a child that
    loading would be audited steps, reported against the cell."""
    values = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3)
    for value in (values, values.float(), values[0], values.sum(), values > 0, values.long()):
        str(value), repr(value), f"{value.sum():.3f}", value.tolist()
    str(values.shape), repr(values.dtype)
    # Indexing with a Python range or list, read and written in place (a cross-entropy's `dx[range(n), y] -= 1`):
    # torch's argument parser imports torch.storage through the cell's own __import__ the first time
    rows, columns = range(2), torch.tensor([0, 2])
    for index in ((rows, columns), ([0, 1], columns), (list(rows),)):
        copy = values.clone()
        copy[index] -= 1
        copy[index] = copy[index] * 2


class _Run:
    """What one timed step of a cell came to: `failed` holds the error or timeout reply, None if it
    finished."""

    failed: dict | None = None


class Session:
    """One submission in the child: the parent's messages, each handled by the method `OPS` names, and
    the answer cells they ask to run. Nothing here compares or scores.

        cells {exercise, cells, cell_timeout, announce_every}   the exercise's spec string and the cells
        case {case, sizes} + the forward pass's tensors          one configuration, as a cell sees it
        upstream {case, check[, answer]} + gradients             random ones, or a true one revealed (with
                                                                 `answer`: that cell's alone)
        run_many {check, requests: [[grade_id, case], ...]}  ->  answers {answers} + answer0, answer1, ...
        replay {requests: [[grade_id, case, check], ...]}    ->  replayed
        train {lr} + parameters and each data tensor per step  ->  trained {status, ...} + losses, parameters
        bye                                                  ->  bye

    and, unasked, `started` as a cell starts and `evidence` of what a cell did beside tensor math."""

    def __init__(self, rfd: int, wfd: int):
        self.wfd = wfd
        self.reader = protocol.Reader(rfd)
        self.at, self.quiet, self.report = _audit(wfd)
        self.builtins = {**cell_builtins(), "__import__": _importer(builtins.__import__)}
        self.exercise = None  # the "cells" message names it
        self.answers: dict = {}
        self.reserved: set[str] = set()
        self.cells: dict[str, str] = {}
        self.cell_timeout = 10.0
        self.announce_every = 0.0
        self.last_announced = -float("inf")
        self.clock = time.monotonic  # the cells' `time` is this module: one may replace its monotonic, not ours
        self.cases: dict[str, dict] = {}
        self.upstream: dict[tuple[str, ...], dict] = {}
        self.carry: dict[tuple[str, str], dict] = {}
        self.calls: dict[tuple[str, str], tuple[dict | None, object]] = {}
        # Answer cells that ran past their time limit: never run again in this submission (a function's
        # cell answers several grade ids and the training check).
        self.timed_out: set[str] = set()
        self.compiled: dict[str, tuple[object, frozenset]] = {}
        self.done = False

    # ------------------------------------------------------------------ running a cell
    def announce(self) -> None:
        """Tell the parent a cell starts, so that its clock allows it one cell's time limit from now: the
        in-child timer is Python's, and a cell can ignore or catch it. Only once `announce_every` has
        passed since the last announcement: the parent's deadline, one limit and its grace after that
        announcement, still lies a grace's half beyond this cell's limit, and a submission of quick
        cells sends almost none."""
        now = self.clock()
        if now - self.last_announced < self.announce_every:
            return
        self.last_announced = now
        try:
            protocol.write(self.wfd, {"op": "started"})
        except OSError:
            pass  # the cell before closed the pipe: the parent sees a broken connection, blamed on the notebook

    @contextlib.contextmanager
    def timer(self, cell: str) -> Iterator[_Run]:
        """Run the body (the cell's code) under the per-cell time limit and in inference mode, entered
        afresh for each cell; whatever it raises becomes the run's `failed` reply. A cell that ran out
        of time is marked, never to run again (see `code`)."""
        run = _Run()
        self.announce()
        signal.setitimer(signal.ITIMER_REAL, self.cell_timeout)
        try:
            with torch.inference_mode():
                yield run
        except CellTimeout:
            self.timed_out.add(cell)
            run.failed = self.timeout()
        except BaseException as exc:  # the student's exception is data to report, whatever it is
            run.failed = _error(cell, exc, self.quiet)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def timeout(self) -> dict:
        return {"status": "timeout", "seconds": self.cell_timeout}

    def code(self, cell: str) -> tuple[dict | None, object, frozenset]:
        """(None, the cell compiled, every global name it reads), compiled once under the time limit (it
        runs on every case and check); or the reply that stops it: it ran out of time before, or does
        not compile."""
        if cell in self.timed_out:
            return self.timeout(), None, frozenset()
        if cell not in self.compiled:
            with self.timer(cell) as run, self.quiet():
                code = compile(self.cells[cell], f"<answer cell {cell}>", "exec")
            if run.failed:
                return run.failed, None, frozenset()
            self.compiled[cell] = code, _names(code)
        return None, *self.compiled[cell]

    def namespace(self) -> dict:
        return {"__builtins__": self.builtins, **NAMESPACE}

    def execute(self, cell: str, ns: dict, case: str, check: str) -> dict | None:
        """Run the cell in `ns`: None when it finished, else the reply that says why not."""
        failed, code, _ = self.code(cell)
        if failed:
            return failed
        self.at(cell, case, check, code)
        with self.timer(cell) as run:
            exec(code, ns)  # noqa: S102 - the student's cell, in the walled-in child
        return run.failed

    def check_left(self, ns: dict, names=None) -> None:
        """Autograd's leftovers among `names` of `ns` (all when None): those a cell may have assigned,
        not helper variables an earlier cell left behind (reported under that cell already)."""
        for found in autograd_watch.leftovers(ns if names is None else {k: ns[k] for k in names if k in ns}):
            self.report("autograd", found)

    # ------------------------------------------------------------------ answers
    def called(self, function, case: str, check: str) -> tuple[dict | None, object]:
        """A function answer's cell run and its function called once per case; every key it answers is
        read from what it returned."""
        key = (function.cell, case)
        if key not in self.calls:
            ns = self.namespace()
            failed = self.execute(function.cell, ns, case, check)
            returned = None
            if failed is None:
                with self.timer(function.cell) as run:
                    arguments = function.call_arguments(self.cases[case]["values"])
                    if not callable(ns.get(function.name)):
                        raise NameError(f"the cell does not define a function {function.name}")
                    returned = ns[function.name](*arguments)
                    if returned is not None and not isinstance(returned, dict):
                        raise TypeError(f"{function.name} returned a {type(returned).__name__}, not a dict")
                failed = run.failed
            self.check_left(returned if isinstance(returned, dict) else {})
            self.calls[key] = (failed, returned)
        return self.calls[key]

    def tensor_reply(self, reply: dict, value) -> tuple[dict, dict]:
        if value is None:
            return {**reply, "status": "blank"}, {}
        if type(value) is not torch.Tensor:
            subclass = isinstance(value, torch.Tensor)
            return {**reply, "status": "subclass" if subclass else "not-tensor", "type": type(value).__name__}, {}
        if not value.is_inference():
            self.report("autograd", "the answer was computed outside inference mode")
        try:
            tensor = value.detach().to("cpu").contiguous()
            if tensor.layout != torch.strided or tensor.is_quantized:
                raise TypeError(f"layout {tensor.layout}")
            if tensor.numel() * tensor.element_size() > protocol.MAX_ANSWER_BYTES // 2:
                raise ValueError(f"a tensor of {tensor.numel()} elements is far larger than any gradient here")
        except Exception as exc:
            return {**reply, "status": "unsendable", "error": str(exc)[:200]}, {}
        return {**reply, "status": "tensor"}, {"answer": tensor}

    def answer(self, grade_id: str, case: str, check: str) -> tuple[dict, dict]:
        answer = self.answers[grade_id]
        reply = {"grade_id": grade_id, "case": case, "check": check}
        if answer.cell_id not in self.cells:
            return {**reply, "status": "missing"}, {}
        if answer.kind == FUNCTION:
            failed, returned = self.called(self.exercise.function_of(answer), case, check)
            if failed:
                return {**reply, **failed}, {}
            self.at(answer.cell_id, case, check)
            if returned is not None and dict.__len__(returned) and not dict.__contains__(returned, answer.variable):
                return {**reply, "status": "unreturned"}, {}
            value = None if returned is None else dict.get(returned, answer.variable)
            return self.tensor_reply(reply, protocol.as_answer(value, self.scalar(answer, case)))
        self.at(grade_id, case, check)
        failed, _, reads = self.code(grade_id)
        if failed:
            return {**reply, **failed}, {}
        # Inputs the cell reads are copies, so that an in-place edit cannot change what later cells
        # see; the others cannot be reached without naming them (eval, exec and globals() are refused).
        # An atomic cell also finds what the atomic cells before it left (helper variables, say); any
        # other cell finds only the gradients it may read.
        ns = {**self.namespace(), **self.cases[case]["sizes"]}
        if answer.kind == ATOMIC:
            ns.update(self.carry.get((case, check), {}))
        ns.update({k: v.clone() if k in reads else v for k, v in self.cases[case]["values"].items()})
        given = {**self.upstream.get((case, check), {}), **self.upstream.get((case, check, grade_id), {})}
        ns.update({g: given[g].clone() if g in reads else given[g] for g in answer.upstream if g in given})
        originals = {**{k: v for k, v in self.cases[case]["values"].items() if k in reads},
                     **{g: given[g] for g in answer.upstream if g in given and g in reads}}
        copies = {k: ns[k] for k in originals}
        failed = self.execute(grade_id, ns, case, check)
        self.check_left(ns, reads)
        if failed:
            return {**reply, **failed}, {}
        if answer.kind == ATOMIC:
            self.carry[(case, check)] = {k: v for k, v in ns.items() if k not in self.reserved}
        if answer.variable not in ns:
            return {**reply, "status": "unassigned"}, {}
        # The inputs the cell changed in place (`dx = dy` then `dx *= ...` changes dy too)
        changed = sorted(k for k, copy in copies.items() if protocol.changed_in_place(copy, originals[k]))
        reply = {**reply, "changed": changed} if changed else reply
        return self.tensor_reply(reply, protocol.as_answer(ns[answer.variable], self.scalar(answer, case)))

    def scalar(self, answer, case: str) -> bool:
        """Whether the answer's gradient has no dimensions: that of a 0-d tensor of the forward pass."""
        value = self.cases[case]["values"].get(answer.source)
        return isinstance(value, torch.Tensor) and value.dim() == 0

    def encode(self, header: dict, tensors: dict) -> bytes:
        """safetensors sets attributes on ctypes types to write a tensor: audited steps of the child's own."""
        with self.quiet():
            return protocol.encode(header, tensors)

    # ------------------------------------------------------------------ the parent's messages
    def on_cells(self, header: dict, tensors: dict) -> None:
        """The submission's cells and the exercise they answer (resolved from what the fork server
        imported before it forked: nothing is read from disk)."""
        with self.quiet():
            self.exercise = load(header["exercise"])
        self.answers = self.exercise.by_grade_id
        self.reserved = {*self.exercise.given, *self.namespace()}
        self.cells = header["cells"]
        self.cell_timeout = float(header["cell_timeout"])
        self.announce_every = float(header["announce_every"])

    def on_case(self, header: dict, tensors: dict) -> None:
        self.cases[header["case"]] = {"sizes": header["sizes"], "values": tensors}

    def on_upstream(self, header: dict, tensors: dict) -> None:
        key = (header["case"], header["check"], *([header["answer"]] if "answer" in header else []))
        self.upstream.setdefault(key, {}).update(tensors)

    def on_run_many(self, header: dict, tensors: dict) -> None:
        replies, payload, size = [], {}, 0
        for index, (grade_id, case) in enumerate(header["requests"]):
            reply, answer = self.answer(grade_id, case, header["check"])
            if answer:
                tensor = answer["answer"]
                size += tensor.numel() * tensor.element_size()
                if size > protocol.MAX_ANSWER_BYTES // 2:
                    size -= tensor.numel() * tensor.element_size()
                    reply = {**reply, "status": "unsendable",
                             "error": f"a tensor of {tensor.numel()} elements is far larger than any gradient here"}
                else:
                    payload[f"answer{index}"] = tensor
            replies.append(reply)
        try:
            message = self.encode({"op": "answers", "answers": replies}, payload)
        except Exception:  # e.g. a dtype safetensors cannot carry: it spoils only its own answer
            for key in list(payload):
                try:
                    self.encode({}, {key: payload[key]})
                except Exception as exc:
                    index = int(key.removeprefix("answer"))
                    replies[index] = {**replies[index], "status": "unsendable", "error": str(exc)[:200]}
                    del payload[key]
            message = self.encode({"op": "answers", "answers": replies}, payload)
        protocol.send(self.wfd, message)

    def on_replay(self, header: dict, tensors: dict) -> None:
        """Atomic cells a child before this one ran (a later cell stopped it), run again for what they
        leave to the cells after them; their answers are already with the parent and go nowhere."""
        for grade_id, case, check in header["requests"]:
            self.answer(grade_id, case, check)
        protocol.write(self.wfd, {"op": "replayed"})

    def on_train(self, header: dict, tensors: dict) -> None:
        protocol.send(self.wfd, self.encode(*self.train(header["lr"], tensors)))

    def train(self, lr: float, tensors: dict) -> tuple[dict, dict]:
        """The whole-run check: SGD steps driven by the student's function, on the data the parent sent
        (each tensor stacked over the steps); the losses, the final parameters and the seconds per call
        go back for the parent to compare."""
        training, network = self.exercise.training, self.exercise.network
        function = training.function
        reply = {"op": "trained"}
        ns = self.namespace()
        failed = self.execute(function.cell, ns, "", training.grade_id)
        if failed:
            return {**reply, **failed}, {}
        if not callable(ns.get(function.name)):
            return {**reply, "status": "error", "error_type": "NameError", "line": None,
                    "error": f"the cell does not define a function {function.name}"}, {}
        params = {p: tensors[p] for p in network.parameters}
        data = {k: tensors[k] for k in network.data}
        losses, seconds = [], []
        with self.timer(function.cell) as run:
            for step in range(1, len(data[network.data[0]]) + 1):
                values = network.forward(params, {k: v[step - 1] for k, v in data.items()})
                arguments = function.call_arguments(values)
                started = time.perf_counter()
                grads = ns[function.name](*arguments)
                seconds.append(time.perf_counter() - started)
                losses.append(values[network.loss])
                if grads is None or (isinstance(grads, dict) and all(grads.get(p) is None for p in params)):
                    reply["status"] = "blank"
                    break
                bad = [p for p in params if not isinstance(grads, dict) or type(grads.get(p)) is not torch.Tensor
                       or grads[p].shape != params[p].shape]
                if bad:
                    reply.update(status="bad-step", step=step, parameter=bad[0])
                    break
                self.check_left(grads)
                params = {p: params[p] - lr * grads[p].detach().to(params[p].dtype) for p in params}
            else:
                reply["status"] = "tensor"
        if run.failed:
            return {**reply, **run.failed, **({"step": len(losses) + 1} if run.failed["status"] == "error" else {})}, {}
        self.check_left(ns)
        seconds.sort()
        reply["seconds_per_step"] = seconds[len(seconds) // 2] if seconds else None
        if reply["status"] != "tensor":
            return reply, {}
        return reply, {"losses": torch.stack(losses) if losses else torch.zeros(0), **params}

    def on_bye(self, header: dict, tensors: dict) -> None:
        protocol.write(self.wfd, {"op": "bye"})
        self.done = True

    OPS = {"cells": on_cells, "case": on_case, "upstream": on_upstream, "run_many": on_run_many,
           "replay": on_replay, "train": on_train, "bye": on_bye}

    def serve(self) -> None:
        """Everything from here on, the tensors read from the parent included, is made in inference mode."""
        with torch.inference_mode():
            while not self.done:
                try:
                    header, tensors = self.reader.read()
                except protocol.ProtocolError:
                    return
                op = self.OPS.get(header.get("op"))
                if op is not None:
                    op(self, header, tensors)


def main() -> None:
    rfd, wfd = _protocol_fds()

    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _on_alarm)
    autograd_watch.install()
    Session(rfd, wfd).serve()
