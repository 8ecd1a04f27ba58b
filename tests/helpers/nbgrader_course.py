"""A real nbgrader course for tests/test_nbgrader.py: `backprop-ninja course init`, then nbgrader's own
commands as subprocesses, each in the folder where an instructor or a student would type it, with the
exchange in a world-writable temporary folder. Every command is recorded with its output, so that a
test names the one that failed instead of the whole course stopping at the first error.

Students are simulated under one user, as nbgrader's own docs do: `submit --student=<id>`, and each
student gets an exchange cache of their own (nbgrader keeps one per user; shared, a student's
`fetch_feedback` would also fetch everyone else's feedback).
"""
from __future__ import annotations

import fcntl
import html
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

TIMEOUT = 600


@dataclass
class Command:
    args: list[str]
    cwd: Path
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return (f"$ (cd {self.cwd} && {' '.join(self.args)})  -> exit {self.returncode}\n"
                f"{self.stderr[-4000:]}{self.stdout[-2000:]}")


@dataclass
class Course:
    """One instructor's course directory, its exchange and the students' home folders, under `tmp`."""

    tmp: Path
    course_id: str
    assignment: str
    name: str = "course"
    commands: list[Command] = field(default_factory=list)
    # What the tests read back besides files: each notebook as fetched (before any edit), the notebook
    # delivered by zip, and the fast route's `backprop-ninja grade` run.
    as_fetched: dict[str, bytes] = field(default_factory=dict)
    zip_notebook: str = ""
    grade: Command | None = None

    def __post_init__(self):
        self.dir = self.tmp / self.name
        self.exchange = self.tmp / "exchange"
        self.homes = self.tmp / "students"
        jupyter = self.tmp / "jupyter"
        # Nothing reads or writes the user's own Jupyter folders (config, data, the exchange cache).
        self.env = {**os.environ, "JUPYTER_CONFIG_DIR": str(jupyter / "config"),
                    "JUPYTER_DATA_DIR": str(jupyter / "data"),
                    "JUPYTER_RUNTIME_DIR": str(jupyter / "runtime")}

    # -----------------------------------------------------------------------------------------
    # Running commands

    def run(self, args: list[str], cwd: Path, *, must: bool = False) -> Command:
        exe = shutil.which(args[0])
        assert exe, f"{args[0]} is not on PATH"
        done = subprocess.run([exe, *args[1:]], cwd=cwd, env=self.env, capture_output=True, text=True,
                              timeout=TIMEOUT)
        command = Command(args, Path(cwd), done.returncode, done.stdout, done.stderr)
        self.commands.append(command)
        if must and done.returncode != 0:
            raise AssertionError(f"a step every later one needs failed:\n{command}")
        return command

    def nbgrader(self, *args: str, must: bool = False) -> Command:
        """An instructor's command, in the course directory."""
        return self.run(["nbgrader", *args], self.dir, must=must)

    def exchange_args(self, student: str | None = None) -> list[str]:
        args = [f"--Exchange.root={self.exchange}", f"--course={self.course_id}"]
        if student:
            args += [f"--student={student}", f"--Exchange.cache={self.tmp / 'cache' / student}"]
        return args

    def student(self, student: str, *args: str, must: bool = False) -> Command:
        """A student's command, in their home folder (where `fetch_assignment` puts the assignment)."""
        home = self.homes / student
        home.mkdir(parents=True, exist_ok=True)
        return self.run(["nbgrader", *args, self.assignment, *self.exchange_args(student)], home, must=must)

    def for_each(self, students, step) -> list:
        """One step for every student, side by side: each is its own process with its own folders."""
        with ThreadPoolExecutor(max_workers=4) as pool:
            return list(pool.map(step, students))

    def failed(self, name: str) -> list[Command]:
        return [c for c in self.commands if name in c.args and c.returncode != 0]

    def released_course(self, course_file: Path, checkout: Path) -> Course:
        """`course init` from `course_file`, then generate_assignment and release_assignment into a
        world-writable exchange (run in `checkout`, where the course's material is)."""
        self.run(["backprop-ninja", "course", "init", str(self.dir), "--course", str(course_file)], checkout,
                 must=True)
        self.nbgrader("generate_assignment", self.assignment, must=True)
        shutil.copytree(self.dir, self.generated)
        self.exchange.mkdir()
        os.chmod(self.exchange, 0o777)
        self.nbgrader("release_assignment", self.assignment, *self.exchange_args(), must=True)
        return self

    def copied(self, template: Path) -> Course:
        """This course as a copy of `template` (see `generated`): `course init` and generate_assignment's
        work without their cost."""
        shutil.copytree(template, self.dir, symlinks=True)
        shutil.copytree(template, self.generated, symlinks=True)
        return self

    @property
    def generated(self) -> Path:
        """The course as generate_assignment left it, before any student: what a second course made from
        the same course.yml (same secret salt) would hold."""
        return self.tmp / f"{self.name}-generated"

    def fast_route(self, name: str = "fast-course") -> Course:
        """A second course, this one as generate_assignment left it, grading the same `submitted/` in one
        `backprop-ninja grade --gradebook` instead of nbgrader's autograde (its run: `.grade`)."""
        fast = Course(self.tmp, self.course_id, self.assignment, name=name)
        shutil.copytree(self.generated, fast.dir)
        shutil.copytree(self.dir / "submitted", fast.dir / "submitted")
        fast.grade = fast.run(["backprop-ninja", "grade", "submitted", "--out", "fast", "--course", "course.yml",
                               "--gradebook", "gradebook.db"], fast.dir)
        return fast

    # -----------------------------------------------------------------------------------------
    # Paths

    def handed_in(self, student: str, change) -> None:
        """The released notebook, changed by `change` as a student's Jupyter would, where nbgrader's collect
        leaves it: for tests of grading, not of the exchange (tests/test_nbgrader.py runs that)."""
        path = self.submitted(student)
        path.parent.mkdir(parents=True)
        shutil.copy(self.released(), path)
        edit(path, change)

    def fetched(self, student: str) -> Path:
        return self.homes / student / self.assignment / f"{self.assignment}.ipynb"

    def released(self) -> Path:
        return self.dir / "release" / self.assignment / f"{self.assignment}.ipynb"

    def submitted(self, student: str) -> Path:
        return self.dir / "submitted" / student / self.assignment / f"{self.assignment}.ipynb"

    def autograded(self, student: str) -> Path:
        return self.dir / "autograded" / student / self.assignment / f"{self.assignment}.ipynb"

    def feedback(self, student: str) -> Path:
        return self.dir / "feedback" / student / self.assignment / f"{self.assignment}.html"

    def fetched_feedback(self, student: str) -> list[Path]:
        """What `fetch_feedback` gave the student: <assignment>/feedback/<timestamp>/<notebook>.html."""
        return sorted((self.homes / student / self.assignment / "feedback").glob(f"*/{self.assignment}.html"))


