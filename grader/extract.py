"""Submitted notebook -> the source of each answer cell, found by its nbgrader grade id.

Position means nothing: students move, split, duplicate and delete cells, and add cells of their
own, which are ignored. A missing or duplicated answer cell is reported by name and scores 0 on its
own tensor only. The submitted file is only ever read.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grader.exercise import ANSWER_CELLS

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024


@dataclass
class Submission:
    id: str
    path: Path
    cells: dict[str, str] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    refused: dict[str, object] = field(default_factory=dict)
    forged: dict[str, object] = field(default_factory=dict)  # cells that run but print a fake result
    error: str | None = None


def discover(paths: list[Path]) -> list[tuple[str, Path]]:
    """(id, path) of every notebook under `paths`, ids relative to the folder they were found in.

    Sorted, so that a batch is graded and reported in the same order whatever the file system says.
    """
    found: dict[str, Path] = {}
    for root in paths:
        root = Path(root)
        if root.is_file():
            candidates = [(root.stem, root)]
        else:
            candidates = []
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for name in sorted(filenames):
                    if name.endswith(".ipynb"):
                        path = Path(dirpath) / name
                        candidates.append((path.relative_to(root).with_suffix("").as_posix(), path))
        for sid, path in candidates:
            unique, k = sid, 2
            while unique in found:
                unique, k = f"{sid}~{k}", k + 1
            found[unique] = path
    return sorted(found.items())


def read(sid: str, path: Path) -> Submission:
    submission = Submission(sid, path)
    try:
        size = path.stat().st_size
        if size > MAX_NOTEBOOK_BYTES:
            submission.error = f"notebook is {size / 2**20:.3g} MB, over the {MAX_NOTEBOOK_BYTES / 2**20:g} MB limit"
            return submission
        text = path.read_bytes().decode("utf-8")
        if not text.lstrip().startswith("{"):
            raise ValueError("not a JSON object")
        notebook = json.loads(text)
    except UnicodeDecodeError:
        submission.error = "not a notebook: the file is not UTF-8 text"
        return submission
    except (ValueError, RecursionError):
        submission.error = "not a notebook: the file is not valid JSON"
        return submission
    except OSError as exc:
        submission.error = f"not a readable notebook: {exc.strerror}"
        return submission
    # nbformat validates with jsonschema but checks no string format. Importing jsonschema imports its
    # optional "iri" format checker, which builds a parser for that grammar (0.7 s at the start of every
    # batch) unless its module is known to be missing.
    sys.modules.setdefault("rfc3987_syntax", None)
    import nbformat

    try:
        # A version 4 notebook needs no conversion, only nbformat's validation: several times faster than
        # nbformat.reads. Older formats and odd files are converted (or refused) by nbformat.reads.
        if isinstance(notebook, dict) and notebook.get("nbformat") == 4:
            nbformat.validate(notebook)
        else:
            notebook = nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises many types for many kinds of malformed files
        submission.error = f"not a readable notebook: {' '.join(str(exc).split())[:200]}"
        return submission
    return from_notebook(sid, path, notebook)


def from_notebook(sid: str, path: Path, notebook) -> Submission:
    """The answer cells of a notebook already in memory (nbgrader hands its preprocessors one)."""
    submission = Submission(sid, path)
    found: dict[str, list[str]] = {}
    for cell in notebook.get("cells", []):
        metadata = cell.get("metadata") or {}
        nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
        grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
        if grade_id in ANSWER_CELLS and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            found.setdefault(grade_id, []).append("".join(source) if isinstance(source, list) else str(source))
    for grade_id in ANSWER_CELLS:
        sources = found.get(grade_id, [])
        if len(sources) == 1:
            submission.cells[grade_id] = sources[0]
        elif not sources:
            submission.problems[grade_id] = (f"no answer cell with grade id {grade_id!r}: it was deleted, or its "
                                             "metadata was edited; restore it from the released notebook")
        else:
            submission.problems[grade_id] = (f"{len(sources)} answer cells have grade id {grade_id!r}: keep exactly "
                                             "one (a copied cell keeps its grade id)")
    return submission
