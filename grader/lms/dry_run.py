"""The course an exercise makes, graded before any student meets it: `exercise check` builds it in a
temporary folder with `course init` and grades the solved notebook, its stub and the rule table's slips
through every route that records a grade, each the product's own command run as a course runs it
(`backprop-ninja grade --html --gradebook`, `nbgrader autograde` and `generate_feedback`, the Gradescope
zip's run_autograder, for real on two notebooks: see `_gradescope_route`), then runs each notebook in a
kernel as a student does before handing it in (`_Kernel`), whose check lines must say what `grade` gave. A route that
dies, a right answer that loses credit, a slip that keeps it or takes it from another tensor, two routes
that disagree, or a self-check that tells a student another grade are what a class would otherwise find
at grading time.

The grader checks each answer with the true upstream gradients (CHAIN) or random ones (LOCAL), never with
the submission's own (grader.judge.exam), so a tensor's grade is independent of every other answer. One
submission therefore carries one slip in every answer at once, and the batch is as long as the most
slips any one answer has, not the sum of them: starting sandboxes and kernels is what costs the seconds.
A fused cell's slips are on one chain, so its cell takes one at a time; a function's parameters are
leaves of its body, so each parameter's gradient carries one of its own slips beside the others'.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from grader import course as course_config
from grader import exercise as ex
from grader.authoring import skeleton
from grader.lms import gradescope, notebooks
from grader.sandbox.zygote import default_jobs
from grader.student.selfcheck import share_said
from grader.vocabulary import grade_cell_id

CLI = [sys.executable, "-c", "from grader.cli import main; main()"]
GRADE, NBGRADER, GRADESCOPE = "grade --html --gradebook", "nbgrader autograde", "Gradescope"
SELF_CHECK = "the self-check"
PROGRESS = 60  # seconds between the lines that say how far the kernels are
SOLVED, STUB, RAISING = "solved", "stub", "raising"
# What each answer of the `raising` notebook raises: a student's cell that stops with an error, and a function
# whose call does (an instructor trial's backward function read a key its cache does not hold).
RAISED = 'raise RuntimeError("a student\'s answer that stops with an error")'



class RouteError(RuntimeError):
    """A route that did not grade at all: the command and the last line it said."""


@dataclass
class Submission:
    """One notebook of the dry run: what it must lose (`own`), the mutants it carries, and whether a
    function's slip in it may also fail the training run that function drives."""

    stem: str
    cells: dict[str, str]
    mutants: list[skeleton.Mutant] = field(default_factory=list)
    training: bool = False

    @property
    def own(self) -> set[str]:
        return {m.grade_ids[0] for m in self.mutants}


def _course_args(spec: str) -> list[str]:
    """`course init`'s arguments for the exercise SPEC names: the lecture or one of its variants, or a file (a
    gallery exercise by name is its module's file: `course init` alone makes the lecture's course)."""
    family, _, variant = spec.partition("/")
    if family == ex.DEFAULT:
        return ["--variant", variant] if variant else []
    spec = ex.BUILTIN.get(spec, spec)
    module, _, attribute = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if attribute and not module.endswith(".py"):  # module:ATTRIBUTE: course init takes the module's file
        found = importlib.util.find_spec(module)
        module = found.origin if found is not None and found.origin else module
    if module.endswith(".py"):
        return ["--exercise", f"{Path(module).resolve()}:{attribute or 'EXERCISE'}"]
    raise RouteError(f"{spec}: give the exercise's file (path/to/file.py:ATTRIBUTE) to build a course of it")


def _run(command: list[str], cwd: Path, what: str, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)
    except OSError as exc:  # nbgrader not installed, say
        raise RouteError(f"{what} could not start: {exc.strerror}: {command[0]}") from None
    if done.returncode:
        said = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise RouteError(f"{what} failed (exit {done.returncode}): {said[-1] if said else 'no message'}")
    return done.stdout


def submissions(exercise: ex.Exercise) -> list[Submission]:
    """The solved notebook's answers, the stub's (none), and the slips the exercise does not accept, laid
    out in as few notebooks as the module docstring says they can be."""
    slips = [m for m in skeleton.mutants(exercise)  # the exercise says an accepted slip may keep its credit
             if m.slip.name not in exercise.accepted.get(m.slip.gradient, ())]
    return [Submission(SOLVED, {}), Submission(STUB, {}), Submission(RAISING, raising(exercise)),
            *packed(exercise, slips)]


