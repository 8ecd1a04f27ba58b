"""A batch, start to finish: notebooks -> answer cells -> sandboxed runs -> the hidden suite ->
scores and feedback -> files.

Each step hands plain data to the next and never reaches back: the sandbox sees answer cells and the
inputs of each configuration, the suite sees what the sandbox returned, scoring sees test results.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from grader import extract, results, sandbox, scoring, static_check, suite
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
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            attempts = list(pool.map(lambda s: self._attempt(s, progress), submissions))
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


def grade(paths: list[Path], course: Course, out: Path, *, jobs: int = 1,
          progress: Callable[[str], None] = lambda line: None) -> list[tuple[extract.Submission, scoring.Result]]:
    submissions = [extract.read(sid, path) for sid, path in extract.discover(paths)]
    scored = Grader(course, [*paths, out], jobs).run(submissions, progress)
    for result in scored:
        results.write_result(out, result)
    results.write_grades_csv(out, scored, list(course.points))
    return list(zip(submissions, scored))
