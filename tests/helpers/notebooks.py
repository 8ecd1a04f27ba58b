"""Submission notebooks for the grading-pipeline tests: answer cells with the metadata nbgrader gives
them, built from the reference answers (derived: solutions/reference.py) with any cell replaced, dropped or
duplicated, plus whatever other cells a student might add, and the cells that cost the trusted process
most to read."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import nbformat

from grader.exercises.makemore_mlp import EXERCISE
from grader.sandbox.static_check import MAX_CELL_CHARS
from solutions import reference


def nbgrader_metadata(grade_id: str, *, solution: bool = True) -> dict:
    return {"nbgrader": {"grade": False, "solution": solution, "locked": not solution,
                         "grade_id": grade_id, "schema_version": 3}}


def answer_cell(grade_id: str, source: str, *, cell_id: str | None = None):
    """A code cell as nbgrader releases an answer cell (editable solution cell)."""
    cell = nbformat.v4.new_code_cell(source, metadata=nbgrader_metadata(grade_id))
    cell.id = cell_id or f"answer-{grade_id}"
    return cell


def code_cell(source: str, *, cell_id: str, metadata: dict | None = None):
    cell = nbformat.v4.new_code_cell(source, metadata=metadata or {})
    cell.id = cell_id
    return cell


def markdown_cell(source: str, *, cell_id: str, metadata: dict | None = None):
    cell = nbformat.v4.new_markdown_cell(source, metadata=metadata or {})
    cell.id = cell_id
    return cell


def reference_sources(replace: dict[str, str] | None = None, drop=()) -> dict[str, str]:
    """grade id -> source: the reference answers, with `replace` applied and `drop` left out."""
    sources = {**reference.cells(), **(replace or {})}
    assert set(sources) == set(EXERCISE.answer_cells), "replace names a grade id that has no answer cell"
    return {g: s for g, s in sources.items() if g not in set(drop)}


def notebook(cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.cells = list(cells)
    return nb


def submission(replace: dict[str, str] | None = None, drop=(), extra=()) -> nbformat.NotebookNode:
    """The reference answers as answer cells in the released order, then `extra` cells."""
    sources = reference_sources(replace, drop)
    return notebook([*(answer_cell(g, sources[g]) for g in EXERCISE.answer_cells if g in sources), *extra])


def nested(opening: str, closing: str, depth: int, inner: str) -> str:
    return opening * depth + inner + closing * depth


def dead_branch(code: str, answer: str = "x = 1\n") -> str:
    """`code` where it never runs, after a right answer: what a student hides where no test looks."""
    return answer + "if False:\n    " + code + "\n"


def wide(item: str, room: int) -> str:
    return "[" + ",".join([item] * max(1, room // (len(item) + 1))) + "]"


def nested_prints(depth: int = 195, item: str = "-a", length: int = MAX_CELL_CHARS - 100,
                  answer: str = "x = 1\n") -> str:
    """The issue's cell: a dead branch of ~200 nested print( calls around as wide a list as fits."""
    room = length - depth * len("print()") - 40 - len(answer)
    return dead_branch(nested("print(", ")", depth, wide(item, room)), answer)


def write(path: Path, nb) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def fingerprint(root: Path) -> dict[str, tuple[str, int]]:
    """relative path -> (sha256, mtime_ns) of every file under `root` (or of `root` itself)."""
    root = Path(root)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    result = {}
    for p in files:
        stat = os.stat(p)
        result[p.relative_to(root).as_posix() if p != root else p.name] = (
            hashlib.sha256(p.read_bytes()).hexdigest(), stat.st_mtime_ns)
    return result


def execute(nb, workdir: Path, folder: Path, root: Path):
    """Run All on a copy of `nb` in a copy of the assignment `folder` (its data beside it), as a student
    would, with `root` (the checkout) importable; errors stay in the cells' outputs. `nb` is saved there first,
    as the folder's notebook: Run All runs a file as saved (the self-check reads it)."""
    from nbclient import NotebookClient

    shutil.copytree(folder, workdir)
    nb = nbformat.from_dict(nb)
    (saved,) = workdir.glob("*.ipynb")
    nbformat.write(nb, saved)
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    client = NotebookClient(nb, kernel_name="python3", timeout=600, allow_errors=True,
                            resources={"metadata": {"path": str(workdir)}})
    client.execute(env={**os.environ, "PYTHONPATH": path})
    return nb
