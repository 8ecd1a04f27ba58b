"""`backprop-ninja solution GRADE_ID --notebook NB`: the reference answer of one gradient, explained
line by line, once the student's notebook holds an attempt at it.

Reading the answer before trying teaches little, so the student's own answer cell is the key: a cell
still blank as released (`dx = None  # TODO`) or missing is refused with "try it first"; any attempt,
right or wrong, opens it; `--force` opens it regardless. The explanations are the comments of the
reference itself (inside nbgrader's solution region), so the solved notebook that self-learners read
says word for word what this prints. Which answers there are, and which of them a function's cell
answers together, comes from the course's exercise (grader.exercise).

The reference is read from the solved notebook (a checkout's, or the copy the package carries as data),
never from a module a sandboxed child could import.
"""
from __future__ import annotations

import ast
import difflib
import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from grader.course import material
from grader.course.material import SOLVED
from grader.exercise import BUILTIN, DEFAULT, FAMILIES, Answer, Exercise, ExerciseError, Function, load

# nbgrader's default solution delimiters, which the solved notebook uses around every reference.
BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"


class SolutionError(Exception):
    """The reference cannot be shown; the message says why, in one line."""


@dataclass(frozen=True)
class Step:
    """Statements of the reference and the comment lines above them that explain them."""

    explanation: tuple[str, ...]
    code: tuple[str, ...]
    statements: tuple[ast.stmt, ...]


@dataclass(frozen=True)
class Reference:
    """What is shown for one grade id, and from which file, so the student can open it there."""

    answer: Answer
    function: Function | None  # the function whose returned key the answer is, if it is one
    source: Path | str
    steps: tuple[Step, ...]
    total: int  # statements in the whole reference, of which `steps` may show a part (a function's)


# ---------------------------------------------------------------------------------------------
# Which answer, and where its reference is


def answer_for(exercise: Exercise, grade_id: str) -> Answer:
    answers = exercise.by_grade_id
    if grade_id in answers:
        return answers[grade_id]
    # A function's cell and the whole-run check are graded, but their references are the answers' own.
    wholes = {f.cell: f for f in exercise.functions}
    if exercise.training is not None:
        wholes[exercise.training.grade_id] = exercise.training.function
    if grade_id in wholes:
        function = wholes[grade_id]
        ids = [a.grade_id for a in exercise.answers if a.cell_id == function.cell]
        raise SolutionError(f"{grade_id} has no reference of its own: ask for one of exercise {function.part}'s "
                            f"gradients, {', '.join(ids)}")
    close = difflib.get_close_matches(grade_id, list(answers), n=3, cutoff=0.6)
    listed = f"{', '.join(close[:-1])} or {close[-1]}" if len(close) > 1 else "".join(close)
    hint = f"did you mean {listed}?" if close else f"the grade ids are {', '.join(answers)}"
    raise SolutionError(f"unknown grade id {grade_id!r}: {hint}")


def candidates(course, exercise: Exercise | None = None) -> list[Path]:
    """Where the solved notebook may be, in order: beside course.yml (a checkout's solutions/, or the
    source notebook that `course init` writes), then the checkout the grader runs from or the copy the
    installed package carries. A checkout's and the package's are the lecture's: only for its exercise."""
    lecture = (exercise or (course.exercise if course is not None else load())).name == DEFAULT
    found = []
    if course is not None:
        found += [course.root / SOLVED] if lecture else []
        found.append(course.root / "source" / course.assignment / course.notebook)
    if lecture:
        found.append(material.root() / SOLVED)
    return list(dict.fromkeys(found))


def find_solved(solved: Path | None, course, exercise: Exercise | None = None) -> Path:
    if solved is not None:
        if not solved.is_file():
            raise SolutionError(f"{solved}: no such file (--solved names the solved notebook, {SOLVED} in a "
                                "checkout of backprop-ninja)")
        return solved
    looked = candidates(course, exercise)
    for path in looked:
        if path.is_file():
            return path
    where = f"looked at {', '.join(map(str, looked))}" if looked else "no course.yml here and no checkout"
    raise SolutionError(f"no solved notebook found ({where}): pass --solved PATH/TO/{SOLVED.name}")


def _reference_cell(path: Path, cell_id: str) -> str:
    """The solved notebook's answer cell `cell_id`; unreadable, missing or duplicated stops here."""
    from grader.extract import read

    submission = read(path.stem, path, (cell_id,))
    if submission.error:
        raise SolutionError(f"{path}: {submission.error}")
    if cell_id in submission.problems:
        raise SolutionError(f"{path}: {submission.problems[cell_id]}")
    return submission.cells[cell_id]


