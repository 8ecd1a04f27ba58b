"""`backprop-ninja exercise check` and the checks `exercise.load` makes: an instructor's slip in an exercise
file is one line naming the line to fix, at load, never a KeyError at grading time."""
from __future__ import annotations

import json
import re
import shutil
import zipfile
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from click.testing import CliRunner

from grader import course as course_config
from grader import exercise as ex
from grader.authoring import skeleton
from grader.cli import main
from grader.judge import configs
from grader.lms import dry_run, gradescope
from helpers.paths import ROOT

TINY = ROOT / "tests" / "exercises" / "tiny_relu.py"
ORDER = '("dz", "da", "dh", "db", "dW", "de", "dE")'


def tiny(tmp_path: Path, *changes: tuple[str, str]) -> Path:
    """tiny_relu.py with some of its text replaced, as an instructor's edited copy."""
    text = TINY.read_text(encoding="utf-8")
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "mine.py"
    path.write_text(text, encoding="utf-8")
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.fixture(autouse=True)
def _no_course(monkeypatch):
    """The checks made in this process, without the course built and graded after them (minutes, not
    seconds): tests/test_own_exercise_wheel.py runs that part, through the command a user runs."""
    monkeypatch.setattr(dry_run, "dry_run", lambda spec, quick=False, log=None: ([], ["routes     (not run)"]))


