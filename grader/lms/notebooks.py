"""Builds an exercise's solved notebook and its students' notebook from the notebook's prose source.

It is part of the package, not of a checkout, so that `course init` writes any exercise's notebooks
from a wheel; solutions/make_notebooks.py drives it for this repository's own notebooks.

**The prose source** is the notebook written as text in jupytext's percent format (a Python script whose
`# %%` lines start cells): everything a person writes (the explanations, the read-only code that loads
the data, trains and plots) and nothing the exercise already says. A bundled exercise keeps its own in
its package's notebook/ folder. A cell's role is its marker's metadata:

    # %% [markdown]              prose, as written
    # %%                         code students may change, as written
    # %% locked="ID"             read-only code, nbgrader grade id ID; each line `name = ...` is filled in:
    #                            a step of the exercise's network (its code), COURSE (the self-check's
    #                            settings from course.yml) or DATA_FILE (course.yml's `data`)
    # %% locked="ID" generated="install"
    #                            read-only, its code generated: installs the course's package (course.yml
    #                            `solutions` says which)
    # %% answer="CELL"           the exercise's answer cell CELL: its blank, then the reference answer
    #                            between nbgrader's solution delimiters. An atomic or fused answer is
    #                            followed by its self-check `check("<grade id>")` (which imports `check`
    #                            first), the nbgrader grade cell of its grade id
    # %% graded="GRADE_ID"       a self-check written here, its `check` call alone (the import comes with
    #                            it), that is GRADE_ID's grade cell (the keys of a function's answer, a
    #                            whole-run check)
    # %% [raw]                   a note to the source's author, left out of the notebooks

Metadata is written `key="value"` after the marker, as jupytext reads it; any other key is refused.

So the network is written once, in the exercise (its forward cell's lines are filled in from its steps),
the answers once, in the reference answers, and the build fails unless the prose places every answer
cell in the exercise's order, every network step once in order, and one self-check per grade id.
Another exercise writes its own prose source and calls `build`; a variant of this network composes its
source from this one and its sections of differences (grader/exercises/makemore_mlp/notebook_source.py).

**The two notebooks.** The solved notebook is nbgrader's *source* form: every answer cell holds its blank
(`dx = None  # TODO`) and then the reference answer (the exercise's reference answers module)
between nbgrader's default solution delimiters (`### BEGIN SOLUTION` / `### END SOLUTION`). The students'
notebook is derived from it by nbgrader's own release preprocessors, in the order `nbgrader
generate_assignment` runs them, so it equals what nbgrader releases from the solved notebook given the
same settings:

    c.ClearSolutions.code_stub = {"python": ""}        # CLEAR_SOLUTIONS

nbgrader's default stub (`raise NotImplementedError()`) would make Run All stop at the first
unanswered cell; the empty stub leaves an empty line where the solution was (indented like the
delimiter, so inside a function answer the cursor lands at the body's indentation), and the answer
cell keeps only its blank, which runs. Every other setting is nbgrader's default. The result is not
post-processed: nbgrader's release and the committed notebook are equal byte for byte (a slow test
in tests/test_notebooks.py runs nbgrader to prove it).

In a checkout, run `python -m solutions.make_notebooks` after changing the prose source, the network, the rule table,
course.yml's `data`, `points`, `tolerance`, `allow` or `feedback` (the self-check carries them, as the
notebook's COURSE), or this file: tests/test_notebooks.py fails while the committed notebooks differ from
what this produces.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

import jupytext
import nbformat
from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearHiddenTests,
    ClearMarkScheme,
    ClearOutput,
    ClearSolutions,
    ComputeChecksums,
    LockCells,
)

from grader import course as course_config
from grader import syntax
from grader.course import LECTURE_NOTEBOOK, material
from grader.exercise import DEFAULT, FUNCTION, Exercise, Function
from grader.limits import Limits
from grader.student.solution import BEGIN_SOLUTION, END_SOLUTION
from grader.vocabulary import grade_cell_id

# The only ClearSolutions trait that differs from nbgrader's default (see the module docstring).
CLEAR_SOLUTIONS = {"code_stub": {"python": ""}}

# `nbgrader generate_assignment`'s preprocessors in its order, less those that need a course
# directory or a gradebook (IncludeHeaderFooter, InstantiateTests, SaveCells: no-ops or bookkeeping
# here), so the release keeps nbgrader's cell locks and checksums as well as its cleared solutions.
RELEASE_PREPROCESSORS = (LockCells, ClearSolutions, ClearOutput, ClearHiddenTests, ClearMarkScheme,
                         ComputeChecksums, CheckCellMetadata)

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}

# The prose source's cell roles (see the module docstring); a code cell without one is editable.
ROLES = ("locked", "answer", "graded")
# Metadata jupytext itself records when it reads the source (blank lines after a cell); any other key
# is a mistake (a misspelt role would otherwise turn a read-only cell into an editable one).
JUPYTEXT_KEYS = {"lines_to_next_cell", "lines_to_end_of_cell_marker"}
# A line the build fills in: `name = ...`, indented or commented as the prose likes.
TRAINING_RATE = re.compile(r"\blr=[^,)]*")
FILLED = re.compile(r"^(?P<indent>\s*)(?P<name>[A-Za-z_]\w*) = \.\.\.(?P<rest>\s*(?:#.*)?)$")


class ProseError(ValueError):
    """The prose source does not fit its exercise; the message names the source and the cell."""


def release_path(course) -> Path:
    return Path("assignments") / course.assignment / course.notebook


def public_settings(course) -> dict:
    """What the self-check needs from course.yml to give the grader's verdicts (never the salt)."""
    allow = {k: list(getattr(course.allow, k)) for k in ("torch", "functional", "builtins")}
    settings = {"tolerance": [course.tolerance.rtol, course.tolerance.atol], "allow": allow,
                "hints": course.feedback.hints}
    if course.exercise.name != DEFAULT:  # the self-check loads the exercise course.yml names (a variant's)
        settings["exercise"] = notebook_spec(course.exercise_spec)
    if course.notebook != LECTURE_NOTEBOOK:  # so that a line says when the student's notebook is not the one collected
        settings["notebook"] = course.notebook
    if course.solutions == "off":  # the self-check points to no reference, `backprop-ninja solution` refuses
        settings["solutions"] = course.solutions
    if course.limits.cell_timeout != Limits.cell_timeout:  # so that a check stops a cell where the grader does
        settings["cell_timeout"] = course.limits.cell_timeout
    if course.policy != course_config.Policy():  # so that a line says WRONG exactly when this course takes a point
        settings["policy"] = dataclasses.asdict(course.policy)
    return settings


