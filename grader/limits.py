"""What a sandboxed run may use, and which walls must hold around it: one value that course.yml fills
and the sandbox enforces.

A leaf module (it imports nothing of the grader), so that reading a course's settings never loads the
walls themselves: the student package, which reads course.yml through the self-check, ships no
jail, Landlock or seccomp code.
"""
from __future__ import annotations

from dataclasses import dataclass

# Every wall, in the order grader.sandbox.jail raises it; what a course may list in sandbox.require.
WALLS = ("cgroup", "network", "ipc", "pid", "filesystem", "unprivileged", "limits", "landlock", "seccomp")
# All that a current Linux gives a normal user who has no user namespaces.
REQUIRED_BY_DEFAULT = ("unprivileged", "limits", "landlock", "seccomp")


@dataclass(frozen=True)
class Limits:
    """Enforced from outside the student's code: by the parent's clock, by the walls grader.sandbox.jail raises
    (resource limits, cgroups, namespaces, Landlock, seccomp), and by killing the child's whole process
    group and cgroup. `timeout` and `cell_timeout` are in seconds (course.yml's limits.timeout_seconds and
    limits.cell_timeout_seconds); `hide`: folders the child must not see (the batch adds them);
    `require`: the walls without which a child refuses to run student code (course.yml sandbox.require)."""

    timeout: float = 120.0
    cell_timeout: float = 10.0
    memory_mb: int = 2048
    file_size_mb: int = 16
    processes: int = 128
    hide: tuple[str, ...] = ()
    require: tuple[str, ...] = REQUIRED_BY_DEFAULT
