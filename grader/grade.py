"""A batch, start to finish: notebooks -> answer cells -> sandboxed runs -> the hidden suite ->
scores and feedback -> files.

Each step hands plain data to the next and never reaches back: the sandbox sees answer cells and the
inputs of each configuration, the suite sees what the sandbox returned, scoring sees test results.
"""
from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from grader import __version__, extract, results, sandbox, scoring, static_check, suite
from grader.configs import generate
from grader.course import Course
from grader.exam import prepare, prepare_training


class Grader:
    """One course's grading, ready to run: its configurations and oracle values are computed once,
    before any student code exists in memory, then reused for every batch."""

    def __init__(self, course: Course, hidden: list[Path], jobs: int = 1):
        import torch

        torch.set_num_threads(1)
        self.course = course
        self.jobs = max(1, jobs)
        self.cases = [prepare(config) for config in generate(course.secret_salt, course.configurations)]
        self.training = prepare_training(self.cases[0].config, course.exercise4.trajectory_steps,
                                         course.exercise4.learning_rate)
        self.allow = static_check.Allow().extended(course.allow.torch, course.allow.functional,
                                                   course.allow.builtins)
        # The child must not read the course (solutions, hidden tests, salt), submissions or results.
        hidden = [course.root, course.autotests_dir, *hidden, Path.home(), *filter(None, [sandbox.checkout()])]
        limits = course.limits
        self.limits = sandbox.Limits(
            timeout=limits.timeout_seconds, cell_timeout=limits.cell_timeout_seconds, memory_mb=limits.memory_mb,
            file_size_mb=limits.file_size_mb, processes=limits.processes,
            hide=tuple(str(p) for p in hidden))

    def _attempt(self, submission: extract.Submission, progress) -> sandbox.Attempt:
        if submission.error:
            return sandbox.Attempt(error=submission.error)
        runnable, submission.refused = static_check.screen(submission.cells, self.allow)
        done = sandbox.run(runnable, self.cases, self.limits, self.training)
        progress(f"ran {submission.id} in {done.seconds:.1f} s" + (f": {done.error}" if done.error else ""))
        return done

    def run(self, submissions: list[extract.Submission],
            progress: Callable[[str], None] = lambda line: None) -> list[scoring.Result]:
        pool = ThreadPoolExecutor(max_workers=self.jobs)
        try:
            attempts = list(pool.map(lambda s: self._attempt(s, progress), submissions))
        finally:  # on Ctrl-C: the children already running finish (and are cleaned up), no new one starts
            pool.shutdown(wait=True, cancel_futures=True)
        graded = {s.id: suite.Graded(s, a) for s, a in zip(submissions, attempts)}
        outcomes = suite.run(graded, self.cases, self.training, self.course, self.course.autotests_dir)
        scored = []
        for submission, done in zip(submissions, attempts):
            result = scoring.score(submission, outcomes.get(submission.id, {}), self.course)
            result.seconds = done.seconds
            result.isolation = done.isolation
            if done.error and not submission.error:
                result.error = done.error
                result.flags.append({"kind": "sandbox", "evidence": done.error})
            scored.append(result)
        return scored


def course_digest(course: Course) -> str:
    """Of what decides every grade besides the notebook: the grader's version, course.yml and the suite."""
    digest = hashlib.sha256(f"{__version__}\0".encode() + course.path.read_bytes())
    for path in sorted(p for p in course.autotests_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f"\0{path.relative_to(course.autotests_dir)}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def input_digest(path: Path, course_part: str) -> str:
    """Of everything a submission's result depends on: when it is unchanged, so is the result."""
    try:
        notebook = Path(path).read_bytes()
    except OSError:
        notebook = b""
    return hashlib.sha256(course_part.encode() + b"\0" + notebook).hexdigest()


def shard(found: list, index: int, count: int) -> list:
    """The index-th of `count` deterministic slices of a sorted batch (1-based), for any batch system."""
    return [item for position, item in enumerate(found) if position % count == index - 1]


# Submissions graded and written together: a batch stopped half-way keeps every finished chunk (rerun
# with resume to finish it), and memory holds one chunk's answers, not the class's.
CHUNK = 32


def grade(paths: list[Path], course: Course, out: Path, *, jobs: int = 1, resume: bool = False,
          part: tuple[int, int] | None = None,
          progress: Callable[[str], None] = lambda line: None) -> list[tuple[extract.Submission, scoring.Result]]:
    """Grade every notebook under `paths` (or one shard of them) into `out`. With `resume`, a submission
    whose result is already there for the same notebook, grader and course is read back, not run."""
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
    submissions = [extract.read(sid, path) for sid, path in found]
    fresh = [s for s in submissions if s.id not in kept]
    grader = Grader(course, [*paths, out], jobs) if fresh else None
    started = time.monotonic()
    for start in range(0, len(fresh), CHUNK):
        for result in grader.run(fresh[start:start + CHUNK], progress):
            result.digest = digests[result.submission]
            results.write_result(out, result)
            kept[result.submission] = result
        done = min(start + CHUNK, len(fresh))
        rate = done / (time.monotonic() - started)
        progress(f"{len(kept)}/{len(submissions)} graded, {rate:.2f} per second, "
                 f"about {(len(fresh) - done) / rate:.0f} s left")
    scored = [kept[s.id] for s in submissions]
    name = "grades.csv" if part is None else f"grades.shard-{part[0]}-of-{part[1]}.csv"
    results.write_grades_csv(out, scored, list(course.points), name)
    return list(zip(submissions, scored))