# ---------------------------------------------------------------------------------------------
# What a statement writes: the attempt check and a function's slice both ask


def _base(target: ast.expr) -> str | None:
    """The variable an assignment target writes into: `dx` for `dx`, `dx[i]` or `dx.data`."""
    while isinstance(target, (ast.Subscript, ast.Attribute, ast.Starred)):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _writes(stmt: ast.AST) -> tuple[set[str], set[str], ast.expr | None]:
    """(variables it replaces, variables it changes in place, the value it writes) for one statement.

    A method called as a statement of its own (`dx.index_add_(...)`) counts as an in-place change."""
    if isinstance(stmt, ast.Assign):
        targets, value = stmt.targets, stmt.value
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets, value = [stmt.target], stmt.value
    elif (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
          and isinstance(stmt.value.func, ast.Attribute)):
        return set(), {_base(stmt.value.func.value)} - {None}, stmt.value
    else:
        return set(), set(), None
    replaced, updated = set(), set()
    for target in targets:
        for part in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
            if isinstance(part, ast.Name) and not isinstance(stmt, ast.AugAssign):
                replaced.add(part.id)
            elif name := _base(part):
                updated.add(name)
    return replaced, updated, value


def _is_none(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Tuple, ast.List)):
        return all(_is_none(v) for v in value.elts)
    return value is None or (isinstance(value, ast.Constant) and value.value is None)


def _gives_value(root: ast.AST, name: str) -> bool:
    """Whether some statement under `root` gives `name` a value other than None."""
    for node in ast.walk(root):
        replaced, updated, value = _writes(node)
        if name in replaced | updated and not _is_none(value):
            return True
    return False


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    """The function `name` a cell leaves defined: the last one, as when the cell runs."""
    defs = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == name]
    return defs[-1] if defs else None


