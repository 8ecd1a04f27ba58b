"""Every makemore variant as a course: its notebooks come from the lecture's prose source and the variant's
differences and explain its own derivatives; `course init --variant` writes a course for it (course.yml
naming it, its notebook, its points, the known mistakes still right for it); a `from-salt` course draws its
variant from its salt; and, end to end, the grader gives its solved notebook full marks, its stub 0, and each
mutant of its reference answers (solutions/mutants.py) less on exactly the tensors its cell answers.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
import yaml

from grader import course as course_config
from grader.exercise import FUNCTION, grade_cell_id, load
from grader.exercises import choice
from grader.exercises.makemore_mlp import variants
from grader.lms import course_init
from helpers.notebooks import execute
from solutions import make_notebooks, mutants, variant_notebooks

torch.set_num_threads(1)

ROOT = make_notebooks.ROOT
NAMES = tuple(n for n in variants.NAMES if n != variants.LECTURE_VARIANT)
COURSE = course_config.load(ROOT / "course.yml")
CLI = [sys.executable, "-c", "from grader.cli import main; main()"]


def _cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd)


def _markdown(nb) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def _code(nb, cell_id: str) -> str:
    (source,) = [c.source for c in nb.cells if c.id == cell_id]
    return source


def _run(source: str, **namespace) -> dict:
    namespace = {"torch": torch, "F": F, **namespace}
    exec(compile(source, "<notebook cell>", "exec"), namespace)  # noqa: S102
    return namespace


# --- the notebooks -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_each_variants_notebook_is_its_network_and_explains_its_own_derivatives(name):
    solved, student = variant_notebooks.build(name, COURSE)
    exercise, variant = load(f"makemore-mlp/{name}"), variants.parse(name)
    text = _markdown(solved)
    answer_cells = [c.id for c in solved.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert answer_cells == list(exercise.answer_cells)
    graded = {c.metadata["nbgrader"]["grade_id"] for c in solved.cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert graded == {grade_cell_id(g) for g in exercise.grade_ids if g in COURSE.points}
    # Its own pieces' text, and none of the lecture's for a piece it does not have.
    own = {"relu": "subgradient", "sigmoid": r"h\,(1 - h)", "gelu": "**three** times", "tanh": "1 - h^2"}
    assert own[variant.activation.name] in text
    assert ("Differentiate tanh" in text) == (variant.activation.name == "tanh")
    assert ("**two paths**" in text) == variant.residual
    assert ("Batch normalization" in text) == (variant.norm.name == "batchnorm")
    assert ("over its `n_hidden` **features**" in text) == (variant.norm.name == "layernorm")
    assert ("## Exercise 3" in text) == bool(variant.norm.parameters)
    assert ("train_calibrate" in {c.id for c in solved.cells}) == (variant.norm.name == "batchnorm")
    assert f"{len(exercise.atomic)} gradients" in text
    assert "{{" not in text and all("{{" not in c.source for c in solved.cells)
    # The students' notebook holds no reference answer.
    assert not any("### BEGIN SOLUTION" in c.source for c in student.cells)
    assert [c.id for c in student.cells] == [c.id for c in solved.cells]


@pytest.mark.parametrize("name", NAMES)
def test_each_variants_init_and_fused_forward_are_the_exercises(name):
    """The notebook's init_params draws the grader's parameters bit for bit, and its fused_forward (which
    exercise 4 trains with) computes the network's loss and every cached value."""
    solved, _ = variant_notebooks.build(name, COURSE)
    exercise = load(f"makemore-mlp/{name}")
    sizes = exercise.lecture
    setup = ast.parse(_code(solved, "setup_params"))
    init_source = ast.unparse(next(s for s in setup.body if isinstance(s, ast.FunctionDef)))
    init_params = _run(init_source, n_embd=sizes.n_embd, block_size=sizes.block_size,
                       vocab_size=sizes.vocab)["init_params"]
    ours = init_params(sizes.n_hidden, torch.float64, torch.Generator().manual_seed(3))
    theirs = exercise.init(sizes, torch.Generator().manual_seed(3), torch.float64)
    assert list(ours) == list(theirs) == list(exercise.network.parameters)
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)

    fused_forward = _run(_code(solved, "setup_ex4_forward"))["fused_forward"]
    generator = torch.Generator().manual_seed(1)
    params = exercise.init(sizes, generator, torch.float64)
    data = exercise.batch(sizes, generator)
    values = exercise.network.forward(params, data)
    loss, cache = fused_forward(params, data["Xb"], data["Yb"])
    torch.testing.assert_close(loss, values["loss"], rtol=1e-12, atol=0)
    assert list(cache) == list(exercise.functions[0].arguments[1][1])
    for key, tensor in cache.items():
        torch.testing.assert_close(tensor, values[key], rtol=1e-12, atol=1e-15)


