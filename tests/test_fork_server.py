"""grader.sandbox.zygote: the fork server that makes a sandboxed child cost milliseconds, not a second.

What matters is that the speed costs nothing in safety: the server is a fresh interpreter (so no
oracle value is in any child's memory), single-threaded, the parent of every child (not the grader),
and a server that dies costs one submission at most, never the batch.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from grader.judge.configs import generate
from grader.judge.exam import prepare
from grader.sandbox import parent as sandbox
from grader.sandbox import zygote
from helpers.children import processes
from helpers.notebooks import reference_sources

REFERENCE = reference_sources()


@pytest.fixture(scope="module")
def case():
    return prepare(generate("makemore-mlp", "fork-server-test-salt", 1)[0])


def _status_line(pid: int, key: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith(key + ":"))


def test_the_server_is_a_fresh_single_threaded_interpreter_not_a_fork_of_the_grader():
    pid = zygote.server_pid()
    cmdline, _, group = processes()[pid]
    assert cmdline[1:4] == [b"-I", b"-c", zygote.START.encode()], cmdline
    # the very grader package this process imported, whatever the interpreter's site-packages hold
    assert repr(str(Path(zygote.__file__).resolve().parents[2])) in zygote.START
    assert int(_status_line(pid, "PPid")) == os.getpid()
    assert group == pid, "the server should have a process group of its own (Ctrl-C goes to the grader)"
    assert _status_line(pid, "Threads") == "1"


def test_every_child_is_the_servers_and_reports_it(case):
    code = ("import os\n"
            "dlogprobs = torch.zeros_like(logprobs)\n"
            "dlogprobs[0, 0] = float(os.getppid())\n")
    answered = []  # what the child answered, before the parent replaces it with the audit hook's report
    real = sandbox._outcome

    def outcome(header, tensors, *names):
        if header.get("grade_id") == "dlogprobs":
            answered.append(real(header, tensors, *names))
        return real(header, tensors, *names)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sandbox, "_outcome", outcome)
        attempt = sandbox.run({"dlogprobs": "exec = exec\nexec(" + repr(code) + ")\n"}, [case],
                              sandbox.Limits(timeout=30, cell_timeout=5))
    assert attempt.outcomes[("dlogprobs", "chain", case.config.name)].status == "forbidden-call"
    assert answered and all(o.status == "tensor" for o in answered), answered
    # In a PID namespace of its own, the child's parent (forked by the server) has no pid it can see.
    in_pid_namespace = attempt.isolation["walls"]["pid"].startswith("in force")
    assert {int(o.tensor[0, 0]) for o in answered} == {0 if in_pid_namespace else zygote.server_pid()}
    assert "fork server" in attempt.isolation["process"]


def test_a_server_killed_mid_submission_costs_that_submission_only(case):
    """The cell kills nothing itself (it cannot: another uid); the test kills the server while the
    cell sleeps, as an OOM killer would."""
    pid = zygote.server_pid()
    slow = "import time\ntime.sleep(3)\ndprobs = torch.zeros_like(probs)\n"
    timer = threading.Timer(1.0, os.kill, (pid, signal.SIGKILL))
    timer.start()
    try:
        first = sandbox.run({**REFERENCE, "dprobs": "exec = exec\nexec(" + repr(slow) + ")\n"}, [case],
                            sandbox.Limits(timeout=30, cell_timeout=10))
    finally:
        timer.cancel()
    # The child lives on (its parent died, not it): it finishes the submission or is stopped; either
    # way the result says what happened and nothing is left running.
    assert first.error is None or "grading process" in first.error, first.error
    second = sandbox.run(REFERENCE, [case], sandbox.Limits(timeout=30, cell_timeout=10))
    assert second.error is None, second.error
    assert zygote.server_pid() != pid
    assert all(o.status == "tensor" for o in second.outcomes.values())


def _collapse_supported() -> bool:
    """MADV_COLLAPSE (Linux 6.1) on a private anonymous mapping of this process."""
    import ctypes
    import mmap

    region = mmap.mmap(-1, 4 * zygote.HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        region.write(b"x" * len(region))
        address = ctypes.addressof(ctypes.c_char.from_buffer(region))
        start = -(-address // zygote.HUGE_PAGE) * zygote.HUGE_PAGE
        madvise = ctypes.CDLL(None, use_errno=True).madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return madvise(start, zygote.HUGE_PAGE, zygote.MADV_COLLAPSE) == 0
    finally:
        region.close()


def test_the_servers_heap_sits_on_huge_pages_where_the_kernel_allows():
    """What makes forking a child cheap: its page tables are copied 2 MB at a time."""
    if not _collapse_supported():
        pytest.skip("this kernel cannot collapse memory into huge pages on request (MADV_COLLAPSE)")
    pid = zygote.server_pid()
    zygote.server.status(pid)  # any request waits until the server is ready
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    huge_kb = int(next(line.split()[1] for line in rollup.splitlines() if line.startswith("AnonHugePages:")))
    assert huge_kb >= 32 * 1024, rollup


def test_closing_a_child_whose_pid_went_to_someone_else_kills_only_the_cgroup(tmp_path):
    """What a dead fork server leaves: init reaped the child, and its pid now names another process
    group's leader. Here a reaped process's pidfd stands for the child and a live group for the
    newcomer that got the pid."""
    import subprocess

    gone = subprocess.Popen(["sleep", "30"])
    pidfd = os.pidfd_open(gone.pid)
    gone.kill()
    gone.wait()
    newcomer = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        child = sandbox.Child.__new__(sandbox.Child)
        child.pid, child.pidfd, child.cgroups = newcomer.pid, pidfd, []
        child.streams, child.workdir = [pidfd], str(tmp_path / "work")
        child.close()
        time.sleep(0.2)
        assert newcomer.poll() is None, "the newcomer's group was killed"
    finally:
        newcomer.kill()
        newcomer.wait()


def test_closing_a_live_child_kills_it_through_its_pidfd_and_group():
    child = sandbox.Child(sandbox.Limits(timeout=30, cell_timeout=5))
    pid = child.pid
    assert child.pidfd is not None
    child.close()
    assert not Path(f"/proc/{pid}").exists()