def raising(exercise: ex.Exercise) -> dict[str, str]:
    """Every answer cell stopping with an error, a function's when it is called: Run All must go on past each
    to every check line (the answer cells are tagged to; the locked cell that calls a function was not, in an
    instructor trial's course, and Run All stopped there with every check below it unprinted)."""
    import ast

    cells = {a.cell_id: RAISED + "\n" for a in exercise.answers if a.kind != ex.FUNCTION}
    reference = skeleton.references(exercise)
    for function in exercise.functions:
        tree = ast.parse(reference[function.cell])
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == function.name:
                node.body = [ast.parse(RAISED).body[0]]
        cells[function.cell] = ast.unparse(tree) + "\n"
    return cells


def packed(exercise: ex.Exercise, mutants) -> list[Submission]:
    """`mutants` (skeleton.mutants's, or some of them) in as few notebooks as the module docstring says they
    can be, each named slips-N."""
    found = skeleton.derived(exercise)
    reference = skeleton.references(exercise, found)
    kind = {a.cell_id: a.kind for a in exercise.answers}
    groups: dict[tuple[str, ...], list[skeleton.Mutant]] = {}
    for mutant in mutants:
        key = (mutant.cell,) if kind[mutant.cell] == ex.FUSED else (mutant.cell, mutant.slip.gradient)
        groups.setdefault(key, []).append(mutant)
    made = []
    for index in range(max(map(len, groups.values()), default=0)):
        one = Submission(f"slips-{index + 1}", dict(reference))
        written: dict[str, dict[str, str]] = {}
        for mutants in groups.values():
            if index < len(mutants):
                mutant = mutants[index]
                one.mutants.append(mutant)
                if kind[mutant.cell] == ex.FUNCTION:
                    written.setdefault(mutant.cell, {})[mutant.slip.gradient] = mutant.slip.code
                    one.training = True
                else:
                    one.cells[mutant.cell] = mutant.cells[mutant.cell]
        for cell, slips in written.items():
            one.cells[cell] = skeleton.references(exercise, found, slips)[cell]
        made.append(one)
    return made


def _notebook(solved, student, submission: Submission):
    """The notebook a student would hand in: the released one, its answer cells written."""
    if submission.stem == SOLVED:
        return solved
    nb = nbformat.from_dict(json.loads(json.dumps(student)))
    for cell in nb.cells:
        if cell.id in submission.cells:
            cell.source = submission.cells[cell.id]
    return nb


@dataclass
class Scores:
    """What a route gave each submission: grade id -> (score, max score, the feedback it wrote)."""

    by_stem: dict[str, dict[str, tuple[float, float, str]]] = field(default_factory=dict)
    results: dict[str, dict] = field(default_factory=dict)  # `grade`'s own result files, by stem
    how: str = ""  # how the route graded them, when not each on its own, for the table

    @classmethod
    def of(cls, results: dict[str, dict]) -> Scores:
        return cls({stem: {t["name"]: (t["score"], t["max_score"], t.get("output", "")) for t in result["tests"]}
                    for stem, result in results.items()}, results)


def _grade_route(target: Path, course, work: Path) -> Scores:
    """`backprop-ninja grade --html --gradebook` on nbgrader's submitted/ folder, into a gradebook of its own."""
    gradebook = work / "grade-gradebook.db"
    shutil.copy(target / "gradebook.db", gradebook)
    out = work / "grade-results"
    _run([*CLI, "grade", str(target / "submitted"), "--out", str(out), "--course", str(target / "course.yml"),
          "--html", "--gradebook", str(gradebook)], target, GRADE)
    results = {}
    for path in out.rglob("*.json"):  # out/<student>/<assignment>/<notebook>.json, as submitted/ lays them
        student = path.relative_to(out).parts[0]
        if not path.with_suffix(".html").is_file():
            raise RouteError(f"{GRADE}: no feedback page for {student}")
        results[student] = json.loads(path.read_text(encoding="utf-8"))
    scores = Scores.of(results)
    _from_gradebook(gradebook, course, scores, "")
    return scores