def check(spec) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["exercise", "check", str(spec)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_a_good_exercise_prints_its_sizes_answers_and_derived_references():
    code, out = check(TINY)
    assert code == 0, out
    assert "sizes: n=8 (hidden 6..29)" in out
    assert "answers: 7 atomic, 1 fused, 3 from functions, training check fit_training" in out
    assert "derived: 7 reference answers" in out and "mutants" in out
    assert "dE = torch.zeros_like(E).index_add(0, X" in out, out
    # The fused block's and the function's cells too, as the solved notebook holds them.
    assert "# ---- fused_dh: the solved notebook's answer cell" in out and "def backward(" in out, out


def test_the_command_derives_a_variant_as_a_user_names_it():
    code, out = check("makemore-mlp/relu-none")
    assert code == 0, out
    assert "dhpreact = " in out and "17 reference answers" in out


@pytest.mark.parametrize(("change", "says"), [
    ((ORDER, '("dz", "da", "dhh", "db", "dW", "de", "dE")'), "answer 'dhh': no such gradient in the network "
                                                               "(did you mean dh?)"),
    ((ORDER, '("dz", "dh", "da", "db", "dW", "de", "dE")'), "dh comes before da, which it needs (a reads h): "
                                                             "put it after da in the answer order"),
    (('"fused_dh", "dh", "h"', '"fused_dh", "dh", "hh"'), "answer 'hh': no such name in the network "
                                                          "(did you mean h?)"),
    (('"dim": (2, 10)', '"dim": (3, 4)'), "size 'dim': its range (3, 4) is (low, high) with high excluded and must "
                                          "hold a value unlike every lecture size"),
])
def test_a_slip_in_the_declaration_is_one_line_naming_its_line_and_the_fix(tmp_path, change, says):
    path = tiny(tmp_path, change)
    code, out = check(path)
    assert code == 1 and out.count("\n") == 1, out
    assert f"line {line_of(path, change[1])} of {path}" in out and says in out, out
    assert "Traceback" not in out


def test_a_file_without_the_attribute_names_the_exercise_it_defines(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(TINY.read_text(encoding="utf-8") + "MYNET = EXERCISE\ndel EXERCISE\n", encoding="utf-8")
    code, out = check(path)
    assert code == 1 and out.count("\n") == 1, out
    assert f"{path} has no EXERCISE; give one it defines: " in out and f"{path}:MYNET" in out, out
    assert "backprop_ninja_exercise" not in out
    assert check(f"{path}:MYNET")[0] == 0


def test_an_operation_without_a_rule_names_its_line(tmp_path):
    path = tiny(tmp_path, ("z = a + h", "z = a + torch.cumsum(h, 1)"))
    code, out = check(path)
    assert code == 1 and out.count("\n") == 1 and "cumsum" in out, out


def test_a_forward_pass_that_fails_is_one_line(tmp_path):
    path = tiny(tmp_path, ("h = e @ W + b", "h = e @ W.T + b"))
    code, out = check(path)
    assert code == 1 and out.count("\n") == 1 and "the forward pass fails at Sizes(" in out, out


def test_a_size_without_a_range_is_a_structural_constant(tmp_path):
    """A lecture size with no range keeps its value in every hidden configuration, and no drawn size
    takes it, so a cell that writes that number for a drawn size still fails somewhere."""
    path = tiny(tmp_path, ('"dim": (2, 10), ', ""))
    spec = f"{path}:EXERCISE"
    drawn = configs.generate(spec, "some salt", 6)
    assert all(c.sizes.dim == 3 for c in drawn)
    assert all(3 not in (c.sizes.n, c.sizes.vocab, c.sizes.hidden) for c in drawn[:-1])
    code, out = check(path)
    assert code == 0 and "dim=3 (constant)" in out, out
    assert ex.problems(ex.load(spec)) == []


SHORT = """from grader.authoring.define import exercise

EXERCISE = exercise(
    name="short", title="short", sizes={"n": (8, (6, 30)), "vocab": (5, (2, 12)), "dim": 3, "hidden": (4, (2, 10))},
    parameters="E = randn(vocab, dim)\\nW = randn(dim, hidden)\\nb = randn(hidden) * 0.1",
    data="X = randint(vocab, (n,))\\nY = randn(n, hidden)",
    forward="e = E[X]\\nh = e @ W + b\\na = torch.relu(h)\\nz = a + h\\nloss = ((z - Y) ** 2).sum() / n",
    fused=FUSED,
)
"""


@pytest.mark.parametrize(("fused", "noted"), [('{"dz": "loss"}', True), ('{"dh": "loss"}', False)])
def test_a_fused_block_of_one_line_is_noted_and_a_longer_one_is_not(tmp_path, fused, noted):
    """A block that spans one forward line grades, but asks the atomic question again: the check says so."""
    path = tmp_path / "short.py"
    path.write_text(SHORT.replace("FUSED", fused), encoding="utf-8")
    code, out = check(path)
    assert code == 0, out
    gradient = fused.split('"')[1]
    assert ("note: ex2_" + gradient + " spans one forward line (" in out) == noted, out
    assert (f"{gradient}'s atomic one again" in out) == noted, out


HIDING = '''from grader.authoring.define import exercise

EXERCISE = exercise(
    name="hide",
    title="A mask that is zero away from the lecture's batch size",
    sizes={"n": (8, (6, 30)), "dim": (3, (2, 10)), "hidden": (4, (2, 10))},
    parameters="""
        W = randn(dim, hidden)
        b = randn(hidden) * 0.1
    """,
    data="""
        X = randn(n, dim)
        M = randn(n, hidden) * (n == 8)
    """,
    forward="""
        h = X @ W + b
        z = h * M + h
        loss = (z ** 2).sum() / n
    """,
    ACCEPT
)
'''


def test_a_slip_that_scores_full_on_every_hidden_configuration_is_refused_unless_accepted(tmp_path):
    """Here the mask is zero in every hidden configuration, so leaving its branch out of dh scores full: the
    instructor hears of it before a class does, and may accept it."""
    path = tmp_path / "hide.py"
    path.write_text(HIDING.replace("ACCEPT", ""), encoding="utf-8")
    code, output = check(path)
    assert code == 1 and "dh: the slip forward-value" in output and "scores full on every hidden" in output, output
    assert 'accept={"dh": "forward-value"}' in output
    path = tmp_path / "accepted.py"  # a file of another name: this process keeps the first one loaded
    path.write_text(HIDING.replace("ACCEPT", 'accept={"dh": "forward-value missed-factor mul-local"},'),
                    encoding="utf-8")
    code, output = check(path)
    assert code == 0, output


GATED = HIDING.replace('M = randn(n, hidden) * (n == 8)', 'H0 = zeros(n, hidden)').replace(
    'b = randn(hidden) * 0.1', 'b = randn(hidden) * 0.1\n        U = randn(hidden, hidden) * 0.5').replace(
    'z = h * M + h', 'r = torch.sigmoid(h)\n        z = h + r * (H0 @ U)')


def test_slips_that_a_state_drawn_as_zeros_hides_everywhere_are_refused(tmp_path):
    """An instructor trial's GRU, whose first hidden state was zeros: its reset gate's gradient is zero on every
    configuration, the hidden ones too, so `dr1 = torch.zeros_like(r1)` scored full on every route, and exercise
    check had said so only in a note and exited 0."""
    path = tmp_path / "gated.py"
    path.write_text(GATED.replace("ACCEPT", ""), encoding="utf-8")
    code, output = check(path)
    assert code == 1, output
    assert "score full on every configuration, the course's hidden ones too: each changes a term that reads H0" in \
        output and "and dr, dU are zero there, so an answer of zeros scores full: draw H0 at random" in output, output


@pytest.mark.parametrize("accept, says", [('{"dq": "sign"}', "accept: dq: no gradient of the exercise"),
                                          ('{"dh": "sign slipped"}', "accept: dh: slipped is no slip of the rule")])
def test_an_accepted_slip_the_exercise_cannot_have_is_one_line_at_load(tmp_path, accept, says):
    path = tmp_path / "hide.py"
    path.write_text(HIDING.replace("ACCEPT", f"accept={accept},"), encoding="utf-8")
    code, output = check(path)
    assert code == 1 and says in output and len(output.strip().splitlines()) == 1, output


def test_a_derived_answer_the_static_check_refuses_is_named(tmp_path, monkeypatch):
    """Exact F.gelu derives torch.erf: with an allowlist without it (as the static check's was), exercise check
    names the cell, where the solved notebook once lost a point at grading time."""
    from grader.sandbox import static_check

    path = tiny(tmp_path, ("a = torch.relu(h)", "a = F.gelu(h)"))
    assert check(f"{path}:EXERCISE")[0] == 0
    narrower, original = static_check.Allow(torch=static_check.TORCH - {"erf"}), static_check.check
    monkeypatch.setattr(static_check, "check", lambda source, allow=narrower: original(source, allow))
    code, output = check(f"{path}:EXERCISE")
    assert code == 1 and "dh: the static check refuses the derived answer" in output and "torch.erf" in output, output


# --- the course, built and graded through every route (grader/lms/dry_run.py) ------------------

def test_one_notebook_carries_one_slip_of_every_answer_and_each_slip_is_graded_once():
    """A tensor's grade reads only true or random upstream gradients, so slips of different answers share a
    notebook: as many notebooks as the most slips of one answer (a fused cell's chain, one slip at a time;
    a function's parameters, one each), every slip in exactly one of them, every other cell the reference."""
    exercise = ex.load(f"{TINY}:EXERCISE")
    made = dry_run.submissions(exercise)
    assert [s.stem for s in made[:3]] == ["solved", "stub", "raising"] and not any(s.mutants for s in made[:3])
    mutants = skeleton.mutants(exercise)
    carried = [m for s in made[3:] for m in s.mutants]
    assert sorted(map(repr, carried)) == sorted(map(repr, mutants))
    per_answer = Counter((m.cell, m.slip.gradient) for m in mutants)
    per_fused = Counter(m.cell for m in mutants if m.cell == "fused_dh")
    assert len(made) - 3 == max(*per_answer.values(), *per_fused.values()) < len(mutants)
    reference = skeleton.references(exercise)
    for submission in made[3:]:
        slipped = {m.cell for m in submission.mutants}
        assert all(submission.cells[c] == reference[c] for c in reference if c not in slipped)
        assert all(submission.cells[c] != reference[c] for c in slipped)


def test_a_notebook_whose_every_answer_raises_must_run_to_its_last_check_line():
    """An instructor trial's manual_backward raised (a key its cache does not hold), and Run All stopped at the
    generated locked cell that calls it: no check line below printed, and exercise check, whose slips never
    raise, said nothing. Its notebook of raising answers (a function's, when called) finds any such cell."""
    exercise = ex.load(f"{TINY}:EXERCISE")
    cells = dry_run.raising(exercise)
    assert set(cells) == set(exercise.answer_cells)
    assert all(cells[a.cell_id] == dry_run.RAISED + "\n" for a in exercise.answers if a.kind != ex.FUNCTION)
    namespace = {}
    exec(cells["fit_backward"], namespace)  # noqa: S102 - the test's own cell: it defines, and raises when called
    with pytest.raises(RuntimeError, match="stops with an error"):
        namespace["backward"](None, None, None, None)

    def cell(tags, grade_id):
        made = nbformat.v4.new_code_cell(metadata={"tags": tags, "nbgrader": {"grade_id": grade_id}})
        made.outputs = [nbformat.v4.new_output("error", ename="KeyError", evalue="'za'", traceback=[])]
        return made

    answered = nbformat.v4.new_notebook(cells=[cell(["raises-exception"], "fit_backward")])
    assert dry_run._stops(answered, "raising") == []
    locked = nbformat.v4.new_notebook(cells=[cell([], "setup_ex2_check")])
    assert dry_run._stops(locked, "raising") == [
        "the self-check: Run All of raising stops at the cell setup_ex2_check (KeyError: 'za'), and no check line "
        "below it prints: the notebook's own cell must not raise where a student's answer does"]


def _scores(tests: dict[str, dict[str, float]]) -> dry_run.Scores:
    return dry_run.Scores({stem: {g: (s, 1.0, f"{g}: wrong values") for g, s in got.items()}
                           for stem, got in tests.items()})


def test_each_problem_a_route_shows_is_one_line_naming_the_forward_line_and_the_fix():
    exercise = ex.load(f"{TINY}:EXERCISE")
    course = SimpleNamespace(exercise=exercise, points=dict.fromkeys(exercise.grade_ids, 1))
    solved, stub, *_, last = dry_run.submissions(exercise)  # the last carries the fewest slips
    made = [solved, stub, last]
    slip = made[2].mutants[0]
    own = slip.grade_ids[0]
    other = next(g for g in exercise.grade_ids if g not in made[2].own and g != "fit_training")
    full = dict.fromkeys(exercise.grade_ids, 1.0)
    scores = _scores({"solved": {**full, "dz": 0.0}, "stub": {**dict.fromkeys(full, 0.0), "db": 0.5},
                      made[2].stem: {**full, **dict.fromkeys(made[2].own, 0.0), other: 0.0, own: 1.0}})
    lines = dry_run._problems(course, "nbgrader autograde", scores, made)
    assert lines[0].startswith("nbgrader autograde: the solved notebook loses credit on dz (forward line "
                               "`loss = ((z - Y) ** 2).sum() / n`)"), lines
    assert "the stub gets credit on db" in lines[1] and "`h = e @ W + b`" in lines[1], lines
    assert f"the slip {slip.slip.name} in {slip.cell}" in lines[2] and "keeps full credit" in lines[2], lines
    assert f'accept={{"{slip.slip.gradient}": "{slip.slip.name}"}}' in lines[2], lines
    assert f"{other} loses credit with its reference answer" in lines[3], lines
    assert len(lines) == 4
    missing = dry_run._problems(course, "Gradescope", dry_run.Scores({}), made[:1])
    assert missing == ["Gradescope: solved got no grade at all"]


def _result(score: float, output: str = "dz: wrong values") -> dict:
    """What `grade` writes for one notebook graded on one tensor."""
    return {"score": score, "max_score": 1.0, "output": "", "flags": [],
            "tests": [{"name": "dz", "score": score, "max_score": 1.0, "output": output, "verdict": "wrong"}]}


def _fake_gradescope(monkeypatch, wrote: dict[str, dict]) -> list[str]:
    """dry_run's commands, with `gradescope build` writing a zip of one run_autograder and each run of it
    writing `wrote`'s results.json for its notebook; the names of the notebooks run, in order."""
    ran = []

    def run(command, cwd, what, env=None):
        if "build" in command:
            with zipfile.ZipFile(command[command.index("--out") + 1], "w") as bundle:
                info = zipfile.ZipInfo("run_autograder")
                info.external_attr = 0o755 << 16
                bundle.writestr(info, "#!/bin/sh\n")
        else:
            ran.append(cwd.name)
            (cwd / "results").mkdir()
            (cwd / "results" / "results.json").write_text(json.dumps(wrote[cwd.name]))
        return ""

    monkeypatch.setattr(dry_run, "_run", run)
    return ran


def test_gradescope_runs_its_zip_on_two_notebooks_and_reshapes_grades_results_for_the_rest(tmp_path, monkeypatch):
    """run_autograder is `grade` on one notebook, then for_gradescope: the zip runs for real on the solved
    notebook and the first slips' (and on a notebook grade gave nothing), the others are for_gradescope of
    grade's results; a real run that differs from that is one line naming the notebook."""
    graded = {"solved": _result(1.0), "stub": _result(0.0), "slips-1": _result(0.0), "slips-2": _result(0.5)}
    made = {stem: tmp_path / f"{stem}.ipynb" for stem in [*graded, "slips-3"]}
    for path in made.values():
        path.write_text("{}")
    course = SimpleNamespace(notebook="n.ipynb")
    reshaped = {stem: gradescope.for_gradescope(result, log=print) for stem, result in graded.items()}
    ran = _fake_gradescope(monkeypatch, {**reshaped, "slips-3": reshaped["stub"]})
    scores = dry_run._gradescope_route(tmp_path, course, tmp_path, made, graded)
    assert sorted(ran) == ["slips-1", "slips-3", "solved"]
    assert {stem: tests["dz"][0] for stem, tests in scores.by_stem.items()} == {
        "solved": 1.0, "stub": 0.0, "slips-1": 0.0, "slips-2": 0.5, "slips-3": 0.0}
    assert scores.how == "run_autograder on 3 of 5 notebooks, the others from grade's results"

    for folder in (tmp_path / "gradescope").iterdir():
        shutil.rmtree(folder)
    _fake_gradescope(monkeypatch, {**reshaped, "slips-1": reshaped["slips-2"], "slips-3": reshaped["stub"]})
    with pytest.raises(dry_run.RouteError, match=r"^Gradescope: run_autograder's results.json for slips-1 is not "
                                                 r"what `grade` gave it: score 0.5, not 0$"):
        dry_run._gradescope_route(tmp_path, course, tmp_path, made, graded)


def test_a_slip_the_feedback_does_not_name_is_a_warning_under_the_table():
    """A slip told only "wrong values" is a warning naming it; one told by its own sentence, or by what is
    wrong with its shape, is not."""
    exercise = ex.load(f"{TINY}:EXERCISE")
    slips = dry_run.submissions(exercise)[3]
    first, second, third, *_ = slips.mutants
    told = {first.grade_ids[0]: "wrong values (max abs diff 2), on a hidden configuration",
            second.grade_ids[0]: f"wrong values; {second.slip.sentence}",
            third.grade_ids[0]: "shape (3, 8), expected (8, 3); looks transposed"}
    scores = dry_run.Scores({slips.stem: {g: (0.0, 1.0, said) for g, said in told.items()}})
    assert dry_run._unnamed(scores, [slips]) == [
        f"warning: the slip {first.slip.name} in {first.cell} (your {first.slip.gradient} {first.slip.sentence}) "
        f"loses credit but is not named: the feedback says \"wrong values (max abs diff 2), on a hidden "
        f"configuration\""]
    # named in other words (the result's diagnosis), it is no warning; told only where it is wrong, it is
    for mistake, warned in (("the target's -1 is missing", False), ("wrong only in rows 1, 2 (2 of 8),", True)):
        scores.results = {slips.stem: {"tests": [{"name": first.grade_ids[0], "extra_data": {"mistake": mistake}}]}}
        assert bool(dry_run._unnamed(scores, [slips])) is warned, mistake


def _run_all(lines: dict[str, list[str]]):
    """A fake Run All in a kernel: each notebook's check cell prints its lines, as a kernel's stream output."""
    def ran(kernel, path):
        cell = {"cell_type": "code", "source": "check('dz')",
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "\n".join(lines[path.stem]) + "\n"}]}
        return nbformat.from_dict({"cells": [cell]})
    return ran


