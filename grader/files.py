"""Writing files other people and programs read: whole or not at all, and CSV a spreadsheet opens safely.

Every file the grader hands to people or other programs (results, CSVs, pages, reports, autograded
notebooks, the Gradescope zip, course.yml with its salt) is written to a temporary name beside it and
renamed into place: a batch killed half-way, or a full disk, leaves the old file or the new one. The
temporary file is created with the final mode, so a file meant for its owner alone (a secret salt) is
never readable by others, not even for a moment.
"""
from __future__ import annotations

import csv
import io
import os
import signal
import tempfile
from pathlib import Path

from grader import safe_text

_UMASK = os.umask(0)
os.umask(_UMASK)
# What open() would give a new file: the course staff who share a results folder can read each other's.
SHARED = 0o666 & ~_UMASK


# Held while a file is written: Ctrl-C (or a TERM) in the middle of one would leave its temporary file
# behind, and arrives instead the moment the file is in place.
HELD = {signal.SIGINT, signal.SIGTERM}


def atomic_write(path: Path, data: str | bytes, mode: int = SHARED) -> None:
    """Write `data` (text as UTF-8, line endings as they are) to `path`, creating its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    held = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), mode)  # mkstemp's 0600 would hide results from the rest of the course staff
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _spreadsheet_safe(value) -> str:
    """A spreadsheet runs a cell that starts like a formula: text a student controls (a folder name, an
    error message their code raised) is written with a leading quote, which shows it as text."""
    text = safe_text.visible(str(value))
    if text.startswith(FORMULA_START):
        try:
            float(text)
        except ValueError:
            return "'" + text
    return text


def csv_text(rows) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows([[_spreadsheet_safe(cell) for cell in row] for row in rows])
    return buffer.getvalue()
