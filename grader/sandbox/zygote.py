"""A fork server for sandboxed children: it pays `import torch` once, then forks one walled child per
submission, so a child starts in milliseconds instead of a second.

It is started as a fresh interpreter (`python -I`, importing this very grader package: START), never
forked from the grader, so no configuration, oracle value or other submission is ever in its memory, and
so in none of its children's. It stays single-threaded (OMP_NUM_THREADS=1 before torch loads), which makes fork safe.

Both ends are here. The grader's end (ForkServer; no torch, so the grader can start the server before
it imports torch itself) talks to the server over a SOCK_SEQPACKET socket whose fd number is the
server's argument, one JSON request and one JSON reply at a time, the child's two protocol pipes
travelling with the request as passed file descriptors:

    spawn {config, env, exercise} + [stdin, stdout]  ->  {pid} or {refused}
    status {pid}                            ->  {running} or {exited, code} or {killed, signal}
    reap {pid}                              ->  {}

A child is reaped only when the grader asks, after it has killed the child's process group: until
then the pid stays taken (a zombie at worst), so that kill cannot reach anyone else. When the grader
goes away (the socket closes), every child left is killed and reaped.
"""
from __future__ import annotations

import atexit
import gc
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading

from grader.sandbox.protocol import ProtocolError

MAX_REQUEST = 1 << 20
PR_SET_CHILD_SUBREAPER = 36


# ---------------------------------------------------------------------------------------------
# The grader's side (no torch here: it is started before the grader imports torch)

ENV = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
       "LANG": "C.UTF-8"}


class ServerGone(ProtocolError):
    """The fork server stopped answering."""


class Refused(ProtocolError):
    """The fork server would not fork a child: it could not import the exercise the child grades."""


def _module_of(spec: str):
    """The imported module an exercise's spec string names as `module:attribute`; None for a registered
    name (a module of the grader package) or a module not imported."""
    return sys.modules.get(spec.partition(":")[0]) if ":" in spec else None


def _search_path(spec: str) -> str | None:
    """The folder a `module:attribute` exercise this process imported was found in, for the server to
    search: it runs isolated (`-I`, no working directory or PYTHONPATH on its path), so a course's own
    exercise module, or a test's, is not on its path otherwise. None for a registered name or a module
    this process has not imported."""
    module = _module_of(spec)
    origin = getattr(module, "__file__", None)
    if not origin:
        return None
    root = os.path.realpath(origin)
    for _ in range(module.__name__.count(".") + 1 + (os.path.basename(origin) == "__init__.py")):
        root = os.path.dirname(root)
    return root


# The server imports the very grader package this process imported: isolated (`-I`), a fresh interpreter
# would find whichever one its site-packages names, and a grader run from a checkout on PYTHONPATH would
# then grade with another version's sandbox.
_PACKAGES = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START = f"import sys; sys.path.insert(0, {_PACKAGES!r}); from grader.sandbox.zygote import main; main()"


class ForkServer:
    """The grader's end: one per grading process, started on first use and again whenever it has died,
    shared by the threads that run submissions side by side."""

    def __init__(self, env: dict | None = None):
        self.env = env or ENV
        self._lock = threading.Lock()
        self._proc = None
        self._socket = None

    def start(self) -> None:
        """Start the server (it takes about a second to import torch) without waiting for it."""
        with self._lock:
            self._ensure_started()

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        os.set_inheritable(theirs.fileno(), True)
        try:
            # In a process group of its own: Ctrl-C reaches the grader, which then stops it in order.
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-c", START, str(theirs.fileno())], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env, cwd="/",
                pass_fds=(theirs.fileno(),), process_group=0)
        finally:
            theirs.close()
        self._socket = ours
        self._ready = False

    def _request(self, request: dict, fds: list[int] = ()) -> dict:
        with self._lock:
            self._ensure_started()
            try:
                if not self._ready:
                    hello = json.loads(self._socket.recv(4096) or b"{}")
                    if hello.get("threads") != 1:
                        raise ServerGone(f"the fork server did not start ({hello or 'no answer'})")
                    self._ready = True
                socket.send_fds(self._socket, [json.dumps(request).encode()], list(fds))
                reply = self._socket.recv(1 << 16)
            except OSError as exc:
                self._close()
                raise ServerGone(f"the fork server stopped ({exc.strerror})") from None
            if not reply:
                self._close()
                raise ServerGone("the fork server stopped")
            return json.loads(reply)

    @property
    def pid(self) -> int | None:
        with self._lock:
            self._ensure_started()
            return self._proc.pid

    def spawn(self, config: dict, env: dict, stdin: int, stdout: int, exercise: str | None = None) -> int:
        """A walled child; with `exercise` (course.yml's spec string), the server imports that exercise
        first, since the child it forks can import nothing."""
        request = {"op": "spawn", "config": config, "env": env}
        if exercise is not None:
            request["exercise"] = {"spec": exercise, "path": _search_path(exercise)}
        reply = self._request(request, [stdin, stdout])
        if "refused" in reply:
            raise Refused(reply["refused"])
        return reply["pid"]

    def status(self, pid: int) -> dict:
        return self._request({"op": "status", "pid": pid})

    def reap(self, pid: int) -> None:
        self._request({"op": "reap", "pid": pid})

    def _close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def close(self) -> None:
        """Stop the server; it kills and reaps any child still running as its socket closes."""
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None
            if self._proc is not None:
                self._proc.wait()
                self._proc = None