def test_the_lecture_variant_is_the_lecture_notebook():
    assert variant_notebooks.source(variants.LECTURE_VARIANT) == make_notebooks.PROSE.read_text(encoding="utf-8")


def _stdout(cell) -> str:
    return "".join(o.text for o in cell.get("outputs", []) if o.output_type == "stream" and o.name == "stdout")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["relu-layernorm-residual", "gelu-none", "sigmoid-batchnorm"])
def test_run_all_on_a_variants_notebooks_checks_every_answer_and_trains(name, tmp_path):
    """Run All, as a student would: no error and nothing on stderr; the solved notebook's self-checks (the
    variant's own, through COURSE's exercise) all pass and it trains; the stub's are all not attempted."""
    solved, student = variant_notebooks.build(name, COURSE)
    folder = ROOT / make_notebooks.release_path(COURSE).parent
    runs = {kind: execute(nb, tmp_path / kind, folder, ROOT) for kind, nb in (("solved", solved), ("stub", student))}
    exercise = load(f"makemore-mlp/{name}")
    for kind, nb in runs.items():
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                assert output.output_type != "error", f"{kind} {cell.id}: {output.get('ename')}: {output.get('evalue')}"
                assert output.get("name") != "stderr", f"{kind} {cell.id} wrote to stderr: {output.text}"
        checks = {cell.id: _stdout(cell).strip() for cell in nb.cells if cell.id.startswith("check_")}
        assert set(checks) == {grade_cell_id(g) for g in exercise.grade_ids}
        for cell_id, line in checks.items():
            if kind == "stub":
                assert line.endswith("not attempted yet"), (cell_id, line)
            else:
                assert "WRONG" not in line and "not attempted" not in line and line, (cell_id, line)
    assert "50 steps match autograd" in _check_output(runs["solved"], exercise.training.grade_id)
    evaluated = _stdout(next(c for c in runs["solved"].cells if c.id == "train_evaluate"))
    assert re.search(r"^train loss \d", evaluated, re.M), evaluated


def _check_output(nb, grade_id: str) -> str:
    return _stdout(next(c for c in nb.cells if c.id == grade_cell_id(grade_id)))


# --- known mistakes and points ---------------------------------------------------------------------

CATALOGUE = (ROOT / "autotests" / "known_mistakes.yml").read_text(encoding="utf-8")


def _kept(name: str) -> set[str]:
    return set(yaml.safe_load(course_init.known_mistakes(CATALOGUE, load(f"makemore-mlp/{name}"))) or {})


def test_a_variant_keeps_the_known_mistakes_whose_formula_is_still_its_own():
    lecture = set(yaml.safe_load(CATALOGUE))
    shared = {"dlogprobs", "dlogits", "ex2_dlogits"}  # the cross-entropy: the same in every variant
    assert _kept("tanh-batchnorm") == lecture
    assert _kept("relu-batchnorm") == lecture  # dh = dlogits @ W2.T, dembcat and batch norm's fused step stay
    assert _kept("relu-layernorm") == shared | {"dh"}  # dembcat reads dhpreln; no ex3_dhprebn
    assert _kept("tanh-batchnorm-residual") == lecture - {"dh"}  # dh sums two paths
    assert _kept("gelu-none-residual") == shared
    for name in NAMES:
        assert shared <= _kept(name) <= lecture
        kept = yaml.safe_load(course_init.known_mistakes(CATALOGUE, load(f"makemore-mlp/{name}")))
        assert all(kept[g] == yaml.safe_load(CATALOGUE)[g] for g in kept)  # entries copied whole