def _from_gradebook(path: Path, course, scores: Scores, route: str) -> None:
    """The gradebook's score of every grade cell; with `route`, they are the scores (else they must be the
    results' own)."""
    from nbgrader.api import Gradebook

    cell_ids = {grade_cell_id(g): g for g in course.exercise.grade_ids}
    with Gradebook(f"sqlite:///{path}") as gradebook:
        for student in [s.id for s in gradebook.students]:
            notebook = gradebook.find_submission_notebook(Path(course.notebook).stem, course.assignment, student)
            got = {cell_ids[g.name]: (g.score, g.max_score) for g in notebook.grades if g.name in cell_ids}
            if route:
                scores.by_stem[student] = {k: (s, m, "") for k, (s, m) in got.items()}
                continue
            results = scores.by_stem.get(student, {})
            differ = sorted(k for k, (s, _) in got.items() if k in results and abs(results[k][0] - s) > 1e-9)
            if differ:
                raise RouteError(f"{GRADE}: the gradebook and the results differ for {student} on {', '.join(differ)}")


def _nbgrader_route(target: Path, course) -> Scores:
    """nbgrader's own autograde and generate_feedback, in the course folder, on its gradebook."""
    _run(["nbgrader", "autograde", course.assignment], target, NBGRADER)
    _run(["nbgrader", "generate_feedback", course.assignment], target, "nbgrader generate_feedback")
    scores = Scores()
    _from_gradebook(target / "gradebook.db", course, scores, NBGRADER)
    for student in scores.by_stem:
        if not any((target / "feedback" / student / course.assignment).glob("*.html")):
            raise RouteError(f"nbgrader generate_feedback wrote no feedback for {student}")
    return scores


def _gradescope_route(target: Path, course, work: Path, made: dict[str, Path], graded: dict[str, dict]) -> Scores:
    """The zip `gradescope build` writes, unpacked as Gradescope unpacks it, its run_autograder run with one
    submission alone in submission/, as Gradescope runs it, for the solved notebook, the first slips'
    notebook and any notebook `grade` gave no result. On Gradescope that script is `backprop-ninja grade` on
    the one notebook, then `for_gradescope` on its result (grader.lms.gradescope.run), so every other
    notebook's results.json is `for_gradescope` of what `grade` gave it: a process per notebook (two Python
    starts, torch, a sandbox: 10 to 20 CPU seconds each) would only say again what `grade` said, and the
    notebooks run for real must give that same results.json, or the route says how it differs."""
    archive = work / "autograder.zip"
    _run([*CLI, "gradescope", "build", "--course", str(target / "course.yml"), "--out", str(archive)], target,
         "gradescope build")
    env = {**os.environ, "BACKPROP_NINJA_PREFIX": sys.prefix}

    def one(stem: str) -> dict:
        root = work / "gradescope" / stem
        with zipfile.ZipFile(archive) as bundle:  # Gradescope unpacks it, modes kept, into source/
            for info in bundle.infolist():
                bundle.extract(info, root / "source")
                os.chmod(root / "source" / info.filename, (info.external_attr >> 16) & 0o777)
        shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
        (root / "submission").mkdir()
        shutil.copy(made[stem], root / "submission" / course.notebook)
        _run([str(root / "run_autograder")], root, GRADESCOPE, {**env, "AUTOGRADER_ROOT": str(root)})
        return json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))

    real = [SOLVED, *[stem for stem in made if stem not in (SOLVED, STUB, RAISING)][:1]]
    real += [stem for stem in made if stem not in graded and stem not in real]
    # Gradescope runs each submission in a machine of its own: side by side here, as many as the cores.
    with ThreadPoolExecutor(max_workers=default_jobs()) as pool:
        results = dict(zip(real, pool.map(one, real), strict=True))
    for stem in made:
        if stem not in graded:
            continue
        same = gradescope.for_gradescope(graded[stem], log=lambda line: None)
        if stem not in results:
            results[stem] = same
        elif (said := _differ(results[stem], same)) is not None:
            raise RouteError(f"{GRADESCOPE}: run_autograder's results.json for {stem} is not what `grade` gave "
                             f"it: {said}")
    scores = Scores.of(results)
    scores.how = f"run_autograder on {len(real)} of {len(made)} notebooks, the others from grade's results"
    return scores