def generated(shared: Path, course_file: Path, checkout: Path, assignment: str) -> Path:
    """The course `course_file` makes, as `course init` (run in `checkout`) and nbgrader's generate_assignment
    leave it, built once under `shared` (a folder every worker of one test run sees) for every test that grades
    in a copy (`Course.copied`): the two commands cost ~15 CPU seconds each time, and tests/test_nbgrader.py
    runs them as an instructor does. The copy's nbgrader_config.py finds its own folder; its Exchange.root
    names the template's exchange, which no test that copies it releases into."""
    built = shared / "generated-course"
    with open(shared / "generated-course.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "generated-course.done").exists():
            shutil.rmtree(built, ignore_errors=True)
            course = Course(built, "", assignment)
            course.run(["backprop-ninja", "course", "init", str(course.dir), "--course", str(course_file)], checkout,
                       must=True)
            course.nbgrader("generate_assignment", assignment, must=True)
            (shared / "generated-course.done").touch()
    return built / "course"


# ---------------------------------------------------------------------------------------------
# Notebooks as a student's Jupyter leaves them


def grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def cell_by_grade_id(nb, gid: str):
    (cell,) = [c for c in nb.cells if grade_id(c) == gid]
    return cell


def set_answers(nb, sources: dict[str, str]) -> None:
    """Type `sources` into the answer cells, by grade id: only the source changes, never the metadata."""
    found = {grade_id(c) for c in nb.cells}
    assert set(sources) <= found, f"no such answer cells: {set(sources) - found}"
    for cell in nb.cells:
        if grade_id(cell) in sources:
            cell.source = sources[grade_id(cell)]


def stdout(text: str):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def stderr(text: str):
    return nbformat.v4.new_output("stream", name="stderr", text=text)


def result(value: str, count: int = 1):
    return nbformat.v4.new_output("execute_result", data={"text/plain": value}, execution_count=count)


def edit(path: Path, change) -> None:
    nb = nbformat.read(path, as_version=4)
    change(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)


# ---------------------------------------------------------------------------------------------
# Reading what students get


def text_of_html(path: Path) -> str:
    """The text a browser shows (tags dropped, entities decoded): the code and outputs as typed."""
    raw = path.read_text(encoding="utf-8")
    raw = re.sub(r"(?is)<(script|style)\b.*?</\1>", "", raw)
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def text_of_notebook(path: Path) -> str:
    """Every cell's source, every output's text and the metadata, as one string."""
    return Path(path).read_text(encoding="utf-8") + "\n" + "\n".join(_notebook_strings(nbformat.read(path, 4)))


def _notebook_strings(nb):
    for cell in nb.cells:
        yield cell.source
        for output in cell.get("outputs", []):
            if "text" in output:
                yield output["text"]
            for value in output.get("data", {}).values():
                yield value if isinstance(value, str) else str(value)


def public_text(source_nb) -> str:
    """The source notebook without its solution regions: what may be shown to anyone."""
    lines = []
    for cell in source_nb.cells:
        inside = False
        for line in cell.source.splitlines():
            if "### BEGIN SOLUTION" in line:
                inside = True
            elif "### END SOLUTION" in line:
                inside = False
            elif not inside:
                lines.append(line)
    return "\n".join(lines)


def files_under(*roots: Path) -> list[Path]:
    return sorted(p for root in roots if root.exists() for p in root.rglob("*") if p.is_file())
