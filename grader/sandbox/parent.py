"""The parent's side of a sandboxed run: start a child, feed it one submission's answer cells on
every configuration, and collect what each cell produced.

The order of requests is the guarantee that no answer can copy its reference: the LOCAL pass sends
only random upstream gradients; the CHAIN pass reveals a true gradient only after the child has sent
its own answer for it on every configuration, and runs a fused answer just before its target is
revealed.
"""
from __future__ import annotations

import functools
import itertools
import math
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch

from grader.exercise import ATOMIC, CHAIN, FUNCTION, LOCAL, Exercise
from grader.limits import Limits
from grader.sandbox import protocol, zygote
from grader.vocabulary import Status


@dataclass
class Outcome:
    """What one answer cell produced on one configuration and check; `tensor` only for status "tensor"
    (for the training check: the losses, with the final parameters in `extra`)."""

    status: str
    detail: dict = field(default_factory=dict)
    tensor: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)
    # For an outcome the child's audit hook reported ("autograd", "forbidden-call"): what the cell itself
    # answered, kept for an instructor's diagnosis and never scored.
    answered: Outcome | None = None


@dataclass
class Attempt:
    """Everything the child produced for one submission, keyed by (grade_id, check, case name)."""

    outcomes: dict[tuple[str, str, str], Outcome] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0
    isolation: dict = field(default_factory=dict)


class SandboxUnavailable(RuntimeError):
    """The sandbox could not start, or lacks a required wall: an environment error that stops the
    batch, never a student's result. The message is one line that says why."""


# Beyond the in-child cell timer, before the parent stops waiting for a cell.
GRACE_SECONDS = 5.0
# How often at most a child announces that a cell starts: half the grace, so the parent's deadline for a
# cell, counted from the last announcement, lies at least the other half beyond the cell's own limit.
ANNOUNCE_EVERY = GRACE_SECONDS / 2
# A child reports its walls within milliseconds of its fork; one that has not in this long never will.
START_SECONDS = 30.0
UID_BASE = 1_000_000_000
# An answer with more elements than this many times its gradient's, or than the largest forward tensor's
# (an unsummed broadcast dimension has that tensor's shape: layer norm's (n, 1) statistics left unsummed
# over up to 71 hidden units), is not kept: a wrong shape worth diagnosing stays well below it; a flood
# does not.
OVERSIZE = 64
# What a child may report beside a status; anything else in its reply is dropped.
DETAIL_KEYS = ("error_type", "error", "line", "seconds", "evidence", "type", "step", "parameter",
               "seconds_per_step", "limit")
DETAIL_CHARS = 1000
CGROUP_ROOT = Path("/sys/fs/cgroup")
# The memory cgroup's limit stands above the data limit (which stops an allocation with an error the
# student sees) by this much: it catches what the data limit does not count (page tables, kernel
# memory), by killing the child.
MEMORY_HEADROOM_MB = 256
# How a cell can stop its child, as the student's feedback says it (Status.CRASHED): fixed texts, so that
# no number the student's code chose (an exit status, a signal) says anything of a hidden configuration.
CRASHES = {
    "exit": "it ended the process", "kill": "it was killed", "crash": "it crashed",
    "cpu": "it ran past the CPU-time limit", "file-size": "it wrote past the file-size limit",
    "syscall": "it made a system call the sandbox kills for", "signal": "it was stopped by a signal",
    "connection": "it broke the grading process's connection",
}
SIGNALS = {
    signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file-size", signal.SIGKILL: "kill", signal.SIGSYS: "syscall",
    **dict.fromkeys((signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT), "crash"),
}
# What a child may report of a request: the vocabulary's statuses but the parent's own.
CHILD_STATUSES = frozenset(Status) - {Status.CRASHED}


class CellOverrun(Exception):
    """An answer cell neither finished nor stopped at its time limit."""


@dataclass(frozen=True)
class Schedule:
    """The order one exercise's requests go to the child in. `local`: the LOCAL pass, whose upstream
    gradients are random and sent before it. `at_once`: the function answers, which read no gradient,
    in one exchange. `one_by_one`: the rest of the CHAIN pass, one grade id on every case at a time,
    each true gradient revealed after it (Exercise.chain_schedule)."""

    local: tuple[str, ...]
    at_once: tuple[str, ...]
    one_by_one: tuple[str, ...]

    @classmethod
    def of(cls, exercise: Exercise) -> Schedule:
        at_once = tuple(a.grade_id for a in exercise.answers if a.kind == FUNCTION)
        return cls(tuple(exercise.local_schedule()), at_once,
                   tuple(g for g in exercise.chain_schedule() if g not in at_once))