def test_the_self_check_must_say_what_the_grader_gives_each_answer(tmp_path, monkeypatch):
    """Each notebook run as a student runs it: a check line must give the share `grade` gave (WRONG with the
    share it still gets where points are lost, a right line where none are), and every graded answer
    needs its line; each disagreement is one line naming the notebook, the answer and its forward line."""
    exercise = ex.load(f"{TINY}:EXERCISE")
    course = SimpleNamespace(exercise=exercise, assignment="a")
    made = {stem: tmp_path / f"{stem}.ipynb" for stem in ("solved", "stub", "slips-1", "slips-2")}
    (tmp_path / "release" / "a").mkdir(parents=True)
    graded = dry_run.Scores({"solved": {"dz": (1.0, 1.0, ""), "fit_training": (2.0, 2.0, "")},
                             "stub": {"dz": (0.0, 1.0, "")},
                             "slips-1": {"dz": (0.5, 1.0, "")},
                             "slips-2": {"dz": (0.0, 1.0, ""), "db": (1.0, 1.0, "")}})
    monkeypatch.setattr(dry_run._Kernel, "_run_all", _run_all({
        "solved": ["dz             | exact: True  | approximate: True  | maxdiff: 0 | shape (8, 1) ok",
                   "training       | trains as autograd does"],
        "stub": ["dz             | not attempted yet"],
        "slips-1": ["dz             | WRONG: dh above is wrong; with the true dh this cell is right, but no"],
        "slips-2": ["dz             | WRONG (the grader gives half its points): right values, wrong shape"]}))
    slips = dry_run.submissions(exercise)[3]
    slip = next(m for m in slips.mutants if m.grade_ids[0] == "dz")
    problems, table = dry_run._self_check(tmp_path, course, made, graded, {"slips-2": slips})
    forward = "(forward line `loss = ((z - Y) ** 2).sum() / n`)"
    assert problems == [
        'the self-check on solved, fit_training (the training run): says "trains as autograd does", '
        "where grade --html --gradebook gives 2/2",
        f'the self-check on slips-1, dz {forward}: says "WRONG: dh above is wrong; with the true dh this cell is '
        f'right, but no", where grade --html --gradebook gives 0.5/1: a student would be told the wrong grade '
        f"before handing the notebook in",
        "the self-check on slips-2, db (forward line `h = e @ W + b`): no check line, where grade --html "
        "--gradebook gives 1/1: the notebook's check cell for it is missing or did not print",
        f'the self-check on slips-2, dz {forward}: says "WRONG (the grader gives half its points): right values, '
        f'wrong shape", where grade --html --gradebook gives 0/1: a student would be told the wrong grade before '
        f"handing the notebook in; the slip {slip.slip.name} (your dz {slip.slip.sentence}) is graded one way on "
        f"the self-check's batches and another on the hidden configurations, so its grade depends on the sizes "
        f'drawn: make it change its gradient more, or accept it: accept={{"dz": "{slip.slip.name}"}}'], problems
    assert table == "agrees with grade --html --gradebook on 2 of 5 answers in 4 notebooks"