def notebook_spec(spec: str) -> str:
    """The exercise's spec as the student's notebook loads it: a course's own exercise file is released
    beside the notebook, so its path is its name there; any other spec is the same everywhere."""
    module, _, attribute = spec.rpartition(":")
    return f"{Path(module).name}:{attribute}" if module.endswith(".py") else spec


# ---------------------------------------------------------------------------------------------
# Cells


def _nbgrader(grade_id: str, *, solution: bool, points: float | None = None) -> dict:
    graded = {"points": points} if points is not None else {}
    return {"nbgrader": {"grade": points is not None, "solution": solution, "locked": not solution,
                         "grade_id": grade_id, **graded, "schema_version": 3}}


def locked(grade_id: str, source: str):
    """Read-only code: students run it but should not change it (nbgrader restores it anyway)."""
    return nbformat.v4.new_code_cell(source, metadata=_nbgrader(grade_id, solution=False))


def check_cell(call: str) -> str:
    """A check cell: it imports the check itself and names the answer, evaluating nothing of the student's,
    so that it never raises (after a kernel restart, a skipped or broken answer cell: see
    grader.student.selfcheck.NotebookCheck). A kernel that cannot import the self-check (not installed
    there, or a torch that cannot start) gets one line saying so, and Run All goes on."""
    return ("try:\n"
            "    from grader.student.check import check\n"
            "except Exception as error:  # no self-check in this kernel: the notebook's first code cell installs it\n"
            "    def check(*_, why=f\"not checked: {error}. The notebook's first code cell installs the \"\n"
            "              \"self-check: run it (where it stopped, the command it printed), then this cell\", **__):\n"
            "        print(why)\n"
            "    check.training = check\n"
            f"{call}")


def graded(grade_id: str, source: str, points: Mapping[str, float]):
    """A self-check that is also the grade id's nbgrader grade cell, worth course.yml's points: the
    grader writes its score and feedback there, so the gradebook keeps a score per tensor. A grade id
    the course gives no points stays a plain read-only check."""
    return nbformat.v4.new_code_cell(source, metadata=_nbgrader(
        grade_cell_id(grade_id), solution=False, points=points.get(grade_id)))


def _solution_region(solution: str, indent: str = "") -> list[str]:
    body = solution.strip("\n").splitlines()
    return [indent + BEGIN_SOLUTION, *body, indent + END_SOLUTION]


