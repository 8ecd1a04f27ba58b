"""Gradescope: the autograder zip that runs this grader there, and what its run_autograder calls.

Gradescope unpacks the zip into /autograder/source, runs setup.sh once when it builds the image, then
runs run_autograder once per submission with the student's files in /autograder/submission; it shows
the student only /autograder/results/results.json. So `run` turns every outcome (no notebook, several,
a broken one, a grader that fails) into a results.json. The student's output lists the flags as every
other route shows them (errors to fix, integrity flags); extra_data and the autograder's stdout, which
students never see, keep them for the staff as well.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.resources
import io
import json
import re
import shutil
import subprocess
import tempfile
import tomllib
import traceback
import zipfile
from collections.abc import Callable
from pathlib import Path

import grader
from grader import __version__, extract
from grader.course import Course, load
from grader.lms.course_init import own_file
from grader.outputs.files import atomic_write
from grader.vocabulary import Flag, flag_text

DISTRIBUTION = "backprop-ninja"
SCRIPTS = ("setup.sh", "run_autograder")
SKIPPED = {"__pycache__", "__MACOSX"}  # with every dotted name: caches, checkpoints, macOS zip litter
# The per-tensor feedback is the point of the exercise, so students see it at once (Gradescope's own
# "hide results" setting still applies); stdout holds the grader's log and the flags: staff only.
VISIBILITY = {"visibility": "visible", "stdout_visibility": "hidden"}
STAFF = ("The autograder failed on this submission, so it was not graded. Your course staff can see why "
         "in the autograder's log; please tell them.")


class BuildError(Exception):
    """The zip cannot be built; the message says why."""


class NotGraded(Exception):
    """The submission cannot be graded; the message is for the student."""


def _skipped(relative: Path) -> bool:
    return relative.suffix == ".pyc" or any(p.startswith(".") or p in SKIPPED for p in relative.parts)


def _files(folder: Path, prefix: str) -> dict[str, bytes]:
    return {f"{prefix}/{path.relative_to(folder).as_posix()}": path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file() and not _skipped(path.relative_to(folder))}


def _zip(files: dict[str, bytes | str]) -> bytes:
    """A zip whose bytes depend on the files only (fixed dates), with the two scripts executable."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if name in SCRIPTS else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


def _requirements() -> tuple[str | None, list[str], dict[str, str]]:
    """Requires-Python, dependencies and console scripts of the running package: from pyproject.toml
    when it runs from a checkout (the source of truth, even before a reinstall), else from its
    installed metadata."""
    pyproject = Path(grader.__file__).resolve().parent.parent / "pyproject.toml"
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == DISTRIBUTION:
            return project.get("requires-python"), project.get("dependencies", []), project.get("scripts", {})
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise BuildError(f"{DISTRIBUTION} is not installed: run `pip install -e .` in the checkout") from None
    requires = [r for r in dist.metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]
    scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    return dist.metadata["Requires-Python"], requires, scripts


def _record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel() -> tuple[str, bytes]:
    """The package as it runs here, as a pure-Python wheel: the image grades with the code tested here,
    and installing it needs neither the network nor a build backend."""
    requires_python, requires, scripts = _requirements()
    name = f"{DISTRIBUTION.replace('-', '_')}-{__version__}"
    info = f"{name}.dist-info"
    files: dict[str, bytes] = _files(Path(grader.__file__).resolve().parent, "grader")
    files[f"{info}/METADATA"] = "".join(
        [f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {__version__}\n",
         *([f"Requires-Python: {requires_python}\n"] if requires_python else []),
         *(f"Requires-Dist: {r}\n" for r in requires)]).encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: backprop-ninja gradescope build\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{info}/entry_points.txt"] = "".join(
        ["[console_scripts]\n", *(f"{k} = {v}\n" for k, v in scripts.items())]).encode()
    record = [f"{path},sha256={_record_hash(data)},{len(data)}\n" for path, data in files.items()]
    files[f"{info}/RECORD"] = "".join([*record, f"{info}/RECORD,,\n"]).encode()
    return f"{name}-py3-none-any.whl", _zip(files)


def _torch_requirement() -> str:
    """The torch this grader runs with here, as the CPU build to install (a local tag like +cpu dropped)."""
    return f"torch=={importlib.metadata.version('torch').split('+')[0]}"


def _course_yml(course: Course) -> str:
    """course.yml as it is, but for the suite, which travels as autotests/ beside it, and a course's own
    exercise file, which travels beside it too (wherever course.yml found it)."""
    text = course.path.read_text(encoding="utf-8")
    own = own_file(course)
    if own is not None:
        text = re.sub(r"(?m)^exercise:.*\n(?:[ \t]+.*\n)*", "", text if text.endswith("\n") else text + "\n")
    lines = [line for line in text.splitlines() if not line.startswith("autotests:")]
    if own is not None:
        lines.append(f"exercise: {own.name}:{course.exercise_spec.rpartition(':')[2]}")
    return "\n".join([*lines, "autotests: autotests"]) + "\n"


def _template(name: str) -> str:
    return importlib.resources.files("grader.lms").joinpath("gradescope_files", name).read_text(encoding="utf-8")


