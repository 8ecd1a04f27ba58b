"""The walls that need no root (grader.sandbox.seccomp, grader.sandbox.landlock, grader.sandbox.jail), each rule
tried by a real sandboxed child, and what happens where a wall is missing: a required one stops grading before any
student code runs, with one line and no result; --allow-weaker-sandbox grades and records the gap.

Probe cells run through grader.sandbox.parent.run, with no static check in front of them, and report what
they saw through the message of the exception they raise (see test_isolation.py).
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import platform
import pwd
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

import grader
from grader.exercises.makemore_mlp import EXERCISE
from grader.judge.compare import compare
from grader.judge.exam import CHAIN
from grader.sandbox import jail, landlock, seccomp, zygote
from grader.sandbox import parent as sandbox
from helpers import ipc
from helpers import refuse as refuse_helper
from helpers.cases import first_scored
from helpers.notebooks import reference_sources
from helpers.paths import ROOT, SOLVED

REFERENCE = reference_sources()
REPORT = "REPORT "
# Cells that run one after another in the first pass, each free to hold a probe.
PROBE_CELLS = list(REFERENCE)[:8]
LIMITS = dict(timeout=60, cell_timeout=10)


@pytest.fixture(scope="module")
def case():
    return first_scored("walls-test-salt")


def _probe(body: str) -> str:
    """A cell that runs `body` (which fills the dict `res`) and reports `res` as its exception message."""
    return ("import ctypes, errno, json, os\nres = {}\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.syscall.restype = ctypes.c_long\n"
            "def call(nr, *args):\n"
            "    r = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))\n"
            "    return r if r >= 0 else -ctypes.get_errno()\n"
            + textwrap.dedent(body) + f"\nraise ValueError({REPORT!r} + json.dumps(res))\n")


def _report(attempt, grade_id: str, case) -> dict:
    """What the probe found. The audit hook reports its ctypes and os calls, so the outcome is a flag:
    the probe's own exception is what the cell answered before the flag replaced it."""
    flagged = attempt.outcomes[(grade_id, CHAIN, case.config.name)]
    assert flagged.status == "forbidden-call", (grade_id, flagged.status, flagged.detail)
    outcome = flagged.answered
    assert outcome.status == "error", (grade_id, outcome.status, outcome.detail)
    message = outcome.detail["error"]
    assert message.startswith(REPORT), message
    return json.loads(message[len(REPORT):])


def _right(attempt, case, grade_id: str) -> bool:
    outcome = attempt.outcomes[(grade_id, CHAIN, case.config.name)]
    expected = case.expected(EXERCISE.by_grade_id[grade_id], CHAIN)
    return outcome.status == "tensor" and compare(outcome.tensor, expected, rtol=1e-5, atol=1e-8).passed


def _run(probes: dict[str, str], case, **limits) -> tuple[sandbox.Attempt, dict[str, dict]]:
    cells = {**REFERENCE, **{grade_id: _probe(body) for grade_id, body in zip(PROBE_CELLS, probes.values())}}
    attempt = sandbox.run(cells, [case], sandbox.Limits(**{**LIMITS, **limits}))
    assert attempt.error is None, attempt.error
    return attempt, {name: _report(attempt, grade_id, case) for name, grade_id in zip(probes, PROBE_CELLS)}


# ---------------------------------------------------------------------------------------------
# seccomp: every rule, tried


NUMBERS = seccomp.syscalls()
# Arguments that make each call fail harmlessly without the filter (bad pointers, bad flags, keys
# that name no object and no IPC_CREAT): only the filter answers EPERM to all of them.
HARMLESS = {"shmget": (0x7FFFFFF0, 1, 0), "msgget": (0x7FFFFFF0, 0), "semget": (0x7FFFFFF0, 1, 0)}
REFUSED = [name for name in seccomp.REFUSED if name in NUMBERS and name not in ("fork", "vfork")]


