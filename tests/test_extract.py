"""grader.extract: submitted notebook -> answer cells by grade id, and the batch's notebooks on disk.

Students move, add, copy and delete cells, and some submit files that are not notebooks at all: every
such file must become one clear line of `error` (never an exception that stops the batch), and the
submitted file is only ever read.
"""
from __future__ import annotations

import json
import os
import re

import nbformat
import pytest

from grader import extract
from grader.exercises.makemore_mlp import EXERCISE
from helpers.notebooks import (
    answer_cell,
    code_cell,
    fingerprint,
    markdown_cell,
    nbgrader_metadata,
    notebook,
    reference_sources,
    submission,
    write,
)

REFERENCE = reference_sources()


def read(path):
    return extract.read("student", path, EXERCISE.answer_cells)


# ---------------------------------------------------------------------------------------------
# Answer cells are found by grade id


def test_the_reference_submission_yields_every_answer_cell(tmp_path):
    s = read(write(tmp_path / "nb.ipynb", submission()))
    assert s.error is None
    assert s.problems == {}
    assert s.cells == REFERENCE
    assert list(REFERENCE) == list(EXERCISE.answer_cells)


def test_a_read_notebook_keeps_the_digest_of_its_bytes(tmp_path):
    """The digest is what tells the report that a notebook in submitted/ is no longer the one its result is of
    (a resubmission whose regrade failed): a notebook read whole kept none, and such a regrade was silent."""
    import hashlib

    path = write(tmp_path / "nb.ipynb", submission())
    assert read(path).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_answer_cells_are_found_by_grade_id_not_position(tmp_path):
    decoys = [
        markdown_cell("# My notes\nI found dlogprobs hard.", cell_id="md-1"),
        # A student's own scratch cell assigning an answer variable: no nbgrader metadata.
        code_cell("dlogprobs = 'scratch'\nprint(dlogprobs)", cell_id="scratch-1"),
        # A locked check cell and a cell with some other grade id: not answers.
        code_cell("check('dprobs', dprobs, probs)", cell_id="check-1",
                  metadata=nbgrader_metadata("check_dprobs", solution=False)),
        code_cell("dC = 'not the answer'", cell_id="other-1", metadata=nbgrader_metadata("my_own_cell")),
        # A markdown cell that carries an answer's grade id is not code: ignored too.
        markdown_cell("dW1 = 'prose'", cell_id="md-2", metadata=nbgrader_metadata("dW1")),
        # A raw cell likewise.
        nbformat.v4.new_raw_cell("db1 = 'raw'", metadata=nbgrader_metadata("db1")),
    ]
    answers = [answer_cell(g, REFERENCE[g]) for g in reversed(EXERCISE.answer_cells)]  # reversed order
    cells = [decoys[0]]
    for i, cell in enumerate(answers):
        cells.append(cell)
        if i + 1 < len(decoys):
            cells.append(decoys[i + 1])
    nb = notebook(cells)
    s = read(write(tmp_path / "nb.ipynb", nb))
    assert s.error is None
    assert s.problems == {}
    assert s.cells == REFERENCE


def test_a_deleted_answer_cell_is_a_problem_naming_its_grade_id(tmp_path):
    s = read(write(tmp_path / "nb.ipynb", submission(drop=["dC", "ex3_dhprebn"])))
    assert s.error is None
    assert set(s.problems) == {"dC", "ex3_dhprebn"}
    assert "'dC'" in s.problems["dC"] and "'ex3_dhprebn'" in s.problems["ex3_dhprebn"]
    assert "\n" not in s.problems["dC"]
    # Every other answer cell is still there, and only those.
    assert s.cells == {g: src for g, src in REFERENCE.items() if g not in ("dC", "ex3_dhprebn")}


