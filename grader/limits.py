"""What a sandboxed run may use, and which walls must hold around it: one value that course.yml fills
and the sandbox enforces.

A leaf module (it imports nothing of the grader), so that reading a course's settings never loads the
walls themselves: the student package, which reads course.yml through the self-check, ships no
jail, Landlock or seccomp code.
"""
from __future__ import annotations

import time
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
    limits.cell_timeout_seconds); `analysis_cpu`: the trusted process's own CPU seconds for reading one
    submission (course.yml's limits.analysis_cpu_seconds, see Budget); `hide`: folders the child must not
    see (the batch adds them); `require`: the walls without which a child refuses to run student code
    (course.yml sandbox.require)."""

    timeout: float = 120.0
    cell_timeout: float = 10.0
    analysis_cpu: float = 10.0
    memory_mb: int = 2048
    file_size_mb: int = 16
    processes: int = 128
    hide: tuple[str, ...] = ()
    require: tuple[str, ...] = REQUIRED_BY_DEFAULT


class OverBudget(Exception):
    """A submission whose reading cost more of the trusted process than its Budget: not graded, with this
    one line as the reason."""


class Budget:
    """CPU time the trusted process may spend on one submission's text (extraction, the static check, the
    forged-output scan), outside every limit of the sandbox.

    Each of those steps is linear in its input and every input is capped (the notebook's size, each
    cell's length), so a step can overrun the budget only by one step's bounded cost: callers spend in
    small steps (a slice of cells, one answer cell) and call `check` between them. Measured as the
    calling thread's CPU time, so that a batch grading several submissions side by side, or a machine
    busy with something else, charges each submission its own work only.
    """

    def __init__(self, seconds: float, spent: float = 0.0):
        self.seconds = seconds
        self.spent = spent
        self._since = time.thread_time()

    def check(self, doing: str) -> None:
        """Raises OverBudget once the work so far exceeds the budget; `doing` says what was under way."""
        now = time.thread_time()
        self.spent += now - self._since
        self._since = now
        if self.spent > self.seconds:
            raise OverBudget(f"refused: {doing} took over {self.seconds:g} s of the grader's CPU time "
                             f"(course.yml limits.analysis_cpu_seconds); an answer needs a tiny fraction of that")
