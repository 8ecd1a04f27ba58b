"""The sandbox and the oracle's side grade any Exercise: tests/exercises/tiny_relu.py, a second exercise
outside the grader package that names nothing the engine knows, named by module as a course names one on
its import path, runs through the same configurations, cases, fork server, child and reveal order as the
makemore course, and the child may read its module's own file and nothing else beside it.
"""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import exercises.tiny_relu as tiny
import pytest
import torch
from exercises.tiny_relu_solution import CELLS

from grader.exercise import ATOMIC
from grader.judge.configs import generate
from grader.judge.exam import CHAIN, LOCAL, prepare, prepare_training
from grader.sandbox import parent as sandbox
from helpers.paths import ROOT, outside_tmp

SPEC = "exercises.tiny_relu:EXERCISE"
EXERCISE = tiny.EXERCISE
LIMITS = sandbox.Limits(timeout=60, cell_timeout=10)


@pytest.fixture(scope="module")
def cases():
    return [prepare(c) for c in generate(SPEC, "any-exercise-salt", 4)]


@pytest.fixture(scope="module")
def training(cases):
    return prepare_training(cases[0].config, 4, 0.1)


def logged_run(cells, cases, training=None):
    """sandbox.run, with every message the parent sent, in order."""
    sent = []
    send = sandbox.Child.send

    def logged(self, header, tensors=None, *args, **kwargs):
        sent.append((header, dict(tensors or {})))
        return send(self, header, tensors, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sandbox.Child, "send", logged)
        attempt = sandbox.run(cells, cases, LIMITS, training)
    return attempt, sent


@pytest.fixture(scope="module")
def reference_run(cases, training):
    return logged_run(CELLS, cases, training)


def test_the_configurations_follow_the_exercise(cases):
    """Its ranges, its refusals (more rows than the vocabulary) and its init options, in a config that
    names it."""
    for case in cases:
        assert case.exercise is EXERCISE and case.config.exercise == SPEC
    scored = [c.config for c in cases if c.config.scored]
    assert all(c.sizes.n > c.sizes.vocab for c in scored)
    assert [c.init_options for c in scored] == [{}, {}, {}, {"scale": 0.5}]
    assert [c.config.sizes for c in cases if not c.config.scored] == [EXERCISE.lecture]


def test_every_reference_answer_comes_back_right(reference_run, cases):
    attempt, _ = reference_run
    assert attempt.error is None, attempt.error
    for case in cases:
        for grade_id in EXERCISE.chain_schedule():
            outcome = attempt.outcomes[(grade_id, CHAIN, case.config.name)]
            assert outcome.status == "tensor", (grade_id, outcome)
            assert torch.allclose(outcome.tensor, case.expected(EXERCISE.by_grade_id[grade_id], CHAIN)), grade_id
        for grade_id in case.local:
            outcome = attempt.outcomes[(grade_id, LOCAL, case.config.name)]
            assert torch.allclose(outcome.tensor, case.expected(EXERCISE.by_grade_id[grade_id], LOCAL)), grade_id
    assert set(cases[0].local) == {"da", "dh", "db", "dW", "de", "dE"}  # dz's only consumer is the loss: CHAIN only


def test_the_training_run_matches_autograd(reference_run, training):
    attempt, _ = reference_run
    outcome = attempt.outcomes[("fit_training", CHAIN, training.config.name)]
    assert outcome.status == "tensor", outcome
    assert torch.allclose(outcome.tensor, training.losses)
    assert set(outcome.extra) == {"E", "W", "b"}
    assert all(torch.allclose(outcome.extra[p], training.final[p]) for p in outcome.extra)


def test_a_true_gradient_is_revealed_only_after_every_case_answered_it(reference_run, cases):
    _, sent = reference_run
    asked, revealed = {}, {}
    for index, (header, tensors) in enumerate(sent):
        if header["op"] == "run_many" and header["check"] == CHAIN:
            for grade_id, case in header["requests"]:
                asked[(grade_id, case)] = index
        elif header["op"] == "upstream" and header["check"] == CHAIN:
            for name in tensors:
                revealed.setdefault((name, header["case"]), index)
    atomic = [a for a in EXERCISE.answers if a.kind == ATOMIC]
    assert {name for name, _ in revealed} == {a.variable for a in atomic}
    # The public (lecture-sized) case runs to its end first, then the hidden ones: within each phase a
    # case's truth waits for every case of the phase; a public truth is the public case's alone.
    for answer in EXERCISE.answers:
        gradient = "d" + answer.source
        for case in cases:
            if (gradient, case.config.name) in revealed:
                phase = [c for c in cases if c.config.scored == case.config.scored]
                last_asked = max(asked[(answer.grade_id, c.config.name)] for c in phase)
                assert last_asked < revealed[(gradient, case.config.name)], (answer.grade_id, case.config.name)
    public = [index for (_, case), index in asked.items() if case == "lecture-sizes"]
    hidden = [index for (_, case), index in asked.items() if case != "lecture-sizes"]
    assert not public or max(public) < min(hidden), "the public case is done before a hidden one is asked"


