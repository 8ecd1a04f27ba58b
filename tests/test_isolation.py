"""The sandbox's walls, each proven on this machine: a probe cell runs in a real child through
grader.sandbox.parent.run (no static check in front of it) and reports what it could do, through the message
of the exception it raises, which the child sends back as the cell's error.

Mechanisms: dropping to an unprivileged uid, the network namespace, hidden folders (mount namespace),
resource limits (data memory, processes), the pids cgroup and killing every process of a submission, the
isolation report itself, and the wire format (no pickle crosses it). Each seccomp and Landlock rule is
tried in test_walls.py.

Every folder and file a probe reads or writes is a throw-away path created here and removed after;
the network probes use loopback only. A child costs ~1-2 s, so the probes share children.
"""
from __future__ import annotations

import errno
import json
import os
import pickle
import secrets
import shutil
import socket
import struct
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
import torch

from grader.exercises.makemore_mlp import EXERCISE
from grader.judge.compare import compare
from grader.judge.exam import CHAIN, LOCAL, checks
from grader.sandbox import parent as sandbox
from grader.sandbox import protocol
from helpers.cases import first_scored
from helpers.children import alive_with, kill_siblings, tracked_children
from helpers.notebooks import reference_sources

REFERENCE = reference_sources()
ROOT_ONLY = pytest.mark.skipif(os.getuid() != 0, reason="the grader drops to nobody only when it runs as root")
REPORT = "REPORT "

def _canary(label: str) -> str:
    return f"CANARY-{label}-{secrets.token_hex(6)}"