def test_the_kernels_say_how_far_they_are(tmp_path, monkeypatch):
    """An instructor trial's GRU sat a quarter of an hour on "running 52 notebooks in kernels" with no other line:
    each notebook done is said, at most once a PROGRESS, and the last is the table's."""
    course = SimpleNamespace(exercise=ex.load(f"{TINY}:EXERCISE"), assignment="a")
    made = {stem: tmp_path / f"{stem}.ipynb" for stem in ("solved", "stub", "slips-1")}
    (tmp_path / "release" / "a").mkdir(parents=True)
    monkeypatch.setattr(dry_run._Kernel, "_run_all", _run_all({stem: [] for stem in made}))
    monkeypatch.setattr(dry_run, "PROGRESS", 0)
    said = []
    dry_run._self_check(tmp_path, course, made, dry_run.Scores({}), {}, said.append)
    assert [line.split(",")[0] for line in said] == ["  1 of 3 notebooks run in kernels",
                                                     "  2 of 3 notebooks run in kernels"], said
    monkeypatch.setattr(dry_run, "PROGRESS", 3600)
    said.clear()
    dry_run._self_check(tmp_path, course, made, dry_run.Scores({}), {}, said.append)
    assert said == []


@pytest.mark.parametrize("text, share", [
    ("exact: False | approximate: True  | maxdiff: 1e-08 | shape (3,) ok", 1.0),
    ("dh above is wrong; with the true dh this cell is right", 1.0),
    ("dh above is out of date (dlogits changed since it ran): re-run the cells from dh's down to this one; this "
     "cell itself is right", 1.0),
    ("not attempted yet", 0.0),
    ("WRONG: dz: wrong values", 0.0),
    ("WRONG (the grader gives half its points): right with the upstream gradients given", 0.5),
    ("WRONG (right values, wrong shape; the grader gives 0.25 of its points)", 0.25),
    ("3 steps match autograd: loss 3.2958 -> 3.1104", 1.0),
    ("not checked: run the notebook's setup cells first", None)])