def test_a_variants_points_follow_the_lectures_by_kind_and_part():
    exercise = load("makemore-mlp/sigmoid-layernorm-residual")
    points = course_init.variant_points(COURSE.points, load("makemore-mlp"), exercise)
    assert list(points) == list(exercise.grade_ids)
    assert points["dlnvar"] == points["dW3"] == points["dlogprobs"] == COURSE.points["dlogprobs"]
    assert points["ex3_dhpreln"] == COURSE.points["ex3_dhprebn"]
    assert points["ex4_dlngain"] == points["ex4_db3"] == COURSE.points["ex4_dW1"]
    assert points["ex4_training"] == COURSE.points["ex4_training"]


# --- choosing a variant ------------------------------------------------------------------------------

def _course_yml(salt: str, exercise) -> dict:
    raw = yaml.safe_load((ROOT / "course.yml").read_text(encoding="utf-8"))
    return {**raw, "secret_salt": salt, "exercise": exercise, "points": {"dlogprobs": 1}}


def test_from_salt_courses_draw_their_variant_from_their_salt():
    setting = {"name": "makemore-mlp", "variant": choice.FROM_SALT}
    drawn = {salt: course_config.parse(_course_yml(salt, setting), ROOT / "course.yml").exercise.name
             for salt in ("term 1", "term 2", "term 3", "term 4")}
    assert len(set(drawn.values())) > 1
    assert all(name == f"makemore-mlp/{variants.from_salt(salt)}" for salt, name in drawn.items())
    again = course_config.parse(_course_yml("term 1", setting), ROOT / "course.yml").exercise.name
    assert again == drawn["term 1"]
    named = course_config.parse(_course_yml("x", {"name": "makemore-mlp", "variant": "relu-none"}), ROOT / "course.yml")
    assert named.exercise is load("makemore-mlp/relu-none")


def test_a_course_yml_with_an_unknown_variant_is_one_line():
    with pytest.raises(course_config.CourseError, match=r"exercise: unknown variant 'nope'"):
        course_config.parse(_course_yml("x", {"name": "makemore-mlp", "variant": "nope"}), ROOT / "course.yml")


def _init(tmp_path: Path, *args: str) -> tuple[Path, course_config.Course]:
    target = tmp_path / "course"
    run = _cli("course", "init", str(target), *args)
    assert run.returncode == 0, run.stderr[-2000:]
    return target, course_config.load(target / "course.yml")


@pytest.mark.slow
def test_course_init_from_salt_names_the_variant_its_fresh_salt_draws(tmp_path):
    """Two courses initialised from a course.yml saying `from-salt` (its points given to grade ids every
    variant has, and so to the drawn variant's by kind) get fresh salts, and each the variant its own salt
    draws, named outright in its course.yml; so does --variant from-salt."""
    template = tmp_path / "template.yml"
    shared = ("dlogprobs", "ex2_dlogits", "ex4_dC", "ex4_training")
    raw = _course_yml("a template's salt", {"name": "makemore-mlp", "variant": choice.FROM_SALT})
    template.write_text(yaml.safe_dump({**raw, "points": {g: COURSE.points[g] for g in shared}}), encoding="utf-8")
    drawn = []
    for index, how in enumerate((("--course", str(template)), ("--course", str(template)), ("--variant", "from-salt"))):
        target, course = _init(tmp_path / str(index), *how)
        setting = yaml.safe_load((target / "course.yml").read_text())["exercise"]
        assert setting == {"name": "makemore-mlp", "variant": variants.from_salt(course.secret_salt)}
        assert course.exercise.name == f"makemore-mlp/{setting['variant']}"
        # Exercise 3 has points only where the template gave exercise 3 some (the third, the package's).
        assert {g for g in course.exercise.grade_ids if not g.startswith("ex3_")} <= set(course.points)
        drawn.append(course.secret_salt)
    assert len(set(drawn)) == 3


@pytest.mark.slow
def test_course_init_update_rewrites_a_variant_course_from_its_own_course_yml(tmp_path):
    target, course = _init(tmp_path, "--variant", "gelu-layernorm")
    text = (target / "course.yml").read_text(encoding="utf-8")
    (target / "course.yml").write_text(text.replace("  dlnvar: 1\n", "  dlnvar: 5\n"), encoding="utf-8")
    run = _cli("course", "init", "--update", str(target))
    assert run.returncode == 0, run.stderr[-2000:]
    nb = nbformat.read(target / "source" / course.assignment / course.notebook, as_version=4)
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"].get("points") for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    assert points[grade_cell_id("dlnvar")] == 5 and points[grade_cell_id("dlnmean")] == 1
    assert set(yaml.safe_load((target / "autotests" / "known_mistakes.yml").read_text())) == _kept("gelu-layernorm")


