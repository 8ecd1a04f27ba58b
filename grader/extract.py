"""Submitted notebook -> the source of each answer cell, found by its nbgrader grade id.

Position means nothing: students move, split, duplicate and delete cells, and add cells of their
own, which are ignored. A missing answer cell, or copies of one with different code, is reported by
name and scores 0 on its own tensor only; identical copies are one answer. The submitted file is only ever read.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grader import safe_text
from grader.limits import Budget, Limits, OverBudget

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024


def skip_iri_parser() -> None:
    """Called before anything in this process imports nbformat. nbformat validates with jsonschema but
    checks no string format; importing jsonschema imports its optional "iri" format checker, which
    compiles that grammar's parser (0.7-1.7 s, in every command that reads or writes a notebook) unless
    its module is known to be missing."""
    sys.modules.setdefault("rfc3987_syntax", None)


@dataclass
class Submission:
    id: str
    path: Path
    cells: dict[str, str] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    refused: dict[str, object] = field(default_factory=dict)
    forged: dict[str, object] = field(default_factory=dict)  # cells that run but print a fake result
    error: str | None = None
    analysis_seconds: float = 0.0  # CPU time the trusted process spent reading it (grader.limits.Budget)
    sha256: str = ""  # of the file's bytes as read: a result is of this file, not of one that replaced it since

    @property
    def unreadable(self) -> bool:
        return unreadable(self.error)


def unreadable(error: str | None) -> bool:
    """Whether a submission's (or its result's) error says its file is no notebook nbgrader could read either
    (not UTF-8, not JSON, not one nbformat takes, a file that cannot be read: each such error begins "not a "):
    nbgrader's autograde fails on it before grading, so neither route records a score of it. A notebook
    refused (a link, over a limit) is read by nbgrader and recorded 0 with the reason, on both routes."""
    return bool(error) and error.startswith("not a ")


def discover(paths: list[Path]) -> list[tuple[str, Path]]:
    """(id, path) of every notebook under `paths`, ids relative to the folder they were found in.

    Sorted, so that a batch is graded and reported in the same order whatever the file system says. A
    symbolic link, or anything else that is not a regular file, named like a notebook, and a folder
    that is a symbolic link, are listed too, never followed: read() refuses each, so it is graded as
    not graded, with the reason, rather than silently skipped (a student's folder linked to a
    classmate's would otherwise be graded as the linker's). A folder named on the command line is
    the instructor's own and is followed. Ids are safe_text.name()s: two paths that escape to the same
    id (a name holding a literal backslash escape), or whose results would be one file where case or
    Unicode normalisation is ignored (`Alice.ipynb`, `alice.ipynb`), are told apart as duplicates are,
    by a ~2 suffix. Of names that differ only so, none keeps its plain id: an LMS matches logins without
    case, and a student who handed in `Bob.ipynb` beside bob's `bob.ipynb` took bob's grade (a red team).
    """
    found: dict[str, Path] = {}
    taken: set[str] = set()  # the results' file names, as a file system that ignores case sees them
    suffixes: dict[str, int] = {}  # the next ~k to try for an id: a thousand duplicates cost no million tries
    listed = [_candidates(Path(root)) for root in paths]
    spelled: dict[str, set[str]] = {}  # each file name as a case-blind file system sees it, as it is spelled
    for candidates in listed:
        for sid, _ in candidates:
            spelled.setdefault(safe_text.same_file(safe_text.output_stem(sid)), set()).add(sid)
    for candidates in listed:
        for sid, path in candidates:
            unique, k = sid, suffixes.get(sid, 2)
            if len(spelled[safe_text.same_file(safe_text.output_stem(sid))]) > 1:  # spelled two ways: none plain
                unique, k = f"{sid}~{k}", k + 1
            while safe_text.same_file(safe_text.output_stem(unique)) in taken:
                unique, k = f"{sid}~{k}", k + 1
            suffixes[sid] = k
            taken.add(safe_text.same_file(safe_text.output_stem(unique)))
            found[unique] = path
    return sorted(found.items())


def _candidates(root: Path) -> list[tuple[str, Path]]:
    """(id, path) of each notebook `discover` finds under `root`, before ids are told apart."""
    if not root.is_dir():
        return [(safe_text.name(root.stem), root)]
    candidates = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        linked = {d for d in dirnames if (here / d).is_symlink()}
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in linked)
        names = [n for n in filenames if n.endswith(".ipynb")] + [d for d in linked if not d.startswith(".")]
        for name in sorted(names):
            path = here / name
            relative = path.relative_to(root)
            candidates.append((safe_text.name(relative.with_suffix("") if name in filenames else relative), path))
    return candidates


class Refused(OSError):
    """A path named like a submission that is not opened: the message says why, in a few words."""


def notebook_bytes(path: Path) -> bytes:
    """The bytes of a submitted notebook, read so that no path a student controls can make the grader
    read another file, wait forever or fill its memory.

    Refused, unopened: a symbolic link (followed, a grader running as root read another student's 0600
    file as the linker's), anything that is not a regular file (a FIFO blocks the reader, a device
    reads forever) and a file over MAX_NOTEBOOK_BYTES. Refused too: a file with several hard links
    whose owner is not the owner of the folder it sits in, which is how a student would make another
    user's file appear in their own folder (nbgrader's collect and an LMS download write files of
    one link). The file is opened without following a link and without blocking, and checked again
    on the open descriptor, so a swap between the check and the open gains nothing.
    """
    def refuse(st: os.stat_result, folder: os.stat_result) -> None:
        if stat.S_ISLNK(st.st_mode):
            raise Refused(f"refused: a symbolic link{' to a folder' if os.path.isdir(path) else ''}, not followed")
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"refused: not a regular file (a {_KINDS.get(stat.S_IFMT(st.st_mode), 'special file')})")
        if st.st_nlink > 1 and st.st_uid != folder.st_uid:
            raise Refused(f"refused: a hard link to a file of uid {st.st_uid}, in a folder of uid {folder.st_uid}")
        if st.st_size > MAX_NOTEBOOK_BYTES:
            raise Refused(f"notebook is {st.st_size / 2**20:.3g} MB, over the {MAX_NOTEBOOK_BYTES / 2**20:g} MB limit")

    folder = os.stat(Path(path).parent)
    refuse(os.lstat(path), folder)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        refuse(os.fstat(fd), folder)
        content = f.read(MAX_NOTEBOOK_BYTES + 1)
    if len(content) > MAX_NOTEBOOK_BYTES:  # it grew after the check
        raise Refused(f"notebook is over the {MAX_NOTEBOOK_BYTES / 2**20:g} MB limit")
    return content


def plain_file(path: Path) -> bool:
    """Whether `path` is a regular file itself, not a link to one: what a student's folder may hold that
    the grader opens."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