def test_a_notebook_with_none_of_the_answer_cells_is_told_it_may_be_another_exercises(tmp_path):
    """A second instructor trial graded a notebook with another course's course.yml: 0, and every cell told to be
    restored from the released notebook, with no word that the notebook is another exercise's."""
    s = read(write(tmp_path / "nb.ipynb", submission(drop=list(REFERENCE))))
    assert set(s.problems) == set(REFERENCE) and not s.cells
    assert all("nor any other of this course's: the notebook is another exercise's, or was graded with another "
               "course's course.yml" in text for text in s.problems.values())
    one = read(write(tmp_path / "one.ipynb", submission(drop=["dC"])))
    assert "nor any other" not in one.problems["dC"]


@pytest.mark.parametrize("copies", [2, 3])
def test_a_duplicated_answer_cell_is_a_problem_naming_it_and_the_count(tmp_path, copies):
    # A copied cell keeps its grade id; the student changed the copy.
    extra = [answer_cell("dW1", "dW1 = embcat.T @ dhprebn * 2\n", cell_id=f"copy-{i}") for i in range(copies - 1)]
    s = read(write(tmp_path / "nb.ipynb", submission(extra=extra)))
    assert s.error is None
    assert set(s.problems) == {"dW1"}
    message = s.problems["dW1"]
    assert "'dW1'" in message
    assert re.search(rf"\b{copies}\b", message), message
    assert "dW1" not in s.cells  # neither copy is graded: which one the student meant is unknown
    assert s.cells == {g: src for g, src in REFERENCE.items() if g != "dW1"}


@pytest.mark.parametrize("copy", ["dW1 = embcat.T @ dhprebn\n", "# my copy\ndW1 = embcat.T @ dhprebn   \n\n",
                                  "", "# emptied, but for a comment\n"])
def test_a_copy_with_the_same_code_or_none_is_the_one_answer_graded_once(tmp_path, copy):
    """Jupyter's copy and paste keeps the grade id: a copy that runs the same code (comments, blank lines
    and trailing spaces aside), or nothing at all, leaves one answer, which is graded."""
    answer = "dW1 = embcat.T @ dhprebn\n"
    nb = submission(replace={"dW1": answer}, extra=[answer_cell("dW1", copy, cell_id="copy-1")])
    s = read(write(tmp_path / "nb.ipynb", nb))
    assert s.problems == {}
    assert s.cells["dW1"].strip().endswith("dW1 = embcat.T @ dhprebn")


def test_copies_left_blank_everywhere_are_one_blank_answer(tmp_path):
    nb = submission(replace={"dW1": "dW1 = None  # TODO\n"},
                    extra=[answer_cell("dW1", "dW1 = None  # TODO\n", cell_id="copy-1")])
    s = read(write(tmp_path / "nb.ipynb", nb))
    assert s.problems == {} and s.cells["dW1"] == "dW1 = None  # TODO\n"


def test_source_given_as_a_list_of_lines_is_joined(tmp_path):
    lines = ["dlogprobs = torch.zeros_like(logprobs)\n", "dlogprobs[range(n), Yb] = -1.0 / n\n", "# done"]
    nb = json.loads(nbformat.writes(submission()))
    for cell in nb["cells"]:
        if cell["metadata"]["nbgrader"]["grade_id"] == "dlogprobs":
            cell["source"] = lines
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    s = read(path)
    assert s.error is None and s.problems == {}
    assert s.cells["dlogprobs"] == "".join(lines)


def test_an_nbformat_3_notebook_is_read_through_conversion(tmp_path):
    """Old notebooks (cells under worksheets, source in `input`) are converted, answers and all."""
    cells = [{"cell_type": "code", "input": src, "language": "python", "metadata": nbgrader_metadata(g),
              "outputs": [], "prompt_number": None} for g, src in REFERENCE.items()]
    cells.insert(0, {"cell_type": "markdown", "metadata": {}, "source": "# old notebook"})
    v3 = {"nbformat": 3, "nbformat_minor": 0, "metadata": {"name": ""},
          "worksheets": [{"cells": cells, "metadata": {}}]}
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps(v3), encoding="utf-8")
    s = read(path)
    assert s.error is None
    assert s.problems == {}
    assert s.cells == REFERENCE


