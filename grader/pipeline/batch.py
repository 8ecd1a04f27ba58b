"""A batch, start to finish: notebooks -> answer cells -> sandboxed runs -> the hidden suite ->
scores and feedback -> files.

Each step hands plain data to the next and never reaches back: the sandbox sees answer cells and the
inputs of each configuration, the suite sees what the sandbox returned, scoring sees test results.
"""
from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path

from grader import extract, safe_text
from grader.course import Course
from grader.judge import scoring
from grader.outputs import feedback_page, final, results
from grader.pipeline.grading import Grader, course_digest


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


def _named_by_student(found: list[tuple[str, Path]], course: Course) -> list[tuple[str, Path]]:
    """A notebook in nbgrader's layout, submitted/<student>/<assignment>/<notebook>.ipynb, found in a student's
    folder given alone (`grade submitted/alice`, with a gradebook, one student at a time), named from that folder
    down: the id `grade submitted` gives it, never `backprop_ninja/backprop_ninja` for every student alike. (A
    notebook given by its own path keeps its name; one of another notebook's is refused below.)"""
    taken = {sid for sid, _ in found}
    named = []
    for sid, path in found:
        layout = Path(path)
        full = safe_text.name(Path(*layout.parts[-3:]).with_suffix("")) if len(layout.parts) >= 3 else sid
        if sid.count("/") == 1 and layout.parent.name == course.assignment and layout.suffix == ".ipynb" \
                and full not in taken:
            taken.add(full)
            sid = full
        named.append((sid, path))
    return sorted(named)


def _refuse_another_notebooks_result(found: list[tuple[str, Path]], out: Path) -> None:
    """Before anything runs: a result in `out` under one of this batch's ids must be the same notebook's
    (regraded), never another's, which its result would replace without a word (two students' folders of one
    name, or one file name in two folders, graded into one --out at two times)."""
    for sid, path in found:
        previous = results.load_result(results.result_path(out, sid))
        recorded = safe_text.visible(str(path))  # as a result records it (grader.outputs.results.valid)
        if previous is not None and previous.path != recorded \
                and os.path.abspath(previous.path) != safe_text.visible(os.path.abspath(path)):
            raise RuntimeError(f"{safe_text.visible(str(results.result_path(out, sid)))} holds the result of "
                               f"{previous.path}, not of {recorded}, which has the same name: grade it into another "
                               "--out, or name the folders that tell them apart")


def grade(paths: list[Path], course: Course, out: Path, *, jobs: int | None = 1, resume: bool = False,
          part: tuple[int, int] | None = None, scheduler: str | None = None, html: bool = False,
          record: Callable[..., None] | None = None,
          settle: Callable[[list[scoring.Result]], list[scoring.Result]] | None = None,
          progress: Callable[[str], None] = lambda line: None,
          tally: Callable[[Tally], None] | None = None) -> list[tuple[extract.Submission, scoring.Result]]:
    """Grade every notebook under `paths` (or one shard of them) into `out`. With `resume`, a submission
    whose result is already there for the same notebook, grader and course is read back, not run. With
    `scheduler`, the Dask cluster there grades (`jobs` None: each worker as many side by side as it has
    threads), and this process still reads the notebooks and writes every file. With `html`, each result
    also gets its student's feedback page, `<submission>.html` (grader.outputs.feedback_page). `record` gets
    each result once it is written, pictures included (a gradebook: grader.lms.gradebook.Recorder), kept ones
    at the end (with kept=True); `settle` gives the scores as recorded (a gradebook's, with its TA's scores
    and late penalties: Recorder.settle), each result's as soon as it is recorded (a TA trial: a batch killed
    mid-way left finished students' files at the grader's scores) and the whole batch's at the end, which
    grades.csv and the returned results carry. `progress`
    gets notes as lines, `tally` where the batch stands after each chunk (without it, a line to `progress`)."""
    found = _named_by_student(extract.discover(paths), course)
    if part is not None:
        found = shard(found, *part)
    _refuse_another_notebooks_result(found, out)
    course_part = course_digest(course)
    digests = {sid: input_digest(path, course_part) for sid, path in found}
    kept: dict[str, scoring.Result] = {}
    if resume:
        for sid, _ in found:
            previous = results.load_result(results.result_path(out, sid))
            if previous is not None and previous.digest == digests[sid]:
                kept[sid] = final.as_graded(previous)  # its file may say the gradebook's scores (settle)
                progress(f"kept {sid}: unchanged since it was graded")
    previous = set(kept)
    fresh = [(sid, path) for sid, path in found if sid not in kept]
    read: dict[str, extract.Submission] = {}
    cells, cpu = course.exercise.answer_cells, course.limits.analysis_cpu

    def chunks() -> Iterator[list[extract.Submission]]:
        """Notebooks are read a chunk at a time, as the graders ask for them."""
        for chunk in chunked(fresh):
            yield [read.setdefault(sid, extract.read(sid, path, cells, cpu)) for sid, path in chunk]

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
                if html or feedback_page.page_path(out, result.submission).exists():  # none left of an earlier one
                    feedback_page.write(out, result)
                if record is not None:
                    record(read[result.submission], result)
                if settle is not None:  # its files final now: a batch stopped later leaves none as graded
                    settle([result])
                result.evidence = None
                kept[result.submission] = result
                _without_answers(read[result.submission])
            done += len(chunk)
            rate = done / (time.monotonic() - started)
            now = Tally(len(kept), len(found), rate, (len(fresh) - done) / rate)
            tally(now) if tally else progress(str(now))
    submissions = [read.get(sid) or _without_answers(extract.read(sid, path, cells, cpu)) for sid, path in found]
    scored = [kept[s.id] for s in submissions]
    if record is not None:
        for submission, result in zip(submissions, scored, strict=True):
            if submission.id in previous:
                record(submission, result, kept=True)
    if settle is not None:
        scored = settle(scored)
    if part is None:  # the class's file: the students graded into `out` before this batch keep their rows
        now = {s.id for s in submissions}
        earlier = [r for sid, r in results.in_folder(out).items() if sid not in now]
        results.write_grades_csv(out, [*scored, *earlier], list(course.points))
    else:
        results.write_grades_csv(out, scored, list(course.points), f"grades.shard-{part[0]}-of-{part[1]}.csv")
    return list(zip(submissions, scored, strict=True))
