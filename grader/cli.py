"""The `backprop-ninja` command. Each command only parses its options and forwards to one module;
heavy imports (torch, nbgrader, nbformat) happen inside the commands so that --help is instant."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from grader import __version__


def _load_course(path: Path):
    from grader.course import CourseError, load

    try:
        return load(path)
    except CourseError as exc:
        raise click.ClickException(str(exc)) from None


def _shard(ctx, param, value):
    if value is None:
        return None
    try:
        index, count = (int(x) for x in value.split("/"))
    except ValueError:
        raise click.BadParameter("expected I/N, e.g. 2/8") from None
    if not 1 <= index <= count:
        raise click.BadParameter(f"I must be between 1 and N, got {value}")
    return index, count


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="backprop-ninja")
def main():
    """Backpropagation by hand through an MLP language model: exercises, self-checks and a hidden grader."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for one <submission>.json (Gradescope schema) per notebook, and grades.csv.")
@click.option("--course", "course_file", default="course.yml", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path), help="The course's configuration.")
@click.option("--jobs", "-j", default=os.cpu_count() or 1, show_default=True, type=click.IntRange(1, 256),
              help="Submissions run side by side, each in its own sandboxed process.")
@click.option("--resume", is_flag=True,
              help="Keep the results already in --out whose notebook, grader and course are unchanged.")
@click.option("--shard", "part", callback=_shard, metavar="I/N",
              help="Grade only the I-th of N deterministic slices of the batch (for a batch system).")
@click.option("--gradebook", type=click.Path(dir_okay=False, path_type=Path),
              help="Also record the scores in this nbgrader gradebook.db (submissions laid out as nbgrader's "
                   "submitted/<student>/<assignment>/<notebook>.ipynb) and write the autograded notebooks.")
def grade(paths, out, course_file, jobs, resume, part, gradebook):
    """Grade notebooks: each PATH is a notebook or a folder searched recursively for them."""
    from grader.grade import grade as run
    from grader.results import table

    course = _load_course(course_file)
    if gradebook is not None and not gradebook.is_file():
        raise click.ClickException(f"{gradebook}: no such gradebook (run nbgrader generate_assignment first)")
    from grader.extract import discover

    if not discover(list(paths)):
        raise click.ClickException(f"no notebooks (*.ipynb) found in {', '.join(map(str, paths))}")
    try:
        pairs = run(list(paths), course, out, jobs=jobs, resume=resume, part=part,
                    progress=lambda line: click.echo(line, err=True))
    except (RuntimeError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        click.echo(f"interrupted: the results finished so far are in {out}/; rerun with --resume to finish",
                   err=True)
        sys.exit(130)
    results = [result for _, result in pairs]
    click.echo(table(results))
    click.echo(f"\n{len(results)} submission(s) graded; results in {out}/ (a grades CSV and one .json each)")
    if gradebook is not None:
        from grader.gradebook import GradebookError, write

        try:
            recorded = write(gradebook, pairs, log=lambda line: click.echo(line, err=True))
        except GradebookError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"{recorded} submission(s) recorded in {gradebook}")
        if recorded < len(pairs):
            raise click.ClickException(f"{len(pairs) - recorded} submission(s) not recorded in the gradebook: "
                                       "see the lines above")
    if any(f["kind"] == "grader-error" for r in results for f in r.flags):
        raise click.ClickException("the hidden suite failed on some tests: see the flags in the results")


@main.command()
@click.option("--course", "course_file", default="course.yml", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path), help="The course's configuration.")
@click.option("--out", "out", default="demo-results", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Where the demo writes what it produces.")
def demo(course_file, out):
    """Run the bundled course through nbgrader: create, release, submit, autograde, feedback."""
    from grader.demo import run

    course = _load_course(course_file)
    sys.exit(run(course, out, echo=click.echo))


@main.group()
def course():
    """Set up an nbgrader course that this grader grades."""


@course.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--course", "course_file", default="course.yml", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path), help="The course.yml to start from.")
def course_init(directory, course_file):
    """Write an nbgrader course in DIRECTORY: source notebook, hidden suite, course.yml, nbgrader_config.py."""
    from grader.course_init import InitError, init

    config = _load_course(course_file)
    try:
        written = init(config, directory)
    except InitError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {len(written)} files in {directory}/ (a fresh secret salt is in its course.yml)")
    click.echo(f"next: cd {directory} && nbgrader generate_assignment {config.assignment}")
