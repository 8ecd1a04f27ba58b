"""course.yml: the repository's file loads, and every bad file fails at once naming its key."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from grader.course import Course, CourseError, load
from grader.exercises.makemore_mlp import EXERCISE
from helpers.paths import COURSE_FILE

VALID = {
    "course_id": "test-course",
    "assignment": "backprop_ninja",
    "notebook": "backprop_ninja.ipynb",
    "secret_salt": "a-test-salt",
    "configurations": 5,
    "tolerance": {"rtol": 1.0e-5, "atol": 1.0e-8},
    "policy": {"chain_only_credit": 0.5, "squeezable_shape_credit": 0.25},
    "limits": {"timeout_seconds": 60},
    "points": {"dlogprobs": 1, "dC": 2, "ex2_dlogits": 3, "ex3_dhprebn": 4.5, "ex4_dW1": 2},
}


def write(tmp_path, raw) -> Path:
    path = tmp_path / "course.yml"
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def changed(edit):
    raw = copy.deepcopy(VALID)
    edit(raw)
    return raw


def test_the_repository_course_loads():
    course = load(COURSE_FILE)
    assert isinstance(course, Course)
    assert course.points
    assert set(course.points) <= set(EXERCISE.grade_ids)
    assert all(isinstance(v, float) and v >= 0 for v in course.points.values())
    assert course.max_score == sum(course.points.values()) > 0
    assert 4 <= course.configurations <= 16
    assert course.secret_salt.strip()
    assert 0 < course.tolerance.rtol < 1 and 0 < course.tolerance.atol < 1
    assert course.path == COURSE_FILE
    assert course.root == COURSE_FILE.parent


def test_grade_ids_are_every_answer_and_every_ex4_parameter():
    expected = set(EXERCISE.atomic) | {"ex2_dlogits", "ex3_dhprebn", "ex4_training"} | \
        {"ex4_d" + p for p in EXERCISE.network.parameters}
    assert set(EXERCISE.grade_ids) == expected
    assert len(EXERCISE.grade_ids) == len(expected) == 26 + 2 + 7 + 1


def test_a_valid_file_loads_with_its_values(tmp_path):
    course = load(write(tmp_path, VALID))
    assert course.course_id == "test-course"
    assert course.configurations == 5
    assert course.policy.squeezable_shape_credit == 0.25
    assert course.limits.timeout == 60.0
    assert course.points["ex3_dhprebn"] == 4.5
    assert course.max_score == 12.5


def test_the_limits_and_required_walls_are_the_sandboxs_own_value(tmp_path):
    """course.yml's limits (times with their unit) and sandbox.require fill the one Limits the sandbox
    enforces; the course reader loads no wall itself (the student package ships without them)."""
    from grader.limits import REQUIRED_BY_DEFAULT, Limits

    raw = changed(lambda r: r.update(limits={"timeout_seconds": 60, "cell_timeout_seconds": 2.5, "processes": 32},
                                     sandbox={"require": ["seccomp", "landlock", "seccomp"]}))
    course = load(write(tmp_path, raw))
    assert course.limits == Limits(timeout=60.0, cell_timeout=2.5, processes=32, require=("seccomp", "landlock"))
    assert isinstance(course.limits.processes, int)
    assert load(write(tmp_path, VALID)).limits.require == REQUIRED_BY_DEFAULT


def test_a_minimal_file_gets_the_defaults(tmp_path):
    raw = {k: VALID[k] for k in ("course_id", "assignment", "notebook", "secret_salt", "points")}
    course = load(write(tmp_path, raw))
    assert course.configurations == 4
    assert course.data is None
    assert course.solutions == "gated"
    assert course.autotests == "autotests"
    assert (course.tolerance.rtol, course.tolerance.atol) == (1e-5, 1e-8)
    assert course.autotests_dir == tmp_path.resolve() / "autotests"
    assert course.feedback.hints == "named"


@pytest.mark.parametrize("hints", ["named", "formula", "none"])
def test_feedback_hints(tmp_path, hints):
    assert load(write(tmp_path, {**VALID, "feedback": {"hints": hints}})).feedback.hints == hints


def _del(key):
    return lambda raw: raw.pop(key)


def _set(*path, value):
    def edit(raw):
        node = raw
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


BAD = {
    # case: (edit of the valid file, text the message must contain)
    "unknown top-level key": (_set("grading_mode", value="strict"), "grading_mode"),
    "misspelt top-level key": (_set("tolerence", value={"rtol": 1e-3}), "tolerence"),
    "unknown grade id": (_set("points", "dbogus", value=1), "points.dbogus"),
    "ex4 grade id without d": (_set("points", "ex4_W1", value=1), "points.ex4_W1"),
    "negative points": (_set("points", "dC", value=-1), "points.dC"),
    "non-numeric points": (_set("points", "dC", value="three"), "points.dC"),
    "boolean points": (_set("points", "dC", value=True), "points.dC"),
    "empty points": (_set("points", value={}), "points"),
    "rtol as a string": (_set("tolerance", "rtol", value="1e-5"), "tolerance.rtol"),
    "unknown tolerance key": (_set("tolerance", "reltol", value=1e-5), "tolerance.reltol"),
    "unknown policy key": (_set("policy", "late_penalty", value=0.1), "policy.late_penalty"),
    "policy credit above 1": (_set("policy", "chain_only_credit", value=2), "policy.chain_only_credit"),
    "unknown limits key": (_set("limits", "memory", value=2), "limits.memory"),
    "limits time without its unit": (_set("limits", "timeout", value=60), "limits.timeout"),
    "unknown wall": (_set("sandbox", value={"require": ["moat"]}), "sandbox.require"),
    "missing secret_salt": (_del("secret_salt"), "secret_salt"),
    "empty secret_salt": (_set("secret_salt", value=""), "secret_salt"),
    "null secret_salt": (_set("secret_salt", value=None), "secret_salt"),
    "missing points": (_del("points"), "points"),
    "configurations 2": (_set("configurations", value=2), "configurations"),
    "configurations 17": (_set("configurations", value=17), "configurations"),
    "configurations as float": (_set("configurations", value=4.5), "configurations"),
    "tolerance not a mapping": (_set("tolerance", value=1e-5), "tolerance"),
    "unknown feedback hints": (_set("feedback", value={"hints": "all"}), "feedback.hints"),
    "unknown feedback key": (_set("feedback", value={"hint": "named"}), "feedback"),
    "solutions neither gated nor off": (_set("solutions", value="hidden"), "solutions"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_file_names_the_offending_key(tmp_path, case):
    edit, key = BAD[case]
    path = write(tmp_path, changed(edit))
    with pytest.raises(CourseError) as info:
        load(path)
    assert key in str(info.value)
    assert str(path.resolve()) in str(info.value)


def test_course_error_is_a_value_error():
    assert issubclass(CourseError, ValueError)


@pytest.mark.parametrize("text, words", [
    ("course_id: [unclosed\n", "not valid YAML"),
    ("course_id: a\n\tassignment: b\n", "not valid YAML"),
    ("- course_id: a\n- assignment: b\n", "mapping"),
    ("just a string\n", "mapping"),
    ("", "mapping"),
])
def test_a_file_that_is_not_a_yaml_mapping(tmp_path, text, words):
    path = write(tmp_path, text)
    with pytest.raises(CourseError) as info:
        load(path)
    assert words in str(info.value)
    assert str(path.resolve()) in str(info.value)


def test_a_missing_file(tmp_path):
    path = tmp_path / "nowhere" / "course.yml"
    with pytest.raises(CourseError) as info:
        load(path)
    assert "no such file" in str(info.value)
    assert str(path.resolve()) in str(info.value)


def test_a_file_that_is_not_text(tmp_path):
    path = tmp_path / "course.yml"
    path.write_bytes(b"course_id: \xff\xfe\x00\x81\n")
    with pytest.raises(CourseError) as info:
        load(path)
    assert str(path.resolve()) in str(info.value)


# ---------------------------------------------------------------------------------------------
# YAML's words: PyYAML reads YAML 1.1, where off, on, yes and no are booleans


@pytest.mark.parametrize("word", ["off", "gated", '"off"', "'off'"])
def test_solutions_off_is_read_as_the_word_it_is(tmp_path, word):
    text = yaml.safe_dump(VALID, sort_keys=False) + f"solutions: {word}\n"
    assert load(write(tmp_path, text)).solutions == word.strip("'\"")


@pytest.mark.parametrize("text, read", [("true", "the boolean true"), ("false", "the boolean false"),
                                        ("", "null (nothing)"), ("on", "'on'"), ("yes", "'yes'")])
def test_a_word_that_is_no_choice_says_what_it_was_read_as(tmp_path, text, read):
    path = write(tmp_path, yaml.safe_dump(VALID, sort_keys=False) + f"solutions: {text}\n")
    with pytest.raises(CourseError) as info:
        load(path)
    assert f"solutions: expected one of gated, off, got {read}" in str(info.value)


def test_the_training_check_is_read_under_its_older_name_too(tmp_path):
    """A course.yml written before any exercise could be the course's keeps grading as it did."""
    base = yaml.safe_dump(VALID, sort_keys=False)
    assert load(write(tmp_path, base + "exercise4: {learning_rate: 0.5}\n")).training.learning_rate == 0.5
    with pytest.raises(CourseError, match="training and exercise4: give one"):
        load(write(tmp_path, base + "exercise4: {learning_rate: 0.5}\ntraining: {learning_rate: 0.5}\n"))