def test_a_cell_reads_only_the_gradients_it_is_given(cases):
    """The fused cell computes dh from the loss: da and dz, which the atomic cells before it assign, are
    not in its namespace; and a wrong atomic answer comes back as computed, to be judged in the parent."""
    cells = {**CELLS, "fused_dh": "dh = (h > 0).to(h.dtype) * da + dz\n", "dW": "dW = e.T @ dh * 2\n"}
    attempt = sandbox.run(cells, cases[:1], LIMITS)
    name = cases[0].config.name
    fused = attempt.outcomes[("fused_dh", CHAIN, name)]
    assert fused.status == "error" and fused.detail["error_type"] == "NameError", fused
    wrong = attempt.outcomes[("dW", CHAIN, name)]
    assert wrong.status == "tensor"
    assert not torch.allclose(wrong.tensor, cases[0].expected(EXERCISE.by_grade_id["dW"], CHAIN))


@pytest.mark.parametrize("named_by", ["module", "path"])
def test_the_child_reads_the_exercise_module_and_nothing_beside_it(cases, named_by, request):
    """Landlock grants the exercise's imported module files one by one, whether course.yml names it by
    module or by its file's path (a course's own, kept beside course.yml): the file the fork server
    imported is readable, the solution beside it and the folder's other files are not."""
    exercise = Path(tiny.__file__)
    solution = exercise.with_name("tiny_relu_solution.py")
    if named_by == "module":
        if exercise.is_relative_to(tempfile.gettempdir()):
            pytest.skip("a checkout under /tmp: the child's /tmp is its own, empty, whatever Landlock grants")
        case, other = cases[0], exercise.parent.parent / "conftest.py"
    else:
        course = outside_tmp(request, "bpn-course-")
        exercise, solution, other = (Path(shutil.copy(f, course)) for f in (exercise, solution, ROOT / "course.yml"))
        case = prepare(dataclasses.replace(cases[0].config, exercise=f"{exercise}:EXERCISE"))
    probe = ("ok = []\n"
             "for path in {paths!r}:\n"
             "    try:\n"
             "        open(path).close()\n"
             "        ok.append(1.0)\n"
             "    except PermissionError:\n"
             "        ok.append(0.0)\n"
             "dz = torch.tensor(ok)\n")
    attempt = sandbox.run({**CELLS, "dz": probe.format(paths=[str(exercise), str(solution), str(other)])}, [case],
                          LIMITS)
    assert attempt.error is None, attempt.error
    assert attempt.isolation["walls"]["landlock"].startswith("in force"), attempt.isolation["walls"]
    outcome = attempt.outcomes[("dz", CHAIN, case.config.name)]
    assert outcome.status == "forbidden-call"  # open() is reported; what the cell found is kept beside
    assert outcome.answered.tensor.tolist() == [1.0, 0.0, 0.0]


def test_an_exercise_the_fork_server_cannot_import_stops_the_batch_as_an_environment_error():
    with pytest.raises(sandbox.SandboxUnavailable, match="no_such_exercise_module"):
        sandbox.preflight(LIMITS, "no_such_exercise_module:EXERCISE")


def test_ranges_that_admit_no_configuration_stop_with_a_message(monkeypatch):
    """Two sizes drawn from one value can never differ: the exercise is at fault, and says so."""
    narrow = dataclasses.replace(EXERCISE, ranges={**EXERCISE.ranges, "n": (9, 10), "vocab": (9, 10)})
    monkeypatch.setattr(tiny, "NARROW", narrow, raising=False)
    with pytest.raises(ValueError, match="no sizes drawn from its ranges in 10000 tries suit configuration 1 of 4"):
        generate("exercises.tiny_relu:NARROW", "salt", 4)


def test_an_exercise_without_a_training_check_has_none_to_prepare(cases):
    config = dataclasses.replace(cases[0].config, exercise="exercises.tiny_relu:UNTRAINED")
    assert prepare_training(config, 4, 0.1) is None
    attempt = sandbox.run(CELLS, [prepare(config)], LIMITS, None)
    assert attempt.error is None and attempt.outcomes[("dW", CHAIN, config.name)].status == "tensor"
    assert not any(grade_id == "fit_training" for grade_id, _, _ in attempt.outcomes)