server = ForkServer()
atexit.register(server.close)


def default_jobs() -> int:
    """Children side by side: one per core this process may run on (a CPU set or a container's limit
    counts). A child waits for the grader between exchanges, so more can still help a little (on 2
    cores, 4 took 37 ms per submission against 41): `--jobs` is there for that."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def start() -> None:
    """Have the fork server import torch while the caller does other work (imports torch itself,
    computes the oracle values)."""
    server.start()


def server_pid() -> int:
    """The fork server's pid: the parent of every sandboxed child."""
    return server.pid



# ---------------------------------------------------------------------------------------------
# The server's side


def _warm_up() -> None:
    """Import everything a child uses and run it once on made-up values: a child forked afterwards
    imports nothing and finds torch's lazily built dispatch tables and kernels ready. Nothing of any
    course is involved. A grader module a child imports must be imported here: Landlock lets a child
    read only the grader modules the server holds (grader.sandbox.landlock)."""
    import safetensors.torch  # noqa: F401
    import torch
    import torch.nn.functional  # noqa: F401

    import grader.exercise
    import grader.sandbox.autograd_watch  # noqa: F401
    import grader.sandbox.child
    import grader.sandbox.jail  # noqa: F401
    from grader.sandbox import protocol, seccomp

    torch.set_num_threads(1)
    grader.exercise.calls()  # what a step and a cell call, bound before any child runs
    protocol.encode({}, {"values": torch.linspace(-1, 1, 6, dtype=torch.float64)})
    grader.sandbox.child.warm_up()
    if platform.machine() in seccomp.ARCHES:
        seccomp.template()


# The exercises imported so far, by spec string, and the folders of their top-level packages: a
# child may read those modules' files one by one, as the grader's own (grader.sandbox.landlock).
_exercises: set[str] = set()
_exercise_folders: set[str] = set()


def _load_exercise(spec: str, path: str | None) -> str | None:
    """Import the exercise a child is to grade, and run its forward pass once on the lecture's sizes
    (what it loads lazily then would be an audited step in the child, reported against a cell);
    None when it is ready, else why it cannot be. Its modules join what Landlock lets a child read.
    An exercise is the course's code, trusted as the grader's, and holds no secret: the salt, the
    configurations and the oracle's values never reach the server."""
    if spec in _exercises:
        return None
    import torch

    from grader.exercise import load
    from grader.sandbox import protocol

    if path is not None and path not in sys.path:
        sys.path.append(path)
    try:
        exercise = load(spec)
        g = torch.Generator().manual_seed(0)
        params = exercise.init(exercise.lecture, g, torch.float64)
        values = exercise.network.forward(params, exercise.batch(exercise.lecture, g))
        protocol.encode({}, {"loss": values[exercise.network.loss]})
    except Exception as exc:  # a course's module: its fault stops the batch, as an environment error
        return f"the exercise {spec!r} cannot be loaded for the sandbox: {type(exc).__name__}: {exc}"
    if len(os.listdir("/proc/self/task")) != 1:
        return f"importing the exercise {spec!r} started a thread, and a fork would copy it mid-work"
    module = _module_of(spec)
    top = sys.modules[module.__name__.partition(".")[0]] if module is not None else None
    _exercise_folders.update(os.path.realpath(p) for p in getattr(top, "__path__", ()))
    _exercises.add(spec)
    _prepare_landlock()
    gc.freeze()
    return None


MADV_COLLAPSE = 25  # Linux 6.1+
HUGE_PAGE = 2 << 20


