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

import os
import re
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