def _differ(ran: dict, same: dict) -> str | None:
    """How a results.json run_autograder wrote differs from `for_gradescope` of `grade`'s result: the score,
    or a test's score or feedback (None if in nothing)."""
    if abs(ran["score"] - same["score"]) > 1e-9:
        return f"score {ran['score']:g}, not {same['score']:g}"
    theirs = {t["name"]: t for t in same["tests"]}
    if {t["name"] for t in ran["tests"]} != theirs.keys():
        return "it grades other tests"
    for test in ran["tests"]:
        other = theirs.get(test["name"], {})
        for key in ("score", "output"):
            if test.get(key) != other.get(key):
                return f"{test['name']}'s {key} differs"
    return None


class _Kernel:
    """One kernel in a copy of the released folder, for notebook after notebook: each saved there in the
    released notebook's place, then Run All in the same kernel, as a student who edits, saves and runs the
    notebook again without a restart (the self-check must tell the truth in whatever state a kernel is left;
    each kernel's first notebook is a fresh kernel's Run All). A kernel costs seconds to start (torch, the
    self-check's imports), most of a small network's notebook. A kernel that dies or will not start is
    started again once for the notebook it failed on; failing twice, the notebook's problem says it is this
    machine's Jupyter, not the exercise."""

    def __init__(self, folder: Path):
        self.folder, self.there, self.manager = folder, None, None

    def __enter__(self) -> _Kernel:
        self.there = tempfile.TemporaryDirectory(prefix="backprop-ninja-run-")
        shutil.copytree(self.folder, self.there.name, dirs_exist_ok=True)
        return self

    def __exit__(self, *exc) -> None:
        self._stop()
        self.there.cleanup()

    def _stop(self) -> None:
        if self.manager is not None:
            with contextlib.suppress(Exception):  # a dead kernel's shutdown may raise: it is gone either way
                self.manager.shutdown_kernel(now=True)
        self.manager = None

    def _run_all(self, path: Path) -> nbformat.NotebookNode:
        nb = nbformat.read(path, as_version=4)
        nbformat.write(nb, Path(self.there.name) / path.name)
        if self.manager is None:
            from jupyter_client import KernelManager

            self.manager = KernelManager(kernel_name="python3")
            # The kernel's own log (its warning about TCP without encryption) would clutter the terminal
            self.manager.start_kernel(cwd=self.there.name, stderr=subprocess.DEVNULL)
        client = NotebookClient(nb, km=self.manager, timeout=1800, allow_errors=True,
                                resources={"metadata": {"path": self.there.name}})
        try:
            client.execute()
        finally:
            if client.kc is not None:
                client.kc.stop_channels()
        return nb

    def run_all(self, path: Path, name: str) -> nbformat.NotebookNode | str:
        """The notebook after Run All, a cell's error left in its outputs as in Jupyter, or the problem to
        report (a notebook's own errors never raise: what raises is Jupyter's)."""
        for _ in range(2):
            try:
                return self._run_all(path)
            except Exception as exc:  # noqa: BLE001 - said for this notebook; the others go on
                failed = f"{type(exc).__name__}: {str(exc)[:200]}"
                self._stop()
        return (f"{SELF_CHECK}: Run All of {name} could not run, twice: the Jupyter kernel failed "
                f"({failed}), a fault of this machine's Jupyter, not of the exercise: run exercise check again")


def ran_or_why(path: Path, folder: Path) -> nbformat.NotebookNode | str:
    """The notebook at `path` after Run All in a fresh kernel beside `folder`'s files, or the problem to report."""
    with _Kernel(folder) as kernel:
        return kernel.run_all(path, path.stem)


def _stops(nb: nbformat.NotebookNode, stem: str) -> list[str]:
    """Where Jupyter's Run All would have stopped: a cell that raised without the `raises-exception` tag (the
    kernels here run every cell whatever, as nbclient's allow_errors does, to read every check line)."""
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        error = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
        if error is not None and "raises-exception" not in cell.metadata.get("tags", []):
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", cell.get("id", "?"))
            return [f"{SELF_CHECK}: Run All of {stem} stops at the cell {grade_id} ({error.get('ename')}: "
                    f"{str(error.get('evalue'))[:120]}), and no check line below it prints: the notebook's own "
                    f"cell must not raise where a student's answer does"]
    return []


