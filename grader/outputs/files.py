"""Writing files other people and programs read: whole or not at all, private to the course's staff, and
CSV a spreadsheet opens safely.

Every file the grader hands to people or other programs (results, CSVs, pages, reports, autograded
notebooks, the Gradescope zip, course.yml with its salt) is written to a temporary name beside it and
renamed into place: a batch killed half-way, or a full disk, leaves the old file or the new one. The
temporary file is created with the final mode, so a file meant for the staff alone is never readable
by others, not even for a moment.

On a shared server every other user is a student, and a home folder is often readable by all (0755 on
Debian), so what the grader writes is its owner's alone (files 0600, folders 0700) whatever the umask.
The course's staff share by a group, as the README's checklist says: a folder that is group-owned with
the setgid bit (chmod g+s) hands its group bits to what is written in it (files never executable), and
nothing ever gets a bit for other users.
"""
from __future__ import annotations

import csv
import io
import os
import signal
import stat
import tempfile
from pathlib import Path

from grader import safe_text


def private_mode(folder: Path, *, directory: bool = False) -> int:
    """The mode of a new file (or folder) in `folder`: the owner's, plus the folder's group bits where
    the folder is setgid (a course shared with its TAs' group); never anything for other users."""
    mode = 0o700 if directory else 0o600
    folder_mode = os.stat(folder).st_mode
    if folder_mode & stat.S_ISGID:
        mode |= (folder_mode & 0o070) | stat.S_ISGID if directory else folder_mode & 0o060
    return mode


def private_dir(path: Path) -> Path:
    """`path` as a folder, each missing level made with private_mode (an existing one is left as it is)."""
    path = Path(path)
    if not path.is_dir():
        parent = private_dir(path.parent) if path.parent != path else path.parent
        try:
            path.mkdir()
        except FileExistsError:
            if not path.is_dir():
                raise
        else:
            os.chmod(path, private_mode(parent, directory=True))
    return path


# Held while a file is written, so Ctrl-C (or a TERM) arrives the moment the file is in place. That holds
# in a single thread only: the kernel hands a process's signal to any thread that does not block it, and
# Python raises it in the main thread at its next step, even straight after the rename. So the clean-up
# below also meets a temporary file that is already the real one.
HELD = {signal.SIGINT, signal.SIGTERM}


def atomic_write(path: Path, data: str | bytes, mode: int | None = None) -> None:
    """Write `data` (text as UTF-8, line endings as they are) to `path`, creating its folder; with
    private_mode unless `mode` says otherwise."""
    path = Path(path)
    private_dir(path.parent)
    held = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), private_mode(path.parent) if mode is None else mode)
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
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
