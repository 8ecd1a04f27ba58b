"""The red-team corpus: answer cells a clever student who has read this repository would submit, and the
whole-notebook attacks on the grader's input handling.

Each file in cells/ is one attack. Its header says what it claims, which answer cells it replaces in the
released notebook (`all`: every one) and in which batch it runs: `walls` (the sandbox's walls, graded
together), `input` (text and files that could break a batch or the instructor's tools) or `killers`
(processes of the grader itself, in a batch of their own so that a success does not hide the others);
`graded: last` puts it after every other submission of its batch, so that what it breaks is all that
is left to break; `prelude: module` runs that module's PAYLOAD before the cell (code a test shares).

Most payloads need more than the static check lets through. Each is graded two ways (VEHICLES):
`checked`, through the product as it is, riding the escape a student once found: a `match` class pattern
reads any attribute, dunders included, so `print.__self__` is the builtins module and its `exec` runs the
payload, which then has all of Python (the payload text carried in a string with every double underscore
spelled `@@`, since the check refuses strings holding one); and `floor`, with the static check switched
off (tests/helpers/nostatic.py), where the payload is the cell itself, so that whatever the check refuses
today still meets the kernel walls. Either way the payload follows _common.py, which finds the grading
process and gives text a way back to the student: an exception's message becomes the feedback.
`vehicle: plain` cells need no escape and are submitted as written both ways. `defence: static check`
marks an attack nothing but that check stands against (reading an attribute in Python): in the floor
vehicle it must succeed, which shows that the check really was off.

What a payload achieves is written into its error, which the grader turns into feedback, so a test
reads it from the results: `REDTEAM-LEAK` (text it should not have had), `REDTEAM-PROOF` (something it
should not have been able to do), `REDTEAM-MEASURE kind N` (how much of a resource it got). `$PORT`,
`$MARKER`, `$VICTIM` and `$COURSE` are filled in by the test: a loopback listener's port, the argument
that marks processes a payload starts, the one that marks an unrelated process of the grading user, and
the course folder's path.
"""
from __future__ import annotations

import copy
import importlib
import json
from dataclasses import dataclass
from pathlib import Path

from grader.exercises.makemore_mlp.answers import ANSWER_CELLS
from solutions import reference

HERE = Path(__file__).resolve().parent
CELLS = HERE / "cells"
ROOT = HERE.parents[1]
RELEASED = ROOT / "assignments" / "backprop_ninja" / "backprop_ninja.ipynb"
BATCHES = ("walls", "input", "killers")
VEHICLES = ("checked", "floor")

# A class pattern reads any attribute: print.__self__ is the builtins module, and its exec runs the payload.
ESCAPE = """O = int.mro()[-1]
match print:
    case O(__self__=B):
        pass
match B:
    case O(exec=run):
        pass
run({payload!r}.replace('@@', '_' * 2))
"""


@dataclass(frozen=True)
class Attack:
    name: str
    claim: str
    cells: tuple[str, ...]
    batch: str
    payload: str  # what runs in the child, placeholders still in it
    plain: bool = False  # submitted as written: it needs no escape from the static check
    last: bool = False
    static_only: bool = False  # nothing but the static check stands against it

    def cell(self, vehicle: str, **values: str) -> str:
        """The answer cell as submitted with `vehicle` (see VEHICLES), placeholders filled in."""
        assert vehicle in VEHICLES, vehicle
        text = self.payload
        if vehicle == "checked" and not self.plain:
            text = ESCAPE.format(payload=text.replace("__", "@@"))
        for key, value in values.items():
            text = text.replace(f"${key.upper()}", value)
        return text


def _header(text: str) -> dict[str, str]:
    """`# key: value` lines at the top of a cell file (a line starting `#   ` continues the last)."""
    found, last = {}, None
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        if line.startswith("#   ") and last:
            found[last] += " " + line[4:].strip()
        elif ":" in line:
            last, _, value = line[1:].partition(":")
            last = last.strip()
            found[last] = value.strip()
    return found


def load(path: Path) -> Attack:
    text = path.read_text()
    meta = _header(text)
    cells = tuple(ANSWER_CELLS) if meta["cells"] == "all" else tuple(meta["cells"].split())
    unknown = set(cells) - set(ANSWER_CELLS)
    assert not unknown and meta["batch"] in BATCHES, (path, unknown, meta)
    plain = meta.get("vehicle", "escape") == "plain"
    if "prelude" in meta:  # code the tests share with the payload: a module's PAYLOAD, run first
        text = importlib.import_module(meta["prelude"]).PAYLOAD + "\n" + text
    payload = text if plain else (CELLS / "_common.py").read_text() + "\n" + text
    assert "@@" not in payload, path
    return Attack(path.stem, meta["attack"], cells, meta["batch"], payload, plain, meta.get("graded") == "last",
                  meta.get("defence", "").startswith("static check"))


def attacks() -> list[Attack]:
    return [load(p) for p in sorted(CELLS.glob("*.py")) if not p.name.startswith("_")]


def released(replace: dict[str, str] | None = None) -> dict:
    """The released notebook (what students receive) with answer cells' sources replaced."""
    nb = json.loads(RELEASED.read_text())
    replace = replace or {}
    for cell in nb["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell["cell_type"] == "code" and grade_id in replace:
            cell["source"] = replace[grade_id]
    return nb


def correct() -> dict:
    """The released notebook answered with the reference answers: full marks."""
    return released(reference.cells())


def notebook_text(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False)


def with_cell(nb: dict, source: str, *, outputs: list | None = None, markdown: bool = False) -> dict:
    """`nb` with one more cell at the end (a student's own cell, which the grader ignores)."""
    nb = copy.deepcopy(nb)
    cell = {"cell_type": "markdown" if markdown else "code", "id": f"extra-{len(nb['cells'])}", "metadata": {},
            "source": source}
    if not markdown:
        cell.update(execution_count=None, outputs=outputs or [])
    nb["cells"].append(cell)
    return nb


def forged_grades(nb: dict) -> dict:
    """Every self-check cell's output saying it passed, every grade cell worth 1000 points, an answer
    cell marked as a grade cell: what a student can change in the file besides the answers."""
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader")
        if not meta or cell["cell_type"] != "code":
            continue
        if meta.get("grade"):
            meta["points"] = 1000
            cell["outputs"] = [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                                "data": {"text/plain": "1000"}},
                               {"output_type": "stream", "name": "stdout", "text": "score: 51/51, all tests passed\n"}]
        elif meta.get("solution"):
            meta.update(grade=True, points=1000)
    return nb


def deep_nesting(depth: int = 5_000) -> str:
    """An answer cell nested past the parser's and the checker's recursion limits."""
    return "dprobs = " + "-" * depth + "probs\n"
