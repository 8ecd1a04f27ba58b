"""The red-team corpus: answer cells a clever student who has read this repository would submit, and the
whole-notebook attacks on the grader's input handling.

Each file in cells/ is one attack. Its header says what it claims, which answer cells it replaces in the
released notebook (`all`: every one) and in which batch it runs: `walls` (the sandbox's walls, graded
together), `input` (text and files that could break a batch or the instructor's tools) or `killers`
(processes of the grader itself, in a batch of their own so that a success does not hide the others);
`graded: last` puts it after every other submission of its batch, so that what it breaks is all that
is left to break; `prelude: module` runs that module's PAYLOAD before the cell (code a test shares);
`answers: reference` fills every other answer cell with the reference answer, for an attack whose
claim is what it costs its neighbours (a cell that stops its child must cost that cell alone).

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

import base64
import copy
import importlib
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from grader.exercises.makemore_mlp import EXERCISE
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
    answered: bool = False  # every other answer cell holds the reference answer

    def notebook(self, vehicle: str, **values: str) -> dict:
        """The released notebook with this attack in its cells (and the reference answers in the others,
        with `answers: reference`)."""
        cells = reference.cells() if self.answered else {}
        return released({**cells, **{c: self.cell(vehicle, **values) for c in self.cells}})

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
    cells = tuple(EXERCISE.answer_cells) if meta["cells"] == "all" else tuple(meta["cells"].split())
    unknown = set(cells) - set(EXERCISE.answer_cells)
    assert not unknown and meta["batch"] in BATCHES, (path, unknown, meta)
    plain = meta.get("vehicle", "escape") == "plain"
    if "prelude" in meta:  # code the tests share with the payload: a module's PAYLOAD, run first
        text = importlib.import_module(meta["prelude"]).PAYLOAD + "\n" + text
    payload = text if plain else (CELLS / "_common.py").read_text() + "\n" + text
    assert "@@" not in payload, path
    return Attack(path.stem, meta["attack"], cells, meta["batch"], payload, plain, meta.get("graded") == "last",
                  meta.get("defence", "").startswith("static check"), meta.get("answers") == "reference")


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


XSS = yaml.safe_load((HERE.parent / "corpus" / "xss.yml").read_text(encoding="utf-8"))
XSS_MARKER = "REDTEAM_XSS"  # in every script a payload carries: found live in a page, it would have run


def student_html(nb: dict, url: str) -> dict:
    """`nb` with every markdown, raw and output payload of tests/corpus/xss.yml in cells of its own, each
    script naming XSS_MARKER and each fetch going to `url` (test_xss.py proves them in a browser; here
    they go through every mode and route, and the pages are read for anything still live)."""
    nb = copy.deepcopy(nb)
    for entry in XSS:
        js = f"window.{XSS_MARKER}='{entry['id']}';new Image().src='{url}/js/{entry['id']}'"
        text = (entry["payload"].replace("{js64}", base64.b64encode(js.encode()).decode())
                .replace("{html64}", base64.b64encode(f"<script>{js}</script>".encode()).decode())
                .replace("{js}", js).replace("{url}", f"{url}/fetch/{entry['id']}"))
        cell = {"id": f"xss-{entry['id']}", "metadata": {}, "source": text}
        if entry["where"] == "markdown":
            nb["cells"].append({**cell, "cell_type": "markdown"})
        elif entry["where"] == "raw":
            nb["cells"].append({**cell, "cell_type": "raw", "metadata": {"raw_mimetype": "text/html"}})
        elif entry["where"] == "output":
            output = {"output_type": "display_data", "metadata": {}, "data": {entry["kind"]: text, "text/plain": "x"}}
            nb["cells"].append({**cell, "cell_type": "code", "source": "display(x)", "execution_count": None,
                                "outputs": [output]})
    return nb


def copied_cells(nb: dict, copied: str, deleted: str) -> dict:
    """`nb` with the answer cell `copied` pasted twice below itself (Jupyter's copy: the same grade id),
    the reference answer first and last and a wrong one between, so that a grader keeping either the first
    or the last copy would give the point; and the answer cell `deleted` gone."""
    nb = copy.deepcopy(nb)
    cells = nb["cells"]
    gid = lambda cell: cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")  # noqa: E731
    cells[:] = [c for c in cells if gid(c) != deleted]
    at = next(i for i, c in enumerate(cells) if gid(c) == copied)
    original = cells[at]
    copies = [copy.deepcopy(original) for _ in range(3)]
    for n, (pasted, source) in enumerate(zip(copies, (reference.cells()[copied], f"{copied} = None\n",
                                                      reference.cells()[copied]))):
        pasted.update(id=original["id"] if n == 0 else f"pasted-{n}", source=source)
    cells[at:at + 1] = copies
    return nb


def nested_prints_notebook() -> dict:
    """The released notebook with every answer cell a dead branch of ~200 nested prints (the issue's 29
    cells that cost 3 minutes of the trusted process's CPU) and no answer."""
    from helpers.notebooks import nested_prints

    return released({c: nested_prints(answer=f"{c} = None\n") for c in EXERCISE.answer_cells})