@pytest.fixture(scope="module")
def syscalls(case):
    half = len(REFUSED) // 2
    listed = {
        f"refused-{part}": f"""
            for name in {names!r}:
                r = call({NUMBERS!r}[name], *{HARMLESS!r}.get(name, (-1,) * 6))
                if r != -errno.EPERM:
                    res[name] = r
            """
        for part, names in enumerate((REFUSED[:half], REFUSED[half:]))
    }
    numbers = {k: NUMBERS[k] for k in ("clone3", "kill", "tkill", "tgkill", "rt_sigqueueinfo", "personality",
                                       "prlimit64", "sched_setaffinity", "fcntl")}
    return _run({
        **listed,
        "processes": """
            import subprocess, threading
            try:
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                res['fork'] = 'forked'
            except OSError as e:
                res['fork'] = e.errno
            for name, run in (('popen', lambda: subprocess.Popen(['/bin/true'])),
                              ('posix_spawn', lambda: os.posix_spawn('/bin/true', ['true'], {})),
                              ('execv', lambda: os.execv('/bin/true', ['true']))):
                try:
                    run()
                    res[name] = 'started'
                except OSError as e:
                    res[name] = e.errno
            ran = []
            t = threading.Thread(target=lambda: ran.append(1))
            t.start()
            t.join()
            res['thread'] = ran
            """,
        "signals": f"""
            n = {numbers!r}
            me, parent = os.getpid(), os.getppid()
            res['pids'] = [me, parent]
            death = ctypes.c_int(-1)
            res['pdeathsig'] = [libc.prctl(2, ctypes.byref(death), 0, 0, 0), death.value]  # PR_GET_PDEATHSIG
            try:
                res['proc'] = sorted(e for e in os.listdir('/proc') if e.isdigit())
            except OSError as e:
                res['proc'] = e.errno
            res['clone3'] = call(n['clone3'], 0, 0)
            res['kill_self'] = call(n['kill'], me, 0)
            res['kill_parent'] = call(n['kill'], parent, 0)
            res['kill_group'] = call(n['kill'], 0, 0)
            res['kill_all'] = call(n['kill'], -1, 0)
            res['kill_init'] = call(n['kill'], 1, 0)
            res['tkill_self'] = call(n['tkill'], me, 0)
            res['tkill_parent'] = call(n['tkill'], parent, 0)
            res['tgkill_self'] = call(n['tgkill'], me, me, 0)
            res['tgkill_parent'] = call(n['tgkill'], parent, parent, 0)
            res['sigqueue_parent'] = call(n['rt_sigqueueinfo'], parent, 0, 0)
            limits = ctypes.create_string_buffer(16)
            res['prlimit_self'] = call(n['prlimit64'], 0, 4, 0, ctypes.addressof(limits))
            res['prlimit_other'] = call(n['prlimit64'], {jail.NO_SUCH_PID}, 4, 0, ctypes.addressof(limits))
            res['sched_setaffinity_other'] = call(n['sched_setaffinity'], {jail.NO_SUCH_PID}, 0, 0)
            read, write = os.pipe()
            res['setown_other'] = call(n['fcntl'], read, 8, {jail.NO_SUCH_PID})
            owner = ctypes.create_string_buffer(8)  # struct f_owner_ex: F_OWNER_PID (1), then the pid
            owner[:8] = (1).to_bytes(4, 'little') + ({jail.NO_SUCH_PID}).to_bytes(4, 'little')
            res['setown_ex_other'] = call(n['fcntl'], read, 15, ctypes.addressof(owner))
            res['getfl'] = call(n['fcntl'], read, 3) >= 0
            res['personality_query'] = call(n['personality'], 0xFFFFFFFF) >= 0
            res['personality_change'] = call(n['personality'], 0x0040000)
            """,
        "memory": """
            import mmap
            try:
                mmap.mmap(-1, 4096)
                res['shared_anonymous'] = 'mapped'
            except OSError as e:
                res['shared_anonymous'] = e.errno
            private = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            private.write(b'x' * 10)
            res['private_anonymous'] = 'mapped'
            """,
    }, case)


@pytest.mark.parametrize("part", [0, 1])
def test_every_refused_call_answers_eperm(syscalls, part):
    _, r = syscalls
    assert r[f"refused-{part}"] == {}, f"not refused with EPERM: {r[f'refused-{part}']}"


@pytest.mark.parametrize("how", ["fork", "popen", "posix_spawn", "execv"])
def test_no_process_or_program_can_be_started(syscalls, how):
    _, r = syscalls
    assert r["processes"][how] == errno.EPERM, r["processes"]


def test_threads_still_start(syscalls):
    _, r = syscalls
    assert r["processes"]["thread"] == [1]


def test_clone3_answers_enosys_so_that_libc_falls_back_to_clone(syscalls):
    _, r = syscalls
    assert r["signals"]["clone3"] == -errno.ENOSYS


@pytest.mark.parametrize("target", ["parent", "group", "all"])
def test_kill_reaches_no_other_process(syscalls, target):
    _, r = syscalls
    assert r["signals"][f"kill_{target}"] == -errno.EPERM, r["signals"]


@pytest.mark.skipif(os.getuid() != 0, reason="a PID namespace needs root or user namespaces")
def test_the_child_is_pid_1_of_its_own_namespace_and_sees_no_other_pid(syscalls):
    """Its parent has no pid in the namespace (getppid() is 0), so no signal can name the grader, the
    fork server or the host's init: pid 1, the only pid there is, is the child itself. Its own /proc
    lists nothing else, whether the probe may read it or Landlock refuses. It dies with its parent
    (SIGKILL, still set when student code runs: the uid change that would clear it came before)."""
    attempt, r = syscalls
    assert r["signals"]["pids"] == [1, 0], r["signals"]
    assert r["signals"]["pdeathsig"] == [0, signal.SIGKILL], r["signals"]
    assert r["signals"]["kill_init"] == 0, r["signals"]
    assert r["signals"]["proc"] in (["1"], errno.EACCES), r["signals"]
    pid_wall = attempt.isolation["walls"]["pid"]
    assert pid_wall.startswith("in force: pid 1 of a PID namespace") and pid_wall.endswith("listing pids 1"), pid_wall


@pytest.mark.parametrize("call", ["tkill", "tgkill", "sigqueue"])
def test_other_signal_calls_reach_no_other_process(syscalls, call):
    _, r = syscalls
    assert r["signals"][f"{call}_parent"] == -errno.EPERM, r["signals"]


