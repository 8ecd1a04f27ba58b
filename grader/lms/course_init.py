"""`backprop-ninja course init DIR`: an nbgrader course directory wired to this grader, and
`course init --update DIR`: the same course brought back in line with its course.yml.

The assignment's nbgrader source is the solved notebook (nbgrader releases it with its solutions
cleared, exactly as assignments/ holds it); its grade cells take the course's points; the hidden suite
and course.yml (with a fresh secret salt) sit beside nbgrader_config.py, which puts the sandboxed grader
in place of nbgrader's kernel. The material comes from the checkout, or from the copy a wheel carries
(grader/course/material.py), so an installed package is enough.

nbgrader keeps each grade cell's points in its gradebook from `generate_assignment`; a course.yml whose
points changed afterwards would give scores above those maxima, which nbgrader refuses mid-autograde.
--update rewrites the source from course.yml and runs generate_assignment again, so the two agree.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import os
import re
import secrets
import shutil
from pathlib import Path

from grader.course import choice, material
from grader.exercise import ATOMIC, DEFAULT, FAMILIES, FUSED, Exercise
from grader.exercise import load as load_exercise
from grader.outputs.files import atomic_write, private_dir, private_mode
from grader.vocabulary import grade_cell_id

SOLVED = material.SOLVED
COURSE_FILE = "course.yml"
CONFIG_FILE = "nbgrader_config.py"
INSTALL_CELL = "setup_install"
MISTAKES_FILE = "known_mistakes.yml"
OWN_MISTAKES = ("# Named mistakes of this course's own exercise, by grade id (none yet): the rule table's slips are "
                "named without a list.\n{}\n")

CONFIG = '''\
# Written by `backprop-ninja course init`. nbgrader runs this course; backprop-ninja grades it.
import os

c = get_config()  # noqa: F821 (nbgrader provides it)

c.CourseDirectory.course_id = {course_id!r}

# This folder is the course, wherever nbgrader runs from: your own Jupyter configuration names the course
# formgrader grades (`course init` writes it), which every nbgrader command would otherwise take for its own,
# so `nbgrader autograde` run in another course once graded that one.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))

# Where release_assignment puts the assignment and submit puts submissions. nbgrader's default,
# /usr/local/share/nbgrader/exchange, only root can create. Students' own nbgrader must use the same
# folder (c.Exchange.root in their nbgrader_config.py); on a shared server it must be one every user
# may write, e.g. `course init --exchange /srv/nbgrader/exchange` on a folder made with mode 1777.
c.Exchange.root = {exchange!r}

# The release keeps each answer cell's blank (`dX = None  # TODO`) so that Run All works:
# nbgrader's default stub, `raise NotImplementedError()`, would stop at the first unanswered cell.
c.ClearSolutions.code_stub = {{"python": ""}}

# Autograde runs no kernel: backprop-ninja grades the answer cells in its sandbox and writes each grade
# cell's score and feedback, which RecordGrades then records per tensor with the late penalty, in one
# transaction (nbgrader's SaveAutoGrades and AssignLatePenalties, which commit one cell at a time).
c.Autograde.autograde_preprocessors = [
    "grader.lms.nbgrader.GradeInSandbox",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.CheckCellMetadata",
    "grader.lms.nbgrader.RecordGrades",
]
c.GradeInSandbox.course = {course_file!r}  # relative to the course directory, where nbgrader runs
# One grading of the course at a time, on either route: two at once removed each other's autograded notebooks.
c.Autograde.exporter_class = "grader.lms.nbgrader.OneGraderAtATime"
# Late penalties, from the due date nbgrader holds (nbgrader db assignment add ASSIGNMENT --duedate=...): none
# unless set here, on both routes. nbgrader's own policy takes all or nothing
# (c.LateSubmissionPlugin.penalty_method = "zero"); a share of the score for each day late, or part of one:
# c.AssignLatePenalties.plugin_class = "grader.lms.nbgrader.LatePenalty"
# c.LatePenalty.per_day = 0.1  # 10% of the score per day
# c.LatePenalty.most = 1.0  # at most all of it
# Each result as a file too, for `backprop-ninja report results/` and `backprop-ninja export results/`.
c.GradeInSandbox.results = "results"
# Grade cells come back from the gradebook, a deleted one too (nbgrader's own restore can fail on it); a cell
# a student marked as nbgrader's with no grade id, or one the assignment does not have, becomes a plain cell.
# Then the student's HTML is neutralised (markdown, raw cells, outputs, metadata): formgrader renders the
# autograded notebook on this server's origin, logged in as you, and sanitizes nothing itself.
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "grader.lms.nbgrader.Deduplicate",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "grader.lms.nbgrader.RestoreCells",
    "nbgrader.preprocessors.CheckCellMetadata",
    "grader.lms.nbgrader.NeutraliseHtml",
]

# nbgrader 0.9 under SQLAlchemy 2 warns about its own sessions three times per student it autogrades: noise that
# buried the warnings a TA must read (a flag, a late submission, a score taken back).
import warnings  # noqa: E402

from sqlalchemy.exc import SAWarning  # noqa: E402

warnings.filterwarnings("ignore", category=SAWarning, module=r"nbgrader\\.")

# Feedback: the per-tensor page first, the index of grade cells folded under it and naming each tensor,
# long lines wrapped, nothing fetched from the network (grader/lms/nbgrader_templates/).
from grader.lms.nbgrader import feedback_templates  # noqa: E402

c.GenerateFeedback.HTMLExporter.template_name = "backprop_ninja_feedback"
for _key, _paths in feedback_templates().items():
    setattr(c.GenerateFeedback.HTMLExporter, _key, _paths)
# The per-tensor page made again from the gradebook: a TA's manual score and a late penalty show there as in
# nbgrader's own total, one score everywhere.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "grader.lms.nbgrader.GradebookFeedback",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
# Every page written again each time: nbgrader's own skips a student whose notebook autograde has not changed,
# so a score a TA set after feedback was made stayed off the next release (a TA trial).
c.GenerateFeedback.force = True
# formgrader's view of an autograded notebook: the page at its top says the gradebook's score now (a TA's
# manual scores, the late penalty), not the one autograde wrote.
c.HTMLExporter.preprocessors = ["grader.lms.nbgrader.FormgraderScores"]
# release_feedback releases to the students who submitted through the exchange and lists the pages of those
# collected from LMS downloads (nbgrader's own stops at the first of them), to hand back through the LMS.
c.ExchangeFactory.release_feedback = "grader.lms.nbgrader.ReleaseFeedback"
# collect refuses a hand-in another unix user made in a student's name (nbgrader's own takes it, with a warning).
c.ExchangeFactory.collect = "grader.lms.nbgrader.OwnedCollect"

# zip_collect: the files of Canvas, Moodle and Blackboard downloads (and <student>_<notebook>.ipynb), each
# filed as this notebook; the LMS's user id is recorded with the student, for `backprop-ninja export`. Run it
# again after each new download (keep the earlier zips in archive/): only what is new is collected, so
# nbgrader's --force, which stops it re-extracting and re-filing, is on; the collector decides what is filed.
c.ZipCollectApp.collector_plugin = "grader.lms.nbgrader.LmsCollector"
c.LmsCollector.notebook = {notebook!r}
c.ZipCollectApp.force = True
c.ExtractorPlugin.force = True
{shared}'''

# In nbgrader_config.py of a course shared by a group of TAs (course init --group): nbgrader writes its own files
# (gradebook.db, autograded/, feedback/, the copies of names.txt) as the umask says, and a TA's 022 left them
# for no other TA to replace.
SHARED = '''
# A course its staff group shares (course init --group): what nbgrader writes is the group's to replace too, and
# never other users' to read. Every nbgrader command run here reads this file, formgrader included.
os.umask(0o007)
# The course's folder in the exchange is the group's (course init made it so): nbgrader keeps what it makes there
# the group's, so every TA may collect and release feedback.
c.CourseDirectory.groupshared = True
'''
UMASK_LINE = "os.umask(0o007)"


class InitError(Exception):
    """The course directory cannot be written; the message says why."""


def default_course() -> Path:
    """./course.yml when there is one, else the template the package carries."""
    here = Path(COURSE_FILE)
    return here if here.is_file() else material.root() / COURSE_FILE


def material_root(course) -> Path:
    """Where this course's solved notebook, suite and data are: beside its course.yml when they are there
    (a checkout), else the package's own material (a course.yml of the instructor's, anywhere)."""
    return course.root if (course.root / SOLVED).is_file() else material.root()


def _source_notebook(solved, course, kept: frozenset[str] = frozenset()):
    """The solved notebook (a path, or the notebook itself) with every grade cell worth this course's points
    (none: not graded; the grade cells `kept` stay grade cells, worth 0), its first cell installing what
    course.yml's `solutions` says."""
    import nbformat

    points = course.points
    nb = nbformat.read(solved, as_version=4) if isinstance(solved, Path) else solved
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == INSTALL_CELL:
            cell.source = material.install_cell(course.solutions, course.wheels)
        elif cell.cell_type == "code":
            cell.source = material.with_solutions(cell.source, course.solutions)
    by_cell = {**dict.fromkeys(kept, 0.0), **{grade_cell_id(g): p for g, p in points.items()}}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if not meta or not (meta.get("grade") or meta.get("grade_id") in by_cell):
            continue
        if meta["grade_id"] in by_cell:
            meta.update(grade=True, points=by_cell[meta["grade_id"]])
        else:
            meta["grade"] = False
            meta.pop("points", None)
    return nb