# ---------------------------------------------------------------------------------------------
# Files that are not (usable) notebooks: one clear line, never an exception


def _v4(cells) -> bytes:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}).encode()


BAD_FILES = {
    "not-json": (b'{"cells": [', "not valid JSON"),
    "empty": (b"", "not valid JSON"),
    "whitespace": (b"  \n\t\n", "not valid JSON"),
    "non-utf8": ('{"nbformat": 4, "x": "caf\xe9"}'.encode("latin-1"), "not UTF-8"),
    "binary": (bytes(range(256)) * 8, "not UTF-8"),
    "json-list": (b"[1, 2, 3]", "notebook"),
    "json-null": (b"null", "notebook"),
    "json-string": (b'"a notebook"', "notebook"),
    "no-cells": (b'{"a": 1}', "notebook"),
    "future-version": (json.dumps({"nbformat": 5, "nbformat_minor": 0, "metadata": {},
                                  "cells": []}).encode(), "version"),
    "cells-not-a-list": (json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                    "cells": None}).encode(), "notebook"),
    "cells-of-numbers": (_v4([1, 2]), "notebook"),
    "source-of-numbers": (_v4([{"cell_type": "code", "metadata": nbgrader_metadata("dlogprobs"), "source": [1, 2],
                                "outputs": [], "execution_count": None}]), "notebook"),
    "deeply-nested": (b"[" * 100_000 + b"]" * 100_000, "notebook"),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_a_bad_file_gives_a_one_line_error_and_never_raises(tmp_path, name):
    content, expected = BAD_FILES[name]
    path = tmp_path / f"{name}.ipynb"
    path.write_bytes(content)
    s = read(path)  # must not raise
    assert isinstance(s.error, str) and s.error, name
    assert "\n" not in s.error and len(s.error) <= 300, s.error
    assert s.error.startswith("not a"), s.error  # "not a notebook: ..." / "not a readable notebook: ..."
    assert expected in s.error, s.error
    assert s.cells == {}
    assert "Traceback" not in s.error


def test_odd_but_readable_metadata_does_not_raise(tmp_path):
    """Metadata a student mangled by hand: the answer cell is missing, the rest is graded."""
    nb = json.loads(nbformat.writes(submission()))
    for cell in nb["cells"]:
        gid = cell["metadata"]["nbgrader"]["grade_id"]
        if gid == "dprobs":
            cell["metadata"]["nbgrader"] = "dprobs"          # not a mapping
        elif gid == "dcounts":
            cell["metadata"]["nbgrader"]["grade_id"] = ["dcounts"]  # not a string
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    s = read(path)
    assert s.error is None
    assert set(s.problems) == {"dprobs", "dcounts"}
    assert s.cells == {g: src for g, src in REFERENCE.items() if g not in ("dprobs", "dcounts")}


def test_a_file_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(extract, "MAX_NOTEBOOK_BYTES", 2 * 2**20)
    nb = submission(extra=[markdown_cell("x" * (3 * 2**20), cell_id="big")])
    path = write(tmp_path / "big.ipynb", nb)
    assert path.stat().st_size > 3 * 2**20
    s = read(path)
    assert s.error is not None and "\n" not in s.error
    assert "limit" in s.error and re.search(r"\b3(\.\d+)? MB", s.error) and "2 MB" in s.error, s.error
    assert s.cells == {}


def test_a_file_at_the_size_limit_is_read(tmp_path, monkeypatch):
    path = write(tmp_path / "nb.ipynb", submission())
    size = path.stat().st_size
    monkeypatch.setattr(extract, "MAX_NOTEBOOK_BYTES", size)
    assert read(path).cells == REFERENCE
    monkeypatch.setattr(extract, "MAX_NOTEBOOK_BYTES", size - 1)
    refused = read(path)
    assert refused.error is not None and "limit" in refused.error and refused.cells == {}