def test_no_other_process_has_its_limits_or_scheduling_changed(syscalls):
    """A process of the same uid could otherwise set the grader's CPU-time limit to a second (it dies)
    without sending a signal; a pid that does not exist shows the filter (the kernel would say ESRCH)."""
    _, r = syscalls
    assert r["signals"]["prlimit_other"] == r["signals"]["sched_setaffinity_other"] == -errno.EPERM, r["signals"]
    assert r["signals"]["prlimit_self"] == 0, r["signals"]


def test_no_file_can_be_made_to_signal_another_process(syscalls):
    """F_SETOWN (with F_SETSIG) would let the kernel send SIGKILL on the child's behalf when a pipe is
    written (SIGIO); a pid that does not exist shows the filter (the kernel would say ESRCH)."""
    _, r = syscalls
    assert r["signals"]["setown_other"] == r["signals"]["setown_ex_other"] == -errno.EPERM, r["signals"]
    assert r["signals"]["getfl"], r["signals"]


def test_signalling_itself_still_works(syscalls):
    _, r = syscalls
    assert r["signals"]["kill_self"] == r["signals"]["tkill_self"] == r["signals"]["tgkill_self"] == 0


def test_personality_can_be_read_but_not_changed(syscalls):
    _, r = syscalls
    assert r["signals"]["personality_query"] is True
    assert r["signals"]["personality_change"] == -errno.EPERM


def test_shared_anonymous_memory_is_refused_and_private_memory_is_not(syscalls):
    _, r = syscalls
    assert r["memory"] == {"shared_anonymous": errno.EPERM, "private_anonymous": "mapped"}


def test_the_reference_answers_after_the_probes_are_right(syscalls, case):
    attempt, _ = syscalls
    for grade_id in ("dh", "dW2", "dhpreact", "dbnraw", "dC", "ex2_dlogits", "ex3_dhprebn", "ex4_dW1"):
        assert _right(attempt, case, grade_id), grade_id