def test_a_check_lines_share_is_read_as_the_self_check_words_it(text, share):
    from grader.student.selfcheck import share_said

    assert share_said(text) == share


def test_quick_leaves_out_nbgrader_autograde_alone():
    """The dry run through every route, a route that breaks named in its table, is played from the wheel as an
    instructor runs it (tests/test_own_exercise_wheel.py); --quick drops only nbgrader's autograde."""
    def routes(quick):
        return [name for name, _ in dry_run._routes(Path("course"), None, Path("work"), {}, [], quick)]

    assert routes(False) == [dry_run.GRADE, dry_run.GRADESCOPE, dry_run.NBGRADER]
    assert routes(True) == [dry_run.GRADE, dry_run.GRADESCOPE]


def test_a_slip_equal_to_the_right_answer_everywhere_is_refused_unless_accepted(tmp_path):
    """A mask of zeros on every configuration, the hidden ones too: leaving its branch out of dh is the right
    answer there, so every route grades it full; the rule table used to drop it silently, a note then listed it
    (an instructor trial's GRU started from `h0 = zeros(N, H)`: 60 slips listed without a word), and a second GRU
    trial's `dr1 = torch.zeros_like(r1)` scored full past that note: it is refused, with what to change."""
    path = tmp_path / "zero.py"
    path.write_text(HIDING.replace("ACCEPT", "").replace("* (n == 8)", "* 0"), encoding="utf-8")
    code, out = check(path)
    assert code == 1, out
    assert ("3 slips of the rule table score full on every configuration, the course's hidden ones too: each changes "
            "a term that reads M, which is zeros in every configuration (the term vanishes, the slip with it): draw M "
            "at random (M = randn(...) * 0.1) to grade them, or accept each in the file") in out, out
    assert out.rstrip().endswith("dh forward-value, dh missed-factor, dh overwrite"), out
    path = tmp_path / "accepted_zero.py"  # a file of another name: this process keeps the first one loaded
    path.write_text(HIDING.replace("ACCEPT", 'accept={"dh": "forward-value missed-factor overwrite"},')
                    .replace("* (n == 8)", "* 0"), encoding="utf-8")
    code, out = check(path)
    assert code == 0 and "slips equal the right answer" not in out, out