def test_course_init_refuses_an_unknown_variant_in_one_line(tmp_path):
    run = _cli("course", "init", str(tmp_path / "c"), "--variant", "relu-batchnorm-twice")
    assert run.returncode != 0 and "unknown variant 'relu-batchnorm-twice'" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "c").exists()


def test_without_a_checkouts_references_course_init_variant_says_so_in_one_line(tmp_path):
    """An installed package has no solutions/ to compose a variant's notebooks from: one line, no folder."""
    run = subprocess.run([sys.executable, "-c", "import sys; sys.modules['solutions'] = None; "
                          "from grader.cli import main; main()", "course", "init", str(tmp_path / "c"),
                          "--variant", "relu-none"], capture_output=True, text=True)
    assert run.returncode != 0 and "run course init from a checkout" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and not (tmp_path / "c").exists()


# --- end to end: course init --variant, then the grader --------------------------------------------

def _submission(student, cells: dict[str, str], path: Path) -> None:
    """The released notebook's answer cells alone, `cells` written in: what the grader reads of a
    submission, without the prose it never reads (a class of mutants is graded in a fraction of the time)."""
    nb = nbformat.from_dict(json.loads(json.dumps(student)))
    nb.cells = [cell for cell in nb.cells if cell.id in cells]
    for cell in nb.cells:
        cell.source = cells[cell.id]
    nbformat.write(nb, path)


def _grade(name: str, tmp_path: Path, every_mutant: bool) -> tuple[course_config.Course, dict, dict]:
    """course init --variant, then one `backprop-ninja grade` batch: the solved notebook, the stub and the
    mutants (all of them, or the first of each cell's)."""
    target, course = _init(tmp_path, "--variant", name)
    assert course.exercise is load(f"makemore-mlp/{name}")
    solved = nbformat.read(target / "source" / course.assignment / course.notebook, as_version=4)
    student = make_notebooks.release(solved)
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    nbformat.write(solved, submissions / "solved.ipynb")
    nbformat.write(student, submissions / "stub.ipynb")
    found, seen = {}, set()
    for (stem, cells), mutant in zip(mutants.submissions(name).items(), mutants.mutants(name), strict=True):
        if not every_mutant and mutant.cell in seen:
            continue
        seen.add(mutant.cell)
        found[stem] = mutant
        _submission(student, cells, submissions / f"{stem}.ipynb")
    run = _cli("grade", str(submissions), "--out", str(tmp_path / "results"), "--course", str(target / "course.yml"),
               cwd=target)
    assert run.returncode == 0, run.stderr[-2000:]
    results = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "results").glob("*.json")}
    return course, results, found


def _lost(result: dict) -> set[str]:
    return {t["name"] for t in result["tests"] if t["score"] < t["max_score"]}


def _check(name: str, course, results: dict, found: dict) -> None:
    exercise = course.exercise
    solved, stub = results["solved"], results["stub"]
    assert solved["score"] == solved["max_score"] == course.max_score, _lost(solved)
    assert stub["score"] == 0, [t for t in stub["tests"] if t["score"]]
    training = {exercise.training.grade_id} if exercise.training else set()
    wrong = []
    for stem, mutant in found.items():
        own = set(mutants.graded_in(mutant))
        lost = _lost(results[stem])
        function = exercise.by_grade_id[next(iter(own))].kind == FUNCTION
        # A function's mistake spoils the gradients it reaches and the training run it drives; any other
        # answer's loses exactly its own.
        right = bool(lost) and lost <= own | training if function else lost == own
        if not right:
            wrong.append(f"{stem}: lost {sorted(lost)}, expected {sorted(own)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("name", ["relu-layernorm-residual", "sigmoid-none"])
def test_a_variant_course_grades_its_solved_notebook_full_its_stub_zero_and_each_cells_mistake_on_its_own(
        name, tmp_path):
    _check(name, *_grade(name, tmp_path, every_mutant=False))


@pytest.mark.exhaustive
@pytest.mark.parametrize("name", NAMES)
def test_every_mutant_of_every_variant_loses_credit_on_exactly_its_tensors(name, tmp_path):
    _check(name, *_grade(name, tmp_path, every_mutant=True))
