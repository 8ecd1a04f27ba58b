"""Text a submission controls -> text each place it goes takes as it is.

A submission reaches the instructor's tools as text: its folder and file names, the messages its code
raises, what the notebook holds. Any of it may be something those tools cannot take: a lone surrogate
(Python's stand-in for a byte of a file name that is not UTF-8, or what a cell's `'\\udc80'` puts in an
error message) cannot be written as UTF-8 at all, so one such string aborted every file written after
it; control characters and ANSI sequences rewrite the terminal they are printed on.

Each step is taken in one place. `data` turns every string of a result into valid Unicode where the result
enters the trusted process (graded, or read back from disk), so files, pages, gradebooks and notebooks
can always be written. `terminal` escapes what a terminal would act on, where a line is printed. Both
escape rather than drop, visibly (`\\xff` for a byte of a name, `\\x1b` or `\\u202e` for a control
character), so an instructor sees what was there. Pages escape with `html`, which shows control
characters the same way; CSV cells keep their spreadsheet-formula guard; JSON is written with
ensure_ascii, so a results file is plain ASCII whatever a student wrote.
"""
from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from html import escape

# A lone surrogate: never valid in UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")
# Shown misleadingly by a browser as by a terminal: controls other than tab and line ends, DEL, C1
# controls (U+009B is a one-character CSI), invisible format characters and bidirectional overrides
# (they reorder what follows), line and paragraph separators, and lone surrogates.
_HIDDEN = ("\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
           "\ufeff\ufff9-\ufffb\ud800-\udfff")
_UNSAFE_IN_HTML = re.compile(f"[{_HIDDEN}]")
# A terminal also acts on tab and line ends: a line of a table stays one line.
_UNSAFE_ON_TERMINAL = re.compile(f"[\t\n\r{_HIDDEN}]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, kept by os.fsdecode's surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` as valid Unicode: each lone surrogate written out as an escape."""
    return text if text.isascii() else _SURROGATE.sub(_escape, text)


def terminal(text: str) -> str:
    """`text` as one line a terminal shows as it is: nothing in it moves the cursor, changes colours,
    clears the screen or reorders the characters after it."""
    return _UNSAFE_ON_TERMINAL.sub(_escape, text)


def html(text: str) -> str:
    """`text` as HTML character data or an attribute value: markup escaped, and what a browser would
    hide or reorder (an escape sequence, a bidirectional override) shown as an escape."""
    return escape(_UNSAFE_IN_HTML.sub(_escape, text))


# What a page the project writes may load: its own inline styles, embedded (data:) images and fonts from its
# own folder (nbgrader's feedback inlines bootstrap, whose icon font Chromium fetches eagerly under a policy
# that refuses it), nothing else. No script runs, nothing leaves the page's folder, no form is sent and no
# base URL changes, whatever a page's text holds.
# A <meta> carries it, which a page opened from a file obeys too. grader/lms/nbgrader_templates sets the same
# policy on nbgrader's feedback.
PAGE_POLICY = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src 'self'; base-uri 'none'; "
               "form-action 'none'")
POLICY_META = f'<meta http-equiv="Content-Security-Policy" content="{PAGE_POLICY}">'


def data(value):
    """`value` (strings, numbers, lists, tuples, dicts of them) with every string, keys included, made
    valid Unicode: what JSON, nbformat and SQLite take without error."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {data(k): data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(data(v) for v in value)
    return value


def name(path: str | os.PathLike) -> str:
    """A path as a submission id: the same path always gives the same id, which any file, page, CSV
    cell or terminal takes as it is (bytes that are not UTF-8 and control characters escaped)."""
    return terminal(os.fsdecode(path))


# The files a results folder holds for the whole class (grades CSVs, the class report, exports): no
# submission's output may take one of their names, whatever case the file system ignores.
CLASS_FILES = re.compile(r"(grades|grades\.shard-\d+-of-\d+|grade_ids|canvas)\.csv|report\.html", re.IGNORECASE)
# A name part longer than this, in UTF-8, is shortened: with ".json" and the temporary name a write takes
# beside it (grader.outputs.files.atomic_write) it must fit a file system's 255 bytes.
PART_BYTES = 200
# What a part shortened or renamed ends with; a part that already looks like it is renamed as well, so no
# name can be given twice.
_RENAMED = re.compile(r"~[0-9a-f]{16}$")
EXTENSIONS = (".json", ".html")


def _renamed(part: str) -> str:
    """`part`, readable at its start, with the first 64 bits of its SHA-256 after a `~`: never hidden
    (no leading dot), short enough, and as distinct as the part itself."""
    readable = part.lstrip(".").encode("utf-8")[:PART_BYTES // 2].decode("utf-8", "ignore")
    return f"{readable}~{hashlib.sha256(part.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


def output_stem(submission: str) -> str:
    """Where a submission's files go in a results folder, as a relative path without the extension
    (`<stem>.json`, `<stem>.html`): the submission id itself, with each folder and file name that could
    clash with another file renamed, once and for good.

    Renamed: a name that is empty or hidden (a leading dot: `.ipynb`, which tools that skip hidden
    files would lose), one too long for a file system, one that looks renamed, a folder whose name a
    file beside it could have (ending in .json or .html), and, at the top, a name that is, or makes, a
    class-wide file (`report` and the class's report.html). Two submission ids then never share a file,
    and one that differs from another only in case or Unicode normalisation is told apart where the
    batch names it (grader.extract.discover), for file systems that ignore those."""
    parts = submission.split("/")
    stems = []
    for position, part in enumerate(parts):
        last = position == len(parts) - 1
        names = [part + ext for ext in EXTENSIONS] if last else [part]
        clash = (not part or part.startswith(".") or len(part.encode("utf-8", "surrogatepass")) > PART_BYTES
                 or _RENAMED.search(part) or (not last and part.lower().endswith(EXTENSIONS))
                 or (position == 0 and any(CLASS_FILES.fullmatch(same_file(n)) for n in names)))
        stems.append(_renamed(part) if clash else part)
    return "/".join(stems)


def same_file(stem: str) -> str:
    """What a file system that ignores case and Unicode normalisation makes of a name: two stems with the
    same key are one file there."""
    return unicodedata.normalize("NFC", stem).casefold()
