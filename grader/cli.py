"""The `backprop-ninja` command. Each command only parses its options and forwards to one module;
heavy imports (torch, nbgrader, nbformat) happen inside the commands so that --help is instant."""
from __future__ import annotations

import gc
import os
import sys
import threading
import traceback
from pathlib import Path

import click
from click.core import ParameterSource

from grader import __version__, extract, safe_text
from grader.outputs.exports import FORMATS
from grader.sandbox.zygote import default_jobs
from grader.vocabulary import Flag


def course_option(help: str, default: str | None = None):
    """The --course option every command that reads a course.yml takes, with this command's `help`."""
    return click.option("--course", "course_file", default=default, show_default=default is not None,
                        type=click.Path(dir_okay=False, path_type=Path), help=help)


def _here(course_file: Path | None) -> Path | None:
    """--course when given, else ./course.yml when there is one."""
    return course_file if course_file is not None or not Path("course.yml").is_file() else Path("course.yml")


def _load_course(path: Path):
    from grader.course import CourseError, load

    try:
        return load(path)
    except CourseError as exc:
        # the default, ./course.yml, missing: where a course.yml is looked for (a student trial's grade of a notebook)
        hint = "; run this in the course's folder, or give its course.yml with --course" \
            if path == Path("course.yml") and not path.exists() else ""
        raise click.ClickException(f"{exc}{hint}") from None


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


class Report:
    """What a batch says as it goes, on stderr. On a terminal: a progress bar (count, rate, time left)
    redrawn under the notes; elsewhere (a log, CI) plain lines, one per note and one per chunk."""

    def __init__(self, stream=None):
        self.stream = stream or click.get_text_stream("stderr")
        self.terminal = self.stream.isatty()
        self.bar = None
        self.lock = threading.Lock()  # notes come from the threads that run submissions

    def note(self, line: str) -> None:
        line = safe_text.terminal(line)  # notes name submissions and quote their errors
        with self.lock:
            if self.bar is None:
                click.echo(line, file=self.stream)
            else:
                click.echo("\r\033[K" + line, file=self.stream)
                self.bar.render_progress()

    def tally(self, now) -> None:
        with self.lock:
            if not self.terminal:
                click.echo(str(now), file=self.stream)
                return
            if self.bar is None:
                self.bar = click.progressbar(length=now.total, label="grading", file=self.stream, show_pos=True,
                                             show_eta=False, item_show_func=lambda text: text)
                self.bar.__enter__()
            self.bar.update(now.done - self.bar.pos, f"{now.rate:.1f}/s, about {now.left:.0f} s left")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.render_finish()


def _torch_fault(exc: BaseException | None) -> BaseException | None:
    """torch failing to import, where `exc` is that or was raised while handling it (an exercise that cannot be
    loaded, a course.yml whose exercise cannot): missing, or broken (raised while one of torch's own modules ran:
    a shared library gone, a numpy it was not built for)."""
    while exc is not None:
        if isinstance(exc, ImportError) and exc.name == "torch":
            return exc
        if any(frame.name == "<module>" and f"{os.sep}torch{os.sep}" in frame.filename
               for frame in traceback.extract_tb(exc.__traceback__)):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