_KINDS = {stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket", stat.S_IFCHR: "character device",
          stat.S_IFBLK: "block device", stat.S_IFDIR: "folder"}


def read(sid: str, path: Path, cells: tuple[str, ...], cpu: float = Limits.analysis_cpu) -> Submission:
    """The answer cells `cells` (an exercise's `answer_cells`) of the notebook at `path`, read within
    `cpu` seconds of this thread's CPU time (course.yml limits.analysis_cpu_seconds)."""
    _nbformat()
    budget = Budget(cpu)
    try:
        submission = _read(sid, path, cells, budget)
        budget.check("reading the notebook")
    except OverBudget as exc:
        submission = Submission(sid, path, error=str(exc))
    submission.analysis_seconds = budget.spent
    return submission


def _read(sid: str, path: Path, cells: tuple[str, ...], budget: Budget) -> Submission:
    submission = Submission(sid, path)
    try:
        raw = notebook_bytes(path)
        submission.sha256 = hashlib.sha256(raw).hexdigest()
        text = raw.decode("utf-8")
        if not text.lstrip().startswith("{"):
            raise ValueError("not a JSON object")
        notebook = json.loads(text)
    except Refused as exc:
        submission.error = str(exc)
        return submission
    except UnicodeDecodeError:
        submission.error = "not a notebook: the file is not UTF-8 text"
        return submission
    except (ValueError, RecursionError):
        submission.error = "not a notebook: the file is not valid JSON"
        return submission
    except OSError as exc:
        submission.error = f"not a readable notebook: {exc.strerror}"
        return submission
    budget.check("reading the notebook")
    nbformat = _nbformat()
    try:
        if isinstance(notebook, dict) and notebook.get("nbformat") == 4:
            _validate(notebook, cells)
        else:  # older formats and odd files are converted (or refused) by nbformat
            notebook = nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises many types for many kinds of malformed files
        submission.error = f"not a readable notebook: {' '.join(str(exc).split())[:200]}"
        return submission
    budget.check("reading the notebook")
    read = from_notebook(sid, path, notebook, cells)
    read.sha256 = submission.sha256  # what tells a later resubmission (report.resubmitted) from this file
    return read