@pytest.mark.parametrize("content", ["reference", "not-json"])
def test_reading_leaves_the_submitted_file_unchanged(tmp_path, content):
    path = tmp_path / "nb.ipynb"
    if content == "reference":
        write(path, submission(drop=["dC"], extra=[answer_cell("dW1", "dW1 = None\n", cell_id="dup")]))
    else:
        path.write_bytes(b"{oops")
    os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    before = fingerprint(path)
    read(path)
    assert fingerprint(path) == before
    assert os.stat(path).st_mtime_ns == 1_600_000_000_000_000_000


# ---------------------------------------------------------------------------------------------
# discover(): which files make up the batch, and their ids


def _touch(path, content=b"{}"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def test_discover_is_recursive_sorted_and_skips_hidden_folders(tmp_path):
    root = tmp_path / "submissions"
    made = {
        "zoe/backprop_ninja": _touch(root / "zoe" / "backprop_ninja.ipynb"),
        "alice/backprop_ninja": _touch(root / "alice" / "backprop_ninja.ipynb"),
        "bob/week4/backprop_ninja": _touch(root / "bob" / "week4" / "backprop_ninja.ipynb"),
        "bob/extra": _touch(root / "bob" / "extra.ipynb"),
        "carol": _touch(root / "carol.ipynb"),
    }
    _touch(root / "alice" / ".ipynb_checkpoints" / "backprop_ninja-checkpoint.ipynb")
    _touch(root / ".git" / "objects" / "x.ipynb")
    _touch(root / "bob" / "week4" / ".hidden" / "deep" / "backprop_ninja.ipynb")
    _touch(root / "alice" / "notes.txt")
    _touch(root / "alice" / "backprop_ninja.ipynb.bak")
    (root / "dave.ipynb").mkdir()  # a folder whose name ends in .ipynb is not a notebook

    found = extract.discover([root])
    assert found == sorted(made.items())
    assert [sid for sid, _ in found] == sorted(made)
    assert all(isinstance(p, os.PathLike) for _, p in found)


def test_discover_a_single_file(tmp_path):
    path = _touch(tmp_path / "alice" / "backprop_ninja.ipynb")
    assert extract.discover([path]) == [("backprop_ninja", path)]


def test_discover_gives_distinct_ids_to_the_same_name_under_two_roots(tmp_path):
    first = _touch(tmp_path / "section1" / "alice" / "backprop_ninja.ipynb")
    second = _touch(tmp_path / "section2" / "alice" / "backprop_ninja.ipynb")
    found = extract.discover([tmp_path / "section1", tmp_path / "section2"])
    ids = [sid for sid, _ in found]
    assert len(found) == 2 and len(set(ids)) == 2
    assert {p for _, p in found} == {first, second}
    assert "alice/backprop_ninja" in ids
    # Two single files with one name, too.
    found = extract.discover([first, second])
    assert len({sid for sid, _ in found}) == 2 and {p for _, p in found} == {first, second}


def test_discover_finds_nothing_in_an_empty_folder(tmp_path):
    assert extract.discover([tmp_path]) == []


def test_reading_a_notebook_skips_the_iri_grammar_nbformat_never_uses(tmp_path):
    """jsonschema's optional IRI format checker costs 0.7 s at import, at the start of every batch."""
    import subprocess
    import sys

    path = write(tmp_path / "s.ipynb", submission())
    code = ("import sys\nfrom pathlib import Path\nfrom grader import extract\n"
            f"s = extract.read('s', Path({str(path)!r}), {EXERCISE.answer_cells!r})\n"
            "assert s.error is None and s.cells, s\n"
            "assert sys.modules.get('rfc3987_syntax') is None\n")
    subprocess.run([sys.executable, "-c", code], check=True)
