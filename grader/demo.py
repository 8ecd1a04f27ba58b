"""`backprop-ninja demo`: the bundled course run through nbgrader end to end, in under a minute.

A throw-away course is created with `course init`; nbgrader generates and releases the assignment;
simulated students, the class the course's exercise declares (a correct one, typical mistakes, a blank
stub, a hostile notebook), fetch it, answer and submit; nbgrader collects, autogrades (with this grader in
place of its kernel), generates and releases feedback. nbgrader's own API runs every step in this one
process, so its several seconds of start-up are paid once rather than per command.
"""
from __future__ import annotations

import importlib
import shutil
import time
from pathlib import Path

import click


def students(exercise) -> dict:
    """The class the exercise's demo simulates (see Exercise.demo), by name."""
    module, _, attribute = exercise.demo.partition(":")
    if not attribute:
        raise click.ClickException(f"exercise {exercise.name} declares no simulated class, which the demo needs "
                                   "(the lecture's makemore-mlp does): grade its notebooks with backprop-ninja grade")
    return dict(getattr(importlib.import_module(module), attribute))


def _answers(course, changes) -> dict[str, str]:
    """The answer cells a simulated student writes: the reference answers where they are right."""
    import nbformat

    if changes is None:
        return {}
    from grader.lms.course_init import SOLVED, material_root

    solved = nbformat.read(material_root(course) / SOLVED, as_version=4)
    markers = ("### BEGIN SOLUTION", "### END SOLUTION")
    answers = {c.metadata["nbgrader"]["grade_id"]: "\n".join(line for line in c.source.splitlines()
                                                             if line.strip() not in markers)
               for c in solved.cells if c.metadata.get("nbgrader", {}).get("solution")}
    return {**answers, **({} if changes == "solved" else changes)}


def _api(root: Path, exchange: Path):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config, PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    config.merge(Config({"Exchange": {"root": str(exchange), "cache": str(exchange.parent / "cache")},
                         "CourseDirectory": {"root": str(root)}}))
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def _check(step: str, outcome: dict) -> None:
    if not outcome.get("success", True):
        raise RuntimeError(f"nbgrader {step} failed: {outcome.get('error') or outcome.get('log')}")


def _student(api, course, name: str, changes, home: Path) -> None:
    import nbformat
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(course_id=course.course_id, assignment_id=course.assignment, student_id=name,
                                parent=api)
    home.mkdir(parents=True)
    fetch = api.exchange.FetchAssignment(coursedir=coursedir, authenticator=api.authenticator, parent=api,
                                         assignment_dir=str(home))
    fetch.start()
    path = home / course.assignment / course.notebook
    notebook = nbformat.read(path, as_version=4)
    answers = _answers(course, changes)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    nbformat.write(notebook, path)
    api.exchange.Submit(coursedir=coursedir, authenticator=api.authenticator, parent=api,
                        assignment_dir=str(home)).start()


def _table(api, course, students) -> str:
    from grader.vocabulary import GRADE_CELL_PREFIX

    lines = [f"{'student':<8} {'score':>12}  tensors that lost points"]
    with api.gradebook as gb:
        for name in students:
            submission = gb.find_submission(course.assignment, name)
            lost = [g.name.removeprefix(GRADE_CELL_PREFIX) for nb in submission.notebooks for g in nb.grades
                    if g.score < g.max_score]
            shown = ", ".join(lost) if len(lost) <= 8 else f"all {len(lost)}" if lost and not submission.score \
                else f"{len(lost)} tensors"
            lines.append(f"{name:<8} {submission.score:>5g} / {submission.max_score:<5g}  {shown or '-'}")
    return "\n".join(lines)


def run(course, out: Path, echo) -> int:
    import logging
    import warnings

    from grader.lms.course_init import init

    started = time.monotonic()
    simulated = students(course.exercise)  # before the folder of an earlier demo is removed
    out = Path(out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    root, exchange = out / "course", out / "exchange"
    exchange.mkdir(parents=True)
    exchange.chmod(0o777)
    init(course, root, exchange=exchange)
    echo(f"1. Course created in {root} (source, hidden suite, course.yml, nbgrader_config.py)")
    warnings.simplefilter("ignore")  # nbgrader's gradebook trips SQLAlchemy warnings that are not ours
    logging.getLogger("traitlets").setLevel(logging.ERROR)
    api = _api(root, exchange)
    api.log.setLevel(logging.ERROR)
    _check("generate_assignment", api.generate_assignment(course.assignment))
    _check("release_assignment", api.release_assignment(course.assignment))
    echo("2. nbgrader generated and released the assignment (solutions cleared, one blank per gradient)")
    for name, changes in simulated.items():
        _student(api, course, name, changes, out / "students" / name)
    echo(f"3. {len(simulated)} students fetched, answered and submitted: {', '.join(simulated)}")
    _check("collect", api.collect(course.assignment))
    from grader.course import load

    graded = load(root / "course.yml")
    for name in simulated:
        _check(f"autograde {name}", api.autograde(course.assignment, name))
    echo("4. nbgrader collected and autograded them: each answer cell ran in the sandbox, no kernel ran a notebook\n")
    echo(_table(api, graded, simulated))
    from grader.outputs.report import write_html

    report = write_html(root / "results")  # autograde wrote every result there (see nbgrader_config.py)
    _check("generate_feedback", api.generate_feedback(course.assignment))
    _check("release_feedback", api.release_feedback(course.assignment))
    feedback = root / "feedback"
    mistaken = next((n for n, changes in simulated.items() if isinstance(changes, dict)), next(iter(simulated)))
    echo(f"\n5. Feedback generated and released: {feedback}/<student>/{course.assignment}/"
         f"{Path(course.notebook).stem}.html")
    echo("   Each opens with the student's feedback page: scores, feedback, and pictures of each wrong tensor "
         f"(e.g. {feedback / mistaken / course.assignment / Path(course.notebook).stem}.html)")
    echo(f"   Gradebook: {root / 'gradebook.db'} (a score per tensor); formgrader works on {root}")
    echo(f"   Class report: {report} (open it in a browser; each student's .json and .html page beside it)")
    echo(f"Done in {time.monotonic() - started:.0f} s.")
    return 0
