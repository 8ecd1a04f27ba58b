"""backprop-ninja-student: what the released notebook imports, and nothing else.

It is made from the very modules of backprop-ninja that the self-check and the data loader need (so the
two never differ), plus the lecture's names.txt with its licence. It holds no reference answer, no
solved notebook, no hidden suite and no command: a graded course (course.yml `solutions: off`) has its
students install this. It must be built from a checkout (pip wheel student/ --no-build-isolation), whose
grader/ it reads; the two packages both provide `grader`, so install one or the other.
"""
import re
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

CHECKOUT = Path(__file__).resolve().parent.parent
MODULES = ("__init__", "check", "compare", "diagnose", "exercise", "model", "data", "material")
DATA = ("assignments/backprop_ninja/names.txt", "assignments/backprop_ninja/names.LICENSE")


class StudentModules(build_py):
    def run(self):
        package = Path(self.build_lib) / "grader"
        for name in MODULES:
            self.mkpath(str(package))
            self.copy_file(str(CHECKOUT / "grader" / f"{name}.py"), str(package / f"{name}.py"))
        for name in DATA:  # where grader/material.py looks in an installed package
            self.mkpath(str((package / "course_data" / name).parent))
            self.copy_file(str(CHECKOUT / name), str(package / "course_data" / name))


class CopiedModules(Distribution):
    """Modules come from build_py's copies, not from a package folder here, which setuptools would need
    before it runs build_py at all."""

    def has_pure_modules(self):
        return True


VERSION = re.search(r'__version__ = "([^"]+)"', (CHECKOUT / "grader" / "__init__.py").read_text()).group(1)
setup(version=VERSION, packages=[], distclass=CopiedModules, cmdclass={"build_py": StudentModules})
