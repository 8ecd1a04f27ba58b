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
import os
import signal
import sys
import time
import traceback


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
    from grader.sandbox import protocol
    from grader.sandbox.autograd_watch import AUTOGRAD_EVENT

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
        if event == AUTOGRAD_EVENT:
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
# correct answers), as (module, names imported from it).
HARMLESS_IMPORTS = {("torch", ()), ("torch", ("nn",)), ("torch.nn", ()), ("torch.nn", ("functional",)),
                    ("torch.nn.functional", ())}


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
    import torch

    values = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3)
    for value in (values, values.float(), values[0], values.sum(), values > 0, values.long()):
        str(value), repr(value), f"{value.sum():.3f}", value.tolist()
    str(values.shape), repr(values.dtype)


def main() -> None:
    rfd, wfd = _protocol_fds()

    import torch
    import torch.nn.functional as F

    from grader.sandbox import autograd_watch
    from grader.sandbox import protocol
    from grader.exercises.makemore_mlp.answers import ATOMIC, BY_GRADE_ID, EX4_CACHE, EX4_CELL, EX4_FUNCTION, EX4_TRAINING, FORWARD_NAMES
    from grader.exercises.makemore_mlp.model import PARAMETERS, forward

    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _on_alarm)
    autograd_watch.install()
    at, quiet, report = _audit(wfd)
    cell_builtins = {**vars(builtins), "__import__": _importer(builtins.__import__)}
    reader = protocol.Reader(rfd)
    reserved = set(FORWARD_NAMES) | {"torch", "F", "__builtins__"}
    cells: dict[str, str] = {}
    cell_timeout = 10.0
    announce_every = 0.0
    last_announced = -float("inf")
    clock = time.monotonic  # the cells' `time` is this module: one may replace its monotonic, not ours
    cases: dict[str, dict] = {}
    upstream: dict[tuple[str, str], dict] = {}
    carry: dict[tuple[str, str], dict] = {}
    backward_results: dict[str, tuple[dict, object]] = {}
    # Answer cells that ran past their time limit: never run again in this submission (exercise 4's
    # cell answers every ex4 grade id and the training check).
    timed_out: set[str] = set()

    compiled: dict[str, tuple[object, frozenset]] = {}

    def code_of(grade_id: str) -> tuple[object, frozenset]:
        """A cell compiled once (it runs on every case and check), with every global name it reads."""
        if grade_id not in compiled:
            with quiet():
                code = compile(cells[grade_id], f"<answer cell {grade_id}>", "exec")
            compiled[grade_id] = code, _names(code)
        return compiled[grade_id]

    def namespace() -> dict:
        return {"__builtins__": cell_builtins, "torch": torch, "F": F}

    def announce() -> None:
        """Tell the parent a cell starts, so that its clock allows it one cell's time limit from now: the
        in-child timer is Python's, and a cell can ignore or catch it. Only once `announce_every` has
        passed since the last announcement: the parent's deadline, one limit and its grace after that
        announcement, still lies a grace's half beyond this cell's limit, and a submission of quick
        cells sends almost none."""
        nonlocal last_announced
        now = clock()
        if now - last_announced < announce_every:
            return
        last_announced = now
        try:
            protocol.write(wfd, {"op": "started"})
        except OSError:
            pass  # the cell before closed the pipe: the parent sees a broken connection, blamed on the notebook

    def timed(grade_id: str, work) -> dict | None:
        """Run `work` (the cell's code) under the per-cell time limit and in inference mode, entered
        afresh for each cell; an error reply, or None when it finished."""
        cell = BY_GRADE_ID[grade_id].cell_id if grade_id in BY_GRADE_ID else grade_id
        if cell in timed_out:
            return {"status": "timeout", "seconds": cell_timeout}
        announce()
        signal.setitimer(signal.ITIMER_REAL, cell_timeout)
        try:
            with torch.inference_mode():
                work()
        except CellTimeout:
            timed_out.add(cell)
            return {"status": "timeout", "seconds": cell_timeout}
        except BaseException as exc:  # the student's exception is data to report, whatever it is
            return _error(grade_id, exc, quiet)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return None

    def execute(grade_id: str, ns: dict, case: str, check: str) -> dict | None:
        code = code_of(grade_id)[0]
        at(grade_id, case, check, code)
        return timed(grade_id, lambda: exec(code, ns))

    def check_left(ns: dict, names=None) -> None:
        """Autograd's leftovers among `names` of `ns` (all when None): those a cell may have assigned,
        not helper variables an earlier cell left behind (reported under that cell already)."""
        for found in autograd_watch.leftovers(ns if names is None else {k: ns[k] for k in names if k in ns}):
            report("autograd", found)

    def backward(case: str, check: str) -> tuple[dict, object]:
        """Exercise 4: call the student's manual_backward once per case; every parameter is read from it."""
        if case not in backward_results:
            ns = namespace()
            failed = execute(EX4_CELL, ns, case, check)
            grads = None
            if failed is None:
                values = cases[case]["values"]

                def call():
                    nonlocal grads
                    params = {p: values[p].clone() for p in PARAMETERS}
                    cache = {k: values[k].clone() for k in EX4_CACHE}
                    if not callable(ns.get(EX4_FUNCTION)):
                        raise NameError(f"the cell does not define a function {EX4_FUNCTION}")
                    grads = ns[EX4_FUNCTION](params, cache, values["Yb"].clone())
                    if grads is not None and not isinstance(grads, dict):
                        raise TypeError(f"{EX4_FUNCTION} returned a {type(grads).__name__}, not a dict")

                failed = timed(EX4_CELL, call)
            check_left(grads if isinstance(grads, dict) else {})
            backward_results[case] = (failed, grads)
        return backward_results[case]

    def train(header: dict, tensors: dict) -> tuple[dict, dict]:
        """Exercise 4's training check: SGD steps driven by the student's manual_backward; the losses,
        the final parameters and the seconds per backward go back for the parent to compare."""
        reply = {"op": "trained"}
        ns = namespace()
        failed = execute(EX4_CELL, ns, "", EX4_TRAINING)
        if failed:
            return {**reply, **failed}, {}
        if not callable(ns.get(EX4_FUNCTION)):
            return {**reply, "status": "error", "error_type": "NameError", "line": None,
                    "error": f"the cell does not define a function {EX4_FUNCTION}"}, {}
        params = {p: tensors[p] for p in PARAMETERS}
        losses, seconds = [], []

        def steps():
            nonlocal params
            for step, (Xb, Yb) in enumerate(zip(tensors["Xs"], tensors["Ys"]), start=1):
                values = forward(params, Xb, Yb)
                cache = {k: values[k].clone() for k in EX4_CACHE}
                started = time.perf_counter()
                grads = ns[EX4_FUNCTION]({k: v.clone() for k, v in params.items()}, cache, Yb.clone())
                seconds.append(time.perf_counter() - started)
                losses.append(values["loss"])
                if grads is None or (isinstance(grads, dict) and all(grads.get(p) is None for p in PARAMETERS)):
                    reply["status"] = "blank"
                    return
                bad = [p for p in PARAMETERS if not isinstance(grads, dict) or type(grads.get(p)) is not torch.Tensor
                       or grads[p].shape != params[p].shape]
                if bad:
                    reply.update(status="bad-step", step=step, parameter=bad[0])
                    return
                check_left(grads)
                params = {p: params[p] - header["lr"] * grads[p].detach().to(params[p].dtype) for p in PARAMETERS}
            reply["status"] = "tensor"

        failed = timed(EX4_CELL, steps)
        if failed:
            return {**reply, **failed, **({"step": len(losses) + 1} if failed["status"] == "error" else {})}, {}
        check_left(ns)
        seconds.sort()
        reply["seconds_per_step"] = seconds[len(seconds) // 2] if seconds else None
        if reply["status"] != "tensor":
            return reply, {}
        return reply, {"losses": torch.stack(losses) if losses else torch.zeros(0), **params}

    def tensor_reply(reply: dict, value) -> tuple[dict, dict]:
        if value is None:
            return {**reply, "status": "blank"}, {}
        if type(value) is not torch.Tensor:
            subclass = isinstance(value, torch.Tensor)
            return {**reply, "status": "subclass" if subclass else "not-tensor", "type": type(value).__name__}, {}
        if not value.is_inference():
            report("autograd", "the answer was computed outside inference mode")
        try:
            tensor = value.detach().to("cpu").contiguous()
            if tensor.layout != torch.strided or tensor.is_quantized:
                raise TypeError(f"layout {tensor.layout}")
            if tensor.numel() * tensor.element_size() > protocol.MAX_ANSWER_BYTES // 2:
                raise ValueError(f"a tensor of {tensor.numel()} elements is far larger than any gradient here")
        except Exception as exc:
            return {**reply, "status": "unsendable", "error": str(exc)[:200]}, {}
        return {**reply, "status": "tensor"}, {"answer": tensor}

    def run(grade_id: str, case: str, check: str) -> tuple[dict, dict]:
        answer = BY_GRADE_ID[grade_id]
        reply = {"grade_id": grade_id, "case": case, "check": check}
        if answer.cell_id not in cells:
            return {**reply, "status": "missing"}, {}
        if answer.exercise == 4:
            failed, grads = backward(case, check)
            if failed:
                return {**reply, **failed}, {}
            at(EX4_CELL, case, check)
            return tensor_reply(reply, None if grads is None else grads.get(answer.variable))
        at(grade_id, case, check)
        failed = timed(grade_id, lambda: code_of(grade_id))
        if failed:
            return {**reply, **failed}, {}
        # Inputs the cell reads are copies, so that an in-place edit cannot change what later cells
        # see; the others cannot be reached without naming them (eval, exec and globals() are refused).
        reads = code_of(grade_id)[1]
        ns = {**namespace(), "n": cases[case]["n"]}
        if answer.exercise == 1:
            ns.update(carry.get((case, check), {}))
        ns.update({k: v.clone() if k in reads else v for k, v in cases[case]["values"].items()})
        given = upstream.get((case, check), {})
        ns.update({g: given[g].clone() if g in reads else given[g] for g in answer.upstream if g in given})
        if answer.exercise != 1:
            for g in ATOMIC:
                if g not in answer.upstream:
                    ns.pop(g, None)
        failed = execute(grade_id, ns, case, check)
        check_left(ns, reads)
        if failed:
            return {**reply, **failed}, {}
        if answer.exercise == 1:
            carry[(case, check)] = {k: v for k, v in ns.items() if k not in reserved}
        if answer.variable not in ns:
            return {**reply, "status": "unassigned"}, {}
        return tensor_reply(reply, ns[answer.variable])

    def encode(header: dict, tensors: dict) -> bytes:
        """safetensors sets attributes on ctypes types to write a tensor: audited steps of the child's own."""
        with quiet():
            return protocol.encode(header, tensors)

    def answers(header: dict) -> bytes:
        replies, payload, size = [], {}, 0
        for index, (grade_id, case) in enumerate(header["requests"]):
            reply, answer = run(grade_id, case, header["check"])
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
            return encode({"op": "answers", "answers": replies}, payload)
        except Exception:  # e.g. a dtype safetensors cannot carry: it spoils only its own answer
            for key in list(payload):
                try:
                    encode({}, {key: payload[key]})
                except Exception as exc:
                    index = int(key.removeprefix("answer"))
                    replies[index] = {**replies[index], "status": "unsendable", "error": str(exc)[:200]}
                    del payload[key]
            return encode({"op": "answers", "answers": replies}, payload)

    # Everything from here on, the tensors read from the parent included, is made in inference mode.
    with torch.inference_mode():
        while True:
            try:
                header, tensors = reader.read()
            except protocol.ProtocolError:
                return
            op = header.get("op")
            if op == "cells":
                cells = header["cells"]
                cell_timeout = float(header["cell_timeout"])
                announce_every = float(header["announce_every"])
            elif op == "case":
                cases[header["case"]] = {"n": header["n"], "values": tensors}
            elif op == "upstream":
                upstream.setdefault((header["case"], header["check"]), {}).update(tensors)
            elif op == "run_many":
                protocol.send(wfd, answers(header))
            elif op == "train":
                protocol.send(wfd, encode(*train(header, tensors)))
            elif op == "bye":
                protocol.write(wfd, {"op": "bye"})
                return