def checkout() -> Path | None:
    """The source checkout the grader runs from (an editable install), which holds solutions/ and the
    tests: hidden from the child, the package inside it excepted. None for an installed package."""
    import grader

    root = Path(grader.__file__).resolve().parent.parent
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return None if any(root == p or p in root.parents for p in prefixes) else root


def _exposed() -> list[str]:
    """What the child must still read inside hidden folders: Python itself and the grader package."""
    import grader

    paths = {sys.base_prefix, sys.prefix, sys.exec_prefix, str(Path(grader.__file__).parent)}
    return sorted({os.path.realpath(p) for p in paths})


def _cgroups(limits: Limits) -> list[tuple[Path, str]]:
    """A pids cgroup and a memory cgroup of the child's own (cgroup v1; root only), so a fork bomb is
    capped even without seccomp, memory holds for every process and thread of the child together, and
    every process can be found and killed. Each as (folder, the limit it holds)."""
    made = []
    name = f"backprop-ninja/{uuid.uuid4().hex}"
    for controller, key, value in (("pids", "pids.max", limits.processes),
                                   ("memory", "memory.limit_in_bytes",
                                    (limits.memory_mb + MEMORY_HEADROOM_MB) * 2**20)):
        path = CGROUP_ROOT / controller / name
        try:
            path.mkdir(parents=True)
        except OSError:
            continue
        try:
            (path / key).write_text(str(value))
        except OSError:
            path.rmdir()
            continue
        made.append((path, f"{key}={value}"))
    return made