def _huge_pages() -> None:
    """Back the server's private memory (Python's heap: torch's modules, mostly) with 2 MB pages where
    the kernel can. A fork copies one entry per 2 MB instead of 512, and a child's exit tears down as
    few: forking and ending a child cost a third of the time (6.5 ms -> 2.5 ms here), and a child still
    copies only the 4 kB it writes. Older kernels refuse the request and nothing changes."""
    import ctypes

    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if not fields[1].startswith("rw") or fields[1][3] != "p" or fields[5:] not in ([], ["[heap]"]):
                continue
            low, high = (int(x, 16) for x in fields[0].split("-"))
            low = -(-low // HUGE_PAGE) * HUGE_PAGE
            high = high // HUGE_PAGE * HUGE_PAGE
            if high > low:
                madvise(low, high - low, MADV_COLLAPSE)


def _child(config: dict, env: dict, fds: list[int], control: socket.socket) -> None:
    """In the forked child: own session, the pipes on 0 and 1, nothing else open, walls up, then the
    child's protocol loop. It never returns into the server's code."""
    code = 1
    try:
        control.close()
        os.setsid()
        for signum in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        keep = _ruleset[0] if _ruleset else 2
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        os.environ.clear()
        os.environ.update(env)
        from grader.sandbox import child, jail, protocol

        try:
            report = {"process": "separate process, own session, forked from a fresh fork server that never "
                                 "held grading data", **jail.wall(config, _ruleset, _ruleset_error)}
        except Exception as exc:  # a fault of the walls' own code: the grader's, never the student's
            report = {"refused": f"the sandbox failed to start: {type(exc).__name__}: {exc}"}
        protocol.write(1, {"op": "isolation", "isolation": report})
        if "refused" in report:
            return
        child.main()
        code = 0
    finally:
        os._exit(code)


def _status(pid: int) -> dict:
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return {"gone": True}
    if info is None:
        return {"running": True}
    if info.si_code == os.CLD_EXITED:
        return {"exited": True, "code": info.si_status}
    return {"killed": True, "signal": info.si_status}


def _kill(pid: int) -> None:
    """Kill and reap one child of ours. It may not have reached setsid() yet (its group would not
    exist), hence the kill by pid, which is safe: an unreaped child's pid cannot belong to anyone else."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.waitpid(pid, 0)
    # Pid 1 of the child's PID namespace, in its process group, killed with it: when the kill orphaned
    # it, this subreaper adopted it; reaped here (none left when the process that forked it reaped it).
    try:
        while True:
            os.waitid(os.P_PGID, pid, os.WEXITED)
    except ChildProcessError:
        pass


def serve(control: socket.socket) -> None:
    children: set[int] = set()
    try:
        while True:
            data, fds, _, _ = socket.recv_fds(control, MAX_REQUEST, 2)
            if not data:
                return
            request = json.loads(data)
            refused = _load_exercise(**request["exercise"]) if request.get("exercise") else None
            if refused is not None:
                for fd in fds:
                    os.close(fd)
                reply = {"refused": refused}
            elif request["op"] == "spawn":
                pid = os.fork()
                if pid == 0:
                    _child(request["config"], request["env"], fds, control)
                for fd in fds:
                    os.close(fd)
                children.add(pid)
                reply = {"pid": pid}
            elif request["op"] == "status":
                reply = _status(request["pid"])
            elif request["op"] == "reap":
                if request["pid"] in children:
                    children.discard(request["pid"])
                    _kill(request["pid"])
                reply = {}
            else:
                reply = {"error": f"unknown request {request['op']!r}"}
            control.send(json.dumps(reply).encode())
    finally:
        for pid in children:
            _kill(pid)


# The Landlock ruleset every child restricts itself with, built once after the warm-up: (fd, ABI), or
# None and the reason it could not be.
_ruleset: tuple[int, int] | None = None
_ruleset_error: str | None = None
_reserved = None


def _prepare_landlock() -> None:
    """Built again whenever an exercise's modules join the server's: a child restricts itself with the
    ruleset as it is when it forks."""
    global _ruleset, _ruleset_error
    from grader.sandbox import landlock

    if _ruleset is not None:
        os.close(_ruleset[0])
        _ruleset = None
    try:
        _ruleset = landlock.prepare(tuple(sorted(_exercise_folders)))
    except landlock.Unavailable as exc:
        _ruleset_error = str(exc)


def _reserve_for_test() -> None:
    """What a CUDA build of torch does at import, for the tests to reproduce without one: reserve
    gigabytes of address space the process never touches. Only the grader that starts the server
    sets its environment."""
    megabytes = int(os.environ.get("BACKPROP_NINJA_TEST_RESERVE_MB", "0"))
    if megabytes:
        import mmap

        global _reserved
        _reserved = mmap.mmap(-1, megabytes << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=0)  # PROT_NONE


def _become_subreaper() -> None:
    """A child's pid 1 (grader.sandbox.jail's PID namespace) has the server's child for parent: a kill that
    ends both orphans it, and the host's init may reap it late, leaving a zombie of the grading user
    behind the submission. As a subreaper the server adopts it, and _kill reaps it. Where prctl is
    refused, orphans go to init as before."""
    import ctypes

    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    _become_subreaper()
    _warm_up()
    _reserve_for_test()
    _prepare_landlock()
    # A child's full collections would walk, and so write to and copy, every page of the server's
    # objects: frozen, they are left alone (about 2 ms less per child).
    gc.freeze()
    _huge_pages()
    threads = len(os.listdir("/proc/self/task"))
    control.send(json.dumps({"ready": True, "threads": threads}).encode())
    if threads != 1:
        sys.exit(1)  # fork would copy a process whose other threads may hold locks
    serve(control)
    os._exit(0)  # skip tearing down torch: the grader waits for this exit


if __name__ == "__main__":
    main()
