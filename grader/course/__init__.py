"""course.yml: the one place where a course's settings are read and validated.

Every key is checked on load, so a typo fails at once with the key's dotted path instead of
silently falling back to a default in the middle of grading a class.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader import exercise as exercises
from grader.course import choice
from grader.limits import REQUIRED_BY_DEFAULT, WALLS, Limits

# gated: the released notebook installs the whole package, whose `solution` command shows a reference once
# the student's cell holds an attempt (self-learners); off: only the self-check, no reference anywhere.
SOLUTIONS = ("gated", "off")
# The lecture's notebook: the name the self-check takes for the one a course collects where its settings name none.
LECTURE_NOTEBOOK = "backprop_ninja.ipynb"


class CourseError(ValueError):
    """A course.yml that cannot be used; the message names the file and the offending key."""


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 1e-5
    atol: float = 1e-8


@dataclass(frozen=True)
class Policy:
    chain_only_credit: float = 0.5
    squeezable_shape_credit: float = 0.5


@dataclass(frozen=True)
class TrainingCheck:
    """The training check: this many SGD steps from one seeded init, student's backward vs autograd."""

    trajectory_steps: int = 50
    learning_rate: float = 0.1


@dataclass(frozen=True)
class Extra:
    """Names a course adds to the static check's allowlist (grader/sandbox/static_check.py)."""

    torch: tuple[str, ...] = ()
    functional: tuple[str, ...] = ()
    builtins: tuple[str, ...] = ()


@dataclass(frozen=True)
class Feedback:
    """What a wrong answer's feedback may say. `named` (default) names the mistake without the right
    expression; `formula` may show it (for practice without resubmission); `none` gives the verdict only."""

    hints: str = "named"


HINTS = ("named", "formula", "none")


def _feedback(where: str, raw) -> Feedback:
    if raw is None:
        return Feedback()
    if not isinstance(raw, dict) or set(raw) - {"hints"}:
        raise CourseError(f"{where}: expected a mapping with the key hints")
    return Feedback(_choice(f"{where}.hints", raw.get("hints", "named"), HINTS))


def _choice(where: str, value, choices: tuple[str, ...]) -> str:
    """One of `choices`, or an error that says what course.yml's text was read as (YAML's true, false
    and null are not words)."""
    if value in choices:
        return value
    read = {True: "the boolean true", False: "the boolean false", None: "null (nothing)"}.get(value) \
        if value is None or isinstance(value, bool) else repr(value)
    raise CourseError(f"{where}: expected one of {', '.join(choices)}, got {read}")


@dataclass(frozen=True)
class Course:
    path: Path
    course_id: str
    assignment: str
    notebook: str
    secret_salt: str
    points: dict[str, float]
    data: str | None = None
    solutions: str = "gated"
    # Where the notebook's first cell installs the course's package from, never from a package index (a folder on
    # a shared server, or a web page of links: pip's --find-links); None: only from a clone it sits in.
    wheels: str | None = None
    configurations: int = 4
    autotests: str = "autotests"
    tolerance: Tolerance = field(default_factory=Tolerance)
    policy: Policy = field(default_factory=Policy)
    limits: Limits = field(default_factory=Limits)  # with the walls course.yml's sandbox.require lists
    allow: Extra = field(default_factory=Extra)
    training: TrainingCheck = field(default_factory=TrainingCheck)
    feedback: Feedback = field(default_factory=Feedback)
    # What the course grades (course.yml `exercise:`, a registered name or module:attribute); a course.yml
    # without the key is the makemore MLP, as every course was before exercises could be chosen.
    exercise: exercises.Exercise = field(default_factory=exercises.load, compare=False, repr=False)
    # Its spec string as course.yml gives it: what a configuration carries to name the exercise (a value
    # holding functions crosses no process boundary).
    exercise_spec: str = exercises.DEFAULT

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def autotests_dir(self) -> Path:
        return self.root / self.autotests

    @property
    def max_score(self) -> float:
        return sum(self.points.values())


