"""Every makemore variant as a course: its notebooks come from the lecture's prose source and the variant's
differences and explain its own derivatives; `course init --variant` writes a course for it (course.yml
naming it, its notebook, its points, the known mistakes still right for it); a `from-salt` course draws its
variant from its salt; and, end to end for every variant, the grader gives the solved notebook full marks,
the stub 0, and each mutant of its reference answers (the rule table's slips, grader.authoring.skeleton.mutants)
less on exactly the tensors its cell answers, while the solved and stub notebooks of a covering set of
variants run clean as a student runs them. All of it from the package alone: a wheel in a fresh
environment writes a variant's course too.
"""
from __future__ import annotations

import ast
import dataclasses
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
from grader.course import choice
from grader.exercise import load
from grader.exercises.makemore_mlp import notebook_source, variants
from grader.lms import course_init
from grader.vocabulary import grade_cell_id
from helpers import variant_courses
from helpers.paths import ROOT

torch.set_num_threads(1)

NAMES = tuple(n for n in variants.NAMES if n != variants.LECTURE_VARIANT)
COURSE = course_config.load(ROOT / "course.yml")


def _cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*variant_courses.CLI, *args], capture_output=True, text=True, cwd=cwd)


def _markdown(nb) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def _code(nb, cell_id: str) -> str:
    (source,) = [c.source for c in nb.cells if c.id == cell_id]
    return source


def _build(name: str):
    """The variant's (solved, students') notebooks as course init writes them, with the lecture's course.yml."""
    course = dataclasses.replace(COURSE, exercise=load(f"makemore-mlp/{name}"))
    return course_init.variant_notebooks(("makemore-mlp", name), course)


def _run(source: str, **namespace) -> dict:
    namespace = {"torch": torch, "F": F, **namespace}
    exec(compile(source, "<notebook cell>", "exec"), namespace)  # noqa: S102
    return namespace


# --- the notebooks -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_each_variants_notebook_is_its_network_and_explains_its_own_derivatives(name):
    solved, student = _build(name)
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
def test_each_variants_text_names_only_what_its_notebook_shows(name):
    """The student trial's notes: no tanh derivative where tanh never appears, no "Exercises 1 to 3"
    without an exercise 3, no batch norm's parameters in a notebook that never shows them."""
    solved, _ = _build(name)
    variant = variants.parse(name)
    text = _markdown(solved) + variants.describe(name)
    tanh = variant.activation.name == "tanh"
    for derivative in ("1 - h²", "1 - h^2", "1 - h**2"):
        assert (derivative in text) <= tanh, (derivative, name)
    assert ("Exercises 1 to 3" in text) == bool(variant.norm.parameters)
    if variant.norm.name != "batchnorm":
        assert not re.search(r"\bbn(gain|bias)\b", text), name


def test_a_tensor_used_three_times_is_said_so_in_a_named_mistake():
    """GELU's input feeds three steps: a dropped branch is named with three uses, not "twice ... both"."""
    from grader.judge.configs import generate
    from grader.judge.exam import CHAIN, prepare
    from grader.judge.neighbourhood import _per_branch, _twice_used

    case = prepare(generate("makemore-mlp/gelu-none", "three uses", 1)[0])
    answer = case.exercise.by_grade_id["dhpreact"]
    want, branches, _ = _per_branch(case, answer, CHAIN)
    assert len(branches) == 3
    dropped = [c.sentence for c in _twice_used(case, answer, CHAIN, want, branches) if c.key.startswith("drop:")]
    assert dropped and all("used three times" in t and "sum of all three" in t for t in dropped), dropped


@pytest.mark.parametrize("name", NAMES)
def test_each_variants_init_and_fused_forward_are_the_exercises(name):
    """The notebook's init_params draws the grader's parameters bit for bit, and its fused_forward (which
    exercise 4 trains with) computes the network's loss and every cached value."""
    solved, _ = _build(name)
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
    assert notebook_source.source(variants.LECTURE_VARIANT) == notebook_source.PROSE.read_text(encoding="utf-8")


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


