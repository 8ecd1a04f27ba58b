"""A batch, start to finish: notebooks -> answer cells -> sandboxed runs -> the hidden suite ->
scores and feedback -> files.

Each step hands plain data to the next and never reaches back: the sandbox sees answer cells and the
inputs of each configuration, the suite sees what the sandbox returned, scoring sees test results.
"""
from __future__ import annotations

import collections
import gc
import hashlib
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path

from grader import __version__, extract, material
from grader.course import Course
from grader.judge import scoring, suite
from grader.judge.configs import generate
from grader.judge.exam import prepare, prepare_training
from grader.outputs import feedback_page, results
from grader.sandbox import parent as sandbox
from grader.sandbox import static_check, zygote
from grader.vocabulary import Flag


class Grader:
    """One course's grading, ready to run: its configurations and oracle values are computed once,
    before any student code exists in memory, then reused for every batch."""

    def __init__(self, course: Course, hidden: list[Path], jobs: int = 1, evidence: bool = False):
        """With `evidence`, each result also carries what its feedback page draws (result.evidence), taken
        from the answers before run() drops them."""
        import torch

        zygote.start()  # the fork server imports torch while the oracle values are computed here
        torch.set_num_threads(1)
        self.course = course
        self.jobs = max(1, jobs)
        self.evidence = evidence
        configs = generate(course.exercise_spec, course.secret_salt, course.configurations)
        self.cases = [prepare(config) for config in configs]
        self.training = prepare_training(self.cases[0].config, course.exercise4.trajectory_steps,
                                         course.exercise4.learning_rate)
        self.allow = static_check.Allow().extended(course.allow.torch, course.allow.functional,
                                                   course.allow.builtins)
        # The child must not read the course (solutions, hidden tests, salt), submissions or results.
        # An installed package's copy of the course material (grader/material.py) too.
        hidden = [course.root, course.autotests_dir, *hidden, Path.home(), *filter(None, [sandbox.checkout()]),
                  *filter(Path.is_dir, [material.PACKAGED])]
        self.limits = replace(course.limits, hide=tuple(str(p) for p in hidden))
        # One child walled in and probed before any student code runs: a sandbox that cannot start or
        # lacks a required wall stops the batch here (sandbox.SandboxUnavailable), not as a 0 each.
        self.isolation = sandbox.preflight(self.limits, course.exercise_spec)
        if not gc.isenabled():
            # The grade command paused collection while it started. What is in memory now (torch,
            # nbformat, pytest, the oracle values) lives as long as the batch: frozen, it is no longer
            # walked by each full collection (0.15 s apiece, every 30 submissions). A process that
            # makes Graders again and again (nbgrader's autograde) keeps collecting as usual.
            gc.freeze()
            gc.enable()

    def _attempt(self, submission: extract.Submission, progress) -> sandbox.Attempt:
        if submission.error:  # unreadable, or refused unopened: said here, once each, as it is recorded
            progress(f"not graded {submission.id}: {submission.error}")
            return sandbox.Attempt(error=submission.error)
        runnable, submission.refused = static_check.screen(submission.cells, self.allow)
        submission.forged = {cell: found for cell, source in runnable.items()
                             if (found := static_check.forged_output(source)) is not None}
        done = sandbox.run(runnable, self.cases, self.limits, self.training)
        progress(f"ran {submission.id} in {done.seconds:.1f} s" + (f": {done.error}" if done.error else ""))
        return done

    def run(self, submissions: list[extract.Submission],
            progress: Callable[[str], None] = lambda line: None) -> list[scoring.Result]:
        with closing(self.stream([submissions], progress)) as results:
            return next(results)

    def stream(self, chunks: Iterable[list[extract.Submission]],
               progress: Callable[[str], None] = lambda line: None) -> Iterator[list[scoring.Result]]:
        """Each chunk's results, in order, judged by one pytest session for the whole stream (in a thread
        of its own) while the sandbox already runs the next chunk.

        When the caller stops (Ctrl-C, or it closes the stream), no new child starts and the running
        ones finish and are cleaned up before this returns."""
        handed: queue.Queue = queue.Queue()
        stop = threading.Event()
        pool = ThreadPoolExecutor(max_workers=self.jobs)
        source, ahead = iter(chunks), collections.deque()

        def start_next() -> None:
            chunk = next(source, None)
            if chunk is not None and not stop.is_set():
                ahead.append((chunk, [pool.submit(self._attempt, s, progress) for s in chunk]))

        def batches() -> Iterator[dict[str, suite.Graded]]:
            while ahead and not stop.is_set():
                chunk, running = ahead.popleft()
                attempts = [future.result() for future in running]
                start_next()
                yield {s.id: suite.Graded(s, a) for s, a in zip(chunk, attempts, strict=True)}

        def session() -> None:
            try:
                suite.run_batches(batches(), self.cases, self.training, self.course, self.course.autotests_dir,
                                  lambda graded, outcomes: handed.put(self._scored(graded, outcomes)))
                handed.put(None)
            except BaseException as exc:  # noqa: B036 - handed to the caller's thread, raised there
                handed.put(exc)

        judge = threading.Thread(target=session, name="hidden-suite", daemon=True)
        try:
            start_next()  # the sandbox starts on the first chunks while pytest collects the suite
            start_next()
            judge.start()
            while (item := handed.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            if judge.is_alive():
                judge.join()

    def _scored(self, graded: dict[str, suite.Graded], outcomes: suite.ItemResults) -> list[scoring.Result]:
        scored = []
        for sid, item in graded.items():
            submission, done = item.submission, item.attempt
            result = scoring.score(submission, outcomes.get(sid, {}), self.course)
            result.seconds = done.seconds
            result.isolation = done.isolation
            if done.error and not submission.error:
                result.error = done.error
                result.flags.append({"kind": Flag.SANDBOX, "evidence": done.error})
            if self.evidence:
                result.evidence = feedback_page.gather(result, done, self.cases, self.course.tolerance)
            scored.append(results.valid(result))
        return scored


def suite_files(course: Course) -> list[tuple[str, bytes]]:
    """The hidden suite as (path inside it, content): what a course digest covers and what a Dask worker
    on another machine receives in place of the folder."""
    root = course.autotests_dir
    return [(path.relative_to(root).as_posix(), path.read_bytes())
            for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)]