def _number(where: str, value, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CourseError(f"{where}: expected a number, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise CourseError(f"{where}: must be {bound}, got {value!r}")
    return float(value)


def _text(where: str, value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CourseError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _section(where: str, raw, cls, bounds: dict[str, tuple[float, float | None]], fields: dict[str, str] | None = None):
    """`raw` checked against `bounds` (course.yml key -> range) and made into a `cls`, whose field for a
    key is the key itself or its name in `fields`."""
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise CourseError(f"{where}: expected a mapping, got {raw!r}")
    unknown = sorted(set(raw) - set(bounds))
    if unknown:
        raise CourseError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(bounds)})")
    values = {}
    for k, v in raw.items():
        number = _number(f"{where}.{k}", v, *bounds[k])
        name = (fields or {}).get(k, k)
        if isinstance(getattr(cls, name), int):
            if number != int(number):
                raise CourseError(f"{where}.{k}: expected a whole number, got {v!r}")
            number = int(number)
        values[name] = number
    return cls(**values)


def _training(where: str, raw, exercise) -> TrainingCheck:
    """The training check's settings; a learning rate course.yml leaves out is the exercise's own, where its
    file sets one (a network that diverges at the default), as its course's notebook trains with it."""
    training = _section(where, raw, TrainingCheck, {"trajectory_steps": (1, 1000), "learning_rate": (1e-6, 10.0)})
    own = exercise.settings.get("learning_rate")
    return replace(training, learning_rate=own) if own is not None and "learning_rate" not in (raw or {}) else training


def _allow(where: str, raw) -> Extra:
    if raw is None:
        return Extra()
    if not isinstance(raw, dict):
        raise CourseError(f"{where}: expected a mapping with torch, functional and builtins lists")
    unknown = sorted(set(raw) - {"torch", "functional", "builtins"})
    if unknown:
        raise CourseError(f"{where}.{unknown[0]}: unknown key (known: torch, functional, builtins)")
    lists = {}
    for key, names in raw.items():
        if not isinstance(names, list) or not all(isinstance(x, str) and x.isidentifier() and not x.startswith("_")
                                                   for x in names):
            raise CourseError(f"{where}.{key}: expected a list of public names, got {names!r}")
        lists[key] = tuple(names)
    return Extra(**lists)


def _walls(where: str, raw) -> tuple[str, ...]:
    """course.yml's sandbox.require: the walls (grader.limits.WALLS) without which grading
    refuses to run student code."""
    if raw is None:
        return REQUIRED_BY_DEFAULT
    if not isinstance(raw, dict):
        raise CourseError(f"{where}: expected a mapping with a require list")
    unknown = sorted(set(raw) - {"require"})
    if unknown:
        raise CourseError(f"{where}.{unknown[0]}: unknown key (known: require)")
    walls = raw.get("require", list(REQUIRED_BY_DEFAULT))
    if not isinstance(walls, list) or not all(isinstance(w, str) for w in walls):
        raise CourseError(f"{where}.require: expected a list of walls ({', '.join(WALLS)}), got {walls!r}")
    for wall in walls:
        if wall not in WALLS:
            raise CourseError(f"{where}.require: {wall}: unknown wall (known: {', '.join(WALLS)})")
    return tuple(dict.fromkeys(walls))


# course.yml's limits, with their bounds; the times carry their unit in course.yml only.
LIMITS = {"timeout_seconds": (1.0, 86400.0), "cell_timeout_seconds": (0.1, 3600.0), "memory_mb": (1024, 1 << 20),
          "file_size_mb": (1, 1 << 20), "processes": (16, 1 << 16), "analysis_cpu_seconds": (0.1, 3600.0)}
LIMIT_FIELDS = {"timeout_seconds": "timeout", "cell_timeout_seconds": "cell_timeout",
                "analysis_cpu_seconds": "analysis_cpu"}


def parse(raw, path: Path) -> Course:
    where = str(path)
    if not isinstance(raw, dict):
        raise CourseError(f"{where}: expected a mapping of settings at the top level")
    fields = {"course_id", "assignment", "notebook", "secret_salt", "points", "data", "solutions", "configurations",
              "autotests", "tolerance", "policy", "limits", "allow", "training", "exercise4", "sandbox", "feedback",
              "exercise", "wheels"}
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise CourseError(f"{where}: {unknown[0]}: unknown key (known: {', '.join(sorted(fields))})")
    # `exercise4` is the training check's name from when the lecture's network was the only exercise.
    if "training" in raw and "exercise4" in raw:
        raise CourseError(f"{where}: training and exercise4: give one (exercise4 is training's older name)")
    training_key = "exercise4" if "exercise4" in raw else "training"
    for key in ("course_id", "assignment", "notebook", "secret_salt", "points"):
        if key not in raw:
            raise CourseError(f"{where}: {key}: missing")
    salt = _text(f"{where}: secret_salt", raw["secret_salt"])
    try:  # a name, or {name, variant}: a variant named or drawn from the salt
        spec = choice.spec(raw.get("exercise", exercises.DEFAULT), salt)
    except exercises.ExerciseError as exc:
        raise CourseError(f"{where}: exercise: {exc}") from None
    module, _, attribute = spec.rpartition(":")
    if module.endswith(".py"):  # a file beside course.yml
        spec = f"{(path.parent / module).resolve()}:{attribute}"
    try:
        exercise = exercises.load(spec)
    except exercises.ExerciseError as exc:
        raise CourseError(f"{where}: exercise: {exc}") from None
    points = raw["points"]
    if not isinstance(points, dict) or not points:
        raise CourseError(f"{where}: points: expected a mapping of grade id to points")
    for grade_id, value in points.items():
        if grade_id not in exercise.grade_ids:
            raise CourseError(f"{where}: points.{grade_id}: unknown grade id")
        _number(f"{where}: points.{grade_id}", value, 0)
    data = raw.get("data")
    if data is not None:
        _text(f"{where}: data", data)
    solutions = _choice(f"{where}: solutions", raw.get("solutions", "gated"), SOLUTIONS)
    wheels = raw.get("wheels")
    if wheels is not None:
        _text(f"{where}: wheels", wheels)
        if "\n" in wheels or wheels != wheels.strip():
            raise CourseError(f"{where}: wheels: expected one folder or address on one line, got {wheels!r}")
    configurations = raw.get("configurations", 4)
    if isinstance(configurations, bool) or not isinstance(configurations, int) or not 4 <= configurations <= 16:
        raise CourseError(f"{where}: configurations: expected a whole number from 4 to 16, got {configurations!r}")
    return Course(
        path=path,
        course_id=_text(f"{where}: course_id", raw["course_id"]),
        assignment=_text(f"{where}: assignment", raw["assignment"]),
        notebook=_text(f"{where}: notebook", raw["notebook"]),
        secret_salt=salt,
        points={g: float(v) for g, v in points.items()},
        data=data,
        solutions=solutions,
        wheels=wheels,
        configurations=configurations,
        autotests=_text(f"{where}: autotests", raw.get("autotests", "autotests")),
        tolerance=_section(f"{where}: tolerance", raw.get("tolerance"), Tolerance,
                           {"rtol": (0.0, 1.0), "atol": (0.0, 1.0)}),
        policy=_section(f"{where}: policy", raw.get("policy"), Policy,
                        {"chain_only_credit": (0.0, 1.0), "squeezable_shape_credit": (0.0, 1.0)}),
        limits=replace(_section(f"{where}: limits", raw.get("limits"), Limits, LIMITS, LIMIT_FIELDS),
                       require=_walls(f"{where}: sandbox", raw.get("sandbox"))),
        allow=_allow(f"{where}: allow", raw.get("allow")),
        training=_training(f"{where}: {training_key}", raw.get(training_key), exercise),
        feedback=_feedback(f"{where}: feedback", raw.get("feedback")),
        exercise=exercise,
        exercise_spec=spec,
    )


def read_yaml(text: str):
    """course.yml's text as data, with YAML 1.2's booleans: only true and false (any case). PyYAML reads
    YAML 1.1, where off, on, yes, no, y and n are booleans too, so the README's own `solutions: off`
    arrived as False; here those are the words they look like."""
    import yaml

    return yaml.load(text, Loader=_loader())  # noqa: S506 (a SafeLoader, with fewer booleans)


@functools.cache
def _loader():
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    boolean = "tag:yaml.org,2002:bool"
    Loader.yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in resolvers if tag != boolean]
                                      for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Loader.add_implicit_resolver(boolean, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    return Loader


def _read(path: Path):
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CourseError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CourseError(f"{path}: cannot read: {exc}") from None
    try:
        return read_yaml(text)
    except yaml.YAMLError as exc:
        raise CourseError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None


def load(path: str | Path) -> Course:
    path = Path(path).resolve()
    return parse(_read(path), path)


def assignment(path: str | Path) -> str:
    """The course's assignment name alone, for what needs no more of it (an export's column): loading the
    whole course loads its exercise, whose definition imports torch and, for a file of its own, runs it."""
    path = Path(path).resolve()
    raw = _read(path)
    if not isinstance(raw, dict):
        raise CourseError(f"{path}: expected a mapping of settings at the top level")
    if "assignment" not in raw:
        raise CourseError(f"{path}: assignment: missing")
    return _text(f"{path}: assignment", raw["assignment"])
