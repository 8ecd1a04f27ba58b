"""The commands around a course of the instructor's own exercise (`course init --exercise`): `--update`
rebuilds that exercise's notebook and keeps its own catalogue of named mistakes, and `solution` shows the
exercise's derived answer, never the lecture's, from the course or from the released folder alone."""
from __future__ import annotations

import shutil

import nbformat
import pytest
import yaml
from click.testing import CliRunner
from traitlets.config import PyFileConfigLoader

from grader.cli import main
from grader.course import load
from grader.exercise import load as load_exercise
from grader.lms import course_init
from grader.vocabulary import grade_cell_id
from helpers.paths import ROOT

pytestmark = pytest.mark.slow

EXERCISE = ROOT / "grader" / "exercises" / "gallery" / "rnn.py"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    target = tmp_path_factory.mktemp("own") / "course"
    done = CliRunner().invoke(main, ["course", "init", str(target), "--exercise", str(EXERCISE)])
    assert done.exit_code == 0, (done.output, done.exception)
    return target


def _source(target):
    course = load(target / "course.yml")
    return course, target / "source" / course.assignment


def test_update_rebuilds_the_exercise_s_own_notebook_and_keeps_its_catalogue(made, tmp_path):
    target = tmp_path / "course"
    shutil.copytree(made, target)
    text = (target / "course.yml").read_text(encoding="utf-8")
    (target / "course.yml").write_text(text.replace("  dh3: 1\n", "  dh3: 3\n"), encoding="utf-8")
    catalogue = target / "autotests" / "known_mistakes.yml"
    assert yaml.safe_load(catalogue.read_text(encoding="utf-8")) == {}, "the lecture's mistakes name its tensors"
    mine = "dh3:\n  - name: the tanh's derivative through its input\n    code: dh3 = dlogits @ Wy.T\n"
    catalogue.write_text(mine, encoding="utf-8")
    course, folder = _source(target)
    (folder / course.notebook).write_text("{}", encoding="utf-8")
    # A course made before course init pinned nbgrader's course folder gets the line
    config = target / "nbgrader_config.py"
    config.write_text("".join(row for row in config.read_text(encoding="utf-8").splitlines(keepends=True)
                              if not row.startswith("c.CourseDirectory.root")), encoding="utf-8")
    done = CliRunner().invoke(main, ["course", "init", "--update", str(target)])
    assert done.exit_code == 0, (done.output, done.exception)
    assert "nbgrader's course folder pinned to this one" in done.output
    assert PyFileConfigLoader(config.name, path=str(target)).load_config().CourseDirectory.root == str(target)
    nb = nbformat.read(folder / course.notebook, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert "h3 = torch.tanh(emb[:, 2] @ Wx + h2 @ Wh + bh)" in text and "counts_sum" not in text
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"].get("points") for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    assert points[grade_cell_id("dh3")] == 3 and points[grade_cell_id("dh2")] == 1
    assert catalogue.read_text(encoding="utf-8") == mine, "the instructor's catalogue is kept"
    assert (folder / EXERCISE.name).read_bytes() == EXERCISE.read_bytes()


def test_update_with_exercise_replaces_the_course_s_copy_and_says_which_file_it_read(made, tmp_path):
    """`--update` rebuilt from the course's own copy, ignored the edited file, said "updated", and refused
    `--exercise` with a message that did not name the copy it reads."""
    target = tmp_path / "course"
    shutil.copytree(made, target)
    broken = tmp_path / "broken.py"
    broken.write_text("EXERCISE = (\n", encoding="utf-8")
    done = CliRunner().invoke(main, ["course", "init", "--update", str(target), "--exercise", str(broken)])
    assert done.exit_code == 1 and len(done.output.strip().splitlines()) == 1, done.output
    assert str(target / EXERCISE.name) in done.output and "keeps its copy" in done.output
    assert (target / EXERCISE.name).read_bytes() == EXERCISE.read_bytes()
    edited = tmp_path / "edited.py"
    edited.write_text(EXERCISE.read_text(encoding="utf-8").replace('title="A vanilla RNN', 'title="My RNN'),
                      encoding="utf-8")
    done = CliRunner().invoke(main, ["course", "init", "--update", str(target), "--exercise", str(edited)])
    assert done.exit_code == 0, (done.output, done.exception)
    assert f"{EXERCISE.name}: replaced by {edited}" in done.output
    assert f"the exercise from {target / EXERCISE.name}" in done.output
    assert (target / EXERCISE.name).read_bytes() == edited.read_bytes()
    course, folder = _source(target)
    assert (folder / EXERCISE.name).read_bytes() == edited.read_bytes(), "the copy released beside the notebook"
    assert "My RNN" in (folder / course.notebook).read_text(encoding="utf-8")


def _solution(*args):
    return CliRunner().invoke(main, ["solution", *map(str, args)])


def test_solution_shows_the_course_s_exercise_s_answer(made):
    course, folder = _source(made)
    done = _solution("dh2", "--notebook", folder / course.notebook, "--course", made / "course.yml")
    assert done.exit_code == 0, done.output
    assert "dh2 = (1 - h3 ** 2) * dh3 @ Wh.T" in done.output.replace("((1 - h3 ** 2) * dh3) @", "(1 - h3 ** 2) * dh3 @")


def test_solution_from_the_released_folder_alone_derives_the_exercise_s_answer(made, tmp_path, monkeypatch):
    """A student's folder: the released notebook and the exercise file beside it, no course.yml; the
    lecture's grade id dlogits is the network's own here (Wy, not W2)."""
    course, folder = _source(made)
    student = tmp_path / "student"
    student.mkdir()
    shutil.copy(folder / course.notebook, student / course.notebook)
    shutil.copy(folder / EXERCISE.name, student / EXERCISE.name)
    monkeypatch.chdir(student)
    done = _solution("dh2", "--notebook", course.notebook, "--exercise", f"{EXERCISE.name}:EXERCISE")
    assert done.exit_code == 0, done.output
    assert "derived" in done.output and "Wh.T" in done.output
    (student / EXERCISE.name).unlink()
    done = _solution("dh2", "--notebook", course.notebook, "--exercise", f"{EXERCISE.name}:EXERCISE")
    assert done.exit_code != 0 and "rnn.py" in done.output
    assert len(done.output.strip().splitlines()) == 1


def _hostile_folder(tmp_path):
    """A student's folder holding helper.py, which leaves a file `proof` behind once anything imports it."""
    student = tmp_path / "student"
    student.mkdir()
    proof = tmp_path / "ran"
    (student / "helper.py").write_text(f"open({str(proof)!r}, 'w').close()\nfrom grader.exercises.gallery.rnn "
                                       "import EXERCISE\n", encoding="utf-8")
    return student, proof


def test_solution_never_loads_a_file_the_notebook_names(made, tmp_path, monkeypatch):
    """A TA runs `solution --notebook` on a student's notebook whose course settings were edited to name a
    file beside it: the file is never imported (it would run with the TA's rights); one line says to name
    the exercise instead. A name the package carries still loads."""
    course, folder = _source(made)
    student, proof = _hostile_folder(tmp_path)
    nb = nbformat.read(folder / course.notebook, as_version=4)
    settings = next(c for c in nb.cells if "COURSE = {" in c.source)
    for spec in ("helper.py:EXERCISE", "helper:EXERCISE", "rnn"):
        settings.source = f"COURSE = {{'exercise': {spec!r}, 'solutions': 'gated'}}\n"
        nbformat.write(nb, student / course.notebook)
        monkeypatch.chdir(student)
        monkeypatch.syspath_prepend(str(student))
        done = _solution("dh2", "--notebook", course.notebook, "--force")
        assert not proof.exists(), spec
        if spec == "rnn":
            assert done.exit_code == 0 and "Wh.T" in done.output, done.output
        else:
            assert done.exit_code == 1 and "loads no file a notebook names" in done.output, done.output
            assert len(done.output.strip().splitlines()) == 1


@pytest.mark.parametrize("where", ["download", "submitted", "copied course"])
def test_solution_never_loads_the_course_yml_of_the_folder_it_runs_in(made, tmp_path, monkeypatch, where):
    """A TA runs `solution` in a student's folder, where a course.yml names a file beside it as the exercise: an
    LMS download unpacked, the folder nbgrader's collect made inside the TA's own course (its files the TA's
    now), or a copy of a whole course (its nbgrader_config.py too). Only a course the caller made or named is
    loaded from the folder it runs in, so the file never runs with the TA's rights, with or without --notebook;
    a line on stderr says the course.yml there was not read."""
    course, folder = _source(made)
    student, proof = _hostile_folder(tmp_path)
    if where == "submitted":
        inside = made / "submitted" / "mallory" / course.assignment
        shutil.copytree(student, inside)
        student = inside
    elif where == "copied course":
        copy = tmp_path / "copy"
        shutil.copytree(made, copy, ignore=shutil.ignore_patterns("course.yml"))
        shutil.copy(student / "helper.py", copy)
        student = copy
    (student / "course.yml").write_text((made / "course.yml").read_text(encoding="utf-8").replace(
        f"exercise: {EXERCISE.name}:", "exercise: helper.py:"), encoding="utf-8")
    assert "exercise: helper.py:EXERCISE" in (student / "course.yml").read_text(encoding="utf-8")
    shutil.copy(folder / course.notebook, student / course.notebook)
    monkeypatch.chdir(student)
    monkeypatch.syspath_prepend(str(student))
    try:
        done = _solution("dh2", "--notebook", course.notebook, "--force")
        assert done.exit_code == 1 and "pass --exercise with the course's exercise file" in done.output, done.output
        done = _solution("dlogits", "--force")
        assert done.exit_code == 0 and "./course.yml not read" in done.output, done.output
        assert not proof.exists()
    finally:
        shutil.rmtree(made / "submitted", ignore_errors=True)


def test_solution_in_a_course_the_caller_made_is_that_course_s(made, monkeypatch):
    """The instructor in their own course folder: `solution` without --course takes the course's exercise (it
    showed the lecture's, or refused the exercise's own grade id), as it does in a course the caller named with
    `course formgrader`."""
    monkeypatch.chdir(made)
    done = _solution("dh2", "--force")
    assert done.exit_code == 0 and "Wh.T" in done.output and "not read" not in done.output, done.output


def test_demo_refuses_an_exercise_without_a_simulated_class_in_one_line_and_keeps_out(made, tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "kept.txt").write_text("an earlier demo\n", encoding="utf-8")
    done = CliRunner().invoke(main, ["demo", "--course", str(made / "course.yml"), "--out", str(out)])
    assert done.exit_code == 1 and "exercise rnn declares no simulated class" in done.output
    assert len(done.output.strip().splitlines()) == 1 and (out / "kept.txt").is_file()


@pytest.mark.parametrize("existing", [False, True])
def test_init_that_fails_part_way_leaves_no_course_behind(tmp_path, existing):
    """An exercise that loads but has no rule for a line fails once init has copied it: the folder init
    made is gone, and an empty folder it was given is empty again, so the fixed file can go to the same
    place."""
    mine = tmp_path / "mine.py"
    mine.write_text(EXERCISE.read_text().replace("torch.tanh(emb[:, 0] @ Wx + bh)", "torch.sin(emb[:, 0] @ Wx + bh)"))
    target = tmp_path / "course"
    if existing:
        target.mkdir()
    result = CliRunner().invoke(main, ["course", "init", str(target), "--exercise", str(mine)])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert "no backward rule" in result.output and "sin" in result.output, result.output
    assert (list(target.iterdir()) == []) if existing else not target.exists()
    fixed = shutil.copy(EXERCISE, tmp_path / "fixed.py")  # a name of its own: this process loaded mine.py
    result = CliRunner().invoke(main, ["course", "init", str(target), "--exercise", str(fixed)])
    assert result.exit_code == 0, result.output


def test_a_course_of_its_own_exercise_is_named_after_the_file_not_the_lecture_s_demo(made):
    assert load(made / "course.yml").course_id == "rnn"
    assert "c.CourseDirectory.course_id = 'rnn'" in (made / "nbgrader_config.py").read_text()


def test_the_course_yml_of_its_own_exercise_says_nothing_of_the_lecture(made):
    """No lecture's data file, no exercise 4, no db1: the settings an own exercise has, in its words."""
    text = (made / "course.yml").read_text()
    assert not any(word in text for word in ("names.txt", "exercise 4", "manual_backward", "db1", "\ndata:")), text
    training = load(made / "course.yml").exercise.training
    assert f"# The training check of {training.grade_id}: this many SGD steps" in text and "\ntraining:" in text


def test_an_exercise_without_a_training_check_has_no_training_settings():
    exercise_file = ROOT / "tests" / "exercises" / "gru_gate.py"
    text = course_init._own_course_text((ROOT / "course.yml").read_text(), exercise_file, "EXERCISE",
                                        load_exercise(f"{exercise_file}:EXERCISE"))
    assert "training" not in text and "\ndata:" not in text and "names.txt" not in text, text
    assert yaml.safe_load(text)["exercise"] == "gru_gate.py:EXERCISE"


def _training_cell(course, folder) -> str:
    notebook = nbformat.read(folder / course.notebook, as_version=4)
    cell_id = grade_cell_id(course.exercise.training.grade_id)
    return next(cell.source for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade_id") == cell_id)


def test_the_training_check_trains_at_the_course_s_learning_rate_in_the_notebook_too(tmp_path):
    """An instructor trial's network diverged at the default 0.1 and its file could not say otherwise; and the
    notebook's check cell trained at a written 0.1 whatever course.yml said, so the self-check and the grader
    could differ. The exercise's `learning_rate` goes into course.yml; course.yml's goes into the notebook."""
    slow = tmp_path / "slow_rnn.py"
    text = EXERCISE.read_text(encoding="utf-8")
    slow.write_text(text.replace("backward=True,", "backward=True, learning_rate=0.02,"), encoding="utf-8")
    target = tmp_path / "course"
    done = CliRunner().invoke(main, ["course", "init", str(target), "--exercise", str(slow)])
    assert done.exit_code == 0, (done.output, done.exception)
    course, folder = _source(target)
    assert course.training.learning_rate == 0.02
    assert yaml.safe_load((target / "course.yml").read_text())["training"]["learning_rate"] == 0.02
    assert "lr=0.02)" in _training_cell(course, folder)
    text = (target / "course.yml").read_text().replace("learning_rate: 0.02", "learning_rate: 0.005")
    (target / "course.yml").write_text(text)
    done = CliRunner().invoke(main, ["course", "init", "--update", str(target)])
    assert done.exit_code == 0, (done.output, done.exception)
    course, folder = _source(target)
    assert course.training.learning_rate == 0.005 and "lr=0.005)" in _training_cell(course, folder)
    (target / "course.yml").write_text(text.replace("  learning_rate: 0.005\n", ""))
    assert load(target / "course.yml").training.learning_rate == 0.02, "a rate course.yml leaves out is the file's"