def _check_lines(nb: nbformat.NotebookNode) -> dict[str, str]:
    """What each check line says, by the label it opens with (a grade id, or `training`)."""
    said = {}
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        for output in cell.get("outputs", []):
            for line in (output.get("text", "") if output.get("output_type") == "stream" else "").splitlines():
                label, bar, text = line.partition("|")
                if bar and label.strip() and " " not in label.strip():
                    said[label.strip()] = text.strip()
    return said


def _self_check(target: Path, course, made: dict[str, Path], graded: Scores, slipped: dict[str, Submission],
                log: Callable[[str], None] = lambda line: None) -> tuple[list[str], str]:
    """Each notebook Run All in a kernel, as a student runs it before handing it in: its check lines must
    give each answer the share of its points `grade` gave (a line that says WRONG, and how much credit
    the grader still gives, where the grader takes points), and check every answer the grader grades.
    A slip the two grade apart is one whose effect is near the tolerance (a dropped 1e-5 under a square
    root): found on one set of batches and not on another, its grade depends on the configuration, so
    the problem names it with the exercise's fix. Kernels side by side, as many as the cores, each one done
    said through `log` at most every PROGRESS seconds: a larger network's kernels take many minutes (an instructor
    trial's GRU sat a quarter of an hour on one line)."""
    folder = target / "release" / course.assignment
    training = course.exercise.training.grade_id if course.exercise.training else None

    started, done, said, lock = time.monotonic(), [0], [0.0], threading.Lock()

    def run(stems: list[str]) -> dict[str, nbformat.NotebookNode | str]:
        ran = {}
        with _Kernel(folder) as kernel:
            for stem in stems:
                ran[stem] = kernel.run_all(made[stem], stem)
                with lock:
                    done[0] += 1
                    now = time.monotonic() - started
                    if now - said[0] >= PROGRESS and done[0] < len(made):
                        said[0] = now
                        log(f"  {done[0]} of {len(made)} notebooks run in kernels, {now:.0f} s")
        return ran

    jobs = min(default_jobs(), len(made))
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # a kernel per core, each taking every jobs-th notebook
        chains = pool.map(run, [list(made)[index::jobs] for index in range(jobs)])
        found = {stem: nb for chain in chains for stem, nb in chain.items()}
    ran = {stem: found[stem] for stem in made}
    problems, verdicts, agreed = [nb for nb in ran.values() if isinstance(nb, str)], 0, 0
    problems += [line for stem, nb in ran.items() if not isinstance(nb, str) for line in _stops(nb, stem)]
    for stem, nb in ((stem, nb) for stem, nb in ran.items() if not isinstance(nb, str)):
        said = {(training if label == "training" else label): text for label, text in _check_lines(nb).items()}
        for grade_id, (score, top, _) in sorted(graded.by_stem.get(stem, {}).items()):
            line = f"forward line {_line(course.exercise, grade_id)}" if grade_id != training else "the training run"
            where = f"{SELF_CHECK} on {stem}, {grade_id} ({line})"
            if grade_id not in said:
                problems.append(f"{where}: no check line, where {GRADE} gives {score:g}/{top:g}: the notebook's "
                                "check cell for it is missing or did not print")
                continue
            share = share_said(said[grade_id])
            verdicts += 1
            if share is not None and (not top or abs(share - score / top) <= 1e-9):
                agreed += 1
            elif share is None:
                problems.append(f"{where}: says \"{said[grade_id][:200]}\", where {GRADE} gives {score:g}/{top:g}")
            else:
                slip = next((m.slip for m in slipped[stem].mutants if m.grade_ids[0] == grade_id), None) \
                    if stem in slipped else None
                fix = "" if slip is None else (
                    f"; the slip {slip.name} (your {slip.gradient} {slip.sentence}) is graded one way on the "
                    f"self-check's batches and another on the hidden configurations, so its grade depends on the "
                    f"sizes drawn: make it change its gradient more, or accept it: accept={{\"{slip.gradient}\": "
                    f"\"{slip.name}\"}}")
                problems.append(f"{where}: says \"{said[grade_id][:200]}\", where {GRADE} gives {score:g}/{top:g}: "
                                f"a student would be told the wrong grade before handing the notebook in{fix}")
    return problems, f"agrees with {GRADE} on {agreed} of {verdicts} answers in {len(ran)} notebooks"