def _tree(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return path


def _file(path: Path, text: str, mode: int = 0o644) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture(scope="module")
def places():
    """Throw-away folders under /tmp that nobody *could* read (world-readable, traversable): only the
    sandbox's hiding can keep a probe out of them. Plus targets for writes outside the work dir."""
    base = Path(tempfile.mkdtemp(prefix="bpn-isolation-"))
    base.chmod(0o755)
    token = uuid.uuid4().hex
    p = {"base": base, "canaries": {}}
    course = _tree(base / "course")
    for name in ("course.yml", "solutions.py", "gradebook.db"):
        p["canaries"][name] = _canary(name.split(".")[0])
        _file(course / name, p["canaries"][name] + "\n")
    subs = _tree(base / "submissions")
    _tree(subs / "ada")
    p["canaries"]["notebook"] = _canary("notebook")
    _file(subs / "ada" / "backprop_ninja.ipynb", p["canaries"]["notebook"] + "\n")
    out = _tree(base / "results")
    p["canaries"]["grades"] = _canary("grades")
    _file(out / "grades.csv", p["canaries"]["grades"] + "\n")
    locked = _tree(base / "locked", 0o755)       # root's, not hidden: only permissions protect it
    opened = _tree(base / "open", 0o777)         # world-writable, not hidden: only a write wall protects it
    p.update(course=course, subs=subs, out=out, locked=locked, open=opened, home=Path.home(),
             hide=(str(course), str(subs), str(out), str(Path.home())))
    p["writes"] = {
        "locked-folder": locked / f"w-{token}",
        "hidden-course": course / f"w-{token}",
        "hidden-course-existing": course / "course.yml",
        "hidden-results": out / f"w-{token}.json",
        "hidden-submissions": subs / "ada" / "backprop_ninja.ipynb",
        "world-writable-folder": opened / f"w-{token}",
        "tmp": Path(f"/tmp/bpn-isolation-w-{token}"),
        "var-tmp": Path(f"/var/tmp/bpn-isolation-w-{token}"),
        "dev-shm": Path(f"/dev/shm/bpn-isolation-w-{token}"),
    }
    p["before"] = {k: (v.read_text() if v.exists() else None) for k, v in p["writes"].items()}
    yield p
    shutil.rmtree(base, ignore_errors=True)
    for key in ("tmp", "var-tmp", "dev-shm"):
        p["writes"][key].unlink(missing_ok=True)


@pytest.fixture(scope="module")
def case():
    return first_scored("isolation-test-salt")


@pytest.fixture(scope="module")
def listeners():
    tcp4 = socket.create_server(("127.0.0.1", 0))
    tcp6 = socket.create_server(("::1", 0), family=socket.AF_INET6) if socket.has_ipv6 else None
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    for s in filter(None, (tcp4, tcp6, udp)):
        s.setblocking(False)
    yield {"tcp4": tcp4, "tcp6": tcp6, "udp": udp}
    for s in filter(None, (tcp4, tcp6, udp)):
        s.close()


def _probe(body: str) -> str:
    """A cell that runs `body` (which fills the dict `res`) and reports `res` as its exception message."""
    return "import json, os\nres = {}\n" + body + f"\nraise ValueError({REPORT!r} + json.dumps(res))\n"


def report(attempt, grade_id: str, case, check: str = LOCAL) -> dict:
    flagged = attempt.outcomes[(grade_id, check, case.config.name)]
    assert flagged.status == "forbidden-call", (grade_id, flagged.status, flagged.detail)  # the audit hook's report
    outcome = flagged.answered
    assert outcome.status == "error", (grade_id, outcome.status, outcome.detail)
    message = outcome.detail["error"]
    assert message.startswith(REPORT), message
    return json.loads(message[len(REPORT):])


LIMITS = dict(timeout=60, cell_timeout=10, memory_mb=2048, file_size_mb=16, processes=64)


@pytest.fixture(scope="module")
def walls(places, case, listeners):
    """One child, with a probe in each of the first answer cells and the reference answers after them."""
    targets = {k: str(places["course"] / k) for k in ("course.yml", "solutions.py", "gradebook.db")}
    targets["notebook"] = str(places["subs"] / "ada" / "backprop_ninja.ipynb")
    targets["grades"] = str(places["out"] / "grades.csv")
    dirs = {"course": str(places["course"]), "submissions": str(places["subs"]), "results": str(places["out"]),
            "home": str(places["home"])}
    escapes = {"parent-root": f"/proc/{os.getpid()}/root{places['course']}/course.yml",
               "init-root": f"/proc/1/root{places['course']}/course.yml",
               "parent-cwd": f"/proc/{os.getpid()}/cwd"}
    writes = {k: str(v) for k, v in places["writes"].items()}
    tcp6 = listeners["tcp6"].getsockname()[1] if listeners["tcp6"] else None
    cells = {
        **REFERENCE,
        "dlogprobs": _probe(
            "import ctypes\n"
            "libc = ctypes.CDLL(None)\n"
            "header, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()\n"
            "libc.capget(header, data)\n"
            "try:\n    os.setuid(0)\n    res['regain'] = 'root again'\n"
            "except OSError as e:\n    res['regain'] = type(e).__name__\n"
            "res.update(uid=os.getuid(), euid=os.geteuid(), gid=os.getgid(), groups=os.getgroups(),\n"
            "           nnp=libc.prctl(39, 0, 0, 0, 0), capabilities=list(data), cwd=os.getcwd())\n"
            "try:\n    open('scratch.txt', 'w').write('the work dir is writable')\n"
            "    res['workdir_write'] = 'written'\n"
            "except OSError as e:\n    res['workdir_write'] = 'denied:' + type(e).__name__\n"),
        "dprobs": _probe(
            "import socket\n"
            f"for name, fam, addr in [('tcp4', socket.AF_INET, ('127.0.0.1', {listeners['tcp4'].getsockname()[1]})),\n"
            f"                        ('tcp6', socket.AF_INET6, ('::1', {tcp6}))]:\n"
            "    if addr[1] is None:\n        continue\n"
            "    try:\n        s = socket.socket(fam, socket.SOCK_STREAM)\n        s.settimeout(1)\n"
            "        s.connect(addr)\n        res[name] = 'connected'\n"
            "    except OSError as e:\n        res[name] = e.errno\n"
            f"try:\n    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"    u.sendto(b'exfiltrated', ('127.0.0.1', {listeners['udp'].getsockname()[1]}))\n"
            "    res['udp'] = 'sent'\n"
            "except OSError as e:\n    res['udp'] = e.errno\n"),
        "dcounts_sum_inv": _probe(
            f"for key, path in {targets!r}.items():\n"
            "    try:\n        res[key] = 'read:' + open(path, 'rb').read(60).decode('utf-8', 'replace')\n"
            "    except OSError as e:\n        res[key] = 'denied:' + type(e).__name__\n"),
        "dcounts_sum": _probe(
            f"for key, path in {dirs!r}.items():\n"
            "    try:\n        res[key] = sorted(os.listdir(path))\n"
            "    except OSError as e:\n        res[key] = 'denied:' + type(e).__name__\n"
            f"for key, path in {escapes!r}.items():\n"
            "    try:\n"
            "        res[key] = 'read:' + "
            "(open(path).read(60) if not path.endswith('cwd') else str(os.listdir(path)))\n"
            "    except OSError as e:\n        res[key] = 'denied:' + type(e).__name__\n"),
        "dcounts": _probe(
            f"for key, path in {writes!r}.items():\n"
            "    try:\n        with open(path, 'a') as f:\n            f.write('written by the sandbox\\n')\n"
            "        res[key] = 'written'\n"
            "    except OSError as e:\n        res[key] = 'denied:' + type(e).__name__\n"),
        "dnorm_logits": "big = torch.empty(10 * 2**30)\ndnorm_logits = counts * dcounts\n",
        "dlogits": _probe(
            "import resource\n"
            "for key in ('DATA', 'FSIZE', 'NPROC', 'CPU', 'NOFILE', 'CORE'):\n"
            "    res[key] = resource.getrlimit(getattr(resource, 'RLIMIT_' + key))\n"
            "res['session'] = [os.getpid(), os.getsid(0), os.getpgrp()]\n"),
    }
    attempt = sandbox.run(cells, [case], sandbox.Limits(**LIMITS, hide=places["hide"]))
    return attempt


def _right(attempt, case, grade_id, check):
    outcome = attempt.outcomes[(grade_id, check, case.config.name)]
    if outcome.status != "tensor":
        return False
    expected = case.expected(EXERCISE.by_grade_id[grade_id], check)
    return compare(outcome.tensor, expected, rtol=1e-5, atol=1e-8).passed


def test_the_probing_child_finished_and_the_reference_cells_after_the_probes_are_right(walls, case):
    assert walls.error is None, walls.error
    for grade_id in ("dh", "dW2", "dhpreact", "dbnraw", "dhprebn", "dW1",
                     "dC", "ex2_dlogits", "ex3_dhprebn", "ex4_dW1"):
        for check in checks(EXERCISE.by_grade_id[grade_id]):
            assert _right(walls, case, grade_id, check), (grade_id, check)


# ---------------------------------------------------------------------------------------------
# User


@ROOT_ONLY
def test_the_child_runs_as_nobody_with_no_privileges(walls, case):
    r = report(walls, "dlogprobs", case)
    assert r["uid"] == r["euid"] == r["gid"] >= sandbox.UID_BASE, r
    assert r["groups"] == [], r
    assert r["regain"] == "PermissionError", r
    assert r["nnp"] == 1, r
    assert r["capabilities"] == [0] * 6, r
    assert r["workdir_write"] == "denied:PermissionError", r  # Landlock: nothing is writable, not even there


@ROOT_ONLY
def test_the_work_dir_is_removed_after_the_run(walls, case):
    workdir = report(walls, "dlogprobs", case)["cwd"]
    assert Path(workdir).name.startswith("bpn-child-")
    assert not os.path.exists(workdir)


# ---------------------------------------------------------------------------------------------
# Network


def test_no_loopback_connection_gets_out(walls, case, listeners):
    r = report(walls, "dprobs", case)
    assert r["tcp4"] == errno.EPERM, r  # seccomp: no socket at all
    if listeners["tcp6"] is not None:
        assert r["tcp6"] == errno.EPERM, r
    assert r["udp"] == errno.EPERM, r
    for name in ("tcp4", "tcp6"):
        if listeners[name] is not None:
            with pytest.raises(BlockingIOError):
                listeners[name].accept()
    with pytest.raises(BlockingIOError):
        listeners["udp"].recvfrom(100)


# ---------------------------------------------------------------------------------------------
# Hidden folders


@pytest.mark.parametrize("target", ["course.yml", "solutions.py", "gradebook.db", "notebook", "grades"])
def test_files_in_hidden_folders_cannot_be_read(walls, case, target):
    r = report(walls, "dcounts_sum_inv", case)
    assert r[target].startswith("denied:"), r[target]


def test_no_hidden_folder_can_be_listed(walls, case, places):
    r = report(walls, "dcounts_sum", case)
    for key in ("course", "submissions", "results", "home"):
        assert str(r[key]).startswith("denied:"), (key, r[key])  # Landlock: no folder outside is listed


def test_hidden_files_cannot_be_reached_through_proc(walls, case):
    r = report(walls, "dcounts_sum", case)
    for key in ("parent-root", "init-root", "parent-cwd"):
        assert r[key].startswith("denied:"), (key, r[key])


def test_no_canary_appears_in_any_outcome(walls, places):
    seen = json.dumps([[list(k), o.status, o.detail] for k, o in walls.outcomes.items()])
    for label, canary in places["canaries"].items():
        assert canary not in seen, label


# ---------------------------------------------------------------------------------------------
# Writing outside the work dir


@ROOT_ONLY
@pytest.mark.parametrize("target", [
    "locked-folder", "hidden-course", "hidden-course-existing", "hidden-results", "hidden-submissions",
    "world-writable-folder",
    "tmp",
    "var-tmp",
    "dev-shm",
])
def test_writing_outside_the_work_dir_fails_and_leaves_nothing(walls, case, places, target):
    r = report(walls, "dcounts", case)
    path = places["writes"][target]
    after = path.read_text() if path.exists() else None
    assert after == places["before"][target], f"{path} changed: {after!r}"
    assert r[target].startswith("denied:"), r[target]


# ---------------------------------------------------------------------------------------------
# Resource limits


def test_the_data_limit_stops_a_40_gb_allocation_and_later_cells_run(walls, case):
    for check in (CHAIN, LOCAL):
        outcome = walls.outcomes[("dnorm_logits", check, case.config.name)]
        assert outcome.status == "error", outcome
        assert outcome.detail["error_type"] in ("RuntimeError", "MemoryError"), outcome.detail
        assert "allocate" in outcome.detail["error"], outcome.detail
    for check in checks(EXERCISE.by_grade_id["dlogits"]):
        assert walls.outcomes[("dlogits", check, case.config.name)].answered.status == "error"  # the next probe ran
    assert _right(walls, case, "dh", CHAIN)


def test_the_limits_in_force_are_the_ones_reported(walls, case):
    r = report(walls, "dlogits", case)
    reported = walls.isolation["limits"]
    # The data limit is what the child held from the fork server plus memory_mb.
    assert r["DATA"][0] == r["DATA"][1] > LIMITS["memory_mb"] * 2**20 and reported["data_mb"] == LIMITS["memory_mb"]
    assert r["FSIZE"] == [LIMITS["file_size_mb"] * 2**20] * 2 and reported["file_size_mb"] == LIMITS["file_size_mb"]
    assert r["NPROC"] == [LIMITS["processes"]] * 2 and reported["processes"] == LIMITS["processes"]
    assert r["CPU"] == [reported["cpu_seconds"]] * 2 and reported["cpu_seconds"] >= LIMITS["timeout"]
    assert r["CORE"] == [0, 0]
    pid, session, group = r["session"]
    # In a PID namespace the leader of its session and group is the process that forked pid 1, outside it.
    assert (session, group) == ((0, 0) if pid == 1 else (pid, pid)), r["session"]


# ---------------------------------------------------------------------------------------------
# The isolation report


@ROOT_ONLY
def test_the_attempt_reports_the_isolation_in_force(walls):
    iso = walls.isolation
    assert iso["user"].startswith("an unprivileged uid of its own"), iso
    assert "network namespace" in iso["network"] and "not isolated" not in iso["network"], iso
    assert "hidden" in iso["filesystem"] and "not isolated" not in iso["filesystem"], iso
    assert iso["pids_cgroup"] == f"pids.max={LIMITS['processes']}", iso
    assert iso["limits"]["data_mb"] == LIMITS["memory_mb"]
    assert iso["missing"] == [], iso
    assert all(text.startswith("in force: ") for text in iso["walls"].values()), iso["walls"]
    assert iso["limits"]["file_size_mb"] == LIMITS["file_size_mb"]
    assert iso["limits"]["processes"] == LIMITS["processes"]
    assert "separate process" in iso["process"]


# ---------------------------------------------------------------------------------------------
# Processes: the pids cgroup caps a fork bomb; nothing outlives the submission, even after setsid()


def _marker() -> str:
    """A sleep duration nobody else uses, to find our processes by their command line."""
    return f"{900 + secrets.randbelow(90)}.{secrets.randbelow(10**9):09d}"


def _gone(marker: str, seconds: float = 5.0) -> dict[int, str]:
    deadline = time.monotonic() + seconds
    while (left := alive_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _kill_leftovers(markers) -> None:
    for marker in markers:
        for pid in alive_with(marker):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


PROCESSES = 32


@pytest.fixture(scope="module")
def procs(case):
    markers = {"setsid": _marker(), "daemon": _marker(), "bomb": _marker()}
    exec_sleep = ("        try:\n            os.execv('/bin/sleep', ['sleep', {m!r}])\n"
                  "        finally:\n            os._exit(1)\n")
    cells = {
        **REFERENCE,
        "dlogprobs": _probe(
            "import time\n"
            "try:\n"
            "    pid = os.fork()\n"
            "    if pid == 0:\n        os.setsid()\n" + exec_sleep.format(m=markers["setsid"]) +
            "    pid2 = os.fork()\n"
            "    if pid2 == 0:\n"
            "        os.setsid()\n"
            "        if os.fork() == 0:\n"
            "            try:\n                os.execv('/bin/sleep', ['sleep', " + repr(markers["daemon"]) + "])\n"
            "            finally:\n                os._exit(1)\n"
            "        os._exit(0)\n"
            "    os.waitpid(pid2, 0)\n"
            "    time.sleep(0.2)\n"
            "    res['sleeper_sid'] = os.getsid(pid)\n    res['own_sid'] = os.getsid(0)\n"
            "except OSError as e:\n    res['fork_error'] = e.errno\n"),
        "dprobs": _probe(
            "res['forked'] = 0\nres['errno'] = None\n"
            "for i in range(500):\n"
            "    try:\n        pid = os.fork()\n"
            "    except OSError as e:\n        res['errno'] = e.errno\n        break\n"
            "    if pid == 0:\n" + exec_sleep.format(m=markers["bomb"]) +
            "    res['forked'] += 1\n"),
    }
    try:
        attempt = sandbox.run(cells, [case], sandbox.Limits(**{**LIMITS, "processes": PROCESSES}))
        left = {name: _gone(marker) for name, marker in markers.items()}
        yield attempt, left
    finally:
        _kill_leftovers(markers.values())


def test_seccomp_refuses_every_fork_and_later_cells_run(procs, case):
    attempt, _ = procs
    assert attempt.error is None, attempt.error
    r = report(attempt, "dprobs", case)
    assert r["forked"] == 0 and r["errno"] == errno.EPERM, r
    assert report(attempt, "dlogprobs", case)["fork_error"] == errno.EPERM
    assert _right(attempt, case, "dcounts", CHAIN) and _right(attempt, case, "dC", CHAIN)


@pytest.mark.parametrize("name", ["setsid", "daemon", "bomb"])
def test_nothing_the_submission_started_outlives_it(procs, name):
    _, left = procs
    assert left[name] == {}, f"processes of the submission ({name}) still running: {left[name]}"


@ROOT_ONLY
def test_the_process_run_reports_the_pids_cgroup(procs):
    attempt, _ = procs
    assert attempt.isolation["pids_cgroup"] == f"pids.max={PROCESSES}", attempt.isolation
    assert attempt.isolation["limits"]["processes"] == PROCESSES


@ROOT_ONLY
def test_a_child_whose_walls_fail_is_an_environment_error_and_leaves_nothing_behind(case):
    with tracked_children() as made:
        with pytest.MonkeyPatch.context() as mp:
            # A work dir its uid cannot enter: the walls fail, before the child's first message.
            mp.setattr(sandbox.os, "chown", lambda *args: None)
            with pytest.raises(sandbox.SandboxUnavailable, match="^the sandbox failed to start: PermissionError"):
                sandbox.run(REFERENCE, [case], sandbox.Limits(timeout=10, cell_timeout=5))
        assert made, "the sandbox made no work dir"
        left = [str(p) for p in made if p.exists()]
        assert left == [], f"left behind: {left}"


# ---------------------------------------------------------------------------------------------
# One submission's child against another's


@ROOT_ONLY
def test_a_child_cannot_kill_another_submissions_child(case):
    killer = "exec = exec\nexec(" + repr(kill_siblings(6)) + ")\n"
    done = {}
    thread = threading.Thread(target=lambda: done.setdefault(
        "killer", sandbox.run({**REFERENCE, "dlogprobs": killer}, [case], sandbox.Limits(timeout=30, cell_timeout=8))))
    with tracked_children() as made:
        thread.start()
        try:
            deadline = time.monotonic() + 20
            while not made and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # its first cell, the killing loop, runs within milliseconds of its start
            honest = sandbox.run(REFERENCE, [case], sandbox.Limits(timeout=30, cell_timeout=8))
        finally:
            thread.join()
    assert honest.error is None, honest.error
    assert all(_right(honest, case, g, c) for (g, c, _) in honest.outcomes if g != "dlogprobs" or c == CHAIN)


# ---------------------------------------------------------------------------------------------
# The grader's own memory: what a child sends back is bounded by what an answer can be

OVERSIZED = ("weakness: the parent accepts any answer up to protocol.MAX_PAYLOAD (1 GiB) per message and keeps "
             "every tensor in Attempt.outcomes until the whole batch is scored: one submission (~300 messages) can "
             "make the grader hold hundreds of GB; nothing compares the size with the expected shape first")


def test_the_grader_does_not_keep_oversized_answers(case):
    flooded = ["dprobs", "dcounts_sum_inv", "dcounts_sum", "dcounts", "dnorm_logits"]
    cells = {**REFERENCE, **{g: f"{g} = torch.zeros(4 * 2**20)\n" for g in flooded}}  # 16 MB each
    attempt = sandbox.run(cells, [case], sandbox.Limits(timeout=60, cell_timeout=10))
    assert attempt.error is None, attempt.error
    expected = max(case.expected(EXERCISE.by_grade_id[g], CHAIN).numel() for g in flooded) * 8
    held = sum(o.tensor.nbytes for o in attempt.outcomes.values() if o.tensor is not None)
    reference_only = held - sum(o.tensor.nbytes for (g, _, _), o in attempt.outcomes.items()
                                if g in flooded and o.tensor is not None)
    flooded_held = held - reference_only
    assert flooded_held <= sandbox.OVERSIZE * len(flooded) * expected, \
        f"{flooded_held / 2**20:.0f} MB kept for {len(flooded)} answers"


# ---------------------------------------------------------------------------------------------
# The wire: no pickle ever crosses it


class _Unpickled:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _message(header: bytes, payload: bytes) -> bytes:
    # protocol.py's framing: two big-endian 32-bit lengths, then the header, then the payload
    return struct.pack(">II", len(header), len(payload)) + header + payload


@pytest.mark.parametrize("kind", ["pickle-payload", "torch-save-payload", "pickle-header"])
def test_a_pickle_sent_by_the_child_is_never_loaded(tmp_path, kind):
    marker = tmp_path / "unpickled"
    bomb = _Unpickled(str(marker))
    header = json.dumps({"op": "answer", "grade_id": "dprobs", "case": "config1", "check": "chain",
                         "status": "tensor"}).encode()
    if kind == "pickle-payload":
        data = _message(header, pickle.dumps(bomb))
    elif kind == "torch-save-payload":
        import io

        buffer = io.BytesIO()
        torch.save({"answer": torch.zeros(2), "bomb": bomb}, buffer)
        data = _message(header, buffer.getvalue())
    else:
        data = _message(pickle.dumps(bomb), b"")
    assert not marker.exists()
    r, w = os.pipe()
    try:
        os.write(w, data)
        os.close(w)
        with pytest.raises(protocol.ProtocolError):
            protocol.Reader(r).read(time.monotonic() + 5)
    finally:
        os.close(r)
    assert not marker.exists()


def test_tensors_arrive_as_plain_tensors():
    class Sub(torch.Tensor):
        pass

    r, w = os.pipe()
    try:
        os.write(w, protocol.encode({"op": "answer"}, {"answer": torch.ones(3).as_subclass(Sub)}))
        os.close(w)
        header, tensors = protocol.Reader(r).read(time.monotonic() + 5)
    finally:
        os.close(r)
    assert header == {"op": "answer"}
    assert type(tensors["answer"]) is torch.Tensor and torch.equal(tensors["answer"], torch.ones(3))


def test_an_unsummed_broadcast_dimension_wider_than_the_size_limit_is_kept_for_its_hint():
    """Layer norm's (n, 1) statistics left unsummed over a hidden layer wider than OVERSIZE: the answer has
    a forward tensor's shape, so it is kept and told as a missing sum, not refused as a flood."""
    from grader.exercise import Sizes, load
    from grader.judge.configs import Config
    from grader.judge.exam import prepare

    spec = "makemore-mlp/tanh-layernorm"
    sizes = Sizes(**{**load(spec).lecture, "n_hidden": sandbox.OVERSIZE + 7})
    wide = prepare(Config(spec, "wide", sizes, 7))
    attempt = sandbox.run({"dlnvar_inv": "dlnvar_inv = lndiff * dlnraw\n"}, [wide],
                          sandbox.Limits(timeout=60, cell_timeout=10))
    outcome = attempt.outcomes[("dlnvar_inv", CHAIN, "wide")]
    assert outcome.tensor is not None and tuple(outcome.tensor.shape) == (sizes.n, sizes.n_hidden), outcome
