"""Both packages' wheels (backprop-ninja and backprop-ninja-student), built by the README's `pip wheel` line
once per test run: tests/test_hub.py and tests/test_package.py install them, and each build costs about a
minute on a busy machine. xdist's workers share the run's temporary folder, so the first to ask builds
under a lock and the others wait for it."""
from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

from helpers.paths import ROOT, SOLVED

TIMEOUT = 900


def build(into: Path) -> None:
    """The wheels into `into`, from a copy of this checkout's files (the build writes beside them)."""
    src = into.parent / f"{into.name}-src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "course.yml"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "course_data", "build", "*.egg-info")
    for folder in ("grader", "assignments", "autotests", "student"):
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    (src / "solutions").mkdir()
    shutil.copy(SOLVED, src / "solutions")
    base = getattr(sys, "_base_executable", sys.executable)  # where setuptools builds wheels
    subprocess.run([base, "-m", "pip", "wheel", ".", "./student", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(into)], cwd=src, check=True, capture_output=True, timeout=TIMEOUT)
    shutil.rmtree(src)


def shared(run_folder: Path) -> Path:
    """The wheels' folder in `run_folder` (the run's own), built by the first worker to ask."""
    into = run_folder / "bpn-wheels"
    with open(run_folder / "bpn-wheels.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (into / "done").is_file():
            shutil.rmtree(into, ignore_errors=True)
            into.mkdir(mode=0o755)
            build(into)
            (into / "done").touch()
    return into