def test_only_true_and_false_are_booleans_elsewhere_too(tmp_path):
    text = yaml.safe_dump(VALID, sort_keys=False) + "feedback: {hints: none}\ntraining: {trajectory_steps: 20}\n"
    course = load(write(tmp_path, text))
    assert course.feedback.hints == "none" and course.training.trajectory_steps == 20
    bad = write(tmp_path, yaml.safe_dump(changed(_set("points", "dC", value=True)), sort_keys=False))
    with pytest.raises(CourseError, match="points.dC: expected a number, got True"):
        load(bad)


@pytest.mark.parametrize("solutions", ["off", "gated"])
def test_course_init_solutions_sets_course_yml_and_the_notebooks_settings(tmp_path, solutions, monkeypatch):
    """Also formgrader's course: `course init` names it in the caller's own Jupyter configuration (on a hub, a
    separate step that could be forgotten), unless that names another course, which the course's own nbgrader
    commands then never take for theirs (`nbgrader` run in one course once worked on the course named there)."""
    import subprocess
    import sys

    import nbformat
    from click.testing import CliRunner

    from grader.cli import main
    from grader.course import material
    from grader.limits import REQUIRED_BY_DEFAULT

    jupyter, other = tmp_path / "jupyter", tmp_path / "other"
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(jupyter))
    if solutions == "gated":  # a TA who grades another course in formgrader already
        other.mkdir()
        (other / "nbgrader_config.py").write_text("c.CourseDirectory.course_id = 'other'\n")
        assert CliRunner().invoke(main, ["course", "formgrader", str(other)]).exit_code == 0
    target = tmp_path / "course"
    done = CliRunner().invoke(main, ["course", "init", str(target), "--course", str(COURSE_FILE),
                                     "--solutions", solutions])
    assert done.exit_code == 0, done.output
    named = (jupyter / "nbgrader_config.py").read_text(encoding="utf-8")
    if solutions == "off":
        assert f"c.CourseDirectory.root = {str(target)!r}" in named, named
        # A TA trial: the path it gave other TAs was outside their homes, where formgrader serves nothing
        assert (f"each other TA runs, once: ln -s {target} ~/{target.name} && backprop-ninja course formgrader "
                f"~/{target.name}") in done.output
        # A TA trial: formgrader, started in the home, took the exchange and course id of another course from
        # the system's configuration; it reads the course's own after naming it (here run twice: one block)
        system = tmp_path / "etc-jupyter"
        system.mkdir()
        (system / "nbgrader_config.py").write_text("c.Exchange.root = '/srv/another'\n"
                                                   "c.CourseDirectory.course_id = 'another'\n")
        assert CliRunner().invoke(main, ["course", "formgrader", str(target)]).exit_code == 0
        assert (jupyter / "nbgrader_config.py").read_text(encoding="utf-8").count("load_subconfig(") == 1
        read = ("import sys; import jupyter_core.paths as p; p.SYSTEM_CONFIG_PATH[:0] = sys.argv[1:]; "  # as /etc's
                "from nbgrader.apps import NbGrader; app = NbGrader(); app.load_config_file(); "
                "print(app.config.Exchange.root, app.config.CourseDirectory.course_id)")
        seen = subprocess.run([sys.executable, "-c", read, str(system)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
        own = subprocess.run([sys.executable, "-c", read], cwd=target, capture_output=True, text=True, timeout=300)
        assert seen.stdout.split() == own.stdout.split() and "another" not in seen.stdout, (seen, own)
    else:
        added = subprocess.run([sys.executable, "-m", "nbgrader", "db", "student", "add", "bob"], cwd=target,
                               capture_output=True, text=True, timeout=300)
        assert added.returncode == 0 and not (other / "gradebook.db").exists(), added.stderr[-2000:]
        assert str(target) not in named and f"so formgrader shows that one, not this; to grade this course in " \
                                              f"formgrader instead: backprop-ninja course formgrader {target}" \
                                              in done.output
    assert f"solutions: {solutions} (" in done.output
    course = load(target / "course.yml")
    assert course.solutions == solutions
    assert (target / "course.yml").read_text(encoding="utf-8").count("\nsolutions:") == 1
    text = (target / "course.yml").read_text(encoding="utf-8")
    assert "backprop-ninja sandbox check" in text and course.limits.require == REQUIRED_BY_DEFAULT
    assert yaml.safe_load(text)["sandbox"] == {"require": list(REQUIRED_BY_DEFAULT)}, "a block to edit, as is"
    nb = nbformat.read(target / "source" / course.assignment / course.notebook, as_version=4)
    settings = [s for s in (material.notebook_settings(c.source) for c in nb.cells if c.cell_type == "code") if s]
    assert len(settings) == 1 and settings[0].get("solutions", "gated") == solutions
    assert material.STUDENT_PACKAGE[solutions] in nb.cells[0].source + "".join(c.source for c in nb.cells[:3])
    assert "--exchange" in done.output  # the default exchange sits in the private course folder: it says so
