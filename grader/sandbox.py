"""The parent's side of a sandboxed run: start a child, feed it one submission's answer cells on
every configuration, and collect what each cell produced.

The order of requests is the guarantee that no answer can copy its reference: the LOCAL pass sends
only random upstream gradients; the CHAIN pass reveals a true gradient only after the child has sent
its own answer for it, and runs a fused answer just before its target is revealed.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import torch

from grader import protocol
from grader.exam import CHAIN, LOCAL, Case, checks
from grader.exercise import ANSWERS, ATOMIC, BY_GRADE_ID


@dataclass
class Outcome:
    """What one answer cell produced on one configuration and check; `tensor` only for status "tensor"."""

    status: str
    detail: dict = field(default_factory=dict)
    tensor: torch.Tensor | None = None


@dataclass
class Attempt:
    """Everything the child produced for one submission, keyed by (grade_id, check, case name)."""

    outcomes: dict[tuple[str, str, str], Outcome] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0


def _chain_schedule() -> list[str]:
    """Exercise 4 first (it reads no gradient), then exercise 1 in order, each fused answer placed just
    before the gradient it computes is revealed."""
    fused = {"d" + a.source: a.grade_id for a in ANSWERS if a.exercise in (2, 3)}
    order = [a.grade_id for a in ANSWERS if a.exercise == 4]
    for grade_id in ATOMIC:
        if grade_id in fused:
            order.append(fused[grade_id])
        order.append(grade_id)
    return order


CHAIN_SCHEDULE = _chain_schedule()
LOCAL_SCHEDULE = [a.grade_id for a in ANSWERS if LOCAL in checks(a)]


class Child:
    def __init__(self, timeout: float):
        self.workdir = tempfile.mkdtemp(prefix="bpn-child-")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.workdir, "TMPDIR": self.workdir,
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LANG": "C.UTF-8"}
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "grader.child"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=self.workdir, env=env, start_new_session=True,
        )
        self.reader = protocol.Reader(self.proc.stdout.fileno())
        self.deadline = time.monotonic() + timeout

    def send(self, header: dict, tensors: dict | None = None) -> None:
        try:
            protocol.write(self.proc.stdin.fileno(), header, tensors)
        except OSError as exc:
            raise protocol.ProtocolError(f"the child stopped reading ({exc.strerror})") from None

    def receive(self) -> tuple[dict, dict]:
        return self.reader.read(self.deadline)

    def close(self) -> None:
        """Kill the whole process group: whatever the student's code started dies with the child."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            stream.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _outcome(header: dict, tensors: dict) -> Outcome:
    status = header.get("status", "broken")
    detail = {k: v for k, v in header.items() if k not in ("op", "grade_id", "case", "check", "status")}
    tensor = tensors.get("answer") if status == "tensor" else None
    if status == "tensor" and tensor is None:
        status = "broken"
    return Outcome(status, detail, tensor)


def run(cells: dict[str, str], cases: list[Case], *, timeout: float, cell_timeout: float) -> Attempt:
    """Grade-free execution of one submission's answer cells in a fresh child process."""
    attempt = Attempt()
    started = time.monotonic()
    child = Child(timeout)
    try:
        child.send({"op": "cells", "cells": cells, "cell_timeout": cell_timeout})

        def ask(grade_id: str, case: Case, check: str) -> None:
            child.send({"op": "run", "grade_id": grade_id, "case": case.config.name, "check": check})
            header, tensors = child.receive()
            if (header.get("grade_id"), header.get("case"), header.get("check")) != (grade_id, case.config.name, check):
                raise protocol.ProtocolError("an answer arrived for a request that was not made")
            attempt.outcomes[(grade_id, check, case.config.name)] = _outcome(header, tensors)

        for case in cases:
            child.send({"op": "case", "case": case.config.name, "n": case.n}, case.student_view())
            child.send({"op": "upstream", "case": case.config.name, "check": LOCAL}, case.random_upstream)
            for grade_id in LOCAL_SCHEDULE:
                ask(grade_id, case, LOCAL)
        for case in cases:
            for grade_id in CHAIN_SCHEDULE:
                ask(grade_id, case, CHAIN)
                answer = BY_GRADE_ID[grade_id]
                if answer.exercise == 1:
                    reveal = {grade_id: case.truth[grade_id]}
                    child.send({"op": "upstream", "case": case.config.name, "check": CHAIN}, reveal)
        child.send({"op": "bye"})
        child.receive()
    except TimeoutError:
        attempt.error = f"stopped after the time limit of {timeout:g} s"
    except protocol.ProtocolError as exc:
        code = child.proc.poll()
        attempt.error = (f"the notebook's code ended the grading process (exit status {code})" if code is not None
                         else f"grading process failed: {exc}")
    finally:
        child.close()
        attempt.seconds = time.monotonic() - started
    return attempt