def _answer(cell_id: str, lines: list[str]):
    """An answer cell, tagged `raises-exception` so that Run All goes on past it when it raises (a wrong
    shape read by the next answer, say): every later check still prints, and each grades its own cell
    with the true upstream gradients, as the grader does. nbgrader grades an error as it did before."""
    return nbformat.v4.new_code_cell("\n".join(lines), metadata={**_nbgrader(cell_id, solution=True),
                                                                 "tags": ["raises-exception"]})


def blank(variable: str) -> str:
    return f"{variable} = None  # TODO"


def function_answer(function: Function, source: str):
    """A function's cell: the reference function with its body replaced by one blank per gradient.

    The signature, docstring and return statement come from the reference answer and stay in the
    stub, so students keep the contract; the return statement names the variables that get a blank,
    so each gradient starts as None and is reported as not attempted until written.
    """
    contract = (f"reference answer {function.cell}: expected only `def {function.name}`, with a docstring, "
                f"ending with `return {{name: variable}}` for {function.returns}")
    tree = syntax.parse(source).body
    fn = tree[0] if len(tree) == 1 else None
    if not (isinstance(fn, ast.FunctionDef) and fn.name == function.name and ast.get_docstring(fn)):
        raise ValueError(contract)
    docstring, ret = fn.body[0], fn.body[-1]
    if not (isinstance(ret, ast.Return) and isinstance(ret.value, ast.Dict)
            and [getattr(k, "value", None) for k in ret.value.keys] == list(function.returns)
            and all(isinstance(v, ast.Name) for v in ret.value.values)):
        raise ValueError(contract)
    lines = source.rstrip("\n").splitlines()
    indent = lines[ret.lineno - 1][: ret.col_offset]
    blanks = [indent + blank(v.id) for v in ret.value.values]
    body = "\n".join(lines[docstring.end_lineno: ret.lineno - 1])
    return _answer(function.cell, [*lines[: docstring.end_lineno], *blanks,
                                   *_solution_region(body, indent), *lines[ret.lineno - 1:]])


def solved_answer(exercise: Exercise, cell_id: str, reference: str):
    """The solved notebook's answer cell `cell_id` holding `reference`: a function's with its contract, any
    other the blank, then the reference in nbgrader's solution region."""
    function = next((f for f in exercise.functions if f.cell == cell_id), None)
    if function is not None:
        return function_answer(function, reference)
    return _answer(cell_id, [blank(exercise.by_grade_id[cell_id].variable), *_solution_region(reference)])


# ---------------------------------------------------------------------------------------------
# From the prose source to the solved notebook