def _line(exercise: ex.Exercise, grade_id: str) -> str:
    """The forward lines an answer's gradient comes back through (those that read its tensor), to name in
    a problem."""
    answer = exercise.by_grade_id.get(grade_id)
    if answer is None:  # the training check: every line of the network trains
        return f"`{exercise.network.steps[-1].name} = {exercise.network.steps[-1].code}` and the lines before it"
    net = exercise.network
    readers = [net.step[name] for name in net.consumers(answer.source)]
    return "; ".join(f"`{s.name} = {s.code}`" for s in readers[:2]) or f"`{answer.source}`"


def _problems(course, route: str, scores: Scores, made: list[Submission]) -> list[str]:
    """One line per thing a class would meet on this route."""
    exercise, problems = course.exercise, []
    training = exercise.training.grade_id if exercise.training else None
    for submission in made:
        tests = scores.by_stem.get(submission.stem)
        if tests is None:
            problems.append(f"{route}: {submission.stem} got no grade at all")
            continue
        lost = {g for g, (s, m, _) in tests.items() if s < m}
        missing = set(course.points) - set(tests)
        if missing:
            problems.append(f"{route}: {submission.stem} has no score for {', '.join(sorted(missing))}")
        if submission.stem == SOLVED:
            problems += [f"{route}: the solved notebook loses credit on {g} (forward line {_line(exercise, g)}): "
                         f"{_said(tests[g][2])}; the course's own grader refuses the answer derived from it: write "
                         f"that line another way"
                         for g in sorted(lost)]
        elif submission.stem in (STUB, RAISING):
            what = "the stub gets" if submission.stem == STUB else "a notebook whose every answer raises gets"
            problems += [f"{route}: {what} credit on {g}, where it answers nothing: its check cannot fail "
                         f"(forward line {_line(exercise, g)})" for g, (s, _, _) in sorted(tests.items()) if s > 0]
        else:
            for mutant in submission.mutants:
                grade_id = mutant.grade_ids[0]
                if grade_id not in lost:
                    problems.append(
                        f"{route}: the slip {mutant.slip.name} in {mutant.cell} (your {mutant.slip.gradient} "
                        f"{mutant.slip.sentence}) keeps full credit (forward line {_line(exercise, grade_id)}): draw "
                        f"what it reads at random, or accept it: accept={{\"{mutant.slip.gradient}\": "
                        f"\"{mutant.slip.name}\"}}")
            allowed = submission.own | ({training} if submission.training and training else set())
            for grade_id in sorted(lost - allowed):
                problems.append(f"{route}: {grade_id} loses credit with its reference answer beside slips in "
                                f"{', '.join(sorted({m.cell for m in submission.mutants}))} ({submission.stem}): "
                                f"it reads another answer's value (forward line {_line(exercise, grade_id)})")
    return problems


def _unnamed(scores: Scores, made: list[Submission]) -> list[str]:
    """A warning for each slip whose feedback says "wrong values" and names no mistake: neither the slip's
    own sentence nor another diagnosis (a wrong shape is told in words of its own: "looks transposed", "not
    summed over dimension 0"; where the values are wrong is not a mistake's name). Not a problem: its
    grade is right, and what the feedback says is the grader's search for a named mistake, not a line of
    the exercise; a slip equal to another on every configuration is told by the other's sentence, rightly.
    The instructor learns which slips students will be told less about, and the course still builds."""
    lines = []
    for submission in made:
        tests = scores.by_stem.get(submission.stem, {})
        found = {t["name"]: (t.get("extra_data") or {}).get("mistake", "")
                 for t in scores.results.get(submission.stem, {}).get("tests", [])}
        for mutant in submission.mutants:
            grade_id = mutant.grade_ids[0]
            output = tests.get(grade_id, (0, 0, ""))[2]
            named = mutant.slip.sentence in output or _names_a_mistake(found.get(grade_id, ""))
            if grade_id in tests and "wrong values" in output and not named:
                lines.append(f"warning: the slip {mutant.slip.name} in {mutant.cell} (your {mutant.slip.gradient} "
                             f"{mutant.slip.sentence}) loses credit but is not named: the feedback says "
                             f"\"{_said(output)}\"")
    return lines


def _names_a_mistake(mistake: str) -> bool:
    """Whether the grader's diagnosis (the result's `mistake`) names a mistake, in its own words or in
    another slip's equal on every configuration, rather than only where the values are wrong."""
    return bool(mistake) and not mistake.startswith(("wrong only in ", "right in "))