def course_digest(course: Course) -> str:
    """Of what decides every grade besides the notebook: the grader's version, course.yml and the suite."""
    digest = hashlib.sha256(f"{__version__}\0".encode() + course.path.read_bytes())
    for name, content in suite_files(course):
        digest.update(f"\0{name}\0".encode() + content)
    return digest.hexdigest()


def input_digest(path: Path, course_part: str) -> str:
    """Of everything a submission's result depends on: when it is unchanged, so is the result."""
    try:
        notebook = extract.notebook_bytes(Path(path))
    except OSError:  # refused or unreadable: so is the result, until the file changes
        notebook = b""
    return hashlib.sha256(course_part.encode() + b"\0" + notebook).hexdigest()


def shard(found: list, index: int, count: int) -> list:
    """The index-th of `count` deterministic slices of a sorted batch (1-based), for any batch system."""
    return [item for position, item in enumerate(found) if position % count == index - 1]


# Submissions graded and written together: a batch stopped half-way keeps every finished chunk (rerun
# with resume to finish it), and memory holds a few chunks' answers, never the class's. The first
# chunks are smaller, so that the first results are written within seconds.
CHUNK = 32
FIRST_CHUNK = 4


def chunked(items: list) -> Iterator[list]:
    start, size = 0, min(FIRST_CHUNK, CHUNK)
    while start < len(items):
        yield items[start:start + size]
        start, size = start + size, min(2 * size, CHUNK)


def _without_answers(submission: extract.Submission) -> extract.Submission:
    """What the gradebook needs of a graded submission (its id, path and error), not its answers: memory
    then holds a few chunks' answers, never the class's."""
    submission.cells = {}
    return submission


def hidden(paths: list[Path], out: Path) -> list[Path]:
    """What the children must not read of a batch: each folder searched, the results, and the folder
    holding each notebook named on its own, whose classmates' notebooks may sit beside it (a notebook
    at the file system's root hides only itself: hiding the root would hide the child's own world)."""
    folders = [p if p.is_dir() or p.parent == p.parent.parent else p.parent
               for p in (Path(path).absolute() for path in paths)]
    return [*folders, Path(out)]


def graded_here(chunks: Iterable[list[extract.Submission]], course: Course, hide: list[Path], jobs: int,
                progress: Callable[[str], None], evidence: bool = False) -> Iterator[list[scoring.Result]]:
    """Each chunk graded on this machine, in order. The counterpart for a Dask cluster is
    grader.pipeline.cluster.graded: grade() writes what either yields, the same way."""
    grader = Grader(course, hide, jobs, evidence)
    if grader.isolation["missing"]:
        progress(weaker(grader.isolation))
    with closing(grader.stream(chunks, progress)) as stream:
        yield from stream


