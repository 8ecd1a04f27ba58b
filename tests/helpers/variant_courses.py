"""The covering set of the network's variants as courses, end to end: `course init --variant`, one
`backprop-ninja grade` batch of its solved notebook, its stub and the mutants of its reference answers (the rule
table's slips, grader.authoring.skeleton.mutants) that no earlier variant's course grades, and Run All on its
solved notebook, and on its stub where it is in a smaller set. tests/test_variant_courses.py checks what each
run gave. The covering set (`runs_all`) meets every normalization with and without the residual block and every
activation, the lecture's network among them; the other 18 variants' courses, every route and the self-check of
every slip included, are the nightly tier's (`.ci/nightly`'s `exercise check` of every variant): here their
derivations, notebooks and every slip's verdict are tested in-process (tests/test_variants.py), and their
courses cost 80 of these courses' 230 CPU s on a quiet machine, nearer 150 in a full run.

Each slip is graded once, in the first course (the lecture's network first) whose cell has the same
formula (an atomic or fused answer going back through the same forward lines; a function's slipped line,
the same code): made again in the next course it is the same formula's same slip, through the same grader,
and tests/test_neighbourhood.py names every slip in every variant. The slips share notebooks, one slip per
answer at a time, as `exercise check` lays them out (grader.lms.dry_run.packed: the grader judges each answer
on the true upstream gradients, never the submission's own). Run All runs 6 of the 24 solved notebooks:
every normalization with and without the residual block, and every activation (`runs_all`); the 24 are
graded here, and their every pair of pieces that meet in a cell runs in the nightly tier, whose `exercise
check` runs each variant's notebooks (12 notebooks covering every pair were half of these courses' time).
A stub's cells are blanks beside the same setup, training and self-check cells its solved notebook runs:
what it adds is that each piece's blanks run and are "not attempted yet", which 4 stubs cover (every
activation, every normalization, the residual block and its absence).

All of it is subprocesses (two worker processes at a lower CPU priority, each making one course after
another: `course init` and `grade` run in it as click runs them, Run All in kernels it starts): it starts
when the first variant test asks (under pytest-xdist, in the one worker given the variant tests' group,
which tests/conftest.py hands out first), and runs two variants at a time beside the other worker's tests
while the variant tests wait.
The tests run what a user runs, through the CLI; only the order of the work is the suite's.
(tests/conftest.py loads this module as a plugin.)
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import queue
import shutil
import subprocess
import sys
import threading
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from grader import course as course_config
from grader.authoring import skeleton
from grader.exercise import FUNCTION, load
from grader.exercises.makemore_mlp import variants
from grader.lms import dry_run, notebooks
from grader.lms.course_init import steps_reached
from helpers.paths import ROOT

TESTS = Path(__file__).resolve().parents[1]

CLI = [sys.executable, "-c", "from grader.cli import main; main()"]
TEST = "test_every_variant_course"  # the test (by its name) each course is for, parametrized by variant name
LECTURE = variants.LECTURE_VARIANT  # the lecture's network: its course grades every mutant
RUN_ALL_TIMEOUT = 600  # for a cell, and for a kernel to start on a machine the other tests keep busy
# Run All reads every eighth word of the course's data: the notebook's code is the same for any list of
# words, and evaluating and calibrating on the whole of names.txt would be most of each variant's run.
# (The lecture's notebook runs on all of it in tests/test_notebooks.py.)
DATA_STRIDE = 8
# Beside the other tests, the courses take what the machine has left: the other tests keep their timing.
NICE = [nice, "-n", "10"] if (nice := shutil.which("nice")) else []


@dataclass
class Outcome:
    """What one variant's course gave: its course.yml, the grader's results by submission stem, what each
    submission of slips must lose (`own`: one grade id per slip; `training`: a function's slip may fail the
    training run too) and the slips it carries, and its solved and stub notebooks after Run All."""

    course: course_config.Course
    results: dict[str, dict]
    slips: dict[str, dict]
    ran: dict[str, nbformat.NotebookNode]


def _run(command: list[str], what: str, cwd: Path, env: dict[str, str]) -> None:
    """The command in `cwd` with `env`, both given: the other tests change this process's own (chdir,
    setenv) while the courses are made."""
    run = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env)
    assert run.returncode == 0, f"{what}: {run.stderr[-2000:]}"


def _cli(args: list[str], what: str, cwd: Path) -> None:
    """`backprop-ninja ARGS` in `cwd`, run by this worker process as click runs it from the command line:
    a fresh process per command re-imported torch, nbgrader and the exercises, 4 of `course init`'s 5 CPU s."""
    from click.testing import CliRunner

    from grader.cli import main

    with contextlib.chdir(cwd):
        run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, f"{what}: {run.output[-2000:]}"


def _submission(student, cells: dict[str, str], path: Path) -> None:
    """The released notebook's answer cells alone, `cells` written in: what the grader reads of a
    submission, without the prose it never reads (a class of mutants is graded in a fraction of the time)."""
    nb = nbformat.from_dict(json.loads(json.dumps(student)))
    nb.cells = [cell for cell in nb.cells if cell.id in cells]
    for cell in nb.cells:
        cell.source = cells[cell.id]
    nbformat.write(nb, path)