def build(course: Course, out: Path) -> list[str]:
    """Write the autograder zip at `out` (replaced whole, never half-written); returns the names it holds."""
    out = Path(out)
    if out.is_dir():
        raise BuildError(f"{out} is a folder: give the zip's file name, e.g. {out / 'autograder.zip'}")
    if not course.autotests_dir.is_dir():
        raise BuildError(f"{course.autotests_dir}: the hidden suite is missing")
    wheel_name, wheel = _wheel()
    setup = _template("setup.sh").replace("@TORCH@", _torch_requirement()).replace("@WHEEL@", wheel_name)
    files = {"setup.sh": setup, "run_autograder": _template("run_autograder"), "course.yml": _course_yml(course),
             wheel_name: wheel, **_files(course.autotests_dir, "autotests")}
    own = own_file(course)
    if own is not None:  # the grader on Gradescope loads it as this one does
        files[own.name] = own.read_bytes()
    atomic_write(out, _zip(files))
    return list(files)


def find_notebook(submission: Path, notebook: str) -> Path:
    """The one notebook to grade: the only one submitted, else the one named as the course's."""
    found = [path for _, path in extract.discover([submission]) if not _skipped(path.relative_to(submission))]
    if len(found) == 1:
        return found[0]
    named = [path for path in found if path.name == notebook]
    if len(named) == 1:
        return named[0]
    if found:
        listed = ", ".join(path.relative_to(submission).as_posix() for path in found)
        raise NotGraded(f"Your submission holds {len(found)} notebooks ({listed}): upload only {notebook}.")
    others = sorted(p.relative_to(submission).as_posix() for p in submission.rglob("*")
                    if p.is_file() and not _skipped(p.relative_to(submission)))
    held = f"it holds {', '.join(others[:10])}{', ...' if len(others) > 10 else ''}" if others else "it is empty"
    raise NotGraded(f"No notebook (.ipynb) in your submission ({held}): upload {notebook}.")


def _grade(notebook: Path, course_file: Path, log: Callable[[str], None]) -> dict:
    """`backprop-ninja grade` on the one notebook, in a process of its own: whatever happens to it,
    this one is left to write results.json."""
    command = shutil.which("backprop-ninja")
    if command is None:
        raise RuntimeError("the backprop-ninja command is not on PATH")
    with tempfile.TemporaryDirectory(prefix="backprop-ninja-") as out:
        done = subprocess.run([command, "grade", str(notebook), "--out", out, "--course", str(course_file)],
                              capture_output=True, text=True)
        log(done.stdout + done.stderr)
        written = sorted(Path(out).glob("*.json"))
        if len(written) != 1:
            raise RuntimeError(f"backprop-ninja grade exited with status {done.returncode} and no result")
        result = json.loads(written[0].read_text(encoding="utf-8"))
    if done.returncode:
        result["output"] += ("\n\nThe grader hit a problem of its own on some tests (not in your code); your "
                             "course staff can see it.")
    return result


def for_gradescope(result: dict, log: Callable[[str], None]) -> dict:
    """A result of `backprop-ninja grade` as Gradescope takes it: only the keys its specification names,
    at the top level and in each test; the flags and the maximum go to extra_data and the staff's log
    (the flags to the student's output too), each test's verdict to its extra_data."""
    data = {k: v for k, v in result.items() if k not in ("flags", "max_score")}
    # A file no reader takes has no total in the grader's own result (no gradebook counts it); Gradescope has no
    # "not graded": the student sees 0 and why, and hands in again.
    data.setdefault("score", round(sum(t["score"] for t in result["tests"]), 6))
    data["tests"] = [{**{k: v for k, v in t.items() if k != "verdict"},
                      "extra_data": {**t.get("extra_data", {}), "verdict": t["verdict"]}} for t in result["tests"]]
    data["extra_data"] = {**result.get("extra_data", {}), "max_score": result["max_score"], "flags": result["flags"]}
    for flag in result["flags"]:
        log(f"{'integrity flag' if Flag.is_integrity(flag['kind']) else 'error'} ({flag['kind']}): {flag['evidence']}")
    if result["flags"]:  # what the feedback page and nbgrader's feedback show the student, in the same words
        data["output"] = f"{data['output']}\n\n{flag_text(result['flags'])}"
    return {**data, **VISIBILITY}


def not_graded(message: str) -> dict:
    return {"score": 0.0, "output": message, "tests": [], **VISIBILITY,
            "extra_data": {"grader_version": __version__, "not_graded": message}}


def run(root: Path, log: Callable[[str], None] = print) -> dict:
    """Grade the submission under `root` (Gradescope's /autograder layout) into results/results.json.

    Nothing escapes: without that file Gradescope shows the student nothing, so a bad submission or a
    failing grader becomes a score of 0 that says why (the traceback goes to the staff's log)."""
    root = Path(root)
    try:
        course = load(root / "source" / "course.yml")
        notebook = find_notebook(root / "submission", course.notebook)
        log(f"grading {notebook.relative_to(root / 'submission')}")
        data = for_gradescope(_grade(notebook, course.path, log), log)
    except NotGraded as exc:
        data = not_graded(str(exc))
    except Exception:  # whatever broke, the student gets a result and the staff the traceback
        log(traceback.format_exc())
        data = not_graded(STAFF)
    atomic_write(root / "results" / "results.json", json.dumps(data, indent=2) + "\n")
    return data