def test_course_init_variant_needs_no_checkouts_solutions(tmp_path):
    """The variant's notebooks come from the package alone (its prose, the rule table's answers): with no
    solutions/ to import, course init --variant writes the course, the solved notebook answering every cell."""
    run = subprocess.run([sys.executable, "-c", "import sys; sys.modules['solutions'] = None; "
                          "from grader.cli import main; main()", "course", "init", str(tmp_path / "c"),
                          "--variant", "relu-none"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    course = course_config.load(tmp_path / "c" / "course.yml")
    assert course.exercise.name == "makemore-mlp/relu-none"
    nb = nbformat.read(tmp_path / "c" / "source" / course.assignment / course.notebook, as_version=4)
    answers = {c.id: c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")}
    assert list(answers) == list(course.exercise.answer_cells)
    assert all("### BEGIN SOLUTION" in source for source in answers.values())
    assert "dhpreact = (hpreact > 0) * dh" in answers["dhpreact"]


# --- end to end, every variant: course init --variant, Run All, the grader (helpers/variant_courses.py) ---

def _lost(result: dict) -> set[str]:
    return {t["name"] for t in result["tests"] if t["score"] < t["max_score"]}


def _stdout(cell) -> str:
    return "".join(o.text for o in cell.get("outputs", []) if o.output_type == "stream" and o.name == "stdout")


def _check_runs(exercise, ran: dict[str, nbformat.NotebookNode]) -> None:
    """Run All, as a student would: no error and nothing on stderr; the solved notebook's self-checks (the
    variant's own) all pass and it trains; the stub's are all not attempted."""
    for kind, nb in ran.items():
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
    solved = {cell.id: _stdout(cell) for cell in ran["solved"].cells}
    assert "50 steps match autograd" in solved[grade_cell_id(exercise.training.grade_id)]
    assert re.search(r"^train loss \d", solved["train_evaluate"], re.M), solved["train_evaluate"]


def _check_grades(outcome: variant_courses.Outcome) -> None:
    """Full marks for the solved notebook, 0 for the stub, and each notebook of slips (one per answer) less
    on exactly the grade ids its slipped answers are graded on (a function's slip may also fail the training
    run it drives)."""
    exercise, results = outcome.course.exercise, outcome.results
    solved, stub = results["solved"], results["stub"]
    assert solved["score"] == solved["max_score"] == outcome.course.max_score, _lost(solved)
    assert stub["score"] == 0, [t for t in stub["tests"] if t["score"]]
    training = {exercise.training.grade_id} if exercise.training else set()
    wrong = []
    for stem, slips in outcome.slips.items():
        own, lost = set(slips["own"]), _lost(results[stem])
        right = own <= lost <= own | training if slips["training"] else lost == own
        if not right:
            wrong.append(f"{stem} ({'; '.join(slips['slips'])}): lost {sorted(lost)}, expected {sorted(own)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
@pytest.mark.xdist_group("variant-courses")  # one worker makes every course (helpers/variant_courses.py)
@pytest.mark.parametrize("name", variant_courses.COURSES)  # the lecture's network first, a variant like any other
def test_every_variant_course(name, variant_course_outcome):
    """`course init --variant NAME`, for each variant of the covering set (the others' courses are the nightly
    tier's), gives a course which the grader marks full for the solved notebook, 0 for the stub and, for every
    mutant of its reference answers graded there (each slip once across the courses), less on exactly that
    mutant's tensors; its solved notebook runs clean, passes every self-check and trains; for a smaller set,
    its stub runs clean and says every answer is not attempted yet."""
    outcome = variant_course_outcome
    assert outcome.course.exercise is load(f"makemore-mlp/{name}")
    assert "solved" in outcome.ran
    assert ("stub" in outcome.ran) == variant_courses.runs_stub(name)
    _check_runs(outcome.course.exercise, outcome.ran)
    _check_grades(outcome)


def test_the_notebooks_run_all_runs_meet_every_piece():
    """Run All covers, in a quarter of the solved notebooks, every normalization with and without the residual
    block and every activation, the lecture's network among them; in four stubs, every piece."""
    ran = [variants.parse(name) for name in variants.NAMES if variant_courses.runs_all(name)]
    assert {(v.norm.name, v.residual) for v in ran} == {(n, r) for n in variants.NORMALIZATIONS for r in (False, True)}
    assert {v.activation.name for v in ran} == set(variants.ACTIVATIONS)
    assert len(ran) == len(variants.NAMES) // 4 and variants.parse(variants.LECTURE_VARIANT) in ran
    stubs = [variants.parse(name) for name in variants.NAMES if variant_courses.runs_stub(name)]
    assert {v.activation.name for v in stubs} == set(variants.ACTIVATIONS)
    assert {v.norm.name for v in stubs} == set(variants.NORMALIZATIONS)
    assert {v.residual for v in stubs} == {True, False}
    assert len(stubs) == len(variants.ACTIVATIONS) and set(stubs) <= set(ran)


@pytest.mark.slow
def test_run_all_goes_on_past_an_answer_that_raises():
    """A wrong shape in one answer makes the next answer raise: Run All (nbclient, as `jupyter execute` and
    the notebook's own Run All read the `raises-exception` tag) still reaches every later check."""
    from nbclient import NotebookClient

    _, student = _build("relu-none")
    answers = [c for c in student.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert all("raises-exception" in c.metadata.get("tags", []) for c in answers)
    nb = nbformat.v4.new_notebook(cells=[answers[0], nbformat.v4.new_code_cell("print('the next check ran')")])
    nb.cells[0].source = "raise RuntimeError('The size of tensor a (32) must match the size of tensor b (27)')"
    NotebookClient(nb, timeout=600, startup_timeout=600, kernel_name="python3").execute()
    assert nb.cells[0].outputs[0].output_type == "error"
    assert nb.cells[1].outputs[0].text == "the next check ran\n"
