"""Grading past one machine: the chunks of a batch graded on the workers of a Dask cluster.

The trusted process that runs `grade` keeps every step but one: it reads the notebooks, decides what
to grade, and writes every result and grades.csv. Workers only grade. They get the answer cells and the
course as data (course.yml and the hidden suite as bytes), so a worker on another machine needs only
the installed package, no shared file system. Each worker process keeps one sandbox pool: it grades
one chunk at a time with as many children side by side as it has threads (or `--jobs`).

Dask is an optional extra (`pip install 'backprop-ninja[dask]'`): distributed is imported only here,
and only when a cluster is used.
"""
from __future__ import annotations

import itertools
import logging
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from grader import __version__
from grader.course import Course, load
from grader.extract import Submission
from grader.judge.scoring import Result
from grader.pipeline.grading import Grader, course_digest, suite_files

# Seconds to wait for the scheduler: long enough for a busy one, short enough that a typo is told at once.
CONNECT_TIMEOUT = 5


@dataclass(frozen=True)
class Bundle:
    """A course as plain data, with the grader version that must grade it."""

    version: str
    digest: str
    course_yml: bytes
    suite: tuple[tuple[str, bytes], ...]
    require: tuple[str, ...]  # the walls required, as the instructor's command line left them


def bundle(course: Course) -> Bundle:
    return Bundle(__version__, course_digest(course), course.path.read_bytes(), tuple(suite_files(course)),
                  course.limits.require)


# ---------------------------------------------------------------------------------------------
# On a worker

# One chunk at a time per worker process: the hidden suite is a pytest session, which must not run
# twice at once in one process, and the chunk's children already use the worker's cores.
_lock = threading.Lock()
_courses: dict[str, Course] = {}


def _materialise(pack: Bundle, where: str) -> Course:
    """The course written into a private folder of the worker's own scratch space, which Dask removes
    with the worker."""
    root = Path(tempfile.mkdtemp(prefix="bpn-course-", dir=where))
    (root / "course.yml").write_bytes(pack.course_yml)
    for name, content in pack.suite:
        target = root / "autotests" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    # The suite's folder name in course.yml is a path on the instructor's machine; here it is autotests/.
    course = load(root / "course.yml")
    return replace(course, autotests="autotests", limits=replace(course.limits, require=pack.require))


@lru_cache(maxsize=2)
def _grader(digest: str, jobs: int, hide: tuple[str, ...], evidence: bool) -> Grader:
    """Kept across chunks, so a course's configurations and oracle values are computed once per worker
    and batch, as on one machine."""
    return Grader(_courses[digest], [Path(p) for p in hide], jobs, evidence)


def grade_chunk(pack: Bundle, chunk: list[Submission], hide: tuple[str, ...], jobs: int | None,
                evidence: bool) -> tuple[list[str], list[Result]]:
    """A Dask task: the chunk's results (with what their feedback pages draw, if `evidence`), and the
    progress lines grading it wrote."""
    from distributed import get_worker

    if pack.version != __version__:
        raise RuntimeError(f"a Dask worker runs backprop-ninja {__version__} but the batch was started with "
                           f"{pack.version}: install the same version everywhere")
    worker = get_worker()
    lines: list[str] = []
    with _lock:
        if pack.digest not in _courses:
            _courses[pack.digest] = _materialise(pack, worker.local_directory)
        # The worker's scratch space can hold other chunks' answers: hidden from the children with the rest.
        grader = _grader(pack.digest, jobs or worker.state.nthreads, (*hide, worker.local_directory), evidence)
        scored = grader.run(chunk, lines.append)
    return lines, scored


# ---------------------------------------------------------------------------------------------
# In the trusted process


def connect(address: str):
    """A client of the scheduler at `address`, or a RuntimeError that says in one line why not."""
    try:
        from distributed import Client
    except ImportError:
        raise RuntimeError("grading on a Dask cluster needs distributed: "
                           "pip install 'backprop-ninja[dask]'") from None
    try:
        return Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, ValueError) as exc:  # refused, timed out, or not an address at all
        raise RuntimeError(f"cannot reach the Dask scheduler at {address}: {' '.join(str(exc).split())}") from None


def graded(address: str, chunks: Iterable[list[Submission]], course: Course, hide: list[Path], jobs: int | None,
           progress: Callable[[str], None], evidence: bool = False) -> Iterator[list[Result]]:
    """Each chunk graded on a worker of the cluster at `address`, yielded as soon as it is back (in no
    set order), like grade.graded_here's.

    A worker that dies mid-chunk has its chunk run again on another by Dask. A chunk whose workers kept
    dying (Dask's KilledWorker) is reported, the other chunks are still graded, and a RuntimeError names
    its submissions at the end: their results are never written, so --resume grades them. Any other
    error stops the batch as it would on one machine.
    """
    client = connect(address)
    running: dict = {}
    lost: list[str] = []
    try:
        from distributed import KilledWorker, as_completed

        pack = bundle(course)
        where = tuple(str(Path(p).resolve()) for p in hide)
        waiting = iter(chunks)
        arrivals = as_completed(loop=client.loop)

        def send() -> None:
            """Keep one chunk per worker in flight: a chunk queued behind another on a busy worker would
            leave an idle worker waiting at the end of the batch."""
            room = max(1, len(client.nthreads())) - len(running)
            for chunk in itertools.islice(waiting, max(0, room)):
                future = client.submit(grade_chunk, pack, chunk, where, jobs, evidence, pure=False)
                running[future] = chunk
                arrivals.add(future)

        progress(f"grading on the Dask cluster at {address} ({len(client.nthreads())} worker(s) now)")
        send()
        for future in arrivals:
            chunk = running.pop(future)
            if future.status == "cancelled":
                raise RuntimeError(f"the Dask scheduler at {address} dropped the batch (was it stopped?): "
                                   "the results finished so far are written: rerun with --resume")
            if future.status == "error" and isinstance(future.exception(), KilledWorker):
                lost += [s.id for s in chunk]
                progress(f"not graded: {', '.join(s.id for s in chunk)}: "
                         f"{' '.join(str(future.exception()).split())}")
            else:
                lines, scored = future.result()
                for line in lines:
                    progress(line)
                yield scored
            send()
    finally:
        # Closing a client that lost its scheduler logs the cancelled reconnection as a traceback: the
        # error raised here already says what happened, in one line.
        quiet = logging.getLogger("distributed.client")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            client.cancel(list(running))
            client.close()
        finally:
            quiet.setLevel(level)
    if lost:
        raise RuntimeError(f"{len(lost)} submission(s) not graded, their Dask workers died: {', '.join(lost)}; "
                           "the others are written: rerun with --resume to grade these")