def weaker(isolation: dict) -> str:
    """The line a batch graded with walls missing says first (each result records them too)."""
    return (f"sandbox: grading without {', '.join(isolation['missing'])} (allowed by --allow-weaker-sandbox or "
            "course.yml sandbox.require); see `backprop-ninja sandbox check`")


def weaker_course(course: Course) -> Course:
    """The course as --allow-weaker-sandbox grades it: no wall required, every missing one recorded."""
    return replace(course, limits=replace(course.limits, require=()))


@dataclass(frozen=True)
class Tally:
    """Where a batch stands, after each chunk of results is written."""

    done: int  # results in hand, kept ones included
    total: int
    rate: float  # results graded per second in this run
    left: float  # seconds, at that rate

    def __str__(self) -> str:
        return f"{self.done}/{self.total} graded, {self.rate:.2f} per second, about {self.left:.0f} s left"


def grade(paths: list[Path], course: Course, out: Path, *, jobs: int | None = 1, resume: bool = False,
          part: tuple[int, int] | None = None, scheduler: str | None = None, html: bool = False,
          record: Callable[[extract.Submission, scoring.Result], None] | None = None,
          progress: Callable[[str], None] = lambda line: None,
          tally: Callable[[Tally], None] | None = None) -> list[tuple[extract.Submission, scoring.Result]]:
    """Grade every notebook under `paths` (or one shard of them) into `out`. With `resume`, a submission
    whose result is already there for the same notebook, grader and course is read back, not run. With
    `scheduler`, the Dask cluster there grades (`jobs` None: each worker as many side by side as it has
    threads), and this process still reads the notebooks and writes every file. With `html`, each result
    also gets its student's feedback page, `<submission>.html` (grader.outputs.feedback_page). `record` gets
    each result once it is written, pictures included (a gradebook: grader.lms.gradebook.Recorder), kept ones
    at the end. `progress` gets notes as lines, `tally` where the batch stands after each chunk (without
    it, a line to `progress`)."""
    found = extract.discover(paths)
    if part is not None:
        found = shard(found, *part)
    course_part = course_digest(course)
    digests = {sid: input_digest(path, course_part) for sid, path in found}
    kept: dict[str, scoring.Result] = {}
    if resume:
        for sid, _ in found:
            previous = results.load_result(results.result_path(out, sid))
            if previous is not None and previous.digest == digests[sid]:
                kept[sid] = previous
                progress(f"kept {sid}: unchanged since it was graded")
    previous = set(kept)
    fresh = [(sid, path) for sid, path in found if sid not in kept]
    read: dict[str, extract.Submission] = {}
    cells = course.exercise.answer_cells

    def chunks() -> Iterator[list[extract.Submission]]:
        """Notebooks are read a chunk at a time, as the graders ask for them."""
        for chunk in chunked(fresh):
            yield [read.setdefault(sid, extract.read(sid, path, cells)) for sid, path in chunk]

    if html:  # a kept result no longer has its answers: its page stays, or is made again without pictures
        for sid, result in kept.items():
            if not feedback_page.current(out, sid):
                feedback_page.write(out, result)
    if not fresh:
        produced = (chunk for chunk in ())
    elif scheduler is None:
        produced = graded_here(chunks(), course, hidden(paths, out), jobs, progress,
                               evidence=html or record is not None)
    else:
        from grader.pipeline import cluster

        produced = cluster.graded(scheduler, chunks(), course, hidden(paths, out), jobs, progress,
                                  evidence=html or record is not None)
    started, done = time.monotonic(), 0
    with closing(produced):  # stopped for any reason: unfinished chunks are cancelled at once
        for chunk in produced:
            for result in chunk:
                result.digest = digests[result.submission]
                results.write_result(out, result)
                if html:
                    feedback_page.write(out, result)
                if record is not None:
                    record(read[result.submission], result)
                result.evidence = None
                kept[result.submission] = result
                _without_answers(read[result.submission])
            done += len(chunk)
            rate = done / (time.monotonic() - started)
            now = Tally(len(kept), len(found), rate, (len(fresh) - done) / rate)
            tally(now) if tally else progress(str(now))
    submissions = [read.get(sid) or _without_answers(extract.read(sid, path, cells)) for sid, path in found]
    scored = [kept[s.id] for s in submissions]
    if record is not None:
        for submission, result in zip(submissions, scored, strict=True):
            if submission.id in previous:
                record(submission, result)
    name = "grades.csv" if part is None else f"grades.shard-{part[0]}-of-{part[1]}.csv"
    results.write_grades_csv(out, scored, list(course.points), name)
    return list(zip(submissions, scored, strict=True))