class _Builder:
    """Turns the prose source's cells into the solved notebook's, keeping what the checks at the end
    need: the answer cells, self-checks and network steps in the order the prose placed them."""

    def __init__(self, exercise: Exercise, prose: Path, references: Mapping[str, str], course,
                 text: str | None = None):
        self.exercise, self.prose, self.references, self.course = exercise, prose, references, course
        self.text = text
        network = exercise.network
        self.fills = {**{s.name: s.code for s in network.steps},
                      "COURSE": repr(public_settings(course)), "DATA_FILE": repr(course.data)}
        self.answers, self.checks, self.steps = [], [], []

    def error(self, where: str, message: str) -> ProseError:
        return ProseError(f"{self.prose}: {where}: {message}")

    def cells(self) -> list:
        built = []
        source = jupytext.read(self.prose, fmt="py:percent") if self.text is None else \
            jupytext.reads(self.text, fmt="py:percent")
        for index, cell in enumerate(source.cells):
            if cell.cell_type == "raw":
                continue
            if cell.cell_type == "markdown":
                built.append(nbformat.v4.new_markdown_cell(cell.source))
                continue
            where = f"cell {index + 1}"
            unknown = sorted(set(cell.metadata) - {*ROLES, "generated", *JUPYTEXT_KEYS})
            if unknown:
                raise self.error(where, f"unknown cell metadata {unknown}: the roles are {', '.join(ROLES)}")
            roles = [r for r in ROLES if r in cell.metadata]
            if len(roles) > 1:
                raise self.error(where, f"one role per cell, not {' and '.join(roles)}")
            role = roles[0] if roles else None
            if "generated" in cell.metadata and role != "locked":
                raise self.error(where, "only a locked cell is generated")
            if role is None:
                built.append(nbformat.v4.new_code_cell(cell.source))
            else:
                built += getattr(self, role)(cell.metadata[role], cell)
        self.verify()
        return built

    def locked(self, grade_id: str, cell) -> list:
        generated = cell.metadata.get("generated")
        if generated is None:
            return [locked(grade_id, self.fill(grade_id, cell.source))]
        if generated != "install" or cell.source:
            raise self.error(grade_id, 'the only generated cell is generated="install", written empty')
        return [locked(grade_id, material.install_cell(self.course.solutions, self.course.wheels))]

    def fill(self, grade_id: str, source: str) -> str:
        def line(match: re.Match) -> str:
            name = match["name"]
            if name not in self.fills:
                raise self.error(grade_id, f"nothing fills `{name} = ...`: a network step, COURSE or DATA_FILE")
            if name in self.exercise.network.step:
                self.steps.append(name)
            return f"{match['indent']}{name} = {self.fills[name]}{match['rest']}"

        return "\n".join(FILLED.sub(line, text) for text in source.split("\n"))

    def answer(self, cell_id: str, cell) -> list:
        if cell.source:
            raise self.error(cell_id, "an answer cell is written empty: its blank and answer come from the exercise")
        self.answers.append(cell_id)
        function = next((f for f in self.exercise.functions if f.cell == cell_id), None)
        answer = self.exercise.by_grade_id.get(cell_id)
        if function is None and (answer is None or answer.kind == FUNCTION):
            raise self.error(cell_id, f"not an answer cell of exercise {self.exercise.name}")
        if cell_id not in self.references:
            raise self.error(cell_id, "no reference answer for this cell")
        cells = [solved_answer(self.exercise, cell_id, self.references[cell_id])]
        if function is not None:
            return cells
        self.checks.append(cell_id)
        return cells + [graded(cell_id, check_cell(f'check("{cell_id}")'), self.course.points)]

    def graded(self, grade_id: str, cell) -> list:
        if not cell.source.startswith("check"):
            raise self.error(grade_id, "a graded cell is written as its check call alone: its import comes with it")
        self.checks.append(grade_id)
        source = cell.source
        if self.exercise.training is not None and grade_id == self.exercise.training.grade_id:
            # The course's learning rate, which the grader trains with: a network that needs a smaller one than
            # the prose's (course.yml, or its exercise's `learning_rate`) diverged in the self-check alone.
            source = TRAINING_RATE.sub(f"lr={self.course.training.learning_rate!r}", source)
        return [graded(grade_id, check_cell(source), self.course.points)]

    def verify(self) -> None:
        """The prose holds the whole exercise, in its order: what it leaves out students never see."""
        exercise = self.exercise
        if self.answers != list(exercise.answer_cells):
            raise self.error("answer cells", f"expected {list(exercise.answer_cells)} in this order, "
                             f"found {self.answers}")
        if sorted(self.checks) != sorted(exercise.grade_ids):
            missing = sorted(set(exercise.grade_ids) - set(self.checks))
            extra = sorted(g for g in set(self.checks) if self.checks.count(g) > 1 or g not in exercise.grade_ids)
            raise self.error("self-checks", f"one per grade id: missing {missing}, unknown or repeated {extra}")
        if self.steps != list(exercise.network.intermediates):
            raise self.error("network", f"expected `name = ...` for each step once, in the order "
                             f"{list(exercise.network.intermediates)}; found {self.steps}")


def _notebook(cells):
    """Cell ids are fixed (the grade id, else the position) so that a rebuild changes no byte."""
    for index, cell in enumerate(cells):
        cell.id = cell.metadata.get("nbgrader", {}).get("grade_id", f"cell-{index}")
    nb = nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": KERNELSPEC, "language_info": {"name": "python"}})
    nbformat.validate(nb)
    return nb


def solved_notebook(exercise: Exercise, prose: Path, references: Mapping[str, str], course,
                    text: str | None = None):
    nb = _notebook(_Builder(exercise, prose, references, course, text).cells())
    CheckCellMetadata().preprocess(nb, {})
    return nb


def release(solved):
    """The students' notebook, made from the solved one by nbgrader's own preprocessors."""
    nb = copy.deepcopy(solved)
    resources: dict = {}
    for preprocessor in RELEASE_PREPROCESSORS:
        settings = CLEAR_SOLUTIONS if preprocessor is ClearSolutions else {}
        nb, resources = preprocessor(**settings).preprocess(nb, resources)
    nbformat.validate(nb)
    return nb


# ---------------------------------------------------------------------------------------------
# Notebooks


def build(exercise: Exercise, prose: Path, references: Mapping[str, str], course, text: str | None = None):
    """(solved notebook, students' notebook) of `exercise`, from its prose source and its reference
    answers (cell id -> source). `course` gives what the notebook carries from course.yml: points,
    data file, the self-check's settings and which package the install cell installs. `text`, when
    given, is the source's text composed from `prose` (a variant's: course_init.variant_notebooks)."""
    solved = solved_notebook(exercise, prose, references, course, text)
    return solved, release(solved)