def _returned(fn: ast.FunctionDef, key: str) -> ast.expr | None:
    """What `return {...}` gives for `key` (None: no dict literal returned holds it)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            for k, v in zip(node.value.keys, node.value.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == key:
                    return v
    return None


def _stub_only(fn: ast.FunctionDef) -> bool:
    """A body with nothing but what the release holds: its docstring, `x = None` blanks and returns."""
    def given(stmt):
        is_docstring = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        return is_docstring or isinstance(stmt, (ast.Return, ast.Pass)) or (
            isinstance(stmt, ast.Assign) and _is_none(stmt.value))
    return all(given(s) for s in fn.body)


def blank_reason(exercise: Exercise, answer: Answer, source: str) -> str | None:
    """Why `source` (the student's answer cell) holds no attempt at `answer`; None when it does.

    Blank means as released: the answer's variable is given no value but None. For a function's answer
    the variable is the one the function returns for the answer's key (`"w": dw`), given a value
    anywhere in the function. A cell that does not parse holds an attempt, however broken.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    function = exercise.function_of(answer)
    if function is None:
        if _gives_value(tree, answer.variable):
            return None
        return f"the answer cell {answer.cell_id} still gives {answer.variable} no value but None (as released)"
    fn = _function(tree, function.name)
    if fn is None:
        return f"the {function.cell} cell defines no {function.name}"
    value = _returned(fn, answer.variable)
    if value is None:
        if _stub_only(fn):
            return f"{function.name} is still the released stub"
        return None
    if isinstance(value, ast.Name):
        if _gives_value(fn, value.id):
            return None
        return (f"{function.name} still gives {value.id} (returned for {answer.variable!r}) no value but None "
                "(as released)")
    return f"{function.name} returns None for {answer.variable!r}" if _is_none(value) else None


# ---------------------------------------------------------------------------------------------
# The reference, step by step


def _region(source: str, where: str) -> str:
    lines = source.splitlines()
    marks = [i for i, line in enumerate(lines) if line.strip() in (BEGIN_SOLUTION, END_SOLUTION)]
    if [lines[i].strip() for i in marks] != [BEGIN_SOLUTION, END_SOLUTION]:
        raise SolutionError(f"{where} holds no reference between {BEGIN_SOLUTION!r} and {END_SOLUTION!r}: "
                            f"is it the solved notebook ({SOLVED.name})?")
    return "\n".join(lines[marks[0] + 1: marks[1]])


def _written(stmt: ast.stmt) -> set[str]:
    replaced, updated, _ = _writes(stmt)
    return replaced | updated


def steps(region: str) -> list[Step]:
    """The statements of a solution region, each under the comment lines just above it. A statement
    without comments that goes on writing the variable of the one before (`dx = torch.zeros_like(x)`,
    then `dx.index_add_(...)`), or that follows the one before with no line between (a block under one
    comment: the forward lines a function computes again), shares its explanation; any other has none."""
    text = textwrap.dedent(region)
    lines = text.splitlines()
    result: list[Step] = []
    end = 0
    for stmt in ast.parse(text).body:
        above = [line.strip() for line in lines[end: stmt.lineno - 1] if line.strip()]
        explanation = tuple(line.lstrip("#").strip() for line in above if line.startswith("#"))
        code = tuple(lines[stmt.lineno - 1: stmt.end_lineno])
        if not explanation and result and (not above and stmt.lineno - 1 == end
                                           or _written(stmt) & _written(result[-1].statements[-1])):
            last = result.pop()
            result.append(Step(last.explanation, last.code + code, last.statements + (stmt,)))
        else:
            result.append(Step(explanation, code, (stmt,)))
        end = stmt.end_lineno
    return result


def needed(statements: list[ast.stmt], variable: str) -> set[int]:
    """Indices of the statements that `variable`'s final value depends on (a backward slice)."""
    wanted, kept = {variable}, set()
    for i in reversed(range(len(statements))):
        replaced, updated, _ = _writes(statements[i])
        if (replaced | updated) & wanted:
            kept.add(i)
            read = {n.id for n in ast.walk(statements[i])
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            wanted = (wanted - replaced) | read | updated
    return kept


def reference(exercise: Exercise, answer: Answer, solved: Path | str, source: str | None = None) -> Reference:
    """The reference for `answer` from the solved notebook (or its answer cell's `source`, given, from
    what `solved` names); for a function's answer, only the statements of the function that its returned
    value needs."""
    if source is None:
        source = _reference_cell(solved, answer.cell_id)
    where = f"{solved}: the answer cell {answer.cell_id}"
    try:
        all_steps, tree = steps(_region(source, where)), ast.parse(source)
    except SyntaxError as exc:
        raise SolutionError(f"{where} does not parse: {exc.msg} (line {exc.lineno})") from None
    total = sum(len(s.statements) for s in all_steps)
    function = exercise.function_of(answer)
    if function is None:
        return Reference(answer, None, solved, tuple(all_steps), total)
    fn = _function(tree, function.name)
    value = _returned(fn, answer.variable) if fn else None
    if not isinstance(value, ast.Name):
        raise SolutionError(f"{where}: {function.name} does not return a variable for {answer.variable!r}")
    statements = [stmt for s in all_steps for stmt in s.statements]
    kept = [statements[i] for i in sorted(needed(statements, value.id))]
    shown = tuple(s for s in all_steps if any(stmt in kept for stmt in s.statements))
    return Reference(answer, function, solved, shown, total)


def render(ref: Reference) -> str:
    """Each step's explanation as comments above its code, as in the solved notebook; styled, and
    click.echo drops the style when the output is not a terminal."""
    a = ref.answer
    title = f"{a.grade_id} (exercise {a.part}): the reference answer, from {ref.source}"
    head = [click.style(title, bold=True)]
    if ref.function is not None:
        count = sum(len(s.statements) for s in ref.steps)
        head += [f"the {count} of the {ref.total} statements of {ref.function.name} that the gradient of "
                 f"{a.variable} needs;", "its signature, docstring and return statement are in your notebook:"]
    body = ""
    for i, step in enumerate(ref.steps):
        # an explained step stands apart; lines with nothing to explain (reading the cache) stay together
        if i:
            body += "\n" if not step.explanation and not ref.steps[i - 1].explanation else "\n\n"
        body += "\n".join([*(click.style(f"    # {line}", fg="cyan") for line in step.explanation),
                           *(f"    {line}" for line in step.code)])
    return "\n".join(head) + "\n\n" + body


def refusal(exercise: Exercise, answer: Answer, notebook: Path) -> str | None:
    """Why the notebook's answer cell opens no reference (None: it holds an attempt)."""
    from grader.extract import read

    submission = read(notebook.stem, notebook, exercise.answer_cells)
    if submission.error:
        raise SolutionError(f"{notebook}: {submission.error}")
    if answer.cell_id in submission.problems:  # missing or duplicated: nothing single to judge
        return f"try it first: {notebook}: {submission.problems[answer.cell_id]} (--force shows it anyway)"
    reason = blank_reason(exercise, answer, submission.cells[answer.cell_id])
    if reason is None:
        return None
    return (f"try it first: {notebook}: {reason}; write your answer and run its check, then ask again "
            "(--force shows it anyway)")


# How many notebooks `solution` without --notebook looks at for the course's settings (the current folder
# and the folders in it, where nbgrader's fetch puts an assignment).
LOOKED_AT = 64


def closed_by(course, notebook: Path | None) -> str | None:
    """What says this is a course with `solutions: off` (its course.yml, or the course settings of the
    student's notebook: --notebook's, else those of the notebooks here and one folder down, so that
    `--force` alone is refused in a graded course's folder too); None where nothing does. The full
    package may be installed where a graded course's students work (a JupyterHub image shared with the
    graders), so the setting travels in the notebook the course released."""
    from grader.extract import Refused, notebook_bytes

    if course is not None and course.solutions == "off":
        return str(course.path)
    here = Path.cwd()
    looked = [notebook] if notebook is not None else \
        sorted([*here.glob("*.ipynb"), *here.glob("*/*.ipynb")])[:LOOKED_AT]
    for path in looked:
        try:
            cells = json.loads(notebook_bytes(path)).get("cells", [])
        except (Refused, OSError, ValueError, AttributeError, RecursionError):
            continue
        for cell in cells if isinstance(cells, list) else []:
            source = cell.get("source", "") if isinstance(cell, dict) else ""
            settings = material.notebook_settings("".join(source) if isinstance(source, list) else str(source))
            if settings and settings.get("solutions") == "off":
                return f"{path} (its course settings)"
    return None


def notebook_exercise(notebook: Path) -> Exercise | None:
    """The exercise a released notebook's self-check loads (its `COURSE = {...}` names one other than the
    lecture's), None for the lecture's. Only an exercise the package carries: the notebook may be a
    student's, run by a TA, and a file or module it names would run with the caller's rights (course.yml's
    salt, the gradebook); a course's own exercise file is named by the caller (--exercise, --course)."""
    import nbformat

    try:
        nb = nbformat.read(notebook, as_version=4)
    except Exception:  # noqa: BLE001 - refusal() says what is wrong with the notebook
        return None
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == ["COURSE"]:
                try:
                    spec = ast.literal_eval(stmt.value).get("exercise")
                except (ValueError, AttributeError):
                    return None
                if not isinstance(spec, str):
                    return None
                if not bundled(spec):
                    raise SolutionError(f"{notebook}: its course settings name the exercise {spec!r}, which this "
                                        "package does not carry, and `solution` loads no file a notebook names: "
                                        "pass --exercise with the course's exercise file (FILE.py:EXERCISE) or "
                                        "--course course.yml")
                try:
                    return load(spec)
                except ExerciseError as exc:
                    raise SolutionError(f"{notebook}: {exc}") from None
    return None


def bundled(spec: str) -> bool:
    """Whether `spec` names an exercise the package carries (a registered name, or a family's variant)."""
    family, slash, _ = spec.partition("/")
    return spec in BUILTIN or bool(slash) and family in FAMILIES


def show(grade_id: str, notebook: Path | None, *, solved: Path | None = None, course=None,
         force: bool = False, derived: Callable[[Exercise], dict[str, str]] | None = None,
         exercise: Exercise | None = None) -> str:
    """The text to print; SolutionError when the notebook holds no attempt (unless `force`) or the
    reference cannot be found. The answers are `exercise`'s, else the course's exercise's, else the one the
    notebook's self-check names (one the package carries), else the lecture's. An exercise other than the
    lecture's with no solved notebook at hand (one of the instructor's own, a variant) has its references
    `derived` from its forward lines, never the lecture's shown in their place."""
    closed = closed_by(course, notebook)
    if closed:
        # A notebook found by looking here and one folder down, not named: an instructor trial's other course's
        # notebook refused a gated course's --force with no word of where it was looked for
        found = "" if notebook is not None or closed == str(getattr(course, "path", "")) else \
            (" (solution looks at the notebooks in this folder and one below it, and a graded course's there "
             "closes it: run it from a folder of this course's alone)")
        raise SolutionError(f"no reference: {closed} sets `solutions: off` (a graded course){found}; ask the "
                            "course's staff, who hold the solved notebook")
    if exercise is None and course is not None:
        exercise = course.exercise
    if exercise is None and notebook is not None:
        exercise = notebook_exercise(notebook)
    exercise = exercise or load()
    answer = answer_for(exercise, grade_id)
    if not force:
        refused = refusal(exercise, answer, notebook)
        if refused:
            raise SolutionError(refused)
    if solved is None and derived is not None and exercise.name != DEFAULT \
            and not any(p.is_file() for p in candidates(course, exercise)):
        where = f"the forward lines of exercise {exercise.name} (derived)"
        return render(reference(exercise, answer, where, derived(exercise)[answer.cell_id]))
    return render(reference(exercise, answer, find_solved(solved, course, exercise)))
