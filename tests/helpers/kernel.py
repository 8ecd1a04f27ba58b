"""A notebook's kernel driven as JupyterLab drives it (jupyter_client, each cell sent with its id), for the
tests that run the self-check where students run it, and a session in it that writes one answer cell
at a time and runs its checks (tests/test_kernel_sessions.py, benchmarks/self_check_speed.py)."""
from __future__ import annotations

import os
import queue
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import nbformat


class Kernel:
    """A notebook's kernel: `run(cell_id)` runs that cell of `cells` (the notebook's code by cell id), or
    `code` in its place."""

    def __init__(self, cwd, cells: Mapping[str, str]):
        from jupyter_client import KernelManager
        env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}"}
        self.cells = cells
        self.manager = KernelManager(kernel_name="python3")
        self.manager.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        self.manager.start_kernel(cwd=str(cwd), env=env)
        self.start_client()

    def start_client(self):
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def restart(self):
        self.client.stop_channels()
        self.manager.restart_kernel(now=True)
        self.start_client()

    def run(self, cell_id: str, code: str | None = None, *, send_id: bool = True,
            interrupt_after: float | None = None) -> tuple[str, str, str | None]:
        """(stdout, stderr, the error's name or None), as the cell `cell_id` with `code` shows them. Without
        `send_id` the cell's id is not sent, as by nbclient and the classic Notebook; `interrupt_after` seconds,
        the kernel is interrupted, as Kernel > Interrupt does."""
        client = self.client
        message = client.session.msg("execute_request", {"code": self.cells[cell_id] if code is None else code,
                                                         "silent": False, "store_history": True,
                                                         "user_expressions": {}, "allow_stdin": False,
                                                         "stop_on_error": False},
                                     metadata={"cellId": cell_id} if send_id else {})
        client.shell_channel.send(message)
        if interrupt_after is not None:
            time.sleep(interrupt_after)
            self.manager.interrupt_kernel()
        out, err, error = [], [], None
        self.shown = []  # what the cell displayed beside its streams (IPython's display_data)
        while True:
            try:
                reply = client.get_iopub_msg(timeout=300)
            except queue.Empty:
                raise AssertionError(f"cell {cell_id} did not finish") from None
            if reply["parent_header"].get("msg_id") != message["header"]["msg_id"]:
                continue
            kind, content = reply["msg_type"], reply["content"]
            if kind == "stream":
                (out if content["name"] == "stdout" else err).append(content["text"])
            elif kind == "display_data":
                self.shown.append(content["data"].get("text/plain", ""))
            elif kind == "error":
                error = content["ename"]
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(out), "".join(err), error

    def check(self, grade_id: str, *, send_id: bool = True) -> str:
        """The check cell of `grade_id`: it never raises, never writes to stderr, prints one line."""
        out, err, error = self.run(f"check_{grade_id}", send_id=send_id)
        assert error is None and err == "" and not self.shown, (out, err, error, self.shown)
        assert out.count("\n") == 1 and out.startswith(f"{grade_id:<15s}|"), out
        return out[:-1]

    def close(self):
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@dataclass
class CourseNotebook:
    """A course (course.yml loaded), its solved notebook (the cells a kernel runs) and the folder it runs in."""

    course: object
    solved: nbformat.NotebookNode
    folder: Path
    cells: dict[str, str] = field(init=False)
    answer_cells: tuple[str, ...] = field(init=False)

    def __post_init__(self):
        self.cells = {c.id: c.source for c in self.solved.cells if c.cell_type == "code"}
        self.answer_cells = self.course.exercise.answer_cells

    def checked(self, cell: str) -> tuple[str, ...]:
        """The grade ids whose check cells judge the answer cell `cell` (a function's: its answers' and the
        training run's, when that function is the one trained)."""
        exercise = self.course.exercise
        ids = [a.grade_id for a in exercise.answers if a.cell_id == cell]
        training = exercise.training
        if training is not None and training.function.cell == cell:
            ids.append(training.grade_id)
        return tuple(ids)

    def between(self, cell: str) -> list[str]:
        """The notebook's read-only cells between an answer cell and its first check: what runs its
        function and hands the checks its values (none for a gradient's cell)."""
        order = list(self.cells)
        found = []
        for cell_id in order[order.index(cell) + 1:]:
            if cell_id.startswith("check_") or cell_id in self.answer_cells:
                return found
            found.append(cell_id)
        return found


class Session:
    """The course's notebook in a kernel, every answer cell holding `reference`'s code, as Run All leaves it
    (the training run, the longest cell, and what reads it aside); `seconds` records each check cell's time."""

    def __init__(self, course: CourseNotebook, reference: dict[str, str], first: str | None = None):
        self.course, self.reference = course, reference
        self.kernel = Kernel(course.folder, course.cells)
        if first is not None:  # code run before the notebook's (what the kernel's environment would hold)
            self.kernel.run("first", first)
        self.seconds: list[tuple[float, str, str]] = []  # (seconds, answer cell, grade id)
        for cell_id in course.cells:
            if cell_id == "setup_install" or cell_id.startswith("check_"):
                continue
            if course.cells[cell_id].startswith("FULL_RUN"):  # the training run and what reads it
                break
            _, err, error = self.kernel.run(cell_id, reference.get(cell_id))
            assert error is None, (cell_id, err)

    def lines(self, cell: str, code: str) -> dict[str, str]:
        """`code` written into the answer cell `cell` and run, then what runs the cell's function, then
        every check of the cell: each check's line by grade id."""
        self.kernel.run(cell, code)
        for cell_id in self.course.between(cell):
            self.kernel.run(cell_id)
        lines = {}
        for grade_id in self.course.checked(cell):
            start = time.perf_counter()
            out, err, error = self.kernel.run(f"check_{grade_id}")
            self.seconds.append((time.perf_counter() - start, cell, grade_id))
            assert error is None and err == "" and out.count("\n") == 1, (grade_id, out, err, error)
            lines[grade_id] = out[:-1]
        return lines

    def restore(self, cell: str):
        """The answer cell `cell` back to its reference, and what runs its function run again."""
        self.kernel.run(cell, self.reference[cell])
        for cell_id in self.course.between(cell):
            self.kernel.run(cell_id)

    def close(self):
        self.kernel.close()