SYMMETRIC = '''from grader.authoring.define import exercise

EXERCISE = exercise(
    name="symmetric", title="A product with a symmetric matrix of a fixed size",
    sizes={"n": (8, (6, 30)), "k": 4},
    parameters="W = randn(k, k)",
    data="X = randn(n, k)\\nS0 = randn(k, k)",
    forward="""
        S = S0 + S0.T
        h = X @ W
        z = h @ S
        loss = (z ** 2).mean()
    """,
)
'''


def test_a_transpose_slip_hidden_by_a_symmetric_matrix_of_a_fixed_size_says_what_to_change(tmp_path):
    """A third instructor trial's im2col (9 positions by 9 kernel entries, at sizes fixed everywhere): its missing
    transpose got full marks, and the note said neither why nor what to change, and that the grader might still
    grade it on its own draws, which keep those sizes."""
    path = tmp_path / "symmetric.py"
    path.write_text(SYMMETRIC, encoding="utf-8")
    code, out = check(path)
    assert code == 0, out
    assert "a transpose changes nothing on a square, symmetric matrix, and k is the same in every configuration" \
        in out and "may still, on its own draws" not in out, out


def test_two_sizes_of_one_notebook_value_are_noted(tmp_path):
    """A second instructor trial's n and nh were both 32: `h @ W2` for `h.T @ W2` ran in the notebook and failed only
    on hidden configurations, whose messages feedback withholds, so the student was told no fix."""
    path = tmp_path / "same.py"
    path.write_text(HIDING.replace("ACCEPT", "").replace('"hidden": (4, (2, 10))', '"hidden": (8, (2, 10))')
                    .replace("* (n == 8)", ""), encoding="utf-8")
    code, out = check(path)
    assert code == 0, out
    assert ("note: n and hidden are all 8 at the notebook's sizes, so a product or a sum that mixes them up runs "
            "there and fails only on hidden configurations") in out, out
    apart = tmp_path / "apart.py"
    apart.write_text(HIDING.replace("ACCEPT", "").replace("* (n == 8)", ""), encoding="utf-8")
    code, out = check(apart)
    assert code == 0 and " are all " not in out, out


def test_gradients_zero_on_every_derivation_configuration_are_named_as_the_cause(tmp_path):
    """An instructor trial's triplet loss: no triplet of its data broke the margin, so the loss was 0 and every
    gradient behind the hinge zero; the note listed 10 slips "not graded" with no cause (the GRU's zeros had
    one), though the course's grader did grade them on its own draws."""
    path = tmp_path / "hinge.py"
    path.write_text(HIDING.replace("ACCEPT", "").replace("M = randn(n, hidden) * (n == 8)", "M = randn(n, hidden)")
                    .replace("loss = (z ** 2).sum() / n", "loss = (z.sum(1) - 1000).clamp(min=0).mean()"),
                    encoding="utf-8")
    code, out = check(path)
    assert code == 0, out
    note = next(line for line in out.splitlines() if line.startswith("note: "))
    assert "this check cannot grade them (the course's grader may still, on its own draws)" in note, note
    assert "; dz, dh, db, dW are zero on every derivation configuration (the loss does not move with them there: " \
           "a hinge, a clamp or a ReLU never active on the data drawn?)" in note, note
    assert "draw data that makes them active" in note
    # a blind instructor trial's max branch and bias before batch norm are zero for any data: said too
    assert "where they are zero for any data (a term that cancels, a bias before a normalization), those slips are " \
        "no mistakes to grade" in note, note


CS231N = ROOT / "tests" / "exercises" / "cs231n_net.py"


