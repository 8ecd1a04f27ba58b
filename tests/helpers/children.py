"""Helpers for tests that start sandboxed children: tracking what the sandbox leaves behind, and a child
that tries to kill its siblings."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from grader.sandbox import parent as sandbox
from grader.sandbox import zygote


@contextlib.contextmanager
def tracked_children():
    """Record the work dirs and pids cgroups the sandbox makes; yield them; remove what is left."""
    made = []
    real_mkdtemp, real_cgroup = tempfile.mkdtemp, sandbox._cgroups

    def mkdtemp(*args, **kwargs):
        path = real_mkdtemp(*args, **kwargs)
        if Path(path).name.startswith("bpn-child-"):
            made.append(Path(path))
        return path

    def cgroups(*args, **kwargs):
        paths = real_cgroup(*args, **kwargs)
        made.extend(path for path, _ in paths)
        return paths

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sandbox.tempfile, "mkdtemp", mkdtemp)
        mp.setattr(sandbox, "_cgroups", cgroups)
        try:
            yield made
        finally:
            mp.undo()
            for path in made:
                if str(path).startswith("/sys/fs/cgroup/"):
                    with contextlib.suppress(OSError):
                        path.rmdir()
                else:
                    shutil.rmtree(path, ignore_errors=True)


def kill_siblings(seconds: float, *, first: str = "") -> str:
    """Code that, for `seconds` from its first run, tries to kill every other child of the fork server
    (the other submissions' children); `first` runs before it."""
    zygote.start()
    return (
        "import os, time, signal\n"
        f"{first}"
        "me = os.getpid()\n"
        f"end = float(os.environ.setdefault('BPN_KILL_END', str(time.monotonic() + {seconds})))\n"
        "while time.monotonic() < end:\n"
        "    for p in os.listdir('/proc'):\n"
        "        if not p.isdigit() or int(p) == me:\n"
        "            continue\n"
        "        try:\n"
        "            stat = open('/proc/' + p + '/stat').read()\n"
        f"            if int(stat.rsplit(')', 1)[1].split()[1]) == {zygote.server_pid()}:\n"
        "                os.kill(int(p), signal.SIGKILL)\n"
        "        except (OSError, ValueError, IndexError):\n"
        "            pass\n"
        "    time.sleep(0.005)\n")


def processes() -> dict[int, tuple[list[bytes], str, int]]:
    """pid -> (command line, state, process group) of every process that can be read (state "Z": dead,
    not yet reaped)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        found[int(entry)] = (cmdline, fields[0], int(fields[2]))
    return found


def alive_with(marker: str) -> dict[int, str]:
    """pid -> state of every living process whose command line holds `marker`."""
    return {pid: state for pid, (cmdline, state, _) in processes().items()
            if marker.encode() in cmdline and state != "Z"}


def group_members(pgid: int) -> dict[int, str]:
    """pid -> state of every process in process group `pgid`."""
    return {pid: state for pid, (_, state, group) in processes().items() if group == pgid}
