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
from grader.exam import prepare


def grade(paths: list[Path], course: Course, out: Path, *, jobs: int = 1,
          progress: Callable[[str], None] = lambda line: None) -> list[scoring.Result]:
    import torch

    torch.set_num_threads(1)
    found = extract.discover(paths)
    submissions = [extract.read(sid, path) for sid, path in found]
    cases = [prepare(config) for config in generate(course.secret_salt, course.configurations)]
    allow = static_check.Allow().extended(course.allow.torch, course.allow.functional, course.allow.builtins)
    # The child must not read the course (solutions, hidden tests, salt), other submissions or results.
    hidden = [course.root, *paths, out, Path.home()]
    limits = sandbox.Limits(timeout=course.limits.timeout_seconds, cell_timeout=course.limits.cell_timeout_seconds,
                            memory_mb=course.limits.memory_mb, file_size_mb=course.limits.file_size_mb,
                            processes=course.limits.processes, hide=tuple(str(p) for p in hidden))

    def attempt(submission: extract.Submission) -> sandbox.Attempt:
        if submission.error:
            return sandbox.Attempt(error=submission.error)
        runnable, submission.refused = static_check.screen(submission.cells, allow)
        done = sandbox.run(runnable, cases, limits)
        progress(f"ran {submission.id} in {done.seconds:.1f} s" + (f": {done.error}" if done.error else ""))
        return done

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        attempts = list(pool.map(attempt, submissions))
    graded = {s.id: suite.Graded(s, a) for s, a in zip(submissions, attempts)}
    outcomes = suite.run(graded, cases, course, course.autotests_dir)
    scored = []
    for submission, done in zip(submissions, attempts):
        result = scoring.score(submission, outcomes.get(submission.id, {}), course)
        result.seconds = done.seconds
        result.isolation = done.isolation
        if done.error and not submission.error:
            result.error = done.error
            result.flags.append({"kind": "sandbox", "evidence": done.error})
        results.write_result(out, result)
        scored.append(result)
    results.write_grades_csv(out, scored, list(course.points))
    return scored