@pytest.mark.parametrize(("code", "sentence"), [
    # The L2 term forgotten: told as the branch it misses, not as `=` where `+=` was needed.
    ("dW1 = X.T @ da1", "your dW1 misses the branch through reg_loss: W1 is used twice (in a1 and in reg_loss), so "
                        "its gradient is the sum of both"),
    # d(W1 * W1) taken as W1: one of the step's two reads of W1 left out.
    ("dW1 = X.T @ da1 + 0.05 * W1 * dreg_loss", "your dW1 counts W1 once in reg_loss, which reads it twice: each read "
                                                "sends back its own term, and they add up"),
])
def test_a_forgotten_or_halved_l2_term_is_named_as_what_it_is(code, sentence):
    from grader import derive
    from grader.judge import neighbourhood
    from grader.judge.diagnose import name
    from grader.judge.exam import CHAIN, prepare

    cases = [prepare(config) for config in configs.generate(f"{CS231N}:EXERCISE", "l2 sentences", 2)]
    answer = cases[0].exercise.by_grade_id["dW1"]
    before = neighbourhood._RULE_TABLE[0]
    neighbourhood.use_rule_table(derive)  # as the hidden suite names slips
    try:
        tensors = []
        for case in cases:
            namespace = {**case.values, **case.upstream(answer, CHAIN), **case.sizes, **ex.NAMESPACE}
            exec(code, namespace)  # noqa: S102 - the test's own cell
            tensors.append((case, namespace["dW1"]))
        assert name(tensors, answer, CHAIN, 1e-5, 1e-8, code=code) == sentence
    finally:
        neighbourhood.use_rule_table(before)


def test_a_slip_is_named_once_in_the_note_and_its_sentence_names_each_use_once():
    """`W * W` reads W twice in one step, its derivative one term 2 * W: the note lists each slip once, no
    "multiplies by the other factor" (the other factor is W itself), and no sentence says `in reg_loss and in
    reg_loss`."""
    code, out = check(CS231N)
    assert code == 0, out
    note = next(line for line in out.splitlines() if line.startswith("note: ") and "equal the right answer" in line)
    listed = re.findall(r"(\w+ [\w-]+) \(your \w+ ", note)  # each slip with its sentence
    assert listed and len(listed) == len(set(listed)) and not [s for s in listed if s.startswith("dW1 ")], note
    from grader import derive
    sentences = [s.sentence for g in derive.for_exercise(ex.load(f"{CS231N}:EXERCISE")) for s in g.slips()]
    assert not [s for s in sentences if re.search(r"in (\w+) and in \1\b|in (\w+), in \2\b", s)], sentences


def test_a_kernel_that_fails_is_tried_again_and_then_said_to_be_jupyters(monkeypatch, tmp_path):
    """An instructor's trial: a kernel that died before replying (a loaded machine) made exercise check fail
    the exercise; the next run passed. Once is tried again; twice is the machine's fault, said as such."""
    failures = iter([RuntimeError("Kernel died before replying to kernel_info")])

    def ran(kernel, path):
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return nbformat.v4.new_notebook()

    monkeypatch.setattr(dry_run._Kernel, "_run_all", ran)
    assert isinstance(dry_run.ran_or_why(tmp_path / "solved.ipynb", tmp_path), nbformat.NotebookNode)
    monkeypatch.setattr(dry_run._Kernel, "_run_all",
                        lambda kernel, path: (_ for _ in ()).throw(RuntimeError("no kernel")))
    said = dry_run.ran_or_why(tmp_path / "solved.ipynb", tmp_path)
    assert said.endswith("Run All of solved could not run, twice: the Jupyter kernel failed (RuntimeError: no "
                         "kernel), a fault of this machine's Jupyter, not of the exercise: run exercise check again")


@pytest.mark.parametrize("spec", [*ex.BUILTIN, "makemore-mlp/relu-none",
                                  str(ROOT / "grader" / "exercises" / "gallery" / "rnn.py:EXERCISE")])
def test_the_dry_run_builds_the_course_of_the_exercise_it_was_given(spec):
    """`exercise check attention` built and graded the lecture's course (a gallery exercise by name was given to
    `course init` as no exercise at all), and proved that one."""
    args = dry_run._course_args(spec)
    if "--exercise" in args:
        file, _, attribute = args[args.index("--exercise") + 1].rpartition(":")
        built = ex.load(f"{file}:{attribute}")
    else:
        built = ex.load("makemore-mlp" + (f"/{args[1]}" if args else ""))
    assert built.name == ex.load(spec).name


@pytest.mark.slow
def test_a_gallery_exercise_by_name_makes_its_own_course(tmp_path):
    result = CliRunner().invoke(main, ["course", "init", str(tmp_path / "course"), *dry_run._course_args("attention")])
    assert result.exit_code == 0, result.output
    assert course_config.load(tmp_path / "course" / "course.yml").exercise.name == "attention"