def _children_of(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    return found


@pytest.mark.skipif(os.getuid() != 0, reason="a PID namespace needs root or user namespaces")
def test_pid_1_dies_with_the_process_that_forked_it(case):
    """Killing only the process the fork server forked (as the grader's pidfd kill does) ends pid 1 at
    once, long before its cell's timeout, though pid 1 still holds the protocol pipes and no group or
    cgroup kill has come: nothing of a submission outlives its parent."""
    zygote.start()
    seen = {}

    def kill_the_parent_alone():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "pid 1" not in seen:
            for parent in _children_of(zygote.server_pid()):
                inside = _children_of(parent)
                if inside:
                    seen["pid 1"], seen["killed"] = inside[0], time.monotonic()
                    os.kill(parent, signal.SIGKILL)
                    break
            time.sleep(0.05)
        while time.monotonic() < deadline and "gone after" not in seen:
            try:
                if Path(f"/proc/{seen['pid 1']}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    seen["gone after"] = time.monotonic() - seen["killed"]
            except FileNotFoundError:
                seen["gone after"] = time.monotonic() - seen["killed"]
            time.sleep(0.01)

    cells = {**REFERENCE, "dlogprobs": "import time\ntime.sleep(25)\n"}
    killer = threading.Thread(target=kill_the_parent_alone)
    killer.start()
    attempt = sandbox.run(cells, [case], sandbox.Limits(timeout=60, cell_timeout=3))
    killer.join()
    assert "pid 1" in seen and seen["gone after"] < 5, seen
    # The kill cost the exchange it ended and no more: its cells ran again in a fresh child, where the
    # sleeping cell met its own time limit, and the rest was graded.
    assert attempt.error is None, attempt.error
    outcome = attempt.outcomes[("dlogprobs", CHAIN, case.config.name)]
    assert (outcome.answered or outcome).status == "timeout", outcome
    assert _right(attempt, case, "dprobs") and _right(attempt, case, "dC")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x32 numbering exists on x86-64 only")
def test_an_x32_system_call_kills_the_child(case):
    getpid_x32 = seccomp.X32_SYSCALL_BIT | 39
    cells = {**REFERENCE, "dlogprobs": _probe(f"call({getpid_x32})")}
    attempt = sandbox.run(cells, [case], sandbox.Limits(**LIMITS))
    assert attempt.error is None, attempt.error
    outcome = attempt.outcomes[("dlogprobs", CHAIN, case.config.name)]
    assert outcome.status == "crashed" and outcome.detail == {"crash": sandbox.CRASHES["syscall"]}, outcome
    assert _right(attempt, case, "dprobs") and _right(attempt, case, "dC")


def test_the_syscall_numbers_match_libseccomps_tables():
    try:
        lib = ctypes.CDLL("libseccomp.so.2")
    except OSError:
        pytest.skip("libseccomp is not installed")
    resolve = lib.seccomp_syscall_resolve_name_arch
    resolve.argtypes, resolve.restype = [ctypes.c_uint32, ctypes.c_char_p], ctypes.c_int
    for arch, (audit, numbers) in seccomp.ARCHES.items():
        for name, number in numbers.items():
            assert resolve(audit, name.encode()) == number, (arch, name)
        absent = [n for n in (*seccomp.REFUSED, *seccomp.SIGNALLING, *seccomp.ON_ONE_PROCESS) if n not in numbers]
        assert all(resolve(audit, n.encode()) < 0 for n in absent), (arch, absent)


# ---------------------------------------------------------------------------------------------
# Landlock: what a child may read and write


@pytest.fixture(scope="module")
def files(case):
    """Paths a child must read (stdlib, torch, the grader's loaded modules, /dev/urandom) and paths it
    must not: a non-imported module and a course file inside the grader package, the interpreter."""
    import torch

    package = Path(grader.__file__).parent
    course_file = package / f"course-material-{uuid.uuid4().hex}.yml"
    course_file.write_text("secret_salt: hidden\n")
    course_file.chmod(0o644)
    paths = {
        "stdlib": os.__file__, "torch": torch.__file__, "grader-child": str(package / "sandbox" / "child.py"),
        "urandom": "/dev/urandom", "grader-not-imported": str(package / "demo.py"),
        "grader-course-file": str(course_file), "interpreter": os.path.realpath(sys.executable),
        "proc-grader": f"/proc/{os.getpid()}/cmdline",
    }
    writes = {"dev-null": "/dev/null", "work-dir": "probe.txt",
              "torch-package": str(Path(torch.__file__).parent / "x.pth"),
              "grader-package": str(package / "planted.py")}
    try:
        yield _run({
            "read": f"""
                for key, path in {paths!r}.items():
                    try:
                        with open(path, 'rb') as f:
                            f.read(1)
                        res[key] = 'read'
                    except OSError as e:
                        res[key] = e.errno
                """,
            "write": f"""
                for key, path in {writes!r}.items():
                    try:
                        with open(path, 'ab') as f:
                            f.write(b'x')
                        res[key] = 'written'
                    except OSError as e:
                        res[key] = e.errno
                """,
            "list": f"""
                for key, path in {{'grader': {str(package)!r}, 'stdlib': os.path.dirname(os.__file__)}}.items():
                    try:
                        res[key] = len(os.listdir(path))
                    except OSError as e:
                        res[key] = e.errno
                """,
        }, case), writes
    finally:
        course_file.unlink()


@pytest.mark.parametrize("key", ["stdlib", "torch", "grader-child", "urandom"])
def test_what_the_child_needs_is_readable(files, key):
    (_, r), _ = files
    assert r["read"][key] == "read", r["read"]


@pytest.mark.parametrize("key", ["grader-not-imported", "grader-course-file", "interpreter", "proc-grader"])
def test_nothing_else_is_readable_not_even_inside_the_grader_package(files, key):
    """The grader's /proc entry is refused by Landlock, or absent from the PID namespace's own /proc."""
    (_, r), _ = files
    assert r["read"][key] in ((errno.EACCES, errno.ENOENT) if key == "proc-grader" else (errno.EACCES,)), r["read"]


def test_the_grader_package_cannot_be_listed_and_the_standard_library_can(files):
    (_, r), _ = files
    assert r["list"]["grader"] == errno.EACCES and r["list"]["stdlib"] > 50, r["list"]


@pytest.mark.parametrize("key", ["work-dir", "torch-package", "grader-package"])
def test_nothing_is_writable(files, key):
    (_, r), writes = files
    assert r["write"][key] in (errno.EACCES, errno.EROFS), r["write"]  # EROFS: the mount namespace's bind
    assert not Path(writes[key]).exists() or key == "work-dir"


def test_dev_null_stays_writable(files):
    (_, r), _ = files
    assert r["write"]["dev-null"] == "written"


def test_the_ruleset_grants_grader_modules_one_file_at_a_time():
    """Run in this process (the grader's modules are imported here as in the fork server)."""
    rules = landlock.readable()
    package = os.path.realpath(os.path.dirname(grader.__file__))
    assert package not in rules
    assert not any(path.startswith(package + os.sep) and rights != landlock.READ_FILE for path, rights in rules.items())
    assert rules[os.path.join(package, "sandbox", "jail.py")] == landlock.READ_FILE
    assert not any(path.endswith(("site-packages", "dist-packages")) for path in rules)


def test_torch_math_that_loads_code_lazily_still_works_behind_the_walls(case):
    """Ops whose first call imports or reads something (einsum's path optimiser, linalg, special,
    printing, tracebacks through torch's Python code): the fork server imported them, or Landlock lets
    the child read them."""
    attempt, r = _run({"ops": """
        import torch
        import torch.nn.functional as F
        x = torch.randn(4, 5, dtype=torch.float64)
        y = torch.randn(5, 4, dtype=torch.float64)
        i = torch.tensor([0, 1, 2, 3])
        ops = {
            'einsum': lambda: torch.einsum('ij,jk->ik', x, y), 'tensordot': lambda: torch.tensordot(x, y, 1),
            'linalg': lambda: (torch.linalg.norm(x), torch.linalg.svd(x), torch.linalg.inv(x @ y)),
            'special': lambda: torch.special.expit(x), 'repr': lambda: repr(x) + str(x) + f'{x.sum():.3f}',
            'unique': lambda: torch.unique(i), 'topk': lambda: torch.topk(x, 2), 'kron': lambda: torch.kron(x, y),
            'functional': lambda: (F.one_hot(i, 5), F.cross_entropy(x, i), F.pad(x, (1, 1)), F.normalize(x)),
            'scatter': lambda: torch.scatter_reduce(x, 0, i.view(4, 1).expand(4, 5), x, 'sum'),
            'float16': lambda: x.half().sum(), 'tolist': lambda: x.tolist(),
        }
        for name, op in ops.items():
            try:
                op()
            except Exception as e:
                res[name] = repr(e)[:80]
        try:
            torch.split(x, [1, 1])
        except RuntimeError as e:
            import traceback
            frames = [f for f in traceback.extract_tb(e.__traceback__) if '/torch/' in f.filename]
            res['traceback'] = bool(frames) and all(f.line for f in frames)  # torch's source was read
        """}, case)
    assert r["ops"] == {"traceback": True}, r["ops"]


# ---------------------------------------------------------------------------------------------
# Memory: a data limit that holds with every torch build


HOG = "big = torch.ones(3 * 2**28, dtype=torch.float64)\ndlogprobs = big[:1]\n"  # 6 GB


@pytest.fixture(scope="module")
def cuda_like_server():
    """A fork server that reserved 8 GB of address space at start-up, as a CUDA build of torch does."""
    server = zygote.ForkServer({**zygote.ENV, "BACKPROP_NINJA_TEST_RESERVE_MB": "8192"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(zygote, "server", server)
        yield server
    server.close()


def test_a_server_with_8_gb_reserved_still_grades_a_correct_submission_in_full(cuda_like_server, case):
    attempt = sandbox.run(REFERENCE, [case], sandbox.Limits(**LIMITS))
    assert attempt.error is None, attempt.error
    size = int(next(line.split()[1] for line in Path(f"/proc/{cuda_like_server.pid}/status").read_text().splitlines()
                    if line.startswith("VmSize:")))
    assert size > 8 * 2**20, size  # kB: the reservation is really there
    wrong = [key for key, o in attempt.outcomes.items() if o.status != "tensor"]
    assert wrong == []
    assert all(_right(attempt, case, g) for g in ("dlogprobs", "dh", "dW1", "dC", "ex2_dlogits", "ex4_dW1"))


def test_a_memory_hog_is_still_stopped_and_flagged_memory(cuda_like_server, case):
    attempt = sandbox.run({**REFERENCE, "dlogprobs": HOG}, [case], sandbox.Limits(**LIMITS, memory_mb=1024))
    outcome = attempt.outcomes[("dlogprobs", CHAIN, case.config.name)]
    assert outcome.status == "error" and outcome.detail.get("limit") == "memory", outcome.detail
    assert _right(attempt, case, "dh")


# ---------------------------------------------------------------------------------------------
# Environment errors are never a student's result


def test_a_fork_server_that_cannot_start_is_an_environment_error(case):
    broken = zygote.ForkServer({**zygote.ENV, "BACKPROP_NINJA_TEST_RESERVE_MB": "not a number"})
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(zygote, "server", broken)
            with pytest.raises(sandbox.SandboxUnavailable, match="^the sandbox cannot start: the fork server"):
                sandbox.run(REFERENCE, [case], sandbox.Limits(**LIMITS))
    finally:
        broken.close()


def test_a_grader_bug_stops_the_batch_with_one_line_and_no_result(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from grader.cli import main

    def broken(*args, **kwargs):
        raise KeyError("a bug of the grader's")

    monkeypatch.setattr(sandbox, "run", broken)
    out = tmp_path / "out"
    done = CliRunner().invoke(main, ["grade", str(SOLVED), "--out", str(out), "--course", str(ROOT / "course.yml")])
    assert done.exit_code == 1, done.output
    assert done.output.strip().splitlines()[-1] == (
        "Error: the grader failed (its own fault, not a submission's): KeyError: \"a bug of the grader's\"")
    assert not list(out.glob("*.json")) and not (out / "grades.csv").exists()


def test_an_unknown_required_wall_is_refused_in_course_yml(tmp_path):
    from grader.course import CourseError, load

    text = (ROOT / "course.yml").read_text() + "sandbox:\n  require: [seccomp, moat]\n"
    (tmp_path / "course.yml").write_text(text)
    with pytest.raises(CourseError, match="sandbox.require: moat: unknown wall"):
        load(tmp_path / "course.yml")


def _cli(*args, refuse: tuple[str, ...] = (), user: str | None = None, cwd=None) -> subprocess.CompletedProcess:
    command = [shutil.which("backprop-ninja"), *args]
    if refuse:
        command = [sys.executable, refuse_helper.__file__, *refuse, "--", *command]
    if user:
        command = ["runuser", "-u", user, "--", *command]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd or ROOT, timeout=300)


@pytest.mark.slow
def test_grading_stops_with_one_line_and_no_result_when_a_required_wall_is_missing(tmp_path):
    out = tmp_path / "out"
    done = _cli("grade", str(SOLVED), "--out", str(out), refuse=("landlock_create_ruleset:ENOSYS",))
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: the sandbox's landlock wall is required") and "lsm=" in last, done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.slow
def test_allow_weaker_sandbox_grades_and_every_result_records_the_missing_wall(tmp_path):
    out = tmp_path / "out"
    done = _cli("grade", str(SOLVED), "--out", str(out), "--allow-weaker-sandbox",
                refuse=("landlock_create_ruleset:ENOSYS",))
    assert done.returncode == 0, done.stderr
    assert "sandbox: grading without landlock" in done.stderr
    result = json.loads((out / "backprop_ninja_solved.json").read_text())
    assert result["score"] == result["max_score"]
    isolation = result["extra_data"]["isolation"]
    assert isolation["missing"] == ["landlock"] and isolation["walls"]["landlock"].startswith("missing: ")


@pytest.mark.slow
def test_sandbox_check_lists_every_wall_and_fails_on_a_missing_required_one():
    held = _cli("sandbox", "check")
    assert held.returncode == 0, held.stderr
    lines = held.stdout.splitlines()
    assert [line.split()[0] for line in lines[:len(jail.WALLS)]] == list(jail.WALLS)
    assert lines[-1].startswith("every required wall holds")
    refused = _cli("sandbox", "check", refuse=("landlock_create_ruleset:ENOSYS",))
    assert refused.returncode == 1
    assert any(line.startswith("landlock") and "missing" in line for line in refused.stdout.splitlines())
    assert refused.stderr.startswith("Error: required wall(s) missing: landlock")


@pytest.mark.skipif(os.getuid() != 0, reason="only root can be stuck at uid 0")
def test_a_child_stuck_at_uid_0_refuses_even_when_weaker_walls_are_allowed():
    """A container where root may not change its uid: no course setting lets student code run as root."""
    done = _cli("sandbox", "check", refuse=("setuid:EPERM", "setgid:EPERM", "setgroups:EPERM"))
    assert done.returncode == 1
    assert done.stderr.startswith("Error: student code never runs as root"), done.stderr


def test_without_user_namespaces_the_default_walls_still_hold(tmp_path):
    """Docker's default profile and Ubuntu 24.04 refuse unshare: the namespaces go, the required walls stay."""
    done = _cli("sandbox", "check", refuse=("unshare:EPERM",))
    assert done.returncode == 0, done.stdout + done.stderr
    walls = {line.split()[0]: line for line in done.stdout.splitlines()[:len(jail.WALLS)]}
    for wall in ("network", "ipc", "pid", "filesystem"):
        assert "missing: unshare refused" in walls[wall], walls[wall]
    for wall in sandbox.Limits().require:  # the walls required by default
        assert " in force: " in walls[wall], walls[wall]


@pytest.mark.skipif(os.getuid() != 0, reason="the work dir's tmpfs needs the mount namespace root has")
def test_without_landlock_the_work_dir_is_a_tmpfs_no_larger_than_the_file_limit():
    """A weaker sandbox (--allow-weaker-sandbox where Landlock is missing) writes in its work dir, but
    never more than file_size_mb in all, and never on the host's disk."""
    result = _grader_process({"dlogprobs": _probe("""
        for i in range(3):
            try:
                with open(f'part{i}.bin', 'wb') as f:
                    f.write(b'x' * (10 << 20))
                res[str(i)] = 'written'
            except OSError as e:
                res[str(i)] = e.errno
        res['cwd'] = os.getcwd()
        """)}, ("landlock_create_ruleset:ENOSYS",), require=[], file_size_mb=16)
    r = json.loads(result["outcomes"]["dlogprobs"][1]["error"][len(REPORT):])
    assert result["isolation"]["missing"] == ["landlock"], result["isolation"]
    assert r["0"] == "written" and r["1"] == errno.ENOSPC, r
    assert not os.path.exists(r["cwd"])


# ---------------------------------------------------------------------------------------------
# As a normal user: the way most instructors and every JupyterHub run the grader


ROOT_ONLY = pytest.mark.skipif(os.getuid() != 0, reason="creates a user (useradd)")


@contextlib.contextmanager
def _traversable_root():
    """The Python installation may sit under /root (mode 700 here): a normal user needs to pass it."""
    mode = os.stat("/root").st_mode
    os.chmod("/root", mode | 0o001)
    try:
        yield
    finally:
        os.chmod("/root", mode)


@pytest.fixture(scope="module")
def normal_user():
    name = f"bpn{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-m", name], check=True)
    try:
        with _traversable_root():
            yield pwd.getpwnam(name)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], check=False)
        subprocess.run(["userdel", "-r", name], check=False, capture_output=True)


SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
from grader.sandbox import parent as sandbox
from grader.judge.configs import generate
from grader.judge.exam import prepare
from helpers.notebooks import reference_sources
case = prepare(generate("makemore-mlp", "walls-user-salt", 1)[0])
cells = {{**reference_sources(), **json.loads(sys.argv[1])}}
attempt = sandbox.run(cells, [case], sandbox.Limits(**json.loads(sys.argv[2])))
print(json.dumps({{"error": attempt.error, "isolation": attempt.isolation,
                  "outcomes": {{g: [o.status, (o.answered or o).detail]
                               for (g, c, _), o in attempt.outcomes.items() if c == "chain"}}}}))
"""


def _grader_process(cells: dict[str, str], refuse: tuple[str, ...] = (), user=None, **limits) -> dict:
    """sandbox.run in a fresh grader process, on a host that refuses the `refuse` system calls; with
    `user`, as that user, inside a virtual environment the user owns (as an instructor's would be):
    the walls must keep the child out of it too. A probe's outcome is flagged by the audit hook; its
    detail is what the probe itself answered."""
    python = sys.executable
    if user is not None:
        python = str(_users_venv(user) / "bin" / "python")
    command = [python, "-c", SCRIPT.format(tests=str(ROOT / "tests")), json.dumps(cells),
               json.dumps({"timeout": 60, "cell_timeout": 10, **limits})]
    if refuse:
        command = [python, refuse_helper.__file__, *refuse, "--", *command]
    if user is not None:
        command = ["runuser", "-u", user.pw_name, "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, cwd=user.pw_dir if user else ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _users_venv(user) -> Path:
    venv = Path(user.pw_dir) / "venv"
    if not venv.exists():
        subprocess.run(["runuser", "-u", user.pw_name, "--", sys.executable, "-m", "venv", "--without-pip",
                        str(venv)], check=True)
        site = next(venv.glob("lib/python*/site-packages"))
        links = Path(site) / "backprop-ninja.pth"
        import torch

        links.write_text(f"{ROOT}\n{Path(torch.__file__).parent.parent}\n")
        os.chown(links, user.pw_uid, user.pw_gid)
    return venv


@ROOT_ONLY
@pytest.mark.parametrize("refuse", [(), ("unshare:EPERM",)], ids=["user-namespaces", "no-user-namespaces"])
@pytest.mark.slow  # a unix user and a virtual environment of its own
def test_as_a_normal_user_the_child_reaches_none_of_the_users_files_or_processes(normal_user, refuse):
    home = Path(normal_user.pw_dir)
    secret = home / "secret.txt"
    secret.write_text("the grading user's own file\n")
    os.chown(secret, normal_user.pw_uid, normal_user.pw_gid)
    secret.chmod(0o600)
    site = next((home / "venv").glob("lib/python*/site-packages"), None)
    planted = [str(site / "evil.pth") if site else str(home / "venv" / "evil.pth"), str(home / ".bashrc")]
    bystander = subprocess.Popen(["runuser", "-u", normal_user.pw_name, "--", "sleep", "300"])
    sleeper = None
    try:
        for _ in range(100):
            found = subprocess.run(["pgrep", "-u", normal_user.pw_name, "-x", "sleep"], capture_output=True, text=True)
            if found.stdout.split():
                sleeper = int(found.stdout.split()[0])
                break
            subprocess.run(["sleep", "0.05"])
        assert sleeper is not None
        result = _grader_process({
            "dlogprobs": _probe(f"""
                try:
                    res['read'] = open({str(secret)!r}).read()
                except OSError as e:
                    res['read'] = e.errno
                for path in {planted!r}:
                    try:
                        open(path, 'a').write('import os')
                        res[path] = 'written'
                    except OSError as e:
                        res[path] = e.errno
                for target in ({sleeper}, os.getppid()):
                    try:
                        os.kill(target, 9)
                        res[str(target)] = 'killed'
                    except OSError as e:
                        res[str(target)] = e.errno
                res['uid'] = os.getuid()
                """),
        }, refuse, normal_user)
        r = json.loads(result["outcomes"]["dlogprobs"][1]["error"][len(REPORT):])
        assert r["read"] in (errno.EACCES, errno.ENOENT), r
        assert all(r[path] in (errno.EACCES, errno.ENOENT, errno.EROFS) for path in planted), r  # refused, however
        assert r[str(sleeper)] == errno.EPERM and bystander.poll() is None, r
        assert r["uid"] == normal_user.pw_uid
        assert not any(Path(p).exists() and "import os" in Path(p).read_text() for p in planted)
        assert result["error"] is None and result["isolation"]["missing"] == (
            ["cgroup", "network", "ipc", "pid", "filesystem"] if refuse else ["cgroup"]), result["isolation"]
        assert result["isolation"]["walls"]["pid"].startswith(
            "missing: unshare refused" if refuse else "in force: pid 1 of a PID namespace"), result["isolation"]
        assert result["outcomes"]["dh"][0] == "tensor"
    finally:
        if sleeper is not None:
            os.kill(sleeper, signal.SIGKILL)
        bystander.wait()
    left = subprocess.run(["pgrep", "-u", normal_user.pw_name], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes of the user left behind: {left}"


@pytest.fixture
def packaged_course_data():
    """A folder inside the grader package, as an installed wheel's grader/course_data is: the package is
    exposed to the child (it imports it), this folder inside it hidden. World-readable: only the
    sandbox's covering keeps a child out."""
    folder = Path(grader.__file__).parent / f"course_data_{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o755)
    (folder / "course.yml").write_text("secret_salt: a course's salt\n")
    (folder / "course.yml").chmod(0o644)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.mark.slow  # a grader process (and, as a normal user, a unix user and a virtual environment)
@pytest.mark.parametrize("as_user", [False, pytest.param(True, marks=ROOT_ONLY)], ids=["grader-user", "normal-user"])
def test_a_hidden_folder_inside_the_exposed_grader_package_is_covered(packaged_course_data, as_user, request):
    """The wheel's case: the folder holding the package (a venv under /tmp, a checkout, a home) is hidden,
    the package bound back, and grader/course_data inside it must be covered again, or every grade run
    records the filesystem wall missing while `sandbox check` says it holds."""
    user = request.getfixturevalue("normal_user") if as_user else None
    hide = [str(ROOT), str(packaged_course_data)]
    result = _grader_process({}, user=user, hide=hide)
    isolation = result["isolation"]
    assert "filesystem" not in isolation["missing"], isolation
    assert isolation["walls"]["filesystem"].startswith("in force: "), isolation


def test_a_covering_failure_is_not_sent_to_host_settings():
    """A wall whose namespaces were made but whose covering failed is no host's doing: the refusal line
    must not tell the TA to enable user namespaces that already work."""
    line = jail.refusal("filesystem", f"/x/grader/course_data still shows its contents ({jail.NOT_THE_HOST})")
    assert "user namespaces" not in line and "report this line" in line, line
    assert "allow unprivileged user namespaces" in jail.refusal("filesystem", "unshare refused (EPERM)")


# ---------------------------------------------------------------------------------------------
# IPC: nothing a child makes reaches the host or outlives it


@ROOT_ONLY
@pytest.mark.parametrize("as_user", [False, True], ids=["root", "normal-user"])
@pytest.mark.parametrize("refuse", [(), ("unshare:EPERM",)], ids=["namespaces", "no-namespaces"])
@pytest.mark.slow  # a grader process of its own, and for a normal user a virtual environment
def test_no_ipc_object_a_child_makes_reaches_the_host(request, refuse, as_user):
    """POSIX message queues, POSIX shared memory, named pipes, SysV objects, abstract and paired sockets,
    eventfd and memfd, tried from a child with no static check in front of it: each is refused, or lands
    in a namespace or a file system of the child's own; the host's IPC, inventoried before and after,
    holds nothing new. Without namespaces a queue once reached the host (mq_open is in no Landlock rule)."""
    user = request.getfixturevalue("normal_user") if as_user else None
    tag = f"bpn-ipc-{uuid.uuid4().hex[:12]}"
    before = ipc.inventory()
    result = _grader_process({"dlogprobs": _probe(ipc.PAYLOAD + f"res = try_ipc({tag!r})\n")}, refuse, user)
    after = ipc.inventory()
    new = ipc.made(before, after, tag, lambda uid: uid >= sandbox.UID_BASE or (user is not None and uid == user.pw_uid))
    ipc.remove(new)
    assert result["error"] is None, result["error"]
    r = json.loads(result["outcomes"]["dlogprobs"][1]["error"][len(REPORT):])
    assert new == set(), (new, r)
    kernel_objects = {k: v for k, v in r.items() if k not in (*ipc.FILES, *ipc.PRIVATE)}
    assert kernel_objects == dict.fromkeys(kernel_objects, errno.EPERM), r
    # POSIX shared memory and a named pipe are files: in a place a private tmpfs covers, or Landlock refuses.
    assert r["shm_open"] in ("made", errno.EACCES) and r["mkfifo"] in ("made", errno.EACCES), r


# ---------------------------------------------------------------------------------------------
# A cell that stops its child, on every kind of host


@ROOT_ONLY
@pytest.mark.parametrize("as_user", [False, True], ids=["root", "normal-user"])
@pytest.mark.parametrize("refuse", [(), ("unshare:EPERM",)], ids=["namespaces", "no-namespaces"])
@pytest.mark.slow  # a grader process of its own, two children stopped
def test_a_cell_that_stops_its_child_costs_that_cell_alone_on_every_host(request, refuse, as_user):
    """A fresh child takes over with the same walls wherever they are raised: one cell ends its child,
    another will not stop at its limit, and every other answer is graded."""
    user = request.getfixturevalue("normal_user") if as_user else None
    swallow = "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass\n"
    result = _grader_process({"dbnvar": "import os\nos._exit(5)\n", "dC": swallow}, refuse, user, cell_timeout=1)
    assert result["error"] is None, result["error"]
    outcomes = result["outcomes"]
    assert outcomes["dbnvar"] == ["crashed", {"crash": sandbox.CRASHES["exit"]}], outcomes["dbnvar"]
    assert outcomes["dC"] == ["timeout", {"seconds": 1}], outcomes["dC"]
    assert all(status == "tensor" for grade_id, (status, _) in outcomes.items() if grade_id not in ("dbnvar", "dC"))
    assert result["isolation"]["missing"] == (["cgroup"] if as_user else []) + (
        ["network", "ipc", "pid", "filesystem"] if refuse else []), result["isolation"]["missing"]