def _run_all(notebooks: dict[str, nbformat.NotebookNode], course, folder: Path, workdir: Path, env) -> dict:
    """Run All on each notebook (kind -> notebook) beside the course's data, as a student runs the notebook
    nbgrader released: `jupyter execute`, each in a fresh kernel, errors left in the cells."""
    here = workdir / "run-all"
    shutil.copytree(folder, here)
    if course.data:
        data = here / course.data
        data.write_text("\n".join(data.read_text(encoding="utf-8").splitlines()[::DATA_STRIDE]) + "\n",
                        encoding="utf-8")
    paths = {kind: here / f"{kind}.ipynb" for kind in notebooks}
    for kind, nb in notebooks.items():
        nbformat.write(nb, paths[kind])
    _run([sys.executable, "-m", "jupyter", "execute", "--inplace", "--allow-errors", f"--timeout={RUN_ALL_TIMEOUT}",
          f"--startup_timeout={RUN_ALL_TIMEOUT}", *map(str, paths.values())], "Run All", here, env)
    return {kind: nbformat.read(path, as_version=4) for kind, path in paths.items()}


def variant_course(name: str, workdir: Path, graded: Path) -> None:
    """course init --variant (the package's own, which derives the reference answers); one
    `backprop-ninja grade` batch of the course's solved notebook, the stub nbgrader would release from it,
    and the mutants `graded` (a `plan`) gives the variant, packed; then Run All on the solved notebook, and on the
    stub where `runs_stub`. Run in a worker process: see `_Courses`."""
    env = dict(os.environ)
    target = workdir / "course"
    _cli(["course", "init", str(target), "--variant", name], "course init", ROOT)
    course = course_config.load(target / "course.yml")
    folder = target / "source" / course.assignment
    solved = nbformat.read(folder / course.notebook, as_version=4)
    student = notebooks.release(solved)
    submissions = workdir / "submissions"
    submissions.mkdir()
    nbformat.write(solved, submissions / "solved.ipynb")
    nbformat.write(student, submissions / "stub.ipynb")
    slips = dry_run.packed(course.exercise, pickle.loads(graded.read_bytes())[name])
    for one in slips:
        _submission(student, one.cells, submissions / f"{one.stem}.ipynb")
    (workdir / "mutants.json").write_text(json.dumps({one.stem: {
        "own": sorted(one.own), "training": one.training,
        "slips": [f"{m.cell}: {m.slip.name}" for m in one.mutants]} for one in slips}))
    _cli(["grade", str(submissions), "--out", str(workdir / "results"), "--course", str(target / "course.yml"),
          "--jobs", "1"], "backprop-ninja grade", target)
    _run_all({"solved": solved, **({"stub": student} if runs_stub(name) else {})}, course, folder, workdir, env)


def outcome_of(workdir: Path) -> Outcome:
    """What `variant_course` left in `workdir`, read back."""
    course = course_config.load(workdir / "course" / "course.yml")
    results = {p.stem: json.loads(p.read_text()) for p in (workdir / "results").glob("*.json")}
    ran = {kind: nbformat.read(path, as_version=4) for kind in ("solved", "stub")
           if (path := workdir / "run-all" / f"{kind}.ipynb").exists()}
    return Outcome(course, results, json.loads((workdir / "mutants.json").read_text()), ran)


def runs_all(name: str) -> bool:
    """Whether the variant is in the covering set, whose courses are made here and whose solved notebooks Run
    All runs: each normalization with and without the residual
    block, six of the 24, the activation at place 2i + r of its list (i the normalization's place, r 1 with
    the residual block), so every activation runs too and the lecture's network first. The nightly tier's
    `exercise check` runs the notebooks of every variant."""
    variant = variants.parse(name)
    activation, norm = list(variants.ACTIVATIONS), list(variants.NORMALIZATIONS)
    return activation.index(variant.activation.name) == (2 * norm.index(variant.norm.name) + variant.residual) \
        % len(activation)


# The variants made into courses (see the module's docstring), in the order slips are graded in.
COURSES = (LECTURE, *(name for name in variants.NAMES if name != LECTURE and runs_all(name)))


def runs_stub(name: str) -> bool:
    """Whether Run All runs the variant's stub too: four of the six, the layer norm's two, batch norm's without
    the residual block and no normalization's with it, which meet every activation, every normalization and
    the residual block's presence and absence."""
    variant = variants.parse(name)
    place = list(variants.NORMALIZATIONS).index(variant.norm.name)
    return runs_all(name) and (place == 1 or variant.residual == (place == 2))


def _key(exercise, mutant: skeleton.Mutant) -> str:
    """What makes two variants' slips the same: the cell, the slipped code, and the formula it is a slip of
    (an atomic or fused answer's forward steps; in a function, the slipped line says it all)."""
    grade_id = mutant.grade_ids[0]
    formula = {} if exercise.by_grade_id[grade_id].kind == FUNCTION else steps_reached(exercise, grade_id)
    return json.dumps([grade_id, formula, mutant.slip.gradient, mutant.slip.code], sort_keys=True)


