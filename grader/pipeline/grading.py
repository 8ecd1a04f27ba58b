"""One course's grading, ready to run on either back-end: this machine (grader.pipeline.batch) or a
Dask worker (grader.pipeline.cluster), which both build a Grader and name a course by its digest.
Kept apart from the batch so that the Dask back-end, which the batch chooses, does not import it back.
"""
from __future__ import annotations

import collections
import gc
import hashlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import replace
from pathlib import Path

from grader import __version__, extract, syntax
from grader.course import Course, material
from grader.judge import scoring, suite
from grader.judge.configs import generate, training_config
from grader.judge.exam import prepare, prepare_training
from grader.limits import Budget, OverBudget
from grader.outputs import pictures, results
from grader.sandbox import parent as sandbox
from grader.sandbox import static_check, zygote
from grader.vocabulary import Flag


def kept_from_children(course: Course | None, batch: list[Path] = ()) -> tuple[str, ...]:
    """What no child may read: the course (solutions, hidden tests, salt), the batch's submissions and
    results, the home folder, the checkout and an installed package's copy of the course material
    (grader/course/material.py). `sandbox check` probes the same list, so that it says what `grade` will see."""
    course_paths = [course.root, course.autotests_dir] if course is not None else []
    hidden = [*course_paths, *batch, Path.home(), *filter(None, [sandbox.checkout()]),
              *filter(Path.is_dir, [material.PACKAGED])]
    return tuple(str(p) for p in hidden)


class Grader:
    """One course's grading, ready to run: its configurations and oracle values are computed once,
    before any student code exists in memory, then reused for every batch."""

    def __init__(self, course: Course, hidden: list[Path], jobs: int = 1, evidence: bool = False):
        """With `evidence`, each result also carries what its feedback page draws (result.evidence), taken
        from the answers before run() drops them."""
        import torch

        zygote.start()  # the fork server imports torch while the oracle values are computed here
        syntax.everywhere()  # the judge's thread and the submissions' parse side by side
        torch.set_num_threads(1)
        self.course = course
        self.jobs = max(1, jobs)
        self.evidence = evidence
        configs = generate(course.exercise_spec, course.secret_salt, course.configurations)
        self.cases = [prepare(config) for config in configs]
        self.training = prepare_training(training_config(course.exercise_spec, course.secret_salt),
                                         course.training.trajectory_steps,
                                         course.training.learning_rate)
        self.allow = static_check.Allow().extended(course.allow.torch, course.allow.functional,
                                                   course.allow.builtins)
        self.limits = replace(course.limits, hide=kept_from_children(course, hidden))
        # One child walled in and probed before any student code runs: a sandbox that cannot start or
        # lacks a required wall stops the batch here (sandbox.SandboxUnavailable), not as a 0 each.
        self.isolation = sandbox.preflight(self.limits, course.exercise_spec)
        if not gc.isenabled():
            # The grade command paused collection while it started. What is in memory now (torch,
            # nbformat, pytest, the oracle values) lives as long as the batch: frozen, it is no longer
            # walked by each full collection (0.15 s apiece, every 30 submissions). nbgrader's autograde,
            # which grades one notebook at a time with its Graders kept, keeps collecting as usual.
            gc.freeze()
            gc.enable()

    def _attempt(self, submission: extract.Submission, progress) -> sandbox.Attempt:
        if submission.error:  # unreadable, or refused unopened: said here, once each, as it is recorded
            progress(f"not graded {submission.id}: {submission.error}")
            return sandbox.Attempt(error=submission.error)
        try:
            screened = static_check.screen(submission.cells, self.allow,
                                           Budget(self.limits.analysis_cpu, submission.analysis_seconds))
        except OverBudget as exc:
            submission.error = str(exc)
            return self._attempt(submission, progress)
        submission.refused, submission.forged = screened.refused, screened.forged
        done = sandbox.run(screened.runnable, self.cases, self.limits, self.training)
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
                result.evidence = pictures.gather(result, done, self.cases, self.course.tolerance)
            scored.append(results.valid(result))
        return scored


def suite_files(course: Course) -> list[tuple[str, bytes]]:
    """The hidden suite as (path inside it, content): what a course digest covers and what a Dask worker
    on another machine receives in place of the folder."""
    root = course.autotests_dir
    return [(path.relative_to(root).as_posix(), path.read_bytes())
            for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)]


def course_digest(course: Course) -> str:
    """Of what decides every grade besides the notebook: the grader's version, course.yml, the suite and the
    hidden configurations drawn from them, which a grader of the same version number but another draw (a
    development checkout, a fix to the draw) must not take for the same; a result kept from the earlier draw
    would sit in one class beside results graded on other sizes."""
    drawn = (*generate(course.exercise_spec, course.secret_salt, course.configurations),
             training_config(course.exercise_spec, course.secret_salt))
    digest = hashlib.sha256(f"{__version__}\0{drawn!r}\0".encode() + course.path.read_bytes())
    for name, content in suite_files(course):
        digest.update(f"\0{name}\0".encode() + content)
    return digest.hexdigest()