def _said(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[0][:200] if lines else "no feedback"


def _agree(first: tuple[str, Scores], other: tuple[str, Scores]) -> list[str]:
    problems = []
    for stem, tests in first[1].by_stem.items():
        theirs = other[1].by_stem.get(stem, {})
        for grade_id, (score, _, _) in sorted(tests.items()):
            if grade_id in theirs and abs(theirs[grade_id][0] - score) > 1e-9:
                problems.append(f"{other[0]} gives {stem} {theirs[grade_id][0]:g} on {grade_id}, {first[0]} "
                                f"{score:g}")
    return problems


def _routes(target: Path, course, work: Path, paths: dict[str, Path], graded: list,
            quick: bool) -> list[tuple[str, Callable[[], Scores]]]:
    """Each route by name, in the order they run: Gradescope's reads what `grade` gave (`graded`, filled as
    they run); `quick` leaves out nbgrader's autograde, the slowest."""
    routes = [(GRADE, lambda: _grade_route(target, course, work)),
              (GRADESCOPE, lambda: _gradescope_route(target, course, work, paths,
                                                     graded[0][1].results if graded else {}))]
    if not quick:
        routes.append((NBGRADER, lambda: _nbgrader_route(target, course)))
    return routes


def dry_run(spec: str, quick: bool = False,
            log: Callable[[str], None] = lambda line: None) -> tuple[list[str], list[str]]:
    """(problems, the table's lines): the course SPEC makes, graded through every route (`quick`: all but
    nbgrader's). The table comes with the problems too: what did hold (the other routes, the self-check's
    agreement) tells the instructor how far the course got."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="backprop-ninja-check-") as folder:
        work = Path(folder)
        target = work / "course"
        try:
            # course init records the course it makes in the caller's Jupyter configuration and names it as their
            # formgrader's: a course gone when the check ends must be in neither, so it writes to one of its own
            _run([*CLI, "course", "init", str(target), *_course_args(spec)], work, "course init",
                 {**os.environ, "JUPYTER_CONFIG_DIR": str(work / "jupyter-config")})
            course = course_config.load(target / "course.yml")
            _run(["nbgrader", "generate_assignment", course.assignment, "--force"], target,
                 "nbgrader generate_assignment")
        except RouteError as exc:
            return [str(exc)], []
        solved = nbformat.read(target / "source" / course.assignment / course.notebook, as_version=4)
        student = notebooks.release(solved)
        made = submissions(course.exercise)
        paths = {}
        for submission in made:
            path = target / "submitted" / submission.stem / course.assignment / course.notebook
            path.parent.mkdir(parents=True)
            nbformat.write(_notebook(solved, student, submission), path)
            paths[submission.stem] = path
        graded, failed, problems = [], [], []
        for name, route in _routes(target, course, work, paths, graded, quick):
            log(f"grading {len(made)} notebooks through {name}")
            try:
                graded.append((name, route()))
            except RouteError as exc:
                failed.append(name)
                problems.append(str(exc))
        for name, scores in graded:
            problems += _problems(course, name, scores, made)
        problems += [line for other in graded[1:] for line in _agree(graded[0], other)]
        agreement = "not run: grade gave no scores to compare with"
        if graded and graded[0][0] == GRADE:
            log(f"running {len(made)} notebooks in kernels for {SELF_CHECK}")
            found, agreement = _self_check(target, course, paths, graded[0][1], {s.stem: s for s in made}, log)
            problems += found
    slips = sum(len(s.mutants) for s in made)
    table = [f"{'answers':<10} {len(course.exercise.answers)} ({len(course.exercise.answer_cells)} cells)",
             f"{'slips':<10} {slips} in {len(made) - 3} notebooks (one slip per answer in each)",
             f"{'routes':<10} {', '.join(name + (f' ({s.how})' if s.how else '') for name, s in graded) or 'none'}"
             + "".join(f", {name} FAILED" for name in failed) + (" (--quick: not nbgrader autograde)" if quick else ""),
             f"{'self-check':<10} {agreement}",
             f"{'time':<10} {time.monotonic() - started:.0f} s"]
    return problems, table + [line for name, scores in graded[:1] for line in _unnamed(scores, made)]
