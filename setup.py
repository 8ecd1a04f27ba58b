"""The wheel carries the course: build_py copies the course material of the checkout (grader/course/material.py
names it) into grader/course_data/, a folder of data, not modules, so `pip install backprop-ninja` is
enough for `backprop-ninja course init` and the demo. Everything else is in pyproject.toml."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
MATERIAL = ["course.yml", "assignments/backprop_ninja/backprop_ninja.ipynb", "assignments/backprop_ninja/names.txt",
            "assignments/backprop_ninja/names.LICENSE", "solutions/backprop_ninja_solved.ipynb",
            *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "autotests").iterdir())
              if p.suffix in (".py", ".yml", ".ini"))]


class WithCourse(build_py):
    def run(self):
        super().run()
        for name in MATERIAL:
            target = Path(self.build_lib) / "grader" / "course_data" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            self.copy_file(str(ROOT / name), str(target))


setup(cmdclass={"build_py": WithCourse})