def _write_material(course, target: Path, kept: frozenset[str] = frozenset()) -> None:
    """The source notebook with course.yml's points, its data file and the hidden suite, from `course`'s
    material (replacing what an earlier init wrote)."""
    import nbformat

    root = material_root(course)
    variant = variant_of(course.exercise)
    solved = root / SOLVED
    if variant is None and not solved.is_file():
        raise InitError(f"{solved}: the solved notebook is missing (reinstall backprop-ninja)")
    suite = root / course.autotests if root == course.root else root / "autotests"
    if not suite.is_dir():
        raise InitError(f"{suite}: the hidden suite is missing")
    data = None
    if course.data:
        data = next((p for p in (course.root / material.ASSIGNMENT.parent / course.assignment / course.data,
                                 course.root / "source" / course.assignment / course.data,
                                 root / material.ASSIGNMENT / course.data) if p.is_file()), None)
        if data is None:
            raise InitError(f"{course.data}: the data file named in course.yml is missing (looked beside the "
                            f"assignment and in {root / material.ASSIGNMENT})")
    own = own_file(course)
    if variant is not None:  # before anything is written: a variant that cannot be generated leaves no folder
        solved = variant_notebooks(variant, course)[0]
    elif course.exercise.name != DEFAULT:
        solved = generated_notebooks(course)[0]
    source = target / "source" / course.assignment
    source.mkdir(parents=True, exist_ok=True)
    nbformat.write(_source_notebook(solved, course, kept), source / course.notebook)
    if own is not None and own.resolve() != (source / own.name).resolve():
        shutil.copy(own, source / own.name)  # the student's self-check loads it beside the notebook
    _write_prints(course, source, own)
    if data is not None:
        if data.resolve() != (source / course.data).resolve():
            shutil.copy(data, source / course.data)
        licence = data.with_suffix(".LICENSE")
        if licence.is_file() and licence.resolve() != (source / licence.name).resolve():
            shutil.copy(licence, source / licence.name)
    catalogue = target / "autotests" / MISTAKES_FILE
    # A course's own exercise keeps the catalogue its instructor wrote (--update): the package's names the
    # lecture's tensors, none of its own.
    own_catalogue = None
    if variant is None and course.exercise.name != DEFAULT:
        own_catalogue = catalogue.read_text(encoding="utf-8") if catalogue.is_file() else OWN_MISTAKES
    if suite.resolve() != (target / course.autotests).resolve():
        shutil.rmtree(target / "autotests", ignore_errors=True)
        shutil.copytree(suite, target / "autotests", ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    if variant is not None:
        catalogue.write_text(known_mistakes(catalogue.read_text(encoding="utf-8"), course.exercise), encoding="utf-8")
    elif own_catalogue is not None:
        catalogue.write_text(own_catalogue, encoding="utf-8")


def _write_prints(course, source: Path, own: Path | None) -> None:
    """The rule table's slips fingerprinted beside the notebook, for the self-check of students who have
    only backprop-ninja-student (grader.judge.prints)."""
    from grader.lms import notebooks, slip_prints

    spec = course.exercise_spec
    if own is not None:
        spec = f"{source / own.name}:{spec.rpartition(':')[2]}"
    slip_prints.write(source, spec, notebooks.public_settings(course).get("exercise", DEFAULT))


# ---------------------------------------------------------------------------------------------
# An exercise of the course's own

def own_file(course) -> Path | None:
    """The course's own exercise file (course.yml `exercise: file.py:ATTRIBUTE`), None for any other."""
    module = course.exercise_spec.rpartition(":")[0]
    return Path(module) if module.endswith(".py") else None


def generated_notebooks(course):
    """(solved, students') notebooks of an exercise with no notebooks of its own: its prose made from the
    exercise, its references derived from its forward lines."""
    from grader import derive
    from grader.authoring import skeleton
    from grader.lms import notebooks

    try:
        return notebooks.build(course.exercise, Path(course.exercise.name), skeleton.references(course.exercise),
                               course, text=skeleton.prose(course.exercise))
    except (derive.DeriveError, notebooks.ProseError) as exc:
        raise InitError(f"exercise {course.exercise.name}: {exc}") from None


def _own_course_text(text: str, exercise_file: Path, attribute: str, exercise: Exercise) -> str:
    """course.yml's text for a course of its own exercise: the copied file named, its assignment and
    notebook, every grade id worth the exercise's points (one each unless it says), no lecture data."""
    points = dict(exercise.settings.get("points", {})) or dict.fromkeys(exercise.grade_ids, 1)
    for key, value in (("assignment", exercise.assignment), ("notebook", exercise.notebook)):
        text = re.sub(rf"(?m)^{key}:.*$", f"{key}: {value}", text)
    # The lecture's words (its data file, its training check's number, its bias example) are not this
    # exercise's: its data are drawn by its own lines, and a training check is said only where it has one.
    text = _without_setting(text, "data")
    training = exercise.training
    text = _without_setting(text, "training") if training is None else re.sub(
        r"(?m)^(?:#.*\n)*(?=training:)", f"# The training check of {training.grade_id}: this many SGD steps with the "
        "student's gradients,\n# from one seeded init, against the same steps driven by autograd.\n", text, count=1)
    if training is not None and "learning_rate" in exercise.settings:  # a network that needs its own
        text = re.sub(r"(?m)^(\s+learning_rate:).*$", lambda m: f"{m[1]} {exercise.settings['learning_rate']:g}",
                      text, count=1)
    text = text.replace("e.g. db1 = torch.zeros_like(b1)", "e.g. zeros where this loss makes a gradient zero")
    text = re.sub(r"(?m)^exercise:.*\n(?:[ \t]+.*\n)*", "", text)
    block = "points:\n" + "".join(f"  {g}: {v:g}\n" for g, v in points.items())
    text, found = re.subn(r"(?m)^points:.*\n(?:[ \t]+.*\n)*", lambda _: block, text)
    if not found:
        text += block
    return (text.rstrip("\n") + "\n# The exercise this course grades: a file of its own, beside this one "
            f"(course init --exercise).\nexercise: {exercise_file.name}:{attribute}\n")


def _without_setting(text: str, key: str) -> str:
    """course.yml's text without its top-level `key`, its block and the comment lines right above it."""
    return re.sub(rf"(?m)^(?:#.*\n)*{key}:.*\n(?:[ \t]+.*\n)*", "", text, count=1)


# ---------------------------------------------------------------------------------------------
# A variant of the exercise

def variant_of(exercise: Exercise) -> tuple[str, str] | None:
    """(family, variant) for an exercise loaded as `family/variant`, other than a family's own exercise
    (the lecture's network is its family's registered exercise, with its committed notebooks)."""
    family, slash, name = exercise.name.partition("/")
    return (family, name) if slash and family in FAMILIES else None


def variant_notebooks(variant: tuple[str, str], course):
    """(solved, students') notebooks of a variant: its source composed by its family from the lecture's prose
    source and the variant's differences, its reference answers derived from its forward lines by the rule
    table, as for an exercise of the course's own. All of it is in the package: a wheel is enough."""
    from grader.authoring import skeleton
    from grader.lms import notebooks

    composer = importlib.import_module(importlib.import_module(FAMILIES[variant[0]]).NOTEBOOK_SOURCE)
    try:
        return notebooks.build(course.exercise, composer.PROSE, skeleton.references(course.exercise), course,
                               text=composer.source(variant[1]))
    except ValueError as exc:  # the rule table's DeriveError, a ProseError or the family's own source error
        raise InitError(f"{'/'.join(variant)}: {exc}") from None


def _variant(course, text: str, variant: str | None, salt: str) -> tuple[str, str, bool] | None:
    """(family, variant, drawn from the salt) for the new course: --variant's, else course.yml's own
    `exercise:` setting (a `from-salt` one drawn again with the new salt), else None (not a variant)."""
    from grader.course import read_yaml

    if variant is None:
        setting = (read_yaml(text) or {}).get("exercise")
        if not isinstance(setting, dict):
            named = variant_of(course.exercise)
            return None if named is None else (*named, False)
        family, variant = setting.get("name"), setting.get("variant")
    else:
        family = course.exercise.name.partition("/")[0]
    try:
        spec = choice.spec({"name": family, "variant": variant}, salt)
    except choice.ExerciseError as exc:
        raise InitError(str(exc)) from None
    family, name = spec.split("/", 1)
    return family, name, variant == choice.FROM_SALT


def variant_points(points: dict[str, float], lecture: Exercise, exercise: Exercise) -> dict[str, float]:
    """The points of a variant's grade ids, from course.yml's for its exercise's: a grade id both share keeps
    its points, a new one takes those of the first graded answer of the same kind in the same part of the
    family's own exercise (a new atomic gradient is worth what its atomic gradients are, a fused step what
    its fused step in that part is)."""
    by_kind = {}
    for answer in lecture.answers:
        if answer.grade_id in points:
            by_kind.setdefault((answer.kind, answer.part), points[answer.grade_id])
    out = {}
    for grade_id in exercise.grade_ids:
        answer = exercise.by_grade_id.get(grade_id)
        value = points.get(grade_id, by_kind.get((answer.kind, answer.part)) if answer else None)
        if value is not None:
            out[grade_id] = value
    return out


def _with_variant(course, family: str, variant: str):
    spec = f"{family}/{variant}"
    exercise, lecture = load_exercise(spec), load_exercise(family)
    return dataclasses.replace(course, exercise=exercise, exercise_spec=spec,
                               points=variant_points(course.points, lecture, exercise))


def _named_variant(text: str, family: str, variant: str, drawn: bool, points: dict[str, float]) -> str:
    """course.yml's text naming the variant and giving the points of its grade ids (comments elsewhere kept)."""
    why = "drawn from this course's secret_salt by course init" if drawn else "course init --variant"
    setting = (f"# The variant of the exercise this course grades ({why}); `backprop-ninja variants` lists them.\n"
               f"exercise: {{name: {family}, variant: {variant}}}\n")
    text = re.sub(r"(?m)^exercise:.*\n(?:[ \t]+.*\n)*", "", text)
    block = "points:\n" + "".join(f"  {g}: {v:g}\n" for g, v in points.items())
    text, found = re.subn(r"(?m)^points:.*\n(?:[ \t]+.*\n)*", lambda _: block, text)
    if not found:
        text += block
    return text.rstrip("\n") + "\n" + setting


def steps_reached(exercise: Exercise, grade_id: str) -> dict[str, str]:
    """The forward steps whose backward an answer's formula goes through: the steps reading its tensor (an
    atomic gradient), or every step from its tensor to where the fused block ends (its sink, or the loss)."""
    answer = exercise.by_grade_id[grade_id]
    network = exercise.network
    if answer.kind == ATOMIC:
        return {c: network.step[c].code for c in network.consumers(answer.source)}
    order = [step.name for step in network.steps]
    before_end = set(order[:order.index(answer.sink or network.loss) + 1])
    return {name: network.step[name].code for name in network.descendants(answer.source) if name in before_end}


def known_mistakes(text: str, exercise: Exercise) -> str:
    """The hidden suite's catalogue of named mistakes (keyed by grade id) kept for a variant: a grade id's
    entries stay only where the variant's answer goes back through the very steps (same names, same code)
    as the family's own exercise's, so each entry's formula is still the mistake it names; an answer whose
    tensor feeds other steps in the variant, or a renamed one, loses its entries. Works on the text so that
    the file's comments stay."""
    family = exercise.name.partition("/")[0]
    lecture = load_exercise(family)
    blocks = re.split(r"(?m)^(?=[A-Za-z_]\w*:)", text)
    kept = []
    for block in blocks:
        grade_id = block.split(":", 1)[0] if re.match(r"[A-Za-z_]\w*:", block) else None
        if grade_id is None:
            kept.append(block)
        elif grade_id in exercise.by_grade_id and grade_id in lecture.by_grade_id \
                and exercise.by_grade_id[grade_id].kind in (ATOMIC, FUSED) \
                and steps_reached(exercise, grade_id) == steps_reached(lecture, grade_id):
            kept.append(block)
    return "".join(kept)


def init(course, target: Path, *, course_id: str | None = None, exchange: Path | None = None,
         variant: str | None = None, exercise: str | None = None, solutions: str | None = None,
         group: str | None = None) -> list[Path]:
    """Write the course directory; refuse to touch one that already has files (nothing is overwritten).

    `variant` (a variant's name or `from-salt`) makes the course grade that variant of course.yml's
    exercise; course.yml's own `exercise: {name, variant: from-salt}` does the same. Either way the variant
    is drawn with the new course's fresh salt, and its course.yml names it outright (with the points of
    its grade ids), so that the notebook written here and the exercise graded can never drift apart.
    `solutions` (gated or off) replaces course.yml's, in the course.yml written and the notebook alike.
    `group`: the staff's group, which shares the course (see share)."""
    target = Path(target).resolve()
    gid = _group_id(group) if group is not None else None
    if target.exists() and any(target.iterdir()):
        raise InitError(f"{target} is not empty: choose a new folder (nothing there is overwritten), or "
                        "--update a course written by course init")
    if course_id is None and exercise is not None:  # a course of its own exercise: not the lecture's demo id
        course_id = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(exercise.partition(":")[0]).stem).strip("-._") or None
    course_id = course_id or course.course_id
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", course_id):
        raise InitError(f"course id {course_id!r}: use letters, digits, '.', '_' and '-' (nbgrader names "
                        "folders after it)")
    exchange = Path(exchange).resolve() if exchange is not None else target / "exchange"
    salt = secrets.token_hex(16)
    text = course.path.read_text(encoding="utf-8")
    if exercise is not None and variant is not None:
        raise InitError("--exercise and --variant: a variant is of the built-in exercise; give one or the other")
    created = not target.exists()
    # Folders above the course that init makes (/srv/courses for /srv/courses/ml101): the staff's group must
    # pass through them to reach the course (under umask 077 they were the instructor's alone), others need not.
    above = [p for p in target.parents if not p.exists()] if gid is not None else []
    try:
        course, text = _material(course, text, target, exercise, variant, solutions, salt, gid)
    except BaseException:  # a refusal (or a fault) leaves no half-written course behind, nor a folder it made
        if created:
            shutil.rmtree(target, ignore_errors=True)
        elif target.is_dir():  # empty when init began: whatever is in it now, init wrote
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        raise
    text = _setting(text, "secret_salt", salt)
    text = _setting(text, "course_id", course_id)
    text = re.sub(r"(?m)^autotests:.*\n", "", text) + "autotests: autotests\n"
    atomic_write(target / COURSE_FILE, text, mode=0o600)  # the salt: the course's staff only, from the start
    (target / CONFIG_FILE).write_text(
        CONFIG.format(course_id=course_id, course_file=COURSE_FILE, exchange=str(exchange), notebook=course.notebook,
                      shared=SHARED if gid is not None else ""), encoding="utf-8")
    if gid is not None:
        # SQLite makes a database 0644 less the umask: never writable by the group. An empty file, the group's,
        # is one nbgrader fills as a new gradebook, keeping its mode.
        atomic_write(target / "gradebook.db", b"")
        for folder in above:
            os.chown(folder, -1, gid)
            os.chmod(folder, 0o750)
    make_private(target, keep=exchange)
    exchange.mkdir(parents=True, exist_ok=True)
    if gid is not None:
        share_exchange(exchange / course_id, gid)
    return sorted(p for p in target.rglob("*") if p.is_file() and exchange not in p.parents)