def plan(path: Path) -> None:
    """Which slips each variant's course grades (the mutants, by variant name), pickled to `path`: each in
    the first course of COURSES that has it. The courses read them from there: deriving a variant's mutants
    takes seconds, and a second derivation in each course was a sixth of the courses' time."""
    seen: set[str] = set()
    graded = {}
    for name in COURSES:
        exercise = load(f"makemore-mlp/{name}")
        keyed = [(_key(exercise, mutant), mutant) for mutant in skeleton.mutants(exercise)]
        graded[name] = [mutant for key, mutant in keyed if key not in seen]
        seen |= {key for key, _ in keyed}
    path.write_bytes(pickle.dumps(graded))


def submissions_of(mutants) -> dict[str, skeleton.Mutant]:
    """Each mutant by a file stem naming its cell and slip (`dlnvar_inv-wrong-sum-dim-1`)."""
    counts: dict[str, int] = {}
    found = {}
    for mutant in mutants:
        key = f"{mutant.cell}-{mutant.slip.name}"
        counts[key] = counts.get(key, 0) + 1
        found[f"{key}-{counts[key]}"] = mutant
    return found


def serve() -> None:
    """A worker process for `_Courses`: runs this module's functions named on its stdin, one JSON line
    [function, path...] at a time, and answers each with a JSON line on its stdout (null when the function
    returned, else its traceback). Imports once: torch, nbgrader and the exercises took a fresh process
    about 3 CPU s a course. Anything the functions print goes to stderr, away from the answers."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    served = {"plan": (plan, (Path,)), "variant_course": (variant_course, (str, Path, Path))}
    for line in sys.stdin:
        name, *args = json.loads(line)
        function, kinds = served[name]
        try:
            function(*(kind(arg) for kind, arg in zip(kinds, args, strict=True)))
            answer = None
        except BaseException:  # noqa: BLE001 - told to the test that waits for this course
            answer = traceback.format_exc()
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


class _Worker:
    """One `serve` process: nothing here parses Python beside the tests, as CPython 3.11's AST constructor
    keeps its recursion depth in one place for every thread, and two threads parsing at once made pytest's
    own ast.parse fail ("AST constructor recursion depth mismatch")."""

    def __init__(self, env: dict[str, str], log: Path):
        code = f"import sys; sys.path.insert(0, {str(TESTS)!r}); from helpers.variant_courses import serve; serve()"
        self.log = log
        with log.open("w") as stderr:
            self.process = subprocess.Popen([*NICE, sys.executable, "-c", code], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT, env=env)

    def call(self, function: str, *args) -> None:
        self.process.stdin.write(json.dumps([function, *map(str, args)]) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, f"{function}{args}: its worker stopped: {self.log.read_text()[-3000:]}"
        assert json.loads(answer) is None, f"{function}{args}: {json.loads(answer)[-3000:]}"

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


class _Courses:
    """The selected variants' courses, made in the order of their tests by two threads that share `slots`:
    one at first, two once a test waits. First a worker writes the `plan` every course reads. Each
    course's processes get the environment this process had when the session started."""

    def __init__(self, names: list[str], workdir):
        self.env = dict(os.environ)
        self.slots = threading.Semaphore(1)
        self.widened = False
        self.logs = workdir("workers")
        self.idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self.workers: list[_Worker] = []
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="variant-course")
        graded = workdir("plan") / "graded.pickle"
        self.plan = self.pool.submit(lambda: self._process("plan", graded) or graded)
        self.futures: dict[str, Future] = {name: self.pool.submit(self._made, name, workdir(name)) for name in names}

    def _process(self, function: str, *args) -> None:
        """`function(*args)` in a worker (at most one per slot, each kept for the next course)."""
        with self.slots:  # each worker runs at the lower priority (NICE), and so does what it starts
            try:
                worker = self.idle.get_nowait()
            except queue.Empty:
                worker = _Worker(self.env, self.logs / f"{len(self.workers)}.log")
                self.workers.append(worker)
            try:
                worker.call(function, *args)
            finally:
                self.idle.put(worker)

    def _made(self, name: str, workdir: Path) -> Path:
        self._process("variant_course", name, workdir, self.plan.result())
        return workdir

    def outcome(self, name: str) -> Outcome:
        if not self.widened:
            self.widened = True
            self.slots.release()
        return outcome_of(self.futures[name].result())

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        for worker in self.workers:
            worker.close()


@pytest.fixture(scope="session")
def _variant_courses_started(request, tmp_path_factory):
    """Starts the courses of the selected variant tests when the first of them asks: under pytest-xdist only
    the worker given their group (tests/conftest.py hands it out first) makes them."""
    names = [item.callspec.params["name"] for item in request.session.items if item.originalname == TEST]
    courses = _Courses(names, tmp_path_factory.mktemp) if names else None
    yield courses
    if courses is not None:
        courses.close()


@pytest.fixture
def variant_course_outcome(request, _variant_courses_started) -> Outcome:
    """The outcome of the course of the requesting test's variant (its `name` parameter)."""
    return _variant_courses_started.outcome(request.node.callspec.params["name"])