class _Commands(click.Group):
    """The commands, each importing torch only where it computes with tensors: one that needs it and cannot
    import it says so in one line, as a fault of the environment, never with a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Exception as exc:  # noqa: BLE001 - re-raised unless torch's import is what failed
            fault = _torch_fault(exc)
            if fault is None:
                raise
            raise click.ClickException(
                f"environment: torch cannot be imported ({type(fault).__name__}: {fault}); this command computes with "
                "tensors: install PyTorch as the README's first command does (pip install torch numpy "
                "--index-url https://download.pytorch.org/whl/cpu)") from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="backprop-ninja")
def main():
    """Backpropagation by hand through an MLP language model: exercises, self-checks and a hidden grader."""
    extract.skip_iri_parser()


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for one <submission>.json (Gradescope schema) per notebook, and grades.csv.")
@course_option("The course's configuration.", default="course.yml")
@click.option("--jobs", "-j", default=default_jobs(), show_default="the cores", type=click.IntRange(1, 256),
              help="Submissions run side by side, each in its own sandboxed process (with --scheduler: on each "
                   "Dask worker, by default as many as it has threads).")
@click.option("--resume", is_flag=True,
              help="Keep the results already in --out whose notebook, grader and course are unchanged.")
@click.option("--shard", "part", callback=_shard, metavar="I/N",
              help="Grade only the I-th of N deterministic slices of the batch (for a batch system).")
@click.option("--gradebook", type=click.Path(dir_okay=False, path_type=Path),
              help="Also record the scores in this nbgrader gradebook.db (submissions laid out as nbgrader's "
                   "submitted/<student>/<assignment>/<notebook>.ipynb) and write the autograded notebooks.")
@click.option("--scheduler", metavar="ADDRESS",
              help="Grade on the Dask cluster whose scheduler is at ADDRESS (e.g. tcp://10.0.0.5:8786); this "
                   "machine still reads the notebooks and writes the results. Needs backprop-ninja[dask].")
@click.option("--html", is_flag=True,
              help="Also write each student's feedback page, <submission>.html beside its .json: scores, feedback "
                   "and pictures of each wrong tensor, safe to hand to the student.")
@click.option("--allow-weaker-sandbox", "weaker", is_flag=True,
              help="Grade even where a wall course.yml's sandbox.require lists cannot be raised (see `backprop-ninja "
                   "sandbox check`); every result records the walls that were missing.")
def grade(paths, out, course_file, jobs, resume, part, gradebook, scheduler, html, weaker):
    """Grade notebooks: each PATH is a notebook or a folder searched recursively for them."""
    if scheduler is None:
        from grader.sandbox import zygote

        zygote.start()  # its second of importing torch overlaps this process's own
        gc.disable()  # until the Grader freezes what start-up built (collecting it delayed the first result 0.3 s)
    try:
        from grader.outputs.results import table
        from grader.pipeline.batch import grade as run

        course = _load_course(course_file)
        if not (course.autotests_dir / "pytest.ini").is_file():  # a copy of a checkout's course.yml (a student trial)
            raise click.ClickException(
                f"{course.path}: autotests: {course.autotests_dir} holds no hidden suite (its pytest.ini): grade with "
                "the course.yml beside its autotests/ folder, or make a course of your own with backprop-ninja "
                "course init")
        if weaker:
            from grader.pipeline.batch import weaker_course

            course = weaker_course(course)
        if gradebook is not None and not gradebook.is_file():
            raise click.ClickException(f"{gradebook}: no such gradebook (run nbgrader generate_assignment first)")
        from grader.extract import discover

        if not discover(list(paths)):
            raise click.ClickException(f"no notebooks (*.ipynb) found in {', '.join(map(str, paths))}")
        source = click.get_current_context().get_parameter_source("jobs")
        if scheduler is not None and source is ParameterSource.DEFAULT:
            jobs = None  # this machine's core count says nothing of a worker's
        record = None
        if gradebook is not None:
            from grader.lms.gradebook import GradebookError, Recorder

            try:
                record = Recorder(gradebook, log=lambda line: click.echo(safe_text.terminal(line), err=True))
            except GradebookError as exc:
                raise click.ClickException(str(exc)) from None
        report = Report()
        try:
            with report:
                pairs = run(list(paths), course, out, jobs=jobs, resume=resume, part=part, scheduler=scheduler,
                            html=html, record=record, settle=record and (lambda rs: record.settle(out, rs)),
                            progress=report.note, tally=report.tally)
        except (RuntimeError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            click.echo(f"interrupted: the results finished so far are in {out}/; rerun with --resume to finish",
                       err=True)
            sys.exit(130)
        except Exception as exc:  # a fault of the grader's own: the batch stops, and no submission is blamed
            raise click.ClickException(f"the grader failed (its own fault, not a submission's): "
                                       f"{type(exc).__name__}: {exc}") from None
        finally:
            if record is not None:
                record.close()
        results = [result for _, result in pairs]
        click.echo(table(results))
        pages = " and a feedback page (.html)" if html else ""
        unread = sum(not r.graded for r in results)
        click.echo(f"\n{len(results) - unread} submission(s) graded"
                   + (f", {unread} not graded (see the notes)" if unread else "")
                   + f"; results in {out}/ (a grades CSV and one .json{pages} each)")
        if record is not None:
            click.echo(f"{record.recorded} submission(s) recorded in {gradebook}")
            if record.recorded < len(pairs):
                raise click.ClickException(f"{len(pairs) - record.recorded} submission(s) not recorded in the "
                                           "gradebook: see the lines above")
        if any(f["kind"] == Flag.GRADER_ERROR for r in results for f in r.flags):
            raise click.ClickException("the hidden suite failed on some tests: see the flags in the results")
    finally:
        gc.enable()


@main.command()
@course_option("The course's configuration (default: ./course.yml if any, else the package's template).")
@click.option("--out", "out", default="demo-results", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Where the demo writes what it produces.")
def demo(course_file, out):
    """Run the bundled course through nbgrader: create, release, submit, autograde, feedback."""
    from grader.demo import run
    from grader.lms.course_init import default_course

    course = _load_course(course_file or default_course())
    sys.exit(run(course, out, echo=click.echo))


@main.group()
def course():
    """Set up an nbgrader course that this grader grades."""


@course.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@course_option("The course.yml to start from (default: ./course.yml if any, else the package's template).")
@click.option("--course-id", help="nbgrader's course id (default: course.yml's course_id).")
@click.option("--exchange", type=click.Path(file_okay=False, path_type=Path),
              help="nbgrader's exchange folder (default: DIRECTORY/exchange; on a shared server, one every user "
                   "may write).")
@click.option("--update", is_flag=True,
              help="DIRECTORY is a course written by course init: rewrite its source notebook, data and hidden "
                   "suite from its own course.yml (after changing points or exercises) and run nbgrader "
                   "generate_assignment again.")
@click.option("--variant", help="Grade this variant of the exercise (`backprop-ninja variants` lists them), or "
                                 "from-salt: one drawn from the new course's secret salt.")
@click.option("--exercise", "exercise_file", metavar="FILE[:ATTRIBUTE]",
              help="Grade an exercise of your own (ATTRIBUTE defaults to EXERCISE): the file is copied into the "
                   "course, its notebooks and reference answers are derived from its forward pass. With --update, "
                   "the edited file replaces the course's copy.")
@click.option("--solutions", type=click.Choice(["gated", "off"]),
              help="off: a graded course (the notebook installs backprop-ninja-student and `solution` refuses); "
                   "gated: references after an attempt, for self-learners (default: course.yml's, else gated).")
@click.option("--group", help="The staff's group (TAs and instructor, no student), which shares the course: the "
                              "folder and all in it are the group's, setgid, and nbgrader's files are written for the "
                              "group to replace (umask 007 in nbgrader_config.py); `course check` verifies it.")
def course_init(directory, course_file, course_id, exchange, update, variant, exercise_file, solutions, group):
    """Write an nbgrader course in DIRECTORY: source notebook, hidden suite, course.yml, nbgrader_config.py."""
    from grader.lms.course_init import InitError, default_course, init, remember
    from grader.lms.course_init import update as refresh

    try:
        if update:
            if course_file or course_id or exchange or variant or solutions or group:
                raise click.UsageError("--update reads DIRECTORY's own course.yml and nbgrader_config.py: edit those "
                                       "instead of passing --course, --course-id, --exchange, --variant, "
                                       "--solutions or --group (--exercise FILE replaces the course's copy of its "
                                       "exercise)")
            for line in refresh(directory, exercise=exercise_file):
                click.echo(f"updated {line}")
            remember(Path(directory))
            return
        config = _load_course(course_file or default_course())
        written = init(config, directory, course_id=course_id, exchange=exchange, variant=variant,
                       exercise=exercise_file, solutions=solutions, group=group)
    except InitError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(_unwritable(exc, directory, group)) from None
    config = _load_course(Path(directory) / "course.yml")  # its own assignment, for an exercise of its own
    click.echo(f"wrote {len(written)} files in {directory}/ (a fresh secret salt is in its course.yml)")
    if exchange is None:
        click.echo(f"exchange: {directory}/exchange, inside the course folder, which only you may enter: on a shared "
                   "server give --exchange a folder every user may write (see the README's checklist)")
    chosen = solutions or config.solutions
    click.echo(f"solutions: {chosen} (" + ("the notebook installs backprop-ninja-student; `backprop-ninja solution` "
                                           "refuses for it" if chosen == "off" else
                                           "`backprop-ninja solution` shows a reference after an attempt") + ")")
    _name_formgrader_course(Path(directory))
    remember(Path(directory))
    click.echo(f"next: cd {directory} && nbgrader generate_assignment {config.assignment} && "
               f"nbgrader release_assignment {config.assignment}")


def _unwritable(exc: OSError, directory, group: str | None) -> str:
    """course init's one line for a folder it could not write. A course under a folder only root may write
    (/srv) is the usual one: its parent is an administrator's to make, for the instructor and the staff group."""
    import getpass

    where = exc.filename or directory
    if not isinstance(exc, PermissionError):
        return f"could not write {where}: {exc.strerror or exc}"
    owner = f"-o {getpass.getuser()} " + (f"-g {group} -m 0750" if group else "-m 0700")
    return (f"could not write {where}: permission denied (a folder only its owner or root may write): have an "
            f"administrator make it for you, `sudo install -d {owner} {where}`, then run course init again")