def share_exchange(folder: Path, gid: int) -> None:
    """The course's folder in the exchange, made the staff group's (setgid, group-writable) before nbgrader makes
    it its releaser's alone: nbgrader (`c.CourseDirectory.groupshared`, which course init sets for a shared
    course) then makes outbound/, inbound/ and feedback/ in it the group's too, so any TA may collect and
    release feedback, not only the one who released first (another's release_feedback failed: PermissionError
    on feedback/). Students keep what nbgrader gives them: reading outbound/, writing inbound/. A folder there
    already, not the caller's, is left as it is."""
    try:
        folder.mkdir(mode=0o755)
    except FileExistsError:
        if folder.stat().st_uid != os.geteuid():
            return
    os.chown(folder, -1, gid)
    folder.chmod(0o2775)


def _group_id(group: str) -> int:
    """The id of `group`, which the user must be in (only a member may give it a folder)."""
    import grp

    try:
        entry = grp.getgrnam(group)
    except KeyError:
        raise InitError(f"--group {group}: no such group (an administrator makes it: groupadd {group}, then "
                        f"usermod -aG {group} for each TA and the instructor)") from None
    if entry.gr_gid not in os.getgroups() and entry.gr_gid != os.getegid() and os.geteuid() != 0:
        raise InitError(f"--group {group}: you are not in it (id -Gn lists your groups; log in again after "
                        "being added)")
    return entry.gr_gid


