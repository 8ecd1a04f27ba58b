"""The only place student code runs: a child process that executes answer cells on request and sends
back what each one assigned.

It holds no reference gradient until its own answer for that gradient has been sent (the parent
reveals true upstream values one by one), it compares nothing and scores nothing, and whatever the
student's code prints goes nowhere: the parent reads only protocol messages.
"""
from __future__ import annotations

import builtins
import os
import signal
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


def _error(grade_id: str, exc: BaseException) -> dict:
    filename = f"<answer cell {grade_id}>"
    line = None
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == filename:
            line = frame.lineno
            break
    error = {"status": "error", "error_type": type(exc).__name__, "error": str(exc)[:500], "line": line}
    if isinstance(exc, MemoryError) or any(m in str(exc) for m in OUT_OF_MEMORY):
        error["limit"] = "memory"  # the address-space limit stopped it: an instructor should know
    return error


def main() -> None:
    rfd, wfd = _protocol_fds()

    import torch
    import torch.nn.functional as F

    from grader import protocol
    from grader.autograd_watch import Watch
    from grader.exercise import ATOMIC, BY_GRADE_ID, EX4_CACHE, EX4_FUNCTION, FORWARD_NAMES
    from grader.model import PARAMETERS, forward

    torch.set_num_threads(1)
    watch = Watch().install()
    signal.signal(signal.SIGALRM, _on_alarm)
    reader = protocol.Reader(rfd)
    reserved = set(FORWARD_NAMES) | {"torch", "F", "__builtins__"}
    cells: dict[str, str] = {}
    cell_timeout = 10.0
    cases: dict[str, dict] = {}
    upstream: dict[tuple[str, str], dict] = {}
    carry: dict[tuple[str, str], dict] = {}
    backward_results: dict[str, tuple[dict, object]] = {}

    compiled: dict[str, tuple[object, frozenset]] = {}

    def code_of(grade_id: str) -> tuple[object, frozenset]:
        """A cell compiled once (it runs on every case and check), with every global name it reads."""
        if grade_id not in compiled:
            code = compile(cells[grade_id], f"<answer cell {grade_id}>", "exec")
            compiled[grade_id] = code, _names(code)
        return compiled[grade_id]

    def execute(grade_id: str, ns: dict) -> dict | None:
        """Run one cell under the per-cell time limit; an error reply, or None when it finished."""
        return timed(grade_id, lambda: exec(code_of(grade_id)[0], ns))

    def timed(grade_id: str, work) -> dict | None:
        signal.setitimer(signal.ITIMER_REAL, cell_timeout)
        try:
            work()
        except CellTimeout:
            return {"status": "timeout", "seconds": cell_timeout}
        except BaseException as exc:  # the student's exception is data to report, whatever it is
            return _error(grade_id, exc)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return None

    def backward(case: str) -> tuple[dict, object]:
        """Exercise 4: call the student's manual_backward once per case; every parameter is read from it."""
        if case not in backward_results:
            ns = {"__builtins__": builtins, "torch": torch, "F": F}
            failed = execute("ex4_backward", ns)
            grads = None
            if failed is None:
                values = cases[case]["values"]
                params = {p: values[p].clone() for p in PARAMETERS}
                cache = {k: values[k].clone() for k in EX4_CACHE}
                signal.setitimer(signal.ITIMER_REAL, cell_timeout)
                try:
                    if not callable(ns.get(EX4_FUNCTION)):
                        raise NameError(f"the cell does not define a function {EX4_FUNCTION}")
                    grads = ns[EX4_FUNCTION](params, cache, values["Yb"].clone())
                    if grads is not None and not isinstance(grads, dict):
                        raise TypeError(f"{EX4_FUNCTION} returned a {type(grads).__name__}, not a dict")
                except CellTimeout:
                    failed = {"status": "timeout", "seconds": cell_timeout}
                except BaseException as exc:
                    failed = _error("ex4_backward", exc)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            evidence = watch.take(grads if isinstance(grads, dict) else {})
            if evidence and failed is None:
                failed = {"status": "autograd", "evidence": evidence}
            backward_results[case] = (failed, grads)
        return backward_results[case]

    def train(header: dict, tensors: dict) -> tuple[dict, dict]:
        """Exercise 4's training check: SGD steps driven by the student's manual_backward; the losses,
        the final parameters and the seconds per backward go back for the parent to compare."""
        reply = {"op": "trained"}
        ns = {"__builtins__": builtins, "torch": torch, "F": F}
        failed = execute("ex4_backward", ns)
        if failed:
            return {**reply, **failed}, {}
        if not callable(ns.get(EX4_FUNCTION)):
            return {**reply, "status": "error", "error_type": "NameError", "line": None,
                    "error": f"the cell does not define a function {EX4_FUNCTION}"}, {}
        params = {p: tensors[p] for p in PARAMETERS}
        losses, seconds = [], []
        signal.setitimer(signal.ITIMER_REAL, cell_timeout)
        try:
            for step, (Xb, Yb) in enumerate(zip(tensors["Xs"], tensors["Ys"]), start=1):
                values = forward(params, Xb, Yb)
                cache = {k: values[k].clone() for k in EX4_CACHE}
                started = time.perf_counter()
                grads = ns[EX4_FUNCTION]({k: v.clone() for k, v in params.items()}, cache, Yb.clone())
                seconds.append(time.perf_counter() - started)
                losses.append(values["loss"])
                if grads is None or (isinstance(grads, dict) and all(grads.get(p) is None for p in PARAMETERS)):
                    reply["status"] = "blank"
                    break
                bad = [p for p in PARAMETERS if not isinstance(grads, dict) or type(grads.get(p)) is not torch.Tensor
                       or grads[p].shape != params[p].shape]
                if bad:
                    reply.update(status="bad-step", step=step, parameter=bad[0])
                    break
                params = {p: params[p] - header["lr"] * grads[p].detach().to(params[p].dtype) for p in PARAMETERS}
            else:
                reply["status"] = "tensor"
        except CellTimeout:
            return {**reply, "status": "timeout", "seconds": cell_timeout}, {}
        except BaseException as exc:
            return {**reply, **_error("ex4_backward", exc), "step": len(losses) + 1}, {}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        evidence = watch.take(ns)
        if evidence:
            return {**reply, "status": "autograd", "evidence": evidence}, {}
        seconds.sort()
        reply["seconds_per_step"] = seconds[len(seconds) // 2] if seconds else None
        return reply, {"losses": torch.stack(losses) if losses else torch.zeros(0), **params}

    def tensor_reply(reply: dict, value) -> tuple[dict, dict]:
        if value is None:
            return {**reply, "status": "blank"}, {}
        if type(value) is not torch.Tensor:
            subclass = isinstance(value, torch.Tensor)
            return {**reply, "status": "subclass" if subclass else "not-tensor", "type": type(value).__name__}, {}
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
            failed, grads = backward(case)
            if failed:
                return {**reply, **failed}, {}
            return tensor_reply(reply, None if grads is None else grads.get(answer.variable))
        failed = timed(grade_id, lambda: code_of(grade_id))
        if failed:
            return {**reply, **failed}, {}
        # Inputs the cell reads are copies, so that an in-place edit cannot change what later cells
        # see; the others cannot be reached without naming them (eval, exec and globals() are refused).
        reads = code_of(grade_id)[1]
        ns = {"__builtins__": builtins, "torch": torch, "F": F, "n": cases[case]["n"]}
        if answer.exercise == 1:
            ns.update(carry.get((case, check), {}))
        ns.update({k: v.clone() if k in reads else v for k, v in cases[case]["values"].items()})
        given = upstream.get((case, check), {})
        ns.update({g: given[g].clone() if g in reads else given[g] for g in answer.upstream if g in given})
        if answer.exercise != 1:
            for g in ATOMIC:
                if g not in answer.upstream:
                    ns.pop(g, None)
        failed = execute(grade_id, ns)
        evidence = watch.take(ns)
        if failed:
            return {**reply, **failed}, {}
        if evidence:
            return {**reply, "status": "autograd", "evidence": evidence}, {}
        if answer.exercise == 1:
            carry[(case, check)] = {k: v for k, v in ns.items() if k not in reserved}
        if answer.variable not in ns:
            return {**reply, "status": "unassigned"}, {}
        return tensor_reply(reply, ns[answer.variable])

    while True:
        try:
            header, tensors = reader.read()
        except protocol.ProtocolError:
            return
        op = header.get("op")
        if op == "cells":
            cells = header["cells"]
            cell_timeout = float(header["cell_timeout"])
        elif op == "case":
            cases[header["case"]] = {"n": header["n"], "values": tensors}
        elif op == "upstream":
            upstream.setdefault((header["case"], header["check"]), {}).update(tensors)
        elif op == "run_many":
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
                message = protocol.encode({"op": "answers", "answers": replies}, payload)
            except Exception:  # e.g. a dtype safetensors cannot carry: it spoils only its own answer
                for key in list(payload):
                    try:
                        protocol.encode({}, {key: payload[key]})
                    except Exception as exc:
                        index = int(key.removeprefix("answer"))
                        replies[index] = {**replies[index], "status": "unsendable", "error": str(exc)[:200]}
                        del payload[key]
                message = protocol.encode({"op": "answers", "answers": replies}, payload)
            protocol.send(wfd, message)
        elif op == "train":
            reply, payload = train(header, tensors)
            protocol.write(wfd, reply, payload)
        elif op == "bye":
            protocol.write(wfd, {"op": "bye"})
            return