def _name_formgrader_course(directory: Path) -> None:
    """`course init` names its course as the caller's formgrader's, so that the hub recipe has no step of its own
    to forget; a course named there before is left, with the one command that switches."""
    from grader.lms.course_init import FormgraderConfigError, formgrader_config, formgrader_course

    switch = f"backprop-ninja course formgrader {directory.absolute()}"
    named = formgrader_course()
    if named is not None and named.absolute() != directory.absolute():
        # said as what it means for this course (an instructor trial read it as a note about the old one)
        click.echo(f"formgrader: your Jupyter configuration already names another course, {named}, so formgrader "
                   f"shows that one, not this; to grade this course in formgrader instead: {switch}")
        return
    try:
        said = formgrader_config(directory)
    except FormgraderConfigError as exc:
        click.echo(f"formgrader: {exc}", err=True)
        return
    for line in said:
        click.echo(line if line.startswith("warning: ") else f"formgrader: {line}", err=line.startswith("warning: "))
    # formgrader serves only a course inside one's own home: another TA's home is not the caller's
    where = directory.absolute()
    click.echo(f"formgrader: each other TA runs, once: ln -s {where} ~/{where.name} && backprop-ninja course "
               f"formgrader ~/{where.name}")


@course.command("formgrader")
@click.argument("directory", default=".", type=click.Path(exists=True, file_okay=False, path_type=Path))
def course_formgrader(directory):
    """Make formgrader, in the Jupyter server you start (on a hub, the one the hub starts in your home), grade
    the course in DIRECTORY: your own Jupyter nbgrader_config.py names it. Each TA runs it once."""
    from grader.lms.course_init import FormgraderConfigError, formgrader_config, remember

    if not (directory / "nbgrader_config.py").is_file():
        raise click.ClickException(f"{directory}: no nbgrader_config.py, so no course `course init` made")
    try:
        said = formgrader_config(directory)
    except FormgraderConfigError as exc:
        raise click.ClickException(str(exc)) from None
    remember(directory)
    for line in said:
        click.echo(line, err=line.startswith("warning: "))