def _material(course, text: str, target: Path, exercise: str | None, variant: str | None, solutions: str | None,
              salt: str, gid: int | None = None):
    """The course (and course.yml's text) init writes, its material written into `target`."""
    if exercise is not None:
        course, text = _own_exercise(course, text, exercise, target)
    chosen = None if exercise is not None else _variant(course, text, variant, salt)
    if chosen is not None:
        course = _with_variant(course, *chosen[:2])
        text = _named_variant(text, *chosen, course.points)
    if solutions is not None:
        course = dataclasses.replace(course, solutions=solutions)
        text = _setting(text, "solutions", solutions)
    # Private before anything is in it: the solved notebook and the salt are never readable by others.
    private_dir(target)
    os.chmod(target, private_mode(target.parent, directory=True))
    if gid is not None:
        # The staff's group owns it, setgid: every folder and file made in it is the group's, with its group
        # bits (grader.outputs.files.private_mode), and never anything for other users.
        os.chown(target, -1, gid)
        os.chmod(target, 0o2770)
    _write_material(course, target)
    return course, text


def make_private(target: Path, keep: Path | None = None) -> list[Path]:
    """Everything under the course folder `target` (not the folder itself, whose mode init set and a
    TA's group may have changed since) made its owner's alone, with the group bits of a setgid folder
    (grader.outputs.files.private_mode); `keep` (an exchange inside the course) is left to nbgrader. Returns what
    belongs to another user and so could not be changed (a folder an administrator or a TA made there):
    named to the instructor, never a crash half-way through."""
    foreign = []

    def chmod(path: Path, mode: int) -> None:
        try:
            os.chmod(path, mode)
        except PermissionError:
            foreign.append(path)

    for folder, dirs, files in os.walk(target):
        here = Path(folder)
        dirs[:] = [d for d in dirs if here / d != keep]
        for name in dirs:
            if not (here / name).is_symlink():
                chmod(here / name, private_mode(here, directory=True))
        for name in files:
            if not (here / name).is_symlink():
                chmod(here / name, private_mode(here))
    return foreign