@functools.cache
def _nbformat():
    """nbformat, imported, with the schema of the current notebook format compiled: what the first
    notebook a process reads would pay (0.3 s), paid once by the process, not by a submission's budget."""
    skip_iri_parser()
    import nbformat
    from nbformat import validator

    validator.get_validator(version=4, version_minor=nbformat.v4.nbformat_minor)
    return nbformat


def _validate(notebook: dict, cells: tuple[str, ...]) -> None:
    """nbformat's validation of a version 4 notebook, of what is read of it: the notebook without its
    cells, each cell's being a mapping, and the answer cells without their outputs. Validating the
    whole file cost 0.3 s of the trusted process per MB of small JSON values (17 s for a notebook at
    MAX_NOTEBOOK_BYTES), for cells and outputs that are never read: graded as they are by nbgrader's
    route too, which reads them from nbgrader's own copy."""
    nbformat = _nbformat()
    found = notebook.get("cells")
    if not isinstance(found, list):
        nbformat.validate(notebook)  # says what is wrong with `cells`
        return
    nbformat.validate({**notebook, "cells": []})
    answers = []
    for index, cell in enumerate(found):
        if not isinstance(cell, dict):
            raise ValueError(f"cell {index} is {type(cell).__name__}, not a mapping")
        if _grade_id(cell) in cells:
            answers.append({**cell, "outputs": []} if cell.get("cell_type") == "code" else cell)
    nbformat.validate({**notebook, "metadata": {}, "cells": answers})


def _grade_id(cell) -> str | None:
    metadata = cell.get("metadata") or {}
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
    return grade_id if isinstance(grade_id, str) else None


def from_notebook(sid: str, path: Path, notebook, cells: tuple[str, ...]) -> Submission:
    """The answer cells `cells` of a notebook already in memory.

    A copied cell keeps its grade id (Jupyter copies the metadata). Copies that hold the same code (or
    nothing but comments) are the one answer, graded once; copies with different code are ambiguous,
    and that grade id scores 0 with a message saying so, like any other slip. nbgrader's own
    DeduplicateIds silently keeps the last copy instead, which is why the nbgrader route reads the
    submitted file through here too."""
    submission = Submission(sid, path)
    found: dict[str, list[str]] = {}
    for cell in notebook.get("cells", []):
        grade_id = _grade_id(cell)
        if grade_id in cells and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            found.setdefault(grade_id, []).append("".join(source) if isinstance(source, list) else str(source))
    for grade_id in cells:
        sources = found.get(grade_id, [])
        distinct = {_code_of(s): s for s in sources if _code_of(s)} or {_code_of(s): s for s in sources}
        if len(distinct) == 1:
            submission.cells[grade_id] = next(iter(distinct.values()))
        elif not found:  # none of them: another exercise's notebook, or the wrong --course (a trial's 0, no word)
            submission.problems[grade_id] = (f"no answer cell with grade id {grade_id!r}, nor any other of this "
                                             "course's: the notebook is another exercise's, or was graded with "
                                             "another course's course.yml; grade it with its own course, or restore "
                                             "the answer cells from the released notebook")
        elif not sources:
            submission.problems[grade_id] = (f"no answer cell with grade id {grade_id!r}: it was deleted, or its "
                                             "metadata was edited; restore it from the released notebook")
        else:
            submission.problems[grade_id] = (f"{len(sources)} answer cells have grade id {grade_id!r}, with "
                                             "different code: keep exactly one (a copied cell keeps its grade "
                                             "id); which one you meant is unknown, so it scores 0")
    return submission


def _code_of(source: str) -> str:
    """What tells copies of an answer cell apart: its lines without trailing spaces, blank lines and
    whole-line comments (a copy that differs only there is the same answer; one with nothing else is
    empty)."""
    lines = (line.rstrip() for line in source.splitlines())
    return "\n".join(line for line in lines if line.strip() and not line.lstrip().startswith("#"))