@course.command("check")
@click.argument("directory", default=".", type=click.Path(exists=True, file_okay=False, path_type=Path))
def course_check(directory):
    """What of the course in DIRECTORY other users of this machine could read, and, in a course its staff's
    group shares, what another TA could not replace (exit 1 if anything); home folders others may enter are
    said too."""
    from grader.lms.course_init import exchange_of
    from grader.lms.privacy import check, homes, shared

    warnings, notes = check(directory, exchange_of(directory))
    staff = shared(directory, exchange_of(directory))
    for line in homes():  # outside the course: said, for the administrator, without failing the check
        click.echo(f"warning: {line}", err=True)
    for line in notes:
        click.echo(f"note: {line}")
    for line in warnings + staff:
        click.echo(f"warning: {line}", err=True)
    if warnings:
        raise click.ClickException(f"{len(warnings)} thing(s) in {directory} other users may read; see the README's "
                                   "checklist for a course on a shared server")
    if staff:
        raise click.ClickException(f"{directory}: the staff's group shares it, but {len(staff)} thing(s) keep another "
                                   "TA from replacing what they grade; see the README's checklist")
    click.echo(f"{directory}: nothing in it is readable by other users")


@main.command()
@click.argument("grade_id")
@click.option("--notebook", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Your notebook: the reference opens once its answer cell for GRADE_ID holds your attempt.")
@click.option("--force", is_flag=True, help="Show the reference without looking for an attempt.")
@click.option("--solved", type=click.Path(dir_okay=False, path_type=Path),
              help="The solved notebook (default: solutions/backprop_ninja_solved.ipynb beside course.yml, a "
                   "course directory's source notebook, or the checkout's).")
@course_option("The course.yml beside which to look for the solved notebook, and whose exercise it is (default: "
               "./course.yml only where this folder is a course you made or named with `course init` or `course "
               "formgrader`; elsewhere it may be a student's).")
@click.option("--exercise", "exercise_spec", metavar="FILE.py:ATTRIBUTE|NAME",
              help="The course's own exercise, where its course.yml is not at hand (the file released beside the "
                   "notebook). A notebook's own settings name only an exercise the package carries: no file a "
                   "notebook names is ever loaded.")
def solution(grade_id, notebook, force, solved, course_file, exercise_spec):
    """The reference answer for GRADE_ID, explained line by line, once NOTEBOOK holds your attempt at it."""
    from grader.exercise import ExerciseError
    from grader.exercise import load as load_exercise
    from grader.student.solution import SolutionError, show

    if notebook is None and not force:
        raise click.UsageError("--notebook is required: the reference opens once it holds your attempt (or --force)")
    course = _load_course(course_file) if course_file is not None else _own_course_here()
    try:
        exercise = None
        if exercise_spec is not None:
            module, colon, attribute = exercise_spec.rpartition(":")
            if module.endswith(".py") and not Path(module).is_file():
                raise click.ClickException(f"--exercise: no such file {module}")
            exercise = load_exercise(f"{Path(module).resolve()}{colon}{attribute}" if module.endswith(".py")
                                     else exercise_spec)
        text = show(grade_id, notebook, solved=solved, course=course, force=force, derived=_derived_references,
                    exercise=exercise)
    except ExerciseError as exc:
        raise click.ClickException(str(exc)) from None
    except SolutionError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(text)


def _own_course_here():
    """./course.yml, where this folder is a course the caller made or named (course init, course formgrader);
    else None, said on stderr when a course.yml is there: it may be a student's (a submission's folder, an LMS
    download unpacked), naming an exercise file that would run with the caller's rights, so only a course the
    caller's own record names, or --course, is ever loaded."""
    from grader.lms.course_init import own_courses

    here = Path("course.yml")
    if not here.is_file():
        return None
    if Path.cwd().resolve() in own_courses():
        return _load_course(here)
    click.echo("./course.yml not read: this folder is no course you made or named (`course init`, `course "
               "formgrader`), and a course.yml elsewhere may be a student's; pass --course course.yml to use it",
               err=True)
    return None


def _derived_references(exercise) -> dict[str, str]:
    """An exercise's answer cells as its solved notebook holds them, their references derived from its
    forward lines, for `solution` where no solved notebook is at hand; an exercise the rule table cannot
    derive is refused in one line."""
    from grader import derive
    from grader.authoring import skeleton
    from grader.lms import notebooks
    from grader.student.solution import SolutionError

    try:
        return {cell_id: notebooks.solved_answer(exercise, cell_id, source).source
                for cell_id, source in skeleton.references(exercise).items()}
    except derive.DeriveError as exc:
        raise SolutionError(f"exercise {exercise.name}: no solved notebook here, and {exc}") from None


@main.command()
@click.argument("name", required=False)
def variants(name):
    """Every variant of each exercise that has some, with what changes for the student in each; with NAME
    (`relu-layernorm`), that variant written out as an exercise file of your own, to edit and give to
    `course init --exercise`."""
    from grader.course.choice import exercise_file, listing

    if name is None:
        click.echo(listing(), nl=False)
        return
    try:
        click.echo(exercise_file(name), nl=False)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


@main.group()
def gradescope():
    """Grade on Gradescope: build the autograder zip, and the command it runs for each submission."""


@gradescope.command("build")
@course_option("The course's configuration.", default="course.yml")
@click.option("--out", default="autograder.zip", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path), help="The zip to upload to Gradescope.")
def gradescope_build(course_file, out):
    """Write the autograder zip: setup.sh, run_autograder, course.yml, the hidden suite and this grader."""
    from grader.lms.gradescope import BuildError, build

    try:
        names = build(_load_course(course_file), out)
    except (BuildError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    suite = sum(name.startswith("autotests/") for name in names)
    wheel = next(name for name in names if name.endswith(".whl"))
    click.echo(f"wrote {out}: setup.sh, run_autograder, course.yml, autotests/ ({suite} files), {wheel}")
    click.echo("it holds course.yml and its secret salt: upload it to Gradescope (the assignment's Configure "
               "Autograder page) and share it with course staff only, never with students")


@gradescope.command("run")
@click.option("--root", default="/autograder", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Gradescope's folder: source/ (the unpacked zip), submission/, results/.")
def gradescope_run(root):
    """Grade ROOT/submission into ROOT/results/results.json, whatever happens (what run_autograder calls)."""
    from grader.lms.gradescope import run

    result = run(root, log=click.echo)
    click.echo(f"score {result['score']:g}: {root / 'results' / 'results.json'}")


def _gradebook(results_dir: Path, given: Path | None) -> Path | None:
    """--gradebook, else nbgrader's beside RESULTS_DIR: the one source of scores (grader.outputs.final)."""
    from grader.outputs.final import beside, not_a_gradebook

    try:
        missing = not results_dir.is_dir()
    except OSError:  # a course folder the caller may not enter: said below, by the gradebook's path
        missing = False
    if missing:
        raise click.ClickException(f"{results_dir}: no such results folder (grade --out writes one)")
    try:
        gradebook = given or beside(results_dir)
    except OSError as exc:  # a course folder the caller may not enter
        raise click.ClickException(f"{exc.filename}: {exc.strerror}") from None
    why = None if gradebook is None else not_a_gradebook(gradebook)
    if why:
        raise click.ClickException(why)
    if gradebook is not None:
        click.echo(f"scores from the gradebook {gradebook}", err=True)
    return gradebook


@main.command()
@click.argument("results_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the report (default: RESULTS_DIR/report.html; with --json: standard output).")
@click.option("--json", "as_json", is_flag=True, help="The same content as JSON, for tools.")
@click.option("--submitted", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="The folder of submitted notebooks, to list those without a result (default: submitted/ "
                   "beside RESULTS_DIR, as in an nbgrader course).")
@click.option("--gradebook", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="nbgrader's gradebook.db to take the scores from, a TA's manual scores and late penalties "
                   "included (default: the one beside RESULTS_DIR, if any; else the results themselves).")
def report(results_dir, out, as_json, submitted, gradebook):
    """A class report of a results folder written by `grade --out`: one self-contained HTML page."""
    from grader.outputs.report import ReportError, run

    gradebook = _gradebook(results_dir, gradebook)
    try:
        run(results_dir, out, as_json, echo=click.echo, submitted=submitted, gradebook=gradebook)
    except (ReportError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.argument("results_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--format", "fmt", required=True, type=click.Choice(FORMATS),
              help="grade-ids: one row per submission and grade id; canvas: a Canvas gradebook import.")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="The CSV to write (default: grade_ids.csv or canvas.csv in RESULTS_DIR).")
@click.option("--roster", type=click.Path(dir_okay=False, path_type=Path),
              help="canvas: a gradebook CSV exported from the Canvas course, to take each student's identity from.")
@click.option("--column", help="canvas: the assignment's column (default: the roster's column for course.yml's "
                               "assignment with --course, else backprop-ninja).")
@course_option("The course's configuration, for the default --column and the gradebook's assignment.")
@click.option("--gradebook", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="nbgrader's gradebook.db to take the scores from, a TA's manual scores and late penalties "
                   "included (default: the one beside RESULTS_DIR, if any; else the results themselves).")
def export(results_dir, fmt, out, roster, column, course_file, gradebook):
    """Export a results folder for a spreadsheet or an LMS."""
    from grader.course import CourseError
    from grader.course import assignment as assignment_of
    from grader.outputs.exports import ExportError
    from grader.outputs.exports import export as run
    from grader.outputs.report import ReportError

    try:
        assignment = assignment_of(course_file) if course_file is not None else None
    except CourseError as exc:
        raise click.ClickException(str(exc)) from None
    if column is None:
        column = assignment or "backprop-ninja"
    gradebook = _gradebook(results_dir, gradebook)
    try:
        written = run(results_dir, fmt, out, roster, column,
                      warn=lambda line: click.echo(safe_text.terminal(line), err=True),
                      gradebook=gradebook, assignment=assignment)
    except (ExportError, ReportError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {written}")


@main.group()
def exercise():
    """Exercises of a course's own: a forward pass becomes a graded backprop exercise."""


@exercise.command("check")
@click.argument("spec")
@click.option("--quick", is_flag=True, help="Skip the nbgrader autograde route (the slowest); every other route "
                                            "still grades every notebook.")
def exercise_check(spec, quick):
    """Load SPEC (path/to/file.py[:ATTRIBUTE], module:ATTRIBUTE or a built-in name), validate it, draw its
    hidden sizes, run its forward pass, print the reference answers derived from it, then build its course
    in a temporary folder and grade the solved notebook, the stub and every slip of the rule table through
    every route that records a grade. Exit 1 with one line per problem."""
    from grader.authoring.exercise_check import CheckError, check
    from grader.lms.dry_run import dry_run

    if ":" not in spec and spec.endswith(".py"):
        spec += ":EXERCISE"
    try:
        lines = list(check(spec))  # all or nothing: a problem is the only line printed
    except CheckError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo("\n".join(lines))
    problems, table = dry_run(spec, quick=quick, log=lambda line: click.echo(line, err=True))
    if table:
        click.echo("\n" + "\n".join(table))
    if problems:
        click.echo("\n".join(safe_text.terminal(p) for p in problems), err=True)
        raise SystemExit(1)


@main.group()
def sandbox():
    """The sandbox that runs student code: which of its walls this machine can raise."""


@sandbox.command("check")
@course_option("Check the walls this course.yml requires (default: ./course.yml if any, else the default walls).")
def sandbox_check(course_file):
    """Start one sandboxed child as `grade` would, print each wall and whether a probe saw it hold, and
    exit non-zero if a required one is missing."""
    from grader.limits import WALLS
    from grader.pipeline.grading import kept_from_children
    from grader.sandbox import jail
    from grader.sandbox import parent as box

    course_file = _here(course_file)
    course = _load_course(course_file) if course_file is not None else None
    require = (course.limits if course is not None else box.Limits()).require
    try:
        # The folders `grade` hides (a batch's own are alike: folders beside the course), so that a wall
        # this check calls holding is one every grade run records holding.
        isolation = box.preflight(box.Limits(require=(), hide=kept_from_children(course)))
    except box.SandboxUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    for wall in WALLS:
        text = isolation["walls"][wall]
        mark = "required" if wall in require else "optional"
        click.echo(f"{wall:<13} {mark:<9} {text}")
    absent = [wall for wall in require if wall in isolation["missing"]]
    if absent:
        raise click.ClickException(f"required wall(s) missing: {', '.join(absent)}; "
                                   + jail.remedy(absent[0], isolation["walls"][absent[0]]))
    click.echo(f"every required wall holds ({', '.join(require) or 'none required'})")