def _setting(text: str, key: str, value: str) -> str:
    """course.yml's text with its top-level `key` set to `value` (added when missing); comments kept."""
    line = f"{key}: {value}"
    text, found = re.subn(rf"(?m)^{key}:.*$", lambda _: line, text, count=1)
    return text if found else text.rstrip("\n") + f"\n{line}\n"


def _own_exercise(course, text: str, spec: str, target: Path):
    """The course for FILE[:ATTRIBUTE] (`--exercise`), checked before anything is written, with the
    course.yml text that names its copy in `target`."""
    import dataclasses

    from grader.course import CourseError
    from grader.course import load as load_course

    path, _, attribute = spec.partition(":")
    path, attribute = Path(path), attribute or "EXERCISE"
    if path.suffix != ".py" or not path.is_file():
        raise InitError(f"--exercise {spec}: give the path of an exercise file, FILE.py[:ATTRIBUTE]")
    try:
        value = load_exercise(f"{path.resolve()}:{attribute}")
    except Exception as exc:  # noqa: BLE001 - the instructor's file: its fault in one line
        raise InitError(str(exc)) from None
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, target / path.name)
    text = _own_course_text(text, path, attribute, value)
    staged = target / ".course.yml.init"
    staged.write_text(text, encoding="utf-8")
    try:
        loaded = load_course(staged)
    except CourseError as exc:
        raise InitError(str(exc)) from None
    finally:
        staged.unlink()
    return dataclasses.replace(loaded, path=course.path), text