def _pidfd(pid: int) -> int | None:
    """A handle on the process itself (Linux 5.3+), taken while the fork server still holds it unreaped."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


_uids = itertools.count()


def _uid() -> int:
    """A uid no account and no other child of any grader on this machine uses at the same time: children
    running side by side cannot signal or read one another."""
    return UID_BASE + ((os.getpid() & 0xFFFF) << 12) + (next(_uids) & 0xFFF)


_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _encoded(owner, header: dict, tensors: dict | None) -> bytes:
    messages = _cache.setdefault(owner, {})
    key = (repr(header), tuple(tensors or ()))  # a header built in another order only misses the cache
    if key not in messages:
        messages[key] = protocol.encode(header, tensors)
    return messages[key]


class Child:
    def __init__(self, limits: Limits, exercise: str | None = None, deadline: float | None = None):
        """`exercise`: the spec string of the exercise the child will grade, which the fork server
        imports before it forks (a child can import nothing). `deadline`: the submission's, which every
        child of one submission shares (by default the time limit for a whole submission from now)."""
        self.workdir = tempfile.mkdtemp(prefix="bpn-child-")
        self.cgroups: list[Path] = []
        self.pid = None
        self.pidfd = None
        self.streams = []
        self.outgoing: list[bytes] = []
        try:
            self._start(limits, exercise, deadline)
        except BaseException:
            self.close()
            raise

    def _start(self, limits: Limits, exercise: str | None, deadline: float | None) -> None:
        uid = _uid()
        if os.getuid() == 0:
            os.chown(self.workdir, uid, uid)
        cgroups = _cgroups(limits)
        self.cgroups = [path for path, _ in cgroups]
        config = {
            "workdir": self.workdir, "uid": uid, "cgroups": [str(p) for p in self.cgroups],
            "cgroup_limits": [text for _, text in cgroups],
            "hide": sorted({os.path.realpath(p) for p in limits.hide}), "expose": _exposed(),
            "memory_mb": limits.memory_mb, "file_size_mb": limits.file_size_mb, "processes": limits.processes,
            "cpu_seconds": int(limits.timeout) + 5, "require": list(limits.require),
        }
        env = {**zygote.ENV, "HOME": self.workdir, "TMPDIR": self.workdir, "MPLCONFIGDIR": self.workdir}
        child_in, self.stdin = os.pipe()
        self.stdout, child_out = os.pipe()
        self.streams = [self.stdin, self.stdout]
        try:
            self.deadline = time.monotonic() + limits.timeout if deadline is None else deadline
            self.pid = zygote.server.spawn(config, env, child_in, child_out, exercise)
            self.pidfd = _pidfd(self.pid)
            if self.pidfd is not None:
                self.streams.append(self.pidfd)
        except (zygote.ServerGone, zygote.Refused) as exc:
            raise SandboxUnavailable(f"the sandbox cannot start: {exc}") from None
        finally:
            os.close(child_in)
            os.close(child_out)
        self.reader = protocol.Reader(self.stdout, max_payload=protocol.MAX_ANSWER_BYTES)
        # No student code has run yet: whatever goes wrong until the report arrives is the environment's.
        try:
            header, _ = self.receive(time.monotonic() + START_SECONDS)
        except (protocol.ProtocolError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError) and deadline is not None and time.monotonic() >= self.deadline:
                raise  # the submission's earlier children spent its time, not the sandbox
            # A first child (a preflight, a submission's first) that does not report in time is a machine too
            # busy to start it: the environment's fault, never the submission's time limit.
            raise SandboxUnavailable(f"the sandbox did not start: {self._ended(exc)}") from None
        isolation = header.get("isolation") if header.get("op") == "isolation" else None
        if not isinstance(isolation, dict):
            raise SandboxUnavailable("the sandbox did not start: its first message was not its isolation report")
        if "refused" in isolation:
            raise SandboxUnavailable(str(isolation["refused"]))
        self.isolation = isolation

    def _ended(self, exc: Exception) -> str:
        """How a child that never reported ended, as far as the fork server saw it."""
        try:
            status = zygote.server.status(self.pid)
        except zygote.ServerGone:
            return f"{exc}, and the fork server is gone"
        if "exited" in status:
            return f"it exited with status {status['code']}"
        if "killed" in status:
            return f"it was killed by signal {signal.Signals(status['signal']).name}"
        return str(exc)

    def send(self, header: dict, tensors: dict | None = None, *, same_for=None, wait: bool = False) -> None:
        """With `same_for` (a case, say), the message is encoded once and its bytes reused for every
        submission: what a case sends is the same for all of them. With `wait`, it goes out with the
        next message sent without: one write, one wake-up of the child."""
        self.outgoing.append(_encoded(same_for, header, tensors) if same_for is not None
                             else protocol.encode(header, tensors))
        if wait:
            return
        message = b"".join(self.outgoing)
        self.outgoing = []
        try:
            protocol.send(self.stdin, message)
        except OSError as exc:
            raise protocol.ProtocolError(f"the child stopped reading ({exc.strerror})") from None

    def receive(self, deadline: float | None = None) -> tuple[dict, dict]:
        return self.reader.read(min(self.deadline, deadline or self.deadline))

    def ended(self, exc: Exception) -> str:
        """How the child that broke the connection ended, as a key of CRASHES, "memory", or "server" when
        the fork server died (the environment's fault, not the cell's). Its end of the
        pipe closes a moment before the exit status exists, so wait for it (the fork server does not reap
        the child until close() has killed its process group, so its pid stays ours). Only student code
        runs in the child, so a child that broke the protocol and lives on was broken by it too."""
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                status = zygote.server.status(self.pid)
            except zygote.ServerGone:
                return "server"  # the child's end is unknown: the fork server died under it
            if "exited" in status:
                return "exit"
            if "killed" in status:
                if status["signal"] == signal.SIGKILL and self._memory_kills():
                    return "memory"
                return SIGNALS.get(status["signal"], "signal")
            time.sleep(0.01)
        return "connection"

    def _memory_kills(self) -> int:
        """How many processes the child's memory cgroup killed at its limit (cgroup v1's oom_kill count)."""
        for cgroup in self.cgroups:
            try:
                for line in (cgroup / "memory.oom_control").read_text().splitlines():
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
            except (OSError, ValueError):
                continue
        return 0

    def _unreaped(self) -> bool:
        """Kill the child itself through its pidfd, which a reused pid cannot fool; False when it is
        gone, reaped, and its pid free for anyone."""
        if self.pidfd is None:
            return True
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            return False
        except OSError:
            pass  # not ours to signal this way: the group kill says the rest
        return True

    def close(self) -> None:
        """Kill the whole process group, then every process left in the child's cgroup (one that left
        the group with setsid(), say): nothing the student's code started outlives the submission.

        The group is killed before the fork server reaps the child: until then no new process can get
        its pid, so the kill cannot reach another submission's child. If the server died, init may have
        reaped the child already and its pid may name another process: then only the cgroup is killed."""
        if self.pid is not None and self._unreaped():
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for cgroup in self.cgroups:
            for _ in range(1000):
                try:
                    pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.002)
            try:
                cgroup.rmdir()
            except OSError:
                pass
        if self.pid is not None:
            try:
                zygote.server.reap(self.pid)
            except zygote.ServerGone:
                pass  # nothing left to reap: the child and its cgroup were killed above
        for fd in self.streams:
            os.close(fd)
        self.streams = []
        shutil.rmtree(self.workdir, ignore_errors=True)


def preflight(limits: Limits, exercise: str | None = None) -> dict:
    """Start one child, read its isolation report and stop it, before any student code runs: a batch
    whose sandbox cannot start, lacks a required wall or cannot load its exercise stops here
    (SandboxUnavailable)."""
    child = Child(limits, exercise)
    child.close()
    return child.isolation


def _detail(header: dict) -> dict:
    """What a child reports beside a status, each text cut to DETAIL_CHARS: the child cuts its own
    messages shorter, and a child that does not (its Python-level code bypassed) must not make every later
    step, masking, feedback, pages and the results file, work through a megabyte per answer."""
    return {k: header[k][:DETAIL_CHARS] if isinstance(header[k], str) else header[k]
            for k in DETAIL_KEYS if k in header}


def _evidence(header: dict, exercise: Exercise,
              training) -> list[tuple[tuple[str, str, str], str, str]]:
    """The outcomes a child's evidence message names, with its kind ("autograd" or "forbidden-call") and
    text. The child names the cell it ran (a function's cell answers several grade ids, and its
    training run the training check); a message naming nothing known names nothing."""
    cell, case, check = (str(header.get(k, ""))[:100] for k in ("grade_id", "case", "check"))
    kind = "autograd" if header.get("kind") == "autograd" else "forbidden-call"
    text = str(header.get("evidence", ""))[:300]
    if exercise.training is not None and check == exercise.training.grade_id:
        keys = [(check, CHAIN, training.config.name)] if training is not None else []
    else:
        keys = [(a.grade_id, check, case) for a in exercise.answers if a.cell_id == cell]
    return [(key, kind, text) for key in keys]


def _flagged(evidence: list[tuple[str, str]], answered: Outcome | None) -> Outcome:
    """The outcome of a run with evidence of what no answer needs, whatever the cell produced:
    "autograd" when it shows autograd (whatever else it shows: torch.func loads modules on first use),
    else "forbidden-call"."""
    kinds = {kind for kind, _ in evidence}
    texts = list(dict.fromkeys(text for _, text in evidence))
    return Outcome("autograd" if "autograd" in kinds else "forbidden-call", {"evidence": texts[:8]},
                   answered=answered)


def _timing(reported, bound: float) -> float | None:
    """The child's median time per training step, as a measurement and nothing more: the child says what
    it likes, so a number it chose (a hidden size, say) would reach the results. Kept only as a finite
    number no larger than the time the run really took here per step, to two significant digits."""
    if type(reported) not in (int, float) or not math.isfinite(reported) or reported < 0:
        return None
    value = min(float(reported), bound)
    return float(f"{value:.2g}")


def _outcome(header: dict, tensors: dict, names: frozenset[str] = frozenset()) -> Outcome:
    """What a child reported for one request. Its status is one of the vocabulary's that a child may say
    (CRASHED is the parent's alone): anything else it sends is a broken answer. The inputs it says the
    cell changed in place are kept only as names of the exercise's own (`names`), never its words."""
    status = header.get("status", Status.BROKEN)
    detail = _detail(header)
    changed = header.get("changed")
    if isinstance(changed, list) and changed and all(isinstance(n, str) and n in names for n in changed):
        detail["changed"] = sorted(set(changed))[:8]
    tensor = tensors.get("answer") if status == Status.TENSOR else None
    if status not in CHILD_STATUSES or (status == Status.TENSOR and tensor is None):
        status = Status.BROKEN
    return Outcome(status, detail, tensor)


class _Stopped(Exception):
    """The child running an exchange neither answered in time nor lived on: `outcome` is what each cell of
    that exchange is recorded as, when it ran alone."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.status)
        self.outcome = outcome


class _Submission:
    """One submission's cells, run on every case: the exchanges of `Schedule`, each with the child it
    runs in. A cell that stops its child (past its limit and deaf to its timer, or ending the process)
    costs that cell alone: a fresh child with the same walls takes over with what the last one held (the
    cases, the random upstream gradients, every true gradient revealed so far, and what the atomic cells
    already run left behind for the next ones, by running them again and dropping their answers), and
    the cell is skipped from then on. Every child of a submission shares one deadline, the time limit
    for a whole submission: however many cells hang, the submission costs that limit at most."""

    def __init__(self, cells: dict[str, str], cases: list, limits: Limits, training, attempt: Attempt):
        self.cells, self.cases, self.limits, self.training = cells, cases, limits, training
        self.exercise, self.spec = cases[0].exercise, cases[0].config.exercise
        self.answers = self.exercise.by_grade_id
        self.attempt = attempt
        self.deadline = time.monotonic() + limits.timeout
        self.child: Child | None = None
        self.evidence: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
        self.state: list[tuple[dict, dict, object]] = []  # what every child must hold: (header, tensors, same_for)
        self.ran: list[tuple[str, str, str]] = []  # the atomic requests answered so far: (grade_id, case, check)
        self.skipped: dict[str, Outcome] = {}  # cell -> what each of its requests is recorded as

    # ------------------------------------------------------------------ children
    def start(self) -> None:
        """A child with every wall, holding what the last one held; the atomic cells already run are run
        again in it, their answers dropped, so that what they left for later cells is there. A cell that
        stops the child there (it behaved the first time) is skipped too, and the next child does without
        what it left."""
        while True:
            self.close()
            self.child = Child(self.limits, self.spec, deadline=self.deadline)
            self.attempt.isolation = self.child.isolation
            cells = {cell: source for cell, source in self.cells.items() if cell not in self.skipped}
            self.child.send({"op": "cells", "exercise": self.spec, "cells": cells,
                             "cell_timeout": self.limits.cell_timeout, "announce_every": ANNOUNCE_EVERY}, wait=True)
            for header, tensors, same_for in self.state:
                self.child.send(header, tensors, same_for=same_for, wait=True)
            replay = [request for request in self.ran if request[0] not in self.skipped]
            if not replay:
                return
            try:
                self.child.send({"op": "replay", "requests": [list(r) for r in replay]})
                header, _ = self.receive("(cells run again)")
                if header.get("op") == "replayed":
                    return
                raise protocol.ProtocolError("a replay was answered with something else")
            except (CellOverrun, protocol.ProtocolError):
                self.ran = []

    def close(self) -> None:
        if self.child is not None:
            self.child.close()
            self.child = None

    def hold(self, header: dict, tensors: dict, same_for) -> None:
        """A message that sets what the child holds (a case, upstream gradients): for this child and any
        that takes over."""
        self.state.append((header, tensors, same_for))
        self.child.send(header, tensors, same_for=same_for, wait=True)

    def stopped(self, exc: Exception, retried: bool) -> Outcome | None:
        """What stopped the child, said in the vocabulary's fixed words: nothing the child chose (an exit
        status, a signal number) reaches the student. The memory cgroup's count of kills tells a memory
        kill from another SIGKILL. None when the fork server died under the child: the exchange runs
        again in a fresh child, once; a second time the sandbox itself is failing, which stops the batch
        (SandboxUnavailable), never a student's 0."""
        if isinstance(exc, CellOverrun):
            return Outcome(Status.TIMEOUT, {"seconds": self.limits.cell_timeout})
        ended = self.child.ended(exc)
        if ended == "server":
            if retried:
                raise SandboxUnavailable("the sandbox's fork server died twice while one exchange ran")
            return None
        if ended == "memory":
            return Outcome(Status.ERROR, {"error_type": "MemoryError", "line": None, "limit": "memory",
                                          "error": "the grading process was killed at the sandbox's memory limit"})
        return Outcome(Status.CRASHED, {"crash": CRASHES[ended]})

    def receive(self, label: str) -> tuple[dict, dict]:
        """The child's next message, within one cell's limit plus a grace the in-child timer should never
        need, counted afresh whenever the child announces that a cell starts (it does so at least every
        ANNOUNCE_EVERY, see grader.sandbox.child): a cell that ignores or catches its timer is stopped from
        here one limit after it started, however many cells the request holds. Announcements come from the
        process that runs student code, so a cell can fake them: that gains it no more than the time limit
        for a whole submission, which `child.receive` holds whatever arrives. Evidence the child's audit
        hook sends while a cell runs is kept on the way."""
        cell_deadline = time.monotonic() + self.limits.cell_timeout + GRACE_SECONDS
        while True:
            try:
                header, tensors = self.child.receive(cell_deadline)
            except TimeoutError:
                if cell_deadline < self.deadline:
                    raise CellOverrun(label) from None
                raise
            op = header.get("op")
            if op == "started":
                cell_deadline = time.monotonic() + self.limits.cell_timeout + GRACE_SECONDS
            elif op == "evidence":
                for key, kind, text in _evidence(header, self.exercise, self.training):
                    self.evidence.setdefault(key, []).append((kind, text))
            else:
                return header, tensors

    # ------------------------------------------------------------------ answers
    def cell(self, grade_id: str) -> str:
        return self.answers[grade_id].cell_id

    def keep(self, grade_id: str, case, check: str, outcome: Outcome) -> None:
        expected = case.expected(self.answers[grade_id], CHAIN).numel()
        if outcome.tensor is not None and outcome.tensor.numel() > OVERSIZE * max(expected, _largest(case), 1):
            outcome = Outcome(Status.UNSENDABLE, {"error": f"{outcome.tensor.numel()} elements, where the gradient "
                                                           f"has {expected}: far too large to be a gradient here"})
        self.attempt.outcomes[(grade_id, check, case.config.name)] = outcome

    def ask(self, check: str, requests: list[tuple[str, object]], label: str, retried: bool = False) -> None:
        """Requests that reveal nothing to one another, in one exchange: the child runs them all. When the
        child is stopped, an exchange of one cell records that cell as stopped; one of several runs again
        cell by cell in fresh children, so that only the cell that stops a child again is blamed."""
        for grade_id, case in requests:
            if self.cell(grade_id) in self.skipped:
                self.keep(grade_id, case, check, self.skipped[self.cell(grade_id)])
        requests = [(grade_id, case) for grade_id, case in requests if self.cell(grade_id) not in self.skipped]
        if not requests:
            return
        try:
            self.exchange(check, requests)
        except (CellOverrun, protocol.ProtocolError) as exc:
            outcome = self.stopped(exc, retried)
            if outcome is None:
                self.start()
                self.ask(check, requests, label, retried=True)
                return
            cells = list(dict.fromkeys(self.cell(grade_id) for grade_id, _ in requests))
            if len(cells) == 1:
                self.skipped[cells[0]] = outcome
            self.start()
            for cell in cells:
                self.ask(check, [(g, case) for g, case in requests if self.cell(g) == cell],
                         label if len(cells) == 1 else cell)
            return
        self.ran += [(grade_id, case.config.name, check) for grade_id, case in requests
                     if self.answers[grade_id].kind == ATOMIC]

    def exchange(self, check: str, requests: list[tuple[str, object]]) -> None:
        self.child.send({"op": "run_many", "check": check,
                         "requests": [[grade_id, case.config.name] for grade_id, case in requests]})
        header, tensors = self.receive(", ".join(dict.fromkeys(self.cell(g) for g, _ in requests)))
        replies = header.get("answers")
        if header.get("op") != "answers" or not isinstance(replies, list) or len(replies) != len(requests):
            raise protocol.ProtocolError("the answers arrived for requests that were not made")
        for index, ((grade_id, case), reply) in enumerate(zip(requests, replies, strict=True)):
            reply = reply if isinstance(reply, dict) else {}
            answer = tensors.get(f"answer{index}")
            given = frozenset(self.answers[grade_id].upstream) | frozenset(case.values)
            self.keep(grade_id, case, check, _outcome(reply, {} if answer is None else {"answer": answer}, given))

    def train(self, retried: bool = False) -> None:
        """The whole-run check, last: a function cell skipped before is not run again, and one that stops
        the child here needs no child after it."""
        training = self.exercise.training
        key = (training.grade_id, CHAIN, self.training.config.name)
        cell = training.function.cell
        if cell in self.skipped:
            self.attempt.outcomes[key] = self.skipped[cell]
            return
        try:
            sent = time.monotonic()
            self.child.send({"op": "train", "lr": self.training.lr}, {**self.training.params, **self.training.data},
                            same_for=self.training)
            header, tensors = self.receive(training.grade_id)
        except (CellOverrun, protocol.ProtocolError) as exc:
            outcome = self.stopped(exc, retried)
            if outcome is None:
                self.start()
                self.train(retried=True)
                return
            self.attempt.outcomes[key] = outcome
            self.close()
            return
        parameters = self.exercise.network.parameters
        status = header.get("status", Status.BROKEN)
        detail = _detail(header)
        if "seconds_per_step" in detail:
            steps = len(next(iter(self.training.data.values())))
            detail["seconds_per_step"] = _timing(detail["seconds_per_step"], (time.monotonic() - sent) / steps)
        losses = tensors.get("losses") if status == Status.TENSOR else None
        extra = {p: tensors[p] for p in parameters if p in tensors} if status == Status.TENSOR else {}
        incomplete = status == Status.TENSOR and (losses is None or len(extra) != len(parameters))
        if status not in CHILD_STATUSES or incomplete:
            status = Status.BROKEN
        self.attempt.outcomes[key] = Outcome(status, detail, losses, extra)

    def play(self, phase: list, schedule: Schedule) -> None:
        """Every cell on the cases of one phase, sent to the child only now."""
        for case in phase:
            self.hold({"op": "case", "case": case.config.name, "sizes": case.sizes}, case.student_view(), case)
            self.hold({"op": "upstream", "case": case.config.name, "check": LOCAL}, case.random_upstream, case)
            for grade_id, siblings in case.siblings.items():
                if grade_id in schedule.local:
                    self.hold({"op": "upstream", "case": case.config.name, "check": LOCAL, "answer": grade_id},
                              siblings, case)
        self.ask(LOCAL, [(grade_id, case) for case in phase for grade_id in schedule.local],
                 "(one of those run with random upstream gradients)")
        self.ask(CHAIN, [(grade_id, case) for case in phase for grade_id in schedule.at_once],
                 ", ".join(dict.fromkeys(self.cell(g) for g in schedule.at_once)))
        # One step of the chain on every case at a time: a case's truth is revealed only once every
        # case has answered, and goes out with the next step's request.
        for grade_id in schedule.one_by_one:
            self.ask(CHAIN, [(grade_id, case) for case in phase], grade_id)
            answer = self.answers[grade_id]
            if answer.kind == ATOMIC:
                for case in phase:
                    self.hold({"op": "upstream", "case": case.config.name, "check": CHAIN},
                              {answer.variable: case.expected(answer, CHAIN)}, case)

    def run(self) -> None:
        schedule = Schedule.of(self.exercise)
        self.start()
        # The public cases (the lecture-sized probe) run to the end before the child holds anything of a
        # hidden one: what a cell says there (an error's message, a tensor's shape and values) is the
        # feedback a student may see, and no cell can have stashed a hidden value into it.
        for phase in ([c for c in self.cases if not c.config.scored], [c for c in self.cases if c.config.scored]):
            self.play(phase, schedule)
        if self.training is not None and self.exercise.training.function.cell in self.cells:
            self.train()
        if self.child is not None:
            try:
                self.child.send({"op": "bye"})
                self.receive("(after the last cell)")
            except (CellOverrun, protocol.ProtocolError):
                pass  # every answer is in: what a cell left running stops with the child

    def flag(self) -> None:
        for key, found in self.evidence.items():
            self.attempt.outcomes[key] = _flagged(found, self.attempt.outcomes.get(key))


@functools.lru_cache(maxsize=256)  # a case hashes by identity; every answer of a class asks of the same few
def _largest(case) -> int:
    return max((v.numel() for v in case.values.values() if isinstance(v, torch.Tensor)), default=1)


def run(cells: dict[str, str], cases: list, limits: Limits, training=None) -> Attempt:
    """Grade-free execution of one submission's answer cells in fresh child processes, on every case
    (all of one exercise: the one their configurations name), and the training check if `training`.

    `cases` and `training` are the judge's (grader.judge.exam's Case and Training), read here only for
    what goes to the child and what names each outcome: the sandbox sits below the judge and imports
    nothing of it."""
    attempt = Attempt()
    started = time.monotonic()
    submission = _Submission(cells, cases, limits, training, attempt)
    try:
        submission.run()
    except TimeoutError:
        attempt.error = f"stopped at the time limit of {limits.timeout:g} s for a whole submission"
    finally:
        submission.close()
        attempt.seconds = time.monotonic() - started
    submission.flag()
    return attempt
