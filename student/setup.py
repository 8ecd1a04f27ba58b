"""backprop-ninja-student: what the released notebook imports, and nothing else.

It is made from the very modules of backprop-ninja that the self-check and the data loader need (so the
two never differ), plus the lecture's names.txt with its licence. It holds no reference answer, no
solved notebook, no hidden suite and no command: a graded course (course.yml `solutions: off`) has its
students install this. It must be built from a checkout (pip wheel student/ --no-build-isolation), whose
grader/ it reads; the two packages both provide `grader`, so install one or the other.
"""
import ast
import re
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

CHECKOUT = Path(__file__).resolve().parent.parent
# What notebooks import: the self-check and the lecture's data loader.
NOTEBOOK_IMPORTS = ("grader", "grader.exercises.makemore_mlp.data", "grader.student.check")


def _file(module: str) -> Path | None:
    """The source file of a grader module or package, None for a name that is neither."""
    path = CHECKOUT.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def registered_exercises() -> tuple[str, ...]:
    """The modules grader/exercise.py names in strings (`"grader.exercises.x:EXERCISE"`): its registry of
    exercises, which the self-check loads by the course's name for one, an import no source spells out."""
    strings = (n.value for n in ast.walk(ast.parse(_file("grader.exercise").read_text(encoding="utf-8")))
               if isinstance(n, ast.Constant) and isinstance(n.value, str))
    modules = tuple(m for m in dict.fromkeys(s.partition(":")[0] for s in strings)
                    if m.startswith("grader.") and _file(m) is not None)
    if not modules:
        raise SystemExit("grader/exercise.py registers no exercise: the self-check could load none")
    return modules


def imported_modules() -> list[str]:
    """What notebooks import, the registered exercises and every grader module they import, however
    deep, with the packages that hold them: read from the sources, so a module the self-check starts to
    import is in the next wheel without anyone editing a list here (a hand-kept list went stale and the
    installed self-check failed on import). What they pull in is guarded by the tests that search the
    built package for reference answers."""
    found, todo = set(), [*NOTEBOOK_IMPORTS, *registered_exercises()]
    while todo:
        name = todo.pop()
        if name in found or _file(name) is None:
            continue
        found.add(name)
        todo += [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        for node in ast.walk(ast.parse(_file(name).read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").partition(".")[0] == "grader":
                todo += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.partition(".")[0] == "grader"]
    return sorted(found)


DATA = ("assignments/backprop_ninja/names.txt", "assignments/backprop_ninja/names.LICENSE")


class StudentModules(build_py):
    def run(self):
        package = Path(self.build_lib) / "grader"
        for name in imported_modules():
            source = _file(name)
            target = Path(self.build_lib) / source.relative_to(CHECKOUT)
            self.mkpath(str(target.parent))
            self.copy_file(str(source), str(target))
        for name in DATA:  # where grader/course/material.py looks in an installed package
            self.mkpath(str((package / "course_data" / name).parent))
            self.copy_file(str(CHECKOUT / name), str(package / "course_data" / name))


class CopiedModules(Distribution):
    """Modules come from build_py's copies, not from a package folder here, which setuptools would need
    before it runs build_py at all."""

    def has_pure_modules(self):
        return True


VERSION = re.search(r'__version__ = "([^"]+)"', (CHECKOUT / "grader" / "__init__.py").read_text()).group(1)
setup(version=VERSION, packages=[], distclass=CopiedModules, cmdclass={"build_py": StudentModules})