def update(target: Path, log=print, exercise: str | None = None) -> list[str]:
    """Bring a course written by init back in line with its own course.yml: the source notebook's grade
    cells, its data and the hidden suite rewritten, then (once generate_assignment has run) nbgrader's
    generate_assignment run again, so the gradebook holds course.yml's points. `exercise` (FILE or
    FILE:ATTRIBUTE) first replaces the course's copy of its own exercise file, once it loads. Returns what
    changed."""
    from grader.course import CourseError, load

    target = Path(target).resolve()
    if not (target / CONFIG_FILE).is_file():
        raise InitError(f"{target}: no {CONFIG_FILE} here: --update takes a folder written by course init")
    replaced = [_replace_exercise(target, exercise)] if exercise else []
    replaced += _pin_root(target)
    try:
        course = load(target / COURSE_FILE)
    except CourseError as exc:
        raise InitError(str(exc)) from None
    kept = _graded_cells(target, course)
    _write_material(course, target, kept)
    foreign = make_private(target, keep=exchange_of(target))
    own = own_file(course)
    done = [*replaced, *([f"the exercise from {own}"] if own else []),
            f"source/{course.assignment}/{course.notebook}: grade cells worth course.yml's points "
            f"({len(course.points)} grade ids, {course.max_score:g} points)", "autotests/: the hidden suite"]
    if foreign:
        shown = ", ".join(str(p.relative_to(target)) for p in foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        done.append(f"{len(foreign)} path(s) left as they are, another user's: {shown} "
                    "(run `backprop-ninja course check` to see who may read them)")
    if (target / "gradebook.db").is_file():
        _generate(target, course.assignment)
        done.append("gradebook.db and release/: nbgrader generate_assignment --force ran again")
    return done


def _pin_root(target: Path) -> list[str]:
    """A course made before course init pinned nbgrader's course folder to the course's own gets the line:
    without it, nbgrader run inside this course works on the course the caller's formgrader names."""
    config = target / CONFIG_FILE
    text = config.read_text(encoding="utf-8")
    if re.search(r"(?m)^c\.CourseDirectory\.root\s*=", text):
        return []
    block = CONFIG[CONFIG.index("\n# This folder is the course"):CONFIG.index("\n# Where release_assignment")]
    head = "" if re.search(r"(?m)^import os$", text) else "\nimport os"
    found = re.search(r"(?m)^c\.CourseDirectory\.course_id = .*$", text)
    at = found.end() if found else len(text.rstrip("\n"))
    atomic_write(config, text[:at] + head + "\n" + block + text[at:], mode=config.stat().st_mode & 0o7777)
    return [f"{CONFIG_FILE}: nbgrader's course folder pinned to this one (c.CourseDirectory.root)"]


def _replace_exercise(target: Path, exercise: str) -> str:
    """Copy FILE[:ATTRIBUTE] over the course's own exercise file, once it loads (a file that does not is
    said, and the course keeps its copy); the line that says so. Run before the course is loaded, so that
    this process reads the new copy."""
    from grader.course import read_yaml
    from grader.exercise import ExerciseError

    setting = str((read_yaml((target / COURSE_FILE).read_text(encoding="utf-8")) or {}).get("exercise") or DEFAULT)
    module, _, attribute = setting.rpartition(":")
    if not module.endswith(".py"):
        raise InitError(f"--exercise: {target / COURSE_FILE} grades {setting}, not an exercise file of its own: "
                        "make a course of your file with `course init DIRECTORY --exercise FILE`")
    source, _, given = exercise.partition(":")
    if given and given != attribute:
        raise InitError(f"--exercise {exercise}: the course reads {attribute} from its file (course.yml `exercise: "
                        f"{setting}`): give {source}:{attribute}, or edit course.yml")
    try:
        load_exercise(f"{Path(source).resolve()}:{attribute}")
    except (ExerciseError, OSError) as exc:
        raise InitError(f"--exercise {exercise}: {exc}; the course keeps its copy, {target / module}") from None
    shutil.copyfile(source, target / module)
    return f"{module}: replaced by {source}"


def exchange_of(target: Path) -> Path | None:
    """The exchange a course's nbgrader_config.py names as course init wrote it (None: no such line)."""
    config = Path(target) / CONFIG_FILE
    found = re.search(r"(?m)^c\.Exchange\.root = (.+)$", config.read_text(encoding="utf-8")) \
        if config.is_file() else None
    try:
        return Path(ast.literal_eval(found.group(1))) if found else None
    except (ValueError, SyntaxError):
        return None


def _graded_cells(target: Path, course) -> frozenset[str]:
    """The grade cells a gradebook with submissions already holds, which must stay (nbgrader refuses to add
    or remove cells of a notebook that has submissions): a grade id dropped from course.yml stays worth 0,
    one added is refused here."""
    if not (target / "gradebook.db").is_file():
        return frozenset()
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{target / 'gradebook.db'}") as gb:
        try:
            notebook = gb.find_notebook(Path(course.notebook).stem, course.assignment)
        except MissingEntry:
            return frozenset()
        if not notebook.submissions:
            return frozenset()
        recorded = frozenset(c.name for c in notebook.grade_cells)
    added = sorted({grade_cell_id(g) for g in course.points} - recorded)
    if added:
        raise InitError(f"{', '.join(added)}: nbgrader cannot add grade cells once there are submissions; grade "
                        "these in a new assignment, or remove them from course.yml's points")
    return recorded


def _generate(target: Path, assignment: str) -> None:
    """nbgrader's generate_assignment --force, in the course directory (its config has relative paths)."""
    import logging

    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config, PyFileConfigLoader

    here = Path.cwd()
    os.chdir(target)
    try:
        config = PyFileConfigLoader(CONFIG_FILE, path=str(target)).load_config()
        config.merge(Config({"CourseDirectory": {"root": str(target)}}))
        api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        api.log.setLevel(logging.ERROR)
        outcome = api.generate_assignment(assignment, force=True)
    finally:
        os.chdir(here)
    if not outcome.get("success"):
        raise InitError(f"nbgrader generate_assignment failed: {' '.join(str(outcome.get('error')).split())[-500:]}")


# The courses the caller made or named (course init, course formgrader), one folder a line, in their own Jupyter
# configuration: what `solution` run in a folder takes as that folder's course, as direnv runs a folder's .envrc
# only once its user allowed that folder. A course.yml anywhere else may be a student's (a submission's folder,
# an LMS download unpacked), and the exercise it names would run with the caller's rights.
OWN_COURSES = "backprop_ninja_courses.txt"


def _own_courses_file() -> Path:
    from jupyter_core.paths import jupyter_config_dir

    return Path(jupyter_config_dir()) / OWN_COURSES


def own_courses() -> set[Path]:
    """The course folders the caller made or named, as recorded (none where the record cannot be read)."""
    try:
        rows = _own_courses_file().read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return set()
    return {Path(row) for row in rows if row.startswith("/")}


def remember(directory: Path) -> None:
    """`directory` recorded as a course of the caller's; a record that cannot be written is no course lost,
    only `solution` there needs --course."""
    folder = Path(directory).resolve()
    if folder in own_courses():
        return
    path = _own_courses_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as record:
            record.write(f"{folder}\n")
    except OSError:
        pass


FORMGRADER_MARK = "# formgrader's course, as `backprop-ninja course formgrader` wrote it:"
SUBCONFIG = "load_subconfig("  # traitlets' own, in a Python configuration file; a file gone since is passed over


class FormgraderConfigError(ValueError):
    """The caller's nbgrader_config.py names another course already; the message says what to do."""


def formgrader_course() -> Path | None:
    """The course `course formgrader` (or `course init`) last named in the caller's own nbgrader_config.py, when
    it is still a course: `course init` names its new course there only where that takes none from the caller."""
    from jupyter_core.paths import jupyter_config_dir

    path = Path(jupyter_config_dir()) / "nbgrader_config.py"
    rows = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    named = [row.partition("=")[2] for i, row in enumerate(rows[1:]) if rows[i] == FORMGRADER_MARK]
    root = Path(ast.literal_eval(named[-1].strip())) if named else None
    return root if root is not None and (root / CONFIG_FILE).is_file() else None


def formgrader_config(directory: Path) -> list[str]:
    """The caller's own Jupyter nbgrader_config.py (JUPYTER_CONFIG_DIR, else ~/.jupyter) made to name the course
    in `directory` as formgrader's, and to read the course's own configuration after it: a server a hub starts
    runs in the home folder and reads no course folder's configuration, so formgrader listed nothing until
    `c.CourseDirectory.root` was set by hand, and took its exchange and course id from the system's
    /etc/jupyter (another course's, on one hub). Returns what to tell the caller; FormgraderConfigError where a
    line of the caller's own names a course already."""
    from jupyter_core.paths import jupyter_config_dir

    root = Path(os.path.abspath(directory))  # as given: a link in the home to a course elsewhere stays the link
    line = f"c.CourseDirectory.root = {str(root)!r}"
    path = Path(jupyter_config_dir()) / "nbgrader_config.py"
    rows = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    ours = {i + d for i, row in enumerate(rows) if row == FORMGRADER_MARK for d in (0, 1, 2)
            if d < 2 or rows[i + d:i + d + 1] and rows[i + d].startswith(SUBCONFIG)}
    kept = [row for i, row in enumerate(rows) if i not in ours]
    if any("CourseDirectory.root" in row and not row.lstrip().startswith("#") for row in kept):
        raise FormgraderConfigError(f"{path} sets c.CourseDirectory.root already: change that line to {line}")
    path.parent.mkdir(parents=True, exist_ok=True)
    course = f"{SUBCONFIG}{str(root / CONFIG_FILE)!r})  # the course's exchange, course id and preprocessors"
    path.write_text("\n".join([*kept, FORMGRADER_MARK, line, course]) + "\n", encoding="utf-8")
    said = [f"{path}: formgrader's course is {root}"]
    home = Path.home()
    if home not in root.parents:
        said.append(f"warning: {root} is not inside {home}, where a hub starts your server, and formgrader serves "
                    f"only a course inside it: link it there (ln -s {root} {home / root.name}), then run "
                    f"backprop-ninja course formgrader {home / root.name}")
    return said
