"""Files a course made with grader 0.1 keeps name grader's old flat import paths: its nbgrader_config.py
(the autograde preprocessor, the collector, the exporter, the feedback templates), its released notebook
(the self-check and the data loader) and its hidden suite. Each old path is the new module itself, so
whatever such a file reaches, by name or by attribute, is what the current grader uses."""
from __future__ import annotations

import importlib

import pytest
from traitlets.utils.importstring import import_item

OLD_TO_NEW = {
    "grader.nbgrader_plugin": "grader.lms.nbgrader",
    "grader.check": "grader.student.check",
    "grader.data": "grader.exercises.makemore_mlp.data",
    "grader.model": "grader.exercises.makemore_mlp.model",
    "grader.compare": "grader.judge.compare",
    "grader.exam": "grader.judge.exam",
    "grader.suite": "grader.judge.suite",
}


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_an_old_path_is_the_new_module(old):
    assert importlib.import_module(old) is importlib.import_module(OLD_TO_NEW[old])


@pytest.mark.parametrize("name", ["GradeInSandbox", "RestoreCells", "LmsCollector", "PerGradeIdExport"])
def test_nbgrader_finds_the_classes_an_old_config_names(name):
    """nbgrader (traitlets) imports a configured class by its dotted name, as grader 0.1's config wrote it."""
    new = importlib.import_module("grader.lms.nbgrader")
    assert import_item(f"grader.nbgrader_plugin.{name}") is getattr(new, name)


def test_an_old_hidden_suite_finds_the_makemore_names_it_imports():
    from grader.exercise import BY_GRADE_ID, EX4_CELL, EX4_TRAINING, Answer  # noqa: F401
    from grader.exercises.makemore_mlp import answers

    assert BY_GRADE_ID is answers.BY_GRADE_ID and (EX4_CELL, EX4_TRAINING) == ("ex4_backward", "ex4_training")
    with pytest.raises(AttributeError):
        importlib.import_module("grader.exercise").NO_SUCH_NAME  # noqa: B018