@pytest.mark.parametrize(("change", "says"), [
    # an instructor trial's padding mask filled with -inf: a row masked whole is NaN in autograd's own run
    (("fused={},", "fused={}, backward=True, learning_rate=10,"),
     "the training check's own run, with autograd's gradients at learning rate 10, is not finite"),
    (("Y = randn(n, hidden)", "Y = randn(n, hidden).log()"), "the loss 'loss' is nan at Sizes("),
])
def test_a_loss_or_training_run_that_is_not_finite_is_one_line(tmp_path, change, says):
    """The trial's course was built without a word, its solved notebook lost the training check, the self-check
    told a right function "nan times autograd's", and `exercise check` crashed with a KeyError saying so."""
    path = tmp_path / "short.py"
    path.write_text(SHORT.replace("FUSED", "{}").replace(*change), encoding="utf-8")
    code, out = check(path)
    assert code == 1 and out.count("\n") == 1 and says in out, out


def test_a_problem_on_the_training_check_names_the_lines_it_trains_not_a_key_error():
    """The trial's `exercise check` crashed (KeyError: 'ex2_training') while saying the solved notebook lost it."""
    exercise = ex.load(f"{TINY}:EXERCISE")
    assert dry_run._line(exercise, exercise.training.grade_id) == \
        "`loss = ((z - Y) ** 2).sum() / n` and the lines before it"


def test_a_size_drawn_on_one_side_of_its_notebook_value_only_is_noted(tmp_path):
    """A range that ends at the notebook's value draws the size below it only: a slice to it is never caught."""
    path = tmp_path / "short.py"
    path.write_text(SHORT.replace("FUSED", "{}").replace('"hidden": (4, (2, 10))', '"hidden": (4, (2, 5))'),
                    encoding="utf-8")
    code, out = check(path)
    assert code == 0 and "note: hidden is never drawn above its notebook value 4 (its range is 2..4): an answer " \
        "that slices to 4 ([:4]) takes every entry everywhere and is never caught: widen the range past 4" in out, out
    assert "never drawn above" not in check(TINY)[1]


def test_a_fused_block_of_one_line_ending_at_an_intermediate_is_a_problem(tmp_path):
    """Its cell is the atomic cell's code again: an instructor trial's check failed on 27 self-check lines (a
    notebook run without cell ids cannot tell the two cells apart), none of which named the block."""
    path = tmp_path / "short.py"
    path.write_text(SHORT.replace("FUSED", '{"da": "z"}'), encoding="utf-8")
    code, out = check(path)
    assert code == 1 and out.count("\n") == 1 and "ex2_da spans one forward line (z = a + h), so its cell is da's " \
        "atomic cell again" in out and "end the block at a later tensor or at the loss, or drop it" in out, out


def test_a_matrix_symmetric_on_every_draw_is_said(_no_course):
    """An instructor trial's `dlse = -dlogp.sum(0, keepdim=True).T` got half its points unwarned: its positives at
    torch.arange(N) make dlogp symmetric on every draw. The check says which matrices are, and what that hides."""
    code, out = check(ROOT / "tests" / "exercises" / "paired_views.py")
    assert code == 0, out
    note = next((line for line in out.splitlines() if "symmetric on every derivation configuration" in line), "")
    assert note.startswith("note: dlogp is symmetric"), out
    assert "a transpose of it, or a sum over its other dimension, changes nothing there" in note
    assert "draw the data so that it is not symmetric" in note
    code, out = check("makemore-mlp")
    assert code == 0 and "symmetric on every" not in out, out


CANCELLING = '''from grader.authoring.define import exercise

EXERCISE = exercise(
    name="cancel", title="A triplet loss whose bias cancels",
    sizes={"n": (8, (6, 20)), "dim": (4, (2, 8)), "out": (3, (2, 6))},
    parameters="""
        W = randn(dim, out) * 0.5
        b = randn(out) * 0.1
    """,
    data="""
        xa = randn(n, dim)
        xp = xa + 0.1 * randn(n, dim)
        xn = randn(n, dim)
    """,
    forward="""
        ea = xa @ W + b
        ep = xp @ W + b
        en = xn @ W + b
        dap = ((ea - ep) ** 2).sum(1)
        dan = ((ea - en) ** 2).sum(1)
        loss = (dap - dan + 1.0).clamp(min=0).mean()
    """,
)
'''


def test_a_gradient_zero_on_every_draw_is_said_though_no_slip_hides_there(tmp_path, _no_course):
    """An instructor trial's triplet loss: its bias cancels, so db is zero (to round-off) on every draw, and
    `db = torch.zeros_like(b)` got the chain-only share unwarned."""
    path = tmp_path / "cancel.py"
    path.write_text(CANCELLING, encoding="utf-8")
    code, out = check(path)
    assert code == 0, out
    assert "note: db is zero on every derivation configuration (the loss does not move with it: a term that cancels" \
        in out, out


def test_a_product_regrouped_around_a_number_is_no_slip_listed(tmp_path, _no_course):
    """An instructor trial's attention head, `(q @ k.T) * hs ** -0.5`: the note listed "dq regrouped ... an elementwise
    product and a matrix product do not commute"; a number's factor commutes, so the regrouping is the answer."""
    path = tmp_path / "scaled.py"
    path.write_text(CANCELLING.replace('name="cancel"', 'name="scaled"').replace(
        "ea = xa @ W + b", "ea = 0.5 * xa @ W + b"), encoding="utf-8")
    code, out = check(path)
    assert code == 0, out
    assert "regrouped" not in out, out
